// Fused attention in fp32 on CUDA cores: one kernel, online softmax, never materialises N x N.
//
// Version 1 (the only one): register-blocked FFMA. A block of 128 threads owns BQ queries of one
// head (64, or 32 for the 256 head-dim bucket) and walks the keys in tiles of 64 (config 0):
//   S tile  = Q_tile K_tile^T        each thread: TQ queries x 8 keys  (float4 smem loads)
//   online softmax per query row     running max m (log2 units), running sum l, rescale acc
//   acc    += P_tile V_tile          each thread: TQ queries x D/8 output columns
// Threads are laid out qg = tid / 8 (query group, 16 of them) and kg = tid % 8 (key / column
// group), so the 8 threads sharing a query row are 8 consecutive lanes of one warp: row maxima
// reduce with three xor-shuffles, and each thread keeps the row statistics of its own queries in
// registers for both phases.
// Head dims are padded (with zeros) to a bucket D in {32, 64, 128, 256}; max(d_k, d_v) picks it.
// Causal: key tiles entirely above the diagonal are never loaded; the diagonal tile is masked per
// element. Blocks are issued heaviest query tile first so the causal triangle balances.
// Accuracy: plain fp32 FFMA dot products and exp2f (2 ulp) on log2e-premultiplied logits; the
// relative error against fp64 stays near 1e-6 on random normal inputs.
// With rules (the problem's modifications, kernels/rules.h): configuration 0's tile, instantiated
// with RULES. A block walks only the key tiles the block mask leaves its query tile (Empty tiles
// are never loaded), tests MaskRule per element only in Partial tiles, and turns each product into
// the modified scaled score y (ScoreRule) before the online softmax; the logit is y / T in log2
// units, so everything after the masking step is the rule-free code. Without rules the kernels
// are those of before (RULES false adds an empty last argument and no instruction).
//
// Configurations (ATTNLAB_FUSED_CONFIG, read at every launch; unset or empty = the head-dim
// bucket's default, kernels/tile_config.h; 0..2 = that configuration; any other value throws
// InputError):
//   0  this file's kernel: BQ 64 (32 for D=256), BK 64, 128 threads. Registers (ptxas -v, sm_90,
//      no spill) and blocks per SM (64K registers, 228 KB shared memory): D=32 96, 41 KB, 5;
//      D=64 122, 65 KB, 3; D=128 167, 113 KB, 1-2; D=256 167, 169 KB, 1
//   1  tensor cores, 3xTF32 (kernels/fused_tf32.cu): 4 warps, BQ 64; 64-key tiles up to D = 64,
//      32-key tiles at D = 128; D = 256, d not a multiple of 4 or unaligned buffers: config 0
//   2  as 1 with 8 warps, BQ 128
// (Until the H200 sweeps of 2026-12-04 four more CUDA-core tiles were configurations 1-4: 128
// queries, 32-key tiles, 8 queries per thread. Each was slower than 3xTF32 at every head dim it
// took, so they were deleted; docs/PERFORMANCE.md keeps their figures under their old numbers,
// with the 3xTF32 ones as 5 and 6.)
#include "kernels/cuda_check.h"  // first: its pragma silences Eigen's nvcc notes

#include "core/types.h"
#include "kernels/fused.h"
#include "kernels/fused_block.cuh"
#include "kernels/launch.h"
#include "kernels/rules.cuh"
#include "kernels/tile_config.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace attnlab::cuda {
namespace {

// The tile of head-dim bucket D: 128 threads own BQ queries (16 query groups of TQ queries) and
// walk the keys in tiles of 64 (each thread: 8 keys, in float4 chunks 32 keys apart). BQ is 64,
// and 32 at D = 256, where the accumulators of 64 would not stay in registers.
template <int D>
struct Fp32Tile {
  static constexpr int kThreads = 128;
  static constexpr int BQ = D <= 128 ? 64 : 32;   // queries per block
  static constexpr int kBK = 64;                  // keys per tile
  static constexpr int TQ = BQ / (kThreads / 8);  // queries per thread
  static constexpr int KC = kBK / 32;             // float4 key chunks per thread in the S phase
  static constexpr int TV = D / 8;                // output columns per thread
  static constexpr int PS = BQ + 4;               // P row stride: spreads the float4 stores' banks
  static_assert((TQ == 2 || TQ == 4) && BQ == TQ * (kThreads / 8) && kBK % 32 == 0);
  static constexpr int smem_floats = D * BQ + D * kBK + kBK * D + kBK * PS;
  static constexpr std::size_t smem_bytes = smem_floats * sizeof(float);
};

// TQ consecutive floats from shared memory (16-byte aligned for TQ 4, 8-byte for TQ 2).
template <int TQ>
__device__ __forceinline__ void load_tq(const float* src, float (&dst)[TQ]) {
  if constexpr (TQ == 4) {
    const float4 t = *reinterpret_cast<const float4*>(src);
    dst[0] = t.x;
    dst[1] = t.y;
    dst[2] = t.z;
    dst[3] = t.w;
  } else {
    static_assert(TQ == 2);
    const float2 t = *reinterpret_cast<const float2*>(src);
    dst[0] = t.x;
    dst[1] = t.y;
  }
}

template <int TQ>
__device__ __forceinline__ void store_tq(float* dst, const float (&src)[TQ]) {
  if constexpr (TQ == 4) {
    *reinterpret_cast<float4*>(dst) = make_float4(src[0], src[1], src[2], src[3]);
  } else {
    *reinterpret_cast<float2*>(dst) = make_float2(src[0], src[1]);
  }
}

// dst is (D, ROWS) in shared memory (transposed: one dimension's values for all rows are
// contiguous); src is the first of `rows_valid` global rows of `cols_valid` floats, stride ld.
// Rows and columns outside the valid range become 0 so padded dims add nothing to q.k.
// Consecutive threads take consecutive rows, so the transposed shared stores are conflict-free.
template <int ROWS, int D, int THREADS>
__device__ __forceinline__ void load_transposed(float* dst, const float* src, int rows_valid,
                                                int cols_valid, int ld, bool vec) {
  if (vec) {
    for (int idx = threadIdx.x; idx < ROWS * (D / 4); idx += THREADS) {
      const int row = idx % ROWS;
      const int c4 = idx / ROWS;
      float4 t = make_float4(0.f, 0.f, 0.f, 0.f);
      if (row < rows_valid && 4 * c4 < cols_valid) {
        t = *reinterpret_cast<const float4*>(src + static_cast<std::size_t>(row) * ld + 4 * c4);
      }
      dst[(4 * c4 + 0) * ROWS + row] = t.x;
      dst[(4 * c4 + 1) * ROWS + row] = t.y;
      dst[(4 * c4 + 2) * ROWS + row] = t.z;
      dst[(4 * c4 + 3) * ROWS + row] = t.w;
    }
  } else {
    for (int idx = threadIdx.x; idx < ROWS * D; idx += THREADS) {
      const int row = idx % ROWS;
      const int col = idx / ROWS;
      dst[col * ROWS + row] = (row < rows_valid && col < cols_valid)
                                  ? src[static_cast<std::size_t>(row) * ld + col]
                                  : 0.f;
    }
  }
}

// dst is (ROWS, D) in shared memory, row-major; zero outside the valid rows/columns (a masked
// key's V row must be 0, not garbage: 0 * NaN would poison the accumulator).
template <int ROWS, int D, int THREADS>
__device__ __forceinline__ void load_rowmajor(float* dst, const float* src, int rows_valid,
                                              int cols_valid, int ld, bool vec) {
  if (vec) {
    for (int idx = threadIdx.x; idx < ROWS * (D / 4); idx += THREADS) {
      const int row = idx / (D / 4);
      const int c4 = idx % (D / 4);
      float4 t = make_float4(0.f, 0.f, 0.f, 0.f);
      if (row < rows_valid && 4 * c4 < cols_valid) {
        t = *reinterpret_cast<const float4*>(src + static_cast<std::size_t>(row) * ld + 4 * c4);
      }
      *reinterpret_cast<float4*>(dst + row * D + 4 * c4) = t;
    }
  } else {
    for (int idx = threadIdx.x; idx < ROWS * D; idx += THREADS) {
      const int row = idx / D;
      const int col = idx % D;
      dst[row * D + col] = (row < rows_valid && col < cols_valid)
                               ? src[static_cast<std::size_t>(row) * ld + col]
                               : 0.f;
    }
  }
}

// q (heads*n, dk)  k (heads*m, dk)  v (heads*m, dv)  o (heads*n, dv)  mask (n, m) or nullptr.
// Grid: heads * ceil(n / BQ) blocks of 128 threads; block b works on head b % heads and
// query tile (tiles - 1 - b / heads). `scale_log2` = log2(e) / (sqrt(d_k) T), with RULES
// log2(e) / T (rules: the block mask, MaskRule and ScoreRule; causal false, mask null). `vec`:
// d_k, d_v multiples of 4 and 16-byte aligned pointers, so tiles move as float4.
template <int D, bool RULES>
__global__ void __launch_bounds__(Fp32Tile<D>::kThreads)
    fused_fp32_kernel(const float* __restrict__ q, const float* __restrict__ k,
                      const float* __restrict__ v, float* __restrict__ o, int heads, int n, int m,
                      int dk, int dv, float scale_log2, bool causal,
                      const float* __restrict__ mask, bool vec, RulesArg<RULES> rules) {
  using T = Fp32Tile<D>;
  constexpr int kThreads = T::kThreads;
  constexpr int kBK = T::kBK;
  constexpr int KC = T::KC;
  constexpr int BQ = T::BQ;
  constexpr int TQ = T::TQ;
  constexpr int TV = T::TV;
  constexpr int PS = T::PS;

  extern __shared__ float4 smem_f4[];
  float* Qs = reinterpret_cast<float*>(smem_f4);  // (D, BQ) transposed
  float* Ks = Qs + D * BQ;                         // (D, BK) transposed
  float* Vs = Ks + D * kBK;                        // (BK, D)
  float* Ps = Vs + kBK * D;                        // (BK, PS): P transposed, key-major

  const int tid = threadIdx.x;
  const int kg = tid & 7;   // key group in the S phase, column group in the P.V phase
  const int qg = tid >> 3;  // query group: queries qg*TQ .. qg*TQ+TQ-1 of the tile

  const FusedBlockTile tile = fused_block_tile(heads, n, m, BQ, causal);
  const int head = tile.head;
  const int q0 = tile.q0;

  const float* qh = tile.query_rows(q, n, dk);
  const float* kh = tile.key_rows(k, m, dk);
  const float* vh = tile.key_rows(v, m, dv);

  load_transposed<BQ, D, kThreads>(Qs, qh, min(BQ, n - q0), dk, dk, vec);

  float acc[TQ][TV];
  float row_max[TQ];  // running max of the logits (log2 units) seen so far; -inf before any key
  float row_sum[TQ];  // this thread's part of the running sum (its 4*KC keys per tile)
#pragma unroll
  for (int r = 0; r < TQ; ++r) {
    row_max[r] = -INFINITY;
    row_sum[r] = 0.f;
#pragma unroll
    for (int c = 0; c < TV; ++c) acc[r][c] = 0.f;
  }

  // Causal (n == m): keys after the tile's last query are masked for every row of the tile.
  int first_kt = 0, k_tiles = (tile.key_end + kBK - 1) / kBK;
  // With rules: the key tiles the block mask leaves this query tile, Empty ones skipped.
  [[maybe_unused]] const int qb = q0 / BQ;
  if constexpr (RULES) {
    key_tile_range(rules.blocks, qb, first_kt, k_tiles);
    first_kt = next_key_tile(rules.blocks, qb, first_kt, k_tiles);
  }

  for (int kt = first_kt; kt < k_tiles; kt = following_key_tile<RULES>(rules, qb, kt, k_tiles)) {
    const int k0 = kt * kBK;
    [[maybe_unused]] bool partial = false;  // with rules: this tile needs MaskRule per element
    if constexpr (RULES) {
      partial = partial_tile(rules.blocks, qb, kt);
      count_visit(rules);
    }
    __syncthreads();  // the previous tile's Ks/Vs/Ps reads are finished
    load_transposed<kBK, D, kThreads>(Ks, kh + static_cast<std::size_t>(k0) * dk,
                                      min(kBK, m - k0), dk, dk, vec);
    load_rowmajor<kBK, D, kThreads>(Vs, vh + static_cast<std::size_t>(k0) * dv, min(kBK, m - k0),
                                    dv, dv, vec);
    __syncthreads();

    // S = Q K^T for this thread's TQ queries x 4*KC keys: key c is 32*(c/4) + kg*4 + c%4 (for
    // 64-key tiles: kg*4+0..3 and 32+kg*4+0..3).
    float s[TQ][4 * KC];
#pragma unroll
    for (int r = 0; r < TQ; ++r) {
#pragma unroll
      for (int c = 0; c < 4 * KC; ++c) s[r][c] = 0.f;
    }
#pragma unroll 8
    for (int d = 0; d < D; ++d) {
      float qv[TQ];
      load_tq<TQ>(Qs + d * BQ + qg * TQ, qv);
      if constexpr (KC == 2) {
        // Configuration 0's exact instruction stream (another form changes ptxas's allocation).
        const float4 ka = *reinterpret_cast<const float4*>(Ks + d * kBK + kg * 4);
        const float4 kb = *reinterpret_cast<const float4*>(Ks + d * kBK + 32 + kg * 4);
        const float kv[8] = {ka.x, ka.y, ka.z, ka.w, kb.x, kb.y, kb.z, kb.w};
#pragma unroll
        for (int r = 0; r < TQ; ++r) {
#pragma unroll
          for (int c = 0; c < 8; ++c) s[r][c] = fmaf(qv[r], kv[c], s[r][c]);
        }
      } else {
        float kv[4 * KC];
#pragma unroll
        for (int ch = 0; ch < KC; ++ch) {
          const float4 kk = *reinterpret_cast<const float4*>(Ks + d * kBK + 32 * ch + kg * 4);
          kv[4 * ch + 0] = kk.x;
          kv[4 * ch + 1] = kk.y;
          kv[4 * ch + 2] = kk.z;
          kv[4 * ch + 3] = kk.w;
        }
#pragma unroll
        for (int r = 0; r < TQ; ++r) {
#pragma unroll
          for (int c = 0; c < 4 * KC; ++c) s[r][c] = fmaf(qv[r], kv[c], s[r][c]);
        }
      }
    }

    // Logits in log2 units, masked to -inf: keys past m, causal future keys, custom mask. With
    // rules: the modified scaled score y (or -inf), times log2(e) / T.
    const bool edge = causal || mask != nullptr || k0 + kBK > m;
#pragma unroll
    for (int r = 0; r < TQ; ++r) {
      const int query = q0 + qg * TQ + r;
#pragma unroll
      for (int c = 0; c < 4 * KC; ++c) {
        if constexpr (RULES) {
          const int key = k0 + 32 * (c / 4) + kg * 4 + (c % 4);
          s[r][c] = rule_score(rules, s[r][c], head, query, key, n, m, partial) * scale_log2;
        } else {
          float x = s[r][c] * scale_log2;
          if (edge) {
            // (= 32 * (c / 4) + kg * 4 + c % 4; this spelling keeps configuration 0's exact code.)
            const int key = k0 + (c < 4 ? kg * 4 + c : 32 * (c / 4) + kg * 4 + (c % 4));
            if (key >= m || (causal && key > query)) {
              x = -INFINITY;
            } else if (mask != nullptr && query < n &&
                       mask[static_cast<std::size_t>(query) * m + key] != 0.f) {
              x = -INFINITY;
            }
          }
          s[r][c] = x;
        }
      }
    }

    // Online softmax: new running max over the 8 threads of the row, rescale what came before.
#pragma unroll
    for (int r = 0; r < TQ; ++r) {
      float tile_max = s[r][0];
#pragma unroll
      for (int c = 1; c < 4 * KC; ++c) tile_max = fmaxf(tile_max, s[r][c]);
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 4));
      const float new_max = fmaxf(row_max[r], tile_max);
      // Every key so far masked: subtract 0 instead of -inf so that -inf - -inf never makes NaN
      // (p and the correction both come out 0, and the accumulator is still 0).
      const float shift = new_max == -INFINITY ? 0.f : new_max;
      const float corr = exp2f(row_max[r] - shift);
      row_max[r] = new_max;
      float part = 0.f;
#pragma unroll
      for (int c = 0; c < 4 * KC; ++c) {
        s[r][c] = exp2f(s[r][c] - shift);
        part += s[r][c];
      }
      row_sum[r] = row_sum[r] * corr + part;
#pragma unroll
      for (int c = 0; c < TV; ++c) acc[r][c] *= corr;
    }

    // P goes to shared memory key-major so the P.V phase reads TQ queries of one key at once.
#pragma unroll
    for (int c = 0; c < 4 * KC; ++c) {
      const int key = c < 4 ? kg * 4 + c : 32 * (c / 4) + kg * 4 + (c % 4);
      float col[TQ];
#pragma unroll
      for (int r = 0; r < TQ; ++r) col[r] = s[r][c];
      store_tq<TQ>(Ps + key * PS + qg * TQ, col);
    }
    __syncthreads();

    // acc += P V: this thread's TQ queries x columns kg*4 + 32*t + 0..3.
#pragma unroll 4
    for (int j = 0; j < kBK; ++j) {
      float pv[TQ];
      load_tq<TQ>(Ps + j * PS + qg * TQ, pv);
#pragma unroll
      for (int t = 0; t < D / 32; ++t) {
        const float4 vv = *reinterpret_cast<const float4*>(Vs + j * D + 32 * t + kg * 4);
#pragma unroll
        for (int r = 0; r < TQ; ++r) {
          acc[r][4 * t + 0] = fmaf(pv[r], vv.x, acc[r][4 * t + 0]);
          acc[r][4 * t + 1] = fmaf(pv[r], vv.y, acc[r][4 * t + 1]);
          acc[r][4 * t + 2] = fmaf(pv[r], vv.z, acc[r][4 * t + 2]);
          acc[r][4 * t + 3] = fmaf(pv[r], vv.w, acc[r][4 * t + 3]);
        }
      }
    }
  }

  // Normalise by the full row sum (the 8 threads' parts) and write the valid rows and columns.
#pragma unroll
  for (int r = 0; r < TQ; ++r) {
    float l = row_sum[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    l += __shfl_xor_sync(0xffffffffu, l, 4);
    const float inv = 1.f / l;
    const int query = q0 + qg * TQ + r;
    if (query >= n) continue;
    float* orow = o + (static_cast<std::size_t>(head) * n + query) * dv;
#pragma unroll
    for (int t = 0; t < D / 32; ++t) {
      const int col = 32 * t + kg * 4;
      if (col >= dv) continue;
      if (vec) {
        *reinterpret_cast<float4*>(orow + col) =
            make_float4(acc[r][4 * t + 0] * inv, acc[r][4 * t + 1] * inv,
                        acc[r][4 * t + 2] * inv, acc[r][4 * t + 3] * inv);
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (col + e < dv) orow[col + e] = acc[r][4 * t + e] * inv;
        }
      }
    }
  }
}

template <int D, bool RULES = false>
void launch_fp32(const float* q, const float* k, const float* v, float* o, int heads, int n,
                 int m, int dk, int dv, float scale_log2, bool causal, const float* mask, bool vec,
                 cudaStream_t stream, const RulesArg<RULES>& rules = {}) {
  using T = Fp32Tile<D>;
  if constexpr (RULES) check_rules_tile(rules, n, m, T::BQ, T::kBK, "fused fp32");
  allow_dynamic_smem<fused_fp32_kernel<D, RULES>>(T::smem_bytes);
  note_fused_kernel("fp32 D=" + std::to_string(D) + " BQ=" + std::to_string(T::BQ) + " BK=" +
                    std::to_string(T::kBK) + " threads=" + std::to_string(T::kThreads) + (RULES ? " rules" : ""));
  const unsigned blocks =
      grid_1d(static_cast<long long>(heads) * ((n + T::BQ - 1) / T::BQ), "fused fp32");
  fused_fp32_kernel<D, RULES><<<blocks, T::kThreads, T::smem_bytes, stream>>>(
      q, k, v, o, heads, n, m, dk, dv, scale_log2, causal, mask, vec, rules);
  ATTNLAB_CUDA_CHECK(cudaGetLastError());
}

// One head-dim bucket on CUDA cores (configuration 0).
template <int D>
void dispatch_fp32(const float* q, const float* k, const float* v, float* o, int heads, int n, int m,
                   int dk, int dv, float scale_log2, bool causal, const float* mask, bool vec,
                   cudaStream_t s) {
  launch_fp32<D>(q, k, v, o, heads, n, m, dk, dv, scale_log2, causal, mask, vec, s);
}

}  // namespace

namespace {
thread_local std::string last_kernel;
}  // namespace

void note_fused_kernel(std::string name) { last_kernel = std::move(name); }
std::string last_fused_kernel() { return last_kernel; }

FusedTile fused_fp32_rules_tile(int d_k, int d_v, bool aligned) {
  const int dmax = d_k > d_v ? d_k : d_v;
  const int config = fused_fp32_config(dmax);
  if (config != 0 && aligned && fused_tf32_takes(d_k, d_v)) return fused_tf32_tile(config == 2, d_k, d_v);
  return {dmax <= 128 ? Fp32Tile<128>::BQ : Fp32Tile<256>::BQ, Fp32Tile<256>::kBK};  // configuration 0's tile
}

void fused_attention_fp32(const float* q, const float* k, const float* v, float* o, int heads,
                          int n, int m, int d_k, int d_v, float scale, bool causal,
                          const float* custom_mask, void* stream, const KernelRules* rules) {
  if (heads < 1 || n < 1 || m < 1 || d_k < 1 || d_v < 1) {
    throw InputError("fused fp32: empty problem (heads " + std::to_string(heads) + ", n " +
                     std::to_string(n) + ", m " + std::to_string(m) + ", d_k " +
                     std::to_string(d_k) + ", d_v " + std::to_string(d_v) + ")");
  }
  if (const std::string why = fused_fp32_shape_error(d_k, d_v); !why.empty()) throw InputError(why);
  if (rules != nullptr && (causal || custom_mask != nullptr))
    throw InputError("fused fp32: with rules the mask is the rules' (causal false, no custom mask)");
  if (causal && n != m) {
    throw InputError("causal mask needs n == m, got n " + std::to_string(n) + ", m " +
                     std::to_string(m));
  }
  const bool vec = d_k % 4 == 0 && d_v % 4 == 0 && aligned16(q) && aligned16(k) && aligned16(v) &&
                   aligned16(o);
  const int dmax = d_k > d_v ? d_k : d_v;
  const int config = fused_fp32_config(dmax);
  const float scale_log2 = scale * kLog2e;
  auto s = static_cast<cudaStream_t>(stream);
  if (rules != nullptr) {
    // One kernel per bucket with rules: configuration 0's CUDA-core tile, or 3xTF32 under 1 and 2
    // where it applies (fused_fp32_rules_tile says which, for the caller's block mask).
    if (config != 0 &&
        fused_attention_tf32x3(config == 2, q, k, v, o, heads, n, m, d_k, d_v, scale_log2, false,
                               nullptr, stream, rules)) {
      return;
    }
    const auto run = [&](auto launch) {
      launch(q, k, v, o, heads, n, m, d_k, d_v, scale_log2, false, nullptr, vec, s, *rules);
    };
    if (dmax <= 32) {
      run(launch_fp32<32, true>);
    } else if (dmax <= 64) {
      run(launch_fp32<64, true>);
    } else if (dmax <= 128) {
      run(launch_fp32<128, true>);
    } else {
      run(launch_fp32<256, true>);
    }
    return;
  }
  // Configurations 1 and 2: tensor cores (3xTF32, kernels/fused_tf32.cu) where they apply.
  if (config != 0 &&
      fused_attention_tf32x3(config == 2, q, k, v, o, heads, n, m, d_k, d_v, scale_log2, causal,
                             custom_mask, stream)) {
    return;
  }
  if (dmax <= 32) {
    dispatch_fp32<32>(q, k, v, o, heads, n, m, d_k, d_v, scale_log2, causal, custom_mask, vec, s);
  } else if (dmax <= 64) {
    dispatch_fp32<64>(q, k, v, o, heads, n, m, d_k, d_v, scale_log2, causal, custom_mask, vec, s);
  } else if (dmax <= 128) {
    dispatch_fp32<128>(q, k, v, o, heads, n, m, d_k, d_v, scale_log2, causal, custom_mask, vec, s);
  } else {
    dispatch_fp32<256>(q, k, v, o, heads, n, m, d_k, d_v, scale_log2, causal, custom_mask, vec, s);
  }
}

}  // namespace attnlab::cuda
