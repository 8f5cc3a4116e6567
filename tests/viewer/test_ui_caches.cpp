// What the viewer's per-frame caches are keyed on, from the controller's side: column labels come
// back by reference (no copy of 4096 tokens per frame), the output's "1".."d_v" follow d_v, and
// problem_revision (the key of the heatmap's label sizes) moves when the tokens can change (a new
// problem) and stays when only the temperature, mask or query does.
#include "viewer/controller.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace attnlab;
using namespace attnlab::viewer;

namespace {
ViewerOptions cpu_options() {
  ViewerOptions o;
  o.backend = "cpu";
  return o;
}
}  // namespace

TEST(UiCaches, ColumnLabelsAreTheProblemsOwnVectors) {
  Controller c(cpu_options());
  EXPECT_EQ(&c.column_labels(1), &c.problem().key_tokens);
  EXPECT_EQ(&c.column_labels(3), &c.problem().key_tokens);
  const std::vector<std::string>* dims = &c.column_labels(4);
  EXPECT_EQ(*dims, (std::vector<std::string>{"1", "2"}));
  EXPECT_EQ(&c.column_labels(4), dims) << "made once, not on every call";
}

TEST(UiCaches, OutputLabelsFollowDv) {
  Controller c(cpu_options());
  EXPECT_EQ(c.column_labels(4).size(), 2u);
  ASSERT_TRUE(c.load_random(12, 8, 5, 1));
  EXPECT_EQ(c.column_labels(4), (std::vector<std::string>{"1", "2", "3", "4", "5"}));
  ASSERT_TRUE(c.load_demo());
  EXPECT_EQ(c.column_labels(4), (std::vector<std::string>{"1", "2"}));
}

TEST(UiCaches, ProblemRevisionMovesWithNewTokensOnly) {
  Controller c(cpu_options());
  const auto p0 = c.problem_revision();
  const auto r0 = c.revision();
  ASSERT_TRUE(c.set_temperature(2.0));
  ASSERT_TRUE(c.set_mask(MaskKind::Causal));
  ASSERT_TRUE(c.set_query(1));
  EXPECT_GT(c.revision(), r0) << "the trace changed";
  EXPECT_EQ(c.problem_revision(), p0) << "the labels did not";
  ASSERT_TRUE(c.load_random(12, 8, 5, 1));
  const auto p1 = c.problem_revision();
  EXPECT_NE(p1, p0);
  EXPECT_EQ(c.problem().key_tokens.size(), 12u);
  ASSERT_TRUE(c.load_demo());
  EXPECT_NE(c.problem_revision(), p1);
  // A refused problem (over the CPU limit) leaves the labels as they were; a bump is allowed, a
  // stale key is not: the tokens on screen are still the demo's.
  EXPECT_FALSE(c.load_random(kCpuMaxTokens + 1, 8, 8, 1));
  EXPECT_EQ(c.problem().key_tokens.size(), 5u);
}
