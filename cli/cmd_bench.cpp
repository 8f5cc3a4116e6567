// `attnlab bench`: times every valid combination of backend x variant x precision x mask x heads
// x d x N with the backends' own bench() (inputs resident, warm-up, repeats; CUDA events on the
// GPU, a steady clock on the CPU) and checks each case's output against an fp64 reference
// computed in the same run. Reports median / min / max ms, TFLOP/s (4 N^2 d per head, half for
// causal), bytes and GB/s, peak memory and the error; cases that cannot run are listed as skipped
// with the reason. Formats: table (people), json and csv (scripts/bench-sweep, compare-torch).
//
// Bytes: "min" = every input read once and the output written once (the fused kernels' floor);
// "moved" = what the variant must move: min for fused; for staged the sum of what each of its
// four kernels must read once and write once (staged_stage_bytes below; the none and causal masks
// are computed from (row, col), not read).
// Reference: the full fp64 chain (reference_fp64) when heads*N^2 <= 2^22; above that 64 query
// rows of head 0, spread evenly, recomputed in double here (the output says which).
// Host copy rate: when a CPU case is to run, one single-thread memcpy probe of a buffer far past
// the last-level cache (host_copy_probe below), the ceiling the CPU stages' GB/s are read against,
// as the CUDA side prints its device-to-device copy rate.
// Baseline (--baseline): beside every CPU fp32 staged case, variant "plain" times
// cpu_staged_plain, the obvious whole-matrix Eigen chain with fresh matrices, with the same
// warm-up, repeats, byte rule and fp64 check; the table gives the staged chain's time ratio to it.
#include "core/gcc12_avx512.h"  // first: see there

#include "cli/common.h"
#include "core/format.h"

#include "core/backend.h"
#include "cpu/cpu_backend.h"
#include "kernels/tile_config.h"  // plain C++: the bf16 kernel's head dims
#ifdef ATTNLAB_HAVE_CUDA
#include "kernels/cuda_backend.h"
#endif

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <limits>
#include <new>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

namespace attnlab::cli {
namespace {

constexpr double kFullReferenceLimit = 4194304.0;  // heads * N^2 above this: sampled rows
constexpr int kSampleRows = 64;
// Rough sustained rates of the CPU paths on a small machine, only to refuse cases that would
// take far too long; deliberately pessimistic.
constexpr double kCpuStagedFlops = 8e9;
constexpr double kCpuFusedFlops = 40e9;

struct BenchArgs {
  // The lists as typed, split and checked by parse_args (CLI11's own splitting would drop an
  // empty item such as the one in "64,,128" without a word).
  std::string backend_list = "cpu,cuda", variant_list = "staged,fused",
              precision_list = "fp32,bf16", n_list = "1024,4096", d_list = "64", heads_list = "1",
              mask_list = "none";
  std::vector<std::string> backends, variants, precisions, masks;
  std::vector<int> ns, ds, heads;
  int repeat = 10;
  int warmup = 2;
  std::uint64_t seed = 0;
  std::string format = "table";
  double max_seconds = 60;
  std::string output_file;
  bool baseline = false;  // time cpu_staged_plain beside every CPU staged case (variant "plain")
};

struct Case {
  std::string backend, variant, precision, mask;
  int heads = 1, n = 0, d = 0;
  std::string label() const {
    return backend + " " + variant + " " + precision + " " + mask + " heads=" +
           std::to_string(heads) + " n=" + std::to_string(n) + " d=" + std::to_string(d);
  }
};

struct Result {
  Case c;
  bool ran = false;
  std::string reason;  // why it was skipped
  double median_ms = 0, min_ms = 0, max_ms = 0;
  int repeats = 0;
  double flops = 0, tflops = 0;
  double min_bytes = 0, moved_bytes = 0, gbs = 0;
  std::size_t peak_bytes = 0;
  double rel_err = std::numeric_limits<double>::quiet_NaN();
  std::string reference;
  // Staged only: each stage's median time over separate runs and the bytes it must move.
  struct Stage {
    std::string name;
    double ms = 0, bytes = 0;
  };
  std::vector<Stage> stages;
};

std::string host_cpu() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  std::string model = "unknown CPU";
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto pos = line.find(':');
      if (pos != std::string::npos) model = line.substr(pos + 2);
      break;
    }
  }
  return model + " (" + std::to_string(std::thread::hardware_concurrency()) + " threads)";
}

std::string today() {
  const std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", std::localtime(&now));
  return buf;
}

// 4 N^2 d per head (QK^T and PV, 2 flops per multiply-add each); causal computes half.
double case_flops(const Case& c) {
  const double f = 4.0 * c.heads * static_cast<double>(c.n) * c.n * c.d;
  return c.mask == "causal" ? f / 2 : f;
}

// The fewest bytes each staged kernel must move in fp32, each input read once and each output
// written once (heads*n rows of m = n keys, d = d_k = d_v):
//   qk          Q, K read; scores and scaled written
//   scale_mask  scaled read; logits written (bench masks are none or causal, which the kernels
//               compute from (row, col) rather than read)
//   softmax     logits read; weights written
//   pv          weights and V read; output written
std::vector<Result::Stage> staged_stage_bytes(const Case& c) {
  const double hn = static_cast<double>(c.heads) * c.n, nn = hn * c.n, f = 4.0;
  return {{"qk", 0, f * (2 * hn * c.d + 2 * nn)},
          {"scale_mask", 0, f * 2 * nn},
          {"softmax", 0, f * 2 * nn},
          {"pv", 0, f * (nn + 2 * hn * c.d)}};
}

void case_bytes(const Case& c, double& min_bytes, double& moved_bytes) {
  const double in_elem = c.precision == "bf16" ? 2.0 : 4.0;
  const double hn = static_cast<double>(c.heads) * c.n;
  min_bytes = in_elem * hn * 3.0 * c.d + 4.0 * hn * c.d;
  moved_bytes = min_bytes;
  if (c.variant == "staged" || c.variant == "plain") {  // plain: the same four stages
    moved_bytes = 0;
    for (const auto& st : staged_stage_bytes(c)) moved_bytes += st.bytes;
  }
}

// Why the case cannot run, or "" when it can.
std::string skip_reason(const Case& c, const BenchArgs& a, bool cuda_ok,
                        const std::string& cuda_reason) {
  // bf16: the CPU runs it staged and fused at any head dim; CUDA only with its fused kernel.
  if (c.precision == "bf16" && c.backend == "cuda") {
    if (c.variant != "fused") return "bf16 on cuda runs only on the fused kernel";
    if (std::string why = cuda::fused_bf16_shape_error(c.d, c.d); !why.empty()) return why;
  }
  if (c.backend == "cuda" && !cuda_ok) return "no CUDA device: " + cuda_reason;
  if (c.backend == "cpu") {
    const double rate = c.variant == "fused" ? kCpuFusedFlops : kCpuStagedFlops;  // plain: staged
    const double seconds = case_flops(c) / rate * (a.repeat + a.warmup);
    if (seconds > a.max_seconds)
      return "would take ~" + format_number("%.0f", seconds) + " s (over --max-seconds " +
             format_number("%g", a.max_seconds) + ")";
  }
  return "";
}

// A bench problem and its fp64 reference output, built once per (mask, heads, d, n) and shared by
// every backend / variant / precision timed on it. The reference is the full fp64 chain
// (reference_fp64) up to kFullReferenceLimit head·N² entries; above that, `rows` (64 query rows of
// head 0, evenly spread) through reference_fp64 of the sub-problem holding just those rows, their
// mask rows as a custom mask.
struct BenchProblem {
  Problem p;
  std::vector<int> rows;  // empty: ref covers every row
  MatrixD ref;
  std::string which;      // "fp64 full" or "fp64 64 rows of head 0"
};

BenchProblem make_bench_problem(const Case& c, std::uint64_t seed) {
  BenchProblem b;
  b.p = random_problem(c.n, c.d, c.d, seed, c.heads);
  b.p.mask = c.mask == "causal" ? MaskKind::Causal : MaskKind::None;
  const Problem& p = b.p;
  if (static_cast<double>(p.heads) * p.n() * p.m() <= kFullReferenceLimit) {
    b.ref = reference_fp64(p).output;
    b.which = "fp64 full";
    return b;
  }
  const int count = std::min(kSampleRows, p.n());
  for (int r = 0; r < count; ++r)
    b.rows.push_back(count == 1 ? 0 : static_cast<int>((static_cast<long long>(r) * (p.n() - 1)) /
                                                       (count - 1)));
  Problem sub;
  sub.q.resize(count, p.d_k());
  // The sampled rows of the mask, built row by row: the whole (N, N) mask would be 4 N^2 bytes.
  sub.custom_mask = MatrixF::Zero(count, p.m());
  for (int r = 0; r < count; ++r) {
    sub.q.row(r) = p.q.row(b.rows[r]);
    if (p.mask == MaskKind::Causal)
      sub.custom_mask.row(r).tail(p.m() - 1 - b.rows[r]).setConstant(-std::numeric_limits<float>::infinity());
    sub.query_tokens.push_back(p.query_tokens.at(b.rows[r]));
  }
  sub.k = p.k.topRows(p.m());
  sub.v = p.v.topRows(p.m());
  sub.key_tokens = p.key_tokens;
  sub.temperature = p.temperature;
  sub.mask = MaskKind::Custom;
  b.ref = reference_fp64(sub).output;
  b.which = "fp64 " + std::to_string(count) + " rows of head 0";
  return b;
}

// max |out - ref| / max |ref| over the rows the reference covers.
double check_error(const BenchProblem& b, const MatrixF& out) {
  double err = 0;
  if (b.rows.empty()) {
    err = (out.cast<double>() - b.ref).cwiseAbs().maxCoeff();
  } else {
    for (std::size_t r = 0; r < b.rows.size(); ++r)
      err = std::max(err, (out.row(b.rows[r]).cast<double>() - b.ref.row(static_cast<Eigen::Index>(r)))
                              .cwiseAbs()
                              .maxCoeff());
  }
  return err / std::max(b.ref.cwiseAbs().maxCoeff(), 1e-300);
}

// The --baseline row: cpu_staged_plain timed as the CPU backend's bench() times the staged chain
// (steady clock around each whole run, `warmup` untimed runs first), its own stage timings kept.
// Each run allocates its stages afresh (and validates the problem, O(N d)): that is the baseline.
BenchSample bench_plain(const Problem& p, int warmup, int repeat) {
  RunOptions o;
  o.variant = Variant::Staged;
  o.keep_stages = true;
  BenchSample s;
  const double need = host_working_set_bytes(p, o);
  check_host_memory(need, "the plain staged chain", "try a smaller N or fewer heads");
  s.peak_bytes = static_cast<std::size_t>(need);
  for (int i = 0; i < warmup; ++i) cpu_staged_plain(p);
  for (int i = 0; i < repeat; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    Trace t = cpu_staged_plain(p);
    s.ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    s.stages.push_back(t.timings);
    if (i + 1 == repeat) s.output = std::move(t.output);
  }
  return s;
}

void run_case(Result& r, const BenchArgs& a, Backend& backend, const BenchProblem& b) {
  const Case& c = r.c;
  const Problem& p = b.p;
  const bool plain = c.variant == "plain";
  RunOptions opt;
  opt.variant = plain ? Variant::Staged : parse_variant(c.variant);
  opt.precision = parse_precision(c.precision);
  opt.keep_stages = false;
  const BenchSample s =
      plain ? bench_plain(p, a.warmup, a.repeat) : backend.bench(p, opt, a.warmup, a.repeat);
  if (s.ms.empty()) throw InputError("the backend returned no timings");
  r.ran = true;
  r.repeats = static_cast<int>(s.ms.size());
  r.median_ms = median_of(s.ms);
  r.min_ms = *std::min_element(s.ms.begin(), s.ms.end());
  r.max_ms = *std::max_element(s.ms.begin(), s.ms.end());
  r.peak_bytes = s.peak_bytes;
  r.tflops = r.flops / (r.median_ms * 1e-3) / 1e12;
  r.gbs = r.moved_bytes / (r.median_ms * 1e-3) / 1e9;
  r.rel_err = check_error(b, s.output);
  r.reference = b.which;
  if (opt.variant == Variant::Staged) {
    // Per-stage times from the same timed repetitions (CUDA events between the stages on the
    // GPU, the steady clock on the CPU): the median of each stage.
    if (s.stages.size() != s.ms.size())
      throw DeviceError("the backend returned no stage timings for a staged run");
    r.stages = staged_stage_bytes(c);
    const auto median_stage = [&s](double StageTimings::*field) {
      std::vector<double> v;
      for (const StageTimings& t : s.stages) v.push_back(t.*field);
      return median_of(v);
    };
    r.stages[0].ms = median_stage(&StageTimings::qk_ms);
    r.stages[1].ms = median_stage(&StageTimings::scale_mask_ms);
    r.stages[2].ms = median_stage(&StageTimings::softmax_ms);
    r.stages[3].ms = median_stage(&StageTimings::pv_ms);
  }
}

nlohmann::json to_json(const Result& r) {
  nlohmann::json j = {{"backend", r.c.backend}, {"variant", r.c.variant},
                      {"precision", r.c.precision}, {"mask", r.c.mask},
                      {"heads", r.c.heads}, {"n", r.c.n}, {"d", r.c.d}};
  if (!r.ran) {
    j["status"] = "skipped";
    j["reason"] = r.reason;
    return j;
  }
  j["status"] = "ok";
  j["repeat"] = r.repeats;
  j["median_ms"] = r.median_ms;
  j["min_ms"] = r.min_ms;
  j["max_ms"] = r.max_ms;
  j["flops"] = r.flops;
  j["tflops"] = r.tflops;
  j["min_bytes"] = r.min_bytes;
  j["moved_bytes"] = r.moved_bytes;
  j["gbs"] = r.gbs;
  j["peak_bytes"] = r.peak_bytes;
  j["rel_err"] = std::isfinite(r.rel_err) ? nlohmann::json(r.rel_err) : nlohmann::json(nullptr);
  j["reference"] = r.reference;
  if (!r.stages.empty()) {
    nlohmann::json st = nlohmann::json::array();
    for (const auto& x : r.stages)
      st.push_back({{"stage", x.name}, {"median_ms", x.ms}, {"bytes", x.bytes},
                    {"gbs", x.ms > 0 ? nlohmann::json(x.bytes / (x.ms * 1e-3) / 1e9)
                                     : nlohmann::json(nullptr)}});
    j["stages"] = st;
  }
  return j;
}

struct Machine {
  std::string date, cpu, device;
  double copy_gbs = 0;       // device-to-device; 0: not measured
  double host_copy_gbs = 0;  // host_copy_probe; 0: not measured
};

// The host copy probe: one thread copies a buffer far larger than any last-level cache, so the
// rate is the memory's, not the cache's. Both buffers are written before the clock starts
// (untouched pages would read as the one zero page, and fault inside the timing); one untimed
// copy, then the best of the repeats.
constexpr std::size_t kHostCopyBytes = std::size_t{256} << 20;
constexpr int kHostCopyRepeats = 5;
const char* const kHostCopyRule =
    "single-thread memcpy of a 256 MiB buffer (past the last-level cache), one warm-up copy, best "
    "of 5; GB/s = (bytes read + bytes written) / time = 2 x 256 MiB / best time";

double host_copy_probe() {
  check_host_memory(2.0 * kHostCopyBytes, "the host copy probe", "the copy rate is left out");
  std::vector<unsigned char> src(kHostCopyBytes), dst(kHostCopyBytes);
  std::memset(src.data(), 0x5a, kHostCopyBytes);
  volatile unsigned char sink = 0;  // a read of each copy, so none of them can be dropped
  std::memcpy(dst.data(), src.data(), kHostCopyBytes);
  sink = dst[kHostCopyBytes / 3];
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < kHostCopyRepeats; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(dst.data(), src.data(), kHostCopyBytes);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    sink = dst[(kHostCopyBytes / 7) * static_cast<std::size_t>(i)];
  }
  static_cast<void>(sink);
  return best > 0 ? 2.0 * static_cast<double>(kHostCopyBytes) / best / 1e9 : 0;
}

// The --baseline row timed beside staged case `s`, or null when there is none (or it was skipped).
const Result* plain_of(const std::vector<Result>& results, const Result& s) {
  if (s.c.variant != "staged") return nullptr;
  for (const Result& r : results)
    if (r.c.variant == "plain" && r.ran && r.c.backend == s.c.backend &&
        r.c.precision == s.c.precision && r.c.mask == s.c.mask && r.c.heads == s.c.heads &&
        r.c.n == s.c.n && r.c.d == s.c.d)
      return &r;
  return nullptr;
}

// The CUDA kernels' tile configurations in effect (kernels/tile_config.h), as the environment gives
// them ("0" when unset): a run's figures belong to these.
std::vector<std::pair<std::string, std::string>> kernel_configs() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const char* var : {"ATTNLAB_FUSED_CONFIG", "ATTNLAB_STAGED_CONFIG"}) {
    const char* v = std::getenv(var);
    out.emplace_back(var, v != nullptr && *v != '\0' ? v : "0");
  }
  return out;
}

std::string render_json(const Machine& m, const std::vector<Result>& results,
                        const BenchArgs& a) {
  nlohmann::json cases = nlohmann::json::array(), skipped = nlohmann::json::array();
  for (const auto& r : results) {
    nlohmann::json c = to_json(r);
    if (const Result* pl = r.ran ? plain_of(results, r) : nullptr; pl != nullptr)
      c["staged_over_plain"] = r.median_ms / pl->median_ms;
    (r.ran ? cases : skipped).push_back(c);
  }
  nlohmann::json j = {
      {"date", m.date},
      {"cpu", m.cpu},
      {"device", m.device.empty() ? nlohmann::json(nullptr) : nlohmann::json(m.device)},
      {"copy_bandwidth_gbs", m.copy_gbs > 0 ? nlohmann::json(m.copy_gbs) : nlohmann::json(nullptr)},
      {"host_copy_gbs",
       m.host_copy_gbs > 0 ? nlohmann::json(m.host_copy_gbs) : nlohmann::json(nullptr)},
      {"host_copy_rule", kHostCopyRule},
      {"baseline", a.baseline},
      {"repeat", a.repeat},
      {"warmup", a.warmup},
      {"seed", a.seed},
      {"kernel_configs", [] {
         nlohmann::json k = nlohmann::json::object();
         for (const auto& [var, value] : kernel_configs()) k[var] = value;
         return k;
       }()},
      {"flops_rule", "4*N^2*d per head, half for causal"},
      {"bytes_rule",
       "min_bytes: inputs read once + output written once; moved_bytes: min for fused; for staged "
       "the sum over its four kernels of what each must read once and write once (scores and "
       "scaled written, scaled read and logits written, logits read and weights written, "
       "weights + V read and output written); gbs uses moved_bytes"},
      {"baseline_rule",
       "variant plain (with --baseline): cpu_staged_plain, the obvious Eigen chain with one "
       "whole-matrix expression per stage and fresh matrices each run, fp32, timed beside every "
       "CPU staged case with the same warmup and repeat, staged byte rule, same fp64 check; "
       "staged_over_plain in the staged case = staged median_ms / plain median_ms"},
      {"cases", cases},
      {"skipped", skipped}};
  return j.dump(2) + "\n";
}

std::string render_csv(const std::vector<Result>& results) {
  std::ostringstream o;
  o << "backend,variant,precision,mask,heads,n,d,status,median_ms,min_ms,max_ms,tflops,gbs,"
       "min_bytes,moved_bytes,peak_bytes,rel_err,reference,reason\n";
  for (const auto& r : results) {
    o << r.c.backend << ',' << r.c.variant << ',' << r.c.precision << ',' << r.c.mask << ','
      << r.c.heads << ',' << r.c.n << ',' << r.c.d << ',';
    if (r.ran) {
      o << "ok," << format_number("%.6g", r.median_ms) << ',' << format_number("%.6g", r.min_ms) << ','
        << format_number("%.6g", r.max_ms) << ',' << format_number("%.6g", r.tflops) << ',' << format_number("%.6g", r.gbs)
        << ',' << format_number("%.0f", r.min_bytes) << ',' << format_number("%.0f", r.moved_bytes) << ','
        << r.peak_bytes << ',' << format_number("%.3e", r.rel_err) << ',' << csv_field(r.reference) << ",\n";
    } else {
      o << "skipped,,,,,,,,,,," << csv_field(r.reason) << '\n';
    }
  }
  return o.str();
}

std::string render_table(const Machine& m, const std::vector<Result>& results,
                         const BenchArgs& a) {
  std::ostringstream o;
  o << "attnlab bench  " << m.date << "\n";
  o << "cpu: " << m.cpu;
  if (m.host_copy_gbs > 0)
    o << ", single-thread copy " << format_number("%.1f", m.host_copy_gbs)
      << " GB/s (read + written, 256 MiB memcpy)";
  o << "\n";
  if (!m.device.empty()) {
    o << "device: " << m.device;
    if (m.copy_gbs > 0) o << ", device-to-device copy " << format_number("%.0f", m.copy_gbs) << " GB/s";
    o << "\n";
  }
  for (const auto& [var, value] : kernel_configs()) {
    if (value != "0") o << "kernel configuration: " << var << "=" << value << "\n";
  }
  o << "repeat " << a.repeat << ", warmup " << a.warmup << ", seed " << a.seed
    << "; TFLOP/s = 4 N^2 d per head / median (half for causal); GB/s = moved bytes / median\n\n";
  char line[512];
  std::snprintf(line, sizeof line, "%-5s %-6s %-4s %-6s %5s %6s %4s %10s %10s %10s %9s %9s %10s %10s %9s %9s  %s\n",
                "back", "var", "prec", "mask", "heads", "n", "d", "median ms", "min ms", "max ms",
                "TFLOP/s", "GB/s", "min MB", "moved MB", "peak MB", "rel err", "reference");
  o << line;
  for (const auto& r : results) {
    if (!r.ran) continue;
    std::snprintf(line, sizeof line,
                  "%-5s %-6s %-4s %-6s %5d %6d %4d %10.4g %10.4g %10.4g %9.4g %9.4g %10.1f %10.1f %9.1f %9.2e  %s\n",
                  r.c.backend.c_str(), r.c.variant.c_str(), r.c.precision.c_str(),
                  r.c.mask.c_str(), r.c.heads, r.c.n, r.c.d, r.median_ms, r.min_ms, r.max_ms,
                  r.tflops, r.gbs, r.min_bytes / 1e6, r.moved_bytes / 1e6,
                  static_cast<double>(r.peak_bytes) / 1e6, r.rel_err, r.reference.c_str());
    o << line;
  }
  for (const auto& r : results) {
    if (!r.ran || r.stages.empty()) continue;
    o << "  stages of " << r.c.label() << ":";
    for (const auto& x : r.stages)
      o << "  " << x.name << " " << format_number("%.4g", x.ms) << " ms"
        << (x.ms > 0 ? " (" + format_number("%.0f", x.bytes / (x.ms * 1e-3) / 1e9) + " GB/s)" : "");
    o << "\n";
  }
  bool any_ratio = false;
  for (const auto& r : results) {
    const Result* pl = r.ran ? plain_of(results, r) : nullptr;
    if (pl == nullptr) continue;
    if (!any_ratio)
      o << "\nbaseline (--baseline): the staged chain's median time over the plain Eigen chain's "
           "(cpu_staged_plain, fresh matrices each run):\n";
    any_ratio = true;
    o << "  " << r.c.label() << ": staged / plain " << format_number("%.2f", r.median_ms / pl->median_ms)
      << "× (" << format_number("%.4g", r.median_ms) << " ms / " << format_number("%.4g", pl->median_ms)
      << " ms)\n";
  }
  bool any_skipped = false;
  for (const auto& r : results) {
    if (r.ran) continue;
    if (!any_skipped) o << "\nskipped:\n";
    any_skipped = true;
    o << "  " << r.c.label() << ": " << r.reason << "\n";
  }
  return o.str();
}

// "a,b,c" -> {"a", "b", "c"}; an empty item is refused, naming the option and the list.
std::vector<std::string> split_list(const char* name, const std::string& text) {
  std::vector<std::string> items;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = text.find(',', start);
    items.push_back(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (items.back().empty())
      throw InputError(std::string(name) + " has an empty item in '" + text +
                       "' (give values separated by single commas)");
    if (comma == std::string::npos) return items;
    start = comma + 1;
  }
}

// A value given twice would time the same case twice: refused.
template <class T>
void refuse_repeats(const char* name, const std::vector<T>& v) {
  for (std::size_t i = 0; i < v.size(); ++i)
    if (std::find(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(i), v[i]) != v.begin() + static_cast<std::ptrdiff_t>(i)) {
      std::ostringstream o;
      o << v[i];
      throw InputError(std::string(name) + " lists " + o.str() + " twice");
    }
}

std::vector<int> int_list(const char* name, const std::string& text, int hi) {
  std::vector<int> out;
  for (const std::string& s : split_list(name, text)) {
    const bool digits = s.size() <= 9 && s.find_first_not_of("0123456789") == std::string::npos;
    const long long x = digits ? std::stoll(s) : -1;
    if (x < 1 || x > hi)
      throw InputError(std::string(name) + " values must be whole numbers between 1 and " +
                       std::to_string(hi) + ", got '" + s + "'");
    out.push_back(static_cast<int>(x));
  }
  refuse_repeats(name, out);
  return out;
}

std::vector<std::string> word_list(const char* name, const std::string& text) {
  std::vector<std::string> out = split_list(name, text);
  refuse_repeats(name, out);
  return out;
}

// Splits and checks every option before anything runs (the --output file included).
void parse_args(BenchArgs& a) {
  a.ns = int_list("--n", a.n_list, 1 << 20);
  a.ds = int_list("--d", a.d_list, 4096);
  a.heads = int_list("--heads", a.heads_list, 4096);
  a.backends = word_list("--backend", a.backend_list);
  a.variants = word_list("--variant", a.variant_list);
  a.precisions = word_list("--precision", a.precision_list);
  a.masks = word_list("--mask", a.mask_list);
  for (const auto& b : a.backends)
    if (b != "cpu" && b != "cuda")
      throw InputError("--backend takes cpu and/or cuda, got '" + b + "'");
  for (const auto& v : a.variants) {
    if (v == "plain")
      throw InputError("--variant takes staged and/or fused; the plain chain is timed with "
                       "--baseline, beside every CPU staged case");
    parse_variant(v);
  }
  for (const auto& p : a.precisions)
    if (parse_precision(p) == Precision::FP64)
      throw InputError("--precision takes fp32 and/or bf16 (fp64 is the reference), got 'fp64'");
  for (const auto& m : a.masks)
    if (m != "none" && m != "causal")
      throw InputError("--mask takes none and/or causal, got '" + m + "'");
  if (a.repeat < 1) throw InputError("--repeat must be >= 1, got " + std::to_string(a.repeat));
  if (a.warmup < 0) throw InputError("--warmup must be >= 0, got " + std::to_string(a.warmup));
  if (!(a.max_seconds > 0))
    throw InputError("--max-seconds must be > 0, got " + format_number("%g", a.max_seconds));
  if (a.format != "table" && a.format != "json" && a.format != "csv")
    throw InputError("--format takes table, json or csv, got '" + a.format + "'");
  check_output_path(a.output_file);
}

int run_bench(BenchArgs& a) {
  parse_args(a);
  Machine machine;
  machine.date = today();
  machine.cpu = host_cpu();

  std::string cuda_reason;
  const bool want_cuda = std::find(a.backends.begin(), a.backends.end(), "cuda") != a.backends.end();
  const bool cuda_ok = want_cuda && cuda_available(&cuda_reason);
#ifdef ATTNLAB_HAVE_CUDA
  if (cuda_ok) {
    machine.device = cuda::device_description();
    try {
      machine.copy_gbs = cuda::copy_bandwidth_gbs(std::size_t{1} << 30);
    } catch (const std::exception& e) {
      std::cerr << "bench: copy bandwidth not measured: " << e.what() << "\n";
    }
  }
#endif

  std::vector<Result> results;
  for (const auto& b : a.backends)
    for (const auto& v : a.variants)
      for (const auto& pr : a.precisions)
        for (const auto& mk : a.masks)
          for (int h : a.heads)
            for (int d : a.ds)
              for (int n : a.ns) {
                Result r;
                r.c = Case{b, v, pr, mk, h, n, d};
                r.flops = case_flops(r.c);
                case_bytes(r.c, r.min_bytes, r.moved_bytes);
                results.push_back(r);
                // The baseline row right after its staged case: CPU, fp32, staged only.
                if (a.baseline && b == "cpu" && v == "staged" && pr == "fp32") {
                  r.c.variant = "plain";
                  case_bytes(r.c, r.min_bytes, r.moved_bytes);
                  results.push_back(r);
                }
              }

  // The host copy rate, once, before any case runs, when a CPU case is to run.
  if (std::any_of(results.begin(), results.end(), [&](const Result& r) {
        return r.c.backend == "cpu" && skip_reason(r.c, a, cuda_ok, cuda_reason).empty();
      })) {
    try {
      machine.host_copy_gbs = host_copy_probe();
      std::cerr << "host copy probe: " << format_number("%.1f", machine.host_copy_gbs)
                << " GB/s (single thread, read + written)\n";
    } catch (const std::exception& e) {  // ResourceError or bad_alloc: the run goes on without it
      std::cerr << "bench: host copy rate not measured: " << e.what() << "\n";
    }
  }

  // Cases run grouped by shape (mask, heads, d, n): one problem and one fp64 reference per shape,
  // shared by every backend / variant / precision, and only one shape's held at a time (a
  // cache of them all held every input of the sweep until the end). The report keeps the
  // lists' order.
  const auto shape = [&results](std::size_t i) {
    const Case& c = results[i].c;
    return std::make_tuple(c.mask, c.heads, c.d, c.n);
  };
  std::vector<std::size_t> order(results.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&shape](std::size_t x, std::size_t y) { return shape(x) < shape(y); });

  std::unique_ptr<Backend> cpu, gpu;
  std::optional<BenchProblem> problem;  // the current shape's
  std::size_t problem_of = results.size();
  int exit_code = 0;
  const std::size_t total = results.size();
  for (std::size_t done = 0; done < total; ++done) {
    const std::size_t i = order[done];
    Result& r = results[i];
    const std::string prefix =
        "[" + std::to_string(done + 1) + "/" + std::to_string(total) + "] " + r.c.label() + ": ";
    r.reason = skip_reason(r.c, a, cuda_ok, cuda_reason);
    if (!r.reason.empty()) {
      std::cerr << prefix << "skipped (" << r.reason << ")\n";
      continue;
    }
    std::cerr << prefix << std::flush;
    try {
      std::unique_ptr<Backend>& be = r.c.backend == "cpu" ? cpu : gpu;
      if (!be) be = make_backend(r.c.backend);
      if (!problem || shape(problem_of) != shape(i)) {
        problem.reset();  // the previous shape's inputs go before the next ones are built
        // Q, K, V and the output in fp32, before they are allocated: a size the machine could
        // map but not back would end in the kernel's OOM killer, not in bad_alloc.
        check_host_memory(16.0 * r.c.heads * r.c.n * r.c.d, "the inputs and output",
                          "try a smaller N, d or fewer heads");
        problem = make_bench_problem(r.c, a.seed);
        problem_of = i;
      }
      run_case(r, a, *be, *problem);
      std::cerr << format_number("%.4g", r.median_ms) << " ms median of " << r.repeats << ", "
                << format_number("%.3g", r.tflops) << " TFLOP/s, rel err " << format_number("%.2e", r.rel_err)
                << "\n";
    } catch (const InputError& e) {  // ResourceError (does not fit) included
      r.ran = false;
      r.reason = e.what();
      std::cerr << "skipped (" << r.reason << ")\n";
    } catch (const std::bad_alloc&) {
      // Host memory ran out building the inputs, the reference or the run: this case does not
      // fit; the sweep goes on with the next (what it held is freed by now).
      r.ran = false;
      r.reason = "out of host memory";
      std::cerr << "skipped (" << r.reason << ")\n";
    } catch (const DeviceError& e) {
      // A device failure is a defect, not a property of the case: list it and exit 1 at the end.
      r.ran = false;
      r.reason = std::string("device error: ") + e.what();
      std::cerr << "FAILED (" << r.reason << ")\n";
      exit_code = 1;
    }
  }

  std::string text;
  if (a.format == "json")
    text = render_json(machine, results, a);
  else if (a.format == "csv")
    text = render_csv(results);
  else
    text = render_table(machine, results, a);
  emit(a.output_file, text);
  return exit_code;
}

}  // namespace

void register_bench(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* b = app.add_subcommand(
      "bench",
      "Time every valid combination of the lists given (comma-separated), warmed up and "
      "repeated, and check each against an fp64 reference computed in the same run: median/min/"
      "max ms, TFLOP/s, bytes and GB/s, peak memory, error; skipped cases with the reason");
  b->add_option("--backend", a->backend_list, "cpu and/or cuda (default cpu,cuda)")
      ->type_name("LIST");
  b->add_option("--variant", a->variant_list, "staged and/or fused (default staged,fused)")
      ->type_name("LIST");
  b->add_option("--precision", a->precision_list, "fp32 and/or bf16 (default fp32,bf16)")
      ->type_name("LIST");
  b->add_option("--n", a->n_list, "sequence lengths N (default 1024,4096)")->type_name("LIST");
  b->add_option("--d", a->d_list, "head dims, d_k = d_v (default 64)")->type_name("LIST");
  b->add_option("--heads", a->heads_list, "B*H heads (default 1)")->type_name("LIST");
  b->add_option("--mask", a->mask_list, "none and/or causal (default none)")->type_name("LIST");
  b->add_option("--repeat", a->repeat, "timed repetitions per case (default 10)")
      ->type_name("R");
  b->add_option("--warmup", a->warmup, "untimed repetitions first (default 2)")->type_name("W");
  b->add_option("--seed", a->seed, "seed of the random inputs (default 0)")->type_name("S");
  b->add_option("--format", a->format, "table | json | csv (default table)")->type_name("FMT");
  b->add_option("--max-seconds", a->max_seconds,
                "skip CPU cases estimated to take longer than this (default 60)")
      ->type_name("S");
  b->add_option("--output", a->output_file, "write the report to FILE instead of stdout")
      ->type_name("FILE");
  b->add_flag("--baseline", a->baseline,
              "also time the plain Eigen chain (cpu_staged_plain) beside every CPU fp32 staged "
              "case, as variant 'plain', and give the staged / plain time ratio");
  b->callback([a, &exit_code] { exit_code = run_bench(*a); });
}

}  // namespace attnlab::cli
