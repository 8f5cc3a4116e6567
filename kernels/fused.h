// Launchers for the fused (online-softmax) CUDA kernels. Plain C++ header: no CUDA types, so
// cuda_backend.cu and host-only tools can both include it. All pointers are DEVICE pointers,
// row-major, heads stacked along rows:
//   q (heads*n, d_k)  k (heads*m, d_k)  v (heads*m, d_v)  o (heads*n, d_v)
//   custom_mask: nullptr, or (n, m) additive 0/-inf shared by all heads, every row with a key
//                left open (validate refuses a fully masked row; the kernels would write it NaN)
// `scale` = 1 / (sqrt(d_k) * T): the logits are (q.k) * scale (+ mask / T, which is 0 or -inf).
// `stream` is a cudaStream_t passed as void*. Launch errors throw DeviceError.
//
// With `rules` (kernels/rules.h; device pointers, a block mask for the tile fused_*_rules_tile
// names): the problem's modifications. Each kernel then runs its instantiation with rules: it
// walks only the key tiles the block mask leaves each query tile, tests MaskRule per element in
// Partial tiles only, and turns every product into ScoreRule's modified scaled score
// y = apply(q.k * rules->scale) before the online softmax; `scale` is then 1 / T, the factor from
// y to the logit, so the running max is kept in units of y and the exponentials take 1 / T.
// causal must be false and custom_mask null then: MaskRule holds the mask.
#pragma once

#include "kernels/rules.h"

#include <cstdint>
#include <string>

namespace attnlab::cuda {

// The kernel the last fused launch on this host thread ran, named by its family and template
// parameters: "fp32 D=64 BQ=64 BK=64 threads=128", "3xTF32 D=64 warps=4 BK=64",
// "bf16 D=128 warps=4 BK=64 MT=1 qreg=1". Configurations that do not suit a shape run configuration
// 0's kernel instead: this is how bench's JSON and the tests tell. Empty before the first launch.
std::string last_fused_kernel();

// The tile (queries x keys) of the kernel a fused launch with rules runs, for the block mask the
// caller builds (block_mask(p, q_tile, k_tile)): fp32 configurations 1 and 2 run the 3xTF32
// kernel where it takes the shape (fused_tf32_takes) and the buffers are `aligned` (q, k, v
// 16-byte, o 8-byte: cudaMalloc's are), every other fp32 configuration runs configuration 0's
// CUDA-core tile; bf16 runs configuration 0's tile. Reads ATTNLAB_FUSED_CONFIG as the launch does.
struct FusedTile {
  int q_tile = 0, k_tile = 0;
};
FusedTile fused_fp32_rules_tile(int d_k, int d_v, bool aligned);
FusedTile fused_bf16_rules_tile(int d);

// fp32 inputs, fp32 math, fp32-accurate (relative error <= 1e-5 against fp64).
void fused_attention_fp32(const float* q, const float* k, const float* v, float* o, int heads,
                          int n, int m, int d_k, int d_v, float scale, bool causal,
                          const float* custom_mask, void* stream, const KernelRules* rules = nullptr);

// fp32 on tensor cores with error compensation (3xTF32; kernels/fused_tf32.cu), what fp32
// configurations 1 (4 warps, `wide` false) and 2 (8 warps) run. `scale_log2` = log2(e) * scale.
// Returns false, launching nothing, where the kernel does not apply: d_k or d_v not a multiple of
// 4 or above 128 (fused_tf32_takes), or buffers not 16-byte aligned (o: 8-byte).
bool fused_attention_tf32x3(bool wide, const float* q, const float* k, const float* v, float* o,
                            int heads, int n, int m, int d_k, int d_v, float scale_log2,
                            bool causal, const float* custom_mask, void* stream,
                            const KernelRules* rules = nullptr);
bool fused_tf32_takes(int d_k, int d_v);
// Its tile: 16 queries per warp (4 or 8 warps), 64-key tiles up to head dim 64, 32 above.
FusedTile fused_tf32_tile(bool wide, int d_k, int d_v);

// bf16 inputs (raw uint16 bit patterns), tensor-core math with fp32 accumulation, fp32 output.
// d_k == d_v in {64, 128}; throws InputError for other shapes.
void fused_attention_bf16(const std::uint16_t* q, const std::uint16_t* k, const std::uint16_t* v,
                          float* o, int heads, int n, int m, int d, float scale, bool causal,
                          void* stream, const KernelRules* rules = nullptr);

// Configurations 3 and 4 of the bf16 kernel (ATTNLAB_FUSED_CONFIG, from kFusedBf16WgmmaFirst on):
// the sm_90a kernel on wgmma (kernels/sm90a/fused_wgmma.cu), without rules, the shape already
// checked by fused_attention_bf16, which calls it. `scale_log2` = log2(e) * scale. Throws
// InputError with wgmma_device_error's text on a GPU of another compute capability than 9.0.
void fused_attention_bf16_wgmma(int config, const std::uint16_t* q, const std::uint16_t* k,
                                const std::uint16_t* v, float* o, int heads, int n, int m, int d,
                                float scale_log2, bool causal, void* stream);
// "" when the current device runs the sm_90a kernels (compute capability 9.0) and this build has
// them; otherwise why not, naming ATTNLAB_FUSED_CONFIG=config.
std::string wgmma_device_error(int config);

}  // namespace attnlab::cuda
