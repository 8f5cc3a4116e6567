// The CUDA backend's plain C++ face (no CUDA types): what the registry, the CLI and the tests
// may call. Implemented in kernels/cuda_backend.cu, compiled only when ATTNLAB_HAVE_CUDA.
#pragma once

#include "core/backend.h"
#include "core/backward.h"

#include <cstddef>
#include <memory>
#include <string>

namespace attnlab::cuda {

// True when at least one device answers. cudaGetDeviceCount's error (e.g. "no CUDA-capable device
// is detected") goes into *reason. Never aborts.
bool device_available(std::string* reason = nullptr);

// Name, SM count, memory of device 0, e.g. "NVIDIA H200 (132 SMs, 139.8 GiB, sm_90)".
std::string device_description();

// Device bytes a streamed run allocates (a staged run with RunOptions::pool, or with exact rows
// and stages not kept): the inputs, a custom mask, the row statistics, the pooled grids and the
// exact rows, never an (n, m) stage; what the run compares with free memory before allocating.
// Validates the problem and the request (InputError); touches no device.
std::size_t streamed_device_bytes(const Problem& p, const RunOptions& opt);

// The key tiles of the last fused run with modifications on this host thread (run and run_into,
// not bench): its kernel's tile, the tiles its blocks computed (counted on the device), the tiles
// the block mask leaves (BlockMask::visited() times the heads) and all of them. The counts match
// when the kernel skipped exactly the Empty tiles. All zero before such a run.
struct FusedTiles {
  int q_tile = 0, k_tile = 0;
  long long computed = 0, planned = 0, total = 0;
};
FusedTiles last_fused_tiles();

// The fused backward on the device (kernels/backward.h: FlashAttention-2's backward with the
// problem's rules, fp32 arithmetic): the fused forward in `precision` (the backend's own fused
// kernel: forward.output and forward.timings.fused_ms), then the row statistics and the
// gradients, never an (n, m) matrix. Fills forward (output and timings only), dout (as given), D,
// dq, dk, dv, dT, backward_ms (CUDA events around the two backward kernels); with RoPE also
// dq_rot and dk_rot (what the kernels computed; dq and dk are them turned back on the host). The
// stage gradients (dp, dlogits, ...) stay empty. bf16: Q, K, V and dO are rounded to bf16 on the
// device, as the bf16 forward rounds its inputs; d_k == d_v in {64, 128}. fp32: d_k, d_v <= 256.
// Validates p and dO's shape (InputError); NoDeviceError without a device, DeviceError on device
// failures.
GradTrace fused_backward(const Problem& p, const MatrixF& dout, Precision precision);

// The tiles of the last fused_backward on this host thread: its kernel's tile, the (query tile,
// key tile) pairs its blocks computed (counted on the device, over every query head), the pairs
// the block mask leaves (BlockMask::visited() times the heads) and all of them.
FusedTiles last_backward_tiles();

// Throws NoDeviceError (Msg::NoDevice, "no CUDA device: <reason>") when no device answers.
std::unique_ptr<Backend> make_backend();

// Device-to-device copy bandwidth in GB/s (bytes read + bytes written), median of `repeat`
// cudaMemcpyAsync's of `bytes`, timed with events: the ceiling the staged chain is held to.
double copy_bandwidth_gbs(std::size_t bytes, int repeat = 20);

}  // namespace attnlab::cuda
