// The tile-configuration switch of the fused CUDA kernels (kernels/fused_fp32.cu,
// kernels/fused_bf16.cu): both read ATTNLAB_FUSED_CONFIG at every launch and differ only in how
// many configurations they have, so the parsing lives here once. Plain C++ header: no CUDA types.
#pragma once

#include "core/types.h"

#include <cstdlib>
#include <string>

namespace attnlab::cuda {

// ATTNLAB_FUSED_CONFIG -> configuration index in 0 .. count - 1: unset, empty or "0" -> 0; a
// decimal number (at most 3 digits) below `count` -> that number; anything else throws
// InputError naming the value and the valid range.
inline int fused_config_from_env(int count) {
  const char* env = std::getenv("ATTNLAB_FUSED_CONFIG");
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
    throw InputError("ATTNLAB_FUSED_CONFIG=" + std::string(env) +
                     ": unknown configuration; valid: 0.." + std::to_string(count - 1));
  }
  return value;
}

}  // namespace attnlab::cuda
