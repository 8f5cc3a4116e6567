// Host-side launch helpers shared by the kernels that use more than 48 KiB of dynamic shared
// memory or compute their own grid size (kernels/fused_*.cu, kernels/qk.cu, kernels/pv.cu).
// Included by .cu files only (it names CUDA runtime functions), after kernels/cuda_check.h.
#pragma once

#include "core/types.h"
#include "kernels/cuda_check.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace attnlab::cuda {

// log2(e): the fused launchers pass scale * log2(e), so that the kernels use exp2.
inline constexpr float kLog2e = 1.4426950408889634f;

// True when p is 16-byte aligned: what cp.async and float4 accesses need.
inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// Above 48 KiB a kernel must opt in to dynamic shared memory, once per kernel: the first call for
// each `Kernel` (a __global__ function, as a template argument) sets the attribute, checked.
template <auto Kernel>
void allow_dynamic_smem(std::size_t bytes) {
  static const bool done = [bytes] {
    ATTNLAB_CUDA_CHECK(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(bytes)));
    return true;
  }();
  (void)done;
}

// The fused launchers record the kernel they launched (its family and template parameters) for
// last_fused_kernel() in kernels/fused.h: a configuration that does not suit a shape runs another
// kernel, and bench and the tests must be able to tell. One record per host thread.
void note_fused_kernel(std::string name);

// A one-dimensional grid of `blocks` blocks, refused with InputError (naming `what`) above
// gridDim.x's limit.
inline unsigned grid_1d(long long blocks, const char* what) {
  if (blocks > 0x7fffffffLL) {
    throw InputError(std::string(what) + ": " + std::to_string(blocks) +
                     " blocks exceed the grid limit");
  }
  return static_cast<unsigned>(blocks);
}

}  // namespace attnlab::cuda
