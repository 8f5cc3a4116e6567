// The CUDA fallback and refusal paths, exercised without a GPU by forcing the CUDA path to fail
// through ATTNLAB_CUDA_FAULT (kernels/cuda_backend.cu): "launch" makes run() throw DeviceError,
// "nodevice" hides every device, "oom" makes the memory estimate see 1 MiB free.
//   auto + launch   -> the CPU runs (at the requested precision, bf16 included), exactly one
//                      "falling back to the CPU" line on stderr, exit 0
//   cuda + launch   -> exit 1, "error: ... forced launch failure ..."
//   cuda + nodevice -> exit 2, "error: no CUDA device: ..."
//   cuda + oom      -> exit 2, the estimate and the limit in the message
// Only meaningful when the CUDA backend is compiled in; otherwise every test SKIPs.
#include "core/backend.h"
#include "cpu/cpu_backend.h"
#include "tests/test_util.h"
#include "engine/registry.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <memory>
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

using test::ScopedEnv;

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

// The CPU re-run after a CUDA failure keeps the requested precision: bf16 runs on the CPU too.
TEST(Fallback, AutoFallbackKeepsBf16) {
  ATTNLAB_REQUIRE_CUDA_BUILD();
  ScopedEnv fault("ATTNLAB_CUDA_FAULT", "launch");
  const Problem p = random_problem(8, 64, 64, 1);
  ::testing::internal::CaptureStderr();
  const Trace t = run_backend("auto", p, {Variant::Fused, Precision::BF16, false});
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(t.backend, "cpu");
  EXPECT_EQ(t.precision, Precision::BF16);
  EXPECT_EQ(t.output.rows(), 8);
  EXPECT_EQ(count_lines(err), 1) << err;
  EXPECT_NE(err.find("falling back to the CPU"), std::string::npos) << err;
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
  const std::string e = test::message_of<NoDeviceError>([] { make_backend("cuda"); });
  EXPECT_EQ(e.rfind("no CUDA device: ", 0), 0u) << e;
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
  const std::string msg =
      test::message_of<ResourceError>([&] { make_backend("cuda")->run(p, {}); });
  EXPECT_NE(msg.find("problem needs 1.8 MiB of GPU memory"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1.0 MiB free"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--variant fused"), std::string::npos) << msg;
}

// The staged mask buffer exists only where a run reads it (a custom mask) or shows it (a run that
// keeps its stages): None and Causal are computed from (row, col). The estimate says so.
TEST(Fallback, StagedEstimateCountsTheMaskOnlyWhereARunNeedsIt) {
  ATTNLAB_REQUIRE_CUDA_BUILD();
  ScopedEnv fault("ATTNLAB_CUDA_FAULT", "oom");
  Problem p = random_problem(300, 16, 16, 1);
  const auto refusal = [&](bool keep_stages, bool bench) {
    RunOptions opt;
    opt.keep_stages = keep_stages;
    return test::message_of<ResourceError>([&] {
      const std::unique_ptr<Backend> cuda = make_backend("cuda");
      if (bench)
        cuda->bench(p, opt, 0, 1);
      else
        cuda->run(p, opt);
    });
  };
  // Inputs and output 4 * 300 * 16 floats, four stages of 300^2 floats: 1,516,800 bytes; the
  // mask adds 300^2 floats: 1,876,800 bytes.
  for (const MaskKind kind : {MaskKind::None, MaskKind::Causal}) {
    p.mask = kind;
    SCOPED_TRACE(std::string(to_string(kind)));
    std::string msg = refusal(/*keep_stages=*/true, /*bench=*/false);
    EXPECT_NE(msg.find("problem needs 1.8 MiB of GPU memory"), std::string::npos) << msg;
    EXPECT_NE(msg.find("the inputs and the mask"), std::string::npos) << msg;
    for (const bool bench : {false, true}) {
      msg = refusal(/*keep_stages=*/false, bench);
      EXPECT_NE(msg.find("problem needs 1.4 MiB of GPU memory"), std::string::npos) << msg;
      EXPECT_EQ(msg.find("mask"), std::string::npos) << msg;
    }
  }
  p.mask = MaskKind::Custom;
  p.edit().custom_mask = MatrixF::Zero(300, 300);
  const std::string msg = refusal(/*keep_stages=*/false, /*bench=*/true);
  EXPECT_NE(msg.find("problem needs 1.8 MiB of GPU memory"), std::string::npos) << msg;
  EXPECT_NE(msg.find("the inputs and the mask"), std::string::npos) << msg;
}

// What a kernel launcher would refuse (its head dims, a configuration switch out of range for the
// precision) is refused before anything is estimated or uploaded. Under the oom fault the memory
// estimate refuses every problem of these sizes, so such a message proves the order.
TEST(Fallback, KernelOptionsAreCheckedBeforeTheMemoryEstimate) {
  ATTNLAB_REQUIRE_CUDA_BUILD();
  ScopedEnv fault("ATTNLAB_CUDA_FAULT", "oom");
  const auto message = [](const Problem& p, Variant variant, Precision precision) {
    return test::message_of<InputError>(
        [&] { make_backend("cuda")->run(p, {variant, precision, false}); });
  };
  const Problem d32 = random_problem(2000, 32, 32, 1), d64 = random_problem(2000, 64, 64, 1);
  const Problem d300 = random_problem(2000, 300, 8, 1);
  EXPECT_EQ(message(d32, Variant::Fused, Precision::BF16),
            "bf16 fused attention supports d_k == d_v in {64, 128}, got 32");
  EXPECT_EQ(message(d300, Variant::Fused, Precision::FP32),
            "fused fp32 supports head dims up to 256, got d_k 300, d_v 8");
  {
    ScopedEnv config("ATTNLAB_FUSED_CONFIG", "3");  // bf16 on wgmma; fp32 has three
    EXPECT_EQ(message(d64, Variant::Fused, Precision::FP32), "ATTNLAB_FUSED_CONFIG=3: unknown configuration; valid: 0..2");
    const std::string why = message(d64, Variant::Fused, Precision::BF16);
    EXPECT_EQ(why.rfind("problem needs ", 0), 0u) << "bf16 config 3 is valid: " << why;
    EXPECT_EQ(message(d64, Variant::Staged, Precision::FP32).rfind("problem needs ", 0), 0u)
        << "the fused switch does not concern the staged chain";
  }
  {
    ScopedEnv config("ATTNLAB_FUSED_CONFIG", "5");
    EXPECT_EQ(message(d64, Variant::Fused, Precision::BF16), "ATTNLAB_FUSED_CONFIG=5: unknown configuration; valid: 0..4");
  }
  {
    ScopedEnv config("ATTNLAB_FUSED_CONFIG", "2");  // fp32: 3xTF32, 8 warps; bf16: two row tiles
    for (Precision precision : {Precision::FP32, Precision::BF16}) {
      const std::string why = message(d64, Variant::Fused, precision);
      EXPECT_EQ(why.rfind("problem needs ", 0), 0u) << "config 2 is valid: " << why;
    }
  }
  {
    ScopedEnv config("ATTNLAB_STAGED_CONFIG", "2");
    EXPECT_EQ(message(d64, Variant::Staged, Precision::FP32),
              "ATTNLAB_STAGED_CONFIG=2: unknown configuration; valid: 0..1");
    EXPECT_EQ(message(d64, Variant::Fused, Precision::FP32).rfind("problem needs ", 0), 0u)
        << "the staged switch does not concern the fused kernels";
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
  // The line follows --lang; the device's own words stay as it gave them.
  const test::BinaryRun zh = run_cli("launch", {"demo", "--backend", "auto", "--lang", "zh"});
  EXPECT_EQ(zh.code, 0) << zh.err;
  EXPECT_EQ(count_lines(zh.err), 1) << zh.err;
  EXPECT_NE(zh.err.find("改用 CPU 运行"), std::string::npos) << zh.err;
  EXPECT_NE(zh.err.find("ATTNLAB_CUDA_FAULT=launch"), std::string::npos) << zh.err;
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

// bf16 under auto without a device: the CPU runs it (the CUDA bf16 kernel's arithmetic), silently.
TEST(FallbackCli, Bf16UnderAutoWithoutDeviceRunsOnTheCpu) {
  ATTNLAB_REQUIRE_CUDA_BUILD();
  const test::BinaryRun c =
      run_cli("nodevice", {"run", "--random", "8", "--dk", "64", "--dv", "64", "--variant",
                           "fused", "--precision", "bf16", "--format", "json"});
  ASSERT_EQ(c.code, 0) << c.out << c.err;
  EXPECT_EQ(c.err, "");
  const nlohmann::json j = nlohmann::json::parse(c.out);
  EXPECT_EQ(j["backend"], "cpu");
  EXPECT_EQ(j["precision"], "bf16");
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
