// Where each lane's operands of mma.sync.m16n8k8 (tf32 inputs, fp32 accumulators) come from in
// the 3xTF32 kernels (kernels/fused_tf32.cu, kernels/gemm_tf32.cuh), as plain index functions.
// The kernels compute every shared-memory address and every register shuffle through these, and
// tests/test_tf32_layout.cpp checks them on the host against an emulation of the instruction
// written from the PTX ISA's fragment tables, so the layout is tested without a GPU.
//
// PTX ISA, "Matrix Fragments for mma.m16n8k8", .tf32 (g = lane / 4, t = lane % 4):
//   A (16 x 8, row-major) a0..a3: row g (a0, a2) or g + 8 (a1, a3); col t (a0, a1) or t + 4
//   B (8 x 8, "col")      b0, b1: row (k) t (b0) or t + 4 (b1); col (n) g
//   C/D (16 x 8, fp32)    c0..c3: row g (c0, c1) or g + 8 (c2, c3); col 2t + (i & 1)
//
// Shared tiles are row-major with a row stride RS (floats). With RS % 32 == 4 the eight rows and
// four columns an A or transposed-B fragment load touches fall in 32 different banks; a row-major
// B fragment (four rows, eight columns) needs RS % 32 == 8.
#pragma once

// (Its own macro: core/modifications.h's ATTNLAB_HD has no __forceinline__, and both reach the
// 3xTF32 kernel.)
#if defined(__CUDACC__)
#define ATTNLAB_TF32_FN __host__ __device__ __forceinline__
#else
#define ATTNLAB_TF32_FN inline
#endif

namespace attnlab::cuda::tf32 {

ATTNLAB_TF32_FN constexpr int group(int lane) { return lane >> 2; }
ATTNLAB_TF32_FN constexpr int thread_in_group(int lane) { return lane & 3; }

// A (row-major, stride rs) as the A operand: element i of lane's fragment for k chunk kc
// (columns 8kc .. 8kc+7) of a 16-row tile, as an offset from the tile's first row. In the fused
// kernel A is Q (rows = queries, columns = dims); in the staged P V GEMM, P.
ATTNLAB_TF32_FN constexpr int a_frag_offset(int lane, int i, int kc, int rs) {
  return (group(lane) + 8 * (i & 1)) * rs + 8 * kc + thread_in_group(lane) + 4 * (i >> 1);
}

// B given as its transpose (N rows of K values, stride rs), the layout of K in S = Q K^T where
// B[k = dim][n = key] = K[key][dim]: element i (0, 1) of lane's fragment for n tile nt (rows
// 8nt .. 8nt+7) and k chunk kc.
ATTNLAB_TF32_FN constexpr int bt_frag_offset(int lane, int i, int nt, int kc, int rs) {
  return (8 * nt + group(lane)) * rs + 8 * kc + thread_in_group(lane) + 4 * i;
}

// B row-major (K rows of N values, stride rs), the layout of V in the staged O = P V: element i
// (0, 1) of lane's fragment for k chunk kc (rows 8kc .. 8kc+7) and n tile nt (columns 8nt ..).
// Conflict-free for rs % 32 == 8 (the four k rows then start 8 banks apart).
ATTNLAB_TF32_FN constexpr int b_frag_offset(int lane, int i, int kc, int nt, int rs) {
  return (8 * kc + thread_in_group(lane) + 4 * i) * rs + 8 * nt + group(lane);
}

// P V sums over keys, so the keys of a chunk may be taken in any order as long as P (the A
// operand) and V (the B operand) agree. The S accumulators give lane keys 2t and 2t + 1 of a
// chunk; the A operand wants k = t and t + 4. Taking k = t as key 2t and k = t + 4 as key 2t + 1
// lets P go from the S accumulators to the A operand inside each lane, with no shuffles:
//   key_of_k(k): k < 4 -> 2k, else 2(k - 4) + 1
ATTNLAB_TF32_FN constexpr int pv_key_of_k(int k) { return k < 4 ? 2 * k : 2 * (k - 4) + 1; }

// A-operand element i of P for key chunk j = accumulator element a_from_c(i) of S's n-tile j:
// a0 (row g, k t -> key 2t) = c0; a1 (row g+8, key 2t) = c2; a2 (row g, k t+4 -> key 2t+1) = c1;
// a3 (row g+8, key 2t+1) = c3.
ATTNLAB_TF32_FN constexpr int p_a_from_c(int i) { return i == 0 ? 0 : i == 1 ? 2 : i == 2 ? 1 : 3; }

// V (rows = keys, cols = dims) as the B operand of O += P V, B[k][n = dim] = V[key_of_k(k)][dim]:
// element i (0, 1) of lane's fragment for key chunk j (keys 8j .. 8j+7) and dim tile dt.
ATTNLAB_TF32_FN constexpr int v_frag_offset(int lane, int i, int j, int dt, int rs) {
  return (8 * j + pv_key_of_k(thread_in_group(lane) + 4 * i)) * rs + 8 * dt + group(lane);
}

// Accumulator element i of lane: its row (0..15) and column (0..7) within the 16 x 8 tile.
ATTNLAB_TF32_FN constexpr int acc_row(int lane, int i) { return group(lane) + 8 * (i >> 1); }
ATTNLAB_TF32_FN constexpr int acc_col(int lane, int i) { return 2 * thread_in_group(lane) + (i & 1); }

}  // namespace attnlab::cuda::tf32
