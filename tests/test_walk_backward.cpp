// The backward walk (cpu/walk_backward.h, `attnlab walk --backward`): one query row through the
// fused backward's step, tile by tile, against the fused backward itself, the staged backward's
// matrices and fp64.
#include "cpu/walk_backward.h"

#include "cpu/backward.h"
#include "cpu/cpu_backend.h"
#include "cpu/fused_backward.h"
#include "core/format.h"
#include "core/modify.h"
#include "core/walk_backward.h"
#include "test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <string>
#include <vector>

namespace attnlab {
namespace {

double scale_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s = std::max(s, std::abs(x));
  return s;
}

// A run of tiles skipped alike is one entry of the texts, as the forward walk's.
TEST(BackwardWalk, ARunOfSkippedTilesIsOneEntryOfTheTexts) {
  const Problem p = test::make_problem(64, 4, 2, 1, MaskKind::Causal, 1.0, 3);
  const BackwardWalk w = walk_backward_row(p, upstream_random(1), 0, 10, 4);
  const std::string en = render_backward_walk(w, Lang::En, Format::Text);
  EXPECT_NE(en.find("Tiles 3–15 · keys 12–63 (13 tiles)"), std::string::npos) << en;
  EXPECT_NE(en.find("the block mask rules out these 13 tiles, never loaded"), std::string::npos) << en;
  EXPECT_NE(render_backward_walk(w, Lang::Zh, Format::Markdown).find("块掩码排除了这 13 块"), std::string::npos);
}

TEST(BackwardWalk, EveryTileIsTheStagedBackwardsRowAndTheSumOfDsIsZero) {
  Problem p = test::make_problem(150, 16, 12, 2, MaskKind::Causal, 0.7, 5);
  const Upstream u = upstream_random(4);
  const int head = 1, query = 120;
  const BackwardWalk w = walk_backward_row(p, u, head, query, 32);
  const GradTrace staged = cpu_backward(p, u);
  const Eigen::Index row = static_cast<Eigen::Index>(head) * p.n() + query;
  ASSERT_EQ(w.tiles.size(), 5u);
  double sum = 0;
  for (const BackwardWalkTile& t : w.tiles) {
    // Causal: the last tile (keys 128..149) lies after query 120 and is never loaded.
    EXPECT_EQ(t.skipped, t.j0 > query) << t.index;
    if (t.skipped) {
      EXPECT_EQ(t.skip, WalkTile::Skip::AfterQuery);
      continue;
    }
    for (int j = t.j0; j < t.j1; ++j) {
      const int i = j - t.j0;
      EXPECT_NEAR(t.p[i], staged.forward.weights(row, j), 1e-6) << "P of key " << j;
      EXPECT_NEAR(t.dp[i], staged.dp(row, j), 1e-5) << "dP of key " << j;
      EXPECT_NEAR(t.ds[i], staged.dlogits(row, j), 1e-6) << "dS of key " << j;
      if (j > query) EXPECT_EQ(t.ds[i], 0.0) << "a masked key's dS is exactly 0";
      sum += t.ds[i];
    }
    EXPECT_NEAR(t.ds_sum, sum, 1e-6);
  }
  EXPECT_NEAR(w.tiles.back().ds_sum, 0.0, 1e-5) << "Σ P (dP − D) = D − D";
  EXPECT_NEAR(w.D, staged.D(row, 0), 1e-6);
  EXPECT_NEAR(w.lse, std::log(w.l) + w.m, 1e-12);
  // m in logit units: the row's largest logit (T = 0.7 here, so the scale is not 1).
  double largest = -INFINITY;
  for (int j = 0; j <= query; ++j) largest = std::max(largest, static_cast<double>(staged.forward.logits(row, j)));
  EXPECT_NEAR(w.m, largest, 1e-5 * std::max(1.0, std::abs(largest)));
  EXPECT_LE(w.fp64_error, 1e-5 * scale_of(w.fp64_dq));
  EXPECT_LE(w.fused_diff, 1e-6 * scale_of(w.fused_dq));
}

// The texts follow the numbers: a tile of one key is named by it alone; the sentence's direction
// follows dS's sign (a positive dS: descent lowers the logit); the final Σ dS is the last tile's.
// A row that sees one key (causal query 0): its dS is rounding, and the tile says so rather than
// reading a direction into it; in Chinese without a space after the full stop.
TEST(BackwardWalk, ARowOfOneKeySaysItsDsIsRounding) {
  const Problem p = test::make_problem(16, 4, 4, 1, MaskKind::Causal, 1.0, 3);
  const BackwardWalk w = walk_backward_row(p, upstream_random(2), 0, 0, 4);
  const std::string en = backward_walk_tile_sentence(w, 0, Lang::En), zh = backward_walk_tile_sentence(w, 0, Lang::Zh);
  EXPECT_NE(en.find("sees key 0 only: P = 1 and D = dO·O is its dP, so its dS is 0 in exact arithmetic"), std::string::npos)
      << en;
  EXPECT_EQ(en.find("gradient descent"), std::string::npos) << en;
  EXPECT_NE(zh.find("所以 dS 在精确算术中为 0"), std::string::npos) << zh;
  EXPECT_EQ(zh.find("。 "), std::string::npos) << zh;
}

// A tile that a mask file masks whole is loaded (the block mask does not rule it out) and says
// why its dS are 0 (it had said only "Σ dS so far", after a blank).
TEST(BackwardWalk, ATileMaskedWholeByAMaskFileSaysWhyItsDsIsZero) {
  Problem p = test::make_problem(16, 4, 4, 1, MaskKind::None, 1.0, 3);
  MatrixF mask = MatrixF::Zero(16, 16);
  for (int j : {0, 1, 2, 3, 8, 9, 10, 11}) mask(5, j) = -std::numeric_limits<float>::infinity();
  p.edit().custom_mask = mask;
  p.mask = MaskKind::Custom;
  const BackwardWalk w = walk_backward_row(p, upstream_random(2), 0, 5, 4);
  for (int t : {0, 2}) {
    ASSERT_FALSE(w.tiles[t].skipped);
    const std::string en = backward_walk_tile_sentence(w, t, Lang::En), zh = backward_walk_tile_sentence(w, t, Lang::Zh);
    EXPECT_EQ(en.rfind("Every key of the tile is masked (loaded: the block mask does not rule it out): P = 0", 0), 0u) << en;
    EXPECT_EQ(zh.rfind("本块每个键都被掩码", 0), 0u) << zh;
  }
  EXPECT_EQ(backward_walk_tile_sentence(w, 1, Lang::En).rfind("The tile's largest |dS| is key", 0), 0u);
}

TEST(BackwardWalk, TheTextsFollowTheNumbers) {
  const Problem p = test::make_problem(8, 4, 4, 1, MaskKind::None, 1.0, 3);
  const BackwardWalk one = walk_backward_row(p, upstream_random(2), 0, 5, 1);
  EXPECT_NE(render_backward_walk(one, Lang::En, Format::Text).find("keys 0\n"), std::string::npos)
      << render_backward_walk(one, Lang::En, Format::Text);
  EXPECT_EQ(render_backward_walk(one, Lang::En, Format::Text).find("0–0"), std::string::npos);
  const BackwardWalk w = walk_backward_row(p, upstream_random(2), 0, 5, 4);
  int positive = 0, negative = 0;
  for (int t = 0; t < static_cast<int>(w.tiles.size()); ++t) {
    const BackwardWalkTile& tile = w.tiles[static_cast<std::size_t>(t)];
    if (tile.top < 0) continue;
    const double ds = tile.ds[static_cast<std::size_t>(tile.top - tile.j0)];
    for (Lang lang : {Lang::En, Lang::Zh}) {
      const std::string s = backward_walk_tile_sentence(w, t, lang);
      const bool lowers = s.find(lang == Lang::En ? "gradient descent lowers" : "梯度下降会降低") != std::string::npos;
      const bool raises = s.find(lang == Lang::En ? "gradient descent raises" : "梯度下降会提高") != std::string::npos;
      EXPECT_EQ(lowers, ds > 0) << s;
      EXPECT_EQ(raises, ds < 0) << s;
    }
    (ds > 0 ? positive : negative) += 1;
  }
  EXPECT_GT(positive + negative, 1);
  const std::string text = render_backward_walk(w, Lang::En, Format::Text);
  const std::string label = "Σ_j dS (0 in exact arithmetic: Σ P·dP = D): ";
  const std::size_t at = text.find(label);
  ASSERT_NE(at, std::string::npos) << text;
  EXPECT_EQ(text.substr(at + label.size(), text.find('\n', at) - at - label.size()),
            format_number("%.2e", w.tiles.back().ds_sum));
}

TEST(BackwardWalk, AtTheKernelsKeyBlockTheDqIsTheKernelsBitForBit) {
  // One key block (m <= 64): the kernel adds one share to the row's dQ, the walk the same one.
  Problem p = random_problem(10, 60, 32, 32, 3, 2, 1);
  p.mods.softcap = 4;
  p.mods.alibi = true;
  const BackwardWalk w = walk_backward_row(p, upstream_random(1), 1, 7, 64);
  EXPECT_EQ(w.dq, w.fused_dq);
  EXPECT_EQ(w.fused_diff, 0.0);
}

// 40 decode-shaped queries over 300 keys, 8 heads on 4 key/value heads, causal, with RoPE at
// `theta`, ALiBi, a soft-cap of 3 and a window of `window` keys.
Problem every_modification(double theta, int window) {
  Problem p = random_problem(40, 300, 16, 16, 8, 4, 2);
  p.mask = MaskKind::Causal;
  p.mods.rope_theta = theta;
  p.mods.alibi = true;
  p.mods.softcap = 3;
  p.mods.window = window;
  return p;
}

TEST(BackwardWalk, ModificationsRopeAndGroupedHeadsAgainstFp64) {
  const Problem p = every_modification(10000, 50);
  Upstream sum;
  sum.kind = UpstreamKind::Sum;
  const BackwardWalk w = walk_backward_row(p, sum, 3, 30, 64);
  EXPECT_TRUE(w.rope);
  EXPECT_TRUE(w.score_mods);
  int window_skips = 0;
  for (const BackwardWalkTile& t : w.tiles) window_skips += t.skip == WalkTile::Skip::Window ? 1 : 0;
  EXPECT_GE(window_skips, 2) << "keys before position 290 − 49 lie outside the window";
  EXPECT_LE(w.fp64_error, 1e-5 * scale_of(w.fp64_dq));
  EXPECT_LE(w.fused_diff, 1e-6 * scale_of(w.fused_dq));
  // The tiles' running dQ (times the scale) is in the rotated frame, as the kernel sums dS K with K
  // turned: the last loaded tile's, turned back at the query's position, is the row's dQ.
  const BackwardWalkTile* last = nullptr;
  for (const BackwardWalkTile& t : w.tiles)
    if (!t.skipped) last = &t;
  ASSERT_NE(last, nullptr);
  ASSERT_EQ(static_cast<int>(last->dq.size()), p.d_k());
  MatrixD turned(1, p.d_k());
  for (int c = 0; c < p.d_k(); ++c) turned(0, c) = last->dq[c];
  turned = rope_rotate_back(turned, 30 + p.causal_offset(), p.mods.rope_theta);
  for (int c = 0; c < p.d_k(); ++c) EXPECT_NEAR(turned(0, c), w.dq[c], 1e-6 * scale_of(w.dq)) << c;
}

// The walk runs the kernels on the row alone (row_problem): their dQ row is the fused backward's
// row of the whole problem, with every modification and grouped, decode-shaped heads.
TEST(BackwardWalk, TheKernelOnTheRowIsTheKernelOnTheWholeProblem) {
  const Problem p = every_modification(500, 120);
  const Upstream u = upstream_random(2);
  const GradTrace whole = cpu_fused_backward(p, u);
  for (const auto& [head, query] : {std::pair{0, 0}, std::pair{3, 30}, std::pair{2, 39}}) {
    const BackwardWalk w = walk_backward_row(p, u, head, query, 64);
    const Eigen::Index row = static_cast<Eigen::Index>(head) * p.n() + query;
    const double scale = scale_of(w.fp64_dq);
    for (int c = 0; c < p.d_k(); ++c) {
      EXPECT_NEAR(w.fused_dq[c], whole.dq(row, c), 1e-6 * scale) << head << " " << query << " " << c;
      EXPECT_EQ(w.dout[c], whole.dout(row, c));
    }
    EXPECT_NEAR(w.D, whole.D(row, 0), 1e-6 * std::abs(whole.D(row, 0)) + 1e-7);
    EXPECT_LE(w.fp64_error, 1e-5 * scale);
  }
}

// A row whose logits overflow is refused naming that row of the problem, as the fused kernel
// names it, though the walk's kernels ran on the row alone.
TEST(BackwardWalk, AnOverflowNamesTheRowOfTheProblem) {
  Problem p = random_problem(8, 8, 4, 4, 1, 2, 2);
  p.edit().q.row(1 * 8 + 5) *= 1e30f;
  p.temperature = 1e-9;
  const std::string why = test::message_of<InputError>([&] { walk_backward_row(p, upstream_random(0), 1, 5, 4); });
  EXPECT_NE(why.find("head 1, query row 5"), std::string::npos) << why;
}

// The walk costs O(m d) whatever n is: a problem whose whole backward is out of reach is walked
// (the suite's time limit is what fails should the walk run the whole backward again).
TEST(BackwardWalk, WalksARowOfAProblemTooLargeForTheWholeBackward) {
  Problem p = random_problem(131072, 4, 4, 1);
  p.mask = MaskKind::Causal;
  const BackwardWalk w = walk_backward_row(p, upstream_random(0), 0, 100000, 8192);
  EXPECT_EQ(w.tiles.size(), 16u);
  EXPECT_TRUE(w.tiles.back().skipped);
  EXPECT_LE(w.fp64_error, 1e-5 * scale_of(w.fp64_dq));
  EXPECT_NEAR(w.tiles.back().ds_sum, 0.0, 1e-5);
}

// Where the fp32 row's error against fp64 reaches the fp64 gradient's largest entry (a one-hot row
// at a very low temperature: fp32's rounding times the scale), the walk warns, in text and JSON;
// a tile whose dS are all exactly zero says so instead of naming a key's direction.
TEST(BackwardWalk, SaysWhereTheFp32RowHasNoRightDigit) {
  const std::vector<std::string> base = {"walk", "--backward", "--random", "40", "--dk", "8", "--dv", "8"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return test::run_attnlab(a);
  };
  test::BinaryRun r = with({"--temperature", "1e-30", "--lang", "en"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(test::contains(r.out, "warning: the error reaches the fp64 gradient's largest entry")) << r.out;
  EXPECT_TRUE(test::contains(r.out, "Every dS in the tile is 0")) << r.out;
  r = with({"--temperature", "1e-30", "--lang", "zh"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(test::contains(r.out, "警告：误差达到 fp64 梯度的最大元素")) << r.out;
  r = with({"--temperature", "1e-30", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(nlohmann::json::parse(r.out)["fp64_error_reaches_scale"].get<bool>());
  r = with({"--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_FALSE(j["fp64_error_reaches_scale"].get<bool>());
  EXPECT_GT(j["fp64_error"].get<double>(), 0.0);
  r = with({"--lang", "en"});
  EXPECT_FALSE(test::contains(r.out, "warning")) << r.out;
  EXPECT_FALSE(test::contains(r.out, "Every dS in the tile is 0")) << r.out;
}

TEST(BackwardWalk, CliPrintsTheWalkAndRefusesWhatDoesNotGoWithIt) {
  test::BinaryRun r = test::run_attnlab({"walk", "--backward", "--lang", "en"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(test::contains(r.out, "Backward walk (FlashAttention-2's backward, seen from one query)")) << r.out;
  EXPECT_TRUE(test::contains(r.out, "error against fp64")) << r.out;
  r = test::run_attnlab({"walk", "--backward", "--lang", "zh"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(test::contains(r.out, "反向游走")) << r.out;
  r = test::run_attnlab({"walk", "--backward", "--format", "json", "--random", "100", "--mask", "causal", "--query", "40",
                         "--tile", "16", "--dout-seed", "7"});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["pass"], "backward");
  EXPECT_EQ(j["tiles"].size(), 7u);
  EXPECT_TRUE(j["tiles"][6]["skipped"].get<bool>());
  EXPECT_EQ(j["tiles"][6]["skip_reason"], "causal");
  EXPECT_EQ(j["tiles"][6]["dq"], j["tiles"][5]["dq"]) << "a skipped tile carries the running dQ over";
  EXPECT_EQ(j["dq"].size(), 64u);
  EXPECT_EQ(j["upstream"], (nlohmann::json{{"kind", "random"}, {"seed", 7}})) << "as backward's JSON";
  const struct {
    std::vector<std::string> args;
    std::string says;
  } refusals[] = {
      {{"walk", "--dout-seed", "3"}, "--dout, --loss and --dout-seed go with --backward"},
      {{"walk", "--backward", "--split", "2"}, "does not go with --backward"},
      {{"walk", "--backward", "--loss", "l1"}, "unknown loss 'l1'"},
      {{"walk", "--backward", "--format", "csv"}, "walk prints text, json or markdown"},
  };
  for (const auto& c : refusals) {
    r = test::run_attnlab(c.args);
    EXPECT_EQ(r.code, 2) << c.says << ": " << r.err;
    EXPECT_EQ(test::lines_of(r.err).size(), 1u) << r.err;
    EXPECT_TRUE(test::contains(r.err, c.says)) << r.err;
  }
}

}  // namespace
}  // namespace attnlab
