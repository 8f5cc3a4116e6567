// Fused attention with bf16 tensor cores (mma.sync m16n8k16, fp32 accumulation), FlashAttention-2
// style. mma.sync and ldmatrix are plain sm_80+ instructions, so this builds for sm_90 without
// the sm_90a target that wgmma would need.
//
// Version 1 (the only one). A block of 8 warps (config 0; see below) owns BQ = 128 queries of
// one head; warp w owns query rows 16w .. 16w+15 of the tile (configs 1 and 2: two row tiles,
// rows 32w .. 32w+31, sharing every K and V fragment the warp loads) and keeps
//   its Q fragments (16 x D, bf16) in registers for the whole key loop (or re-reads them from
//   shared memory on every key tile where registers would run out),
//   S = Q K_tile^T (16 x BK, fp32) in mma accumulators,
//   the online softmax of its rows in registers (running max and sum; each row is spread over
//   the 4 lanes of a quad, reduced with two xor-shuffles),
//   P (rounded to bf16) re-used straight from the S accumulators as the A operand of P V,
//   O (16 x D, fp32) in mma accumulators.
// K and V tiles (BK x D) stream through shared memory with cp.async, double-buffered; rows are
// padded by 16 bytes so ldmatrix's eight 16-byte row reads hit eight different bank groups.
// Keys past m are zero-filled by cp.async and masked to -inf; query rows past n are computed
// from zeros and never written. Causal: key tiles entirely above the tile's last query are never
// loaded; a warp whose rows all precede a key tile skips that tile's math.
// With rules (kernels/rules.h; every mask kind then, a custom mask and decode shapes included):
// configuration 0's tile instantiated with RULES. The double-buffered loop walks the key tiles
// the block mask leaves the query tile (an Empty tile is never loaded), MaskRule is tested per
// element in Partial tiles only, and the fp32 accumulators become the modified scaled scores y
// before the online softmax, whose constant is then log2(e) / T (the running max in units of y).
// The score mods are head_rule_fragment's (kernels/rules.h), over each row tile's accumulator
// fragment: the head's slope, bias rows and 1 / C read once per block, each modification one
// pass, the cap's tanh one tanh.approx.f32, ALiBi's distances from one conversion per row, and the
// range and mask tests on Partial and edge tiles only. (The per-element step before it took two
// exp2, a divide and two int-to-float conversions per score on the multi-function unit beside the
// softmax's one exp2, and ran ALiBi + soft-cap at 3.2x the plain kernel's time on the H200.)
// Registers (ptxas, sm_90): d=64 128 with a minimum of two blocks per SM and 12 bytes spilled
// (two blocks, as the plain kernel); d=128 208, one block.
//
// Tile configurations (ATTNLAB_FUSED_CONFIG, read at every launch; unset or empty = the head-dim
// bucket's default, kernels/tile_config.h; 0..4 = that configuration; any other value throws
// InputError). 3 and 4 run the sm_90a kernel on wgmma (kernels/sm90a/fused_wgmma.cu, which lists
// them); 0..2 the same kernel template here, instantiated per configuration;
// registers from ptxas -v for sm_90 (only config 2 at d=128 spills, 4 bytes); blocks/SM =
// min(64K regs, 228 KB smem) bound.
//   0  8 warps, BQ 128, BK 64   d=64: 127 regs, 54 KB, 2 blocks   d=128: 178 regs, 102 KB, 1
//      (the GPU-verified first kernel. Since the row-tile parameter MT was added its machine code
//      differs from the verified build only in register numbering and instruction order: the
//      same multiset of SASS opcodes, compared with nvdisasm)
//   1  4 warps x 2 row tiles      d=64: BK 64, 222 regs, 55 KB, 2  d=128: BK 32, Q from shared,
//      (BQ 128: each K/V fragment                                       236 regs, 70 KB, 2
//      serves 32 rows)
//   2  as 1, other key tile       d=64: BK 32, 168 regs, 37 KB, 3  d=128: BK 64, Q from shared,
//                                                                       255 regs (4 B spilled),
//                                                                       104 KB, 2
// (Until the H200 sweeps of 2026-12-04 three 4-warp tiles of one row tile per warp (64 queries;
// 64-, 32- and 128-key tiles) were configurations 1-3, and these two 4 and 5. The three were
// slower than 0 or one of these at both head dims, so they were deleted; docs/PERFORMANCE.md keeps
// their figures under the old numbers.)
#include "kernels/cuda_check.h"  // first: its pragma silences Eigen's nvcc notes

#include "core/types.h"
#include "kernels/async_copy.cuh"
#include "kernels/fused.h"
#include "kernels/fused_block.cuh"
#include "kernels/launch.h"
#include "kernels/mma_bf16.cuh"
#include "kernels/rules.cuh"
#include "kernels/tile_config.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace attnlab::cuda {
namespace {

// One tile configuration: WARPS warps of 16 * MT query rows each (BQ = 16 * MT * WARPS queries
// per block), key tiles of BK keys, __launch_bounds__(32 * WARPS, MINB); MINB == 0 sets no minimum
// (ptxas then allocates as it did before configurations existed; an explicit 1 changes its
// choices). MT > 1 reuses every K and V fragment a warp loads for MT row tiles (half the
// shared-memory traffic per mma at MT = 2); QREG keeps the warp's Q fragments in registers for the
// whole key loop, else they are re-read from shared memory on every key tile.
template <int D, int WARPS, int BK, int MINB, int MT = 1, bool QREG = true>
struct Bf16Tile {
  static_assert(WARPS >= 1 && BK % 16 == 0 && MINB >= 0 && MT >= 1);
  static constexpr int kThreads = WARPS * 32;
  static constexpr int kBQ = WARPS * 16 * MT;  // queries per block
  static constexpr int kBK = BK;               // keys per tile
  static constexpr int RS = D + 8;  // shared row stride in bf16 elements (16-byte pad)
  static constexpr int q_elems = kBQ * RS;
  static constexpr int kv_elems = kBK * RS;
  // Q, then K[2], then V[2].
  static constexpr std::size_t smem_bytes = (q_elems + 4 * kv_elems) * sizeof(std::uint16_t);
};

// q, k, v (heads*n | heads*m, D) bf16 bits; o (heads*n, D) fp32.
// Grid: heads * ceil(n / BQ) blocks of 32 * WARPS threads; block b: head b % heads, query tile
// (tiles - 1 - b / heads), heaviest causal tiles first. `scale_log2` = log2(e) / (sqrt(D) T), with
// RULES log2(e) / T (causal false: the rules hold the mask).
template <int D, int WARPS, int BK, int MINB, int MT, bool QREG, bool RULES>
__global__ void __launch_bounds__(WARPS * 32, MINB)
    fused_bf16_kernel(const std::uint16_t* __restrict__ q, const std::uint16_t* __restrict__ k,
                      const std::uint16_t* __restrict__ v, float* __restrict__ o, int heads, int n,
                      int m, float scale_log2, bool causal, RulesArg<RULES> rules) {
  using T = Bf16Tile<D, WARPS, BK, MINB, MT, QREG>;
  constexpr int RS = T::RS;
  constexpr int kThreads = T::kThreads;
  constexpr int kBQ = T::kBQ;
  constexpr int kBK = T::kBK;
  extern __shared__ uint4 smem_u4[];
  std::uint16_t* Qs = reinterpret_cast<std::uint16_t*>(smem_u4);  // (BQ, RS)
  std::uint16_t* Ks = Qs + T::q_elems;                             // 2 x (BK, RS)
  std::uint16_t* Vs = Ks + 2 * T::kv_elems;                        // 2 x (BK, RS)

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2;   // fragment row (and row + 8)
  const int tig = lane & 3;  // fragment column pair

  const FusedBlockTile tile = fused_block_tile(heads, n, m, kBQ, causal);
  const int head = tile.head;
  const int q0 = tile.q0;
  const std::uint16_t* qh = tile.query_rows(q, n, D);
  const std::uint16_t* kh = tile.key_rows(k, m, D);
  const std::uint16_t* vh = tile.key_rows(v, m, D);

  int first_kt = 0, k_tiles = (tile.key_end + kBK - 1) / kBK;
  // With rules: the key tiles the block mask leaves this query tile, Empty ones skipped.
  [[maybe_unused]] const int qb = q0 / kBQ;
  // With rules: the head's score-mod values, taken once (head_rule_fragment, kernels/rules.h).
  [[maybe_unused]] HeadScoreRule head_rule;
  if constexpr (RULES) {
    key_tile_range(rules.blocks, qb, first_kt, k_tiles);
    first_kt = next_key_tile(rules.blocks, qb, first_kt, k_tiles);
    head_rule = head_score_rule(rules, head);
  }
  const int warp_row0 = q0 + warp * 16 * MT;  // first query row of this warp
  // Row tile mt of the warp: this lane's two rows are row0 + 16 mt and row0 + 16 mt + 8.
  const int row0 = warp_row0 + g;
  const int row1 = row0 + 8;

  // Q: whole rows of D bf16, each into a row of RS; then key tile 0.
  cp_async_tile<kBQ, D, RS, kThreads>(Qs, qh, D, min(kBQ, n - q0), D);
  cp_async_commit();
  if (!RULES || first_kt < k_tiles) cp_async_kv_tile<kBK, D, RS, kThreads>(Ks, Vs, kh, vh, first_kt * kBK, m, D, D);
  cp_async_commit();
  cp_async_wait<1>();  // Q has landed (K/V tile 0 may still be in flight)
  __syncthreads();

  // Q fragments (A operand, 16 x 16 per k-chunk): matrices (rows 0-7 | 8-15) x (cols 0-7 | 8-15)
  // of row tile mt; with QREG loaded once here, else on every key tile.
  const auto load_q = [&](std::uint32_t(&frag)[4], int mt, int kc) {
    const int r = warp * 16 * MT + 16 * mt + (lane & 7) + 8 * ((lane >> 3) & 1);
    const int c = kc * 16 + 8 * (lane >> 4);
    ldmatrix_x4(frag, Qs + r * RS + c);
  };
  std::uint32_t qf[MT][QREG ? D / 16 : 1][4];
  if constexpr (QREG) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int kc = 0; kc < D / 16; ++kc) load_q(qf[mt][kc], mt, kc);
    }
  }

  float oacc[MT][D / 8][4];
  float max0[MT], max1[MT];  // running max of raw q.k for the lane's rows of each row tile
  float sum0[MT], sum1[MT];  // this lane's part of the running sums
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      oacc[mt][j][0] = oacc[mt][j][1] = oacc[mt][j][2] = oacc[mt][j][3] = 0.f;
    }
  }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    max0[mt] = -INFINITY;
    max1[mt] = -INFINITY;
  }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    sum0[mt] = 0.f;
    sum1[mt] = 0.f;
  }

  for (int it = 0, kt = first_kt; kt < k_tiles; ++it) {
    const int kt_next = following_key_tile<RULES>(rules, qb, kt, k_tiles);
    const int k0 = kt * kBK;
    const int next_k0 = RULES ? kt_next * kBK : k0 + kBK;
    const int buf = (RULES ? it : kt) & 1;  // the iteration's parity (it == kt without rules)
    cp_async_next_tile(kt_next < k_tiles, [=] {
      // The other buffer was last read in the previous iteration, which ended with a barrier.
      cp_async_kv_tile<kBK, D, RS, kThreads>(Ks + (buf ^ 1) * T::kv_elems,
                                             Vs + (buf ^ 1) * T::kv_elems, kh, vh, next_k0, m,
                                             D, D);
    });
    [[maybe_unused]] bool partial = false;  // with rules: this tile needs MaskRule per element
    if constexpr (RULES) {
      partial = partial_tile(rules.blocks, qb, kt);
      count_visit(rules);
    }

    // A causal key tile that starts after this warp's last row is fully masked for the warp.
    const bool skip = causal && k0 > warp_row0 + 16 * MT - 1;
    if (!skip) {
      const std::uint16_t* Kt = Ks + buf * T::kv_elems;
      const std::uint16_t* Vt = Vs + buf * T::kv_elems;

      // S = Q K^T: BK / 8 n-tiles of 8 keys. One ldmatrix.x4 gives the B fragments (dims 0-7, 8-15)
      // of two n-tiles: matrices (keys 0-7 | 8-15) x (dims 0-7 | 8-15) of the 16-key pair; every
      // row tile of the warp uses them.
      float sacc[MT][kBK / 8][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int j = 0; j < kBK / 8; ++j) {
          sacc[mt][j][0] = sacc[mt][j][1] = sacc[mt][j][2] = sacc[mt][j][3] = 0.f;
        }
      }
#pragma unroll
      for (int kc = 0; kc < D / 16; ++kc) {
        std::uint32_t qtile[QREG ? 1 : MT][4];
        if constexpr (!QREG) {
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) load_q(qtile[mt], mt, kc);
        }
#pragma unroll
        for (int np = 0; np < kBK / 16; ++np) {
          std::uint32_t b[4];
          const int r = np * 16 + (lane & 7) + 8 * (lane >> 4);
          const int c = kc * 16 + 8 * ((lane >> 3) & 1);
          ldmatrix_x4(b, Kt + r * RS + c);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            if constexpr (QREG) {
              mma_bf16(sacc[mt][2 * np], qf[mt][kc], b[0], b[1]);
              mma_bf16(sacc[mt][2 * np + 1], qf[mt][kc], b[2], b[3]);
            } else {
              mma_bf16(sacc[mt][2 * np], qtile[mt], b[0], b[1]);
              mma_bf16(sacc[mt][2 * np + 1], qtile[mt], b[2], b[3]);
            }
          }
        }
      }

      // Masks (only on tiles that need them): keys past m, causal future keys. Lane holds keys
      // k0 + 8j + 2*tig + {0, 1} of rows row0 + 16 mt (elements 0, 1) and + 8 (elements 2, 3).
      // With rules: every score becomes y (or -inf), on every tile.
      if constexpr (RULES) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
          head_rule_fragment(rules, head_rule, sacc[mt], row0 + 16 * mt, k0 + 2 * tig, n, m, partial, FastTanh{});
      } else if (k0 + kBK > m || (causal && k0 + kBK - 1 > warp_row0)) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
          for (int j = 0; j < kBK / 8; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int key = k0 + 8 * j + 2 * tig + (e & 1);
              const int row = (e < 2 ? row0 : row1) + 16 * mt;
              if (key >= m || (causal && key > row)) sacc[mt][j][e] = -INFINITY;
            }
          }
        }
      }

      std::uint32_t pf[MT][kBK / 16][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        // Online softmax on raw scores (scale > 0, so the max commutes with scaling); with rules
        // on y (1 / T > 0).
        float tmax0 = -INFINITY, tmax1 = -INFINITY;
#pragma unroll
        for (int j = 0; j < kBK / 8; ++j) {
          tmax0 = fmaxf(tmax0, fmaxf(sacc[mt][j][0], sacc[mt][j][1]));
          tmax1 = fmaxf(tmax1, fmaxf(sacc[mt][j][2], sacc[mt][j][3]));
        }
        float shift0, shift1, corr0, corr1;
        quad_rows_step(max0[mt], max1[mt], tmax0, tmax1, scale_log2, [](float x) { return fast_exp2(x); }, shift0,
                       shift1, corr0, corr1);

        // P = exp2(s * scale_log2 - shift), rounded to bf16 and laid out as the A operand of
        // P V: k-chunk kc2 (keys 16kc2 .. +15) = n-tiles 2kc2 (regs 0, 1) and 2kc2+1 (regs 2, 3).
        float part0 = 0.f, part1 = 0.f;
#pragma unroll
        for (int kc2 = 0; kc2 < kBK / 16; ++kc2) {
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const float* sv = sacc[mt][2 * kc2 + half];
            const float p0 = fast_exp2(fmaf(sv[0], scale_log2, -shift0));
            const float p1 = fast_exp2(fmaf(sv[1], scale_log2, -shift0));
            const float p2 = fast_exp2(fmaf(sv[2], scale_log2, -shift1));
            const float p3 = fast_exp2(fmaf(sv[3], scale_log2, -shift1));
            pf[mt][kc2][2 * half + 0] = pack_bf16(p0, p1, part0);
            pf[mt][kc2][2 * half + 1] = pack_bf16(p2, p3, part1);
          }
        }
        sum0[mt] = sum0[mt] * corr0 + part0;
        sum1[mt] = sum1[mt] * corr1 + part1;
#pragma unroll
        for (int j = 0; j < D / 8; ++j) {
          oacc[mt][j][0] *= corr0;
          oacc[mt][j][1] *= corr0;
          oacc[mt][j][2] *= corr1;
          oacc[mt][j][3] *= corr1;
        }
      }

      // O += P V. V is row-major (key, dim), the B operand wants (k=key, n=dim) column pairs:
      // ldmatrix.trans of matrices (keys 0-7 | 8-15) x (dims 0-7 | 8-15) of the d-tile pair,
      // used by every row tile of the warp.
#pragma unroll
      for (int kc2 = 0; kc2 < kBK / 16; ++kc2) {
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
          std::uint32_t b[4];
          const int r = kc2 * 16 + (lane & 7) + 8 * ((lane >> 3) & 1);
          const int c = dp * 16 + 8 * (lane >> 4);
          ldmatrix_x4_trans(b, Vt + r * RS + c);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma_bf16(oacc[mt][2 * dp], pf[mt][kc2], b[0], b[1]);
            mma_bf16(oacc[mt][2 * dp + 1], pf[mt][kc2], b[2], b[3]);
          }
        }
      }
    }
    __syncthreads();  // this buffer is refilled two iterations on
    kt = kt_next;
  }

  // Full row sums over the quad, normalise, write rows < n. Lane holds columns 8j + 2*tig, +1.
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    float inv0, inv1;
    quad_rows_inverse(sum0[mt], sum1[mt], inv0, inv1);
    const int r0 = row0 + 16 * mt;
    const int r1 = row1 + 16 * mt;
    float* o0 = o + (static_cast<std::size_t>(head) * n + r0) * D;
    float* o1 = o0 + static_cast<std::size_t>(8) * D;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      const int col = 8 * j + 2 * tig;
      if (r0 < n) {
        *reinterpret_cast<float2*>(o0 + col) =
            make_float2(oacc[mt][j][0] * inv0, oacc[mt][j][1] * inv0);
      }
      if (r1 < n) {
        *reinterpret_cast<float2*>(o1 + col) =
            make_float2(oacc[mt][j][2] * inv1, oacc[mt][j][3] * inv1);
      }
    }
  }
}

template <int D, int WARPS, int BK, int MINB, int MT = 1, bool QREG = true, bool RULES = false>
void launch_bf16(const std::uint16_t* q, const std::uint16_t* k, const std::uint16_t* v, float* o,
                 int heads, int n, int m, float scale_log2, bool causal, cudaStream_t stream,
                 const RulesArg<RULES>& rules = {}) {
  using T = Bf16Tile<D, WARPS, BK, MINB, MT, QREG>;
  if constexpr (RULES) check_rules_tile(rules, n, m, T::kBQ, BK, "fused bf16");
  allow_dynamic_smem<fused_bf16_kernel<D, WARPS, BK, MINB, MT, QREG, RULES>>(T::smem_bytes);
  note_fused_kernel("bf16 D=" + std::to_string(D) + " warps=" + std::to_string(WARPS) + " BK=" + std::to_string(BK) +
                    " MT=" + std::to_string(MT) + " qreg=" + std::to_string(QREG ? 1 : 0) +
                    (MINB ? " minb=" + std::to_string(MINB) : "") + (RULES ? " rules" : ""));
  const unsigned blocks =
      grid_1d(static_cast<long long>(heads) * ((n + T::kBQ - 1) / T::kBQ), "fused bf16");
  fused_bf16_kernel<D, WARPS, BK, MINB, MT, QREG, RULES><<<blocks, T::kThreads, T::smem_bytes, stream>>>(
      q, k, v, o, heads, n, m, scale_log2, causal, rules);
  ATTNLAB_CUDA_CHECK(cudaGetLastError());
}

// One head dim, one configuration (see the table in the file header).
template <int D>
void dispatch_bf16(int config, const std::uint16_t* q, const std::uint16_t* k,
                   const std::uint16_t* v, float* o, int heads, int n, int m, float scale_log2,
                   bool causal, cudaStream_t s) {
  switch (config) {
    case 1:  // two row tiles per warp; at D = 128 32-key tiles, Q re-read from shared memory
      if constexpr (D == 64) {
        launch_bf16<D, 4, 64, 0, 2, true>(q, k, v, o, heads, n, m, scale_log2, causal, s);
      } else {
        launch_bf16<D, 4, 32, 0, 2, false>(q, k, v, o, heads, n, m, scale_log2, causal, s);
      }
      return;
    case 2:  // as 1 with the other key-tile size
      if constexpr (D == 64) {
        launch_bf16<D, 4, 32, 0, 2, true>(q, k, v, o, heads, n, m, scale_log2, causal, s);
      } else {
        launch_bf16<D, 4, 64, 0, 2, false>(q, k, v, o, heads, n, m, scale_log2, causal, s);
      }
      return;
    default:
      break;
  }
  launch_bf16<D, 8, 64, 0>(q, k, v, o, heads, n, m, scale_log2, causal, s);
}

}  // namespace

FusedTile fused_bf16_rules_tile(int) { return {128, 64}; }  // configuration 0's: 8 warps, BK 64

void fused_attention_bf16(const std::uint16_t* q, const std::uint16_t* k, const std::uint16_t* v,
                          float* o, int heads, int n, int m, int d, float scale, bool causal,
                          void* stream, const KernelRules* rules) {
  if (const std::string why = fused_bf16_shape_error(d, d); !why.empty()) throw InputError(why);
  if (heads < 1 || n < 1 || m < 1) {
    throw InputError("fused bf16: empty problem (heads " + std::to_string(heads) + ", n " +
                     std::to_string(n) + ", m " + std::to_string(m) + ")");
  }
  if (rules != nullptr && causal)
    throw InputError("fused bf16: with rules the mask is the rules' (causal false)");
  if (causal && n != m) {
    throw InputError("causal mask needs n == m, got n " + std::to_string(n) + ", m " +
                     std::to_string(m));
  }
  // cp.async moves 16-byte chunks: every row starts 16-byte aligned when the bases are.
  if (!aligned16(q) || !aligned16(k) || !aligned16(v) || reinterpret_cast<std::uintptr_t>(o) % 8) {
    throw InputError("fused bf16: device buffers must be 16-byte aligned");
  }
  const int config = fused_bf16_config(d);
  const float scale_log2 = scale * kLog2e;
  auto s = static_cast<cudaStream_t>(stream);
  if (rules != nullptr) {  // one kernel per head dim with rules: configuration 0's tile
    if (d == 64)
      launch_bf16<64, 8, 64, 2, 1, true, true>(q, k, v, o, heads, n, m, scale_log2, false, s, *rules);
    else
      launch_bf16<128, 8, 64, 0, 1, true, true>(q, k, v, o, heads, n, m, scale_log2, false, s, *rules);
    return;
  }
  if (config >= kFusedBf16WgmmaFirst) {  // 3, 4: the sm_90a kernel
#if defined(ATTNLAB_NO_SM90A)
    throw InputError(wgmma_device_error(config));
#else
    fused_attention_bf16_wgmma(config, q, k, v, o, heads, n, m, d, scale_log2, causal, s);
    return;
#endif
  }
  if (d == 64) {
    dispatch_bf16<64>(config, q, k, v, o, heads, n, m, scale_log2, causal, s);
  } else {
    dispatch_bf16<128>(config, q, k, v, o, heads, n, m, scale_log2, causal, s);
  }
}

// Here, not beside the sm_90a kernel: a build without sm_90a code (nvcc before 12) has it too, and
// says so.
std::string wgmma_device_error(int config) {
  const std::string what = "ATTNLAB_FUSED_CONFIG=" + std::to_string(config) + " (bf16 on wgmma)";
#if defined(ATTNLAB_NO_SM90A)
  return what + ": this build has no sm_90a code (nvcc 12 or newer builds it)";
#else
  int device = 0, major = 0, minor = 0;
  ATTNLAB_CUDA_CHECK(cudaGetDevice(&device));
  ATTNLAB_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  ATTNLAB_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  if (major == 9 && minor == 0) return "";
  return what + " needs a GPU of compute capability 9.0 (H100, H200); this one is " + std::to_string(major) + "." +
         std::to_string(minor);
#endif
}

}  // namespace attnlab::cuda
