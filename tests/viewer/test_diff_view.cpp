// The A/B difference view's logic (viewer/views/diff/diff_view.h) and the session's B companion: the
// --diff parser (each refusal names its key or value, in both languages), applying a spec, the
// B − A map of a hand-made pair with masked cells, the top changes, the signed pooling, and on the
// demo through the real CPU backend: a temperature diff matches an independent computation, a
// query diff compares the selected rows, staged vs fused shows only the output and agrees to
// rounding, bf16 vs fp32 differs, B follows A's changes (sync and async).
#include "viewer_test_util.h"
#include "core/problem.h"
#include "tests/test_util.h"
#include "viewer/session/session.h"
#include "viewer/views/diff/diff_view.h"
#include "viewer/draw/layout.h"
#include "viewer/draw/pooling.h"
#include "viewer/app/state_dump.h"
#include "engine/registry.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

using namespace attnlab;
using namespace attnlab::viewer;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

InputError refusal(const std::string& spec) {
  try {
    parse_diff_spec(spec);
  } catch (const InputError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted '" << spec << "'";
  return InputError("accepted");
}

// The diff view of `spec` at `step` on the demo (CPU), computed synchronously.
struct Shown {
  Session c{test::cpu_viewer_options()};
  DiffView v;
  DiffView::Status status = DiffView::Status::NoSpec;
  Shown(const std::string& spec, int step) {
    c.set_companion(diff_companion(parse_diff_spec(spec)));
    status = v.update(c, step);
  }
};

}  // namespace

TEST(DiffView, ParsesEveryKey) {
  const DiffSpec d =
      parse_diff_spec("mask=causal, temperature=0.5,backend=cpu,variant=fused,precision=bf16,query=上下文");
  EXPECT_EQ(d.mask, MaskKind::Causal);
  EXPECT_EQ(d.temperature, 0.5);
  EXPECT_EQ(d.backend, "cpu");
  EXPECT_EQ(d.variant, Variant::Fused);
  EXPECT_EQ(d.precision, Precision::BF16);
  EXPECT_EQ(d.query, "上下文");
  EXPECT_EQ(diff_spec_text(d), "mask=causal,temperature=0.5,backend=cpu,variant=fused,precision=bf16,query=上下文");
  EXPECT_EQ(parse_diff_spec(diff_spec_text(d)), d);
  EXPECT_EQ(parse_diff_spec("T=2").temperature, 2.0);
  EXPECT_FALSE(parse_diff_spec("mask=none").empty());
}

TEST(DiffView, RefusalsNameTheKeyOrTheValue) {
  struct Case {
    const char* spec;
    Msg id;
    const char* names;
  };
  for (const Case& k : {Case{"", Msg::DiffEmpty, "KEY=VALUE"}, Case{"  ", Msg::DiffEmpty, "KEY=VALUE"},
                        Case{"mask", Msg::DiffItem, "'mask'"}, Case{"mask=none,", Msg::DiffItem, "''"},
                        Case{"colour=red", Msg::DiffKeyUnknown, "'colour'"},
                        Case{"mask=diagonal", Msg::DiffValue, "mask='diagonal'"},
                        Case{"temperature=0", Msg::DiffTemperature, "temperature='0'"},
                        Case{"temperature=abc", Msg::DiffTemperature, "temperature='abc'"},
                        Case{"backend=tpu", Msg::DiffValue, "backend='tpu'"},
                        Case{"variant=plain", Msg::DiffValue, "variant='plain'"},
                        Case{"precision=fp64", Msg::DiffValue, "precision='fp64'"},
                        Case{"query=", Msg::DiffQuery, "query=''"},
                        Case{"mask=none,mask=causal", Msg::DiffKeyTwice, "'mask'"}}) {
    SCOPED_TRACE(k.spec);
    const InputError e = refusal(k.spec);
    EXPECT_EQ(e.id, k.id);
    EXPECT_NE(std::string(e.what()).find(k.names), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    const std::string zh = render_message(e.id, e.args, Lang::Zh);
    EXPECT_NE(zh, e.what()) << "a Chinese text too";
    // No English words but the key, the value and the choices themselves.
    for (const char* word : {" or ", "takes", "number", "index", "invalid"})
      EXPECT_EQ(zh.find(word), std::string::npos) << zh;
  }
  // --diff without --view diff presets the diff view, checked all the same.
  EXPECT_TRUE(parse_viewer_args({"--diff", "mask=causal"}).views.diff.spec);
  EXPECT_THROW(parse_viewer_args({"--diff", "mask=diagonal"}), InputError);
  EXPECT_THROW(parse_viewer_args({"--view", "diff", "--diff", ""}), InputError);
  const ViewerOptions o = parse_viewer_args({"--view", "diff", "--diff", "temperature=0.5"});
  EXPECT_EQ(o.view, "diff");
  ASSERT_TRUE(o.views.diff.spec);
  EXPECT_EQ(o.views.diff.spec->temperature, 0.5);
}

TEST(DiffView, ApplyingASpecResolvesTheQuery) {
  const Problem p = demo_problem();
  RunSetting a;
  a.temperature = 0.85;
  a.query = 2;
  const RunSetting b = apply_diff(a, parse_diff_spec("query=权重,temperature=0.25"), p);
  EXPECT_EQ(b.query, 4);
  EXPECT_EQ(b.temperature, 0.25);
  EXPECT_TRUE(a.same_run(apply_diff(a, parse_diff_spec("query=0"), p)));
  EXPECT_FALSE(a.same_run(b));
  EXPECT_THROW(apply_diff(a, parse_diff_spec("query=你好"), p), InputError);
  EXPECT_THROW(apply_diff(a, parse_diff_spec("query=9"), p), InputError);
  // B's line marks what differs from A.
  const std::string text = setting_text(b, p, Lang::En, &a);
  EXPECT_NE(text.find("*T = 0.25"), std::string::npos) << text;
  EXPECT_NE(text.find("*query 权重 (#4)"), std::string::npos) << text;
  EXPECT_NE(text.find(" CPU"), std::string::npos);
  EXPECT_EQ(text.find("*CPU"), std::string::npos);
  EXPECT_NE(setting_text(a, p, Lang::Zh).find("掩码 无"), std::string::npos);
}

TEST(DiffView, MapOfAHandMadePair) {
  // 2 x 3; the mask blocks (row 0, col 2) in both runs; B masks (1, 0) alone (−inf logit).
  const float a[] = {1.0f, 2.0f, kNegInf, 0.5f, 4.0f, 3.0f};
  const float b[] = {1.5f, 2.0f, kNegInf, kNegInf, 1.0f, 3.25f};
  const float mask_a[] = {0, 0, kNegInf, 0, 0, 0};
  const float mask_b[] = {0, 0, kNegInf, kNegInf, 0, 0};
  const DiffMap m = diff_map(a, b, 2, 3, mask_a, mask_b, 2);
  EXPECT_EQ(m.masked, 2);
  EXPECT_TRUE(std::isnan(m.at(0, 2)));
  EXPECT_TRUE(std::isnan(m.at(1, 0)));
  EXPECT_FLOAT_EQ(m.at(0, 0), 0.5f);
  EXPECT_FLOAT_EQ(m.at(0, 1), 0.0f);
  EXPECT_FLOAT_EQ(m.at(1, 1), -3.0f);
  EXPECT_FLOAT_EQ(m.at(1, 2), 0.25f);
  EXPECT_DOUBLE_EQ(m.max_abs, 3.0);
  EXPECT_EQ(m.arg_row, 1);
  EXPECT_EQ(m.arg_col, 1);
  EXPECT_EQ(m.changed, 3);
  EXPECT_DOUBLE_EQ(m.mean_abs, (0.5 + 3.0 + 0.25) / 4);
  EXPECT_DOUBLE_EQ(symmetric_range(m).lo, -3.0);
  EXPECT_DOUBLE_EQ(symmetric_range(m).hi, 3.0);
  const std::vector<Change> top = top_changes(m, a, b, 2);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].row, 1);
  EXPECT_EQ(top[0].col, 1);
  EXPECT_DOUBLE_EQ(top[0].a, 4.0);
  EXPECT_DOUBLE_EQ(top[0].b, 1.0);
  EXPECT_DOUBLE_EQ(top[0].diff, -3.0);
  EXPECT_EQ(top[1].col, 0);
  EXPECT_EQ(top_changes(m, a, b, 10).size(), 3u) << "unchanged and masked cells are no changes";
  // Pooled into one pixel: the change of largest magnitude with its sign.
  AxisMap one;
  one.begin = {0};
  one.end = {2};
  AxisMap cols;
  cols.begin = {0};
  cols.end = {3};
  const std::vector<PooledCell> px = pool_signed(m, one, cols);
  ASSERT_EQ(px.size(), 1u);
  EXPECT_FALSE(px[0].masked);
  EXPECT_FLOAT_EQ(px[0].value, -3.0f);
  // An all-zero map: a non-empty range around 0.
  const DiffMap z = diff_map(a, a, 2, 3, nullptr, nullptr, 0);
  EXPECT_EQ(z.max_abs, 0);
  EXPECT_GT(symmetric_range(z).hi, 0);
  EXPECT_EQ(z.masked, 1) << "the −inf cell";
}

TEST(DiffView, TemperatureDiffMatchesAnIndependentComputation) {
  Shown s("temperature=0.5", 3);
  ASSERT_EQ(s.status, DiffView::Status::Ok);
  EXPECT_FALSE(s.v.query_diff());
  const Problem p = demo_problem();
  const MatrixF& a = s.c.trace().weights;
  // softmax(QKᵀ / √3 / 0.5) in double, row by row.
  double max_abs = 0;
  for (int i = 0; i < p.n(); ++i) {
    std::vector<double> l(p.m());
    double mx = -1e300, sum = 0;
    for (int j = 0; j < p.m(); ++j) {
      double dot = 0;
      for (int k = 0; k < p.d_k(); ++k) dot += static_cast<double>(p.q()(i, k)) * p.k()(j, k);
      l[j] = dot / std::sqrt(3.0) / 0.5;
      mx = std::max(mx, l[j]);
    }
    for (double& x : l) sum += (x = std::exp(x - mx));
    for (int j = 0; j < p.m(); ++j) {
      const double expect = l[j] / sum - a(i, j);
      EXPECT_NEAR(s.v.map().at(i, j), expect, 2e-6) << i << "," << j;
      max_abs = std::max(max_abs, std::abs(expect));
    }
  }
  EXPECT_NEAR(s.v.map().max_abs, max_abs, 2e-6);
  EXPECT_GT(max_abs, 0.05) << "T = 0.5 sharpens the rows visibly";
  // At step 1 the temperature changes nothing: B − A is exactly 0.
  DiffView v1;
  ASSERT_EQ(v1.update(s.c, 1), DiffView::Status::Ok);
  EXPECT_EQ(v1.map().max_abs, 0);
  EXPECT_TRUE(v1.top().empty());
}

// Beside each run the worker computes B − A of the step on screen for A's query: the view then
// computes nothing, and what it shows is what it would compute; another step or query it computes.
TEST(DiffView, TheWorkerComputesTheStepOnScreen) {
  for (const char* spec : {"temperature=0.5", "query=0"}) {
    SCOPED_TRACE(spec);
    Session c(test::cpu_viewer_options());
    c.set_companion(diff_companion(parse_diff_spec(spec)));
    c.set_step(3);
    ASSERT_TRUE(c.set_mask(MaskKind::Causal));  // a new run, for step 3
    DiffView v;
    ASSERT_EQ(v.update(c, 3), DiffView::Status::Ok);
    EXPECT_EQ(v.computed(), 0) << "the worker's";
    const auto own = step_diff(c.trace(), *b_trace_of(c), c.setting(), diff_of(c)->b_setting, diff_of(c)->spec.query.has_value(), 3);
    ASSERT_NE(own, nullptr);
    EXPECT_EQ(v.map().max_abs, own->map.max_abs);
    EXPECT_EQ(v.map().masked, own->map.masked);
    EXPECT_EQ(v.query_diff(), own->query_diff);
    ASSERT_EQ(v.top().size(), own->top.size());
    for (std::size_t k = 0; k < own->top.size(); ++k) EXPECT_EQ(v.top()[k].diff, own->top[k].diff) << k;
    ASSERT_EQ(v.update(c, 2), DiffView::Status::Ok);
    EXPECT_EQ(v.computed(), 1);
    ASSERT_TRUE(c.set_query(1));
    ASSERT_EQ(v.update(c, 3), DiffView::Status::Ok);
    EXPECT_EQ(v.computed(), 2) << "another query: the view's own";
  }
}

// A window with mask "none" blocks cells too: at steps 2 and 3 they are masked (they had been
// counted as unchanged weights of 0).
TEST(DiffView, MaskModsMaskTheirCellsWithMaskNone) {
  viewer::ViewerOptions o = test::cpu_random_options(16, 4, 4);
  o.mods.window = 2;
  o.mask_mods_given = true;
  Session c(o);
  ASSERT_EQ(c.problem().mask, MaskKind::None);
  c.set_companion(diff_companion(parse_diff_spec("temperature=0.5")));
  c.set_step(3);
  ASSERT_TRUE(c.set_temperature(0.9));
  DiffView v;
  ASSERT_EQ(v.update(c, 3), DiffView::Status::Ok);
  EXPECT_EQ(v.map().masked, 16 * 16 - (2 * 2 + 14 * 3));  // |i - j| < 2: three keys, two at the ends
  ASSERT_EQ(v.update(c, 1), DiffView::Status::Ok);
  EXPECT_EQ(v.map().masked, 0);  // the scores before the mask
}

TEST(DiffView, QueryDiffComparesTheSelectedRows) {
  Shown s("query=0", 3);
  ASSERT_EQ(s.status, DiffView::Status::Ok);
  EXPECT_TRUE(s.v.query_diff());
  EXPECT_EQ(b_trace_of(s.c), &s.c.trace()) << "the same run: nothing recomputed";
  const DiffMap& m = s.v.map();
  ASSERT_EQ(m.rows, 1);
  ASSERT_EQ(m.cols, 5);
  const MatrixF& w = s.c.trace().weights;
  for (int j = 0; j < 5; ++j) EXPECT_FLOAT_EQ(m.at(0, j), w(0, j) - w(2, j)) << j;
  const auto [va, vb] = s.v.values(s.c, 0, 1);
  EXPECT_FLOAT_EQ(static_cast<float>(va), w(2, 1));
  EXPECT_FLOAT_EQ(static_cast<float>(vb), w(0, 1));
  // A moves to another row: the map follows (B's row stays the spec's).
  ASSERT_TRUE(s.c.set_query(4));
  ASSERT_EQ(s.v.update(s.c, 3), DiffView::Status::Ok);
  EXPECT_FLOAT_EQ(s.v.map().at(0, 3), w(0, 3) - w(4, 3));
  // The spec's own row: B is A.
  ASSERT_TRUE(s.c.set_query(0));
  ASSERT_EQ(s.v.update(s.c, 3), DiffView::Status::Ok);
  EXPECT_TRUE(s.v.same_run());
  EXPECT_EQ(s.v.map().max_abs, 0);
}

// The query with another change: one row, B's row of B's run minus A's row of A's (the map had
// been the whole temperature change, the query left out while B's line named it).
TEST(DiffView, AQueryWithAnotherChangeComparesTheRowsOfTheTwoRuns) {
  Shown s("query=0,temperature=0.5", 3);
  ASSERT_EQ(s.status, DiffView::Status::Ok);
  EXPECT_TRUE(s.v.query_diff());
  EXPECT_FALSE(s.v.same_run());
  const Trace* b = b_trace_of(s.c);
  ASSERT_NE(b, nullptr);
  ASSERT_NE(b, &s.c.trace());
  const DiffMap& m = s.v.map();
  ASSERT_EQ(m.rows, 1);
  ASSERT_EQ(m.cols, 5);
  const MatrixF& wa = s.c.trace().weights;
  const MatrixF& wb = b->weights;
  for (int j = 0; j < 5; ++j) EXPECT_FLOAT_EQ(m.at(0, j), wb(0, j) - wa(2, j)) << j;
  const auto [va, vb] = s.v.values(s.c, 0, 1);
  EXPECT_FLOAT_EQ(static_cast<float>(va), wa(2, 1));
  EXPECT_FLOAT_EQ(static_cast<float>(vb), wb(0, 1));
  // B's row is the demo's row 0 at T = 0.5, not A's at 0.85.
  EXPECT_GT(std::abs(wb(0, 0) - wa(0, 0)), 1e-3);
}

TEST(DiffView, StagedAgainstFusedShowsTheOutputAndAgreesToRounding) {
  Shown s("variant=fused", 2);
  ASSERT_EQ(s.status, DiffView::Status::Ok);
  EXPECT_TRUE(s.v.output_only());
  EXPECT_EQ(s.v.step(), 4);
  ASSERT_NE(b_trace_of(s.c), nullptr);
  EXPECT_EQ(b_trace_of(s.c)->variant, Variant::Fused);
  EXPECT_FALSE(b_trace_of(s.c)->has_stages);
  EXPECT_EQ(s.v.map().cols, 2);
  EXPECT_LT(s.v.map().max_abs, 1e-5) << "the two kernels agree";
}

TEST(DiffView, Bf16AgainstFp32AndMaskDiffs) {
  Shown p("precision=bf16", 3);
  ASSERT_EQ(p.status, DiffView::Status::Ok);
  EXPECT_EQ(b_trace_of(p.c)->precision, Precision::BF16);
  EXPECT_GT(p.v.map().max_abs, 1e-4);
  EXPECT_LT(p.v.map().max_abs, 0.05);
  Shown m("mask=causal", 2);
  ASSERT_EQ(m.status, DiffView::Status::Ok);
  EXPECT_EQ(m.v.map().masked, 10) << "masked in B: no number there";
  EXPECT_EQ(m.v.map().max_abs, 0) << "the unmasked logits are the same";
  ASSERT_EQ(m.v.update(m.c, 3), DiffView::Status::Ok);
  EXPECT_EQ(m.v.map().masked, 0);
  EXPECT_NEAR(m.v.map().at(0, 0), 1.0 - m.c.trace().weights(0, 0), 1e-6) << "row 0 reads only itself";
}

TEST(DiffView, BFollowsAAndRefusalsAreKept) {
  Session c(test::cpu_viewer_options());
  DiffView v;
  EXPECT_EQ(v.update(c, 3), DiffView::Status::NoSpec);
  c.set_companion(diff_companion(parse_diff_spec("temperature=0.5")));
  ASSERT_TRUE(c.set_mask(MaskKind::Causal));
  ASSERT_NE(diff_of(c)->b_problem, nullptr);
  EXPECT_EQ(diff_of(c)->b_problem->mask, MaskKind::Causal) << "B is A's request with the spec applied";
  EXPECT_EQ(diff_of(c)->b_problem->temperature, 0.5);
  ASSERT_EQ(v.update(c, 3), DiffView::Status::Ok);
  EXPECT_EQ(v.map().at(0, 0), 0) << "row 0 has one key at either temperature";
  // Same run: a spec that changes nothing on the CPU.
  c.set_companion(diff_companion(parse_diff_spec("backend=cpu")));
  ASSERT_EQ(v.update(c, 3), DiffView::Status::Ok);
  EXPECT_TRUE(v.same_run());
  EXPECT_EQ(v.map().max_abs, 0);
  // check_diff: what --diff is refused with.
  EXPECT_THROW(check_diff(c, parse_diff_spec("query=你好")), InputError);
  if (!cuda_available()) {
    EXPECT_THROW(check_diff(c, parse_diff_spec("backend=cuda")), NoDeviceError);
  } else {
    EXPECT_THROW(check_diff(c, parse_diff_spec("backend=cuda,precision=bf16")), InputError);
  }
  // The state dump names the spec and the top changes.
  c.set_companion(diff_companion(parse_diff_spec("temperature=0.5")));
  ASSERT_EQ(v.update(c, 3), DiffView::Status::Ok);
  ViewSnapshot s;
  s.view = "diff";
  s.view_fields["diff"] = nlohmann::json::parse(v.state_json(c));
  const auto j = nlohmann::json::parse(state_json(c, s));
  EXPECT_EQ(j["view"], "diff");
  EXPECT_EQ(j["diff"]["spec"], "temperature=0.5");
  EXPECT_EQ(j["diff"]["top"].size(), static_cast<std::size_t>(DiffView::kTop));
  EXPECT_DOUBLE_EQ(j["diff"]["max_abs"], v.map().max_abs);
  // Leaving the view drops B.
  c.set_companion(nullptr);
  EXPECT_EQ(b_trace_of(c), nullptr);
  EXPECT_EQ(v.update(c, 3), DiffView::Status::NoSpec);
}

TEST(DiffView, AsyncBArrivesWithItsRun) {
  Session c(test::cpu_viewer_options(), true);
  c.set_companion(diff_companion(parse_diff_spec("temperature=2")));
  c.wait();
  DiffView v;
  ASSERT_EQ(v.update(c, 3), DiffView::Status::Ok);
  for (double t : {0.3, 1.1}) {
    c.set_temperature(t);
    c.wait();
    ASSERT_NE(diff_of(c)->b_problem, nullptr);
    EXPECT_EQ(diff_of(c)->b_problem->temperature, 2.0);
    EXPECT_EQ(c.problem().temperature, t);
    ASSERT_EQ(v.update(c, 3), DiffView::Status::Ok);
    EXPECT_GT(v.map().max_abs, 0.01) << t;
  }
}

// Over several blocks of cells (the parallel paths): the top changes are those of a full sort
// (ties: the lower index first), and the signed pooling keeps, per block, the value of largest
// magnitude with its sign, as max-pooling B − A and A − B and taking the larger would.
TEST(DiffView, LargeMapsTopChangesAndSignedPoolingMatchTheirDefinitions) {
  const int rows = 700, cols = 730;
  std::vector<float> a(static_cast<std::size_t>(rows) * cols), b(a.size());
  std::uint64_t x = 12345;
  const auto next = [&x] {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<float>((x >> 40) % 2001) / 1000.0f - 1.0f;  // few distinct values: ties
  };
  for (std::size_t i = 0; i < a.size(); ++i) {
    a[i] = next();
    b[i] = i % 97 == 0 ? a[i] : next();  // some cells unchanged
  }
  a[5] = b[5] = -std::numeric_limits<float>::infinity();  // masked in both
  const DiffMap m = diff_map(a.data(), b.data(), rows, cols, nullptr, nullptr, 1);
  std::vector<int> idx;
  for (int i = 0; i < rows * cols; ++i)
    if (!std::isnan(m.d[i]) && m.d[i] != 0) idx.push_back(i);
  std::stable_sort(idx.begin(), idx.end(), [&](int p, int q) { return std::abs(m.d[p]) > std::abs(m.d[q]); });
  const std::vector<Change> top = top_changes(m, a.data(), b.data(), 12);
  ASSERT_EQ(top.size(), 12u);
  for (int j = 0; j < 12; ++j) {
    EXPECT_EQ(top[j].row * cols + top[j].col, idx[j]) << j;
    EXPECT_EQ(top[j].diff, m.d[idx[j]]) << j;
  }
  const AxisMap rmap = map_axis(0, rows, 97, rows), cmap = map_axis(0, cols, 61, cols);
  const std::vector<PooledCell> got = pool_signed(m, rmap, cmap);
  std::vector<float> neg(m.d.size());
  for (std::size_t i = 0; i < neg.size(); ++i) neg[i] = -m.d[i];
  const std::vector<PooledCell> hi = pool_grid(m.d.data(), rows, cols, nullptr, 0, rmap, cmap, PoolMode::Max);
  const std::vector<PooledCell> lo = pool_grid(neg.data(), rows, cols, nullptr, 0, rmap, cmap, PoolMode::Max);
  ASSERT_EQ(got.size(), hi.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].masked, hi[i].masked) << i;
    if (!got[i].masked) EXPECT_EQ(got[i].value, lo[i].value > hi[i].value ? -lo[i].value : hi[i].value) << i;
  }
}

TEST(DiffView, TheFirstStepWhereTheSpecCanShow) {
  EXPECT_EQ(diff_first_step(parse_diff_spec("temperature=0.5")), 2);
  EXPECT_EQ(diff_first_step(parse_diff_spec("mask=causal,temperature=2")), 2);
  EXPECT_EQ(diff_first_step(parse_diff_spec("temperature=0.5,backend=cpu")), 1);
  EXPECT_EQ(diff_first_step(parse_diff_spec("precision=bf16")), 1);
}

// A diff of the temperature opens on step 2, unless the command line asked for a step: then that
// step, step 1 included; later draws follow the playback either way.
TEST(DiffView, AnExplicitStepIsWhereItOpens) {
  for (const bool given : {false, true}) {
    SCOPED_TRACE(given);
    std::vector<std::string> args = {"--view", "diff", "--diff", "temperature=0.5", "--backend", "cpu"};
    if (given) args.insert(args.end(), {"--step", "1"});
    const ViewerOptions o = parse_viewer_args(args);
    EXPECT_EQ(o.step_given, given);
    Session s(o);
    DiffView v(ViewContext{s, false, true, o.step_given}, o.views.diff);
    EXPECT_EQ(v.open_at(1), given ? 1 : 2);
    EXPECT_EQ(v.open_at(1), 1) << "the playback's step after the first draw";
  }
}

#ifdef ATTNLAB_VIEW_BINARY
// A temperature diff opens on the logits, where B − A is not 0 (at step 1 it is 0 by
// construction); the view spans the centre and the right column, as the information panel is
// not drawn beside it.
TEST(DiffView, ATemperatureDiffOpensOnTheLogitsAndUsesTheWindowsWidth) {
  const test::TempDir dir("attnlab-diff-shots");
  for (const std::string lang : {"en", "zh"}) {
    SCOPED_TRACE(lang);
    const test::ViewShot s = test::view_shot(dir, "diff-" + lang, {"--view", "diff", "--diff", "temperature=0.5",
                                                                   "--random", "64", "--lang", lang, "--size", "1920x1080"});
    ASSERT_EQ(s.code, 0) << s.err;
    const nlohmann::json& d = s.state["diff"];
    EXPECT_EQ(d["status"], "ok");
    EXPECT_EQ(d["step"], 2);
    EXPECT_EQ(s.state["step"], 2);
    EXPECT_GT(d["max_abs"].get<double>(), 0);
    const Layout l = compute_layout(1920, 1080, s.state["font_px"].get<float>());
    EXPECT_FLOAT_EQ(d["panel"]["x"].get<float>(), l.heatmap.x);
    EXPECT_FLOAT_EQ(d["panel"]["x"].get<float>() + d["panel"]["w"].get<float>(), l.info.right());
  }
}
#endif
