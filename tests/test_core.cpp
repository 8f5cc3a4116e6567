// Core and CPU-backend tests: the page's demo tables and row statistics, an independent
// recomputation of every stage with plain loops in double, masks, shapes, extreme logits, the
// description text and the registry. The problem's own checks are tests/core/test_problem.cpp.
#include "core/backend.h"
#include "core/format.h"
#include "core/inputs.h"
#include "core/output_range.h"
#include "core/problem.h"
#include "core/stats.h"
#include "cpu/cpu_backend.h"
#include "tests/test_util.h"
#include "engine/registry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

namespace attnlab {
namespace {

using test::message_of;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The page's printed tables (2 decimals).
const double kPageScores[5][5] = {{1.84, 0.49, 1.79, 0.99, 1.94},
                                  {0.55, 1.20, 0.81, 1.56, 0.72},
                                  {1.85, 0.72, 2.10, 1.44, 2.07},
                                  {1.08, 1.43, 1.48, 2.04, 1.34},
                                  {1.98, 0.50, 2.04, 1.11, 2.13}};
const double kPageScaled[5][5] = {{1.06, 0.29, 1.03, 0.57, 1.12},
                                  {0.32, 0.69, 0.47, 0.90, 0.42},
                                  {1.07, 0.42, 1.22, 0.83, 1.20},
                                  {0.62, 0.83, 0.86, 1.18, 0.77},
                                  {1.14, 0.29, 1.18, 0.64, 1.23}};
const double kPageLogits[5][5] = {{1.25, 0.34, 1.22, 0.68, 1.32},
                                  {0.37, 0.82, 0.55, 1.06, 0.49},
                                  {1.25, 0.49, 1.43, 0.97, 1.41},
                                  {0.73, 0.97, 1.01, 1.39, 0.91},
                                  {1.35, 0.34, 1.39, 0.76, 1.45}};
const double kPageWeights[5][5] = {{0.25, 0.10, 0.24, 0.14, 0.27},
                                   {0.15, 0.23, 0.17, 0.29, 0.16},
                                   {0.22, 0.10, 0.26, 0.17, 0.25},
                                   {0.15, 0.19, 0.20, 0.29, 0.18},
                                   {0.25, 0.09, 0.26, 0.14, 0.27}};
const double kPageOutput[5][2] = {
    {0.67, 0.53}, {0.49, 0.66}, {0.65, 0.55}, {0.51, 0.65}, {0.67, 0.53}};

// A printed 2-decimal value v stands for the interval [v - 0.005, v + 0.005]. Some demo cells sit
// exactly on a tie (0.12 + 0.2 + 0.175 = 0.495), which the page's JavaScript doubles and fp32
// round to different sides, so the check is the interval, not the rounded digits.
template <int C>
void expect_table(const MatrixF& got, const double (&want)[5][C], const char* stage) {
  ASSERT_EQ(got.rows(), 5) << stage;
  ASSERT_EQ(got.cols(), C) << stage;
  for (int r = 0; r < 5; ++r)
    for (int c = 0; c < C; ++c)
      EXPECT_NEAR(got(r, c), want[r][c], 0.005 + 1e-6) << stage << " row " << r << " col " << c;
}

TEST(CoreDemo, StagesMatchThePagesTables) {
  const Trace t = cpu_staged(demo_problem());
  expect_table(t.scores, kPageScores, "scores");
  expect_table(t.scaled, kPageScaled, "scaled");
  expect_table(t.logits, kPageLogits, "logits");
  expect_table(t.weights, kPageWeights, "weights");
  expect_table(t.output, kPageOutput, "output");
  for (int r = 0; r < 5; ++r)
    for (int c = 0; c < 5; ++c) EXPECT_EQ(t.mask(r, c), 0.0f);
}

TEST(CoreStats, TiedLargestWeightsNameTheFirstKey) {
  // As numpy's argmax: the first of equal largest weights.
  const float w[] = {0.2f, 0.4f, 0.4f, 0.0f};
  const RowStats s = row_stats(w, nullptr, 4);
  EXPECT_EQ(s.argmax, 1);
  EXPECT_FLOAT_EQ(static_cast<float>(s.max_weight), 0.4f);
}

TEST(CoreDemo, DefaultRowStatisticsMatchThePage) {
  const Problem p = demo_problem();
  const Trace t = cpu_staged(p);
  const RowStats s = row_stats(t, kDemoDefaultQuery);
  // The page: 0.219 0.102 0.260 0.165 0.254; max 26.0 % on 上下文; entropy 1.561; 5 positions.
  const double want[5] = {0.219, 0.102, 0.260, 0.165, 0.254};
  for (int c = 0; c < 5; ++c) EXPECT_NEAR(t.weights(2, c), want[c], 5e-4);
  EXPECT_NEAR(std::round(s.max_weight * 1000) / 10, 26.0, 1e-9);
  EXPECT_EQ(s.argmax, 2);
  EXPECT_NEAR(std::round(s.entropy * 1000) / 1000, 1.561, 1e-9);
  EXPECT_EQ(s.unmasked, 5);
  EXPECT_NEAR(s.perplexity, std::exp(s.entropy), 1e-12);
  EXPECT_NEAR(s.weight_sum, 1.0, 1e-6);
}

TEST(CoreDemo, DescriptionIsThePagesTextInChinese) {
  const Problem p = demo_problem();
  const Trace t = cpu_staged(p);
  EXPECT_EQ(describe(p, t, 2, Lang::Zh),
            "自然语言序列“模型根据上下文分配权重”共有 5 个 token。当前查询是“上下文”，键维度 "
            "d_k=3，原始分数 QK^T 除以 sqrt(d_k) 后再以温度 0.85 进入 softmax。当前行权重依次为 "
            "0.219、0.102、0.260、0.165、0.254，对“上下文”的权重最高。未启用因果掩码；这是双向、"
            "非因果注意力演示。注意力权重不能作为模型预测的完整解释，也不等于因果贡献。");
}

TEST(CoreDemo, DescriptionInEnglishFollowsTheState) {
  Problem p = demo_problem();
  p.temperature = 0.5;
  p.mask = MaskKind::Causal;
  const Trace t = cpu_staged(p);
  const std::string d = describe(p, t, 0, Lang::En);
  EXPECT_NE(d.find("The sequence 模型根据上下文分配权重 has 5 tokens."), std::string::npos) << d;
  EXPECT_NE(d.find("The current query is 模型"), std::string::npos) << d;
  EXPECT_NE(d.find("temperature 0.5 "), std::string::npos) << d;
  EXPECT_NE(d.find("1.000, 0.000, 0.000, 0.000, 0.000"), std::string::npos) << d;
  EXPECT_NE(d.find("A causal mask is applied"), std::string::npos) << d;
  EXPECT_NE(d.find("not causal attribution"), std::string::npos) << d;
  // Sizes in words, singular where it is one.
  const Problem one = random_problem(1, 2, 2, 1);
  EXPECT_EQ(describe(one, cpu_staged(one), 0, Lang::En).rfind("The sequence has 1 token. ", 0), 0u);
  Problem wide = random_problem(1, 2, 2, 1);
  wide.edit().k = MatrixF::Ones(3, 2);
  wide.edit().v = MatrixF::Ones(3, 2);
  wide.edit().key_tokens = {"a", "b", "c"};
  EXPECT_EQ(describe(wide, cpu_staged(wide), 0, Lang::En).rfind("There is 1 query and 3 keys. ", 0), 0u);
  // A weight below 0.01 keeps two significant digits, a 0 second one too.
  const float small[5] = {0.005f, 0.2f, 0.3f, 0.295f, 0.2f};
  const std::string s = describe(demo_problem(), small, nullptr, 0, Lang::En);
  EXPECT_NE(s.find("0.0050, 0.200, 0.300, 0.295, 0.200"), std::string::npos) << s;
}

// The mask mods say which keys a query reads: a prefix-LM is causal past its prefix, never
// "bidirectional"; a window reads on both sides without causal, the latest W with it.
TEST(CoreDemo, DescriptionNamesTheMaskMods) {
  const auto described = [](const std::string& spec, MaskKind kind, Lang lang) {
    Problem p = demo_problem();
    p.mask = kind;
    apply_mask_mod_spec(p, spec);
    return describe(p, cpu_staged(p), 2, lang);
  };
  const auto has = [](const std::string& d, const std::string& what) { return d.find(what) != std::string::npos; };
  for (Lang l : {Lang::En, Lang::Zh}) {
    const std::string prefix = described("prefix:2", MaskKind::None, l);
    EXPECT_FALSE(has(prefix, mask_sentence(MaskKind::None, l))) << prefix;
    EXPECT_TRUE(has(prefix, l == Lang::En ? "Prefix-LM over the first 2 positions" : "前缀语言模型（前 2 个位置）"))
        << prefix;
    const std::string window = described("window:2", MaskKind::None, l);
    EXPECT_TRUE(has(window, l == Lang::En ? "less than 2 positions away on either side" : "两侧与它相距小于 2 个位置"))
        << window;
    const std::string causal_window = described("window:2", MaskKind::Causal, l);
    EXPECT_TRUE(has(causal_window, mask_sentence(MaskKind::Causal, l))) << causal_window;
    EXPECT_TRUE(has(causal_window, l == Lang::En ? "only the 2 most recent positions" : "最近的 2 个位置（含自身）"))
        << causal_window;
    // A prefix with a window: the prefix reads both ways within the window (it had said "the 2 most
    // recent positions" and "both ways" unbounded, where query 1 reads keys 0 to 2 of prefix:4).
    const std::string prefix_window = described("prefix:4,window:2", MaskKind::None, l);
    EXPECT_TRUE(has(prefix_window, l == Lang::En ? "both ways (within the window below)" : "彼此双向可见（在下面的窗口之内）"))
        << prefix_window;
    EXPECT_TRUE(has(prefix_window, l == Lang::En ? "inside the prefix on either side" : "前缀之内两侧都算"))
        << prefix_window;
    // Every sentence is among the texts the viewer builds its glyphs from (with its numbers 1).
    const std::vector<std::string> texts = mask_sentence_texts(l);
    Problem one = demo_problem();
    apply_mask_mod_spec(one, "causal,window:1,prefix:1");
    EXPECT_NE(std::find(texts.begin(), texts.end(), mask_sentence(one, l)), texts.end()) << mask_sentence(one, l);
  }
  // Without mask mods the sentence is the mask kind's, as before.
  EXPECT_EQ(mask_sentence(demo_problem(), Lang::En), mask_sentence(MaskKind::None, Lang::En));
  // One query at the end of its keys (a decode shape) reads none after it: not "both sides".
  const Problem decode = random_problem(1, 6, 4, 2, 2, 1, 1);
  for (Lang l : {Lang::En, Lang::Zh}) {
    const std::string one = mask_sentence(decode, l);
    EXPECT_TRUE(has(one, l == Lang::En ? "all of them at or before its position" : "都位于查询的位置及之前")) << one;
    EXPECT_FALSE(has(one, l == Lang::En ? "both sides" : "两侧")) << one;
    const std::vector<std::string> texts = mask_sentence_texts(l);
    EXPECT_NE(std::find(texts.begin(), texts.end(), one), texts.end()) << one;
  }
  EXPECT_TRUE(has(mask_sentence(random_problem(2, 6, 4, 2, 2, 1, 1), Lang::En), "both sides"));
  // The modifications are explained where they act, with what RoPE does not guarantee.
  Problem mods = random_problem(6, 4, 2, 3);
  mods.mods.rope_theta = 10000;
  mods.mods.alibi = true;
  for (Lang l : {Lang::En, Lang::Zh}) {
    const std::string d = describe(mods, cpu_staged(mods), 2, l);
    EXPECT_TRUE(has(d, l == Lang::En ? "that does not make them fall with distance" : "这并不保证分数随距离下降")) << d;
    EXPECT_TRUE(has(d, l == Lang::En ? "before the division by the temperature" : "在除以温度之前")) << d;
    EXPECT_TRUE(has(d, l == Lang::En ? "the farther the key, the larger the penalty" : "键越远惩罚越大")) << d;
  }
}

// A row longer than 16 names its 8 largest weights with their keys (its first keys are often
// masked or near zero), largest first, and their sum.
TEST(CoreDemo, ALongRowNamesItsLargestWeights) {
  Problem p = random_problem(64, 8, 4, 3);
  p.mask = MaskKind::Causal;
  const Trace t = cpu_staged(p);
  const int query = 40;
  std::vector<int> order(64);
  for (int c = 0; c < 64; ++c) order[c] = c;
  const float* w = t.weights.data() + static_cast<std::size_t>(query) * 64;
  std::sort(order.begin(), order.end(), [&](int a, int b) { return w[a] > w[b] || (w[a] == w[b] && a < b); });
  ASSERT_LE(order[0], query);
  const std::string en = describe(p, t, query, Lang::En);
  const std::string first = format_number("%.3f", w[order[0]]) + " (" + std::to_string(order[0]) + "), " +
                            format_number("%.3f", w[order[1]]) + " (" + std::to_string(order[1]) + ")";
  EXPECT_NE(en.find("The largest 8 of the current row's 64 weights are " + first), std::string::npos) << en;
  double mass = 0;
  for (int i = 0; i < 8; ++i) mass += w[order[i]];
  EXPECT_NE(en.find("together " + format_number("%.3f", mass)), std::string::npos) << en;
  const std::string zh = describe(p, t, query, Lang::Zh);
  EXPECT_NE(zh.find("当前行 64 个权重中最大的 8 个为 " + format_number("%.3f", w[order[0]]) + "（“" +
                    std::to_string(order[0]) + "”）"),
            std::string::npos)
      << zh;
  // Fewer than 8 weights above 0 (query 2 of a causal row: three keys): the others are said to be
  // 0, not listed among the largest.
  const std::string few = describe(p, t, 2, Lang::En);
  EXPECT_NE(few.find("Of the current row's 64 weights, 61 are exactly 0 (masked, or too small for fp32); the others are "),
            std::string::npos)
      << few;
  EXPECT_EQ(few.find("The largest 8"), std::string::npos) << few;
  EXPECT_NE(describe(p, t, 2, Lang::Zh).find("当前行 64 个权重中有 61 个恰好为 0"), std::string::npos);
}

// Weights below 0.01 keep two significant digits (a flat row's eight largest stay told apart);
// 0.01 and above, and an exact zero, three decimals as the demo reads.
TEST(CoreDemo, SmallWeightsKeepTwoSignificantDigits) {
  Problem p = random_problem(4096, 16, 4, 5);
  p.mask = MaskKind::Causal;
  p.temperature = 4;
  const Trace t = cpu_staged(p);
  const int query = 2048;
  const float* w = t.weights.data() + static_cast<std::size_t>(query) * 4096;
  const int top = static_cast<int>(std::max_element(w, w + 4096) - w);
  ASSERT_LT(w[top], 0.01f);
  const std::string en = describe(p, t, query, Lang::En);
  EXPECT_NE(en.find("weights are " + format_number("%.2g", w[top]) + " (" + std::to_string(top) + ")"),
            std::string::npos)
      << en;
  EXPECT_EQ(en.find("0.001 ("), std::string::npos) << en;
  // Masked zeros and the demo's weights read as before.
  Problem c = demo_problem();
  c.mask = MaskKind::Causal;
  EXPECT_NE(describe(c, cpu_staged(c), 1, Lang::En).find("0.000"), std::string::npos);
}

// Only the demo calls itself a demo: another unmasked problem says that every query reads every key.
TEST(CoreDemo, OnlyTheDemoIsCalledADemo) {
  EXPECT_NE(mask_sentence(demo_problem(), Lang::En).find("attention demo"), std::string::npos);
  Problem p = random_problem(8, 4, 4, 1);
  for (Lang lang : {Lang::En, Lang::Zh}) {
    const std::string s = mask_sentence(p, lang);
    EXPECT_EQ(s.find(lang == Lang::En ? "demo" : "演示"), std::string::npos) << s;
    EXPECT_NE(describe(p, cpu_staged(p), 0, lang).find(s), std::string::npos);
    // The viewer's glyph atlas has every sentence.
    const auto texts = mask_sentence_texts(lang);
    EXPECT_NE(std::find(texts.begin(), texts.end(), s), texts.end()) << s;
  }
  p.mask = MaskKind::Causal;
  EXPECT_EQ(mask_sentence(p, Lang::En), mask_sentence(MaskKind::Causal, Lang::En));
}

// ---- independent recomputation, plain loops in double ----------------------------------------

struct Naive {
  std::vector<double> scaled, weights, output;  // row-major
};

Naive naive(const Problem& p) {
  const int n = p.n(), m = p.m(), dk = p.d_k(), dv = p.d_v(), h = p.heads;
  const MatrixF mk = mask_matrix(p);
  Naive r;
  r.scaled.assign(static_cast<size_t>(h) * n * m, 0);
  r.weights.assign(r.scaled.size(), 0);
  r.output.assign(static_cast<size_t>(h) * n * dv, 0);
  for (int hd = 0; hd < h; ++hd)
    for (int i = 0; i < n; ++i) {
      std::vector<double> logit(m);
      double mx = -INFINITY;
      for (int j = 0; j < m; ++j) {
        double s = 0;
        for (int d = 0; d < dk; ++d) s += double(p.q()(hd * n + i, d)) * double(p.k()(hd * m + j, d));
        s /= std::sqrt(double(dk));
        r.scaled[(size_t(hd) * n + i) * m + j] = s;
        logit[j] = (s + mk(i, j)) / p.temperature;
        mx = std::max(mx, logit[j]);
      }
      double sum = 0;
      for (int j = 0; j < m; ++j) sum += std::exp(logit[j] - mx);
      for (int j = 0; j < m; ++j) {
        const double w = std::exp(logit[j] - mx) / sum;
        r.weights[(size_t(hd) * n + i) * m + j] = w;
        for (int d = 0; d < dv; ++d) r.output[(size_t(hd) * n + i) * dv + d] += w * p.v()(hd * m + j, d);
      }
    }
  return r;
}

struct Case {
  int n, dk, dv, heads;
  MaskKind mask;
  double temperature;
};

// Printed (and so in CTest's names) field by field: the default printer dumps the struct's bytes,
// padding included, which made the test names change from build to build.
void PrintTo(const Case& c, std::ostream* os) {
  *os << "n " << c.n << ", d_k " << c.dk << ", d_v " << c.dv << ", heads " << c.heads << ", "
      << to_string(c.mask) << ", T " << c.temperature;
}

class CoreRecompute : public ::testing::TestWithParam<Case> {};

TEST_P(CoreRecompute, EveryStageMatchesAnIndependentRecomputation) {
  const Case c = GetParam();
  Problem p = random_problem(c.n, c.dk, c.dv, 1234 + c.n, c.heads);
  p.temperature = c.temperature;
  p.mask = c.mask;
  if (c.mask == MaskKind::Custom) {
    // Every other key blocked, but never the first: no row is fully masked.
    p.edit().custom_mask = MatrixF::Zero(c.n, c.n);
    for (int i = 0; i < c.n; ++i)
      for (int j = 1; j < c.n; j += 2) p.edit().custom_mask(i, j) = kNegInf;
  }
  const Trace t = cpu_staged(p);
  const TraceD ref = reference_fp64(p);
  const Naive nv = naive(p);
  // fp32 conditioning: a logit carries an error of about eps * sum_d |q_d k_d| / (sqrt(d_k) T),
  // which at T = 1e-3 is far above 1e-6; the tolerance follows it instead of hiding it.
  double l1 = 0, vmax = p.v().cwiseAbs().maxCoeff();
  for (int r = 0; r < c.heads * c.n; ++r)
    for (int j = 0; j < c.n; ++j)
      l1 = std::max<double>(l1, (p.q().row(r).cwiseAbs().cwiseProduct(
                                     p.k().row((r / c.n) * c.n + j).cwiseAbs())).sum());
  const double logit_err = 4 * std::numeric_limits<float>::epsilon() * l1 /
                           (std::sqrt(double(c.dk)) * c.temperature);
  const double tol_w = 2e-6 + logit_err;
  const double tol_o = 1e-5 + 2 * tol_w * vmax;
  const int rows = c.heads * c.n;
  ASSERT_EQ(t.scores.rows(), rows);
  ASSERT_EQ(t.scores.cols(), c.n);
  ASSERT_EQ(t.weights.rows(), rows);
  ASSERT_EQ(t.output.rows(), rows);
  ASSERT_EQ(t.output.cols(), c.dv);
  ASSERT_EQ(t.mask.rows(), c.n);
  const MatrixF mk = mask_matrix(p);
  for (int r = 0; r < rows; ++r) {
    double row_sum = 0;
    for (int j = 0; j < c.n; ++j) {
      const size_t i = size_t(r) * c.n + j;
      EXPECT_NEAR(t.scaled(r, j), nv.scaled[i], 1e-5 * (1 + std::abs(nv.scaled[i])));
      EXPECT_NEAR(ref.scaled(r, j), nv.scaled[i], 1e-12 * (1 + std::abs(nv.scaled[i])));
      EXPECT_NEAR(ref.weights(r, j), nv.weights[i], 1e-12);
      EXPECT_NEAR(t.weights(r, j), nv.weights[i], tol_w);
      if (std::isinf(mk(r % c.n, j))) {
        EXPECT_EQ(t.weights(r, j), 0.0f) << "masked weight must be exactly 0";
        EXPECT_TRUE(std::isinf(t.logits(r, j)) && t.logits(r, j) < 0);
      }
      row_sum += t.weights(r, j);
    }
    EXPECT_NEAR(row_sum, 1.0, 1e-6);
    for (int d = 0; d < c.dv; ++d) {
      const double want = nv.output[size_t(r) * c.dv + d];
      EXPECT_NEAR(ref.output(r, d), want, 1e-12);
      EXPECT_NEAR(t.output(r, d), want, tol_o);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CoreRecompute,
    ::testing::Values(Case{1, 3, 2, 1, MaskKind::None, 0.85}, Case{5, 3, 2, 1, MaskKind::Causal, 1e-3},
                      Case{31, 16, 2, 2, MaskKind::Custom, 50}, Case{33, 64, 64, 1, MaskKind::Causal, 0.85},
                      Case{64, 128, 2, 3, MaskKind::None, 1e-3}),
    [](const ::testing::TestParamInfo<Case>& info) {
      const Case& c = info.param;
      return "n" + std::to_string(c.n) + "_dk" + std::to_string(c.dk) + "_dv" + std::to_string(c.dv) +
             "_h" + std::to_string(c.heads) + "_" + std::string(to_string(c.mask));
    });

TEST(CoreSoftmax, HugeLogitsAndTinyTemperatureStayExactAndFinite) {
  Problem p;
  p.edit().q.resize(2, 1);
  p.edit().k.resize(3, 1);
  p.edit().v.resize(3, 1);
  p.edit().q << 1e15f, -1e15f;
  p.edit().k << 1e15f, -1e15f, 0.5e15f;  // scores up to 1e30
  p.edit().v << 1.0f, 2.0f, 3.0f;
  p.temperature = 1e-6;
  const Trace t = cpu_staged(p);
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 3; ++c) ASSERT_TRUE(std::isfinite(t.weights(r, c)));
  EXPECT_EQ(t.weights(0, 0), 1.0f);
  EXPECT_EQ(t.weights(0, 1), 0.0f);
  EXPECT_EQ(t.weights(1, 1), 1.0f);
  EXPECT_EQ(t.output(0, 0), 1.0f);
  EXPECT_EQ(t.output(1, 0), 2.0f);
}

TEST(CoreSoftmax, LowerTemperatureSharpensAndVChangesOnlyTheOutput) {
  Problem p = demo_problem();
  const Trace base = cpu_staged(p);
  p.temperature = 0.2;
  const Trace cold = cpu_staged(p);
  EXPECT_GT(row_stats(cold, 2).max_weight, row_stats(base, 2).max_weight);
  EXPECT_LT(row_stats(cold, 2).entropy, row_stats(base, 2).entropy);
  p.temperature = 0.85;
  p.edit().v *= 2.0f;
  const Trace v2 = cpu_staged(p);
  EXPECT_EQ(v2.weights, base.weights);
  EXPECT_NE(v2.output, base.output);
}

TEST(CoreValidate, OverflowingScoresAreRefusedNotNaN) {
  Problem p;
  p.edit().q = MatrixF::Constant(1, 2, 1e20f);
  p.edit().k = MatrixF::Constant(2, 2, 1e20f);
  p.edit().v = MatrixF::Ones(2, 1);
  const std::string e = message_of<InputError>([&] { cpu_staged(p); });
  EXPECT_NE(e.find("overflows"), std::string::npos) << e;
}

TEST(CoreRegistry, NamesAndFallbackRules) {
  EXPECT_EQ(test::message_of<InputError>([] { make_backend("bogus"); }),
            "unknown backend 'bogus' (use auto, cpu or cuda)");
  EXPECT_THROW(check_backend_name("CPU"), InputError);
  for (const char* ok : {"auto", "cpu", "cuda"}) EXPECT_NO_THROW(check_backend_name(ok));
  EXPECT_EQ(make_backend("cpu")->name(), "cpu");
  std::string reason;
  if (!cuda_available(&reason)) {
    EXPECT_FALSE(reason.empty());
    EXPECT_EQ(make_backend("auto")->name(), "cpu");
    const std::string e = message_of<NoDeviceError>([] { make_backend("cuda"); });
    EXPECT_EQ(e.rfind("no CUDA device: ", 0), 0u) << e;
  }
  const Trace t = run_backend("auto", demo_problem());
  EXPECT_NEAR(t.output(2, 0), 0.65, 0.005);
}

TEST(CoreBackend, BenchReportsRepeatsAndOutput) {
  auto b = make_backend("cpu");
  const Problem p = random_problem(64, 16, 16, 3);
  const BenchSample s = b->bench(p, {}, 1, 3);
  ASSERT_EQ(s.ms.size(), 3u);
  for (double ms : s.ms) EXPECT_GE(ms, 0.0);
  EXPECT_EQ(s.output.rows(), 64);
  EXPECT_GT(s.peak_bytes, 0u);
  // Staged: the stage times of each timed repetition, within that repetition's time.
  ASSERT_EQ(s.stages.size(), s.ms.size());
  for (std::size_t i = 0; i < s.ms.size(); ++i) {
    const StageTimings& st = s.stages[i];
    EXPECT_GT(st.qk_ms + st.scale_mask_ms + st.softmax_ms + st.pv_ms, 0.0);
    EXPECT_LE(st.qk_ms + st.scale_mask_ms + st.softmax_ms + st.pv_ms, s.ms[i]);
  }
  EXPECT_TRUE(b->bench(p, {Variant::Fused, Precision::FP32, false}, 0, 2).stages.empty());
  // Staged bf16 runs on the CPU too, and says so.
  const Trace bf = b->run(p, {Variant::Staged, Precision::BF16, true});
  EXPECT_EQ(bf.precision, Precision::BF16);
  EXPECT_EQ(bf.output.rows(), 64);
}

}  // namespace
}  // namespace attnlab

namespace attnlab {

// The exponent V is scaled by where a kernel's unnormalised sums would overflow: the least e >= 1
// for which m max|V| 2^-e stays within half of fp32's largest value (the room a sum needs to add
// one more term without overflowing).
TEST(CoreOutputRange, TheValuesExponentIsTheLeastThatLeavesHalfOfFp32sRange) {
  const double room = 0.5 * static_cast<double>(std::numeric_limits<float>::max());
  for (const float v : {1.f, 1e37f, 4e37f, 1e38f, 3e38f}) {
    for (const int m : {1, 4, 1000}) {
      Problem p = random_problem(1, m, 2, 2, 3, 1, 1);
      ProblemInputs& in = p.edit();
      in.q.setZero();
      in.k.setZero();
      in.v.setConstant(1.f);
      in.v(0, 0) = v;
      const int e = values_exponent(p);
      const double bound = static_cast<double>(m) * v;
      SCOPED_TRACE(std::to_string(v) + " x " + std::to_string(m) + " keys: e " + std::to_string(e));
      EXPECT_GE(e, 1);
      EXPECT_LE(std::ldexp(bound, -e), room);
      if (e > 1) EXPECT_GT(std::ldexp(bound, -(e - 1)), room);
    }
  }
  // 4 keys and a value of 3e38: 1.2e39 over 1.7e38 is 7.05, so e = 3 (2 within all of fp32's range).
  Problem p = random_problem(4, 4, 2, 2, 3, 1, 1);
  p.edit().v.row(0) << 3e38f, 1.f;
  EXPECT_EQ(values_exponent(p), 3);
}

}  // namespace attnlab
