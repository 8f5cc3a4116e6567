// Pooling and heatmap geometry: exact max/mean blocks on small matrices, masked blocks, axis maps
// that tile the window, one pixel's block computed alone (the tooltip's) equal to the axis map's,
// square-cell placement, exact hit testing (also when zoomed and pooled), the query row's band,
// and rasterised masked cells drawn as greys.
#include "viewer/draw/heatmap.h"
#include "viewer/draw/pooling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

using namespace attnlab::viewer;
using attnlab::PoolMode;
using attnlab::PooledCell;

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> iota16() {
  std::vector<float> v(16);
  for (int i = 0; i < 16; ++i) v[i] = static_cast<float>(i + 1);  // rows 1..4, 5..8, 9..12, 13..16
  return v;
}

std::vector<float> causal4() {
  std::vector<float> m(16, 0.0f);
  for (int r = 0; r < 4; ++r)
    for (int c = r + 1; c < 4; ++c) m[r * 4 + c] = -kInf;
  return m;
}
}  // namespace

TEST(Pooling, MaxAndMeanOfTwoByTwoBlocks) {
  const auto v = iota16();
  const AxisMap rows = map_axis(0, 4, 2, 4), cols = map_axis(0, 4, 2, 4);
  ASSERT_TRUE(rows.pooled);
  const auto mx = pool_grid(v.data(), 4, 4, nullptr, 4, rows, cols, PoolMode::Max);
  ASSERT_EQ(mx.size(), 4u);
  EXPECT_EQ(mx[0].value, 6);
  EXPECT_EQ(mx[1].value, 8);
  EXPECT_EQ(mx[2].value, 14);
  EXPECT_EQ(mx[3].value, 16);
  const auto mean = pool_grid(v.data(), 4, 4, nullptr, 4, rows, cols, PoolMode::Mean);
  EXPECT_FLOAT_EQ(mean[0].value, 3.5f);
  EXPECT_FLOAT_EQ(mean[1].value, 5.5f);
  EXPECT_FLOAT_EQ(mean[2].value, 11.5f);
  EXPECT_FLOAT_EQ(mean[3].value, 13.5f);
  for (const auto& c : mean) EXPECT_FALSE(c.masked);
}

// Extreme keeps each block's entry of largest |value| with its sign: a lone negative entry larger
// than every positive one is the block's value; ties of |value| keep the positive one.
TEST(Pooling, ExtremeKeepsTheEntryOfLargestMagnitudeWithItsSign) {
  const std::vector<float> v = {1, -5, 2, 3,  //
                                4, 2, -1, -3,  //
                                0, 0, 7, -7,   //
                                -1, 0, 0, 0};
  const AxisMap rows = map_axis(0, 4, 2, 4), cols = map_axis(0, 4, 2, 4);
  const auto ex = pool_grid(v.data(), 4, 4, nullptr, 4, rows, cols, PoolMode::Extreme);
  ASSERT_EQ(ex.size(), 4u);
  EXPECT_EQ(ex[0].value, -5);
  EXPECT_EQ(ex[1].value, 3);
  EXPECT_EQ(ex[2].value, -1);
  EXPECT_EQ(ex[3].value, 7);
}

TEST(Pooling, MaskedCellsAreLeftOutAndAllMaskedBlocksStayMasked) {
  const auto v = iota16();
  const auto m = causal4();
  const AxisMap rows = map_axis(0, 4, 2, 4), cols = map_axis(0, 4, 2, 4);
  const auto mx = pool_grid(v.data(), 4, 4, m.data(), 4, rows, cols, PoolMode::Max);
  // Block (0,0): cells 1, 5, 6 unmasked (2 is above the diagonal).
  EXPECT_EQ(mx[0].value, 6);
  EXPECT_TRUE(mx[1].masked) << "rows 0-1, cols 2-3 are all in the future";
  EXPECT_EQ(mx[2].value, 14);
  EXPECT_EQ(mx[3].value, 16);  // cells 11, 15, 16
  const auto mean = pool_grid(v.data(), 4, 4, m.data(), 4, rows, cols, PoolMode::Mean);
  EXPECT_FLOAT_EQ(mean[0].value, 4.0f);             // (1 + 5 + 6) / 3
  EXPECT_FLOAT_EQ(mean[3].value, (11 + 15 + 16) / 3.0f);
}

TEST(Pooling, StackedHeadsShareTheMaskByRowModulo) {
  std::vector<float> v(32, 1.0f);  // 2 heads x 4 rows, 4 cols
  const auto m = causal4();
  const AxisMap rows = map_axis(0, 8, 8, 8), cols = map_axis(0, 4, 4, 4);
  const auto out = pool_grid(v.data(), 8, 4, m.data(), 4, rows, cols, PoolMode::Max);
  EXPECT_TRUE(out[4 * 4 + 1].masked);   // row 4 = head 1, row 0: key 1 masked
  EXPECT_FALSE(out[4 * 4 + 0].masked);
}

TEST(Pooling, NonFiniteValuesCountAsMasked) {
  std::vector<float> v = {1, -kInf, 3, std::nanf("")};
  const auto out = pool_grid(v.data(), 1, 4, nullptr, 1, map_axis(0, 1, 1, 1), map_axis(0, 4, 1, 4), PoolMode::Mean);
  EXPECT_FLOAT_EQ(out[0].value, 2.0f);
  const ValueRange r = finite_range(v.data(), 1, 4, nullptr, 1);
  EXPECT_EQ(r.lo, 1);
  EXPECT_EQ(r.hi, 3);
}

TEST(Pooling, AxisMapsTileTheWindowWithoutGaps) {
  for (int total : {5, 97, 4096, 16384}) {
    for (int pixels : {1, 3, 100, 477, 900}) {
      const AxisMap m = map_axis(0, total, pixels, total);
      ASSERT_EQ(m.size(), pixels);
      EXPECT_EQ(m.begin.front(), 0);
      if (total >= pixels) {
        EXPECT_EQ(m.end.back(), total) << total << " on " << pixels;
        for (int p = 0; p + 1 < pixels; ++p) EXPECT_EQ(m.end[p], m.begin[p + 1]);
      }
      for (int p = 0; p < pixels; ++p) {
        EXPECT_LT(m.begin[p], m.end[p]);
        EXPECT_LE(m.end[p], total);
      }
    }
  }
}

TEST(Pooling, MagnifiedAxisRepeatsCells) {
  const AxisMap m = map_axis(0, 2, 4, 2);
  EXPECT_FALSE(m.pooled);
  EXPECT_EQ(m.begin, (std::vector<int>{0, 0, 1, 1}));
  const AxisMap z = map_axis(1, 2, 4, 4);  // zoomed window: cells 1 and 2
  EXPECT_EQ(z.begin, (std::vector<int>{1, 1, 2, 2}));
}

// The hover tooltip computes one pooled pixel's block alone (axis_span); it must be the block the
// raster pooled, for every pixel: whole axes and zoomed, fractional windows, magnified and pooled.
TEST(Pooling, OneAxisSpanIsTheAxisMapsEntry) {
  struct Case {
    double first, count;
    int pixels, total;
  };
  const Case cases[] = {
      {0, 5, 477, 5},        {0, 64, 900, 64},      {0, 4096, 900, 4096},  {0, 4096, 477, 4096},
      {0, 16384, 1000, 16384}, {0, 97, 97, 97},     {0, 100, 3, 100},      {0, 7, 1, 7},
      {1.3, 2.5, 640, 8},    {1000.25, 1234.5, 700, 4096}, {2047.9, 3.7, 900, 4096},
      {3000.5, 1095.5, 333, 4096}, {0.75, 63.25, 64, 64},
  };
  int pooled_cases = 0, magnified_cases = 0;
  for (const Case& c : cases) {
    const AxisMap m = map_axis(c.first, c.count, c.pixels, c.total);
    ASSERT_EQ(m.size(), c.pixels);
    (m.pooled ? pooled_cases : magnified_cases)++;
    for (int p = 0; p < c.pixels; ++p) {
      const AxisSpan s = axis_span(c.first, c.count, c.pixels, c.total, p);
      ASSERT_EQ(s.begin, m.begin[p]) << c.first << " + " << c.count << " on " << c.pixels << ", pixel " << p;
      ASSERT_EQ(s.end, m.end[p]) << c.first << " + " << c.count << " on " << c.pixels << ", pixel " << p;
    }
  }
  EXPECT_GE(pooled_cases, 4);
  EXPECT_GE(magnified_cases, 4);
}

// What the tooltip prints for a pooled pixel (pool_grid over that one block) is the raster's value.
TEST(Pooling, OnePixelsBlockPoolsToTheSameValueAsTheWholeGrid) {
  const int rows = 40, cols = 40, px = 7;
  std::vector<float> v(rows * cols), mask(rows * cols, 0.0f);
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      v[r * cols + c] = std::sin(0.37f * r + 0.11f * c * c);
      if (c > r) mask[r * cols + c] = -kInf;
    }
  }
  const AxisMap rm = map_axis(0, rows, px, rows), cm = map_axis(0, cols, px, cols);
  for (PoolMode mode : {PoolMode::Max, PoolMode::Mean}) {
    const auto grid = pool_grid(v.data(), rows, cols, mask.data(), rows, rm, cm, mode);
    for (int py = 0; py < px; ++py) {
      for (int pxx = 0; pxx < px; ++pxx) {
        const AxisSpan rs = axis_span(0, rows, px, rows, py), cs = axis_span(0, cols, px, cols, pxx);
        AxisMap r1, c1;
        r1.begin = {rs.begin};
        r1.end = {rs.end};
        c1.begin = {cs.begin};
        c1.end = {cs.end};
        const auto one = pool_grid(v.data(), rows, cols, mask.data(), rows, r1, c1, mode);
        const PooledCell& want = grid[py * px + pxx];
        EXPECT_EQ(one[0].masked, want.masked);
        EXPECT_EQ(one[0].value, want.value);
      }
    }
  }
}

TEST(Heatmap, SmallMatricesGetSquareCentredCells) {
  const PlotGeometry g = place_plot(0, 0, 500, 400, 5, 5, HeatView{});
  EXPECT_FLOAT_EQ(g.cell_w, 80);
  EXPECT_FLOAT_EQ(g.cell_h, 80);
  EXPECT_FLOAT_EQ(g.w, 400);
  EXPECT_FLOAT_EQ(g.x, 50);
  EXPECT_FLOAT_EQ(g.y, 0);
  EXPECT_FALSE(g.pooled());
  const PlotGeometry o = place_plot(0, 0, 500, 400, 5, 2, HeatView{});
  EXPECT_FLOAT_EQ(o.cell_w, o.cell_h);
  // A square matrix in a short room stays square: the demo's 5 x 5 at 1024 x 640, UI scale 2, had
  // been widened to the skinny outputs' 160 px (cells 32 x 23.4).
  const PlotGeometry s = place_plot(0, 0, 600, 117, 5, 5, HeatView{}, 160);
  EXPECT_FLOAT_EQ(s.cell_w, s.cell_h);
  EXPECT_FLOAT_EQ(s.w, 117);
}

TEST(Heatmap, PooledPlotsKeepSquareCellsAndZoomKeepsTheShape) {
  // 4096 x 4096 in a tall area: square, as wide as the area, centred vertically.
  const PlotGeometry g = place_plot(0, 0, 478, 571, 4096, 4096, HeatView{});
  EXPECT_TRUE(g.pooled());
  EXPECT_FLOAT_EQ(g.w, 478);
  EXPECT_FLOAT_EQ(g.h, 478);
  EXPECT_FLOAT_EQ(g.cell_w, g.cell_h);
  EXPECT_FLOAT_EQ(g.y, std::floor((571 - 478) / 2.0f));
  // One wheel step in (1.25x): still square, same place on screen (no jump).
  const HeatView z = zoom_view(HeatView{}, 0.5, 0.5, 1.25, 4096, 4096);
  const PlotGeometry gz = place_plot(0, 0, 478, 571, 4096, 4096, z);
  EXPECT_FLOAT_EQ(gz.w, g.w);
  EXPECT_FLOAT_EQ(gz.h, g.h);
  EXPECT_FLOAT_EQ(gz.x, g.x);
  EXPECT_FLOAT_EQ(gz.y, g.y);
  // The skinny output (4096 x 64) is widened to 160 px rather than drawn 7 px wide.
  const PlotGeometry o = place_plot(0, 0, 478, 571, 4096, 64, HeatView{});
  EXPECT_FLOAT_EQ(o.w, 160);
  EXPECT_FLOAT_EQ(o.h, 571);
  // And a flat one (one token's 1 x 64 output, 8 x 1024) is made 160 px tall, not 7 or 3 px.
  for (const auto [rows, cols] : {std::pair{1, 64}, std::pair{8, 1024}}) {
    const PlotGeometry f = place_plot(0, 0, 478, 571, rows, cols, HeatView{});
    EXPECT_FLOAT_EQ(f.w, 478) << rows << " x " << cols;
    EXPECT_FLOAT_EQ(f.h, 160) << rows << " x " << cols;
    EXPECT_FLOAT_EQ(f.cell_h, 160.0f / rows);
  }
  // No room at all (a window below its minimum size): an empty plot, cells of size 0, which the
  // viewer must not draw (its label strides would never grow past 0).
  const PlotGeometry none = place_plot(0, 0, 0.5f, 300, 64, 64, HeatView{});
  EXPECT_EQ(none.px_w, 0);
  EXPECT_EQ(none.cell_w, 0.f);
}

TEST(Heatmap, VisibleSpansCutCellsAtThePlotEdge) {
  // 5 x 5 in 500 x 500 zoomed to columns/rows 0.5 .. 3.0: cells 200 px; cell 0 shows its right
  // half (100 px), cells 1 and 2 are whole, cell 3 is outside.
  const HeatView v{0.1, 0.1, 0.6, 0.6};
  const PlotGeometry g = place_plot(0, 0, 500, 500, 5, 5, v);
  ASSERT_NEAR(g.cell_w, 200, 1e-3);
  const auto c0 = visible_col_span(g, 0);
  ASSERT_TRUE(c0);
  EXPECT_NEAR(c0->lo, 0, 1e-3);
  EXPECT_NEAR(c0->hi, 100, 1e-3);
  EXPECT_NEAR(c0->mid(), 50, 1e-3);
  const auto c1 = visible_col_span(g, 1);
  ASSERT_TRUE(c1);
  EXPECT_NEAR(c1->size(), 200, 1e-3);
  const auto c2 = visible_col_span(g, 2);
  ASSERT_TRUE(c2);
  EXPECT_NEAR(c2->hi, 500, 1e-3);
  EXPECT_NEAR(c2->size(), 200, 1e-3);
  EXPECT_FALSE(visible_col_span(g, 3));
  const auto r0 = visible_row_span(g, 0);
  ASSERT_TRUE(r0);
  EXPECT_NEAR(r0->size(), 100, 1e-3);
  EXPECT_FALSE(visible_row_span(g, 4));
}

TEST(Heatmap, HitTestFindsTheExactCell) {
  const PlotGeometry g = place_plot(0, 0, 500, 400, 5, 5, HeatView{});
  auto c = hit_test(g, 50 + 3 * 80 + 40, 2 * 80 + 40);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->row, 2);
  EXPECT_EQ(c->col, 3);
  EXPECT_FALSE(hit_test(g, 10, 10));
  EXPECT_FALSE(hit_test(g, 460, 10));
}

TEST(Heatmap, HitTestIsExactWhenPooled) {
  const PlotGeometry g = place_plot(0, 0, 512, 512, 4096, 4096, HeatView{});
  EXPECT_TRUE(g.pooled());
  EXPECT_FLOAT_EQ(g.cell_w, 0.125f);
  auto c = hit_test(g, 100.5f, 200.25f);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->col, 804);  // 100.5 * 8 = 804
  EXPECT_EQ(c->row, 1602);
}

TEST(Heatmap, ZoomKeepsThePointUnderTheCursorAndClamps) {
  HeatView v;
  v = zoom_view(v, 0.25, 0.25, 2.0, 100, 100);
  EXPECT_NEAR(v.x1 - v.x0, 0.5, 1e-12);
  EXPECT_NEAR((0.25 - v.x0) / (v.x1 - v.x0), 0.25, 1e-12);
  const PlotGeometry g = place_plot(0, 0, 400, 400, 100, 100, v);
  EXPECT_NEAR(g.vis_rows, 50, 1e-9);
  auto c = hit_test(g, 0.5f, 0.5f);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->row, static_cast<int>(std::floor(v.y0 * 100)));
  // Never below two cells, never outside the matrix.
  for (int i = 0; i < 50; ++i) v = zoom_view(v, 0.9, 0.9, 4.0, 100, 100);
  EXPECT_NEAR(v.x1 - v.x0, 0.02, 1e-12);
  EXPECT_LE(v.x1, 1.0);
  v = pan_view(v, 5, -5);
  EXPECT_NEAR(v.x1, 1.0, 1e-12);
  EXPECT_NEAR(v.y0, 0.0, 1e-12);
}

TEST(Heatmap, QueryBandIsAtLeastThreePixels) {
  const PlotGeometry g = place_plot(0, 0, 512, 512, 4096, 4096, HeatView{});
  auto b = row_band(g, 2048, 3);
  ASSERT_TRUE(b);
  EXPECT_GE(b->y1 - b->y0, 3 - 1e-4);
  EXPECT_NEAR((b->y0 + b->y1) / 2, 256 + 0.0625, 0.01);
  const PlotGeometry s = place_plot(0, 0, 500, 500, 5, 5, HeatView{});
  auto sb = row_band(s, 2);
  ASSERT_TRUE(sb);
  EXPECT_FLOAT_EQ(sb->y0, 200);
  EXPECT_FLOAT_EQ(sb->y1, 300);
  HeatView zoomed{0, 0, 0.5, 0.5};
  EXPECT_FALSE(row_band(place_plot(0, 0, 500, 500, 4, 4, zoomed), 3));
}

TEST(Heatmap, RasterDrawsMaskedCellsGreyAndOthersOnTheScale) {
  std::vector<float> v = {0.0f, 1.0f, 0.25f, 0.75f};
  std::vector<float> mask = {0.0f, -kInf, 0.0f, 0.0f};
  RasterInput in;
  in.values = v.data();
  in.rows = 2;
  in.cols = 2;
  in.mask = mask.data();
  in.mask_rows = 2;
  in.range = finite_range(v.data(), 2, 2, mask.data(), 2);
  EXPECT_EQ(in.range.hi, 0.75);
  const PlotGeometry g = place_plot(0, 0, 40, 40, 2, 2, HeatView{});
  const auto px = rasterize(in, g);
  ASSERT_EQ(px.size(), 1600u);
  auto at = [&](int x, int y) { return px[y * 40 + x]; };
  // Masked cell (0, 1): only the two greys.
  for (int y = 0; y < 19; ++y)
    for (int x = 20; x < 39; ++x)
      EXPECT_TRUE(at(x, y) == pack_rgba(kMaskDark) || at(x, y) == pack_rgba(kMaskLight));
  EXPECT_EQ(at(5, 5), pack_rgba(viridis(0)));     // lo
  EXPECT_EQ(at(25, 25), pack_rgba(viridis(1)));   // hi (0.75)
  EXPECT_EQ(at(19, 5), pack_rgba(kGridGap));      // gap on a cell's last pixel
}

TEST(Heatmap, LogScaleSpreadsDecades) {
  const ValueRange r = log_range(ValueRange{0, 1});
  EXPECT_NEAR(r.lo, 1e-6, 1e-18);
  EXPECT_NEAR(scale_pos(1e-3, r, true), 0.5, 1e-9);
  EXPECT_NEAR(scale_value(0.5, r, true), 1e-3, 1e-12);
  EXPECT_EQ(scale_pos(0, r, true), 0);
  EXPECT_NEAR(scale_pos(0.5, ValueRange{0, 1}), 0.5, 1e-12);
  EXPECT_EQ(scale_pos(3, ValueRange{2, 2}), 0.5);
}
