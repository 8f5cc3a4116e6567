// Device side of the kernels' modifications (kernels/rules.h, which holds the per-element step and
// the block-mask walk, host-callable so that a CPU test walks them): the kernels' rules argument,
// the next tile of a walk, the launchers' check of a block mask's tiles, the tile counter.
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
