// The CUDA fallback and refusal paths, exercised without a GPU by forcing the CUDA path to fail
// through ATTNLAB_CUDA_FAULT (kernels/cuda_backend.cu): "launch" makes run() throw DeviceError,
// "nodevice" hides every device, "oom" makes the memory estimate see 1 MiB free.
//   auto + launch   -> the CPU runs, exactly one "falling back to the CPU" line on stderr, exit 0
//   cuda + launch   -> exit 1, "error: ... forced launch failure ..."
//   cuda + nodevice -> exit 2, "error: no CUDA device: ..."
//   cuda + oom      -> exit 2, the estimate and the limit in the message
// Only meaningful when the CUDA backend is compiled in; otherwise every test SKIPs.
#include "core/backend.h"
#include "cpu/cpu_backend.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

namespace attnlab {
namespace {

#define ATTNLAB_REQUIRE_CUDA_BUILD()                                                          \
  do {                                                                                        \
    if (!cuda_compiled()) GTEST_SKIP() << "attnlab was built without CUDA: nothing to force"; \
  } while (0)

bool cuda_compiled() {
#ifdef ATTNLAB_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

// Sets an environment variable for one scope, restoring the previous value.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_.c_str(), old_->c_str(), 1);
    else
      unsetenv(name_.c_str());
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

int count_lines(const std::string& s) {
  int lines = 0;
  for (char c : s) lines += c == '\n';
  return lines;
}

TEST(Fallback, AutoRunsOnCpuAfterForcedLaunchFailure) {
  ATTNLAB_REQUIRE_CUDA_BUILD();
  ScopedEnv fault("ATTNLAB_CUDA_FAULT", "launch");
  ::testing::internal::CaptureStderr();
  const Trace t = run_backend("auto", demo_problem());
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(t.backend, "cpu");
  EXPECT_TRUE(t.has_stages);
  EXPECT_EQ(t.output.rows(), 5);
  EXPECT_EQ(count_lines(err), 1) << err;
  EXPECT_NE(err.find("falling back to the CPU"), std::string::npos) << err;
  EXPECT_NE(err.find("ATTNLAB_CUDA_FAULT=launch"), std::string::npos) << err;
}

TEST(Fallback, CudaBackendWithLaunchFaultThrowsDeviceError) {
  ATTNLAB_REQUIRE_CUDA_BUILD();
  ScopedEnv fault("ATTNLAB_CUDA_FAULT", "launch");
  std::unique_ptr<Backend> b = make_backend("cuda");  // succeeds: the forced device "answers"
  ASSERT_EQ(b->name(), "cuda");
  EXPECT_THROW(b->run(demo_problem(), {}), DeviceError);
  EXPECT_THROW(b->bench(demo_problem(), {}, 1, 1), DeviceError);
}

TEST(Fallback, NoDeviceFaultHidesTheDevice) {
  ATTNLAB_REQUIRE_CUDA_BUILD();
  ScopedEnv fault("ATTNLAB_CUDA_FAULT", "nodevice");
  std::string reason;
  EXPECT_FALSE(cuda_available(&reason));
  EXPECT_NE(reason.find("ATTNLAB_CUDA_FAULT"), std::string::npos) << reason;
  try {
    make_backend("cuda");
    ADD_FAILURE() << "make_backend(\"cuda\") did not throw";
  } catch (const NoDeviceError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("no CUDA device: ", 0), 0u) << e.what();
  }
  // auto without a device is the CPU, silently.
  ::testing::internal::CaptureStderr();
  const Trace t = run_backend("auto", demo_problem());
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(t.backend, "cpu");
}

TEST(Fallback, OomFaultRefusesWithEstimateAndLimit) {
  ATTNLAB_REQUIRE_CUDA_BUILD();
  ScopedEnv fault("ATTNLAB_CUDA_FAULT", "oom");
  const Problem p = random_problem(300, 16, 16, 1);
  try {
    make_backend("cuda")->run(p, {});
    ADD_FAILURE() << "run did not refuse the problem";
  } catch (const ResourceError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("problem needs 1.8 MiB of GPU memory"), std::string::npos) << msg;
    EXPECT_NE(msg.find("1.0 MiB free"), std::string::npos) << msg;
    EXPECT_NE(msg.find("--variant fused"), std::string::npos) << msg;
  }
}

#ifdef ATTNLAB_BINARY
// Runs the attnlab binary with ATTNLAB_CUDA_FAULT=fault in its environment.
test::BinaryRun run_cli(const std::string& fault, const std::vector<std::string>& args) {
  return test::run_attnlab(args, "ATTNLAB_CUDA_FAULT=" + fault);
}

TEST(FallbackCli, AutoDemoFallsBackWithOneLine) {
  ATTNLAB_REQUIRE_CUDA_BUILD();
  const test::BinaryRun c = run_cli("launch", {"demo", "--backend", "auto", "--lang", "en"});
  EXPECT_EQ(c.code, 0) << c.err;
  EXPECT_EQ(count_lines(c.err), 1) << c.err;
  EXPECT_NE(c.err.find("falling back to the CPU"), std::string::npos) << c.err;
  EXPECT_FALSE(c.out.empty());
}

TEST(FallbackCli, AutoVerifyFallsBackAndPasses) {
  ATTNLAB_REQUIRE_CUDA_BUILD();
  const test::BinaryRun c = run_cli("launch", {"verify"});
  EXPECT_EQ(c.code, 0) << c.out << c.err;
  EXPECT_EQ(count_lines(c.err), 1) << c.err;
  EXPECT_NE(c.out.find("backend cpu"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("PASS"), std::string::npos) << c.out;
}

TEST(FallbackCli, CudaWithLaunchFaultExits1) {
  ATTNLAB_REQUIRE_CUDA_BUILD();
  const test::BinaryRun c = run_cli("launch", {"verify", "--backend", "cuda"});
  EXPECT_EQ(c.code, 1) << c.out << c.err;
  EXPECT_EQ(c.err.rfind("error: ", 0), 0u) << c.err;
  EXPECT_NE(c.err.find("forced launch failure"), std::string::npos) << c.err;
  EXPECT_EQ(count_lines(c.err), 1) << c.err;
}

TEST(FallbackCli, CudaWithoutDeviceExits2) {
  ATTNLAB_REQUIRE_CUDA_BUILD();
  const test::BinaryRun c = run_cli("nodevice", {"verify", "--backend", "cuda"});
  EXPECT_EQ(c.code, 2) << c.out << c.err;
  EXPECT_EQ(c.err.rfind("error: no CUDA device: ", 0), 0u) << c.err;
}

TEST(FallbackCli, CudaOutOfMemoryIsRefusedWithEstimate) {
  ATTNLAB_REQUIRE_CUDA_BUILD();
  const test::BinaryRun c = run_cli(
      "oom", {"verify", "--backend", "cuda", "--random", "300", "--dk", "16", "--dv", "16"});
  EXPECT_EQ(c.code, 2) << c.out << c.err;
  EXPECT_EQ(c.err.rfind("error: problem needs ", 0), 0u) << c.err;
  EXPECT_NE(c.err.find("MiB of GPU memory"), std::string::npos) << c.err;
  EXPECT_NE(c.err.find("MiB free"), std::string::npos) << c.err;
}
#endif  // ATTNLAB_BINARY

}  // namespace
}  // namespace attnlab
