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
// Plain C++ (no CUDA types): cuda_backend.cu fills it, the launchers' headers name it.
#pragma once

#include "core/modifications.h"

#include <cstdint>

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

}  // namespace attnlab::cuda
