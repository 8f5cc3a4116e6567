// Fused attention with Hopper's warpgroup tensor-core instructions (wgmma.mma_async, sm_90a),
// bf16 inputs, fp32 accumulation and output: ATTNLAB_FUSED_CONFIG 3 and 4 of the bf16 kernel
// (kernels/fused_bf16.cu dispatches here). Compiled for sm_90a only (kernels/CMakeLists.txt), so
// it runs on a GPU of compute capability 9.0 (H100, H200) and is refused on any other.
//
// The algorithm is kernels/fused_bf16.cu's (FlashAttention-2's forward); what changes is who
// multiplies. A block of NWG warpgroups (128 threads each) owns 64 NWG queries of one head;
// warpgroup w owns 64 of them, and its four warps rows 16 each, in the accumulators' layout.
//   S = Q Kᵀ    one wgmma m64nBKk16 per 16 head-dim columns, both operands read by the tensor
//               cores straight from shared memory (descriptors; Q is never loaded into registers),
//   softmax     on S's accumulators in registers, as in fused_bf16.cu (online, exp2, rounded
//               weights summed),
//   O += P V    one wgmma m64nDk16 per 16 keys, P from registers (the accumulators of S packed
//               to bf16 are already wgmma's A fragments), V from shared memory, MN-major.
// Each wgmma instruction multiplies a 64-row warpgroup tile where mma.sync multiplies a warp's
// 16 x 8, and it runs asynchronously: the warp issues a whole product and waits once.
// Q, K and V tiles are stored in 128-byte swizzled panels (kernels/wgmma_layout.h, which the host
// tests read back as the PTX ISA's canonical layouts), copied in with cp.async, K and V double
// buffered: the next key tile's copies are in flight during the current tile's products. Writes of
// cp.async are generic-proxy writes, and wgmma reads through the async proxy: each thread fences
// (fence.proxy.async) after its copies land and before the barrier that publishes them. A buffer
// is refilled only after every warpgroup's products that read it have completed (wgmma.wait_group
// 0 before the iteration's closing barrier).
// Keys past m are zero-filled and masked to -inf; query rows past n are computed from zeros and
// never written. Causal: key tiles past the block's last query are never loaded; a warpgroup whose
// rows all precede a key tile skips that tile's products (the condition is the same for its four
// warps, as wgmma requires).
//
// Configurations (registers and spills: ptxas -v for sm_90a, CUDA 13, in docs/PERFORMANCE.md):
//   3  2 warpgroups (128 queries), 128-key tiles; d 64 at most 128 registers, two blocks an SM
//      (no spill), d 128 one block (171 registers)
//   4  2 warpgroups, 64-key tiles, at most 128 registers, two blocks an SM (d 64 99 registers;
//      d 128 128 and a 24-byte spill)
#include "kernels/cuda_check.h"  // first: its pragma silences Eigen's nvcc notes

#include "core/types.h"
#include "kernels/async_copy.cuh"
#include "kernels/fused.h"
#include "kernels/fused_block.cuh"
#include "kernels/launch.h"
#include "kernels/mma_bf16.cuh"
#include "kernels/sm90a/wgmma.cuh"
#include "kernels/tile_config.h"
#include "kernels/wgmma_layout.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace attnlab::cuda {
namespace {

template <int D, int BK, int NWG, int MINB>
struct WgmmaTile {
  static_assert(D == 64 || D == 128, "wgmma tiles take head dim 64 or 128");
  static_assert(BK == 64 || BK == 128, "S = Q K^T is one m64nBKk16 per k-step: BK 64 or 128");
  static constexpr int kThreads = 128 * NWG;
  static constexpr int kBQ = 64 * NWG;
  static constexpr int q_bytes = wgmma::tile_bytes(kBQ, D);
  static constexpr int kv_bytes = wgmma::tile_bytes(BK, D);
  // Q, K[2], V[2], and one swizzle period to align the first panel to it.
  static constexpr std::size_t smem_bytes = q_bytes + 4 * kv_bytes + wgmma::kAtomBytes;
  static_assert(q_bytes % wgmma::kAtomBytes == 0 && kv_bytes % wgmma::kAtomBytes == 0);
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Rows 0 .. ROWS - 1 of a row-major global tile of D bf16 columns into the panels at dst, in
// 16-byte cp.async copies shared by THREADS threads; rows at or past rows_valid are zero-filled.
template <int ROWS, int D, int THREADS>
__device__ __forceinline__ void cp_async_panels(std::uint8_t* dst, const std::uint16_t* src,
                                                int rows_valid) {
  constexpr int chunks = D / 8;
  for (int idx = threadIdx.x; idx < ROWS * chunks; idx += THREADS) {
    const int r = idx / chunks;
    const int c = idx % chunks;
    const bool valid = r < rows_valid;
    const std::uint16_t* from = valid ? src + static_cast<std::size_t>(r) * D + 8 * c : src;
    cp_async16(dst + wgmma::tile_offset(ROWS, r, 8 * c), from, valid);
  }
}

template <int BK>
__device__ __forceinline__ void wgmma_scores(float (&s)[BK / 2], std::uint64_t a, std::uint64_t b,
                                             bool accumulate) {
  if constexpr (BK == 64) wgmma_ss_n64(s, a, b, accumulate);
  else wgmma_ss_n128(s, a, b, accumulate);
}
template <int D>
__device__ __forceinline__ void wgmma_pv(float (&o)[D / 2], const std::uint32_t (&p)[4], std::uint64_t b) {
  if constexpr (D == 64) wgmma_rs_n64(o, p, b);
  else wgmma_rs_n128(o, p, b);
}
#endif

// q, k, v (heads*n | heads*m, D) bf16 bits; o (heads*n, D) fp32. Grid: heads * ceil(n / BQ)
// blocks; block b: head b % heads, query tile (tiles - 1 - b / heads), heaviest causal tiles
// first. scale_log2 = log2(e) / (sqrt(D) T).
template <int D, int BK, int NWG, int MINB>
__global__ void __launch_bounds__(128 * NWG, MINB)
    fused_wgmma_kernel(const std::uint16_t* __restrict__ q, const std::uint16_t* __restrict__ k,
                       const std::uint16_t* __restrict__ v, float* __restrict__ o, int heads, int n,
                       int m, float scale_log2, bool causal) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = WgmmaTile<D, BK, NWG, MINB>;
  constexpr int kThreads = T::kThreads;
  constexpr int kBQ = T::kBQ;
  extern __shared__ __align__(1024) std::uint8_t wgmma_smem[];
  const std::uint32_t raw = smem_addr(wgmma_smem);
  std::uint8_t* Qs = wgmma_smem + (wgmma::kAtomBytes - raw % wgmma::kAtomBytes) % wgmma::kAtomBytes;
  std::uint8_t* Ks = Qs + T::q_bytes;      // 2 buffers
  std::uint8_t* Vs = Ks + 2 * T::kv_bytes;  // 2 buffers
  const std::uint32_t qs = smem_addr(Qs), ks = smem_addr(Ks), vs = smem_addr(Vs);

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int wg = warp >> 2;  // warpgroup
  const int g = lane >> 2;
  const int tig = lane & 3;

  const FusedBlockTile tile = fused_block_tile(heads, n, m, kBQ, causal);
  const int head = tile.head;
  const int q0 = tile.q0;
  const std::uint16_t* qh = tile.query_rows(q, n, D);
  const std::uint16_t* kh = tile.key_rows(k, m, D);
  const std::uint16_t* vh = tile.key_rows(v, m, D);

  const int k_tiles = (tile.key_end + BK - 1) / BK;
  const int wg_row0 = q0 + 64 * wg;
  const int warp_row0 = wg_row0 + 16 * (warp & 3);
  const int row0 = warp_row0 + g;  // this lane's rows: row0 and row0 + 8
  const int row1 = row0 + 8;

  cp_async_panels<kBQ, D, kThreads>(Qs, qh, min(kBQ, n - q0));
  cp_async_panels<BK, D, kThreads>(Ks, kh, min(BK, m));
  cp_async_panels<BK, D, kThreads>(Vs, vh, min(BK, m));
  cp_async_commit();

  float oacc[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) oacc[i] = 0.f;
  float max0 = -INFINITY, max1 = -INFINITY;  // running max of the raw scores of the lane's rows
  float sum0 = 0.f, sum1 = 0.f;              // this lane's part of their running sums

  for (int kt = 0; kt < k_tiles; ++kt) {
    const int k0 = kt * BK;
    const int buf = kt & 1;
    if (kt + 1 < k_tiles) {
      // The other buffer's products completed before the previous iteration's closing barrier.
      const int next = k0 + BK;
      cp_async_panels<BK, D, kThreads>(Ks + (buf ^ 1) * T::kv_bytes, kh + static_cast<std::size_t>(next) * D,
                                       min(BK, m - next));
      cp_async_panels<BK, D, kThreads>(Vs + (buf ^ 1) * T::kv_bytes, vh + static_cast<std::size_t>(next) * D,
                                       min(BK, m - next));
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    fence_proxy_async();
    __syncthreads();

    // A causal key tile that starts after the warpgroup's last row is masked for all its rows.
    if (!(causal && k0 > wg_row0 + 63)) {
      const std::uint32_t kb = ks + buf * T::kv_bytes;
      const std::uint32_t vb = vs + buf * T::kv_bytes;
      float sacc[BK / 2];
      wgmma_hold(sacc);
      wgmma_fence();
#pragma unroll
      for (int s = 0; s < D / 16; ++s) {
        const std::uint64_t a = wgmma::descriptor(qs + wgmma::kmajor_start(kBQ, 64 * wg, s),
                                                  wgmma::kKMajorLbo, wgmma::kKMajorSbo);
        const std::uint64_t b = wgmma::descriptor(kb + wgmma::kmajor_start(BK, 0, s),
                                                  wgmma::kKMajorLbo, wgmma::kKMajorSbo);
        wgmma_scores<BK>(sacc, a, b, s > 0);
      }
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_hold(sacc);

      // Element i of the lane is key k0 + acc_col(lane, i) of row warp_row0 + acc_row(lane, i):
      // keys k0 + 8j + 2 tig + {0, 1}, elements 4j, 4j + 1 of row0 and 4j + 2, 4j + 3 of row1.
      if (k0 + BK > m || (causal && k0 + BK - 1 > warp_row0)) {
#pragma unroll
        for (int i = 0; i < BK / 2; ++i) {
          const int key = k0 + wgmma::acc_col(lane, i);
          const int row = warp_row0 + wgmma::acc_row(lane, i);
          if (key >= m || (causal && key > row)) sacc[i] = -INFINITY;
        }
      }

      float tmax0 = -INFINITY, tmax1 = -INFINITY;
#pragma unroll
      for (int j = 0; j < BK / 8; ++j) {
        tmax0 = fmaxf(tmax0, fmaxf(sacc[4 * j], sacc[4 * j + 1]));
        tmax1 = fmaxf(tmax1, fmaxf(sacc[4 * j + 2], sacc[4 * j + 3]));
      }
      float shift0, shift1, corr0, corr1;
      quad_rows_step(max0, max1, tmax0, tmax1, scale_log2, [](float x) { return fast_exp2(x); }, shift0, shift1, corr0,
                     corr1);

      // P (bf16) as the A fragments of O += P V, register r of keys 16 kc .. 16 kc + 15 from
      // elements p_element(kc, r, 0) and + 1 (row0 for even r, row1 for odd); pack_bf16 adds the
      // rounded weights to the row's part of the sum.
      std::uint32_t pf[BK / 16][4];
      float part0 = 0.f, part1 = 0.f;
#pragma unroll
      for (int kc = 0; kc < BK / 16; ++kc) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int e = wgmma::p_element(kc, r, 0);
          const float shift = (r & 1) ? shift1 : shift0;
          pf[kc][r] = pack_bf16(fast_exp2(fmaf(sacc[e], scale_log2, -shift)),
                                fast_exp2(fmaf(sacc[e + 1], scale_log2, -shift)), (r & 1) ? part1 : part0);
        }
      }
      sum0 = sum0 * corr0 + part0;
      sum1 = sum1 * corr1 + part1;
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        oacc[4 * j] *= corr0;
        oacc[4 * j + 1] *= corr0;
        oacc[4 * j + 2] *= corr1;
        oacc[4 * j + 3] *= corr1;
      }

      wgmma_hold(oacc);
      wgmma_hold(pf);
      wgmma_fence();
#pragma unroll
      for (int kc = 0; kc < BK / 16; ++kc) {
        const std::uint64_t b = wgmma::descriptor(vb + wgmma::mnmajor_start(kc), wgmma::mnmajor_lbo(BK),
                                                  wgmma::kMNMajorSbo);
        wgmma_pv<D>(oacc, pf[kc], b);
      }
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_hold(oacc);
    }
    __syncthreads();  // this buffer is refilled in the next iteration
  }

  // Full row sums over the quad, normalise, write rows < n. Lane holds columns 8j + 2 tig, +1.
  float inv0, inv1;
  quad_rows_inverse(sum0, sum1, inv0, inv1);
  float* o0 = o + (static_cast<std::size_t>(head) * n + row0) * D;
  float* o1 = o0 + static_cast<std::size_t>(8) * D;
#pragma unroll
  for (int j = 0; j < D / 8; ++j) {
    const int col = 8 * j + 2 * tig;
    if (row0 < n) *reinterpret_cast<float2*>(o0 + col) = make_float2(oacc[4 * j] * inv0, oacc[4 * j + 1] * inv0);
    if (row1 < n) *reinterpret_cast<float2*>(o1 + col) = make_float2(oacc[4 * j + 2] * inv1, oacc[4 * j + 3] * inv1);
  }
#endif
}

template <int D, int BK, int NWG, int MINB>
void launch_wgmma(const std::uint16_t* q, const std::uint16_t* k, const std::uint16_t* v, float* o,
                  int heads, int n, int m, float scale_log2, bool causal, cudaStream_t stream) {
  using T = WgmmaTile<D, BK, NWG, MINB>;
  allow_dynamic_smem<fused_wgmma_kernel<D, BK, NWG, MINB>>(T::smem_bytes);
  note_fused_kernel("bf16 wgmma D=" + std::to_string(D) + " warpgroups=" + std::to_string(NWG) +
                    " BK=" + std::to_string(BK) + (MINB ? " minb=" + std::to_string(MINB) : ""));
  const unsigned blocks = grid_1d(static_cast<long long>(heads) * ((n + T::kBQ - 1) / T::kBQ), "fused bf16 wgmma");
  fused_wgmma_kernel<D, BK, NWG, MINB><<<blocks, T::kThreads, T::smem_bytes, stream>>>(
      q, k, v, o, heads, n, m, scale_log2, causal);
  ATTNLAB_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void fused_attention_bf16_wgmma(int config, const std::uint16_t* q, const std::uint16_t* k,
                                const std::uint16_t* v, float* o, int heads, int n, int m, int d,
                                float scale_log2, bool causal, void* stream) {
  if (const std::string why = wgmma_device_error(config); !why.empty()) throw InputError(why);
  auto s = static_cast<cudaStream_t>(stream);
  const bool wide = config == kFusedBf16WgmmaFirst;  // 3: 128-key tiles; 4: 64, two blocks an SM
  if (d == 64) {
    if (wide) launch_wgmma<64, 128, 2, 2>(q, k, v, o, heads, n, m, scale_log2, causal, s);
    else launch_wgmma<64, 64, 2, 2>(q, k, v, o, heads, n, m, scale_log2, causal, s);
  } else {
    if (wide) launch_wgmma<128, 128, 2, 0>(q, k, v, o, heads, n, m, scale_log2, causal, s);
    else launch_wgmma<128, 64, 2, 2>(q, k, v, o, heads, n, m, scale_log2, causal, s);
  }
}

}  // namespace attnlab::cuda
