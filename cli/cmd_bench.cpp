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
// The timing loop, the rules above and the probes are the benchmark engine's (engine/bench.h), which
// the viewer's Performance view runs too; the table, JSON and CSV are engine/bench_report.h's;
// this file keeps the options.
// Host copy rate: when a CPU case is to run, one single-thread memcpy probe of a buffer far past
// the last-level cache (bench::host_copy_probe), the ceiling the CPU stages' GB/s are read against,
// as the CUDA side prints its device-to-device copy rate.
// Baseline (--baseline): beside every CPU fp32 staged case, variant "plain" times
// cpu_staged_plain, the obvious whole-matrix Eigen chain with fresh matrices, with the same
// warm-up, repeats, byte rule and fp64 check; the table gives the staged chain's time ratio to it.
#include "core/gcc12_avx512.h"  // first: see there

#include "cli/common.h"
#include "core/format.h"

#include "engine/bench.h"
#include "engine/bench_report.h"
#include "engine/registry.h"

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
              mask_list = "none", queries_list, kv_heads_list, split_list, score_mod_list = "none", mask_mod_list = "none";
  std::string pass = "forward";
  std::string format = "table";
  std::string output_file;
};

using bench::Result;

// Splits and checks every option before anything runs (the --output file included).
void parse_args(BenchArgs& a) {
  a.ns = bench::int_list("--n", a.n_list, 1 << 20);
  a.ds = bench::int_list("--d", a.d_list, 4096);
  a.heads = bench::int_list("--heads", a.heads_list, 4096);
  if (!a.queries_list.empty()) a.queries = bench::int_list("--queries", a.queries_list, 1 << 20);
  if (!a.kv_heads_list.empty()) a.kv_heads = bench::int_list("--kv-heads", a.kv_heads_list, 4096);
  if (!a.split_list.empty()) a.splits = bench::int_list("--split", a.split_list, 1 << 20);
  a.backends = bench::word_list("--backend", a.backend_list);
  a.variants = bench::word_list("--variant", a.variant_list);
  a.precisions = bench::word_list("--precision", a.precision_list);
  a.masks = bench::word_list("--mask", a.mask_list);
  a.score_mods = bench::word_list("--score-mod", a.score_mod_list);
  a.mask_mods = bench::word_list("--mask-mod", a.mask_mod_list);
  a.passes = bench::parse_passes("--pass", a.pass);
  bench::check_spec(a);
  // text: the word the other commands use for their people's format, which is bench's table.
  if (a.format == "text") a.format = "table";
  if (a.format != "table" && a.format != "json" && a.format != "csv")
    throw InputError("--format takes table (or text), json or csv, got '" + a.format + "'");
  check_output_path(a.output_file);
}

int run_bench(BenchArgs& a) {
  parse_args(a);
  std::string cuda_reason;
  const bool want_cuda = std::find(a.backends.begin(), a.backends.end(), "cuda") != a.backends.end();
  const bool cuda_ok = want_cuda && cuda_available(&cuda_reason);
  // CUDA alone and no device: nothing would be timed, so it is refused as every other command
  // refuses --backend cuda (beside the CPU, the CUDA cases are listed as skipped with the reason).
  if (want_cuda && !cuda_ok && a.backends.size() == 1) throw NoDeviceError(Msg::NoDevice, {cuda_reason});
  bench::Machine machine = bench::machine_of(cuda_ok, &std::cerr);

  std::vector<Result> results = bench::plan(a);

  // The host copy rate, once, before any case runs, when a CPU case is to run.
  if (std::any_of(results.begin(), results.end(), [&](const Result& r) {
        return r.c.backend == "cpu" && bench::skip_reason(r.c, a, cuda_ok, cuda_reason).empty();
      })) {
    try {
      machine.host_copy_gbs = bench::host_copy_probe();
      std::cerr << "host copy probe: " << format_number("%.1f", machine.host_copy_gbs)
                << " GB/s (single thread, read + written)\n";
    } catch (const std::bad_alloc&) {  // the run goes on without it
      std::cerr << "bench: host copy rate not measured: out of host memory\n";
    } catch (const std::exception& e) {  // ResourceError
      std::cerr << "bench: host copy rate not measured: " << e.what() << "\n";
    }
  }

  // The all-thread read rate, once, when a decode case is to run on the CPU: its yardstick.
  if (std::any_of(results.begin(), results.end(), [&](const Result& r) {
        return r.c.backend == "cpu" && r.c.decode() &&
               bench::skip_reason(r.c, a, cuda_ok, cuda_reason).empty();
      })) {
    try {
      machine.host_read_gbs = bench::host_read_probe_all_cores();
      std::cerr << "host read probe: " << format_number("%.1f", machine.host_read_gbs)
                << " GB/s (every thread, read only)\n";
    } catch (const std::exception& e) {
      std::cerr << "bench: host read rate not measured: " << e.what() << "\n";
    }
  }

  // The FMA peak, once, when a backward case is to run on the CPU: its compute yardstick.
  if (std::any_of(results.begin(), results.end(), [&](const Result& r) {
        return r.c.backend == "cpu" && r.c.backward() && bench::skip_reason(r.c, a, cuda_ok, cuda_reason).empty();
      })) {
    machine.cpu_fma_gflops = bench::cpu_fma_peak_gflops();
    std::cerr << "FMA peak probe: " << format_number("%.0f", machine.cpu_fma_gflops) << " GFLOP/s (every thread)\n";
    machine.cpu_tile_gflops = bench::cpu_tile_peak_gflops();
    std::cerr << "tile probe: " << format_number("%.0f", machine.cpu_tile_gflops)
              << " GFLOP/s (the kernels' register tile on cached operands, every thread)\n";
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
    text = bench::render_json(machine, results, a);
  else if (a.format == "csv")
    text = bench::render_csv(results);
  else
    text = bench::render_table(machine, results, a);
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
  b->add_option("--variant", a->variant_list, "staged, fused and/or decode (default staged,fused)")
      ->type_name("LIST");
  b->add_option("--precision", a->precision_list, "fp32 and/or bf16 (default fp32,bf16)")
      ->type_name("LIST");
  b->add_option("--n", a->n_list, "sequence lengths N (default 1024,4096)")->type_name("LIST");
  b->add_option("--d", a->d_list, "head dims, d_k = d_v (default 64)")->type_name("LIST");
  b->add_option("--heads", a->heads_list, "B*H heads (default 1)")->type_name("LIST");
  b->add_option("--mask", a->mask_list, "none and/or causal (default none)")->type_name("LIST");
  b->add_option("--score-mod", a->score_mod_list,
                "score modifications, each one case: none, alibi, alibi:S, alibi:S1/S2/..., softcap:C, "
                "several in one case joined by '+' (default none)")
      ->type_name("LIST");
  b->add_option("--mask-mod", a->mask_mod_list,
                "mask modifications, each one case: none, causal, window:W, prefix:P, several in one case "
                "joined by '+', e.g. causal+window:256 (default none)")
      ->type_name("LIST");
  b->add_option("--rope", a->rope, "RoPE with base THETA on every case (default: none)")->type_name("THETA");
  b->add_option("--queries", a->queries_list,
                "decode shapes: queries at the end of each N (default: N, prefill)")
      ->type_name("LIST");
  b->add_option("--kv-heads", a->kv_heads_list,
                "key/value heads shared by the heads, each dividing them (default: one per head)")
      ->type_name("LIST");
  b->add_option("--split", a->split_list,
                "the decode variant's key splits per key/value head, each one case (default: chosen from "
                "the cores or SMs and the number of keys)")
      ->type_name("LIST");
  b->add_option("--pass", a->pass,
                "forward, backward or both: the backward times the gradients for a random dO (after a "
                "forward that keeps what they need; CPU staged and fused in fp32, CUDA fused in fp32 and bf16), FLOPs 2.5x the "
                "forward's for the fused algorithm, 2x for the staged one (default forward)")
      ->type_name("PASS");
  b->add_option("--repeat", a->repeat, "timed repetitions per case (default 10)")
      ->type_name("R");
  b->add_option("--warmup", a->warmup, "untimed repetitions first (default 2)")->type_name("W");
  b->add_option("--seed", a->seed, "seed of the random inputs (default 0)")->type_name("S");
  b->add_option("--format", a->format, "table (or text) | json | csv (default table)")->type_name("FMT");
  // Plain decimal notation, as the temperature (parse_plain_number: not "0x10", "inf", "1e400").
  b->add_option_function<std::string>(
       "--max-seconds",
       [a](const std::string& s) {
         const std::optional<double> v = parse_plain_number(s);
         if (!v || !std::isfinite(*v) || !(*v > 0))
           throw InputError("--max-seconds must be a finite decimal number > 0, got '" + trim_blanks(s) + "'");
         a->max_seconds = *v;
       },
       "skip CPU cases whose runs, warm-up ones included, are estimated to take longer than S seconds "
       "(default 60)")
      ->type_name("S");
  b->add_option("--output", a->output_file, "write the report to FILE instead of stdout")
      ->type_name("FILE");
  b->add_flag("--baseline", a->baseline,
              "also time the plain Eigen chain (cpu_staged_plain) beside every CPU fp32 staged "
              "case, as variant 'plain', and give the staged / plain time ratio");
  b->add_flag("--interleave", a->interleave,
              "time the cases in turn, one run of each per round (--repeat rounds after each case's warm-up), "
              "instead of each case's repetitions together, and give each case's time over the first case's, "
              "round by round (median): the ratio a machine whose speed drifts leaves alone; with CPU decode "
              "cases each round starts with one pass of the read probe, and their read rate is taken against "
              "it round by round. Every case's problem is held at once");
  b->callback([a, &exit_code] { exit_code = run_bench(*a); });
}

}  // namespace attnlab::cli
