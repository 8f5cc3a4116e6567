// The Performance view's logic (see perf_view.h): the N list, series from the engine's results,
// speed-ups, log axes and ticks, roofline placement, hover, and the sweep's thread.
#include "viewer/views/perf/perf_view.h"

#include "core/backend.h"
#include "core/format.h"
#include "core/io.h"
#include "core/memory.h"
#include "core/problem.h"
#include "engine/registry.h"
#include "engine/bench_report.h"
#include "viewer/draw/strings.h"
#include "viewer/session/options.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sys/stat.h>
#include <tuple>

namespace attnlab::viewer {
namespace {

double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// The series a case belongs to: everything but n.
auto series_key(const bench::Case& c) {
  return std::make_tuple(c.backend, c.variant, c.precision, c.mask, c.heads, c.d, c.pass);
}

// The rate a finished case tells about the cases left: the same path (backend, variant,
// precision) and pass, since a backward runs at its own rate.
std::string rate_key(const bench::Case& c) { return c.backend + " " + c.variant + " " + c.precision + " " + c.pass; }

std::string trim_number(double v) { return format_number("%.3g", v); }

}  // namespace

bench::Spec default_perf_spec() {
  bench::Spec s;
  s.backends = {"cpu", "cuda"};
  s.variants = {"staged", "fused"};
  s.precisions = {"fp32"};
  s.masks = {"none"};
  s.heads = {1};
  s.ds = {64};
  s.ns = {256, 512, 1024, 2048, 4096};
  s.repeat = 5;
  s.warmup = 1;
  s.max_seconds = 30;
  s.max_seconds_flag = "--perf-max-seconds";
  return s;
}

// ---- the N list --------------------------------------------------------------------------------

std::vector<int> parse_n_list(const std::string& flag, const std::string& text) {
  constexpr int kMaxN = 1 << 20;
  const std::size_t dots = text.find("..");
  if (dots == std::string::npos) return bench::int_list(flag.c_str(), text, kMaxN);
  const std::vector<int> lo = bench::int_list(flag.c_str(), text.substr(0, dots), kMaxN);
  const std::vector<int> hi = bench::int_list(flag.c_str(), text.substr(dots + 2), kMaxN);
  if (lo.size() != 1 || hi.size() != 1)
    throw InputError(Msg::PerfSizesForm, {flag, text});
  if (hi[0] < lo[0]) throw InputError(Msg::PerfRangeDown, {flag, text});
  std::vector<int> ns;
  for (long long n = lo[0]; n <= hi[0]; n *= 2) ns.push_back(static_cast<int>(n));
  return ns;
}

std::string n_list_text(const std::vector<int>& ns) {
  bool doubling = ns.size() >= 3;
  for (std::size_t i = 1; i < ns.size() && doubling; ++i) doubling = ns[i] == 2 * ns[i - 1];
  if (doubling) return std::to_string(ns.front()) + ".." + std::to_string(ns.back());
  std::string s;
  for (std::size_t i = 0; i < ns.size(); ++i) s += (i ? "," : "") + std::to_string(ns[i]);
  return s;
}

// ---- the pass ----------------------------------------------------------------------------------

bool has_backward(const std::vector<bench::Result>& results) {
  return std::any_of(results.begin(), results.end(), [](const bench::Result& r) { return r.c.backward(); });
}

std::string backward_flop_rule_text(Lang lang) {
  bench::Case fused, staged;
  fused.pass = staged.pass = "backward";
  fused.variant = "fused";
  staged.variant = "staged";
  const char* f = tr(lang, S::PerfBackwardRule);
  std::vector<char> buf(std::strlen(f) + 64);
  std::snprintf(buf.data(), buf.size(), f, trim_number(bench::backward_flop_factor(fused)).c_str(),
                trim_number(bench::backward_flop_factor(staged)).c_str());
  return buf.data();
}

// ---- series ------------------------------------------------------------------------------------

PerfChart parse_perf_chart(const std::string& s) {
  for (PerfChart c : {PerfChart::Time, PerfChart::Tflops, PerfChart::Speedup, PerfChart::Roofline, PerfChart::Memory})
    if (s == perf_chart_name(c)) return c;
  throw InputError(Msg::OptionWords, {"--perf-chart", "time, tflops, speedup, roofline, memory", s});
}

const char* perf_chart_name(PerfChart c) {
  switch (c) {
    case PerfChart::Time: return "time";
    case PerfChart::Tflops: return "tflops";
    case PerfChart::Speedup: return "speedup";
    case PerfChart::Roofline: return "roofline";
    case PerfChart::Memory: return "memory";
  }
  return "time";
}

std::vector<PerfSeries> build_series(const std::vector<bench::Result>& results, Lang lang) {
  // What the sweep varies besides backend, variant and precision: only those parts join the label.
  std::set<std::string> masks, passes;
  std::set<int> heads, ds;
  for (const auto& r : results) {
    masks.insert(r.c.mask);
    heads.insert(r.c.heads);
    ds.insert(r.c.d);
    passes.insert(r.c.pass);
  }
  std::vector<PerfSeries> out;
  std::map<decltype(series_key(bench::Case{})), std::size_t> index;
  for (std::size_t i = 0; i < results.size(); ++i) {
    const bench::Result& r = results[i];
    const auto key = series_key(r.c);
    auto it = index.find(key);
    if (it == index.end()) {
      PerfSeries s;
      s.proto = r.c;
      s.proto.n = 0;
      s.label = r.c.backend + " " + tr(lang, r.c.variant == "fused" ? S::TermFused : S::TermStaged) + " " + r.c.precision;
      if (masks.size() > 1) s.label += std::string(" ") + tr(lang, r.c.mask == "causal" ? S::SetMaskCausal : S::SetMaskNone);
      if (heads.size() > 1) s.label += " h=" + std::to_string(r.c.heads);
      if (ds.size() > 1) s.label += " d=" + std::to_string(r.c.d);
      // A backward series always says so; a forward one only beside backward ones.
      if (r.c.backward() || passes.size() > 1)
        s.label += std::string(" ") + tr(lang, r.c.backward() ? S::PerfPassBackward : S::PerfPassForward);
      it = index.emplace(key, out.size()).first;
      out.push_back(std::move(s));
    }
    PerfSeries& s = out[it->second];
    if (r.ran) {
      PerfPoint p;
      p.n = r.c.n;
      p.result = i;
      p.median_ms = r.median_ms;
      p.min_ms = r.min_ms;
      p.max_ms = r.max_ms;
      p.tflops = r.tflops;
      p.tflops_lo = r.max_ms > 0 ? r.flops / (r.max_ms * 1e-3) / 1e12 : 0;
      p.tflops_hi = r.min_ms > 0 ? r.flops / (r.min_ms * 1e-3) / 1e12 : 0;
      p.peak_bytes = static_cast<double>(r.peak_bytes);
      p.intensity = r.moved_bytes > 0 ? r.flops / r.moved_bytes : 0;
      p.gflops = r.tflops * 1e3;
      p.rel_err = r.rel_err;
      s.points.push_back(p);
    } else if (!r.reason.empty()) {
      s.skipped.push_back({r.c.n, r.reason});
    } else {
      ++s.pending;
    }
  }
  for (PerfSeries& s : out) {
    std::sort(s.points.begin(), s.points.end(), [](const PerfPoint& a, const PerfPoint& b) { return a.n < b.n; });
    std::stable_sort(s.skipped.begin(), s.skipped.end(), [](const PerfSkip& a, const PerfSkip& b) { return a.n < b.n; });
  }
  return out;
}

std::vector<SpeedupPoint> speedup_against(const PerfSeries& s, const PerfSeries& base) {
  std::vector<SpeedupPoint> out;
  for (const PerfPoint& p : s.points)
    for (const PerfPoint& b : base.points)
      if (b.n == p.n && p.median_ms > 0) out.push_back({p.n, b.median_ms / p.median_ms});
  return out;
}

std::size_t default_baseline(const std::vector<PerfSeries>& series) {
  for (std::size_t i = 0; i < series.size(); ++i)
    if (!series[i].points.empty()) return i;
  return 0;
}

// ---- axes --------------------------------------------------------------------------------------

double LogAxis::map(double v, double a, double b) const {
  const double l0 = std::log10(lo), l1 = std::log10(hi);
  const double t = (std::log10(std::max(v, 1e-300)) - l0) / (l1 - l0);
  return a + t * (b - a);
}

std::string format_tick(double v, TickUnit unit) {
  switch (unit) {
    case TickUnit::Milliseconds:
      if (v >= 1000) return trim_number(v / 1000) + " s";
      if (v < 1e-3) return trim_number(v * 1e3) + " µs";
      return trim_number(v) + " ms";
    case TickUnit::Bytes:
      if (v >= 1e12) return trim_number(v / 1e12) + " TB";
      if (v >= 1e9) return trim_number(v / 1e9) + " GB";
      if (v >= 1e6) return trim_number(v / 1e6) + " MB";
      if (v >= 1e3) return trim_number(v / 1e3) + " kB";
      return trim_number(v) + " B";
    case TickUnit::Plain: break;
  }
  // Large plain values with a suffix ("2k", "10k", "1M"): "1e+04" is not for a classroom.
  if (v >= 1e9) return trim_number(v / 1e9) + "G";
  if (v >= 1e6) return trim_number(v / 1e6) + "M";
  if (v >= 1e3) return trim_number(v / 1e3) + "k";
  return trim_number(v);
}

LogAxis log_axis(double min, double max, TickUnit unit) {
  LogAxis ax;
  if (!(min > 0) || !std::isfinite(min)) min = 1;
  if (!(max > 0) || !std::isfinite(max)) max = min;
  if (max < min) std::swap(min, max);
  int d0 = static_cast<int>(std::floor(std::log10(min) - kLogAxisPad));
  int d1 = static_cast<int>(std::ceil(std::log10(max) + kLogAxisPad));
  if (d1 <= d0) {
    --d0;
    ++d1;
  }
  ax.lo = std::pow(10.0, d0);
  ax.hi = std::pow(10.0, d1);
  const int decades = d1 - d0;
  const int step = decades > 8 ? 2 : 1;
  for (int k = d0; k <= d1; ++k) {
    const double dec = std::pow(10.0, k);
    if ((k - d0) % step == 0) ax.ticks.push_back({dec, format_tick(dec, unit), true});
    if (decades <= 3 && k < d1) {
      for (double m : {2.0, 5.0}) ax.ticks.push_back({m * dec, format_tick(m * dec, unit), false});
    }
  }
  return ax;
}

LogAxis n_axis(const std::vector<int>& ns) {
  LogAxis ax;
  if (ns.empty()) return log_axis(1, 10);
  const double lo = *std::min_element(ns.begin(), ns.end()), hi = *std::max_element(ns.begin(), ns.end());
  ax.lo = lo / std::sqrt(2.0);
  ax.hi = hi * std::sqrt(2.0);
  const bool thin = ns.size() > 10;
  for (std::size_t i = 0; i < ns.size(); ++i)
    ax.ticks.push_back({static_cast<double>(ns[i]), thin && i % 2 ? "" : std::to_string(ns[i]), true});
  return ax;
}

bool chart_range(const std::vector<PerfSeries>& series, PerfChart chart, double& lo, double& hi) {
  lo = std::numeric_limits<double>::infinity();
  hi = 0;
  for (const PerfSeries& s : series)
    for (const PerfPoint& p : s.points) {
      double a = 0, b = 0;
      switch (chart) {
        case PerfChart::Time: a = p.min_ms; b = p.max_ms; break;
        case PerfChart::Tflops: a = p.tflops_lo; b = p.tflops_hi; break;
        case PerfChart::Memory: a = b = p.peak_bytes; break;
        case PerfChart::Roofline: a = b = p.gflops; break;
        case PerfChart::Speedup: return false;
      }
      if (a > 0) lo = std::min(lo, a);
      if (b > 0) hi = std::max(hi, b);
    }
  return hi > 0 && std::isfinite(lo);
}

std::vector<int> all_ns(const std::vector<PerfSeries>& series, const std::vector<int>& planned) {
  std::set<int> ns;
  for (const PerfSeries& s : series) {
    for (const PerfPoint& p : s.points) ns.insert(p.n);
    for (const PerfSkip& k : s.skipped) ns.insert(k.n);
  }
  if (ns.empty()) ns.insert(planned.begin(), planned.end());
  return {ns.begin(), ns.end()};
}

// ---- roofline ----------------------------------------------------------------------------------

double Roof::attainable(double intensity) const {
  if (ceilings.compute_gflops() <= 0 || ceilings.bandwidth_gbs <= 0) return 0;
  return std::min(ceilings.compute_gflops(), intensity * ceilings.bandwidth_gbs);
}

double Roof::ridge() const {
  if (ceilings.compute_gflops() <= 0 || ceilings.bandwidth_gbs <= 0) return 0;
  return ceilings.compute_gflops() / ceilings.bandwidth_gbs;
}

void roofline_ranges(const std::vector<PerfSeries>& series, const std::vector<Roof>& roofs, double& x_lo,
                     double& x_hi, double& y_lo, double& y_hi) {
  x_lo = y_lo = std::numeric_limits<double>::infinity();
  x_hi = y_hi = 0;
  const auto take = [](double v, double& lo, double& hi) {
    if (v > 0 && std::isfinite(v)) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  };
  for (const PerfSeries& s : series)
    for (const PerfPoint& p : s.points) {
      take(p.intensity, x_lo, x_hi);
      take(p.gflops, y_lo, y_hi);
    }
  for (const Roof& r : roofs) {
    if (r.ridge() <= 0) continue;
    take(r.ridge() * 4, x_lo, x_hi);  // the flat roof visible past the ridge
    take(r.ridge() / 4, x_lo, x_hi);
    take(r.ceilings.compute_gflops(), y_lo, y_hi);
    take(r.ceilings.gemm_gflops, y_lo, y_hi);
  }
  if (!(x_hi > 0)) x_lo = 1, x_hi = 100;
  if (!(y_hi > 0)) y_lo = 1, y_hi = 100;
  // The bandwidth roof at the left edge, so its slope enters the picture.
  for (const Roof& r : roofs)
    if (r.ridge() > 0) take(r.attainable(x_lo), y_lo, y_hi);
}

// ---- hover -------------------------------------------------------------------------------------

int nearest_point(const std::vector<ScreenPoint>& pts, float mx, float my, float radius) {
  int best = -1;
  float best_d2 = radius * radius;
  for (std::size_t i = 0; i < pts.size(); ++i) {
    const float dx = pts[i].x - mx, dy = pts[i].y - my, d2 = dx * dx + dy * dy;
    if (d2 <= best_d2) {
      best_d2 = d2;
      best = static_cast<int>(i);
    }
  }
  return best;
}

// ---- the run -----------------------------------------------------------------------------------

std::string duration_text(double seconds) {
  if (!(seconds >= 0)) return "?";
  if (seconds < 9.95) return format_number("%.1f", seconds) + " s";
  const long long r = std::llround(seconds);
  if (r < 60) return std::to_string(r) + " s";
  return std::to_string(r / 60) + " min " + std::to_string(r % 60) + " s";
}

std::string legend_reason(const std::string& backend, const Message& reason, bool cuda_ok, const std::string& cuda_reason,
                          Lang lang) {
  if (backend != "cuda" || cuda_ok || cuda_reason.empty()) return reason.text(lang);
  // The runtime's explanation in parentheses is said once, above the chart.
  const std::size_t paren = cuda_reason.find(" (");
  return cuda_reason_text(paren == std::string::npos || paren == 0 ? cuda_reason : cuda_reason.substr(0, paren), lang);
}

double estimate_seconds_left(const std::vector<bench::Result>& results, int in_flight, const bench::Spec& s) {
  std::map<std::string, std::pair<double, double>> seen;  // flops, seconds of timed medians
  for (const auto& r : results)
    if (r.ran && r.median_ms > 0) {
      auto& v = seen[rate_key(r.c)];
      v.first += r.flops;
      v.second += r.median_ms * 1e-3;
    }
  double left = 0;
  for (std::size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    if (r.ran || !r.reason.empty()) continue;
    const auto it = seen.find(rate_key(r.c));
    double rate = r.c.backend == "cpu" ? bench::cpu_rate_guess(r.c.variant) : 1e12;
    if (it != seen.end() && it->second.second > 0) rate = it->second.first / it->second.second;
    const double t = r.flops * (s.repeat + s.warmup) / rate;
    left += static_cast<int>(i) == in_flight ? t / 2 : t;
  }
  return left;
}

PerfRun::~PerfRun() {
  cancel();
  join();
}

void PerfRun::start(const bench::Spec& spec, bool measure_ceilings) {
  bench::check_spec(spec);
  cancel();
  join();
  spec_ = spec;
  cancel_ = false;
  const double room = host_available_bytes().value_or(0);
  {
    std::lock_guard<std::mutex> lock(mu_);
    const std::uint64_t rev = state_.revision;
    state_ = PerfSnapshot{};
    state_.revision = rev + 1;
    state_.results = bench::plan(spec_);
    state_.total = state_.results.size();
    state_.running = true;
    state_.measuring = measure_ceilings;
    state_.host_room = room;
  }
  started_ = now_s();
  thread_ = std::thread([this, measure_ceilings] { body(measure_ceilings); });
}

void PerfRun::cancel() { cancel_ = true; }

void PerfRun::join() {
  if (thread_.joinable()) thread_.join();
}

bool PerfRun::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_.running;
}

PerfSnapshot PerfRun::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  PerfSnapshot s = state_;
  if (s.running) s.elapsed_s = now_s() - started_;
  return s;
}

void PerfRun::body(bool measure_ceilings) {
  std::vector<bench::Result> work;
  {
    std::lock_guard<std::mutex> lock(mu_);
    work = state_.results;
  }
  try {
    std::string cuda_reason;
    const bool want_cuda = std::find(spec_.backends.begin(), spec_.backends.end(), "cuda") != spec_.backends.end();
    const bool cuda_ok = want_cuda && cuda_available(&cuda_reason);
    if (measure_ceilings) {
      std::vector<Roof> roofs;
      const bool cpu_runs = std::any_of(work.begin(), work.end(), [&](const bench::Result& r) {
        return r.c.backend == "cpu" && bench::skip_reason(r.c, spec_, cuda_ok, cuda_reason).empty();
      });
      if (cpu_runs && !cancel_) roofs.push_back({"cpu", bench::cpu_ceilings()});
      if (cuda_ok && !cancel_) roofs.push_back({"cuda", bench::cuda_ceilings()});
      std::lock_guard<std::mutex> lock(mu_);
      state_.roofs = std::move(roofs);
      state_.measuring = false;
      ++state_.revision;
    }
    bench::Hooks hooks;
    hooks.cancel = &cancel_;
    hooks.on_case = [&](std::size_t index, std::size_t done, std::size_t, bool finished) {
      std::lock_guard<std::mutex> lock(mu_);
      state_.results[index] = work[index];
      state_.done = done;
      state_.in_flight = finished ? -1 : static_cast<int>(index);
      state_.eta_s = estimate_seconds_left(state_.results, state_.in_flight, spec_);
      ++state_.revision;
    };
    const bench::Outcome out = bench::run_sweep(work, spec_, cuda_ok, cuda_reason, hooks);
    std::lock_guard<std::mutex> lock(mu_);
    if (out.cancelled)
      for (auto& r : work)
        if (!r.ran && r.reason.empty()) r.reason = message_of(Msg::BenchCancelled, {});
    state_.results = work;
    state_.cancelled = out.cancelled;
    state_.device_failure = out.device_failure;
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(mu_);
    state_.error = e.what();
  }
  std::lock_guard<std::mutex> lock(mu_);
  state_.running = false;
  state_.finished = true;
  state_.measuring = false;
  state_.in_flight = -1;
  state_.eta_s = 0;
  state_.elapsed_s = now_s() - started_;
  ++state_.revision;
}

void check_writable(const std::string& path) {
  if (path.empty()) return;
  struct stat st{};
  const bool existed = stat(path.c_str(), &st) == 0;
  if (existed && S_ISDIR(st.st_mode)) throw InputError(Msg::CannotWrite, {path, std::strerror(EISDIR)});
  {
    errno = 0;
    std::ofstream f(path, std::ios::app);
    if (!f) throw InputError(Msg::CannotWrite, {path, std::strerror(errno ? errno : EACCES)});
  }
  if (!existed) std::remove(path.c_str());
}

void write_perf_csv(const std::string& path, const std::vector<bench::Result>& results) {
  write_file(path, bench::render_csv(results));  // atomic (core/io.h)
}

const char* PerfView::label(Lang lang) { return tr(lang, S::ViewPerf); }

StepKeysHelp PerfView::step_keys_help(Lang lang) const {
  const bool zh = lang == Lang::Zh;
  StepKeysHelp h = View::step_keys_help(lang);
  h.query = zh ? "其他视图的上一个 / 下一个查询 token（扫描不用查询）"
               : "previous / next query token of the other views (the sweep has no query)";
  h.mask = zh ? "切换其他视图的掩码（扫描的掩码见其复选框）"
              : "toggle the other views' mask (the sweep's masks are its checkboxes)";
  h.temperature = zh ? "其他视图的温度 ÷ 1.25 / × 1.25（扫描不用温度）"
                     : "the other views' temperature ÷ 1.25 / × 1.25 (the sweep uses none)";
  return h;
}

void PerfView::dump(nlohmann::json& j, const Session&) const {
  j["perf"] = {{"settings_h", settings_header.h}, {"below_h", below_h}, {"settings_scrolled", settings_header.scrolled}, {"panel_scrolls", panel_scrolls}, {"plot", plot}, {"y_labels", y_labels}, {"legend", legend_lines},
               {"cuda_off", {{"text", cuda_off}, {"w", cuda_off_w}, {"room", cuda_off_room}}}};
}

bool PerfView::parse_flag(const std::string& a, const FlagValue& value, Options& o) {
  if (a == "--perf-variant") {
    o.spec.variants = bench::word_list("--perf-variant", value());
  } else if (a == "--perf-precision") {
    o.spec.precisions = bench::word_list("--perf-precision", value());
  } else if (a == "--perf-mask") {
    o.spec.masks = bench::word_list("--perf-mask", value());
  } else if (a == "--perf-n") {
    o.spec.ns = parse_n_list("--perf-n", value());
  } else if (a == "--perf-d") {
    o.spec.ds = bench::int_list("--perf-d", value(), kMaxHeadDim);
  } else if (a == "--perf-heads") {
    o.spec.heads = bench::int_list("--perf-heads", value(), 4096);
  } else if (a == "--perf-pass") {
    o.spec.passes = bench::parse_passes("--perf-pass", value());
  } else if (a == "--perf-repeat") {
    o.spec.repeat = parse_flag_int<int>(a, value(), 1, 1000);
  } else if (a == "--perf-warmup") {
    o.spec.warmup = parse_flag_int<int>(a, value(), 0, 100);
  } else if (a == "--perf-max-seconds") {
    // A decimal, as bench's --max-seconds takes it.
    const std::string& text = value();  // read once: each call takes the next word
    const std::optional<double> s = parse_plain_number(text);
    if (!s || !(*s > 0) || *s > 86400) throw InputError(Msg::SecondsRange, {a, "86400", trim_blanks(text)});
    o.spec.max_seconds = *s;
  } else if (a == "--perf-chart") {
    o.chart = parse_perf_chart(value());
  } else if (a == "--perf-output") {
    o.output = value();
  } else {
    return false;
  }
  return true;
}

void PerfView::finish_options(Options& o, bool shown, std::string& backend) {
  if (!shown) return;
  if (!backend.empty()) {
    // The perf view times every backend listed; "auto" there means both. The session's backend
    // stays auto: --backend cuda without a device still draws the perf view with the reason,
    // where the chain view would refuse.
    o.spec.backends =
        backend == "auto" ? std::vector<std::string>{"cpu", "cuda"} : bench::word_list("--backend", backend);
    for (const std::string& b : o.spec.backends)
      if (b != "cpu" && b != "cuda")
        throw InputError(Msg::OptionWordList, {"--backend", "cpu, cuda", b});
    o.cuda_named = backend != "auto" && std::find(o.spec.backends.begin(), o.spec.backends.end(), "cuda") != o.spec.backends.end();
    backend.clear();
  }
  for (const std::string& v : o.spec.variants)
    if (v != "staged" && v != "fused") throw InputError(Msg::OptionWordList, {"--perf-variant", "staged, fused", v});
  for (const std::string& p : o.spec.precisions)
    if (p != "fp32" && p != "bf16") throw InputError(Msg::OptionWordList, {"--perf-precision", "fp32, bf16", p});
  for (const std::string& m : o.spec.masks)
    if (m != "none" && m != "causal") throw InputError(Msg::OptionWordList, {"--perf-mask", "none, causal", m});
  bench::check_spec(o.spec);
}

std::string PerfView::usage() {
  return "  --view perf: [--backend cpu|cuda|cpu,cuda] [--perf-variant staged,fused]\n"
         "               [--perf-precision fp32,bf16] [--perf-n 256,512,1024 | 256..16384]\n"
         "               [--perf-d 64] [--perf-heads 1] [--perf-mask none,causal] [--perf-repeat R]\n"
         "               [--perf-warmup W] [--perf-max-seconds S] [--perf-output FILE.csv]\n"
         "               [--perf-chart time|tflops|speedup|roofline|memory]\n"
         "               [--perf-pass forward|backward|both] (the backward: CPU staged and fused fp32,\n"
         "               CUDA fused; its FLOPs by bench's backward rule)\n";
}

PerfView::PerfView(const ViewContext& ctx, const Options& o) {
  spec = o.spec;
  n_text = n_list_text(o.spec.ns);
  chart = o.chart;
  cuda_ok = cuda_available(&cuda_reason);
  // Without a device the CUDA box is greyed out, so it is unticked too: a sweep plans no case that
  // cannot run (the line above the chart says why). CUDA named by --backend stays, as asked, its
  // legend giving the reason.
  if (!cuda_ok && !o.cuda_named) std::erase(spec.backends, std::string("cuda"));
  if (!ctx.headless || !ctx.shown) return;
  // Headless: the whole sweep before the picture, then bench's CSV.
  check_writable(o.output);
  run.start(spec);
  run.join();
  started = true;
  const PerfSnapshot s = run.snapshot();
  if (!s.error.empty()) throw std::runtime_error("the sweep stopped: " + s.error);
  if (!o.output.empty()) write_perf_csv(o.output, s.results);
  if (s.device_failure) throw DeviceError("a case failed with a device error (the CSV lists it)");
}

}  // namespace attnlab::viewer
