// Where the sm_90a fused bf16 kernel (kernels/sm90a/fused_wgmma.cu, ATTNLAB_FUSED_CONFIG 3 and 4)
// puts its tiles in shared memory, and the shared-memory matrix descriptors it gives
// wgmma.mma_async, as plain index functions. The kernel computes every shared address and every
// descriptor through these; tests/test_wgmma_layout.cpp reads the tiles back on the host the way
// the PTX ISA's canonical layouts say wgmma reads them ("Shared Memory Matrix Layout", the
// 128-byte swizzle, K-major and MN-major) and checks that each operand element is the one meant.
//
// A tile of R rows by D bf16 columns (Q, K or V; D = 64 or 128) is stored as D / 64 panels of
// R rows x 64 columns: one 128-byte line per row, panels one after another. Within a panel, the
// 16-byte chunk c (columns 8c .. 8c + 7) of row r sits at chunk c ^ (r % 8): the 128-byte swizzle
// (TMA's SWIZZLE_128B pattern, which wgmma's layout type 1 reads), so that the eight rows of a
// core matrix fall in eight different bank groups. Every panel starts 1024-byte aligned (the
// swizzle is taken on address bits 4-6 against bits 7-9).
//
// Descriptors (PTX ISA, "Matrix Descriptor Format"): bits 0-13 start address >> 4, 16-29 leading
// byte offset (LBO) >> 4, 32-45 stride byte offset (SBO) >> 4, 49-51 base offset (0: panels are
// 1024-byte aligned), 62-63 layout type (1: 128-byte swizzle).
//   S = Q Kᵀ: A = Q and B = K, both K-major (the head dim contiguous): rows 8 apart are SBO = 1024
//     bytes apart, LBO is unused by the swizzled K-major layout (1 by convention); the k-step s
//     of 16 columns starts at panel s / 4, byte 32 (s % 4) of its first line.
//   O += P V: B = V, MN-major (N = the head dim contiguous, K = keys down the rows; imm-trans-b 1):
//     8 keys are SBO = 1024 bytes apart, the next 64 head-dim columns (the next panel) LBO = R x 128
//     bytes apart; the k-step of keys 16s .. 16s + 15 starts at line 16s.
// Register fragments (PTX ISA, wgmma .m64nNk16): warp w of the warpgroup holds rows 16w .. 16w + 15
// of the 64, in mma.m16n8k16's layout repeated along N: accumulator element i of a lane is row
// g + 8 ((i / 2) % 2), column 8 (i / 4) + 2t + (i % 2); the A fragment from registers (P) is
// mma.m16n8k16's A fragment. So the P of S's columns 16s .. 16s + 15 is S's elements 8s .. 8s + 7,
// packed in pairs (p_element), as in kernels/fused_bf16.cu.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define ATTNLAB_WGMMA_FN __host__ __device__ __forceinline__
#else
#define ATTNLAB_WGMMA_FN inline
#endif

namespace attnlab::cuda::wgmma {

inline constexpr int kPanelCols = 64;    // bf16 columns of a panel: one 128-byte line a row
inline constexpr int kLineBytes = 128;
inline constexpr int kAtomBytes = 1024;  // 8 lines: the swizzle's period, and SBO

// Byte offset, from its panel's start, of chunk `chunk` (0..7) of line `row`.
ATTNLAB_WGMMA_FN constexpr int swizzled_chunk(int row, int chunk) {
  return row * kLineBytes + ((chunk ^ (row & 7)) << 4);
}

// Byte offset of element (row, col) in a tile of `rows` rows stored as panels.
ATTNLAB_WGMMA_FN constexpr int tile_offset(int rows, int row, int col) {
  return (col / kPanelCols) * rows * kLineBytes + swizzled_chunk(row, (col % kPanelCols) / 8) +
         (col % 8) * 2;
}

// The bytes a tile of `rows` x `cols` takes (cols a multiple of 64).
ATTNLAB_WGMMA_FN constexpr int tile_bytes(int rows, int cols) { return rows * cols * 2; }

// A descriptor for the 128-byte swizzle (layout type 1), base offset 0.
ATTNLAB_WGMMA_FN constexpr std::uint64_t descriptor(std::uint32_t start, std::uint32_t lbo,
                                                    std::uint32_t sbo) {
  return (static_cast<std::uint64_t>((start & 0x3FFFFu) >> 4)) |
         (static_cast<std::uint64_t>((lbo & 0x3FFFFu) >> 4) << 16) |
         (static_cast<std::uint64_t>((sbo & 0x3FFFFu) >> 4) << 32) | (std::uint64_t{1} << 62);
}

// Byte offsets from a tile's start (the tile of `rows` rows, as above) where the descriptors of
// one k-step start, and their LBO and SBO.
// K-major operand (Q rows, or K rows as B of S = Q Kᵀ), k-step s (columns 16s .. 16s + 15), the
// operand's first row at `row0` (a multiple of 8: a warpgroup's 64 rows of Q).
ATTNLAB_WGMMA_FN constexpr int kmajor_start(int rows, int row0, int s) {
  return (s / 4) * rows * kLineBytes + row0 * kLineBytes + (s % 4) * 32;
}
inline constexpr std::uint32_t kKMajorLbo = 16;  // unused by the swizzled K-major layout
inline constexpr std::uint32_t kKMajorSbo = kAtomBytes;
// MN-major operand (V as B of O += P V): k-step s (keys 16s .. 16s + 15).
ATTNLAB_WGMMA_FN constexpr int mnmajor_start(int s) { return s * 16 * kLineBytes; }
ATTNLAB_WGMMA_FN constexpr std::uint32_t mnmajor_lbo(int rows) { return rows * kLineBytes; }
inline constexpr std::uint32_t kMNMajorSbo = kAtomBytes;

// Accumulator element i of a lane (wgmma .m64nN, fp32): its row within the warp's 16 and column.
ATTNLAB_WGMMA_FN constexpr int acc_row(int lane, int i) { return (lane >> 2) + 8 * ((i >> 1) & 1); }
ATTNLAB_WGMMA_FN constexpr int acc_col(int lane, int i) { return 8 * (i >> 2) + 2 * (lane & 3) + (i & 1); }

// The A fragment of O += P V for keys 16 kc .. 16 kc + 15 from S's accumulators: register r
// (mma.m16n8k16's A: row g + 8 (r % 2), columns 2t + 8 (r / 2) + {0, 1}) packs accumulator
// elements p_element(kc, r, 0) (low half) and that + 1 (high half).
ATTNLAB_WGMMA_FN constexpr int p_element(int kc, int r, int half) {
  return 8 * kc + 4 * (r >> 1) + 2 * (r & 1) + half;
}

}  // namespace attnlab::cuda::wgmma
