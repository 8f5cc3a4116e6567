// The block-tile GEMM main loop of the staged chain's tensor-core stages (ATTNLAB_STAGED_CONFIG=1:
// kernels/qk.cu's S = Q K^T and kernels/pv.cu's O = P V), in 3xTF32 (kernels/mma_tf32.cuh), so
// the stages stay fp32-accurate. Each stage file keeps its own kernel and epilogue; this is the
// part they share.
//
// A block of WARPS_M x WARPS_N warps computes a BM x BN tile of C = A B over k in [0, k_end):
//   A: rows of the tile's M range, row-major, stride lda (Q, or P)
//   B: B_TRANSPOSED: N rows of K values, stride ldb (K in Q K^T); else K rows of N values (V)
// Each warp owns a WM x WN sub-tile (WM / 16 x WN / 8 mma tiles) in registers. k is walked in
// slices of 32, double-buffered through shared memory with cp.async (16-byte chunks) when `vec`
// (lda, ldb multiples of 4 and 16-byte aligned bases; the k range then ends on a multiple of 4),
// else with guarded scalar loads. Rows, columns and k past the valid ranges are zero-filled.
// Shared strides keep every fragment load conflict-free: 36 floats for A and transposed B
// (36 % 32 == 4), BN + 8 for row-major B ((BN + 8) % 32 == 8).
#pragma once

#include "kernels/async_copy.cuh"
#include "kernels/mma_tf32.cuh"
#include "kernels/tf32_layout.h"

#include <cstddef>
#include <cstdint>

namespace attnlab::cuda {

// SLICE_SUMS: each k slice is summed in fresh mma accumulators and added to the running sums with
// round-to-nearest FADDs. Tensor cores round their fp32 sums toward zero, a bias that grows with
// the number of chained mma: harmless over Q K^T's d_k (at most 3 d_k / 8 of them), not over
// P V's m keys (6144 at m = 16384), which therefore sets it.
template <int BM_, int BN_, int WM_, int WN_, bool B_TRANSPOSED, bool SLICE_SUMS>
struct TcGemm {
  static constexpr int BM = BM_, BN = BN_, WM = WM_, WN = WN_;
  static constexpr bool kBTransposed = B_TRANSPOSED;
  static constexpr bool kSliceSums = SLICE_SUMS;
  static constexpr int BK = 32;  // k per shared slice
  static constexpr int kWarpsM = BM / WM;
  static constexpr int kWarpsN = BN / WN;
  static constexpr int kThreads = 32 * kWarpsM * kWarpsN;
  static constexpr int MT = WM / 16;  // mma row tiles per warp
  static constexpr int NT = WN / 8;   // mma column tiles per warp
  static_assert(BM % WM == 0 && BN % WN == 0 && WM % 16 == 0 && WN % 8 == 0);
  static constexpr int RSA = BK + 4;
  static constexpr int RSB = B_TRANSPOSED ? BK + 4 : BN + 8;
  static_assert(RSA % 32 == 4 && (B_TRANSPOSED ? RSB % 32 == 4 : RSB % 32 == 8));
  static constexpr int a_floats = BM * RSA;
  static constexpr int b_floats = B_TRANSPOSED ? BN * RSB : BK * RSB;
  // A[2], then B[2].
  static constexpr std::size_t smem_bytes = 2 * (a_floats + b_floats) * sizeof(float);
};

// ROWS x COLS floats from global (stride ld; rows_valid rows and cols_valid columns hold data)
// into shared (stride RS); the rest of the tile becomes 0. The cp.async branch issues the same
// copies as cp_async_tile (kernels/async_copy.cuh) but computes the addresses in another order;
// through cp_async_tile ptxas schedules qk_tc and pv_tc differently (same instructions, other
// order and registers), so this loop stays and their machine code stays as it was.
template <int ROWS, int COLS, int RS, int THREADS>
__device__ __forceinline__ void tc_load_tile(float* dst, const float* src, int ld, int rows_valid,
                                             int cols_valid, bool vec) {
  if (vec) {
    constexpr int chunks = COLS / 4;
    for (int idx = threadIdx.x; idx < ROWS * chunks; idx += THREADS) {
      const int r = idx / chunks;
      const int c = 4 * (idx % chunks);
      const bool valid = r < rows_valid && c < cols_valid;
      cp_async16(dst + r * RS + c, valid ? src + static_cast<std::size_t>(r) * ld + c : src,
                 valid);
    }
  } else {
    for (int idx = threadIdx.x; idx < ROWS * COLS; idx += THREADS) {
      const int r = idx / COLS;
      const int c = idx % COLS;
      dst[r * RS + c] =
          r < rows_valid && c < cols_valid ? src[static_cast<std::size_t>(r) * ld + c] : 0.f;
    }
  }
}

// acc (zeroed here) = the warp's WM x WN part of the block tile. `a` points at the tile's first
// row (k = 0), `b` at its first column: B_TRANSPOSED ? row col0 : column col0 of row 0.
// m_valid / n_valid: rows / columns of the tile inside the matrices. smem: G::smem_bytes, 16-byte
// aligned. Accumulator element e of tile (mt, nt) is C[WM * warp_m + 16 mt + acc_row(lane, e)]
// [WN * warp_n + 8 nt + acc_col(lane, e)] (tile coordinates).
template <class G>
__device__ __forceinline__ void tc_gemm_tile(const float* a, int lda, const float* b, int ldb,
                                             int m_valid, int n_valid, int k_end, bool vec,
                                             float* smem, float (&acc)[G::MT][G::NT][4]) {
  constexpr bool B_TRANSPOSED = G::kBTransposed;
  constexpr int BK = G::BK;
  constexpr int RSA = G::RSA;
  constexpr int RSB = G::RSB;
  float* As = smem;                      // 2 x (BM, RSA)
  float* Bs = smem + 2 * G::a_floats;    // 2 x (BN, RSB) or 2 x (BK, RSB)
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int warp_m = warp / G::kWarpsN;
  const int warp_n = warp % G::kWarpsN;

#pragma unroll
  for (int mt = 0; mt < G::MT; ++mt) {
#pragma unroll
    for (int nt = 0; nt < G::NT; ++nt) {
      acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.f;
    }
  }

  const auto load_slice = [&](int slice, int buf) {
    const int k0 = slice * BK;
    tc_load_tile<G::BM, BK, RSA, G::kThreads>(As + buf * G::a_floats, a + k0, lda, m_valid,
                                              k_end - k0, vec);
    if constexpr (B_TRANSPOSED) {
      tc_load_tile<G::BN, BK, RSB, G::kThreads>(Bs + buf * G::b_floats, b + k0, ldb, n_valid,
                                                k_end - k0, vec);
    } else {
      tc_load_tile<BK, G::BN, RSB, G::kThreads>(Bs + buf * G::b_floats,
                                                b + static_cast<std::size_t>(k0) * ldb, ldb,
                                                k_end - k0, n_valid, vec);
    }
  };

  const int slices = (k_end + BK - 1) / BK;
  if (slices > 0) {
    load_slice(0, 0);
    cp_async_commit();
  }
  for (int s = 0; s < slices; ++s) {
    const int buf = s & 1;
    // The other buffer was last read in slice s - 1, which ended with a barrier.
    cp_async_next_tile(s + 1 < slices, [=] { load_slice(s + 1, buf ^ 1); });

    const float* At = As + buf * G::a_floats + warp_m * G::WM * RSA;
    const float* Bt = Bs + buf * G::b_floats;
    // The mma accumulators of this slice: acc itself, or fresh ones with kSliceSums.
    float part[G::kSliceSums ? G::MT : 1][G::kSliceSums ? G::NT : 1][4];
    if constexpr (G::kSliceSums) {
#pragma unroll
      for (int mt = 0; mt < G::MT; ++mt) {
#pragma unroll
        for (int nt = 0; nt < G::NT; ++nt) {
          part[mt][nt][0] = part[mt][nt][1] = part[mt][nt][2] = part[mt][nt][3] = 0.f;
        }
      }
    }
#pragma unroll
    for (int kc = 0; kc < BK / 8; ++kc) {
      // The warp's B fragments of this k chunk (NT x 2 values a lane, split), then A one row
      // tile at a time: fewer live registers than holding every A fragment.
      std::uint32_t b_big[G::NT][2], b_small[G::NT][2];
#pragma unroll
      for (int nt = 0; nt < G::NT; ++nt) {
        const int tile_nt = warp_n * G::NT + nt;  // n tile within the block
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const float x = B_TRANSPOSED ? Bt[tf32::bt_frag_offset(lane, i, tile_nt, kc, RSB)]
                                       : Bt[tf32::b_frag_offset(lane, i, kc, tile_nt, RSB)];
          split_tf32(x, b_big[nt][i], b_small[nt][i]);
        }
      }
#pragma unroll
      for (int mt = 0; mt < G::MT; ++mt) {
        std::uint32_t a_big[4], a_small[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          split_tf32(At[16 * mt * RSA + tf32::a_frag_offset(lane, i, kc, RSA)], a_big[i],
                     a_small[i]);
        }
#pragma unroll
        for (int nt = 0; nt < G::NT; ++nt) {
          if constexpr (G::kSliceSums) {
            mma_3xtf32(part[mt][nt], a_big, a_small, b_big[nt], b_small[nt]);
          } else {
            mma_3xtf32(acc[mt][nt], a_big, a_small, b_big[nt], b_small[nt]);
          }
        }
      }
    }
    if constexpr (G::kSliceSums) {
#pragma unroll
      for (int mt = 0; mt < G::MT; ++mt) {
#pragma unroll
        for (int nt = 0; nt < G::NT; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[mt][nt][e] += part[mt][nt][e];
        }
      }
    }
    __syncthreads();  // this buffer is refilled in the next slice
  }
}

// Calls f(r, c, v0, v1) for each accumulator pair of the warp: v0 at (r, c), v1 at (r, c + 1) of
// the whole matrix, r = row0 + the pair's tile row, c = col0 + its tile column (even); only pairs
// with r < rows and c < cols (c + 1 may be == cols: the caller guards the second element).
template <class G, class F>
__device__ __forceinline__ void tc_for_each_pair(const float (&acc)[G::MT][G::NT][4], int row0,
                                                 int col0, int rows, int cols, F&& f) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int r_base = row0 + (warp / G::kWarpsN) * G::WM;
  const int c_base = col0 + (warp % G::kWarpsN) * G::WN;
#pragma unroll
  for (int mt = 0; mt < G::MT; ++mt) {
#pragma unroll
    for (int nt = 0; nt < G::NT; ++nt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = r_base + 16 * mt + tf32::acc_row(lane, 2 * h);
        const int c = c_base + 8 * nt + tf32::acc_col(lane, 0);
        if (r < rows && c < cols) f(r, c, acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]);
      }
    }
  }
}

}  // namespace attnlab::cuda
