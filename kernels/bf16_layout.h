// Where each lane's operands of mma.sync.m16n8k16 (bf16 inputs, fp32 accumulators) come from in
// the tensor-core backward (kernels/backward_mma.cu), as plain index functions: the shared-memory
// row and column whose address a lane gives ldmatrix.x4, and where an accumulator element sits.
// The kernel computes every ldmatrix address and every store of an accumulator through these, and
// tests/test_bf16_layout.cpp checks them on the host against an emulation of ldmatrix and mma
// written from the PTX ISA's tables, product by product, so the layout is tested without a GPU.
//
// PTX ISA, "Matrix Fragments for mma.m16n8k16" with .bf16 (g = lane / 4, t = lane % 4; each .b32
// register holds two bf16, the lower-indexed element in the low half):
//   A (16 x 16, row-major) a0..a3: row g (a0, a2) or g + 8 (a1, a3); cols 2t, 2t + 1 (a0, a1) or
//                                   2t + 8, 2t + 9 (a2, a3)
//   B (16 x 8, "col")      b0, b1:  rows (k) 2t, 2t + 1 (b0) or 2t + 8, 2t + 9 (b1); col (n) g
//   C/D (16 x 8, fp32)     c0..c3:  row g (c0, c1) or g + 8 (c2, c3); col 2t + (i & 1)
// ldmatrix.sync.aligned.m8n8.x4.b16: lanes 8i .. 8i + 7 give the addresses of rows 0..7 of matrix
// i, and register i of lane l receives matrix i's row l / 4, columns 2 (l % 4), +1; with .trans
// it receives rows 2 (l % 4), +1 of column l / 4 instead.
//
// So one ldmatrix.x4 gives:
//   an A fragment of a row-major tile (rows = M, cols = K)              addresses a_rows
//   an A fragment of a tile stored transposed (rows = K, cols = M)      addresses b_rows, .trans
//   the B fragments of two n tiles of a tile stored transposed
//     (rows = N, cols = K: K in S = Q Kᵀ)                               addresses b_rows
//   the B fragments of two n tiles of a row-major tile
//     (rows = K, cols = N: V in O = P V)                                addresses a_rows, .trans
// The two address patterns differ only in which of the lane's bits 3 and 4 picks the row half.
#pragma once

#if defined(__CUDACC__)
#define ATTNLAB_BF16_FN __host__ __device__ __forceinline__
#else
#define ATTNLAB_BF16_FN inline
#endif

namespace attnlab::cuda::bf16mma {

ATTNLAB_BF16_FN constexpr int group(int lane) { return lane >> 2; }
ATTNLAB_BF16_FN constexpr int thread_in_group(int lane) { return lane & 3; }

// The row (0..15) and column (0 or 8) of a 16 x 16 tile whose address lane gives ldmatrix.x4 when
// matrix i = lane / 8 is (rows 8 (i & 1), cols 8 (i >> 1)): the A fragment's order, or with
// .trans the B fragments of two n tiles of a row-major (k, n) tile.
ATTNLAB_BF16_FN constexpr int a_rows_row(int lane) { return (lane & 7) + 8 * ((lane >> 3) & 1); }
ATTNLAB_BF16_FN constexpr int a_rows_col(int lane) { return 8 * (lane >> 4); }

// The same when matrix i is (rows 8 (i >> 1), cols 8 (i & 1)): the B fragments of two n tiles of
// an (n, k) tile, or with .trans an A fragment of an (k, m) tile.
ATTNLAB_BF16_FN constexpr int b_rows_row(int lane) { return (lane & 7) + 8 * (lane >> 4); }
ATTNLAB_BF16_FN constexpr int b_rows_col(int lane) { return 8 * ((lane >> 3) & 1); }

// Accumulator element i of lane: its row (0..15) and column (0..7) within the 16 x 8 tile.
// Elements 0 and 1 (and 2 and 3) are neighbours in a row: one bf16x2 word when stored.
ATTNLAB_BF16_FN constexpr int acc_row(int lane, int i) { return group(lane) + 8 * (i >> 1); }
ATTNLAB_BF16_FN constexpr int acc_col(int lane, int i) { return 2 * thread_in_group(lane) + (i & 1); }

}  // namespace attnlab::cuda::bf16mma
