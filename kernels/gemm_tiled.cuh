// The block-tile GEMM of the staged chain's CUDA-core stages (ATTNLAB_STAGED_CONFIG=0:
// kernels/qk.cu's S = Q K^T and kernels/pv.cu's O = P V): shared-memory tiled, register-blocked,
// fp32 FMA. The stages differ only in how their operands lie in memory and in what they store, so
// the loop is written once and those two parts are policies; each stage file keeps its own kernel
// (launch bounds, grid) and its store policy.
//
// A block of (BM / TM) x (BN / TN) threads computes a BM x BN tile of C = A B over k in
// [0, k_end), in slices of BK through shared memory. Thread (ty, tx) accumulates rows
// ty TM .. ty TM + TM - 1 and TN / 4 float4 groups of columns, 4 BN / TN apart, in registers, one
// fmaf per product in ascending k. Both operands are held k-major in shared memory
// (tile[kk][i]), so a thread's rows and each of its column groups are one float4 load per k step.
// Loaders:
//   KAlongRows  a matrix whose rows are the tile's rows (or columns), k contiguous in each: Q and
//               P as A, and K as B of Q K^T (B's transpose); the load transposes it.
//   KAlongCols  a matrix of k rows, the tile's columns contiguous in each: V as B of P V.
// A store policy gets the results: store4(at, v) for four consecutive columns from element
// offset `at` of the output where float4 stores are legal, store1(at, x) for one element
// elsewhere. Any shape: tiles are zero-filled past the edges (so the edge slices add zeros and
// the loop needs no guard) and stores are guarded.
#pragma once

#include <cstddef>

namespace attnlab::cuda {

// One block tile: BM x BN outputs, BK-deep k slices, TM x TN outputs a thread.
template <int BM_, int BN_, int BK_, int TM_, int TN_>
struct TiledGemm {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, TM = TM_, TN = TN_;
  static constexpr int kThreadsX = BN / TN;
  static constexpr int kThreads = (BM / TM) * kThreadsX;
  static constexpr int kGroupStride = kThreadsX * 4;  // column distance between a thread's groups
  // One float4 of padding per shared row keeps float4 alignment and turns the transposing stores
  // (consecutive threads write consecutive k, i.e. rows BM apart) from 16-way into 2-way
  // conflicts.
  static constexpr int kPad = 4;
  static_assert(BM % TM == 0 && BN % TN == 0, "one thread per sub-tile");
  static_assert(BM * BK % kThreads == 0 && BN * BK % kThreads == 0, "whole loads per thread");
  static_assert(TM % 4 == 0 && TN % 4 == 0, "rows and columns are read as float4 groups");
};

// src is a row-major matrix of `rows` rows (stride ld) whose row `first + i` holds k for tile
// row (or column) i: tile[kk][i] = src[first + i][k0 + kk], 0 past `rows` or k_end.
struct KAlongRows {
  const float* src;
  int ld;
  int first;
  int rows;

  // tile is (BK, W + pad), W tile rows a slice, THREADS threads sharing the load.
  template <int W, int BK, int THREADS, int RS>
  __device__ __forceinline__ void load(float (&tile)[BK][RS], int k0, int k_end) const {
    // With BK = 16 a warp reads two rows of 16 consecutive floats: contiguous 64-byte runs of
    // global memory.
#pragma unroll
    for (int l = 0; l < W * BK / THREADS; ++l) {
      const int idx = threadIdx.x + l * THREADS;
      const int i = idx / BK, kk = idx % BK;
      const int gi = first + i, gk = k0 + kk;
      tile[kk][i] = (gi < rows && gk < k_end) ? src[static_cast<std::size_t>(gi) * ld + gk] : 0.f;
    }
  }
};

// src is a row-major matrix of k rows and `cols` columns (stride ld): tile[kk][c] =
// src[k0 + kk][first + c], 0 past k_end or `cols`.
struct KAlongCols {
  const float* src;
  int ld;
  int first;
  int cols;

  // tile is (BK, W + pad), W tile columns a slice, THREADS threads sharing the load.
  template <int W, int BK, int THREADS, int RS>
  __device__ __forceinline__ void load(float (&tile)[BK][RS], int k0, int k_end) const {
#pragma unroll
    for (int l = 0; l < W * BK / THREADS; ++l) {
      const int idx = threadIdx.x + l * THREADS;
      const int kk = idx / W, c = idx % W;
      const int gk = k0 + kk, gc = first + c;
      tile[kk][c] = (gk < k_end && gc < cols) ? src[static_cast<std::size_t>(gk) * ld + gc] : 0.f;
    }
  }
};

// One block tile of C = A B, written through `store`: A (BM, k_end) as load_a gives it, B
// (k_end, BN) as load_b gives it, C (rows, cols) per head with heads stacked along rows, the
// block's tile at (row0, col0) of head `head`. store.store4 / store.store1 get element offsets
// into C, rows < rows and columns < cols only. Every thread of the block must call it.
// It is the kernels' whole body, shared tiles and stores included: with the accumulation and the
// stores in two functions ptxas allocated qk_tiled 151 registers instead of 128.
template <class G, class LoadA, class LoadB, class Store>
__device__ __forceinline__ void tiled_gemm(const LoadA& load_a, const LoadB& load_b, int k_end,
                                           std::size_t head, int row0, int col0, int rows,
                                           int cols, const Store& store) {
  __shared__ __align__(16) float as[G::BK][G::BM + G::kPad];  // as[kk][row]
  __shared__ __align__(16) float bs[G::BK][G::BN + G::kPad];  // bs[kk][col]
  const int tid = threadIdx.x;
  const int tx = tid % G::kThreadsX;
  const int ty = tid / G::kThreadsX;

  float acc[G::TM][G::TN] = {};

  for (int k0 = 0; k0 < k_end; k0 += G::BK) {
    load_a.template load<G::BM, G::BK, G::kThreads>(as, k0, k_end);
    load_b.template load<G::BN, G::BK, G::kThreads>(bs, k0, k_end);
    __syncthreads();

#pragma unroll
    for (int kk = 0; kk < G::BK; ++kk) {
      float a[G::TM], b[G::TN];
#pragma unroll
      for (int i = 0; i < G::TM; i += 4) {
        const float4 t = *reinterpret_cast<const float4*>(&as[kk][ty * G::TM + i]);
        a[i] = t.x, a[i + 1] = t.y, a[i + 2] = t.z, a[i + 3] = t.w;
      }
#pragma unroll
      for (int g = 0; g < G::TN / 4; ++g) {
        const float4 t = *reinterpret_cast<const float4*>(&bs[kk][g * G::kGroupStride + tx * 4]);
        b[g * 4] = t.x, b[g * 4 + 1] = t.y, b[g * 4 + 2] = t.z, b[g * 4 + 3] = t.w;
      }
#pragma unroll
      for (int i = 0; i < G::TM; ++i)
#pragma unroll
        for (int j = 0; j < G::TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    // The next slice overwrites the tiles other threads may still be reading.
    __syncthreads();
  }

  // Epilogue: a thread's column groups are kGroupStride apart, so one store instruction of a
  // half-warp covers 256 contiguous bytes of a row.
  const bool vec = (cols % 4) == 0;  // rows start 16-byte aligned, so float4 stores are legal
#pragma unroll
  for (int i = 0; i < G::TM; ++i) {
    const int gr = row0 + ty * G::TM + i;
    if (gr >= rows) break;
    const std::size_t base = (head * rows + gr) * static_cast<std::size_t>(cols);
#pragma unroll
    for (int g = 0; g < G::TN / 4; ++g) {
      const int c = col0 + g * G::kGroupStride + tx * 4;
      const float* v = &acc[i][g * 4];
      if (vec && c < cols) {
        store.store4(base + c, v);
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j)
          if (c + j < cols) store.store1(base + c + j, v[j]);
      }
    }
  }
}

}  // namespace attnlab::cuda
