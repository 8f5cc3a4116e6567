// Stage 2 of the staged chain: the mask M (0 keeps, -inf blocks) and the temperature,
// logits = (scaled + M) / T, -inf exactly where masked.
// Version 1: element-wise, one block per (row, 1024-column chunk), four consecutive elements per
// thread (one float4 when m % 4 == 0). A flat element-wise transform (thrust::transform over a
// counting iterator) would need a 64-bit division per element to recover (row, col) for the
// causal and custom masks, enough integer work to slow a stage that should run at copy speed; here
// the division happens once per block. For None and Causal the mask value is recomputed from
// (row, col) instead of read, so the stage reads one N x N matrix, not two.
// The (n, m) mask matrix itself (a stage of the Trace) is built once per run by launch_build_mask.
// With the problem's modifications (kernels/rules.h) the rules versions of both, on the same
// (row, chunk) grid: MaskRule decides every element (so decode shapes, windows, documents and
// prefixes need no mask matrix either), ScoreRule adds ALiBi's and the bias's terms and caps, and
// the biased and capped stages are written on the way when a run brings them back.
#include "kernels/cuda_check.h"
#include "kernels/launch.h"
#include "kernels/rules.cuh"
#include "kernels/stages.h"

#include <cmath>
#include <cstddef>
#include <cstdint>

namespace attnlab::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kChunk = kThreads * 4;  // columns per block

__device__ __forceinline__ float mask_value(MaskCode code, const float* __restrict__ mask_row,
                                            int local_row, int col) {
  switch (code) {
    case MaskCode::Causal: return col > local_row ? -INFINITY : 0.f;
    case MaskCode::Custom: return mask_row[col];
    default: return 0.f;
  }
}

// scaled and logits are (rows, m) with rows = heads*n; mask is (n, m), row r uses mask row r % n.
// Block b covers row b / chunks, columns [(b % chunks) * 1024, +1024).
__global__ void __launch_bounds__(kThreads)
    scale_mask_rows(const float* __restrict__ scaled, const float* __restrict__ mask,
                    float* __restrict__ logits, MaskCode code, int n, int m, int chunks,
                    float temperature) {
  const std::int64_t row = blockIdx.x / static_cast<unsigned>(chunks);
  const int chunk = static_cast<int>(blockIdx.x % static_cast<unsigned>(chunks));
  const int local_row = static_cast<int>(row % n);
  const int col = chunk * kChunk + threadIdx.x * 4;
  if (col >= m) return;
  const std::size_t base = static_cast<std::size_t>(row) * m;
  const float* mask_row = mask + static_cast<std::size_t>(local_row) * m;

  if (m % 4 == 0) {  // col + 3 < m and the row starts 16-byte aligned
    const float4 s = *reinterpret_cast<const float4*>(scaled + base + col);
    float4 out;
    out.x = (s.x + mask_value(code, mask_row, local_row, col)) / temperature;
    out.y = (s.y + mask_value(code, mask_row, local_row, col + 1)) / temperature;
    out.z = (s.z + mask_value(code, mask_row, local_row, col + 2)) / temperature;
    out.w = (s.w + mask_value(code, mask_row, local_row, col + 3)) / temperature;
    *reinterpret_cast<float4*>(logits + base + col) = out;
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int c = col + j;
      if (c < m)
        logits[base + c] = (scaled[base + c] + mask_value(code, mask_row, local_row, c)) / temperature;
    }
  }
}

// mask is (n, m): -inf above the diagonal. One block per (row, chunk), as above.
__global__ void __launch_bounds__(kThreads)
    causal_mask_rows(float* __restrict__ mask, int m, int chunks) {
  const int row = static_cast<int>(blockIdx.x / static_cast<unsigned>(chunks));
  const int chunk = static_cast<int>(blockIdx.x % static_cast<unsigned>(chunks));
  const int col0 = chunk * kChunk + threadIdx.x * 4;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int c = col0 + j;
    if (c < m) mask[static_cast<std::size_t>(row) * m + c] = c > row ? -INFINITY : 0.f;
  }
}

// The rules form of scale_mask_rows: rows = heads*n, row r is query r % n of head r / n; biased
// and capped (rows, m) or null. Scalar loads: the per-element rules cost more than the width.
__global__ void __launch_bounds__(kThreads)
    modify_rows(const float* __restrict__ scaled, float* __restrict__ biased, float* __restrict__ capped,
                float* __restrict__ logits, KernelRules rules, int n, int m, int chunks, float temperature) {
  const std::int64_t row = blockIdx.x / static_cast<unsigned>(chunks);
  const int chunk = static_cast<int>(blockIdx.x % static_cast<unsigned>(chunks));
  const int head = static_cast<int>(row / n), i = static_cast<int>(row % n);
  const std::size_t base = static_cast<std::size_t>(row) * m;
  const ScoreRule& sr = rules.score;
  const bool adds = sr.slopes != nullptr || sr.bias != nullptr;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    // Consecutive threads take consecutive columns: coalesced in every pass.
    const int c = chunk * kChunk + e * kThreads + threadIdx.x;
    if (c >= m) continue;
    float y = scaled[base + c];
    if (adds) {
      y += sr.added(head, i, c);
      if (biased != nullptr) biased[base + c] = y;
    }
    if (sr.softcap > 0) {
      y = sr.cap(y);
      if (capped != nullptr) capped[base + c] = y;
    }
    logits[base + c] = rules.mask.visible(i, c) ? y / temperature : -INFINITY;
  }
}

// mask (n, m) from MaskRule; may alias rule.custom (each element reads only its own).
__global__ void __launch_bounds__(kThreads) mask_rows_rules(float* mask, MaskRule rule, int m, int chunks) {
  const int row = static_cast<int>(blockIdx.x / static_cast<unsigned>(chunks));
  const int chunk = static_cast<int>(blockIdx.x % static_cast<unsigned>(chunks));
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int c = chunk * kChunk + e * kThreads + threadIdx.x;
    if (c < m) mask[static_cast<std::size_t>(row) * m + c] = rule.visible(row, c) ? 0.f : -INFINITY;
  }
}

}  // namespace

void launch_build_mask_rules(float* mask, const MaskRule& rule, int n, int m, cudaStream_t stream) {
  if (n <= 0 || m <= 0) return;
  const int chunks = (m + kChunk - 1) / kChunk;
  const unsigned blocks = grid_1d(static_cast<long long>(n) * chunks, "mask (rules)");
  mask_rows_rules<<<blocks, kThreads, 0, stream>>>(mask, rule, m, chunks);
  ATTNLAB_CUDA_CHECK(cudaGetLastError());
}

void launch_scale_mask_rules(const float* scaled, float* biased, float* capped, float* logits,
                             const KernelRules& rules, int heads, int n, int m, float temperature,
                             cudaStream_t stream) {
  if (heads <= 0 || n <= 0 || m <= 0) return;
  const int chunks = (m + kChunk - 1) / kChunk;
  const unsigned blocks = grid_1d(static_cast<long long>(heads) * n * chunks, "scale/mask (rules)");
  modify_rows<<<blocks, kThreads, 0, stream>>>(scaled, biased, capped, logits, rules, n, m, chunks, temperature);
  ATTNLAB_CUDA_CHECK(cudaGetLastError());
}

void launch_build_mask(float* mask, MaskCode code, int n, int m, cudaStream_t stream) {
  if (n <= 0 || m <= 0) return;
  const std::size_t bytes = static_cast<std::size_t>(n) * m * sizeof(float);
  switch (code) {
    case MaskCode::None:
      // All-zero bits are +0.0f.
      ATTNLAB_CUDA_CHECK(cudaMemsetAsync(mask, 0, bytes, stream));
      break;
    case MaskCode::Custom:
      break;
    case MaskCode::Causal: {
      const int chunks = (m + kChunk - 1) / kChunk;
      const unsigned blocks = grid_1d(static_cast<long long>(n) * chunks, "causal mask");
      causal_mask_rows<<<blocks, kThreads, 0, stream>>>(mask, m, chunks);
      ATTNLAB_CUDA_CHECK(cudaGetLastError());
      break;
    }
  }
}

void launch_scale_mask(const float* scaled, const float* mask, float* logits, MaskCode code,
                       int heads, int n, int m, float temperature, cudaStream_t stream) {
  if (heads <= 0 || n <= 0 || m <= 0) return;
  const int chunks = (m + kChunk - 1) / kChunk;
  const unsigned blocks = grid_1d(static_cast<long long>(heads) * n * chunks, "scale/mask");
  scale_mask_rows<<<blocks, kThreads, 0, stream>>>(
      scaled, mask, logits, code, n, m, chunks, temperature);
  ATTNLAB_CUDA_CHECK(cudaGetLastError());
}

}  // namespace attnlab::cuda
