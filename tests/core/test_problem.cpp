// The problem's checks, without any backend (core's own tests, linked with attnlab_core alone):
// validation messages (temperature, typed temperatures, shapes, masks, non-finite inputs), query
// resolution and seeded problems.
#include "core/problem.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace attnlab {
namespace {

using test::message_of;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// ---- validation -------------------------------------------------------------------------------

// validate(p)'s refusal; a failure when it accepts p.
std::string error_of(const Problem& p) {
  return message_of<InputError>([&] { validate(p); });
}

TEST(CoreValidate, TemperatureMustBeFinitePositive) {
  Problem p = demo_problem();
  for (double t : {0.0, -1.0, std::nan(""), double(INFINITY), -double(INFINITY)}) {
    p.temperature = t;
    EXPECT_NE(error_of(p).find("temperature must be a finite number > 0"), std::string::npos) << t;
  }
  p.temperature = 0.0;
  EXPECT_EQ(error_of(p), "temperature must be a finite number > 0, got 0");
}

// The one parser of typed temperatures (CLI flag, viewer flag and entry).
TEST(CoreValidate, TypedTemperatures) {
  EXPECT_DOUBLE_EQ(parse_temperature("0.85"), 0.85);
  EXPECT_DOUBLE_EQ(parse_temperature("  2 \n"), 2.0);
  EXPECT_DOUBLE_EQ(parse_temperature("1e-3"), 1e-3);
  const auto refusal = [](const std::string& text) {
    return message_of<InputError>([&] { parse_temperature(text); });
  };
  EXPECT_EQ(refusal("abc"), "temperature must be a finite number > 0, got 'abc'");
  EXPECT_EQ(refusal("1x"), "temperature must be a finite number > 0, got '1x'");
  EXPECT_EQ(refusal(" "), "temperature must be a finite number > 0, got ''");
  EXPECT_EQ(refusal("0"), "temperature must be a finite number > 0, got 0");
  EXPECT_EQ(refusal("-1"), "temperature must be a finite number > 0, got -1");
  EXPECT_EQ(refusal("inf").rfind("temperature must be a finite number > 0, got ", 0), 0u);
}

// Decimal notation only, as --seed is: strtod's hex floats, inf and nan spellings are refused
// with the sentence naming what was typed; signs, fractions and exponents stay accepted.
TEST(CoreValidate, TypedTemperaturesAreDecimalOnly) {
  EXPECT_DOUBLE_EQ(parse_temperature("+2"), 2.0);
  EXPECT_DOUBLE_EQ(parse_temperature(".5"), 0.5);
  EXPECT_DOUBLE_EQ(parse_temperature("3."), 3.0);
  EXPECT_DOUBLE_EQ(parse_temperature("2.5E+1"), 25.0);
  const auto refusal = [](const std::string& text) {
    return message_of<InputError>([&] { parse_temperature(text); });
  };
  for (const std::string t : {"0x10", "0X1p4", "-0x1", "0x", "1e", "1e+", ".", "+", "-", "++1",
                              "+-1", "1..2", "1e2.5", "1,5", "1 2", "0b1", "1e999", "1e-999", "infx"})
    EXPECT_EQ(refusal(t), "temperature must be a finite number > 0, got '" + t + "'") << t;
  // Infinity and NaN, however spelled, keep validate_temperature's sentence.
  for (const std::string t : {"inf", "+inf", "Infinity", "INF"})
    EXPECT_EQ(refusal(t), "temperature must be a finite number > 0, got inf") << t;
  EXPECT_EQ(refusal("-infinity"), "temperature must be a finite number > 0, got -inf");
  for (const std::string t : {"nan", "NaN", "nan(1)"})
    EXPECT_EQ(refusal(t).rfind("temperature must be a finite number > 0, got ", 0), 0u) << t;
  EXPECT_EQ(refusal(" 0x10 "), "temperature must be a finite number > 0, got '0x10'");
  EXPECT_EQ(refusal("-0.5"), "temperature must be a finite number > 0, got -0.5");
}

TEST(CoreValidate, ShapesAreNamed) {
  Problem p = demo_problem();
  p.edit().q = MatrixF::Ones(5, 4);
  EXPECT_EQ(error_of(p), "K has 3 columns but Q has 4 (both must be d_k)");
  p = demo_problem();
  p.edit().v = MatrixF::Ones(4, 2);
  EXPECT_NE(error_of(p).find("V has 4 rows but K has 5"), std::string::npos);
  p = demo_problem();
  p.edit().k = MatrixF::Ones(3, 3);
  p.edit().v = MatrixF::Ones(3, 2);
  p.edit().key_tokens = index_tokens(3);
  p.mask = MaskKind::Causal;
  EXPECT_NE(error_of(p).find("there can be no more queries than keys, got 5 queries and 3 keys"),
            std::string::npos);
}

// Decode shapes: 3 queries at the end of 5 keys, causal bottom-right: query i sees keys 0..i+2.
TEST(CoreValidate, CausalWithFewerQueriesIsTheLastPositions) {
  Problem p = demo_problem();
  p.edit().q = p.q().bottomRows(3).eval();
  p.edit().query_tokens = {"上下文", "分配", "权重"};
  p.mask = MaskKind::Causal;
  EXPECT_NO_THROW(validate(p));
  EXPECT_EQ(p.causal_offset(), 2);
  const MatrixF mk = mask_matrix(p);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j) EXPECT_EQ(mk(i, j) == 0.f, j <= i + 2) << i << "," << j;
}

TEST(CoreValidate, KeyValueHeadsMustDivideTheQueryHeads) {
  EXPECT_NE(message_of<InputError>([] { random_problem(4, 8, 16, 16, 1, 6, 4); })
                .find("6 query heads cannot share 4 key/value heads evenly"),
            std::string::npos);
  EXPECT_NE(message_of<InputError>([] { random_problem(9, 8, 16, 16, 1, 2, 2); })
                .find("no more queries than keys, got 9 queries and 8 keys"),
            std::string::npos);
  Problem p = random_problem(4, 8, 16, 16, 1, 6, 3);
  p.kv_group = 4;
  EXPECT_NE(error_of(p).find("kv_group (query heads per key/value head) must divide the 6 heads, got 4"),
            std::string::npos);
}

// Grouped-query heads: query head h reads key/value head h / kv_group, and one_head takes it.
TEST(CoreProblem, GroupedHeadsShareTheirKeyValueHead) {
  const Problem p = random_problem(2, 16, 8, 4, 7, 8, 2);
  EXPECT_EQ(p.kv_heads(), 2);
  EXPECT_EQ(p.kv_group, 4);
  EXPECT_EQ(p.n(), 2);
  EXPECT_EQ(p.m(), 16);
  EXPECT_EQ(p.k().rows(), 32);
  EXPECT_EQ(p.kv_row(3), 0);
  EXPECT_EQ(p.kv_row(4), 16);
  EXPECT_EQ(p.query_tokens(), (std::vector<std::string>{"14", "15"}));
  const Problem h5 = one_head(p, 5);
  EXPECT_EQ(h5.kv_group, 1);
  EXPECT_TRUE(h5.k().isApprox(p.k().middleRows(16, 16), 0.f));
  EXPECT_TRUE(h5.q().isApprox(p.q().middleRows(10, 2), 0.f));
  // n == m with every head its own: the prefill problem of the same seed, number for number.
  const Problem a = random_problem(6, 6, 8, 4, 9, 3, 3), b = random_problem(6, 8, 4, 9, 3);
  EXPECT_TRUE(a.q() == b.q() && a.k() == b.k() && a.v() == b.v());
}

TEST(CoreValidate, FullyMaskedRowNamesRowAndToken) {
  Problem p = demo_problem();
  p.mask = MaskKind::Custom;
  p.edit().custom_mask = MatrixF::Zero(5, 5);
  p.edit().custom_mask.row(2).setConstant(kNegInf);
  EXPECT_NE(error_of(p).find("row 2 (上下文) is fully masked"), std::string::npos) << error_of(p);
  p.edit().custom_mask(2, 1) = 0.5f;
  EXPECT_NE(error_of(p).find("mask entries must be 0 or -inf, got 0.5"), std::string::npos);
}

TEST(CoreValidate, NonFiniteInputsAreLocated) {
  Problem p = demo_problem();
  p.edit().k(3, 1) = std::nanf("");
  EXPECT_NE(error_of(p).find("K has a non-finite value (nan) at row 3, column 1"), std::string::npos)
      << error_of(p);
}

TEST(CoreProblem, QueriesResolveByTokenOrIndex) {
  const Problem p = demo_problem();
  EXPECT_EQ(resolve_query(p, "上下文"), 2);
  EXPECT_EQ(resolve_query(p, "4"), 4);
  EXPECT_EQ(resolve_query(p, " 上下文 "), 2);  // blanks around it dropped, as around the labels
  EXPECT_EQ(resolve_query(p, "\t4 "), 4);
  EXPECT_THROW(resolve_query(p, "5"), InputError);
  EXPECT_THROW(resolve_query(p, "你好"), InputError);
  EXPECT_THROW(resolve_query(p, "-1"), InputError);
}

TEST(CoreProblem, SameSeedSameProblem) {
  const Problem a = random_problem(17, 8, 4, 42), b = random_problem(17, 8, 4, 42);
  const Problem c = random_problem(17, 8, 4, 43);
  EXPECT_EQ(a.q(), b.q());
  EXPECT_EQ(a.v(), b.v());
  EXPECT_NE(a.q(), c.q());
  // Standard normal: mean near 0, variance near 1 over 17*8 + 17*8 + 17*4 draws.
  EXPECT_NEAR(a.q().mean(), 0.0, 0.3);
  // The generator is written out (mt19937_64 + Box-Muller), so seed 7 gives these values with any
  // standard library; a change of generator or fill order shows up here.
  const Problem r = random_problem(2, 2, 1, 7);
  EXPECT_FLOAT_EQ(r.q()(0, 0), 0.713029861f);
  EXPECT_FLOAT_EQ(r.q()(1, 1), -1.30007768f);
  EXPECT_FLOAT_EQ(r.k()(0, 1), 0.671255052f);
  EXPECT_FLOAT_EQ(r.v()(1, 0), -1.61467254f);
}

// fill_standard_normal draws in order and transforms on every core (blocks of 2^20 pairs): its
// numbers, and the generator's state after it, are those of the one-thread Box-Muller loop, for
// odd and even counts and for matrices of more than one block.
TEST(CoreProblem, TheThreadedFillIsTheSequentialBoxMuller) {
  const auto sequential = [](Eigen::Index count, std::mt19937_64& gen) {
    auto uniform = [&gen] { return (static_cast<double>(gen() >> 11) + 0.5) * 0x1.0p-53; };
    std::vector<float> out(static_cast<std::size_t>(count));
    for (Eigen::Index i = 0; i < count; i += 2) {
      const double r = std::sqrt(-2.0 * std::log(uniform()));
      const double th = 2.0 * 3.14159265358979323846 * uniform();
      out[i] = static_cast<float>(r * std::cos(th));
      if (i + 1 < count) out[i + 1] = static_cast<float>(r * std::sin(th));
    }
    return out;
  };
  for (auto [rows, cols] : {std::pair<Eigen::Index, Eigen::Index>{1, 1}, {3, 5}, {4, 8}, {1000, 300},
                            {4099, 1023}}) {
    std::mt19937_64 a(rows * 7 + cols), b(rows * 7 + cols);
    MatrixF m;
    fill_standard_normal(m, rows, cols, a);
    const std::vector<float> want = sequential(rows * cols, b);
    ASSERT_EQ(m.rows(), rows);
    ASSERT_EQ(m.cols(), cols);
    EXPECT_EQ(std::memcmp(m.data(), want.data(), want.size() * sizeof(float)), 0) << rows << " x " << cols;
    EXPECT_EQ(a(), b()) << "the generator's next draw, after " << rows << " x " << cols;
  }
}

// A copy of a problem shares its inputs (a temperature or mask change copies no matrix); a change
// of the inputs through edit() copies them first, so the other problem never sees it.
TEST(CoreProblem, CopiesShareTheInputsAndAnEditCopiesThemFirst) {
  Problem a = random_problem(6, 4, 2, 3);
  Problem b = a;
  b.temperature = 0.5;
  b.mask = MaskKind::Causal;
  EXPECT_EQ(a.inputs(), b.inputs());
  EXPECT_EQ(a.q().data(), b.q().data());
  const float before = a.q()(0, 0);
  b.edit().q(0, 0) = before + 1;
  EXPECT_NE(a.inputs(), b.inputs());
  EXPECT_EQ(a.q()(0, 0), before);
  EXPECT_EQ(b.q()(0, 0), before + 1);
  EXPECT_EQ(b.key_tokens(), a.key_tokens());
  // A problem that holds its inputs alone edits them in place.
  const ProblemInputs* own = b.inputs();
  b.edit().v(0, 0) = 7;
  EXPECT_EQ(b.inputs(), own);
}

}  // namespace
}  // namespace attnlab
