// What every fused forward kernel's block does the same way (kernels/fused_fp32.cu,
// fused_tf32.cu, fused_bf16.cu, sm90a/fused_wgmma.cu): which head and query tile it owns, and, in
// the tensor-core kernels, the online softmax's step for a lane's two rows spread over a quad and
// their final sums. Included by .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace attnlab::cuda {

// The query tile of this block, for a grid of heads * ceil(n / bq) blocks: block b takes head
// b % heads and query tile (tiles - 1 - b / heads), the heaviest causal tiles first. key_end is
// one past the last key its queries may see (causal: n == m, the tile's last query's own key).
struct FusedBlockTile {
  int head, q0, key_end;
  // The tile's first query row of q ((heads n, stride) rows), and the head's first key row of k
  // or v ((heads m, stride) rows).
  template <class T>
  __device__ __forceinline__ const T* query_rows(const T* q, int n, int stride) const {
    return q + (static_cast<std::size_t>(head) * n + q0) * stride;
  }
  template <class T>
  __device__ __forceinline__ const T* key_rows(const T* kv, int m, int stride) const {
    return kv + static_cast<std::size_t>(head) * m * stride;
  }
};
__device__ __forceinline__ FusedBlockTile fused_block_tile(int heads, int n, int m, int bq, bool causal) {
  const int q_tiles = (n + bq - 1) / bq;
  FusedBlockTile t;
  t.head = blockIdx.x % heads;
  t.q0 = (q_tiles - 1 - static_cast<int>(blockIdx.x) / heads) * bq;
  const int q_last = min(t.q0 + bq, n) - 1;
  t.key_end = causal ? min(m, q_last + 1) : m;
  return t;
}

// One key tile's step of the online softmax for the lane's two rows (mma.sync's and wgmma's
// accumulator layout: each row spread over the 4 lanes of a quad), given the lane's own maxima of
// the tile's scores (raw q.k, or y with rules; the scale is > 0, so the max commutes with it):
// the rows' maxima over the quad update the running ones (max0, max1); shift is the new max in
// the exponent's units (scale_log2 = log2(e) times the scale), 0 while every key so far is masked
// (never -inf: -inf - -inf is NaN); corr = exp2(old max - shift), by the kernel's own exp2, what
// the running sums and accumulators are multiplied by.
template <class Exp2>
__device__ __forceinline__ void quad_rows_step(float& max0, float& max1, float tmax0, float tmax1, float scale_log2,
                                               Exp2 exp2_of, float& shift0, float& shift1, float& corr0,
                                               float& corr1) {
  tmax0 = fmaxf(tmax0, __shfl_xor_sync(0xffffffffu, tmax0, 1));
  tmax0 = fmaxf(tmax0, __shfl_xor_sync(0xffffffffu, tmax0, 2));
  tmax1 = fmaxf(tmax1, __shfl_xor_sync(0xffffffffu, tmax1, 1));
  tmax1 = fmaxf(tmax1, __shfl_xor_sync(0xffffffffu, tmax1, 2));
  const float new0 = fmaxf(max0, tmax0);
  const float new1 = fmaxf(max1, tmax1);
  shift0 = new0 == -INFINITY ? 0.f : new0 * scale_log2;
  shift1 = new1 == -INFINITY ? 0.f : new1 * scale_log2;
  corr0 = exp2_of(max0 * scale_log2 - shift0);
  corr1 = exp2_of(max1 * scale_log2 - shift1);
  max0 = new0;
  max1 = new1;
}

// The lane's two rows' full sums over their quad, inverted: what the rows' accumulators are
// multiplied by before they are written.
__device__ __forceinline__ void quad_rows_inverse(float sum0, float sum1, float& inv0, float& inv1) {
  sum0 += __shfl_xor_sync(0xffffffffu, sum0, 1);
  sum0 += __shfl_xor_sync(0xffffffffu, sum0, 2);
  sum1 += __shfl_xor_sync(0xffffffffu, sum1, 1);
  sum1 += __shfl_xor_sync(0xffffffffu, sum1, 2);
  inv0 = 1.f / sum0;
  inv1 = 1.f / sum1;
}

}  // namespace attnlab::cuda
