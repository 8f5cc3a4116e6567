// The tile-configuration switches of the CUDA kernels, read from the environment at every launch:
//   ATTNLAB_FUSED_CONFIG   the fused kernels (kernels/fused_fp32.cu, kernels/fused_bf16.cu)
//   ATTNLAB_STAGED_CONFIG  the staged chain's GEMM stages (kernels/qk.cu, kernels/pv.cu)
// Each kernel file lists its configurations; they differ only in how many there are, so the
// parsing lives here once. Plain C++ header: no CUDA types.
#pragma once

#include "core/types.h"

#include <cstdlib>
#include <string>

namespace attnlab::cuda {

// Environment variable `var` -> configuration index in 0 .. count - 1: unset, empty or "0" -> 0;
// a decimal number (at most 3 digits) below `count` -> that number; anything else throws
// InputError naming the variable, the value and the valid range.
inline int config_from_env(const char* var, int count) {
  const char* env = std::getenv(var);
  if (env == nullptr || env[0] == '\0') return 0;
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

}  // namespace attnlab::cuda
