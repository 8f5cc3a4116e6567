// Streaming kernels of the staged chain (kernels/stream_pool.h): pooled images and exact rows of
// stages 1-3 for problems whose (n, m) stages are never materialised, one version each.
//   row_stats   a block per 64 listed query rows, walking all m keys in tiles of 64: each thread
//               keeps an online (max, sum of exp) for its 4 rows over its 4 columns of every tile,
//               merged across the 16 threads of a row by shuffles at the end.
//   pool        a block per (pixel-row group, chunk of pixel columns): for each tile of 64 flat
//               columns of the chunk it walks every row of the group in tiles of 64, recomputes
//               the scores, derives logits and weights cell by cell (weights from the row stats)
//               and accumulates per column in registers; the columns are then reduced across
//               threads in shared memory and merged into per-pixel accumulators in shared memory.
//               No atomics on the pixels: a pixel's block is reduced by the one thread block that
//               owns it, so the result does not depend on scheduling. The range (lo/hi over all
//               cells) goes through atomicMin/Max on order-preserving int keys of the floats.
//   exact_rows  a thread per (row, key): the four stages of a few rows over all m keys (and the
//               biased and capped stages of the score mods).
// Scores are tiles of 64 x 64 computed as in kernels/qk.cu (d_k in slices of 16 through shared
// memory, a 4 x 4 register tile per thread), fp32 FMA on CUDA cores: every score is the sequential
// fmaf chain over d_k, the same in the three kernels, so the pooling pass sees exactly the logits
// the stats were taken from. Tensor cores (TF32) would not give the CPU chain's fp32 numbers.
// Sums of the mean are kept in double, as the CPU chain does.
// The mask is MaskRule's (kernels/rules.h) for every problem: for none, causal and a custom mask it
// says what the mask kind said, and it brings decode shapes, windows, documents and prefixes. A
// problem with score mods has its logits from ScoreRule's modified scaled score (the pooled and
// exact logits and weights then are those of the modified chain); one without keeps the plain
// expression, bit for bit.
#include "kernels/cuda_check.h"
#include "kernels/launch.h"
#include "kernels/online_softmax.cuh"
#include "kernels/rules.cuh"
#include "kernels/stream_onepass.h"
#include "kernels/stream_pool.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace attnlab::cuda {
namespace {

constexpr int kT = 64;         // rows and columns of a score tile
constexpr int kSlice = 16;     // d_k slice per shared-memory load
constexpr int kThreads = 256;  // 16 x 16 threads, each a 4 x 4 sub-tile
constexpr int kSide = 16;
constexpr int kSub = 4;
constexpr int kPad = 4;  // keeps float4 alignment of the shared rows, fewer bank conflicts
constexpr int kMaxGridY = 65535;

static_assert(kSide * kSub == kT && kSide * kSide == kThreads, "16 x 16 threads of 4 x 4 cells");
static_assert(kPoolChunkPixels <= kT, "a chunk's pixel accumulators are one per thread of 64");

using Tile = float[kSlice][kT + kPad];

// acc[i][j] = q[qidx[4 ty + i]] . k[kidx[4 tx + j]] (rows of q and k; -1: a zero row), the
// sequential fmaf chain over d_k. Starts with a barrier, so the caller's writes of qidx and kidx
// are visible; ends without one (the next call's first barrier protects qs and ks).
__device__ __forceinline__ void tile_scores(const float* __restrict__ q, const float* __restrict__ k,
                                            int d_k, const int* qidx, const int* kidx, Tile& qs,
                                            Tile& ks, float (&acc)[kSub][kSub]) {
  const int tid = threadIdx.x, tx = tid % kSide, ty = tid / kSide;
#pragma unroll
  for (int i = 0; i < kSub; ++i)
#pragma unroll
    for (int j = 0; j < kSub; ++j) acc[i][j] = 0.f;
  for (int k0 = 0; k0 < d_k; k0 += kSlice) {
    __syncthreads();  // the previous slice (or the index writes) are done
    // A warp reads 16 consecutive floats of two rows: contiguous 64-byte runs.
#pragma unroll
    for (int l = 0; l < kT * kSlice / kThreads; ++l) {
      const int idx = tid + l * kThreads;
      const int r = idx / kSlice, kk = idx % kSlice, gk = k0 + kk;
      const int qr = qidx[r], kr = kidx[r];
      qs[kk][r] = (qr >= 0 && gk < d_k) ? q[static_cast<std::size_t>(qr) * d_k + gk] : 0.f;
      ks[kk][r] = (kr >= 0 && gk < d_k) ? k[static_cast<std::size_t>(kr) * d_k + gk] : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kSlice; ++kk) {
      const float4 a = *reinterpret_cast<const float4*>(&qs[kk][ty * kSub]);
      const float4 b = *reinterpret_cast<const float4*>(&ks[kk][tx * kSub]);
      const float av[kSub] = {a.x, a.y, a.z, a.w}, bv[kSub] = {b.x, b.y, b.z, b.w};
#pragma unroll
      for (int i = 0; i < kSub; ++i)
#pragma unroll
        for (int j = 0; j < kSub; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
  }
}

// Whether query i (of its head) may not see key j: MaskRule, the CPU chain's rule.
__device__ __forceinline__ bool cell_masked(const StreamInputs& in, int i, int j) { return !in.rule.visible(i, j); }

// The chain's stage 2 for one unmasked cell of head h: (score / sqrt(d_k), with the score mods) / T,
// as the CPU rounds it.
__device__ __forceinline__ float logit_of(const StreamInputs& in, float score, int h, int i, int j) {
  const float scaled = score / in.sqrt_dk;
  return (in.score.any() ? in.score.apply(scaled, h, i, j) : scaled) / in.temperature;
}

// Stage 3 for one unmasked cell of a row with (max, sum): 0 where the weight would be subnormal.
__device__ __forceinline__ float weight_of(const StreamInputs& in, float logit, float mx, float sum) {
  return onepass::weight(logit, mx, sum, in.exp_cutoff);
}

__device__ __forceinline__ int order_key(float f) {
  const int i = __float_as_int(f);
  return i >= 0 ? i : i ^ 0x7fffffff;
}

// ---- pass 1: row statistics ----------------------------------------------------------------------

// rows (count) stacked ids of head `head`; row_max, row_sum (count); overflow [2].
__global__ void __launch_bounds__(kThreads)
    row_stats_kernel(StreamInputs in, const int* __restrict__ rows, int count, int head,
                     float* __restrict__ row_max, float* __restrict__ row_sum,
                     unsigned long long* __restrict__ overflow) {
  __shared__ __align__(16) Tile qs;
  __shared__ __align__(16) Tile ks;
  __shared__ int qidx[kT], kidx[kT];
  const int tid = threadIdx.x, tx = tid % kSide, ty = tid / kSide;
  const int base = blockIdx.x * kT;
  if (tid < kT) qidx[tid] = base + tid < count ? rows[base + tid] : -1;
  __syncthreads();
  int qi[kSub];  // the thread's rows as queries of the head, -1 past the list
#pragma unroll
  for (int i = 0; i < kSub; ++i) {
    const int g = qidx[ty * kSub + i];
    qi[i] = g >= 0 ? g - head * in.n : -1;
  }
  float mx[kSub], sum[kSub];
#pragma unroll
  for (int i = 0; i < kSub; ++i) mx[i] = -INFINITY, sum[i] = 0.f;
  unsigned long long bad_score = kNoCell, bad_logit = kNoCell;

  for (int c0 = 0; c0 < in.m; c0 += kT) {
    __syncthreads();  // every thread is past the previous tile's loads of kidx
    if (tid < kT) kidx[tid] = c0 + tid < in.m ? head * in.m + c0 + tid : -1;
    float acc[kSub][kSub];
    tile_scores(in.q, in.k, in.d_k, qidx, kidx, qs, ks, acc);
#pragma unroll
    for (int i = 0; i < kSub; ++i) {
      if (qi[i] < 0) continue;
#pragma unroll
      for (int j = 0; j < kSub; ++j) {
        const int col = c0 + tx * kSub + j;
        if (col >= in.m) continue;
        if (cell_masked(in, qi[i], col)) continue;
        const float s = acc[i][j], l = logit_of(in, s, head, qi[i], col);
        const unsigned long long cell =
            static_cast<unsigned long long>(head * in.n + qi[i]) * in.m + col;
        if (!isfinite(s))
          bad_score = min(bad_score, cell);
        else if (!isfinite(l))
          bad_logit = min(bad_logit, cell);
        online_add(mx[i], sum[i], l);
      }
    }
  }
  // The 16 threads of a row are the 16 lanes of one half-warp: xor offsets below 16 stay there.
#pragma unroll
  for (int i = 0; i < kSub; ++i) {
#pragma unroll
    for (int off = kSide / 2; off > 0; off /= 2) {
      const float omx = __shfl_xor_sync(0xffffffffu, mx[i], off);
      const float os = __shfl_xor_sync(0xffffffffu, sum[i], off);
      online_merge(mx[i], sum[i], omx, os);
    }
    const int at = base + ty * kSub + i;
    if (tx == 0 && qi[i] >= 0) {
      row_max[at] = mx[i];
      row_sum[at] = sum[i];
    }
  }
  if (bad_score != kNoCell) atomicMin(&overflow[0], bad_score);
  if (bad_logit != kNoCell) atomicMin(&overflow[1], bad_logit);
}

// ---- pass 2: pooling ----------------------------------------------------------------------------

// Max: the running max (no cell: -inf). Mean: the sum in double and the count.
template <bool kMean>
struct PoolOps {
  using Value = std::conditional_t<kMean, double, float>;
  __device__ static Value empty() { return kMean ? Value(0) : Value(-INFINITY); }
  template <class Count>
  __device__ static void add(Value& v, Count& c, float x) {
    if constexpr (kMean) {
      v += x;
      ++c;
    } else {
      v = fmaxf(v, x);
    }
  }
  template <class Count>
  __device__ static void merge(Value& v, Count& c, Value ov, long long oc) {
    if constexpr (kMean) {
      v += ov;
      c += static_cast<Count>(oc);
    } else {
      v = fmaxf(v, ov);
    }
  }
};

// Writes a pixel's pooled (v, c) of one stage at `at`: masked where no cell was pooled.
template <bool kMean, class Value, class Count>
__device__ __forceinline__ void write_pixel(float* value, std::uint8_t* masked_out, std::size_t at, Value v,
                                            Count c) {
  const bool none = kMean ? c == 0 : v == Value(-INFINITY);
  value[at] = none ? 0.f : kMean ? static_cast<float>(v / static_cast<double>(c)) : static_cast<float>(v);
  masked_out[at] = none ? 1 : 0;
}

// The range of stage s: the warp's min and max, then one atomic per warp. Every lane calls it.
__device__ __forceinline__ void range_out(float lo, float hi, int s, int* range) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) {
    lo = fminf(lo, __shfl_xor_sync(0xffffffffu, lo, off));
    hi = fmaxf(hi, __shfl_xor_sync(0xffffffffu, hi, off));
  }
  if (threadIdx.x % 32 == 0 && lo <= hi) {
    atomicMin(&range[2 * s], order_key(lo));
    atomicMax(&range[2 * s + 1], order_key(hi));
  }
}

// Grid (chunks, groups of this launch): block (x, y) pools group g0 + y over pixel chunk x.
// value and masked are (3, groups, width); range [6].
template <bool kMean>
__global__ void __launch_bounds__(kThreads)
    pool_kernel(StreamInputs in, int head, PoolLayout lay, int g0, const float* __restrict__ row_max,
                const float* __restrict__ row_sum, float* __restrict__ value,
                std::uint8_t* __restrict__ masked_out, int* __restrict__ range) {
  using Ops = PoolOps<kMean>;
  using Value = typename Ops::Value;
  __shared__ __align__(16) Tile qs;
  __shared__ __align__(16) Tile ks;
  __shared__ int qidx[kT], kidx[kT], col[kT];
  __shared__ float rmax[kT], rsum[kT];
  __shared__ Value red_v[kSide][kT];  // per (thread row, column) of one stage
  __shared__ int red_c[kSide][kT];
  __shared__ Value col_v[kT];
  __shared__ int col_c[kT];

  const int tid = threadIdx.x, tx = tid % kSide, ty = tid / kSide;
  const int g = g0 + blockIdx.y;
  const int rb = lay.row_begin[g], re = lay.row_end[g], stat0 = lay.stat[g];
  const int px0 = lay.chunk_px[blockIdx.x], px1 = lay.chunk_px[blockIdx.x + 1];
  const int f0 = lay.px_flat[px0], f1 = lay.px_flat[px1];

  // Thread t < px1 - px0 owns pixel px0 + t for the three stages.
  Value pix_v[3];
  unsigned long long pix_c[3] = {0, 0, 0};
#pragma unroll
  for (int s = 0; s < 3; ++s) pix_v[s] = Ops::empty();
  float lo[3], hi[3];
#pragma unroll
  for (int s = 0; s < 3; ++s) lo[s] = INFINITY, hi[s] = -INFINITY;

  for (int ft = f0; ft < f1; ft += kT) {
    __syncthreads();  // the previous tile's readers of col and kidx are done
    if (tid < kT) {
      const int f = ft + tid;
      const int c = f < f1 ? lay.flat_col[f] : -1;
      col[tid] = c;
      kidx[tid] = c >= 0 ? head * in.m + c : -1;
    }
    Value cv[3][kSub];
    int cc[3][kSub];
#pragma unroll
    for (int s = 0; s < 3; ++s)
#pragma unroll
      for (int j = 0; j < kSub; ++j) cv[s][j] = Ops::empty(), cc[s][j] = 0;

    for (int r0 = rb; r0 < re; r0 += kT) {
      __syncthreads();  // the previous row tile's readers of qidx, rmax, rsum are done
      if (tid < kT) {
        const int r = r0 + tid;
        const bool ok = r < re;
        qidx[tid] = ok ? head * in.n + r : -1;
        rmax[tid] = ok ? row_max[stat0 + (r - rb)] : 0.f;
        rsum[tid] = ok ? row_sum[stat0 + (r - rb)] : 1.f;
      }
      float acc[kSub][kSub];
      tile_scores(in.q, in.k, in.d_k, qidx, kidx, qs, ks, acc);
#pragma unroll
      for (int i = 0; i < kSub; ++i) {
        const int r = r0 + ty * kSub + i;
        if (r >= re) continue;
        const float mx = rmax[ty * kSub + i], sm = rsum[ty * kSub + i];
#pragma unroll
        for (int j = 0; j < kSub; ++j) {
          const int c = col[tx * kSub + j];
          if (c < 0) continue;
          const float s = acc[i][j];
          // Scores: every finite cell, the mask enters at step 2.
          if (isfinite(s)) {
            Ops::add(cv[0][j], cc[0][j], s);
            lo[0] = fminf(lo[0], s), hi[0] = fmaxf(hi[0], s);
          }
          if (cell_masked(in, r, c)) continue;
          const float l = logit_of(in, s, head, r, c);
          if (isfinite(l)) {
            Ops::add(cv[1][j], cc[1][j], l);
            lo[1] = fminf(lo[1], l), hi[1] = fmaxf(hi[1], l);
          }
          const float w = weight_of(in, l, mx, sm);
          if (isfinite(w)) {
            Ops::add(cv[2][j], cc[2][j], w);
            lo[2] = fminf(lo[2], w), hi[2] = fmaxf(hi[2], w);
          }
        }
      }
    }

    // Columns of this tile: reduce over the 16 thread rows, then into the pixels they belong to.
#pragma unroll
    for (int s = 0; s < 3; ++s) {
      __syncthreads();  // the previous stage's readers of red_* and col_* are done
#pragma unroll
      for (int j = 0; j < kSub; ++j) {
        red_v[ty][tx * kSub + j] = cv[s][j];
        red_c[ty][tx * kSub + j] = cc[s][j];
      }
      __syncthreads();
      if (tid < kT) {
        Value v = Ops::empty();
        int c = 0;
        for (int y = 0; y < kSide; ++y) Ops::merge(v, c, red_v[y][tid], red_c[y][tid]);
        col_v[tid] = v;
        col_c[tid] = c;
      }
      __syncthreads();
      if (tid < px1 - px0) {
        const int a = max(lay.px_flat[px0 + tid], ft), b = min(lay.px_flat[px0 + tid + 1], ft + kT);
        for (int f = a; f < b; ++f) Ops::merge(pix_v[s], pix_c[s], col_v[f - ft], col_c[f - ft]);
      }
    }
  }

  if (tid < px1 - px0) {
#pragma unroll
    for (int s = 0; s < 3; ++s)
      write_pixel<kMean>(value, masked_out, (static_cast<std::size_t>(s) * lay.groups + g) * lay.width + px0 + tid,
                         pix_v[s], pix_c[s]);
  }
#pragma unroll
  for (int s = 0; s < 3; ++s) range_out(lo[s], hi[s], s, range);
}

// ---- one pass: states, then rows and weights from them (kernels/stream_onepass.h) ---------------

using onepass::PixelState;

// Merges the states of aligned runs of 2 * first lanes by an xor butterfly (first 8: the 16 threads
// of a thread row, one half-warp; 16: the whole warp). Every lane of the warp calls it.
__device__ __forceinline__ void merge_lanes(PixelState& st, int first) {
#pragma unroll
  for (int off = first; off > 0; off /= 2) {
    PixelState o;
    o.mx = __shfl_xor_sync(0xffffffffu, st.mx, off);
    o.sum = __shfl_xor_sync(0xffffffffu, st.sum, off);
    o.lo = __shfl_xor_sync(0xffffffffu, st.lo, off);
    o.count = __shfl_xor_sync(0xffffffffu, st.count, off);
    onepass::merge(st, o);
  }
}

// The block's pooled value (v, c) of one stage, reduced into thread 0 and returned to every
// thread. Every thread of the block calls it.
template <class Ops>
__device__ __forceinline__ void block_reduce(typename Ops::Value& v, long long& c,
                                             typename Ops::Value* red_v, long long* red_c) {
  const int tid = threadIdx.x;
  __syncthreads();  // the previous readers of red_v and red_c are done
  red_v[tid] = v;
  red_c[tid] = c;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (tid < half) Ops::merge(red_v[tid], red_c[tid], red_v[tid + half], red_c[tid + half]);
    __syncthreads();
  }
  v = red_v[0];
  c = red_c[0];
}

// Grid (chunks, groups of this launch): block (x, y) pools group g = g0 + y over the pixels of
// chunk x, a pixel at a time (a whole view: a pixel's flat positions are its keys). For each row
// tile of the group it walks the pixel's keys in tiles of 64 that never straddle two pixels; each
// thread keeps the PixelState of its 4 rows over its 4 columns, the 16 threads of a row merge
// theirs at the pixel's end, and the row's state goes to
// states[(lay.stat[g] - state_row0 + r - rb) * width + px]. Scores and logits are pooled as
// pool_kernel pools them (value and masked, stages 0 and 1; range[0..3]); the overflow records
// are row_stats_kernel's.
template <bool kMean>
__global__ void __launch_bounds__(kThreads, 2)
    pool_states_kernel(StreamInputs in, int head, PoolLayout lay, int g0, int state_row0,
                       PixelState* __restrict__ states, float* __restrict__ value,
                       std::uint8_t* __restrict__ masked_out, int* __restrict__ range,
                       unsigned long long* __restrict__ overflow) {
  using Ops = PoolOps<kMean>;
  using Value = typename Ops::Value;
  __shared__ __align__(16) Tile qs;
  __shared__ __align__(16) Tile ks;
  __shared__ int qidx[kT], kidx[kT];
  __shared__ Value red_v[kThreads];
  __shared__ long long red_c[kThreads];

  const int tid = threadIdx.x, tx = tid % kSide, ty = tid / kSide;
  const int g = g0 + blockIdx.y;
  const int rb = lay.row_begin[g], re = lay.row_end[g];
  const long local0 = static_cast<long>(lay.stat[g]) - state_row0;  // the state row of rb
  const int px0 = lay.chunk_px[blockIdx.x], px1 = lay.chunk_px[blockIdx.x + 1];
  float lo[2] = {INFINITY, INFINITY}, hi[2] = {-INFINITY, -INFINITY};
  unsigned long long bad_score = kNoCell, bad_logit = kNoCell;

  for (int px = px0; px < px1; ++px) {
    const int k0 = lay.px_flat[px], k1 = lay.px_flat[px + 1];
    Value pv[2] = {Ops::empty(), Ops::empty()};
    long long pc[2] = {0, 0};
    for (int r0 = rb; r0 < re; r0 += kT) {
      __syncthreads();  // the previous tile's loads of qidx are done
      if (tid < kT) qidx[tid] = r0 + tid < re ? head * in.n + r0 + tid : -1;
      PixelState st[kSub];
#pragma unroll
      for (int i = 0; i < kSub; ++i) st[i] = onepass::empty_state();
      for (int c0 = k0; c0 < k1; c0 += kT) {
        __syncthreads();  // the previous tile's loads of kidx are done
        if (tid < kT) kidx[tid] = c0 + tid < k1 ? head * in.m + c0 + tid : -1;
        float acc[kSub][kSub];
        tile_scores(in.q, in.k, in.d_k, qidx, kidx, qs, ks, acc);
#pragma unroll
        for (int i = 0; i < kSub; ++i) {
          const int r = r0 + ty * kSub + i;
          if (r >= re) continue;
#pragma unroll
          for (int j = 0; j < kSub; ++j) {
            const int c = c0 + tx * kSub + j;
            if (c >= k1) continue;
            const float s = acc[i][j];
            // Scores: every finite cell, the mask enters at step 2.
            if (isfinite(s)) {
              Ops::add(pv[0], pc[0], s);
              lo[0] = fminf(lo[0], s), hi[0] = fmaxf(hi[0], s);
            }
            if (cell_masked(in, r, c)) continue;
            const float l = logit_of(in, s, head, r, c);
            if (!isfinite(s) || !isfinite(l)) {
              const unsigned long long cell = static_cast<unsigned long long>(head * in.n + r) * in.m + c;
              if (!isfinite(s))
                bad_score = min(bad_score, cell);
              else
                bad_logit = min(bad_logit, cell);
            }
            if (isfinite(l)) {
              Ops::add(pv[1], pc[1], l);
              lo[1] = fminf(lo[1], l), hi[1] = fmaxf(hi[1], l);
              onepass::add(st[i], l);
            }
          }
        }
      }
#pragma unroll
      for (int i = 0; i < kSub; ++i) {
        merge_lanes(st[i], kSide / 2);
        const int r = r0 + ty * kSub + i;
        if (tx == 0 && r < re) states[static_cast<std::size_t>(local0 + (r - rb)) * lay.width + px] = st[i];
      }
    }
    // The pixel's scores and logits over the block.
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      block_reduce<Ops>(pv[s], pc[s], red_v, red_c);
      if (tid == 0)
        write_pixel<kMean>(value, masked_out, (static_cast<std::size_t>(s) * lay.groups + g) * lay.width + px,
                           pv[s], pc[s]);
    }
  }
#pragma unroll
  for (int s = 0; s < 2; ++s) range_out(lo[s], hi[s], s, range);
  if (bad_score != kNoCell) atomicMin(&overflow[0], bad_score);
  if (bad_logit != kNoCell) atomicMin(&overflow[1], bad_logit);
}

// Grid: the groups of this launch, a warp per row. A row's (max, sum) is the merge of its states
// over the view's pixels, written at its index in the statistics arrays (a row without a visible
// key: (-inf, 0), as row_stats_kernel leaves it); the weights' range (range[4], range[5]) from its
// smallest logit and its max (whose weight is 1 / sum).
__global__ void __launch_bounds__(kThreads)
    rows_from_states_kernel(PoolLayout lay, int g0, int state_row0, float cutoff,
                            const PixelState* __restrict__ states, float* __restrict__ row_max,
                            float* __restrict__ row_sum, int* __restrict__ range) {
  constexpr int kWarps = kThreads / 32;
  __shared__ float wlo[kWarps], whi[kWarps];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = g0 + blockIdx.x;
  const int rb = lay.row_begin[g], re = lay.row_end[g], stat0 = lay.stat[g];
  float lo = INFINITY, hi = -INFINITY;
  for (int r = rb + warp; r < re; r += kWarps) {
    const PixelState* row =
        states + static_cast<std::size_t>(static_cast<long>(stat0) - state_row0 + (r - rb)) * lay.width;
    PixelState acc = onepass::empty_state();
    for (int px = lane; px < lay.width; px += 32) onepass::merge(acc, row[px]);
    merge_lanes(acc, 16);
    if (lane == 0) {
      row_max[stat0 + (r - rb)] = acc.mx;
      row_sum[stat0 + (r - rb)] = acc.sum;
      if (acc.count > 0) {
        lo = fminf(lo, onepass::weight(acc.lo, acc.mx, acc.sum, cutoff));
        hi = fmaxf(hi, onepass::weight(acc.mx, acc.mx, acc.sum, cutoff));
      }
    }
  }
  if (lane == 0) wlo[warp] = lo, whi[warp] = hi;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kWarps; ++w) lo = fminf(lo, wlo[w]), hi = fmaxf(hi, whi[w]);
    if (lo <= hi) {
      atomicMin(&range[4], order_key(lo));
      atomicMax(&range[5], order_key(hi));
    }
  }
}

// Grid (pixel blocks, groups of this launch): a thread per (group, pixel) pools the weights of the
// group's rows from their states and statistics into value and masked, stage 2.
template <bool kMean>
__global__ void __launch_bounds__(kThreads)
    weights_from_states_kernel(PoolLayout lay, int g0, int state_row0, float cutoff,
                               const PixelState* __restrict__ states, const float* __restrict__ row_max,
                               const float* __restrict__ row_sum, float* __restrict__ value,
                               std::uint8_t* __restrict__ masked_out) {
  const int px = blockIdx.x * kThreads + threadIdx.x;
  if (px >= lay.width) return;
  const int g = g0 + blockIdx.y;
  const int rb = lay.row_begin[g], re = lay.row_end[g], stat0 = lay.stat[g];
  double sum = 0;
  long long count = 0;
  float mx = -INFINITY;
  for (int r = rb; r < re; ++r) {
    // Consecutive threads read consecutive states of one row: coalesced.
    const PixelState st =
        states[static_cast<std::size_t>(static_cast<long>(stat0) - state_row0 + (r - rb)) * lay.width + px];
    if (st.count == 0) continue;
    const float rm = row_max[stat0 + (r - rb)], rs = row_sum[stat0 + (r - rb)];
    count += st.count;
    if constexpr (kMean)
      sum += onepass::weight_sum(st, rm, rs, cutoff);
    else
      mx = fmaxf(mx, onepass::max_weight(st, rm, rs, cutoff));
  }
  const std::size_t at = (2 * static_cast<std::size_t>(lay.groups) + g) * lay.width + px;
  value[at] = count == 0 ? 0.f : kMean ? static_cast<float>(sum / static_cast<double>(count)) : mx;
  masked_out[at] = count == 0 ? 1 : 0;
}

// ---- pass 3: exact rows -------------------------------------------------------------------------

// Grid (key blocks, rows): thread j of block (x, r) writes key x * 256 + j of row rows[r].
__global__ void __launch_bounds__(kThreads)
    exact_rows_kernel(StreamInputs in, const int* __restrict__ rows, const int* __restrict__ stat,
                      const float* __restrict__ row_max, const float* __restrict__ row_sum,
                      float* __restrict__ scores, float* __restrict__ scaled, float* __restrict__ biased,
                      float* __restrict__ capped, float* __restrict__ logits, float* __restrict__ weights) {
  const int r = blockIdx.y;
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= in.m) return;
  const int g = rows[r], head = g / in.n, i = g % in.n;
  // Every thread reads the same query row: broadcast loads, served by L1.
  const float* qr = in.q + static_cast<std::size_t>(g) * in.d_k;
  const float* kr = in.k + (static_cast<std::size_t>(head) * in.m + j) * in.d_k;
  float s = 0.f;
  for (int kk = 0; kk < in.d_k; ++kk) s = fmaf(qr[kk], kr[kk], s);
  const float sc = s / in.sqrt_dk;
  const bool masked = cell_masked(in, i, j);
  const float l = masked ? -INFINITY : logit_of(in, s, head, i, j);
  const std::size_t at = static_cast<std::size_t>(r) * in.m + j;
  scores[at] = s;
  scaled[at] = sc;
  // The score mods' stages as ScoreRule makes them (the logit above is cap(sc + added) / T too).
  if (biased != nullptr) biased[at] = sc + in.score.added(head, i, j);
  if (capped != nullptr) capped[at] = in.score.apply(sc, head, i, j);
  logits[at] = l;
  weights[at] = masked ? 0.f : weight_of(in, l, row_max[stat[r]], row_sum[stat[r]]);
}

}  // namespace

void launch_row_stats(const StreamInputs& in, const int* rows, int count, int head, float* row_max,
                      float* row_sum, unsigned long long* overflow, cudaStream_t stream) {
  if (count <= 0 || in.m <= 0) return;
  const unsigned blocks = grid_1d((static_cast<long long>(count) + kT - 1) / kT, "row statistics");
  row_stats_kernel<<<blocks, kThreads, 0, stream>>>(in, rows, count, head, row_max, row_sum,
                                                    overflow);
  ATTNLAB_CUDA_CHECK(cudaGetLastError());
}

void launch_pool(const StreamInputs& in, int head, const PoolLayout& layout, int g0, int g1,
                 const float* row_max, const float* row_sum, bool mean, float* value,
                 std::uint8_t* masked, int* range, cudaStream_t stream) {
  for (int a = g0; a < g1; a += kMaxGridY) {
    const int b = a + kMaxGridY < g1 ? a + kMaxGridY : g1;
    const dim3 grid(static_cast<unsigned>(layout.chunks), static_cast<unsigned>(b - a));
    if (mean)
      pool_kernel<true><<<grid, kThreads, 0, stream>>>(in, head, layout, a, row_max, row_sum, value,
                                                       masked, range);
    else
      pool_kernel<false><<<grid, kThreads, 0, stream>>>(in, head, layout, a, row_max, row_sum, value,
                                                        masked, range);
    ATTNLAB_CUDA_CHECK(cudaGetLastError());
  }
}

void launch_pool_one_pass(const StreamInputs& in, int head, const PoolLayout& layout, int g0, int g1,
                          int state_row0, onepass::PixelState* states, float* row_max, float* row_sum,
                          bool mean, float* value, std::uint8_t* masked, int* range,
                          unsigned long long* overflow, cudaStream_t stream) {
  if (g1 <= g0 || layout.width <= 0) return;
  const unsigned px_blocks = static_cast<unsigned>((layout.width + kThreads - 1) / kThreads);
  for (int a = g0; a < g1; a += kMaxGridY) {
    const int b = a + kMaxGridY < g1 ? a + kMaxGridY : g1;
    const dim3 grid(static_cast<unsigned>(layout.chunks), static_cast<unsigned>(b - a));
    if (mean)
      pool_states_kernel<true><<<grid, kThreads, 0, stream>>>(in, head, layout, a, state_row0, states,
                                                              value, masked, range, overflow);
    else
      pool_states_kernel<false><<<grid, kThreads, 0, stream>>>(in, head, layout, a, state_row0, states,
                                                               value, masked, range, overflow);
    ATTNLAB_CUDA_CHECK(cudaGetLastError());
  }
  rows_from_states_kernel<<<static_cast<unsigned>(g1 - g0), kThreads, 0, stream>>>(
      layout, g0, state_row0, in.exp_cutoff, states, row_max, row_sum, range);
  ATTNLAB_CUDA_CHECK(cudaGetLastError());
  for (int a = g0; a < g1; a += kMaxGridY) {
    const int b = a + kMaxGridY < g1 ? a + kMaxGridY : g1;
    const dim3 grid(px_blocks, static_cast<unsigned>(b - a));
    if (mean)
      weights_from_states_kernel<true><<<grid, kThreads, 0, stream>>>(layout, a, state_row0, in.exp_cutoff,
                                                                      states, row_max, row_sum, value, masked);
    else
      weights_from_states_kernel<false><<<grid, kThreads, 0, stream>>>(layout, a, state_row0, in.exp_cutoff,
                                                                       states, row_max, row_sum, value, masked);
    ATTNLAB_CUDA_CHECK(cudaGetLastError());
  }
}

void launch_exact_rows(const StreamInputs& in, const int* rows, const int* stat, int count,
                       const float* row_max, const float* row_sum, float* scores, float* scaled,
                       float* biased, float* capped, float* logits, float* weights, cudaStream_t stream) {
  if (count <= 0 || in.m <= 0) return;
  const unsigned xblocks = static_cast<unsigned>((in.m + kThreads - 1) / kThreads);
  for (int a = 0; a < count; a += kMaxGridY) {
    const int c = count - a < kMaxGridY ? count - a : kMaxGridY;
    const std::size_t off = static_cast<std::size_t>(a) * in.m;
    exact_rows_kernel<<<dim3(xblocks, static_cast<unsigned>(c)), kThreads, 0, stream>>>(
        in, rows + a, stat + a, row_max, row_sum, scores + off, scaled + off, biased ? biased + off : nullptr,
        capped ? capped + off : nullptr, logits + off, weights + off);
    ATTNLAB_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace attnlab::cuda
