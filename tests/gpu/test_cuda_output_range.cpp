// A CUDA run whose output comes out not finite (core/output_range.h, CudaBackend::run_into): a V
// near fp32's largest values, which overflows the online softmax's unnormalised sums, is computed
// on V · 2^-e and multiplied back, by the fused fp32 and bf16 kernels, the staged chain and the
// decode kernel, and by bench's output as by run's; scores that overflow are refused with their
// row, as the CPU refuses them; gradients of the fused backward that overflow are refused, as the
// CPU backward refuses them. Every test SKIPs ("no CUDA device: <reason>") without a device.
#include "core/backend.h"
#include "cpu/cpu_backend.h"
#include "engine/registry.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace attnlab {
namespace {

struct Case {
  const char* name;
  Variant variant;
  Precision precision;
  int n, m, heads, kv_heads;
  double tolerance;  // of max |out - fp64| / max |V|
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"fused fp32", Variant::Fused, Precision::FP32, 300, 300, 2, 2, 1e-5},
      {"fused bf16", Variant::Fused, Precision::BF16, 300, 300, 2, 2, 2e-2},
      {"staged fp32", Variant::Staged, Precision::FP32, 300, 300, 2, 2, 1e-5},
      {"decode fp32", Variant::Decode, Precision::FP32, 2, 3000, 8, 2, 1e-5},
      {"decode bf16", Variant::Decode, Precision::BF16, 2, 3000, 8, 2, 2e-2},
  };
  return all;
}

RunOptions options(const Case& c) {
  RunOptions o;
  o.variant = c.variant;
  o.precision = c.precision;
  o.keep_stages = false;
  return o;
}

// Positive values up to 3e38: the sums of many keys of comparable weight leave fp32.
Problem huge_values(const Case& c) {
  Problem p = random_problem(c.n, c.m, 64, 64, 23, c.heads, c.kv_heads);
  p.edit().v = p.v().cwiseAbs() * (3e38f / p.v().cwiseAbs().maxCoeff());
  return p;
}

double err_to_v(const MatrixF& out, const Problem& p) {
  return (out.cast<double>() - reference_fp64(p).output).cwiseAbs().maxCoeff() /
         static_cast<double>(p.v().cwiseAbs().maxCoeff());
}

TEST(CudaOutputRange, AHugeVIsComputedByEveryKernel) {
  ATTNLAB_REQUIRE_CUDA();
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const Problem p = huge_values(c);
    const Trace t = make_backend("cuda")->run(p, options(c));
    ASSERT_TRUE(t.output.allFinite());
    EXPECT_LE(err_to_v(t.output, p), c.tolerance);
    // The CPU computes the same problem the same way.
    const Trace cpu = make_backend("cpu")->run(p, options(c));
    EXPECT_LE((t.output - cpu.output).cwiseAbs().maxCoeff() / p.v().cwiseAbs().maxCoeff(), 2 * c.tolerance);
  }
}

TEST(CudaOutputRange, BenchChecksTheOutputThatRunComputes) {
  ATTNLAB_REQUIRE_CUDA();
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const Problem p = huge_values(c);
    const BenchSample b = make_backend("cuda")->bench(p, options(c), 1, 2);
    EXPECT_EQ(b.ms.size(), 2u);
    ASSERT_TRUE(b.output.allFinite());
    EXPECT_LE(err_to_v(b.output, p), c.tolerance);
  }
}

TEST(CudaOutputRange, ScoresThatOverflowAreRefusedWithTheirRow) {
  ATTNLAB_REQUIRE_CUDA();
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    Problem p = random_problem(c.n, c.m, 64, 64, 29, c.heads, c.kv_heads);
    // Head 1, query 1: q . k near 3e37 times the sum of |k| over 64 values, beyond fp32.
    p.edit().k = p.k().cwiseAbs();
    p.edit().q.row(c.n + 1).setConstant(3e37f);
    const std::string what = test::message_of<InputError>([&] { make_backend("cuda")->run(p, options(c)); });
    EXPECT_EQ(what, "QKᵀ overflows in head 1, query row 1 (inputs too large for " +
                        std::string(to_string(c.precision)) + ")");
  }
}

TEST(CudaOutputRange, GradientsThatOverflowAreRefusedNotReturned) {
  ATTNLAB_REQUIRE_CUDA();
  // V and dO positive, dO at 3e38: D = rowsum(dO ∘ O) sums 64 such products.
  Problem p = random_problem(100, 100, 64, 64, 31, 2, 2);
  p.edit().v = p.v().cwiseAbs();
  const MatrixF dout = MatrixF::Constant(2 * 100, 64, 3e38f);
  for (Precision precision : {Precision::FP32, Precision::BF16}) {
    SCOPED_TRACE(std::string(to_string(precision)));
    const std::string what = test::message_of<InputError>([&] { run_cuda_backward(p, dout, precision); });
    EXPECT_EQ(what, "the backward's gradients overflow fp32 (inputs or dO too large)");
  }
}

}  // namespace
}  // namespace attnlab
