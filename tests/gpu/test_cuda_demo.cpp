// The page's 5-token demo through the CUDA backend: the same tables the page shows (2 decimals;
// weights 3), every stage equal to the CPU backend's, the causal variant's exact zeros, a failed
// CUDA call reported by its own run alone, and `attnlab verify --backend cuda` passing. Every test SKIPs ("no CUDA device: <reason>") without
// a device.
#include "core/backend.h"
#include "core/verify.h"
#include "cpu/cpu_backend.h"
#include "tests/test_util.h"
#include "engine/registry.h"
#ifdef ATTNLAB_HAVE_CUDA
#include "kernels/cuda_check.h"
#endif

#include <gtest/gtest.h>

#include <cstddef>
#include <limits>
#include <string>

namespace attnlab {
namespace {

TEST(CudaDemo, MatchesThePageTables) {
  ATTNLAB_REQUIRE_CUDA();
  const Problem p = demo_problem();
  const Trace t = make_backend("cuda")->run(p, {});
  ASSERT_EQ(t.backend, "cuda");
  ASSERT_TRUE(t.has_stages);
  ASSERT_EQ(t.scores.rows(), 5);
  ASSERT_EQ(t.scores.cols(), 5);
  ASSERT_EQ(t.mask.rows(), 5);
  ASSERT_EQ(t.output.rows(), 5);
  ASSERT_EQ(t.output.cols(), 2);

  // QKᵀ row 模型 = 1.84 0.49 1.79 0.99 1.94. 0.495 and 0.995 are exact ties that the page's
  // JavaScript doubles round down and fp32 rounds up: the check is the printed interval ± 0.005.
  const double scores_row0[] = {1.84, 0.49, 1.79, 0.99, 1.94};
  for (int j = 0; j < 5; ++j) EXPECT_NEAR(t.scores(0, j), scores_row0[j], 0.005 + 1e-6) << j;
  // softmax row 上下文 = 0.219 0.102 0.260 0.165 0.254, max on 上下文 itself
  const double weights_row2[] = {0.219, 0.102, 0.260, 0.165, 0.254};
  for (int j = 0; j < 5; ++j) EXPECT_NEAR(t.weights(2, j), weights_row2[j], 0.0005) << j;
  // Output row 上下文 = 0.65 0.55
  EXPECT_NEAR(t.output(2, 0), 0.65, 0.005);
  EXPECT_NEAR(t.output(2, 1), 0.55, 0.005);
  // Bidirectional: the mask is all zeros.
  EXPECT_EQ(t.mask, MatrixF::Zero(5, 5));
}

TEST(CudaDemo, EveryStageEqualsTheCpuBackend) {
  ATTNLAB_REQUIRE_CUDA();
  const Problem p = demo_problem();
  const Trace g = make_backend("cuda")->run(p, {});
  const Trace c = cpu_staged(p);
  const auto close = [](const MatrixF& a, const MatrixF& b) {
    return a.rows() == b.rows() && a.cols() == b.cols() &&
           ((a - b).cwiseAbs().array() <= 1e-6f + 1e-5f * b.cwiseAbs().array()).all();
  };
  EXPECT_TRUE(close(g.scores, c.scores));
  EXPECT_TRUE(close(g.scaled, c.scaled));
  EXPECT_EQ(g.mask, c.mask);
  EXPECT_TRUE(close(g.logits, c.logits));
  EXPECT_TRUE(close(g.weights, c.weights));
  EXPECT_TRUE(close(g.output, c.output));
  const VerifyReport r = verify_trace(p, g, reference_fp64(p));
  EXPECT_TRUE(r.pass) << render_verify_text(r);
}

TEST(CudaDemo, CausalFutureWeightsAreExactlyZero) {
  ATTNLAB_REQUIRE_CUDA();
  Problem p = demo_problem();
  p.mask = MaskKind::Causal;
  const Trace t = make_backend("cuda")->run(p, {});
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 5; ++j) {
      if (j > i) {
        EXPECT_EQ(t.weights(i, j), 0.0f) << i << "," << j;
        EXPECT_EQ(t.logits(i, j), -std::numeric_limits<float>::infinity()) << i << "," << j;
      } else {
        EXPECT_GT(t.weights(i, j), 0.0f) << i << "," << j;
      }
    }
  // Row 0 can only read itself.
  EXPECT_EQ(t.weights(0, 0), 1.0f);
  const VerifyReport r = verify_trace(p, t, reference_fp64(p));
  EXPECT_TRUE(r.pass) << render_verify_text(r);
  EXPECT_EQ(r.masked_count, 10u);
}

// A CUDA call that fails without poisoning the context (an allocation far beyond any device) is
// reported once: the runtime's last error is read with it, so the next run, on the same thread,
// does not meet it again at its first check after a launch.
TEST(CudaDemo, AFailedCallIsReportedOnceNotByTheNextRun) {
  ATTNLAB_REQUIRE_CUDA();
#ifdef ATTNLAB_HAVE_CUDA
  const std::string what = test::message_of<DeviceError>([] {
    void* p = nullptr;
    ATTNLAB_CUDA_CHECK(cudaMalloc(&p, std::size_t{1} << 60));
  });
  EXPECT_TRUE(test::contains(what, "cudaErrorMemoryAllocation")) << what;
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_NO_THROW(make_backend("cuda")->run(demo_problem(), RunOptions{}));
#endif
}

TEST(CudaDemo, AutoChoosesCuda) {
  ATTNLAB_REQUIRE_CUDA();
  EXPECT_EQ(run_backend("auto", demo_problem()).backend, "cuda");
}

#ifdef ATTNLAB_BINARY
TEST(CudaDemo, VerifyCommandPasses) {
  ATTNLAB_REQUIRE_CUDA();
  const test::BinaryRun r = test::run_attnlab({"verify", "--backend", "cuda"});
  ASSERT_NE(r.code, -1) << "could not run " << test::attnlab_binary();
  const std::string out = r.out + r.err;  // both streams, as `2>&1` gave them
  EXPECT_EQ(r.code, 0) << out;
  EXPECT_NE(out.find("backend cuda"), std::string::npos) << out;
  EXPECT_NE(out.find("PASS"), std::string::npos) << out;
}
#endif

}  // namespace
}  // namespace attnlab
