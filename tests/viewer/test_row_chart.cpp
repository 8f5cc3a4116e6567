// The selected row's bar chart (viewer/draw/row_chart.h): bins are the max of their keys, masked keys
// count for nothing, the top keys are the row's largest weights with the lowest key on ties.
#include "viewer/draw/pooling.h"
#include "viewer/draw/row_chart.h"

#include <gtest/gtest.h>

#include <limits>
#include <vector>

using namespace attnlab::viewer;

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
