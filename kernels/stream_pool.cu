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
  const float x = logit - mx;
  return x < in.exp_cutoff ? 0.f : expf(x) / sum;
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
  __device__ static void add(Value& v, int& c, float x) {
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
    for (int s = 0; s < 3; ++s) {
      const std::size_t at = (static_cast<std::size_t>(s) * lay.groups + g) * lay.width + px0 + tid;
      const bool none = kMean ? pix_c[s] == 0 : pix_v[s] == Value(-INFINITY);
      value[at] = none ? 0.f : kMean ? static_cast<float>(pix_v[s] / static_cast<double>(pix_c[s]))
                                     : static_cast<float>(pix_v[s]);
      masked_out[at] = none ? 1 : 0;
    }
  }
  // The range: a warp's min and max, then one atomic per warp and stage.
#pragma unroll
  for (int s = 0; s < 3; ++s) {
#pragma unroll
    for (int off = 16; off > 0; off /= 2) {
      lo[s] = fminf(lo[s], __shfl_xor_sync(0xffffffffu, lo[s], off));
      hi[s] = fmaxf(hi[s], __shfl_xor_sync(0xffffffffu, hi[s], off));
    }
    if (tid % 32 == 0 && lo[s] <= hi[s]) {
      atomicMin(&range[2 * s], order_key(lo[s]));
      atomicMax(&range[2 * s + 1], order_key(hi[s]));
    }
  }
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
