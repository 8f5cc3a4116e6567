// Stage 3 of the staged chain: row-wise numerically stable softmax of the logits.
// Version 1: online (max, sum) in one read of the row: each thread keeps a running max and a sum
// of exp(x - max) rescaled whenever the max grows; threads merge their pairs through warp shuffles
// (and shared memory across warps); a second read writes exp(x - max) / sum. The second read of a
// row is served by L1/L2, so device memory sees about one read and one write per element.
//   m <= 1024: a warp per row (8 rows per 256-thread block), no shared memory, no block barrier.
//   m >  1024: a block per row (256 threads; 512 above 4096 keys).
// Masked logits (-inf) give exactly 0.0 and never enter the sum, so the weights of masked keys are
// exactly zero whatever the rounding elsewhere. float4 loads/stores when m % 4 == 0.
#include "kernels/cuda_check.h"
#include "kernels/online_softmax.cuh"
#include "kernels/stages.h"

#include <cmath>
#include <cstddef>
#include <cstdint>

namespace attnlab::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kWarpRowsThreads = 256;
constexpr int kWarpRowMax = 1024;  // longest row handled by a single warp

__device__ __forceinline__ void warp_merge(float& mx, float& s) {
#pragma unroll
  for (int off = kWarp / 2; off > 0; off /= 2) {
    const float omx = __shfl_xor_sync(0xffffffffu, mx, off);
    const float os = __shfl_xor_sync(0xffffffffu, s, off);
    online_merge(mx, s, omx, os);
  }
}

// A fully masked row (rejected by validation, but never NaN here) has mx == -inf and gives zeros.
__device__ __forceinline__ float weight(float x, float mx, float s) {
  return x == -INFINITY ? 0.f : expf(x - mx) / s;
}

// Loops over the elements of one row of length m, `stride` threads apart starting at `start`,
// feeding them to the running (mx, s).
template <bool kVec4>
__device__ __forceinline__ void accumulate_row(const float* __restrict__ x, int m, int start,
                                               int stride, float& mx, float& s) {
  if constexpr (kVec4) {
    const float4* x4 = reinterpret_cast<const float4*>(x);
#pragma unroll 4
    for (int j = start; j < m / 4; j += stride) {
      const float4 t = x4[j];
      online_add(mx, s, t.x);
      online_add(mx, s, t.y);
      online_add(mx, s, t.z);
      online_add(mx, s, t.w);
    }
  } else {
#pragma unroll 4
    for (int j = start; j < m; j += stride) online_add(mx, s, x[j]);
  }
}

template <bool kVec4>
__device__ __forceinline__ void write_row(const float* __restrict__ x, float* __restrict__ y,
                                          int m, int start, int stride, float mx, float s) {
  if constexpr (kVec4) {
    const float4* x4 = reinterpret_cast<const float4*>(x);
    float4* y4 = reinterpret_cast<float4*>(y);
#pragma unroll 4
    for (int j = start; j < m / 4; j += stride) {
      const float4 t = x4[j];
      y4[j] = make_float4(weight(t.x, mx, s), weight(t.y, mx, s), weight(t.z, mx, s),
                          weight(t.w, mx, s));
    }
  } else {
#pragma unroll 4
    for (int j = start; j < m; j += stride) y[j] = weight(x[j], mx, s);
  }
}

// logits and weights are (rows, m); row = blockIdx.x * 8 + warp.
template <bool kVec4>
__global__ void __launch_bounds__(kWarpRowsThreads)
    softmax_warp_per_row(const float* __restrict__ logits, float* __restrict__ weights,
                         std::int64_t rows, int m) {
  const int lane = threadIdx.x % kWarp;
  const std::int64_t row =
      static_cast<std::int64_t>(blockIdx.x) * (kWarpRowsThreads / kWarp) + threadIdx.x / kWarp;
  if (row >= rows) return;  // whole warps leave together, so the shuffles below stay full
  const float* x = logits + row * m;
  float mx = -INFINITY, s = 0.f;
  accumulate_row<kVec4>(x, m, lane, kWarp, mx, s);
  warp_merge(mx, s);
  write_row<kVec4>(x, weights + row * m, m, lane, kWarp, mx, s);
}

// logits and weights are (rows, m); row = blockIdx.x; blockDim.x a multiple of 32, <= 1024.
template <bool kVec4>
__global__ void __launch_bounds__(1024)
    softmax_block_per_row(const float* __restrict__ logits, float* __restrict__ weights, int m) {
  __shared__ float smx[kWarp], ss[kWarp];
  const std::int64_t row = blockIdx.x;
  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
  const int warps = blockDim.x / kWarp;
  const float* x = logits + row * m;

  float mx = -INFINITY, s = 0.f;
  accumulate_row<kVec4>(x, m, tid, blockDim.x, mx, s);
  warp_merge(mx, s);
  if (lane == 0) smx[warp] = mx, ss[warp] = s;
  __syncthreads();
  // Every warp merges the per-warp pairs itself: no second barrier and broadcast needed.
  mx = lane < warps ? smx[lane] : -INFINITY;
  s = lane < warps ? ss[lane] : 0.f;
  warp_merge(mx, s);

  write_row<kVec4>(x, weights + row * m, m, tid, blockDim.x, mx, s);
}

}  // namespace

void launch_softmax(const float* logits, float* weights, std::int64_t rows, int m,
                    cudaStream_t stream) {
  if (rows <= 0 || m <= 0) return;
  // Rows start 16-byte aligned exactly when m % 4 == 0 (the buffers come from cudaMalloc).
  const bool vec = m % 4 == 0;
  if (m <= kWarpRowMax) {
    const int rows_per_block = kWarpRowsThreads / kWarp;
    const auto blocks = static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block);
    if (vec)
      softmax_warp_per_row<true><<<blocks, kWarpRowsThreads, 0, stream>>>(logits, weights, rows, m);
    else
      softmax_warp_per_row<false><<<blocks, kWarpRowsThreads, 0, stream>>>(logits, weights, rows, m);
  } else {
    const int threads = m > 4096 ? 512 : 256;
    const auto blocks = static_cast<unsigned>(rows);
    if (vec)
      softmax_block_per_row<true><<<blocks, threads, 0, stream>>>(logits, weights, m);
    else
      softmax_block_per_row<false><<<blocks, threads, 0, stream>>>(logits, weights, m);
  }
  ATTNLAB_CUDA_CHECK(cudaGetLastError());
}

}  // namespace attnlab::cuda
