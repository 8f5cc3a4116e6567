// viridis table from the degree-6 polynomial fit (coefficients from the widely used shader fit of
// matplotlib's viridis by mattz, public domain), evaluated once at 256 points.
#include "viewer/draw/colormap.h"

#include <algorithm>
#include <cmath>

namespace attnlab::viewer {
namespace {

std::array<Rgb8, 256> build_table() {
  // c0 + t*(c1 + t*(c2 + ...)) per channel.
  static constexpr double c[7][3] = {
      {0.2777273272234177, 0.005407344544966578, 0.3340998053353061},
      {0.1050930431085774, 1.404613529898575, 1.384590162594685},
      {-0.3308618287255563, 0.214847559468213, 0.09509516302823659},
      {-4.634230498983486, -5.799100973351585, -19.33244095627987},
      {6.228269936347081, 14.17993336680509, 56.69055260068105},
      {4.776384997670288, -13.74514537774601, -65.35303263337234},
      {-5.435455855934631, 4.645852612178535, 26.3124352495832},
  };
  std::array<Rgb8, 256> table{};
  for (int i = 0; i < 256; ++i) {
    const double t = i / 255.0;
    double rgb[3];
    for (int ch = 0; ch < 3; ++ch) {
      double v = c[6][ch];
      for (int k = 5; k >= 0; --k) v = c[k][ch] + t * v;
      rgb[ch] = std::clamp(v, 0.0, 1.0);
    }
    table[i] = Rgb8{static_cast<std::uint8_t>(std::lround(rgb[0] * 255)),
                    static_cast<std::uint8_t>(std::lround(rgb[1] * 255)),
                    static_cast<std::uint8_t>(std::lround(rgb[2] * 255))};
  }
  return table;
}

// ColorBrewer RdBu (11 classes), from blue (negative) to red (positive); the middle is its
// off-white. Linear interpolation in sRGB between the classes.
std::array<Rgb8, 256> build_diverging() {
  static constexpr std::uint8_t c[11][3] = {
      {5, 48, 97},    {33, 102, 172}, {67, 147, 195}, {146, 197, 222}, {209, 229, 240}, {247, 247, 247},
      {253, 219, 199}, {244, 165, 130}, {214, 96, 77},  {178, 24, 43},   {103, 0, 31}};
  std::array<Rgb8, 256> table{};
  for (int i = 0; i < 256; ++i) {
    const double x = i / 255.0 * 10;
    const int k = std::min(9, static_cast<int>(x));
    const double f = x - k;
    std::uint8_t rgb[3];
    for (int ch = 0; ch < 3; ++ch)
      rgb[ch] = static_cast<std::uint8_t>(std::lround(c[k][ch] + f * (c[k + 1][ch] - c[k][ch])));
    table[i] = Rgb8{rgb[0], rgb[1], rgb[2]};
  }
  return table;
}

double srgb_to_linear(double c) {
  return c <= 0.04045 ? c / 12.92 : std::pow((c + 0.055) / 1.055, 2.4);
}

}  // namespace

const std::array<Rgb8, 256>& viridis_table() {
  static const std::array<Rgb8, 256> table = build_table();
  return table;
}

Rgb8 viridis(double t) {
  if (!(t >= 0)) t = 0;  // also catches NaN
  if (t > 1) t = 1;
  return viridis_table()[static_cast<int>(std::lround(t * 255))];
}

const std::array<Rgb8, 256>& diverging_table() {
  static const std::array<Rgb8, 256> table = build_diverging();
  return table;
}

Rgb8 diverging(double t) {
  if (!(t >= 0)) t = 0;
  if (t > 1) t = 1;
  return diverging_table()[static_cast<int>(std::lround(t * 255))];
}

double cie_lightness(Rgb8 c) {
  const double y = 0.2126 * srgb_to_linear(c.r / 255.0) + 0.7152 * srgb_to_linear(c.g / 255.0) +
                   0.0722 * srgb_to_linear(c.b / 255.0);
  const double f = y > 216.0 / 24389.0 ? std::cbrt(y) : (24389.0 / 27.0 * y + 16) / 116.0;
  return 116 * f - 16;
}

}  // namespace attnlab::viewer
