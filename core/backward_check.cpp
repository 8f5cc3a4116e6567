// The fp32 backward against the fp64 one, entry by entry within the first-order bounds of
// core/backward_check.h, with the masked zeros and the row sums of dlogits; text and JSON.
#include "core/gcc12_avx512.h"  // first: see there

#include "core/backward_check.h"

#include "core/format.h"
#include "core/modify.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace attnlab {
namespace {

constexpr double kU = 0x1p-24;    // fp32's unit roundoff
constexpr double kU64 = 0x1p-53;  // fp64's
constexpr double kInf = std::numeric_limits<double>::infinity();

// γ_k of a sum of k products in fp32.
double gamma_k(double k) {
  const double ku = k * kU;
  return ku < 1 ? ku / (1 - ku) : kInf;
}

MatrixD abs_of(const MatrixF& a) { return a.cast<double>().cwiseAbs(); }

// |a − b| entry by entry, 0 where both are −inf (masked logits).
MatrixD abs_diff(const MatrixF& a, const MatrixD& b) {
  MatrixD d(b.rows(), b.cols());
  for (Eigen::Index r = 0; r < b.rows(); ++r)
    for (Eigen::Index c = 0; c < b.cols(); ++c) {
      const double x = a(r, c), y = b(r, c);
      d(r, c) = std::isinf(x) && std::isinf(y) && x == y ? 0.0 : std::abs(x - y);
    }
  return d;
}

// The entries of x (fp32) against ref (fp64), each within 2 e (e: its first-order bound) plus
// `floor`, the absolute rounding of results below fp32's normal range that a relative bound
// cannot cover.
GradCheck compare(const std::string& name, const MatrixF& x, const MatrixD& ref, const MatrixD& e, double floor = 0) {
  GradCheck c;
  c.name = name;
  c.elements = static_cast<std::size_t>(ref.size());
  if (x.rows() != ref.rows() || x.cols() != ref.cols() || e.rows() != ref.rows() || e.cols() != ref.cols()) {
    c.failures = c.elements;
    c.pass = false;
    return c;
  }
  for (Eigen::Index r = 0; r < ref.rows(); ++r)
    for (Eigen::Index col = 0; col < ref.cols(); ++col) {
      const double err = std::abs(static_cast<double>(x(r, col)) - ref(r, col));
      const double bound = 2 * e(r, col) + floor;
      const double ratio = std::isnan(err) ? kInf : err == 0 ? 0 : bound > 0 ? err / bound : kInf;
      c.max_abs_ref = std::max(c.max_abs_ref, std::abs(ref(r, col)));
      c.max_bound = std::max(c.max_bound, bound);
      if (!std::isnan(err)) c.max_abs_err = std::max(c.max_abs_err, err);
      if (!(err <= bound)) ++c.failures;  // a NaN fails
      if (c.worst_row < 0 || ratio > c.worst_ratio) {
        c.worst_ratio = ratio;
        c.worst_row = r;
        c.worst_col = col;
      }
    }
  c.pass = c.failures == 0;
  return c;
}

MatrixD one(double x) { return MatrixD::Constant(1, 1, x); }
MatrixF one_f(double x) { return MatrixF::Constant(1, 1, static_cast<float>(x)); }

// A scalar (dT), held in double by both runs (a float copy would lose it), within `bound`.
GradCheck scalar_check(const std::string& name, double got, double want, double bound) {
  GradCheck t = compare(name, one_f(0), one(0), one(0));
  const double err = std::abs(got - want);
  t.max_abs_err = err;
  t.max_bound = bound;
  t.max_abs_ref = std::abs(want);
  t.worst_ratio = err == 0 ? 0 : bound > 0 ? err / bound : kInf;
  t.pass = err <= bound;
  t.failures = t.pass ? 0 : 1;
  t.worst_row = t.worst_col = t.pass ? -1 : 0;
  return t;
}

// |dQ| of a RoPE rotation turned back: each pair (c, c + d/2) mixes the bounds of both.
MatrixD pair_sum(const MatrixD& e) {
  const Eigen::Index half = e.cols() / 2;
  MatrixD s = e;
  s.leftCols(half) += e.rightCols(half);
  s.rightCols(half) = s.leftCols(half);
  return s;
}

// The rows of dlogits against their bound (the header's "Row sums") in a run of unit u.
template <class Matrix>
RowSumCheck row_sums(const Problem& p, const GradTraceT<Matrix>& g, double u) {
  RowSumCheck c;
  const int n = p.n(), m = p.m();
  const MatrixD v = p.v().template cast<double>().cwiseAbs();
  for (int h = 0; h < p.heads; ++h) {
    const Eigen::Index r0 = static_cast<Eigen::Index>(h) * n;
    const MatrixD P = g.forward.weights.middleRows(r0, n).template cast<double>();
    const MatrixD dl = g.dlogits.middleRows(r0, n).template cast<double>();
    const MatrixD dO = g.dout.middleRows(r0, n).template cast<double>().cwiseAbs();
    const Eigen::VectorXd a = (dO.array() * (P * v.middleRows(p.kv_row(h), m)).array()).rowwise().sum();
    for (int i = 0; i < n; ++i) {
      const double sum = dl.row(i).sum();
      const double bound = std::abs(static_cast<double>(g.D(r0 + i, 0))) * std::abs(1 - P.row(i).sum()) +
                           (m + 2.0 * p.d_v() + 2) * 1.01 * u * (a(i) + dl.row(i).cwiseAbs().sum());
      const double ratio = sum == 0 ? 0 : bound > 0 ? std::abs(sum) / bound : kInf;
      if (c.worst_row < 0 || std::abs(sum) > c.worst) {
        c.worst = std::abs(sum);
        c.worst_row = r0 + i;
      }
      c.worst_ratio = std::max(c.worst_ratio, ratio);
      if (!(std::abs(sum) <= bound)) c.pass = false;
    }
  }
  return c;
}

template <class Matrix>
bool zero_at(const Matrix& a, Eigen::Index r, int j) {
  return a.size() == 0 || a(r, j) == 0;
}

std::string fmt(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return format_number("%.3g", v);
}

nlohmann::ordered_json num(double v) {
  if (!std::isfinite(v)) return nullptr;
  return v;
}

}  // namespace

BackwardCheck check_backward(const Problem& p, const Upstream& u, const GradTrace& g, const GradTraceD& ref,
                             bool fused_extras) {
  BackwardCheck c;
  c.forward = verify_trace(p, g.forward, ref.forward);
  const int n = p.n(), m = p.m(), heads = p.heads, kv_heads = p.kv_heads(), d_v = p.d_v();
  const double group = static_cast<double>(heads / kv_heads);
  const Eigen::Index hn = static_cast<Eigen::Index>(heads) * n;
  const Trace& f = g.forward;
  const TraceD& r = ref.forward;
  const bool rope = p.mods.rope_theta > 0;
  const double T = p.temperature;
  const auto masked = [&r](int i, int j) { return std::isinf(r.mask(i, j)); };
  // Subnormal results round by up to half of 2^-149 whatever their size (a gradient divided by a
  // huge T): twice that per operation of the longest chain of sums an entry goes through.
  const double tiny = (group * n + m + p.d_k() + d_v + 8) * 0x1p-149;

  // The forward's values (fp64) and measured errors.
  const MatrixD& P = r.weights;
  const MatrixD dP_fwd = abs_diff(f.weights, P);
  const MatrixD aO = r.output.cwiseAbs();
  const MatrixD dO_fwd = abs_diff(f.output, r.output);
  const MatrixD dz = abs_diff(f.logits, r.logits);
  const MatrixD aV = p.v().cast<double>().cwiseAbs();
  const MatrixD aQ = rope ? MatrixD(r.q_rot.cwiseAbs()) : abs_of(p.q());
  const MatrixD aK = rope ? MatrixD(r.k_rot.cwiseAbs()) : abs_of(p.k());
  const MatrixD dQr = rope ? abs_diff(f.q_rot, r.q_rot) : MatrixD::Zero(aQ.rows(), aQ.cols());
  const MatrixD dKr = rope ? abs_diff(f.k_rot, r.k_rot) : MatrixD::Zero(aK.rows(), aK.cols());
  const MatrixD adO = ref.dout.cwiseAbs();
  const auto rows = [n](const MatrixD& a, int h) { return a.middleRows(static_cast<Eigen::Index>(h) * n, n); };

  // dO.
  const MatrixD e_dO = u.kind == UpstreamKind::Mse ? MatrixD(dO_fwd + kU * adO) : MatrixD::Zero(hn, d_v);

  // dV = Σ Pᵀ dO and dP = dO Vᵀ.
  MatrixD e_dV = MatrixD::Zero(static_cast<Eigen::Index>(kv_heads) * m, d_v), s_dV = e_dV;
  MatrixD e_dP(hn, m);
  for (int h = 0; h < heads; ++h) {
    const Eigen::Index kv = p.kv_row(h);
    e_dV.middleRows(kv, m).noalias() += rows(dP_fwd, h).transpose() * rows(adO, h);
    e_dV.middleRows(kv, m).noalias() += rows(P, h).transpose() * rows(e_dO, h);
    s_dV.middleRows(kv, m).noalias() += rows(P, h).transpose() * rows(adO, h);
    e_dP.middleRows(static_cast<Eigen::Index>(h) * n, n).noalias() =
        (rows(e_dO, h) + gamma_k(d_v) * rows(adO, h)) * aV.middleRows(kv, m).transpose();
  }
  e_dV += gamma_k(group * n) * s_dV;
  // The fused backward's own weights (check_fused_backward): relative error 2 max|Δlogit| + κ u,
  // through dV = Σ Pᵀ dO and, by O = P V, through D = rowsum(dO ∘ O).
  if (fused_extras) {
    constexpr double kRecomputeUlps = 4;
    double dz_max = 0;
    for (Eigen::Index i = 0; i < dz.size(); ++i)
      if (std::isfinite(dz.data()[i])) dz_max = std::max(dz_max, dz.data()[i]);
    const double p_rel = 2 * dz_max + kRecomputeUlps * kU;
    c.fused_dv_extra = 2 * p_rel * (s_dV.size() > 0 ? s_dV.maxCoeff() : 0.0);
    for (int h = 0; h < heads; ++h) {
      const MatrixD pv = rows(P, h) * aV.middleRows(p.kv_row(h), m);
      const double d_terms = (rows(adO, h).array() * pv.array()).rowwise().sum().maxCoeff();
      c.fused_d_extra = std::max(c.fused_d_extra, 2 * p_rel * d_terms);
    }
    c.has_fused_extras = true;
  }

  // D = rowsum(dO ∘ O), dlogits = P ∘ (dP − D), dT.
  const MatrixD e_D = ((e_dO.array() * aO.array() + adO.array() * dO_fwd.array()).rowwise().sum() +
                       gamma_k(d_v) * (adO.array() * aO.array()).rowwise().sum())
                          .matrix();
  MatrixD e_dl = MatrixD::Zero(hn, m);
  double e_dT = 0, abs_dT = 0, visible = 0;
  for (Eigen::Index row = 0; row < hn; ++row) {
    const int i = static_cast<int>(row % n);
    for (int j = 0; j < m; ++j) {
      if (masked(i, j)) continue;
      const double t = std::abs(ref.dp(row, j) - ref.D(row, 0));
      e_dl(row, j) = dP_fwd(row, j) * t + P(row, j) * (e_dP(row, j) + e_D(row, 0) + kU * t) +
                     kU * std::abs(ref.dlogits(row, j));
      e_dT += e_dl(row, j) * std::abs(r.logits(row, j)) + std::abs(ref.dlogits(row, j)) * dz(row, j);
      abs_dT += std::abs(ref.dlogits(row, j) * r.logits(row, j));
      ++visible;
    }
  }
  e_dT = e_dT / T + visible * kU64 * abs_dT / T;

  // Back through / T, the soft-cap, the added terms and the scale.
  MatrixD e_last = e_dl / T + 2 * kU * (ref.dlogits / T).cwiseAbs();
  MatrixD e_dcapped;
  if (r.capped.size() > 0) {
    e_dcapped = e_last;
    const double C = p.mods.softcap;
    const MatrixD tau = r.capped / C;
    const MatrixD e_tau = abs_diff(f.capped, r.capped) / C + 2 * kU * tau.cwiseAbs();
    const MatrixD fac = ((1 - tau.array()) * (1 + tau.array())).matrix();
    const MatrixD e_fac = 2 * e_tau + 3 * kU * fac;
    e_last = (e_dcapped.array() * fac.array() + ref.dcapped.cwiseAbs().array() * e_fac.array() +
              kU * ref.dscaled.cwiseAbs().array())
                 .matrix();
  }
  const MatrixD& e_dscaled = e_last;
  const MatrixD e_dS = e_dscaled * p.scale_value() + 2 * kU * ref.dscores.cwiseAbs();

  // dQr = dS Kr, dKr = Σ dSᵀ Qr, and RoPE turned back.
  const MatrixD adS = ref.dscores.cwiseAbs();
  MatrixD e_dQr(hn, p.d_k());
  MatrixD e_dKr = MatrixD::Zero(aK.rows(), p.d_k()), s_dK = e_dKr;
  for (int h = 0; h < heads; ++h) {
    const Eigen::Index kv = p.kv_row(h);
    e_dQr.middleRows(static_cast<Eigen::Index>(h) * n, n).noalias() =
        rows(e_dS, h) * aK.middleRows(kv, m) + rows(adS, h) * (dKr.middleRows(kv, m) + gamma_k(m) * aK.middleRows(kv, m));
    e_dKr.middleRows(kv, m).noalias() += rows(e_dS, h).transpose() * rows(aQ, h) + rows(adS, h).transpose() * rows(dQr, h);
    s_dK.middleRows(kv, m).noalias() += rows(adS, h).transpose() * rows(aQ, h);
  }
  e_dKr += gamma_k(group * n) * s_dK;
  const MatrixD e_dQ = rope ? MatrixD(pair_sum(e_dQr) + kU * ref.dq.cwiseAbs()) : e_dQr;
  const MatrixD e_dK = rope ? MatrixD(pair_sum(e_dKr) + kU * ref.dk.cwiseAbs()) : e_dKr;

  c.grads.push_back(compare("dO", g.dout, ref.dout, e_dO, tiny));
  c.grads.push_back(compare("dV", g.dv, ref.dv, e_dV, tiny));
  c.grads.push_back(compare("dP", g.dp, ref.dp, e_dP, tiny));
  c.grads.push_back(compare("D", g.D, ref.D, e_D, tiny));
  c.grads.push_back(compare("dlogits", g.dlogits, ref.dlogits, e_dl, tiny));
  if (ref.dcapped.size() > 0) c.grads.push_back(compare("dcapped", g.dcapped, ref.dcapped, e_dcapped, tiny));
  if (ref.dbiased.size() > 0) c.grads.push_back(compare("dbiased", g.dbiased, ref.dbiased, e_dscaled, tiny));
  c.grads.push_back(compare("dscaled", g.dscaled, ref.dscaled, e_dscaled, tiny));
  c.grads.push_back(compare("dscores", g.dscores, ref.dscores, e_dS, tiny));
  if (rope) {
    c.grads.push_back(compare("dQ_rot", g.dq_rot, ref.dq_rot, e_dQr, tiny));
    c.grads.push_back(compare("dK_rot", g.dk_rot, ref.dk_rot, e_dKr, tiny));
  }
  c.grads.push_back(compare("dQ", g.dq, ref.dq, e_dQ, tiny));
  c.grads.push_back(compare("dK", g.dk, ref.dk, e_dK, tiny));
  // dT: a scalar, held in double by both runs; compared through a float copy would lose it.
  c.grads.push_back(scalar_check("dT", g.dT, ref.dT, 2 * e_dT));

  // Masked entries: exactly 0 from dlogits on, in both runs.
  for (Eigen::Index row = 0; row < hn; ++row) {
    const int i = static_cast<int>(row % n);
    for (int j = 0; j < m; ++j) {
      if (!masked(i, j)) continue;
      ++c.masked;
      const bool zero = zero_at(g.dlogits, row, j) && zero_at(g.dcapped, row, j) && zero_at(g.dbiased, row, j) &&
                        zero_at(g.dscaled, row, j) && zero_at(g.dscores, row, j) && zero_at(ref.dlogits, row, j) &&
                        zero_at(ref.dcapped, row, j) && zero_at(ref.dbiased, row, j) &&
                        zero_at(ref.dscaled, row, j) && zero_at(ref.dscores, row, j);
      if (!zero) ++c.masked_nonzero;
    }
  }
  c.rows32 = row_sums(p, g, kU);
  c.rows64 = row_sums(p, ref, kU64);

  c.pass = c.forward.pass && c.masked_nonzero == 0 && c.rows32.pass && c.rows64.pass;
  for (const GradCheck& gc : c.grads) c.pass = c.pass && gc.pass;
  return c;
}

BackwardCheck check_fused_backward(const GradTrace& fused, const GradTraceD& ref, const BackwardCheck& staged) {
  if (!staged.has_fused_extras)
    throw std::logic_error("check_fused_backward: the staged check was made without its fused extras");
  BackwardCheck c = staged;
  c.grads.clear();
  c.fused = true;
  const auto bound_of = [&staged](const std::string& name) {
    for (const GradCheck& g : staged.grads)
      if (g.name == name) return g.max_bound;
    return 0.0;
  };
  const auto against = [&](const std::string& name, const MatrixF& x, const MatrixD& r, double extra = 0) {
    c.grads.push_back(compare(name, x, r, MatrixD::Constant(r.rows(), r.cols(), (bound_of(name) + extra) / 2)));
  };
  against("dV", fused.dv, ref.dv, staged.fused_dv_extra);
  against("D", fused.D, ref.D, staged.fused_d_extra);
  against("dQ", fused.dq, ref.dq);
  against("dK", fused.dk, ref.dk);
  c.grads.push_back(scalar_check("dT", fused.dT, ref.dT, bound_of("dT")));
  c.pass = staged.pass;
  for (const GradCheck& g : c.grads) c.pass = c.pass && g.pass;
  return c;
}

std::string render_backward_check_text(const BackwardCheck& c, Lang lang) {
  const bool zh = lang == Lang::Zh;
  std::ostringstream o;
  o << (zh ? "与 fp64 对照：同一反向计算以双精度在 fp64 前向结果上运行\n"
           : "Check against fp64: the same backward in double, on the fp64 forward run\n");
  const StageCheck* worst = nullptr;
  for (const StageCheck& s : c.forward.stages)
    if (!worst || s.max_abs_err > worst->max_abs_err) worst = &s;
  o << (zh ? "前向（verify 的容差）：" : "forward (verify's tolerances): ")
    << (c.forward.pass ? (zh ? "通过" : "pass") : (zh ? "未通过" : "FAIL"));
  // A failing forward names its first failing stage; a passing one its largest error.
  for (const StageCheck& s : c.forward.stages)
    if (!s.pass) {
      worst = &s;
      break;
    }
  if (worst)
    o << (c.forward.pass ? (zh ? "，最大误差在 " : ", largest error in ") : (zh ? "，未通过的阶段 " : ", failed in "))
      << worst->stage << " (" << fmt(worst->max_abs_err) << ")";
  o << "\n";
  o << (zh ? "每个元素的界：2 ×（前向实测误差经每个公式传播的一阶量 + 每步 fp32 舍入；k 项之和取 γ_k = k·u/(1 − k·u)（u = 2⁻²⁴）乘各项绝对值之和）；见 core/backward_check.h\n"
           : "bound of an entry: 2 × (the forward's measured errors carried through each formula to first order + the "
             "fp32 rounding of each step; a sum of k terms γ_k = k·u/(1 − k·u), u = 2⁻²⁴, times the sum of |terms|); core/backward_check.h\n");
  if (c.fused)
    o << (zh ? "融合反向：每个梯度须在逐阶段 fp32 反向为该梯度推出的最大元素界之内（同样的公式、同样的输入，求和次序不同，P 由 m 与 l 重算；dV 与 D 的界另加融合运行自身的权重误差，2 max|Δlogit| + 4 ulp）；被屏蔽位置与行和两行是逐阶段运行的\n"
             : "fused backward: each gradient within the largest entry bound derived for the staged fp32 backward's "
               "(the same formulas on the same inputs, another order of summation, P recomputed from m and l; dV "
               "and D also allow the fused run's own weight errors, 2 max|Δlogit| + 4 ulp); the masked and row-sum "
               "lines are the staged run's\n");
  o << "\n";
  const auto pad = [](const std::string& s, int width, bool left) {
    const int w = display_width(s);
    const std::string fill(w < width ? width - w : 0, ' ');
    return left ? s + fill : fill + s;
  };
  o << pad(zh ? "梯度" : "gradient", 9, true) << " " << pad(zh ? "最大绝对误差" : "max |Δ|", 12, false) << " "
    << pad(zh ? "最大的界" : "max bound", 11, false) << " " << pad(zh ? "量级 max|ref|" : "max |ref|", 13, false)
    << " " << pad(zh ? "最差 |Δ|/界" : "worst |Δ|/bound", 16, false) << " " << pad(zh ? "失败数" : "failures", 9, false)
    << "  " << (zh ? "结果" : "result") << "\n";
  for (const GradCheck& g : c.grads) {
    o << pad(g.name, 9, true) << " " << pad(fmt(g.max_abs_err), 12, false) << " " << pad(fmt(g.max_bound), 11, false)
      << " " << pad(fmt(g.max_abs_ref), 13, false) << " " << pad(fmt(g.worst_ratio), 16, false) << " "
      << pad(std::to_string(g.failures), 9, false) << "  " << (g.pass ? (zh ? "通过" : "pass") : (zh ? "未通过" : "FAIL"));
    if (!g.pass && g.worst_row >= 0)
      o << (zh ? "（最差处：行 " + std::to_string(g.worst_row) + "、列 " + std::to_string(g.worst_col) + "）"
               : "  (worst at row " + std::to_string(g.worst_row) + ", column " + std::to_string(g.worst_col) + ")");
    if (!g.informative()) o << (zh ? "（界不小于量级）" : "  (bound >= scale)");
    o << "\n";
  }
  o << "\n";
  if (zh)
    o << "被屏蔽的（查询，键）位置：" << c.masked << " 个；从 dlogits 起的梯度在其中 "
      << (c.masked - c.masked_nonzero) << " 个恰为 0（fp32 与 fp64）：" << (c.masked_nonzero == 0 ? "通过" : "未通过")
      << "\n";
  else
    o << "masked (query, key) pairs: " << c.masked << "; every gradient from dlogits on exactly 0 at "
      << (c.masked - c.masked_nonzero) << " of them (fp32 and fp64): " << (c.masked_nonzero == 0 ? "pass" : "FAIL")
      << "\n";
  const auto rows = [&](const RowSumCheck& r, const char* name) {
    o << "  " << name << (zh ? "：最差 |Σ_j dlogits| = " : ": worst |Σ_j dlogits| = ") << fmt(r.worst)
      << (zh ? "（行 " + std::to_string(r.worst_row) + "），最差 |Σ|/界 = "
             : " (row " + std::to_string(r.worst_row) + "), worst |Σ|/bound = ")
      << fmt(r.worst_ratio) << (zh ? "：" : ": ") << (r.pass ? (zh ? "通过" : "pass") : (zh ? "未通过" : "FAIL")) << "\n";
  };
  o << (zh ? "dlogits 的每行和为 0（Σ_j P_ij (dP_ij − D_i) = D_i − D_i）：\n"
           : "rows of dlogits sum to 0 (Σ_j P_ij (dP_ij − D_i) = D_i − D_i):\n");
  rows(c.rows32, "fp32");
  rows(c.rows64, "fp64");
  std::string weak;
  for (const GradCheck& g : c.grads)
    if (!g.informative()) weak += (weak.empty() ? "" : (zh ? "、" : ", ")) + g.name;
  if (!weak.empty())
    o << (zh ? "注意：" + weak + " 的界不小于梯度本身的量级（前向的 logits 在此温度下误差过大）：全为 0 或错了一个量级的梯度也会通过，这些梯度的“通过”不说明它们正确\n"
             : "warning: the bound of " + weak + " reaches the gradient's own scale (the forward's logits err that much "
               "at this temperature): a gradient of zeros, or one wrong by its own size, would pass; their pass does "
               "not say they are right\n");
  if (zh)
    o << (c.pass ? "PASS（全部通过）" : "FAIL（未通过）") << "\n";
  else
    o << (c.pass ? "PASS" : "FAIL") << "\n";
  return o.str();
}

nlohmann::ordered_json backward_check_json(const BackwardCheck& c) {
  using Json = nlohmann::ordered_json;
  Json j;
  j["pass"] = c.pass;
  j["fused"] = c.fused;
  j["forward_pass"] = c.forward.pass;
  Json grads = Json::array();
  for (const GradCheck& g : c.grads)
    grads.push_back({{"name", g.name},
                     {"elements", g.elements},
                     {"failures", g.failures},
                     {"max_abs_err", num(g.max_abs_err)},
                     {"max_bound", num(g.max_bound)},
                     {"max_abs_ref", num(g.max_abs_ref)},
                     {"worst_ratio", num(g.worst_ratio)},
                     {"worst_row", g.worst_row},
                     {"worst_col", g.worst_col},
                     {"informative", g.informative()},
                     {"pass", g.pass}});
  j["gradients"] = std::move(grads);
  j["masked"] = c.masked;
  j["masked_nonzero"] = c.masked_nonzero;
  const auto rows = [](const RowSumCheck& r) {
    return Json{{"worst", num(r.worst)}, {"worst_ratio", num(r.worst_ratio)}, {"worst_row", r.worst_row}, {"pass", r.pass}};
  };
  j["row_sums"] = {{"fp32", rows(c.rows32)}, {"fp64", rows(c.rows64)}};
  return j;
}

}  // namespace attnlab
