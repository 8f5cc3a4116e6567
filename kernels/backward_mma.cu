// The fused backward on bf16 tensor cores (mma.sync.m16n8k16, fp32 accumulators): the same
// algorithm, rules and outputs as the CUDA-core kernel in kernels/backward.cu (its header and
// kernels/backward.h have the formulas), with all five products on tensor cores. Configuration 1
// of ATTNLAB_BACKWARD_CONFIG, bf16 inputs only, d_k == d_v in {64, 128}; the statistics pass
// (D and lse2) is backward.cu's, run on this kernel's tiles.
//
// One block of 8 warps per (key/value head, key tile of BK = 64 keys), first key tiles first; K
// and V stay in shared memory (and, at D = 64 under configuration 1, as A fragments in registers).
// Configuration 2 is the same code bounded to two blocks per SM at D = 64 (__launch_bounds__'s
// minimum of 2: at most 128 registers a thread); it reads the K and V fragments from shared
// memory as D = 128 does, since kept in registers they spill under that bound. The block walks
// every query head of its group and every query tile of BQ = 64 the block mask leaves, Q and dO
// double-buffered through shared memory with cp.async. Warp w has a row group r = w % 4 (16 rows)
// and a half c = w / 4, and per query tile
//   S^T  = K Q^T,  dP^T = V dO^T   keys 16r .. +15 by queries 32c .. +31: K and V as A operands,
//                                  Q and dO rows as B (the forward's S = Q K^T pattern); both
//                                  16 x 32 tiles in accumulators
//   y, P = 2^(y c − lse2), dS = P (dP − D), Σ dS x for dT, dS g    in registers, per element as the
//                                  CUDA-core kernel does; P^T and (dS g)^T rounded to bf16 and
//                                  stored to shared memory as (key, query) tiles
//   dV += P^T dO,  dK += (dS g)^T Q   keys 16r .. +15 by dims (D/2) c .. : P^T and dS^T from shared
//                                  memory as A operands, dO and Q through ldmatrix.trans as B;
//                                  accumulators held for the whole walk, written once
//   dQ += (dS g) K                 queries 16r .. +15 by dims (D/2) c .. : dS as A through
//                                  ldmatrix.trans of dS^T, K through ldmatrix.trans as B; added
//                                  into dq with fp32 atomics
// Going through shared memory for P^T and dS^T lets each product split its work over all 8 warps
// in its own way (the dQ product needs dS by query rows, the others by key rows).
// Precision: the products read bf16 operands (the inputs, and P and dS g rounded to bf16: a
// relative error of at most 2^-8 each, which the tests' bounds add) and sum in fp32; y, P, dS and
// dT's terms are fp32 as in the CUDA-core kernel (P by exp2f from the same lse2).
// Every ldmatrix address and accumulator position goes through kernels/bf16_layout.h, which
// tests/test_bf16_layout.cpp checks against an emulation of the instructions, product by product.
#include "kernels/cuda_check.h"  // first: its pragma silences Eigen's nvcc notes

#include "core/types.h"
#include "kernels/backward.h"
#include "kernels/bf16_layout.h"
#include "kernels/launch.h"
#include "kernels/mma_bf16.cuh"
#include "kernels/rules.cuh"

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace attnlab::cuda {
namespace {

namespace L = bf16mma;

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;

template <int D_, bool KvReg = D_ <= 64>
struct MmaTile {
  static constexpr int D = D_;
  static constexpr int BQ = kMmaBackwardTile.q_tile;  // queries per tile
  static constexpr int BK = kMmaBackwardTile.k_tile;  // keys per block
  static constexpr int RS = D + 8;                    // row stride of Q, dO, K, V (bf16): 16-byte pad
  static constexpr int RP = BQ + 8;                   // row stride of P^T, dS^T (bf16)
  static constexpr int DW = D / 2;                    // dims per warp in dV, dK, dQ
  static constexpr bool KVREG = KvReg;                // K and V A fragments kept in registers (else ldmatrix each tile)
  static constexpr int kv_elems = BK * RS, qd_elems = BQ * RS, p_elems = BK * RP;
  // K, V, Q[2], dO[2], P^T, dS^T (bf16), then lse2 and D (fp32).
  static constexpr std::size_t smem_bytes =
      (2 * kv_elems + 4 * qd_elems + 2 * p_elems) * sizeof(std::uint16_t) + 2 * BQ * sizeof(float);
  static_assert(BQ == 64 && BK == 64, "8 warps: 4 row groups of 16 by 2 halves of 32 queries or D / 2 dims");
  static_assert(D % 32 == 0 && (kv_elems % 8) == 0 && (p_elems % 8) == 0, "16-byte aligned regions");
};
// The tile of the kernel for MinBlocks blocks per SM: K and V fragments in registers at D = 64 with
// one block per SM.
template <int D, int MinBlocks>
using MmaTileFor = MmaTile<D, D <= 64 && MinBlocks == 1>;

// Accumulator tiles (n tiles of 16 x 8, four values a lane) set to zero.
template <int N>
__device__ __forceinline__ void zero(float (&acc)[N][4]) {
#pragma unroll
  for (int j = 0; j < N; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = 0.f;
  }
}

// The block's work items in order: item = (query head h − first head of the group) q_blocks + qb;
// the first at or after `item` that the block mask does not rule out for key tile kb (`items` when
// none). Every thread reads the same bytes.
__device__ __forceinline__ int next_item(const DeviceBlockMask& b, int kb, int item, int items) {
  while (item < items &&
         b.kind[static_cast<std::size_t>(item % b.q_blocks) * b.k_blocks + kb] == static_cast<std::uint8_t>(BlockKind::Empty))
    ++item;
  return item;
}

// Grid: kv_heads * ceil(m / BK) blocks; block b: key/value head b % kv_heads, key tile b / kv_heads.
// MinBlocks: the blocks per SM ptxas must leave room for (configuration 2: two, so at most 128
// registers a thread; the same code otherwise).
template <int D, int MinBlocks>
__global__ void __launch_bounds__(kThreads, MinBlocks > 1 ? MinBlocks : 0) backward_mma_kernel(BackwardArgs a) {
  using T = MmaTileFor<D, MinBlocks>;
  constexpr int BQ = T::BQ, BK = T::BK, RS = T::RS, RP = T::RP, DW = T::DW;
  extern __shared__ uint4 smem_u4[];
  std::uint16_t* Ks = reinterpret_cast<std::uint16_t*>(smem_u4);  // (BK, RS)
  std::uint16_t* Vs = Ks + T::kv_elems;                           // (BK, RS)
  std::uint16_t* Qs = Vs + T::kv_elems;                           // 2 x (BQ, RS)
  std::uint16_t* dOs = Qs + 2 * T::qd_elems;                      // 2 x (BQ, RS)
  std::uint16_t* Ps = dOs + 2 * T::qd_elems;                      // (BK, RP): P^T
  std::uint16_t* dSs = Ps + T::p_elems;                           // (BK, RP): (dS g)^T
  float* Ls = reinterpret_cast<float*>(dSs + T::p_elems);         // (BQ): lse2
  float* Ds = Ls + BQ;                                            // (BQ): D

  const std::uint16_t* q = static_cast<const std::uint16_t*>(a.q);
  const std::uint16_t* dout = static_cast<const std::uint16_t*>(a.dout);
  const KernelRules& rules = a.rules;
  const DeviceBlockMask& blocks = rules.blocks;
  const float cap = rules.score.softcap;

  const int g = blockIdx.x % a.kv_heads, kb = blockIdx.x / a.kv_heads;
  const int k0 = kb * BK, keys = min(BK, a.m - k0);
  const int group = a.heads / a.kv_heads;
  const int items = group * blocks.q_blocks;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int rg = warp & 3;    // row group: keys 16 rg (S^T, dP^T, dV, dK) or queries 16 rg (dQ)
  const int half = warp >> 2; // queries 32 half (S^T, dP^T) or dims DW half (dV, dK, dQ)

  // Query tile `item`'s Q and dO rows into buffer `buf` (zero past n).
  const auto load_qdo = [&](int item, int buf) {
    const int h = g * group + item / blocks.q_blocks, q0 = (item % blocks.q_blocks) * BQ;
    const std::size_t row0 = static_cast<std::size_t>(h) * a.n + q0;
    cp_async_tile<BQ, D, RS, kThreads>(Qs + buf * T::qd_elems, q + row0 * D, D, min(BQ, a.n - q0), D);
    cp_async_tile<BQ, D, RS, kThreads>(dOs + buf * T::qd_elems, dout + row0 * D, D, min(BQ, a.n - q0), D);
  };

  float dv_acc[DW / 8][4], dk_acc[DW / 8][4];
  zero(dv_acc);
  zero(dk_acc);
  // K and V rows 16 rg .. +15 as A fragments, chunk kc of 16 dims (in registers at D = 64).
  std::uint32_t kf[T::KVREG ? D / 16 : 1][4], vf[T::KVREG ? D / 16 : 1][4];
  const int a_row = L::a_rows_row(lane), a_col = L::a_rows_col(lane);
  const int b_row = L::b_rows_row(lane), b_col = L::b_rows_col(lane);
  double dt = 0;

  int item = next_item(blocks, kb, 0, items);
  if (item < items) {
    cp_async_kv_tile<BK, D, RS, kThreads>(Ks, Vs, static_cast<const std::uint16_t*>(a.k) + static_cast<std::size_t>(g) * a.m * D,
                                          static_cast<const std::uint16_t*>(a.v) + static_cast<std::size_t>(g) * a.m * D, k0,
                                          a.m, D, D);
    load_qdo(item, 0);
  }
  cp_async_commit();

  for (int it = 0; item < items; ++it) {
    const int buf = it & 1;
    const int next = next_item(blocks, kb, item + 1, items);
    const int h = g * group + item / blocks.q_blocks, qb = item % blocks.q_blocks;
    const int q0 = qb * BQ, rows = min(BQ, a.n - q0);
    const std::size_t row0 = static_cast<std::size_t>(h) * a.n + q0;
    // lse2 and D of the tile (the previous tile's readers finished at its last barrier).
    for (int r = threadIdx.x; r < BQ; r += kThreads) {
      Ls[r] = r < rows ? a.lse2[row0 + r] : 0.f;
      Ds[r] = r < rows ? a.dd[row0 + r] : 0.f;
    }
    cp_async_next_tile(next < items, [=] { load_qdo(next, buf ^ 1); });
    count_visit(rules);
    const std::uint16_t* Qt = Qs + buf * T::qd_elems;
    const std::uint16_t* dOt = dOs + buf * T::qd_elems;
    if constexpr (T::KVREG) {
      if (it == 0) {
#pragma unroll
        for (int kc = 0; kc < D / 16; ++kc) {
          ldmatrix_x4(kf[kc], Ks + (16 * rg + a_row) * RS + 16 * kc + a_col);
          ldmatrix_x4(vf[kc], Vs + (16 * rg + a_row) * RS + 16 * kc + a_col);
        }
      }
    }

    // S^T and dP^T, keys 16 rg .. +15 by queries 32 half .. +31: n tiles j of 8 queries.
    float sacc[4][4], pacc[4][4];
    zero(sacc);
    zero(pacc);
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc) {
      std::uint32_t ka[4], va[4];
      if constexpr (T::KVREG) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          ka[i] = kf[kc][i];
          va[i] = vf[kc][i];
        }
      } else {
        ldmatrix_x4(ka, Ks + (16 * rg + a_row) * RS + 16 * kc + a_col);
        ldmatrix_x4(va, Vs + (16 * rg + a_row) * RS + 16 * kc + a_col);
      }
#pragma unroll
      for (int np = 0; np < 2; ++np) {
        const int off = (32 * half + 16 * np + b_row) * RS + 16 * kc + b_col;
        std::uint32_t qb4[4], ob4[4];
        ldmatrix_x4(qb4, Qt + off);
        ldmatrix_x4(ob4, dOt + off);
        mma_bf16_pair(sacc[2 * np], sacc[2 * np + 1], ka, qb4);
        mma_bf16_pair(pacc[2 * np], pacc[2 * np + 1], va, ob4);
      }
    }

    // P, dS and dT's terms per element; P^T and (dS g)^T to shared memory as bf16 pairs.
    const bool partial = blocks.kind[static_cast<std::size_t>(qb) * blocks.k_blocks + kb] ==
                         static_cast<std::uint8_t>(BlockKind::Partial);
    float dt_tile = 0.f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
      for (int pr = 0; pr < 2; ++pr) {  // elements 2 pr and 2 pr + 1: one key, two queries
        const int kl = 16 * rg + L::acc_row(lane, 2 * pr);
        const int ql = 32 * half + 8 * j + L::acc_col(lane, 2 * pr);
        float p[2], ds_g[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float y = rule_score(rules, sacc[j][2 * pr + e], h, q0 + ql + e, k0 + kl, a.n, a.m, partial);
          // Masked (y = -inf): P = 0 exactly; dS, its share of dT and the soft-cap factor left out.
          const float x = y * a.logit_log2 - Ls[ql + e];
          p[e] = exp2f(x);
          ds_g[e] = 0.f;
          if (y != -INFINITY) {
            const float ds = p[e] * (pacc[j][2 * pr + e] - Ds[ql + e]);
            dt_tile = fmaf(ds, x, dt_tile);
            const float t = cap > 0.f ? y / cap : 0.f;  // tanh of the capped argument
            ds_g[e] = ds * (1.f - t * t) * a.grad_scale;
          }
        }
        *reinterpret_cast<std::uint32_t*>(Ps + kl * RP + ql) = to_bf16x2(p[0], p[1]);
        *reinterpret_cast<std::uint32_t*>(dSs + kl * RP + ql) = to_bf16x2(ds_g[0], ds_g[1]);
      }
    }
    dt += static_cast<double>(dt_tile);
    __syncthreads();

    // dV += P^T dO, dK += (dS g)^T Q: keys 16 rg .. +15 by dims DW half .. : chunks of 16 queries.
#pragma unroll
    for (int kc = 0; kc < BQ / 16; ++kc) {
      std::uint32_t pa[4], sa[4];
      ldmatrix_x4(pa, Ps + (16 * rg + a_row) * RP + 16 * kc + a_col);
      ldmatrix_x4(sa, dSs + (16 * rg + a_row) * RP + 16 * kc + a_col);
#pragma unroll
      for (int dp = 0; dp < DW / 16; ++dp) {
        const int off = (16 * kc + a_row) * RS + DW * half + 16 * dp + a_col;
        std::uint32_t ob4[4], qb4[4];
        ldmatrix_x4_trans(ob4, dOt + off);
        ldmatrix_x4_trans(qb4, Qt + off);
        mma_bf16_pair(dv_acc[2 * dp], dv_acc[2 * dp + 1], pa, ob4);
        mma_bf16_pair(dk_acc[2 * dp], dk_acc[2 * dp + 1], sa, qb4);
      }
    }

    // dQ += (dS g) K: queries 16 rg .. +15 by dims DW half .. : chunks of 16 keys, dS as A through
    // ldmatrix.trans of dS^T, K as B through ldmatrix.trans.
    float dq[DW / 8][4];
    zero(dq);
#pragma unroll
    for (int kc = 0; kc < BK / 16; ++kc) {
      std::uint32_t da[4];
      ldmatrix_x4_trans(da, dSs + (16 * kc + b_row) * RP + 16 * rg + b_col);
#pragma unroll
      for (int dp = 0; dp < DW / 16; ++dp) {
        std::uint32_t kb4[4];
        ldmatrix_x4_trans(kb4, Ks + (16 * kc + a_row) * RS + DW * half + 16 * dp + a_col);
        mma_bf16_pair(dq[2 * dp], dq[2 * dp + 1], da, kb4);
      }
    }
#pragma unroll
    for (int j = 0; j < DW / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = 16 * rg + L::acc_row(lane, e);
        if (r < rows) atomicAdd(a.dq + (row0 + r) * D + DW * half + 8 * j + L::acc_col(lane, e), dq[j][e]);
      }
    }
    __syncthreads();  // P^T, dS^T, lse2, D and this Q, dO buffer are refilled from here on
    item = next;
  }

  // dK and dV of the block's keys: owned by this block alone (zero when no query sees them).
#pragma unroll
  for (int j = 0; j < DW / 8; ++j) {
#pragma unroll
    for (int pr = 0; pr < 2; ++pr) {
      const int key = 16 * rg + L::acc_row(lane, 2 * pr);
      if (key >= keys) continue;
      const std::size_t at = (static_cast<std::size_t>(g) * a.m + k0 + key) * D + DW * half + 8 * j + L::acc_col(lane, 2 * pr);
      *reinterpret_cast<float2*>(a.dk + at) = make_float2(dk_acc[j][2 * pr], dk_acc[j][2 * pr + 1]);
      *reinterpret_cast<float2*>(a.dv + at) = make_float2(dv_acc[j][2 * pr], dv_acc[j][2 * pr + 1]);
    }
  }

  // Σ dS ∘ x of the block, in double: a warp's lanes, then the warps through shared memory (P^T's,
  // every read of which finished at the loop's last barrier).
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) dt += __shfl_xor_sync(0xffffffffu, dt, o);
  double* warp_dt = reinterpret_cast<double*>(Ps);
  if (lane == 0) warp_dt[warp] = dt;
  __syncthreads();
  if (threadIdx.x == 0) {
    double s = 0;
    for (int w = 0; w < kWarps; ++w) s += warp_dt[w];
    atomicAdd(a.dt, s);
  }
}

template <int D, int MinBlocks>
void launch_d(const BackwardArgs& a, cudaStream_t s) {
  using T = MmaTileFor<D, MinBlocks>;
  static_assert(MinBlocks * (T::smem_bytes + 1024) <= 228 * 1024, "MinBlocks blocks' shared memory fits an SM");
  allow_dynamic_smem<backward_mma_kernel<D, MinBlocks>>(T::smem_bytes);
  if constexpr (MinBlocks > 1) {
    // A hint to the driver (it may choose another split of L1 and shared memory): the most
    // shared memory, room for MinBlocks blocks side by side.
    static const bool carved = [] {
      ATTNLAB_CUDA_CHECK(cudaFuncSetAttribute(backward_mma_kernel<D, MinBlocks>,
                                              cudaFuncAttributePreferredSharedMemoryCarveout,
                                              cudaSharedmemCarveoutMaxShared));
      return true;
    }();
    (void)carved;
  }
  const unsigned blocks = grid_1d(static_cast<long long>(a.kv_heads) * ((a.m + T::BK - 1) / T::BK), "backward mma");
  backward_mma_kernel<D, MinBlocks><<<blocks, kThreads, T::smem_bytes, s>>>(a);
  ATTNLAB_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void launch_backward_mma(const BackwardArgs& a, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  // cp.async moves 16-byte chunks: every row starts 16-byte aligned when the bases are.
  if (!aligned16(a.q) || !aligned16(a.k) || !aligned16(a.v) || !aligned16(a.dout) || !aligned16(a.dk) ||
      !aligned16(a.dv))
    throw InputError("fused backward (tensor cores): device buffers must be 16-byte aligned");
  // Two blocks per SM (configuration 2) at D = 64 only: at 128 two blocks' shared memory exceeds an SM's.
  if (backward_mma_two_blocks(a))
    launch_d<64, 2>(a, s);
  else if (a.d_k == 64)
    launch_d<64, 1>(a, s);
  else
    launch_d<128, 1>(a, s);
}

}  // namespace attnlab::cuda
