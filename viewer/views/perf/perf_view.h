// The Performance view's logic (--view perf), free of SDL and ImGui so that it is unit-tested:
//   - the sweep it runs: a bench::Spec (engine/bench.h, the engine `attnlab bench` runs) edited by
//     the view's controls or given by the --perf-* flags; the N list as a list or a doubling range;
//     the pass (forward, backward or both, as `attnlab bench --pass`)
//   - PerfRun: the sweep on its own std::thread (the UI stays live), its progress (case in
//     flight, cases done, an estimate of the time left), Cancel (the engine stops after the
//     repetition in flight), and the machine's ceilings measured before the first case
//   - the charts' data: one series per (backend, variant, precision, mask, heads, d, pass) with a
//     point per N that ran and the skipped N with their reasons (the legend lists them); the speed-up of
//     every series against a baseline series; the roofline placement (arithmetic intensity =
//     FLOPs / moved bytes against attained GFLOP/s, under min(GEMM rate, intensity x bandwidth))
//   - log axes: ranges padded to whole decades or powers of two, ticks (1-2-5 per decade when few
//     decades, decades otherwise), value <-> pixel maps, tick labels; the nearest point for hover
// viewer/views/perf/panel.cpp draws it.
#pragma once

#include "engine/bench.h"
#include "viewer/draw/layout.h"
#include "viewer/views/view.h"

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace attnlab::viewer {

// The view's sweep before any flag or control changes it: cpu and cuda (cuda greyed out where no
// device answers), staged and fused, fp32, no mask, one head, d = 64, N = 256..4096, 5 timed
// repetitions after 1 warm-up, CPU cases estimated over 30 s skipped.
bench::Spec default_perf_spec();

// ---- the N list --------------------------------------------------------------------------------
// "256,512,1024" (a list) or "256..16384" (doubling from the first to at most the last). Throws
// InputError naming `flag` ("--perf-n values must be whole numbers between 1 and 1048576, got
// 'x'", "--perf-n range 512..256 must go up").
std::vector<int> parse_n_list(const std::string& flag, const std::string& text);
// The list as parse_n_list reads it back: a doubling run of three or more as "a..b", else "a,b,c".
std::string n_list_text(const std::vector<int>& ns);

// ---- the pass ----------------------------------------------------------------------------------
// The passes are bench::parse_passes / passes_name (engine/bench.h), as `attnlab bench --pass`.
// True when some result times (or would time) the backward: the view then states its FLOP rule.
bool has_backward(const std::vector<bench::Result>& results);
// The backward's FLOP rule as the view states it (once, under the legend), in `lang`, with the
// engine's factors (bench::backward_flop_factor of the fused and the staged backward).
std::string backward_flop_rule_text(Lang lang);

// ---- series ------------------------------------------------------------------------------------
enum class PerfChart { Time, Tflops, Speedup, Roofline, Memory };
// "time" | "tflops" | "speedup" | "roofline" | "memory"; parse throws InputError otherwise.
PerfChart parse_perf_chart(const std::string& s);
const char* perf_chart_name(PerfChart c);

struct PerfPoint {
  int n = 0;
  std::size_t result = 0;        // index into the sweep's results
  double median_ms = 0, min_ms = 0, max_ms = 0;
  double tflops = 0, tflops_lo = 0, tflops_hi = 0;  // at the median, the slowest, the fastest
  double peak_bytes = 0;
  double intensity = 0;          // FLOPs / moved bytes
  double gflops = 0;             // attained, at the median
  double rel_err = 0;
};

struct PerfSkip {
  int n = 0;
  Message reason;
};

struct PerfSeries {
  bench::Case proto;             // n is 0: the series' fixed part
  // "cpu fused fp32" (+ mask, heads, d where the sweep varies them), then " backward" for a
  // backward series and " forward" for a forward one beside backward series
  std::string label;
  std::vector<PerfPoint> points; // ascending n, only cases that ran
  std::vector<PerfSkip> skipped; // ascending n
  std::size_t pending = 0;       // cases not run yet (or left by a Cancel)
};

// Series in the order their first case appears in the results (the plan's list order); a case
// that has not run and has no reason counts as pending. The labels' words (variant, mask, pass)
// in `lang`.
std::vector<PerfSeries> build_series(const std::vector<bench::Result>& results, Lang lang = Lang::En);

// speed-up of `s` against `base` at every N both ran: base median / s median (> 1: s is faster).
struct SpeedupPoint {
  int n = 0;
  double speedup = 0;
};
std::vector<SpeedupPoint> speedup_against(const PerfSeries& s, const PerfSeries& base);

// The default baseline: the first series with a point (0 when none has).
std::size_t default_baseline(const std::vector<PerfSeries>& series);

// ---- axes --------------------------------------------------------------------------------------
struct Tick {
  double value = 0;
  std::string label;
  bool major = true;             // decades (or the N values); minor ticks get no label
};

struct LogAxis {
  double lo = 1, hi = 10;        // the axis ends, lo < hi, both > 0
  std::vector<Tick> ticks;
  // value -> position in [a, b] (a at lo, b at hi), log-scaled; values outside go outside.
  double map(double v, double a, double b) const;
};

// An axis covering [min, max] (both > 0; min == max widens by a decade either side), its ends on
// whole decades at least kLogAxisPad decades beyond min and max (a value on a decade would sit on
// the chart's edge, its marker half clipped); ticks at 1-2-5 per decade when the axis spans at most three decades, else at
// every decade (every other when more than eight). Labels by format_tick in `unit`.
enum class TickUnit { Plain, Milliseconds, Bytes };
inline constexpr double kLogAxisPad = 0.1;
LogAxis log_axis(double min, double max, TickUnit unit = TickUnit::Plain);
// The N axis: ends half a doubling beyond the smallest and largest N, a major tick at each N of
// the sweep (labels thinned to every other when more than ten).
LogAxis n_axis(const std::vector<int>& ns);
// "0.5 ms", "12 ms", "1.5 s"; "64 MB", "2 GB" (decimal, as bench's MB); plain "%.3g" below 1000,
// then "2k", "10k", "1M", "1G".
std::string format_tick(double v, TickUnit unit);

// [min, max] of the chart's values over every series (time: min_ms..max_ms, TFLOP/s: lo..hi, memory:
// peak bytes), false when there is nothing to show.
bool chart_range(const std::vector<PerfSeries>& series, PerfChart chart, double& lo, double& hi);
// The N values of every point and skip, ascending, once each; where there is none yet (before a
// run), `planned` (the sweep's N, ascending): the axis the sweep will fill.
std::vector<int> all_ns(const std::vector<PerfSeries>& series, const std::vector<int>& planned = {});

// ---- roofline ----------------------------------------------------------------------------------
struct Roof {
  std::string backend;           // "cpu" | "cuda"
  bench::Ceilings ceilings;
  // Attainable GFLOP/s at `intensity` FLOP/byte: min(GEMM, intensity x bandwidth); 0 when either
  // ceiling was not measured.
  double attainable(double intensity) const;
  // Where the two roofs meet (GEMM / bandwidth), 0 when not measured.
  double ridge() const;
};

// The roofline's axes: intensity (x) and GFLOP/s (y) covering every point and every measured
// roof's ridge, with the roofs' levels inside.
void roofline_ranges(const std::vector<PerfSeries>& series, const std::vector<Roof>& roofs, double& x_lo,
                     double& x_hi, double& y_lo, double& y_hi);

// ---- hover -------------------------------------------------------------------------------------
struct ScreenPoint {
  float x = 0, y = 0;
  std::size_t series = 0, point = 0;
};
// The point nearest (mx, my) within `radius` pixels; -1 when none.
int nearest_point(const std::vector<ScreenPoint>& pts, float mx, float my, float radius);

// ---- the run -----------------------------------------------------------------------------------
// What the UI reads each frame (a copy taken under the run's lock).
struct PerfSnapshot {
  std::vector<bench::Result> results;
  std::vector<Roof> roofs;       // measured before the first case (cpu, cuda where it ran)
  double host_room = 0;          // host_available_bytes when the sweep started (0: unknown), the Memory chart's line
  bool running = false, finished = false, cancelled = false, device_failure = false;
  bool measuring = false;        // the probes are running
  std::size_t done = 0, total = 0;
  int in_flight = -1;            // index into results of the case being timed, -1: none
  double elapsed_s = 0;
  double eta_s = -1;             // estimated seconds left, -1: unknown
  std::string error;             // an exception the sweep ended with
  std::uint64_t revision = 0;    // bumped on every change
};

// A duration as the progress bar says it: "1.2 s" below 10 s (one decimal, rounded, so a sweep of
// 1.1 s never reads "2 s"), "14 s", "2 min 5 s"; "?" when negative (unknown).
std::string duration_text(double seconds);

// The reason the legend gives for a skipped case of `backend`, in `lang`: where CUDA is off, a CUDA
// case's reason is why CUDA is off, `cuda_reason`, the words of the line above the chart, less the
// runtime's explanation in parentheses that line adds (not the engine's "no CUDA device: …"
// prefix, nor the backward's "not in this build" when the whole build has no CUDA), as
// cuda_reason_text says it; any other case's as the engine gave it, in `lang` (the kernels' own
// shape rules stay in English).
std::string legend_reason(const std::string& backend, const Message& reason, bool cuda_ok, const std::string& cuda_reason,
                          Lang lang);

// Estimated seconds for the cases not finished (index >= done in run order is not known here:
// every result with ran == false, reason == "" and not `in_flight` counts, plus half the one in
// flight): FLOPs x (repeat + warmup) over the rate observed so far for its backend / variant /
// precision / pass (total FLOPs timed / total time, from the cases that ran), else the engine's
// pessimistic CPU guess, else 1 TFLOP/s for CUDA.
double estimate_seconds_left(const std::vector<bench::Result>& results, int in_flight, const bench::Spec& s);

class PerfRun {
 public:
  PerfRun() = default;
  ~PerfRun();  // cancels and joins
  PerfRun(const PerfRun&) = delete;
  PerfRun& operator=(const PerfRun&) = delete;

  // Starts the sweep of `spec` on a new thread (a running one is cancelled and joined first).
  // measure_ceilings: run the probes first (the roofline's roofs). Checks the spec (InputError).
  void start(const bench::Spec& spec, bool measure_ceilings = true);
  // Asks the sweep to stop after the repetition in flight; returns at once.
  void cancel();
  // Waits for the thread to end.
  void join();
  bool running() const;
  PerfSnapshot snapshot() const;
  const bench::Spec& spec() const { return spec_; }

 private:
  void body(bool measure_ceilings);
  bench::Spec spec_;
  std::thread thread_;
  std::atomic<bool> cancel_{false};
  mutable std::mutex mu_;
  PerfSnapshot state_;
  double started_ = 0;
};

// The view: the sweep being edited, the run, the chart shown.
class PerfView final : public View {
 public:
  struct Options {
    bench::Spec spec = default_perf_spec();  // --backend (a list here), --perf-*
    std::string output;                      // --perf-output FILE.csv (bench's CSV, its pass column too)
    PerfChart chart = PerfChart::Time;       // --perf-chart time|tflops|speedup|roofline|memory
    bool cuda_named = false;                 // --backend named cuda (not auto): kept without a device
  };
  static const char* label(Lang lang);
  static bool parse_flag(const std::string& flag, const FlagValue& value, Options& o);
  // Shown: the view times every backend --backend lists (auto: both) and its lists are checked.
  static void finish_options(Options& o, bool shown, std::string& backend);
  static std::string usage();
  PerfView() = default;
  // Headless (--screenshot) and shown: runs the sweep to the end here and writes --perf-output
  // (InputError when it cannot; DeviceError when a case failed on the device).
  PerfView(const ViewContext& ctx, const Options& o);
  bool info_panel() const override { return false; }
  bool measuring() const override { return run.running(); }
  // No steps; the sweep has its own masks (its checkboxes) and uses no query and no temperature:
  // ↑ / ↓, M and [ / ] only set the controls' for the other views, and F1 says so.
  StepKeysHelp step_keys_help(Lang lang) const override;
  void dump(nlohmann::json& j, const Session& s) const override;

  bench::Spec spec = default_perf_spec();  // what Run starts (the controls edit it)
  std::string n_text;                      // the N field as typed
  std::string n_error;                     // why the N field was refused
  PerfChart chart = PerfChart::Time;
  int baseline = -1;                       // speed-up baseline series, -1: default_baseline
  std::string csv_path = "attnlab-perf.csv";  // the Export CSV button's file
  bool cuda_ok = false;
  std::string cuda_reason;
  PerfRun run;
  bool started = false;                    // Run was pressed (or the headless sweep ran)
  // The panel's last frame: the settings as a header that scrolls above Run and the chart, the
  // chart's plot rectangle (x, y, w, h) and the heights of the y axis's labels it drew. In the
  // state dump.
  ScrollHeader settings_header;
  float below_h = 0;  // Run's rows and the chart chooser, between the settings and the chart
  std::array<float, 4> plot{};
  std::vector<float> y_labels;
  bool panel_scrolls = false;  // the whole panel scrolls (too small for the settings' strip and the chart)
  std::vector<std::vector<std::string>> legend_lines;  // each series' name as the legend drew it, by line
  // The line saying why CUDA is off as drawn, its width and the room the panel had (empty, 0, 0
  // with a device).
  std::string cuda_off;
  float cuda_off_w = 0, cuda_off_room = 0;
};

void draw_panel(PerfView& v, Shell& app, const Layout& l);

// Refuses (InputError) a path that cannot be written, before the sweep: the file is opened for
// appending and, when it did not exist, removed again. Empty passes.
void check_writable(const std::string& path);
// Writes bench's CSV (bench::render_csv) of the results to `path` (InputError when it cannot).
void write_perf_csv(const std::string& path, const std::vector<bench::Result>& results);

}  // namespace attnlab::viewer
