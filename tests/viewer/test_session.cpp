// The session against the real CPU backend: the demo's numbers reach the viewer (the page's row
// for 上下文), refused changes keep the last valid state with the core's message, mask / query /
// backend / random mode, the Compare refusal without CUDA, the state dump, and the measured redraw
// runs of the redraw benchmark, and the worker thread of the interactive viewer.
#include "viewer_test_util.h"
#include "core/modify.h"
#include "core/backend.h"
#include "core/inputs.h"
#include "core/problem.h"
#include "core/stats.h"
#include "cpu/cpu_backend.h"
#include "tests/test_util.h"
#include "viewer/app/redraw_bench.h"
#include "viewer/session/compare.h"
#include "viewer/session/keymap.h"
#include "viewer/session/session.h"
#include "viewer/session/playback.h"
#include "viewer/app/state_dump.h"
#include "engine/registry.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <cmath>
#include <iostream>
#include <limits>
#include <sstream>

using namespace attnlab;
using namespace attnlab::viewer;

namespace {
// validate_temperature(t)'s refusal; a failure when it accepts t.
std::string core_message(double t) {
  return test::message_of<InputError>([&] { validate_temperature(t); });
}
// A random problem of 300 tokens (d_k 8, d_v 4): large enough for real stage buffers, quick.
ViewerOptions random_300() {
  ViewerOptions o = test::cpu_viewer_options();
  o.random_n = 300;
  o.d_k = 8;
  o.d_v = 4;
  return o;
}

}  // namespace

TEST(Session, DemoShowsThePageNumbers) {
  Session c(test::cpu_viewer_options());
  EXPECT_TRUE(c.demo());
  EXPECT_EQ(c.query(), 2);
  EXPECT_EQ(c.problem().query_tokens()[2], "上下文");
  EXPECT_DOUBLE_EQ(c.problem().temperature, 0.85);
  const MatrixF* w = c.stage_matrix(3);
  ASSERT_NE(w, nullptr);
  const double page[] = {0.219, 0.102, 0.260, 0.165, 0.254};
  for (int j = 0; j < 5; ++j) EXPECT_NEAR((*w)(2, j), page[j], 1e-3);
  const MatrixF* s = c.stage_matrix(1);
  ASSERT_NE(s, nullptr);
  EXPECT_NEAR((*s)(0, 0), 1.84, 0.006);
  const MatrixF* o = c.stage_matrix(4);
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->cols(), 2);
  EXPECT_NEAR((*o)(2, 0), 0.65, 0.006);
  EXPECT_NEAR((*o)(2, 1), 0.55, 0.006);
  const auto st = c.stats();
  ASSERT_TRUE(st);
  EXPECT_NEAR(st->max_weight, 0.260, 1e-3);
  EXPECT_NEAR(st->entropy, 1.561, 1e-3);
  EXPECT_EQ(st->unmasked, 5);
  EXPECT_EQ(c.column_labels(4), (std::vector<std::string>{"0", "1"}));
  EXPECT_EQ(c.column_labels(1)[2], "上下文");
  EXPECT_NE(c.description(Lang::Zh).find("上下文"), std::string::npos);
}

TEST(Session, InvalidTemperatureKeepsTheLastValidState) {
  Session c(test::cpu_viewer_options());
  const auto rev = c.revision();
  const float w0 = (*c.stage_matrix(3))(2, 2);
  for (double bad : {0.0, -1.0, std::numeric_limits<double>::infinity(), std::nan("")}) {
    EXPECT_FALSE(c.set_temperature(bad));
    EXPECT_EQ(c.error(), core_message(bad));
  }
  EXPECT_FALSE(c.set_temperature_text("-2"));
  EXPECT_EQ(c.error(), core_message(-2));
  EXPECT_FALSE(c.set_temperature_text("abc"));
  EXPECT_NE(c.error().find("temperature must be a finite number > 0, got 'abc'"), std::string::npos);
  EXPECT_DOUBLE_EQ(c.problem().temperature, 0.85);
  EXPECT_EQ(c.revision(), rev);
  EXPECT_EQ((*c.stage_matrix(3))(2, 2), w0);
  // A valid one runs the backend again and clears the message; lower T sharpens the row.
  EXPECT_TRUE(c.set_temperature_text(" 0.5 "));
  EXPECT_TRUE(c.error().empty());
  EXPECT_GT(c.revision(), rev);
  EXPECT_GT((*c.stage_matrix(3))(2, 2), w0);
}

// A refusal's message lasts until the next accepted action, whichever it is (it used to stay
// through query changes and hide the status line, "Screenshot saved", for good).
TEST(Session, AnAcceptedActionEndsTheLastRefusal) {
  Session c(test::cpu_viewer_options());
  const auto refuse = [&c] {
    EXPECT_FALSE(c.set_temperature_text("abc"));
    EXPECT_FALSE(c.error().empty());
  };
  refuse();
  EXPECT_TRUE(c.set_query(1));
  EXPECT_TRUE(c.error().empty()) << "query";
  refuse();
  EXPECT_TRUE(c.move_query(+1));
  EXPECT_TRUE(c.error().empty()) << "move_query";
  refuse();
  EXPECT_TRUE(c.set_temperature(c.problem().temperature));
  EXPECT_TRUE(c.error().empty()) << "the same temperature";
  refuse();
  EXPECT_TRUE(c.set_mask(c.problem().mask));
  EXPECT_TRUE(c.error().empty()) << "the same mask";
  refuse();
  EXPECT_TRUE(c.set_backend("cpu"));
  EXPECT_TRUE(c.error().empty()) << "the same backend";
}

// The description is cached between frames; every change of what it describes must show.
TEST(Session, DescriptionFollowsEveryChange) {
  Session c(test::cpu_viewer_options());
  const auto fresh = [&c](Lang l) { return describe(c.problem(), c.trace(), c.query(), l); };
  EXPECT_EQ(c.description(Lang::En), fresh(Lang::En));
  EXPECT_EQ(c.description(Lang::Zh), fresh(Lang::Zh));
  ASSERT_TRUE(c.set_query(4));
  EXPECT_EQ(c.description(Lang::Zh), fresh(Lang::Zh));
  ASSERT_TRUE(c.set_temperature(0.3));
  EXPECT_EQ(c.description(Lang::Zh), fresh(Lang::Zh));
  ASSERT_TRUE(c.set_mask(MaskKind::Causal));
  EXPECT_EQ(c.description(Lang::En), fresh(Lang::En));
  ASSERT_TRUE(c.load_random(12, 8, 5, 1));
  EXPECT_EQ(c.description(Lang::En), fresh(Lang::En));
  EXPECT_FALSE(c.set_temperature_text("abc"));  // refused: the state, and so the text, stay
  EXPECT_EQ(c.description(Lang::En), fresh(Lang::En));
}

TEST(Session, MaskToggleZeroesTheFuture) {
  Session c(test::cpu_viewer_options());
  EXPECT_FALSE(c.step_shows_mask(2));
  ASSERT_TRUE(c.toggle_mask());
  EXPECT_EQ(c.problem().mask, MaskKind::Causal);
  EXPECT_TRUE(c.step_shows_mask(2));
  EXPECT_TRUE(c.step_shows_mask(3));
  EXPECT_FALSE(c.step_shows_mask(1));
  EXPECT_FALSE(c.step_shows_mask(4));
  const MatrixF& w = *c.stage_matrix(3);
  for (int r = 0; r < 5; ++r)
    for (int k = r + 1; k < 5; ++k) EXPECT_EQ(w(r, k), 0.0f);
  EXPECT_EQ(c.stats()->unmasked, 3);  // 上下文 reads 模型, 根据, itself
  ASSERT_TRUE(c.toggle_mask());
  EXPECT_EQ(c.problem().mask, MaskKind::None);
}

TEST(Session, QueryMovesAndClamps) {
  Session c(test::cpu_viewer_options());
  const auto rev = c.revision();
  EXPECT_TRUE(c.move_query(+1));
  EXPECT_EQ(c.query(), 3);
  c.move_query(+10);
  EXPECT_EQ(c.query(), 4);
  c.move_query(-10);
  EXPECT_EQ(c.query(), 0);
  EXPECT_FALSE(c.set_query(7));
  EXPECT_EQ(c.query(), 0);
  EXPECT_EQ(c.revision(), rev) << "a query change needs no backend run";
}

TEST(Session, QueryFromTheCommandLine) {
  ViewerOptions o = test::cpu_viewer_options();
  o.query = "权重";
  EXPECT_EQ(Session(o).query(), 4);
  o.query = "1";
  EXPECT_EQ(Session(o).query(), 1);
  o.query = "你好";
  EXPECT_THROW(Session{o}, InputError);
}

TEST(Session, CudaRefusedWithTheReasonWhenAbsent) {
  std::string reason;
  if (cuda_available(&reason)) GTEST_SKIP() << "a CUDA device is present; the refusal path does not apply";
  Session c(test::cpu_viewer_options());
  EXPECT_FALSE(c.cuda_ok());
  EXPECT_EQ(c.cuda_reason(), reason);
  EXPECT_FALSE(c.set_backend("cuda"));
  EXPECT_NE(c.error().find(reason), std::string::npos);
  EXPECT_EQ(c.backend(), "cpu");
  EXPECT_EQ(compare_unavailable_reason(c), reason);
  const CompareResult r = run_compare(c);
  EXPECT_FALSE(r.done);
  EXPECT_EQ(r.error, reason);
  ViewerOptions o = test::cpu_viewer_options();
  o.backend = "cuda";
  EXPECT_THROW(Session{o}, NoDeviceError);
}

// Staged vs fused needs no GPU: the chosen backend (the CPU here) runs both on the current
// problem; the outputs agree to fp32 rounding.
TEST(Session, StagedVersusFusedCompareRunsOnTheCpu) {
  Session c(test::cpu_viewer_options());
  ASSERT_TRUE(c.load_random(300, 16, 8, 5));
  const CompareResult r = run_variant_compare(c);
  ASSERT_TRUE(r.done) << r.error;
  EXPECT_EQ(r.a_name, "staged");
  EXPECT_EQ(r.b_name, "fused");
  EXPECT_GT(r.a_total_ms, 0);
  EXPECT_GT(r.b_total_ms, 0);
  ASSERT_EQ(r.stages.size(), 1u);
  EXPECT_EQ(r.stages[0].stage, "output");
  EXPECT_LT(r.stages[0].max_abs_diff, 1e-5);
  EXPECT_GT(r.speed_up(), 0);
  // A comparison belongs to the run it compared: the panel shows it while that run is on screen.
  EXPECT_EQ(r.run, c.run_revision());
  ASSERT_TRUE(c.set_temperature(2.0));
  EXPECT_NE(r.run, c.run_revision());
}

TEST(Session, RandomModeAndLimits) {
  Session c(test::cpu_viewer_options());
  EXPECT_FALSE(c.load_random(kCpuMaxTokens + 1, 8, 8, 1));
  EXPECT_NE(c.error().find("CPU limit of 65536"), std::string::npos);
  EXPECT_TRUE(c.demo());
  ASSERT_TRUE(c.load_random(64, 8, 4, 3));
  EXPECT_FALSE(c.demo());
  EXPECT_EQ(c.n(), 64);
  EXPECT_EQ(c.query(), 32);
  EXPECT_DOUBLE_EQ(c.problem().temperature, 0.85) << "temperature carries over";
  EXPECT_EQ(c.stage_matrix(4)->cols(), 4);
  EXPECT_EQ(c.column_labels(4).size(), 4u);
  EXPECT_TRUE(c.stages_kept());
  ASSERT_TRUE(c.load_demo());
  EXPECT_TRUE(c.demo());
  EXPECT_EQ(c.query(), 2);
  ViewerOptions o = test::cpu_viewer_options();
  o.random_n = kCpuMaxTokens + 1;
  EXPECT_THROW(Session{o}, InputError);
}

TEST(Session, MaxAbsDiff) {
  MatrixF a(1, 3), b(1, 3);
  const float inf = std::numeric_limits<float>::infinity();
  a << 1, -inf, 3;
  b << 1.5f, -inf, 2;
  EXPECT_DOUBLE_EQ(max_abs_diff(a, b), 1.0);
  b(0, 1) = 0;
  EXPECT_TRUE(std::isinf(max_abs_diff(a, b)));
  EXPECT_TRUE(std::isinf(max_abs_diff(a, MatrixF(2, 3))));
}

TEST(Session, StateDumpHasTheFieldsTheTestsRead) {
  Session c(test::cpu_viewer_options());
  Playback p;
  p.set_step(3);
  ViewSnapshot v;
  v.playback = &p;
  v.lang = Lang::Zh;
  v.width = 1280;
  v.height = 800;
  const auto j = nlohmann::json::parse(state_json(c, v));
  EXPECT_EQ(j["step"], 3);
  EXPECT_EQ(j["query"], 2);
  EXPECT_EQ(j["query_token"], "上下文");
  EXPECT_EQ(j["mask"], "none");
  EXPECT_DOUBLE_EQ(j["temperature"].get<double>(), 0.85);
  EXPECT_EQ(j["lang"], "zh");
  EXPECT_EQ(j["mode"], "demo");
  EXPECT_EQ(j["N"], 5);
  EXPECT_TRUE(j.contains("heatmap"));
  EXPECT_EQ(j["backend_ran"], "cpu");
}

// The redraw benchmark's behaviour (its figures are in docs/PERFORMANCE.md; no time is asserted
// here): kept stages at N = 4096, a streamed problem above, each temperature change redrawn.
TEST(Session, RedrawBenchRunsKeptAndStreamedProblems) {
  for (int n : {4096, 8192}) {
    ViewerOptions o = test::cpu_viewer_options();
    o.random_n = n;
    o.d_k = 16;
    o.d_v = 16;
    o.repeat = 2;
    std::ostringstream log;
    const RedrawBench r = run_redraw_bench(o, log);
    EXPECT_EQ(r.n, n);
    EXPECT_GT(r.median_ms, 0) << log.str();
    EXPECT_NE(log.str().find("redraw 2/2"), std::string::npos) << log.str();
    // The kept problem's last redraw is checked against fp64 (a streamed one keeps no stage).
    EXPECT_EQ(r.checked, n == 4096);
    EXPECT_TRUE(r.check_pass) << log.str();
  }
}

// What the viewer's per-frame caches are keyed on, from the session's side: column labels come
// back by reference (no copy of 4096 tokens per frame), the output's "1".."d_v" follow d_v, and
// problem_revision (the key of the heatmap's label sizes) moves when the tokens can change (a new
// problem) and stays when only the temperature, mask or query does.
TEST(UiCaches, ColumnLabelsAreTheProblemsOwnVectors) {
  Session c(test::cpu_viewer_options());
  EXPECT_EQ(&c.column_labels(1), &c.problem().key_tokens());
  EXPECT_EQ(&c.column_labels(3), &c.problem().key_tokens());
  EXPECT_EQ(c.column_labels(4), (std::vector<std::string>{"0", "1"}));
}

TEST(UiCaches, OutputLabelsFollowDv) {
  Session c(test::cpu_viewer_options());
  EXPECT_EQ(c.column_labels(4).size(), 2u);
  ASSERT_TRUE(c.load_random(12, 8, 5, 1));
  EXPECT_EQ(c.column_labels(4), (std::vector<std::string>{"0", "1", "2", "3", "4"}));
  ASSERT_TRUE(c.load_demo());
  EXPECT_EQ(c.column_labels(4), (std::vector<std::string>{"0", "1"}));
}

TEST(UiCaches, ProblemRevisionMovesWithNewTokensOnly) {
  Session c(test::cpu_viewer_options());
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
  EXPECT_EQ(c.problem().key_tokens().size(), 12u);
  ASSERT_TRUE(c.load_demo());
  EXPECT_NE(c.problem_revision(), p1);
  // A refused problem (over the CPU limit) leaves the labels as they were; a bump is allowed, a
  // stale key is not: the tokens on screen are still the demo's.
  EXPECT_FALSE(c.load_random(kCpuMaxTokens + 1, 8, 8, 1));
  EXPECT_EQ(c.problem().key_tokens().size(), 5u);
}

// ---- the worker thread (async mode, the interactive viewer) and streamed problems ----------------

TEST(SessionAsync, TheLastRequestWinsAndThePictureStaysConsistentMeanwhile) {
  ViewerOptions o = test::cpu_viewer_options();
  o.random_n = 1024;
  o.d_k = 16;
  o.d_v = 8;
  Session c(o, /*async=*/true);
  const double t0 = c.problem().temperature;
  for (int i = 1; i <= 20; ++i) ASSERT_TRUE(c.set_temperature(t0 + 0.01 * i));
  // Nothing is adopted before poll(): the picture is still the pair computed together.
  EXPECT_TRUE(c.busy());
  EXPECT_DOUBLE_EQ(c.problem().temperature, t0);
  EXPECT_DOUBLE_EQ(c.requested_temperature(), t0 + 0.2);
  c.wait();
  EXPECT_FALSE(c.busy());
  EXPECT_DOUBLE_EQ(c.problem().temperature, t0 + 0.2);
  // The trace on screen is the one of that temperature.
  Problem p = random_problem(1024, 16, 8, 0);
  p.temperature = t0 + 0.2;
  EXPECT_EQ(max_abs_diff(c.trace().weights, run_backend("cpu", p).weights), 0);
}

TEST(SessionAsync, ARefusalFoundByTheRunArrivesThroughPollAndRestoresTheControls) {
  ViewerOptions o = test::cpu_viewer_options();
  o.random_n = 64;
  Session c(o, /*async=*/true);
  // The logits overflow fp32 at this temperature: only the run can tell.
  ASSERT_TRUE(c.set_temperature(1e-38));
  c.wait();
  EXPECT_NE(c.error().find("overflow"), std::string::npos) << c.error();
  EXPECT_DOUBLE_EQ(c.requested_temperature(), 1.0) << "the slider goes back to what is shown";
  EXPECT_DOUBLE_EQ(c.problem().temperature, 1.0);
  ASSERT_TRUE(c.set_temperature(2.0));
  c.wait();
  EXPECT_TRUE(c.error().empty());
}

TEST(SessionAsync, NewProblemsAreBuiltOffTheUiThread) {
  Session c(test::cpu_viewer_options(), /*async=*/true);
  ASSERT_TRUE(c.load_random(300, 8, 4, 9));
  EXPECT_TRUE(c.demo()) << "the demo stays on screen until the new problem is computed";
  c.wait();
  EXPECT_FALSE(c.demo());
  EXPECT_EQ(c.n(), 300);
  EXPECT_EQ(c.query(), 150);
  ASSERT_NE(c.stage_matrix(3), nullptr);
  EXPECT_EQ(c.stage_matrix(3)->rows(), 300);
}

TEST(SessionStreaming, AboveTheKeptLimitTheViewAndTheRowAreStreamed) {
  Session c(test::cpu_viewer_options());
  ASSERT_TRUE(c.load_random(kKeepStagesMaxTokens + 100, 8, 4, 3));
  ASSERT_TRUE(c.streaming());
  EXPECT_FALSE(c.stages_kept());
  EXPECT_EQ(c.stage_matrix(1), nullptr);
  ASSERT_NE(c.stage_matrix(4), nullptr) << "the output is kept whole";
  const auto st = c.stats();
  ASSERT_TRUE(st) << "the selected row is computed exactly";
  EXPECT_EQ(st->unmasked, c.problem().m());
  EXPECT_NEAR(st->weight_sum, 1.0, 1e-4);
  EXPECT_NE(c.description(Lang::En).find("of the current row's " + std::to_string(c.problem().m()) + " weights are"), std::string::npos);
  // A view: 50 x 40 pixels over the whole matrix.
  PoolRequest v;
  const int n = c.n();
  for (int py = 0; py < 50; ++py) {
    v.rows.begin.push_back(n * py / 50);
    v.rows.end.push_back(n * (py + 1) / 50);
  }
  for (int px = 0; px < 40; ++px) {
    v.cols.begin.push_back(n * px / 40);
    v.cols.end.push_back(n * (px + 1) / 40);
  }
  c.set_view(v);
  const PooledGrid* w = c.pooled_stage(3);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->rows, 50);
  EXPECT_EQ(w->cols, 40);
  EXPECT_EQ(c.pooled_view().rows.end.back(), n);
  // A new query: its exact row follows.
  ASSERT_TRUE(c.set_query(7));
  ASSERT_NE(c.query_row(), nullptr);
  EXPECT_EQ(c.query_row()->row, 7);
  // A temperature change keeps the view and recomputes it.
  const float before = w->cells[0].value;
  ASSERT_TRUE(c.set_temperature(0.25));
  ASSERT_NE(c.pooled_stage(3), nullptr);
  EXPECT_NE(c.pooled_stage(3)->cells[0].value, before);
  EXPECT_NE(compare_unavailable_reason(c), "");
}


// The window's session computes a streamed problem's first output in the pass that pools the
// heatmap's first view: one pass over the keys, not two (the first had computed the output
// alone, then the view's pass came). Where no view asks, the second poll brings the output.
TEST(SessionStreaming, TheFirstOutputComesWithTheFirstViewInOnePass) {
  for (const bool view_asks : {true, false}) {
    auto outputs = std::make_shared<std::atomic<int>>(0), pools = std::make_shared<std::atomic<int>>(0);
    ViewerOptions o = test::cpu_random_options(kKeepStagesMaxTokens + 100, 8, 4);
    o.output_with_first_view = true;
    o.backends = [outputs, pools](const std::string&) {
      return std::make_unique<test::HookedCpuBackend>([outputs, pools](const Problem&, const RunOptions& opt) {
        if (opt.output) ++*outputs;
        if (opt.pool) ++*pools;
      });
    };
    Session c(o);
    ASSERT_TRUE(c.streaming());
    EXPECT_EQ(c.stage_matrix(4), nullptr) << "left to the first view's pass";
    ASSERT_TRUE(c.stats()) << "the selected row is there at once";
    EXPECT_TRUE(c.busy()) << "the output is owed";
    EXPECT_EQ(outputs->load(), 0);
    if (view_asks) {
      PoolRequest v;
      const int n = c.n();
      for (int k = 0; k < 20; ++k) {
        v.rows.begin.push_back(n * k / 20);
        v.rows.end.push_back(n * (k + 1) / 20);
      }
      v.cols = v.rows;
      c.poll();  // the first frame's
      c.set_view(v);
      ASSERT_NE(c.pooled_stage(3), nullptr);
      EXPECT_EQ(pools->load(), 1);
    } else {
      c.poll();
      EXPECT_TRUE(c.busy());
      c.poll();
      EXPECT_EQ(pools->load(), 0);
    }
    EXPECT_FALSE(c.busy());
    EXPECT_EQ(outputs->load(), 1) << "one pass";
    ASSERT_NE(c.stage_matrix(4), nullptr);
    const Trace ref = make_cpu_backend()->run(c.problem(), RunOptions{});
    EXPECT_LT((*c.stage_matrix(4) - ref.output).cwiseAbs().maxCoeff(), 1e-6f);
  }
  // Without the option (the tests' sessions) the output is there at once.
  Session plain(test::cpu_random_options(kKeepStagesMaxTokens + 100, 8, 4));
  EXPECT_NE(plain.stage_matrix(4), nullptr);
  EXPECT_FALSE(plain.busy());
}

// One head of H random heads keeps its own ALiBi slope among the H (the CLI's --head gives the
// same), through ALiBi switched off and on again.
TEST(Session, OneHeadOfManyKeepsItsAlibiSlope) {
  ViewerOptions o = test::cpu_viewer_options();
  o.random_n = 8;
  o.d_k = o.d_v = 4;
  o.heads = 8;
  o.head = 3;
  o.mods.alibi = true;
  o.score_mods_given = true;
  Session s(o);
  const double slope = standard_alibi_slopes(8)[3];
  ASSERT_EQ(alibi_slopes(s.problem()).size(), 1u);
  EXPECT_EQ(alibi_slopes(s.problem())[0], slope);
  ModSettings m = s.requested_mods();
  m.alibi = false;
  ASSERT_TRUE(s.set_mods(m)) << s.error();
  EXPECT_TRUE(alibi_slopes(s.problem()).empty());
  m.alibi = true;
  ASSERT_TRUE(s.set_mods(m)) << s.error();
  EXPECT_EQ(alibi_slopes(s.problem())[0], slope);
  EXPECT_NE(s.reproduce_command().find("--heads 8 --head 3"), std::string::npos) << s.reproduce_command();
}

// Another head, or the modifications' files read again, keep the selected queries (a head has the
// same rows); they had gone back to the queries of the problem's load.
TEST(Session, AnotherHeadOrModFilesKeepTheSelectedQueries) {
  ViewerOptions o = test::cpu_viewer_options();
  o.random_n = 32;
  o.d_k = o.d_v = 4;
  o.heads = 4;
  o.query = "10";
  Session s(o);
  ASSERT_EQ(s.query(), 10);
  ASSERT_TRUE(s.set_query(13));
  ASSERT_TRUE(s.toggle_query(20));
  const std::vector<int> want{13, 20};
  ASSERT_EQ(s.queries(), want);
  ASSERT_TRUE(s.set_head(2)) << s.error();
  EXPECT_EQ(s.queries(), want);
  test::TempDir dir;
  std::string ids;
  for (int j = 0; j < 32; ++j) ids += (j == 0 ? "" : ",") + std::to_string(j / 8);
  const std::string docs = test::write_file(dir.file("docs.csv"), ids + "\n");
  ASSERT_TRUE(s.set_mod_files("", docs)) << s.error();
  EXPECT_TRUE(has_mask_mods(s.problem()));
  EXPECT_EQ(s.queries(), want);
}

TEST(Session, OutOfRangeRandomFieldsAreRefusedWithTheReason) {
  Session c(test::cpu_viewer_options());
  EXPECT_FALSE(c.load_random(0, 8, 8, 1));
  EXPECT_NE(c.error().find("N must be at least 1"), std::string::npos) << c.error();
  EXPECT_FALSE(c.load_random(kCpuMaxTokens + 1, 8, 8, 1));
  EXPECT_NE(c.error().find("CPU limit"), std::string::npos) << c.error();
  EXPECT_FALSE(c.load_random(8, 0, 8, 1));
  EXPECT_NE(c.error().find("d_k must be 1..1024, got 0"), std::string::npos) << c.error();
  EXPECT_FALSE(c.load_random(8, 8, kMaxHeadDim + 1, 1));
  EXPECT_NE(c.error().find("d_v must be 1..1024, got 1025"), std::string::npos) << c.error();
  EXPECT_TRUE(c.demo());
  // A new input's refusal, which the controls show beside Generate (and the bottom bar and the
  // state dump as every refusal); another action's is not one.
  EXPECT_TRUE(c.input_refused());
  EXPECT_FALSE(c.set_temperature_text("0"));
  EXPECT_FALSE(c.error().empty());
  EXPECT_FALSE(c.input_refused());
}

// The command the Tables section offers reproduces the problem on screen exactly.
TEST(Session, ReproduceCommandNamesTheProblemOnScreen) {
  Session c(test::cpu_viewer_options());
  EXPECT_EQ(c.reproduce_command(),
            "attnlab demo --query 2 --temperature 0.85 --mask none --backend cpu --format csv");
  ASSERT_TRUE(c.load_random(40, 8, 3, 12345678901234ull));
  ASSERT_TRUE(c.set_temperature(1.421));
  ASSERT_TRUE(c.set_mask(MaskKind::Causal));
  ASSERT_TRUE(c.set_query(7));
  EXPECT_EQ(c.reproduce_command(),
            "attnlab run --random 40 --dk 8 --dv 3 --seed 12345678901234 --query 7 --temperature 1.421 "
            "--mask causal --backend cpu --format csv");
}

// ---- your own inputs: files, as the command line reads them -------------------------------------

TEST(SessionFiles, LoadsFilesWithTokensAndAMaskFileAndKeepsTheLastValidStateOnRefusals) {
  const test::TempDir dir("attnlab-ctl-files");
  const std::string q = test::write_file(dir.path() / "q.csv", "1 0 0\n0 1 0\n");
  const std::string k = test::write_file(dir.path() / "k.csv", "1,0,0\n0,1,0\n0,0,1\n");
  const std::string v = test::write_file(dir.path() / "v.csv", "1,2\n3,4\n5,6\n");
  const std::string mask = test::write_file(dir.path() / "mask.csv", "0 -inf 0\n0 0 -inf\n");
  const std::string k4 = test::write_file(dir.path() / "k4.csv", "1 0 0 0\n0 1 0 0\n0 0 1 0\n");
  const std::string full = test::write_file(dir.path() / "full.csv", "0 0 0\n-inf -inf -inf\n");
  Session c(test::cpu_viewer_options());
  ASSERT_TRUE(c.load_files({q, k, v, mask, "a,b,x,y,z", ""})) << c.error();
  EXPECT_TRUE(c.from_files());
  EXPECT_FALSE(c.demo());
  EXPECT_EQ(c.problem().query_tokens(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(c.problem().key_tokens(), (std::vector<std::string>{"x", "y", "z"}));
  EXPECT_EQ(c.problem().mask, MaskKind::Custom);
  ASSERT_NE(c.stage_matrix(3), nullptr);
  EXPECT_EQ((*c.stage_matrix(3))(0, 1), 0.f);
  EXPECT_EQ((*c.stage_matrix(3))(1, 2), 0.f);
  EXPECT_NE(c.reproduce_command().find("--q " + q + " --k " + k + " --v " + v + " --tokens a,b,x,y,z"),
            std::string::npos)
      << c.reproduce_command();
  EXPECT_NE(c.reproduce_command().find("--mask " + mask), std::string::npos) << c.reproduce_command();
  // Causal with 2 queries of 3 keys: the queries are the last two positions (query 0 sees keys 0, 1).
  ASSERT_TRUE(c.set_mask(MaskKind::Causal)) << c.error();
  EXPECT_EQ(c.problem().mask, MaskKind::Causal);
  EXPECT_EQ(mask_matrix(c.problem())(0, 2), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(mask_matrix(c.problem())(0, 1), 0.f);
  ASSERT_TRUE(c.set_mask(MaskKind::None));
  ASSERT_TRUE(c.set_mask(MaskKind::Custom));
  // Refusals, each with the command line's message; the problem on screen stays.
  EXPECT_FALSE(c.load_files({q, k4, v, "", "", ""}));
  EXPECT_NE(c.error().find("K has 4 columns but Q has 3"), std::string::npos) << c.error();
  EXPECT_FALSE(c.load_files({q, k, v, full, "", ""}));
  EXPECT_NE(c.error().find("fully masked"), std::string::npos) << c.error();
  EXPECT_FALSE(c.load_files({q, k, (dir.path() / "missing.csv").string(), "", "", ""}));
  EXPECT_NE(c.error().find("missing.csv"), std::string::npos) << c.error();
  EXPECT_TRUE(c.input_refused()) << "files that do not read: beside Load, not the temperature";
  EXPECT_FALSE(c.load_files({q, k, "", "", "", ""}));
  EXPECT_NE(c.error().find("missing --v"), std::string::npos) << c.error();
  EXPECT_EQ(c.problem().key_tokens(), (std::vector<std::string>{"x", "y", "z"}));
  EXPECT_EQ(c.problem().mask, MaskKind::Custom);
  // Back to the demo: the custom mask goes with the files.
  ASSERT_TRUE(c.load_demo());
  EXPECT_EQ(c.problem().mask, MaskKind::None);
  EXPECT_FALSE(c.has_custom_mask());
}

TEST(SessionFiles, CommandLineFilesOpenTheViewerOnThem) {
  const test::TempDir dir("attnlab-ctl-files2");
  const float qv[] = {1, 0, 0, 1, 1, 1};
  const std::string qnpy = test::npy_bytes(test::npy_dict("(3, 2)"),
                                           std::string_view(reinterpret_cast<const char*>(qv), sizeof qv));
  ViewerOptions o = parse_viewer_args({"--q", test::write_file(dir.path() / "q.npy", qnpy),
                                       "--k", test::write_file(dir.path() / "k.csv", "1 0\n0 1\n1 1\n"),
                                       "--v", test::write_file(dir.path() / "v.csv", "1\n2\n3\n"),
                                       "--mask", "causal", "--backend", "cpu"});
  Session c(o);
  EXPECT_TRUE(c.from_files());
  EXPECT_EQ(c.n(), 3);
  EXPECT_EQ(c.problem().mask, MaskKind::Causal);
  EXPECT_EQ((*c.stage_matrix(3))(0, 2), 0.f);
  EXPECT_THROW(Session(parse_viewer_args({"--mask", "m.csv", "--backend", "cpu"})), InputError);
  EXPECT_THROW(parse_viewer_args({"--q", "a", "--k", "b", "--v", "c", "--random", "8"}), InputError);
}

// A mask file and token labels go with random inputs as with files, as `attnlab run --random N`
// takes them (the viewer had refused both); on the demo they are still refused, naming both inputs.
TEST(SessionFiles, RandomInputsTakeAMaskFileAndTokenLabels) {
  const test::TempDir dir("attnlab-ctl-random-mask");
  const std::string mask = test::write_file(dir.path() / "m.csv", "0 -inf -inf\n0 0 -inf\n0 0 0\n");
  Session c(parse_viewer_args({"--random", "3", "--dk", "4", "--dv", "2", "--mask", mask, "--tokens", "a,b,c",
                               "--backend", "cpu"}));
  EXPECT_EQ(c.problem().mask, MaskKind::Custom);
  EXPECT_EQ(c.problem().query_tokens(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ((*c.stage_matrix(3))(0, 1), 0.f);
  EXPECT_GT((*c.stage_matrix(3))(1, 0), 0.f);
  // The same problem as the CLI's: its random inputs under the file's mask.
  Problem cli = random_problem(3, 4, 2, 0);
  apply_mask_spec(cli, mask);
  EXPECT_EQ(c.problem().custom_mask(), cli.custom_mask());
  EXPECT_EQ(c.problem().q(), cli.q());
  // Several heads: the head shown carries them too.
  Session h(parse_viewer_args({"--random", "3", "--dk", "4", "--heads", "2", "--head", "1", "--mask", mask,
                               "--tokens-file", test::write_file(dir.path() / "t.txt", "x\ny\nz\n"), "--backend", "cpu"}));
  EXPECT_EQ(h.problem().mask, MaskKind::Custom);
  EXPECT_EQ(h.problem().key_tokens(), (std::vector<std::string>{"x", "y", "z"}));
  // A mask of the wrong shape is the CLI's refusal.
  EXPECT_THROW(Session(parse_viewer_args({"--random", "4", "--mask", mask, "--backend", "cpu"})), InputError);
  EXPECT_EQ(test::message_of<InputError>([] { parse_viewer_args({"--tokens", "a,b"}); }),
            "--tokens and --tokens-file label file or random inputs: add --q, --k and --v, or --random N");
}

// Every message the viewer shows follows the UI language, the core's refusals included.
TEST(Session, RefusalsReadInTheUiLanguage) {
  Session c(test::cpu_viewer_options());
  EXPECT_FALSE(c.set_temperature_text("abc"));
  EXPECT_EQ(c.error(), "temperature must be a finite number > 0, got 'abc'");
  EXPECT_EQ(c.error_text(Lang::Zh), "温度必须是大于 0 的有限数，当前为“abc”");
  EXPECT_FALSE(c.load_random(kCpuMaxTokens + 1, 8, 8, 1));
  EXPECT_NE(c.error_text(Lang::Zh).find("超过查看器在 CPU 上的上限"), std::string::npos) << c.error_text(Lang::Zh);
  EXPECT_FALSE(c.set_query(99));
  EXPECT_EQ(c.error_text(Lang::Zh), "查询 99 超出范围 0..4");
}

// A temperature change at the same N reuses the stage buffers of the trace it replaces (the two
// traces alternate), in sync mode as on the worker: no fresh allocation per redraw.
TEST(Session, RedrawsReuseTheReplacedTracesBuffers) {
  const ViewerOptions o = random_300();
  for (bool async : {false, true}) {
    Session c(o, async);
    const float* first = c.trace().weights.data();
    ASSERT_TRUE(c.set_temperature(0.7));
    c.wait();
    ASSERT_TRUE(c.set_temperature(0.9));
    c.wait();
    EXPECT_EQ(c.trace().weights.data(), first) << (async ? "async" : "sync");
  }
}

// A temperature or mask change runs the same inputs again: the new problem on screen shares Q, K,
// V, the labels and the mask values with the one before (no matrix is copied); a new source
// brings new inputs.
TEST(Session, ATemperatureOrMaskChangeCopiesNoInput) {
  const ViewerOptions o = random_300();
  for (bool async : {false, true}) {
    Session c(o, async);
    const ProblemInputs* first = c.problem().inputs();
    const float* q = c.problem().q().data();
    ASSERT_TRUE(c.set_temperature(0.7));
    c.wait();
    EXPECT_EQ(c.problem().temperature, 0.7);
    EXPECT_EQ(c.problem().inputs(), first) << (async ? "async" : "sync");
    ASSERT_TRUE(c.set_mask(MaskKind::Causal));
    c.wait();
    EXPECT_EQ(c.problem().mask, MaskKind::Causal);
    EXPECT_EQ(c.problem().inputs(), first);
    EXPECT_EQ(c.problem().q().data(), q);
    ASSERT_TRUE(c.load_random(300, 8, 4, 99));
    c.wait();
    EXPECT_NE(c.problem().inputs(), first);
  }
}

// [ and ] step from the temperature asked for last, not from the one on screen: a slider move
// whose run has not been adopted yet (it is queued, in flight, or waiting for poll) is not undone
// by a key press. Several presses in one frame are one run.
TEST(SessionAsync, TheKeysStepFromTheSlidersTemperatureWhileItsRunIsOnItsWay) {
  Session c(test::cpu_viewer_options(), true);
  const double on_screen = c.problem().temperature;
  ASSERT_TRUE(c.set_temperature(2.0));  // the slider; nothing adopted until poll()
  EXPECT_EQ(c.problem().temperature, on_screen);
  c.queue_temperature_step(true);
  ASSERT_TRUE(c.apply_temperature_steps());
  EXPECT_DOUBLE_EQ(c.requested_temperature(), step_temperature(2.0, true));
  c.wait();
  EXPECT_DOUBLE_EQ(c.problem().temperature, step_temperature(2.0, true));
  // Two presses in one frame: two steps, one request.
  c.queue_temperature_step(false);
  c.queue_temperature_step(false);
  EXPECT_DOUBLE_EQ(c.requested_temperature(), step_temperature(2.0, true)) << "queued, not asked for yet";
  ASSERT_TRUE(c.apply_temperature_steps());
  c.wait();
  EXPECT_DOUBLE_EQ(c.problem().temperature, step_temperature(step_temperature(step_temperature(2.0, true), false), false));
  EXPECT_TRUE(c.apply_temperature_steps()) << "nothing queued: nothing to do";
}
