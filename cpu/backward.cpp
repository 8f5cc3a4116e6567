// The staged backward pass (cpu/backward.h; the formulas are in core/backward.h): one template,
// backward_chain, over the matrix type. Each step is a whole-matrix expression or a plain loop
// over the stacked heads, written in the order the chain runs back; grouped heads add their
// query heads' contributions into the key/value head they share (dV, dK).
#include "core/gcc12_avx512.h"  // first: see there

#include "cpu/backward.h"

#include "core/messages.h"
#include "cpu/cpu_backend.h"
#include "core/modify.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

namespace attnlab {
namespace {

using Clock = std::chrono::steady_clock;

// The gradients of `fwd`, a run of p that kept its stages, for dO = `dout` (heads n, d_v).
template <class Matrix>
GradTraceT<Matrix> backward_chain(const Problem& p, TraceT<Matrix> fwd, Matrix dout) {
  using Scalar = typename Matrix::Scalar;
  const auto t0 = Clock::now();
  const int n = p.n(), m = p.m(), heads = p.heads, kv_heads = p.kv_heads();
  const Eigen::Index hn = static_cast<Eigen::Index>(heads) * n;
  if (!fwd.has_stages || fwd.weights.rows() != hn || fwd.weights.cols() != m || fwd.output.rows() != hn)
    throw std::invalid_argument("the backward needs a forward run that kept its stages");
  if (dout.rows() != hn || dout.cols() != p.d_v())
    throw std::invalid_argument("dO must be (heads n, d_v)");

  // Q and K as QKᵀ multiplied them (rotated by RoPE: the run kept them), and V; in fp32 these are
  // the problem's own matrices, in fp64 each is converted once.
  const bool rope = p.mods.rope_theta > 0;
  Matrix q_store, k_store, v_store;
  const Matrix *qp = &fwd.q_rot, *kp = &fwd.k_rot, *vp;
  if constexpr (std::is_same_v<Scalar, double>) {
    if (!rope) {
      q_store = p.q().template cast<double>();
      k_store = p.k().template cast<double>();
      qp = &q_store;
      kp = &k_store;
    }
    v_store = p.v().template cast<double>();
    vp = &v_store;
  } else {
    if (!rope) {
      qp = &p.q();
      kp = &p.k();
    }
    vp = &p.v();
  }
  const Matrix& q = *qp;
  const Matrix& k = *kp;
  const Matrix& v = *vp;
  const auto head_rows = [n](const Matrix& a, int h) { return a.middleRows(static_cast<Eigen::Index>(h) * n, n); };
  const auto masked = [&fwd](int i, int j) { return std::isinf(fwd.mask(i, j)); };

  GradTraceT<Matrix> g;
  g.dout = std::move(dout);

  // O = P V: dV = Pᵀ dO (summed over a group's query heads), dP = dO Vᵀ.
  g.dv = Matrix::Zero(static_cast<Eigen::Index>(kv_heads) * m, p.d_v());
  g.dp.resize(hn, m);
  for (int h = 0; h < heads; ++h) {
    g.dv.middleRows(p.kv_row(h), m).noalias() += head_rows(fwd.weights, h).transpose() * head_rows(g.dout, h);
    g.dp.middleRows(static_cast<Eigen::Index>(h) * n, n).noalias() =
        head_rows(g.dout, h) * v.middleRows(p.kv_row(h), m).transpose();
  }

  // P = softmax(logits): dlogits = P ∘ (dP − D) with D = rowsum(dO ∘ O). A masked entry is set to
  // 0, not left to P = 0 times (dP − D): it is exactly 0 by construction. dT sums, over the visible
  // entries, dlogits times ∂logits/∂T = −logits / T; in double, as a float sum of heads·n·m terms
  // would lose digits (and each product of two floats is exact in double).
  g.D = (g.dout.array() * fwd.output.array()).rowwise().sum().matrix();
  g.dlogits.resize(hn, m);
  double dt = 0;
  // A row that sees one key: its dlogits sum to 0 exactly, so the one entry is 0 (P = 1, O = V_j,
  // D = dP_j); computed, it would be the rounding of two sums of the same products in other orders.
  std::vector<char> one_key(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    int visible = 0;
    for (int j = 0; j < m && visible < 2; ++j) visible += masked(i, j) ? 0 : 1;
    one_key[static_cast<std::size_t>(i)] = visible == 1;
  }
  for (Eigen::Index r = 0; r < hn; ++r) {
    const int i = static_cast<int>(r % n);
    const Scalar d = g.D(r, 0);
    for (int j = 0; j < m; ++j) {
      if (masked(i, j) || one_key[static_cast<std::size_t>(i)]) {
        g.dlogits(r, j) = Scalar(0);
        continue;
      }
      g.dlogits(r, j) = fwd.weights(r, j) * (g.dp(r, j) - d);
      dt += static_cast<double>(g.dlogits(r, j)) * static_cast<double>(fwd.logits(r, j));
    }
  }
  g.dT = -dt / p.temperature + 0.0;  // + 0.0: a sum of 0 (one key) is dT = 0, not -0

  // logits = (last + mask) / T: the last score stage gets dlogits / T (the mask is a constant).
  const Scalar temperature = static_cast<Scalar>(p.temperature);
  Matrix d_last = g.dlogits / temperature;
  // capped = C tanh(x / C): dx = dcapped (1 − tanh²), with tanh = capped / C read from the run, as
  // (1 − t)(1 + t), which keeps its digits where t is near 1.
  if (fwd.capped.size() > 0) {
    const Scalar c = static_cast<Scalar>(p.mods.softcap);
    g.dcapped = d_last;
    const auto t = fwd.capped.array() / c;
    d_last = (g.dcapped.array() * ((Scalar(1) - t) * (Scalar(1) + t))).matrix();
  }
  // biased = scaled + ALiBi + bias: the added terms hold no input, so the gradient passes on.
  if (fwd.biased.size() > 0) g.dbiased = d_last;
  g.dscaled = std::move(d_last);
  // scaled = scores / divisor (the forward's own divisor, √d_k or 1/scale).
  g.dscores = g.dscaled / scale_divisor<Scalar>(p);

  // S = Qr Krᵀ: dQr = dS Kr, dKr = dSᵀ Qr (summed over a group's query heads).
  Matrix dq(hn, p.d_k());
  Matrix dk = Matrix::Zero(static_cast<Eigen::Index>(kv_heads) * m, p.d_k());
  for (int h = 0; h < heads; ++h) {
    dq.middleRows(static_cast<Eigen::Index>(h) * n, n).noalias() =
        head_rows(g.dscores, h) * k.middleRows(p.kv_row(h), m);
    dk.middleRows(p.kv_row(h), m).noalias() += head_rows(g.dscores, h).transpose() * head_rows(q, h);
  }
  // RoPE: Qr = R Q row by row, so dQ = Rᵀ dQr: each row turned back by its position's angles
  // (query i at i + m − n, key j at j), in double as the forward rotates.
  if (rope) {
    g.dq_rot = dq;
    g.dk_rot = dk;
    const double theta = p.mods.rope_theta;
    for (int h = 0; h < heads; ++h)
      dq.middleRows(static_cast<Eigen::Index>(h) * n, n) =
          rope_rotate_back(head_rows(g.dq_rot, h).template cast<double>(), p.causal_offset(), theta)
              .template cast<Scalar>();
    for (int kv = 0; kv < kv_heads; ++kv)
      dk.middleRows(static_cast<Eigen::Index>(kv) * m, m) =
          rope_rotate_back(g.dk_rot.middleRows(static_cast<Eigen::Index>(kv) * m, m).template cast<double>(), 0, theta)
              .template cast<Scalar>();
  }
  g.dq = std::move(dq);
  g.dk = std::move(dk);
  // Finite inputs and a finite dO can still overflow fp32 on the way back (a huge dO or V makes dP
  // and D infinite, their difference NaN): refused like the fused backward, never printed.
  if constexpr (std::is_same_v<Scalar, float>) {
    bool finite = std::isfinite(g.dT);
    for (const Matrix* a : {&g.dout, &g.dv, &g.dp, &g.D, &g.dlogits, &g.dcapped, &g.dbiased, &g.dscaled,
                            &g.dscores, &g.dq_rot, &g.dk_rot, &g.dq, &g.dk})
      finite = finite && Eigen::Map<const Eigen::ArrayXf>(a->data(), a->size()).allFinite();  // storage order
    if (!finite) throw InputError(Msg::OverflowGradients, {});
  }
  g.forward = std::move(fwd);
  g.backward_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  return g;
}

// The forward run of p by `forward` (cpu_staged or reference_fp64), dO from u for its output, and
// the gradients, with the loss when u names one.
template <class Forward>
auto backward_run(const Problem& p, const Upstream& u, Forward forward) {
  validate(p);
  validate_upstream(p, u);
  auto f = forward(p);
  std::optional<double> loss;
  auto dout = upstream_dout(u, f.output, &loss);
  auto g = backward_chain(p, std::move(f), std::move(dout));
  g.loss = loss;
  return g;
}

double gradient_bytes(const ProblemSize& s, double scalar_bytes) {
  const double hn = static_cast<double>(s.heads) * s.n, kvm = static_cast<double>(s.kv_heads) * s.m;
  // dP, dlogits, dscaled, dscores, and dcapped / dbiased with those mods; the stages of the run
  // beside (scores, scaled, logits, weights and the mods' own, the mask) are counted by the caller.
  const double nm = 4.0 + s.score_stages;
  const double rope = s.rope ? 2 : 1;
  return scalar_bytes * (nm * hn * s.m + hn * (2.0 + s.d_v + rope * s.d_k) + kvm * (s.d_v + rope * s.d_k));
}

}  // namespace

GradTrace backward_of(const Problem& p, Trace forward, const MatrixF& dout) {
  return backward_chain<MatrixF>(p, std::move(forward), dout);
}

GradTraceD backward_of(const Problem& p, TraceD forward, const MatrixD& dout) {
  return backward_chain<MatrixD>(p, std::move(forward), dout);
}

GradTrace cpu_backward(const Problem& p, const Upstream& u) { return backward_run(p, u, cpu_staged); }

GradTraceD reference_backward_fp64(const Problem& p, const Upstream& u) { return backward_run(p, u, reference_fp64); }

std::vector<double> reference_backward_fp64_row(const Problem& p, const Upstream& u, int head, int query) {
  const RowReference row = reference_fp64_row(p, head, query);
  const std::vector<double>&o = row.output, &weights = row.weights, &modified = row.modified;
  const int m = p.m(), d_k = p.d_k(), d_v = p.d_v();
  const MatrixD out = Eigen::Map<const MatrixD>(o.data(), 1, d_v);
  const Eigen::RowVectorXd dout = upstream_dout(row_upstream(p, u, head, query), out, nullptr).row(0);
  // The chain back for one row, as backward_chain runs it for all: dP_j = dO·v_j, D = dO·O,
  // dlogits_j = P_j (dP_j − D), / T, the cap's (1 − t)(1 + t), / the divisor, then dQr = Σ dS_j kr_j
  // and dQ = Rᵀ dQr. A key of weight 0 (masked, or underflowed) adds nothing.
  const double D = dout.dot(out.row(0)), temperature = p.temperature, cap = p.mods.softcap;
  const double divisor = scale_divisor<double>(p), theta = p.mods.rope_theta;
  const Eigen::Index kv = p.kv_row(head);
  constexpr int kBlock = 256;
  Eigen::RowVectorXd dq = Eigen::RowVectorXd::Zero(d_k);
  for (int j0 = 0; j0 < m; j0 += kBlock) {
    const int cols = std::min(kBlock, m - j0);
    if (std::all_of(weights.begin() + j0, weights.begin() + j0 + cols, [](double w) { return w == 0; })) continue;
    MatrixD kb = p.k().middleRows(kv + j0, cols).cast<double>();
    if (theta > 0) kb = rope_rotate(kb, j0, theta);
    for (int j = 0; j < cols; ++j) {
      const double w = weights[static_cast<std::size_t>(j0 + j)];
      if (w == 0) continue;
      const double dp = dout.dot(p.v().row(kv + j0 + j).cast<double>());
      double ds = w * (dp - D) / temperature;
      if (cap > 0) {
        const double t = modified[static_cast<std::size_t>(j0 + j)] / cap;
        ds *= (1 - t) * (1 + t);
      }
      dq += (ds / divisor) * kb.row(j);
    }
  }
  if (theta > 0) dq = rope_rotate_back(MatrixD(dq), query + p.causal_offset(), theta).row(0);
  return std::vector<double>(dq.data(), dq.data() + d_k);
}

double backward_bytes(const ProblemSize& s) { return host_working_set_bytes(s, RunOptions{}) + gradient_bytes(s, 4.0); }

double reference_backward_bytes(const ProblemSize& s) { return reference_fp64_bytes(s) + gradient_bytes(s, 8.0); }

}  // namespace attnlab
