// Device side of the kernels' modifications (kernels/rules.h): the one per-element step and the
// block-mask walk that every kernel with rules takes, so that the fused fp32, 3xTF32 and bf16
// kernels, the decode kernel and the staged chain read a modification the same way.
// Included by .cu files only.
#pragma once

#include "core/types.h"
#include "kernels/rules.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

namespace attnlab::cuda {

// A kernel template's last argument: KernelRules for the instantiation with rules, an empty struct
// without, so that a rule-free kernel keeps its parameters and its code.
struct NoRules {};
template <bool RULES>
using RulesArg = std::conditional_t<RULES, KernelRules, NoRules>;

// The score the softmax takes for (the launch's head h, query i, key j) from the raw product
// s = q.k: -inf outside the problem (padding rows and keys of edge tiles: a bias or a document id
// must not be read there) and, with `test_mask` (a Partial tile, or a kernel without a block
// mask), where MaskRule hides the key; else ScoreRule's modified scaled score (+ ALiBi + bias,
// soft-capped). The caller turns it into a logit with 1/T (and log2 e).
__device__ __forceinline__ float rule_score(const KernelRules& r, float s, int h, int i, int j, int n,
                                            int m, bool test_mask) {
  if (i >= n || j >= m) return -INFINITY;
  if (test_mask && !r.mask.visible(i, j)) return -INFINITY;
  return r.score.apply(s * r.scale, r.head0 + h, i, j);
}

// The key tiles query tile qb walks under the block mask: [first, last), of which the Empty ones
// are skipped (next_key_tile).
__device__ __forceinline__ void key_tile_range(const DeviceBlockMask& b, int qb, int& first, int& last) {
  first = b.range[2 * qb];
  last = b.range[2 * qb + 1];
}

// The first key tile at or after kb, below `last`, that the block mask does not rule out for query
// tile qb (`last` when none). Every thread of a block reads the same bytes: broadcast loads.
__device__ __forceinline__ int next_key_tile(const DeviceBlockMask& b, int qb, int kb, int last) {
  const std::uint8_t* row = b.kind + static_cast<std::size_t>(qb) * b.k_blocks;
  while (kb < last && row[kb] == static_cast<std::uint8_t>(BlockKind::Empty)) ++kb;
  return kb;
}

// The key tile a block walks after kt: with rules the next one the block mask leaves (next_key_tile),
// without kt + 1.
template <bool RULES>
__device__ __forceinline__ int following_key_tile(const RulesArg<RULES>& rules, int qb, int kt, int last) {
  if constexpr (RULES) {
    return next_key_tile(rules.blocks, qb, kt + 1, last);
  } else {
    return kt + 1;
  }
}

// Whether key tile kb of query tile qb needs the element test (Partial); Full tiles take none.
__device__ __forceinline__ bool partial_tile(const DeviceBlockMask& b, int qb, int kb) {
  return b.kind[static_cast<std::size_t>(qb) * b.k_blocks + kb] == static_cast<std::uint8_t>(BlockKind::Partial);
}

// Host: throws InputError unless `r`'s block mask is the one of (q_tile, k_tile) tiles over n
// queries and m keys that the launcher `what` runs (fused_*_rules_tile names it to the caller).
inline void check_rules_tile(const KernelRules& r, int n, int m, int q_tile, int k_tile, const char* what) {
  const DeviceBlockMask& b = r.blocks;
  if (b.kind == nullptr || b.range == nullptr || b.q_tile != q_tile || b.k_tile != k_tile ||
      b.q_blocks != (n + q_tile - 1) / q_tile || b.k_blocks != (m + k_tile - 1) / k_tile)
    throw InputError(std::string(what) + ": the rules' block mask is for " + std::to_string(b.q_tile) + " x " +
                     std::to_string(b.k_tile) + " tiles (" + std::to_string(b.q_blocks) + " x " +
                     std::to_string(b.k_blocks) + "), the kernel runs " + std::to_string(q_tile) + " x " +
                     std::to_string(k_tile) + " tiles over " + std::to_string(n) + " queries and " +
                     std::to_string(m) + " keys");
}

// One computed tile, counted where the caller asked (KernelRules::visits): thread 0 of the block.
__device__ __forceinline__ void count_visit(const KernelRules& r) {
  if (r.visits != nullptr && threadIdx.x == 0) atomicAdd(r.visits, 1ull);
}

}  // namespace attnlab::cuda
