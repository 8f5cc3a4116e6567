// Colormap: viridis endpoints, monotone CIE lightness (what "perceptually uniform" promises for a
// sequential scale), masked greys outside the scale, byte order of the packed pixels; the diff
// view's diverging scale.
#include "viewer/draw/colormap.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

using namespace attnlab::viewer;

namespace {
void expect_near_rgb(Rgb8 got, int r, int g, int b, int tol) {
  EXPECT_NEAR(got.r, r, tol);
  EXPECT_NEAR(got.g, g, tol);
  EXPECT_NEAR(got.b, b, tol);
}
int spread(Rgb8 c) { return std::max({c.r, c.g, c.b}) - std::min({c.r, c.g, c.b}); }
}  // namespace

TEST(Colormap, EndpointsAreViridis) {
  // matplotlib's viridis: #440154 at 0, #21918c near the middle, #fde725 at 1.
  expect_near_rgb(viridis(0.0), 0x44, 0x01, 0x54, 4);
  expect_near_rgb(viridis(0.5), 0x21, 0x91, 0x8c, 5);
  expect_near_rgb(viridis(1.0), 0xfd, 0xe7, 0x25, 4);
  expect_near_rgb(viridis(-3), 0x44, 0x01, 0x54, 4);
  expect_near_rgb(viridis(7), 0xfd, 0xe7, 0x25, 4);
  expect_near_rgb(viridis(std::nan("")), 0x44, 0x01, 0x54, 4);
}

TEST(Colormap, LightnessIncreasesMonotonically) {
  const auto& t = viridis_table();
  // Neighbouring entries may tie or dip by a few hundredths of L* (8-bit rounding of the fit; a
  // just-noticeable difference is about 1 L*); over any 4 entries lightness strictly rises.
  for (int i = 1; i < 256; ++i) {
    EXPECT_GE(cie_lightness(t[i]), cie_lightness(t[i - 1]) - 0.05) << "lightness drops at entry " << i;
  }
  for (int i = 4; i < 256; ++i) {
    EXPECT_GT(cie_lightness(t[i]), cie_lightness(t[i - 4])) << "no rise over entries " << i - 4 << ".." << i;
  }
  EXPECT_LT(cie_lightness(t[0]), 25);
  EXPECT_GT(cie_lightness(t[255]), 85);
  // Roughly uniform: no 32-entry stretch gains less than a quarter of its fair share of L*.
  const double total = cie_lightness(t[255]) - cie_lightness(t[0]);
  for (int i = 0; i + 32 < 256; i += 32) {
    EXPECT_GT(cie_lightness(t[i + 32]) - cie_lightness(t[i]), total / 8 / 4) << "at " << i;
  }
}

TEST(Colormap, MaskedGreysAreNotOnTheScale) {
  EXPECT_EQ(spread(kMaskDark), 0);
  EXPECT_EQ(spread(kMaskLight), 0);
  for (const Rgb8& c : viridis_table()) EXPECT_GE(spread(c), 40);
}

TEST(Colormap, PackedPixelsAreRgbaInMemory) {
  const std::uint32_t px = pack_rgba(Rgb8{1, 2, 3}, 4);
  unsigned char bytes[4];
  std::memcpy(bytes, &px, 4);
  EXPECT_EQ(bytes[0], 1);
  EXPECT_EQ(bytes[1], 2);
  EXPECT_EQ(bytes[2], 3);
  EXPECT_EQ(bytes[3], 4);
}

TEST(Colormap, LightnessOfBlackAndWhite) {
  EXPECT_NEAR(cie_lightness(Rgb8{0, 0, 0}), 0, 1e-9);
  EXPECT_NEAR(cie_lightness(Rgb8{255, 255, 255}), 100, 1e-6);
}

// The diff view's diverging scale: blue below the centre, red above, a light neutral at 0 lighter
// than both mask greys, equal lightness for equal |values| of either sign (to a few L* units), and
// the lightness falling monotonically from the centre to either end.
TEST(Colormap, DivergingIsSymmetricAroundALightCentre) {
  const auto& t = diverging_table();
  EXPECT_GT(t[0].b, t[0].r) << "negative: blue";
  EXPECT_GT(t[255].r, t[255].b) << "positive: red";
  const Rgb8 mid = diverging(0.5);
  EXPECT_GT(cie_lightness(mid), 90);
  EXPECT_GT(cie_lightness(mid), cie_lightness(kMaskLight) + 30);
  for (int i = 0; i < 128; ++i) {
    EXPECT_LT(std::abs(cie_lightness(t[i]) - cie_lightness(t[255 - i])), 8) << i;
    if (i > 0) EXPECT_GE(cie_lightness(t[i]) + 0.5, cie_lightness(t[i - 1])) << "rising towards the centre, " << i;
    if (i < 127) EXPECT_GT(t[i].b, t[i].r) << i;
  }
  for (int i = 129; i < 256; ++i) EXPECT_GT(t[i].r, t[i].b) << i;
  EXPECT_EQ(diverging(-1).r, t[0].r);
  EXPECT_EQ(diverging(std::nan("")).b, t[0].b);
  EXPECT_EQ(diverging(2).r, t[255].r);
}
