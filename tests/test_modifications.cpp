// Position and score modifications (core/modifications.h) on the CPU: every modification alone
// and in combination through every CPU kernel (staged fp32, fused fp32, staged and fused bf16,
// decode, the walk) against the fp64 reference at verify's tolerances; the rules, the standard
// ALiBi slopes, RoPE's relative-position property, the block mask, the specs and their refusals.
#include "core/inputs.h"
#include "core/messages.h"
#include "core/modify.h"
#include "core/verify.h"
#include "cpu/backward.h"
#include "cpu/bf16.h"
#include "cpu/chains.h"
#include "cpu/cpu_backend.h"
#include "cpu/fused_backward.h"
#include "cpu/online_softmax.h"
#include "cpu/walk.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <new>
#include <string>
#include <utility>
#include <vector>

namespace attnlab {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// A modification applied to a problem, with its name for the test's trace.
struct Mod {
  std::string name;
  std::function<void(Problem&)> apply;
};

MatrixF random_bias(int rows, int cols, std::uint64_t seed) {
  const Problem r = random_problem(rows, cols, 1, seed);
  return r.q() * 0.5f;
}

std::vector<Mod> mods() {
  return {
      {"rope", [](Problem& p) { p.mods.rope_theta = 10000; }},
      {"rope theta 500", [](Problem& p) { p.mods.rope_theta = 500; }},
      {"alibi", [](Problem& p) { p.mods.alibi = true; }},
      {"alibi given", [](Problem& p) {
         p.mods.alibi = true;
         p.mods.alibi_slopes = {0.5};
       }},
      {"softcap", [](Problem& p) { p.mods.softcap = 0.7; }},
      {"bias shared", [](Problem& p) { p.edit().bias = random_bias(p.n(), p.m(), 5); }},
      {"bias per head", [](Problem& p) { p.edit().bias = random_bias(p.heads * p.n(), p.m(), 6); }},
      {"causal window", [](Problem& p) {
         p.mask = MaskKind::Causal;
         p.mods.window = 37;
       }},
      {"window alone", [](Problem& p) { p.mods.window = 50; }},
      {"prefix", [](Problem& p) { p.mods.prefix = 41; }},
      {"documents", [](Problem& p) {
         std::vector<int>& d = p.edit().documents;
         for (int j = 0; j < p.m(); ++j) d.push_back(j < 70 ? 0 : j < 150 ? 1 : 2);
       }},
      {"documents causal", [](Problem& p) {
         p.mask = MaskKind::Causal;
         std::vector<int>& d = p.edit().documents;
         for (int j = 0; j < p.m(); ++j) d.push_back(j / 64);
       }},
      {"all of them", [](Problem& p) {
         p.mods.rope_theta = 10000;
         p.mods.alibi = true;
         p.mods.softcap = 3;
         p.edit().bias = random_bias(p.n(), p.m(), 7);
         p.mask = MaskKind::Causal;
         p.mods.window = 90;
       }},
      {"custom mask and window", [](Problem& p) {
         p.mask = MaskKind::Custom;
         p.edit().custom_mask = test::pattern_mask(p.n());
         p.mods.window = 120;
       }},
  };
}

void expect_pass(const Problem& p, const Trace& t, const std::string& what) {
  const VerifyReport r = verify_trace(p, t, reference_fp64(p));
  EXPECT_TRUE(r.pass) << what << "\n" << render_verify_text(r);
}

TEST(Modifications, EveryModificationThroughEveryCpuKernelMatchesFp64) {
  for (const Mod& mod : mods()) {
    // n not a multiple of any tile, two heads sharing nothing, d_k != d_v.
    Problem p = test::make_problem(203, 32, 24, 2, MaskKind::None, 0.9, 3);
    mod.apply(p);
    ASSERT_NO_THROW(validate(p)) << mod.name;
    expect_pass(p, cpu_staged(p), mod.name + " staged fp32");
    expect_pass(p, cpu_fused(p), mod.name + " fused fp32");
    expect_pass(p, cpu_fused_bf16(p), mod.name + " fused bf16");
    Trace sb;
    RunOptions o;
    o.precision = Precision::BF16;
    cpu_staged_bf16_into(p, o, sb);
    expect_pass(p, sb, mod.name + " staged bf16");
    expect_pass(p, cpu_decode(p), mod.name + " decode fp32");
  }
}

TEST(Modifications, DecodeShapesAndGroupedHeadsTakeEveryModification) {
  for (const Mod& mod : mods()) {
    if (mod.name == "custom mask and window") continue;  // a square mask file
    // 3 queries at the end of 300 keys, 4 query heads over 2 key/value heads, d 32 (the decode
    // kernel's own products on AVX-512), and d 20 (Eigen's).
    for (int d : {32, 20}) {
      Problem p = random_problem(3, 300, d, d, 9, 4, 2);
      mod.apply(p);
      ASSERT_NO_THROW(validate(p)) << mod.name;
      const std::string what = mod.name + " d " + std::to_string(d);
      expect_pass(p, cpu_decode(p), what + " decode fp32");
      expect_pass(p, cpu_decode(p, 3), what + " decode fp32, 3 splits");
      expect_pass(p, cpu_staged(p), what + " staged");
      expect_pass(p, cpu_fused(p), what + " fused");
      RunOptions o;
      o.variant = Variant::Decode;
      o.precision = Precision::BF16;
      Trace t;
      cpu::decode_into(p, o, t);
      expect_pass(p, t, what + " decode bf16");
    }
  }
}

TEST(Modifications, KeptStagesHoldTheBiasedAndCappedScores) {
  Problem p = test::make_problem(40, 8, 8, 2, MaskKind::Causal, 1.3, 4);
  p.mods.alibi = true;
  p.mods.softcap = 2;
  p.mods.rope_theta = 100;
  const Trace t = cpu_staged(p);
  const TraceD ref = reference_fp64(p);
  ASSERT_EQ(t.biased.rows(), 80);
  ASSERT_EQ(t.capped.rows(), 80);
  EXPECT_EQ(present_stages(t), problem_stages(p));
  EXPECT_EQ(problem_stages(p), unsigned{kAllStages});
  // biased = scaled - slope |i - j|, capped = 2 tanh(biased / 2), every entry.
  const std::vector<double> slopes = alibi_slopes(p);
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 40; ++i)
      for (int j = 0; j < 40; ++j) {
        const Eigen::Index r = h * 40 + i;
        EXPECT_NEAR(t.biased(r, j), t.scaled(r, j) - slopes[h] * std::abs(i - j), 1e-5);
        EXPECT_NEAR(t.capped(r, j), 2 * std::tanh(t.biased(r, j) / 2), 1e-5);
        EXPECT_LE(std::abs(t.capped(r, j)), 2.f);
      }
  // RoPE's rotated Q and K come with the stages and are what QKᵀ multiplied.
  ASSERT_EQ(t.q_rot.rows(), 80);
  EXPECT_LT((t.q_rot.middleRows(0, 40) * t.k_rot.middleRows(0, 40).transpose() - t.scores.middleRows(0, 40))
                .cwiseAbs()
                .maxCoeff(),
            1e-4);
  EXPECT_LT((ref.q_rot.cast<float>() - t.q_rot).cwiseAbs().maxCoeff(), 1e-6);
  // Without modifications the stages are the chain's five.
  EXPECT_EQ(problem_stages(test::make_problem(4, 2, 2, 1, MaskKind::None, 1, 1)), 31u);
}

// A sum of the scaled scores and the bias beyond fp32 is refused with where it is, also where the
// cap would bring it back into range (tanh of +inf is 1: the run had gone on with +∞ in its biased
// stage, and verify then failed on the lab's own run).
TEST(Modifications, AnOverflowingBiasedScoreIsRefusedBehindTheCap) {
  Problem p = test::make_problem(3, 4, 2, 1, MaskKind::None, 1.0, 5);
  p.edit().q.row(0).setZero();
  p.edit().q(0, 0) = 2e38f;  // with k's first column 1: a score of 2e38, scaled 1e38
  p.edit().k.col(0).setOnes();
  p.edit().bias = MatrixF::Zero(3, 3);
  p.edit().bias.row(0).setConstant(3e38f);
  for (const double cap : {5.0, 0.0}) {
    SCOPED_TRACE(cap);
    p.mods.softcap = cap;
    // The chain's blocks kept and streamed, and the plain chain.
    for (const auto& run : std::vector<std::function<void()>>{[&] { cpu_staged(p); }, [&] { cpu_staged_output_only(p); },
                                                              [&] { cpu_staged_plain(p); }}) {
      const std::string m = test::message_of<InputError>(run);
      EXPECT_NE(m.find("the scores with ALiBi or the bias added overflow at row 0, column 0"), std::string::npos) << m;
    }
  }
}

// The staged chain's estimate of its kept stages is what a run keeps: the score mods' stages
// (biased, capped) with the chain's four and the mask, in fp32 and in the fp64 reference.
TEST(Modifications, TheKeptStagesEstimateCountsTheScoreModsStages) {
  Problem plain = test::make_problem(24, 16, 8, 4, MaskKind::Causal, 1.0, 2);  // n = m = 24
  Problem alibi = plain, capped = plain, both = plain, bias = plain;
  alibi.mods.alibi = true;
  capped.mods.softcap = 5;
  both.mods.alibi = true;
  both.mods.softcap = 5;
  bias.edit().bias = MatrixF::Constant(24, 24, 0.5f);
  for (const Problem* p : {&plain, &alibi, &capped, &both, &bias}) {
    const Trace t = cpu_staged(*p);
    const TraceD ref = reference_fp64(*p);
    const auto stage_floats = [](const auto& t) {
      return static_cast<double>(t.scores.size() + t.scaled.size() + t.mask.size() + t.logits.size() +
                                 t.weights.size() + t.biased.size() + t.capped.size());
    };
    const double kept = kept_stage_bytes(size_of(*p));
    SCOPED_TRACE(stage_floats(t));
    EXPECT_DOUBLE_EQ(kept, 4 * stage_floats(t));
    EXPECT_DOUBLE_EQ(reference_fp64_bytes(size_of(*p)) - 8.0 * ref.output.size(), 8 * stage_floats(ref));
  }
  EXPECT_EQ(size_of(both).score_stages, 2);
  EXPECT_EQ(size_of(bias).score_stages, 1);
}

TEST(Modifications, WithoutModificationsTheKernelsAreUnchanged) {
  // No modification: the fused kernel's path is the one before them, so the causal, custom and
  // plain problems give what fp64 gives to the bit-identical tolerance of before (unchanged
  // elsewhere in the suite); here: a problem with an empty spec is the problem itself.
  Problem p = test::make_problem(70, 16, 16, 1, MaskKind::Causal, 0.8, 2);
  Problem q = p;
  apply_score_mod_spec(q, "none");
  apply_mask_mod_spec(q, "none");
  apply_rope_spec(q, "");
  EXPECT_FALSE(has_modifications(q));
  EXPECT_EQ(cpu_fused(p).output, cpu_fused(q).output);
  EXPECT_EQ(cpu_staged(p).weights, cpu_staged(q).weights);
}

// The soft-cap of the fused, walk, decode and bf16 kernels (cpu/online_softmax.h soft_cap): C
// tanh(x / C) against the same in double on every lane, whether the lane's packet is all within
// the cap (the polynomial), all beyond it (Eigen's rational tanh) or mixed; and a lane's value is
// the same whatever its neighbours are. The bounds in ulp of the result include x times 1 / C
// rounded (up to an ulp of y, which tanh passes on where y is small) and the final times C:
// 3.5 within the cap, 4.5 beyond it (Eigen's own tanh, the cap's only path before).
TEST(Modifications, TheSoftCapIsTanhWithinAFewUlpOnEveryLaneAlone) {
  namespace on = cpu::online;
  namespace ei = Eigen::internal;
  constexpr int L = on::kLanes;
  const float C = 30.f;
  const on::Packet inv = ei::pset1<on::Packet>(1.f / C), cap = ei::pset1<on::Packet>(C);
  std::vector<float> xs;  // scaled scores x, so y = x / C sweeps [-12, 12] densely, and the edges
  for (int i = -240000; i <= 240000; ++i) xs.push_back(static_cast<float>(i) * (12.f * C / 240000));
  for (float y : {0.f, -0.f, 1e-30f, -1e-30f, 1e-8f, 0.999999f, 1.f, 1.000001f, -1.f, 7.9f, 8.f, 9.f, 50.f, -50.f})
    xs.push_back(y * C);
  auto ulps = [&](float got, float x) {
    const double want = C * std::tanh(static_cast<double>(x / C));
    const double ulp = std::max(static_cast<double>(std::nextafter(std::abs(static_cast<float>(want)), INFINITY)) -
                                    std::abs(static_cast<float>(want)),
                                1e-37);
    return std::abs(static_cast<double>(got) - want) / ulp;
  };
  double worst_within = 0, worst_beyond = 0;
  alignas(64) float in[L], out[L], alone[L];
  for (std::size_t i = 0; i + L <= xs.size(); i += L) {
    for (int l = 0; l < L; ++l) in[l] = xs[i + l];
    ei::pstore(out, on::soft_cap(ei::pload<on::Packet>(in), inv, cap));
    for (int l = 0; l < L; ++l) {
      const double u = ulps(out[l], in[l]);
      (std::abs(in[l] / C) <= 1 ? worst_within : worst_beyond) = std::max(
          std::abs(in[l] / C) <= 1 ? worst_within : worst_beyond, u);
      // The same lane among neighbours beyond the cap (a mixed packet), and alone among zeros.
      alignas(64) float mixed[L];
      for (int k = 0; k < L; ++k) mixed[k] = k == l ? in[l] : 5 * C;
      ei::pstore(alone, on::soft_cap(ei::pload<on::Packet>(mixed), inv, cap));
      ASSERT_EQ(alone[l], out[l]) << "x " << in[l] << " among lanes beyond the cap";
      for (int k = 0; k < L; ++k) mixed[k] = k == l ? in[l] : 0.f;
      ei::pstore(alone, on::soft_cap(ei::pload<on::Packet>(mixed), inv, cap));
      ASSERT_EQ(alone[l], out[l]) << "x " << in[l] << " among lanes within the cap";
    }
  }
  EXPECT_LE(worst_within, 3.5);
  EXPECT_LE(worst_beyond, 4.5);
  EXPECT_GT(worst_within, 0.0);  // the sweep did reach both paths
  EXPECT_GT(worst_beyond, 0.0);
  // A NaN stays NaN; ±inf are ±C.
  for (int l = 0; l < L; ++l) in[l] = l == 0 ? std::numeric_limits<float>::quiet_NaN() : l == 1 ? INFINITY : -INFINITY;
  ei::pstore(out, on::soft_cap(ei::pload<on::Packet>(in), inv, cap));
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_EQ(out[1], C);
  EXPECT_EQ(out[2], -C);
}

TEST(Modifications, StandardAlibiSlopes) {
  const std::vector<double> eight = standard_alibi_slopes(8);
  for (int h = 0; h < 8; ++h) EXPECT_DOUBLE_EQ(eight[h], std::exp2(-(h + 1)));
  // 12 heads: the 8 of 8, then every other slope of 16 heads: 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5.
  const std::vector<double> twelve = standard_alibi_slopes(12);
  ASSERT_EQ(twelve.size(), 12u);
  for (int h = 0; h < 8; ++h) EXPECT_DOUBLE_EQ(twelve[h], eight[h]);
  for (int h = 0; h < 4; ++h) EXPECT_DOUBLE_EQ(twelve[8 + h], std::exp2(-0.5 - h));
  EXPECT_DOUBLE_EQ(standard_alibi_slopes(1)[0], std::exp2(-8));
  // One head of several keeps its own slope.
  Problem p = test::make_problem(6, 4, 4, 4, MaskKind::None, 1, 1);
  p.mods.alibi = true;
  EXPECT_EQ(alibi_slopes(one_head(p, 2)), std::vector<double>{std::exp2(-6)});
}
TEST(Modifications, RopeAnglesByTheAdditionRuleAreTheDirectOnesToDoublesPrecision) {
  // rope_rotate takes cos and sin of pos · f from coarse and fine angles (core/modify.cpp
  // RopeAngles); against cos and sin of the angle itself, at negative positions (the position
  // view's shifted keys), across the coarse steps, and at a million positions.
  // The frequencies themselves, pinned apart from the function that the kernels and this test share:
  // θ^(−2c/d).
  EXPECT_DOUBLE_EQ(rope_frequency(10000, 0, 8), 1.0);
  EXPECT_NEAR(rope_frequency(10000, 1, 8), 0.1, 1e-16);
  EXPECT_NEAR(rope_frequency(10000, 3, 8), 1e-3, 1e-18);
  EXPECT_NEAR(rope_frequency(500, 4, 16), 1 / std::sqrt(500.0), 1e-16);
  const int d = 16;
  MatrixD x(1, d);
  for (int c = 0; c < d; ++c) x(0, c) = 0.25 + 0.1 * c - (c % 3 == 0 ? 1.0 : 0.0);
  for (const double theta : {10000.0, 500.0, 1e6})
    for (const int pos : {-130, -64, -63, -1, 0, 1, 63, 64, 65, 127, 4095, 4096, 70001, 1048575}) {
      const MatrixD y = rope_rotate(x, pos, theta);
      for (int c = 0; c < d / 2; ++c) {
        const double a = pos * rope_frequency(theta, c, d), cs = std::cos(a), sn = std::sin(a);
        // A few ulp of double, and the angle's own rounding (|a| · 2^-53): fp32 rounds at 6e-8.
        const double tol = 2e-15 * (1 + std::abs(a)) * (std::abs(x(0, c)) + std::abs(x(0, c + d / 2)));
        EXPECT_NEAR(y(0, c), x(0, c) * cs - x(0, c + d / 2) * sn, tol) << theta << " " << pos << " " << c;
        EXPECT_NEAR(y(0, c + d / 2), x(0, c + d / 2) * cs + x(0, c) * sn, tol) << theta << " " << pos << " " << c;
      }
    }
  // Rows from a negative first position: each row is the one-row rotation at its own position.
  const MatrixD rows = MatrixD::Constant(200, d, 0.5) + MatrixD::Identity(200, d);
  const MatrixD all = rope_rotate(rows, -100, 10000);
  for (int r = 0; r < 200; r += 37) EXPECT_EQ(all.row(r), rope_rotate(rows.row(r), r - 100, 10000)) << r;
}


TEST(Modifications, RopeScoresDependOnTheDistanceOnly) {
  // The same query and key vectors at positions (a, b) and (a + s, b + s): the same score.
  Problem p = random_problem(1, 8, 1, 12);
  const MatrixD q = p.q().cast<double>().row(0), k = p.k().cast<double>().row(0);
  const double theta = 10000;
  const double at = (rope_rotate(q, 7, theta) * rope_rotate(k, 3, theta).transpose())(0, 0);
  const double shifted = (rope_rotate(q, 107, theta) * rope_rotate(k, 103, theta).transpose())(0, 0);
  EXPECT_NEAR(at, shifted, 1e-12);
  EXPECT_GT(std::abs(at - (rope_rotate(q, 9, theta) * rope_rotate(k, 3, theta).transpose())(0, 0)), 1e-6);
  // A rotation: norms stay, position 0 changes nothing.
  EXPECT_NEAR(rope_rotate(q, 55, theta).norm(), q.norm(), 1e-12);
  EXPECT_EQ(rope_rotate(q, 0, theta), q);
}

// More queries than keys: query i sits at position i + m - n, before the first key for the first
// n - m of them. RoPE turns those by their negative positions, as the fp64 reference does (it had
// left them unrotated, and the kernels read uninitialised rows).
TEST(Modifications, RopeTurnsQueriesThatSitBeforeTheFirstKey) {
  Problem p = random_problem(40, 40, 16, 8, 3, 2, 2);
  ProblemInputs& in = p.edit();
  in.q = random_problem(100, 16, 8, 4, 2).q();
  in.query_tokens = index_tokens(100);
  p.mods.rope_theta = 10000;
  ASSERT_NO_THROW(validate(p));
  ASSERT_EQ(p.causal_offset(), -60);
  const TraceD ref = reference_fp64(p);
  EXPECT_TRUE(verify_trace(p, cpu_fused(p), ref).pass);
  EXPECT_TRUE(verify_trace(p, cpu_staged(p), ref).pass);
  EXPECT_TRUE(verify_trace(p, cpu_fused_bf16(p), ref).pass);
  // The rotated rows are the double rotation rounded once, before the keys as after them.
  const std::shared_ptr<const RotatedQK> rot = rotated_qk(p);
  ASSERT_TRUE(rot);
  const MatrixF want = rope_rotate(p.q().topRows(100).cast<double>(), -60, 10000).cast<float>();
  EXPECT_EQ(rot->q.topRows(100), want);
}

TEST(Modifications, RotatedQAndKAreTheDoubleRotationRoundedOnce) {
  // Several blocks of positions (2048 each), queries at the end of the keys, grouped heads.
  Problem p = random_problem(700, 4500, 16, 4, 3, 4, 2);
  p.mods.rope_theta = 5000;
  const std::shared_ptr<const RotatedQK> r = rotated_qk(p);
  ASSERT_TRUE(r);
  for (int h = 0; h < 4; ++h) {
    const MatrixF want =
        rope_rotate(p.q().middleRows(h * 700, 700).cast<double>(), 4500 - 700, 5000).cast<float>();
    EXPECT_EQ(r->q.middleRows(h * 700, 700), want) << h;
  }
  for (int g = 0; g < 2; ++g) {
    const MatrixF want = rope_rotate(p.k().middleRows(g * 4500, 4500).cast<double>(), 0, 5000).cast<float>();
    EXPECT_EQ(r->k().middleRows(g * 4500, 4500), want) << g;
  }
  // Kept with the problem, one θ at a time.
  EXPECT_EQ(rotated_qk(p).get(), r.get());
  Problem q = p;
  q.mods.rope_theta = 7000;
  EXPECT_NE(rotated_qk(q).get(), r.get());
  EXPECT_NE(rotated_qk(q)->k_kept.get(), r->k_kept.get());
}

TEST(Modifications, ANewQueryTurnsQAloneAgainstTheTurnedCache) {
  // The decode view's next token: edit_q keeps RoPE's turned K (it depends on K alone) and turns
  // the new Q, bit for bit what a problem made afresh from the same inputs turns.
  Problem p = random_problem(3, 300, 16, 16, 5, 4, 2);
  p.mods.rope_theta = 10000;
  const std::shared_ptr<const RotatedQK> before = rotated_qk(p);
  for (Eigen::Index i = 0; i < p.q().size(); ++i) p.edit_q().data()[i] *= -0.5f;
  const std::shared_ptr<const RotatedQK> after = rotated_qk(p);
  ASSERT_TRUE(after);
  EXPECT_EQ(after->k_kept.get(), before->k_kept.get());
  EXPECT_NE(after->q, before->q);
  Problem fresh = p;
  fresh.set_inputs(ProblemInputs(*p.inputs()));  // the same values, nothing derived
  const std::shared_ptr<const RotatedQK> made = rotated_qk(fresh);
  EXPECT_EQ(after->q, made->q);
  EXPECT_EQ(after->k(), made->k());
}

TEST(Modifications, DerivedDataOfKAndVOutlivesANewQuery) {
  // The decode view's next token edits Q alone: the cache's panels and bf16 copy ("kv/" keys)
  // stay, what depends on Q (RoPE's rotation) goes; edit() drops everything.
  Problem p = random_problem(4, 8, 8, 1);
  int made = 0;
  const auto make = [&made](const ProblemInputs&) { return ++made; };
  const auto kv = p.derived<int>("kv/panels", make);
  const auto q = p.derived<int>("rope/1", make);
  p.edit_q()(0, 0) = 5.f;
  EXPECT_EQ(p.derived<int>("kv/panels", make), kv);
  EXPECT_NE(p.derived<int>("rope/1", make), q);
  EXPECT_EQ(p.q()(0, 0), 5.f);
  const Problem copy = p;  // shares the inputs: edit_q copies them first
  p.edit_q()(0, 0) = 6.f;
  EXPECT_EQ(copy.q()(0, 0), 5.f);
  p.edit();
  EXPECT_NE(p.derived<int>("kv/panels", make), kv);
  // A family keeps one entry: RoPE at a new θ replaces the old one.
  const auto a = p.derived<int>("rope/a", make, "rope/");
  p.derived<int>("rope/b", make, "rope/");
  EXPECT_NE(p.derived<int>("rope/a", make, "rope/"), a);
  // A make that throws stores nothing: the next call makes the entry (no null left behind).
  const auto fails = [](const ProblemInputs&) -> int { throw std::bad_alloc(); };
  EXPECT_THROW(p.derived<int>("kv/turned", fails), std::bad_alloc);
  const auto again = p.derived<int>("kv/turned", make);
  ASSERT_TRUE(again);
  EXPECT_EQ(*again, made);
}

TEST(Modifications, MaskRuleIntervals) {
  MaskRule r;
  r.m = 100;
  r.offset = 0;
  int lo, hi;
  r.causal = true;
  r.interval(10, lo, hi);
  EXPECT_EQ(lo, 0);
  EXPECT_EQ(hi, 11);
  r.window = 4;  // the 4 most recent keys, its own among them
  r.interval(10, lo, hi);
  EXPECT_EQ(lo, 7);
  EXPECT_EQ(hi, 11);
  r.window = 0;
  r.prefix = 20;  // prefix-LM: the first 20 positions both ways
  r.interval(10, lo, hi);
  EXPECT_EQ(hi, 20);
  r.interval(30, lo, hi);
  EXPECT_EQ(hi, 31);
  r = MaskRule{};
  r.m = 100;
  r.window = 3;  // alone: |i - j| < 3
  r.interval(50, lo, hi);
  EXPECT_EQ(lo, 48);
  EXPECT_EQ(hi, 53);
  r.offset = 90;  // decode: query 5 at position 95
  r.interval(5, lo, hi);
  EXPECT_EQ(lo, 93);
  EXPECT_EQ(hi, 98);
  const std::vector<int> docs = {0, 0, 1, 1, 1};
  MaskRule d;
  d.m = 5;
  d.documents = docs.data();
  EXPECT_TRUE(d.visible(2, 4));
  EXPECT_FALSE(d.visible(2, 1));
}

TEST(Modifications, BlockMaskOfAWindowVisitsAboutNTimesWTiles) {
  Problem p = random_problem(4096, 4, 4, 1);
  p.mask = MaskKind::Causal;
  p.mods.window = 256;
  const BlockMask b = block_mask(p, 32, 128);
  // Each tile of 32 queries sees its window: at most (256 + 32) / 128 + 1 key blocks.
  for (int qb = 0; qb < b.q_blocks; ++qb) {
    int visited = 0;
    for (int kb = 0; kb < b.k_blocks; ++kb) visited += b.at(qb, kb) != BlockKind::Empty;
    EXPECT_LE(visited, 4) << qb;
    EXPECT_GE(visited, 1) << qb;
  }
  EXPECT_LT(b.visited(), b.total() / 8);
  // Causal alone: the tiles below the diagonal are Full, the diagonal Partial, above Empty.
  Problem c = random_problem(256, 4, 4, 1);
  c.mask = MaskKind::Causal;
  const BlockMask cb = block_mask(c, 32, 128);
  EXPECT_EQ(cb.at(0, 0), BlockKind::Partial);
  EXPECT_EQ(cb.at(0, 1), BlockKind::Empty);
  EXPECT_EQ(cb.at(7, 0), BlockKind::Full);
  EXPECT_EQ(cb.at(7, 1), BlockKind::Partial);
  // Documents: a tile of one document's queries against another's keys is Empty.
  Problem d = random_problem(256, 4, 4, 1);
  for (int j = 0; j < 256; ++j) d.edit().documents.push_back(j / 128);
  const BlockMask db = block_mask(d, 32, 128);
  EXPECT_EQ(db.at(0, 0), BlockKind::Full);
  EXPECT_EQ(db.at(0, 1), BlockKind::Empty);
  EXPECT_EQ(db.at(5, 1), BlockKind::Full);
  // The block mask never rules out a visible pair.
  for (Problem* x : {&p, &c, &d}) {
    const BlockMask bm = block_mask(*x, 32, 128);
    const MaskRule rule = mask_rule(*x);
    for (int i = 0; i < x->n(); i += 7)
      for (int j = 0; j < x->m(); j += 5)
        if (rule.visible(i, j)) EXPECT_NE(bm.at(i / 32, j / 128), BlockKind::Empty);
  }
}

TEST(Modifications, FusedUnderAWindowRunsOfBlocksGiveEveryHeadItsOwnRowsBitForBit) {
  // Six heads of 20 query blocks (the last one short) under a window: the fused kernel deals runs of
  // neighbouring blocks (cpu/fused.cpp, a chunk of 3 here, the head's last run of 2), each block
  // computed as it would be alone; the one-head problem, dealt block by block, gives the same bits.
  Problem p = random_problem(1250, 16, 16, 3, 6);
  p.mask = MaskKind::Causal;
  p.mods.window = 100;
  const Trace all = cpu_fused(p);
  expect_pass(p, all, "window 100, six heads");
  for (int h = 0; h < p.heads; ++h)
    EXPECT_EQ(all.output.middleRows(static_cast<Eigen::Index>(h) * p.n(), p.n()), cpu_fused(one_head(p, h)).output)
        << h;
}

TEST(Modifications, WalkSkipsTheTilesTheBlockMaskRulesOutAndSaysWhy) {
  Problem p = test::make_problem(64, 8, 8, 1, MaskKind::Causal, 1.0, 5);
  p.mods.window = 10;
  p.mods.alibi = true;
  // Query 40 sees keys 31..40 (tiles [24,32) [32,40) [40,48)); query 41 sees 32..41, and the tile
  // [24,32) ends exactly at its first key, so it is skipped whole.
  for (const auto& [query, want_skipped] : {std::pair{40, 5}, std::pair{41, 6}}) {
    const Walk wq = walk_row(p, 0, query, 8);
    const int first = query - 9;
    int skipped = 0;
    for (const WalkTile& t : wq.tiles) {
      const bool outside = t.j1 <= first || t.j0 > query;
      EXPECT_EQ(t.skipped, outside) << "query " << query << " tile from " << t.j0;
      skipped += t.skipped;
      if (t.j1 <= first) EXPECT_EQ(t.skip, WalkTile::Skip::Window) << query << " " << t.j0;
      if (t.j0 > query) EXPECT_EQ(t.skip, WalkTile::Skip::AfterQuery) << query << " " << t.j0;
    }
    EXPECT_EQ(skipped, want_skipped) << query;
  }
  const Walk w = walk_row(p, 0, 40, 8);
  EXPECT_NE(walk_tile_sentence(w, 0, Lang::En).find("outside query 40 (40)'s window"), std::string::npos);
  EXPECT_NE(walk_tile_sentence(w, 0, Lang::Zh).find("窗口之外"), std::string::npos);
  Walk checked = w;
  check_walk(p, checked);
  EXPECT_LT(checked.fp64_error, 1e-5);
  // The walk at the kernel's block size is the kernel, bit for bit.
  const Walk k = walk_row(p, 0, 40, 128);
  const MatrixF fused = cpu_fused(p).output;
  ASSERT_EQ(k.tiles.back().output.size(), 8u);
  for (int c = 0; c < 8; ++c) EXPECT_EQ(k.tiles.back().output[c], fused(40, c)) << c;
  // Documents: another document's tile is skipped.
  Problem d = test::make_problem(64, 8, 8, 1, MaskKind::None, 1.0, 5);
  for (int j = 0; j < 64; ++j) d.edit().documents.push_back(j / 16);
  const Walk wd = walk_row(d, 0, 20, 16);
  EXPECT_EQ(wd.tiles[0].skip, WalkTile::Skip::Document);
  EXPECT_FALSE(wd.tiles[1].skipped);
  EXPECT_NE(walk_tile_sentence(wd, 0, Lang::En).find("other documents"), std::string::npos);
}

// A prefix of every position is accepted (P = m: the whole sequence both ways, no row causal).
TEST(Modifications, APrefixOfEveryPositionIsAccepted) {
  Problem p = test::make_problem(4, 4, 4, 1, MaskKind::None, 1, 1);
  apply_mask_mod_spec(p, "prefix:4");
  EXPECT_NO_THROW(validate(p));
  const Trace t = cpu_staged(p);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_FALSE(std::isinf(t.mask(i, j))) << i << "," << j;
}

// ALiBi's largest distance is max(n, m) - 1: with more queries than keys it is the first query's,
// n - 1 keys past the last key (a slope that would fit m - 1 alone is refused).
TEST(Modifications, AlibisRangeCountsTheQueriesBeyondTheKeys) {
  Problem p;  // 3 queries, 2 keys (as files may give them): query 0 sits at -1
  ProblemInputs in;
  in.q = MatrixF::Random(3, 2);
  in.k = MatrixF::Random(2, 2);
  in.v = MatrixF::Random(2, 2);
  p.set_inputs(std::move(in));
  ASSERT_NO_THROW(validate(p));
  p.mods.alibi = true;
  p.mods.alibi_slopes = {1e38};  // 1e38 * 1 fits half of fp32's range, 1e38 * 2 does not
  try {
    validate(p);
    ADD_FAILURE() << "a slope of 1e38 over a distance of 2 was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.id, Msg::AlibiSlopeRange);
    ASSERT_EQ(e.args.size(), 2u);
    EXPECT_EQ(e.args[1], "2") << e.what();  // the distance named
  }
  p.mods.alibi_slopes = {5e37};
  EXPECT_NO_THROW(validate(p));
}

// Q and K turned by RoPE are held beside the inputs (rotated_qk), in the forward's estimate and
// the backward's, whose gradients of Q and K are held in both frames.
TEST(Modifications, TheMemoryEstimatesCountRopesTurnedQAndK) {
  Problem p = random_problem(24, 40, 16, 8, 3, 4, 2);
  Problem rope = p;
  rope.mods.rope_theta = 10000;
  const std::shared_ptr<const RotatedQK> r = rotated_qk(rope);
  ASSERT_TRUE(r);
  const double turned = 4.0 * static_cast<double>(r->q.size() + r->k().size());
  for (Variant v : {Variant::Staged, Variant::Fused, Variant::Decode}) {
    RunOptions opt;
    opt.variant = v;
    EXPECT_DOUBLE_EQ(host_working_set_bytes(rope, opt) - host_working_set_bytes(p, opt), turned) << to_string(v);
  }
  EXPECT_DOUBLE_EQ(backward_bytes(size_of(rope)) - backward_bytes(size_of(p)), 2 * turned);
  EXPECT_DOUBLE_EQ(fused_backward_bytes(size_of(rope)) - fused_backward_bytes(size_of(p)), turned);
}

TEST(Modifications, SpecsAndTheirRefusalsInBothLanguages) {
  Problem p = test::make_problem(6, 4, 4, 2, MaskKind::None, 1, 1);
  apply_score_mod_spec(p, "alibi+softcap:30");
  EXPECT_TRUE(p.mods.alibi);
  EXPECT_EQ(p.mods.softcap, 30);
  apply_score_mod_spec(p, "alibi:0.5/0.25");
  EXPECT_EQ(p.mods.alibi_slopes, (std::vector<double>{0.5, 0.25}));
  EXPECT_EQ(p.mods.softcap, 0);  // a spec is the whole set
  apply_mask_mod_spec(p, "causal,window:3");
  EXPECT_EQ(p.mask, MaskKind::Causal);
  EXPECT_EQ(p.mods.window, 3);
  validate(p);
  EXPECT_EQ(modifications_text(p, Lang::En), "ALiBi (slopes 0.5/0.25); window 3");
  EXPECT_EQ(modifications_text(p, Lang::Zh), "ALiBi（斜率 0.5/0.25）；窗口 3");

  const auto refusal = [](const std::function<void()>& f) -> InputError {
    try {
      f();
    } catch (const InputError& e) {
      return e;
    }
    ADD_FAILURE() << "no refusal";
    return InputError("none");
  };
  Problem q = test::make_problem(6, 3, 4, 2, MaskKind::None, 1, 1);
  struct Case {
    std::function<void()> f;
    Msg id;
    std::string en;
  };
  const std::vector<Case> cases = {
      {[&] { apply_rope_spec(q, "0"); }, Msg::RopeTheta, "θ must be a finite number > 0, got 0"},
      {[&] { apply_rope_spec(q, "abc"); }, Msg::RopeTheta, "got 'abc'"},
      {[&] {
         Problem r = q;
         apply_rope_spec(r, "10000");
         validate(r);
       },
       Msg::RopeOddDim, "d_k must be even, got 3"},
      {[&] { apply_score_mod_spec(q, "softcap:-1"); }, Msg::SoftcapInvalid, "got -1"},
      {[&] { apply_score_mod_spec(q, "softcap:"); }, Msg::SoftcapInvalid, "got ''"},
      // Past fp32's range (C or 1 / C would be inf in the kernels), a slope too.
      {[&] { apply_score_mod_spec(q, "softcap:1e39"); }, Msg::SoftcapInvalid, "got 1e39"},
      {[&] { apply_score_mod_spec(q, "softcap:1e-39"); }, Msg::SoftcapInvalid, "got 1e-39"},
      {[&] { apply_score_mod_spec(q, "alibi:0.5/-1e39"); }, Msg::AlibiSlopeValue, "got -1e39"},
      {[&] { apply_score_mod_spec(q, "alibi,alibi"); }, Msg::ModTwice, "'alibi' is given twice"},
      {[&] { apply_score_mod_spec(q, "tanh"); }, Msg::ScoreModUnknown, "unknown score modification 'tanh'"},
      {[&] {
         Problem r = q;
         apply_score_mod_spec(r, "alibi:1/2/3");
         validate(r);
       },
       Msg::AlibiSlopeCount, "one per head (2 in all), got 3"},
      {[&] { apply_mask_mod_spec(q, "window:0"); }, Msg::WindowInvalid, "got 0"},
      {[&] { apply_mask_mod_spec(q, "window:-2"); }, Msg::WindowInvalid, "got '-2'"},
      {[&] { apply_mask_mod_spec(q, "sliding"); }, Msg::MaskModUnknown, "unknown mask modification 'sliding'"},
      // A file's form without the file: said so, not "unknown".
      {[&] { apply_mask_mod_spec(q, "document:"); }, Msg::ModFileMissing, "'document:' names no file: give document:FILE"},
      {[&] { apply_mask_mod_spec(q, "causal,document"); }, Msg::ModFileMissing, "'document' names no file"},
      {[&] { apply_score_mod_spec(q, "bias:"); }, Msg::ModFileMissing, "'bias:' names no file: give bias:FILE"},
      {[&] {
         Problem r = q;
         apply_mask_mod_spec(r, "prefix:9");
         validate(r);
       },
       Msg::PrefixInvalid, "from 1 to the 6 positions, got 9"},
      // Its form alone, before the positions are known (bench's lists and the viewer's flags read
      // specs on a stand-in problem): no count of positions named.
      {[&] { apply_mask_mod_spec(q, "prefix:x"); }, Msg::PrefixNotWhole, "the prefix P must be a whole number >= 1 (at most 9 digits), got 'x'"},
      {[&] { apply_mask_mod_spec(q, "prefix:0"); }, Msg::PrefixNotWhole, "the prefix P must be a whole number >= 1 (at most 9 digits), got 0"},
      {[&] { apply_mask_mod_spec(q, "window:99999999999"); }, Msg::WindowInvalid, "(at most 9 digits), got '99999999999'"},
      {[&] { apply_mask_mod_spec(q, "window:1000000000"); }, Msg::WindowInvalid, "(at most 9 digits), got '1000000000'"},
      {[&] {
         Problem r = q;
         r.edit().bias = MatrixF::Zero(5, 6);
         validate(r);
       },
       Msg::BiasShape, "the bias is 5x6 but must be 6x6 (shared by every head) or 12x6"},
      // Rows right for one per head, columns not (the kernels would read past the bias).
      {[&] {
         Problem r = q;
         r.edit().bias = MatrixF::Zero(12, 7);
         validate(r);
       },
       Msg::BiasShape, "the bias is 12x7 but must be 6x6 (shared by every head) or 12x6"},
      {[&] {
         Problem r = q;
         r.edit().bias = MatrixF::Zero(6, 5);
         validate(r);
       },
       Msg::BiasShape, "the bias is 6x5 but must be 6x6"},
      // A base θ set on the problem itself (the library's callers; --rope refuses it first).
      {[&] {
         Problem r = test::make_problem(6, 4, 4, 2, MaskKind::None, 1, 1);
         r.mods.rope_theta = -10000;
         validate(r);
       },
       Msg::RopeTheta, "got -10000"},
      {[&] {
         Problem r = q;
         r.edit().bias = MatrixF::Zero(6, 6);
         r.edit().bias(2, 3) = std::numeric_limits<float>::infinity();
         validate(r);
       },
       Msg::BiasValue, "got inf at row 2, column 3"},
      {[&] {
         Problem r = q;
         r.edit().documents = {0, 0, 1};
         validate(r);
       },
       Msg::DocumentsLength, "there are 3 document ids but 6 positions"},
      {[&] {
         // More queries than keys: the first queries sit before every key, at no id.
         Problem r = test::make_problem(4, 4, 4, 1, MaskKind::None, 1, 1);
         ProblemInputs& in = r.edit();
         in.q = MatrixF::Ones(6, 4);
         in.query_tokens.clear();
         in.documents = {0, 0, 1, 1};
         validate(r);
       },
       Msg::DocumentsQueriesOverKeys, "got 6 queries and 4 keys"},
      {[&] {
         // One past the positions (P = m is all of them, accepted below).
         Problem r = test::make_problem(4, 4, 4, 1, MaskKind::None, 1, 1);
         apply_mask_mod_spec(r, "prefix:5");
         validate(r);
       },
       Msg::PrefixInvalid, "got 5"},
      {[&] {
         // A prefix is causal: more queries than keys refused as with causal+prefix:P (the
         // random problems against torch found prefix:P alone running them).
         Problem r = test::make_problem(4, 4, 4, 1, MaskKind::None, 1, 1);
         r.edit().q = MatrixF::Ones(6, 4);
         r.edit().query_tokens.clear();
         apply_mask_mod_spec(r, "prefix:2");
         validate(r);
       },
       Msg::QueriesOverKeys, "there can be no more queries than keys, got 6 queries and 4 keys"},
      {[&] {
         // Documents and a window that leave row 3 without a key it may see.
         Problem r = q;
         r.mask = MaskKind::Causal;
         r.edit().documents = {0, 0, 0, 1, 1, 1};
         r.mods.window = 1;
         r.mods.prefix = 0;
         r.edit().custom_mask = MatrixF();
         r.edit().documents = {0, 0, 0, 1, 1, 1};
         validate(r);  // row 3 sees itself: valid
         r.mask = MaskKind::Custom;
         r.edit().custom_mask = MatrixF::Zero(6, 6);
         r.edit().custom_mask(3, 3) = kNegInf;
         validate(r);
       },
       Msg::FullyMaskedRow, "row 3 (3) is fully masked"},
  };
  for (const Case& c : cases) {
    const InputError e = refusal(c.f);
    EXPECT_EQ(e.id, c.id) << e.what();
    EXPECT_NE(std::string(e.what()).find(c.en), std::string::npos) << e.what();
    const std::string zh = render_message(e.id, e.args, Lang::Zh);
    EXPECT_NE(zh, render_message(e.id, e.args, Lang::En)) << zh;
  }
}

// Blanks around a number in a spec are dropped for every kind of number alike: a window and a
// prefix as the soft-cap and the slopes (and the temperature).
TEST(Modifications, BlanksAroundASpecsNumbersAreDropped) {
  Problem a = random_problem(6, 4, 4, 1), b = a;
  apply_mask_mod_spec(a, "window: 2,prefix:3 ");
  apply_mask_mod_spec(b, "window:2,prefix:3");
  EXPECT_EQ(a.mods.window, 2);
  EXPECT_EQ(a.mods.prefix, 3);
  apply_score_mod_spec(a, "softcap: 30");
  EXPECT_EQ(a.mods.softcap, 30);
  EXPECT_THROW(apply_mask_mod_spec(a, "window: "), InputError);
  EXPECT_THROW(apply_mask_mod_spec(a, "window:2 2"), InputError);
  EXPECT_EQ(trim_blanks(" \t1e3\r\n"), "1e3");
  EXPECT_EQ(trim_blanks("  "), "");
}

TEST(Modifications, FilesForTheBiasAndTheDocuments) {
  test::TempDir dir;
  Problem p = test::make_problem(4, 4, 4, 1, MaskKind::None, 1, 1);
  test::write_file(dir.file("bias.csv"), "0,1,2,3\n0,0,0,0\n1,1,1,1\n-1,-2,-3,-4\n");
  test::write_file(dir.file("docs.csv"), "0,0,1,1\n");
  apply_score_mod_spec(p, "bias:" + dir.file("bias.csv"));
  apply_mask_mod_spec(p, "document:" + dir.file("docs.csv"));
  validate(p);
  EXPECT_EQ(p.bias()(3, 2), -3.f);
  EXPECT_EQ(p.documents(), (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(modifications_text(p, Lang::En), "bias bias.csv (shared); documents docs.csv (2)");
  expect_pass(p, cpu_fused(p), "files");
  // The refusal of a documents file: its id, first argument and text.
  struct Refusal {
    Msg id = Msg::None;
    std::string arg, text;
  };
  const auto refusal = [&](const char* name, const std::string& content) {
    test::write_file(dir.file(name), content);
    try {
      apply_mask_mod_spec(p, "document:" + dir.file(name));
    } catch (const InputError& e) {
      return Refusal{e.id, e.args.empty() ? std::string() : e.args[0], e.what()};
    }
    ADD_FAILURE() << "no refusal of " << name;
    return Refusal{};
  };
  const Refusal half = refusal("bad.csv", "0,0.5,1,1\n");
  EXPECT_EQ(half.id, Msg::DocumentsValue);
  EXPECT_EQ(half.arg, "0.5");
  EXPECT_NE(half.text.find("got 0.5 at position 1"), std::string::npos);
  // From 2^24 on fp32 has rounded the file's id already: the refusal says "≈", not a number the
  // file does not hold.
  const Refusal big = refusal("big.csv", "0,0,99999999,1\n");
  EXPECT_EQ(big.id, Msg::DocumentsValue);
  EXPECT_EQ(big.arg, "≈1e+08");
}

// Names only (the viewer's flags, whose files are read once, with the inputs): the spec's form and
// its repeats are checked and the files' names kept, but no file is opened.
TEST(Modifications, ASpecsFormIsCheckedWithoutReadingItsFiles) {
  Problem p = test::make_problem(4, 4, 4, 1, MaskKind::None, 1, 1);
  apply_score_mod_spec(p, "alibi,bias:/no/such/dir/b.csv", SpecFiles::NamesOnly);
  apply_mask_mod_spec(p, "window:2+document:/no/such/dir/d.csv", SpecFiles::NamesOnly);
  EXPECT_TRUE(p.mods.alibi);
  EXPECT_EQ(p.mods.window, 2);
  EXPECT_EQ(p.mods.bias_name, "b.csv");
  EXPECT_EQ(p.mods.documents_name, "d.csv");
  EXPECT_EQ(p.bias().size(), 0);
  EXPECT_TRUE(p.documents().empty());
  EXPECT_THROW(apply_score_mod_spec(p, "bias:/x/a.csv,bias:/x/b.csv", SpecFiles::NamesOnly), InputError);
  EXPECT_THROW(apply_mask_mod_spec(p, "document:/x/a.csv+document:/x/b.csv", SpecFiles::NamesOnly), InputError);
  EXPECT_THROW(apply_score_mod_spec(p, "bias:", SpecFiles::NamesOnly), InputError);
  // Read, the same spec opens its file.
  EXPECT_THROW(apply_score_mod_spec(p, "bias:/no/such/dir/b.csv"), InputError);
}

}  // namespace
}  // namespace attnlab
