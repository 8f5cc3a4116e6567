// The benchmark engine's reports (see engine/bench_report.h): the machine, CSV, JSON and table.
#include "engine/bench_report.h"

#include "core/format.h"
#include "core/stats.h"
#include "engine/registry.h"
#ifdef ATTNLAB_HAVE_CUDA
#include "kernels/cuda_backend.h"
#endif

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

namespace attnlab::bench {
namespace {

std::string today() {
  const std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", std::localtime(&now));
  return buf;
}

// The split count a report gives: the one that ran, else the one asked (0: the kernel's choice).
int splits_of(const Result& r) { return r.splits > 0 ? r.splits : r.c.splits; }

nlohmann::json to_json(const Result& r) {
  nlohmann::json j = {{"backend", r.c.backend}, {"variant", r.c.variant},
                      {"precision", r.c.precision}, {"mask", r.c.mask},
                      {"heads", r.c.heads}, {"n", r.c.n}, {"d", r.c.d},
                      {"queries", r.c.q()}, {"kv_heads", r.c.g()}, {"splits", splits_of(r)},
                      {"score_mod", r.c.score_mod}, {"mask_mod", r.c.mask_mod}, {"rope", r.c.rope},
                      {"pass", r.c.pass}};
  if (r.c.variant == "decode") j["splits_chosen"] = r.c.splits > 0 ? "given" : "kernel";
  if (!r.ran) {
    j["status"] = "skipped";
    j["reason"] = r.reason.en;
    return j;
  }
  j["status"] = r.inaccurate ? "inaccurate" : "ok";
  j["error_bound"] = error_bound(r.c);
  if (!r.kernel.empty()) j["kernel"] = r.kernel;
  j["repeat"] = r.repeats;
  j["median_ms"] = r.median_ms;
  j["min_ms"] = r.min_ms;
  j["max_ms"] = r.max_ms;
  j["flops"] = r.flops;
  j["tflops"] = r.tflops;
  j["min_bytes"] = r.min_bytes;
  j["moved_bytes"] = r.moved_bytes;
  j["gbs"] = r.gbs;
  j["kv_bytes"] = r.kv_bytes;
  if (r.rope_ms > 0) j["rope_ms"] = r.rope_ms;
  if (r.paired_ratio > 0) j["paired_ratio"] = r.paired_ratio;
  j["kv_gbs"] = r.kv_gbs;
  j["peak_bytes"] = r.peak_bytes;
  j["rel_err"] = std::isfinite(r.rel_err) ? nlohmann::json(r.rel_err) : nlohmann::json(nullptr);
  j["reference"] = r.reference.en;
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

// The --baseline row timed beside staged forward case `s` (the plain chain is a forward: none
// beside a backward case), or null when there is none (or it was skipped).
const Result* plain_of(const std::vector<Result>& results, const Result& s) {
  if (s.c.variant != "staged" || s.c.backward()) return nullptr;
  for (const Result& r : results)
    if (r.c.variant == "plain" && r.ran && r.c.backend == s.c.backend &&
        r.c.precision == s.c.precision && r.c.mask == s.c.mask && r.c.heads == s.c.heads &&
        r.c.n == s.c.n && r.c.d == s.c.d && r.c.q() == s.c.q() && r.c.g() == s.c.g() &&
        r.c.score_mod == s.c.score_mod && r.c.mask_mod == s.c.mask_mod && r.c.rope == s.c.rope)
      return &r;
  return nullptr;
}

// The CUDA kernels' configurations in effect (kernels/tile_config.h, kernels/backward.h), as the
// environment gives them ("default" when unset: each head-dim bucket's default in
// kernels/tile_config.h, and the fused cases name the kernel that ran): a run's figures belong to these.
std::vector<std::pair<std::string, std::string>> kernel_configs() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const char* var : {"ATTNLAB_FUSED_CONFIG", "ATTNLAB_STAGED_CONFIG", "ATTNLAB_BACKWARD_CONFIG",
                          "ATTNLAB_DECODE_CONFIG"}) {
    const char* v = std::getenv(var);
    out.emplace_back(var, v != nullptr && *v != '\0' ? v : "default");
  }
  return out;
}

}  // namespace

Machine machine_of(bool cuda_ok, std::ostream* log) {
  Machine m;
  m.date = today();
  m.cpu = host_cpu();
  // glibc's figure from the CPU's cache descriptors: L3 where there is one, else L2.
  for (const int name : {_SC_LEVEL3_CACHE_SIZE, _SC_LEVEL2_CACHE_SIZE})
    if (const long bytes = sysconf(name); bytes > 0 && m.cpu_llc_bytes == 0) m.cpu_llc_bytes = static_cast<double>(bytes);
#ifdef ATTNLAB_HAVE_CUDA
  if (cuda_ok) {
    m.device = cuda::device_description();
    try {
      m.copy_gbs = cuda::copy_bandwidth_gbs(std::size_t{1} << 30);
    } catch (const std::exception& e) {
      if (log) *log << "bench: copy bandwidth not measured: " << e.what() << "\n";
    }
  }
#else
  (void)cuda_ok;
  (void)log;
#endif
  return m;
}

std::string render_csv(const std::vector<Result>& results) {
  std::ostringstream o;
  o << "backend,variant,precision,mask,heads,n,d,status,median_ms,min_ms,max_ms,tflops,gbs,"
       "min_bytes,moved_bytes,peak_bytes,rel_err,reference,queries,kv_heads,kv_bytes,kv_gbs,score_mod,mask_mod,rope,"
       "pass,splits,reason\n";
  for (const auto& r : results) {
    o << r.c.backend << ',' << r.c.variant << ',' << r.c.precision << ',' << r.c.mask << ','
      << r.c.heads << ',' << r.c.n << ',' << r.c.d << ',';
    if (r.ran) {
      o << (r.inaccurate ? "inaccurate," : "ok,") << format_number("%.6g", r.median_ms) << ',' << format_number("%.6g", r.min_ms) << ','
        << format_number("%.6g", r.max_ms) << ',' << format_number("%.6g", r.tflops) << ',' << format_number("%.6g", r.gbs)
        << ',' << format_number("%.0f", r.min_bytes) << ',' << format_number("%.0f", r.moved_bytes) << ','
        << r.peak_bytes << ',' << format_number("%.3e", r.rel_err) << ',' << csv_field(r.reference.en) << ','
        << r.c.q() << ',' << r.c.g() << ',' << format_number("%.0f", r.kv_bytes) << ',' << format_number("%.6g", r.kv_gbs)
        << ',' << csv_field(r.c.score_mod) << ',' << csv_field(r.c.mask_mod) << ',' << csv_field(r.c.rope) << ','
        << r.c.pass << ',' << splits_of(r) << ",\n";
    } else {
      o << "skipped,,,,,,,,,,," << r.c.q() << ',' << r.c.g() << ",,," << csv_field(r.c.score_mod) << ','
        << csv_field(r.c.mask_mod) << ',' << csv_field(r.c.rope) << ',' << r.c.pass << ',' << splits_of(r) << ','
        << csv_field(r.reason.en) << '\n';
    }
  }
  return o.str();
}

double kv_read_fraction(const Machine& m, const Result& r) {
  const double bw = r.c.backend == "cuda" ? m.copy_gbs : m.host_read_gbs;
  return r.ran && bw > 0 ? r.kv_gbs / bw : 0;
}

// Why a K+V read rate can pass the bandwidth it is read against: the probe reads 1 GiB from memory,
// while a cache that fits in the last-level cache is found there by every repetition after the first.
std::string above_bandwidth(const Machine& m, const Result& r) {
  if (r.c.backend == "cpu" && m.cpu_llc_bytes > 0 && r.kv_bytes <= m.cpu_llc_bytes)
    return " (above it: these K+V fit in the host's " + format_number("%.0f", m.cpu_llc_bytes / (1 << 20)) +
           " MiB last-level cache, where the repetitions find them; a cache larger than that reads from memory)";
  return r.c.backend == "cpu" ? " (above it: the probe may have run under load; retake both on an idle machine)"
                              : " (above it: the copy moves 1 GiB through memory, while K+V that fit in the device's "
                                "L2 cache are found there by the repetitions)";
}

std::string render_json(const Machine& m, const std::vector<Result>& results,
                        const Spec& a) {
  nlohmann::json cases = nlohmann::json::array(), skipped = nlohmann::json::array();
  for (const auto& r : results) {
    nlohmann::json c = to_json(r);
    if (const double f = kv_read_fraction(m, r); f > 0) c["kv_read_fraction"] = f;
    if (r.kv_read_fraction_paired > 0) {
      c["kv_read_fraction_paired"] = r.kv_read_fraction_paired;
      c["read_gbs_rounds"] = r.read_gbs_rounds;
    }
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
      {"host_read_gbs", m.host_read_gbs > 0 ? nlohmann::json(m.host_read_gbs) : nlohmann::json(nullptr)},
      {"cpu_llc_bytes", m.cpu_llc_bytes > 0 ? nlohmann::json(m.cpu_llc_bytes) : nlohmann::json(nullptr)},
      {"host_read_rule", kHostReadRule},
      {"cpu_fma_peak_gflops", m.cpu_fma_gflops > 0 ? nlohmann::json(m.cpu_fma_gflops) : nlohmann::json(nullptr)},
      {"cpu_tile_peak_gflops", m.cpu_tile_gflops > 0 ? nlohmann::json(m.cpu_tile_gflops) : nlohmann::json(nullptr)},
      {"cpu_fma_rule", kCpuFmaRule},
      {"backward_flops_rule", kBackwardFlopRule},
      {"baseline", a.baseline},
      {"interleave", a.interleave},
      {"paired_ratio_rule", "with interleave: every case once per round, repeat rounds after each case's warmup; "
                            "paired_ratio = the median over rounds of the case's time / the first timed case's time "
                            "in the same round; kv_read_fraction_paired (CPU decode) = the median over rounds of "
                            "kv_bytes / the round's time / one pass of the host read probe at the round's start"},
      {"repeat", a.repeat},
      {"warmup", a.warmup},
      {"seed", a.seed},
      {"kernel_configs", [] {
         nlohmann::json k = nlohmann::json::object();
         for (const auto& [var, value] : kernel_configs()) k[var] = value;
         return k;
       }()},
      {"flops_rule", "4*d per visible (query, key) pair per query head: q*N pairs, q*N - q^2/2 causal (N^2/2 for a prefill)"},
      {"error_rule",
       "forward: max |out - ref| / max sum_j P_ij |V_jc| against fp64 (the full chain when heads*N^2 <= 2^22, "
       "else 64 rows of head 0); backward: max |x - ref| / max |ref| over dQ, dK, dV against the fp64 staged "
       "backward when heads*n*m <= 2^22, else dQ of head 0 while n*m <= 2^24, else none (rel_err null); "
       "bound: error_bound per case"},
      {"kv_rule", "kv_bytes: K and V of the keys some query may see (all without a window) of every key/value head, read once; kv_gbs = kv_bytes / median; kv_read_fraction = kv_gbs / host_read_gbs (cpu) or / copy_bandwidth_gbs (cuda)"},
      {"bytes_rule",
       "min_bytes: inputs read once + output written once; moved_bytes: min for fused; for staged "
       "the sum over its four kernels of what each must read once and write once (scores and "
       "scaled written, scaled read and logits written, logits read and weights written, "
       "weights + V read and output written); for the staged backward the same sum over its passes "
       "(dV and dP, D, dS, / T, / the divisor, the cap's and the bias's where the case has them, dQ and "
       "dK, the check that every stage is finite); gbs uses moved_bytes"},
      {"baseline_rule",
       "variant plain (with --baseline): cpu_staged_plain, the obvious Eigen chain with one "
       "whole-matrix expression per stage and fresh matrices each run, fp32, timed beside every "
       "CPU staged case with the same warmup and repeat, staged byte rule, same fp64 check; "
       "staged_over_plain in the staged case = staged median_ms / plain median_ms"},
      {"cases", cases},
      {"skipped", skipped}};
  return j.dump(2) + "\n";
}

std::string render_table(const Machine& m, const std::vector<Result>& results,
                         const Spec& a) {
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
    if (value != "default") o << "kernel configuration: " << var << "=" << value << "\n";
  }
  o << "repeat " << a.repeat << (a.interleave ? " (interleaved: every case once per round)" : "") << ", warmup "
    << a.warmup << ", seed " << a.seed << "; TFLOP/s = 4 d per visible (query, key) pair per head / median (4 N^2 d, half for causal, in "
       "a prefill); GB/s = moved bytes / median\n";
  bool any_backward = false;
  for (const auto& r : results) any_backward = any_backward || r.c.backward();
  if (any_backward)
    o << kBackwardFlopRule << "; the backward's time excludes its forward; rel err over dQ, dK, dV against the "
         "fp64 staged backward\n";
  o << "\n";
  char line[512];
  std::snprintf(line, sizeof line, "%-5s %-6s %-4s %-6s %5s %6s %4s %10s %10s %10s %9s %9s %10s %10s %9s %9s  %s\n",
                "back", "var", "prec", "mask", "heads", "n", "d", "median ms", "min ms", "max ms",
                "TFLOP/s", "GB/s", "min MB", "moved MB", "peak MB", "rel err", "reference");
  o << line;
  for (const auto& r : results) {
    if (!r.ran) continue;
    // The case's decode shape and modifications after its reference, as its label names them (the
    // columns hold neither: two cases of one row's columns differ here).
    std::string mods;
    if (r.c.decode_shape()) mods += " q=" + std::to_string(r.c.q()) + " kv=" + std::to_string(r.c.g());
    if (r.c.score_mod != "none") mods += " score=" + r.c.score_mod;
    if (r.c.mask_mod != "none") mods += " mask=" + r.c.mask_mod;
    if (!r.c.rope.empty()) mods += " rope=" + r.c.rope;
    if (r.c.splits > 0) mods += " splits=" + std::to_string(r.c.splits);
    if (r.c.backward()) mods += " backward";
    if (!mods.empty()) mods = "  [" + mods.substr(1) + "]";
    if (r.inaccurate) mods += "  INACCURATE: above " + format_number("%.0e", error_bound(r.c));
    std::snprintf(line, sizeof line,
                  "%-5s %-6s %-4s %-6s %5d %6d %4d %10.4g %10.4g %10.4g %9.4g %9.4g %10.1f %10.1f %9.1f %9.2e  %s%s\n",
                  r.c.backend.c_str(), r.c.variant.c_str(), r.c.precision.c_str(),
                  r.c.mask.c_str(), r.c.heads, r.c.n, r.c.d, r.median_ms, r.min_ms, r.max_ms,
                  r.tflops, r.gbs, r.min_bytes / 1e6, r.moved_bytes / 1e6,
                  static_cast<double>(r.peak_bytes) / 1e6, r.rel_err, r.reference.en.c_str(), mods.c_str());
    o << line;
  }
  for (const auto& r : results)
    if (r.ran && !r.kernel.empty()) o << "  kernel of " << r.c.label() << ": " << r.kernel << "\n";
  const Result* first = nullptr;
  for (const auto& r : results)
    if (r.ran && r.paired_ratio > 0) {
      if (!first) {
        first = &r;
        o << "  interleaved: each case's time over " << r.c.label() << "'s in the same round, median over rounds:\n";
      }
      o << "    " << r.c.label() << ": " << format_number("%.4g", r.paired_ratio) << "\n";
    }
  for (const auto& r : results)
    if (r.ran && r.rope_ms > 0)
      o << "  rope of " << r.c.label() << ": Q and K rotated once per problem in " << format_number("%.3g", r.rope_ms)
        << " ms = " << format_number("%.1f", 100 * r.rope_ms / r.median_ms) << " % of the median\n";
  bool any_decode = false;
  for (const auto& r : results) {
    if (!r.ran || !r.c.decode()) continue;
    if (!any_decode) {
      o << "\ndecode: K+V of every key/value head read once (the keys some query may see), over the median time";
      if (m.host_read_gbs > 0) o << "; cpu read bandwidth " << format_number("%.1f", m.host_read_gbs) << " GB/s (all threads)";
      if (m.copy_gbs > 0) o << "; device copy " << format_number("%.0f", m.copy_gbs) << " GB/s";
      o << ":\n";
    }
    any_decode = true;
    const double f = kv_read_fraction(m, r);
    o << "  " << r.c.label() << ": K+V " << format_number("%.1f", r.kv_bytes / 1e6) << " MB read at "
      << format_number("%.1f", r.kv_gbs) << " GB/s"
      << (f > 0 ? " = " + format_number("%.0f", 100 * f) + " % of the read bandwidth" : std::string())
      << (f > 1 ? above_bandwidth(m, r) : std::string())
      << (r.kv_read_fraction_paired > 0
              ? "; round by round " + format_number("%.0f", 100 * r.kv_read_fraction_paired) +
                    " % of a read-probe pass in the same round (passes: median " +
                    format_number("%.1f", median_of(r.read_gbs_rounds)) + " GB/s)"
              : std::string())
      << "\n";
  }
  bool peak_line = false;
  for (const auto& r : results) {
    if (!r.ran || !r.c.backward() || r.c.backend != "cpu" || m.cpu_fma_gflops <= 0) continue;
    if (!peak_line)
      o << "\nbackward on the CPU against the FMA peak (" << format_number("%.0f", m.cpu_fma_gflops)
        << " GFLOP/s, every thread"
        << (m.cpu_tile_gflops > 0 ? "; the kernels' register tile on cached operands reaches " +
                                        format_number("%.0f", m.cpu_tile_gflops) + " GFLOP/s = " +
                                        format_number("%.0f", 100 * m.cpu_tile_gflops / m.cpu_fma_gflops) + " % of it"
                                  : std::string())
        << "):\n";
    peak_line = true;
    const double gflops = r.flops / (r.median_ms * 1e-3) / 1e9;
    o << "  " << r.c.label() << ": " << format_number("%.0f", gflops) << " GFLOP/s = "
      << format_number("%.0f", 100 * gflops / m.cpu_fma_gflops) << " % of the peak\n";
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
    o << "  " << r.c.label() << ": " << r.reason.en << "\n";
  }
  return o.str();
}

}  // namespace attnlab::bench
