// bf16 tensor-core instructions (sm_80+), shared by the fused forward (kernels/fused_bf16.cu) and
// the tensor-core backward (kernels/backward_mma.cu): ldmatrix.x4 with and without .trans, and
// mma.sync.m16n8k16 with fp32 accumulators; and the forward's exp2 and P packing, which the
// sm_90a forward (kernels/sm90a/fused_wgmma.cu) shares. Fragment layouts: kernels/bf16_layout.h. Device code
// only.
#pragma once

#include "kernels/async_copy.cuh"

#include <cstdint>

namespace attnlab::cuda {

// Four 8x8 b16 matrices; lane i supplies the row address of matrix i/8, row i%8.
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// c (16x8 fp32) += a (16x16 bf16, row) * b (16x8 bf16, col).
__device__ __forceinline__ void mma_bf16(float (&c)[4], const std::uint32_t (&a)[4],
                                         std::uint32_t b0, std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The two n tiles of one ldmatrix.x4 B load (registers 0, 1 and 2, 3) against one A fragment.
__device__ __forceinline__ void mma_bf16_pair(float (&c0)[4], float (&c1)[4], const std::uint32_t (&a)[4],
                                              const std::uint32_t (&b)[4]) {
  mma_bf16(c0, a, b[0], b[1]);
  mma_bf16(c1, a, b[2], b[3]);
}

// Two floats as bf16 (round to nearest even) in one register, `lo` in the low half: the
// lower-indexed column of a fragment register.
__device__ __forceinline__ std::uint32_t to_bf16x2(float lo, float hi) {
  std::uint32_t packed;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(packed) : "f"(hi), "f"(lo));
  return packed;
}

__device__ __forceinline__ float fast_exp2(float x) {
  // ex2.approx maps -inf to +0, which is what masked logits need; its relative error (~2^-22)
  // is far below bf16's.
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Packs two floats as bf16 (round to nearest even), `lo` in the low half: the lower-indexed
// column of an mma fragment register. Adds the rounded values to `sum`, so the normaliser is the
// sum of exactly the weights the tensor cores multiply.
__device__ __forceinline__ std::uint32_t pack_bf16(float lo, float hi, float& sum) {
  const std::uint32_t packed = to_bf16x2(lo, hi);
  sum += __uint_as_float(packed << 16) + __uint_as_float(packed & 0xffff0000u);
  return packed;
}

}  // namespace attnlab::cuda
