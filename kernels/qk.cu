// Stage 1 of the staged chain: raw scores S = Q K^T and scaled scores S / sqrt(d_k), per head.
// Two versions, chosen by ATTNLAB_STAGED_CONFIG at every launch (kernels/tile_config.h):
//   0 (default) shared-memory tiled, register-blocked (each block a 128 x 128 tile of S, each
//     thread an 8 x 8 sub-tile accumulated in registers), fp32 FMA on CUDA cores.
//   1 the same 128 x 128 block tiles on tensor cores in 3xTF32 (kernels/gemm_tf32.cuh: 8 warps of
//     64 x 32, k in slices of 32 through double-buffered shared memory), fp32-accurate. At
//     N = 16384, d = 64 the CUDA-core version needs about as long for its FMAs as for writing the
//     two N x N outputs; this one should leave the stage bound by the writes (unmeasured).
//     170 registers, 74 KB shared: one block of 8 warps per SM.
//   2 as 1 with __launch_bounds__(256, 2): two blocks per SM, ptxas capped at 128 registers
//     (spills 28 bytes).
// Versions 1 and 2 above d_k = 128 sum each 32-wide k slice in fresh accumulators (SLICE_SUMS,
// kernels/gemm_tf32.cuh): the tensor cores truncate their fp32 sums, and over one chain of
// 3 d_k / 8 mma at d_k = 256 the bias passes the fp32 tolerance (scripts/tf32-model --staged-qk
// replays that rounding on the parity tests' shapes); up to d_k = 128 the
// chain is short enough and the extra accumulators are not spent. The sliced kernel runs without
// version 2's register cap (one block per SM), which it could not meet without spilling.
// Either way the scale is applied in the epilogue, so the tile is written twice (scores, scaled)
// but never read back. Any n, m, d_k: tiles are zero-filled past the edges and stores are guarded.
#include "kernels/cuda_check.h"
#include "kernels/gemm_tf32.cuh"
#include "kernels/launch.h"
#include "kernels/stages.h"
#include "kernels/tile_config.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace attnlab::cuda {
namespace {

constexpr int kBM = 128;  // query rows per block
constexpr int kBN = 128;  // keys per block
constexpr int kBK = 16;   // d_k slice per shared-memory tile
constexpr int kTM = 8;    // rows per thread
constexpr int kTN = 8;    // columns per thread, as kTN / 4 float4 groups
constexpr int kThreadsX = kBN / kTN;                // 16
constexpr int kThreads = (kBM / kTM) * kThreadsX;   // 256
constexpr int kGroupStride = kThreadsX * 4;         // 64: column distance between a thread's groups
// One float4 of padding per shared row keeps float4 alignment and turns the transposing stores
// (consecutive threads write consecutive k, i.e. rows kBM apart) from 16-way into 2-way conflicts.
constexpr int kPad = 4;
constexpr int kMaxGridZ = 65535;

static_assert(kBM * kBK % kThreads == 0 && kBN * kBK % kThreads == 0, "whole loads per thread");
static_assert(kTN % 4 == 0, "columns are handled as float4 groups");

// q is (n, d_k), k is (m, d_k) for head blockIdx.z (pointers already at head 0 of this launch);
// scores and scaled are (n, m) per head, heads stacked along rows.
__global__ void __launch_bounds__(kThreads)
    qk_tiled(const float* __restrict__ q, const float* __restrict__ k, float* __restrict__ scores,
             float* __restrict__ scaled, int n, int m, int d_k, float sqrt_dk) {
  __shared__ __align__(16) float qs[kBK][kBM + kPad];  // transposed: qs[kk][row]
  __shared__ __align__(16) float ks[kBK][kBN + kPad];  // transposed: ks[kk][col]

  const std::size_t head = blockIdx.z;
  const int row0 = blockIdx.y * kBM;
  const int col0 = blockIdx.x * kBN;
  const float* qh = q + head * n * d_k;
  const float* kh = k + head * m * d_k;
  const int tid = threadIdx.x;
  const int tx = tid % kThreadsX;
  const int ty = tid / kThreadsX;

  float acc[kTM][kTN] = {};

  for (int k0 = 0; k0 < d_k; k0 += kBK) {
    // A warp reads two rows of 16 consecutive floats: contiguous 64-byte runs of global memory.
#pragma unroll
    for (int l = 0; l < kBM * kBK / kThreads; ++l) {
      const int idx = tid + l * kThreads;
      const int r = idx / kBK, kk = idx % kBK;
      const int gr = row0 + r, gk = k0 + kk;
      qs[kk][r] = (gr < n && gk < d_k) ? qh[static_cast<std::size_t>(gr) * d_k + gk] : 0.f;
    }
#pragma unroll
    for (int l = 0; l < kBN * kBK / kThreads; ++l) {
      const int idx = tid + l * kThreads;
      const int c = idx / kBK, kk = idx % kBK;
      const int gc = col0 + c, gk = k0 + kk;
      ks[kk][c] = (gc < m && gk < d_k) ? kh[static_cast<std::size_t>(gc) * d_k + gk] : 0.f;
    }
    __syncthreads();

#pragma unroll
    for (int kk = 0; kk < kBK; ++kk) {
      float a[kTM], b[kTN];
#pragma unroll
      for (int i = 0; i < kTM; i += 4) {
        const float4 t = *reinterpret_cast<const float4*>(&qs[kk][ty * kTM + i]);
        a[i] = t.x, a[i + 1] = t.y, a[i + 2] = t.z, a[i + 3] = t.w;
      }
#pragma unroll
      for (int g = 0; g < kTN / 4; ++g) {
        const float4 t = *reinterpret_cast<const float4*>(&ks[kk][g * kGroupStride + tx * 4]);
        b[g * 4] = t.x, b[g * 4 + 1] = t.y, b[g * 4 + 2] = t.z, b[g * 4 + 3] = t.w;
      }
#pragma unroll
      for (int i = 0; i < kTM; ++i)
#pragma unroll
        for (int j = 0; j < kTN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    // The next iteration overwrites the tiles other threads may still be reading.
    __syncthreads();
  }

  // Epilogue: a thread's columns are kTN / 4 groups of 4, 64 apart, so one store instruction of a
  // half-warp covers 256 contiguous bytes of a row.
  const bool vec = (m % 4) == 0;  // rows start 16-byte aligned, so float4 stores are legal
#pragma unroll
  for (int i = 0; i < kTM; ++i) {
    const int gr = row0 + ty * kTM + i;
    if (gr >= n) break;
    const std::size_t base = (head * n + gr) * static_cast<std::size_t>(m);
#pragma unroll
    for (int g = 0; g < kTN / 4; ++g) {
      const int c = col0 + g * kGroupStride + tx * 4;
      const float* v = &acc[i][g * 4];
      if (vec && c < m) {
        *reinterpret_cast<float4*>(scores + base + c) = make_float4(v[0], v[1], v[2], v[3]);
        *reinterpret_cast<float4*>(scaled + base + c) =
            make_float4(v[0] / sqrt_dk, v[1] / sqrt_dk, v[2] / sqrt_dk, v[3] / sqrt_dk);
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if (c + j < m) {
            scores[base + c + j] = v[j];
            scaled[base + c + j] = v[j] / sqrt_dk;
          }
        }
      }
    }
  }
}

using QkTcChained = TcGemm<128, 128, 64, 32, /*B_TRANSPOSED=*/true, /*SLICE_SUMS=*/false>;
using QkTcSliced = TcGemm<128, 128, 64, 32, /*B_TRANSPOSED=*/true, /*SLICE_SUMS=*/true>;
constexpr int kQkChainedMaxDk = 128;  // above: QkTcSliced

// Version 1: grid and pointers as qk_tiled; `vec`: d_k % 4 == 0 and 16-byte aligned q, k.
// MINB: __launch_bounds__ minimum blocks per SM (0: none; 2 caps ptxas at 128 registers).
template <class QkTc, int MINB>
__global__ void __launch_bounds__(QkTc::kThreads, MINB)
    qk_tc(const float* __restrict__ q, const float* __restrict__ k, float* __restrict__ scores,
          float* __restrict__ scaled, int n, int m, int d_k, float sqrt_dk, bool vec) {
  extern __shared__ float4 smem_qk[];
  const std::size_t head = blockIdx.z;
  const int row0 = blockIdx.y * QkTc::BM;
  const int col0 = blockIdx.x * QkTc::BN;
  float acc[QkTc::MT][QkTc::NT][4];
  tc_gemm_tile<QkTc>(q + (head * n + row0) * d_k, d_k, k + (head * m + col0) * d_k, d_k,
                     min(QkTc::BM, n - row0), min(QkTc::BN, m - col0), d_k, vec,
                     reinterpret_cast<float*>(smem_qk), acc);

  // Each accumulator pair is two adjacent columns of one row: float2 stores where m is even
  // (c is even, so c + 1 < m as well).
  const bool pairs = (m % 2) == 0;
  tc_for_each_pair<QkTc>(acc, row0, col0, n, m, [&](int r, int c, float v0, float v1) {
    const std::size_t at = (head * n + r) * static_cast<std::size_t>(m) + c;
    if (pairs) {
      *reinterpret_cast<float2*>(scores + at) = make_float2(v0, v1);
      *reinterpret_cast<float2*>(scaled + at) = make_float2(v0 / sqrt_dk, v1 / sqrt_dk);
    } else {
      scores[at] = v0;
      scaled[at] = v0 / sqrt_dk;
      if (c + 1 < m) {
        scores[at + 1] = v1;
        scaled[at + 1] = v1 / sqrt_dk;
      }
    }
  });
}

// One chunk of at most 65535 heads (gridDim.z), pointers at its first head.
template <class QkTc, int MINB>
void launch_qk_tc_as(const float* q, const float* k, float* scores, float* scaled, int hc, int n,
                     int m, int d_k, float sqrt_dk, bool vec, cudaStream_t stream) {
  allow_dynamic_smem<qk_tc<QkTc, MINB>>(QkTc::smem_bytes);
  const dim3 grid((m + QkTc::BN - 1) / QkTc::BN, (n + QkTc::BM - 1) / QkTc::BM, hc);
  qk_tc<QkTc, MINB><<<grid, QkTc::kThreads, QkTc::smem_bytes, stream>>>(q, k, scores, scaled, n,
                                                                         m, d_k, sqrt_dk, vec);
}

template <int MINB>
void launch_qk_tc(const float* q, const float* k, float* scores, float* scaled, int hc, int n,
                  int m, int d_k, float sqrt_dk, bool vec, cudaStream_t stream) {
  if (d_k <= kQkChainedMaxDk)
    launch_qk_tc_as<QkTcChained, MINB>(q, k, scores, scaled, hc, n, m, d_k, sqrt_dk, vec, stream);
  else  // without the register cap of version 2: under it the slice sums spill heavily
    launch_qk_tc_as<QkTcSliced, 0>(q, k, scores, scaled, hc, n, m, d_k, sqrt_dk, vec, stream);
}

}  // namespace

void launch_qk(const float* q, const float* k, float* scores, float* scaled, int heads, int n,
               int m, int d_k, float sqrt_dk, cudaStream_t stream) {
  if (heads <= 0 || n <= 0 || m <= 0 || d_k <= 0) return;
  const int config = staged_config();
  const bool vec = d_k % 4 == 0 && aligned16(q) && aligned16(k);
  // gridDim.z is limited to 65535: launch heads in chunks, moving the pointers to each chunk.
  for (int h0 = 0; h0 < heads; h0 += kMaxGridZ) {
    const int hc = std::min(kMaxGridZ, heads - h0);
    const std::size_t h = h0;
    const float* qc = q + h * n * d_k;
    const float* kc = k + h * m * d_k;
    float* sc = scores + h * n * m;
    float* ac = scaled + h * n * m;
    if (config == 1) {
      launch_qk_tc<0>(qc, kc, sc, ac, hc, n, m, d_k, sqrt_dk, vec, stream);
    } else if (config == 2) {
      launch_qk_tc<2>(qc, kc, sc, ac, hc, n, m, d_k, sqrt_dk, vec, stream);
    } else {
      const dim3 grid((m + kBN - 1) / kBN, (n + kBM - 1) / kBM, hc);
      qk_tiled<<<grid, kThreads, 0, stream>>>(qc, kc, sc, ac, n, m, d_k, sqrt_dk);
    }
    ATTNLAB_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace attnlab::cuda
