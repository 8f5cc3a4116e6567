// The CUDA split-KV decode kernel (Flash-Decoding, Dao et al. 2023), on an fp32 or a bf16 cache.
// Two launches:
//   decode_split_kernel    kv_heads x splits blocks, 128 threads: block g splits + s, of (split
//                          s, key/value head g), walks its keys in tiles of 32 and keeps the
//                          online-softmax state (m, l, acc) of every query row of the group
//                          (kv_group heads x n queries, at most kDecodeMaxRows), so the cache is
//                          read once per key/value head:
//                            S (R, 32) = Q_g K_tileᵀ * scale log2 e      (masked keys -inf)
//                            m_new = max(m, max_j S);  alpha = exp2(m - m_new)
//                            P = exp2(S - m_new);  l = alpha l + sum_j P;  acc = alpha acc + P V_tile
//                          and writes the state of each row to the partials.
//   decode_combine_kernel  one block per query row: with M = max over the splits of m_s,
//                          l = sum_s l_s exp2(m_s - M), acc = sum_s acc_s exp2(m_s - M) (the
//                          log-sum-exp merge of every split at once), O = acc / l.
// Units: m in log2-scaled logits (the scale folded with log2 e, as in the fused kernels).
// With rules (kernels/rules.h: the problem's mask and score modifications, decode_split_kernel
// instantiated with RULES): the host's own plan cuts only the keys from decode_first_key on (a
// window's: every block works inside the window), and a block first narrows its split to the keys
// some row of the group may see (the union of MaskRule's intervals: under a requested plan, which
// cuts every key, the splits before a window compute nothing), then every score is
// MaskRule's and ScoreRule's (-inf, or the modified scaled score y) times log2(e) / T, so m is
// kept in log2 units of y / T; the combine is the same.
// The tile loads are pipelined: every thread issues all its 16-byte loads of the next tile into
// registers before the current tile's softmax and P V, so a tile's loads are in flight while the
// one before is computed. Only V goes to shared memory; the scores come from the K pieces the
// threads already hold in registers: a key's D values lie in L = D / (16-byte piece) consecutive
// lanes, each lane multiplies its piece with the same columns of the query row, and the L lanes'
// partial sums are added by shuffles, every key of the lane's pieces at once (halving: V pieces
// need V/2 + V/4 + ... + 1 + log2(L/V) shuffles, not V log2 L). Every thread computes scores,
// whatever the group's row count. (The H200 round of 2026-12-04 timed the kernel that stored K
// too and gave each score one thread's serial dot product over D, with R x 32 of the 128 threads
// busy: it was bound by shared memory and slower on every shape; docs/PERFORMANCE.md.)
// Two configurations (ATTNLAB_DECODE_CONFIG, kernels/tile_config.h; a single row per key/value
// head always runs 0):
//   0  the rows one at a time: each row's partial dot products summed over the key's L lanes by
//      their own chain of shuffles, P kept by row (R, kTile + 1), and each P V accumulator reading
//      its weight and its V value from shared memory for every multiply-add;
//   1  the rows four at a time (the rows padded to a multiple of four with zero queries and -inf
//      scores): the L lanes of a key hold 4 rows x L/4 pieces = L partial sums, which one halving
//      sum of L - 1 shuffles reduces so that every lane ends with one whole score (independent
//      work for the scheduler where 0 runs one short dependent chain per row); P kept by key
//      (kTile, kPtStride), so that P V loads a key's V value once and four rows' weights in one
//      16-byte load, for four multiply-adds. Written for the grouped-query shapes (8 query heads
//      over one key/value head), which the third H200 round measured at a third of the copy rate
//      or less with configuration 0.
// The combine is one block of 256 threads per query row: the splits' maxima reduced by the block,
// the splits summed in 256 / d strided slices, then the slices added.
// A bf16 cache (q, k, v in bf16: half the bytes read) is widened to fp32 as the tiles are loaded;
// the weights P are rounded to bf16 and l sums the rounded weights, as the lab's other bf16
// kernels do (cpu/bf16.h); every sum and acc stay fp32. The tiles are read 16 bytes per thread
// (4 floats or 8 bf16 values).
// Shared memory per block (d = 128): Q_g 8 KiB, the V tile 16 KiB, the scores 2.1 KiB (2.5 KiB
// under configuration 1), the per-row state; under the 48 KiB that needs no opt-in.
#include "kernels/decode.h"

#include "core/types.h"
#include "kernels/cuda_check.h"
#include "kernels/decode_layout.h"
#include "kernels/launch.h"
#include "kernels/rules.cuh"
#include "kernels/tile_config.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <string>

namespace attnlab::cuda {
namespace {

using decode_layout::kPtStride;
using decode_layout::kThreads;
using decode_layout::kTile;  // keys per tile: one lane per key in the softmax step
// Blocks per SM the split kernel is compiled for (at most 128 registers a thread): decode_splits
// asks for about four blocks per SM, which then run in one wave.
constexpr int kMinBlocks = 4;

static_assert(kPtStride % 4 == 0 && kPtStride >= kDecodeMaxRows && kDecodeMaxRows % 4 == 0);

// The scores' floats: by row (R, kTile + 1), or by key (kTile, kPtStride) under GROUPED.
template <bool GROUPED>
constexpr int score_floats() {
  return GROUPED ? kTile * kPtStride : kDecodeMaxRows * (kTile + 1);
}
template <int D, bool GROUPED>
constexpr int shared_floats() {
  return kDecodeMaxRows * D + kTile * D + score_floats<GROUPED>() + 3 * kDecodeMaxRows;
}

__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ float widen(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float weight(float p, float) { return p; }
__device__ __forceinline__ float weight(float p, __nv_bfloat16) { return __bfloat162float(__float2bfloat16_rn(p)); }

// Elements of T in 16 bytes, and those 16 bytes as floats.
template <typename T>
constexpr int kVec = 16 / static_cast<int>(sizeof(T));

// The sum of V values over the L lanes of a group (L a power of 2, V <= L; the group
// is L consecutive lanes and x = lane % L): S runs L/2, L/4, ..., 1. While more than one value is
// left, lane x and lane x ^ S split them: the lower lane keeps the first half and adds the
// partner's copy of it, the upper lane the second half; then the one value left is summed over the
// remaining bits. On return p[0] is the group's sum of value v (v from x's upper bits; the lanes
// that differ only in the lowest log2(L / V) bits hold the same v and sum).
template <int CNT, int S, int V>
__device__ __forceinline__ void group_sum_halving(float (&p)[V], int x, int& v) {
  if constexpr (S >= 1) {
    if constexpr (CNT > 1) {
      const bool upper = (x & S) != 0;
#pragma unroll
      for (int t = 0; t < CNT / 2; ++t) {
        const float send = upper ? p[t] : p[t + CNT / 2];
        const float keep = upper ? p[t + CNT / 2] : p[t];
        p[t] = keep + __shfl_xor_sync(0xffffffffu, send, S);
      }
      if (upper) v += CNT / 2;
      group_sum_halving<CNT / 2, S / 2>(p, x, v);
    } else {
      p[0] += __shfl_xor_sync(0xffffffffu, p[0], S);
      group_sum_halving<1, S / 2>(p, x, v);
    }
  }
}

// q (heads*n, D), k and v (kv_heads*m, D) of element type T (float or bf16); part_m, part_l (items*R), part_acc (items*R, D) with
// items = kv_heads * splits, item g * splits + s. causal_off < 0: no mask; else query i sees keys
// j <= i + causal_off. With RULES the rules' mask instead (causal_off unused) and their score mods;
// `scale_log2` is then log2(e) / T. GROUPED: configuration 1 (R >= 2).
template <int D, typename T, bool RULES, bool GROUPED>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    decode_split_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                        float* __restrict__ part_m, float* __restrict__ part_l, float* __restrict__ part_acc,
                        int n, int m, int group, int first, int keys, int splits, float scale_log2,
                        int causal_off, RulesArg<RULES> rules) {
  constexpr int RS = kThreads / D;                     // rows sharing a thread's column: 1 or 2
  constexpr int kAcc = (kDecodeMaxRows + RS - 1) / RS;  // accumulators per thread
  const int R = group * n;
  // The rows the block computes: R, or under GROUPED R padded to whole groups of four (the rows
  // past R multiply zero queries, score -inf and weigh 0; nothing of them is written out).
  const int RP = GROUPED ? (R + 3) / 4 * 4 : R;
  const int s = blockIdx.x % splits, g = blockIdx.x / splits;  // item g * splits + s
  // Split s of the `keys` keys from `first`: near-equal parts (their lengths differ by one at most).
  int k0 = first + near_equal_begin(s, keys, splits), k1 = first + near_equal_begin(s + 1, keys, splits);
  if constexpr (RULES) {
    // Only the keys some query of the group may see (every head shares the mask): the union of
    // the rows' intervals. A split outside it computes nothing and leaves the empty state.
    int lo, hi;
    rules.mask.union_interval(n, lo, hi);
    k0 = max(k0, lo);
    k1 = min(k1, hi);
  }
  extern __shared__ float smem[];
  float* qs = smem;                               // (R, D)
  float* vs = qs + kDecodeMaxRows * D;            // (kTile, D)
  float* ps = vs + kTile * D;                     // scores, then P (decode_layout::score_at)
  float* ms = ps + score_floats<GROUPED>();       // (R) running max
  float* ls = ms + kDecodeMaxRows;                // (R) running sum
  float* as = ls + kDecodeMaxRows;                // (R) the tile's rescale
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const T* qg = q + static_cast<size_t>(g) * R * D;  // the group's rows are consecutive in Q
  for (int i = tid; i < RP * D; i += kThreads) qs[i] = i < R * D ? widen(qg[i]) : 0.f;
  for (int r = tid; r < RP; r += kThreads) {
    ms[r] = -INFINITY;
    ls[r] = 0.f;
  }
  // This thread's accumulator column and row band (its rows: decode_layout::acc_row).
  const int c = tid % D, rb = tid / D;
  static_assert(!GROUPED || kAcc % 4 == 0, "whole runs of four rows");
  // Where row r's score of key j lies in ps.
  const auto at = [](int r, int j) { return decode_layout::score_at(GROUPED, r, j); };
  float acc[kAcc];
#pragma unroll
  for (int t = 0; t < kAcc; ++t) acc[t] = 0.f;
  __syncthreads();

  const T* kg = k + static_cast<size_t>(g) * m * D;
  const T* vg = v + static_cast<size_t>(g) * m * D;
  // The thread's 16-byte pieces of a tile: piece l is piece tid + l * kThreads of the tile's, key
  // j = (tid + l * kThreads) / L at columns cc = tid % L * W (the same for every l: kThreads pieces
  // are whole keys), raw until they are used; keys past the split's end are zero.
  constexpr int W = kVec<T>;
  constexpr int L = D / W;  // lanes (pieces) per key: 8, 16 or 32
  constexpr int kPieces = kTile * D / W / kThreads;
  static_assert(kPieces * kThreads * W == kTile * D && kThreads % L == 0 && kPieces <= L,
                "a tile is whole pieces for every thread, and kThreads pieces whole keys");
  const int x = tid % L, cc = x * W;
  uint4 kraw[kPieces], vraw[kPieces];
  const auto fetch = [&](int b0) {
    const int cols = min(kTile, k1 - b0);
#pragma unroll
    for (int l = 0; l < kPieces; ++l) {
      const int j = decode_layout::piece_key(tid, x, l, L);
      if (j < cols) {
        kraw[l] = __ldg(reinterpret_cast<const uint4*>(kg + static_cast<size_t>(b0 + j) * D + cc));
        vraw[l] = __ldg(reinterpret_cast<const uint4*>(vg + static_cast<size_t>(b0 + j) * D + cc));
      } else {
        kraw[l] = vraw[l] = make_uint4(0u, 0u, 0u, 0u);
      }
    }
  };
  // The score of row r and key j of the tile at b0 (cols keys), in log2 units, or -inf.
  const auto masked = [&](float sc, int r, int j, int b0, int cols) {
    if constexpr (RULES) {
      // Row r is query r % n of query head g * group + r / n; j < cols keeps the key below m.
      return j < cols ? rule_score(rules, sc, g * group + r / n, r % n, b0 + j, n, m, true) * scale_log2 : -INFINITY;
    } else {
      const bool visible = j < cols && (causal_off < 0 || b0 + j <= r % n + causal_off);
      return visible ? sc * scale_log2 : -INFINITY;
    }
  };
  if (k0 < k1) fetch(k0);
  for (int b0 = k0; b0 < k1; b0 += kTile) {
    const int cols = min(kTile, k1 - b0);
    // The fetched tile's V into shared memory (the previous tile's readers are past the loop's
    // last barrier), and its K pieces widened in registers.
    float kf[kPieces][W];
#pragma unroll
    for (int l = 0; l < kPieces; ++l) {
      const int j = decode_layout::piece_key(tid, x, l, L);
      const T* ke = reinterpret_cast<const T*>(&kraw[l]);
      const T* ve = reinterpret_cast<const T*>(&vraw[l]);
#pragma unroll
      for (int e = 0; e < W; ++e) {
        kf[l][e] = widen(ke[e]);
        vs[j * D + cc + e] = widen(ve[e]);
      }
    }
    // The next tile's loads, in flight from here on: a bf16 tile's before the scores (kraw is
    // widened into kf), an fp32 tile's after them, so that kf can stay the loaded registers
    // (within 128 registers a thread).
    constexpr bool kEarly = sizeof(T) == 2;
    if (kEarly && b0 + kTile < k1) fetch(b0 + kTile);
    // Every row's scores: the lane's partial dot product of each of its pieces with the row's
    // columns cc .. cc + W, summed over the key's L lanes; RG rows at a time (GROUPED: 4, so that
    // the RG * kPieces = L sums leave one whole score in every lane).
    constexpr int RG = GROUPED ? 4 : 1;
    static_assert(!GROUPED || RG * kPieces == L, "four rows' pieces are one sum per lane");
    for (int rg = 0; rg < RP; rg += RG) {  // RP is the block's: every lane takes part in the shuffles
      float part[RG * kPieces];
#pragma unroll
      for (int rr = 0; rr < RG; ++rr) {
        float qv[W];
#pragma unroll
        for (int e = 0; e < W; e += 4) {
          const float4 q4 = *reinterpret_cast<const float4*>(qs + (rg + rr) * D + cc + e);
          qv[e] = q4.x;
          qv[e + 1] = q4.y;
          qv[e + 2] = q4.z;
          qv[e + 3] = q4.w;
        }
#pragma unroll
        for (int l = 0; l < kPieces; ++l) {
          float a = 0.f;
#pragma unroll
          for (int e = 0; e < W; ++e) a = fmaf(qv[e], kf[l][e], a);
          part[rr * kPieces + l] = a;
        }
      }
      int value = 0;  // which of the lane's RG * kPieces sums part[0] ends as: row value / kPieces
      group_sum_halving<RG * kPieces, L / 2>(part, x, value);
      if (decode_layout::writes_sum(x, L, RG * kPieces)) {
        const int r = rg + value / kPieces;  // value == summed_value(x, L, RG * kPieces)
        const int j = decode_layout::piece_key(tid, x, value % kPieces, L);  // the key of that piece
        ps[at(r, j)] = r < R ? masked(part[0], r, j, b0, cols) : -INFINITY;
      }
    }
    if (!kEarly && b0 + kTile < k1) fetch(b0 + kTile);
    __syncthreads();
    // The online-softmax step: one warp per row, one lane per key of the tile.
    for (int r = warp; r < RP; r += kThreads / 32) {
      const float sx = ps[at(r, lane)];
      float mx = sx;
      for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      // Lane 0 alone reads and writes the row's state; the others take it by shuffle.
      const float m_old = __shfl_sync(0xffffffffu, lane == 0 ? ms[r] : 0.f, 0), m_new = fmaxf(m_old, mx);
      // Nothing visible so far: shift by 0, so that -inf - -inf makes no NaN; the weights and
      // alpha are then exp2(-inf) = 0.
      const float shift = m_new == -INFINITY ? 0.f : m_new;
      const float p = weight(exp2f(sx - shift), T{});
      float sum = p;
      for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      ps[at(r, lane)] = p;
      if (lane == 0) {
        const float alpha = exp2f(m_old - shift);
        as[r] = alpha;
        ls[r] = ls[r] * alpha + sum;
        ms[r] = m_new;
      }
    }
    __syncthreads();
    if constexpr (GROUPED) {
      // The thread's rows in runs of four (run u: rows 4 (rb + RS u) .. + 3); a run past RP is
      // skipped (rb is the same across a warp, so the branch is too).
#pragma unroll
      for (int u = 0; u < kAcc / 4; ++u) {
        const int r4 = decode_layout::acc_row(true, 4 * u, rb, RS);
        if (r4 < RP) {
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[4 * u + i] *= as[r4 + i];
        }
      }
#pragma unroll 4
      for (int j = 0; j < kTile; ++j) {
        const float vj = vs[j * D + c];
#pragma unroll
        for (int u = 0; u < kAcc / 4; ++u) {
          const int r4 = decode_layout::acc_row(true, 4 * u, rb, RS);
          if (r4 < RP) {
            const float4 p4 = *reinterpret_cast<const float4*>(ps + decode_layout::score_at(true, r4, j));
            acc[4 * u] = fmaf(p4.x, vj, acc[4 * u]);
            acc[4 * u + 1] = fmaf(p4.y, vj, acc[4 * u + 1]);
            acc[4 * u + 2] = fmaf(p4.z, vj, acc[4 * u + 2]);
            acc[4 * u + 3] = fmaf(p4.w, vj, acc[4 * u + 3]);
          }
        }
      }
    } else {
#pragma unroll
      for (int t = 0; t < kAcc; ++t) {
        const int r = decode_layout::acc_row(false, t, rb, RS);
        if (r < R) {
          float a = acc[t] * as[r];
#pragma unroll 8
          for (int j = 0; j < kTile; ++j) a = fmaf(ps[r * (kTile + 1) + j], vs[j * D + c], a);
          acc[t] = a;
        }
      }
    }
    __syncthreads();  // the tiles are overwritten next
  }
  const size_t base = (static_cast<size_t>(g) * splits + s) * R;
  for (int r = tid; r < R; r += kThreads) {
    part_m[base + r] = ms[r];
    part_l[base + r] = ls[r];
  }
#pragma unroll
  for (int t = 0; t < kAcc; ++t) {
    const int r = decode_layout::acc_row(GROUPED, t, rb, RS);
    if (r < R) part_acc[(base + r) * D + c] = acc[t];
  }
}

// The combine: one block of kCombineThreads per query row (head h, query i; row h * n + i of o).
// The block's max of the splits' m first; then thread (slice, c) sums splits slice, slice + S, ...
// (S = slices) of column c and of l, and slice 0 adds the other slices' sums to its own.
constexpr int kCombineThreads = 256;
template <int D>
__global__ void __launch_bounds__(kCombineThreads)
    decode_combine_kernel(const float* __restrict__ part_m, const float* __restrict__ part_l,
                          const float* __restrict__ part_acc, float* __restrict__ o, int n, int group,
                          int splits) {
  constexpr int S = kCombineThreads / D, kWarps = kCombineThreads / 32;
  __shared__ float warp_max[kWarps];
  __shared__ float slice_acc[S][D];
  __shared__ float slice_l[S];
  const int row = blockIdx.x, h = row / n, i = row % n;
  const int g = h / group, R = group * n, r = (h % group) * n + i;
  const int tid = threadIdx.x, c = tid % D, slice = tid / D;
  const size_t first = static_cast<size_t>(g) * splits * R + r;  // split s of the row: first + s * R
  float mx = -INFINITY;
  for (int s = tid; s < splits; s += kCombineThreads) mx = fmaxf(mx, part_m[first + static_cast<size_t>(s) * R]);
  for (int off = 16; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
  if (tid % 32 == 0) warp_max[tid / 32] = mx;
  __syncthreads();
  mx = warp_max[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) mx = fmaxf(mx, warp_max[w]);
  float l = 0.f, a = 0.f;
#pragma unroll 4
  for (int s = slice; s < splits; s += S) {
    const size_t it = first + static_cast<size_t>(s) * R;
    const float w = exp2f(part_m[it] - mx);  // a split the row sees nothing of: exp2(-inf) = 0
    l = fmaf(part_l[it], w, l);
    a = fmaf(part_acc[it * D + c], w, a);
  }
  slice_acc[slice][c] = a;
  if (c == 0) slice_l[slice] = l;
  __syncthreads();
  if (slice == 0) {
#pragma unroll
    for (int t = 1; t < S; ++t) {
      a += slice_acc[t][c];
      l += slice_l[t];
    }
    o[static_cast<size_t>(row) * D + c] = a / l;
  }
}

template <int D, typename T, bool RULES, bool GROUPED>
void launch(const T* q, const T* k, const T* v, float* o, float* partials, int heads, int group,
            int n, int m, int first, int splits, float scale_log2, int causal_off, cudaStream_t st,
            const RulesArg<RULES>& rules) {
  const int kv_heads = heads / group, R = group * n;
  const size_t items = static_cast<size_t>(kv_heads) * splits;
  float* pm = partials;
  float* pl = pm + items * R;
  float* pa = pl + items * R;
  const size_t smem = shared_floats<D, GROUPED>() * sizeof(float);
  // One block per item, on grid.x (grid.y would stop at 65535 key/value heads).
  const unsigned grid = grid_1d(static_cast<long long>(items), "decode splits");
  decode_split_kernel<D, T, RULES, GROUPED><<<grid, kThreads, smem, st>>>(q, k, v, pm, pl, pa, n, m, group, first,
                                                                          m - first, splits, scale_log2, causal_off,
                                                                          rules);
  ATTNLAB_CUDA_CHECK(cudaGetLastError());
  const unsigned rows = grid_1d(static_cast<long long>(heads) * n, "decode combine");
  decode_combine_kernel<D><<<rows, kCombineThreads, 0, st>>>(pm, pl, pa, o, n, group, splits);
  ATTNLAB_CUDA_CHECK(cudaGetLastError());
}

// The launch for the head dim and the configuration.
template <typename T, bool RULES>
void launch_for(int d, const T* q, const T* k, const T* v, float* o, float* partials, int heads, int group, int n,
                int m, int first, int splits, float scale_log2, int causal_off, cudaStream_t st,
                const RulesArg<RULES>& rules) {
  const bool grouped = decode_rows_grouped(group * n);
  if (d == 64 && grouped)
    launch<64, T, RULES, true>(q, k, v, o, partials, heads, group, n, m, first, splits, scale_log2, causal_off, st, rules);
  else if (d == 64)
    launch<64, T, RULES, false>(q, k, v, o, partials, heads, group, n, m, first, splits, scale_log2, causal_off, st, rules);
  else if (grouped)
    launch<128, T, RULES, true>(q, k, v, o, partials, heads, group, n, m, first, splits, scale_log2, causal_off, st, rules);
  else
    launch<128, T, RULES, false>(q, k, v, o, partials, heads, group, n, m, first, splits, scale_log2, causal_off, st, rules);
}

}  // namespace

bool decode_rows_grouped(int rows) { return rows >= 2 && decode_config() == 1; }

int decode_splits(int kv_heads, int keys, int requested) {
  int sms = 1;
  if (requested <= 0) {
    int dev = 0;
    ATTNLAB_CUDA_CHECK(cudaGetDevice(&dev));
    ATTNLAB_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  }
  return decode_split_count(sms, kv_heads, keys, requested);
}

std::size_t decode_partials_floats(int heads, int n, int d, int splits) {
  // Per split, every query row of every key/value head: m, l and d values of acc.
  return static_cast<std::size_t>(heads) * n * splits * (2 + static_cast<std::size_t>(d));
}

namespace {

template <typename T>
void decode_attention(const T* q, const T* k, const T* v, float* o, float* partials, int heads, int kv_group,
                      int n, int m, int d, int first, int splits, float scale, bool causal, void* stream,
                      const KernelRules* rules) {
  if (heads < 1 || kv_group < 1 || heads % kv_group != 0 || n < 1 || m < n || first < 0 || first >= m ||
      splits < 1 || splits > m - first)
    throw InputError("decode: bad problem (heads " + std::to_string(heads) + ", kv_group " +
                     std::to_string(kv_group) + ", n " + std::to_string(n) + ", m " + std::to_string(m) +
                     ", first key " + std::to_string(first) + ", splits " + std::to_string(splits) + ")");
  if (const std::string why = decode_shape_error(d, d, kv_group, n); !why.empty()) throw InputError(why);
  if (rules != nullptr && causal) throw InputError("decode: with rules the mask is the rules' (causal false)");
  const auto st = static_cast<cudaStream_t>(stream);
  const int causal_off = causal ? m - n : -1;
  const float scale_log2 = scale * kLog2e;
  if (rules != nullptr)
    launch_for<T, true>(d, q, k, v, o, partials, heads, kv_group, n, m, first, splits, scale_log2, -1, st, *rules);
  else
    launch_for<T, false>(d, q, k, v, o, partials, heads, kv_group, n, m, first, splits, scale_log2, causal_off, st,
                         {});
}

}  // namespace

void decode_attention_fp32(const float* q, const float* k, const float* v, float* o, float* partials,
                           int heads, int kv_group, int n, int m, int d, int first, int splits, float scale,
                           bool causal, void* stream, const KernelRules* rules) {
  decode_attention(q, k, v, o, partials, heads, kv_group, n, m, d, first, splits, scale, causal, stream, rules);
}

void decode_attention_bf16(const std::uint16_t* q, const std::uint16_t* k, const std::uint16_t* v, float* o,
                           float* partials, int heads, int kv_group, int n, int m, int d, int first, int splits,
                           float scale, bool causal, void* stream, const KernelRules* rules) {
  using B = __nv_bfloat16;
  decode_attention(reinterpret_cast<const B*>(q), reinterpret_cast<const B*>(k), reinterpret_cast<const B*>(v), o,
                   partials, heads, kv_group, n, m, d, first, splits, scale, causal, stream, rules);
}

}  // namespace attnlab::cuda
