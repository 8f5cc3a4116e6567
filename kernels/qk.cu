// Stage 1 of the staged chain: raw scores S = Q K^T and scaled scores S / sqrt(d_k), per head.
// Two versions, chosen by ATTNLAB_STAGED_CONFIG at every launch (kernels/tile_config.h):
//   0 shared-memory tiled, register-blocked (each block a 128 x 128 tile of S, each thread an
//     8 x 8 sub-tile accumulated in registers), fp32 FMA on CUDA cores (kernels/gemm_tiled.cuh,
//     the loop shared with kernels/pv.cu).
//   1 (default) the same 128 x 128 block tiles on tensor cores in 3xTF32 (kernels/gemm_tf32.cuh:
//     8 warps of 64 x 32, k in slices of 32 through double-buffered shared memory), fp32-accurate,
//     with __launch_bounds__(256, 2): two blocks per SM, ptxas capped at 128 registers (spills
//     28 bytes). (Without the cap, one block of 170 registers per SM, it was configuration 1 until
//     the H200 sweeps of 2026-12-04 timed it slower at d 64 and 128, and was deleted.)
// Above d_k = 128 version 1 sums each 32-wide k slice in fresh accumulators (SLICE_SUMS,
// kernels/gemm_tf32.cuh): the tensor cores truncate their fp32 sums, and over one chain of
// 3 d_k / 8 mma at d_k = 256 the bias passes the fp32 tolerance (scripts/tf32-model --staged-qk
// replays that rounding on the parity tests' shapes); up to d_k = 128 the
// chain is short enough and the extra accumulators are not spent. The sliced kernel runs without
// the register cap (one block per SM), which it could not meet without spilling.
// Either way the scale is applied in the epilogue, so the tile is written twice (scores, scaled)
// but never read back. Any n, m, d_k: tiles are zero-filled past the edges and stores are guarded.
#include "kernels/cuda_check.h"
#include "kernels/gemm_tf32.cuh"
#include "kernels/gemm_tiled.cuh"
#include "kernels/launch.h"
#include "kernels/stages.h"
#include "kernels/tile_config.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace attnlab::cuda {
namespace {

// Version 0: each block a 128 x 128 tile of S, 16 k a slice, each thread 8 x 8 (two float4
// groups of columns, 64 apart).
using QkTiled = TiledGemm<128, 128, 16, 8, 8>;
constexpr int kMaxGridZ = 65535;

// Writes each result twice: the raw score and the scaled one, scores / sqrt_dk.
struct QkStore {
  float* scores;
  float* scaled;
  float sqrt_dk;

  // v holds the four scores at offsets at .. at + 3 of scores and scaled.
  __device__ __forceinline__ void store4(std::size_t at, const float* v) const {
    *reinterpret_cast<float4*>(scores + at) = make_float4(v[0], v[1], v[2], v[3]);
    *reinterpret_cast<float4*>(scaled + at) =
        make_float4(v[0] / sqrt_dk, v[1] / sqrt_dk, v[2] / sqrt_dk, v[3] / sqrt_dk);
  }
  // x is the score at offset at of scores and scaled.
  __device__ __forceinline__ void store1(std::size_t at, float x) const {
    scores[at] = x;
    scaled[at] = x / sqrt_dk;
  }
};

// q is (n, d_k), k is (m, d_k) for head blockIdx.z (pointers already at head 0 of this launch);
// scores and scaled are (n, m) per head, heads stacked along rows. K is read row-major as Q is:
// its rows are the columns of S, so both operands load with KAlongRows.
__global__ void __launch_bounds__(QkTiled::kThreads)
    qk_tiled(const float* __restrict__ q, const float* __restrict__ k, float* __restrict__ scores,
             float* __restrict__ scaled, int n, int m, int d_k, float sqrt_dk) {
  using G = QkTiled;
  const std::size_t head = blockIdx.z;
  const int row0 = blockIdx.y * G::BM;
  const int col0 = blockIdx.x * G::BN;
  tiled_gemm<G>(KAlongRows{q + head * n * d_k, d_k, row0, n},
                KAlongRows{k + head * m * d_k, d_k, col0, m}, d_k, head, row0, col0, n, m,
                QkStore{scores, scaled, sqrt_dk});
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

// Configuration 1: two blocks per SM up to d_k = kQkChainedMaxDk, one above.
void launch_qk_tc(const float* q, const float* k, float* scores, float* scaled, int hc, int n,
                  int m, int d_k, float sqrt_dk, bool vec, cudaStream_t stream) {
  if (d_k <= kQkChainedMaxDk)
    launch_qk_tc_as<QkTcChained, 2>(q, k, scores, scaled, hc, n, m, d_k, sqrt_dk, vec, stream);
  else  // without the register cap: under it the slice sums spill heavily
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
      launch_qk_tc(qc, kc, sc, ac, hc, n, m, d_k, sqrt_dk, vec, stream);
    } else {
      const dim3 grid((m + QkTiled::BN - 1) / QkTiled::BN, (n + QkTiled::BM - 1) / QkTiled::BM, hc);
      qk_tiled<<<grid, QkTiled::kThreads, 0, stream>>>(qc, kc, sc, ac, n, m, d_k, sqrt_dk);
    }
    ATTNLAB_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace attnlab::cuda
