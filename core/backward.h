// The backward pass of the attention chain, its plain types: the upstream gradient dO (what the
// user gives: a file, a loss, or a seeded random matrix) and the gradients of every stage, kept as
// labelled matrices in the order the chain runs back (GradTraceT). cpu/backward.h computes them
// (fp32 on the staged chain's run, fp64 on the reference's), core/backward_check.h holds the fp32
// ones against the fp64 ones, core/backward_report.h renders them.
//
// The chain (core/trace.h) and its gradients, for query head h reading key/value head
// g = kv_head(h) (rows of the stacked matrices as in core/problem.h); L is the loss, dX = ∂L/∂X:
//   forward                              backward, given dO (heads n, d_v)
//   O_h = P_h V_g                        dV_g = Σ_{h of g} P_hᵀ dO_h     dP_h = dO_h V_gᵀ
//   P = softmax(logits), row by row      D = rowsum(dO ∘ O)              dlogits = P ∘ (dP − D)
//                                        (Σ_j P_ij dP_ij = dO_i · O_i = D_i: the part of dP that
//                                        every key shares is taken out; masked entries are exactly 0)
//   logits = (last + mask) / T           dlast = dlogits / T             dT = Σ dlogits ∘ (−logits / T)
//   capped = C tanh(x / C)               dx = dcapped ∘ (1 − tanh²(x / C)), tanh(x / C) = capped / C
//   biased = scaled + ALiBi + bias       dscaled = dbiased: an added term passes the gradient on
//   scaled = scores · s                  dscores = dscaled · s  (s = p.scale_value())
//   scores_h = Qr_h Kr_gᵀ                dQr_h = dscores_h Kr_g          dKr_g = Σ_{h of g} dscores_hᵀ Qr_h
//   Qr, Kr = RoPE(Q), RoPE(K)            dQ = RoPEᵀ(dQr), dK = RoPEᵀ(dKr): each pair turned back
//                                        (without RoPE Qr = Q, Kr = K and dQ = dQr, dK = dKr)
// dT sums over every visible (head, query, key) entry; masked ones have dlogits = 0 and logits −∞
// and are left out (0 · ∞ is no number).
#pragma once

#include "core/problem.h"
#include "core/trace.h"

#include <cstdint>
#include <optional>
#include <string>

namespace attnlab {

// Where dO comes from.
enum class UpstreamKind {
  Random,  // standard normals from the lab's generator (fill_standard_normal), seeded
  File,    // a (heads n, d_v) matrix, CSV or .npy
  Sum,     // L = Σ O: dO = 1 everywhere
  Mse,     // L = ½ Σ (O − Y)²: dO = O − Y, Y a (heads n, d_v) target
};

struct Upstream {
  UpstreamKind kind = UpstreamKind::Random;
  std::uint64_t seed = 0;  // Random
  std::string file;        // File: dO's file; Mse: Y's file (for the texts)
  MatrixF data;            // File: dO; Mse: Y
};

// The upstream gradients the CLI's options name: --dout FILE, --loss sum | mse:FILE, --dout-seed S.
// Files are read at once (core/io.h: CSV or .npy, finite); the shape is checked against a problem
// by validate_upstream. InputError for an unknown loss or mse without its file.
Upstream upstream_random(std::uint64_t seed);
Upstream upstream_file(const std::string& path);
Upstream parse_loss(const std::string& spec);

// InputError unless dO (File) or Y (Mse) is (heads n, d_v) and finite, naming the file, the shape
// found and the shape wanted.
void validate_upstream(const Problem& p, const Upstream& u);

// The random dO of `seed`: (rows, cols) standard normals. The generator is seeded with seed xor a
// fixed constant, so that dO is never Q's numbers when --dout-seed equals the problem's --seed.
MatrixF random_dout(Eigen::Index rows, Eigen::Index cols, std::uint64_t seed);

// The upstream of one row's problem (cpu/walk.h row_problem: query `query` of head `head` alone):
// dO's row (a random dO's row from the same stream, without the rows before it), Y's row for mse,
// the sum as it is. O(row d_v) time, O(d_v) memory. u validated against p.
Upstream row_upstream(const Problem& p, const Upstream& u, int head, int query);

// dO for a run whose output is `output` (heads n, d_v), in the run's precision; `loss` receives L
// for Sum and Mse (summed in double), nothing for the others.
template <class Matrix>
Matrix upstream_dout(const Upstream& u, const Matrix& output, std::optional<double>* loss) {
  using Scalar = typename Matrix::Scalar;
  if (loss) loss->reset();
  switch (u.kind) {
    case UpstreamKind::Random:
      return random_dout(output.rows(), output.cols(), u.seed).template cast<Scalar>();
    case UpstreamKind::File:
      return u.data.template cast<Scalar>();
    case UpstreamKind::Sum:
      if (loss) *loss = output.template cast<double>().sum();
      return Matrix::Ones(output.rows(), output.cols());
    case UpstreamKind::Mse: {
      Matrix d = output - u.data.template cast<Scalar>();
      if (loss) *loss = 0.5 * d.template cast<double>().squaredNorm();
      return d;
    }
  }
  return {};
}

// One line naming dO: "dO: standard normal (--dout-seed 0)", "loss L = ½ Σ (O − Y)², Y from y.npy".
std::string upstream_text(const Upstream& u, Lang lang);
// The kind as the JSON writes it: random | file | sum | mse.
std::string upstream_kind_name(UpstreamKind k);

// The gradients of one run, every one a labelled matrix, in the order the chain runs back. Shapes:
// (heads n, ·) for the query side, (kv_heads m, ·) for K and V, as the forward's.
template <class Matrix>
struct GradTraceT {
  TraceT<Matrix> forward;  // the run the gradients are of (every stage kept)
  Matrix dout;             // dO = ∂L/∂O               (heads n, d_v)
  Matrix dv;               // dV = Σ Pᵀ dO             (kv_heads m, d_v)
  Matrix dp;               // dP = dO Vᵀ               (heads n, m)
  Matrix D;                // D = rowsum(dO ∘ O)       (heads n, 1)
  Matrix dlogits;          // P ∘ (dP − D)            (heads n, m); FlashAttention-2's dS
  Matrix dcapped;          // with a soft-cap: dlogits / T; else empty
  Matrix dbiased;          // with ALiBi or a bias: the gradient of the biased scores; else empty
  Matrix dscaled;          // the gradient of the scaled scores
  Matrix dscores;          // dscaled · s, the gradient of the raw scores QKᵀ
  Matrix dq_rot, dk_rot;   // with RoPE: the gradients of the rotated Q and K; else empty
  Matrix dq;               // dQ (heads n, d_k), in the inputs' frame
  Matrix dk;               // dK (kv_heads m, d_k), in the inputs' frame
  double dT = 0;           // ∂L/∂T
  std::optional<double> loss;  // L, for a loss (Sum, Mse)
  double backward_ms = 0;  // wall time of the backward alone (the forward's is in forward.timings)
  std::string kernel;      // the CUDA backward: the kernel that ran (cuda::last_backward_kernel); else empty
  std::size_t device_bytes = 0;  // the CUDA backward: the device memory its buffers took (its peak); else 0
};

using GradTrace = GradTraceT<MatrixF>;   // fp32: on the staged chain's run
using GradTraceD = GradTraceT<MatrixD>;  // fp64: on the reference's run

}  // namespace attnlab
