// The fused CPU kernel (cpu/fused.cpp) against the fp64 reference chain: shapes, masks and
// temperatures of the parity sweep, shapes at the edges of its query/key tiles and blocks, causal
// block skipping, masked keys that weigh exactly nothing, rows masked through the first key
// blocks, determinism, huge logits, the demo.
#include "core/gcc12_avx512.h"  // first: see there

#include "cpu/cpu_backend.h"
#include "cpu/online_softmax.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace attnlab {
namespace {

// max |out - ref| / max |ref| over the whole output.
double rel_err(const MatrixF& out, const MatrixD& ref) {
  const double scale = std::max(ref.cwiseAbs().maxCoeff(), 1e-300);
  return (out.cast<double>() - ref).cwiseAbs().maxCoeff() / scale;
}

using test::make_problem;
using test::fp32_tolerance;

// The kernels' exp (cpu/online_softmax.h exp2_nonpositive, in every fused kernel, the decode
// kernel and the walks) lane by lane against the same steps written out in scalar fp32: the same
// bits on every ISA's path (on AVX-512 2^n is applied by vscalefps instead of the exponent-field
// multiply), exactly 0 below -126 and for -inf, NaN kept, and within 2 ulp of 2^t in double.
float exp2_steps(float t) {
  const float n = std::nearbyint(t), r = t - n;
  float y = std::fma(1.5461444855e-4f, r, 1.3400427997e-3f);
  for (const float c : {9.6180569381e-3f, 5.5503271520e-2f, 2.4022650719e-1f, 6.9314718246e-1f, 1.f})
    y = std::fma(y, r, c);
  if (t < -126.f) return 0.f;
  return y * std::ldexp(1.f, static_cast<int>(n));
}

TEST(FusedCpu, Exp2IsThePolynomialStepsExactlyZeroBelowFltMinAndNaNKept) {
  using namespace cpu::online;
  std::vector<float> xs = {0.f, -0.f, -1e-30f, -0.5f, -0.49999997f, -0.50000006f, -1.5f, -1.f, -20.f, -125.5f,
                           -125.99999f, -126.f, -126.00001f, -126.5f, -127.f, -200.f, -1e4f,
                           -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
  for (float x = 0.f; x > -130.f; x -= 0.001373f) xs.push_back(x);
  while (xs.size() % kLanes != 0) xs.push_back(-1.f);
  int checked = 0;
  for (std::size_t i = 0; i < xs.size(); i += kLanes) {
    alignas(64) float out[kLanes];
    ei::pstoreu(out, exp2_nonpositive(ei::ploadu<Packet>(xs.data() + i)));
    for (int l = 0; l < kLanes; ++l) {
      const float x = xs[i + l], e = out[l];
      SCOPED_TRACE(x);
      if (std::isnan(x)) {
        EXPECT_TRUE(std::isnan(e));
        continue;
      }
      if (x < -126.f) {
        EXPECT_EQ(e, 0.f);
        EXPECT_FALSE(std::signbit(e));
        continue;
      }
#if defined(__FMA__)  // the packets' multiply-adds are fused exactly where std::fma is
      const float want = exp2_steps(x);
      EXPECT_EQ(std::memcmp(&e, &want, sizeof e), 0) << e << " vs " << want;
#endif
      const double exact = std::exp2(static_cast<double>(x));
      const float ef = static_cast<float>(exact);
      const double ulp = static_cast<double>(std::nextafter(ef, 2.f)) - ef;
      EXPECT_LE(std::abs(e - exact), 2.0 * ulp);
      ++checked;
    }
  }
  EXPECT_GT(checked, 90000);
}

// The kernels' transposes (Q into its block's Qᵀ, acc into O, a bias into query lanes): every
// element in its place, for squares of whole packets, the ragged edges and a single row or column.
TEST(FusedCpu, TransposeIntoPutsEveryElementInItsPlace) {
  using namespace cpu::online;
  for (const auto& [rows, cols] : std::vector<std::pair<int, int>>{{16, 16}, {64, 64}, {37, 70}, {1, 33}, {48, 1}, {5, 7}}) {
    SCOPED_TRACE(std::to_string(rows) + " x " + std::to_string(cols));
    const Index lds = cols + 3, ldd = rows + 5;
    std::vector<float> src(static_cast<std::size_t>(rows) * lds), dst(static_cast<std::size_t>(cols) * ldd, -1.f);
    for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i);
    transpose_into(src.data(), lds, rows, cols, dst.data(), ldd);
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) ASSERT_EQ(dst[c * ldd + r], src[r * lds + c]) << r << ", " << c;
    for (int c = 0; c < cols; ++c)
      for (Index r = rows; r < ldd; ++r) ASSERT_EQ(dst[c * ldd + r], -1.f);  // past the rows: untouched
    // With a scale per source column (the fused kernel's 1 / l per query): dst(c, r) = src(r, c) * s[c],
    // one fp32 multiply, in the squares and at the edges alike.
    std::vector<float> scale(static_cast<std::size_t>(cols));
    for (int c = 0; c < cols; ++c) scale[c] = 1.f / static_cast<float>(c + 3);
    transpose_into(src.data(), lds, rows, cols, dst.data(), ldd, /*stream=*/false, scale.data());
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) ASSERT_EQ(dst[c * ldd + r], src[r * lds + c] * scale[c]) << r << ", " << c;
  }
}

// The tolerance's max |s| above 2^26 cells per head comes from a bound (tests/test_util.h): it
// must not be below the exact max, nor so loose that the tolerance stops meaning fp32. The exact
// max is taken here in row blocks, without the (n, m) matrix the helper avoids.
TEST(FusedCpu, LongSequenceToleranceBoundsTheExactOne) {
  for (const int d : {8, 64}) {
    const Problem p = make_problem(8200, d, 4, 1, MaskKind::None, 1.0, 21);
    const MatrixF qa = p.q().cwiseAbs(), ka = p.k().cwiseAbs();
    double smax = 0;
    for (Eigen::Index r = 0; r < qa.rows(); r += 512) {
      const Eigen::Index rows = std::min<Eigen::Index>(512, qa.rows() - r);
      smax = std::max(smax, static_cast<double>((qa.middleRows(r, rows) * ka.transpose()).maxCoeff()));
    }
    const double exact = 1e-5 + 4.0 * std::ldexp(1.0, -24) / std::sqrt(static_cast<double>(d)) * smax;
    const double tol = fp32_tolerance(p);
    EXPECT_GE(tol, exact) << "d " << d;
    EXPECT_LE(tol - 1e-5, 4.0 * (exact - 1e-5)) << "d " << d;
  }
}

TEST(FusedCpu, MatchesFp64OverTheParitySweep) {
  std::uint64_t seed = 1;
  int cases = 0;
  double worst = 0;
  for (int n : {1, 5, 31, 32, 33, 257})
    for (int d_k : {3, 16, 64})
      for (int d_v : {2, 64})
        for (MaskKind mask : {MaskKind::None, MaskKind::Causal, MaskKind::Custom})
          for (double t : {1e-3, 0.85, 50.0})
            for (int heads : {1, 3}) {
              const Problem p = make_problem(n, d_k, d_v, heads, mask, t, seed++);
              SCOPED_TRACE("n " + std::to_string(n) + " d_k " + std::to_string(d_k) + " d_v " +
                           std::to_string(d_v) + " mask " + std::string(to_string(mask)) +
                           " T " + std::to_string(t) + " heads " + std::to_string(heads));
              const Trace f = cpu_fused(p);
              const TraceD ref = reference_fp64(p);
              ASSERT_EQ(f.output.rows(), static_cast<Eigen::Index>(heads) * n);
              ASSERT_EQ(f.output.cols(), d_v);
              ASSERT_TRUE(f.output.allFinite());
              const double err = rel_err(f.output, ref.output);
              EXPECT_LE(err, fp32_tolerance(p));
              if (t >= 0.85) worst = std::max(worst, err);
              ++cases;
            }
  EXPECT_EQ(cases, 648);
  // At moderate temperatures the plain 1e-5 of the issue holds with room to spare.
  EXPECT_LE(worst, 1e-5);
  RecordProperty("worst_rel_err_T_ge_0_85", std::to_string(worst));
}

TEST(FusedCpu, LargeProblemsAcrossManyBlocksAndThreads) {
  for (MaskKind mask : {MaskKind::None, MaskKind::Causal}) {
    const Problem p = make_problem(700, 64, 64, 2, mask, 1.0, 77);
    const double err = rel_err(cpu_fused(p).output, reference_fp64(p).output);
    EXPECT_LE(err, 1e-5) << to_string(mask);
  }
  // Unequal query and key counts (no causal mask then).
  Problem p = random_problem(300, 32, 16, 5);
  p.edit().k = random_problem(517, 32, 16, 6).k();
  p.edit().v = random_problem(517, 32, 16, 7).v();
  p.edit().key_tokens = index_tokens(517);
  EXPECT_LE(rel_err(cpu_fused(p).output, reference_fp64(p).output), 1e-5);
}

// Sizes on both sides of the kernel's tile (16 or 32 queries, 6 or 8 keys / features) and block
// (64 queries, 128 keys) edges, odd head dims, several heads: every partial tile and block path.
TEST(FusedCpu, MatchesFp64AtTileAndBlockEdges) {
  std::uint64_t seed = 500;
  for (int n : {15, 17, 63, 65, 127, 129, 130, 257})
    for (auto [d_k, d_v] : {std::pair{1, 1}, std::pair{7, 9}, std::pair{128, 128}})
      for (MaskKind mask : {MaskKind::None, MaskKind::Causal, MaskKind::Custom}) {
        const Problem p = make_problem(n, d_k, d_v, 2, mask, 0.85, seed++);
        SCOPED_TRACE("n " + std::to_string(n) + " d_k " + std::to_string(d_k) + " d_v " +
                     std::to_string(d_v) + " mask " + std::string(to_string(mask)));
        const Trace f = cpu_fused(p);
        ASSERT_TRUE(f.output.allFinite());
        EXPECT_LE(rel_err(f.output, reference_fp64(p).output), fp32_tolerance(p));
      }
}

// Keys masked for every query weigh exactly 0: changing their K and V changes no output bit.
TEST(FusedCpu, MaskedKeysContributeExactlyNothing) {
  const int n = 300;
  Problem p = make_problem(n, 32, 16, 2, MaskKind::Custom, 1.0, 31);
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<int> blocked;
  for (int j = 3; j < n; j += 7) blocked.push_back(j);  // in every key block, first and last too
  blocked.push_back(n - 1);
  p.edit().custom_mask.setZero();
  for (int j : blocked) p.edit().custom_mask.col(j).setConstant(-inf);
  const MatrixF before = cpu_fused(p).output;
  for (int h = 0; h < p.heads; ++h)
    for (int j : blocked) {
      p.edit().k.row(h * n + j).setConstant(3.f);
      p.edit().v.row(h * n + j).setConstant(-1e6f);
    }
  const MatrixF after = cpu_fused(p).output;
  EXPECT_EQ((before - after).cwiseAbs().maxCoeff(), 0.f);
  EXPECT_LE(rel_err(after, reference_fp64(p).output), fp32_tolerance(p));
}

// Rows whose only visible keys lie in the last key block: the blocks before are fully masked for
// them (running max -inf), which must give neither NaN nor any weight, on every ISA.
TEST(FusedCpu, RowsMaskedThroughTheFirstKeyBlocksStayExact) {
  const int n = 200, m = 700;
  Problem p = random_problem(n, 16, 8, 41);
  p.edit().k = random_problem(m, 16, 8, 42).k();
  p.edit().v = random_problem(m, 16, 8, 43).v();
  p.edit().key_tokens = index_tokens(m);
  p.mask = MaskKind::Custom;
  p.edit().custom_mask = MatrixF::Zero(n, m);
  const float inf = std::numeric_limits<float>::infinity();
  for (int i = 0; i < n; i += 2) p.edit().custom_mask.row(i).head(m - 1 - i % 5).setConstant(-inf);
  const Trace f = cpu_fused(p);
  ASSERT_TRUE(f.output.allFinite());
  EXPECT_LE(rel_err(f.output, reference_fp64(p).output), 1e-5);
  // A row that sees one key only is exactly that key's V row.
  for (int i = 0; i < n; i += 10) {
    if (i % 5 != 0) continue;
    EXPECT_EQ((f.output.row(i) - p.v().row(m - 1)).cwiseAbs().maxCoeff(), 0.f) << "row " << i;
  }
}

// Temperatures that push most weights far below fp32's smallest normal (their exp is flushed to
// exactly 0) and one that makes the softmax nearly uniform, across several key blocks.
TEST(FusedCpu, ExtremeTemperaturesAcrossKeyBlocks) {
  for (double t : {1e-4, 1e-2, 1e3}) {
    for (MaskKind mask : {MaskKind::None, MaskKind::Causal}) {
      const Problem p = make_problem(400, 64, 32, 1, mask, t, 60);
      const Trace f = cpu_fused(p);
      ASSERT_TRUE(f.output.allFinite()) << t;
      EXPECT_LE(rel_err(f.output, reference_fp64(p).output), fp32_tolerance(p))
          << "T " << t << " " << to_string(mask);
    }
  }
}

TEST(FusedCpu, TraceIsOutputOnly) {
  const Problem p = make_problem(40, 16, 8, 2, MaskKind::None, 1.0, 3);
  const Trace t = cpu_fused(p);
  EXPECT_EQ(t.backend, "cpu");
  EXPECT_EQ(t.variant, Variant::Fused);
  EXPECT_EQ(t.precision, Precision::FP32);
  EXPECT_FALSE(t.has_stages);
  EXPECT_EQ(t.weights.size(), 0);
  EXPECT_EQ(t.scores.size(), 0);
  EXPECT_EQ(t.output.rows(), 80);
  EXPECT_EQ(t.output.cols(), 8);
}

// Skipping the key blocks above the diagonal must give what masking them gives: a fully masked
// block contributes a correction of exactly 1 and weights of exactly 0. (Not bit-for-bit: the
// vectorised row sums split a shorter diagonal block differently.)
TEST(FusedCpu, CausalSkipEqualsExplicitTriangularMask) {
  Problem causal = make_problem(900, 32, 24, 2, MaskKind::Causal, 0.85, 11);
  Problem custom = causal;
  custom.mask = MaskKind::Custom;
  custom.edit().custom_mask = mask_matrix(causal);
  const MatrixF a = cpu_fused(causal).output;
  const MatrixF b = cpu_fused(custom).output;
  EXPECT_LE((a - b).cwiseAbs().maxCoeff(), 1e-6f * a.cwiseAbs().maxCoeff());
}

// A causal row never reads the future: changing the last key and value changes only the last row.
TEST(FusedCpu, CausalRowsIgnoreFutureKeys) {
  Problem p = make_problem(333, 16, 8, 1, MaskKind::Causal, 1.0, 21);
  const MatrixF before = cpu_fused(p).output;
  p.edit().k.row(332).setConstant(5.f);
  p.edit().v.row(332).setConstant(-7.f);
  const MatrixF after = cpu_fused(p).output;
  EXPECT_EQ((before.topRows(332) - after.topRows(332)).cwiseAbs().maxCoeff(), 0.f);
  EXPECT_NE(before.row(332), after.row(332));
}

TEST(FusedCpu, Deterministic) {
  const Problem p = make_problem(513, 64, 64, 3, MaskKind::Causal, 1.0, 5);
  EXPECT_EQ((cpu_fused(p).output - cpu_fused(p).output).cwiseAbs().maxCoeff(), 0.f);
}

// Logits of order 1e7: the running max keeps every exp argument <= 0, so nothing overflows, and
// each row is the V row of its arg-max key wherever that arg-max is unambiguous.
TEST(FusedCpu, HugeLogitsStayFiniteAndPickTheArgmax) {
  Problem p = make_problem(200, 16, 4, 1, MaskKind::None, 1e-3, 8);
  p.edit().q *= 1000.f;
  const Trace f = cpu_fused(p);
  ASSERT_TRUE(f.output.allFinite());
  const MatrixD s = p.q().cast<double>() * p.k().cast<double>().transpose();
  int checked = 0;
  for (int i = 0; i < 200; ++i) {
    Eigen::Index best = 0;
    const double top = s.row(i).maxCoeff(&best);
    double second = -1e300;
    for (int j = 0; j < 200; ++j)
      if (j != best) second = std::max(second, s(i, j));
    // gap in logits = (top - second) / (sqrt(16) * 1e-3); beyond 100 the runner-up weighs < e^-100
    if ((top - second) / 4e-3 < 100) continue;
    ++checked;
    EXPECT_LE((f.output.row(i) - p.v().row(best)).cwiseAbs().maxCoeff(), 1e-6f) << "row " << i;
  }
  EXPECT_GT(checked, 150);
}

TEST(FusedCpu, OverflowingScoresAreRefusedNotNaN) {
  Problem p = make_problem(10, 4, 2, 1, MaskKind::None, 1.0, 9);
  p.edit().q *= 1e20f;
  p.edit().k *= 1e20f;
  EXPECT_THROW(cpu_fused(p), InputError);
}

TEST(FusedCpu, ValidatesFirst) {
  Problem p = make_problem(10, 4, 2, 1, MaskKind::None, 1.0, 9);
  p.temperature = 0;
  EXPECT_THROW(cpu_fused(p), InputError);
}

TEST(FusedCpu, DemoMatchesThePage) {
  const Problem p = demo_problem();
  const Trace f = cpu_fused(p);
  EXPECT_NEAR(f.output(kDemoDefaultQuery, 0), 0.65, 5e-3);
  EXPECT_NEAR(f.output(kDemoDefaultQuery, 1), 0.55, 5e-3);
  EXPECT_LE(rel_err(f.output, reference_fp64(p).output), 1e-6);
}

}  // namespace
}  // namespace attnlab
