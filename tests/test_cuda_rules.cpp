// The CUDA kernels' modification step and block-mask walk (kernels/rules.h), run on the CPU: a
// fused kernel with rules walks, per head and query tile, the key tiles key_tile_range and
// next_key_tile give it (Empty tiles skipped), scores every element with rule_score (MaskRule only
// in Partial tiles, padding rows and keys of edge tiles -inf), takes the logit y log2(e) / T and
// keeps an online softmax over the tiles. The emulation below does exactly that in fp32 with the
// header's own functions and compares the output with the fp64 reference (verify_trace), so the
// tile ranges, the walk, the edge padding, the head index and the units of the running max are
// checked on a machine without a device; the GPU tests (tests/gpu/test_cuda_mods.cpp) check the
// kernels themselves. Every modification alone and combined, decode shapes, the kernels' tiles;
// and the decode kernel's narrowing of its splits (union_interval).
#include "core/modify.h"
#include "core/verify.h"
#include "cpu/cpu_backend.h"
#include "kernels/rules.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace attnlab {
namespace {

// The output of p as a fused kernel with rules over (qt, kt) tiles computes it (fp32, the
// kernels' order within a row: tile by tile), and in `visited` the tiles its blocks compute.
// head_step: score every element with head_rule_score (the bf16 kernel's step) instead.
MatrixF emulate_fused(const Problem& p, int qt, int kt, long long& visited, bool head_step = false) {
  const int n = p.n(), m = p.m(), d_k = p.d_k(), d_v = p.d_v();
  const std::shared_ptr<const RotatedQK> rot = rotated_qk(p);
  const MatrixF& q = kernel_q(p, rot.get());
  const MatrixF& k = kernel_k(p, rot.get());
  const BlockMask b = block_mask(p, qt, kt);
  const std::vector<int> range = cuda::key_tile_ranges(b);
  std::vector<float> slopes;
  cuda::KernelRules r;
  r.mask = mask_rule(p);
  r.score = score_rule<float>(p, slopes);
  r.scale = static_cast<float>(p.scale_value());
  r.blocks = {qt, kt, b.q_blocks, b.k_blocks, reinterpret_cast<const std::uint8_t*>(b.kind.data()), range.data()};
  // What the launchers pass with rules: scale 1 / T, times log2(e) in fp32.
  const float c = static_cast<float>(1.0 / p.temperature) * 1.4426950408889634f;
  MatrixF out = MatrixF::Zero(static_cast<Eigen::Index>(p.heads) * n, d_v);
  visited = 0;
  for (int h = 0; h < p.heads; ++h)
    for (int qb = 0; qb < b.q_blocks; ++qb) {
      const cuda::HeadScoreRule hs = cuda::head_score_rule(r, h);
      // One block: qt rows (those past n are padding), their running max, sum and accumulator.
      std::vector<float> mx(qt, -INFINITY), l(qt, 0.f);
      std::vector<std::vector<float>> acc(qt, std::vector<float>(d_v, 0.f));
      int first, last;
      cuda::key_tile_range(r.blocks, qb, first, last);
      for (int t = cuda::next_key_tile(r.blocks, qb, first, last); t < last;
           t = cuda::next_key_tile(r.blocks, qb, t + 1, last)) {
        ++visited;
        const bool partial = cuda::partial_tile(r.blocks, qb, t);
        for (int a = 0; a < qt; ++a) {
          const int i = qb * qt + a;
          std::vector<float> x(kt);
          float tile_max = -INFINITY;
          for (int e = 0; e < kt; ++e) {
            const int j = t * kt + e;
            float s = 0.f;  // padding rows and keys hold zeros, as the kernels' tiles do
            if (i < n && j < m)
              for (int dd = 0; dd < d_k; ++dd)
                s = std::fma(q(static_cast<Eigen::Index>(h) * n + i, dd), k(p.kv_row(h) + j, dd), s);
            x[e] = (head_step ? cuda::head_rule_score(r, hs, s, i, j, n, m, partial)
                              : cuda::rule_score(r, s, h, i, j, n, m, partial)) *
                   c;
            tile_max = std::max(tile_max, x[e]);
          }
          const float new_max = std::max(mx[a], tile_max);
          const float shift = new_max == -INFINITY ? 0.f : new_max;
          const float corr = std::exp2(mx[a] - shift);
          mx[a] = new_max;
          float part = 0.f;
          for (float& v : acc[a]) v *= corr;
          for (int e = 0; e < kt; ++e) {
            const float w = std::exp2(x[e] - shift);
            part += w;
            const int j = t * kt + e;
            if (j < m && w != 0.f)
              for (int dd = 0; dd < d_v; ++dd) acc[a][dd] = std::fma(w, p.v()(p.kv_row(h) + j, dd), acc[a][dd]);
          }
          l[a] = l[a] * corr + part;
        }
      }
      for (int a = 0; a < qt; ++a) {
        const int i = qb * qt + a;
        if (i >= n) continue;
        for (int dd = 0; dd < d_v; ++dd) out(static_cast<Eigen::Index>(h) * n + i, dd) = acc[a][dd] / l[a];
      }
    }
  return out;
}

MatrixF random_matrix(Eigen::Index rows, Eigen::Index cols, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  MatrixF x(rows, cols);
  for (Eigen::Index i = 0; i < x.size(); ++i) x.data()[i] = u(gen);
  return x;
}

std::vector<int> documents(int m, const std::vector<int>& lengths) {
  std::vector<int> ids;
  for (std::size_t doc = 0; doc < lengths.size(); ++doc)
    for (int i = 0; i < lengths[doc]; ++i) ids.push_back(static_cast<int>(doc));
  ids.resize(m, static_cast<int>(lengths.size()) - 1);
  return ids;
}

struct Case {
  const char* name;
  int n, m, heads, kv_heads, d;
  std::function<void(Problem&)> apply;
};

std::vector<Case> cases() {
  return {
      {"alibi", 150, 150, 3, 3, 16, [](Problem& p) { p.mods.alibi = true; }},
      {"alibi_given_bias_per_head", 150, 150, 3, 3, 16,
       [](Problem& p) {
         p.mods.alibi = true;
         p.mods.alibi_slopes = {0.5, 0.1, 0.02};
         p.edit().bias = random_matrix(static_cast<Eigen::Index>(p.heads) * p.n(), p.m(), 3);
       }},
      {"bias_shared_softcap", 150, 150, 2, 2, 16,
       [](Problem& p) {
         p.edit().bias = random_matrix(p.n(), p.m(), 4);
         p.mods.softcap = 1.5;
       }},
      {"window_causal", 200, 200, 2, 2, 16,
       [](Problem& p) {
         p.mask = MaskKind::Causal;
         p.mods.window = 37;
       }},
      {"window_both_sides", 200, 200, 1, 1, 16, [](Problem& p) { p.mods.window = 45; }},
      {"documents", 200, 200, 2, 2, 16, [](Problem& p) { p.edit().documents = documents(p.m(), {64, 5, 131}); }},
      {"prefix", 200, 200, 2, 2, 16, [](Problem& p) { p.mods.prefix = 45; }},
      {"custom_window", 150, 150, 2, 2, 16,
       [](Problem& p) {
         p.mask = MaskKind::Custom;
         MatrixF mk = MatrixF::Zero(p.n(), p.m());
         for (int i = 0; i < p.n(); ++i)
           for (int j = 0; j < p.m(); ++j)
             if ((i * 5 + j * 11) % 3 == 0 && j != i) mk(i, j) = -INFINITY;
         p.edit().custom_mask = mk;
         p.mods.window = 60;
       }},
      {"all_grouped", 170, 170, 4, 2, 16,
       [](Problem& p) {
         p.mods.rope_theta = 10000;
         p.mods.alibi = true;
         p.edit().bias = random_matrix(static_cast<Eigen::Index>(p.heads) * p.n(), p.m(), 5);
         p.mods.softcap = 3;
         p.edit().documents = documents(p.m(), {80, 90});
         p.mods.prefix = 20;
         p.mods.window = 70;
       }},
      {"decode_causal_window_alibi", 7, 300, 4, 2, 16,
       [](Problem& p) {
         p.mask = MaskKind::Causal;
         p.mods.window = 40;
         p.mods.alibi = true;
       }},
  };
}

// Every case on the tiles the kernels with rules run (fp32 CUDA cores 64 x 64 and 32 x 64, 3xTF32
// 64 / 128 x 64 / 32, bf16 128 x 64): fp32-accurate against fp64, exactly the non-empty tiles.
TEST(CudaRulesWalk, TheFusedWalkMatchesTheReferenceOnEveryTile) {
  std::uint64_t seed = 1;
  for (const Case& c : cases()) {
    Problem p = random_problem(c.n, c.m, c.d, c.d, seed++, c.heads, c.kv_heads);
    p.temperature = 0.7;
    c.apply(p);
    validate(p);
    const TraceD ref = reference_fp64(p);
    for (const auto& [qt, kt] : {std::pair{64, 64}, {32, 64}, {128, 64}, {64, 32}, {128, 32}}) {
      SCOPED_TRACE(std::string(c.name) + " tiles " + std::to_string(qt) + "x" + std::to_string(kt));
      long long visited = 0;
      Trace t;
      t.backend = "emulated";
      t.variant = Variant::Fused;
      t.has_stages = false;
      t.output = emulate_fused(p, qt, kt, visited);
      const VerifyReport r = verify_trace(p, t, ref);
      EXPECT_TRUE(r.pass) << render_verify_text(r);
      EXPECT_EQ(visited, static_cast<long long>(block_mask(p, qt, kt).visited()) * p.heads);
    }
  }
}

// The bf16 kernel's per-head step (head_rule_score, its values taken once per block, the cap by
// tanh_by_exp): the same -inf cells as rule_score and the same scores within what its tanh and its
// multiply by 1 / C allow, for every head of a launch that does not start at head 0, on the
// kernel's own tiles' walk too.
TEST(CudaRulesWalk, TheBf16KernelsHeadStepMatchesRuleScore) {
  for (float x = -12.f; x <= 12.f; x += 0.001953125f)
    ASSERT_NEAR(cuda::tanh_by_exp(x), std::tanh(static_cast<double>(x)), 3e-7) << x;
  EXPECT_EQ(cuda::tanh_by_exp(0.f), 0.f);
  EXPECT_EQ(cuda::tanh_by_exp(1e4f), 1.f);
  EXPECT_EQ(cuda::tanh_by_exp(-1e4f), -1.f);

  std::uint64_t seed = 40;
  for (const Case& c : cases()) {
    Problem p = random_problem(c.n, c.m, c.d, c.d, seed++, c.heads, c.kv_heads);
    c.apply(p);
    if (p.mods.softcap == 0) p.mods.softcap = 2.5;  // every case with the cap too
    validate(p);
    std::vector<float> slopes;
    cuda::KernelRules r;
    r.mask = mask_rule(p);
    r.score = score_rule<float>(p, slopes);
    r.scale = static_cast<float>(p.scale_value());
    const int n = p.n(), m = p.m();
    const float cap = r.score.softcap;
    for (int head0 : {0, 1}) {
      r.head0 = head0;
      for (int h = 0; h + head0 < p.heads; ++h) {
        const cuda::HeadScoreRule hs = cuda::head_score_rule(r, h);
        for (int i = 0; i < n + 2; i += 3)
          for (int j = 0; j < m + 2; ++j)
            for (float s : {-40.f, -2.f, -0.01f, 0.f, 1e-4f, 0.8f, 7.f, 90.f})
              for (bool partial : {false, true}) {
                const float want = cuda::rule_score(r, s, h, i, j, n, m, partial);
                const float got = cuda::head_rule_score(r, hs, s, i, j, n, m, partial);
                if (std::isinf(want)) {
                  ASSERT_EQ(got, want) << c.name << " h " << h << " i " << i << " j " << j;
                } else {
                  ASSERT_NEAR(got, want, 1e-6 * (1 + std::abs(want)) + 4e-7 * cap)
                      << c.name << " head0 " << head0 << " h " << h << " i " << i << " j " << j << " s " << s;
                }
              }
      }
    }
    SCOPED_TRACE(std::string(c.name) + " on the bf16 kernel's tiles, 128 x 64");
    long long visited = 0;
    Trace t;
    t.backend = "emulated";
    t.variant = Variant::Fused;
    t.has_stages = false;
    t.output = emulate_fused(p, 128, 64, visited, /*head_step=*/true);
    const VerifyReport v = verify_trace(p, t, reference_fp64(p));
    EXPECT_TRUE(v.pass) << render_verify_text(v);
  }
}

// The ranges: each query tile's first and last non-empty key tile, nothing outside them; an
// all-Empty query tile walks nothing.
TEST(CudaRulesWalk, KeyTileRangesBoundTheNonEmptyTiles) {
  BlockMask b;
  b.q_tile = b.k_tile = 4;
  b.q_blocks = 3;
  b.k_blocks = 5;
  using K = BlockKind;
  b.kind = {K::Empty, K::Full,  K::Empty, K::Partial, K::Empty,   // tiles 1..3
            K::Empty, K::Empty, K::Empty, K::Empty,   K::Empty,   // none
            K::Full,  K::Empty, K::Empty, K::Empty,   K::Partial};  // 0..4
  const std::vector<int> r = cuda::key_tile_ranges(b);
  EXPECT_EQ(r, (std::vector<int>{1, 4, 0, 0, 0, 5}));
  cuda::DeviceBlockMask d{4, 4, 3, 5, reinterpret_cast<const std::uint8_t*>(b.kind.data()), r.data()};
  std::vector<int> walked;
  for (int t = cuda::next_key_tile(d, 0, r[0], r[1]); t < r[1]; t = cuda::next_key_tile(d, 0, t + 1, r[1]))
    walked.push_back(t);
  EXPECT_EQ(walked, (std::vector<int>{1, 3}));
  EXPECT_FALSE(cuda::partial_tile(d, 0, 1));
  EXPECT_TRUE(cuda::partial_tile(d, 0, 3));
  EXPECT_EQ(cuda::next_key_tile(d, 2, 1, 5), 4);
}

// The decode kernel's narrowing of a split: the union of the queries' intervals holds every key
// a query may see, and for the plain rules (no documents, no custom mask) no other.
TEST(CudaRulesWalk, TheUnionIntervalHoldsEveryVisibleKey) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    Problem p = random_problem(c.n, c.m, c.d, c.d, 9, c.heads, c.kv_heads);
    c.apply(p);
    const MaskRule rule = mask_rule(p);
    int lo, hi;
    cuda::union_interval(rule, p.n(), lo, hi);
    int seen_lo = p.m(), seen_hi = 0;
    for (int i = 0; i < p.n(); ++i)
      for (int j = 0; j < p.m(); ++j)
        if (rule.visible(i, j)) {
          seen_lo = std::min(seen_lo, j);
          seen_hi = std::max(seen_hi, j + 1);
        }
    EXPECT_LE(lo, seen_lo);
    EXPECT_GE(hi, seen_hi);
    if (!rule.elementwise()) {
      EXPECT_EQ(lo, seen_lo);
      EXPECT_EQ(hi, seen_hi);
    }
  }
}

}  // namespace
}  // namespace attnlab
