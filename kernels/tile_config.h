// The tile-configuration switches of the CUDA kernels, read from the environment at every launch:
//   ATTNLAB_FUSED_CONFIG   the fused kernels (kernels/fused_fp32.cu, kernels/fused_bf16.cu)
//   ATTNLAB_STAGED_CONFIG  the staged chain's GEMM stages (kernels/qk.cu, kernels/pv.cu)
//   ATTNLAB_DECODE_CONFIG  the split-KV decode kernel (kernels/decode.cu): 0 its rows one at a
//                          time, 1 four at a time (grouped-query shapes; a single row runs 0)
// Each kernel file lists its configurations; they differ only in how many there are, so the
// parsing lives here once, with the head dimensions each fused kernel takes. The CUDA backend
// checks both before it uploads anything; the launchers check them again, for direct callers.
// Plain C++ header: no CUDA types, so host-only code (attnlab bench, the tests) can include it.
#pragma once

#include "core/types.h"

#include <cstdlib>
#include <string>

namespace attnlab::cuda {

// Environment variable `var` -> configuration index in 0 .. count - 1: unset or empty ->
// `fallback` (the default of the launch's bucket); a decimal number (at most 3 digits) below
// `count` -> that number ("0" is configuration 0, whatever the default); anything else throws
// InputError naming the variable, the value and the valid range.
inline int config_from_env(const char* var, int count, int fallback = 0) {
  const char* env = std::getenv(var);
  if (env == nullptr || env[0] == '\0') return fallback;
  int value = 0;
  int digits = 0;
  for (const char* c = env; *c != '\0'; ++c, ++digits) {
    if (*c < '0' || *c > '9' || digits >= 3) {
      value = -1;
      break;
    }
    value = value * 10 + (*c - '0');
  }
  if (value < 0 || value >= count) {
    throw InputError(std::string(var) + "=" + env + ": unknown configuration; valid: 0.." +
                     std::to_string(count - 1));
  }
  return value;
}

// How many configurations each switch has (valid values 0 .. count - 1).
// (Each kernel keeps its simplest configuration, 0, and the ones fastest somewhere in the H200
// sweeps of 2026-12-04; the others were deleted and the survivors renumbered: fused fp32 5 and 6
// are 1 and 2, bf16 4 and 5 are 1 and 2, staged 2 is 1. docs/PERFORMANCE.md keeps the sweeps'
// figures under the old numbers.)
inline constexpr int kFusedFp32Configs = 3;  // fused_fp32.cu; 1 and 2 run fused_tf32.cu
inline constexpr int kFusedBf16Configs = 5;  // fused_bf16.cu; 3 and 4 run sm90a/fused_wgmma.cu
// The first bf16 configuration on wgmma (sm_90a, compute capability 9.0 only; written after the
// last H200 round, not yet run on a GPU).
inline constexpr int kFusedBf16WgmmaFirst = 3;
inline constexpr int kStagedConfigs = 2;     // qk.cu and pv.cu
inline constexpr int kDecodeConfigs = 2;     // decode.cu (written after the last H200 round)

// The fused kernels' head-dim buckets: max(d_k, d_v) padded to 32, 64, 128 or 256 (index 0..3).
inline constexpr int head_dim_bucket(int head_dim) {
  return head_dim <= 32 ? 0 : head_dim <= 64 ? 1 : head_dim <= 128 ? 2 : 3;
}

// The configuration each bucket runs when ATTNLAB_FUSED_CONFIG is unset: the fastest whose error
// is in range in the lab GPU's configuration sweeps (scripts/gpu-check --sweep-only, its
// "fastest with every case ok" lines; docs/PERFORMANCE.md, "The H200 round of 2026-12-04" and
// "The third H200 round"): fp32 3xTF32 with 4 warps at d <= 32, with 8 warps at d 33-128,
// configuration 0 at d 256 (the 3xTF32 ones run it there too); bf16 has only the 64 and 128
// buckets.
inline constexpr int kFusedFp32Default[4] = {1, 2, 2, 0};
inline constexpr int kFusedBf16Default[4] = {0, 1, 2, 0};
// The staged chain's GEMM stages (one switch for every head dim): the same sweep's winner.
inline constexpr int kStagedDefault = 1;
static_assert(kFusedFp32Default[0] < kFusedFp32Configs && kFusedFp32Default[1] < kFusedFp32Configs &&
              kFusedFp32Default[2] < kFusedFp32Configs && kFusedFp32Default[3] < kFusedFp32Configs);
static_assert(kFusedBf16Default[1] < kFusedBf16Configs && kFusedBf16Default[2] < kFusedBf16Configs);

// The switches as each kernel family reads them: the variable, its count and the bucket's default
// paired once. head_dim: max(d_k, d_v) of the launch.
inline int fused_fp32_config(int head_dim) {
  return config_from_env("ATTNLAB_FUSED_CONFIG", kFusedFp32Configs, kFusedFp32Default[head_dim_bucket(head_dim)]);
}
inline int fused_bf16_config(int head_dim) {
  return config_from_env("ATTNLAB_FUSED_CONFIG", kFusedBf16Configs, kFusedBf16Default[head_dim_bucket(head_dim)]);
}
inline int staged_config() { return config_from_env("ATTNLAB_STAGED_CONFIG", kStagedConfigs, kStagedDefault); }
// The decode kernel's default: configuration 0, the one the third H200 round timed; 1 has not run
// on a GPU yet (scripts/gpu-check tests and times it beside 0).
inline constexpr int kDecodeDefault = 0;
inline int decode_config() { return config_from_env("ATTNLAB_DECODE_CONFIG", kDecodeConfigs, kDecodeDefault); }

// The largest d_k or d_v the fused fp32 kernels take.
inline constexpr int kFusedFp32MaxHeadDim = 256;

// "" when the fused fp32 kernels take (d_k, d_v); otherwise why not (the InputError text).
inline std::string fused_fp32_shape_error(int d_k, int d_v) {
  if (d_k <= kFusedFp32MaxHeadDim && d_v <= kFusedFp32MaxHeadDim) return "";
  return "fused fp32 supports head dims up to " + std::to_string(kFusedFp32MaxHeadDim) +
         ", got d_k " + std::to_string(d_k) + ", d_v " + std::to_string(d_v);
}

// "" when the fused bf16 kernel takes (d_k, d_v): d_k == d_v, 64 or 128; otherwise why not.
inline std::string fused_bf16_shape_error(int d_k, int d_v) {
  if (d_k != d_v)
    return "bf16 fused attention needs d_k == d_v, got d_k " + std::to_string(d_k) + " and d_v " +
           std::to_string(d_v);
  if (d_k != 64 && d_k != 128)
    return "bf16 fused attention supports d_k == d_v in {64, 128}, got " + std::to_string(d_k);
  return "";
}

}  // namespace attnlab::cuda
