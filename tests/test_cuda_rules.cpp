// The CUDA kernels' modification step and block-mask walk (kernels/rules.h), run on the CPU: a
// fused kernel with rules walks, per head and query tile, the key tiles key_tile_range and
// next_key_tile give it (Empty tiles skipped), scores every element with rule_score (MaskRule only
// in Partial tiles, padding rows and keys of edge tiles -inf), takes the logit y log2(e) / T and
// keeps an online softmax over the tiles. The emulation below does exactly that in fp32 with the
// header's own functions and compares the output with the fp64 reference (verify_trace), so the
// tile ranges, the walk, the edge padding, the head index and the units of the running max are
// checked on a machine without a device; the GPU tests (tests/gpu/test_cuda_mods.cpp) check the
// kernels themselves. Every modification alone and combined, decode shapes, the kernels' tiles;
// and the decode kernels' narrowing of their splits (MaskRule::union_interval).
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
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace attnlab {
namespace {

// The output of p as a fused kernel with rules over (qt, kt) tiles computes it (fp32, the
// kernels' order within a row: tile by tile), and in `visited` the tiles its blocks compute.
// tanh_of given: score the tile with head_rule_fragment (the bf16 kernel's step) instead, over the
// 32 lanes' fragments of each 16-row group of 64-key tiles, the cap's tanh by `tanh_of`.
using TanhFn = float (*)(float);
struct TestTanh {
  TanhFn f;
  float operator()(float x) const { return f(x); }
};
MatrixF emulate_fused(const Problem& p, int qt, int kt, long long& visited, TanhFn tanh_of = nullptr) {
  if (tanh_of != nullptr && (kt != 64 || qt % 16 != 0))
    throw std::logic_error("emulate_fused: the fragment step takes 64-key tiles of 16-row groups");
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
        // The tile's scores y (or -inf), row by row.
        std::vector<float> y(static_cast<std::size_t>(qt) * kt);
        for (int a = 0; a < qt; ++a) {
          const int i = qb * qt + a;
          for (int e = 0; e < kt; ++e) {
            const int j = t * kt + e;
            float s = 0.f;  // padding rows and keys hold zeros, as the kernels' tiles do
            if (i < n && j < m)
              for (int dd = 0; dd < d_k; ++dd)
                s = std::fma(q(static_cast<Eigen::Index>(h) * n + i, dd), k(p.kv_row(h) + j, dd), s);
            y[static_cast<std::size_t>(a) * kt + e] = tanh_of ? s : cuda::rule_score(r, s, h, i, j, n, m, partial);
          }
        }
        if (tanh_of != nullptr)
          for (int w = 0; w < qt / 16; ++w)
            for (int lane = 0; lane < 32; ++lane) {
              const int g = lane >> 2, tig = lane & 3;
              const auto at = [&](int jj, int e) -> float& {
                return y[static_cast<std::size_t>(16 * w + g + 8 * (e >> 1)) * kt + 8 * jj + 2 * tig + (e & 1)];
              };
              float frag[8][4];
              for (int jj = 0; jj < 8; ++jj)
                for (int e = 0; e < 4; ++e) frag[jj][e] = at(jj, e);
              cuda::head_rule_fragment(r, hs, frag, qb * qt + 16 * w + g, t * kt + 2 * tig, n, m, partial,
                                       TestTanh{tanh_of});
              for (int jj = 0; jj < 8; ++jj)
                for (int e = 0; e < 4; ++e) at(jj, e) = frag[jj][e];
            }
        for (int a = 0; a < qt; ++a) {
          std::vector<float> x(kt);
          float tile_max = -INFINITY;
          for (int e = 0; e < kt; ++e) {
            x[e] = y[static_cast<std::size_t>(a) * kt + e] * c;
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

// The bf16 kernel's step (head_rule_fragment: the head's values taken once per block, each score
// mod a pass over a lane's fragment, ALiBi's distance from one conversion per row, the range and
// mask tests on Partial and edge tiles only): element by element rule_score, the same -inf cells
// and the same scores within their order of rounding, for every lane of every 16-row group and
// 64-key tile over the problem and past its edges, every head of a launch that starts at head 0
// or not, Partial and Full tiles.
float exact_tanh(float x) { return std::tanh(x); }
// tanh.approx.f32's error bound (the PTX ISA's 2^-10.987, rounded up), both ways.
constexpr float kTanhApproxErr = 4.95e-4f;
float tanh_high(float x) { return std::tanh(x) * (1.f + kTanhApproxErr); }
float tanh_low(float x) { return std::tanh(x) * (1.f - kTanhApproxErr); }

TEST(CudaRulesWalk, TheBf16KernelsFragmentStepIsRuleScore) {
  std::uint64_t seed = 40;
  const float raw[] = {-40.f, -2.f, -0.01f, 0.f, 1e-4f, 0.8f, 7.f, 90.f};
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
    long long compared = 0, masked = 0;
    // The problem's own n and m, and a smaller n and m (the rules' data still covers them) that
    // put a fragment's last row and last key each on the first one past the edge.
    const int m57 = p.m() - ((p.m() - 57) % 64 + 64) % 64;
    for (const auto [n, m] : {std::pair{p.n(), p.m()}, std::pair{std::max(1, p.n() - 7), std::max(1, m57)}})
    for (int head0 : {0, 1}) {
      r.head0 = head0;
      for (int h = 0; h + head0 < p.heads; ++h) {
        const cuda::HeadScoreRule hs = cuda::head_score_rule(r, h);
        for (int q0 = 0; q0 < n + 16; q0 += 16)
          for (int k0 = 0; k0 < m + 64; k0 += 64)
            for (bool partial : {false, true})
              for (int lane = 0; lane < 32; ++lane) {
                const int row0 = q0 + (lane >> 2), key0 = k0 + 2 * (lane & 3);
                float x[8][4], s[8][4];
                for (int j = 0; j < 8; ++j)
                  for (int e = 0; e < 4; ++e)
                    x[j][e] = s[j][e] = raw[(row0 + 3 * (key0 + j) + 5 * e + h) % 8];
                cuda::head_rule_fragment(r, hs, x, row0, key0, n, m, partial, cuda::FastTanh{});
                for (int j = 0; j < 8; ++j)
                  for (int e = 0; e < 4; ++e) {
                    const int i = row0 + 8 * (e >> 1), k = key0 + 8 * j + (e & 1);
                    const float want = cuda::rule_score(r, s[j][e], h, i, k, n, m, partial);
                    ++compared;
                    if (std::isinf(want)) {
                      ++masked;
                      ASSERT_EQ(x[j][e], want) << c.name << " h " << h << " i " << i << " j " << k << " n " << n
                                               << " m " << m << (partial ? " partial" : "");
                      continue;
                    }
                    const double terms = std::abs(s[j][e] * r.scale) +
                                         (i < n && k < m ? std::abs(r.score.added(h + head0, i, k)) : 0.0);
                    ASSERT_NEAR(x[j][e], want, 1e-6 * (1 + std::abs(want) + terms))
                        << c.name << " head0 " << head0 << " h " << h << " i " << i << " j " << k << " s "
                        << s[j][e] << (partial ? " partial" : "");
                  }
              }
      }
    }
    EXPECT_GT(masked, 0) << c.name;  // the padding past n and m at least
    EXPECT_GT(compared - masked, 0) << c.name;
    // The kernel's walk with the step, at fp32's tolerance with the exact tanh and at bf16's with
    // tanh.approx's worst error either way: the bf16 kernel's own rounding is what bounds it.
    for (TanhFn f : {exact_tanh, tanh_high, tanh_low}) {
      SCOPED_TRACE(std::string(c.name) + " on the bf16 kernel's tiles, 128 x 64" +
                   (f == exact_tanh ? "" : f == tanh_high ? ", tanh high" : ", tanh low"));
      long long visited = 0;
      Trace t;
      t.backend = "emulated";
      t.variant = Variant::Fused;
      t.has_stages = false;
      t.precision = f == exact_tanh ? Precision::FP32 : Precision::BF16;
      t.output = emulate_fused(p, 128, 64, visited, f);
      const VerifyReport v = verify_trace(p, t, reference_fp64(p));
      EXPECT_TRUE(v.pass) << render_verify_text(v);
    }
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
    rule.union_interval(p.n(), lo, hi);
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
