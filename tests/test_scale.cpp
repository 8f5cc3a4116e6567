// The problem's explicit scale (Problem::scale, a captured model's `scale=`): every CPU path uses
// it in place of 1/sqrt(d_k), the default stays the old expression bit for bit, validation refuses
// a scale that is not a finite number > 0, and the texts print an explicit scale as a number.
#include "core/report.h"
#include "core/stats.h"
#include "cpu/cpu_backend.h"
#include "cpu/walk.h"
#include "core/walk.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

namespace attnlab {
namespace {

double rel_err(const MatrixF& out, const MatrixD& ref) {
  const double s = std::max(ref.cwiseAbs().maxCoeff(), 1e-300);
  return (out.cast<double>() - ref).cwiseAbs().maxCoeff() / s;
}

// The fp64 output of one head computed here from the definition, with scale s and temperature T.
MatrixD direct(const Problem& p, double s) {
  const MatrixD q = p.q().cast<double>(), k = p.k().cast<double>(), v = p.v().cast<double>();
  const MatrixD mk = mask_matrix(p).cast<double>();
  MatrixD out(p.q().rows(), p.d_v());
  for (int h = 0; h < p.heads; ++h) {
    MatrixD l = (q.middleRows(h * p.n(), p.n()) * k.middleRows(h * p.m(), p.m()).transpose()) * s;
    l = (l + mk) / p.temperature;
    for (int r = 0; r < l.rows(); ++r) {
      const double mx = l.row(r).maxCoeff();
      Eigen::RowVectorXd w = (l.row(r).array() - mx).exp().matrix();
      w /= w.sum();
      out.row(h * p.n() + r) = w * v.middleRows(h * p.m(), p.m());
    }
  }
  return out;
}

TEST(Scale, DefaultHelpersAreTheOldExpressions) {
  for (int d_k : {1, 3, 7, 64, 80, 128}) {
    Problem p = random_problem(4, d_k, 2, 1);
    p.temperature = 0.85;
    EXPECT_EQ(scale_divisor<float>(p), std::sqrt(static_cast<float>(d_k)));
    EXPECT_EQ(scale_divisor<double>(p), std::sqrt(static_cast<double>(d_k)));
    EXPECT_EQ(fused_scale(p),
              static_cast<float>(1.0 / (std::sqrt(static_cast<double>(d_k)) * 0.85)));
    EXPECT_DOUBLE_EQ(p.scale_value(), 1.0 / std::sqrt(static_cast<double>(d_k)));
  }
}

TEST(Scale, EveryCpuPathUsesAnExplicitScale) {
  for (MaskKind mask : {MaskKind::None, MaskKind::Causal})
    for (double s : {0.05, 0.3, 1.0}) {
      Problem p = random_problem(37, 16, 8, 11, 2);
      p.mask = mask;
      p.temperature = 0.9;
      p.scale = s;
      SCOPED_TRACE("scale " + std::to_string(s) + " mask " + std::string(to_string(mask)));
      const MatrixD want = direct(p, s);
      const TraceD ref = reference_fp64(p);
      EXPECT_LE(rel_err(ref.output.cast<float>(), want), 1e-6);
      EXPECT_LE(rel_err(cpu_staged(p).output, want), 1e-5);
      EXPECT_LE(rel_err(cpu_fused(p).output, want), 1e-5);
      EXPECT_LE(rel_err(cpu_fused_bf16(p).output, want), 3e-2);
      // The scaled stage is scores times the scale.
      const Trace st = cpu_staged(p);
      EXPECT_NEAR(st.scaled(3, 5), st.scores(3, 5) * s, 1e-5 * std::abs(st.scores(3, 5)) + 1e-7);
      // An explicit scale different from 1/sqrt(d_k) changes the result.
      Problem d = p;
      d.scale.reset();
      if (std::abs(s - 0.25) > 1e-9) EXPECT_GT(rel_err(cpu_staged(d).output, want), 1e-3);
    }
}

TEST(Scale, WalkUsesTheScaleAndSaysSo) {
  Problem p = random_problem(20, 8, 4, 3);
  p.scale = 0.7;
  const Walk w = walk_row(p, 0, 5, 4);
  EXPECT_FLOAT_EQ(static_cast<float>(w.scale), 0.7f);
  const MatrixD want = direct(p, 0.7);
  for (int c = 0; c < 4; ++c) EXPECT_NEAR(w.output[c], want(5, c), 1e-5);
  EXPECT_NE(render_walk(w, Lang::En, Format::Text).find("explicit scale s = 0.7"), std::string::npos);
  p.scale.reset();
  EXPECT_NE(render_walk(walk_row(p, 0, 5, 4), Lang::En, Format::Text).find("1/(√d_k·T)"), std::string::npos);
}

TEST(Scale, ValidationRefusesBadScales) {
  for (double s : {0.0, -1.0, std::numeric_limits<double>::infinity(),
                   std::numeric_limits<double>::quiet_NaN(), 1e300}) {
    Problem p = random_problem(3, 2, 2, 1);
    p.scale = s;
    const std::string msg = test::message_of<InputError>([&] { validate(p); });
    EXPECT_NE(msg.find("scale must be a finite number > 0"), std::string::npos) << msg;
  }
}

TEST(Scale, TextsPrintAnExplicitScaleAndKeepTheDefaultWording) {
  Problem p = random_problem(6, 4, 3, 2);
  const Trace t0 = cpu_staged(p);
  const std::string text0 = render(p, t0, 0, Lang::En, Format::Text);
  EXPECT_NE(text0.find("1/√4 = 0.500"), std::string::npos);
  EXPECT_NE(text0.find("QKᵀ / √d_k"), std::string::npos);
  p.scale = 0.125;
  const Trace t = cpu_staged(p);
  const std::string text = render(p, t, 0, Lang::En, Format::Text);
  EXPECT_NE(text.find("explicit scale 0.125"), std::string::npos) << text;
  EXPECT_EQ(text.find("1/√4 = 0.500"), std::string::npos);
  const std::string zh = render(p, t, 0, Lang::Zh, Format::Text);
  EXPECT_NE(zh.find("显式缩放 0.125"), std::string::npos);
  EXPECT_NE(describe(p, t, 0, Lang::En).find("explicit scale 0.125"), std::string::npos);
  const std::string js = render(p, t, 0, Lang::En, Format::Json);
  EXPECT_NE(js.find("\"scale\": 0.125"), std::string::npos) << js.substr(js.size() - 400);
}

}  // namespace
}  // namespace attnlab
