// The staged backward pass on the CPU (core/backward.h has the formulas): every gradient computed
// as its own whole-matrix step from a forward run that kept its stages, in the order the chain
// runs back, by one template over the matrix type, as plain_chain is for the forward:
//   fp32  on the staged chain's run (cpu_staged: what `attnlab run` shows), in fp32
//   fp64  on reference_fp64's run, in double: the reference the fp32 gradients are checked against
// Both sum dT in double (a scalar over every visible entry of every head), and both turn the
// gradients of RoPE's rotated Q and K back in double (rope_rotate_back), as the forward rotates
// them in double. The fused backward (FlashAttention-2's, P recomputed from the log-sum-exp) is
// cpu/fused_backward.h.
#pragma once

#include "core/backward.h"

#include <vector>

namespace attnlab {

// The fp32 staged chain's run of p and its backward for dO from `u`. Validates p and u.
GradTrace cpu_backward(const Problem& p, const Upstream& u);
// reference_fp64(p) and its backward in double. Validates p and u.
GradTraceD reference_backward_fp64(const Problem& p, const Upstream& u);
// dQ's row of query `query` of head `head` in that backward, without any matrix of the whole
// problem: reference_fp64_row's forward of the row (RoPE and ALiBi in double at the row's own
// positions), dO's row (row_upstream), and the chain back for that row alone. O(m d). p and u
// validated by the caller.
std::vector<double> reference_backward_fp64_row(const Problem& p, const Upstream& u, int head, int query);

// The backward of a given forward run of p (every stage kept; p validated) for a given dO
// (heads n, d_v). Throws std::invalid_argument for a run without stages or a dO of another shape.
GradTrace backward_of(const Problem& p, Trace forward, const MatrixF& dout);
GradTraceD backward_of(const Problem& p, TraceD forward, const MatrixD& dout);

// Host bytes cpu_backward(p) holds at its peak for a problem of size s: the forward's kept stages
// and the gradients (fp32); and reference_backward_fp64(p)'s (fp64).
double backward_bytes(const ProblemSize& s);
double reference_backward_bytes(const ProblemSize& s);

}  // namespace attnlab
