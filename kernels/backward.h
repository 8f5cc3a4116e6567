// Launchers of the fused backward pass on CUDA (kernels/backward.cu): FlashAttention-2's backward
// (Dao 2023, Algorithm 2) with the problem's rules, never an (n, m) matrix. Plain C++ header: no
// CUDA types, so cuda_backend.cu and host-only code can both include it. The formulas are those
// of core/backward.h; cuda_backend.h's fused_backward is the Problem-level face.
//
// All pointers are DEVICE pointers, row-major, query heads stacked along rows and key/value heads
// along rows of K and V (grouped-query attention: query head h reads key/value head
// h / (heads / kv_heads)):
//   q (heads n, d_k)  k (kv_heads m, d_k)  v (kv_heads m, d_v)  dout, o (heads n, d_v)
//   lse2, dd (heads n)  dq (heads n, d_k)  dk (kv_heads m, d_k)  dv (kv_heads m, d_v)
// q, k, v and dout are fp32, or bf16 bit patterns (uint16) with `bf16` set; everything else fp32.
//
// Two launches, in this order on one stream:
//   launch_backward_stats  per query row, D = rowsum(dO ∘ O) and the row's log-sum-exp of the
//                          logits in log2 units, lse2 = log2 Σ_j 2^(y_ij c) with y the modified
//                          scaled score and c = log2(e) / T: a pass over the keys with the
//                          backward's own score tile
//   launch_backward        per key tile of one key/value head, every query tile of every query
//                          head of its group: P = 2^(y c − lse2), dV += Pᵀ dO, dP = dO Vᵀ,
//                          dS = P ∘ (dP − D), dK += dSᵀ Q · g, dQ += dS K · g (added atomically
//                          into dq, which the caller zeroes), with g = (soft-cap's 1 − tanh²) s / T;
//                          *dt accumulates Σ dS ∘ (y c − lse2) in double, so dT = −(*dt) ln 2 / T
//                          (= −Σ dS ∘ y / T², every row of dS summing to 0, without its
//                          cancellation at small T)
// The rules (kernels/rules.h) hold the mask and the score mods as the fused forward reads them,
// with a block mask of backward_tile()'s tiles: Empty tiles are skipped, Partial ones test
// MaskRule per element. Masked pairs have P = 0 exactly and add nothing to any gradient.
// Launch errors throw DeviceError; a block mask of other tiles, or a bf16 head dim the kernels
// do not take, throws InputError.
#pragma once

#include "kernels/fused.h"
#include "kernels/rules.h"

#include <cstdint>
#include <string>

namespace attnlab::cuda {

struct BackwardArgs {
  const void *q = nullptr, *k = nullptr, *v = nullptr, *dout = nullptr;  // fp32, or bf16 bits
  const float* o = nullptr;
  float *lse2 = nullptr, *dd = nullptr;  // written by launch_backward_stats, read by launch_backward
  float *dq = nullptr, *dk = nullptr, *dv = nullptr;
  double* dt = nullptr;  // one double, zeroed by the caller: Σ dS ∘ (y c − lse2) over every visible entry
  int heads = 1, kv_heads = 1, n = 0, m = 0, d_k = 0, d_v = 0;
  bool bf16 = false;
  bool tensor_cores = false;  // the tensor-core kernel (bf16 only): backward_config(bf16) >= 1, read once by the caller
  bool two_blocks = false;    // and bounded to two blocks per SM: backward_config(bf16) == 2 (taken at D = 64 only)
  float logit_log2 = 1;  // log2(e) / T: from the modified scaled score y to the logit in log2 units
  float grad_scale = 1;  // s / T: from dlogits to dscores (the soft-cap's factor is the kernel's)
  KernelRules rules;     // scale = s, head0 = 0, blocks: backward_tile()'s block mask
};

// The kernels (ATTNLAB_BACKWARD_CONFIG, read once per backward by cuda::fused_backward; unset or
// empty = the default of kBackwardDefault; any other value than 0, 1 or 2 throws InputError):
//   0  CUDA cores (kernels/backward.cu): fp32 arithmetic on fp32 or bf16 inputs, every head dim
//   1  bf16 tensor cores (kernels/backward_mma.cu): mma.sync for all five products, P and dS g
//      rounded to bf16 as the products read them; bf16 only (fp32 runs configuration 0)
//   2  the same kernel compiled for two blocks per SM (at most 128 registers a thread, where 1
//      takes what it needs and leaves room for one): at d = 64; at d = 128 two blocks' shared
//      memory exceeds an SM's, and it runs 1
inline constexpr int kBackwardConfigs = 3;
// The configuration each precision runs by default: bf16 the tensor-core kernel since the H200
// round of 2026-12-04 (every bf16 backward GPU test and both sanitizers passed under it, and it
// was the faster on every timed shape; docs/PERFORMANCE.md); scripts/gpu-check times both at
// every round.
inline constexpr int kBackwardDefault[2] = {0, 1};  // fp32, bf16
// The configuration of this precision ATTNLAB_BACKWARD_CONFIG asks for (configurations 1 and 2
// only for bf16): read once per backward, by its caller, into BackwardArgs::tensor_cores and
// two_blocks.
int backward_config(bool bf16);

// The tensor-core kernel's tile (queries x keys), at both of its head dims.
inline constexpr FusedTile kMmaBackwardTile{64, 64};

// The tile (queries x keys) of the backward kernels for these head dims, which the rules' block
// mask must use: the tensor-core kernel's (kMmaBackwardTile) with tensor_cores, else the CUDA-core
// kernel's by the bucket of max(d_k, d_v): 64 x 64 up to 64, 64 x 32 up to 128, 32 x 32 up to 256.
FusedTile backward_tile(int d_k, int d_v, bool tensor_cores);

// Whether the kernels take these head dims: max(d_k, d_v) <= 256 in fp32; d_k == d_v in {64, 128}
// in bf16 (the fused bf16 forward's shapes).
bool backward_takes(int d_k, int d_v, bool bf16);

void launch_backward_stats(const BackwardArgs& a, void* stream);
void launch_backward(const BackwardArgs& a, void* stream);

// The kernel the last backward launch on this host thread ran: "backward fp32 D=64 BQ=64 BK=64",
// "backward bf16 mma D=64 BQ=64 BK=64", "backward bf16 mma D=64 BQ=64 BK=64 2 blocks/SM".
std::string last_backward_kernel();

// Whether the tensor-core kernel runs two blocks per SM for these arguments (two_blocks at D = 64).
inline bool backward_mma_two_blocks(const BackwardArgs& a) { return a.two_blocks && a.d_k == 64; }

// kernels/backward_mma.cu: the tensor-core kernel, launched by launch_backward (d_k == d_v in
// {64, 128}, bf16, the block mask on kMmaBackwardTile).
void launch_backward_mma(const BackwardArgs& a, void* stream);

}  // namespace attnlab::cuda
