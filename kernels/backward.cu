// The fused backward pass on CUDA cores (kernels/backward.h has the launchers and the formulas;
// core/backward.h the chain's gradients): FlashAttention-2's backward, fp32 arithmetic on fp32 or
// bf16 inputs, with the problem's rules (kernels/rules.h) applied exactly as the fused forward
// applies them.
//
// Configuration 0 (kernels/backward.h; configuration 1 is the tensor-core kernel of
// kernels/backward_mma.cu, which takes the statistics pass from here on its own tiles).
// Version 1 (the only one): register-blocked FFMA, 256 threads as a 16 x 16 grid, tr = tid / 16,
// tc = tid % 16. Every tile lives in shared memory as fp32 (bf16 inputs are widened as they are
// loaded); rows of Q, dO, K and V are padded to an odd stride, so that 16 rows read at one column
// fall in 16 banks.
//   stats kernel, one block per (query head, query tile of BQ): D = rowsum(dO ∘ O) (a warp per
//     row), then the keys in tiles of BK: the score tile (the same function as the backward's),
//     the running max and sum over the 16 threads of a row (xor-shuffles inside half a warp),
//     lse2 = max + log2(sum) in log2 units.
//   backward kernel, one block per (key/value head, key tile of BK), heaviest (first) key tiles
//     first: K and V stay in shared memory; the block walks every query head of its group and
//     every query tile the block mask does not rule out, and per tile
//       y  = score tile (Q Kᵀ, ScoreRule, MaskRule in Partial tiles)   thread: queries tr + 16i,
//       dP = dO Vᵀ                                                       keys tc + 16j
//       P  = 2^(y c − lse2),  dS = P (dP − D),  Σ dS (y c − lse2) for dT;  dS · g (the
//            soft-cap's factor and s / T) goes to shared memory with P
//       dV += Pᵀ dO,  dK += (dS g)ᵀ Q            thread: keys tr + 16a, columns tc + 16b, in
//                                                registers for the whole walk, written once
//       dQ += (dS g) K                           thread: queries tr + 16i, columns tc + 16b,
//                                                atomicAdd into dq (fp32)
// dQ by atomics rather than a second pass: a separate dQ kernel would recompute S and dP (two of
// the five products again) to own each query row; the atomics add one fp32 add per (query,
// column, key tile) to L2 and make the summation order of dQ vary between runs in the last bits.
// dK and dV are owned by one block each: deterministic.
// The row statistics come from a kernel of their own rather than from the fused forward: the
// forward runs one of three kernels (fp32 CUDA cores, 3xTF32, bf16 mma) on a per-head copy of a
// grouped K and V, each tuned to its registers; a statistics pass through the backward's own
// score tile serves both precisions, reads the grouped heads, and makes P the backward recomputes
// sum to 1 over exactly the scores it recomputes. It costs one product in six more.
// dT = −Σ dS ∘ y / T² is summed as −Σ dS ∘ x ln 2 / T, x = y c − lse2 the exponent of P (the
// logit minus its row's log-sum-exp, in log2 units): the same value, as every row of dS sums to 0,
// but without the cancellation of Σ dS ∘ y at small T, where one key's dS y nearly cancels the
// rest. Each thread sums its tile's dS ∘ x in fp32 and adds the tile into a double; the block
// then reduces in double (shuffles, then shared memory) and adds its sum to *dt with one double
// atomic.
// Tiles by the bucket D of max(d_k, d_v) (dims padded with zeros):
//   D 32, 64: BQ 64, BK 64    D 128: BQ 64, BK 32    D 256: BQ 32, BK 32
// so that the dK and dV accumulators (2 BK D / 256 per thread) stay in registers.
#include "kernels/cuda_check.h"  // first: its pragma silences Eigen's nvcc notes

#include "core/types.h"
#include "kernels/backward.h"
#include "kernels/launch.h"
#include "kernels/rules.cuh"
#include "kernels/tile_config.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

namespace attnlab::cuda {
namespace {

constexpr int kThreads = 256;

// The score tile (score_tile, the statistics pass): BQ queries by BK keys, dims padded to D. The
// statistics pass runs on the tiles of the kernel after it: BwdTile's, or the tensor-core
// kernel's (kMmaBackwardTile).
template <int D_, int BQ_, int BK_>
struct ScoreTile {
  static constexpr int D = D_;
  static constexpr int BQ = BQ_;      // queries per tile
  static constexpr int BK = BK_;      // keys per block
  static constexpr int LD = D + 1;    // row stride of Q, dO, K, V: odd
  static constexpr int TM = BQ / 16;  // queries per thread (score, dP, dQ)
  static constexpr int TN = BK / 16;  // keys per thread (score, dP)
  static_assert(BQ % 16 == 0 && BK % 32 == 0 && D % 16 == 0);
  static constexpr int stats_floats = BQ * LD + BK * LD;
};

// The CUDA-core kernel's tile of bucket D.
template <int D_>
struct BwdTile : ScoreTile<D_, (D_ <= 128 ? 64 : 32), (D_ <= 64 ? 64 : 32)> {
  using S = ScoreTile<D_, (D_ <= 128 ? 64 : 32), (D_ <= 64 ? 64 : 32)>;
  using S::BK, S::BQ, S::D, S::LD;
  static constexpr int LP = BK + 16;  // row stride of P, dS: rows tr and tr + 1 in other bank halves
  static constexpr int TK = BK / 16;  // keys per thread (dK, dV)
  static constexpr int TD = D / 16;   // columns per thread (dK, dV, dQ)
  static constexpr int floats = 2 * BK * LD + 2 * BQ * LD + 2 * BQ * LP + 2 * BQ;
  // Blocks per SM the backward kernel is built for (__launch_bounds__): two where two blocks'
  // shared memory fits in an SM's 228 KB, else one: a second block could not be resident anyway,
  // and without the bound ptxas would still aim at two and spill the dK, dV accumulators.
  static constexpr int MINB = 2 * (floats * 4 + 1024) <= 228 * 1024 ? 2 : 1;
};

__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ float widen(std::uint16_t x) { return __uint_as_float(static_cast<unsigned>(x) << 16); }

// dst (ROWS, LD) in shared memory = rows [0, rows_valid) of src (rows of `cols` values), columns
// [0, D); zero outside, so padded rows and dims add nothing. Consecutive threads take consecutive
// columns of a row: coalesced reads.
template <int ROWS, int D, int LD, class In>
__device__ __forceinline__ void load_tile(float* dst, const In* src, int rows_valid, int cols) {
  for (int idx = threadIdx.x; idx < ROWS * D; idx += kThreads) {
    const int r = idx / D, c = idx % D;
    dst[r * LD + c] = r < rows_valid && c < cols ? widen(src[static_cast<std::size_t>(r) * cols + c]) : 0.f;
  }
}

// acc (R, C) += Σ_k A(r, k) B(c, k) over k < K, for this thread's rows tr + 16r and columns
// tc + 16c, all operands in shared memory: A(r, k) = A[r AR + k AK], B(c, k) = B[c BC + k BK].
// The five products of the backward are this one loop with other strides (the score tile,
// dP, dV, dK, dQ); in each, the 16 columns a warp reads at one k are 16 banks (consecutive, or
// an odd stride apart) and its rows are two addresses (a broadcast). UNROLL: the k loop's unroll
// (4 for the products over a tile's queries or keys, where the dK and dV accumulators are live
// too and deeper unrolling only costs registers).
template <int R, int C, int K, int AR, int AK, int BC, int BK, int UNROLL = 8>
__device__ __forceinline__ void accumulate(float (&acc)[R][C], const float* A, const float* B) {
  const int tr = threadIdx.x / 16, tc = threadIdx.x % 16;
#pragma unroll UNROLL
  for (int k = 0; k < K; ++k) {
    float a[R], b[C];
#pragma unroll
    for (int r = 0; r < R; ++r) a[r] = A[(tr + 16 * r) * AR + k * AK];
#pragma unroll
    for (int c = 0; c < C; ++c) b[c] = B[(tc + 16 * c) * BC + k * BK];
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int c = 0; c < C; ++c) acc[r][c] = fmaf(a[r], b[c], acc[r][c]);
    }
  }
}

template <int R, int C>
__device__ __forceinline__ void zero(float (&acc)[R][C]) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int c = 0; c < C; ++c) acc[r][c] = 0.f;
  }
}

// y (TM, TN): the scores of this thread's queries q0 + tr + 16i and keys k0 + tc + 16j of query
// head h as the forward's softmax takes them: rule_score of Qs · Ks (the modified scaled score),
// -inf where masked or outside the problem. Qs (BQ, LD), Ks (BK, LD). The stats and the backward
// kernel both call this, so P is recomputed from the very scores lse2 was summed over.
template <class T>
__device__ __forceinline__ void score_tile(const float* Qs, const float* Ks, const KernelRules& rules, int h, int q0,
                                           int k0, int n, int m, bool partial, float (&y)[T::TM][T::TN]) {
  const int tr = threadIdx.x / 16, tc = threadIdx.x % 16;
  zero(y);
  accumulate<T::TM, T::TN, T::D, T::LD, 1, T::LD, 1>(y, Qs, Ks);
#pragma unroll
  for (int i = 0; i < T::TM; ++i) {
#pragma unroll
    for (int j = 0; j < T::TN; ++j)
      y[i][j] = rule_score(rules, y[i][j], h, q0 + tr + 16 * i, k0 + tc + 16 * j, n, m, partial);
  }
}

// Sum and max over the 16 threads of a row (lanes tr * 16 .. tr * 16 + 15 of the warp).
__device__ __forceinline__ float row_max16(float x) {
#pragma unroll
  for (int o = 1; o < 16; o <<= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
__device__ __forceinline__ float row_sum16(float x) {
#pragma unroll
  for (int o = 1; o < 16; o <<= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// Grid: heads * ceil(n / BQ) blocks; block b: query head b % heads, query tile b / heads.
// Writes dd and lse2 of the tile's rows (heads n).
template <int D, int BQ, int BK, class In>
__global__ void __launch_bounds__(kThreads) backward_stats_kernel(BackwardArgs a) {
  using T = ScoreTile<D, BQ, BK>;
  extern __shared__ float4 smem_f4[];
  float* Qs = reinterpret_cast<float*>(smem_f4);  // (BQ, LD)
  float* Ks = Qs + T::BQ * T::LD;                 // (BK, LD)
  const In* q = static_cast<const In*>(a.q);
  const In* k = static_cast<const In*>(a.k);
  const In* dout = static_cast<const In*>(a.dout);
  const int h = blockIdx.x % a.heads, qb = blockIdx.x / a.heads;
  const int g = h / (a.heads / a.kv_heads);
  const int q0 = qb * T::BQ;
  const int tid = threadIdx.x, tr = tid / 16, tc = tid % 16;

  // D = rowsum(dO ∘ O): a warp per row, lanes over the columns.
  for (int r = tid / 32; r < T::BQ && q0 + r < a.n; r += kThreads / 32) {
    const std::size_t row = static_cast<std::size_t>(h) * a.n + q0 + r;
    float s = 0.f;
    for (int c = tid % 32; c < a.d_v; c += 32)
      s = fmaf(widen(dout[row * a.d_v + c]), a.o[row * a.d_v + c], s);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (tid % 32 == 0) a.dd[row] = s;
  }

  load_tile<T::BQ, D, T::LD>(Qs, q + (static_cast<std::size_t>(h) * a.n + q0) * a.d_k, min(T::BQ, a.n - q0), a.d_k);
  float mx[T::TM], sum[T::TM];
#pragma unroll
  for (int i = 0; i < T::TM; ++i) {
    mx[i] = -INFINITY;
    sum[i] = 0.f;
  }
  int kt, last;
  key_tile_range(a.rules.blocks, qb, kt, last);
  for (kt = next_key_tile(a.rules.blocks, qb, kt, last); kt < last; kt = next_key_tile(a.rules.blocks, qb, kt + 1, last)) {
    const int k0 = kt * T::BK;
    __syncthreads();  // the previous tile's reads of Ks are finished
    load_tile<T::BK, D, T::LD>(Ks, k + (static_cast<std::size_t>(g) * a.m + k0) * a.d_k, min(T::BK, a.m - k0), a.d_k);
    __syncthreads();
    float y[T::TM][T::TN];
    score_tile<T>(Qs, Ks, a.rules, h, q0, k0, a.n, a.m, partial_tile(a.rules.blocks, qb, kt), y);
#pragma unroll
    for (int i = 0; i < T::TM; ++i) {
      float tmax = -INFINITY;
#pragma unroll
      for (int j = 0; j < T::TN; ++j) {
        y[i][j] *= a.logit_log2;
        tmax = fmaxf(tmax, y[i][j]);
      }
      const float nmax = fmaxf(mx[i], row_max16(tmax));
      // Every key so far masked: shift by 0, so that -inf - -inf never makes NaN.
      const float shift = nmax == -INFINITY ? 0.f : nmax;
      float part = 0.f;
#pragma unroll
      for (int j = 0; j < T::TN; ++j) part += exp2f(y[i][j] - shift);
      sum[i] = sum[i] * exp2f(mx[i] - shift) + part;
      mx[i] = nmax;
    }
  }
#pragma unroll
  for (int i = 0; i < T::TM; ++i) {
    const float l = row_sum16(sum[i]);
    const int query = q0 + tr + 16 * i;
    if (tc == 0 && query < a.n) a.lse2[static_cast<std::size_t>(h) * a.n + query] = mx[i] + log2f(l);
  }
}

// Grid: kv_heads * ceil(m / BK) blocks; block b: key/value head b % kv_heads, key tile
// b / kv_heads (the first key tiles, which the most queries see under a causal mask, first).
template <int D, class In>
__global__ void __launch_bounds__(kThreads, BwdTile<D>::MINB) backward_kernel(BackwardArgs a) {
  using T = BwdTile<D>;
  constexpr int BQ = T::BQ, BK = T::BK, LD = T::LD, LP = T::LP;
  constexpr int TM = T::TM, TN = T::TN, TK = T::TK, TD = T::TD;
  extern __shared__ float4 smem_f4[];
  float* Ks = reinterpret_cast<float*>(smem_f4);  // (BK, LD)
  float* Vs = Ks + BK * LD;                       // (BK, LD)
  float* Qs = Vs + BK * LD;                       // (BQ, LD)
  float* dOs = Qs + BQ * LD;                      // (BQ, LD)
  float* Ps = dOs + BQ * LD;                      // (BQ, LP)
  float* dSs = Ps + BQ * LP;                      // (BQ, LP): dS times g, the gradient of the raw scores
  float* Ls = dSs + BQ * LP;                      // (BQ): lse2
  float* Ds = Ls + BQ;                            // (BQ): D
  const In* q = static_cast<const In*>(a.q);
  const In* dout = static_cast<const In*>(a.dout);
  const KernelRules& rules = a.rules;
  const DeviceBlockMask& blocks = rules.blocks;

  const int g = blockIdx.x % a.kv_heads, kb = blockIdx.x / a.kv_heads;
  const int k0 = kb * BK, keys = min(BK, a.m - k0);
  const int group = a.heads / a.kv_heads;
  const int tid = threadIdx.x, tr = tid / 16, tc = tid % 16;
  const float cap = rules.score.softcap;

  load_tile<BK, D, LD>(Ks, static_cast<const In*>(a.k) + (static_cast<std::size_t>(g) * a.m + k0) * a.d_k, keys, a.d_k);
  load_tile<BK, D, LD>(Vs, static_cast<const In*>(a.v) + (static_cast<std::size_t>(g) * a.m + k0) * a.d_v, keys, a.d_v);

  float dv_acc[TK][TD], dk_acc[TK][TD];
  zero(dv_acc);
  zero(dk_acc);
  double dt = 0;

  for (int h = g * group; h < (g + 1) * group; ++h) {
    for (int qb = 0; qb < blocks.q_blocks; ++qb) {
      const std::uint8_t kind = blocks.kind[static_cast<std::size_t>(qb) * blocks.k_blocks + kb];
      if (kind == static_cast<std::uint8_t>(BlockKind::Empty)) continue;
      count_visit(rules);
      const int q0 = qb * BQ, rows = min(BQ, a.n - q0);
      const std::size_t row0 = static_cast<std::size_t>(h) * a.n + q0;
      __syncthreads();  // the previous tile's reads of Qs, dOs, Ps, dSs, Ls, Ds are finished
      load_tile<BQ, D, LD>(Qs, q + row0 * a.d_k, rows, a.d_k);
      load_tile<BQ, D, LD>(dOs, dout + row0 * a.d_v, rows, a.d_v);
      for (int r = tid; r < BQ; r += kThreads) {
        Ls[r] = r < rows ? a.lse2[row0 + r] : 0.f;
        Ds[r] = r < rows ? a.dd[row0 + r] : 0.f;
      }
      __syncthreads();

      float y[TM][TN];
      score_tile<T>(Qs, Ks, rules, h, q0, k0, a.n, a.m, kind == static_cast<std::uint8_t>(BlockKind::Partial), y);
      float dp[TM][TN];  // dO Vᵀ
      zero(dp);
      accumulate<TM, TN, D, LD, 1, LD, 1>(dp, dOs, Vs);
      float dt_tile = 0.f;
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        const int r = tr + 16 * i;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
          const int c = tc + 16 * j;
          // Masked (y = -inf): P = 2^-inf = 0 exactly, and dS, its share of dT and the soft-cap
          // factor (inf there) are left out.
          const float x = y[i][j] * a.logit_log2 - Ls[r];
          const float p = exp2f(x);
          float ds_scores = 0.f;
          if (y[i][j] != -INFINITY) {
            const float ds = p * (dp[i][j] - Ds[r]);
            dt_tile = fmaf(ds, x, dt_tile);
            const float t = cap > 0.f ? y[i][j] / cap : 0.f;  // tanh of the capped argument
            ds_scores = ds * (1.f - t * t) * a.grad_scale;
          }
          Ps[r * LP + c] = p;
          dSs[r * LP + c] = ds_scores;
        }
      }
      dt += static_cast<double>(dt_tile);
      __syncthreads();

      // dV += Pᵀ dO and dK += (dS g)ᵀ Q over the tile's queries.
      accumulate<TK, TD, BQ, 1, LP, 1, LD, 4>(dv_acc, Ps, dOs);
      accumulate<TK, TD, BQ, 1, LP, 1, LD, 4>(dk_acc, dSs, Qs);

      // dQ += (dS g) K for the tile's queries, added into dq (other key tiles add theirs).
      float dq[TM][TD];
      zero(dq);
      accumulate<TM, TD, BK, LP, 1, 1, LD, 4>(dq, dSs, Ks);
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        const int r = tr + 16 * i;
        if (r >= rows) continue;
#pragma unroll
        for (int b = 0; b < TD; ++b) {
          const int col = tc + 16 * b;
          if (col < a.d_k) atomicAdd(a.dq + (row0 + r) * a.d_k + col, dq[i][b]);
        }
      }
    }
  }

  // dK and dV of the block's keys: owned by this block alone.
#pragma unroll
  for (int t = 0; t < TK; ++t) {
    const int key = tr + 16 * t;
    if (key >= keys) continue;
    const std::size_t row = static_cast<std::size_t>(g) * a.m + k0 + key;
#pragma unroll
    for (int b = 0; b < TD; ++b) {
      const int col = tc + 16 * b;
      if (col < a.d_k) a.dk[row * a.d_k + col] = dk_acc[t][b];
      if (col < a.d_v) a.dv[row * a.d_v + col] = dv_acc[t][b];
    }
  }

  // Σ dS ∘ x of the block, in double: a warp's lanes, then the warps through shared memory.
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) dt += __shfl_xor_sync(0xffffffffu, dt, o);
  __syncthreads();  // every read of Ps is finished: its first doubles take the warps' sums
  double* warp_dt = reinterpret_cast<double*>(Ps);
  if (tid % 32 == 0) warp_dt[tid / 32] = dt;
  __syncthreads();
  if (tid == 0) {
    double s = 0;
    for (int w = 0; w < kThreads / 32; ++w) s += warp_dt[w];
    atomicAdd(a.dt, s);
  }
}

thread_local std::string last_kernel;

// The statistics pass on the tiles of the kernel that follows it (their block mask is one).
template <int D, class In>
void launch_stats_d(const BackwardArgs& a, cudaStream_t s) {
  const auto run = [&](auto tile) {
    using T = decltype(tile);
    constexpr std::size_t bytes = T::stats_floats * sizeof(float);
    allow_dynamic_smem<backward_stats_kernel<D, T::BQ, T::BK, In>>(bytes);
    const unsigned blocks = grid_1d(static_cast<long long>(a.heads) * ((a.n + T::BQ - 1) / T::BQ), "backward stats");
    backward_stats_kernel<D, T::BQ, T::BK, In><<<blocks, kThreads, bytes, s>>>(a);
    ATTNLAB_CUDA_CHECK(cudaGetLastError());
  };
  if constexpr (std::is_same_v<In, std::uint16_t>) {
    if (a.tensor_cores) {
      run(ScoreTile<D, kMmaBackwardTile.q_tile, kMmaBackwardTile.k_tile>{});
      return;
    }
  }
  run(ScoreTile<D, BwdTile<D>::BQ, BwdTile<D>::BK>{});
}

template <int D, class In>
void launch_backward_d(const BackwardArgs& a, cudaStream_t s) {
  if (a.tensor_cores) {
    last_kernel = "backward bf16 mma D=" + std::to_string(D) + " BQ=" + std::to_string(kMmaBackwardTile.q_tile) +
                  " BK=" + std::to_string(kMmaBackwardTile.k_tile) + (backward_mma_two_blocks(a) ? " 2 blocks/SM" : "");
    launch_backward_mma(a, s);
    return;
  }
  using T = BwdTile<D>;
  constexpr std::size_t bytes = T::floats * sizeof(float);
  allow_dynamic_smem<backward_kernel<D, In>>(bytes);
  last_kernel = std::string("backward ") + (a.bf16 ? "bf16" : "fp32") + " D=" + std::to_string(D) +
                " BQ=" + std::to_string(T::BQ) + " BK=" + std::to_string(T::BK);
  const unsigned blocks = grid_1d(static_cast<long long>(a.kv_heads) * ((a.m + T::BK - 1) / T::BK), "backward");
  backward_kernel<D, In><<<blocks, kThreads, bytes, s>>>(a);
  ATTNLAB_CUDA_CHECK(cudaGetLastError());
}

// The checks both launchers make, and the bucket of the head dims.
int checked_bucket(const BackwardArgs& a) {
  if (a.heads < 1 || a.kv_heads < 1 || a.heads % a.kv_heads != 0 || a.n < 1 || a.m < 1 || a.d_k < 1 || a.d_v < 1)
    throw InputError("fused backward: bad shape (heads " + std::to_string(a.heads) + ", kv_heads " +
                     std::to_string(a.kv_heads) + ", n " + std::to_string(a.n) + ", m " + std::to_string(a.m) +
                     ", d_k " + std::to_string(a.d_k) + ", d_v " + std::to_string(a.d_v) + ")");
  if (!backward_takes(a.d_k, a.d_v, a.bf16))
    throw InputError(std::string("fused backward: ") + (a.bf16 ? "bf16 takes d_k == d_v in {64, 128}" : "fp32 takes d_k, d_v <= 256") +
                     ", got d_k " + std::to_string(a.d_k) + ", d_v " + std::to_string(a.d_v));
  if (a.tensor_cores && !a.bf16) throw InputError("fused backward: the tensor-core kernel takes bf16 inputs only");
  const FusedTile t = backward_tile(a.d_k, a.d_v, a.tensor_cores);
  check_rules_tile(a.rules, a.n, a.m, t.q_tile, t.k_tile, "fused backward");
  const int dmax = a.d_k > a.d_v ? a.d_k : a.d_v;
  return dmax <= 32 ? 32 : dmax <= 64 ? 64 : dmax <= 128 ? 128 : 256;
}

// Runs launch<D, In> for the bucket of `a`: fp32 every bucket, bf16 the forward's two.
template <template <int, class> class Launch>
void dispatch(const BackwardArgs& a, void* stream) {
  const int bucket = checked_bucket(a);
  auto s = static_cast<cudaStream_t>(stream);
  if (a.bf16) {
    if (bucket == 64) Launch<64, std::uint16_t>::run(a, s);
    else Launch<128, std::uint16_t>::run(a, s);
    return;
  }
  switch (bucket) {
    case 32: Launch<32, float>::run(a, s); break;
    case 64: Launch<64, float>::run(a, s); break;
    case 128: Launch<128, float>::run(a, s); break;
    default: Launch<256, float>::run(a, s); break;
  }
}

template <int D, class In>
struct StatsLaunch {
  static void run(const BackwardArgs& a, cudaStream_t s) { launch_stats_d<D, In>(a, s); }
};
template <int D, class In>
struct BackwardLaunch {
  static void run(const BackwardArgs& a, cudaStream_t s) { launch_backward_d<D, In>(a, s); }
};

}  // namespace

int backward_config(bool bf16) {
  const int config = config_from_env("ATTNLAB_BACKWARD_CONFIG", kBackwardConfigs, kBackwardDefault[bf16 ? 1 : 0]);
  return bf16 ? config : 0;
}

FusedTile backward_tile(int d_k, int d_v, bool tensor_cores) {
  if (tensor_cores) return kMmaBackwardTile;
  const int dmax = d_k > d_v ? d_k : d_v;
  if (dmax <= 64) return {BwdTile<64>::BQ, BwdTile<64>::BK};
  if (dmax <= 128) return {BwdTile<128>::BQ, BwdTile<128>::BK};
  return {BwdTile<256>::BQ, BwdTile<256>::BK};
}

bool backward_takes(int d_k, int d_v, bool bf16) {
  if (bf16) return d_k == d_v && (d_k == 64 || d_k == 128);
  return d_k >= 1 && d_v >= 1 && d_k <= 256 && d_v <= 256;
}

void launch_backward_stats(const BackwardArgs& a, void* stream) { dispatch<StatsLaunch>(a, stream); }
void launch_backward(const BackwardArgs& a, void* stream) { dispatch<BackwardLaunch>(a, stream); }
std::string last_backward_kernel() { return last_kernel; }

}  // namespace attnlab::cuda
