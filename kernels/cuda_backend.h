// The CUDA backend's plain C++ face (no CUDA types): what the registry, the CLI and the tests
// may call. Implemented in kernels/cuda_backend.cu, compiled only when ATTNLAB_HAVE_CUDA.
#pragma once

#include "core/backend.h"

#include <cstddef>
#include <memory>
#include <string>

namespace attnlab::cuda {

// True when at least one device answers. cudaGetDeviceCount's error (e.g. "no CUDA-capable device
// is detected") goes into *reason. Never aborts.
bool device_available(std::string* reason = nullptr);

// Name, SM count, memory of device 0, e.g. "NVIDIA H200 (132 SMs, 139.8 GiB, sm_90)".
std::string device_description();

// Throws NoDeviceError("no CUDA device: <reason>") when no device answers.
std::unique_ptr<Backend> make_backend();

// Device-to-device copy bandwidth in GB/s (bytes read + bytes written), median of `repeat`
// cudaMemcpyAsync's of `bytes`, timed with events: the ceiling the staged chain is held to.
double copy_bandwidth_gbs(std::size_t bytes, int repeat = 20);

}  // namespace attnlab::cuda
