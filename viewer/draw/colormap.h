// The heatmap's colour scale: viridis (perceptually uniform, readable with the common colour-vision
// deficiencies and in greyscale), as a 256-entry table built once from the published degree-6
// polynomial fit of matplotlib's viridis (max error about 0.01 per channel). Masked cells never use
// a colour of the scale: they are drawn with the two greys below, which no table entry comes near
// (every viridis entry has a channel spread of at least ~0.2, a grey has none).
// The diff view's signed maps use a diverging scale instead (blue below 0, a light neutral at 0,
// red above), interpolated from ColorBrewer's RdBu: equal |values| of either sign get equal
// lightness, and the centre is lighter than both mask greys.
#pragma once

#include <array>
#include <cstdint>

namespace attnlab::viewer {

struct Rgb8 {
  std::uint8_t r = 0, g = 0, b = 0;
};

// Hatching colours for masked cells (-inf in the mask): neutral greys, outside the scale.
constexpr Rgb8 kMaskDark{72, 72, 72};
constexpr Rgb8 kMaskLight{128, 128, 128};
// Gap drawn between cells when cells are large enough to show a grid.
constexpr Rgb8 kGridGap{24, 24, 28};

// The 256-entry table (index 0 = lowest value, dark purple; 255 = highest, yellow).
const std::array<Rgb8, 256>& viridis_table();

// t in [0, 1] (clamped; NaN maps to 0) to the nearest table entry.
Rgb8 viridis(double t);

// The diverging table: index 0 = most negative (dark blue), 128 ~ 0 (light neutral), 255 = most
// positive (dark red). diverging(t) as viridis(t): t = 0.5 is the value 0 of a symmetric range.
const std::array<Rgb8, 256>& diverging_table();
Rgb8 diverging(double t);

// CIE L* (0..100) of an sRGB colour: what "perceptually uniform" is checked against, and what picks
// black or white text over a cell.
double cie_lightness(Rgb8 c);

// Packs to the byte order SDL_PIXELFORMAT_ABGR8888 uses on little-endian machines (R first in
// memory), which is also what stb_image_write expects for RGBA rows.
constexpr std::uint32_t pack_rgba(Rgb8 c, std::uint8_t a = 255) {
  return static_cast<std::uint32_t>(c.r) | (static_cast<std::uint32_t>(c.g) << 8) |
         (static_cast<std::uint32_t>(c.b) << 16) | (static_cast<std::uint32_t>(a) << 24);
}

}  // namespace attnlab::viewer
