// The fused CPU backward (cpu/fused_backward.h) against the fp64 staged backward of the same
// problem and dO. Its bound, per gradient: the largest entry bound (2E) that core/backward_check.h
// derives for the fp32 staged backward of that problem. The fused kernel computes the same
// formulas in fp32 from the same inputs (P recomputed from the forward's m and l rather than kept:
// an error of the same kind as the staged softmax's, a few ulp relative); the γ terms of the bound
// hold for any order of summation. So the fused gradients must sit within the staged one's
// bound, and the staged check itself must pass (otherwise the bound proves nothing).
#include "cpu/backward.h"
#include "cpu/fused_backward.h"

#include "core/backward_check.h"
#include "core/modify.h"
#include "cpu/chains.h"
#include "cpu/cpu_backend.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace attnlab {
namespace {

struct Case {
  std::string name;
  std::function<void(Problem&)> apply;
};

MatrixF random_bias(int rows, int cols, std::uint64_t seed) {
  return random_problem(rows, cols, 1, seed).q() * 0.5f;
}

std::vector<Case> cases() {
  return {
      {"none", [](Problem&) {}},
      {"causal", [](Problem& p) { p.mask = MaskKind::Causal; }},
      {"custom mask", [](Problem& p) {
         p.mask = MaskKind::Custom;
         p.edit().custom_mask = test::pattern_mask(p.n());
       }},
      {"scale 0.3", [](Problem& p) { p.scale = 0.3; }},
      {"T 0.001", [](Problem& p) { p.temperature = 1e-3; }},
      {"T 50", [](Problem& p) { p.temperature = 50; }},
      {"rope", [](Problem& p) { p.mods.rope_theta = 10000; }},
      {"alibi", [](Problem& p) { p.mods.alibi = true; }},
      {"softcap", [](Problem& p) { p.mods.softcap = 0.7; }},
      {"bias per head", [](Problem& p) { p.edit().bias = random_bias(p.heads * p.n(), p.m(), 6); }},
      {"causal window", [](Problem& p) {
         p.mask = MaskKind::Causal;
         p.mods.window = 37;
       }},
      {"prefix", [](Problem& p) { p.mods.prefix = 41; }},
      {"documents", [](Problem& p) {
         std::vector<int>& d = p.edit().documents;
         for (int j = 0; j < p.m(); ++j) d.push_back(j < 70 ? 0 : j < 150 ? 1 : 2);
       }},
      {"all of them, T 0.2", [](Problem& p) {
         p.mods.rope_theta = 10000;
         p.mods.alibi = true;
         p.mods.softcap = 3;
         p.edit().bias = random_bias(p.n(), p.m(), 7);
         p.mask = MaskKind::Causal;
         p.mods.window = 90;
         p.temperature = 0.2;
       }},
  };
}

const GradCheck& named(const BackwardCheck& c, const std::string& name) {
  for (const GradCheck& g : c.grads)
    if (g.name == name) return g;
  static const GradCheck none;
  ADD_FAILURE() << "no check named " << name;
  return none;
}

double max_abs_diff(const MatrixF& a, const MatrixD& b) {
  EXPECT_EQ(a.rows(), b.rows());
  EXPECT_EQ(a.cols(), b.cols());
  if (a.rows() != b.rows() || a.cols() != b.cols()) return INFINITY;
  return (a.cast<double>() - b).cwiseAbs().maxCoeff();
}

// The fused gradients of p within the staged fp32 backward's bound, for dO from u.
void expect_within_bound(const Problem& p, const Upstream& u, const std::string& what) {
  const GradTraceD ref = reference_backward_fp64(p, u);
  const BackwardCheck staged = check_backward(p, u, cpu_backward(p, u), ref);
  ASSERT_TRUE(staged.pass) << what << ": the staged check fails, its bound proves nothing\n"
                           << render_backward_check_text(staged, Lang::En);
  const GradTrace f = cpu_fused_backward(p, u);
  EXPECT_FALSE(f.forward.has_stages) << what;
  EXPECT_EQ(f.dlogits.size(), 0) << what << ": the fused backward forms no (n, m) matrix";
  const struct {
    const char* name;
    const MatrixF& got;
    const MatrixD& want;
  } grads[] = {{"dV", f.dv, ref.dv}, {"dQ", f.dq, ref.dq}, {"dK", f.dk, ref.dk}};
  for (const auto& g : grads) {
    const double err = max_abs_diff(g.got, g.want), bound = named(staged, g.name).max_bound;
    EXPECT_LE(err, bound) << what << ": " << g.name << " max |fused − fp64| " << err << ", bound " << bound
                          << ", scale " << g.want.cwiseAbs().maxCoeff();
  }
  EXPECT_LE(std::abs(f.dT - ref.dT), named(staged, "dT").max_bound)
      << what << ": dT " << f.dT << " against " << ref.dT;
  EXPECT_LE((f.D.cast<double>() - ref.D).cwiseAbs().maxCoeff(), named(staged, "D").max_bound) << what;
}

TEST(FusedBackward, EveryMaskAndModificationWithinTheStagedBound) {
  for (const Case& c : cases()) {
    // n not a multiple of the blocks, two heads, d_k != d_v.
    Problem p = test::make_problem(203, 32, 24, 2, MaskKind::None, 0.9, 3);
    c.apply(p);
    ASSERT_NO_THROW(validate(p)) << c.name;
    expect_within_bound(p, upstream_random(11), c.name);
  }
}

TEST(FusedBackward, GroupedHeadsAndDecodeShapes) {
  // 4 query heads over 2 key/value heads; 3 queries at the end of 300 keys, causal.
  Problem p = random_problem(3, 300, 16, 16, 9, 4, 2);
  expect_within_bound(p, upstream_random(2), "decode, grouped");
  p.mask = MaskKind::Causal;
  expect_within_bound(p, upstream_random(2), "decode, grouped, causal");
  Problem q = random_problem(130, 130, 64, 64, 4, 8, 1);
  q.mask = MaskKind::Causal;
  q.mods.softcap = 2;
  expect_within_bound(q, upstream_random(3), "8 heads over 1, causal, softcap");
}

TEST(FusedBackward, LossesAndOddHeadSizes) {
  Problem p = test::make_problem(77, 3, 5, 1, MaskKind::Causal, 0.85, 8);
  Upstream sum;
  sum.kind = UpstreamKind::Sum;
  expect_within_bound(p, sum, "sum loss, d_k 3, d_v 5");
  Problem q = test::make_problem(300, 128, 40, 1, MaskKind::None, 1.0, 2);
  expect_within_bound(q, upstream_random(5), "d_k 128, d_v 40");
}

TEST(FusedBackward, KeysNoQuerySeesGetExactlyZeroGradient) {
  // A window of 5 over 40 queries at the end of 200 keys: keys before 35 − 4 are seen by nobody.
  Problem p = random_problem(40, 200, 8, 8, 1, 1, 1);
  p.mask = MaskKind::Causal;
  p.mods.window = 5;
  const GradTrace f = cpu_fused_backward(p, upstream_random(1));
  const int first_seen = p.causal_offset() - p.mods.window + 1;
  ASSERT_GT(first_seen, 0);
  EXPECT_EQ(f.dk.topRows(first_seen).cwiseAbs().maxCoeff(), 0.f);
  EXPECT_EQ(f.dv.topRows(first_seen).cwiseAbs().maxCoeff(), 0.f);
  EXPECT_GT(f.dk.row(first_seen).cwiseAbs().maxCoeff(), 0.f);
}

// On a tile the mask cuts (the diagonal's), the products run only over the pairs the rule's
// intervals let through: the terms left out are exact zeros, so dK, dV and dT are those of the
// same pairs given as a mask file (whose tiles run whole), bit for bit; dQ up to its order.
TEST(FusedBackward, ACutTilesProductsLeaveOutOnlyZeroTerms) {
  for (const auto& [window, prefix] : {std::pair{0, 0}, {37, 0}, {0, 41}, {90, 130}}) {
    SCOPED_TRACE("window " + std::to_string(window) + ", prefix " + std::to_string(prefix));
    Problem rule = test::make_problem(300, 24, 16, 2, MaskKind::Causal, 0.7, 9);
    rule.mods.window = window;
    rule.mods.prefix = prefix;
    Problem file = rule;
    file.mods.window = file.mods.prefix = 0;
    file.mask = MaskKind::Custom;
    MatrixF mask = MatrixF::Constant(300, 300, -std::numeric_limits<float>::infinity());
    const MaskRule r = mask_rule(rule);
    for (int i = 0; i < 300; ++i) {
      int lo, hi;
      r.interval(i, lo, hi);
      mask.row(i).segment(lo, hi - lo).setZero();
    }
    file.edit().custom_mask = mask;
    const GradTrace a = cpu_fused_backward(rule, upstream_random(3)), b = cpu_fused_backward(file, upstream_random(3));
    EXPECT_TRUE(a.dk == b.dk);
    EXPECT_TRUE(a.dv == b.dv);
    EXPECT_EQ(a.dT, b.dT);
    EXPECT_LT((a.dq - b.dq).cwiseAbs().maxCoeff(), 1e-5f * b.dq.cwiseAbs().maxCoeff());
  }
}

TEST(FusedBackward, ForwardStatsGiveTheSameOutputAndPRowsSumToOne) {
  Problem p = test::make_problem(150, 16, 16, 2, MaskKind::Causal, 0.5, 4);
  p.mods.alibi = true;
  Trace plain, with;
  cpu::RowStats stats;
  cpu::fused_into(p, plain);
  cpu::fused_into(p, with, &stats);
  EXPECT_EQ(plain.output, with.output);  // keeping m and l changes nothing
  ASSERT_EQ(stats.m.size(), 300u);
  // P = exp((s − m)·scale) / l from the staged run's modified scores sums to 1 in every row.
  RunOptions o;
  o.keep_stages = true;
  Trace staged;
  cpu::staged_into(p, o, staged);
  const MatrixF& last = staged.capped.size() ? staged.capped : staged.biased.size() ? staged.biased : staged.scaled;
  for (int r = 0; r < 300; r += 37) {
    double sum = 0;
    for (int j = 0; j < p.m(); ++j)
      if (std::isfinite(staged.mask(r % p.n(), j)))
        sum += std::exp((static_cast<double>(last(r, j)) - stats.m[r]) * stats.scale) / stats.l[r];
    EXPECT_NEAR(sum, 1.0, 1e-5) << "row " << r;
  }
}

}  // namespace
}  // namespace attnlab
