// The CPU bf16 chain (cpu/bf16.h, cpu/bf16.cpp), staged and fused:
//   - bf16_bits / bf16_round: round to nearest even on hand-picked ties, overflow, NaN, inf
//   - against an fp64 recomputation from the bf16-rounded inputs: within what the fp32 sums and
//     the rounding of P allow (scores, weights, output), multi-head, masks none/causal/custom
//   - against the fp64 chain on the original inputs: a bf16-sized error, larger than the fp32
//     kernel's (it really rounds) and within bf16's 2e-2
//   - the staged weights are bf16 values up to one factor per row (P is rounded before P V)
//   - overflow refused; `attnlab verify`, `run`, `demo` and `bench` with --backend cpu
//     --precision bf16 through the real binary (bench no longer skips CPU bf16)
#include "core/backend.h"
#include "core/verify.h"
#include "cpu/bf16.h"
#include "cpu/cpu_backend.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace attnlab {
namespace {

const double kU = std::ldexp(1.0, -8);  // bf16's unit roundoff (8 significant bits)

float from_bits(std::uint32_t u) { return std::bit_cast<float>(u); }

TEST(Bf16Cpu, RoundsToNearestEvenOnTies) {
  // 1 + 2^-8 lies halfway between 1 (even) and 1 + 2^-7 (odd): down to 1.
  EXPECT_EQ(bf16_round(1.0f + 0x1p-8f), 1.0f);
  // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): up.
  EXPECT_EQ(bf16_round(1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f);
  // Just off the tie: to the nearer one.
  EXPECT_EQ(bf16_round(1.0f + 0x1p-8f + 0x1p-20f), 1.0f + 0x1p-7f);
  EXPECT_EQ(bf16_round(1.0f + 3 * 0x1p-8f - 0x1p-20f), 1.0f + 0x1p-7f);
  // Negative ties mirror the positive ones.
  EXPECT_EQ(bf16_round(-(1.0f + 0x1p-8f)), -1.0f);
  EXPECT_EQ(bf16_round(-(1.0f + 3 * 0x1p-8f)), -(1.0f + 0x1p-6f));
  // Bit patterns: 0x3F808000 (tie, even below) -> 0x3F80; 0x3F818000 (tie, odd below) -> 0x3F82.
  EXPECT_EQ(bf16_bits(from_bits(0x3F808000u)), 0x3F80u);
  EXPECT_EQ(bf16_bits(from_bits(0x3F818000u)), 0x3F82u);
  // A tie in the subnormals, and one carrying into the exponent.
  EXPECT_EQ(bf16_bits(from_bits(0x00018000u)), 0x0002u);
  EXPECT_EQ(bf16_bits(from_bits(0x3FFF8000u)), 0x4000u);
  // Exact values are kept; the largest float rounds past bf16's largest: inf.
  EXPECT_EQ(bf16_round(0.75f), 0.75f);
  EXPECT_EQ(bf16_round(0.0f), 0.0f);
  EXPECT_TRUE(std::signbit(bf16_round(-0.0f)));
  EXPECT_EQ(bf16_round(std::numeric_limits<float>::max()), std::numeric_limits<float>::infinity());
  EXPECT_EQ(bf16_bits(from_bits(0x7F7F7FFFu)), 0x7F7Fu);  // below the tie: bf16's largest
  EXPECT_EQ(bf16_round(-std::numeric_limits<float>::infinity()),
            -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(bf16_round(std::numeric_limits<float>::quiet_NaN())));
  // A signalling NaN whose payload sits only in the low half stays NaN (quietened).
  EXPECT_TRUE(std::isnan(bf16_round(from_bits(0x7F800001u))));
}

TEST(Bf16Cpu, ScaleConstantIsTheKernels) {
  const float scale = static_cast<float>(1.0 / (std::sqrt(64.0) * 0.85));
  EXPECT_EQ(bf16_scale_log2(64, 0.85), scale * 1.4426950408889634f);
}

// The problem with Q, K, V rounded to bf16 (what the bf16 chain computes on).
Problem rounded(const Problem& p) {
  Problem r = p;
  r.edit().q = bf16_round(p.q());
  r.edit().k = bf16_round(p.k());
  r.edit().v = bf16_round(p.v());
  return r;
}

// max over heads, rows and keys of |q| |k| (Cauchy-Schwarz bound of sum |q_i k_i|).
double score_magnitude(const Problem& p) {
  double worst = 0;
  for (int h = 0; h < p.heads; ++h) {
    const auto q = p.q().middleRows(static_cast<Eigen::Index>(h) * p.n(), p.n()).cast<double>();
    const auto k = p.k().middleRows(static_cast<Eigen::Index>(h) * p.m(), p.m()).cast<double>();
    worst = std::max(worst, q.rowwise().norm().maxCoeff() * k.rowwise().norm().maxCoeff());
  }
  return worst;
}

double max_abs_diff(const MatrixF& a, const MatrixD& b) {
  return (a.cast<double>() - b).cwiseAbs().maxCoeff();
}

// Row i keeps only keys j >= 160 and j == i: every row of the first key blocks masked through
// the first 128 keys (the fused kernel's all-masked-so-far step), the diagonal always kept.
MatrixF late_keys_mask(int n) {
  MatrixF m = MatrixF::Zero(n, n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < std::min(n, 160); ++j)
      if (j != i) m(i, j) = -std::numeric_limits<float>::infinity();
  return m;
}

struct Shape {
  int n, d_k, d_v, heads;
  MaskKind mask;
  double temperature;
  MatrixF (*custom)(int) = test::pattern_mask;
};

const std::vector<Shape> kShapes = {
    {200, 64, 64, 3, MaskKind::None, 1.0},      {200, 64, 64, 3, MaskKind::Causal, 1.0},
    {200, 64, 64, 3, MaskKind::Custom, 1.0},    {333, 128, 128, 2, MaskKind::Causal, 0.7},
    {97, 33, 20, 2, MaskKind::None, 1.3},       {97, 33, 20, 2, MaskKind::Custom, 1.0},
    {300, 16, 48, 2, MaskKind::Custom, 1.0, late_keys_mask},
};

std::string describe(const Shape& s, Variant v) {
  return std::string(to_string(v)) + " n " + std::to_string(s.n) + " d_k " + std::to_string(s.d_k) +
         " d_v " + std::to_string(s.d_v) + " heads " + std::to_string(s.heads) + " mask " +
         std::string(to_string(s.mask));
}

Trace run_cpu(const Problem& p, Variant v, Precision precision) {
  RunOptions opt;
  opt.variant = v;
  opt.precision = precision;
  return make_cpu_backend()->run(p, opt);
}

TEST(Bf16Cpu, MatchesFp64OfTheRoundedInputs) {
  for (const Shape& s : kShapes) {
    const Problem p = test::make_problem(s.n, s.d_k, s.d_v, s.heads, s.mask, s.temperature, 14, s.custom);
    const Problem pr = rounded(p);
    const TraceD ref = reference_fp64(pr);
    const double vmax = pr.v().cwiseAbs().maxCoeff();
    // P rounded to bf16 moves each weight by at most 2u/(1-u) of itself (normaliser included);
    // the fp32 dot products and sums add what any fp32 chain has.
    const double weight_rel = 2.01 * kU;
    const double fp32 = test::fp32_tolerance(pr);
    for (Variant v : {Variant::Staged, Variant::Fused}) {
      SCOPED_TRACE(describe(s, v));
      const Trace t = run_cpu(p, v, Precision::BF16);
      EXPECT_EQ(t.precision, Precision::BF16);
      EXPECT_EQ(t.backend, "cpu");
      ASSERT_EQ(t.output.rows(), ref.output.rows());
      ASSERT_EQ(t.output.cols(), ref.output.cols());
      EXPECT_LE(max_abs_diff(t.output, ref.output), (weight_rel + fp32) * vmax);
      if (v == Variant::Fused) {
        EXPECT_FALSE(t.has_stages);
        continue;
      }
      ASSERT_TRUE(t.has_stages);
      // Scores: exact products summed in fp32.
      const double score_tol = 2.0 * s.d_k * std::ldexp(1.0, -24) * score_magnitude(pr);
      EXPECT_LE(max_abs_diff(t.scores, ref.scores), score_tol);
      EXPECT_LE(max_abs_diff(t.scaled, ref.scaled), 1.01 * score_tol / std::sqrt(s.d_k) + 1e-6);
      EXPECT_EQ(t.mask, ref.mask.cast<float>());
      for (Eigen::Index r = 0; r < t.weights.rows(); ++r)
        for (Eigen::Index c = 0; c < t.weights.cols(); ++c) {
          const double w = t.weights(r, c), wr = ref.weights(r, c);
          if (std::isinf(ref.logits(r, c))) {
            ASSERT_EQ(w, 0.0) << "masked weight at " << r << ", " << c;
            ASSERT_EQ(t.logits(r, c), -std::numeric_limits<float>::infinity());
          } else {
            ASSERT_LE(std::abs(w - wr), weight_rel * wr + fp32) << "weight at " << r << ", " << c;
          }
        }
    }
  }
}

TEST(Bf16Cpu, RoundsTheInputsBf16SizedErrorAgainstTheOriginalOnes) {
  for (const Shape& s : kShapes) {
    const Problem p = test::make_problem(s.n, s.d_k, s.d_v, s.heads, s.mask, s.temperature, 15, s.custom);
    const TraceD ref = reference_fp64(p);
    for (Variant v : {Variant::Staged, Variant::Fused}) {
      SCOPED_TRACE(describe(s, v));
      const double err32 = max_abs_diff(run_cpu(p, v, Precision::FP32).output, ref.output);
      const double err16 = max_abs_diff(run_cpu(p, v, Precision::BF16).output, ref.output);
      EXPECT_GT(err16, 30 * err32) << "bf16 " << err16 << ", fp32 " << err32;
      EXPECT_GT(err16, 0.1 * kU) << "the inputs were not rounded";
      EXPECT_LE(err16, 2e-2);
    }
  }
}

// Staged: every row's weights are bf16 values times one factor (1 / l): P is rounded before P V,
// and the normaliser is the sum of the rounded values.
TEST(Bf16Cpu, StagedWeightsAreRoundedPTimesOneFactorPerRow) {
  const Problem p = test::make_problem(150, 64, 64, 2, MaskKind::Causal, 0.9, 16);
  const Trace t = run_cpu(p, Variant::Staged, Precision::BF16);
  int off_grid = 0;
  for (Eigen::Index r = 0; r < t.weights.rows(); ++r) {
    const auto row = t.weights.row(r);
    const float wmax = row.maxCoeff();  // the max score's weight: bf16(exp2(~0)) / l = 1 / l
    double sum = 0;
    for (Eigen::Index c = 0; c < row.size(); ++c) {
      sum += row(c);
      const float ratio = row(c) / wmax;  // p_c, within two fp32 roundings
      if (std::abs(ratio - bf16_round(ratio)) > 4 * std::ldexp(1.0, -24) * ratio) ++off_grid;
    }
    EXPECT_NEAR(sum, 1.0, 1e-5) << "row " << r;
  }
  EXPECT_EQ(off_grid, 0);
  // The fp32 chain's weights are not on that grid: the test can tell the two apart.
  const Trace f = run_cpu(p, Variant::Staged, Precision::FP32);
  int f_off = 0;
  for (Eigen::Index c = 0; c < f.weights.cols(); ++c) {
    const float ratio = f.weights(p.n() - 1, c) / f.weights.row(p.n() - 1).maxCoeff();
    if (std::abs(ratio - bf16_round(ratio)) > 4 * std::ldexp(1.0, -24) * ratio) ++f_off;
  }
  EXPECT_GT(f_off, 10);
}

TEST(Bf16Cpu, StagedOutputOnlyMatchesTheKeptChain) {
  const Problem p = test::make_problem(130, 32, 24, 2, MaskKind::Custom, 1.0, 17);
  RunOptions opt;
  opt.precision = Precision::BF16;
  const Trace kept = make_cpu_backend()->run(p, opt);
  opt.keep_stages = false;
  const Trace only = make_cpu_backend()->run(p, opt);
  EXPECT_FALSE(only.has_stages);
  EXPECT_EQ(only.output, kept.output);
}

TEST(Bf16Cpu, OverflowAndStreamingRequestsAreRefused) {
  Problem p = test::make_problem(40, 16, 16, 1, MaskKind::None, 1.0, 18);
  p.edit().q.array() *= 1e20f;
  p.edit().k.array() *= 1e20f;
  for (Variant v : {Variant::Staged, Variant::Fused}) {
    SCOPED_TRACE(to_string(v));
    const std::string why = test::message_of<InputError>([&] { run_cpu(p, v, Precision::BF16); });
    EXPECT_TRUE(test::contains(why, "overflow")) << why;
  }
  const Problem ok = test::make_problem(40, 16, 16, 1, MaskKind::None, 1.0, 18);
  RunOptions opt;
  opt.precision = Precision::BF16;
  opt.keep_stages = false;
  opt.rows = {3};
  EXPECT_FALSE(test::message_of<InputError>([&] { make_cpu_backend()->run(ok, opt); }).empty());
}

// The products' copy of K and V is kept with the inputs (where the CPU has no AVX-512 BF16) and
// shared by the problems that share them: a problem that reads the same K and V as fewer
// key/value heads, rotated by RoPE, or with an edited K gets its own, never a stale one. Each run
// equals the run of a problem with a private copy of the same data, bit for bit; breaking the
// cache key (dropping the head count or θ from it) makes it fail.
TEST(Bf16Cpu, KeptOperandsFollowTheHeadsTheRotationAndEdits) {
  Problem base = random_problem(70, 70, 32, 32, 21, 4, 4);
  base.edit().key_tokens.clear();  // no labels: the same rows may be read as other key counts
  const auto fresh = [](const Problem& p) {
    Problem q = p;
    q.set_inputs(ProblemInputs(*p.inputs()));  // the same data, its own derived slot
    return q;
  };
  const auto same = [&](const Problem& p) {
    SCOPED_TRACE("heads " + std::to_string(p.heads) + "/" + std::to_string(p.kv_heads()) + " rope " +
                 std::to_string(p.mods.rope_theta));
    for (Variant v : {Variant::Staged, Variant::Fused})
      EXPECT_EQ(run_cpu(p, v, Precision::BF16).output, run_cpu(fresh(p), v, Precision::BF16).output) << to_string(v);
  };
  same(base);
  Problem grouped = base;  // the same K rows read as 2 key/value heads of 140 keys
  grouped.kv_group = 2;
  grouped.mask = MaskKind::None;
  ASSERT_EQ(grouped.inputs(), base.inputs());
  ASSERT_EQ(grouped.m(), 140);
  same(grouped);
  Problem rotated = base;
  rotated.mods.rope_theta = 10000;
  same(rotated);
  rotated.mods.rope_theta = 500;
  same(rotated);
  Problem edited = base;
  edited.edit().k(3, 5) += 1.f;
  same(edited);
  same(base);
}

TEST(Bf16Cpu, VerifyPassesWithBf16Tolerances) {
  for (Variant v : {Variant::Staged, Variant::Fused}) {
    SCOPED_TRACE(to_string(v));
    const Problem p = test::make_problem(180, 128, 128, 2, MaskKind::Causal, 1.0, 19);
    const Trace t = run_cpu(p, v, Precision::BF16);
    const TraceD ref = reference_fp64(p);
    const VerifyReport r = verify_trace(p, t, ref, {});
    EXPECT_TRUE(r.pass);
    for (const StageCheck& c : r.stages) {
      EXPECT_TRUE(c.pass) << c.stage << " max abs err " << c.max_abs_err << " atol " << c.tol.atol;
      if (c.stage != "mask") EXPECT_EQ(c.tol.rtol, 2e-2) << c.stage;
    }
    // The same trace judged with fp32's tolerances fails: the error is bf16's.
    Trace as_fp32 = t;
    as_fp32.precision = Precision::FP32;
    EXPECT_FALSE(verify_trace(p, as_fp32, ref, {}).pass);
  }
}

#ifdef ATTNLAB_BINARY
TEST(Bf16Cpu, VerifyCliPassesForStagedAndFused) {
  for (const char* variant : {"staged", "fused"})
    for (const char* mask : {"none", "causal"}) {
      SCOPED_TRACE(std::string(variant) + " " + mask);
      const test::BinaryRun r = test::run_attnlab(
          {"verify", "--backend", "cpu", "--variant", variant, "--precision", "bf16", "--random",
           "150", "--dk", "64", "--dv", "64", "--heads", "2", "--mask", mask},
          "LANG=C.UTF-8");
      EXPECT_EQ(r.code, 0) << r.out << r.err;
      const std::vector<std::string> lines = test::lines_of(r.out);
      ASSERT_FALSE(lines.empty());
      EXPECT_EQ(lines.back().rfind("PASS", 0), 0u) << r.out;
      EXPECT_TRUE(test::contains(lines.front(), std::string("backend cpu, ") + variant + ", bf16"))
          << lines.front();
    }
}

TEST(Bf16Cpu, RunAndDemoSayBf16) {
  const test::BinaryRun demo =
      test::run_attnlab({"demo", "--backend", "cpu", "--precision", "bf16", "--lang", "en"});
  EXPECT_EQ(demo.code, 0) << demo.err;
  EXPECT_TRUE(test::contains(demo.out, "backend: cpu · staged · bf16")) << demo.out;
  const test::BinaryRun run =
      test::run_attnlab({"run", "--random", "20", "--backend", "cpu", "--variant", "fused",
                         "--precision", "bf16", "--format", "json"});
  ASSERT_EQ(run.code, 0) << run.err;
  const nlohmann::json j = nlohmann::json::parse(run.out);
  EXPECT_EQ(j["precision"], "bf16");
  EXPECT_EQ(j["backend"], "cpu");
}

TEST(Bf16Cpu, BenchTimesCpuBf16StagedAndFused) {
  const test::BinaryRun r = test::run_attnlab(
      {"bench", "--backend", "cpu", "--variant", "staged,fused", "--precision", "bf16", "--n",
       "64,96", "--d", "8,64", "--heads", "1,2", "--mask", "none,causal", "--repeat", "2",
       "--warmup", "1", "--format", "json"},
      "LANG=C.UTF-8");
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["skipped"].empty()) << j["skipped"].dump();
  EXPECT_EQ(j["cases"].size(), 2u * 2 * 2 * 2 * 2);
  for (const nlohmann::json& c : j["cases"]) {
    SCOPED_TRACE(c.dump());
    EXPECT_EQ(c["status"], "ok");
    EXPECT_EQ(c["precision"], "bf16");
    const double n = c["n"], d = c["d"], heads = c["heads"];
    EXPECT_DOUBLE_EQ(c["min_bytes"].get<double>(), heads * n * (2.0 * 3 * d + 4.0 * d));
    // Relative to max|ref|: bf16-sized, not fp32-sized.
    EXPECT_GT(c["rel_err"].get<double>(), 1e-5);
    EXPECT_LT(c["rel_err"].get<double>(), 2e-2);
  }
}
#endif  // ATTNLAB_BINARY

}  // namespace
}  // namespace attnlab
