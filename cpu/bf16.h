// bf16 on the CPU: the rounding and the arithmetic of the bf16 attention chain, written once for
// the CPU backend (cpu/bf16.cpp runs it, staged and fused). It is the arithmetic of the CUDA bf16
// kernel (kernels/fused_bf16.cu), step by step:
//   1. Q, K and V are rounded to bf16, round to nearest even (bf16_bits; CUDA: __float2bfloat16_rn
//      in cuda_backend.cu's to_bf16, before the kernel).
//   2. S = Q Kᵀ from the bf16 values, every product exact in fp32 and the sums in fp32 (CUDA: mma
//      m16n8k16 bf16 -> fp32 accumulators). The raw scores: no scaling yet.
//   3. The softmax in fp32 on the raw scores, online over key blocks, with the constant
//      c = log2(e) / (sqrt(d_k) T) (bf16_scale_log2: 1 / (sqrt(d_k) T) rounded once to fp32 from
//      double, then times log2(e) in fp32, as fused_attention_bf16 does):
//        m_new = max(m, max_j s_j)                  (the max commutes with the scaling, c > 0)
//        shift = m_new * c  (0 while every key so far is masked: never -inf - -inf)
//        corr  = exp2(m * c - shift)
//        p_j   = bf16(exp2(fma(s_j, c, -shift)))    P rounded to bf16 (nearest even)
//        l     = l * corr + sum_j p_j               the sum of exactly the rounded weights
//        O     = O * corr + P V                     bf16 P times bf16 V, fp32 accumulation
//      and at the end O = O * (1 / l). exp2 of a masked score (-inf) is 0, and so is every result
//      below 2^-126 (CUDA's ex2.approx.ftz flushes those too).
// The staged chain runs the same steps with one key block holding all keys, and keeps each stage as
// that pipeline has it: scores (step 2), scaled = scores / sqrt(d_k) and logits =
// (scaled + mask) / T (fp32, for display: the weights come from the scores through c as above),
// weights = p_j / l (the normalised bf16 weights P V uses), output (step 3).
// Where the compiler targets AVX-512 BF16 (__AVX512BF16__, e.g. -march=native on Sapphire Rapids
// or Zen 4) both products are _mm512_dpbf16_ps on packed bf16 pairs; elsewhere (x86-64-v3 and the
// ASan build) they are fp32 products of the bf16-rounded values, which are the same numbers (a
// bf16 x bf16 product is exact in fp32), summed in fp32 in another order.
#pragma once

#include "core/backend.h"
#include "core/modify.h"

#include <bit>
#include <cmath>
#include <cstdint>

namespace attnlab {

// The bf16 bit pattern of x, round to nearest even; NaN stays a (quiet) NaN, ±inf stays ±inf,
// and a finite value that rounds past the largest bf16 becomes ±inf, as in IEEE rounding.
inline std::uint16_t bf16_bits(float x) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  if (std::isnan(x)) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  const std::uint32_t lsb = (u >> 16) & 1u;
  return static_cast<std::uint16_t>((u + 0x7fffu + lsb) >> 16);
}

inline float bf16_to_float(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

// x rounded to the nearest bf16 (ties to even), as an fp32 value.
inline float bf16_round(float x) { return bf16_to_float(bf16_bits(x)); }

// Element-wise bf16_round of a matrix.
inline MatrixF bf16_round(const MatrixF& a) { return a.unaryExpr([](float x) { return bf16_round(x); }); }

// c = log2(e) / (sqrt(d_k) T), computed as the CUDA backend and fused_attention_bf16 compute it.
inline float bf16_scale_log2(int d_k, double temperature) {
  const float scale = static_cast<float>(1.0 / (std::sqrt(static_cast<double>(d_k)) * temperature));
  return scale * 1.4426950408889634f;
}

// The same with the problem's scale: log2(e) * online_scale(p) (equal to the above by default; log2(e) / T
// on scores the score mods have scaled and modified).
inline float bf16_scale_log2(const Problem& p) { return online_scale(p) * 1.4426950408889634f; }

// True when this build computes the bf16 products with AVX-512 BF16 dot products.
bool cpu_bf16_uses_dpbf16();

}  // namespace attnlab
