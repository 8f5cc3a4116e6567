// The benchmark engine (engine/bench.h) that `attnlab bench` and the viewer's Performance view share:
// the plan lists every combination in list order with the baseline row beside its staged case,
// the FLOP and byte rules, a small CPU sweep timed and checked against fp64 with CUDA cases
// skipped with the registry's reason where no device answers, the case hooks before and after
// every case, bench's CSV columns, Cancel between cases and between repetitions (a repetition is
// timed whole or not at all), the list parsing both faces use, and the machine probes.
#include "core/backend.h"
#include "engine/bench.h"
#include "core/problem.h"
#include "core/verify.h"
#include "cpu/cpu_backend.h"
#include "cpu/fused_backward.h"
#include "engine/registry.h"
#include "engine/bench_report.h"
#include "test_util.h"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

namespace attnlab {
namespace {

bench::Spec small_spec() {
  bench::Spec s;
  s.backends = {"cpu", "cuda"};
  s.variants = {"staged", "fused"};
  s.precisions = {"fp32"};
  s.masks = {"none"};
  s.ns = {32, 64};
  s.ds = {8};
  s.heads = {1};
  s.repeat = 2;
  s.warmup = 0;
  return s;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

TEST(BenchEngine, PlanListsEveryCombinationInListOrderWithTheBaselineBesideItsStagedCase) {
  bench::Spec s = small_spec();
  s.baseline = true;
  const std::vector<bench::Result> plan = bench::plan(s);
  // cpu: staged (+plain) and fused at 2 N; cuda: staged and fused at 2 N.
  ASSERT_EQ(plan.size(), 2u * 3 + 2u * 2);
  EXPECT_EQ(plan[0].c.label(), "cpu staged fp32 none heads=1 n=32 d=8");
  EXPECT_EQ(plan[1].c.variant, "plain");
  EXPECT_EQ(plan[1].c.n, 32);
  EXPECT_EQ(plan[2].c.n, 64);
  EXPECT_EQ(plan.back().c.label(), "cuda fused fp32 none heads=1 n=64 d=8");
  for (const auto& r : plan) {
    EXPECT_FALSE(r.ran);
    EXPECT_TRUE(r.reason.empty());
  }
}

TEST(BenchEngine, FlopAndByteRules) {
  bench::Case c{"cpu", "fused", "fp32", "none", 2, 128, 16};
  EXPECT_DOUBLE_EQ(bench::case_flops(c), 4.0 * 2 * 128 * 128 * 16);
  c.mask = "causal";
  EXPECT_DOUBLE_EQ(bench::case_flops(c), 2.0 * 2 * 128 * 128 * 16);
  double lo = 0, moved = 0;
  bench::case_bytes(c, lo, moved);
  const double hn = 2.0 * 128;
  EXPECT_DOUBLE_EQ(lo, 4 * hn * 3 * 16 + 4 * hn * 16);
  EXPECT_DOUBLE_EQ(moved, lo) << "fused moves the minimum";
  c.precision = "bf16";
  bench::case_bytes(c, lo, moved);
  EXPECT_DOUBLE_EQ(lo, 2 * hn * 3 * 16 + 4 * hn * 16) << "bf16 inputs are 2 bytes, the output fp32";
  c.variant = "staged";
  c.precision = "fp32";
  bench::case_bytes(c, lo, moved);
  double stages = 0;
  for (const auto& st : bench::staged_stage_bytes(c)) stages += st.bytes;
  EXPECT_DOUBLE_EQ(moved, stages);
  EXPECT_GT(moved, 4 * lo) << "the staged chain moves N^2 bytes";
  // Decode shapes: the score matrices are heads x q x n, K and V those of the key/value heads
  // (2 query rows, 128 keys of one key/value head here): Q, K, V, O and seven score matrices.
  bench::Case one = c;
  one.queries = 1;
  one.kv_heads = 1;
  bench::case_bytes(one, lo, moved);
  EXPECT_DOUBLE_EQ(moved, 4.0 * (2 * (2 + 128) * 16 + 7 * (2 * 128)));
  // The backward: Q, K, V, O and dO read once, dQ, dK and dV written once, staged and fused alike.
  bench::Case b{"cpu", "fused", "fp32", "causal", 4, 256, 32, 0, 2};
  b.pass = "backward";
  bench::case_bytes(b, lo, moved);
  const double q_side = 4.0 * 256 * 32, kv_side = 2.0 * 256 * 32;
  EXPECT_DOUBLE_EQ(lo, 4 * (4 * q_side + 4 * kv_side)) << "four query-side and four key-side matrices";
  EXPECT_DOUBLE_EQ(moved, lo) << "the fused backward moves the minimum";
  // The staged backward's passes (staged_backward_bytes): 16 over the (4 x 256, 256) score
  // matrices, the cap adding 6 and a bias 3; Q, K, V, O, dO, dQ, dK, dV and D beside them.
  b.variant = "staged";
  const double scores = 4.0 * 256 * 256, vectors = 6 * q_side + 4 * kv_side + 4.0 * 256;
  bench::case_bytes(b, lo, moved);
  EXPECT_DOUBLE_EQ(moved, 4 * (16 * scores + vectors));
  b.score_mod = "alibi+softcap:30";
  EXPECT_DOUBLE_EQ(bench::staged_backward_bytes(b), 4 * (25 * scores + vectors));
  b.rope = "10000";
  EXPECT_DOUBLE_EQ(bench::staged_backward_bytes(b), 4 * (25 * scores + vectors + 4 * (q_side + kv_side)));
  b.variant = "fused";
  b.backend = "cuda";
  b.precision = "bf16";
  bench::case_bytes(b, lo, moved);
  EXPECT_DOUBLE_EQ(lo, 2 * (2 * q_side + 2 * kv_side) + 4 * (2 * q_side + 2 * kv_side))
      << "Q, dO, K and V in bf16; O and the gradients fp32";
}

TEST(BenchEngine, SmallCpuSweepIsTimedCheckedAndReportedThroughTheHooks) {
  const bench::Spec s = small_spec();
  std::vector<bench::Result> results = bench::plan(s);
  std::string reason;
  const bool cuda = cuda_available(&reason);
  std::vector<int> started(results.size(), 0), finished(results.size(), 0);
  bench::Hooks hooks;
  std::size_t last_done = 0;
  hooks.on_case = [&](std::size_t i, std::size_t done, std::size_t total, bool fin) {
    EXPECT_EQ(total, results.size());
    (fin ? finished : started).at(i)++;
    if (fin) {
      EXPECT_EQ(done, last_done + 1);
      last_done = done;
    }
  };
  std::ostringstream log;
  hooks.log = &log;
  const bench::Outcome out = bench::run_sweep(results, s, cuda, reason, hooks);
  EXPECT_FALSE(out.cancelled);
  EXPECT_FALSE(out.device_failure);
  for (std::size_t i = 0; i < results.size(); ++i) {
    SCOPED_TRACE(results[i].c.label());
    EXPECT_EQ(started[i], 1);
    EXPECT_EQ(finished[i], 1);
    const bench::Result& r = results[i];
    if (r.c.backend == "cpu" || cuda) {
      ASSERT_TRUE(r.ran) << r.reason.en;
      EXPECT_EQ(r.repeats, 2);
      ASSERT_EQ(r.ms.size(), 2u);
      EXPECT_LE(r.min_ms, r.median_ms);
      EXPECT_LE(r.median_ms, r.max_ms);
      EXPECT_NEAR(r.tflops, r.flops / (r.median_ms * 1e-3) / 1e12, 1e-9 * r.flops);
      EXPECT_LT(r.rel_err, 1e-5);
      EXPECT_EQ(r.reference.en, "fp64 full");
      EXPECT_EQ(r.reference.text(Lang::Zh), "fp64 全部");
      EXPECT_GT(r.peak_bytes, 0u);
      EXPECT_EQ(r.stages.size(), r.c.variant == "staged" ? 4u : 0u);
    } else {
      EXPECT_FALSE(r.ran);
      EXPECT_EQ(r.reason.en, "no CUDA device: " + reason);
    }
  }
  // One progress line per case, as `attnlab bench` prints them.
  EXPECT_EQ(lines_of(log.str()).size(), results.size());
  EXPECT_EQ(log.str().rfind("[1/8] cpu staged fp32 none heads=1 n=32 d=8: ", 0), 0u) << log.str();

  const std::vector<std::string> csv = lines_of(bench::render_csv(results));
  ASSERT_EQ(csv.size(), results.size() + 1);
  EXPECT_EQ(csv[0],
            "backend,variant,precision,mask,heads,n,d,status,median_ms,min_ms,max_ms,tflops,gbs,"
            "min_bytes,moved_bytes,peak_bytes,rel_err,reference,queries,kv_heads,kv_bytes,kv_gbs,score_mod,mask_mod,rope,pass,splits,reason");
  EXPECT_EQ(csv[1].rfind("cpu,staged,fp32,none,1,32,8,ok,", 0), 0u) << csv[1];
}

// The report's rows, built by hand: a skipped row has the header's fields (its queries, kv_heads,
// modifications and reason in their own columns), and staged_over_plain is each staged case's
// median over the --baseline row of the same case (its mask too), staged over plain.
TEST(BenchEngine, TheReportsRowsKeepTheirColumnsAndEachStagedCaseItsOwnBaseline) {
  std::vector<bench::Result> results;
  const auto ran = [&](const char* variant, const char* mask, double ms) {
    bench::Result r;
    r.c = bench::Case{"cpu", variant, "fp32", mask, 2, 64, 16};
    r.ran = true;
    r.median_ms = r.min_ms = r.max_ms = ms;
    r.ms = {ms};
    r.repeats = 1;
    results.push_back(r);
  };
  ran("staged", "none", 6);
  ran("staged", "causal", 10);
  ran("plain", "none", 3);
  ran("plain", "causal", 4);
  bench::Result skipped;
  skipped.c = bench::Case{"cpu", "fused", "fp32", "causal", 2, 64, 16};
  skipped.c.queries = 1;
  skipped.c.kv_heads = 1;
  skipped.c.mask_mod = "window:8";
  skipped.reason = Message{Msg::None, {}, "needs more memory than there is"};
  results.push_back(skipped);

  const std::vector<std::string> csv = lines_of(bench::render_csv(results));
  ASSERT_EQ(csv.size(), results.size() + 1);
  const auto fields = [](const std::string& line) {
    std::vector<std::string> f(1);
    for (char ch : line) {
      if (ch == ',') f.emplace_back();
      else f.back() += ch;
    }
    return f;
  };
  const std::vector<std::string> header = fields(csv[0]);
  const auto column = [&](const std::string& name) {
    return static_cast<std::size_t>(std::find(header.begin(), header.end(), name) - header.begin());
  };
  for (std::size_t i = 1; i < csv.size(); ++i) EXPECT_EQ(fields(csv[i]).size(), header.size()) << csv[i];
  const std::vector<std::string> row = fields(csv.back());
  EXPECT_EQ(row[column("status")], "skipped");
  EXPECT_EQ(row[column("queries")], "1");
  EXPECT_EQ(row[column("kv_heads")], "1");
  EXPECT_EQ(row[column("mask_mod")], "window:8");
  EXPECT_EQ(row[column("pass")], "forward");
  EXPECT_EQ(row[column("reason")], "needs more memory than there is");

  const auto j = nlohmann::json::parse(bench::render_json(bench::Machine{}, results, small_spec()));
  ASSERT_EQ(j["cases"].size(), 4u);
  EXPECT_DOUBLE_EQ(j["cases"][0]["staged_over_plain"].get<double>(), 2.0);  // 6 / 3
  EXPECT_DOUBLE_EQ(j["cases"][1]["staged_over_plain"].get<double>(), 2.5);  // 10 / 4, the causal baseline
  EXPECT_FALSE(j["cases"][2].contains("staged_over_plain"));
  ASSERT_EQ(j["skipped"].size(), 1u);
}

TEST(BenchEngine, CancelBetweenCasesLeavesTheRestNotRun) {
  bench::Spec s = small_spec();
  s.backends = {"cpu"};
  std::vector<bench::Result> results = bench::plan(s);
  std::atomic<bool> cancel{false};
  bench::Hooks hooks;
  hooks.cancel = &cancel;
  hooks.on_case = [&](std::size_t, std::size_t done, std::size_t, bool fin) {
    if (fin && done == 1) cancel = true;
  };
  const bench::Outcome out = bench::run_sweep(results, s, false, "none", hooks);
  EXPECT_TRUE(out.cancelled);
  int ran = 0;
  for (const auto& r : results) {
    ran += r.ran;
    if (!r.ran) {
      EXPECT_TRUE(r.reason.empty()) << "not reached is not skipped";
      EXPECT_TRUE(r.ms.empty());
    }
  }
  EXPECT_EQ(ran, 1);
}

TEST(BenchEngine, CancelStopsTheCpuBackendBetweenRepetitions) {
  const Problem p = random_problem(64, 8, 8, 1);
  std::atomic<bool> cancel{true};
  for (Variant v : {Variant::Staged, Variant::Fused}) {
    RunOptions o;
    o.variant = v;
    o.keep_stages = false;
    o.cancel = &cancel;
    EXPECT_THROW(make_cpu_backend()->bench(p, o, 1, 3), Cancelled);
    cancel = false;
    const BenchSample s = make_cpu_backend()->bench(p, o, 1, 3);
    EXPECT_EQ(s.ms.size(), 3u) << "an unset flag changes nothing";
    cancel = true;
  }
}

TEST(BenchEngine, CancelInsideACaseLeavesItOutRatherThanHalfTimed) {
  bench::Spec s = small_spec();
  s.backends = {"cpu"};
  s.repeat = 50;
  std::vector<bench::Result> results = bench::plan(s);
  std::atomic<bool> cancel{false};
  bench::Hooks hooks;
  hooks.cancel = &cancel;
  // Set as the second case starts: its bench() sees it before its first repetition.
  hooks.on_case = [&](std::size_t, std::size_t done, std::size_t, bool fin) {
    if (!fin && done == 1) cancel = true;
  };
  const bench::Outcome out = bench::run_sweep(results, s, false, "none", hooks);
  EXPECT_TRUE(out.cancelled);
  int ran = 0;
  for (const auto& r : results) {
    ran += r.ran;
    if (!r.ran) EXPECT_TRUE(r.ms.empty() && r.reason.empty() && r.repeats == 0);
  }
  EXPECT_EQ(ran, 1);
}

TEST(BenchEngine, ACaseAboveItsErrorBoundRanButIsInaccurate) {
  bench::Case c{"cpu", "fused", "fp32", "none", 1, 64, 16};
  EXPECT_EQ(bench::error_bound(c), 1e-5);
  c.precision = "bf16";
  EXPECT_EQ(bench::error_bound(c), 2e-2);
  // A sweep whose cases are all within their bounds reports none; the CSV says which case is off.
  bench::Spec s = small_spec();
  s.backends = {"cpu"};
  std::vector<bench::Result> results = bench::plan(s);
  const bench::Outcome out = bench::run_sweep(results, s, false, "", {});
  EXPECT_EQ(out.inaccurate, 0);
  for (const bench::Result& r : results) EXPECT_FALSE(r.inaccurate) << r.c.label();
  results[0].inaccurate = true;
  const std::vector<std::string> csv = lines_of(bench::render_csv(results));
  EXPECT_EQ(csv[1].rfind("cpu,staged,fp32,none,1,32,8,inaccurate,", 0), 0u) << csv[1];
  EXPECT_EQ(csv[2].find("inaccurate"), std::string::npos) << csv[2];
}

// One query over keys whose values cancel (d = 1: the output of seed 4 is near 1e-4 while its
// terms are near 1): every rounding scales with the sum of |terms|, so the error is taken
// relative to the largest Σ P|V| and a correct kernel is not "inaccurate".
TEST(BenchEngine, TheErrorIsRelativeToTheSumsBehindTheOutput) {
  bench::Spec s = small_spec();
  s.backends = {"cpu"};
  s.variants = {"staged", "fused", "decode"};
  s.precisions = {"fp32", "bf16"};
  s.ns = {16, 1024};
  s.ds = {1};
  s.queries = {1};
  s.seed = 4;
  // The case's problem cancels: its output is far below the sums behind it.
  const Problem p = random_problem(1, 1024, 1, 1, 4, 1, 1);
  const TraceD ref = reference_fp64(p);
  ASSERT_LT(100 * ref.output.cwiseAbs().maxCoeff(), max_weighted_abs_v(p, ref));
  std::vector<bench::Result> results = bench::plan(s);
  const bench::Outcome out = bench::run_sweep(results, s, false, "", {});
  EXPECT_EQ(out.inaccurate, 0);
  for (const bench::Result& r : results) {
    ASSERT_TRUE(r.ran) << r.c.label() << ": " << r.reason.en;
    EXPECT_GT(r.rel_err, 0.0) << r.c.label();
    EXPECT_LE(r.rel_err, bench::error_bound(r.c)) << r.c.label();
  }
}

TEST(BenchEngine, ListsAndSpecAreChecked) {
  EXPECT_EQ(bench::int_list("--n", "256,512", 1 << 20), (std::vector<int>{256, 512}));
  EXPECT_THROW(bench::int_list("--n", "64,,128", 1 << 20), InputError);
  EXPECT_THROW(bench::int_list("--n", "0", 1 << 20), InputError);
  EXPECT_THROW(bench::int_list("--n", "64,64", 1 << 20), InputError);
  EXPECT_THROW(bench::word_list("--mask", "none,none"), InputError);
  bench::Spec s = small_spec();
  EXPECT_NO_THROW(bench::check_spec(s));
  s.variants = {"plain"};
  EXPECT_THROW(bench::check_spec(s), InputError);
  s = small_spec();
  s.masks = {"diagonal"};
  EXPECT_THROW(bench::check_spec(s), InputError);
  s = small_spec();
  s.repeat = 0;
  EXPECT_THROW(bench::check_spec(s), InputError);
}

TEST(BenchEngine, TimeBudgetSkipsWithTheEstimate) {
  bench::Spec s = small_spec();
  s.max_seconds = 1;
  const bench::Case big{"cpu", "staged", "fp32", "none", 64, 16384, 128};
  const std::string why = bench::skip_reason(big, s, false, "none").en;
  EXPECT_NE(why.find("would take ~"), std::string::npos) << why;
  EXPECT_NE(why.find("--max-seconds 1"), std::string::npos) << why;
  EXPECT_EQ(bench::skip_reason({"cpu", "fused", "fp32", "none", 1, 64, 8}, s, false, "none").en, "");
  EXPECT_EQ(bench::skip_reason({"cuda", "staged", "bf16", "none", 1, 64, 8}, s, true, "").en,
            "bf16 on cuda runs only on the fused and decode kernels");
}

// The estimate counts the warm-up runs beside the timed ones, and a budget under a second prints
// its estimate in two digits, not as "~0 s".
TEST(BenchEngine, TimeBudgetCountsWarmUpRuns) {
  bench::Spec s = small_spec();
  s.repeat = 2;
  s.warmup = 2;
  const bench::Case c{"cpu", "staged", "fp32", "none", 8, 1024, 64};
  const double per_run = bench::case_flops(c) / bench::cpu_rate_guess(c.variant);
  s.max_seconds = per_run * 3;  // over the timed runs alone, under the timed and warm-up runs
  const std::string why = bench::skip_reason(c, s, false, "none").en;
  ASSERT_EQ(why.rfind("would take ~", 0), 0u) << why;
  const double shown = std::strtod(why.c_str() + std::string("would take ~").size(), nullptr);
  EXPECT_NEAR(shown, per_run * 4, per_run * 4 * 0.05) << why;
  s.warmup = 0;
  EXPECT_EQ(bench::skip_reason(c, s, false, "none").en, "");
  // A small estimate keeps its digits.
  const bench::Case tiny{"cpu", "fused", "fp32", "none", 1, 256, 16};
  const double tiny_run = bench::case_flops(tiny) / bench::cpu_rate_guess(tiny.variant);
  s.repeat = 1;
  s.max_seconds = tiny_run / 2;
  const std::string small = bench::skip_reason(tiny, s, false, "none").en;
  ASSERT_EQ(small.rfind("would take ~", 0), 0u) << small;
  const double small_shown = std::strtod(small.c_str() + std::string("would take ~").size(), nullptr);
  EXPECT_NEAR(small_shown, tiny_run, tiny_run * 0.05) << small;
}

TEST(BenchEngine, CpuProbesMeasureSomething) {
  EXPECT_GT(bench::cpu_sgemm_probe_gflops(), 0.0);
  const bench::Ceilings c = bench::cpu_ceilings();
  EXPECT_GT(c.gemm_gflops, 0.0);
  if (c.note.empty()) EXPECT_GT(c.bandwidth_gbs, 0.0);
  EXPECT_FALSE(c.bandwidth_rule.empty());
  EXPECT_FALSE(c.gemm_rule.empty());
  // The compute roof is the FMA peak, the SGEMM probe a point that a roof cannot be under.
  EXPECT_GT(c.peak_gflops, 0.0);
  EXPECT_EQ(c.compute_gflops(), c.peak_gflops);
  EXPECT_FALSE(c.peak_rule.empty());
  // The kernels' register tile on cached operands: a rate, with loads, that a sum of FMA chains
  // in registers bounds (a wide margin: the two probes run at different moments).
  const double tile = bench::cpu_tile_peak_gflops();
  EXPECT_GT(tile, 0.0);
  EXPECT_LT(tile, 2.0 * c.peak_gflops);
  EXPECT_FALSE(std::string(bench::kCpuTileRule).empty());
  EXPECT_GT(bench::host_read_probe_all_cores(), 0.0);
  std::string reason;
  if (!cuda_available(&reason)) {
    const bench::Ceilings g = bench::cuda_ceilings();
    EXPECT_EQ(g.gemm_gflops, 0.0);
    EXPECT_EQ(g.note, "no CUDA device: " + reason);
  }
}

// Decode shapes: the last q of n positions, G key/value heads; their FLOPs count the visible pairs,
// their bytes read K and V once per key/value head; each combination of the lists is one case.
TEST(BenchEngine, DecodeShapesArePlannedCountedRunAndReported) {
  bench::Case c{"cpu", "decode", "fp32", "causal", 8, 4096, 64, 1, 2};
  EXPECT_EQ(c.label(), "cpu decode fp32 causal heads=8 n=4096 d=64 q=1 kv=2");
  EXPECT_DOUBLE_EQ(bench::case_flops(c), 4.0 * 8 * (4096.0 - 0.5) * 64);
  double lo = 0, moved = 0;
  bench::case_bytes(c, lo, moved);
  EXPECT_DOUBLE_EQ(lo, 4.0 * 8 * 64 + 4.0 * 2 * 4096 * 2 * 64 + 4.0 * 8 * 64);
  // A prefill keeps its rules: q = n and one key/value head per head are not a decode shape.
  bench::Case pre{"cpu", "fused", "fp32", "none", 2, 128, 16, 128, 2};
  EXPECT_FALSE(pre.decode_shape());
  EXPECT_EQ(pre.label(), "cpu fused fp32 none heads=2 n=128 d=16");

  bench::Spec s = small_spec();
  s.backends = {"cpu", "cuda"};
  s.variants = {"decode", "fused"};
  s.masks = {"causal"};
  s.ns = {3000};
  s.heads = {4};
  s.queries = {1, 5};
  s.kv_heads = {1, 3};
  std::vector<bench::Result> results = bench::plan(s);
  ASSERT_EQ(results.size(), 2u * 2 * 2 * 2);
  EXPECT_EQ(bench::skip_reason(results[2].c, s, true, "").en, "3 key/value heads do not divide 4 heads");
  // A split count above the keys is skipped, not run with fewer splits under its label.
  bench::Case too_many{"cpu", "decode", "fp32", "none", 1, 64, 16, 1, 0, 65};
  EXPECT_EQ(bench::skip_reason(too_many, s, true, "").en, "65 splits over 64 keys (at most one split per key)");
  too_many.splits = 64;
  EXPECT_EQ(bench::skip_reason(too_many, s, true, "").en, "");
  bench::Case cuda_dec{"cuda", "decode", "fp32", "none", 4, 3000, 8, 1, 1};
  EXPECT_EQ(bench::skip_reason(cuda_dec, s, true, "").en.rfind("the CUDA decode kernel takes d_k = d_v = 64 or 128", 0), 0u);
  // bf16 decode on CUDA: refused only for its shape, as fp32 is; a shape it takes runs.
  bench::Case cuda_dec16{"cuda", "decode", "bf16", "none", 4, 3000, 8, 1, 1};
  EXPECT_EQ(bench::skip_reason(cuda_dec16, s, true, "").en.rfind("the CUDA decode kernel takes d_k = d_v = 64 or 128", 0), 0u);
  cuda_dec16.d = 64;
  EXPECT_EQ(bench::skip_reason(cuda_dec16, s, true, "").en, "");
  cuda_dec.d = 64;
  EXPECT_EQ(bench::skip_reason(cuda_dec, s, true, "").en, "");
  bench::Case over{"cpu", "decode", "fp32", "none", 1, 30, 8, 31, 1};
  EXPECT_EQ(bench::skip_reason(over, s, true, "").en, "more queries than keys");
  std::string reason;
  const bool cuda = cuda_available(&reason);
  bench::run_sweep(results, s, cuda, reason);
  int ran = 0;
  for (const auto& r : results) {
    if (r.c.backend != "cpu" || r.c.g() == 3) continue;
    ASSERT_TRUE(r.ran) << r.c.label() << ": " << r.reason.en;
    EXPECT_FALSE(r.inaccurate) << r.c.label() << " " << r.rel_err;
    EXPECT_DOUBLE_EQ(r.kv_bytes, 4.0 * r.c.g() * 3000 * 2 * 8);
    EXPECT_GT(r.kv_gbs, 0.0);
    ++ran;
  }
  EXPECT_EQ(ran, 4);
  bench::Machine m;
  m.host_read_gbs = 10;
  const bench::Result& first = results[0];
  EXPECT_DOUBLE_EQ(bench::kv_read_fraction(m, first), first.kv_gbs / 10);
  const std::string table = bench::render_table(m, results, s);
  EXPECT_NE(table.find("decode: K+V of every key/value head read once"), std::string::npos) << table;
  EXPECT_NE(table.find("% of the read bandwidth"), std::string::npos) << table;
  EXPECT_EQ(table.find("(above it:"), std::string::npos) << table;
  // A rate above the probe's says why: a cache that fits in the last-level cache, else the load.
  m.host_read_gbs = first.kv_gbs / 2;
  m.cpu_llc_bytes = 512.0 * (1 << 20);
  std::string above = bench::render_table(m, results, s);
  EXPECT_NE(above.find("= 200 % of the read bandwidth (above it: these K+V fit in the host's 512 MiB last-level cache"),
            std::string::npos) << above;
  m.cpu_llc_bytes = first.kv_bytes / 2;
  above = bench::render_table(m, results, s);
  EXPECT_NE(above.find("= 200 % of the read bandwidth (above it: the probe may have run under load"), std::string::npos)
      << above;
  // The split count each decode case ran, though none was given (the kernel chose it).
  for (const auto& r : results)
    if (r.ran && r.c.variant == "decode") {
      EXPECT_GT(r.splits, 0) << r.c.label();
      EXPECT_EQ(r.kernel, "cpu split-KV decode splits=" + std::to_string(r.splits));
    }
  // The table's rows tell the shapes apart: q and kv have no column of their own.
  EXPECT_NE(table.find("  [q=1 kv=1]\n"), std::string::npos) << table;
  EXPECT_NE(table.find("  [q=5 kv=1]\n"), std::string::npos) << table;
  const std::vector<std::string> csv = lines_of(bench::render_csv(results));
  EXPECT_EQ(csv[0].substr(csv[0].size() - 75), "queries,kv_heads,kv_bytes,kv_gbs,score_mod,mask_mod,rope,pass,splits,reason") << csv[0];
  EXPECT_NE(csv[1].find(",1,1,"), std::string::npos) << csv[1];
}

TEST(BenchEngine, TheBackwardPassTimesTheGradientsAndChecksThemAgainstFp64) {
  bench::Spec s = small_spec();
  s.backends = {"cpu"};
  s.precisions = {"fp32", "bf16"};
  s.masks = {"none", "causal"};
  s.passes = {"forward", "backward"};
  std::vector<bench::Result> results = bench::plan(s);
  // Each forward case followed by its backward.
  ASSERT_EQ(results.size(), 2u * 2 * 2 * 2 * 2);
  EXPECT_FALSE(results[0].c.backward());
  EXPECT_TRUE(results[1].c.backward());
  EXPECT_EQ(results[1].c.label(), "cpu staged fp32 none heads=1 n=32 d=8 pass=backward");
  // The backward's FLOPs: 2.5 times the forward's for the fused algorithm, 2 for the staged one.
  for (std::size_t i = 0; i + 1 < results.size(); i += 2) {
    const double f = results[i + 1].flops / results[i].flops;
    EXPECT_DOUBLE_EQ(f, results[i].c.variant == "fused" ? 2.5 : 2.0) << results[i + 1].c.label();
  }
  bench::run_sweep(results, s, false, "none here");
  int timed = 0;
  for (const bench::Result& r : results) {
    if (!r.c.backward()) continue;
    if (r.c.precision == "bf16") {
      EXPECT_FALSE(r.ran);
      EXPECT_EQ(r.reason.en, "the CPU backward is fp32") << r.c.label();
      continue;
    }
    ASSERT_TRUE(r.ran) << r.c.label() << ": " << r.reason.en;
    ++timed;
    EXPECT_EQ(r.reference.en, "fp64 backward full");
    EXPECT_FALSE(r.inaccurate) << r.c.label() << " rel err " << r.rel_err;
    EXPECT_GT(r.rel_err, 0) << "a backward computed in fp32 differs from fp64 somewhere";
    EXPECT_EQ(r.repeats, 2);
  }
  EXPECT_EQ(timed, 8);
  const std::vector<std::string> csv = lines_of(bench::render_csv(results));
  EXPECT_NE(csv[2].find(",backward,"), std::string::npos) << csv[2];
  bench::Spec bad = small_spec();
  bad.passes = {"sideways"};
  EXPECT_EQ(test::message_of<InputError>([&] { bench::check_spec(bad); }),
            "--pass takes forward, backward or both, got 'sideways'");
}

// The fused backward's peak counts everything its minimum bytes read and write (the inputs among
// them): at 2^20 keys, where the threads' tiles of any machine are small beside the inputs.
TEST(BenchEngine, TheFusedBackwardsPeakHoldsAtLeastItsMinimumBytes) {
  bench::Case c;
  c.backend = "cpu";
  c.variant = "fused";
  c.precision = "fp32";
  c.mask = "none";
  c.n = 1 << 20;
  c.d = 64;
  c.pass = "backward";
  double min_bytes = 0, moved_bytes = 0;
  bench::case_bytes(c, min_bytes, moved_bytes);
  ASSERT_GT(min_bytes, 0);
  ProblemSize s;
  s.n = s.m = c.n;
  s.d_k = s.d_v = c.d;
  EXPECT_GE(fused_backward_bytes(s), min_bytes);
}

// --interleave: every case once per round, so each case has exactly `repeat` timings and the
// ratio to the first case is the median of the per-round quotients (not the quotient of medians);
// a case that cannot run is left out before the rounds, and the staged, decode and backward
// cases are checked against fp64 as in a plain sweep.
TEST(BenchEngine, InterleavedCasesRunRoundByRoundAndArePairedWithTheFirst) {
  bench::Spec s = small_spec();
  s.backends = {"cpu", "cuda"};
  s.variants = {"fused", "staged"};
  s.score_mods = {"none", "softcap:3"};
  s.passes = {"forward", "backward"};
  s.ns = {48};
  s.repeat = 5;
  s.warmup = 1;
  s.interleave = true;
  std::vector<bench::Result> results = bench::plan(s);
  std::vector<int> started(results.size()), finished(results.size());
  std::size_t last_done = 0;
  bench::Hooks hooks;
  hooks.on_case = [&](std::size_t i, std::size_t done, std::size_t total, bool fin) {
    EXPECT_EQ(total, results.size());
    (fin ? finished : started).at(i)++;
    if (fin) EXPECT_EQ(done, ++last_done);
  };
  std::ostringstream log;
  hooks.log = &log;
  std::string reason;
  const bool cuda = cuda_available(&reason);
  const bench::Outcome out = bench::run_sweep(results, s, cuda, reason, hooks);
  EXPECT_FALSE(out.cancelled);
  EXPECT_FALSE(out.device_failure);
  EXPECT_EQ(out.inaccurate, 0) << log.str();
  const bench::Result* first = nullptr;
  int ran = 0;
  for (std::size_t i = 0; i < results.size(); ++i) {
    const bench::Result& r = results[i];
    SCOPED_TRACE(r.c.label());
    EXPECT_EQ(started[i], 1);
    EXPECT_EQ(finished[i], 1);
    if (!r.ran) {
      EXPECT_FALSE(r.reason.empty()) << "left out with a reason";
      EXPECT_EQ(r.paired_ratio, 0);
      continue;
    }
    ++ran;
    ASSERT_EQ(r.ms.size(), 5u);
    EXPECT_EQ(r.repeats, 5);
    EXPECT_FALSE(r.inaccurate) << r.rel_err;
    EXPECT_GT(r.rel_err, 0);
    if (!first) first = &r;
    std::vector<double> q;
    for (std::size_t k = 0; k < r.ms.size(); ++k) q.push_back(r.ms[k] / first->ms[k]);
    std::sort(q.begin(), q.end());
    EXPECT_DOUBLE_EQ(r.paired_ratio, q[2]);
  }
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->paired_ratio, 1);
  EXPECT_EQ(first, &results[0]);
  // The CPU's forward and backward, fused and staged, with and without the cap (the staged
  // backward is the CPU's too); CUDA's where a device answers.
  EXPECT_GE(ran, 8);
  const std::string table = bench::render_table(bench::Machine{}, results, s);
  EXPECT_NE(table.find("(interleaved: every case once per round)"), std::string::npos) << table;
  EXPECT_NE(table.find("interleaved: each case's time over cpu fused fp32 none heads=1 n=48 d=8's in the same round"),
            std::string::npos)
      << table;
  const auto j = nlohmann::json::parse(bench::render_json(bench::Machine{}, results, s));
  EXPECT_TRUE(j["interleave"].get<bool>());
  EXPECT_DOUBLE_EQ(j["cases"][0]["paired_ratio"].get<double>(), 1.0);
  // Not interleaved: no paired ratio.
  bench::Spec plain = s;
  plain.interleave = false;
  plain.backends = {"cpu"};
  plain.passes = {"forward"};
  std::vector<bench::Result> again = bench::plan(plain);
  bench::run_sweep(again, plain, false, "none here");
  for (const bench::Result& r : again) {
    ASSERT_TRUE(r.ran) << r.reason.en;
    EXPECT_EQ(r.paired_ratio, 0);
  }
}

TEST(BenchEngine, ACancelDuringAnInterleavedSweepLeavesEveryCaseOut) {
  bench::Spec s = small_spec();
  s.backends = {"cpu"};
  s.repeat = 200;
  s.interleave = true;
  std::vector<bench::Result> results = bench::plan(s);
  std::atomic<bool> cancel{false};
  bench::Hooks hooks;
  hooks.cancel = &cancel;
  std::size_t starts = 0;
  hooks.on_case = [&](std::size_t, std::size_t, std::size_t, bool fin) {
    // The last case's start: every problem is built and the rounds are about to run.
    if (!fin && ++starts == results.size()) cancel = true;
  };
  const bench::Outcome out = bench::run_sweep(results, s, false, "none", hooks);
  EXPECT_TRUE(out.cancelled);
  for (const bench::Result& r : results) {
    EXPECT_FALSE(r.ran) << r.c.label();
    EXPECT_TRUE(r.reason.empty());
  }
}

// With a CPU decode case in an interleaved sweep each round starts with one pass of the host read
// probe, and the case's read fraction is the median of its rounds' K+V rate over its round's pass.
// K+V read: the keys some query may see, of every key/value head, at the precision's size; a
// window's decode reads the window (and the queries' extra keys), a plain one the whole cache.
TEST(BenchEngine, TheKvBytesAreTheKeysSomeQueryMaySee) {
  bench::Case c{"cpu", "decode", "fp32", "causal", 8, 262144, 128, 1, 2};
  EXPECT_DOUBLE_EQ(bench::case_kv_bytes(c), 4.0 * 2 * 262144 * 2 * 128);
  c.mask_mod = "window:4096";
  EXPECT_DOUBLE_EQ(bench::case_kv_bytes(c), 4.0 * 2 * 4096 * 2 * 128);
  c.queries = 4;  // the first of the 4 sees 3 keys before the last one's window
  EXPECT_DOUBLE_EQ(bench::case_kv_bytes(c), 4.0 * 2 * 4099 * 2 * 128);
  c.precision = "bf16";
  EXPECT_DOUBLE_EQ(bench::case_kv_bytes(c), 2.0 * 2 * 4099 * 2 * 128);
  c.mask_mod = "prefix:100";  // a prefix of the cache: every key is still seen
  EXPECT_DOUBLE_EQ(bench::case_kv_bytes(c), 2.0 * 2 * 262144 * 2 * 128);
  bench::Spec s;
  s.backends = {"cpu"};
  s.variants = {"decode"};
  s.precisions = {"fp32"};
  s.masks = {"causal"};
  s.mask_mods = {"window:256"};
  s.heads = {1};
  s.ns = {4096};
  s.ds = {16};
  s.queries = {1};
  const std::vector<bench::Result> results = bench::plan(s);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_DOUBLE_EQ(results[0].kv_bytes, 4.0 * 256 * 2 * 16);
  // The case's fewest bytes too: Q and O of the one query, K and V of the window.
  EXPECT_DOUBLE_EQ(results[0].min_bytes, 4.0 * 16 + 4.0 * 256 * 2 * 16 + 4.0 * 16);
}

TEST(BenchEngine, InterleavedDecodeReadsItsRateAgainstAProbePassOfTheSameRound) {
  bench::Spec s = small_spec();
  s.backends = {"cpu"};
  s.variants = {"fused", "decode"};
  s.ns = {4096};
  s.ds = {64};
  s.heads = {2};
  s.kv_heads = {1};
  s.queries = {1};
  s.repeat = 3;
  s.warmup = 1;
  s.interleave = true;
  std::vector<bench::Result> results = bench::plan(s);
  ASSERT_EQ(results.size(), 2u);
  bench::run_sweep(results, s, false, "none here");
  for (const bench::Result& r : results) {
    SCOPED_TRACE(r.c.label());
    ASSERT_TRUE(r.ran) << r.reason.en;
    ASSERT_EQ(r.read_gbs_rounds.size(), 3u);
    std::vector<double> f;
    for (std::size_t k = 0; k < 3; ++k) {
      EXPECT_GT(r.read_gbs_rounds[k], 0);
      f.push_back(r.kv_bytes / (r.ms[k] * 1e-3) / 1e9 / r.read_gbs_rounds[k]);
    }
    std::sort(f.begin(), f.end());
    EXPECT_DOUBLE_EQ(r.kv_read_fraction_paired, f[1]);
  }
  // Both cases saw the same passes.
  EXPECT_EQ(results[0].read_gbs_rounds, results[1].read_gbs_rounds);
  const auto j = nlohmann::json::parse(bench::render_json(bench::Machine{}, results, s));
  EXPECT_DOUBLE_EQ(j["cases"][1]["kv_read_fraction_paired"].get<double>(), results[1].kv_read_fraction_paired);
  EXPECT_EQ(j["cases"][1]["read_gbs_rounds"].size(), 3u);
  const std::string table = bench::render_table(bench::Machine{}, results, s);
  EXPECT_NE(table.find(" % of a read-probe pass in the same round (passes: median "), std::string::npos) << table;
  // A prefill case has none.
  bench::Spec prefill = s;
  prefill.queries.clear();
  prefill.kv_heads.clear();
  prefill.variants = {"fused"};
  prefill.ns = {64};
  std::vector<bench::Result> again = bench::plan(prefill);
  bench::run_sweep(again, prefill, false, "none here");
  ASSERT_TRUE(again[0].ran);
  EXPECT_TRUE(again[0].read_gbs_rounds.empty());
  EXPECT_EQ(again[0].kv_read_fraction_paired, 0);
}

}  // namespace
}  // namespace attnlab
