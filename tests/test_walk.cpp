// The online-softmax walk (cpu/walk.h, core/walk.h, `attnlab walk`): every tile's state against an
// fp64 recomputation of Algorithm 1 written out here, the walk at the kernel's own block size
// against cpu_fused bit for bit, causal rows with skipped tiles, a custom mask whose first tiles
// are fully masked for the row, N not a multiple of the tile, heads, and the CLI's renderings and
// refusals of bad --tile values.
#include "core/inputs.h"
#include "core/verify.h"
#include "core/walk.h"
#include "cpu/chains.h"
#include "cpu/cpu_backend.h"
#include "cpu/online_softmax.h"
#include "cpu/walk.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

using namespace attnlab;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Algorithm 1 for one row in double, tile by tile, from the inputs: what every tile's m, alpha,
// l and acc should be (m in logit units).
struct RefTile {
  double m, alpha, l;
  std::vector<double> acc;
};

std::vector<RefTile> reference_walk(const Problem& p, int head, int query, int tile) {
  const int n = p.n(), m = p.m(), d_k = p.d_k(), d_v = p.d_v();
  const MatrixF mask = mask_matrix(p);
  const double scale = 1.0 / (std::sqrt(static_cast<double>(d_k)) * p.temperature);
  std::vector<double> x(m);
  for (int j = 0; j < m; ++j) {
    double s = 0;
    for (int c = 0; c < d_k; ++c)
      s += static_cast<double>(p.q()(head * n + query, c)) * p.k()(head * m + j, c);
    x[j] = mask(query, j) != 0.f ? -kInf : s * scale;
  }
  std::vector<RefTile> out;
  double mr = -kInf, l = 0;
  std::vector<double> acc(d_v, 0.0);
  for (int j0 = 0; j0 < m; j0 += tile) {
    const int j1 = std::min(m, j0 + tile);
    double tmax = -kInf;
    for (int j = j0; j < j1; ++j) tmax = std::max(tmax, x[j]);
    const double mn = std::max(mr, tmax);
    const double alpha = std::isinf(mr) ? 0.0 : std::exp(mr - mn);
    l *= alpha;
    for (double& a : acc) a *= alpha;
    for (int j = j0; j < j1; ++j) {
      if (std::isinf(x[j])) continue;
      const double e = std::exp(x[j] - mn);
      l += e;
      for (int c = 0; c < d_v; ++c) acc[c] += e * p.v()(head * m + j, c);
    }
    mr = mn;
    out.push_back({mr, alpha, l, acc});
  }
  return out;
}

// Every computed tile of w against the recomputation; skipped tiles carry the state over.
void expect_matches_reference(const Problem& p, const Walk& w, double tol) {
  const std::vector<RefTile> ref = reference_walk(p, w.head, w.query, w.tile);
  ASSERT_EQ(w.tiles.size(), ref.size());
  for (std::size_t t = 0; t < ref.size(); ++t) {
    SCOPED_TRACE("tile " + std::to_string(t));
    const WalkTile& wt = w.tiles[t];
    if (std::isinf(ref[t].m)) {
      EXPECT_TRUE(std::isinf(wt.m) && wt.m < 0);
    } else {
      EXPECT_NEAR(wt.m, ref[t].m, tol * (1 + std::abs(ref[t].m)));
    }
    if (!wt.skipped) {
      EXPECT_NEAR(wt.alpha, ref[t].alpha, tol);
    }
    EXPECT_NEAR(wt.l, ref[t].l, tol * (1 + ref[t].l));
    for (int c = 0; c < w.d_v; ++c) EXPECT_NEAR(wt.acc[c], ref[t].acc[c], tol * (1 + ref[t].l));
    EXPECT_FALSE(std::isnan(wt.l));
    for (double a : wt.acc) EXPECT_FALSE(std::isnan(a));
  }
}

std::vector<double> row(const MatrixF& m, int r) {
  std::vector<double> v(m.cols());
  for (int c = 0; c < m.cols(); ++c) v[c] = m(r, c);
  return v;
}

}  // namespace

TEST(Walk, DemoMatchesAnFp64RecomputationTileByTile) {
  const Problem p = demo_problem();
  for (int tile = 1; tile <= p.m(); ++tile) {
    for (int q = 0; q < p.n(); ++q) {
      SCOPED_TRACE("tile " + std::to_string(tile) + " query " + std::to_string(q));
      Walk w = walk_row(p, 0, q, tile);
      expect_matches_reference(p, w, 1e-5);
      check_walk(p, w);
      EXPECT_LT(w.fp64_error, 1e-6);
      EXPECT_LT(w.max_abs_diff, 1e-6);
      EXPECT_LT(w.cpu_fused_diff, 1e-6);  // other tile sizes group the sums differently
    }
  }
}

TEST(Walk, DemoDefaultReadsAsTheIssueSays) {
  const Walk w = walk_row(demo_problem(), 0, kDemoDefaultQuery, 2);
  ASSERT_EQ(w.tiles.size(), 3u);
  EXPECT_EQ(w.tiles[0].alpha, 0.0);  // nothing accumulated before the first tile
  EXPECT_GT(w.tiles[1].tile_max, w.tiles[0].m);  // tile 1 raises the max: everything rescaled
  EXPECT_LT(w.tiles[1].alpha, 1.0);
  EXPECT_EQ(w.tiles[2].alpha, 1.0);  // tile 2's max is below m: nothing rescaled
  EXPECT_NE(walk_tile_sentence(w, 1, Lang::En).find("rescaled by α"), std::string::npos);
  EXPECT_NE(walk_tile_sentence(w, 1, Lang::Zh).find("重新缩放"), std::string::npos);
}

// At the kernel's key block (kFusedKeyBlock) the walk runs exactly the kernel's steps: the same bits.
TEST(Walk, AtTheKernelsBlockSizeItIsTheKernelBitForBit) {
  for (MaskKind mask : {MaskKind::None, MaskKind::Causal, MaskKind::Custom}) {
    const Problem p = test::make_problem(300, 16, 8, 1, mask, 0.7, 5);
    const MatrixF fused = cpu_fused(p).output;
    for (int q : {0, 1, 63, 64, 127, 128, 200, 299}) {
      SCOPED_TRACE(std::string(to_string(mask)) + " query " + std::to_string(q));
      const Walk w = walk_row(p, 0, q, cpu::online::kFusedKeyBlock);
      EXPECT_EQ(w.output, row(fused, q));
    }
  }
  // A soft-cap that some of a tile's scores exceed and others do not: the walk's one-query tiles
  // hold other lanes than the kernel's, and the cap of a lane is its own (the same bits).
  // And a bias, which the kernel adds through transposed blocks of whole lanes and keys and the
  // walk one element at a time.
  Problem p = test::make_problem(300, 16, 8, 1, MaskKind::Causal, 0.7, 5);
  p.mods.softcap = 1.5;
  for (bool bias : {false, true}) {
    if (bias) p.edit().bias = test::make_problem(300, 300, 1, 1, MaskKind::None, 1, 8).q() * 0.5f;
    const MatrixF fused = cpu_fused(p).output;
    for (int q : {0, 63, 64, 200, 299}) {
      SCOPED_TRACE(std::string(bias ? "bias and " : "") + "softcap 1.5, query " + std::to_string(q));
      EXPECT_EQ(walk_row(p, 0, q, cpu::online::kFusedKeyBlock).output, row(fused, q));
    }
  }
}

// Windows, a prefix and ALiBi: the kernel visits from each tile's first visible key (not a multiple
// of four here, and different for neighbouring tiles), the walk whole key blocks with the keys
// before masked. The softmax's sum chains follow the key's own index, so every row is still the
// kernel's, bit for bit (they differed in the last bits of l when the chains followed the offset
// in the visited range).
TEST(Walk, AtTheKernelsBlockSizeItIsTheKernelBitForBitWhereverTheTilesStart) {
  for (const char* mods : {"causal+window:38", "window:23", "causal+window:46+prefix:6"}) {
    Problem p = test::make_problem(300, 16, 8, 1, MaskKind::None, 0.7, 5);
    apply_mask_mod_spec(p, mods);
    p.mods.alibi = true;
    validate(p);
    const MatrixF fused = cpu_fused(p).output;
    for (int q = 0; q < p.n(); q += 3) {
      SCOPED_TRACE(std::string(mods) + " query " + std::to_string(q));
      ASSERT_EQ(walk_row(p, 0, q, cpu::online::kFusedKeyBlock).output, row(fused, q));
    }
  }
}

// Where the kernel reads V from its strips (d_v >= 128 and n >= 2048: cpu/fused.cpp VStrips), the
// wide tiles' P V takes V's values from the copy and the narrow ones (the causal diagonal, a
// window's edges) from V itself; the walk reads V itself. A last strip short of a whole one
// (d_v = 130), a short last key block (m = 2100, and 2133 keys of a decode shape), grouped heads
// (key/value head 1 read by heads 2 and 3): every row is still the kernel's, bit for bit.
TEST(Walk, AtTheKernelsBlockSizeItIsTheKernelBitForBitWithVInStrips) {
  for (const char* mods : {"none", "causal", "causal+window:70", "decode"}) {
    Problem p = std::string(mods) == "decode" ? random_problem(2050, 2133, 8, 130, 5, 4, 2)
                                              : random_problem(2100, 2100, 8, 130, 5, 4, 2);
    if (std::string(mods) != "decode") apply_mask_mod_spec(p, mods);
    p.temperature = 0.7;
    validate(p);
    ASSERT_GT(cpu::fused_v_strip_floats(size_of(p)), 0u) << mods;  // the kernel makes its strips here
    const MatrixF fused = cpu_fused(p).output;
    for (int h : {0, 3})
      for (int q : {0, 1, 63, 64, 127, 128, 1000, 2049}) {
        SCOPED_TRACE(std::string(mods) + " head " + std::to_string(h) + " query " + std::to_string(q));
        ASSERT_EQ(walk_row(p, h, q, cpu::online::kFusedKeyBlock).output,
                  row(fused, static_cast<int>(h * p.n() + q)));
      }
  }
}

// The checks run the kernel on the one-row problem: the row of the full run, bit for bit.
TEST(Walk, RowProblemGivesTheFullRunsRow) {
  for (MaskKind mask : {MaskKind::None, MaskKind::Causal, MaskKind::Custom}) {
    const Problem p = test::make_problem(150, 8, 4, 1, mask, 1.3, 9);
    const MatrixF fused = cpu_fused(p).output;
    for (int q : {0, 77, 149}) EXPECT_EQ(row(cpu_fused(row_problem(p, 0, q)).output, 0), row(fused, q));
  }
}

TEST(Walk, CausalRowsSkipTilesAfterTheQuery) {
  const Problem p = test::make_problem(10, 4, 3, 1, MaskKind::Causal, 1.0, 3);
  Walk w = walk_row(p, 0, 4, 3);  // tiles [0,3) [3,6) [6,9) [9,10)
  ASSERT_EQ(w.tiles.size(), 4u);
  EXPECT_FALSE(w.tiles[0].skipped);
  EXPECT_FALSE(w.tiles[1].skipped);
  EXPECT_TRUE(w.tiles[2].skipped);
  EXPECT_TRUE(w.tiles[3].skipped);
  EXPECT_TRUE(w.tiles[2].logits.empty());
  // The diagonal tile is masked per element: key 5 is after query 4.
  EXPECT_TRUE(std::isinf(w.tiles[1].logits[2]) && w.tiles[1].logits[2] < 0);
  EXPECT_EQ(w.tiles[1].weights[2], 0.0);
  EXPECT_EQ(w.tiles[1].masked, 1);
  EXPECT_FALSE(std::isinf(w.tiles[1].logits[1]));
  for (int t : {2, 3}) {
    EXPECT_EQ(w.tiles[t].m, w.tiles[1].m);
    EXPECT_EQ(w.tiles[t].l, w.tiles[1].l);
    EXPECT_EQ(w.tiles[t].acc, w.tiles[1].acc);
  }
  expect_matches_reference(p, w, 1e-5);
  check_walk(p, w);
  EXPECT_LT(w.fp64_error, 1e-5);
  EXPECT_NE(walk_tile_sentence(w, 2, Lang::En).find("never loaded"), std::string::npos);
  // Query 0 sees only key 0: one computed tile, the rest skipped.
  const Walk first = walk_row(p, 0, 0, 3);
  EXPECT_FALSE(first.tiles[0].skipped);
  for (std::size_t t = 1; t < first.tiles.size(); ++t) EXPECT_TRUE(first.tiles[t].skipped);
  for (int c = 0; c < p.d_v(); ++c) EXPECT_NEAR(first.output[c], p.v()(0, c), 1e-6);
}

// A skipped tile names its query as the header does, with its token: a decode row's position (it
// had named row 0 where the keys came after position 8); past a prefix-LM's prefix the reason is
// the prefix-LM's causal rule, not a causal mask the problem does not have.
TEST(Walk, SkippedTilesNameTheQuerysPositionAndTheirRule) {
  Problem decode = random_problem(2, 10, 4, 3, 3, 1, 1);  // queries at positions 8 and 9
  decode.mask = MaskKind::Causal;
  const Walk w = walk_row(decode, 0, 0, 3);  // tiles [0,3) [3,6) [6,9) [9,10)
  ASSERT_TRUE(w.tiles[3].skipped);
  EXPECT_NE(walk_tile_sentence(w, 3, Lang::En).find("Key 9 comes after query 0 (8): under the causal mask"),
            std::string::npos) << walk_tile_sentence(w, 3, Lang::En);
  EXPECT_NE(walk_tile_sentence(w, 3, Lang::Zh).find("键 9 在查询 0（8）之后：因果掩码下"), std::string::npos)
      << walk_tile_sentence(w, 3, Lang::Zh);
  Problem prefix = test::make_problem(10, 4, 3, 1, MaskKind::None, 1.0, 3);
  apply_mask_mod_spec(prefix, "prefix:3");
  const Walk pw = walk_row(prefix, 0, 4, 3);
  ASSERT_TRUE(pw.tiles[2].skipped);
  for (Lang l : {Lang::En, Lang::Zh}) {
    const std::string s = walk_tile_sentence(pw, 2, l);
    EXPECT_NE(s.find(l == Lang::En ? "past its first 3 positions the prefix-LM is causal" : "前缀语言模型在前 3 个位置之后是因果的"),
              std::string::npos) << s;
    EXPECT_EQ(s.find(l == Lang::En ? "causal mask" : "因果掩码"), std::string::npos) << s;
  }
}

// The texts tell a run of tiles skipped alike as one entry, its keys and its count (a window of 256
// over 65536 keys had printed a thousand identical notes); the JSON keeps every tile.
TEST(Walk, ARunOfSkippedTilesIsOneEntryOfTheTexts) {
  const Problem p = test::make_problem(64, 4, 2, 1, MaskKind::Causal, 1.0, 3);
  const Walk w = walk_row(p, 0, 10, 4);  // tiles 3..15 (keys 12..63) after the query
  ASSERT_EQ(w.tiles.size(), 16u);
  for (const Format f : {Format::Text, Format::Markdown}) {
    const std::string en = render_walk(w, Lang::En, f), zh = render_walk(w, Lang::Zh, f);
    EXPECT_NE(en.find("Tiles 3–15 · keys 12–63 (13 tiles)"), std::string::npos) << en;
    EXPECT_NE(en.find("Keys 12–63 all come after query 10 (10): under the causal mask these 13 tiles are never loaded"),
              std::string::npos) << en;
    EXPECT_EQ(en.find("Tile 4 "), std::string::npos) << "inside the run";
    EXPECT_NE(en.find("Tile 2 · keys 8–11"), std::string::npos) << "a tile read stays its own";
    EXPECT_NE(zh.find("块 3–15 · 键 12–63（共 13 块）"), std::string::npos) << zh;
    EXPECT_NE(zh.find("因果掩码下这 13 块从未加载"), std::string::npos) << zh;
  }
  EXPECT_EQ(nlohmann::json::parse(render_walk(w, Lang::En, Format::Json))["tiles"].size(), 16u);
  // One tile alone keeps its own words.
  EXPECT_NE(walk_tile_sentence(w, 15, Lang::En).find("under the causal mask this tile is never loaded"), std::string::npos);
}

TEST(Walk, CustomMaskWhoseFirstTilesAreFullyMaskedForTheRow) {
  Problem p = test::make_problem(8, 4, 3, 1, MaskKind::None, 0.9, 11);
  p.mask = MaskKind::Custom;
  p.edit().custom_mask = MatrixF::Zero(8, 8);
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int j = 0; j < 5; ++j) p.edit().custom_mask(5, j) = ninf;  // row 5: keys 0..4 masked
  validate(p);
  Walk w = walk_row(p, 0, 5, 2);  // tiles [0,2) [2,4) fully masked, [4,6) half
  ASSERT_EQ(w.tiles.size(), 4u);
  for (int t : {0, 1}) {
    const WalkTile& wt = w.tiles[t];
    EXPECT_TRUE(std::isinf(wt.m) && wt.m < 0);
    EXPECT_TRUE(std::isinf(wt.tile_max) && wt.tile_max < 0);
    EXPECT_EQ(wt.alpha, 0.0);
    EXPECT_EQ(wt.l, 0.0);
    EXPECT_TRUE(wt.output.empty());
    for (double a : wt.acc) EXPECT_EQ(a, 0.0);
    for (double e : wt.weights) EXPECT_EQ(e, 0.0);
    EXPECT_EQ(wt.masked, 2);
  }
  EXPECT_EQ(w.tiles[2].alpha, 0.0);  // the first key that counts: nothing to rescale
  EXPECT_EQ(w.tiles[2].masked, 1);
  EXPECT_NE(walk_tile_sentence(w, 0, Lang::En).find("m stays −∞"), std::string::npos);
  expect_matches_reference(p, w, 1e-5);
  check_walk(p, w);
  EXPECT_LT(w.fp64_error, 1e-5);
  // JSON: -inf as null, no NaN anywhere.
  const std::string json = render_walk(w, Lang::En, Format::Json);
  EXPECT_EQ(json.find("NaN"), std::string::npos);
  EXPECT_EQ(json.find("nan"), std::string::npos);
  const auto j = nlohmann::json::parse(json);
  EXPECT_TRUE(j["tiles"][0]["m"].is_null());
  EXPECT_TRUE(j["tiles"][0]["tile_max"].is_null());
  EXPECT_TRUE(j["tiles"][0]["output"].is_null());
  EXPECT_TRUE(j["tiles"][0]["logits"][0].is_null());
  EXPECT_EQ(j["tiles"][0]["alpha"], 0.0);
}

TEST(Walk, KeysNotAMultipleOfTheTile) {
  const Problem p = test::make_problem(7, 5, 2, 1, MaskKind::None, 1.0, 2);
  for (int tile = 1; tile <= 7; ++tile) {
    SCOPED_TRACE("tile " + std::to_string(tile));
    Walk w = walk_row(p, 0, 3, tile);
    EXPECT_EQ(static_cast<int>(w.tiles.size()), (7 + tile - 1) / tile);
    EXPECT_EQ(w.tiles.back().j1, 7);
    EXPECT_EQ(w.tiles.back().j1 - w.tiles.back().j0, 7 - (w.tiles.size() - 1) * tile);
    expect_matches_reference(p, w, 1e-5);
    check_walk(p, w);
    EXPECT_LT(w.fp64_error, 1e-6);
  }
}

TEST(Walk, OtherHeadsWalkTheirOwnRows) {
  const Problem p = test::make_problem(40, 8, 4, 3, MaskKind::Causal, 0.8, 4);
  const MatrixF fused = cpu_fused(p).output;
  Walk w = walk_row(p, 2, 17, 8);
  expect_matches_reference(p, w, 1e-5);
  check_walk(p, w);
  EXPECT_LT(w.fp64_error, 1e-5);
  EXPECT_LT(walk_max_abs_diff(w.output, row(fused, 2 * 40 + 17)), 1e-6);
}

// The checks run the kernels on the row alone; where the staged chain refuses there (a score of
// -1e40 below the row's largest: fp32 rounds it to -inf, which the online walk weighs 0 and the
// staged chain, keeping its scores, refuses), the refusal names the row of p, not the one-row
// problem's row 0.
TEST(Walk, ARefusalOfTheChecksNamesTheRowOfTheProblem) {
  Problem p = random_problem(8, 2, 2, 1, 2);
  p.edit().q.row(1 * 8 + 5) << 1e20f, 1.f;
  p.edit().k.row(1 * 8 + 3) << -1e20f, 1.f;
  Walk w = walk_row(p, 1, 5, 4);
  EXPECT_EQ(test::message_of<InputError>([&] { check_walk(p, w); }),
            "QKᵀ overflows at row 5, column 3 (inputs too large for this precision and temperature)");
}

TEST(Walk, BadArgumentsAreInputErrors) {
  const Problem p = demo_problem();
  EXPECT_NE(test::message_of<InputError>([&] { walk_row(p, 0, 0, 0); }).find("tile"), std::string::npos);
  EXPECT_NE(test::message_of<InputError>([&] { walk_row(p, 1, 0, 2); }).find("head"), std::string::npos);
  EXPECT_NE(test::message_of<InputError>([&] { walk_row(p, 0, 5, 2); }).find("query"), std::string::npos);
  EXPECT_THROW(render_walk(walk_row(p, 0, 0, 2), Lang::En, Format::Csv), InputError);
}

// ---- the CLI -------------------------------------------------------------------------------

TEST(WalkCli, BadTileValuesGiveOneErrorLineAndExitTwo) {
  for (const std::string bad : {"0", "-3", "abc", "1.5", "2x", "6", "99999999999"}) {
    SCOPED_TRACE(bad);
    const test::BinaryRun r = test::run_attnlab({"walk", "--tile", bad}, "LANG=C.UTF-8");
    EXPECT_EQ(r.code, 2);
    const auto lines = test::lines_of(r.err);
    ASSERT_EQ(lines.size(), 1u) << r.err;
    EXPECT_EQ(lines[0].rfind("error: ", 0), 0u) << lines[0];
    EXPECT_TRUE(r.out.empty());
  }
  // Blanks around a whole number are taken, as every other option takes them.
  for (const std::vector<std::string> args :
       {std::vector<std::string>{"walk", "--tile", " 2 "}, {"walk", "--random", "8", "--heads", "2", "--head", " 1"}}) {
    const test::BinaryRun r = test::run_attnlab(args, "LANG=C.UTF-8");
    EXPECT_EQ(r.code, 0) << r.err;
  }
  const test::BinaryRun h = test::run_attnlab({"walk", "--head", "1"}, "LANG=C.UTF-8");
  EXPECT_EQ(h.code, 2);
  EXPECT_EQ(test::lines_of(h.err).size(), 1u);
  const test::BinaryRun c = test::run_attnlab({"walk", "--format", "csv"}, "LANG=C.UTF-8");
  EXPECT_EQ(c.code, 2);
  // The walk is the fp32 fused kernel's step: it takes no --variant or --precision (refused, not ignored).
  for (const std::vector<std::string> args :
       {std::vector<std::string>{"walk", "--precision", "bf16"}, {"walk", "--backward", "--variant", "staged"}}) {
    const test::BinaryRun r = test::run_attnlab(args, "LANG=C.UTF-8");
    EXPECT_EQ(r.code, 2) << args[1];
    const auto lines = test::lines_of(r.err);
    ASSERT_EQ(lines.size(), 1u) << r.err;
    EXPECT_EQ(lines[0].rfind("error: ", 0), 0u) << lines[0];
  }
}

TEST(WalkCli, JsonHasTheDocumentedShape) {
  const test::BinaryRun r =
      test::run_attnlab({"walk", "--format", "json", "--backend", "cpu"}, "LANG=C.UTF-8");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["query"], 2);
  EXPECT_EQ(j["head"], 0);
  EXPECT_EQ(j["tile"], 2);
  EXPECT_EQ(j["temperature"], 0.85);
  EXPECT_EQ(j["mask"], "none");
  EXPECT_EQ(j["d_k"], 3);
  EXPECT_EQ(j["d_v"], 2);
  ASSERT_EQ(j["tiles"].size(), 3u);
  const auto& t0 = j["tiles"][0];
  for (const char* key : {"index", "keys", "skipped", "logits", "tile_max", "m", "alpha", "l", "acc", "output"})
    EXPECT_TRUE(t0.contains(key)) << key;
  EXPECT_EQ(t0["keys"], nlohmann::json::array({0, 2}));
  EXPECT_EQ(j["tiles"][2]["keys"], nlohmann::json::array({4, 5}));
  for (const char* key : {"output", "staged_output", "max_abs_diff", "fp64_error"}) EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["output"].size(), 2u);
  EXPECT_LT(j["fp64_error"].get<double>(), 1e-6);
  EXPECT_TRUE(j["cuda_fused_output"].is_null());  // --backend cpu
}

// The JSON's units say what its scale multiplies: q.k_j by 1/(sqrt(d_k) T) on the plain chain,
// the modified scaled scores by 1/T with score mods (it had given the plain formula beside 1/T).
TEST(WalkCli, TheJsonsUnitsFollowTheScoreMods) {
  const test::BinaryRun plain = test::run_attnlab({"walk", "--format", "json", "--backend", "cpu"}, "LANG=C.UTF-8");
  ASSERT_EQ(plain.code, 0) << plain.err;
  const auto p = nlohmann::json::parse(plain.out);
  EXPECT_NEAR(p["scale"].get<double>(), 1 / (std::sqrt(3.0) * 0.85), 1e-6);
  EXPECT_TRUE(test::contains(p["units"].get<std::string>(), "x_j = q.k_j * scale (scale = 1/(sqrt(d_k) T))"));
  const test::BinaryRun capped = test::run_attnlab(
      {"walk", "--format", "json", "--backend", "cpu", "--score-mod", "softcap:5", "--temperature", "0.5"}, "LANG=C.UTF-8");
  ASSERT_EQ(capped.code, 0) << capped.err;
  const auto c = nlohmann::json::parse(capped.out);
  EXPECT_EQ(c["scale"].get<double>(), 2.0);
  EXPECT_TRUE(test::contains(c["units"].get<std::string>(),
                             "x_j = mod(q.k_j * s) * scale (s = 1/sqrt(d_k), scale = 1/T; mod: the score mods"))
      << c["units"];
}

TEST(WalkCli, TextAndMarkdownInBothLanguages) {
  const test::BinaryRun en = test::run_attnlab({"walk", "--lang", "en", "--mask", "causal", "--query", "1"}, "LANG=C.UTF-8");
  ASSERT_EQ(en.code, 0) << en.err;
  EXPECT_TRUE(test::contains(en.out, "Tile 0 · keys 0–1"));
  EXPECT_TRUE(test::contains(en.out, "never loaded"));
  EXPECT_TRUE(test::contains(en.out, "error against fp64"));
  const test::BinaryRun zh = test::run_attnlab({"walk", "--lang", "zh", "--format", "markdown"}, "LANG=C.UTF-8");
  ASSERT_EQ(zh.code, 0) << zh.err;
  EXPECT_TRUE(test::contains(zh.out, "### 块 1 · 键 2–3"));
  EXPECT_TRUE(test::contains(zh.out, "| 块最大值 | m | α | l | acc | 输出 |"));
  const test::BinaryRun big = test::run_attnlab(
      {"walk", "--random", "300", "--dk", "16", "--dv", "8", "--mask", "causal", "--query", "200", "--format", "json"},
      "LANG=C.UTF-8");
  ASSERT_EQ(big.code, 0) << big.err;
  const auto j = nlohmann::json::parse(big.out);
  EXPECT_EQ(j["tile"], 64);  // default off the demo
  ASSERT_EQ(j["tiles"].size(), 5u);
  EXPECT_FALSE(j["tiles"][3]["skipped"].get<bool>());  // keys 192..255 hold the diagonal
  EXPECT_TRUE(j["tiles"][4]["skipped"].get<bool>());
  EXPECT_LT(j["cpu_fused_max_abs_diff"].get<double>(), 1e-6);
}

// `walk --split S`: the row's split-KV computation through the decode kernel's own steps. Every
// split's state is that split's softmax in fp64, each merge follows the rule on screen, and the
// merged output is the one-pass walk's and the decode kernel's.
TEST(WalkSplit, EachSplitsStateAndEachMergeAreTheDecodeKernels) {
  Problem p = random_problem(3, 5000, 16, 8, 41, 4, 2);
  p.mask = MaskKind::Causal;
  const int head = 3, query = 1;
  Walk w = walk_row(p, head, query, 512);
  check_walk(p, w);
  walk_splits(p, 4, w);
  ASSERT_EQ(w.splits, 4);
  ASSERT_EQ(w.split_states.size(), 4u);
  ASSERT_EQ(w.merges.size(), 3u);
  // Each split's m and l against fp64 over its keys (query 1 of 3 sees keys 0..4998).
  const double scale = 1.0 / std::sqrt(16.0);
  const Eigen::Index qrow = static_cast<Eigen::Index>(head) * 3 + query, krow = p.kv_row(head);
  for (const WalkSplit& st : w.split_states) {
    double mx = -kInf;
    std::vector<double> x;
    for (int j = st.j0; j < std::min(st.j1, 4999); ++j) {
      double s = 0;
      for (int c = 0; c < 16; ++c) s += static_cast<double>(p.q()(qrow, c)) * p.k()(krow + j, c);
      x.push_back(s * scale);
      mx = std::max(mx, s * scale);
    }
    double l = 0;
    for (double v : x) l += std::exp(v - mx);
    EXPECT_NEAR(st.m, mx, 1e-5) << st.index;
    EXPECT_NEAR(st.l, l, 1e-5 * l) << st.index;
  }
  EXPECT_EQ(w.split_states.back().j1, 5000);
  // The merge rule, as printed.
  for (const WalkMerge& mg : w.merges) {
    EXPECT_DOUBLE_EQ(mg.m, std::max(mg.m_a, mg.m_b));
    EXPECT_NEAR(mg.a, std::exp(mg.m_a - mg.m), 1e-6);
    EXPECT_NEAR(mg.b, std::exp(mg.m_b - mg.m), 1e-6);
    EXPECT_NEAR(mg.l, mg.a * mg.l_a + mg.b * mg.l_b, 1e-5 * mg.l);
  }
  // The merged output: the one-pass walk's, fp64's and the decode kernel's own row.
  EXPECT_LT(w.split_max_abs_diff, 1e-5);
  EXPECT_LT(w.split_fp64_error, 1e-5);
  EXPECT_LE(w.split_l_ulps, 64.0);
  const Trace dec = cpu_decode(p, 4);
  for (int c = 0; c < 8; ++c) EXPECT_FLOAT_EQ(static_cast<float>(w.split_output[c]), dec.output(qrow, c)) << c;
}

TEST(WalkSplit, ASplitTheRowCannotSeeIsAnEmptyStateTheMergeIgnores) {
  Problem p = random_problem(4, 40, 8, 4, 3, 1, 1);
  p.mask = MaskKind::Causal;
  // Query 0 sits at position 36: 20 splits of 2 keys, the last (keys 38, 39) all after it, is empty.
  Walk w = walk_row(p, 0, 0, 8);
  check_walk(p, w);
  walk_splits(p, 20, w);
  ASSERT_EQ(w.splits, 20);
  const WalkSplit& last = w.split_states.back();
  EXPECT_EQ(last.j0, 38);
  EXPECT_EQ(last.l, 0.0);
  EXPECT_EQ(last.m, -kInf);
  EXPECT_EQ(w.merges.back().b, 0.0);
  EXPECT_LT(w.split_max_abs_diff, 1e-6);
  EXPECT_THROW(walk_splits(p, 41, w), InputError);
  EXPECT_THROW(walk_splits(p, -1, w), InputError);
}

TEST(WalkCli, SplitIsPrintedInBothLanguagesAndCarriedByTheJson) {
  const test::BinaryRun en = test::run_attnlab({"walk", "--lang", "en", "--split", "2"}, "LANG=C.UTF-8");
  ASSERT_EQ(en.code, 0) << en.err;
  EXPECT_TRUE(test::contains(en.out, "Split-KV: the keys in 2 splits")) << en.out;
  EXPECT_TRUE(test::contains(en.out, "merge split 1: m = max("));
  EXPECT_TRUE(test::contains(en.out, "max |merged − walk|"));
  const test::BinaryRun zh = test::run_attnlab({"walk", "--lang", "zh", "--split", "3", "--format", "markdown"}, "LANG=C.UTF-8");
  ASSERT_EQ(zh.code, 0) << zh.err;
  EXPECT_TRUE(test::contains(zh.out, "### Split-KV"));
  EXPECT_TRUE(test::contains(zh.out, "合并段 2"));
  // The count asked for, where equal lengths could not give it (4 of the demo's 5 keys).
  const test::BinaryRun four = test::run_attnlab({"walk", "--lang", "en", "--split", "4"}, "LANG=C.UTF-8");
  EXPECT_TRUE(test::contains(four.out, "Split-KV: the keys in 4 splits")) << four.out;
  const test::BinaryRun js = test::run_attnlab({"walk", "--split", "2", "--format", "json"}, "LANG=C.UTF-8");
  ASSERT_EQ(js.code, 0) << js.err;
  const auto j = nlohmann::json::parse(js.out);
  ASSERT_TRUE(j.contains("split_kv"));
  EXPECT_EQ(j["split_kv"]["count"], 2);
  EXPECT_EQ(j["split_kv"]["states"].size(), 2u);
  EXPECT_EQ(j["split_kv"]["merges"].size(), 1u);
  for (const char* key : {"m_a", "m_b", "m", "a", "b", "l_a", "l_b", "l", "acc"})
    EXPECT_TRUE(j["split_kv"]["merges"][0].contains(key)) << key;
  EXPECT_LT(j["split_kv"]["max_abs_diff_to_walk"].get<double>(), 1e-6);
  // Without --split there is no split section.
  const test::BinaryRun plain = test::run_attnlab({"walk", "--format", "json"}, "LANG=C.UTF-8");
  EXPECT_FALSE(nlohmann::json::parse(plain.out).contains("split_kv"));
  // walk's help says what its --split does (not run's "with --variant decode ... chosen from the cores").
  const test::BinaryRun help = test::run_attnlab({"walk", "--help"}, "LANG=C.UTF-8");
  EXPECT_TRUE(test::contains(help.out, "After the walk: the same row split-KV")) << help.out;
  EXPECT_FALSE(test::contains(help.out, "With --variant decode")) << help.out;
  for (const std::string bad : {"-1", "0", "6", "x"}) {
    const test::BinaryRun r = test::run_attnlab({"walk", "--split", bad}, "LANG=C.UTF-8");
    EXPECT_EQ(r.code, 2) << bad;
    EXPECT_EQ(test::lines_of(r.err).size(), 1u) << r.err;
  }
}

// One key, one tile and one split are counted in the singular, in both walks.
TEST(WalkCli, CountsOfOneAreSingular) {
  test::BinaryRun r = test::run_attnlab({"walk", "--lang", "en", "--random", "1", "--dk", "2", "--split", "1"}, "LANG=C.UTF-8");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(test::contains(r.out, ", 1 key per tile, 1 tile; T = ")) << r.out;
  EXPECT_TRUE(test::contains(r.out, "the keys in 1 split (cut")) << r.out;
  r = test::run_attnlab({"walk", "--lang", "en", "--random", "8", "--dk", "2", "--tile", "1", "--backward"}, "LANG=C.UTF-8");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(test::contains(r.out, ", 1 key per tile, 8 tiles; T = ")) << r.out;
}

TEST(Walk, DefaultTileGivesSeveralTilesOnShortRows) {
  EXPECT_EQ(default_walk_tile(true, 5), 2);
  EXPECT_EQ(default_walk_tile(false, 1), 1);
  EXPECT_EQ(default_walk_tile(false, 3), 1);
  EXPECT_EQ(default_walk_tile(false, 40), 8);
  EXPECT_EQ(default_walk_tile(false, 64), 16);
  EXPECT_EQ(default_walk_tile(false, 255), 32);
  EXPECT_EQ(default_walk_tile(false, 256), 64);
  EXPECT_EQ(default_walk_tile(false, 1 << 20), 64);
  for (int keys = 4; keys < 256; ++keys) EXPECT_GE(walk_tile_count(keys, default_walk_tile(false, keys)), 4) << keys;
}

// A V near fp32's largest values: the splits run on V · 2^-e as the one-pass walk does, and where
// only the splits' sums overflow (one key dominates the row, the other split holds four keys of
// equal weight: its acc is 4 · 3e38 with V as given) they scale V themselves; the merged output is
// the walk's either way.
TEST(WalkSplit, AHugeVIsScaledForTheSplitsAsForTheWalk) {
  const auto problem = [](float lead) {
    Problem p = random_problem(1, 8, 1, 1, 5, 1, 1);
    ProblemInputs in;
    in.q = MatrixF::Constant(1, 1, 1.f);
    in.k = MatrixF::Zero(8, 1);
    in.k(0, 0) = lead;  // key 0's score: the others score 0
    in.v = MatrixF::Constant(8, 1, 3e38f);
    p.set_inputs(std::move(in));
    return p;
  };
  // Every key of equal weight: the walk's own acc overflows, and the splits take its exponent.
  {
    const Problem p = problem(0.f);
    Walk w = walk_row(p, 0, 0, 2);
    check_walk(p, w);
    ASSERT_GT(w.values_exponent, 0);
    walk_splits(p, 2, w);
    EXPECT_EQ(w.split_values_exponent, w.values_exponent);
    ASSERT_EQ(w.split_output.size(), 1u);
    EXPECT_NEAR(w.split_output[0], 3e38, 1e-6 * 3e38);
    EXPECT_LT(w.split_max_abs_diff, 1e-6 * 3e38);
    EXPECT_TRUE(std::isfinite(w.merges.back().acc[0]));  // the scaled sums, as the kernel held them
    // The splits took the walk's own scaling, which the walk's text says once: no second line.
    const std::string text = render_walk(w, Lang::En, Format::Text);
    EXPECT_NE(text.find("V scaled: acc overflows fp32"), std::string::npos) << text;
    EXPECT_EQ(text.find("V scaled (splits)"), std::string::npos) << text;
  }
  // Nothing scaled anywhere: no scaling line at all.
  {
    const Problem p = random_problem(16, 16, 4, 4, 5, 1, 1);
    Walk w = walk_row(p, 0, 9, 4);
    check_walk(p, w);
    walk_splits(p, 2, w);
    ASSERT_EQ(w.split_values_exponent, 0);
    for (Lang lang : {Lang::En, Lang::Zh}) {
      const std::string text = render_walk(w, lang, Format::Text);
      EXPECT_EQ(text.find("V scaled"), std::string::npos) << text;
      EXPECT_EQ(text.find("V 缩放"), std::string::npos) << text;
    }
  }
  // Key 0 dominates: the walk's l is about 1, its acc fits; the second split's four equal keys
  // overflow with V as given.
  {
    const Problem p = problem(200.f);
    Walk w = walk_row(p, 0, 0, 2);
    check_walk(p, w);
    ASSERT_EQ(w.values_exponent, 0);
    walk_splits(p, 2, w);
    EXPECT_GT(w.split_values_exponent, 0);
    ASSERT_EQ(w.split_output.size(), 1u);
    EXPECT_NEAR(w.split_output[0], 3e38, 1e-6 * 3e38);
    EXPECT_LT(w.split_max_abs_diff, 1e-6 * 3e38);
    EXPECT_TRUE(std::isfinite(w.split_states.back().acc[0]));
    const std::string text = render_walk(w, Lang::En, Format::Text);
    EXPECT_NE(text.find("V scaled (splits): the splits' acc overflow fp32 with V as given"), std::string::npos) << text;
    EXPECT_EQ(nlohmann::json::parse(render_walk(w, Lang::En, Format::Json))["split_kv"]["values_exponent"].get<int>(),
              w.split_values_exponent);
  }
}

// Seven keys of equal weight whose values are all fp32's largest: the walk's sums run on V · 2^-e
// (its acc would overflow), and its output multiplied back by 2^e rounds a step past fp32's
// largest value: the row is refused, with the words the fused kernel refuses it with (at the
// kernel's key block the walk is the kernel). Six keys round to fp32's largest itself: a row.
TEST(Walk, AnOutputPastFp32IsRefusedAsTheKernelRefusesIt) {
  const auto problem = [](int keys) {
    Problem p = random_problem(1, keys, 1, 1, 5, 1, 1);
    ProblemInputs in;
    in.q = MatrixF::Constant(1, 1, 1.f);
    in.k = MatrixF::Zero(keys, 1);
    in.v = MatrixF::Constant(keys, 1, std::numeric_limits<float>::max());
    p.set_inputs(std::move(in));
    return p;
  };
  const std::string why = "the output overflows fp32 in head 0, query row 0 (its values do not fit fp32)";
  const Problem seven = problem(7);
  EXPECT_EQ(test::message_of<InputError>([&] { cpu_fused(seven); }), why);
  EXPECT_EQ(test::message_of<InputError>([&] { walk_row(seven, 0, 0, cpu::online::kFusedKeyBlock); }), why);
  const Problem six = problem(6);
  const Walk w = walk_row(six, 0, 0, cpu::online::kFusedKeyBlock);
  EXPECT_GT(w.values_exponent, 0);
  EXPECT_EQ(w.output, row(cpu_fused(six).output, 0));
  EXPECT_EQ(w.output[0], static_cast<double>(std::numeric_limits<float>::max()));
}

// The Chinese header names the mask in Chinese ("掩码 因果"), as run's text does; English keeps the
// option's word. verify's header likewise.
TEST(Walk, TheChineseHeaderNamesTheMaskInChinese) {
  Problem p = demo_problem();
  p.mask = MaskKind::Causal;
  const Walk w = walk_row(p, 0, 2, 2);
  EXPECT_TRUE(test::contains(render_walk(w, Lang::Zh, Format::Text), "，掩码 因果"));
  EXPECT_TRUE(test::contains(render_walk(w, Lang::En, Format::Text), ", mask causal"));
  const VerifyReport r = verify_trace(p, cpu_staged(p), reference_fp64(p));
  EXPECT_TRUE(test::contains(render_verify_text(r, Lang::Zh), "，掩码 因果\n"));
  EXPECT_TRUE(test::contains(render_verify_text(r, Lang::En), ", mask causal\n"));
}
