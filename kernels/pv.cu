// Stage 4 of the staged chain: O = P V, per head (P = the attention weights).
// Two versions, chosen by ATTNLAB_STAGED_CONFIG at every launch (kernels/tile_config.h):
//   0 shared-memory tiled, register-blocked, fp32 FMA on CUDA cores
//     (kernels/gemm_tiled.cuh, the loop shared with kernels/qk.cu). Each block
//     computes a 128 x BN tile of O (BN = 64 for d_v <= 64, else 128) walking the key axis in
//     slices of 16; each thread accumulates an 8 x (BN / 16) sub-tile in registers.
//   1 (default) the same block tiles on tensor cores in 3xTF32 (kernels/gemm_tf32.cuh: 8 warps of
//     32 x 32 (BN 64) or 64 x 32 (BN 128), keys in slices of 32 through double-buffered shared
//     memory, each slice summed apart and added with round-to-nearest FADDs), fp32-accurate,
//     two blocks per SM at BN 64 (at BN 128 that would spill: one). P (N x N) is read once either
//     way;
//     at d_v = 64 the CUDA-core version's FMAs take longer than that read, this one should not
//     (unmeasured).
// With a causal mask the slices right of the block's last row are skipped: softmax wrote exactly
// 0 there, so skipping is exact and halves the work. Any n, m, d_v: tiles are zero-filled past
// the edges and stores are guarded.
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

constexpr int kBM = 128;  // query rows per block, in both versions
// Version 0: each block a 128 x BN tile of O, 16 keys a slice, each thread 8 x TN (TN / 4 float4
// groups of columns, 64 apart).
template <int BN, int TN>
using PvTiled = TiledGemm<kBM, BN, 16, 8, TN>;
constexpr int kMaxGridZ = 65535;

// Writes O as it is.
struct PvStore {
  float* o;

  // v holds the four outputs at offsets at .. at + 3 of o.
  __device__ __forceinline__ void store4(std::size_t at, const float* v) const {
    *reinterpret_cast<float4*>(o + at) = make_float4(v[0], v[1], v[2], v[3]);
  }
  // x is the output at offset at of o.
  __device__ __forceinline__ void store1(std::size_t at, float x) const { o[at] = x; }
};

// p is (n, m) and v is (m, d_v) for head blockIdx.z (pointers at head 0 of this launch);
// o is (n, d_v) per head. BN output columns per block, TN per thread (TN / 4 float4 groups).
// P loads with KAlongRows (keys along its rows), V with KAlongCols (keys down its columns).
// Two blocks per multiprocessor (<= 128 registers a thread) keep 16 warps in flight to hide the
// shared-memory and global latencies; the 128-wide version would otherwise take ~157 registers.
template <int BN, int TN>
__global__ void __launch_bounds__(PvTiled<BN, TN>::kThreads, 2)
    pv_tiled(const float* __restrict__ p, const float* __restrict__ v, float* __restrict__ o,
             int n, int m, int d_v, bool causal) {
  using G = PvTiled<BN, TN>;
  const std::size_t head = blockIdx.z;
  const int row0 = blockIdx.y * G::BM;
  const int col0 = blockIdx.x * G::BN;
  // Causal (n == m): row r has weight 0 for every key > r, so no key past the block's last row
  // contributes.
  const int k_end = causal ? std::min(m, row0 + G::BM) : m;
  tiled_gemm<G>(KAlongRows{p + head * n * m, m, row0, n},
                KAlongCols{v + head * m * d_v, d_v, col0, d_v}, k_end, head, row0, col0, n, d_v,
                PvStore{o});
}

template <int BN>
using PvTc = TcGemm<128, BN, BN == 64 ? 32 : 64, 32, /*B_TRANSPOSED=*/false, /*SLICE_SUMS=*/true>;

// Version 1: grid and pointers as pv_tiled; `vec`: m and d_v multiples of 4, p and v 16-byte
// aligned. MINB: __launch_bounds__ minimum blocks per SM (0: none).
template <int BN, int MINB>
__global__ void __launch_bounds__(PvTc<BN>::kThreads, MINB)
    pv_tc(const float* __restrict__ p, const float* __restrict__ v, float* __restrict__ o, int n,
          int m, int d_v, bool causal, bool vec) {
  using G = PvTc<BN>;
  extern __shared__ float4 smem_pv[];
  const std::size_t head = blockIdx.z;
  const int row0 = blockIdx.y * G::BM;
  const int col0 = blockIdx.x * G::BN;
  // Causal (n == m): no key past the block's last row has a non-zero weight in it.
  const int k_end = causal ? std::min(m, row0 + G::BM) : m;
  float acc[G::MT][G::NT][4];
  tc_gemm_tile<G>(p + (head * n + row0) * m, m, v + head * m * d_v + col0, d_v,
                  min(G::BM, n - row0), min(G::BN, d_v - col0), k_end, vec,
                  reinterpret_cast<float*>(smem_pv), acc);
  const bool pairs = (d_v % 2) == 0;  // float2 stores (c is even, so c + 1 < d_v too)
  tc_for_each_pair<G>(acc, row0, col0, n, d_v, [&](int r, int c, float v0, float v1) {
    float* at = o + (head * n + r) * static_cast<std::size_t>(d_v) + c;
    if (pairs) {
      *reinterpret_cast<float2*>(at) = make_float2(v0, v1);
    } else {
      at[0] = v0;
      if (c + 1 < d_v) at[1] = v1;
    }
  });
}

// Version 0 (TN columns a thread) or 1 (MINB) for one tile width, every head.
template <int BN, int TN, int MINB>
void launch_pv_tiles(const float* p, const float* v, float* o, int heads, int n, int m, int d_v,
                     bool causal, bool tc, cudaStream_t stream) {
  using G = PvTc<BN>;
  if (tc) allow_dynamic_smem<pv_tc<BN, MINB>>(G::smem_bytes);
  const bool vec = m % 4 == 0 && d_v % 4 == 0 && aligned16(p) && aligned16(v);
  // gridDim.z is limited to 65535: launch heads in chunks, moving the pointers to each chunk.
  for (int h0 = 0; h0 < heads; h0 += kMaxGridZ) {
    const int hc = std::min(kMaxGridZ, heads - h0);
    const dim3 grid((d_v + BN - 1) / BN, (n + kBM - 1) / kBM, hc);
    const std::size_t h = h0;
    if (tc) {
      pv_tc<BN, MINB><<<grid, G::kThreads, G::smem_bytes, stream>>>(
          p + h * n * m, v + h * m * d_v, o + h * n * d_v, n, m, d_v, causal, vec);
    } else {
      pv_tiled<BN, TN><<<grid, PvTiled<BN, TN>::kThreads, 0, stream>>>(
          p + h * n * m, v + h * m * d_v, o + h * n * d_v, n, m, d_v, causal);
    }
    ATTNLAB_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace

void launch_pv(const float* weights, const float* v, float* output, int heads, int n, int m,
               int d_v, bool causal, cudaStream_t stream) {
  if (heads <= 0 || n <= 0 || m <= 0 || d_v <= 0) return;
  const int config = staged_config();
  const bool tc = config != 0;
  // A 64-wide tile for the narrow outputs (d_v <= 64) so that P is read once and few columns are
  // computed for nothing; 128 wide above, so that d_v = 128 still reads P only once.
  if (d_v <= 64) {
    if (tc)
      launch_pv_tiles<64, 4, 2>(weights, v, output, heads, n, m, d_v, causal, tc, stream);
    else
      launch_pv_tiles<64, 4, 0>(weights, v, output, heads, n, m, d_v, causal, tc, stream);
  } else {
    // Two blocks per SM would spill 456 bytes here.
    launch_pv_tiles<128, 8, 0>(weights, v, output, heads, n, m, d_v, causal, tc, stream);
  }
}

}  // namespace attnlab::cuda
