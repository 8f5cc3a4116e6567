// The fused backward on CUDA (kernels/backward.h through cuda::fused_backward) against the fp64
// staged backward (reference_backward_fp64) on the same inputs and dO:
//   - fp32: no mask, causal, window, ALiBi, soft-cap, RoPE, a bias, documents, a custom mask,
//     grouped heads (with RoPE and causal), decode shapes (n < m, grouped), head dims 3 to 256,
//     T in {1e-3, 0.85, 50}
//   - bf16 (d 64, 128): against fp64 on the bf16-rounded Q, K, V and dO (what the kernels read),
//     with each kernel (ATTNLAB_BACKWARD_CONFIG 0, CUDA cores; 1, tensor cores; 2, tensor cores
//     at two blocks per SM, d 64)
//   - keys that no query sees get exactly zero dK and dV, and the kernel computes exactly the
//     tiles the block mask leaves (counted on the device)
//   - a small run of each precision for compute-sanitizer (CudaBackwardSanitize.*, which
//     scripts/gpu-check runs under memcheck and racecheck), and the benchmark shape (8 heads x
//     2048, d 64, CudaBackwardBench.*, disabled: gpu-check runs it by name)
// Every test SKIPs ("no CUDA device: <reason>") without a device.
//
// The bound of each entry (first order, as core/backward_check.h's, in double from the fp64 run's
// values; u = 2⁻²⁴, γ_k = k u / (1 − k u), the bound of a sum of k products of any order):
//   Δy   = (γ_{d_k} + 4u) s max(|Q||K|ᵀ) + 4u max|ALiBi + bias|: a modified scaled score's error
//          (the soft-cap's slope is at most 1)
//   ε_P  = 2 Δy / T + 6u (2 L + ln m) + γ_m + 2u: the relative error of a recomputed P =
//          exp(logit − lse), L the largest |logit| (the exponent's own rounding, lse's sum);
//   E_P  = ε_P P + 2⁻¹⁰⁰: a P that small may come out 0 or subnormal in fp32 (near the end of
//          exp's range; at T = 1e-3 most of a row's P are there) where fp64 keeps it; its terms
//          are 2⁻⁷⁶ below the rounding of any gradient entry they are summed into
//   ΔO   = |O − O_fp64|, measured (as core/backward_check.h takes the forward's errors): the
//          fused forward's output, verify's business, enters the backward only through D
//   E_D  = |dO| ΔO summed over the row + γ_{d_v} rowsum(|dO| ∘ |O|)
//   E_dS = E_P |dP − D| + P (γ_{d_v} |dO||V|ᵀ + E_D) + 2u |dS|
//   E_g  = s / T (E_dS + |dS| (2 Δy / C + 3u)): dS times g (the soft-cap's 1 − t², t = y / C,
//          and s / T); without a soft-cap the Δy / C term is 0
//   E_dV = Σ_h (E_Pᵀ + γ_{group n} Pᵀ)|dO|          E_dK = Σ_h E_gᵀ|Q| + γ_{group n + 1} Σ_h |dS g|ᵀ|Q|
//   E_dQ = E_g |K| + γ_{m + 1} |dS g| |K|
//   E_dT = (Σ E_dS |z| + |dS| ε_P) / T + γ_64 Σ|dS z| / T + u |dT|, z = logit − lse (natural
//          units): the kernels sum dS ∘ z (core's −Σ dS ∘ logits / T is the same, as every row of
//          dS sums to 0), whose error ε_P T in y is P's exponent's
//   RoPE: the gradients are turned back in double, pair c with c + d/2: E(c) + E(c + d/2)
// The tensor-core kernel (configuration 1) rounds P and dS g to bf16 before its products read them
// (relative error u_b = 2⁻⁸ each): E_P gains u_b P in E_dV and E_g gains u_b |dS g| in E_dK and
// E_dQ; and as the tensor cores' fp32 accumulation need not round to nearest, every γ of a sum
// (and Δy's) is taken twice (the bound of directed rounding).
// An entry passes when |gpu − fp64| <= 2 E (the factor 2 covers the products of two errors, as in
// core/backward_check.h). The γ terms are worst cases: the bound cannot fail from rounding, while
// a wrong term moves entries by their own size.
#include "core/backend.h"
#include "core/backward.h"
#include "core/modify.h"
#include "cpu/backward.h"
#include "cpu/bf16.h"
#include "tests/test_util.h"

#include "engine/registry.h"
#ifdef ATTNLAB_HAVE_CUDA
#include "kernels/backward.h"
#include "kernels/cuda_backend.h"
#endif

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

namespace attnlab {
namespace {

struct BwdCase {
  std::string name;
  int n, m, heads, kv_heads, d_k, d_v;
  double temperature;
  std::function<void(Problem&)> apply;
};

// gtest names a case by its name in test output (not by its bytes).
void PrintTo(const BwdCase& c, std::ostream* os) { *os << c.name << " T " << c.temperature; }

#ifdef ATTNLAB_HAVE_CUDA
Problem make_problem(const BwdCase& c, std::uint64_t seed) {
  Problem p = random_problem(c.n, c.m, c.d_k, c.d_v, seed, c.heads, c.kv_heads);
  p.temperature = c.temperature;
  if (c.apply) c.apply(p);
  validate(p);
  return p;
}
#endif

std::vector<BwdCase> fp32_cases() {
  std::vector<BwdCase> cases;
  for (double t : {1e-3, 0.85, 50.0}) {
    cases.push_back({"none", 150, 150, 2, 2, 64, 64, t, nullptr});
    cases.push_back({"causal", 150, 150, 2, 2, 64, 64, t, [](Problem& p) { p.mask = MaskKind::Causal; }});
  }
  const auto causal_window = [](Problem& p) {
    p.mask = MaskKind::Causal;
    p.mods.window = 40;
  };
  cases.push_back({"window_causal", 300, 300, 2, 2, 64, 64, 0.85, causal_window});
  cases.push_back({"alibi_causal", 200, 200, 4, 4, 64, 64, 0.85, [](Problem& p) {
                     p.mods.alibi = true;
                     p.mask = MaskKind::Causal;
                   }});
  cases.push_back({"softcap", 200, 200, 2, 2, 64, 64, 0.5, [](Problem& p) { p.mods.softcap = 1.5; }});
  cases.push_back({"softcap_small_t", 130, 130, 2, 2, 64, 64, 1e-3, [](Problem& p) { p.mods.softcap = 20; }});
  cases.push_back({"rope", 200, 200, 2, 2, 64, 64, 0.85, [](Problem& p) { p.mods.rope_theta = 10000; }});
  cases.push_back({"rope_grouped_causal", 150, 150, 4, 2, 64, 64, 0.85, [](Problem& p) {
                     p.mods.rope_theta = 500;
                     p.mask = MaskKind::Causal;
                   }});
  cases.push_back({"bias_per_head", 120, 120, 2, 2, 32, 32, 0.85, [](Problem& p) {
                     MatrixF b(static_cast<Eigen::Index>(p.heads) * p.n(), p.m());
                     for (Eigen::Index i = 0; i < b.size(); ++i) b.data()[i] = static_cast<float>((i * 37 % 101) - 50) / 25.f;
                     p.edit().bias = b;
                   }});
  cases.push_back({"documents_prefix", 200, 200, 2, 2, 64, 64, 0.85, [](Problem& p) {
                     std::vector<int> ids(200);
                     for (int j = 0; j < 200; ++j) ids[j] = j < 70 ? 0 : j < 150 ? 1 : 2;
                     p.edit().documents = ids;
                     p.mods.prefix = 20;
                     p.mask = MaskKind::Causal;
                   }});
  cases.push_back({"custom", 100, 100, 2, 2, 64, 64, 0.85, [](Problem& p) {
                     p.edit().custom_mask = test::pattern_mask(p.n());
                     p.mask = MaskKind::Custom;
                   }});
  cases.push_back({"grouped", 130, 130, 8, 2, 64, 64, 0.85, nullptr});
  cases.push_back({"decode_grouped_causal", 7, 260, 8, 2, 64, 64, 0.85, [](Problem& p) { p.mask = MaskKind::Causal; }});
  cases.push_back({"decode_window_alibi", 33, 300, 4, 1, 128, 128, 0.85, [](Problem& p) {
                     p.mask = MaskKind::Causal;
                     p.mods.window = 64;
                     p.mods.alibi = true;
                   }});
  cases.push_back({"d3_dv2", 70, 70, 2, 2, 3, 2, 0.85, nullptr});
  cases.push_back({"d128_causal", 140, 140, 2, 2, 128, 128, 0.85, [](Problem& p) { p.mask = MaskKind::Causal; }});
  cases.push_back({"d256_dv64", 90, 90, 2, 2, 256, 64, 0.85, nullptr});
  cases.push_back({"d32_t50", 150, 150, 3, 3, 32, 32, 50, [](Problem& p) { p.mask = MaskKind::Causal; }});
  return cases;
}

std::vector<BwdCase> bf16_cases() {
  return {
      {"none_d64", 150, 150, 2, 2, 64, 64, 0.85, nullptr},
      {"causal_d128", 140, 140, 2, 2, 128, 128, 0.85, [](Problem& p) { p.mask = MaskKind::Causal; }},
      {"window_alibi_softcap", 200, 200, 2, 2, 64, 64, 0.85, [](Problem& p) {
         p.mask = MaskKind::Causal;
         p.mods.window = 50;
         p.mods.alibi = true;
         p.mods.softcap = 5;
       }},
      {"grouped_decode", 9, 200, 8, 2, 64, 64, 0.85, [](Problem& p) { p.mask = MaskKind::Causal; }},
      {"small_t", 100, 100, 2, 2, 64, 64, 1e-3, nullptr},
      {"large_t", 100, 100, 2, 2, 64, 64, 50, nullptr},
  };
}

#ifdef ATTNLAB_HAVE_CUDA
// p with Q, K and V rounded to bf16, as the kernels read them.
Problem rounded_to_bf16(Problem p) {
  ProblemInputs& in = p.edit();
  for (MatrixF* x : {&in.q, &in.k, &in.v}) *x = bf16_round(*x);
  return p;
}

// dO as a given matrix (what the CUDA backward takes), for the fp64 reference.
Upstream given_dout(const MatrixF& dout) {
  Upstream u;
  u.kind = UpstreamKind::File;
  u.file = "(the test's dO)";
  u.data = dout;
  return u;
}

// How a kernel's arithmetic enters the bounds: operand_u, the relative rounding of P and dS g
// before the products (0: fp32 operands); gamma_scale, the factor on every γ (2 where the
// accumulation may round in one direction).
struct Arith {
  double operand_u = 0;
  double gamma_scale = 1;
};
constexpr Arith kCudaCores{};
const Arith kTensorCores{std::ldexp(1.0, -8), 2};

double gamma_k(double k) {
  const double u = std::ldexp(1.0, -24);
  return k * u / (1 - k * u);
}

// The largest finite |x| of a matrix (masked logits are -inf), 0 for none.
double max_finite(const MatrixD& x) {
  double mx = 0;
  for (Eigen::Index i = 0; i < x.size(); ++i)
    if (std::isfinite(x.data()[i])) mx = std::max(mx, std::abs(x.data()[i]));
  return mx;
}

// Each entry's bound (2 E, the file header's formulas) of the gradients the fused backward gives.
struct Bounds {
  MatrixD dq, dk, dv, D;
  double dT = 0;
};

// With RoPE a gradient turned back mixes column c with c + d/2: E(c) + E(c + d/2) for both.
MatrixD paired(const MatrixD& e) {
  const Eigen::Index half = e.cols() / 2;
  MatrixD out = e;
  out.leftCols(half) += e.middleCols(half, half);
  out.middleCols(half, half) += e.leftCols(half);
  return out;
}

// `out`: the forward output the backward was given (its error against r's enters through D).
Bounds bounds(const Problem& p, const GradTraceD& r, const MatrixF& out, const Arith& arith) {
  const double u = std::ldexp(1.0, -24);
  const auto gamma_k = [&](double k) { return arith.gamma_scale * ::attnlab::gamma_k(k); };
  const int n = p.n(), m = p.m(), heads = p.heads, group = p.heads / p.kv_heads();
  const int d_k = p.d_k(), d_v = p.d_v();
  const double s = p.scale_value(), T = p.temperature;
  const bool rope = p.mods.rope_theta > 0;
  const MatrixD q = rope ? r.forward.q_rot : p.q().cast<double>();
  const MatrixD k = rope ? r.forward.k_rot : p.k().cast<double>();
  const MatrixD v = p.v().cast<double>();
  const auto rows = [](const MatrixD& x, Eigen::Index r0, Eigen::Index count) { return x.middleRows(r0, count); };

  // Δy and ε_P.
  double qk_max = 0;
  for (int h = 0; h < heads; ++h)
    qk_max = std::max(qk_max, (rows(q, static_cast<Eigen::Index>(h) * n, n).cwiseAbs() *
                               rows(k, p.kv_row(h), m).cwiseAbs().transpose()).maxCoeff());
  const double added = r.forward.biased.size() > 0 ? max_finite(r.forward.biased - r.forward.scaled) : 0.0;
  const double dy = (gamma_k(d_k) + 4 * u) * s * qk_max + 4 * u * added;
  const double eps_p = 2 * dy / T + 6 * u * (2 * max_finite(r.forward.logits) + std::log(m)) + gamma_k(m) + 2 * u;
  const double tiny = std::ldexp(1.0, -100);
  const double cap_term = p.mods.softcap > 0 ? 2 * dy / p.mods.softcap + 3 * u : 3 * u;

  Bounds b;
  b.dq = MatrixD::Zero(static_cast<Eigen::Index>(heads) * n, d_k);
  b.dk = MatrixD::Zero(static_cast<Eigen::Index>(p.kv_heads()) * m, d_k);
  b.dv = MatrixD::Zero(static_cast<Eigen::Index>(p.kv_heads()) * m, d_v);
  b.D = MatrixD::Zero(static_cast<Eigen::Index>(heads) * n, 1);
  MatrixD dk_terms = b.dk, dv_terms = b.dv;
  double dT_err = 0, dT_abs = 0;
  for (int h = 0; h < heads; ++h) {
    const Eigen::Index r0 = static_cast<Eigen::Index>(h) * n, k0 = p.kv_row(h);
    const MatrixD P = rows(r.forward.weights, r0, n);
    const MatrixD dO = rows(r.dout, r0, n).cwiseAbs();
    const MatrixD O = rows(r.forward.output, r0, n).cwiseAbs();
    const MatrixD dP = rows(r.dp, r0, n);
    const MatrixD dS = rows(r.dlogits, r0, n);
    const MatrixD D = rows(r.D, r0, n);
    const MatrixD Vg = rows(v, k0, m).cwiseAbs(), Kg = rows(k, k0, m).cwiseAbs(), Qh = rows(q, r0, n).cwiseAbs();
    const MatrixD dO_out =
        dO.cwiseProduct((rows(out.cast<double>(), r0, n) - rows(r.forward.output, r0, n)).cwiseAbs()).rowwise().sum();
    const MatrixD e_D = dO_out + gamma_k(d_v) * dO.cwiseProduct(O).rowwise().sum();
    MatrixD e_dS(n, m), dS_g(n, m), e_g(n, m);
    const MatrixD dOV = dO * Vg.transpose();
    // Each row's log-sum-exp of the logits (masked ones -inf: exp gives 0).
    Eigen::VectorXd lse(n);
    for (int i = 0; i < n; ++i) {
      const auto row = r.forward.logits.row(r0 + i);
      const double mx = row.maxCoeff();
      lse(i) = mx + std::log((row.array() - mx).exp().sum());
    }
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < m; ++j) {
        const double pij = P(i, j);
        const double e = (eps_p * pij + tiny) * std::abs(dP(i, j) - D(i, 0)) + pij * (gamma_k(d_v) * dOV(i, j) + e_D(i, 0)) +
                         2 * u * std::abs(dS(i, j));
        e_dS(i, j) = e;
        // |dS g| <= |dS| s / T (the soft-cap's factor is at most 1).
        dS_g(i, j) = std::abs(dS(i, j)) * s / T;
        e_g(i, j) = s / T * (e + std::abs(dS(i, j)) * cap_term) + arith.operand_u * dS_g(i, j);
        const double logit = r.forward.logits(r0 + i, j);
        if (std::isfinite(logit)) {
          const double z = std::abs(logit - lse(i));
          dT_err += e * z + std::abs(dS(i, j)) * eps_p;
          dT_abs += std::abs(dS(i, j)) * z;
        }
      }
    b.D.middleRows(r0, n) = e_D;
    b.dq.middleRows(r0, n) = e_g * Kg + gamma_k(m + 1) * dS_g * Kg;
    dk_terms.middleRows(k0, m) += e_g.transpose() * Qh;
    b.dk.middleRows(k0, m) += gamma_k(static_cast<double>(group) * n + 1) * dS_g.transpose() * Qh;
    const MatrixD e_P = ((eps_p + arith.operand_u) * P).array() + tiny;
    b.dv.middleRows(k0, m) += e_P.transpose() * dO;
    dv_terms.middleRows(k0, m) += P.transpose() * dO;
  }
  b.dk += dk_terms;
  b.dv += gamma_k(static_cast<double>(group) * n) * dv_terms;
  b.dT = (dT_err + gamma_k(64) * dT_abs) / T + 2 * u * std::abs(r.dT);
  if (rope) {
    b.dq = paired(b.dq);
    b.dk = paired(b.dk);
  }
  b.dq *= 2;
  b.dk *= 2;
  b.dv *= 2;
  b.D *= 2;
  b.dT *= 2;
  return b;
}

std::string fmt_g(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

// Entries of `got` outside `bound` around `ref` (a NaN fails), with the worst ratio in `what`.
int count_outside(const MatrixF& got, const MatrixD& ref, const MatrixD& bound, const std::string& name,
                  std::string* what) {
  if (got.rows() != ref.rows() || got.cols() != ref.cols()) {
    *what += name + ": shape " + std::to_string(got.rows()) + "x" + std::to_string(got.cols()) + " against " +
             std::to_string(ref.rows()) + "x" + std::to_string(ref.cols()) + "; ";
    return 1;
  }
  int bad = 0;
  double worst = 0;
  Eigen::Index wi = 0, wj = 0;
  for (Eigen::Index i = 0; i < ref.rows(); ++i)
    for (Eigen::Index j = 0; j < ref.cols(); ++j) {
      const double err = std::abs(static_cast<double>(got(i, j)) - ref(i, j));
      const bool ok = err <= bound(i, j);  // false for NaN
      if (!ok) ++bad;
      const double ratio = bound(i, j) > 0 ? err / bound(i, j) : (err > 0 || !ok ? INFINITY : 0);
      if (!(ratio <= worst)) {
        worst = ratio;
        wi = i;
        wj = j;
      }
    }
  if (bad > 0)
    *what += name + ": " + std::to_string(bad) + " entries outside, worst (" + std::to_string(wi) + ", " +
             std::to_string(wj) + ") got " + fmt_g(got(wi, wj)) + " fp64 " + fmt_g(ref(wi, wj)) +
             " bound " + fmt_g(bound(wi, wj)) + "; ";
  return bad;
}

// max |got − ref| / bound over the entries with a bound.
double worst_ratio(const MatrixF& got, const MatrixD& ref, const MatrixD& bound) {
  double worst = 0;
  for (Eigen::Index i = 0; i < ref.size(); ++i)
    if (bound.data()[i] > 0) worst = std::max(worst, std::abs(got.data()[i] - ref.data()[i]) / bound.data()[i]);
  return worst;
}

// The fused backward of p in `precision` against fp64 (on the bf16-rounded inputs and dO for bf16),
// by the kernel ATTNLAB_BACKWARD_CONFIG selects (its arithmetic in `arith`).
void check_case(const Problem& p, Precision precision, std::uint64_t dout_seed, const Arith& arith = kCudaCores) {
  const bool bf16 = precision == Precision::BF16;
  const Eigen::Index rows = static_cast<Eigen::Index>(p.heads) * p.n();
  MatrixF dout = random_dout(rows, p.d_v(), dout_seed);
  if (bf16) dout = bf16_round(dout);
  const Problem ref_problem = bf16 ? rounded_to_bf16(p) : p;
  const GradTraceD ref = reference_backward_fp64(ref_problem, given_dout(dout));
  const GradTrace got = cuda::fused_backward(p, dout, precision);
  EXPECT_GE(got.device_bytes, static_cast<std::size_t>(rows * p.d_v() * sizeof(float))) << "its device bytes, dO's at least";
  // The forward's output is the fused forward's (its own tests hold it to fp64); held here to
  // twice the fused parity tests' tolerance (relative to max|V|, the modifications adding terms to
  // the scores) too, since the bounds below take its error as measured.
  const double out_err = (got.forward.output.cast<double>() - ref.forward.output).cwiseAbs().maxCoeff() /
                         static_cast<double>(ref_problem.v().cwiseAbs().maxCoeff());
  EXPECT_LE(out_err, 2 * (bf16 ? 1e-2 : test::fp32_tolerance(ref_problem))) << "the forward's output";
  const Bounds b = bounds(ref_problem, ref, got.forward.output, arith);
  std::string what;
  int bad = count_outside(got.dq, ref.dq, b.dq, "dQ", &what);
  bad += count_outside(got.dk, ref.dk, b.dk, "dK", &what);
  bad += count_outside(got.dv, ref.dv, b.dv, "dV", &what);
  bad += count_outside(got.D, ref.D, b.D, "D", &what);
  const double dT_err = std::abs(got.dT - ref.dT);
  if (!(dT_err <= b.dT)) {
    ++bad;
    what += "dT: got " + std::to_string(got.dT) + " fp64 " + std::to_string(ref.dT) + " bound " + std::to_string(b.dT);
  }
  EXPECT_EQ(bad, 0) << what;
  std::printf("backward %s (%s): worst |err| / bound: dQ %.2e, dK %.2e, dV %.2e, D %.2e, dT %.2e (dT %.6g, fp64 %.6g)\n",
              bf16 ? "bf16" : "fp32", cuda::last_backward_kernel().c_str(), worst_ratio(got.dq, ref.dq, b.dq), worst_ratio(got.dk, ref.dk, b.dk),
              worst_ratio(got.dv, ref.dv, b.dv), worst_ratio(got.D, ref.D, b.D), dT_err / b.dT, got.dT, ref.dT);
  EXPECT_GT(got.backward_ms, 0.0);
  EXPECT_EQ(got.kernel, cuda::last_backward_kernel());
  EXPECT_GT(got.forward.timings.fused_ms, 0.0);
  EXPECT_EQ(got.forward.output.rows(), rows);
  EXPECT_EQ(got.dp.size(), 0) << "the fused backward keeps no (n, m) stage";
  EXPECT_EQ(got.dq_rot.size() > 0, p.mods.rope_theta > 0);
}
#endif

class CudaBackwardFp32 : public ::testing::TestWithParam<BwdCase> {};

TEST_P(CudaBackwardFp32, MatchesFp64WithinDerivedBounds) {
  ATTNLAB_REQUIRE_CUDA();
#ifdef ATTNLAB_HAVE_CUDA
  check_case(make_problem(GetParam(), 11), Precision::FP32, 5);
#endif
}

std::string case_name(const ::testing::TestParamInfo<BwdCase>& info) {
  std::string t = info.param.temperature == 1e-3 ? "t1em3" : info.param.temperature == 50 ? "t50" : "";
  std::string name = info.param.name + (t.empty() ? "" : "_" + t);
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return name + "_" + std::to_string(info.index);
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaBackwardFp32, ::testing::ValuesIn(fp32_cases()), case_name);

class CudaBackwardBf16 : public ::testing::TestWithParam<BwdCase> {};

#ifdef ATTNLAB_HAVE_CUDA
// check_case under ATTNLAB_BACKWARD_CONFIG `config`, failing unless that kernel ran: the tensor-core
// kernel under 1 and 2, and under 2 with two blocks per SM at d 64 only.
void check_config(const Problem& p, const char* config, std::uint64_t dout_seed) {
  test::ScopedEnv env("ATTNLAB_BACKWARD_CONFIG", config);
  const bool mma = std::string(config) != "0";
  const bool two = std::string(config) == "2" && p.d_k() == 64;
  SCOPED_TRACE(std::string("ATTNLAB_BACKWARD_CONFIG=") + config);
  check_case(p, Precision::BF16, dout_seed, mma ? kTensorCores : kCudaCores);
  const std::string kernel = cuda::last_backward_kernel();
  EXPECT_EQ(kernel.find("mma") != std::string::npos, mma) << kernel;
  EXPECT_EQ(kernel.find("2 blocks/SM") != std::string::npos, two) << kernel;
}
#endif

TEST_P(CudaBackwardBf16, MatchesFp64OfTheRoundedInputsWithinDerivedBounds) {
  ATTNLAB_REQUIRE_CUDA();
#ifdef ATTNLAB_HAVE_CUDA
  for (const char* config : {"0", "1", "2"})  // 2 differs from 1 at d 64 only
    if (config[0] != '2' || GetParam().d_k == 64) check_config(make_problem(GetParam(), 21), config, 6);
#endif
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaBackwardBf16, ::testing::ValuesIn(bf16_cases()), case_name);

// Keys that no query sees (a decode window over the last keys) carry exactly zero gradient, and
// the kernel computes exactly the tiles the block mask leaves, far fewer than all of them.
TEST(CudaBackward, UnseenKeysGetExactlyZeroAndEmptyTilesAreSkipped) {
  ATTNLAB_REQUIRE_CUDA();
#ifdef ATTNLAB_HAVE_CUDA
  for (const auto& [precision, config] :
       {std::pair{Precision::FP32, "0"}, {Precision::BF16, "0"}, {Precision::BF16, "1"}, {Precision::BF16, "2"}}) {
    test::ScopedEnv env("ATTNLAB_BACKWARD_CONFIG", config);
    BwdCase c{"decode_window", 16, 600, 4, 2, 64, 64, 0.85, [](Problem& p) {
                p.mask = MaskKind::Causal;
                p.mods.window = 32;
              }};
    const Problem p = make_problem(c, 3);
    const GradTrace g = cuda::fused_backward(p, random_dout(4 * 16, 64, 9), precision);
    // Query i (position i + 584) sees keys [i + 553, i + 585): keys below 553 are seen by none.
    const int first_seen = 600 - 16 - 32 + 1;
    for (int kv = 0; kv < 2; ++kv) {
      EXPECT_TRUE((g.dk.middleRows(kv * 600, first_seen).array() == 0.f).all());
      EXPECT_TRUE((g.dv.middleRows(kv * 600, first_seen).array() == 0.f).all());
      EXPECT_GT(g.dk.middleRows(kv * 600 + first_seen, 600 - first_seen).cwiseAbs().maxCoeff(), 0.f);
    }
    const cuda::FusedTiles t = cuda::last_backward_tiles();
    EXPECT_EQ(t.computed, t.planned);
    EXPECT_LT(t.planned * 4, t.total);
  }
#endif
}

TEST(CudaBackward, RefusesWhatTheKernelsDoNotTake) {
  ATTNLAB_REQUIRE_CUDA();
#ifdef ATTNLAB_HAVE_CUDA
  const Problem p = random_problem(40, 32, 32, 1);
  EXPECT_NE(test::message_of<InputError>([&] { cuda::fused_backward(p, MatrixF::Zero(40, 32), Precision::BF16); })
                .find("bf16 takes d_k == d_v in {64, 128}"),
            std::string::npos);
  EXPECT_NE(test::message_of<InputError>([&] { cuda::fused_backward(p, MatrixF::Zero(39, 32), Precision::FP32); })
                .find("dO must be (heads n, d_v)"),
            std::string::npos);
#endif
}

// A backward that does not fit the device (ATTNLAB_CUDA_FAULT=oom: 1 MiB free) is refused with its
// needs before it allocates anything, where the forward of the same problem fits.
TEST(CudaBackward, ABackwardThatDoesNotFitIsRefusedWithItsNeeds) {
  ATTNLAB_REQUIRE_CUDA();
#ifdef ATTNLAB_HAVE_CUDA
  const Problem p = random_problem(768, 64, 64, 3);  // Q, K, V and O: 0.75 MiB
  test::ScopedEnv oom("ATTNLAB_CUDA_FAULT", "oom");
  RunOptions fwd;
  fwd.variant = Variant::Fused;
  EXPECT_NO_THROW(make_backend("cuda")->run(p, fwd));
  for (Precision precision : {Precision::FP32, Precision::BF16}) {
    const std::string what = test::message_of<ResourceError>(
        [&] { cuda::fused_backward(p, random_dout(768, 64, 4), precision); });
    EXPECT_TRUE(test::contains(what, "the backward needs")) << what;
    EXPECT_TRUE(test::contains(what, "1.0 MiB free")) << what;
  }
#endif
}

// Small runs of both kernels with rules for compute-sanitizer (memcheck, racecheck): edge tiles,
// grouped heads, a Partial diagonal, the soft-cap and ALiBi.
#ifdef ATTNLAB_HAVE_CUDA
void causal_alibi_softcap(Problem& p) {
  p.mask = MaskKind::Causal;
  p.mods.alibi = true;
  p.mods.softcap = 10;
}
#endif

TEST(CudaBackwardSanitize, Fp32) {
  ATTNLAB_REQUIRE_CUDA();
#ifdef ATTNLAB_HAVE_CUDA
  BwdCase c{"sanitize", 70, 70, 4, 2, 64, 48, 0.85, causal_alibi_softcap};
  check_case(make_problem(c, 31), Precision::FP32, 32);
#endif
}

TEST(CudaBackwardSanitize, Bf16) {
  ATTNLAB_REQUIRE_CUDA();
#ifdef ATTNLAB_HAVE_CUDA
  BwdCase c{"sanitize", 5, 70, 4, 2, 128, 128, 0.85, [](Problem& p) { p.mask = MaskKind::Causal; }};
  check_config(make_problem(c, 33), "0", 34);
#endif
}

// The tensor-core kernel: edge tiles at d 64 (the K and V fragments in registers) and d 128 (read
// from shared memory), grouped heads, a Partial diagonal, more than one query tile per block.
TEST(CudaBackwardSanitize, Bf16TensorCores) {
  ATTNLAB_REQUIRE_CUDA();
#ifdef ATTNLAB_HAVE_CUDA
  BwdCase c64{"sanitize", 70, 70, 4, 2, 64, 64, 0.85, causal_alibi_softcap};
  check_config(make_problem(c64, 35), "1", 36);
  BwdCase c128{"sanitize", 5, 70, 4, 2, 128, 128, 0.85, [](Problem& p) { p.mask = MaskKind::Causal; }};
  check_config(make_problem(c128, 37), "1", 38);
#endif
}

// Configuration 2 at d 64: two blocks per SM, K and V fragments read from shared memory.
TEST(CudaBackwardSanitize, Bf16TensorCoresTwoBlocks) {
  ATTNLAB_REQUIRE_CUDA();
#ifdef ATTNLAB_HAVE_CUDA
  BwdCase c64{"sanitize", 70, 70, 4, 2, 64, 64, 0.85, causal_alibi_softcap};
  check_config(make_problem(c64, 39), "2", 40);
#endif
}

// The benchmark shape, 8 heads x 2048, d 64 and 128, no mask and causal: the median of 10 backward runs
// (the two backward kernels, CUDA events) and of the forward, printed; the first run is checked
// for finite gradients (the bounds above need the (n, m) fp64 run, too slow at this size).
// Disabled: scripts/gpu-check runs it by name for its table.
TEST(CudaBackwardBench, DISABLED_Heads8N2048) {
  ATTNLAB_REQUIRE_CUDA();
#ifdef ATTNLAB_HAVE_CUDA
  for (const int d : {64, 128})
  for (const auto& [precision, config] :
       {std::pair{Precision::FP32, "0"}, {Precision::BF16, "0"}, {Precision::BF16, "1"}, {Precision::BF16, "2"}}) {
    if (config[0] == '2' && d != 64) continue;  // at 128 configuration 2 runs 1
    test::ScopedEnv env("ATTNLAB_BACKWARD_CONFIG", config);
    for (MaskKind mask : {MaskKind::None, MaskKind::Causal}) {
      Problem p = random_problem(2048, d, d, 41, 8);
      p.mask = mask;
      const MatrixF dout = random_dout(8 * 2048, d, 42);
      std::vector<double> bwd, fwd;
      for (int rep = 0; rep < 11; ++rep) {
        const GradTrace g = cuda::fused_backward(p, dout, precision);
        if (rep == 0) {
          EXPECT_TRUE(g.dq.allFinite() && g.dk.allFinite() && g.dv.allFinite() && std::isfinite(g.dT));
          continue;  // warm-up
        }
        bwd.push_back(g.backward_ms);
        fwd.push_back(g.forward.timings.fused_ms);
      }
      std::sort(bwd.begin(), bwd.end());
      std::sort(fwd.begin(), fwd.end());
      // FLOPs of the backward: five products of 2 n m d per head (S, dP, dV, dK, dQ) and the
      // statistics pass's one; half of each under the causal mask.
      const double flops = 6.0 * 2 * 2048.0 * 2048.0 * d * 8 * (mask == MaskKind::Causal ? 0.5 : 1.0);
      std::printf("backward-bench %s %s heads 8 n 2048 d %d: backward median %.3f ms (min %.3f, max %.3f, %.1f "
                  "TFLOP/s), forward median %.3f ms, kernel %s\n",
                  precision == Precision::BF16 ? "bf16" : "fp32", mask == MaskKind::Causal ? "causal" : "none", d,
                  bwd[bwd.size() / 2], bwd.front(), bwd.back(), flops / (bwd[bwd.size() / 2] * 1e9),
                  fwd[fwd.size() / 2], cuda::last_backward_kernel().c_str());
    }
  }
#endif
}

}  // namespace
}  // namespace attnlab
