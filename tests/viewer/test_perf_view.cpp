// The Performance view (issue 13), without SDL: the N list (a list or a doubling range), log axes
// (decade ends, 1-2-5 ticks over few decades, decades over many, the N axis with a tick per N),
// tick labels with units, series from the engine's results (grouped by everything but N, skipped N
// with their reasons for the legend, pending cases), speed-ups against a baseline, chart ranges,
// the roofline's roofs and ranges, hover, the time-left estimate, the sweep's thread (it finishes,
// and Cancel stops it with the rest marked) and the --view perf / --backend list / --perf-* flags.
// The pass (issue 24): --perf-pass and the control's values plan backward cases with the engine's
// backward FLOPs and bytes, backward series are their own and say "backward", the time left keys
// on the pass, a tiny sweep with both passes times the CPU backward and keeps bf16's skip reason,
// and the backward's FLOP rule reads in both languages.
// With the real attnlab-view (headless, SDL_VIDEODRIVER=dummy): a small CPU sweep writes bench's
// CSV and a picture that is not blank, and its fused points are faster than its staged ones at
// N=1024; every chart renders; an all-skipped sweep exits 0 with the reason in the CSV; a bad list
// value exits 2 with one error line; --perf-pass both writes forward and backward rows (bench's pass
// column) and draws in both languages.
#include "core/messages.h"
#include "engine/bench.h"
#include "tests/test_util.h"
#include "viewer/app/options.h"
#include "viewer/views/perf/perf_view.h"
#include "viewer/session/playback.h"
#include "viewer/session/session.h"
#include "tests/viewer/viewer_test_util.h"
#include "core/memory.h"
#include "viewer/draw/png_io.h"
#include "viewer/draw/strings.h"
#include "engine/bench_report.h"
#include "engine/registry.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace attnlab;
using namespace attnlab::viewer;

namespace {

bench::Result ran(const std::string& backend, const std::string& variant, int n, double ms,
                  const std::string& mask = "none", const std::string& pass = "forward") {
  bench::Result r;
  r.c = bench::Case{backend, variant, "fp32", mask, 1, n, 64};
  r.c.pass = pass;
  r.flops = bench::case_flops(r.c);
  bench::case_bytes(r.c, r.min_bytes, r.moved_bytes);
  r.ran = true;
  r.median_ms = ms;
  r.min_ms = ms * 0.9;
  r.max_ms = ms * 1.2;
  r.repeats = 3;
  r.tflops = r.flops / (ms * 1e-3) / 1e12;
  r.peak_bytes = static_cast<std::size_t>(n) * n * 16;
  r.rel_err = 1e-7;
  return r;
}

bench::Result skipped(const std::string& backend, const std::string& variant, int n, const std::string& why) {
  bench::Result r;
  r.c = bench::Case{backend, variant, "fp32", "none", 1, n, 64};
  r.reason = Message{Msg::None, {}, why};
  return r;
}

std::vector<double> values(const LogAxis& a, bool labelled_only = false) {
  std::vector<double> v;
  for (const Tick& t : a.ticks)
    if (!labelled_only || !t.label.empty()) v.push_back(t.value);
  return v;
}

TEST(PerfView, NListTakesAListOrADoublingRange) {
  EXPECT_EQ(parse_n_list("--perf-n", "256..2048"), (std::vector<int>{256, 512, 1024, 2048}));
  EXPECT_EQ(parse_n_list("--perf-n", "256..1000"), (std::vector<int>{256, 512}));
  EXPECT_EQ(parse_n_list("--perf-n", "100,300"), (std::vector<int>{100, 300}));
  EXPECT_EQ(parse_n_list("--perf-n", "64"), (std::vector<int>{64}));
  EXPECT_THROW(parse_n_list("--perf-n", "512..256"), InputError);
  EXPECT_THROW(parse_n_list("--perf-n", "256,,512"), InputError);
  EXPECT_THROW(parse_n_list("--perf-n", "x"), InputError);
  EXPECT_THROW(parse_n_list("--perf-n", "1,2..8"), InputError);
  EXPECT_EQ(n_list_text({256, 512, 1024}), "256..1024");
  EXPECT_EQ(n_list_text({256, 1024}), "256,1024");
  EXPECT_EQ(parse_n_list("N", n_list_text({256, 512, 1024, 2048})), (std::vector<int>{256, 512, 1024, 2048}));
}

TEST(PerfView, LogAxisEndsOnDecadesWithOneTwoFiveTicksOverFewDecades) {
  const LogAxis a = log_axis(0.3, 40);
  EXPECT_DOUBLE_EQ(a.lo, 0.1);
  EXPECT_DOUBLE_EQ(a.hi, 100);
  const std::vector<double> v = values(a);
  for (double want : {0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0})
    EXPECT_NE(std::find_if(v.begin(), v.end(), [&](double x) { return std::abs(x - want) < 1e-9 * want; }), v.end())
        << want;
  EXPECT_EQ(v.size(), 10u);
  for (const Tick& t : a.ticks) EXPECT_EQ(t.major, std::abs(std::log10(t.value) - std::round(std::log10(t.value))) < 1e-9);
}

TEST(PerfView, LogAxisOverManyDecadesTicksDecadesOnly) {
  const LogAxis a = log_axis(2e-3, 3e5);  // 1e-3 .. 1e6: nine decades, every other labelled
  EXPECT_DOUBLE_EQ(a.lo, 1e-3);
  EXPECT_DOUBLE_EQ(a.hi, 1e6);
  for (const Tick& t : a.ticks) EXPECT_TRUE(t.major);
  EXPECT_EQ(a.ticks.size(), 5u);  // 1e-3, 1e-1, 1e1, 1e3, 1e5
  const LogAxis b = log_axis(2e-2, 5e2);  // five decades: every decade, no 2 or 5
  EXPECT_EQ(b.ticks.size(), 6u);
}

// A value on a decade is not the axis's end: the chart's smallest point (0.1 ms) would sit on the
// bottom edge with its marker half clipped. Every value lies a pad inside the ends.
TEST(PerfView, LogAxisEndsArePaddedBeyondValuesOnADecade) {
  const LogAxis a = log_axis(0.1, 2);
  EXPECT_DOUBLE_EQ(a.lo, 0.01);
  EXPECT_DOUBLE_EQ(a.hi, 10);
  const LogAxis b = log_axis(1e-2, 1e3);
  EXPECT_DOUBLE_EQ(b.lo, 1e-3);
  EXPECT_DOUBLE_EQ(b.hi, 1e4);
  for (const auto& [lo, hi] : std::vector<std::pair<double, double>>{{0.1, 2}, {0.3, 40}, {0.99, 1.01}, {1e-2, 1e3}}) {
    const LogAxis x = log_axis(lo, hi);
    EXPECT_GE(std::log10(lo) - std::log10(x.lo), kLogAxisPad - 1e-12) << lo;
    EXPECT_GE(std::log10(x.hi) - std::log10(hi), kLogAxisPad - 1e-12) << hi;
  }
}

// The bar's "done: N cases in T": the time rounded, never up by a whole second.
TEST(PerfView, DurationsAreRoundedNotRaisedToTheNextSecond) {
  EXPECT_EQ(duration_text(1.1), "1.1 s");
  EXPECT_EQ(duration_text(0.04), "0.0 s");
  EXPECT_EQ(duration_text(9.96), "10 s");
  EXPECT_EQ(duration_text(14.4), "14 s");
  EXPECT_EQ(duration_text(59.6), "1 min 0 s");
  EXPECT_EQ(duration_text(125), "2 min 5 s");
  EXPECT_EQ(duration_text(-1), "?");
}

// Where CUDA is off, the legend gives the reason the line above the chart gives (the build has no
// CUDA, or the device's words), for forward and backward CUDA cases alike; other reasons stay.
TEST(PerfView, TheLegendGivesTheReasonCudaIsOff) {
  const std::string built = "attnlab was built without CUDA";
  const auto en = [](Msg id, std::vector<std::string> args = {}) { return message_of(id, std::move(args)); };
  EXPECT_EQ(legend_reason("cuda", en(Msg::NoDevice, {built}), false, built, Lang::En), built);
  EXPECT_EQ(legend_reason("cuda", en(Msg::BenchSkipCudaBackwardBuild), false, built, Lang::En), built);
  EXPECT_EQ(legend_reason("cuda", en(Msg::NoDevice, {"cudaGetDeviceCount: x"}), false, "cudaGetDeviceCount: x", Lang::En),
            "cudaGetDeviceCount: x");
  const std::string driver =
      "cudaGetDeviceCount: cudaErrorInsufficientDriver (CUDA driver version is insufficient for CUDA runtime version)";
  EXPECT_EQ(legend_reason("cuda", en(Msg::NoDevice, {driver}), false, driver, Lang::En),
            "cudaGetDeviceCount: cudaErrorInsufficientDriver");
  EXPECT_EQ(legend_reason("cpu", en(Msg::BenchSkipCpuBackwardBf16), false, built, Lang::En), "the CPU backward is fp32");
  EXPECT_EQ(legend_reason("cuda", en(Msg::BenchSkipCudaBackwardFused), true, "", Lang::En),
            "the CUDA backward is the fused one");
  // Both places say the same words in Chinese too.
  EXPECT_EQ(legend_reason("cuda", en(Msg::NoDevice, {built}), false, built, Lang::Zh), cuda_reason_text(built, Lang::Zh));
  // The engine's reasons read in the UI's language (they had stayed English in the Chinese
  // legend), the time budget's naming the viewer's flag.
  EXPECT_EQ(legend_reason("cpu", en(Msg::BenchSkipCpuBackwardBf16), false, built, Lang::Zh), "CPU 反向传播只有 fp32");
  bench::Case big{"cpu", "staged", "fp32", "none", 16, 8192, 64};
  const bench::Spec perf = default_perf_spec();
  const Message budget = bench::skip_reason(big, perf, false, built);
  EXPECT_EQ(budget.id, Msg::BenchSkipBudget);
  EXPECT_NE(budget.en.find("(over --perf-max-seconds 30)"), std::string::npos) << budget.en;
  EXPECT_NE(legend_reason("cpu", budget, false, built, Lang::Zh).find("（超过 --perf-max-seconds 30）"), std::string::npos);
  EXPECT_EQ(legend_reason("cpu", en(Msg::BenchCancelled), false, built, Lang::Zh), "已取消");
}

TEST(PerfView, LogAxisOfOneValueWidensAndMapsLogarithmically) {
  const LogAxis a = log_axis(10, 10);
  EXPECT_DOUBLE_EQ(a.lo, 1);
  EXPECT_DOUBLE_EQ(a.hi, 100);
  EXPECT_NEAR(a.map(10, 0, 200), 100, 1e-9);
  EXPECT_NEAR(a.map(1, 0, 200), 0, 1e-9);
  EXPECT_NEAR(a.map(100, 300, 100), 100, 1e-9) << "reversed ends (screen y grows down)";
  const LogAxis bad = log_axis(0, -1);  // nothing positive: still a valid axis
  EXPECT_GT(bad.hi, bad.lo);
  EXPECT_GT(bad.lo, 0);
}

TEST(PerfView, NAxisHasATickPerNAndHalfADoublingOfMargin) {
  const LogAxis a = n_axis({256, 512, 1024});
  EXPECT_NEAR(a.lo, 256 / std::sqrt(2.0), 1e-9);
  EXPECT_NEAR(a.hi, 1024 * std::sqrt(2.0), 1e-9);
  EXPECT_EQ(values(a), (std::vector<double>{256, 512, 1024}));
  EXPECT_EQ(a.ticks[1].label, "512");
  std::vector<int> many;
  for (int n = 1; n <= 4096; n *= 2) many.push_back(n);  // 13 values: every other labelled
  EXPECT_EQ(values(n_axis(many), true).size(), 7u);
}

TEST(PerfView, TickLabelsCarryTheirUnits) {
  EXPECT_EQ(format_tick(0.5, TickUnit::Milliseconds), "0.5 ms");
  EXPECT_EQ(format_tick(20, TickUnit::Milliseconds), "20 ms");
  EXPECT_EQ(format_tick(2000, TickUnit::Milliseconds), "2 s");
  EXPECT_EQ(format_tick(1e-4, TickUnit::Milliseconds), "0.1 µs");
  EXPECT_EQ(format_tick(1e6, TickUnit::Bytes), "1 MB");
  EXPECT_EQ(format_tick(2e9, TickUnit::Bytes), "2 GB");
  EXPECT_EQ(format_tick(500, TickUnit::Bytes), "500 B");
  EXPECT_EQ(format_tick(0.01, TickUnit::Plain), "0.01");
  EXPECT_EQ(format_tick(500, TickUnit::Plain), "500");
  EXPECT_EQ(format_tick(1e4, TickUnit::Plain), "10k");
  EXPECT_EQ(format_tick(2e6, TickUnit::Plain), "2M");
}

TEST(PerfView, SeriesGroupEverythingButNAndKeepSkippedReasonsForTheLegend) {
  std::vector<bench::Result> rs = {ran("cpu", "staged", 1024, 8),
                                   ran("cpu", "staged", 256, 1),
                                   skipped("cpu", "staged", 16384, "would take ~300 s (over --max-seconds 30)"),
                                   ran("cpu", "fused", 256, 0.5),
                                   skipped("cuda", "fused", 256, "no CUDA device: none"),
                                   skipped("cuda", "fused", 1024, "no CUDA device: none")};
  bench::Result pending;
  pending.c = bench::Case{"cpu", "fused", "fp32", "none", 1, 1024, 64};
  rs.push_back(pending);
  const std::vector<PerfSeries> s = build_series(rs);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].label, "cpu staged fp32");
  EXPECT_EQ(s[1].label, "cpu fused fp32");
  EXPECT_EQ(s[2].label, "cuda fused fp32");
  ASSERT_EQ(s[0].points.size(), 2u);
  EXPECT_EQ(s[0].points[0].n, 256) << "ascending N";
  EXPECT_EQ(s[0].points[1].result, 0u);
  ASSERT_EQ(s[0].skipped.size(), 1u);
  EXPECT_EQ(s[0].skipped[0].n, 16384);
  EXPECT_NE(s[0].skipped[0].reason.en.find("max-seconds"), std::string::npos);
  EXPECT_EQ(s[1].pending, 1u);
  EXPECT_TRUE(s[2].points.empty());
  EXPECT_EQ(s[2].skipped.size(), 2u);
  // Spread and the roofline's coordinates of a point.
  const PerfPoint& p = s[0].points[1];
  EXPECT_LT(p.tflops_lo, p.tflops);
  EXPECT_GT(p.tflops_hi, p.tflops);
  EXPECT_DOUBLE_EQ(p.intensity, rs[0].flops / rs[0].moved_bytes);
  EXPECT_DOUBLE_EQ(p.gflops, rs[0].tflops * 1e3);
  EXPECT_EQ(all_ns(s), (std::vector<int>{256, 1024, 16384}));
  EXPECT_EQ(all_ns(s, {64, 128}), (std::vector<int>{256, 1024, 16384})) << "the sweep's points, once there are some";
  EXPECT_EQ(all_ns({}, {64, 128}), (std::vector<int>{64, 128})) << "before a run: the N the sweep will time";
  // A second mask joins the label.
  rs.push_back(ran("cpu", "fused", 256, 0.3, "causal"));
  const std::vector<PerfSeries> m = build_series(rs);
  EXPECT_EQ(m[0].label, "cpu staged fp32 mask none");
  EXPECT_EQ(m.back().label, "cpu fused fp32 mask causal");
  // In Chinese the words are the controls' own.
  rs.push_back(ran("cpu", "fused", 256, 0.5, "none", "backward"));
  const std::vector<PerfSeries> zh = build_series(rs, Lang::Zh);
  EXPECT_EQ(zh[0].label, "cpu 分步 fp32 掩码 无 前向");
  EXPECT_EQ(zh.back().label, "cpu 融合 fp32 掩码 无 反向");
}

TEST(PerfView, SpeedupIsTheBaselinesTimeOverTheSeriesTime) {
  const std::vector<PerfSeries> s = build_series(
      {skipped("cuda", "staged", 256, "no CUDA device: none"), ran("cpu", "staged", 256, 4), ran("cpu", "staged", 512, 16),
       ran("cpu", "fused", 256, 1), ran("cpu", "fused", 1024, 3)});
  EXPECT_EQ(default_baseline(s), 1u) << "the first series with a point";
  const std::vector<SpeedupPoint> up = speedup_against(s[2], s[1]);
  ASSERT_EQ(up.size(), 1u) << "only the N both ran";
  EXPECT_EQ(up[0].n, 256);
  EXPECT_DOUBLE_EQ(up[0].speedup, 4);
  EXPECT_DOUBLE_EQ(speedup_against(s[1], s[1])[1].speedup, 1);
}

TEST(PerfView, ChartRangesSpanTheSpreadAndTheRooflineItsRoofs) {
  const std::vector<PerfSeries> s = build_series({ran("cpu", "staged", 256, 2), ran("cpu", "fused", 1024, 10)});
  double lo = 0, hi = 0;
  ASSERT_TRUE(chart_range(s, PerfChart::Time, lo, hi));
  EXPECT_DOUBLE_EQ(lo, 2 * 0.9);
  EXPECT_DOUBLE_EQ(hi, 10 * 1.2);
  ASSERT_TRUE(chart_range(s, PerfChart::Memory, lo, hi));
  EXPECT_DOUBLE_EQ(lo, 256.0 * 256 * 16);
  EXPECT_FALSE(chart_range({}, PerfChart::Time, lo, hi));

  Roof roof;
  roof.backend = "cpu";
  roof.ceilings.bandwidth_gbs = 20;
  roof.ceilings.gemm_gflops = 400;
  EXPECT_DOUBLE_EQ(roof.ridge(), 20);
  EXPECT_DOUBLE_EQ(roof.attainable(2), 40) << "under the ridge: the memory roof";
  EXPECT_DOUBLE_EQ(roof.attainable(100), 400) << "past it: the compute roof";
  Roof none;
  EXPECT_EQ(none.attainable(5), 0);
  double x0, x1, y0, y1;
  roofline_ranges(s, {roof}, x0, x1, y0, y1);
  for (const PerfSeries& ss : s)
    for (const PerfPoint& p : ss.points) {
      EXPECT_LE(x0, p.intensity);
      EXPECT_GE(x1, p.intensity);
      EXPECT_LE(y0, p.gflops);
      EXPECT_GE(y1, p.gflops);
    }
  EXPECT_LE(x0, roof.ridge());
  EXPECT_GE(x1, roof.ridge());
  EXPECT_GE(y1, 400);
}

TEST(PerfView, HoverFindsTheNearestPointWithinTheRadius) {
  const std::vector<ScreenPoint> pts = {{10, 10, 0, 0}, {20, 10, 0, 1}, {100, 100, 1, 0}};
  EXPECT_EQ(nearest_point(pts, 12, 10, 8), 0);
  EXPECT_EQ(nearest_point(pts, 17, 11, 8), 1);
  EXPECT_EQ(nearest_point(pts, 60, 60, 8), -1);
}

TEST(PerfView, TimeLeftUsesTheRateObservedSoFar) {
  bench::Spec spec;
  spec.repeat = 3;
  spec.warmup = 1;
  bench::Result done = ran("cpu", "fused", 256, 1);
  bench::Result next;
  next.c = bench::Case{"cpu", "fused", "fp32", "none", 1, 512, 64};
  next.flops = bench::case_flops(next.c);
  const double rate = done.flops / 1e-3;
  EXPECT_NEAR(estimate_seconds_left({done, next}, -1, spec), next.flops * 4 / rate, 1e-12);
  EXPECT_NEAR(estimate_seconds_left({done, next}, 1, spec), next.flops * 2 / rate, 1e-12) << "half the one in flight";
  EXPECT_DOUBLE_EQ(estimate_seconds_left({done}, -1, spec), 0);
}

bench::Spec tiny_cpu_spec() {
  bench::Spec s;
  s.backends = {"cpu"};
  s.variants = {"staged", "fused"};
  s.precisions = {"fp32"};
  s.ns = {32, 64};
  s.ds = {8};
  s.repeat = 2;
  s.warmup = 0;
  return s;
}

TEST(PerfView, RunFinishesOnItsThreadWithEveryCase) {
  PerfRun run;
  run.start(tiny_cpu_spec(), false);
  run.join();
  const PerfSnapshot s = run.snapshot();
  EXPECT_FALSE(s.running);
  EXPECT_TRUE(s.finished);
  EXPECT_FALSE(s.cancelled);
  EXPECT_EQ(s.done, 4u);
  EXPECT_EQ(s.total, 4u);
  EXPECT_TRUE(s.error.empty()) << s.error;
  for (const auto& r : s.results) EXPECT_TRUE(r.ran) << r.c.label() << ": " << r.reason.en;
  EXPECT_TRUE(s.roofs.empty()) << "no probes asked for";
  // The Memory chart's line is the room read once as the sweep starts, not each frame.
  if (host_available_bytes()) EXPECT_GT(s.host_room, 0.0);
  EXPECT_THROW(run.start(bench::Spec{.backends = {"tpu"}}, false), InputError);
}

// While its sweep runs the view says it is measuring, and the window's loop then waits longer
// between frames (drawing had taken a fifth of a core from the timed runs on two).
TEST(PerfView, ASweepInFlightIsMeasuringAndSlowsTheRedraws) {
  Session s(test::cpu_random_options(16, 8, 8));
  PerfView v(ViewContext{s, false, false}, PerfView::Options{});
  EXPECT_FALSE(v.measuring());
  bench::Spec spec = tiny_cpu_spec();
  spec.ns = {32, 64, 128, 256, 512};
  spec.repeat = 400;  // long enough to be seen running
  v.run.start(spec, false);
  EXPECT_TRUE(v.measuring());
  v.run.cancel();
  v.run.join();
  EXPECT_FALSE(v.measuring());
  EXPECT_EQ(frame_wait_ms(true, true, true), 250);
  EXPECT_EQ(frame_wait_ms(false, true, false), 16);
  EXPECT_EQ(frame_wait_ms(false, false, true), 16);
  EXPECT_EQ(frame_wait_ms(false, false, false), 50);
}

TEST(PerfView, CancelStopsTheSweepAndMarksTheRest) {
  bench::Spec spec = tiny_cpu_spec();
  spec.ns = {32, 64, 128, 256, 512};
  spec.repeat = 400;  // long enough that the cancel lands well before the end
  PerfRun run;
  run.start(spec, false);
  // Until the first case is done (a generous bound: 60 s).
  for (int i = 0; i < 60000 && run.snapshot().done < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  run.cancel();
  run.join();
  const PerfSnapshot s = run.snapshot();
  EXPECT_TRUE(s.finished);
  EXPECT_TRUE(s.cancelled);
  std::size_t ran_count = 0, cancelled = 0;
  for (const auto& r : s.results) {
    if (r.ran) {
      ++ran_count;
      EXPECT_EQ(r.repeats, 400) << "a timed case is whole";
    } else {
      EXPECT_EQ(r.reason.en, "cancelled");
      ++cancelled;
    }
  }
  EXPECT_GE(ran_count, 1u);
  EXPECT_GE(cancelled, 1u);
  EXPECT_EQ(ran_count + cancelled, s.results.size());
  // The legend shows them as skipped with the reason.
  for (const PerfSeries& ser : build_series(s.results))
    for (const PerfSkip& k : ser.skipped) EXPECT_EQ(k.reason.en, "cancelled");
}

TEST(PerfView, OptionsTakeTheViewTheBackendListAndThePerfFlags) {
  const ViewerOptions o = parse_viewer_args({"--view", "perf", "--backend", "cpu,cuda", "--perf-variant", "fused",
                                             "--perf-precision", "fp32,bf16", "--perf-n", "256..1024", "--perf-d",
                                             "32", "--perf-heads", "2", "--perf-mask", "causal", "--perf-output",
                                             "x.csv", "--perf-chart", "roofline"});
  EXPECT_EQ(o.view, "perf");
  EXPECT_EQ(o.views.perf.spec.backends, (std::vector<std::string>{"cpu", "cuda"}));
  EXPECT_EQ(o.backend, "auto") << "the chain view's backend stays auto";
  EXPECT_EQ(o.views.perf.spec.variants, (std::vector<std::string>{"fused"}));
  EXPECT_EQ(o.views.perf.spec.ns, (std::vector<int>{256, 512, 1024}));
  EXPECT_EQ(o.views.perf.spec.ds, (std::vector<int>{32}));
  EXPECT_EQ(o.views.perf.spec.heads, (std::vector<int>{2}));
  EXPECT_EQ(o.views.perf.spec.masks, (std::vector<std::string>{"causal"}));
  EXPECT_EQ(o.views.perf.output, "x.csv");
  EXPECT_EQ(o.views.perf.chart, PerfChart::Roofline);
  // --backend before --view is read the same.
  EXPECT_EQ(parse_viewer_args({"--backend", "cuda", "--view", "perf"}).views.perf.spec.backends, (std::vector<std::string>{"cuda"}));
  EXPECT_EQ(parse_viewer_args({"--backend", "cpu"}).backend, "cpu") << "the chain view as before";
  EXPECT_THROW(parse_viewer_args({"--backend", "cpu,cuda"}), InputError) << "a list only in the perf view";
  EXPECT_THROW(parse_viewer_args({"--view", "perf", "--backend", "cpu,tpu"}), InputError);
  EXPECT_THROW(parse_viewer_args({"--view", "perf", "--perf-variant", "plain"}), InputError);
  EXPECT_THROW(parse_viewer_args({"--view", "perf", "--perf-precision", "fp64"}), InputError);
  EXPECT_THROW(parse_viewer_args({"--view", "perf", "--perf-n", "256,,512"}), InputError);
  EXPECT_THROW(parse_viewer_args({"--perf-chart", "pie"}), InputError);
  EXPECT_THROW(parse_viewer_args({"--view", "pie"}), InputError);
}

TEST(PerfViewPass, TheFlagAndTheControlsValuesGiveTheSpecsPasses) {
  EXPECT_EQ(bench::parse_passes("--perf-pass", "forward"), (std::vector<std::string>{"forward"}));
  EXPECT_EQ(bench::parse_passes("--perf-pass", "backward"), (std::vector<std::string>{"backward"}));
  EXPECT_EQ(bench::parse_passes("--perf-pass", "both"), (std::vector<std::string>{"forward", "backward"}));
  for (const char* name : {"forward", "backward", "both"})
    EXPECT_EQ(bench::passes_name(bench::parse_passes("pass", name)), name) << "the control reads its value back";
  try {
    bench::parse_passes("--perf-pass", "sideways");
    ADD_FAILURE() << "no throw";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--perf-pass"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("sideways"), std::string::npos) << e.what();
  }
  const ViewerOptions o = parse_viewer_args({"--view", "perf", "--backend", "cpu", "--perf-pass", "both"});
  EXPECT_EQ(o.views.perf.spec.passes, (std::vector<std::string>{"forward", "backward"}));
  EXPECT_EQ(parse_viewer_args({"--view", "perf"}).views.perf.spec.passes, (std::vector<std::string>{"forward"}))
      << "forward unless asked";
  EXPECT_THROW(parse_viewer_args({"--view", "perf", "--perf-pass", "back"}), InputError);
  EXPECT_NE(PerfView::usage().find("--perf-pass forward|backward|both"), std::string::npos);
}

TEST(PerfViewPass, BothPlansABackwardCaseBesideEachForwardWithTheBackwardsRules) {
  bench::Spec spec = default_perf_spec();
  spec.backends = {"cpu"};
  spec.passes = bench::parse_passes("pass", "both");
  const std::vector<bench::Result> plan = bench::plan(spec);
  spec.passes = bench::parse_passes("pass", "forward");
  const std::vector<bench::Result> forward = bench::plan(spec);
  ASSERT_EQ(plan.size(), 2 * forward.size());
  std::size_t backward = 0;
  for (const bench::Result& r : plan) {
    if (!r.c.backward()) continue;
    ++backward;
    bench::Case f = r.c;
    f.pass = "forward";
    EXPECT_DOUBLE_EQ(r.flops, bench::case_flops(f) * bench::backward_flop_factor(r.c)) << r.c.label();
    EXPECT_DOUBLE_EQ(bench::backward_flop_factor(r.c), r.c.variant == "fused" ? 2.5 : 2.0);
    double lo = 0, moved = 0;
    bench::case_bytes(r.c, lo, moved);
    EXPECT_DOUBLE_EQ(r.moved_bytes, moved) << "the backward's bytes";
    EXPECT_NE(r.c.label().find("backward"), std::string::npos) << "the case in flight says so";
  }
  EXPECT_EQ(backward, forward.size());
  EXPECT_TRUE(has_backward(plan));
  EXPECT_FALSE(has_backward(forward));
}

TEST(PerfViewPass, BackwardSeriesAreTheirOwnAndSaySo) {
  // Alone: only the backward series say their pass.
  std::vector<PerfSeries> s = build_series({ran("cpu", "fused", 256, 1), ran("cpu", "fused", 512, 3)});
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].label, "cpu fused fp32") << "a forward sweep reads as before";
  s = build_series({ran("cpu", "fused", 256, 2, "none", "backward")});
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].label, "cpu fused fp32 backward");
  // Both: the same path twice, one series per pass, each labelled.
  const std::vector<bench::Result> rs = {ran("cpu", "staged", 256, 1), ran("cpu", "staged", 256, 3, "none", "backward"),
                                         ran("cpu", "fused", 256, 1), ran("cpu", "fused", 256, 4, "none", "backward")};
  s = build_series(rs);
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[0].label, "cpu staged fp32 forward");
  EXPECT_EQ(s[1].label, "cpu staged fp32 backward");
  EXPECT_EQ(s[3].label, "cpu fused fp32 backward");
  EXPECT_TRUE(s[1].proto.backward());
  ASSERT_EQ(s[3].points.size(), 1u);
  EXPECT_EQ(s[3].points[0].result, 3u);
  // Its roofline point: its GFLOP/s against its FLOPs over the backward's bytes.
  const PerfPoint& p = s[3].points[0];
  double lo = 0, moved = 0;
  bench::case_bytes(rs[3].c, lo, moved);
  EXPECT_DOUBLE_EQ(p.intensity, bench::case_flops(rs[3].c) / moved);
  EXPECT_DOUBLE_EQ(p.gflops, bench::case_flops(rs[3].c) / 4e-3 / 1e9);
  EXPECT_EQ(speedup_against(s[3], s[2]).size(), 1u) << "a backward series against its forward";
}

TEST(PerfViewPass, TheTimeLeftOfABackwardCaseIsNotGuessedFromTheForwardsRate) {
  bench::Spec spec;
  spec.repeat = 3;
  spec.warmup = 1;
  const bench::Result done = ran("cpu", "fused", 256, 1);
  bench::Result next;
  next.c = bench::Case{"cpu", "fused", "fp32", "none", 1, 256, 64};
  next.c.pass = "backward";
  next.flops = bench::case_flops(next.c);
  EXPECT_NEAR(estimate_seconds_left({done, next}, -1, spec), next.flops * 4 / bench::cpu_rate_guess("fused"),
              1e-12 * next.flops)
      << "no backward has run: the engine's guess";
  const bench::Result bdone = ran("cpu", "fused", 128, 2, "none", "backward");
  EXPECT_NEAR(estimate_seconds_left({done, bdone, next}, -1, spec), next.flops * 4 / (bdone.flops / 2e-3), 1e-12)
      << "the backward's own rate";
}

TEST(PerfViewPass, TheBackwardsFlopRuleReadsInBothLanguagesWithTheEnginesFactors) {
  const std::string en = backward_flop_rule_text(Lang::En), zh = backward_flop_rule_text(Lang::Zh);
  for (const std::string& t : {en, zh}) EXPECT_EQ(t.find('%'), std::string::npos) << "every placeholder filled: " << t;
  EXPECT_NE(en.find("Backward FLOPs"), std::string::npos);
  EXPECT_NE(en.find("times 2.5 for the fused backward"), std::string::npos) << en;
  EXPECT_NE(en.find("and 2 for the staged one"), std::string::npos) << en;
  EXPECT_NE(zh.find("融合反向乘以 2.5"), std::string::npos) << zh;
  EXPECT_NE(zh.find("分步反向乘以 2（"), std::string::npos) << zh;
  EXPECT_NE(en, zh);
  for (S id : {S::PerfPass, S::PerfPassForward, S::PerfPassBackward, S::PerfPassBoth, S::PerfAxisTflopsRule,
               S::PerfRoofBackward}) {
    EXPECT_STRNE(tr(Lang::En, id), tr(Lang::Zh, id));
    EXPECT_GT(std::strlen(tr(Lang::Zh, id)), 0u);
  }
  EXPECT_STREQ(tr(Lang::Zh, S::PerfPassBackward), "反向");
}

TEST(PerfViewPass, ASweepWithBothPassesTimesTheCpuBackwardAndKeepsBf16sReason) {
  bench::Spec spec = tiny_cpu_spec();
  spec.precisions = {"fp32", "bf16"};
  spec.ns = {32};
  spec.passes = bench::parse_passes("--perf-pass", "both");
  PerfRun run;
  run.start(spec, false);
  run.join();
  const PerfSnapshot snap = run.snapshot();
  ASSERT_TRUE(snap.error.empty()) << snap.error;
  EXPECT_EQ(snap.total, 8u);  // staged, fused x fp32, bf16 x forward, backward
  std::size_t backward_ran = 0;
  for (const bench::Result& r : snap.results) {
    if (!r.c.backward()) {
      EXPECT_TRUE(r.ran) << r.c.label() << ": " << r.reason.en;
      continue;
    }
    if (r.c.precision == "bf16") {
      EXPECT_FALSE(r.ran);
      EXPECT_EQ(r.reason.en, "the CPU backward is fp32");
      continue;
    }
    ASSERT_TRUE(r.ran) << r.c.label() << ": " << r.reason.en;
    ++backward_ran;
    EXPECT_EQ(r.repeats, 2);
    EXPECT_FALSE(r.inaccurate) << r.c.label() << " " << r.rel_err;
    EXPECT_NE(r.reference.en.find("backward"), std::string::npos) << r.reference.en;
  }
  EXPECT_EQ(backward_ran, 2u);
  // The legend: the bf16 backward series has no point and says why.
  const std::vector<PerfSeries> series = build_series(snap.results);
  ASSERT_EQ(series.size(), 8u);
  std::size_t skipped_series = 0;
  for (const PerfSeries& s : series) {
    EXPECT_NE(s.label.find(s.proto.pass), std::string::npos) << s.label;
    if (s.proto.backward() && s.proto.precision == "bf16") {
      ++skipped_series;
      EXPECT_TRUE(s.points.empty());
      ASSERT_EQ(s.skipped.size(), 1u);
      EXPECT_EQ(s.skipped[0].reason.en, "the CPU backward is fp32");
    }
  }
  EXPECT_EQ(skipped_series, 2u);
  // The Export CSV: bench's, with its pass column.
  const std::string csv = bench::render_csv(snap.results);
  EXPECT_NE(test::lines_of(csv)[0].find(",pass,"), std::string::npos);
  EXPECT_NE(csv.find(",backward,"), std::string::npos);
}

#ifdef ATTNLAB_VIEW_BINARY

const test::TempDir& work_dir() {
  static const test::TempDir dir("attnlab-perf-shots");
  return dir;
}

test::BinaryRun run_view(const std::vector<std::string>& args, const std::string& env = "") {
  std::vector<std::string> timed = {"120", test::view_binary()};
  timed.insert(timed.end(), args.begin(), args.end());
  return test::run_binary("timeout", timed, "SDL_VIDEODRIVER=dummy LANG=C.UTF-8 " + env);
}

std::vector<std::vector<std::string>> csv_rows(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  for (const std::string& line : test::lines_of(text)) {
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string x; std::getline(ss, x, ',');) f.push_back(x);
    if (!line.empty() && line.back() == ',') f.emplace_back();
    rows.push_back(f);
  }
  return rows;
}

// Pixels of the first series' colour (the palette's orange), and the distinct colours.
void picture_stats(const Image& img, int& orange, std::size_t& colours) {
  std::set<std::uint32_t> seen;
  orange = 0;
  for (std::size_t i = 0; i + 3 < img.rgba.size(); i += 4) {
    const std::uint8_t* p = &img.rgba[i];
    if (std::abs(p[0] - 230) <= 6 && std::abs(p[1] - 159) <= 6 && p[2] <= 8) ++orange;
    seen.insert(static_cast<std::uint32_t>(p[0]) << 16 | p[1] << 8 | p[2]);
  }
  colours = seen.size();
}

TEST(PerfViewHeadless, SmallCpuSweepWritesBenchCsvAndAPicture) {
  const std::string png = work_dir().file("sweep.png"), csv = work_dir().file("sweep.csv");
  const test::BinaryRun r = run_view({"--view", "perf", "--backend", "cpu", "--perf-variant", "staged,fused",
                                      "--perf-precision", "fp32", "--perf-n", "256,1024", "--perf-repeat", "9",
                                      "--perf-warmup", "1", "--perf-output", csv, "--screenshot", png});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto rows = csv_rows(test::read_file(csv));
  ASSERT_EQ(rows.size(), 5u);
  // bench's columns: the header of the engine's CSV, the one `attnlab bench --format csv` writes.
  EXPECT_EQ(test::lines_of(test::read_file(csv))[0], test::lines_of(bench::render_csv({}))[0]);
  double staged_1024 = 0, fused_1024 = 0;
  for (std::size_t i = 1; i < rows.size(); ++i) {
    ASSERT_EQ(rows[i].size(), rows[0].size()) << i;
    EXPECT_EQ(rows[i][0], "cpu");
    EXPECT_EQ(rows[i][7], "ok") << rows[i].back();
    EXPECT_EQ(rows[i][17], "fp64 full");
    EXPECT_LT(std::stod(rows[i][16]), 1e-5) << "error against fp64";
    if (rows[i][5] == "1024") (rows[i][1] == "fused" ? fused_1024 : staged_1024) = std::stod(rows[i][8]);
  }
  // Both timed (which is faster is a measurement, not a test: a busy machine may reorder them).
  EXPECT_GT(staged_1024, 0);
  EXPECT_GT(fused_1024, 0);

  const Image img = read_png(png);
  EXPECT_EQ(img.width, 1280);
  EXPECT_EQ(img.height, 800);
  int orange = 0;
  std::size_t colours = 0;
  picture_stats(img, orange, colours);
  EXPECT_GT(orange, 50) << "the first series is drawn";
  EXPECT_GT(colours, 20u) << "not blank";
}

TEST(PerfViewHeadless, EveryChartRendersInBothLanguages) {
  for (const char* chart : {"time", "tflops", "speedup", "roofline", "memory"})
    for (const char* lang : {"en", "zh"}) {
      SCOPED_TRACE(std::string(chart) + " " + lang);
      const std::string png = work_dir().file(std::string("chart-") + chart + "-" + lang + ".png");
      const test::BinaryRun r = run_view({"--view", "perf", "--backend", "cpu", "--perf-n", "64,128", "--perf-d",
                                          "16", "--perf-repeat", "1", "--perf-warmup", "0", "--perf-chart", chart,
                                          "--lang", lang, "--screenshot", png});
      ASSERT_EQ(r.code, 0) << r.err;
      int orange = 0;
      std::size_t colours = 0;
      picture_stats(read_png(png), orange, colours);
      EXPECT_GT(orange, 20);
      EXPECT_GT(colours, 20u);
    }
}

// UI scale 2 in a 1280 x 800 window: the settings scroll in the height the chart leaves them (Run
// and the progress stay in view), and the chart keeps a plot, its y labels a line apart (they had
// been written over each other on a plot a few pixels tall); at scale 1 nothing scrolls.
TEST(PerfViewHeadless, AtALargeUiScaleTheSettingsScrollAndTheChartKeepsItsPlot) {
  for (const auto& [lang, scale] : {std::pair{"en", "2"}, {"zh", "2"}, {"en", "1"}}) {
    SCOPED_TRACE(std::string(lang) + " at " + scale);
    const std::string png = work_dir().file(std::string("scale-") + lang + scale + ".png"),
                      json = work_dir().file(std::string("scale-") + lang + scale + ".json");
    const test::BinaryRun r =
        run_view({"--view", "perf", "--backend", "cpu", "--perf-n", "64,128", "--perf-d", "16", "--perf-repeat", "1",
                  "--perf-warmup", "0", "--lang", lang, "--size", "1280x800", "--ui-scale", scale, "--screenshot", png,
                  "--state-dump", json});
    ASSERT_EQ(r.code, 0) << r.err;
    const nlohmann::json state = nlohmann::json::parse(test::read_file(json));
    const nlohmann::json& pv = state["perf"];
    const double font = state["font_px"].get<double>();
    // At scale 2 the settings scroll, or (too little room even for their strip) the whole panel.
    EXPECT_EQ(pv["settings_scrolled"].get<bool>() || pv["panel_scrolls"].get<bool>(), std::string(scale) == "2");
    EXPECT_GE(pv["plot"][3].get<double>(), 2 * font) << "the plot's height";
    const std::vector<double> ys = pv["y_labels"].get<std::vector<double>>();
    ASSERT_GE(ys.size(), 2u);
    for (std::size_t i = 1; i < ys.size(); ++i) EXPECT_GE(ys[i - 1] - ys[i], font) << "labels " << i - 1 << ", " << i;
    // Without a device, the line saying why CUDA is off is one line within the panel (shortened
    // with "…" where it is narrower: Chinese at scale 2).
    if (!cuda_available()) {
      const nlohmann::json& off = pv["cuda_off"];
      EXPECT_FALSE(off["text"].get<std::string>().empty());
      EXPECT_GT(off["room"].get<double>(), 0);
      EXPECT_LE(off["w"].get<double>(), off["room"].get<double>()) << off.dump();
    }
  }
}

// A window too small for the settings' strip and the chart's minimum (1024 x 768 at scale 2, both
// passes: the chart had shrunk to one line, its title cut mid-word): the whole panel scrolls, the
// chart keeps a plot five lines tall and the screenshot shows it.
TEST(PerfViewHeadless, InACrampedWindowThePanelScrollsAndTheChartKeepsItsMinimum) {
  const std::string png = work_dir().file("cramped.png"), json = work_dir().file("cramped.json");
  const test::BinaryRun r = run_view({"--view", "perf", "--backend", "cpu", "--perf-variant", "staged,fused",
                                      "--perf-precision", "fp32,bf16", "--perf-n", "64,128", "--perf-d", "16",
                                      "--perf-repeat", "1", "--perf-warmup", "0", "--perf-pass", "both", "--lang", "en",
                                      "--size", "1024x768", "--ui-scale", "2", "--screenshot", png, "--state-dump", json});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json state = nlohmann::json::parse(test::read_file(json));
  const nlohmann::json& pv = state["perf"];
  const double font = state["font_px"].get<double>();
  EXPECT_TRUE(pv["panel_scrolls"].get<bool>());
  EXPECT_GE(pv["plot"][3].get<double>(), 4.9 * font) << "the plot's height";
  EXPECT_GT(pv["plot"][1].get<double>(), 0) << "scrolled down to the chart: its plot is in the window";
  EXPECT_LT(pv["plot"][1].get<double>() + pv["plot"][3].get<double>(), 768);
}

TEST(PerfViewHeadless, AnAllSkippedSweepExitsZeroWithTheReasons) {
  const std::string png = work_dir().file("skipped.png"), csv = work_dir().file("skipped.csv");
  const test::BinaryRun r = run_view({"--view", "perf", "--backend", "cuda", "--perf-n", "256,512", "--perf-output",
                                      csv, "--screenshot", png},
                                     "ATTNLAB_CUDA_FAULT=nodevice");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto rows = csv_rows(test::read_file(csv));
  ASSERT_EQ(rows.size(), 5u);  // staged and fused, fp32, two N
  for (std::size_t i = 1; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i][7], "skipped");
    EXPECT_NE(rows[i].back().find("no CUDA device"), std::string::npos) << rows[i].back();
  }
  EXPECT_GT(read_png(png).width, 0);
  // Not named by --backend, CUDA without a device is unticked (its box greyed out): no case is
  // planned for it; named beside the CPU, its cases are listed with the reason, as asked.
  for (const char* backend : {"", "auto", "cpu,cuda"}) {
    std::vector<std::string> args = {"--view", "perf", "--perf-n", "64", "--perf-d", "16", "--perf-repeat", "1",
                                     "--perf-warmup", "0", "--perf-output", csv, "--screenshot", png};
    if (*backend) args.insert(args.end(), {"--backend", backend});
    const test::BinaryRun both = run_view(args, "ATTNLAB_CUDA_FAULT=nodevice");
    ASSERT_EQ(both.code, 0) << both.err;
    const auto cases = csv_rows(test::read_file(csv));
    const bool named = std::string(backend) == "cpu,cuda";
    ASSERT_EQ(cases.size(), named ? 5u : 3u) << backend;  // staged and fused, fp32, one N, per backend
    std::size_t cuda = 0;
    for (std::size_t i = 1; i < cases.size(); ++i) cuda += cases[i][0] == "cuda";
    EXPECT_EQ(cuda, named ? 2u : 0u) << backend;
  }
}

TEST(PerfViewHeadless, ABadListValueIsOneErrorLineAndExitTwo) {
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"--perf-n", "256,,512"}, {"--perf-n", "0"}, {"--backend", "cpu,tpu"},
        {"--perf-variant", "plain"}, {"--perf-precision", "fp16"}, {"--perf-mask", "diagonal"}}) {
    std::vector<std::string> args = {"--view", "perf", "--screenshot", work_dir().file("bad.png")};
    args.insert(args.end(), bad.begin(), bad.end());
    const test::BinaryRun r = run_view(args);
    EXPECT_EQ(r.code, 2) << bad[1];
    const auto lines = test::lines_of(r.err);
    ASSERT_EQ(lines.size(), 1u) << r.err;
    EXPECT_EQ(lines[0].rfind("error: ", 0), 0u) << lines[0];
  }
  const test::BinaryRun r = run_view({"--view", "perf", "--backend", "cpu", "--perf-n", "64", "--perf-output",
                                      "/nonexistent-dir/x.csv", "--screenshot", work_dir().file("bad.png")});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(test::lines_of(r.err).size(), 1u) << r.err;
}

TEST(PerfViewHeadless, BothPassesWriteForwardAndBackwardRowsAndDrawInBothLanguages) {
  for (const char* lang : {"en", "zh"}) {
    SCOPED_TRACE(lang);
    const std::string png = work_dir().file(std::string("pass-") + lang + ".png"),
                      csv = work_dir().file(std::string("pass-") + lang + ".csv");
    const test::BinaryRun r = run_view({"--view", "perf", "--backend", "cpu", "--perf-pass", "both", "--perf-n",
                                        "64,128", "--perf-d", "16", "--perf-repeat", "1", "--perf-warmup", "0",
                                        "--perf-output", csv, "--lang", lang, "--screenshot", png});
    ASSERT_EQ(r.code, 0) << r.err;
    const auto rows = csv_rows(test::read_file(csv));
    ASSERT_EQ(rows.size(), 9u);  // staged, fused x two N x forward, backward
    const auto pass_col = std::find(rows[0].begin(), rows[0].end(), "pass") - rows[0].begin();
    ASSERT_LT(static_cast<std::size_t>(pass_col), rows[0].size());
    std::size_t backward = 0;
    for (std::size_t i = 1; i < rows.size(); ++i) {
      ASSERT_EQ(rows[i].size(), rows[0].size()) << i;
      EXPECT_EQ(rows[i][7], "ok") << rows[i].back();
      if (rows[i][pass_col] == "backward") ++backward;
      else EXPECT_EQ(rows[i][pass_col], "forward");
    }
    EXPECT_EQ(backward, 4u);
    int orange = 0;
    std::size_t colours = 0;
    picture_stats(read_png(png), orange, colours);
    EXPECT_GT(orange, 20);
    EXPECT_GT(colours, 20u);
  }
  // In the smallest window the legend's names are whole, wrapped at the panel's width (their pass
  // last), never cut at its edge.
  const std::string png = work_dir().file("pass-small.png"), json = work_dir().file("pass-small.json");
  const test::BinaryRun r = run_view({"--view", "perf", "--backend", "cpu", "--perf-pass", "both", "--perf-mask",
                                      "none,causal", "--perf-n", "64", "--perf-d", "16", "--perf-repeat", "1",
                                      "--perf-warmup", "0", "--lang", "en", "--size", "960x600", "--screenshot", png,
                                      "--state-dump", json});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto labels =
      nlohmann::json::parse(test::read_file(json))["perf"]["legend"].get<std::vector<std::vector<std::string>>>();
  ASSERT_EQ(labels.size(), 8u);
  std::size_t wrapped = 0;
  for (const std::vector<std::string>& lines : labels) {
    std::string whole;
    for (const std::string& l : lines) whole += (whole.empty() ? "" : " ") + l;
    EXPECT_TRUE(whole.starts_with("cpu ") && (whole.ends_with(" forward") || whole.ends_with(" backward"))) << whole;
    wrapped += lines.size() > 1;
  }
  EXPECT_GT(wrapped, 0u) << "960 pixels leave no room for the longest names on one line";
}

#endif  // ATTNLAB_VIEW_BINARY

}  // namespace
