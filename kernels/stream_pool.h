// Launchers of the streaming kernels (kernels/stream_pool.cu): the staged chain's stages 1-3 for
// problems whose (n, m) stages cannot be held, reduced on the device into pooled images and exact
// rows without any (n, m) buffer. Three passes, all fp32 on CUDA cores:
//   launch_row_stats   max and sum of exp of every listed query row's logits over all m keys
//                      (online softmax over key tiles), plus the first unmasked cell whose score
//                      or logit is not finite (the CPU chain refuses those)
//   launch_pool        per pixel of a view, the max or the mean (sum and count) of the finite,
//                      unmasked cells of its block for scores (mask not applied), logits and
//                      weights, recomputed from Q and K, plus the range of the cells visited
//   launch_exact_rows  scores, scaled, (biased, capped,) logits and weights of a few rows over all
//                      m keys
// Where the view covers every key once, in order, launch_pool_one_pass replaces the statistics of
// the view's rows and launch_pool: one pass over the scores (kernels/stream_onepass.h).
// Every score is the same sequential fmaf chain over d_k in all the kernels, so a weight is
// computed from bit-identical logits in the stats and in the pooling pass (the row's max weight is
// exactly 1 / sum). All pointers are DEVICE pointers, row-major, heads stacked along rows as in
// kernels/stages.h. Launchers enqueue on `stream`, check the launch and do not synchronise.
// Included by .cu files only (it names cudaStream_t).
#pragma once

#include "kernels/rules.h"
#include "kernels/stages.h"
#include "kernels/stream_onepass.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace attnlab::cuda {

// What every streaming kernel reads: the inputs and the chain's constants.
struct StreamInputs {
  const float* q = nullptr;     // (heads*n, d_k)
  const float* k = nullptr;     // (heads*m, d_k)
  int n = 0, m = 0, d_k = 0;
  // The mask kind and the mask mods (kernels/rules.h; a custom mask and document ids: device
  // pointers), and the score mods (slopes and bias: device pointers; none: ScoreRule's default).
  MaskRule rule;
  ScoreRule score;
  float sqrt_dk = 1, temperature = 1;
  // exp arguments below this give weights too small to be normal floats: those weights are 0
  // (the CPU chain's rule: log(FLT_MIN) + log(m)).
  float exp_cutoff = 0;
};

// Sentinel of the overflow records: no cell found.
inline constexpr unsigned long long kNoCell = ~0ull;

// rows (count): stacked row ids (head * n + query), all of head `head`. Writes row_max[i] and
// row_sum[i] (sum of exp(logit - max) over the row's unmasked keys) for rows[i]. overflow[0] and
// overflow[1] are lowered (atomicMin) to row * m + col of an unmasked cell whose score (0) or,
// with a finite score, whose logit (1) is not finite; the caller initialises them to kNoCell.
void launch_row_stats(const StreamInputs& in, const int* rows, int count, int head,
                      float* row_max, float* row_sum, unsigned long long* overflow,
                      cudaStream_t stream);

// The pixel rows of a view, grouped: group g covers source rows [row_begin[g], row_end[g]) of
// `head`; stat[g] is the index of row_begin[g] in the stats arrays (a group's rows are consecutive
// there). The pixel columns: pixel px covers the flat positions [px_flat[px], px_flat[px + 1]),
// flat_col[f] is the key of flat position f; the columns are processed in chunks, chunk c being
// pixels [chunk_px[c], chunk_px[c + 1]) (at most kPoolChunkPixels of them).
struct PoolLayout {
  const int* row_begin = nullptr;
  const int* row_end = nullptr;
  const int* stat = nullptr;
  const int* px_flat = nullptr;
  const int* flat_col = nullptr;
  const int* chunk_px = nullptr;
  int groups = 0, width = 0, chunks = 0;
};

inline constexpr int kPoolChunkPixels = 64;

// Pools groups [g0, g1) into value[(s * groups + g) * width + px] and masked[...] (1: no cell) for
// the stages s = 0 scores, 1 logits, 2 weights; `mean` false: max. range[2 s] and range[2 s + 1]
// are lowered / raised (atomicMin / atomicMax) to the ordered-int encodings (float_order_key) of
// the smallest and largest value visited; the caller initialises them to the keys of +inf, -inf.
void launch_pool(const StreamInputs& in, int head, const PoolLayout& layout, int g0, int g1,
                 const float* row_max, const float* row_sum, bool mean, float* value,
                 std::uint8_t* masked, int* range, cudaStream_t stream);

// The one-pass pooling of groups [g0, g1) of a view whose flat columns are the keys 0 .. m - 1
// (onepass::one_pass_possible): scores and logits into value and masked as launch_pool writes
// them, each row's PixelState per pixel into states[(stat[g] - state_row0 + r - row_begin[g]) *
// width + px] (the launch's rows x width), then every group row's (max, sum) into row_max and
// row_sum at its stats index, and the weights (stage 2) from the states. range[0..5] and
// overflow[0..1] as launch_pool and launch_row_stats lower and raise them.
void launch_pool_one_pass(const StreamInputs& in, int head, const PoolLayout& layout, int g0, int g1,
                          int state_row0, onepass::PixelState* states, float* row_max, float* row_sum,
                          bool mean, float* value, std::uint8_t* masked, int* range,
                          unsigned long long* overflow, cudaStream_t stream);

// rows (count): stacked row ids, any head; stat[i] the index of rows[i] in the stats arrays.
// scores, scaled, logits, weights are (count, m); biased and capped (count, m) or null: the score
// mods' stages (scaled + ALiBi + bias, and the soft-capped scores) of a problem that has them.
void launch_exact_rows(const StreamInputs& in, const int* rows, const int* stat, int count,
                       const float* row_max, const float* row_sum, float* scores, float* scaled,
                       float* biased, float* capped, float* logits, float* weights, cudaStream_t stream);

// A float's key in an order-preserving int encoding (for atomicMin / atomicMax on floats), and
// back. Not for NaN.
inline int float_order_key(float f) {
  int i;
  static_assert(sizeof i == sizeof f);
  __builtin_memcpy(&i, &f, sizeof i);
  return i >= 0 ? i : i ^ 0x7fffffff;
}
inline float float_from_order_key(int k) {
  const int i = k >= 0 ? k : k ^ 0x7fffffff;
  float f;
  __builtin_memcpy(&f, &i, sizeof f);
  return f;
}

}  // namespace attnlab::cuda
