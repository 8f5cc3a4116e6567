// The fused backward pass on the CPU: FlashAttention-2's backward (Dao 2023, Algorithm 2), fp32,
// one worker thread per core. It never forms an (n, m) matrix: the forward (cpu/fused.cpp) keeps
// each row's running max m and sum l, and the backward recomputes P tile by tile from them.
//   D = rowsum(dO ∘ O)                                 once, O(heads n d_v)
//   per key block K_j, V_j of one key/value head, per query block Q_i of each head that reads it:
//     S = Q_i K_jᵀ (modified by the score mods, masked)   P = exp((S − m)·scale) / l
//     dV_j += Pᵀ dO_i        dP = dO_i V_jᵀ        dS = P ∘ (dP − D)
//     dK_j += dSᵀ Q_i        dQ_i += dS K_j       (times the chain's factors: 1/T, the cap's
//                                                  1 − tanh², the scale)
// The formulas are core/backward.h's; this is the same chain without its middle matrices.
// Extra memory: D, m and l (O(heads n)) and each thread's tiles. Five products of a tile, against
// the forward's two: the backward's work is 2.5 times the forward's.
#pragma once

#include "core/backward.h"

namespace attnlab {

// The fused forward of p (keeping m and l) and its fused backward for dO from `u`. Fills the
// forward's output, dout, D, dv, dq, dk, dT, the loss; the (n, m) matrices stay empty, as do
// dq_rot and dk_rot. forward.timings.total_ms is the forward's time, backward_ms the backward's.
// Validates p and u.
GradTrace cpu_fused_backward(const Problem& p, const Upstream& u);

// Host bytes cpu_fused_backward(p) holds at its peak, as backward_bytes counts the staged one's:
// the inputs, O, dO, dQ, dK, dV, D, m, l, and the threads' tiles.
double fused_backward_bytes(const ProblemSize& s);

}  // namespace attnlab
