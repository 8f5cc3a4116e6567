// Launchers of the staged CUDA chain, one stage per file, each a hand-written kernel the lab can
// show and time on its own:
//   kernels/qk.cu          S = Q K^T and, in the same epilogue, scaled = S / sqrt(d_k)
//   kernels/scale_mask.cu  logits = (scaled + mask) / T   (and the (n, m) mask itself); with the
//                          problem's modifications (rules) also the biased and capped stages
//   kernels/softmax.cu     weights = row-wise stable softmax(logits), masked entries exactly 0
//   kernels/pv.cu          O = weights V
// All pointers are DEVICE pointers, row-major, with B*H heads stacked along rows (core/problem.h):
//   q (heads*n, d_k)   k (heads*m, d_k)   v (heads*m, d_v)
//   scores, scaled, logits, weights (heads*n, m)   mask (n, m) shared by all heads
//   output (heads*n, d_v)
// Launchers enqueue on `stream`, check the launch (DeviceError on failure) and do not synchronise.
// Any n, m, d_k, d_v >= 1 is accepted; sizes need not be multiples of the tiles.
// Included by .cu files only (it names cudaStream_t).
#pragma once

#include "kernels/rules.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace attnlab::cuda {

// launch_qk and launch_pv read ATTNLAB_STAGED_CONFIG (staged_config() in kernels/tile_config.h):
// 0 CUDA cores; 1 (default) tensor cores in 3xTF32 (kernels/gemm_tf32.cuh), two blocks per SM
// where the registers allow. The other stages have one version.

// Mask kinds as the kernels see them (MaskKind without pulling core/ into the kernels).
enum class MaskCode : int { None = 0, Causal = 1, Custom = 2 };

// scores (heads*n, m) = q k^T per head; scaled = scores * (1 / sqrt(d_k)) computed as a division
// by `sqrt_dk`, written in the same epilogue (one pass over the (n, m) tile instead of two).
void launch_qk(const float* q, const float* k, float* scores, float* scaled, int heads, int n,
               int m, int d_k, float sqrt_dk, cudaStream_t stream);

// mask (n, m): 0 keeps, -inf blocks. None: all 0; Causal: -inf where col > row (n == m);
// Custom: nothing to do (the uploaded custom mask is already there, validated to 0 / -inf).
// Only the Trace needs this matrix: scale_mask computes None and Causal from (row, col).
void launch_build_mask(float* mask, MaskCode code, int n, int m, cudaStream_t stream);

// logits (heads*n, m) = (scaled + mask[row % n]) / temperature; -inf exactly where masked.
// For None and Causal the mask value is recomputed from (row, col) rather than read, so the stage
// reads one N x N matrix instead of two; Custom reads `mask` (n, m).
void launch_scale_mask(const float* scaled, const float* mask, float* logits, MaskCode code,
                       int heads, int n, int m, float temperature, cudaStream_t stream);

// With the problem's modifications (kernels/rules.h), the two launchers above in their rules form:
// mask (n, m) = 0 where `rule` lets query i see key j, -inf elsewhere (MaskRule: causal at any
// n <= m, a custom mask, window, documents, prefix). It may overwrite the custom mask `rule`
// reads: element (i, j) reads only element (i, j) of it.
void launch_build_mask_rules(float* mask, const MaskRule& rule, int n, int m, cudaStream_t stream);

// logits (heads*n, m) = (y + mask) / T with y the last of scaled, biased = scaled + ALiBi + bias
// (when the rules have either), capped = C tanh(. / C) (with a soft-cap), as ScoreRule computes
// them; biased and capped (heads*n, m) are written where not null (a run that brings them back).
// The mask comes from MaskRule, element by element; rules.scale is not used (scaled is).
void launch_scale_mask_rules(const float* scaled, float* biased, float* capped, float* logits,
                             const KernelRules& rules, int heads, int n, int m, float temperature,
                             cudaStream_t stream);

// weights (rows, m) = softmax of each row of logits (rows, m): max, sum of exp(x - max), divide.
// A warp per row for m <= 1024, a block per row above. -inf logits give exactly 0.0.
void launch_softmax(const float* logits, float* weights, std::int64_t rows, int m,
                    cudaStream_t stream);

// output (heads*n, d_v) = weights (heads*n, m) . v (heads*m, d_v) per head. With `causal`
// (n == m) the key tiles right of each row block are skipped: their weights are exactly 0.
void launch_pv(const float* weights, const float* v, float* output, int heads, int n, int m,
               int d_v, bool causal, cudaStream_t stream);

}  // namespace attnlab::cuda
