// Fused fp32 attention on tensor cores with error compensation (3xTF32), FlashAttention-2 style:
// fp32 inputs and outputs, fp32-accurate, never materialises N x N. fp32 configurations 1 and 2
// of kernels/fused_fp32.cu (ATTNLAB_FUSED_CONFIG) run it.
//
// 3xTF32 (kernels/mma_tf32.cuh): each product as three tf32 tensor-core products of split
// operands, about 2^-22 relative error against fp32's 2^-24, so the kernel stays within the lab's
// 1e-5 bound where plain TF32 (2^-11) would not.
//
// Layout (as in kernels/fused_bf16.cu): a block of WARPS warps owns BQ = 16 WARPS queries of one
// head; warp w owns query rows 16w .. 16w+15 and keeps
//   S = Q K_tile^T (16 x BK, fp32) in mma accumulators,
//   the online softmax of its rows in registers (each row spread over the 4 lanes of a quad),
//   P (fp32, split big/small) straight from the S accumulators as the A operand of P V: the keys
//   of each 8-key chunk are taken in the order 0, 2, 4, 6, 1, 3, 5, 7 in both P and V, which maps
//   the accumulator layout onto the A-operand layout inside each lane (kernels/tf32_layout.h),
//   O (16 x D, fp32) in registers, each key tile's P V summed in fresh mma accumulators and added
//   with round-to-nearest FMAs (tensor cores truncate their fp32 sums; see the P V step).
// Q (D <= 64: split once into registers; D = 128: re-read from shared memory every key tile, as
// registers would spill), and K and V tiles (BK x D) double-buffered through shared memory with
// cp.async. Shared rows are D + 4 floats, so every fragment load is bank-conflict-free. Head dims
// are padded with zeros to the bucket D in {32, 64, 128}; keys past m are zero-filled and masked
// to -inf; query rows past n are computed from zeros and never written. Causal: key tiles wholly
// after the block's last query are never loaded; a warp whose rows all precede a key tile skips
// its math. Custom masks are read per element on every tile, as in the CUDA-core kernel.
//
// Needs d_k and d_v multiples of 4 and 16-byte aligned buffers (cp.async moves 16 bytes); the
// caller (kernels/fused_fp32.cu) runs the CUDA-core kernel for any other problem.
// With rules (kernels/rules.h), the instantiation with RULES: the double-buffered loop walks the
// key tiles the block mask leaves the query tile (the next one loads while this one computes, so
// an Empty tile is never loaded), MaskRule is tested per element in Partial tiles only, and the
// accumulators become the modified scaled scores y before the online softmax, whose constant is
// then log2(e) / T: the running max is kept in units of y as it is in raw q.k units without rules.
#include "kernels/cuda_check.h"  // first: its pragma silences Eigen's nvcc notes

#include "core/types.h"
#include "kernels/async_copy.cuh"
#include "kernels/fused.h"
#include "kernels/fused_block.cuh"
#include "kernels/launch.h"
#include "kernels/mma_tf32.cuh"
#include "kernels/rules.cuh"
#include "kernels/tf32_layout.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace attnlab::cuda {
namespace {

// WARPS warps of 16 query rows, key tiles of BK keys, head-dim bucket D.
template <int D, int WARPS, int BK>
struct Tf32Tile {
  static_assert(D % 8 == 0 && BK % 8 == 0 && WARPS >= 1);
  static constexpr int kThreads = WARPS * 32;
  static constexpr int kBQ = WARPS * 16;  // queries per block
  static constexpr int kBK = BK;          // keys per tile
  static constexpr int RS = D + 4;        // shared row stride in floats
  static_assert(RS % 32 == 4, "fragment loads are conflict-free only for RS % 32 == 4");
  static constexpr bool kQInRegisters = D <= 64;
  static constexpr int q_elems = kBQ * RS;
  static constexpr int kv_elems = kBK * RS;
  // Q, then K[2], then V[2].
  static constexpr std::size_t smem_bytes = (q_elems + 4 * kv_elems) * sizeof(float);
};

// The warp's Q fragments for dim chunk kc, split, from shared memory (rows of the warp first).
template <int RS>
__device__ __forceinline__ void q_fragment(const float* Qw, int lane, int kc,
                                           std::uint32_t (&big)[4], std::uint32_t (&small)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) split_tf32(Qw[tf32::a_frag_offset(lane, i, kc, RS)], big[i], small[i]);
}

// q (heads*n, dk)  k (heads*m, dk)  v (heads*m, dv)  o (heads*n, dv)  mask (n, m) or nullptr.
// Grid: heads * ceil(n / BQ) blocks; block b: head b % heads, query tile (tiles - 1 - b / heads),
// heaviest causal tiles first. `scale_log2` = log2(e) / (sqrt(d_k) T), with RULES log2(e) / T
// (causal false, mask null: the rules hold the mask).
template <int D, int WARPS, int BK, bool RULES>
__global__ void __launch_bounds__(WARPS * 32)
    fused_tf32x3_kernel(const float* __restrict__ q, const float* __restrict__ k,
                        const float* __restrict__ v, float* __restrict__ o, int heads, int n, int m,
                        int dk, int dv, float scale_log2, bool causal,
                        const float* __restrict__ mask, RulesArg<RULES> rules) {
  using T = Tf32Tile<D, WARPS, BK>;
  constexpr int RS = T::RS;
  constexpr int kThreads = T::kThreads;
  constexpr int kBQ = T::kBQ;
  constexpr int kBK = T::kBK;
  extern __shared__ float4 smem_tf32[];
  float* Qs = reinterpret_cast<float*>(smem_tf32);  // (BQ, RS)
  float* Ks = Qs + T::q_elems;                      // 2 x (BK, RS)
  float* Vs = Ks + 2 * T::kv_elems;                 // 2 x (BK, RS)

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int tig = tf32::thread_in_group(lane);

  const FusedBlockTile tile = fused_block_tile(heads, n, m, kBQ, causal);
  const int head = tile.head;
  const int q0 = tile.q0;
  const float* qh = tile.query_rows(q, n, dk);
  const float* kh = tile.key_rows(k, m, dk);
  const float* vh = tile.key_rows(v, m, dv);

  int first_kt = 0, k_tiles = (tile.key_end + kBK - 1) / kBK;
  // With rules: the key tiles the block mask leaves this query tile, Empty ones skipped.
  [[maybe_unused]] const int qb = q0 / kBQ;
  if constexpr (RULES) {
    key_tile_range(rules.blocks, qb, first_kt, k_tiles);
    first_kt = next_key_tile(rules.blocks, qb, first_kt, k_tiles);
  }
  const int warp_row0 = q0 + warp * 16;                   // first query row of this warp
  const int row0 = warp_row0 + tf32::acc_row(lane, 0);    // this lane's rows (elements 0, 1)
  const int row1 = warp_row0 + tf32::acc_row(lane, 2);    // and (elements 2, 3)
  const float* Qw = Qs + warp * 16 * RS;

  // Q: rows of dk floats, each into a row of RS (dims past dk are 0); then key tile 0.
  cp_async_tile<kBQ, D, RS, kThreads>(Qs, qh, dk, min(kBQ, n - q0), dk);
  cp_async_commit();
  if (!RULES || first_kt < k_tiles) cp_async_kv_tile<kBK, D, RS, kThreads>(Ks, Vs, kh, vh, first_kt * kBK, m, dk, dv);
  cp_async_commit();
  cp_async_wait<1>();  // Q has landed (K/V tile 0 may still be in flight)
  __syncthreads();

  // D <= 64: the warp's Q, split, stays in registers for the whole key loop.
  constexpr int QREG = T::kQInRegisters ? D / 8 : 1;
  std::uint32_t q_big[QREG][4];
  std::uint32_t q_small[QREG][4];
  if constexpr (T::kQInRegisters) {
#pragma unroll
    for (int kc = 0; kc < D / 8; ++kc) q_fragment<RS>(Qw, lane, kc, q_big[kc], q_small[kc]);
  }

  float oacc[D / 8][4];
#pragma unroll
  for (int j = 0; j < D / 8; ++j) oacc[j][0] = oacc[j][1] = oacc[j][2] = oacc[j][3] = 0.f;
  float max0 = -INFINITY, max1 = -INFINITY;  // running max of raw q.k for row0 / row1
  float sum0 = 0.f, sum1 = 0.f;              // this lane's part of the running sums

  for (int it = 0, kt = first_kt; kt < k_tiles; ++it) {
    const int kt_next = following_key_tile<RULES>(rules, qb, kt, k_tiles);
    const int k0 = kt * kBK;
    const int next_k0 = RULES ? kt_next * kBK : k0 + kBK;
    const int buf = (RULES ? it : kt) & 1;  // the iteration's parity (it == kt without rules)
    cp_async_next_tile(kt_next < k_tiles, [=] {
      // The other buffer was last read in the previous iteration, which ended with a barrier.
      cp_async_kv_tile<kBK, D, RS, kThreads>(Ks + (buf ^ 1) * T::kv_elems,
                                             Vs + (buf ^ 1) * T::kv_elems, kh, vh, next_k0, m,
                                             dk, dv);
    });
    [[maybe_unused]] bool partial = false;  // with rules: this tile needs MaskRule per element
    if constexpr (RULES) {
      partial = partial_tile(rules.blocks, qb, kt);
      count_visit(rules);
    }

    // A causal key tile that starts after this warp's last row is fully masked for the warp; a
    // warp whose rows are all past n (the last query tile) has nothing to compute.
    const bool skip = (causal && k0 > warp_row0 + 15) || warp_row0 >= n;
    if (!skip) {
      const float* Kt = Ks + buf * T::kv_elems;
      const float* Vt = Vs + buf * T::kv_elems;

      // S = Q K^T over D / 8 dim chunks and BK / 8 key tiles.
      float sacc[kBK / 8][4];
#pragma unroll
      for (int j = 0; j < kBK / 8; ++j) sacc[j][0] = sacc[j][1] = sacc[j][2] = sacc[j][3] = 0.f;
#pragma unroll
      for (int kc = 0; kc < D / 8; ++kc) {
        std::uint32_t a_big[4], a_small[4];
        if constexpr (T::kQInRegisters) {
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            a_big[i] = q_big[kc][i];
            a_small[i] = q_small[kc][i];
          }
        } else {
          q_fragment<RS>(Qw, lane, kc, a_big, a_small);
        }
#pragma unroll
        for (int nt = 0; nt < kBK / 8; ++nt) {
          std::uint32_t b_big[2], b_small[2];
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            split_tf32(Kt[tf32::bt_frag_offset(lane, i, nt, kc, RS)], b_big[i], b_small[i]);
          }
          mma_3xtf32(sacc[nt], a_big, a_small, b_big, b_small);
        }
      }

      // Masks (only on tiles that need them): keys past m, causal future keys, a custom mask.
      // Lane holds keys k0 + 8j + acc_col(lane, e) of rows row0 (e = 0, 1) and row1 (e = 2, 3).
      // With rules: every score becomes y (or -inf), on every tile; ALiBi's distance row - key +
      // offset counted in float from the lane's first element (exact integers; row1 = row0 + 8),
      // not converted per score.
      if constexpr (RULES) {
        const float d0 = static_cast<float>(row0 + rules.score.offset - k0 - tf32::acc_col(lane, 0));
#pragma unroll
        for (int j = 0; j < kBK / 8; ++j) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = k0 + 8 * j + tf32::acc_col(lane, e);
            sacc[j][e] = rule_score_at(rules, sacc[j][e], head, e < 2 ? row0 : row1, key,
                                       d0 + static_cast<float>(8 * (e >> 1) - 8 * j - (e & 1)), n, m, partial);
          }
        }
      } else if (k0 + kBK > m || (causal && k0 + kBK - 1 > warp_row0) || mask != nullptr) {
#pragma unroll
        for (int j = 0; j < kBK / 8; ++j) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = k0 + 8 * j + tf32::acc_col(lane, e);
            const int row = e < 2 ? row0 : row1;
            if (key >= m || (causal && key > row) ||
                (mask != nullptr && row < n && mask[static_cast<std::size_t>(row) * m + key] != 0.f)) {
              sacc[j][e] = -INFINITY;
            }
          }
        }
      }

      // Online softmax on raw scores (scale > 0, so the max commutes with scaling); with rules on
      // y (1 / T > 0).
      float tmax0 = -INFINITY, tmax1 = -INFINITY;
#pragma unroll
      for (int j = 0; j < kBK / 8; ++j) {
        tmax0 = fmaxf(tmax0, fmaxf(sacc[j][0], sacc[j][1]));
        tmax1 = fmaxf(tmax1, fmaxf(sacc[j][2], sacc[j][3]));
      }
      float shift0, shift1, corr0, corr1;
      quad_rows_step(max0, max1, tmax0, tmax1, scale_log2, [](float x) { return exp2f(x); }, shift0, shift1, corr0,
                     corr1);

      // P = exp2(s * scale_log2 - shift) in place (fp32), and this lane's part of the row sums.
      float part0 = 0.f, part1 = 0.f;
#pragma unroll
      for (int j = 0; j < kBK / 8; ++j) {
        sacc[j][0] = exp2f(fmaf(sacc[j][0], scale_log2, -shift0));
        sacc[j][1] = exp2f(fmaf(sacc[j][1], scale_log2, -shift0));
        sacc[j][2] = exp2f(fmaf(sacc[j][2], scale_log2, -shift1));
        sacc[j][3] = exp2f(fmaf(sacc[j][3], scale_log2, -shift1));
        part0 += sacc[j][0] + sacc[j][1];
        part1 += sacc[j][2] + sacc[j][3];
      }
      sum0 = sum0 * corr0 + part0;
      sum1 = sum1 * corr1 + part1;

      // This tile's P V into fresh accumulators (BK / 8 key chunks x D / 8 dim tiles, keys
      // permuted as in the header), then O = O * corr + tile with round-to-nearest FMAs. Tensor
      // cores round their fp32 sums toward zero; chaining every key tile in one accumulator
      // (3 m / 8 mma) would let that bias grow with m, here it stops at 3 BK / 8 mma a tile.
      float otile[D / 8][4];
#pragma unroll
      for (int j = 0; j < D / 8; ++j) otile[j][0] = otile[j][1] = otile[j][2] = otile[j][3] = 0.f;
#pragma unroll
      for (int j = 0; j < kBK / 8; ++j) {
        std::uint32_t p_big[4], p_small[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) split_tf32(sacc[j][tf32::p_a_from_c(i)], p_big[i], p_small[i]);
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) {
          std::uint32_t b_big[2], b_small[2];
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            split_tf32(Vt[tf32::v_frag_offset(lane, i, j, dt, RS)], b_big[i], b_small[i]);
          }
          mma_3xtf32(otile[dt], p_big, p_small, b_big, b_small);
        }
      }
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        oacc[j][0] = fmaf(oacc[j][0], corr0, otile[j][0]);
        oacc[j][1] = fmaf(oacc[j][1], corr0, otile[j][1]);
        oacc[j][2] = fmaf(oacc[j][2], corr1, otile[j][2]);
        oacc[j][3] = fmaf(oacc[j][3], corr1, otile[j][3]);
      }
    }
    __syncthreads();  // this buffer is refilled two iterations on
    kt = kt_next;
  }

  // Full row sums over the quad, normalise, write rows < n and columns < dv (dv % 4 == 0, so a
  // column pair is either wholly inside or wholly outside).
  float inv0, inv1;
  quad_rows_inverse(sum0, sum1, inv0, inv1);
  float* o0 = o + (static_cast<std::size_t>(head) * n + row0) * dv;
  float* o1 = o0 + static_cast<std::size_t>(8) * dv;
#pragma unroll
  for (int j = 0; j < D / 8; ++j) {
    const int col = 8 * j + 2 * tig;
    if (col >= dv) continue;
    if (row0 < n) {
      *reinterpret_cast<float2*>(o0 + col) = make_float2(oacc[j][0] * inv0, oacc[j][1] * inv0);
    }
    if (row1 < n) {
      *reinterpret_cast<float2*>(o1 + col) = make_float2(oacc[j][2] * inv1, oacc[j][3] * inv1);
    }
  }
}

template <int D, int WARPS, int BK, bool RULES>
void launch_tf32x3(const float* q, const float* k, const float* v, float* o, int heads, int n,
                   int m, int dk, int dv, float scale_log2, bool causal, const float* mask,
                   cudaStream_t stream, const RulesArg<RULES>& rules) {
  using T = Tf32Tile<D, WARPS, BK>;
  if constexpr (RULES) check_rules_tile(rules, n, m, T::kBQ, BK, "fused fp32 (3xTF32)");
  allow_dynamic_smem<fused_tf32x3_kernel<D, WARPS, BK, RULES>>(T::smem_bytes);
  note_fused_kernel("3xTF32 D=" + std::to_string(D) + " warps=" + std::to_string(WARPS) + " BK=" + std::to_string(BK) +
                    (RULES ? " rules" : ""));
  const unsigned blocks = grid_1d(static_cast<long long>(heads) * ((n + T::kBQ - 1) / T::kBQ),
                                  "fused fp32 (3xTF32)");
  fused_tf32x3_kernel<D, WARPS, BK, RULES><<<blocks, T::kThreads, T::smem_bytes, stream>>>(
      q, k, v, o, heads, n, m, dk, dv, scale_log2, causal, mask, rules);
  ATTNLAB_CUDA_CHECK(cudaGetLastError());
}

// One bucket, one of the two layouts: 4 warps (BQ 64) or 8 warps (BQ 128); 64-key tiles up to
// D = 64, 32-key tiles at D = 128 (two 64-key buffers of 128-dim rows would leave one block/SM).
// (fused_tf32_tile says the same to the callers that build a block mask for it.)
template <int D, bool RULES = false>
void dispatch_tf32x3(bool wide, const float* q, const float* k, const float* v, float* o,
                     int heads, int n, int m, int dk, int dv, float scale_log2, bool causal,
                     const float* mask, cudaStream_t s, const RulesArg<RULES>& rules = {}) {
  constexpr int BK = D <= 64 ? 64 : 32;
  if (wide) {
    launch_tf32x3<D, 8, BK, RULES>(q, k, v, o, heads, n, m, dk, dv, scale_log2, causal, mask, s, rules);
  } else {
    launch_tf32x3<D, 4, BK, RULES>(q, k, v, o, heads, n, m, dk, dv, scale_log2, causal, mask, s, rules);
  }
}

}  // namespace

bool fused_tf32_takes(int d_k, int d_v) { return d_k % 4 == 0 && d_v % 4 == 0 && d_k <= 128 && d_v <= 128; }

FusedTile fused_tf32_tile(bool wide, int d_k, int d_v) {
  const int dmax = d_k > d_v ? d_k : d_v;
  return {16 * (wide ? 8 : 4), dmax <= 64 ? 64 : 32};
}

bool fused_attention_tf32x3(bool wide, const float* q, const float* k, const float* v, float* o,
                            int heads, int n, int m, int d_k, int d_v, float scale_log2,
                            bool causal, const float* custom_mask, void* stream,
                            const KernelRules* rules) {
  if (!fused_tf32_takes(d_k, d_v) || !aligned16(q) || !aligned16(k) || !aligned16(v) ||
      reinterpret_cast<std::uintptr_t>(o) % 8 != 0) {
    return false;
  }
  const int dmax = d_k > d_v ? d_k : d_v;
  auto s = static_cast<cudaStream_t>(stream);
  if (rules != nullptr) {
    if (causal || custom_mask != nullptr)
      throw InputError("fused fp32 (3xTF32): with rules the mask is the rules' (causal false, no custom mask)");
    if (dmax <= 32) {
      dispatch_tf32x3<32, true>(wide, q, k, v, o, heads, n, m, d_k, d_v, scale_log2, false, nullptr, s, *rules);
    } else if (dmax <= 64) {
      dispatch_tf32x3<64, true>(wide, q, k, v, o, heads, n, m, d_k, d_v, scale_log2, false, nullptr, s, *rules);
    } else {
      dispatch_tf32x3<128, true>(wide, q, k, v, o, heads, n, m, d_k, d_v, scale_log2, false, nullptr, s, *rules);
    }
    return true;
  }
  if (dmax <= 32) {
    dispatch_tf32x3<32>(wide, q, k, v, o, heads, n, m, d_k, d_v, scale_log2, causal, custom_mask,
                        s);
  } else if (dmax <= 64) {
    dispatch_tf32x3<64>(wide, q, k, v, o, heads, n, m, d_k, d_v, scale_log2, causal, custom_mask,
                        s);
  } else {
    dispatch_tf32x3<128>(wide, q, k, v, o, heads, n, m, d_k, d_v, scale_log2, causal,
                         custom_mask, s);
  }
  return true;
}

}  // namespace attnlab::cuda
