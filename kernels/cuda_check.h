// ATTNLAB_CUDA_CHECK: every CUDA runtime call and every launch in kernels/ goes through it, so a
// device failure becomes an attnlab::DeviceError naming the failing call, where it was made and
// the CUDA error ("cudaMalloc(&p, bytes) at kernels/cuda_backend.cu:88: cudaErrorMemoryAllocation
// (out of memory)"), never an abort. After a launch: ATTNLAB_CUDA_CHECK(cudaGetLastError()).
// Included by .cu files only (it needs cuda_runtime.h); include it first in a .cu file so that the
// pragma below is in force before Eigen's headers are parsed.
#pragma once

#if defined(__CUDACC__)
// Eigen 3.4 marks its defaulted copy/move members __host__ __device__, which nvcc 12+ reports as
// "annotation is ignored" (20012) once per member and translation unit: noise, not a defect.
#pragma nv_diag_suppress 20012
#endif

#include "core/types.h"

#include <cuda_runtime.h>

#include <string>

namespace attnlab::cuda {

// The runtime also keeps a failed call's error as the thread's last error (cudaGetLastError's)
// until something reads it: a failure that leaves the context usable (an allocation beyond the
// free memory, an invalid value) would otherwise come back at the next run's first check after a
// launch, and fail that run too. It is read here, once reported; an error that poisons the context
// comes back from every later call anyway.
[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* call, const char* file,
                                          int line) {
  (void)cudaGetLastError();
  std::string where = file;
  // Keep the path relative to the source tree: "kernels/qk.cu", not the build machine's root.
  if (auto pos = where.rfind("kernels/"); pos != std::string::npos) where = where.substr(pos);
  throw DeviceError(std::string(call) + " at " + where + ":" + std::to_string(line) + ": " +
                    cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

}  // namespace attnlab::cuda

#define ATTNLAB_CUDA_CHECK(call)                                                     \
  do {                                                                               \
    const cudaError_t attnlab_cuda_err_ = (call);                                    \
    if (attnlab_cuda_err_ != cudaSuccess)                                            \
      ::attnlab::cuda::throw_cuda_error(attnlab_cuda_err_, #call, __FILE__, __LINE__); \
  } while (0)
