// Layout: at 1280x800 and 1920x1080 (and the 960x600 minimum) the panels tile the window without
// overlapping, the heatmap gets a fair share, and the heatmap frame keeps labels, plot and legend
// apart.
#include "viewer/draw/heatmap.h"
#include "viewer/draw/layout.h"

#include <gtest/gtest.h>

using namespace attnlab::viewer;

namespace {
void expect_inside(const Rect& r, float w, float h) {
  EXPECT_GE(r.x, 0);
  EXPECT_GE(r.y, 0);
  EXPECT_LE(r.right(), w + 0.01f);
  EXPECT_LE(r.bottom(), h + 0.01f);
  EXPECT_GT(r.w, 0);
  EXPECT_GT(r.h, 0);
}
}  // namespace

class LayoutAtSize : public ::testing::TestWithParam<std::tuple<float, float, float>> {};

TEST_P(LayoutAtSize, PanelsTileTheWindow) {
  const auto [w, h, fp] = GetParam();
  const Layout l = compute_layout(w, h, fp);
  for (const Rect* r : {&l.controls, &l.heatmap, &l.info, &l.caveat}) expect_inside(*r, w, h);
  EXPECT_FALSE(overlaps(l.controls, l.heatmap));
  EXPECT_FALSE(overlaps(l.heatmap, l.info));
  EXPECT_FALSE(overlaps(l.controls, l.info));
  EXPECT_FALSE(overlaps(l.caveat, l.heatmap));
  // Everything covered: columns side by side, the caveat bar across the bottom.
  EXPECT_FLOAT_EQ(l.controls.w + l.heatmap.w + l.info.w, w);
  EXPECT_FLOAT_EQ(l.heatmap.h + l.caveat.h, h);
  EXPECT_FLOAT_EQ(l.caveat.w, w);
  // The caveat bar holds two lines of text.
  EXPECT_GE(l.caveat.h, fp * 2.5f);
  // The heatmap is the largest panel; side columns hold ~14 CJK glyphs.
  EXPECT_GE(l.heatmap.w, 0.4f * w);
  EXPECT_GE(l.controls.w, std::min(fp * 14, w * 0.25f) - 0.01f);
  EXPECT_GE(l.info.w, std::min(fp * 17, w * 0.3f) - 0.01f);
  // The heatmap frame: plot, labels and legend do not overlap, plot is at least 60% of the panel.
  const Rect content{l.heatmap.x + 8, l.heatmap.y + 80, l.heatmap.w - 16, l.heatmap.h - 120};
  const HeatmapFrame f = compute_heatmap_frame(content, fp * 4, fp + 4, fp);
  EXPECT_FALSE(overlaps(f.plot_area, f.legend));
  EXPECT_FALSE(overlaps(f.plot_area, f.row_labels));
  EXPECT_FALSE(overlaps(f.plot_area, f.col_labels));
  EXPECT_LE(f.legend.right(), content.right() + 0.01f);
  EXPECT_GE(f.plot_area.w, 0.6f * content.w);
  // A 5-token demo gets cells large enough for "0.25" (about 2.5 font sizes).
  const PlotGeometry g = place_plot(f.plot_area.x, f.plot_area.y, f.plot_area.w, f.plot_area.h, 5, 5, HeatView{});
  EXPECT_GE(g.cell_w, fp * 2.5f);
}

INSTANTIATE_TEST_SUITE_P(Sizes, LayoutAtSize,
                         ::testing::Values(std::make_tuple(1280.0f, 800.0f, 18.0f),
                                           std::make_tuple(1920.0f, 1080.0f, 22.0f),
                                           std::make_tuple(960.0f, 600.0f, 15.0f)));

// The caveat bar grows to the height its lines need (caveat_px), the panels above giving it up,
// up to two fifths of the window; a need below its usual height leaves the layout as it was.
TEST(Layout, TheCaveatBarGrowsToItsLines) {
  const Layout usual = compute_layout(1920, 1080, 44);
  EXPECT_EQ(compute_layout(1920, 1080, 44, usual.caveat.h - 10).caveat.h, usual.caveat.h);
  const Layout grown = compute_layout(1920, 1080, 44, usual.caveat.h + 50.5f);
  EXPECT_EQ(grown.caveat.h, usual.caveat.h + 51);
  EXPECT_EQ(grown.caveat.bottom(), 1080);
  EXPECT_EQ(grown.heatmap.bottom(), grown.caveat.y);
  EXPECT_EQ(grown.controls.h, grown.heatmap.h);
  EXPECT_EQ(compute_layout(1920, 1080, 44, 5000).caveat.h, 432);
}

// A bar that cannot hold every line keeps its last ones (keys, status, refusal) whole: the text
// above gets the rest; where everything fits, the text keeps its own height.
TEST(Layout, TheCaveatBarsLastLinesKeepTheirPlace) {
  // 4 text lines and 1 last line of 20 px with 5 px between: 95 + 5 + 20 = 120 px.
  EXPECT_FLOAT_EQ(caveat_text_height(120, 4, 1, 20, 5), 95);
  EXPECT_FLOAT_EQ(caveat_text_height(500, 4, 1, 20, 5), 95);
  // The last line's 20 + 5 come off: 75 px, which hold three whole lines (70).
  EXPECT_FLOAT_EQ(caveat_text_height(100, 4, 1, 20, 5), 70);
  EXPECT_FLOAT_EQ(caveat_text_height(100, 4, 3, 20, 5), 20);  // three last lines: 70 + 5; one line left
  EXPECT_FLOAT_EQ(caveat_text_height(40, 4, 3, 20, 5), 0);    // not even the last lines fit: no text
  EXPECT_FLOAT_EQ(caveat_text_height(100, 4, 0, 20, 5), 95);
  EXPECT_FLOAT_EQ(caveat_text_height(100, 0, 2, 20, 5), 0);
}

TEST(Layout, RectHelpers) {
  const Rect a{0, 0, 10, 10}, b{10, 0, 5, 5}, c{5, 5, 10, 10};
  EXPECT_FALSE(overlaps(a, b));
  EXPECT_TRUE(overlaps(a, c));
  EXPECT_TRUE(a.contains(0, 0));
  EXPECT_FALSE(a.contains(10, 5));
}
