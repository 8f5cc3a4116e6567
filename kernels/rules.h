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
// one element (rule_score; in the bf16 fused kernel head_rule_fragment, the same step over a
// lane's accumulator fragment with the head's values taken once) and the walk of a query tile's
// key tiles under the block mask; so that tests/test_cuda_rules.cpp walks them on the CPU exactly
// as the kernels do (the bf16 kernel's tanh aside: FastTanh).
// Plain C++ (no CUDA types): cuda_backend.cu fills it, the launchers' headers name it.
#pragma once

#include "core/modifications.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

// Inlined into the kernels, their loops over a fragment unrolled; plain inline functions on the host.
#if defined(__CUDACC__)
#define ATTNLAB_RULES_FN __host__ __device__ __forceinline__
#define ATTNLAB_RULES_UNROLL _Pragma("unroll")
#else
#define ATTNLAB_RULES_FN inline
#define ATTNLAB_RULES_UNROLL
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
// soft-capped). The caller turns it into a logit with 1/T (and log2 e). rule_score_at takes
// ALiBi's distance i + offset - j in float (ScoreRule::added_at), which a kernel counts from one
// conversion per row instead of converting it per score.
ATTNLAB_RULES_FN float rule_score_at(const KernelRules& r, float s, int h, int i, int j, float dist, int n,
                                     int m, bool test_mask) {
  if (i >= n || j >= m) return -INFINITY;
  if (test_mask && !r.mask.visible(i, j)) return -INFINITY;
  return r.score.apply_at(s * r.scale, r.head0 + h, i, j, dist);
}
ATTNLAB_RULES_FN float rule_score(const KernelRules& r, float s, int h, int i, int j, int n, int m,
                                  bool test_mask) {
  return rule_score_at(r, s, h, i, j, static_cast<float>(i + r.score.offset - j), n, m, test_mask);
}

// The soft-cap's tanh in the bf16 fused kernel: the multi-function unit's tanh.approx.f32 (sm_75
// on), one instruction where tanhf is a dozen and exp2 with a divide two of the unit's. The PTX ISA
// bounds its relative error by 2^-10.987; so a capped score y = C tanh(s / C) is off by at most
// |y| 2^-10.987, below an eighth of bf16's own allowance at the largest logit (verify's L16 =
// 2^-8 max|logit|: a weight takes at most half of a logit's error, an output row the logit's
// error times max|V|). On the host, where the tests run the step, std::tanh.
struct FastTanh {
  ATTNLAB_RULES_FN float operator()(float x) const {
#if defined(__CUDA_ARCH__)
    float y;
    asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#else
    return std::tanh(x);
#endif
  }
};

// What depends on the launch head alone (its ALiBi slope, its bias rows, the cap and its
// reciprocal), taken once before a kernel's key loop: head_rule_fragment's argument.
// (The scale, the cap and the offset stay the rules' own: kernel parameters, read from the
// constant bank where copies would hold registers.)
struct HeadScoreRule {
  float slope = 0, inv_cap = 0;
  const float* bias = nullptr;  // the head's (n, m) rows, or null
};
ATTNLAB_RULES_FN HeadScoreRule head_score_rule(const KernelRules& r, int h) {
  HeadScoreRule hs;
  const ScoreRule& sr = r.score;
  const int head = r.head0 + h;
  hs.slope = sr.slopes != nullptr ? sr.slopes[head] : 0.f;
  hs.inv_cap = sr.softcap > 0 ? 1.f / sr.softcap : 0.f;
  if (sr.bias != nullptr)
    hs.bias = sr.bias + static_cast<std::size_t>(sr.bias_per_head ? head : 0) * sr.n * sr.m;
  return hs;
}

// rule_score on one lane's share of an m16n8 accumulator tile (mma.sync's layout), the bf16
// fused kernel's step: x[j][e] holds the raw product q.k of query row0 + 8 (e / 2) and key
// key0 + 8 j + e % 2 (row0 the lane's fragment row, key0 the tile's first key plus twice the
// lane's column pair); each becomes rule_score's y, or -inf where rule_score gives -inf. Per
// element rule_score converts the distance, tests the range and reads the head's values; here
// each modification is one pass over the fragment under one test of the head, ALiBi's distance
// |i + offset - j| is the row's one conversion plus a constant (integers, exact in fp32 below
// 2^24), MaskRule's interval is taken once per row, and the range and mask pass runs only on a
// Partial tile (`test_mask`) or one that reaches past n or m. The arithmetic:
// y = fma(s, scale, -slope |d|) + bias, then C tanh_of(y / C) with 1 / C taken once (rule_score
// adds ALiBi's term and the bias before the fma: the same within fp32's rounding); tanh_of is the
// kernel's FastTanh, or a test's own to bound its error. The fp32 kernels keep rule_score per
// score (rule_score_at): with the exact tanhf this step's passes hold more registers than the
// per-score sequence, and the 3xTF32 kernel at d 64 spilled.
template <int NJ, class Tanh>
ATTNLAB_RULES_FN void head_rule_fragment(const KernelRules& r, const HeadScoreRule& hs, float (&x)[NJ][4],
                                         int row0, int key0, int n, int m, bool test_mask, Tanh tanh_of) {
  if (hs.slope != 0.f) {  // ALiBi: x = fma(x, scale, -slope |i + offset - j|)
    const float d0 = static_cast<float>(row0 + r.score.offset - key0);  // element (0, 0)'s distance
    ATTNLAB_RULES_UNROLL
    for (int j = 0; j < NJ; ++j) {
      ATTNLAB_RULES_UNROLL
      for (int e = 0; e < 4; ++e) {
        const float dist = d0 + static_cast<float>(8 * (e >> 1) - 8 * j - (e & 1));
        x[j][e] = fmaf(x[j][e], r.scale, -(hs.slope * fabsf(dist)));
      }
    }
  } else {
    ATTNLAB_RULES_UNROLL
    for (int j = 0; j < NJ; ++j) {
      ATTNLAB_RULES_UNROLL
      for (int e = 0; e < 4; ++e) x[j][e] *= r.scale;
    }
  }
  if (hs.bias != nullptr) {
    ATTNLAB_RULES_UNROLL
    for (int h = 0; h < 2; ++h) {
      const int i = row0 + 8 * h;
      if (i >= n) continue;
      const float* b = hs.bias + static_cast<std::size_t>(i) * r.score.m;
      ATTNLAB_RULES_UNROLL
      for (int j = 0; j < NJ; ++j) {
        ATTNLAB_RULES_UNROLL
        for (int e = 2 * h; e < 2 * h + 2; ++e) {
          const int k = key0 + 8 * j + (e & 1);
          if (k < m) x[j][e] += b[k];
        }
      }
    }
  }
  if (r.score.softcap > 0.f) {
    ATTNLAB_RULES_UNROLL
    for (int j = 0; j < NJ; ++j) {
      ATTNLAB_RULES_UNROLL
      for (int e = 0; e < 4; ++e) x[j][e] = r.score.softcap * tanh_of(x[j][e] * hs.inv_cap);
    }
  }
  if (test_mask || row0 + 8 >= n || key0 + 8 * NJ - 7 >= m) {
    ATTNLAB_RULES_UNROLL
    for (int h = 0; h < 2; ++h) {
      const int i = row0 + 8 * h;
      int lo = 0, hi = i < n ? m : 0;  // a padding row sees nothing
      if (test_mask && i < n) {
        r.mask.interval(i, lo, hi);
        hi = hi < m ? hi : m;
      }
      const bool each = test_mask && i < n && r.mask.elementwise();
      ATTNLAB_RULES_UNROLL
      for (int j = 0; j < NJ; ++j) {
        ATTNLAB_RULES_UNROLL
        for (int e = 2 * h; e < 2 * h + 2; ++e) {
          const int k = key0 + 8 * j + (e & 1);
          if (k < lo || k >= hi || (each && r.mask.blocked(i, k))) x[j][e] = -INFINITY;
        }
      }
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
