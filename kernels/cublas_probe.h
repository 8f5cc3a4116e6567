// The cuBLAS SGEMM probe: the CUDA roofline's compute ceiling (engine/bench.h cuda_ceilings). Plain
// C++; implemented in kernels/cublas_probe.cu, compiled only when ATTNLAB_HAVE_CUDA.
#pragma once

namespace attnlab::cuda {

// GFLOP/s of cublasSgemm (fp32, default math mode: no tensor cores) on square n x n matrices in
// device memory: one warm-up, best of 5 timed with CUDA events, 2 n^3 / time. cuBLAS is loaded at
// run time (libcublas.so.13, .so.12, .so): a machine without it gets DeviceError("cuBLAS not
// found ..."), never a binary that fails to start. Throws DeviceError on CUDA or cuBLAS errors.
double cublas_sgemm_gflops(int n);

}  // namespace attnlab::cuda
