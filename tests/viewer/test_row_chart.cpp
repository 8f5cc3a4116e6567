// The selected row's bar chart (viewer/draw/row_chart.h): bins are the max of their keys, masked keys
// count for nothing, the top keys are the row's largest weights with the lowest key on ties.
#include "viewer/draw/pooling.h"
#include "viewer/draw/row_chart.h"
#include "core/format.h"
#include "viewer/draw/strings.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

using namespace attnlab::viewer;
using attnlab::percent_text;

TEST(RowChart, BinsTakeTheMaxAndTopKeysComeFromTheWholeRow) {
  const float inf = std::numeric_limits<float>::infinity();
  //                       0     1     2     3     4     5     6     7
  const std::vector<float> w{0.05f, 0.30f, 0.10f, 0.30f, 0.00f, 0.20f, 0.05f, 0.00f};
  const std::vector<float> mask{0, 0, 0, 0, 0, 0, 0, -inf};
  const AxisMap cols = map_axis(0, 8, 4, 8);  // two keys a bin
  const RowChart c = row_chart(w.data(), mask.data(), 8, cols, 3);
  EXPECT_EQ(c.bins, (std::vector<float>{0.30f, 0.30f, 0.20f, 0.05f}));
  EXPECT_FLOAT_EQ(c.max, 0.30f);
  ASSERT_EQ(c.top.size(), 3u);
  EXPECT_EQ(c.top[0].key, 1);
  EXPECT_EQ(c.top[1].key, 3) << "a tie goes to the lower key";
  EXPECT_EQ(c.top[2].key, 5);
  // Without a top list (another query's outline) the max is the row's all the same: it sets the
  // chart's scale, which had left that row's peak above the chart.
  const RowChart outline = row_chart(w.data(), mask.data(), 8, cols, 0);
  EXPECT_TRUE(outline.top.empty());
  EXPECT_FLOAT_EQ(outline.max, 0.30f);
  // Weights of exactly 0 (underflowed at a low temperature) are never top keys: a row with one
  // weight above 0 names that one alone (it had named keys "0.0%" second and third).
  const std::vector<float> sharp{0, 0, 1, 0};
  const RowChart one = row_chart(sharp.data(), nullptr, 4, map_axis(0, 4, 4, 4), 3);
  ASSERT_EQ(one.top.size(), 1u);
  EXPECT_EQ(one.top[0].key, 2);
}

TEST(RowChart, MaskedKeysAreNeverTopAndAFullyMaskedBinIsEmpty) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> w{0.9f, 0.1f, 0.0f, 0.0f};
  const std::vector<float> mask{-inf, 0, -inf, -inf};
  const RowChart c = row_chart(w.data(), mask.data(), 4, map_axis(0, 4, 2, 4), 3);
  EXPECT_EQ(c.bins, (std::vector<float>{0.1f, 0.0f}));
  ASSERT_EQ(c.top.size(), 1u);
  EXPECT_EQ(c.top[0].key, 1);
  // Magnified: more pixels than keys, each pixel one key.
  const RowChart m = row_chart(w.data(), nullptr, 4, map_axis(0, 4, 8, 4), 2);
  EXPECT_EQ(m.bins.size(), 8u);
  EXPECT_FLOAT_EQ(m.bins[0], 0.9f);
  EXPECT_EQ(m.top[0].key, 0);
}

// The rank numbers over the top bars: neighbouring keys' numbers never overlap; a number that
// meets none keeps its place; all stay inside the chart.
TEST(RowChart, RankLabelsOfNeighbouringKeysDoNotOverlap) {
  const auto meet = [](const LabelBox& a, const LabelBox& b) {
    return a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h;
  };
  // Ranks 1..3 on three adjacent 2 px columns, bars of nearly the same height (labels 8 × 14 px).
  const std::vector<LabelBox> wish{{100, 40, 8, 14}, {102, 41, 8, 14}, {98, 41, 8, 14}};
  const std::vector<LabelBox> at = place_labels(wish, 0, 400, 10);
  ASSERT_EQ(at.size(), 3u);
  EXPECT_FLOAT_EQ(at[0].x, 100);
  EXPECT_FLOAT_EQ(at[0].y, 40) << "the first keeps its place";
  for (std::size_t i = 0; i < at.size(); ++i) {
    EXPECT_GE(at[i].y, 10) << i;
    EXPECT_GE(at[i].x, 0) << i;
    EXPECT_LE(at[i].x + at[i].w, 400) << i;
    for (std::size_t j = 0; j < i; ++j) EXPECT_FALSE(meet(at[i], at[j])) << i << " meets " << j;
  }
  // Far apart: each at its wish.
  const std::vector<LabelBox> apart{{10, 40, 8, 14}, {200, 60, 8, 14}, {300, 20, 8, 14}};
  const std::vector<LabelBox> kept = place_labels(apart, 0, 400, 10);
  for (std::size_t i = 0; i < apart.size(); ++i) {
    EXPECT_FLOAT_EQ(kept[i].x, apart[i].x);
    EXPECT_FLOAT_EQ(kept[i].y, apart[i].y);
  }
  // At the chart's right edge, the same key three times: still apart, still inside.
  const std::vector<LabelBox> edge{{396, 12, 8, 14}, {396, 12, 8, 14}, {396, 12, 8, 14}};
  const std::vector<LabelBox> e = place_labels(edge, 0, 400, 10);
  for (std::size_t i = 0; i < e.size(); ++i) {
    EXPECT_LE(e[i].x + e[i].w, 400) << i;
    EXPECT_GE(e[i].y, 10) << i;
    for (std::size_t j = 0; j < i; ++j) EXPECT_FALSE(meet(e[i], e[j])) << i << " meets " << j;
  }
}

// A number never lies on a bar: the rank-3 key's number, wished above its short bar but wide
// enough to reach over its taller neighbour (the rank-1 bar), moves off it; one that meets no bar
// keeps its wish.
TEST(RowChart, RankLabelsKeepOffTheBars) {
  const auto meet = [](const LabelBox& a, const LabelBox& b) {
    return a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h;
  };
  // Bars on a base line at y = 100: key columns 4 px wide; rank 1 at x 104 (60 px tall), rank 3 at
  // x 108 (30 px tall), a short bar at x 96.
  const std::vector<LabelBox> bars{{96, 90, 8, 10}, {104, 40, 4, 60}, {108, 70, 4, 30}};
  // Labels 8 x 14 px centred over their bars.
  const std::vector<LabelBox> wish{{102, 26, 8, 14}, {106, 56, 8, 14}};
  const std::vector<LabelBox> at = place_labels(wish, 0, 400, 10, bars);
  ASSERT_EQ(at.size(), 2u);
  EXPECT_FLOAT_EQ(at[0].x, 102);
  EXPECT_FLOAT_EQ(at[0].y, 26) << "above every bar: kept";
  for (std::size_t i = 0; i < at.size(); ++i) {
    for (const LabelBox& b : bars) EXPECT_FALSE(meet(at[i], b)) << i << " lies on a bar at x " << b.x;
    for (std::size_t j = 0; j < i; ++j) EXPECT_FALSE(meet(at[i], at[j])) << i << " meets " << j;
    EXPECT_GE(at[i].y, 10) << i;
  }
  // It stays near its bar (beside the taller one, or above it), not across the chart.
  EXPECT_LT(std::abs(at[1].x - 106) + std::abs(at[1].y - 56), 60);
}

// The title's top weights use the statistics' percentages: one decimal, so 26 % reads "26.0%";
// significant digits below 1 %.
TEST(RowChart, TheTitlesPercentagesAreTheStatisticsFormat) {
  const std::vector<float> w{0.219f, 0.102f, 0.260f, 0.165f, 0.254f};
  const std::vector<std::string> keys{"模型", "根据", "上下文", "分配", "权重"};
  const RowChart c = row_chart(w.data(), nullptr, 5, map_axis(0, 5, 5, 5), 3);
  EXPECT_EQ(top_weights_text(c, keys), "  ·  1) 上下文 26.0%, 2) 权重 25.4%, 3) 模型 21.9%");
  const std::vector<float> small{0.00563f, 0.0042f};
  const RowChart s = row_chart(small.data(), nullptr, 2, map_axis(0, 2, 2, 2), 2);
  EXPECT_EQ(top_weights_text(s, {"270", "4066"}), "  ·  1) 270 0.56%, 2) 4066 0.42%");
  EXPECT_EQ(percent_text(0.26), "26.0");
  EXPECT_EQ(percent_text(1.0), "100.0");
  EXPECT_EQ(percent_text(0.005), "0.50") << "two significant digits, the second a 0";
  EXPECT_EQ(percent_text(0.00004), "0.0040");
}
