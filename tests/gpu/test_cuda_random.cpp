// Random problems (tests/random_problems.h: shapes, grouped heads, decode shapes, temperatures,
// scales, masks and every combination of the modifications) through every CUDA kernel against
// the fp64 reference at verify's tolerances, as tests/test_random_problems.cpp runs them through
// the CPU's: the staged chain and the fused kernel in fp32, the fused kernel in bf16, the split-KV
// decode kernel in fp32 and bf16. The staged chain and the fused fp32 kernel must take every
// problem validate accepts; the others may refuse a shape they do not take (the decode kernel
// takes decode shapes of at most 16 query rows per key/value head) with an InputError, which is
// counted and named, never a failure; anything else a kernel throws fails. Fixed seeds (the CPU
// test's first ones), so every run checks the same problems.
// Every test SKIPs ("no CUDA device: <reason>") without a device.
#include "core/backend.h"
#include "core/messages.h"
#include "core/verify.h"
#include "cpu/cpu_backend.h"
#include "engine/registry.h"
#include "tests/random_problems.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>

namespace attnlab {
namespace {

struct KernelRun {
  const char* name;
  Variant variant;
  Precision precision;
  bool takes_every_problem;
};
constexpr KernelRun kRuns[] = {{"staged fp32", Variant::Staged, Precision::FP32, true},
                               {"fused fp32", Variant::Fused, Precision::FP32, true},
                               {"fused bf16", Variant::Fused, Precision::BF16, false},
                               {"decode fp32", Variant::Decode, Precision::FP32, false},
                               {"decode bf16", Variant::Decode, Precision::BF16, false}};

void run_seeds(std::uint64_t first, int count) {
  auto cuda = make_backend("cuda");
  int valid = 0;
  std::map<std::string, int> refused;  // kernel: refusal text -> count
  for (std::uint64_t s = first; s < first + count; ++s) {
    const test::Draw d = test::draw_problem(s);
    SCOPED_TRACE(d.what);
    try {
      validate(d.p);
    } catch (const InputError&) {
      continue;
    }
    ++valid;
    const TraceD ref = reference_fp64(d.p);
    for (const KernelRun& k : kRuns) {
      RunOptions o;
      o.variant = k.variant;
      o.precision = k.precision;
      try {
        const Trace t = cuda->run(d.p, o);
        const VerifyReport r = verify_trace(d.p, t, ref);
        EXPECT_TRUE(r.pass) << d.what << "\n" << k.name << "\n" << render_verify_text(r);
      } catch (const InputError& e) {
        EXPECT_FALSE(k.takes_every_problem) << d.what << "\n" << k.name << " refused: " << e.what();
        ++refused[std::string(k.name) + ": " + e.what()];
      } catch (const std::exception& e) {
        ADD_FAILURE() << d.what << "\n" << k.name << " threw: " << e.what();
      }
    }
  }
  EXPECT_GE(valid, count * 2 / 3) << "of " << count << " draws from seed " << first;
  for (const auto& [what, times] : refused) std::printf("refused %d times: %s\n", times, what.c_str());
}

TEST(CudaRandomProblems, EveryCudaKernelOnDrawsFrom1000) {
  ATTNLAB_REQUIRE_CUDA();
  run_seeds(1000, 30);
}
TEST(CudaRandomProblems, EveryCudaKernelOnDrawsFrom2000) {
  ATTNLAB_REQUIRE_CUDA();
  run_seeds(2000, 30);
}

}  // namespace
}  // namespace attnlab
