// The Eigen CPU backend (the lab's reference on every machine) and the fp64 reference chain.
//   staged  — every stage materialised, fp32 (cpu/staged.cpp)
//   fused   — blockwise online softmax, never materialises N x N, fp32, threads (cpu/fused.cpp)
//   fp64    — the same staged chain in double; what tests and `verify` compare against
// and, in bf16 (cpu/bf16.cpp, its arithmetic in cpu/bf16.h, that of the CUDA bf16 kernel):
//   staged  — every stage as the bf16 pipeline has it;  fused — the output only
#pragma once

#include "core/backend.h"

#include <memory>

namespace attnlab {

std::unique_ptr<Backend> make_cpu_backend();

// The fp32 staged chain (cpu/staged.cpp) into `t`, whose buffers are reused when the shapes match:
// every stage kept (opt.keep_stages), or only the output, or the streaming results (opt.pool,
// opt.rows; see core/backend.h). Validates first; honours opt.cancel and opt.progress.
void cpu_staged_into(const Problem& p, const RunOptions& opt, Trace& t);
// Staged chain in fp32: every stage of the Trace filled. Validates first.
Trace cpu_staged(const Problem& p);
// The same, keeping only `output` (has_stages = false): large problems, benchmarks.
Trace cpu_staged_output_only(const Problem& p);
// The obvious Eigen chain in fp32, one whole-matrix expression per stage with fresh matrices: the
// baseline `attnlab bench --baseline` times the staged chain against. Validates first.
Trace cpu_staged_plain(const Problem& p);
// The same chain in double precision on the fp32 inputs (upcast). Validates first.
TraceD reference_fp64(const Problem& p);
// One row of the fp64 chain, for query `query` of query head `head` over the first `keys` keys of
// its key/value head (0: all m; a causal mask places the queries at the end of those keys), without
// any matrix of the whole problem: O(keys d). What checks a long decode row (the viewer's decode
// view), the walks' rows and bench's large cases. InputError for a head or query outside, or a row
// that sees no key.
struct RowReference {
  std::vector<double> output;          // d_v
  std::vector<double> weights;         // the row's softmax weights, one per key
  std::vector<double> modified;        // the scores after the score mods and before the temperature,
                                       // −∞ where masked (the backward's row reads the cap's from them)
  double max_abs_logit = 0;            // the largest |logit| (verify's fp32 output bound reads it)
  std::vector<double> weighted_abs_v;  // Σ_j w_j |V_jc| per column (the size of the sums behind the
                                       // output); only with `sums`, which costs a second pass over V
};
RowReference reference_fp64_row(const Problem& p, int head, int query, int keys = 0, bool sums = false);
// Fused blockwise kernel (online softmax), fp32; fills only output (has_stages = false).
// Implemented in cpu/fused.cpp.
Trace cpu_fused(const Problem& p);
// The split-KV decode kernel (cpu/decode.h), fp32: only `output` and `splits` (0: the machine's
// choice of split count). Validates first.
Trace cpu_decode(const Problem& p, int splits = 0);

// The staged bf16 chain into `t` (every stage when opt.keep_stages, else only the output; no
// opt.pool or opt.rows: the streaming views come from the fp32 chain). Validates first.
void cpu_staged_bf16_into(const Problem& p, const RunOptions& opt, Trace& t);
// The fused bf16 kernel: only `output` (has_stages = false). Validates first.
Trace cpu_fused_bf16(const Problem& p);

// Host bytes a run of `p` holds at its peak: inputs, output and, for the staged chain, its
// (heads*n, m) stages plus the mask. What the CPU backend checks against MemAvailable; also what
// the CUDA backend's Trace brings back.
double host_working_set_bytes(const ProblemSize& s, const RunOptions& opt);
double host_working_set_bytes(const Problem& p, const RunOptions& opt);
// Of those, the staged chain's kept stages: scores, scaled, logits and weights of every head, the
// score mods' (biased, capped) and the (n, m) mask, all fp32.
double kept_stage_bytes(const ProblemSize& s);
// The CPU backend's refusal (ResourceError) of a run whose working set would not fit in the
// host's room; what every CPU run checks before it allocates.
void check_cpu_run_fits(const ProblemSize& s, const RunOptions& opt);
// Host bytes reference_fp64(p) holds: every stage and the output in double.
double reference_fp64_bytes(const ProblemSize& s);

}  // namespace attnlab
