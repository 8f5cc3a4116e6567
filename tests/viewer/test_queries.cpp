// Several queries at once (issue 14 part 4): the selection's order and limits, the typed list, the
// statistics of each selected row and their mean, exact rows of every selected query when the
// problem is streamed, and a new problem starting over with one query.
#include "core/problem.h"
#include "core/stats.h"
#include "cpu/cpu_backend.h"
#include "tests/viewer/viewer_test_util.h"
#include "viewer/session/session.h"
#include "viewer/app/options.h"
#include "engine/registry.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

using namespace attnlab;
using namespace attnlab::viewer;

TEST(Queries, TheSelectedQueryComesFirstAndTheOthersAscend) {
  Session c(test::cpu_viewer_options());
  ASSERT_TRUE(c.set_queries({3, 4, 0, 4, 1}));
  EXPECT_EQ(c.query(), 3);
  EXPECT_EQ(c.queries(), (std::vector<int>{3, 0, 1, 4}));
  // Shift-click: another row joins, a selected one leaves, the selected query itself stays.
  ASSERT_TRUE(c.toggle_query(2));
  EXPECT_EQ(c.queries(), (std::vector<int>{3, 0, 1, 2, 4}));
  ASSERT_TRUE(c.toggle_query(0));
  EXPECT_EQ(c.queries(), (std::vector<int>{3, 1, 2, 4}));
  ASSERT_TRUE(c.toggle_query(3));
  EXPECT_EQ(c.queries(), (std::vector<int>{3, 1, 2, 4}));
  // Moving the selected query keeps the others; landing on one of them takes it out of the rest.
  ASSERT_TRUE(c.move_query(-1));
  EXPECT_EQ(c.queries(), (std::vector<int>{2, 1, 4}));
  ASSERT_TRUE(c.set_queries({0}));
  EXPECT_EQ(c.queries(), (std::vector<int>{0}));
}

TEST(Queries, RefusalsKeepTheSelection) {
  ViewerOptions o = test::cpu_viewer_options();
  o.random_n = 64;
  o.d_k = 8;
  o.d_v = 4;
  Session c(o);
  ASSERT_TRUE(c.set_queries({5, 6}));
  EXPECT_FALSE(c.set_queries({1, 64}));
  EXPECT_NE(c.error().find("query 64 is outside 0..63"), std::string::npos) << c.error();
  EXPECT_EQ(c.queries(), (std::vector<int>{5, 6}));
  std::vector<int> many;
  for (int i = 0; i <= kMaxQueries; ++i) many.push_back(i * 3);
  EXPECT_FALSE(c.set_queries(many));
  EXPECT_NE(c.error().find("at most 8 queries"), std::string::npos) << c.error();
  EXPECT_NE(c.error_text(Lang::Zh).find("最多同时选择"), std::string::npos);
  EXPECT_EQ(c.queries(), (std::vector<int>{5, 6}));
  // The eighth row joins by shift-click, the ninth is refused.
  ASSERT_TRUE(c.set_queries(std::vector<int>(many.begin(), many.begin() + kMaxQueries)));
  EXPECT_FALSE(c.toggle_query(63));
  EXPECT_EQ(static_cast<int>(c.queries().size()), kMaxQueries);
  for (const char* bad : {"", "1,,2", "3,", "abc", "1, 99"}) {
    EXPECT_FALSE(c.set_queries_text(bad)) << bad;
    EXPECT_EQ(static_cast<int>(c.queries().size()), kMaxQueries) << bad;
  }
  ASSERT_TRUE(c.set_queries_text(" 9 , 2,7 "));
  EXPECT_EQ(c.queries(), (std::vector<int>{9, 2, 7}));
}

TEST(Queries, TheTypedListTakesTokensAsQueryDoes) {
  Session c(test::cpu_viewer_options());
  const Problem& p = c.problem();
  const std::string list = p.query_tokens()[4] + "," + p.query_tokens()[1] + ", 2";
  ASSERT_TRUE(c.set_queries_text(list)) << c.error();
  EXPECT_EQ(c.queries(), (std::vector<int>{4, 1, 2}));
  EXPECT_EQ(parse_query_list(p, "0,3"), (std::vector<int>{0, 3}));
  EXPECT_THROW(parse_query_list(p, "0,,3"), InputError);
}

TEST(Queries, StatisticsOfEachSelectedRowAndTheirMean) {
  Session c(test::cpu_viewer_options());
  ASSERT_TRUE(c.set_queries({1, 3, 4}));
  const Trace t = cpu_staged(c.problem());
  double max_sum = 0, entropy_sum = 0, perplexity_sum = 0;
  for (int q : {1, 3, 4}) {
    const RowStats want = row_stats(t, q);
    const auto got = c.stats_of(q);
    ASSERT_TRUE(got) << q;
    EXPECT_FLOAT_EQ(got->max_weight, want.max_weight) << q;
    EXPECT_EQ(got->argmax, want.argmax) << q;
    EXPECT_FLOAT_EQ(got->entropy, want.entropy) << q;
    max_sum += want.max_weight;
    entropy_sum += want.entropy;
    perplexity_sum += want.perplexity;
  }
  int counted = 0;
  const auto mean = c.mean_stats(&counted);
  ASSERT_TRUE(mean);
  EXPECT_EQ(counted, 3);
  EXPECT_NEAR(mean->max_weight, max_sum / 3, 1e-12);
  EXPECT_NEAR(mean->entropy, entropy_sum / 3, 1e-12);
  EXPECT_NEAR(mean->perplexity, perplexity_sum / 3, 1e-12);
  EXPECT_EQ(mean->argmax, -1);
  // The rows differ (the demo's queries do not all attend alike), so the mean is not one row's.
  EXPECT_NE(c.stats_of(1)->max_weight, c.stats_of(4)->max_weight);
  EXPECT_FALSE(c.stats_of(5));
  EXPECT_FALSE(c.stats_of(-1));
  // A new run's statistics, not the last ones again (they are kept per trace on screen).
  const double before = c.stats_of(3)->entropy;
  ASSERT_TRUE(c.set_temperature(0.3));
  Problem cold = c.problem();
  EXPECT_DOUBLE_EQ(c.stats_of(3)->entropy, row_stats(cpu_staged(cold), 3).entropy);
  EXPECT_LT(c.stats_of(3)->entropy, before) << "a lower temperature sharpens the row";
}

TEST(Queries, StreamedProblemsComputeEverySelectedRowExactly) {
  Session c(test::cpu_viewer_options());
  ASSERT_TRUE(c.load_random(kKeepStagesMaxTokens + 50, 8, 4, 11));
  ASSERT_TRUE(c.streaming());
  ASSERT_TRUE(c.set_queries({100, 4000, 7}));
  // Each row as the backend computes that row alone.
  for (int q : {100, 4000, 7}) {
    const RowStages* r = c.row_of(q);
    ASSERT_NE(r, nullptr) << q;
    RunOptions opt;
    opt.keep_stages = false;
    opt.output = false;
    opt.rows = {q};
    const Trace alone = run_backend("cpu", c.problem(), opt);
    ASSERT_EQ(alone.rows.size(), 1u);
    EXPECT_EQ(r->weights, alone.rows[0].weights) << q;
    ASSERT_TRUE(c.stats_of(q)) << q;
  }
  // A temperature change recomputes all of them.
  const std::vector<float> before = c.row_of(4000)->weights;
  ASSERT_TRUE(c.set_temperature(0.3));
  ASSERT_NE(c.row_of(4000), nullptr);
  EXPECT_NE(c.row_of(4000)->weights, before);
  ASSERT_NE(c.row_of(7), nullptr);
  ASSERT_NE(c.row_of(100), nullptr);
}

TEST(Queries, ANewProblemStartsWithOneQuery) {
  Session c(test::cpu_viewer_options());
  ASSERT_TRUE(c.set_queries({0, 2, 4}));
  ASSERT_TRUE(c.set_temperature(0.5));
  EXPECT_EQ(c.queries(), (std::vector<int>{0, 2, 4})) << "a temperature change keeps the selection";
  ASSERT_TRUE(c.load_random(32, 8, 8, 1));
  EXPECT_EQ(c.queries(), std::vector<int>{c.query()});
  ASSERT_TRUE(c.load_demo());
  EXPECT_EQ(c.queries(), std::vector<int>{c.query()});
}

TEST(Queries, TheCommandLineSelectsSeveral) {
  ViewerOptions o = parse_viewer_args({"--queries", "4,0,2", "--backend", "cpu"});
  EXPECT_EQ(o.queries, "4,0,2");
  Session c(o);
  EXPECT_EQ(c.query(), 4);
  EXPECT_EQ(c.queries(), (std::vector<int>{4, 0, 2}));
  o.queries = "1,9";
  EXPECT_THROW(Session bad(o), InputError);
  // A random problem keeps them too (its first run is a new problem).
  o.queries = "10,3,40";
  o.random_n = 64;
  o.d_k = o.d_v = 8;
  Session r(o);
  EXPECT_EQ(r.queries(), (std::vector<int>{10, 3, 40}));
  EXPECT_THROW(parse_viewer_args({"--queries"}), InputError);
  EXPECT_THROW(parse_viewer_args({"--queries", ""}), InputError);
  EXPECT_THROW(parse_viewer_args({"--queries", "  "}), InputError);
}
