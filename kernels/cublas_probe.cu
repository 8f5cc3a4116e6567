// The cuBLAS SGEMM probe (see cublas_probe.h). Why dlopen rather than linking cuBLAS: the probe is
// the only user of cuBLAS, the kernels link the CUDA runtime statically so the binaries run on the
// GPU machine as they are, and a static cuBLAS would add hundreds of MB to every binary; loading
// it at run time keeps the probe optional (no library: the roofline says so instead of a ceiling).
#include "kernels/cublas_probe.h"

#include "kernels/cuda_check.h"

#include "core/types.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <limits>
#include <string>

namespace attnlab::cuda {
namespace {

using CreateFn = cublasStatus_t (*)(cublasHandle_t*);
using DestroyFn = cublasStatus_t (*)(cublasHandle_t);
using SetStreamFn = cublasStatus_t (*)(cublasHandle_t, cudaStream_t);
using SgemmFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                   const float*, const float*, int, const float*, int, const float*,
                                   float*, int);

struct Cublas {
  void* lib = nullptr;
  CreateFn create = nullptr;
  DestroyFn destroy = nullptr;
  SetStreamFn set_stream = nullptr;
  SgemmFn sgemm = nullptr;
};

// Loaded once, kept for the process (dlclose of a CUDA library at exit races its own teardown).
const Cublas& cublas() {
  static const Cublas c = [] {
    Cublas x;
    for (const char* name : {"libcublas.so.13", "libcublas.so.12", "libcublas.so"}) {
      x.lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (x.lib) break;
    }
    if (!x.lib) return x;
    x.create = reinterpret_cast<CreateFn>(dlsym(x.lib, "cublasCreate_v2"));
    x.destroy = reinterpret_cast<DestroyFn>(dlsym(x.lib, "cublasDestroy_v2"));
    x.set_stream = reinterpret_cast<SetStreamFn>(dlsym(x.lib, "cublasSetStream_v2"));
    x.sgemm = reinterpret_cast<SgemmFn>(dlsym(x.lib, "cublasSgemm_v2"));
    return x;
  }();
  return c;
}

void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw DeviceError(std::string(what) + " failed (cublasStatus_t " + std::to_string(static_cast<int>(s)) + ")");
}

}  // namespace

double cublas_sgemm_gflops(int n) {
  const Cublas& cb = cublas();
  if (!cb.lib || !cb.create || !cb.destroy || !cb.set_stream || !cb.sgemm)
    throw DeviceError("cuBLAS not found (libcublas.so.13 / .so.12 / .so): install the CUDA toolkit's cuBLAS");
  const std::size_t bytes = sizeof(float) * static_cast<std::size_t>(n) * n;
  float *a = nullptr, *b = nullptr, *c = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  cublasHandle_t handle = nullptr;
  // Released on every path, errors included.
  struct Release {
    float **a, **b, **c;
    cudaStream_t* s;
    cudaEvent_t *e0, *e1;
    cublasHandle_t* h;
    DestroyFn destroy;
    ~Release() {
      if (*h) destroy(*h);
      if (*e0) cudaEventDestroy(*e0);
      if (*e1) cudaEventDestroy(*e1);
      if (*s) cudaStreamDestroy(*s);
      cudaFree(*a);
      cudaFree(*b);
      cudaFree(*c);
    }
  } release{&a, &b, &c, &stream, &start, &stop, &handle, cb.destroy};
  ATTNLAB_CUDA_CHECK(cudaMalloc(&a, bytes));
  ATTNLAB_CUDA_CHECK(cudaMalloc(&b, bytes));
  ATTNLAB_CUDA_CHECK(cudaMalloc(&c, bytes));
  ATTNLAB_CUDA_CHECK(cudaStreamCreate(&stream));
  ATTNLAB_CUDA_CHECK(cudaEventCreate(&start));
  ATTNLAB_CUDA_CHECK(cudaEventCreate(&stop));
  // Defined inputs (the bytes of 1/64-ish floats): the rate does not depend on the values, but a
  // memory checker would flag reads of uninitialised memory.
  ATTNLAB_CUDA_CHECK(cudaMemsetAsync(a, 0x3c, bytes, stream));
  ATTNLAB_CUDA_CHECK(cudaMemsetAsync(b, 0x3c, bytes, stream));
  check(cb.create(&handle), "cublasCreate");
  check(cb.set_stream(handle, stream), "cublasSetStream");
  const float one = 1, zero = 0;
  const auto gemm = [&] {
    check(cb.sgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, n, b, n, &zero, c, n), "cublasSgemm");
  };
  gemm();  // warm-up (and cuBLAS's own kernel selection)
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < 5; ++i) {
    ATTNLAB_CUDA_CHECK(cudaEventRecord(start, stream));
    gemm();
    ATTNLAB_CUDA_CHECK(cudaEventRecord(stop, stream));
    ATTNLAB_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    ATTNLAB_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    best = std::min(best, static_cast<double>(ms));
  }
  ATTNLAB_CUDA_CHECK(cudaGetLastError());
  return best > 0 ? 2.0 * n * static_cast<double>(n) * n / (best * 1e-3) / 1e9 : 0;
}

}  // namespace attnlab::cuda
