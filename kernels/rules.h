// The modifications of a Problem (core/modifications.h) as the CUDA kernels take them: the same
// MaskRule and ScoreRule the CPU and the fp64 reference use, their pointers swapped for device
// copies, plus what the kernels need beside them (the softmax scale, the launch's first head, the
// block mask of a fused kernel's tile grid). One struct passed by value to every kernel that runs
// "with rules", so each modification has one definition everywhere.
//
// When a kernel runs with rules: the staged chain whenever the problem has a score or mask mod (or
// a causal mask over fewer queries than keys); the fused kernels then too, and the bf16 fused
// kernel also for a custom mask; the decode kernel for any mask but none and causal and for any
// score mod; the streaming kernels always read the mask through MaskRule (it says what MaskCode
// said for the plain masks). Without rules every kernel runs its rule-free code, unchanged.
// Also here, host- and device-callable, what every kernel with rules does with them: the score of
// one element (rule_score; in the bf16 fused kernel head_rule_score, the same step with the
// head's values taken once and a cheaper tanh) and the walk of a query tile's key tiles under the
// block mask; so that tests/test_cuda_rules.cpp walks them on the CPU exactly as the kernels do.
// Plain C++ (no CUDA types): cuda_backend.cu fills it, the launchers' headers name it.
#pragma once

#include "core/modifications.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

// Inlined into the kernels; plain inline functions on the host.
#if defined(__CUDACC__)
#define ATTNLAB_RULES_FN __host__ __device__ __forceinline__
#else
#define ATTNLAB_RULES_FN inline
#endif

namespace attnlab::cuda {

// A fused kernel's block mask (core BlockMask) on the device, for the kernel's own tiles: one
// byte per (query tile, key tile), as BlockKind; and, per query tile, the first and one past the
// last key tile that is not Empty, so a kernel walks only that range (a window of W costs
// O(N W), not O(N²) even in the scan of the kinds) and skips the Empty tiles inside it (documents).
struct DeviceBlockMask {
  int q_tile = 0, k_tile = 0, q_blocks = 0, k_blocks = 0;
  const std::uint8_t* kind = nullptr;  // (q_blocks, k_blocks)
  const int* range = nullptr;          // (q_blocks, 2): [first, last) non-empty key tiles
};

struct KernelRules {
  MaskRule mask;    // documents (m ids) and custom ((n, m) of 0 / -inf): device pointers
  ScoreRule score;  // slopes (one per query head) and bias ((n, m) or (heads n, m)): device pointers
  // The softmax scale (1 / sqrt(d_k) or the problem's own): the score mods act on q.k * scale.
  // The staged chain's scale_mask reads the scaled stage instead and ignores it.
  float scale = 1;
  // The launch's first query head in the problem: ScoreRule's head index is head0 + the kernel's
  // own (a streamed run launches a few heads at a time).
  int head0 = 0;
  DeviceBlockMask blocks;  // fused kernels only
  // Fused kernels: when set, every block adds 1 for each key tile it computes (what the tests and
  // last_fused_tiles() compare with the block mask's non-empty tiles).
  unsigned long long* visits = nullptr;
};

// Host: DeviceBlockMask::range of a block mask, (q_blocks, 2): each query tile's first and one
// past its last non-empty key tile ([0, 0) when every tile is Empty).
inline std::vector<int> key_tile_ranges(const BlockMask& b) {
  std::vector<int> range(2 * static_cast<std::size_t>(b.q_blocks), 0);
  for (int qb = 0; qb < b.q_blocks; ++qb) {
    int first = b.k_blocks, last = 0;
    for (int kb = 0; kb < b.k_blocks; ++kb)
      if (b.at(qb, kb) != BlockKind::Empty) {
        first = std::min(first, kb);
        last = kb + 1;
      }
    range[2 * qb] = std::min(first, last);
    range[2 * qb + 1] = last;
  }
  return range;
}

// The score the softmax takes for (the launch's head h, query i, key j) from the raw product
// s = q.k: -inf outside the problem (padding rows and keys of edge tiles: a bias or a document id
// must not be read there) and, with `test_mask` (a Partial tile, or a kernel without a block
// mask), where MaskRule hides the key; else ScoreRule's modified scaled score (+ ALiBi + bias,
// soft-capped). The caller turns it into a logit with 1/T (and log2 e).
ATTNLAB_RULES_FN float rule_score(const KernelRules& r, float s, int h, int i, int j, int n, int m,
                                  bool test_mask) {
  if (i >= n || j >= m) return -INFINITY;
  if (test_mask && !r.mask.visible(i, j)) return -INFINITY;
  return r.score.apply(s * r.scale, r.head0 + h, i, j);
}

// tanh(x) as 1 - 2 / (1 + e^{2|x|}) with the sign of x: one exp2 and one divide (on the device a
// fast one), within about 3e-7 of tanh absolutely (|x| clamped at 10, where tanh rounds to 1).
ATTNLAB_RULES_FN float tanh_by_exp(float x) {
  const float e = exp2f(fminf(fabsf(x), 10.f) * 2.8853900817779268f);  // e^{2|x|}: 2 log2(e) |x|
#if defined(__CUDA_ARCH__)
  const float t = 1.f - __fdividef(2.f, 1.f + e);
#else
  const float t = 1.f - 2.f / (1.f + e);
#endif
  return copysignf(t, x);
}

// rule_score for one launch head, with what depends on the head alone (its ALiBi slope, its bias
// rows, the cap's reciprocal) taken once, before a kernel's key loop, and the cap's tanh by
// tanh_by_exp: what the bf16 fused kernel runs per element. Its own rounding (bf16 operands and
// weights, 2^-9) is far coarser than this step's difference from rule_score (the cap's tanh within
// about 3e-7 · C, a multiply by 1 / C for the divide). The same -inf cells as rule_score.
struct HeadScoreRule {
  float scale = 1, slope = 0, cap = 0, inv_cap = 0;
  int offset = 0;
  const float* bias = nullptr;  // the head's (n, m) rows, or null
};
ATTNLAB_RULES_FN HeadScoreRule head_score_rule(const KernelRules& r, int h) {
  HeadScoreRule hs;
  const ScoreRule& sr = r.score;
  const int head = r.head0 + h;
  hs.scale = r.scale;
  hs.slope = sr.slopes != nullptr ? sr.slopes[head] : 0.f;
  hs.cap = sr.softcap;
  hs.inv_cap = sr.softcap > 0 ? 1.f / sr.softcap : 0.f;
  hs.offset = sr.offset;
  if (sr.bias != nullptr)
    hs.bias = sr.bias + static_cast<std::size_t>(sr.bias_per_head ? head : 0) * sr.n * sr.m;
  return hs;
}
ATTNLAB_RULES_FN float head_rule_score(const KernelRules& r, const HeadScoreRule& hs, float s, int i, int j, int n,
                                       int m, bool test_mask) {
  if (i >= n || j >= m) return -INFINITY;
  if (test_mask && !r.mask.visible(i, j)) return -INFINITY;
  float a = 0.f;  // ScoreRule::added's order: minus ALiBi's distance term, plus the bias
  if (hs.slope != 0.f) {
    const int dist = i + hs.offset - j;
    a -= hs.slope * static_cast<float>(dist < 0 ? -dist : dist);
  }
  if (hs.bias != nullptr) a += hs.bias[static_cast<std::size_t>(i) * r.score.m + j];
  const float y = s * hs.scale + a;
  return hs.cap > 0.f ? hs.cap * tanh_by_exp(y * hs.inv_cap) : y;
}

// The keys [lo, hi) some query 0..n-1 may see under `rule`: the union of MaskRule's intervals
// (hi <= lo when none). What a split of the decode kernel narrows its keys to.
ATTNLAB_RULES_FN void union_interval(const MaskRule& rule, int n, int& lo, int& hi) {
  lo = rule.m;
  hi = 0;
  for (int i = 0; i < n; ++i) {
    int a, b;
    rule.interval(i, a, b);
    if (a < b) {
      lo = a < lo ? a : lo;
      hi = b > hi ? b : hi;
    }
  }
}

// The key tiles query tile qb walks under the block mask: [first, last), of which the Empty ones
// are skipped (next_key_tile).
ATTNLAB_RULES_FN void key_tile_range(const DeviceBlockMask& b, int qb, int& first, int& last) {
  first = b.range[2 * qb];
  last = b.range[2 * qb + 1];
}

// The first key tile at or after kb, below `last`, that the block mask does not rule out for query
// tile qb (`last` when none). Every thread of a block reads the same bytes: broadcast loads.
ATTNLAB_RULES_FN int next_key_tile(const DeviceBlockMask& b, int qb, int kb, int last) {
  const std::uint8_t* row = b.kind + static_cast<std::size_t>(qb) * b.k_blocks;
  while (kb < last && row[kb] == static_cast<std::uint8_t>(BlockKind::Empty)) ++kb;
  return kb;
}

// Whether key tile kb of query tile qb needs the element test (Partial); Full tiles take none.
ATTNLAB_RULES_FN bool partial_tile(const DeviceBlockMask& b, int qb, int kb) {
  return b.kind[static_cast<std::size_t>(qb) * b.k_blocks + kb] == static_cast<std::uint8_t>(BlockKind::Partial);
}

}  // namespace attnlab::cuda
