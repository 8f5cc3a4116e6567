// 3xTF32 on tensor cores (sm_80+), shared by kernels/fused_tf32.cu and kernels/gemm_tf32.cuh:
// every fp32 operand x is split into big = tf32(x) and small = tf32(x - big) (both rounded to
// nearest), and a product a b is taken as a_small b_big + a_big b_small + a_big b_big with fp32
// accumulation: three mma.sync.m16n8k8 tf32 instructions in place of one. The dropped
// a_small b_small term and the rounding of the small parts are about 2^-22 of |a b| (fp32: 2^-24),
// so dot products keep nearly fp32 accuracy; plain TF32 (one mma) would give 2^-11. Fragment
// layouts: kernels/tf32_layout.h. Device code only.
#pragma once

#include <cstdint>

namespace attnlab::cuda {

// x = big + small, both tf32 bit patterns rounded to nearest (cvt.rna).
__device__ __forceinline__ void split_tf32(float x, std::uint32_t& big, std::uint32_t& small) {
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(big) : "f"(x));
  const float rest = x - __uint_as_float(big);
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(small) : "f"(rest));
}

// c (16x8 fp32) += a (16x8 tf32, row) * b (8x8 tf32, col).
__device__ __forceinline__ void mma_tf32(float (&c)[4], const std::uint32_t (&a)[4],
                                         std::uint32_t b0, std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// c += a b with 3xTF32: the two small cross terms first, then the big product.
__device__ __forceinline__ void mma_3xtf32(float (&c)[4], const std::uint32_t (&a_big)[4],
                                           const std::uint32_t (&a_small)[4],
                                           const std::uint32_t (&b_big)[2],
                                           const std::uint32_t (&b_small)[2]) {
  mma_tf32(c, a_small, b_big[0], b_big[1]);
  mma_tf32(c, a_big, b_small[0], b_small[1]);
  mma_tf32(c, a_big, b_big[0], b_big[1]);
}

}  // namespace attnlab::cuda
