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
// The timing loop, the rules above and the probes are the benchmark engine's (core/bench.h), which
// the viewer's Performance view runs too; this file keeps the options, the table and the JSON.
// Host copy rate: when a CPU case is to run, one single-thread memcpy probe of a buffer far past
// the last-level cache (bench::host_copy_probe), the ceiling the CPU stages' GB/s are read against,
// as the CUDA side prints its device-to-device copy rate.
// Baseline (--baseline): beside every CPU fp32 staged case, variant "plain" times
// cpu_staged_plain, the obvious whole-matrix Eigen chain with fresh matrices, with the same
// warm-up, repeats, byte rule and fp64 check; the table gives the staged chain's time ratio to it.
#include "core/gcc12_avx512.h"  // first: see there

#include "cli/common.h"
#include "core/format.h"

#include "core/backend.h"
#include "core/bench.h"
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

// The engine's Spec (its lists, repeat, warmup, seed, max_seconds, baseline) plus the CLI's own.
struct BenchArgs : bench::Spec {
  // The lists as typed, split and checked by parse_args (CLI11's own splitting would drop an
  // empty item such as the one in "64,,128" without a word).
  std::string backend_list = "cpu,cuda", variant_list = "staged,fused",
              precision_list = "fp32,bf16", n_list = "1024,4096", d_list = "64", heads_list = "1",
              mask_list = "none";
  std::string format = "table";
  std::string output_file;
};

using bench::Case;
using bench::Result;

std::string today() {
  const std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", std::localtime(&now));
  return buf;
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
  j["status"] = r.inaccurate ? "inaccurate" : "ok";
  j["error_bound"] = bench::error_bound(r.c);
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
      {"host_copy_rule", bench::kHostCopyRule},
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
                  "%-5s %-6s %-4s %-6s %5d %6d %4d %10.4g %10.4g %10.4g %9.4g %9.4g %10.1f %10.1f %9.1f %9.2e  %s%s\n",
                  r.c.backend.c_str(), r.c.variant.c_str(), r.c.precision.c_str(),
                  r.c.mask.c_str(), r.c.heads, r.c.n, r.c.d, r.median_ms, r.min_ms, r.max_ms,
                  r.tflops, r.gbs, r.min_bytes / 1e6, r.moved_bytes / 1e6,
                  static_cast<double>(r.peak_bytes) / 1e6, r.rel_err, r.reference.c_str(),
                  r.inaccurate ? ("  INACCURATE: above " + format_number("%.0e", bench::error_bound(r.c))).c_str() : "");
    o << line;
  }
  for (const auto& r : results)
    if (r.ran && !r.kernel.empty()) o << "  kernel of " << r.c.label() << ": " << r.kernel << "\n";
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

// Splits and checks every option before anything runs (the --output file included).
void parse_args(BenchArgs& a) {
  a.ns = bench::int_list("--n", a.n_list, 1 << 20);
  a.ds = bench::int_list("--d", a.d_list, 4096);
  a.heads = bench::int_list("--heads", a.heads_list, 4096);
  a.backends = bench::word_list("--backend", a.backend_list);
  a.variants = bench::word_list("--variant", a.variant_list);
  a.precisions = bench::word_list("--precision", a.precision_list);
  a.masks = bench::word_list("--mask", a.mask_list);
  bench::check_spec(a);
  if (a.format != "table" && a.format != "json" && a.format != "csv")
    throw InputError("--format takes table, json or csv, got '" + a.format + "'");
  check_output_path(a.output_file);
}

int run_bench(BenchArgs& a) {
  parse_args(a);
  Machine machine;
  machine.date = today();
  machine.cpu = bench::host_cpu();

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

  std::vector<Result> results = bench::plan(a);

  // The host copy rate, once, before any case runs, when a CPU case is to run.
  if (std::any_of(results.begin(), results.end(), [&](const Result& r) {
        return r.c.backend == "cpu" && bench::skip_reason(r.c, a, cuda_ok, cuda_reason).empty();
      })) {
    try {
      machine.host_copy_gbs = bench::host_copy_probe();
      std::cerr << "host copy probe: " << format_number("%.1f", machine.host_copy_gbs)
                << " GB/s (single thread, read + written)\n";
    } catch (const std::exception& e) {  // ResourceError or bad_alloc: the run goes on without it
      std::cerr << "bench: host copy rate not measured: " << e.what() << "\n";
    }
  }

  bench::Hooks hooks;
  hooks.log = &std::cerr;
  const bench::Outcome outcome = bench::run_sweep(results, a, cuda_ok, cuda_reason, hooks);
  const int exit_code = outcome.device_failure || outcome.inaccurate > 0 ? 1 : 0;
  if (outcome.inaccurate > 0)
    std::cerr << "bench: " << outcome.inaccurate << " case(s) ran with an error above their bound (status "
              << "'inaccurate'): exit 1\n";

  std::string text;
  if (a.format == "json")
    text = render_json(machine, results, a);
  else if (a.format == "csv")
    text = bench::render_csv(results);
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
