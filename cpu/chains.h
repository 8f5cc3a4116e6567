// Inside the CPU backend: the chains without their own validation, and the one set-up of the
// Trace they fill. The backend (cpu/cpu_backend.cpp) validates a run once and then calls these;
// the public functions of cpu/cpu_backend.h validate and call the same ones, so every path runs
// the same code.
#pragma once

#include "core/backend.h"

#include <cstddef>
#include <vector>

namespace attnlab::cpu {

// Readies `t` for a run of `p` that fills it: names it (cpu, variant, precision), zeroes its
// timings, empties the streaming parts, names the requested exact rows (`rows`, of the stacked
// trace), sizes the (heads*n, m) stages and the (n, m) mask when `keep`, else empties them, and
// sizes the (heads*n, d_v) output when `output`, else empties it. A resize keeps the buffers of a
// matrix whose shape is the same (the viewer's repeated runs).
void begin_trace(Trace& t, const Problem& p, Variant variant, Precision precision, bool keep, bool output,
                 const std::vector<int>& rows = {});

// The fp32 staged chain (cpu/staged.cpp), as cpu_staged_into but for a validated problem.
void staged_into(const Problem& p, const RunOptions& opt, Trace& t);
// What the fused forward keeps for its backward (cpu/fused_backward.cpp): per row of the stacked
// heads, the online softmax's final running max m and sum l, so that P = exp((s − m)·scale) / l
// with s the row's raw score (its modified scaled score with score mods) and scale = online_scale.
// The log-sum-exp L = m·scale + log l in two parts: exp(s·scale − L) would subtract two large
// numbers at a low temperature and lose the digits the two parts keep.
struct RowStats {
  std::vector<float> m, l;
  float scale = 0;
};
// The fused fp32 kernel (cpu/fused.cpp): the output only, and each row's m and l when `stats`.
void fused_into(const Problem& p, Trace& t, RowStats* stats = nullptr);
// The floats of the copy of V in strips that fused_into makes for p besides the inputs (0 where it
// reads V in place): about V's size, where d_v >= 128 and n >= 2048 (cpu/fused.cpp, VStrips).
std::size_t fused_v_strip_floats(const ProblemSize& s);
// The bf16 staged chain and fused kernel (cpu/bf16.cpp).
void staged_bf16_into(const Problem& p, const RunOptions& opt, Trace& t);
void fused_bf16_into(const Problem& p, Trace& t);
// The split-KV decode kernel (cpu/decode.cpp), fp32: the output only; opt.splits as asked.
void decode_into(const Problem& p, const RunOptions& opt, Trace& t);

}  // namespace attnlab::cpu
