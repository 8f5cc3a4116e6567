// The benchmark engine: the one timing loop behind `attnlab bench` (cli/cmd_bench.cpp) and the
// viewer's Performance view (viewer/views/perf/perf_view.h). A sweep is every combination of backend x
// variant x precision x mask x heads x d x N; each case is timed with the backend's own bench()
// (inputs resident, warm-up, repeats; CUDA events on the GPU, a steady clock on the CPU) and its
// output checked against an fp64 reference computed in the same run. Cases that cannot run are
// kept with the reason (no device, over the time budget, does not fit in memory).
//
// Rules (the same for every face):
//   FLOPs  4 N^2 d per head (QK^T and PV, 2 per multiply-add), half for causal
//   bytes  "min" = every input read once and the output written once (the fused kernels' floor);
//          "moved" = what the variant must move: min for fused; for staged the sum of what each
//          of its four kernels must read once and write once (staged_stage_bytes), for the staged
//          backward the same sum over its passes (staged_backward_bytes)
//   error  max |out - ref| / max_ic Σ_j P_ij |V_jc| (the size of the sums behind the output); ref
//          is the full fp64 chain when heads*N^2 <= 2^22, else 64 query rows of head 0, spread
//          evenly, recomputed in double
// Also here: the machine probes the numbers are read against (a single-thread host copy, an
// all-core read, an FMA peak and an Eigen SGEMM on the CPU; cuBLAS SGEMM and the device copy on CUDA)
// (the reports both faces write are engine/bench_report.h's).
#pragma once

#include "core/messages.h"
#include "core/types.h"

#include <atomic>
#include <cstddef>
#include <functional>
#include <iosfwd>
#include <limits>
#include <string>
#include <vector>

namespace attnlab::bench {

struct Case {
  std::string backend, variant, precision, mask;  // variant "plain": the --baseline chain
  int heads = 1, n = 0, d = 0;  // n: the sequence (keys); d = d_k = d_v
  // Decode shapes: the last `queries` of the n positions (0: all n, prefill) and the key/value
  // heads the heads share (0: one each).
  int queries = 0, kv_heads = 0;
  // The decode variant's key splits per key/value head (RunOptions::splits; 0: the machine's choice).
  int splits = 0;
  // Modifications (core/inputs.h specs, items joined by '+'): "none" or e.g. "alibi",
  // "softcap:30"; "none" or e.g. "causal+window:256"; RoPE's θ as typed, "" for none.
  std::string score_mod = "none", mask_mod = "none", rope;
  // "forward" (the attention) or "backward" (its gradients for a random dO: the backward alone is
  // timed, after a forward that keeps what it needs; cpu/backward.h, cpu/fused_backward.h).
  std::string pass = "forward";
  bool backward() const { return pass == "backward"; }
  bool modified() const { return score_mod != "none" || mask_mod != "none" || !rope.empty(); }
  int q() const { return queries > 0 ? queries : n; }
  int g() const { return kv_heads > 0 ? kv_heads : heads; }
  bool decode_shape() const { return q() != n || g() != heads; }
  // A decode case, read against the memory bandwidth: a decode shape, or the decode variant.
  bool decode() const { return decode_shape() || variant == "decode"; }
  // "cpu fused fp32 none heads=1 n=1024 d=64", then " q=1 kv=8" for a decode shape and
  // " score=alibi mask=causal+window:256 rope=10000" for the modifications it has, " splits=S" for
  // a decode case with its split count given, " pass=backward"
  std::string label() const;
};

struct Stage {
  std::string name;
  double ms = 0, bytes = 0;
};

struct Result {
  Case c;
  bool ran = false;
  bool failed = false;  // a device error (a defect, not a property of the case)
  Message reason;       // why it was skipped (or failed): its English words in the reports, the
                        // perf view's legend in the UI's language
  double median_ms = 0, min_ms = 0, max_ms = 0;
  int repeats = 0;
  std::vector<double> ms;  // every timed repetition, in order (the spread)
  double flops = 0, tflops = 0;
  double min_bytes = 0, moved_bytes = 0, gbs = 0;
  // The key/value cache's bytes (case_kv_bytes: K and V of the keys some query may see, read
  // once) and their read rate at the median time: the yardstick of decode, read against the
  // machine's read bandwidth.
  double kv_bytes = 0, kv_gbs = 0;
  std::size_t peak_bytes = 0;
  double rel_err = std::numeric_limits<double>::quiet_NaN();
  Message reference;  // which fp64 reference the error is against (its English words in CSV and JSON)
  // rel_err above error_bound(c) (or not a number): the case ran but its output is wrong; the
  // CLI then exits 1, as for a device failure.
  bool inaccurate = false;
  std::string kernel;  // BenchSample::kernel: which kernel ran (CUDA fused forward or backward), else empty
  // The decode variant: the split count that ran (Case::splits, or the kernel's own choice where
  // that is 0); 0 for the kernels that do not split the keys and for a case that did not run.
  int splits = 0;
  // RoPE: the one rotation of Q and K per problem (in double, rounded once; every repetition then
  // multiplies the rotated copies), timed on the host; 0 without RoPE.
  double rope_ms = 0;
  // Spec::interleave: the median over rounds of this case's time over the first case's in the
  // same round (1 for the first case); 0 when not interleaved.
  double paired_ratio = 0;
  // Spec::interleave, a CPU decode case: the host read probe's pass at the start of each round
  // (GB/s, parallel to ms), and the median over rounds of the case's K+V read rate over the pass
  // of its round; empty and 0 otherwise.
  std::vector<double> read_gbs_rounds;
  double kv_read_fraction_paired = 0;
  // Staged only: each stage's median time over the timed repetitions and the bytes it must move.
  std::vector<Stage> stages;
};

// What to sweep. Lists are checked by check_spec; every combination becomes one case.
struct Spec {
  std::vector<std::string> backends{"cpu", "cuda"}, variants{"staged", "fused"},
      precisions{"fp32", "bf16"}, masks{"none"};
  std::vector<int> ns{1024, 4096}, ds{64}, heads{1};
  // Decode shapes: each value of queries (at most n) and kv_heads (dividing heads) with every
  // other combination; empty = today's prefill (queries = n, kv_heads = heads).
  std::vector<int> queries, kv_heads;
  // The decode variant's key splits (each value one decode case; the other variants ignore it);
  // empty = the machine's choice.
  std::vector<int> splits;
  // Modifications, each value with every other combination (see Case): score mods without files
  // (alibi, alibi:S, alibi:S1/S2/..., softcap:C) and mask mods without files (causal, window:W,
  // prefix:P), items of one value joined by '+'; RoPE's θ ("" for none).
  std::vector<std::string> score_mods{"none"}, mask_mods{"none"};
  std::string rope;
  // The passes: forward and/or backward (parse_passes: "both" is both).
  std::vector<std::string> passes{"forward"};
  int repeat = 10;
  int warmup = 2;
  std::uint64_t seed = 0;
  double max_seconds = 60;  // CPU cases estimated to take longer are skipped
  std::string max_seconds_flag = "--max-seconds";  // how the face names it in that skip's reason
  bool baseline = false;    // variant "plain" (cpu_staged_plain) beside every CPU fp32 staged case
  // Every case once per round, `repeat` rounds, instead of each case's repetitions together
  // (run_sweep: every problem is held at once); Result::paired_ratio then compares the cases
  // round by round, and a CPU decode case's read rate is taken against a pass of the host read
  // probe in each round (Result::kv_read_fraction_paired).
  bool interleave = false;
};

// ---- lists, as both faces take them ------------------------------------------------------------
// "a,b,c" -> {"a", "b", "c"}; an empty item is refused (InputError), naming the option and the list.
std::vector<std::string> split_list(const char* name, const std::string& text);
// Whole numbers 1..hi, no repeats: "--n values must be whole numbers between 1 and 1048576, got 'x'".
std::vector<int> int_list(const char* name, const std::string& text, int hi);
// Words, no repeats (a value given twice would time the same case twice).
std::vector<std::string> word_list(const char* name, const std::string& text);
// "forward" | "backward" | "both" -> the spec's passes ({"forward"}, {"backward"},
// {"forward", "backward"}); anything else: InputError naming `flag` (`attnlab bench --pass`, the
// perf view's --perf-pass and its Pass control).
std::vector<std::string> parse_passes(const std::string& flag, const std::string& text);
// The passes as parse_passes reads them back ("both" for the two).
std::string passes_name(const std::vector<std::string>& passes);
// Refuses a backend other than cpu/cuda, a variant other than staged/fused/decode, a precision other than
// fp32/bf16, a mask other than none/causal, a pass other than forward/backward, repeat < 1,
// warmup < 0, max_seconds <= 0.
void check_spec(const Spec& s);

// ---- the rules ---------------------------------------------------------------------------------
// 4 d per visible (query, key) pair per head: q n pairs, q n - q^2 / 2 under causal (n^2 / 2 for
// a prefill); with mask mods, the pairs their rule lets through (a window of W: about q W).
// The backward: backward_flop_factor times that.
double case_flops(const Case& c);
// The bytes of K and V a decode kernel must read: the keys some query may see (all of them
// without a window: MaskRule::union_interval) of every key/value head, once, at the precision's
// element size.
double case_kv_bytes(const Case& c);
// The backward's products against the forward's two (S = Q Kᵀ and P V), 2 d FLOPs each per pair:
// the fused backward computes five (S again, dP = dO Vᵀ, dV += Pᵀ dO, dK += dSᵀ Q, dQ += dS K):
// 2.5; the staged backward keeps S and P from its forward and computes four: 2. 1 for a forward.
double backward_flop_factor(const Case& c);
extern const char* const kBackwardFlopRule;
// The largest rel_err a case may have (a forward's: max |out - ref| over the largest Σ_j P_ij |V_jc|
// of the rows checked, verify.h's max_weighted_abs_v): 1e-5 in fp32 (the project's fp32 goal, 3xTF32 included)
// and 2e-2 in bf16 (verify's bf16 tolerance); 1e-4 for the fp32 backward (its gradients, see bench.cpp), 4e-2 for
// the bf16 one (dO rounded to bf16 too).
double error_bound(const Case& c);
// The four staged kernels' bytes (qk, scale_mask, softmax, pv), ms left 0.
std::vector<Stage> staged_stage_bytes(const Case& c);
// The fewest bytes a case must move, each input read once (K and V: case_kv_bytes, so a decode
// window's keys only) and each output written once; moved: the staged chain's four kernels' sum,
// the staged backward's passes' sum.
void case_bytes(const Case& c, double& min_bytes, double& moved_bytes);
// The staged backward (cpu/backward.cpp's chain, the timed part), counted as the forward's stages
// are: each pass reads its inputs once and writes its output once, the score-sized matrices
// (heads q, n) of fp32 entries —
//   dV = Pᵀ dO, dP = dO Vᵀ     P, dO (each product), V read; dV, dP written
//   D = rowsum(dO ∘ O)         dO, O read; D written
//   dlogits = P ∘ (dP − D)     P, dP, the logits (for dT) read; dlogits written
//   / T, then / the divisor    two passes, each one matrix read and one written
//   the cap's (1 − t²)         where the case caps: dcapped kept (a copy), it and capped read, one written
//   the bias                   where the case adds one (ALiBi or a file): its copy kept
//   dQ = dS K, dK = dSᵀ Q      dS (each product), K, Q read; dQ, dK written
//   the check that every gradient stage is finite (one read of each score-sized stage)
//   RoPE                       dQr and dKr kept (copies), then turned back (one read, one write)
double staged_backward_bytes(const Case& c);
// Why the case cannot run before anything is built, or "": CUDA bf16 off the fused kernel's rules,
// no CUDA device, a CPU case estimated over s.max_seconds.
Message skip_reason(const Case& c, const Spec& s, bool cuda_ok, const std::string& cuda_reason);
// Rough sustained rates (FLOP/s) of the CPU paths, deliberately pessimistic: the time budget's
// estimate, and the perf view's first guess of the time left.
double cpu_rate_guess(const std::string& variant);

// Every case of the spec in list order (backend, variant, precision, mask, heads, kv_heads, d,
// queries, n), flops and
// bytes filled in, the baseline row right after its staged case, the passes innermost. Nothing
// is run.
std::vector<Result> plan(const Spec& s);

// ---- running -----------------------------------------------------------------------------------
struct Hooks {
  // Set by another thread: the sweep stops after the repetition in flight (the CPU backend checks
  // it between repetitions; CUDA cases end with their case) and leaves the rest not run.
  const std::atomic<bool>* cancel = nullptr;
  // Called on the sweep's thread before each case (done = cases finished so far) and after it
  // (done counts it); `index` is the case's position in the results.
  std::function<void(std::size_t index, std::size_t done, std::size_t total, bool finished)> on_case;
  // Where the progress lines go ("[3/8] cpu fused ...: 1.23 ms median of 10, ..."); null: none.
  std::ostream* log = nullptr;
};

struct Outcome {
  bool cancelled = false;  // stopped by Hooks::cancel; cases not reached keep ran = false, reason ""
  bool device_failure = false;  // some case failed with a device error (exit 1 in the CLI)
  int inaccurate = 0;           // cases whose error is above their bound (exit 1 in the CLI)
};

// Runs every case of `results` (from plan), grouped by shape (mask, heads, d, n) so that one
// problem and one fp64 reference serve every backend / variant / precision of a shape and only
// one shape's inputs are held at a time. Fills each Result in place: timed, or skipped with its
// reason (skip_reason, does not fit, out of host memory), or failed (device error).
Outcome run_sweep(std::vector<Result>& results, const Spec& s, bool cuda_ok,
                  const std::string& cuda_reason, const Hooks& hooks = {});

// ---- the machine -------------------------------------------------------------------------------
// "<model name> (<threads> threads)" from /proc/cpuinfo.
std::string host_cpu();

// Single-thread memcpy of a buffer far past the last-level cache: GB/s (read + written), best of 5
// after one warm-up copy. Throws ResourceError when 512 MiB do not fit.
double host_copy_probe();
extern const char* const kHostCopyRule;
// Every hardware thread reading its own slice of a buffer far past the last-level cache at once
// (a vector sum): GB/s read, the ceiling decode's K+V read rate is measured against.
double host_read_probe_all_cores();
extern const char* const kHostReadRule;
// Eigen SGEMM (fp32) on every hardware thread, each multiplying its own row block of a square
// problem: GFLOP/s (2 n^3 / best time of 5), a labelled point under the compute roof.
double cpu_sgemm_probe_gflops();
extern const char* const kCpuSgemmRule;
// The FMA peak: independent fused multiply-add chains in vector registers on every hardware
// thread at once, GFLOP/s (2 per lane per FMA), best of 5: the CPU roofline's compute ceiling.
double cpu_fma_peak_gflops();
extern const char* const kCpuFmaRule;
// The tile probe: the fused kernels' own wide register tile (cpu/online_softmax.h, rows_madd) on
// operands that stay in the core's caches (a (128, 64) by (64, 64) product, the backward's S
// tile), every hardware thread at once, best of 5: the most the kernels' products reach here,
// loads included, under the FMA peak.
double cpu_tile_peak_gflops();
extern const char* const kCpuTileRule;

// The ceilings of one backend for the roofline; 0: not measured (why in `note`).
struct Ceilings {
  double bandwidth_gbs = 0;  // memory
  double gemm_gflops = 0;    // fp32 GEMM: a labelled point where the peak is measured, else the roof
  double peak_gflops = 0;    // the FMA peak; 0: not measured (the GEMM probe is the roof then)
  std::string bandwidth_rule, gemm_rule, peak_rule, note;
  // The compute roof: the FMA peak where measured, else the GEMM probe.
  double compute_gflops() const { return peak_gflops > 0 ? peak_gflops : gemm_gflops; }
};
// The CPU's: host_read_probe_all_cores (the memory roof), cpu_fma_peak_gflops (the compute roof)
// and cpu_sgemm_probe_gflops (a point under it).
Ceilings cpu_ceilings();
// The device's: cuda::copy_bandwidth_gbs and the cuBLAS SGEMM probe (kernels/cublas_probe.h);
// zeros and a note where CUDA is not built, no device answers or cuBLAS is not found.
Ceilings cuda_ceilings();

}  // namespace attnlab::bench
