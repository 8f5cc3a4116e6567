// The synthetic patterns of core/patterns.h measured on what each claims, at N = 256, d = 64,
// T = 1, through the CPU backend's weights: local:W's window mass, sink's weight on key 0,
// previous's argmax at i-1, induction's hits after the previous occurrence; noise bit-identical
// to random_problem; determinism per seed; refusals (names, d_k too small) in the library and
// from the real binary (one `error:` line, exit 2); the source line in text, describe and JSON.
#include "core/backend.h"
#include "core/patterns.h"
#include "core/problem.h"
#include "tests/test_util.h"
#include "engine/registry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

using namespace attnlab;

namespace {

constexpr int kN = 256, kD = 64;

MatrixF weights_of(const Problem& p) {
  validate(p);
  const Trace t = run_backend("cpu", p, RunOptions{});
  return t.weights;
}

int argmax_row(const MatrixF& w, int i) {
  Eigen::Index j = 0;
  w.row(i).maxCoeff(&j);
  return static_cast<int>(j);
}

}  // namespace

TEST(Patterns, ParseReadsEverySpellingAndRefusesTheRest) {
  EXPECT_EQ(parse_pattern("noise").kind, PatternKind::Noise);
  EXPECT_EQ(parse_pattern("sink").kind, PatternKind::Sink);
  EXPECT_EQ(parse_pattern("previous").kind, PatternKind::Previous);
  EXPECT_EQ(parse_pattern("induction").kind, PatternKind::Induction);
  const Pattern local = parse_pattern("local:8");
  EXPECT_EQ(local.kind, PatternKind::Local);
  EXPECT_EQ(local.window, 8);
  EXPECT_EQ(pattern_name(local), "local:8");
  for (const char* bad : {"foo", "local:", "local:-1", "local:x", "local:3x", "Sink", ""}) {
    const std::string m = test::message_of<InputError>([&] { parse_pattern(bad); });
    EXPECT_NE(m.find("--pattern must be noise, local:W"), std::string::npos) << m;
    EXPECT_NE(m.find(std::string("got '") + bad + "'"), std::string::npos) << m;
  }
}

TEST(Patterns, NoiseIsTodaysRandomProblem) {
  const Problem a = pattern_problem(Pattern{}, 40, 8, 5, 77, 2);
  const Problem b = random_problem(40, 8, 5, 77, 2);
  EXPECT_TRUE(a.q() == b.q());
  EXPECT_TRUE(a.k() == b.k());
  EXPECT_TRUE(a.v() == b.v());
  EXPECT_TRUE(a.source.empty());
}

TEST(Patterns, SameSeedSameProblemAndTheSourceSaysSynthetic) {
  for (const char* name : {"local:4", "sink", "previous", "induction"}) {
    const Pattern pat = parse_pattern(name);
    const Problem a = pattern_problem(pat, 64, 32, 8, 3), b = pattern_problem(pat, 64, 32, 8, 3);
    EXPECT_TRUE(a.q() == b.q() && a.k() == b.k() && a.v() == b.v() && a.key_tokens() == b.key_tokens()) << name;
    const Problem c = pattern_problem(pat, 64, 32, 8, 4);
    EXPECT_FALSE(a.v() == c.v()) << name;
    EXPECT_EQ(a.source, std::string("synthetic pattern '") + name + "' (not a trained model)");
    EXPECT_EQ(a.source_in(Lang::Zh), std::string("合成模式“") + name + "”（不是训练得到的模型）");
    // One head of several names the head in both languages.
    const Problem h = one_head(pattern_problem(pat, 64, 32, 8, 3, 3), 2);
    EXPECT_EQ(h.source_in(Lang::Zh), std::string("合成模式“") + name + "”（不是训练得到的模型），头 2（共 3 个）");
    EXPECT_EQ(h.q(), pattern_problem(pat, 64, 32, 8, 3, 3).q().middleRows(128, 64));
  }
}

TEST(Patterns, LocalWindowHoldsTheRowsWeight) {
  for (int win : {0, 2, 8, 32}) {
    const Problem p = pattern_problem(Pattern{PatternKind::Local, win}, kN, kD, kD, 1);
    const MatrixF w = weights_of(p);
    int good = 0;
    for (int i = 0; i < kN; ++i) {
      double inside = 0;
      for (int j = std::max(0, i - win); j <= std::min(kN - 1, i + win); ++j) inside += w(i, j);
      if (inside >= 0.9) ++good;
    }
    EXPECT_EQ(good, kN) << "local:" << win;
  }
}

TEST(Patterns, SinkTakesMostOfEveryRow) {
  const MatrixF w = weights_of(pattern_problem(parse_pattern("sink"), kN, kD, kD, 2));
  for (int i = 0; i < kN; ++i) ASSERT_GE(w(i, 0), 0.5) << "row " << i;
  // On a short row too, key 0 takes nearly all of it (its lead grows with log N).
  const MatrixF s = weights_of(pattern_problem(parse_pattern("sink"), 16, 8, 2, 0));
  for (int i = 0; i < 16; ++i) EXPECT_GE(s(i, 0), 0.9) << "row " << i;
}

TEST(Patterns, PreviousAttendsToTheKeyBefore) {
  const MatrixF w = weights_of(pattern_problem(parse_pattern("previous"), kN, kD, kD, 3));
  int hits = 0;
  for (int i = 1; i < kN; ++i) hits += argmax_row(w, i) == i - 1;
  EXPECT_GE(hits, 0.95 * (kN - 1));
  double mass = 0;
  for (int i = 1; i < kN; ++i) mass += w(i, i - 1);
  EXPECT_GE(mass / (kN - 1), 0.8);
}

TEST(Patterns, InductionFindsTheTokenAfterThePreviousOccurrence) {
  const Problem p = pattern_problem(parse_pattern("induction"), kN, kD, kD, 4);
  EXPECT_EQ(p.mask, MaskKind::Causal);
  const MatrixF w = weights_of(p);
  const int half = kN / 2;
  // The first half holds distinct tokens; the second repeats them.
  for (int i = 0; i < half; ++i) {
    EXPECT_EQ(p.query_tokens()[i], p.query_tokens()[i + half]);
    EXPECT_EQ(p.query_tokens()[i][0], 'w');
    for (int j = 0; j < i; ++j) ASSERT_NE(p.query_tokens()[i], p.query_tokens()[j]);
  }
  int hits = 0;
  for (int i = half; i < kN; ++i) {
    int prev = -1;
    for (int j = i - 1; j >= 0 && prev < 0; --j)
      if (p.query_tokens()[j] == p.query_tokens()[i]) prev = j;
    ASSERT_GE(prev, 0);
    hits += argmax_row(w, i) == prev + 1;
  }
  EXPECT_GE(hits, 0.9 * (kN - half));
}

// Past d_k's one-hot range the embeddings are random unit vectors; the structure still holds.
TEST(Patterns, InductionWithRandomEmbeddings) {
  const Problem p = pattern_problem(parse_pattern("induction"), 512, kD, 8, 5);
  const MatrixF w = weights_of(p);
  int hits = 0;
  for (int i = 256; i < 512; ++i) hits += argmax_row(w, i) == i - 256 + 1;
  EXPECT_GE(hits, 0.9 * 256);
}

TEST(Patterns, DkTooSmallIsRefusedWithTheMinimum) {
  EXPECT_EQ(test::message_of<InputError>(
                [] { pattern_problem(parse_pattern("previous"), kN, 8, 8, 0); }),
            "--pattern previous needs --dk >= 16, got 8");
  EXPECT_EQ(test::message_of<InputError>([] { pattern_problem(parse_pattern("sink"), kN, 1, 8, 0); }),
            "--pattern sink needs --dk >= 2, got 1");
  EXPECT_EQ(test::message_of<InputError>([] { pattern_problem(parse_pattern("induction"), 3, 1, 2, 0); }),
            "--pattern induction needs --dk >= 2, got 1");
  const std::string m = test::message_of<InputError>(
      [] { pattern_problem(parse_pattern("induction"), 4096, 16, 8, 0); });
  EXPECT_NE(m.find("--pattern induction needs --dk >= "), std::string::npos) << m;
  EXPECT_NE(test::message_of<InputError>(
                [] { pattern_problem(parse_pattern("local:300"), kN, kD, 8, 0); })
                .find("needs W < N"),
            std::string::npos);
  // W = N itself is refused (every key in the window: nothing stands out), N - 1 is not.
  EXPECT_EQ(test::message_of<InputError>([] { check_pattern(parse_pattern("local:64"), 64, 64); }),
            "--pattern local:W needs W < N, got local:64 with N 64");
  EXPECT_NO_THROW(check_pattern(parse_pattern("local:63"), 64, 64));
}

TEST(Patterns, HeadsShareThePatternAndDifferInV) {
  const Problem p = pattern_problem(parse_pattern("previous"), 32, 16, 4, 9, 3);
  EXPECT_EQ(p.heads, 3);
  EXPECT_EQ(p.n(), 32);
  EXPECT_TRUE(p.q().topRows(32) == p.q().middleRows(32, 32));
  EXPECT_FALSE(p.v().topRows(32) == p.v().middleRows(32, 32));
}

// ---- the real binary ----------------------------------------------------------------------------

TEST(PatternsCli, BadValuesGetOneErrorLineAndExit2) {
  for (const char* bad : {"foo", "local:", "local:-1", "local:x"}) {
    const test::BinaryRun r = test::run_attnlab({"run", "--random", "16", "--pattern", bad});
    EXPECT_EQ(r.code, 2) << bad;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  const test::BinaryRun small =
      test::run_attnlab({"describe", "--random", "64", "--dk", "4", "--pattern", "previous"});
  EXPECT_EQ(small.code, 2);
  EXPECT_EQ(small.err, "error: --pattern previous needs --dk >= 16, got 4\n");
  const test::BinaryRun alone = test::run_attnlab({"run", "--pattern", "sink"});
  EXPECT_EQ(alone.code, 2);
  EXPECT_NE(alone.err.find("add --random N"), std::string::npos) << alone.err;
}

TEST(PatternsCli, EveryOutputSaysSynthetic) {
  const std::string src = "synthetic pattern 'sink' (not a trained model)";
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"run", "--random", "16", "--dk", "8", "--pattern", "sink", "--lang", "en"},
        std::vector<std::string>{"describe", "--random", "16", "--dk", "8", "--pattern", "sink",
                                 "--lang", "en"},
        std::vector<std::string>{"run", "--random", "16", "--dk", "8", "--pattern", "sink",
                                 "--format", "json"}}) {
    const test::BinaryRun r = test::run_attnlab(args, "LANG=C.UTF-8");
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find(src), std::string::npos) << args[0] << " " << args.back() << "\n" << r.out.substr(0, 600);
  }
  const test::BinaryRun walk =
      test::run_attnlab({"walk", "--random", "16", "--dk", "8", "--pattern", "induction"});
  EXPECT_EQ(walk.code, 0) << walk.err;
}
