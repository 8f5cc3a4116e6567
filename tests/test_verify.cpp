// core/verify: the comparison of a Trace against the fp64 reference, on CPU traces. The CPU
// staged and fused backends pass on the demo, causal and custom-mask problems; deliberately
// perturbed traces fail in the stage that was touched; a non-zero masked weight, a lost -inf, a NaN
// and a shape mismatch are all caught. `attnlab verify` exit codes (0 PASS, 3 FAIL, 2 bad input).
#include "core/inputs.h"
#include "core/verify.h"
#include "cpu/cpu_backend.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace attnlab {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

Problem causal_demo() {
  Problem p = demo_problem();
  p.mask = MaskKind::Causal;
  return p;
}

// Five masked pairs, no row fully masked.
Problem custom_demo() {
  Problem p = demo_problem();
  p.mask = MaskKind::Custom;
  p.edit().custom_mask = MatrixF::Zero(5, 5);
  p.edit().custom_mask(0, 1) = kNegInf;
  p.edit().custom_mask(0, 4) = kNegInf;
  p.edit().custom_mask(2, 2) = kNegInf;
  p.edit().custom_mask(3, 0) = kNegInf;
  p.edit().custom_mask(4, 3) = kNegInf;
  return p;
}

const StageCheck& stage(const VerifyReport& r, const std::string& name) {
  for (const StageCheck& c : r.stages)
    if (c.stage == name) return c;
  throw std::runtime_error("no stage " + name);
}

TEST(Verify, CpuStagedPassesOnDemoCausalAndCustom) {
  const struct {
    Problem p;
    std::size_t masked;
  } cases[] = {{demo_problem(), 0}, {causal_demo(), 10}, {custom_demo(), 5}};
  for (const auto& c : cases) {
    const VerifyReport r = verify_trace(c.p, cpu_staged(c.p), reference_fp64(c.p));
    EXPECT_TRUE(r.pass) << render_verify_text(r);
    ASSERT_EQ(r.stages.size(), 6u);
    EXPECT_TRUE(r.weights_checked);
    EXPECT_EQ(r.masked_count, c.masked);
    EXPECT_TRUE(r.masked_zero);
    EXPECT_LE(r.worst_row_sum_dev, 1e-6);
    for (const StageCheck& s : r.stages) EXPECT_LE(s.max_rel_err.value_or(0.0), 1e-5) << s.stage;
  }
}

// Where no entry of a stage is above its atol (V all 0: an output of zeros) no relative error is
// defined: none, printed "-" and null, not 0, which would read as "no error".
TEST(Verify, ARelativeErrorOverNoEntryIsNone) {
  Problem p = demo_problem();
  p.edit().v.setZero();
  const VerifyReport r = verify_trace(p, cpu_fused(p), reference_fp64(p));
  EXPECT_TRUE(r.pass) << render_verify_text(r);
  EXPECT_FALSE(stage(r, "output").max_rel_err.has_value());
  const std::string text = render_verify_text(r);
  std::istringstream lines(text);
  std::string line, stage_name, abs_err, rel_err;
  while (std::getline(lines, line) && line.rfind("output ", 0) != 0) {
  }
  std::istringstream(line) >> stage_name >> abs_err >> rel_err;
  EXPECT_EQ(rel_err, "-") << text;
  EXPECT_TRUE(nlohmann::json::parse(render_verify_json(r))["stages"][0]["max_rel_err"].is_null());
  EXPECT_TRUE(stage(verify_trace(demo_problem(), cpu_fused(demo_problem()), reference_fp64(demo_problem())), "output")
                  .max_rel_err.has_value());
}

TEST(Verify, FusedTraceComparesOutputOnly) {
  const Problem p = causal_demo();
  const VerifyReport r = verify_trace(p, cpu_fused(p), reference_fp64(p));
  EXPECT_TRUE(r.pass) << render_verify_text(r);
  ASSERT_EQ(r.stages.size(), 1u);
  EXPECT_EQ(r.stages[0].stage, "output");
  EXPECT_FALSE(r.weights_checked);
}

// Scores and outputs below fp32's normal range (Q and K of size 1e-20, V of 1e-40) round by a
// subnormal's spacing whatever their size: one 2^-149 step is within the tolerance, staged and
// fused (1e-6 of max|ref| alone sat below that step: a correct run read FAIL).
TEST(Verify, SubnormalResultsPassAndTheirFloorIsSmall) {
  Problem p = random_problem(6, 4, 2, 1, 3);
  p.edit().q *= 1e-20f;
  p.edit().k *= 1e-20f;
  for (const Trace& t : {cpu_staged(p), cpu_fused(p)}) {
    const VerifyReport r = verify_trace(p, t, reference_fp64(p));
    EXPECT_TRUE(r.pass) << render_verify_text(r);
  }
  Problem v = random_problem(6, 4, 2, 1, 4);
  v.edit().v *= 1e-40f;
  for (const Trace& t : {cpu_staged(v), cpu_fused(v)}) {
    const VerifyReport r = verify_trace(v, t, reference_fp64(v));
    EXPECT_TRUE(r.pass) << render_verify_text(r);
  }
  // The floor stays far below any normal number's tolerance, and a score off by a normal-sized
  // amount still fails.
  const TraceD ref = reference_fp64(p);
  EXPECT_LT(default_tolerance("scores", p, ref, Precision::FP32).atol, 1e-40);
  Trace bad = cpu_staged(p);
  bad.scores(1, 1) += 1e-30f;
  EXPECT_FALSE(verify_trace(p, bad, ref).pass);
}

TEST(Verify, PerturbedScoreFailsInThatStage) {
  const Problem p = demo_problem();
  Trace t = cpu_staged(p);
  t.scores(1, 2) += 1e-3f;
  const VerifyReport r = verify_trace(p, t, reference_fp64(p));
  EXPECT_FALSE(r.pass);
  const StageCheck& s = stage(r, "scores");
  EXPECT_FALSE(s.pass);
  EXPECT_EQ(s.failures, 1u);
  EXPECT_EQ(s.worst_row, 1);
  EXPECT_EQ(s.worst_col, 2);
  EXPECT_NEAR(s.max_abs_err, 1e-3, 1e-5);
  EXPECT_TRUE(stage(r, "output").pass);
  EXPECT_NE(render_verify_text(r).find("FAIL"), std::string::npos);
}

TEST(Verify, ARowWhoseWeightsEachPassButDoNotSumToOneFails) {
  // Every weight of row 3 moved by 0.9 of the weights' tolerance: each entry passes, the row's
  // sum is off by more than the row-sum tolerance, and the verdict says so.
  const Problem p = random_problem(16, 16, 8, 8, 1, 1, 1);
  const TraceD ref = reference_fp64(p);
  Trace t = cpu_staged(p);
  const double atol = default_tolerance("weights", p, ref, Precision::FP32).atol;
  t.weights.row(3).array() += static_cast<float>(0.9 * atol);
  const VerifyReport r = verify_trace(p, t, ref);
  EXPECT_TRUE(stage(r, "weights").pass);
  EXPECT_FALSE(r.row_sum_pass);
  EXPECT_EQ(r.worst_row_sum_row, 3);
  EXPECT_FALSE(r.pass);
}

TEST(Verify, OutputToleranceIsRelative1e5) {
  const Problem p = demo_problem();
  const TraceD ref = reference_fp64(p);
  Trace t = cpu_staged(p);
  t.output(2, 0) = static_cast<float>(ref.output(2, 0) * (1 + 1e-4));
  EXPECT_FALSE(verify_trace(p, t, ref).pass);
  t.output(2, 0) = static_cast<float>(ref.output(2, 0) * (1 + 2e-6));
  EXPECT_TRUE(verify_trace(p, t, ref).pass);
}

TEST(Verify, NonZeroMaskedWeightIsDetected) {
  const Problem p = causal_demo();
  Trace t = cpu_staged(p);
  t.weights(0, 3) = 1e-30f;  // within every tolerance, but not exactly 0
  const VerifyReport r = verify_trace(p, t, reference_fp64(p));
  EXPECT_FALSE(r.masked_zero);
  EXPECT_EQ(r.masked_nonzero, 1u);
  EXPECT_FALSE(r.pass);
  EXPECT_NE(render_verify_text(r).find("masked weights exactly 0: no"), std::string::npos);
}

TEST(Verify, LogitsMustKeepMinusInfinity) {
  const Problem p = causal_demo();
  Trace t = cpu_staged(p);
  t.logits(0, 4) = -1e30f;
  const VerifyReport r = verify_trace(p, t, reference_fp64(p));
  EXPECT_FALSE(stage(r, "logits").pass);
  EXPECT_EQ(stage(r, "logits").inf_mismatches, 1u);
  EXPECT_FALSE(r.pass);
}

TEST(Verify, MaskStageIsExact) {
  const Problem p = causal_demo();
  Trace t = cpu_staged(p);
  t.mask(1, 2) = 0.f;  // a masked pair reported as kept
  EXPECT_FALSE(stage(verify_trace(p, t, reference_fp64(p)), "mask").pass);
}

TEST(Verify, NaNNeverPasses) {
  const Problem p = demo_problem();
  Trace t = cpu_staged(p);
  t.output(0, 1) = std::numeric_limits<float>::quiet_NaN();
  VerifyOptions loose;
  loose.atol = 1e9;
  const VerifyReport r = verify_trace(p, t, reference_fp64(p), loose);
  EXPECT_FALSE(stage(r, "output").pass);
  EXPECT_FALSE(r.pass);
}

TEST(Verify, RowSumDeviationIsReported) {
  const Problem p = demo_problem();
  Trace t = cpu_staged(p);
  t.weights(3, 1) += 1e-3f;
  const VerifyReport r = verify_trace(p, t, reference_fp64(p));
  EXPECT_FALSE(r.row_sum_pass);
  EXPECT_EQ(r.worst_row_sum_row, 3);
  EXPECT_NEAR(r.worst_row_sum_dev, 1e-3, 1e-5);
  EXPECT_FALSE(r.pass);
}

TEST(Verify, ShapeMismatchFailsWithNote) {
  const Problem p = demo_problem();
  Trace t = cpu_staged(p);
  t.output.resize(4, 2);
  t.output.setZero();
  const VerifyReport r = verify_trace(p, t, reference_fp64(p));
  EXPECT_FALSE(stage(r, "output").pass);
  EXPECT_NE(stage(r, "output").note.find("shape (4, 2)"), std::string::npos);
}

TEST(Verify, ToleranceOverrideAppliesToEveryStageButTheMask) {
  const Problem p = demo_problem();
  Trace t = cpu_staged(p);
  t.scores(1, 2) += 1e-3f;
  VerifyOptions o;
  o.atol = 1e-2;
  o.rtol = 0;
  const VerifyReport r = verify_trace(p, t, reference_fp64(p), o);
  EXPECT_TRUE(r.pass) << render_verify_text(r);
  EXPECT_EQ(stage(r, "scores").tol.atol, 1e-2);
  EXPECT_EQ(stage(r, "mask").tol.atol, 0);
}

TEST(Verify, DefaultTolerances) {
  const Problem p = demo_problem();
  const TraceD ref = reference_fp64(p);
  const Tolerance scores = default_tolerance("scores", p, ref, Precision::FP32);
  EXPECT_EQ(scores.rtol, 1e-5);
  EXPECT_NEAR(scores.atol, 1e-6 * ref.scores.cwiseAbs().maxCoeff(), 1e-12);
  EXPECT_GE(default_tolerance("weights", p, ref, Precision::FP32).atol, 1e-6);
  EXPECT_LT(default_tolerance("weights", p, ref, Precision::FP32).atol, 2e-6);
  const Tolerance bf16 = default_tolerance("output", p, ref, Precision::BF16);
  EXPECT_EQ(bf16.atol, 2e-2);
  EXPECT_EQ(bf16.rtol, 2e-2);
  // A low temperature makes fp32 logits large; the weights' allowance grows with them.
  Problem cold = p;
  cold.temperature = 1e-3;
  const TraceD cold_ref = reference_fp64(cold);
  EXPECT_GT(default_tolerance("weights", cold, cold_ref, Precision::FP32).atol, 1e-5);
}

// bf16 at a low temperature: its logits are known to about one bf16 rounding of their size, so
// the weights' and the output's allowance grows with the largest logit (L16 = 2^-8 max|logit|), as
// fp32's does with L. The staged, fused and decode bf16 runs pass; a result moved by twice its
// allowance fails, so the allowance is a bound and not a pass for anything.
TEST(Verify, Bf16AtALowTemperatureIsJudgedByWhatBf16LogitsDeliver) {
  Problem p = random_problem(33, 64, 64, 0);
  p.temperature = 0.05;
  const TraceD ref = reference_fp64(p);
  const double l16 = std::ldexp(1.0, -8) * ref.logits.cwiseAbs().maxCoeff();
  const Tolerance out = default_tolerance("output", p, ref, Precision::BF16);
  double pv = 0;  // the largest Σ_j P_ij |V_jc|
  for (int i = 0; i < p.n(); ++i)
    for (int c = 0; c < p.d_v(); ++c) {
      double s = 0;
      for (int j = 0; j < p.m(); ++j) s += ref.weights(i, j) * std::abs(p.v()(j, c));
      pv = std::max(pv, s);
    }
  EXPECT_NEAR(out.atol, std::max(2e-2, l16 * p.v().cwiseAbs().maxCoeff() + 3 * std::ldexp(1.0, -8) * pv), 1e-12);
  EXPECT_GT(out.atol, 2e-2);
  EXPECT_DOUBLE_EQ(default_tolerance("weights", p, ref, Precision::BF16).atol, std::max(2e-2, 0.5 * l16));
  // It falls with the logits as the temperature rises, to 2e-2 for the demo's small ones.
  Problem warm = p;
  warm.temperature = 1;
  EXPECT_LT(default_tolerance("output", warm, reference_fp64(warm), Precision::BF16).atol, out.atol / 10);
  const Problem demo = demo_problem();
  EXPECT_EQ(default_tolerance("output", demo, reference_fp64(demo), Precision::BF16).atol, 2e-2);
  for (const Variant v : {Variant::Staged, Variant::Fused, Variant::Decode}) {
    RunOptions opt;
    opt.variant = v;
    opt.precision = Precision::BF16;
    Trace t = make_cpu_backend()->run(p, opt);
    EXPECT_TRUE(verify_trace(p, t, ref).pass) << to_string(v);
    t.output(5, 7) += static_cast<float>(2 * out.atol + 2e-2 * std::abs(ref.output(5, 7)));
    const VerifyReport bad = verify_trace(p, t, ref);
    EXPECT_FALSE(bad.pass) << to_string(v);
    EXPECT_EQ(stage(bad, "output").failures, 1u) << to_string(v);
  }
}

// bf16 with a large V at a high temperature: the weights are near uniform, so an output entry is a
// sum of terms of about max|V| that cancel to near 0, and 2e-2 of |O| misses the rounding of V and
// P to bf16 (each relative to Σ P |V|). Every bf16 variant passes on the bound that sum gives
// (V16), and an entry moved by twice it fails.
TEST(Verify, Bf16WithALargeVIsJudgedByTheSumBehindEachEntry) {
  Problem p = random_problem(256, 32, 32, 1);
  p.edit().v *= 1024.f;
  p.temperature = 1000;
  const TraceD ref = reference_fp64(p);
  const Tolerance out = default_tolerance("output", p, ref, Precision::BF16);
  EXPECT_GT(out.atol, 2e-2);
  EXPECT_LT(out.atol, 1e-2 * p.v().cwiseAbs().maxCoeff()) << "far below V's own range: the check still tells";
  for (const Variant v : {Variant::Staged, Variant::Fused, Variant::Decode}) {
    RunOptions opt;
    opt.variant = v;
    opt.precision = Precision::BF16;
    Trace t = make_cpu_backend()->run(p, opt);
    const VerifyReport r = verify_trace(p, t, ref);
    EXPECT_TRUE(r.pass) << to_string(v) << "\n" << render_verify_text(r);
    EXPECT_TRUE(stage(r, "output").informative) << to_string(v);
    t.output(9, 3) += static_cast<float>(2 * out.atol + 2e-2 * std::abs(ref.output(9, 3)));
    EXPECT_EQ(stage(verify_trace(p, t, ref), "output").failures, 1u) << to_string(v);
  }
}

// At an extreme temperature the allowance of fp32 logits' rounding reaches the weights' and the
// output's whole range: the report says those checks cannot tell a wrong value (a trace of the
// weights turned about still passes them), and says nothing of the kind at T = 1.
TEST(Verify, AnAllowanceThatSpansTheStagesRangeIsSaid) {
  Problem p = random_problem(16, 8, 8, 0);
  p.temperature = 1e-30;
  const TraceD ref = reference_fp64(p);
  Trace t = cpu_staged(p);
  t.weights = t.weights.rowwise().reverse().eval();  // still in [0, 1], rows still summing to 1
  t.output = t.weights * p.v();
  const VerifyReport r = verify_trace(p, t, ref);
  EXPECT_TRUE(r.pass);
  EXPECT_FALSE(stage(r, "weights").informative);
  EXPECT_FALSE(stage(r, "output").informative);
  EXPECT_EQ(stage(r, "weights").range, 1.0);
  EXPECT_TRUE(stage(r, "logits").informative);
  EXPECT_EQ(r.uninformative(), (std::vector<std::string>{"weights", "output"}));
  const std::string en = render_verify_text(r, Lang::En), zh = render_verify_text(r, Lang::Zh);
  EXPECT_TRUE(test::contains(en, "warning: at this temperature the error that rounding fp32 logits allows covers the "
                                 "whole range of weights, output"))
      << en;
  EXPECT_TRUE(test::contains(en, "(the allowance spans the stage's whole range 1: any value in range passes)")) << en;
  EXPECT_TRUE(test::contains(zh, "注意：在此温度下")) << zh;
  const auto j = nlohmann::json::parse(render_verify_json(r));
  EXPECT_EQ(j["stages"].back()["informative"], false);

  p.temperature = 1;
  const VerifyReport warm = verify_trace(p, cpu_staged(p), reference_fp64(p));
  EXPECT_TRUE(warm.uninformative().empty());
  EXPECT_FALSE(test::contains(render_verify_text(warm, Lang::En), "warning"));
  // A V whose columns are constant leaves the output nothing to tell apart: not a warning.
  Problem flat = p;
  flat.temperature = 1e-30;
  flat.edit().v = MatrixF::Ones(16, 8);
  const VerifyReport f = verify_trace(flat, cpu_staged(flat), reference_fp64(flat));
  EXPECT_TRUE(stage(f, "output").informative);
}

// The modifications and the source are named, in text and JSON.
TEST(Verify, NamesTheModificationsAndTheSource) {
  Problem p = random_problem(16, 8, 8, 0);
  apply_mask_mod_spec(p, "window:4");
  apply_score_mod_spec(p, "alibi");
  p.source = "synthetic pattern 'sink'";
  p.source_zh = "合成模式 'sink'";
  const VerifyReport r = verify_trace(p, cpu_staged(p), reference_fp64(p));
  const std::string en = render_verify_text(r, Lang::En);
  EXPECT_TRUE(test::contains(en, "\nmodifications: ALiBi (standard slopes); window 4\n")) << en;
  EXPECT_TRUE(test::contains(en, "\nsource: synthetic pattern 'sink'\n")) << en;
  EXPECT_TRUE(test::contains(render_verify_text(r, Lang::Zh), "\n来源：合成模式 'sink'\n"));
  const auto j = nlohmann::json::parse(render_verify_json(r));
  EXPECT_EQ(j["modifications"], "ALiBi (standard slopes); window 4");
  EXPECT_EQ(j["source"], "synthetic pattern 'sink'");
}

TEST(Verify, JsonCarriesTheSameFigures) {
  const Problem p = custom_demo();
  const VerifyReport r = verify_trace(p, cpu_staged(p), reference_fp64(p));
  const auto j = nlohmann::json::parse(render_verify_json(r));
  EXPECT_EQ(j["result"], "PASS");
  EXPECT_EQ(j["backend"], "cpu");
  EXPECT_EQ(j["mask"], "custom");
  ASSERT_EQ(j["stages"].size(), 6u);
  EXPECT_EQ(j["stages"][0]["stage"], "scores");
  EXPECT_DOUBLE_EQ(j["stages"][0]["max_abs_err"].get<double>(), r.stages[0].max_abs_err);
  EXPECT_EQ(j["masked_weights"]["masked"], 5);
  EXPECT_EQ(j["masked_weights"]["all_zero"], true);
}

// The text report follows the language; stage names, figures and the PASS / FAIL word at the
// start of the last line do not.
TEST(Verify, TextFollowsTheLanguage) {
  const Problem p = causal_demo();
  const VerifyReport r = verify_trace(p, cpu_staged(p), reference_fp64(p));
  const std::string en = render_verify_text(r, Lang::En);
  const std::string zh = render_verify_text(r, Lang::Zh);
  EXPECT_EQ(render_verify_text(r), en) << "English is the default";
  for (const char* w : {"verify: backend cpu", "stage     max abs err", "row sums: worst",
                        "masked weights exactly 0: yes (10 of 10 masked entries are 0)"})
    EXPECT_NE(en.find(w), std::string::npos) << w << "\n" << en;
  for (const char* w : {"验证：后端 cpu", "阶段", "最大绝对误差", "结果", "通过", "行和：最差",
                        "被屏蔽的权重恰为 0：是（10 个被屏蔽的位置中有 10 个为 0）", "容差："})
    EXPECT_NE(zh.find(w), std::string::npos) << w << "\n" << zh;
  for (const char* w : {"verify:", "max abs err", "row sums", "masked weights", "tolerances", "pass"})
    EXPECT_EQ(zh.find(w), std::string::npos) << w << "\n" << zh;
  EXPECT_NE(zh.find("\nscores "), std::string::npos) << zh;
  const auto last_line = [](const std::string& s) {
    const std::size_t end = s.find_last_not_of('\n');
    return s.substr(s.rfind('\n', end) + 1, end - s.rfind('\n', end));
  };
  EXPECT_EQ(last_line(en), "PASS");
  EXPECT_EQ(last_line(zh), "PASS（全部通过）");

  VerifyReport failed = r;
  failed.pass = false;
  failed.stages[0].pass = false;
  EXPECT_EQ(last_line(render_verify_text(failed, Lang::Zh)), "FAIL（未通过）");
  EXPECT_NE(render_verify_text(failed, Lang::Zh).find("未通过"), std::string::npos);
}

#ifdef ATTNLAB_BINARY
using test::BinaryRun;
using test::run_attnlab;

TEST(VerifyCli, DemoOnCpuPasses) {
  const BinaryRun c = run_attnlab({"verify", "--backend", "cpu"}, "LANG=C.UTF-8");
  EXPECT_EQ(c.code, 0) << c.out << c.err;
  EXPECT_NE(c.out.find("PASS"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("backend cpu"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("masked weights exactly 0: yes"), std::string::npos) << c.out;
}

// --lang (and LANG) choose the text report's language; the JSON keys stay the same.
TEST(VerifyCli, LangZhPrintsChinese) {
  const BinaryRun zh = run_attnlab({"verify", "--backend", "cpu", "--lang", "zh"}, "LANG=C.UTF-8");
  ASSERT_EQ(zh.code, 0) << zh.out << zh.err;
  EXPECT_NE(zh.out.find("验证：后端 cpu"), std::string::npos) << zh.out;
  EXPECT_NE(zh.out.find("被屏蔽的权重恰为 0：是"), std::string::npos) << zh.out;
  EXPECT_NE(zh.out.find("PASS（全部通过）"), std::string::npos) << zh.out;
  EXPECT_EQ(zh.out.find("masked weights"), std::string::npos) << zh.out;
  const BinaryRun from_env = run_attnlab({"verify", "--backend", "cpu"}, "LANG=zh_CN.UTF-8");
  EXPECT_EQ(from_env.out, zh.out);
  const BinaryRun en = run_attnlab({"verify", "--backend", "cpu", "--lang", "en"}, "LANG=zh_CN.UTF-8");
  EXPECT_NE(en.out.find("masked weights exactly 0: yes"), std::string::npos) << en.out;
  const BinaryRun zh_json =
      run_attnlab({"verify", "--backend", "cpu", "--lang", "zh", "--format", "json"});
  const BinaryRun en_json =
      run_attnlab({"verify", "--backend", "cpu", "--lang", "en", "--format", "json"});
  ASSERT_EQ(zh_json.code, 0) << zh_json.err;
  EXPECT_EQ(zh_json.out, en_json.out);
}

TEST(VerifyCli, RandomCausalJson) {
  const BinaryRun c = run_attnlab({"verify", "--backend", "cpu", "--random", "40", "--dk", "16",
                                   "--dv", "8", "--mask", "causal", "--temperature", "0.5",
                                   "--format", "json"});
  ASSERT_EQ(c.code, 0) << c.out << c.err;
  const auto j = nlohmann::json::parse(c.out);
  EXPECT_EQ(j["result"], "PASS");
  EXPECT_EQ(j["n"], 40);
  EXPECT_EQ(j["masked_weights"]["masked"], 40 * 39 / 2);
}

TEST(VerifyCli, ZeroToleranceFailsWithExit3) {
  // fp32 against fp64 always differs somewhere; with atol = rtol = 0 that is a FAIL.
  const BinaryRun c = run_attnlab({"verify", "--backend", "cpu", "--atol", "0", "--rtol", "0"});
  EXPECT_EQ(c.code, 3) << c.out << c.err;
  EXPECT_NE(c.out.find("FAIL"), std::string::npos) << c.out;
}

TEST(VerifyCli, BadInputExits2) {
  for (const char* args : {"verify --backend cpu --temperature 0", "verify --format csv",
                           "verify --backend cpu --atol -1", "verify --backend nope",
                           "verify --backend cpu --query 5", "verify --random 4 --dk 2 --dv 2 --query x",
                           // They would change nothing in its report: not taken, not ignored.
                           "verify --random 4 --dk 2 --dv 2 --query 1", "verify --tokens a,b,c,d,e",
                           "verify --random 2 --dk 2 --dv 2 --tokens-file /dev/null"}) {
    std::vector<std::string> argv;
    std::istringstream words(args);
    for (std::string w; words >> w;) argv.push_back(w);
    const BinaryRun c = run_attnlab(argv);
    EXPECT_EQ(c.code, 2) << args << "\n" << c.out << c.err;
    EXPECT_EQ(c.err.rfind("error: ", 0), 0u) << args << "\n" << c.err;
  }
}
// The fp64 reference keeps every stage in double even when the fused run does not: a problem it
// cannot hold is refused at once with the estimate, not after minutes of computing.
TEST(VerifyCli, ReferenceThatCannotFitIsRefusedWithTheEstimate) {
  const BinaryRun c = run_attnlab(
      {"verify", "--backend", "cpu", "--variant", "fused", "--random", "200000", "--dk", "4", "--dv", "4"});
  EXPECT_EQ(c.code, 2) << c.err;
  EXPECT_EQ(c.err.rfind("error: verify (the fused run and the fp64 reference of every stage): needs about ", 0), 0u)
      << c.err;
  EXPECT_NE(c.err.find("available; try a smaller N"), std::string::npos) << c.err;
  const BinaryRun zh = run_attnlab(
      {"verify", "--backend", "cpu", "--variant", "fused", "--random", "200000", "--dk", "4", "--dv", "4", "--lang", "zh"});
  EXPECT_EQ(zh.code, 2) << zh.err;
  EXPECT_EQ(zh.err.rfind("error: verify（fused 运行及每个阶段的 fp64 参考）约需 ", 0), 0u) << zh.err;
}
#endif  // ATTNLAB_BINARY

}  // namespace
}  // namespace attnlab
