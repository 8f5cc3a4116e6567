// core/output_range.h without any backend: which rows' scores overflow fp32 (or bf16), and
// output_in_range_after around a kernel that, like the CUDA ones, leaves a row not finite without
// saying why. The stand-in kernel here keeps an unnormalised fp32 sum of V as the online softmax
// does, so a V near fp32's largest values overflows it where the output fits.
#include "core/output_range.h"

#include "core/messages.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

namespace attnlab {
namespace {

constexpr float kLargest = std::numeric_limits<float>::max();

// The output of every row: weights exp((s - max) * scale) in double, their sum l, and
// acc = Σ_j p_j V_j summed in fp32 before acc / l (a causal mask honoured; no other mask).
// A score that overflows fp32 makes the row NaN; `nan_row` >= 0 makes that row NaN whatever V is.
MatrixF unnormalised_output(const Problem& p, int nan_row = -1) {
  const int n = p.n(), m = p.m();
  MatrixF out(static_cast<Eigen::Index>(p.heads) * n, p.d_v());
  const double scale = p.scale_value() / p.temperature;
  for (int h = 0; h < p.heads; ++h) {
    for (int i = 0; i < n; ++i) {
      const Eigen::Index r = static_cast<Eigen::Index>(h) * n + i;
      const int keys = p.mask == MaskKind::Causal ? i + p.causal_offset() + 1 : m;
      std::vector<float> s(keys);
      float top = -kLargest;
      for (int j = 0; j < keys; ++j) {
        s[j] = p.q().row(r).dot(p.k().row(static_cast<Eigen::Index>(p.kv_head(h)) * m + j));
        top = std::max(top, s[j]);
      }
      Eigen::RowVectorXf acc = Eigen::RowVectorXf::Zero(p.d_v());
      double l = 0;
      for (int j = 0; j < keys; ++j) {
        const double w = std::exp((static_cast<double>(s[j]) - top) * scale);
        l += w;
        acc += static_cast<float>(w) * p.v().row(static_cast<Eigen::Index>(p.kv_head(h)) * m + j);
      }
      out.row(r) = acc / static_cast<float>(l);
      if (!std::isfinite(top) || r == nan_row) out.row(r).setConstant(std::numeric_limits<float>::quiet_NaN());
    }
  }
  return out;
}

// The output in double, from the same weights (the exact answer the scaled run must give).
MatrixD exact_output(const Problem& p) {
  const int n = p.n(), m = p.m();
  MatrixD out(static_cast<Eigen::Index>(p.heads) * n, p.d_v());
  const double scale = p.scale_value() / p.temperature;
  for (int h = 0; h < p.heads; ++h)
    for (int i = 0; i < n; ++i) {
      const Eigen::Index r = static_cast<Eigen::Index>(h) * n + i;
      Eigen::VectorXd s(m);
      for (int j = 0; j < m; ++j)
        s(j) = p.q().row(r).cast<double>().dot(p.k().row(static_cast<Eigen::Index>(p.kv_head(h)) * m + j).cast<double>());
      const Eigen::VectorXd w = ((s.array() - s.maxCoeff()) * scale).exp();
      out.row(r) = (w.transpose() * p.v().middleRows(static_cast<Eigen::Index>(p.kv_head(h)) * m, m).cast<double>()) / w.sum();
    }
  return out;
}

Problem small(int n = 6) { return test::make_problem(n, 4, 3, 2, MaskKind::None, 1.0, 17); }

TEST(OutputRange, AScoreBeyondFp32IsFoundInItsRowOnly) {
  Problem p = small();
  p.edit().q.row(6 + 2) *= 1e37f;  // head 1, query 2
  p.edit().k *= 1e3f;
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 6; ++i)
      EXPECT_EQ(row_scores_overflow(p, h, i, Precision::FP32), h == 1 && i == 2) << h << " " << i;
}

TEST(OutputRange, AKeyThatTheMaskHidesDoesNotCount) {
  Problem p = small();
  p.mask = MaskKind::Causal;
  p.edit().k.row(6 + 5) *= 1e38f;  // head 1's last key: only its last query sees it
  p.edit().q.row(6 + 4).setConstant(10.f);
  p.edit().q.row(6 + 5).setConstant(10.f);
  EXPECT_FALSE(row_scores_overflow(p, 1, 4, Precision::FP32));
  EXPECT_TRUE(row_scores_overflow(p, 1, 5, Precision::FP32));
}

TEST(OutputRange, TermsThatCancelStillOverflowTheirSum) {
  // q · k = 3e38 - 3e38 = 0 in exact arithmetic; an fp32 sum of the terms in order overflows.
  Problem p = test::make_problem(2, 2, 1, 1, MaskKind::None, 1.0, 3);
  p.edit().q << 3e19f, 3e19f, 1.f, 1.f;
  p.edit().k << 1e19f, -1e19f, 1.f, 1.f;
  EXPECT_TRUE(row_scores_overflow(p, 0, 0, Precision::FP32));
  EXPECT_FALSE(row_scores_overflow(p, 0, 1, Precision::FP32));
}

TEST(OutputRange, Bf16KeepsAMarginForItsRoundedInputs) {
  // One term at 0.996 of fp32's largest value: fp32 holds it; the bf16 rounding of its inputs may not.
  Problem p = test::make_problem(1, 1, 1, 1, MaskKind::None, 1.0, 3);
  p.edit().q(0, 0) = 0.996f * kLargest;
  p.edit().k(0, 0) = 1.f;
  EXPECT_FALSE(row_scores_overflow(p, 0, 0, Precision::FP32));
  EXPECT_TRUE(row_scores_overflow(p, 0, 0, Precision::BF16));
}

TEST(OutputRange, AScoreModThatLeavesFp32Counts) {
  Problem p = test::make_problem(2, 2, 1, 1, MaskKind::None, 1.0, 3);
  p.edit().bias = MatrixF::Constant(2, 2, 0.f);
  p.edit().bias(1, 0) = 3.3e38f;
  p.edit().q.setConstant(1e19f);
  p.edit().k.setConstant(1e19f);  // scaled scores 2e38 / sqrt(2): finite, but not with the bias
  EXPECT_FALSE(row_scores_overflow(p, 0, 0, Precision::FP32));
  EXPECT_TRUE(row_scores_overflow(p, 0, 1, Precision::FP32));
  p.mods.softcap = 30;  // the cap brings every score back into range
  EXPECT_FALSE(row_scores_overflow(p, 0, 1, Precision::FP32));
}

// output_in_range_after around the stand-in kernel, counting its runs.
struct Counted {
  int runs = 0;
  int nan_row = -1;
  Trace t;
  void operator()(const Problem& p, Precision precision = Precision::FP32) {
    output_in_range_after(p, precision, t, [&](const Problem& q, Trace& out) {
      ++runs;
      out.output = unnormalised_output(q, nan_row);
    });
  }
};

// A V of positive values up to 3e38: the sums of 40 keys of comparable weight leave fp32.
Problem huge_values() {
  Problem p = small(40);
  p.edit().v = p.v().cwiseAbs() * (3e38f / p.v().cwiseAbs().maxCoeff());
  return p;
}

TEST(OutputRange, AnOrdinaryRunIsRunOnceAndKeptAsItIs) {
  const Problem p = small(40);
  Counted c;
  c(p);
  EXPECT_EQ(c.runs, 1);
  EXPECT_TRUE(c.t.output == unnormalised_output(p));
}

TEST(OutputRange, AHugeVIsComputedOnVScaledAndMultipliedBack) {
  const Problem p = huge_values();
  ASSERT_TRUE(p.v().allFinite());
  ASSERT_GE(first_row_not_finite(unnormalised_output(p)), Eigen::Index{0}) << "the stand-in must overflow";
  Counted c;
  c(p);
  EXPECT_EQ(c.runs, 2);
  ASSERT_LT(first_row_not_finite(c.t.output), Eigen::Index{0});
  const MatrixD exact = exact_output(p);
  EXPECT_LE((c.t.output.cast<double>() - exact).cwiseAbs().maxCoeff() / exact.cwiseAbs().maxCoeff(), 1e-5);
  // A power of two: the scaled run's output multiplied back, to the bit.
  const int e = values_exponent(p);
  EXPECT_GE(e, 1);
  EXPECT_TRUE(c.t.output == unnormalised_output(with_values_scaled(p, e)) * std::ldexp(1.f, e));
}

TEST(OutputRange, ARowWhoseScoresOverflowIsRefusedByName) {
  Problem p = huge_values();
  p.edit().q.row(40 + 2) *= 1e38f;  // head 1, query 2
  Counted c;
  const std::string what = test::message_of<InputError>([&] { c(p, Precision::BF16); });
  // Head 0's rows overflow only in their sums of V: computed on V scaled; head 1's row 2 is named.
  EXPECT_EQ(what, "QKᵀ overflows in head 1, query row 2 (inputs too large for bf16)");
  EXPECT_EQ(c.runs, 2);
}

TEST(OutputRange, ARowStillNotFiniteOnScaledValuesOverflowedInItsLogits) {
  Counted c;
  c.nan_row = 40 + 7;  // head 1, query 7, whatever V is
  std::string what = test::message_of<InputError>([&] { c(small(40)); });
  EXPECT_TRUE(test::contains(what, "the logits (scaled scores / temperature) overflow in head 1, query row 7")) << what;
  EXPECT_EQ(c.runs, 2);
}

TEST(OutputRange, AnOutputBeyondThePrecisionAfterScalingBackIsRefused) {
  MatrixF out(4, 2);
  out << 1, 1, 1, 1, 1, 1, 1e38f, 1;  // row 3: head 1, query 1 of n = 2
  const std::string what = test::message_of<InputError>([&] { scale_values_back(out, 2, 2, Precision::FP32); });
  EXPECT_EQ(what, "the output overflows fp32 in head 1, query row 1 (its values do not fit fp32)");
}

}  // namespace
}  // namespace attnlab
