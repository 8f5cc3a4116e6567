// cp.async helpers shared by the tensor-core kernels (kernels/fused_bf16.cu,
// kernels/fused_tf32.cu, kernels/gemm_tf32.cuh): 16-byte global -> shared copies that bypass
// registers (sm_80+), with zero fill for rows and columns past the end of the data; the loader of
// a whole tile in such copies, and of the fused kernels' K and V tiles of one key tile; and the
// step of a double-buffered loop that starts the next tile's copies and waits for the current one
// (all three). Device code only.
#pragma once

#include <cstddef>
#include <cstdint>

namespace attnlab::cuda {

__device__ __forceinline__ std::uint32_t smem_addr(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte async copy global -> shared; with valid == false the 16 bytes are zero-filled (src-size
// 0), and `src` must still be a valid address.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  const int src_size = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(src_size));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// dst is a (ROWS, RS) shared tile and src the tile's first element in a row-major global matrix
// (row stride ld elements) of which rows_valid rows and cols_valid columns belong to the tile:
// copies ROWS x COLS elements in 16-byte chunks, THREADS threads sharing them, and zero-fills
// every chunk at or past rows_valid or cols_valid. cols_valid must be a multiple of the chunk
// (16 / sizeof(T) elements), and src, ld and RS must keep every chunk 16-byte aligned. Issues the
// copies only: the caller commits them (cp_async_commit) with whatever else belongs to the group.
template <int ROWS, int COLS, int RS, int THREADS, class T>
__device__ __forceinline__ void cp_async_tile(T* dst, const T* src, int ld, int rows_valid,
                                              int cols_valid) {
  constexpr int kChunk = 16 / static_cast<int>(sizeof(T));  // elements per 16-byte copy
  static_assert(16 % sizeof(T) == 0 && COLS % kChunk == 0, "whole 16-byte chunks a row");
  constexpr int chunks = COLS / kChunk;
  for (int idx = threadIdx.x; idx < ROWS * chunks; idx += THREADS) {
    const int r = idx / chunks;
    const int c = idx % chunks;  // in chunks
    const bool valid = r < rows_valid && kChunk * c < cols_valid;
    const T* from = valid ? src + static_cast<std::size_t>(r) * ld + kChunk * c : src;
    cp_async16(dst + r * RS + kChunk * c, from, valid);
  }
}

// The fused kernels' key tile: keys k0 .. k0 + BK - 1 of k (rows of dk elements) and v (rows of
// dv), as far as m, into the (BK, RS) shared tiles ks and vs; keys past m and dims past dk or dv
// up to D are 0.
template <int BK, int D, int RS, int THREADS, class T>
__device__ __forceinline__ void cp_async_kv_tile(T* ks, T* vs, const T* k, const T* v, int k0,
                                                 int m, int dk, int dv) {
  cp_async_tile<BK, D, RS, THREADS>(ks, k + static_cast<std::size_t>(k0) * dk, dk, min(BK, m - k0),
                                    dk);
  cp_async_tile<BK, D, RS, THREADS>(vs, v + static_cast<std::size_t>(k0) * dv, dv, min(BK, m - k0),
                                    dv);
}

// The top of one iteration of a double-buffered loop whose tiles are each one commit group: with
// has_next, load_next() issues the next tile's copies into the other buffer and they are
// committed, then the wait leaves that one group in flight; on the last tile nothing is issued and
// every group is waited for. The barrier makes the current tile, which each thread copied only a
// part of, visible to the whole block. The caller ends each iteration with a barrier of its own,
// so that the buffer load_next() overwrites is no longer being read. The callers' lambdas
// capture by value: capturing by reference, nvcc 13.0 emitted other PTX for the fused tf32 kernel
// (the causal and mask tests moved), by value the same as the loop written out.
template <class LoadNext>
__device__ __forceinline__ void cp_async_next_tile(bool has_next, LoadNext&& load_next) {
  if (has_next) {
    load_next();
    cp_async_commit();
    cp_async_wait<1>();
  } else {
    cp_async_wait<0>();
  }
  __syncthreads();
}

}  // namespace attnlab::cuda
