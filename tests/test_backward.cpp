// The staged backward (cpu/backward.h, core/backward.h) proven entry by entry:
//  - finite differences: every entry of dQ, dK, dV and dT of the fp64 backward against central
//    differences of the fp64 forward (reference_fp64) of the same loss, on small problems covering
//    every mask kind, decode shapes, grouped heads, each score mod, RoPE, the mask mods, an
//    explicit scale, the three losses and temperatures from 1e-3 to 50; the loss value itself;
//  - fp32 against fp64 at the derived bounds of core/backward_check.h, on the same cases and on
//    larger ones, and the check catching a gradient moved by 1e-4 of its scale;
//  - masked entries carry exactly zero gradient from dlogits on, keys no query sees get rows of
//    exactly zero in dK and dV, and every row of dlogits sums to zero;
//  - structure: grouped heads' dK, dV are the sums over the expanded heads; one head of many is
//    the rows of the stacked run; RoPE's rotation turned back is its transpose;
//  - the upstream gradient: the random dO, the losses' dO, and every refusal.
#include "core/backward.h"
#include "core/backward_check.h"
#include "core/backward_report.h"
#include "core/modify.h"
#include "cpu/backward.h"
#include "cpu/cpu_backend.h"
#include "cpu/fused_backward.h"
#include "test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace attnlab {
namespace {

constexpr double kU64 = 0x1p-53;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// ---- the cases ---------------------------------------------------------------------------------

struct Case {
  std::string name;
  int n = 4, m = 4, heads = 1, kv_heads = 1, d_k = 4, d_v = 3;
  double temperature = 1;
  // Q is multiplied by this: with q_scale = T the scaled scores are O(T) and the logits O(1), so
  // that the softmax stays away from saturation at any temperature and every gradient is of its
  // natural size (see TinyTemperatureSaturates for what happens without it).
  double q_scale = 1;
  UpstreamKind loss = UpstreamKind::Random;
  std::function<void(Problem&)> apply = [](Problem&) {};
};

// gtest prints a failing case by this, not as the bytes of the struct.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

MatrixF small_matrix(int rows, int cols, std::uint64_t seed, float scale = 0.5f) {
  return random_problem(rows, cols, 1, seed).q() * scale;
}

// (n, m) custom mask: a fixed pattern, each row keeping its last key (the query's own position
// in a decode shape) so that no row is fully masked.
MatrixF custom_mask(int n, int m) {
  MatrixF k = MatrixF::Zero(n, m);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < m; ++j)
      if (j != i + m - n && (i * 7 + j * 3) % 5 < 2) k(i, j) = kNegInf;
  return k;
}

std::vector<Case> cases() {
  std::vector<Case> c;
  auto add = [&c](Case x) { c.push_back(std::move(x)); };
  add({.name = "plain"});
  add({.name = "causal", .n = 5, .m = 5, .apply = [](Problem& p) { p.mask = MaskKind::Causal; }});
  add({.name = "custom_mask", .n = 5, .m = 5, .apply = [](Problem& p) {
         p.mask = MaskKind::Custom;
         p.edit().custom_mask = custom_mask(p.n(), p.m());
       }});
  add({.name = "decode_causal", .n = 2, .m = 6, .apply = [](Problem& p) { p.mask = MaskKind::Causal; }});
  add({.name = "decode_custom", .n = 3, .m = 6, .apply = [](Problem& p) {
         p.mask = MaskKind::Custom;
         p.edit().custom_mask = custom_mask(p.n(), p.m());
       }});
  add({.name = "grouped", .n = 3, .m = 3, .heads = 4, .kv_heads = 2});
  add({.name = "grouped_decode_causal", .n = 2, .m = 5, .heads = 4, .kv_heads = 1, .apply = [](Problem& p) {
         p.mask = MaskKind::Causal;
       }});
  add({.name = "alibi", .n = 4, .m = 5, .heads = 2, .kv_heads = 2, .apply = [](Problem& p) { p.mods.alibi = true; }});
  add({.name = "bias_per_head", .heads = 2, .kv_heads = 1, .apply = [](Problem& p) {
         p.edit().bias = small_matrix(p.heads * p.n(), p.m(), 11);
       }});
  add({.name = "bias_shared", .apply = [](Problem& p) { p.edit().bias = small_matrix(p.n(), p.m(), 12); }});
  add({.name = "softcap", .q_scale = 2, .apply = [](Problem& p) { p.mods.softcap = 0.7; }});
  add({.name = "alibi_bias_softcap", .heads = 2, .kv_heads = 2, .apply = [](Problem& p) {
         p.mods.alibi = true;
         p.edit().bias = small_matrix(p.n(), p.m(), 13);
         p.mods.softcap = 1.5;
       }});
  add({.name = "rope", .n = 5, .m = 5, .apply = [](Problem& p) { p.mods.rope_theta = 100; }});
  add({.name = "rope_grouped_decode", .n = 3, .m = 6, .heads = 2, .kv_heads = 1, .d_k = 6, .apply = [](Problem& p) {
         p.mods.rope_theta = 10000;
         p.mask = MaskKind::Causal;
       }});
  add({.name = "window", .n = 6, .m = 6, .apply = [](Problem& p) {
         p.mask = MaskKind::Causal;
         p.mods.window = 2;
       }});
  add({.name = "window_decode_unseen_keys", .n = 2, .m = 7, .apply = [](Problem& p) {
         p.mask = MaskKind::Causal;
         p.mods.window = 3;
       }});
  add({.name = "prefix", .n = 5, .m = 5, .apply = [](Problem& p) { p.mods.prefix = 2; }});
  add({.name = "documents", .n = 5, .m = 5, .apply = [](Problem& p) { p.edit().documents = {0, 0, 1, 1, 1}; }});
  add({.name = "everything", .n = 3, .m = 6, .heads = 4, .kv_heads = 2, .temperature = 0.6, .q_scale = 0.6,
       .apply = [](Problem& p) {
         p.mods.rope_theta = 500;
         p.mods.alibi = true;
         p.edit().bias = small_matrix(p.heads * p.n(), p.m(), 14);
         p.mods.softcap = 2;
         p.mask = MaskKind::Causal;
         p.mods.window = 4;
       }});
  add({.name = "explicit_scale", .apply = [](Problem& p) { p.scale = 0.3; }});
  add({.name = "loss_sum", .loss = UpstreamKind::Sum, .apply = [](Problem& p) { p.mask = MaskKind::Causal; }});
  add({.name = "loss_mse", .heads = 2, .kv_heads = 1, .loss = UpstreamKind::Mse});
  for (double t : {1e-3, 1e-2, 0.1, 10.0, 50.0}) {
    Case x{.name = "temperature_" + std::to_string(t), .n = 4, .m = 5, .temperature = t, .q_scale = t};
    for (char& ch : x.name)
      if (ch == '.' || ch == '-') ch = '_';
    add(x);
  }
  add({.name = "temperature_0_001_softcap_causal", .n = 4, .m = 4, .temperature = 1e-3, .q_scale = 1e-3,
       .apply = [](Problem& p) {
         p.mask = MaskKind::Causal;
         p.mods.softcap = 0.05;
       }});
  return c;
}

Problem problem_of(const Case& c, std::uint64_t seed = 7) {
  Problem p = random_problem(c.n, c.m, c.d_k, c.d_v, seed, c.heads, c.kv_heads);
  p.edit().q *= static_cast<float>(c.q_scale);
  p.temperature = c.temperature;
  c.apply(p);
  validate(p);
  return p;
}

// The fp32 and the fp64 backward of p for u.
struct Both {
  GradTrace fp32;
  GradTraceD fp64;
};
Both both(const Problem& p, const Upstream& u) { return {cpu_backward(p, u), reference_backward_fp64(p, u)}; }

Upstream upstream_of(const Case& c, const Problem& p) {
  switch (c.loss) {
    case UpstreamKind::Sum: return parse_loss("sum");
    case UpstreamKind::Mse: {
      Upstream u;
      u.kind = UpstreamKind::Mse;
      u.file = "(test)";
      u.data = small_matrix(p.heads * p.n(), p.d_v(), 21, 1.0f);
      return u;
    }
    default: return upstream_random(3);
  }
}

// ---- finite differences ----------------------------------------------------------------------

// L of the fp64 forward of p, for the upstream u; a given or random dO is the linear loss
// <dO, O> whose gradient it is. Written here from the output, apart from the library's loss.
double loss_of(const Problem& p, const Upstream& u, const MatrixD& dout) {
  const MatrixD o = reference_fp64(p).output;
  if (u.kind == UpstreamKind::Sum) return o.sum();
  if (u.kind == UpstreamKind::Mse) return 0.5 * (o - u.data.cast<double>()).squaredNorm();
  return (dout.array() * o.array()).sum();
}

// A bound on the rounding error of one evaluation of L in fp64: each output entry is a chain of
// sums over d_k, m and d_v terms and a softmax whose arguments carry relative errors of order
// (d_k + 2) u64 |logit|, all of it a few u64 (d_k + m + d_v) (1 + max|logit|) relative to
// Σ_j P |V|; weighted by |∂L/∂O|. 64 covers the constants generously.
double loss_rounding(const Problem& p, const GradTraceD& g) {
  const TraceD& t = g.forward;
  double zmax = 0;
  for (Eigen::Index i = 0; i < t.logits.size(); ++i)
    if (std::isfinite(t.logits.data()[i])) zmax = std::max(zmax, std::abs(t.logits.data()[i]));
  const MatrixD v = p.v().cast<double>().cwiseAbs();
  double a = 0;
  for (int h = 0; h < p.heads; ++h) {
    const Eigen::Index r0 = static_cast<Eigen::Index>(h) * p.n();
    const MatrixD pv = t.weights.middleRows(r0, p.n()) * v.middleRows(p.kv_row(h), p.m());
    a += (g.dout.middleRows(r0, p.n()).cwiseAbs().array() * pv.array()).sum();
  }
  return 64.0 * (p.d_k() + p.m() + p.d_v()) * (1 + zmax) * kU64 * (a + std::abs(g.loss.value_or(0)));
}

// The largest power of two at most x.
double pow2_floor(double x) { return std::ldexp(1.0, static_cast<int>(std::floor(std::log2(x)))); }

// Where the differences are taken: the base point x0 and the step h (a power of two), chosen so
// that x0 ± h and x0 ± 2h are exact in a format of `bits` mantissa bits (24 for the problem's fp32
// inputs, 53 for T). A step alone cannot promise it: x ± h leaves x's binade whenever |x| is small
// against h (V's entries, with h = 1/16), and x's low bits do not fit there; the step actually
// taken would be off by up to an ulp of the larger binade, an error of |g| ulp / h in the
// difference. So x is rounded to a multiple of U = 2 ulp(|x| + 2h) (2: |x0| may round up into the
// next binade), and h is at least U: every point is then a multiple of U no larger than |x0| + 2h
// whose ulp is at most U. The gradient compared is the backward's at x0 (check_input and
// check_temperature recompute it when x0 != x).
struct FdPoint {
  double x0, h;
};

FdPoint fd_point(double x, double target, int bits) {
  const auto ulp_at = [bits](double a) { return a > 0 ? std::ldexp(pow2_floor(a), 1 - bits) : 0.0; };
  double h = pow2_floor(target);
  double unit = 2 * ulp_at(std::abs(x) + 2 * h);
  if (h < unit) {
    h = unit;
    unit = 2 * ulp_at(std::abs(x) + 2 * h);
    h = std::max(h, unit);
  }
  const double x0 = unit > 0 ? std::nearbyint(x / unit) * unit : x;
  return {x0, h};
}

enum class Input { Q, K, V };

MatrixF& input_of(ProblemInputs& in, Input w) { return w == Input::Q ? in.q : w == Input::K ? in.k : in.v; }
const MatrixF& input_of(const Problem& p, Input w) { return w == Input::Q ? p.q() : w == Input::K ? p.k() : p.v(); }

struct FdResult {
  double worst_excess = -1;  // max (|g − fd| − tol): <= 0 passes
  double max_tol = 0;
  // The gradient's size: max |g| over the entries; for dT, one sum that can cancel to near 0, the
  // size of its terms Σ |dlogits ∘ logits| / T.
  double scale = 0;
  std::string where;
};

// Central differences f_h = (L(x + h) − L(x − h)) / 2h and f_2h. Richardson: f_2h − f_h = 3 a h²
// + noise for a truncation a h² at h, so |a h²| <= (|f_2h − f_h| + |noise|) / 3; the noise of f_h
// is at most ε/h and of f_2h ε/(2h) for ε the rounding of one L. Hence
//   |g − f_h| <= |f_2h − f_h| / 3 + 1.5 ε / h,
// and the test asks |g − f_h| <= 2 |f_2h − f_h| / 3 + 3 ε / h (twice that: the O(h⁴) terms and
// the estimate's own error), a tolerance from the differences alone, independent of g.
template <class Eval>
void check_entry(FdResult& r, const std::string& where, double g, double h, Eval eval, double eps) {
  const double lp = eval(h), lm = eval(-h), lp2 = eval(2 * h), lm2 = eval(-2 * h);
  const double f1 = (lp - lm) / (2 * h), f2 = (lp2 - lm2) / (4 * h);
  const double tol = 2 * std::abs(f2 - f1) / 3 + 3 * eps / h;
  const double excess = std::abs(g - f1) - tol;
  r.max_tol = std::max(r.max_tol, tol);
  r.scale = std::max(r.scale, std::abs(g));
  if (excess > r.worst_excess) {
    r.worst_excess = excess;
    r.where = where + ": analytic " + std::to_string(g) + ", difference " + std::to_string(f1) + ", tolerance " +
              std::to_string(tol);
  }
}

// Every entry of input w: its gradient in `grad` (same shape) against the differences, with a step
// that moves no logit by more than η = 1e-4 (on the scaled scores also below η C with a soft-cap, whose
// curvature is 1/C): for Q, h = η min(T, C) / (s max|K|); for K, likewise with max|Q|. V enters L
// linearly (quadratically for mse), where a central difference is exact up to rounding: h = 1/16.
FdResult check_input(const Problem& p, const Upstream& u, const GradTraceD& g, Input w, const MatrixD& grad) {
  constexpr double kEta = 1e-4;
  const double eps = loss_rounding(p, g);
  const double width = p.mods.softcap > 0 ? std::min(p.temperature, p.mods.softcap) : p.temperature;
  const double s = p.scale_value();
  const double other = w == Input::Q ? p.k().cwiseAbs().maxCoeff() : p.q().cwiseAbs().maxCoeff();
  const double target = w == Input::V ? 1.0 / 16 : kEta * width / (s * std::max(other, 1e-30));
  const MatrixF& x0 = input_of(p, w);
  const char* name = w == Input::Q ? "dQ" : w == Input::K ? "dK" : "dV";
  FdResult r;
  for (Eigen::Index i = 0; i < x0.rows(); ++i)
    for (Eigen::Index j = 0; j < x0.cols(); ++j) {
      const FdPoint at = fd_point(x0(i, j), target, 24);
      const auto with = [&](double d) {
        Problem q = p;
        const float v = static_cast<float>(at.x0 + d);
        EXPECT_EQ(static_cast<double>(v), at.x0 + d) << name << " step not exact";
        input_of(q.edit(), w)(i, j) = v;
        return q;
      };
      // The backward at the base point: g itself unless x had to be rounded.
      const Problem base = with(0);
      const GradTraceD moved = at.x0 == x0(i, j) ? GradTraceD{} : reference_backward_fp64(base, u);
      const GradTraceD& at_base = at.x0 == x0(i, j) ? g : moved;
      const MatrixD& gr = at.x0 == x0(i, j) ? grad : w == Input::Q ? moved.dq : w == Input::K ? moved.dk : moved.dv;
      auto eval = [&](double d) { return loss_of(with(d), u, at_base.dout); };
      check_entry(r, std::string(name) + "(" + std::to_string(i) + "," + std::to_string(j) + ")", gr(i, j), at.h, eval,
                  eps);
    }
  return r;
}

// dT: L depends on T through logits = x / T; a relative step η / max(1, max|logit|) moves no logit
// by more than η; fd_point keeps T ± h and T ± 2h exact in double.
FdResult check_temperature(const Problem& p, const Upstream& u, const GradTraceD& g) {
  double zmax = 0;
  for (Eigen::Index i = 0; i < g.forward.logits.size(); ++i)
    if (std::isfinite(g.forward.logits.data()[i])) zmax = std::max(zmax, std::abs(g.forward.logits.data()[i]));
  const FdPoint at = fd_point(p.temperature, 1e-4 * p.temperature / std::max(1.0, zmax), 53);
  const auto with = [&](double d) {
    Problem q = p;
    q.temperature = at.x0 + d;
    return q;
  };
  const GradTraceD moved = at.x0 == p.temperature ? GradTraceD{} : reference_backward_fp64(with(0), u);
  const GradTraceD& at_base = at.x0 == p.temperature ? g : moved;
  FdResult r;
  auto eval = [&](double d) { return loss_of(with(d), u, at_base.dout); };
  check_entry(r, "dT", at_base.dT, at.h, eval, loss_rounding(p, g));
  const MatrixD terms = (at_base.dlogits.array() * at_base.forward.logits.array()).matrix();
  for (Eigen::Index i = 0; i < terms.size(); ++i)
    if (at_base.dlogits.data()[i] != 0) r.scale += std::abs(terms.data()[i]) / at.x0;
  return r;
}

class BackwardCase : public ::testing::TestWithParam<Case> {};

TEST_P(BackwardCase, FiniteDifferencesOfTheFp64Forward) {
  const Case& c = GetParam();
  const Problem p = problem_of(c);
  const Upstream u = upstream_of(c, p);
  const GradTraceD g = reference_backward_fp64(p, u);
  if (u.kind != UpstreamKind::Random) {
    ASSERT_TRUE(g.loss.has_value());
    EXPECT_NEAR(*g.loss, loss_of(p, u, g.dout), 1e-12 * (1 + std::abs(*g.loss)));
  } else {
    EXPECT_FALSE(g.loss.has_value());
  }
  const struct {
    const char* name;
    FdResult r;
  } results[] = {{"dQ", check_input(p, u, g, Input::Q, g.dq)},
                 {"dK", check_input(p, u, g, Input::K, g.dk)},
                 {"dV", check_input(p, u, g, Input::V, g.dv)},
                 {"dT", check_temperature(p, u, g)}};
  for (const auto& [name, r] : results) {
    EXPECT_LE(r.worst_excess, 0) << name << " " << r.where;
    // The tolerance is informative: far below the gradient's own size, so a wrong entry cannot
    // hide in it.
    EXPECT_LE(r.max_tol, 1e-5 * std::max(r.scale, 1e-3)) << name << ": tolerance " << r.max_tol
                                                         << " against the gradient's size " << r.scale;
  }
}

TEST_P(BackwardCase, Fp32WithinItsDerivedBoundsOfFp64) {
  const Case& c = GetParam();
  const Problem p = problem_of(c);
  const Upstream u = upstream_of(c, p);
  const auto [g, ref] = both(p, u);
  const BackwardCheck check = check_backward(p, u, g, ref);
  EXPECT_TRUE(check.pass) << render_backward_check_text(check, Lang::En);
  EXPECT_EQ(check.masked_nonzero, 0u);
  EXPECT_TRUE(check.rows32.pass && check.rows64.pass);
  // Same dO in both runs for a given or random one; for mse each run's own O − Y.
  if (u.kind != UpstreamKind::Mse) EXPECT_EQ(MatrixD(g.dout.cast<double>()), ref.dout);
}

TEST_P(BackwardCase, MaskedEntriesCarryExactlyZeroAndRowsSumToZero) {
  const Case& c = GetParam();
  const Problem p = problem_of(c);
  const Upstream u = upstream_of(c, p);
  const auto [f, g] = both(p, u);
  const MatrixF mask = mask_matrix(p);
  for (Eigen::Index r = 0; r < g.dlogits.rows(); ++r) {
    const int i = static_cast<int>(r % p.n());
    double sum = 0, scale = 0;
    for (int j = 0; j < p.m(); ++j) {
      if (std::isinf(mask(i, j))) {
        for (const MatrixD* a : {&g.dlogits, &g.dcapped, &g.dbiased, &g.dscaled, &g.dscores})
          if (a->size() > 0) ASSERT_EQ((*a)(r, j), 0.0) << "row " << r << " key " << j;
        for (const MatrixF* a : {&f.dlogits, &f.dcapped, &f.dbiased, &f.dscaled, &f.dscores})
          if (a->size() > 0) ASSERT_EQ((*a)(r, j), 0.0f) << "row " << r << " key " << j;
      }
      sum += g.dlogits(r, j);
      scale += g.forward.weights(r, j) * (std::abs(g.dp(r, j)) + std::abs(g.D(r, 0)));
    }
    // In double a row's sum is D_i − D_i up to rounding: a few (m + d_v) u64 of its terms.
    EXPECT_LE(std::abs(sum), 4 * (p.m() + p.d_v()) * kU64 * scale + 1e-300) << "row " << r;
  }
}

// One row's fp64 backward (what the walk checks against, O(m d)) is the whole fp64 backward's row:
// the same chain in double, RoPE and ALiBi at the row's own positions.
TEST_P(BackwardCase, TheFp64RowIsTheWholeFp64BackwardsRow) {
  const Case& c = GetParam();
  const Problem p = problem_of(c);
  const Upstream u = upstream_of(c, p);
  const GradTraceD g = reference_backward_fp64(p, u);
  for (int h = 0; h < p.heads; ++h)
    for (int i = 0; i < p.n(); ++i) {
      const Eigen::Index r = static_cast<Eigen::Index>(h) * p.n() + i;
      const std::vector<double> row = reference_backward_fp64_row(p, u, h, i);
      ASSERT_EQ(static_cast<int>(row.size()), p.d_k());
      const double scale = g.dq.row(r).cwiseAbs().maxCoeff();
      for (int k = 0; k < p.d_k(); ++k)
        EXPECT_NEAR(row[k], g.dq(r, k), 1e-11 * scale + 1e-300) << "head " << h << " query " << i << " column " << k;
    }
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(Cases, BackwardCase, ::testing::ValuesIn(cases()), case_name);

// ---- beyond the table ----------------------------------------------------------------------------

TEST(Backward, Fp32WithinItsBoundsOnLargerProblems) {
  struct Larger {
    int n, m, heads, kv_heads, d;
    std::function<void(Problem&)> apply;
  };
  const Larger all[] = {
      {64, 64, 4, 2, 16, [](Problem& p) { p.mask = MaskKind::Causal; }},
      {16, 96, 8, 2, 32, [](Problem& p) {
         p.mask = MaskKind::Causal;
         p.mods.rope_theta = 10000;
         p.mods.alibi = true;
         p.mods.softcap = 5;
         p.mods.window = 40;
       }},
      {48, 48, 2, 2, 8, [](Problem& p) { p.temperature = 0.3; }},
  };
  for (const Larger& l : all) {
    Problem p = random_problem(l.n, l.m, l.d, l.d, 5, l.heads, l.kv_heads);
    l.apply(p);
    for (const Upstream& u : {upstream_random(1), parse_loss("sum")}) {
      const auto [f, d] = both(p, u);
      const BackwardCheck c = check_backward(p, u, f, d);
      EXPECT_TRUE(c.pass) << render_backward_check_text(c, Lang::En);
      // The bounds are tight enough to mean something: each gradient's largest bound stays below
      // 1e-3 of its scale (the γ_k terms are worst cases, k u where a real sum errs about √k u),
      // so a wrong term, which moves entries by their own size, cannot pass.
      for (const GradCheck& g : c.grads)
        if (g.name != "dT") EXPECT_LE(g.max_bound, 1e-3 * std::max(g.max_abs_ref, 1e-6)) << g.name;
    }
  }
}

TEST(Backward, TheCheckCatchesAGradientMovedByATenThousandthOfItsScale) {
  Problem p = random_problem(6, 6, 4, 4, 9, 2, 1);
  p.mask = MaskKind::Causal;
  p.mods.softcap = 2;
  p.mods.rope_theta = 100;
  const Upstream u = upstream_random(4);
  const auto [good, ref] = both(p, u);
  ASSERT_TRUE(check_backward(p, u, good, ref).pass);
  const auto member = [](GradTrace& g, const std::string& name) -> MatrixF* {
    if (name == "dO") return &g.dout;
    if (name == "dV") return &g.dv;
    if (name == "dP") return &g.dp;
    if (name == "D") return &g.D;
    if (name == "dlogits") return &g.dlogits;
    if (name == "dcapped") return &g.dcapped;
    if (name == "dscaled") return &g.dscaled;
    if (name == "dscores") return &g.dscores;
    if (name == "dQ_rot") return &g.dq_rot;
    if (name == "dK_rot") return &g.dk_rot;
    if (name == "dQ") return &g.dq;
    if (name == "dK") return &g.dk;
    return nullptr;
  };
  for (const GradCheck& gc : check_backward(p, u, good, ref).grads) {
    GradTrace bad = good;
    if (gc.name == "dT") {
      bad.dT += 1e-4 * std::abs(ref.dT);
    } else {
      MatrixF* a = member(bad, gc.name);
      ASSERT_NE(a, nullptr) << gc.name;
      // The largest entry that is not exactly 0 (a masked one would be caught anyway).
      Eigen::Index r = 0, col = 0;
      a->cwiseAbs().maxCoeff(&r, &col);
      (*a)(r, col) += static_cast<float>(1e-4 * gc.max_abs_ref);
    }
    const BackwardCheck c = check_backward(p, u, bad, ref);
    EXPECT_FALSE(c.pass) << gc.name;
    for (const GradCheck& x : c.grads)
      if (x.name == gc.name) EXPECT_FALSE(x.pass) << gc.name;
  }
}

TEST(Backward, TheCheckFailsANaNGradient) {
  const Problem p = random_problem(8, 8, 8, 8, 2, 1, 1);
  const Upstream u = upstream_random(3);
  const auto [good, ref] = both(p, u);
  ASSERT_TRUE(check_backward(p, u, good, ref).pass);
  GradTrace bad = good;
  bad.dq(1, 2) = std::numeric_limits<float>::quiet_NaN();
  const BackwardCheck c = check_backward(p, u, bad, ref);
  EXPECT_FALSE(c.pass);
  const auto dq = std::find_if(c.grads.begin(), c.grads.end(), [](const GradCheck& x) { return x.name == "dQ"; });
  ASSERT_NE(dq, c.grads.end());
  EXPECT_FALSE(dq->pass);
  EXPECT_EQ(dq->failures, 1u);
}

TEST(Backward, TinyTemperatureSaturates) {
  // At T = 1e-3 with scores of their natural size the logits are hundreds apart: every row's
  // weights are one key's (P = 1 there, at most e^-δ elsewhere, δ the gap between a row's two
  // largest logits). The gradient that reaches the scores vanishes: off the top key
  // |dlogits_ij| = P_ij |dP_ij − D_i| <= e^-δ max|dP − D|, and on it the row's others summed
  // (the row sums to 0), so every |dlogits| <= (m − 1) e^-δ max|dP − D|; dQ, dK and dT are sums of
  // those. dV = Pᵀ dO keeps its size: one key per row takes the whole gradient. The differences
  // agree: they see no change either.
  Problem p = random_problem(4, 5, 4, 3, 7, 1, 1);
  p.temperature = 1e-3;
  const Upstream u = upstream_random(3);
  const GradTraceD g = reference_backward_fp64(p, u);
  double gap = std::numeric_limits<double>::infinity();
  for (Eigen::Index r = 0; r < g.forward.logits.rows(); ++r) {
    std::vector<double> row;
    for (Eigen::Index j = 0; j < g.forward.logits.cols(); ++j) row.push_back(g.forward.logits(r, j));
    std::sort(row.rbegin(), row.rend());
    gap = std::min(gap, row[0] - row[1]);
  }
  ASSERT_GT(gap, 50) << "the case is meant to saturate";
  const double spread = (g.dp.array().colwise() - g.D.col(0).array()).abs().maxCoeff();
  const double bound = (p.m() - 1) * std::exp(-gap) * spread;
  EXPECT_LE(g.dlogits.cwiseAbs().maxCoeff(), bound);
  // Carried on to dQ, dK and dT, still some 20 orders below dV.
  const double dv = g.dv.cwiseAbs().maxCoeff();
  EXPECT_GT(dv, 0.1);
  EXPECT_LT(g.dq.cwiseAbs().maxCoeff(), 1e-20 * dv);
  EXPECT_LT(g.dk.cwiseAbs().maxCoeff(), 1e-20 * dv);
  EXPECT_LT(std::abs(g.dT), 1e-20 * dv);
  EXPECT_LE(check_input(p, u, g, Input::V, g.dv).worst_excess, 0);
  EXPECT_LE(check_input(p, u, g, Input::Q, g.dq).worst_excess, 0);
  // fp32 against fp64 still holds: its bounds say how little fp32 knows of the vanished parts.
  EXPECT_TRUE(check_backward(p, u, cpu_backward(p, u), g).pass);
}

// At a huge temperature the gradients below the logits are divided by T into fp32's subnormals,
// where rounding is absolute: the bounds allow it (they were relative only: a correct run read
// FAIL), and a gradient moved by a normal-sized amount still fails.
TEST(Backward, SubnormalGradientsPassAtAHugeTemperature) {
  Problem p = random_problem(8, 8, 4, 4, 5);
  p.temperature = 3e38;
  const Upstream u = upstream_random(2);
  const GradTraceD ref = reference_backward_fp64(p, u);
  const GradTrace g = cpu_backward(p, u);
  const BackwardCheck c = check_backward(p, u, g, ref, true);
  EXPECT_TRUE(c.pass) << render_backward_check_text(c, Lang::En);
  EXPECT_TRUE(check_fused_backward(cpu_fused_backward(p, u), ref, c).pass);
  EXPECT_THROW(check_fused_backward(cpu_fused_backward(p, u), ref, check_backward(p, u, g, ref)), std::logic_error)
      << "a staged check without the fused extras";
  GradTrace bad = g;
  bad.dq(0, 0) += 1e-30f;
  EXPECT_FALSE(check_backward(p, u, bad, ref).pass);
}

// With one key every weight is 1 and every dlogit 0: dT is 0, printed as 0 and not as -0.
TEST(Backward, DtOfOneKeyIsAPlainZero) {
  const Problem p = random_problem(1, 4, 4, 2);
  for (const double dt : {cpu_backward(p, upstream_random(0)).dT, cpu_fused_backward(p, upstream_random(0)).dT}) {
    EXPECT_EQ(dt, 0.0);
    EXPECT_FALSE(std::signbit(dt));
  }
  const test::BinaryRun r = test::run_attnlab({"backward", "--random", "1", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["dT"].dump(), "0.0");
}

TEST(Backward, KeysNoQuerySeesGetRowsOfExactlyZero) {
  // Two queries at the end of 9 keys, causal with a window of 3: keys 0..4 are seen by nobody.
  Problem p = random_problem(2, 9, 4, 3, 5, 2, 1);
  p.mask = MaskKind::Causal;
  p.mods.window = 3;
  p.mods.rope_theta = 100;
  const Upstream u = upstream_random(2);
  const auto [f, g] = both(p, u);
  for (int j = 0; j < 5; ++j) {
    EXPECT_TRUE((f.dk.row(j).array() == 0.f).all() && (f.dv.row(j).array() == 0.f).all()) << j;
    EXPECT_TRUE((g.dk.row(j).array() == 0.0).all() && (g.dv.row(j).array() == 0.0).all()) << j;
  }
  EXPECT_GT(g.dk.row(6).cwiseAbs().maxCoeff(), 0);
}

TEST(Backward, GroupedHeadsSumTheirQueryHeads) {
  // dK and dV of a shared key/value head are the sums of those of its query heads run each with a
  // copy of it (expand_kv_heads); dQ is the same row for row.
  Problem p = random_problem(3, 5, 4, 3, 8, 6, 2);
  p.mask = MaskKind::Causal;
  p.mods.rope_theta = 50;
  p.mods.alibi = true;
  const Upstream u = upstream_random(5);
  const GradTraceD g = reference_backward_fp64(p, u);
  const GradTraceD e = reference_backward_fp64(expand_kv_heads(p), u);
  EXPECT_LE((g.dq - e.dq).cwiseAbs().maxCoeff(), 1e-13);
  EXPECT_NEAR(g.dT, e.dT, 1e-13);
  const int m = p.m();
  for (int kv = 0; kv < p.kv_heads(); ++kv) {
    MatrixD dk = MatrixD::Zero(m, p.d_k()), dv = MatrixD::Zero(m, p.d_v());
    for (int h = kv * p.kv_group; h < (kv + 1) * p.kv_group; ++h) {
      dk += e.dk.middleRows(static_cast<Eigen::Index>(h) * m, m);
      dv += e.dv.middleRows(static_cast<Eigen::Index>(h) * m, m);
    }
    EXPECT_LE((g.dk.middleRows(static_cast<Eigen::Index>(kv) * m, m) - dk).cwiseAbs().maxCoeff(), 1e-13) << kv;
    EXPECT_LE((g.dv.middleRows(static_cast<Eigen::Index>(kv) * m, m) - dv).cwiseAbs().maxCoeff(), 1e-13) << kv;
  }
}

TEST(Backward, OneHeadIsTheRowsOfTheStackedRun) {
  Problem p = random_problem(4, 4, 4, 4, 10, 3, 3);
  p.mods.alibi = true;  // each head its own slope
  Upstream u;
  u.kind = UpstreamKind::File;
  u.data = small_matrix(p.heads * p.n(), p.d_v(), 3);
  const GradTraceD all = reference_backward_fp64(p, u);
  for (int h = 0; h < p.heads; ++h) {
    Upstream uh = u;
    uh.data = u.data.middleRows(static_cast<Eigen::Index>(h) * p.n(), p.n());
    const GradTraceD one = reference_backward_fp64(one_head(p, h), uh);
    EXPECT_LE((one.dq - all.dq.middleRows(static_cast<Eigen::Index>(h) * p.n(), p.n())).cwiseAbs().maxCoeff(), 1e-14);
    EXPECT_LE((one.dk - all.dk.middleRows(static_cast<Eigen::Index>(h) * p.m(), p.m())).cwiseAbs().maxCoeff(), 1e-14);
    EXPECT_LE((one.dv - all.dv.middleRows(static_cast<Eigen::Index>(h) * p.m(), p.m())).cwiseAbs().maxCoeff(), 1e-14);
  }
}

TEST(Backward, RopeTurnedBackIsTheTransposeOfTheRotation) {
  const MatrixD x = random_problem(5, 8, 1, 3).q().cast<double>(), y = random_problem(5, 8, 1, 4).q().cast<double>();
  // <R x, y> = <x, Rᵀ y> row by row, and Rᵀ R = I.
  const MatrixD rx = rope_rotate(x, 3, 100), rty = rope_rotate_back(y, 3, 100);
  EXPECT_NEAR((rx.array() * y.array()).sum(), (x.array() * rty.array()).sum(), 1e-13);
  EXPECT_LE((rope_rotate_back(rx, 3, 100) - x).cwiseAbs().maxCoeff(), 1e-14);
}

TEST(Backward, RopeTurnedBackInPlaceIsTheDoubleOneRoundedOnceBitForBit) {
  // Three stacked heads of 4500 rows (three chunks of positions over the cores), from position 700:
  // the in-place fp32 version (the fused backwards' last step) against rope_rotate_back per head.
  const int blocks = 3, rows = 4500, pos0 = 700;
  const MatrixF x = random_problem(blocks * rows, 8, 1, 16).q() * 1e3f;
  MatrixF y = x;
  rope_rotate_back_rows(y, blocks, rows, pos0, 5000);
  for (int b = 0; b < blocks; ++b) {
    const MatrixF want =
        rope_rotate_back(x.middleRows(static_cast<Eigen::Index>(b) * rows, rows).cast<double>(), pos0, 5000).cast<float>();
    EXPECT_EQ(y.middleRows(static_cast<Eigen::Index>(b) * rows, rows), want) << b;
  }
  EXPECT_NE(y, x);
}

// ---- the upstream gradient -------------------------------------------------------------------

// The report's two keys: descent raises most the logit of the most negative dlogits and lowers
// most that of the most positive one (they had been taken from one end, the same key twice).
TEST(Backward, TheReportNamesTheKeysAtBothEndsOfTheRow) {
  const Problem p = test::make_problem(8, 4, 4, 1, MaskKind::None, 1.0, 3);
  const Upstream u = upstream_random(0);
  const GradTrace g = cpu_backward(p, u);
  const int query = 5;
  Eigen::Index lo = 0, hi = 0;
  g.dlogits.row(query).minCoeff(&lo);
  g.dlogits.row(query).maxCoeff(&hi);
  ASSERT_NE(lo, hi);
  const std::string text = render_backward(p, g, u, query, Lang::En, Format::Text);
  const auto key_after = [&](const std::string& label) {
    const std::size_t at = text.find(label);
    if (at == std::string::npos) return std::string("(missing)");
    std::size_t b = at + label.size();
    while (b < text.size() && (text[b] == ' ' || text[b] == ':')) ++b;
    return text.substr(b, text.find(' ', b) - b);
  };
  EXPECT_EQ(key_after("logit that gradient descent raises most"), token_label(p.key_tokens(), static_cast<int>(lo))) << text;
  EXPECT_EQ(key_after("logit that gradient descent lowers most"), token_label(p.key_tokens(), static_cast<int>(hi))) << text;
}

// A table of gradients all below 0.5 in size is printed times a power of ten that brings its
// largest to [1, 10) (two decimals keep about three digits), and says so; one that reaches 0.5 is
// printed as it is.
TEST(Backward, TheReportScalesOnlyTablesBelowAHalf) {
  const Problem p = test::make_problem(8, 4, 4, 1, MaskKind::None, 1.0, 3);
  const std::string title = "dO = ∂L/∂O (the upstream gradient)";
  const auto dout_table = [&](float largest) {
    Upstream u;
    u.kind = UpstreamKind::File;
    u.file = "dout.csv";
    u.data = MatrixF::Constant(8, 4, 0.03125f);
    u.data(2, 1) = -largest;
    const std::string text = render_backward(p, cpu_backward(p, u), u, 0, Lang::En, Format::Text);
    const std::size_t at = text.find(title);
    return at == std::string::npos ? std::string("(missing)") : text.substr(at, text.find("\n\n", at) - at);
  };
  const std::string half = dout_table(0.5f);
  EXPECT_EQ(half.substr(0, half.find('\n')), title) << half;
  EXPECT_TRUE(test::contains(half, "-0.50")) << half;
  const std::string below = dout_table(0.4375f);
  EXPECT_EQ(below.substr(0, below.find('\n')), title + "  [values × 1e-1]") << below;
  EXPECT_TRUE(test::contains(below, "-4.38")) << below;
  EXPECT_TRUE(test::contains(below, "0.31")) << below;
  const std::string small = dout_table(0.0625f);
  EXPECT_EQ(small.substr(0, small.find('\n')), title + "  [values × 1e-2]") << small;
  EXPECT_TRUE(test::contains(small, "-6.25")) << small;
}

TEST(Upstream, RandomDoutIsSeededAndNotTheProblemsNumbers) {
  const MatrixF a = random_dout(4, 3, 0), b = random_dout(4, 3, 0), c = random_dout(4, 3, 1);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  // The problem of --seed 0 starts with the same generator: dO is not its Q.
  const Problem p = random_problem(4, 3, 3, 0);
  EXPECT_NE(a, p.q());
}

// A row's upstream (the walk's one-row problem) is the whole upstream's row: a random dO's row comes
// from the same stream without the rows before it (odd d_v: rows start inside a Box-Muller pair).
TEST(Upstream, ARowsUpstreamIsTheWholeOnesRow) {
  const Problem p = random_problem(5, 4, 7, 0, 3);
  const MatrixF whole = random_dout(15, 7, 9);
  Upstream mse;
  mse.kind = UpstreamKind::Mse;
  mse.data = small_matrix(15, 7, 4);
  for (int h = 0; h < 3; ++h)
    for (int i = 0; i < 5; ++i) {
      const Eigen::Index r = h * 5 + i;
      const Upstream a = row_upstream(p, upstream_random(9), h, i);
      EXPECT_EQ(a.kind, UpstreamKind::File);
      EXPECT_EQ(a.data, MatrixF(whole.row(r))) << "head " << h << " query " << i;
      const Upstream b = row_upstream(p, mse, h, i);
      EXPECT_EQ(b.kind, UpstreamKind::Mse);
      EXPECT_EQ(b.data, MatrixF(mse.data.row(r)));
    }
  EXPECT_EQ(row_upstream(p, parse_loss("sum"), 2, 4).kind, UpstreamKind::Sum);
  std::mt19937_64 gen(77);
  MatrixF all;
  fill_standard_normal(all, 1, 11, gen);
  for (int first : {0, 1, 4, 7})
    for (int count : {1, 2, 3}) {
      const std::vector<float> part = standard_normal_range(std::mt19937_64(77), first, count);
      for (int k = 0; k < count; ++k) EXPECT_EQ(part[k], all(0, first + k)) << first << " + " << k;
    }
}

TEST(Upstream, LossesGiveTheirDout) {
  const MatrixF o = small_matrix(3, 2, 1);
  std::optional<double> loss;
  const MatrixF ones = upstream_dout(parse_loss("sum"), o, &loss);
  EXPECT_TRUE((ones.array() == 1.f).all());
  EXPECT_NEAR(*loss, o.cast<double>().sum(), 1e-6);
  Upstream mse;
  mse.kind = UpstreamKind::Mse;
  mse.data = small_matrix(3, 2, 2);
  const MatrixF d = upstream_dout(mse, o, &loss);
  EXPECT_EQ(d, MatrixF(o - mse.data));
  EXPECT_NEAR(*loss, 0.5 * (o - mse.data).cast<double>().squaredNorm(), 1e-6);
  upstream_dout(upstream_random(1), o, &loss);
  EXPECT_FALSE(loss.has_value());
}

TEST(Upstream, BadValuesAreRefusedWithOneClearLine) {
  const Problem p = random_problem(3, 4, 2, 0, 2);  // 2 heads x 3 queries, d_v 2
  Upstream u;
  u.kind = UpstreamKind::File;
  u.file = "d.npy";
  u.data = MatrixF::Zero(3, 2);
  EXPECT_EQ(test::message_of<InputError>([&] { validate_upstream(p, u); }),
            "dO (--dout d.npy) is 3 x 2, but the output O is 6 x 2 (heads·n x d_v: 2 x 3 query rows, 2 columns)");
  u.data = MatrixF::Zero(6, 2);
  u.data(4, 1) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(test::message_of<InputError>([&] { validate_upstream(p, u); }),
            "dO (--dout d.npy) holds nan at row 4, column 1: every value must be finite");
  u.kind = UpstreamKind::Mse;
  u.data(4, 1) = std::numeric_limits<float>::infinity();
  EXPECT_EQ(test::message_of<InputError>([&] { validate_upstream(p, u); }),
            "the target Y (--loss mse:d.npy) holds inf at row 4, column 1: every value must be finite");
  EXPECT_EQ(test::message_of<InputError>([] { parse_loss("l1"); }),
            "unknown loss 'l1': use --loss sum (L = Σ O) or --loss mse:FILE (L = ½ Σ (O − Y)², Y from FILE)");
  EXPECT_EQ(test::message_of<InputError>([] { parse_loss("mse"); }),
            "--loss mse needs its target: --loss mse:FILE (Y, heads·n x d_v, CSV or .npy)");
  EXPECT_NE(test::message_of<InputError>([] { cpu_backward(random_problem(3, 4, 2, 0), upstream_file("/nonexistent/d.npy")); }),
            "");
}

}  // namespace
}  // namespace attnlab

namespace attnlab {

// Under a causal mask query 0 sees key 0 alone: its weight is 1 whatever the logits, so its
// description says no gradient reaches its Q through the scores; query 1 sees two keys and gets
// the row's account instead. Both languages.
TEST(Backward, ACausalFirstQuerySeesOneKeyOnlyAndItsDescriptionSaysSo) {
  Problem p = demo_problem();
  p.mask = MaskKind::Causal;
  const Upstream u = upstream_random(3);
  const GradTrace g = cpu_backward(p, u);
  EXPECT_NEAR(g.dlogits(0, 0), 0.f, 1e-6) << "a lone key's dlogits";
  EXPECT_NE(describe_backward(p, g, u, 0, Lang::En).find("sees one key only"), std::string::npos);
  EXPECT_NE(describe_backward(p, g, u, 0, Lang::Zh).find("只看见一个键"), std::string::npos);
  EXPECT_EQ(describe_backward(p, g, u, 1, Lang::En).find("sees one key only"), std::string::npos);
  EXPECT_NE(describe_backward(p, g, u, 1, Lang::En).find("dlogits = P ∘ (dP − D)"), std::string::npos);
}

}  // namespace attnlab
