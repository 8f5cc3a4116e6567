// The fused kernels called directly (kernels/fused.h), so that a test knows which kernel ran:
//   - fused_attention_tf32x3 (3xTF32 tensor cores, fp32 configurations 1 and 2) at d = 32, 64 and
//     128, 4 and 8 warps, none / causal: it must accept the shape (return true, not fall back) and
//     record a 3xTF32 kernel of that bucket, with relative error <= 1e-5 against fp64;
//   - the configuration in ATTNLAB_FUSED_CONFIG (gpu-check runs these tests under 1 and 2): the
//     backend's fused fp32 run of a shape that configuration suits must record that
//     configuration's kernel, not configuration 0's.
// Every test SKIPs ("no CUDA device: <reason>") without a device.
#include "core/backend.h"
#include "cpu/cpu_backend.h"
#include "tests/test_util.h"

#include "engine/registry.h"
#ifdef ATTNLAB_HAVE_CUDA
#include "kernels/fused.h"
#include "kernels/tile_config.h"

#include <cuda_runtime.h>
#endif

#include <gtest/gtest.h>

#include <cmath>
#include <iterator>
#include <utility>
#include <string>
#include <vector>

namespace attnlab {
namespace {

#ifdef ATTNLAB_HAVE_CUDA
// A device copy of a host matrix (row-major, as the kernels read it), freed with the object.
struct DeviceMatrix {
  float* ptr = nullptr;
  Eigen::Index rows = 0, cols = 0;
  explicit DeviceMatrix(const MatrixF& m) : rows(m.rows()), cols(m.cols()) {
    EXPECT_EQ(cudaMalloc(&ptr, sizeof(float) * m.size()), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr, m.data(), sizeof(float) * m.size(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  DeviceMatrix(Eigen::Index r, Eigen::Index c) : rows(r), cols(c) {
    EXPECT_EQ(cudaMalloc(&ptr, sizeof(float) * r * c), cudaSuccess);
  }
  ~DeviceMatrix() { cudaFree(ptr); }
  DeviceMatrix(const DeviceMatrix&) = delete;
  DeviceMatrix& operator=(const DeviceMatrix&) = delete;
  MatrixF host() const {
    MatrixF m(rows, cols);
    EXPECT_EQ(cudaMemcpy(m.data(), ptr, sizeof(float) * m.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    return m;
  }
};

double rel_err_to_v(const MatrixF& out, const MatrixD& ref, const MatrixF& v) {
  return (out.cast<double>() - ref).cwiseAbs().maxCoeff() /
         std::max(static_cast<double>(v.cwiseAbs().maxCoeff()), 1e-300);
}
#endif

TEST(CudaFusedKernels, Tf32x3RunsItsOwnKernelForEveryBucket) {
  ATTNLAB_REQUIRE_CUDA();
#ifdef ATTNLAB_HAVE_CUDA
  for (int d : {32, 64, 128}) {
    for (bool wide : {false, true}) {
      for (MaskKind mask : {MaskKind::None, MaskKind::Causal}) {
        // n off the tile sizes (64 / 128 queries, 32 / 64 keys), two heads.
        const Problem p = test::make_problem(197, d, d, 2, mask, 0.85, 7);
        DeviceMatrix q(p.q()), k(p.k()), v(p.v()), o(p.q().rows(), p.d_v());
        const float scale_log2 =
            static_cast<float>(1.4426950408889634 / (std::sqrt(static_cast<double>(d)) * p.temperature));
        const bool ran = cuda::fused_attention_tf32x3(wide, q.ptr, k.ptr, v.ptr, o.ptr, 2, p.n(), p.m(), d,
                                                      d, scale_log2, mask == MaskKind::Causal, nullptr, nullptr);
        const std::string what = "d " + std::to_string(d) + (wide ? " 8 warps" : " 4 warps") +
                                 (mask == MaskKind::Causal ? " causal" : "");
        ASSERT_TRUE(ran) << what << ": the 3xTF32 kernel refused a shape it must take";
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
        const std::string kernel = cuda::last_fused_kernel();
        EXPECT_EQ(kernel.rfind("3xTF32 D=" + std::to_string(d) + " warps=" + (wide ? "8" : "4"), 0), 0u)
            << what << ": ran " << kernel;
        const double err = rel_err_to_v(o.host(), reference_fp64(p).output, p.v());
        EXPECT_LE(err, 1e-5) << what << " (" << kernel << ")";
        RecordProperty("err_d" + std::to_string(d) + (wide ? "_w8" : "_w4") +
                           (mask == MaskKind::Causal ? "_causal" : ""),
                       std::to_string(err));
      }
    }
  }
#endif
}

TEST(CudaFusedKernels, Tf32x3RefusesWhatItDoesNotTake) {
  ATTNLAB_REQUIRE_CUDA();
#ifdef ATTNLAB_HAVE_CUDA
  // d_k not a multiple of 4, and d above 128: false, nothing launched.
  for (const auto& [dk, dv] : {std::pair{3, 64}, std::pair{64, 2}, std::pair{256, 256}}) {
    const Problem p = test::make_problem(40, dk, dv, 1, MaskKind::None, 1.0, 3);
    DeviceMatrix q(p.q()), k(p.k()), v(p.v()), o(p.q().rows(), p.d_v());
    EXPECT_FALSE(cuda::fused_attention_tf32x3(false, q.ptr, k.ptr, v.ptr, o.ptr, 1, p.n(), p.m(), dk, dv, 0.1f,
                                              false, nullptr, nullptr))
        << dk << "x" << dv;
  }
#endif
}

TEST(CudaFusedKernels, TheRequestedFp32ConfigurationRunsItsOwnKernel) {
  ATTNLAB_REQUIRE_CUDA();
#ifdef ATTNLAB_HAVE_CUDA
  const int config = cuda::fused_fp32_config(64);  // the switch, or the d = 64 bucket's default
  // The kernel each configuration runs at d = 64 (kernels/fused_fp32.cu's dispatch table).
  const char* const expected[] = {"fp32 D=64 BQ=64 BK=64 threads=128", "3xTF32 D=64 warps=4",
                                   "3xTF32 D=64 warps=8"};
  static_assert(std::size(expected) == cuda::kFusedFp32Configs, "one kernel per configuration");
  RunOptions opt;
  opt.variant = Variant::Fused;
  opt.keep_stages = false;
  const Problem p = test::make_problem(300, 64, 64, 4, MaskKind::Causal, 0.85, 5);
  const Trace t = make_backend("cuda")->run(p, opt);
  const std::string kernel = cuda::last_fused_kernel();
  EXPECT_EQ(kernel.rfind(expected[config], 0), 0u)
      << "ATTNLAB_FUSED_CONFIG=" << config << " ran " << kernel << ", expected " << expected[config];
  RecordProperty("kernel", kernel);
  EXPECT_LE(rel_err_to_v(t.output, reference_fp64(p).output, p.v()), 1e-5) << kernel;
#endif
}

// The same for bf16 at both head dims: configurations 3 and 4 run the sm_90a kernel on wgmma,
// which a GPU of another compute capability refuses with one line (InputError). gpu-check's
// cfg-fused-bf16-N steps run this with each value of the switch.
TEST(CudaFusedKernels, TheRequestedBf16ConfigurationRunsItsOwnKernel) {
  ATTNLAB_REQUIRE_CUDA();
#ifdef ATTNLAB_HAVE_CUDA
  // [configuration][d 64, d 128]: kernels/fused_bf16.cu's dispatch and kernels/sm90a/fused_wgmma.cu's.
  const char* const expected[][2] = {
      {"bf16 D=64 warps=8 BK=64 MT=1 qreg=1", "bf16 D=128 warps=8 BK=64 MT=1 qreg=1"},
      {"bf16 D=64 warps=4 BK=64 MT=2 qreg=1", "bf16 D=128 warps=4 BK=32 MT=2 qreg=0"},
      {"bf16 D=64 warps=4 BK=32 MT=2 qreg=1", "bf16 D=128 warps=4 BK=64 MT=2 qreg=0"},
      {"bf16 wgmma D=64 warpgroups=2 BK=128 minb=2", "bf16 wgmma D=128 warpgroups=2 BK=128"},
      {"bf16 wgmma D=64 warpgroups=2 BK=64 minb=2", "bf16 wgmma D=128 warpgroups=2 BK=64 minb=2"}};
  static_assert(std::size(expected) == cuda::kFusedBf16Configs, "one kernel pair per configuration");
  RunOptions opt;
  opt.variant = Variant::Fused;
  opt.precision = Precision::BF16;
  opt.keep_stages = false;
  for (int d : {64, 128}) {
    const int config = cuda::fused_bf16_config(d);
    SCOPED_TRACE("d " + std::to_string(d) + ", ATTNLAB_FUSED_CONFIG " + std::to_string(config));
    const Problem p = test::make_problem(300, d, d, 4, MaskKind::Causal, 0.85, 7 + d);
    if (config >= cuda::kFusedBf16WgmmaFirst && !cuda::wgmma_device_error(config).empty()) {
      EXPECT_EQ(test::message_of<InputError>([&] { make_backend("cuda")->run(p, opt); }),
                cuda::wgmma_device_error(config));
      continue;
    }
    const Trace t = make_backend("cuda")->run(p, opt);
    const std::string kernel = cuda::last_fused_kernel();
    EXPECT_EQ(kernel, expected[config][d == 64 ? 0 : 1]);
    RecordProperty("kernel_d" + std::to_string(d), kernel);
    EXPECT_LE(rel_err_to_v(t.output, reference_fp64(p).output, p.v()), 2e-2) << kernel;
  }
#endif
}

}  // namespace
}  // namespace attnlab
