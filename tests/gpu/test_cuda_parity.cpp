// Parity of the staged CUDA chain with the fp64 reference, in the spirit of ggml's
// test-backend-ops: one check (core/verify.h, the same code and tolerances as `attnlab verify`)
// over shapes n in {1, 5, 31, 32, 33, 1000, 4097} (tile edges: 32 is a warp, 128 a tile),
// d_k in {3, 16, 64, 128}, d_v in {2, 64}, masks none / causal / custom, T in {1e-3, 0.85, 50}.
// Every combination for n <= 1000; n = 4097 (several tiles plus one row/column) for four
// combinations only, to keep the fp64 reference's CPU time and the whole file well under a minute.
// Plus multi-head problems, keep_stages = false, bench(), and the refusal of a problem too large.
// Every test SKIPs ("no CUDA device: <reason>") without a device.
#include "core/backend.h"
#include "core/verify.h"
#include "cpu/cpu_backend.h"
#include "tests/test_util.h"

#include "engine/registry.h"
#ifdef ATTNLAB_HAVE_CUDA
#include "kernels/cuda_backend.h"
#endif

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace attnlab {
namespace {

// (n, m) mask with about a fifth of the pairs blocked, never a whole row (the diagonal-ish key
// i % m stays open).
MatrixF custom_mask(int n, int m) {
  MatrixF mask = MatrixF::Zero(n, m);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < m; ++j)
      if ((i * 7 + j * 13) % 5 == 0 && j != i % m) mask(i, j) = -std::numeric_limits<float>::infinity();
  return mask;
}

Problem make_problem(int n, int d_k, int d_v, MaskKind mask, double t, int heads = 1) {
  // A different seed per shape, so that no two shapes share inputs.
  const std::uint64_t seed = 1000003ull * n + 1009ull * d_k + 17ull * d_v + heads;
  return test::make_problem(n, d_k, d_v, heads, mask, t, seed,
                           [](int rows) { return custom_mask(rows, rows); });
}

void expect_parity(const Problem& p, const RunOptions& opt = {}) {
  std::unique_ptr<Backend> cuda = make_backend("cuda");
  const Trace t = cuda->run(p, opt);
  ASSERT_EQ(t.backend, "cuda");
  const VerifyReport r = verify_trace(p, t, reference_fp64(p));
  EXPECT_TRUE(r.pass) << render_verify_text(r);
  if (opt.keep_stages) {
    EXPECT_TRUE(t.has_stages);
    EXPECT_EQ(r.stages.size(), 6u);
    EXPECT_TRUE(r.masked_zero);
  }
}

std::string mask_name(MaskKind m) { return std::string(to_string(m)); }

using Shape = std::tuple<int, int, int, MaskKind, double>;  // n, d_k, d_v, mask, T

std::string shape_name(const ::testing::TestParamInfo<Shape>& info) {
  const auto [n, d_k, d_v, mask, t] = info.param;
  char buf[96];
  std::snprintf(buf, sizeof buf, "n%d_dk%d_dv%d_%s_T%s", n, d_k, d_v, mask_name(mask).c_str(),
                t == 1e-3 ? "0001" : t == 0.85 ? "085" : "50");
  return buf;
}

class CudaParity : public ::testing::TestWithParam<Shape> {};

TEST_P(CudaParity, StagedMatchesFp64Reference) {
  ATTNLAB_REQUIRE_CUDA();
  const auto [n, d_k, d_v, mask, t] = GetParam();
  expect_parity(make_problem(n, d_k, d_v, mask, t));
}

INSTANTIATE_TEST_SUITE_P(
    Small, CudaParity,
    ::testing::Combine(::testing::Values(1, 5, 31, 32, 33, 1000), ::testing::Values(3, 16, 64, 128),
                       ::testing::Values(2, 64),
                       ::testing::Values(MaskKind::None, MaskKind::Causal, MaskKind::Custom),
                       ::testing::Values(1e-3, 0.85, 50.0)),
    shape_name);

INSTANTIATE_TEST_SUITE_P(
    Large, CudaParity,
    ::testing::Values(Shape{4097, 64, 64, MaskKind::None, 0.85},
                      Shape{4097, 128, 64, MaskKind::Causal, 1e-3},
                      Shape{4097, 16, 2, MaskKind::Custom, 50.0},
                      Shape{4097, 3, 64, MaskKind::Causal, 0.85}),
    shape_name);

TEST(CudaParityHeads, StackedHeadsShareMaskAndTemperature) {
  ATTNLAB_REQUIRE_CUDA();
  for (MaskKind mask : {MaskKind::None, MaskKind::Causal, MaskKind::Custom}) {
    SCOPED_TRACE(mask_name(mask));
    expect_parity(make_problem(33, 64, 64, mask, 0.85, 3));
  }
  expect_parity(make_problem(129, 128, 128, MaskKind::Causal, 0.5, 32));
}

TEST(CudaParityHeads, WideValues) {
  ATTNLAB_REQUIRE_CUDA();
  // d_v > 64 takes the 128-wide P.V tile; d = 256 spans 16 shared-memory slices of d_k.
  expect_parity(make_problem(200, 256, 256, MaskKind::None, 1.0));
  expect_parity(make_problem(130, 100, 130, MaskKind::Causal, 2.0, 2));
}

TEST(CudaRun, WithoutStagesBringsBackOnlyTheOutput) {
  ATTNLAB_REQUIRE_CUDA();
  const Problem p = make_problem(300, 64, 64, MaskKind::Causal, 0.85);
  RunOptions opt;
  opt.keep_stages = false;
  const Trace t = make_backend("cuda")->run(p, opt);
  EXPECT_FALSE(t.has_stages);
  EXPECT_EQ(t.scores.size(), 0);
  EXPECT_EQ(t.output.rows(), 300);
  const VerifyReport r = verify_trace(p, t, reference_fp64(p));
  EXPECT_TRUE(r.pass) << render_verify_text(r);
}

TEST(CudaRun, TimingsAreRecorded) {
  ATTNLAB_REQUIRE_CUDA();
  const Trace t = make_backend("cuda")->run(make_problem(1000, 64, 64, MaskKind::None, 1.0), {});
  EXPECT_GT(t.timings.upload_ms, 0);
  EXPECT_GT(t.timings.qk_ms, 0);
  EXPECT_GT(t.timings.scale_mask_ms, 0);
  EXPECT_GT(t.timings.softmax_ms, 0);
  EXPECT_GT(t.timings.pv_ms, 0);
  EXPECT_GT(t.timings.download_ms, 0);
  EXPECT_GE(t.timings.total_ms, t.timings.qk_ms + t.timings.pv_ms);
}

TEST(CudaRun, RepeatedRunsAreBitIdentical) {
  ATTNLAB_REQUIRE_CUDA();
  // A moving result on the same inputs would mean a race.
  const Problem p = make_problem(1000, 64, 64, MaskKind::Custom, 0.85);
  std::unique_ptr<Backend> cuda = make_backend("cuda");
  const Trace a = cuda->run(p, {}), b = cuda->run(p, {});
  EXPECT_EQ(a.weights, b.weights);
  EXPECT_EQ(a.output, b.output);
}

// One backend keeps its device buffers between runs of one plan (run_into): a sequence of
// problems, shapes, stage sets and variants on the same backend gives what fresh backends give.
TEST(CudaRun, ResidentBuffersServeEveryLaterRunAsFreshOnesWould) {
  ATTNLAB_REQUIRE_CUDA();
  std::unique_ptr<Backend> cuda = make_backend("cuda");
  Problem a = make_problem(1000, 64, 64, MaskKind::Causal, 0.85);
  const Problem b = make_problem(300, 16, 2, MaskKind::Custom, 1.3);
  RunOptions partial;
  partial.stages = kStageScores | kStageWeights;
  RunOptions fused;
  fused.variant = Variant::Fused;
  fused.keep_stages = false;
  Trace t;
  const auto fresh = [](const Problem& p, const RunOptions& o) { return make_backend("cuda")->run(p, o); };
  cuda->run_into(a, {}, t);
  EXPECT_EQ(t.weights, fresh(a, {}).weights);
  a.temperature = 0.4;  // the same plan: the buffers are reused, the constants are the new ones
  cuda->run_into(a, {}, t);
  const Trace a_full = fresh(a, {});
  EXPECT_EQ(t.logits, a_full.logits);
  EXPECT_EQ(t.output, a_full.output);
  cuda->run_into(b, {}, t);  // another plan
  const Trace b_full = fresh(b, {});
  EXPECT_EQ(t.weights, b_full.weights);
  EXPECT_EQ(t.mask, b_full.mask);
  cuda->run_into(a, partial, t);
  EXPECT_EQ(t.scores, a_full.scores);
  EXPECT_EQ(t.weights, a_full.weights);
  EXPECT_EQ(t.scaled.size() + t.mask.size() + t.logits.size(), 0);
  EXPECT_EQ(t.output, a_full.output);
  cuda->run_into(a, fused, t);
  EXPECT_FALSE(t.has_stages);
  EXPECT_EQ(t.weights.size(), 0);
  EXPECT_EQ(t.output, fresh(a, fused).output);
  cuda->run_into(a, {}, t);
  EXPECT_EQ(t.weights, a_full.weights);
  const VerifyReport r = verify_trace(a, t, reference_fp64(a));
  EXPECT_TRUE(r.pass) << render_verify_text(r);
}

// Downloads through the reused page-locked slots (the default, in pieces when a stage is larger
// than a slot) and pageable ones (ATTNLAB_CUDA_DOWNLOAD=pageable) bring back the same bits; exact
// rows of a kept-stage run come from the device and equal the matrices' rows.
TEST(CudaRun, PinnedAndPageableDownloadsAndExactRowsAgree) {
  ATTNLAB_REQUIRE_CUDA();
  const Problem p = make_problem(3000, 32, 32, MaskKind::Causal, 0.85);  // 36 MB per stage
  RunOptions opt;
  opt.rows = {0, 1777, 2999};
  std::unique_ptr<Backend> cuda = make_backend("cuda");
  const Trace pinned = cuda->run(p, opt);
  setenv("ATTNLAB_CUDA_DOWNLOAD", "pageable", 1);
  const Trace pageable = cuda->run(p, opt);
  unsetenv("ATTNLAB_CUDA_DOWNLOAD");
  for (const auto& [x, y] : {std::pair{&pinned.scores, &pageable.scores}, {&pinned.scaled, &pageable.scaled},
                             {&pinned.mask, &pageable.mask}, {&pinned.logits, &pageable.logits},
                             {&pinned.weights, &pageable.weights}, {&pinned.output, &pageable.output}}) {
    ASSERT_EQ(x->size(), y->size());
    EXPECT_EQ(*x, *y);
  }
  ASSERT_EQ(pinned.rows.size(), 3u);
  for (const RowStages& rs : pinned.rows) {
    const auto row = [&](const MatrixF& m, int r) {
      return std::vector<float>(m.data() + static_cast<std::size_t>(r) * m.cols(),
                                m.data() + static_cast<std::size_t>(r + 1) * m.cols());
    };
    EXPECT_EQ(rs.scores, row(pinned.scores, rs.row));
    EXPECT_EQ(rs.logits, row(pinned.logits, rs.row));
    EXPECT_EQ(rs.weights, row(pinned.weights, rs.row));
    EXPECT_EQ(rs.mask, row(pinned.mask, rs.row));
  }
  const VerifyReport r = verify_trace(p, pinned, reference_fp64(p));
  EXPECT_TRUE(r.pass) << render_verify_text(r);
}

TEST(CudaBench, RepeatsAndReturnsTheOutput) {
  ATTNLAB_REQUIRE_CUDA();
  const Problem p = make_problem(1024, 64, 64, MaskKind::Causal, 1.0);
  const BenchSample s = make_backend("cuda")->bench(p, {}, 2, 5);
  ASSERT_EQ(s.ms.size(), 5u);
  for (double ms : s.ms) EXPECT_GT(ms, 0);
  EXPECT_GE(s.peak_bytes, 4u * 1024 * 1024 * sizeof(float));
  // Staged: each repetition's four stage times, from events inside the timed span.
  ASSERT_EQ(s.stages.size(), s.ms.size());
  for (std::size_t i = 0; i < s.ms.size(); ++i) {
    const StageTimings& st = s.stages[i];
    EXPECT_GT(st.qk_ms, 0);
    EXPECT_GT(st.scale_mask_ms, 0);
    EXPECT_GT(st.softmax_ms, 0);
    EXPECT_GT(st.pv_ms, 0);
    EXPECT_LE(st.qk_ms + st.scale_mask_ms + st.softmax_ms + st.pv_ms, s.ms[i] + 1e-3);
  }
  RunOptions fused;
  fused.variant = Variant::Fused;
  const BenchSample f = make_backend("cuda")->bench(p, fused, 1, 3);
  EXPECT_EQ(f.ms.size(), 3u);
  EXPECT_TRUE(f.stages.empty()) << "a fused run has no stages";
  Trace t;
  t.has_stages = false;
  t.backend = "cuda";
  t.output = s.output;
  const VerifyReport r = verify_trace(p, t, reference_fp64(p));
  EXPECT_TRUE(r.pass) << render_verify_text(r);
}

TEST(CudaRun, Bf16NeedsTheFusedVariant) {
  ATTNLAB_REQUIRE_CUDA();
  RunOptions opt;
  opt.precision = Precision::BF16;
  EXPECT_THROW(make_backend("cuda")->run(demo_problem(), opt), InputError);
}

TEST(CudaRun, TooLargeForTheDeviceIsRefusedWithTheEstimate) {
  ATTNLAB_REQUIRE_CUDA();
  // 4 stages of 200000^2 fp32 = 596 GiB: more than any device has; the inputs are tiny.
  const Problem p = make_problem(200000, 1, 1, MaskKind::None, 1.0);
  const std::string msg =
      test::message_of<ResourceError>([&] { make_backend("cuda")->run(p, {}); });
  EXPECT_NE(msg.find("GiB of GPU memory"), std::string::npos) << msg;
  EXPECT_NE(msg.find("free"), std::string::npos) << msg;
}

#ifdef ATTNLAB_HAVE_CUDA
TEST(CudaDevice, DescriptionAndCopyBandwidth) {
  ATTNLAB_REQUIRE_CUDA();
  const std::string d = cuda::device_description();
  EXPECT_NE(d.find("SMs"), std::string::npos) << d;
  const double gbs = cuda::copy_bandwidth_gbs(std::size_t{256} << 20, 5);
  EXPECT_GT(gbs, 50.0);
  std::printf("device: %s; D2D copy %.0f GB/s\n", d.c_str(), gbs);
}
#endif

// Decode shapes on CUDA: a grouped cache (kv_group > 1) is read as one copy per query head by the
// staged and fused kernels and matches fp64, with no mask and with the causal mask of the last n
// queries (which the prefill kernels run through MaskRule, kernels/rules.h).
TEST(CudaDecodeShapes, GroupedHeadsAndCausalDecodeMatchFp64) {
  ATTNLAB_REQUIRE_CUDA();
  Problem p = random_problem(5, 700, 64, 64, 3, 8, 2);
  auto cuda = make_backend("cuda");
  for (MaskKind mask : {MaskKind::None, MaskKind::Causal}) {
    p.mask = mask;
    const TraceD ref = reference_fp64(p);
    for (Variant v : {Variant::Staged, Variant::Fused}) {
      RunOptions o;
      o.variant = v;
      o.keep_stages = false;
      const Trace t = cuda->run(p, o);
      const double err =
          (t.output.cast<double>() - ref.output).cwiseAbs().maxCoeff() / ref.output.cwiseAbs().maxCoeff();
      EXPECT_LE(err, test::fp32_tolerance(p)) << to_string(v) << " " << to_string(mask);
    }
  }
}

// The CUDA split-KV decode kernel against fp64 and against the CPU decode kernel: one head and
// grouped heads, a few queries, none and causal, d 64 and 128, split counts from 1 to one per 7
// keys, caches shorter than one tile and longer than a split. The 70000-key caches on the shapes
// with one or two key/value heads: at 8 the host's references took over a minute on the H200's
// machine, beside the other tests.
TEST(CudaDecode, MatchesFp64AndTheCpuDecodeKernel) {
  ATTNLAB_REQUIRE_CUDA();
  auto cuda = make_backend("cuda");
  std::uint64_t seed = 1;
  for (auto [heads, kv, n] : {std::tuple{1, 1, 1}, {8, 1, 1}, {32, 8, 2}, {4, 4, 16}, {8, 2, 4}, {3, 1, 1}, {6, 2, 2}})
    for (int m : {5, 33, 1000, 70000})
      for (int d : {64, 128})
        for (MaskKind mask : {MaskKind::None, MaskKind::Causal}) {
          if (n > m || (m == 70000 && kv > 2)) continue;
          Problem p = random_problem(n, m, d, d, seed++, heads, kv);
          p.mask = mask;
          const TraceD ref = reference_fp64(p);  // one reference for every split count
          // 4 of 5 keys: exactly 4 splits (equal whole-key lengths would give 3).
          for (int splits : {0, 1, 4, 7}) {
            SCOPED_TRACE("heads " + std::to_string(heads) + "/" + std::to_string(kv) + " n " + std::to_string(n) +
                         " m " + std::to_string(m) + " d " + std::to_string(d) + " " +
                         std::string(to_string(mask)) + " splits " + std::to_string(splits));
            RunOptions o;
            o.variant = Variant::Decode;
            o.splits = splits;
            const Trace t = cuda->run(p, o);
            ASSERT_EQ(t.variant, Variant::Decode);
            EXPECT_GE(t.splits, 1);
            if (splits > 0) EXPECT_EQ(t.splits, std::min(splits, m));
            const double err = (t.output.cast<double>() - ref.output).cwiseAbs().maxCoeff() /
                               ref.output.cwiseAbs().maxCoeff();
            EXPECT_LE(err, test::fp32_tolerance(p));
            const double vs_cpu = (t.output - cpu_decode(p, splits).output).cwiseAbs().maxCoeff() /
                                  ref.output.cwiseAbs().maxCoeff();
            EXPECT_LE(vs_cpu, 2 * test::fp32_tolerance(p));
          }
        }
}

// More key/value heads than a grid's second dimension takes (65535): the split blocks are numbered
// along its first, so every head is computed, the last ones too.
TEST(CudaDecode, MoreKeyValueHeadsThanAGridsSecondDimension) {
  ATTNLAB_REQUIRE_CUDA();
  const int heads = 70000;
  const Problem p = random_problem(1, 8, 64, 64, 77, heads, heads);
  RunOptions o;
  o.variant = Variant::Decode;
  o.splits = 2;
  const Trace t = make_backend("cuda")->run(p, o);
  ASSERT_EQ(t.splits, 2);
  const TraceD ref = reference_fp64(p);
  const double err =
      (t.output.cast<double>() - ref.output).cwiseAbs().maxCoeff() / ref.output.cwiseAbs().maxCoeff();
  EXPECT_LE(err, test::fp32_tolerance(p));  // every row: a head past 65535 left unwritten fails here
}

// On a bf16 cache: the kernel in the lab's bf16 arithmetic (bf16 operands, weights rounded to bf16,
// fp32 sums) matches the CPU decode kernel's bf16 path up to the order of the sums, and fp64 within
// verify's bf16 bound; bench times it under its own name.
TEST(CudaDecode, ABf16CacheMatchesTheCpuBf16DecodeAndFp64) {
  ATTNLAB_REQUIRE_CUDA();
  auto cuda = make_backend("cuda");
  auto cpu = make_backend("cpu");
  std::uint64_t seed = 100;
  for (auto [heads, kv, n] : {std::tuple{1, 1, 1}, {8, 1, 1}, {32, 8, 2}})
    for (int m : {33, 5000})
      for (int d : {64, 128})
        for (MaskKind mask : {MaskKind::None, MaskKind::Causal}) {
          Problem p = random_problem(n, m, d, d, seed++, heads, kv);
          p.mask = mask;
          SCOPED_TRACE("heads " + std::to_string(heads) + "/" + std::to_string(kv) + " m " + std::to_string(m) +
                       " d " + std::to_string(d) + " " + std::string(to_string(mask)));
          RunOptions o;
          o.variant = Variant::Decode;
          o.precision = Precision::BF16;
          o.splits = 3;
          const Trace t = cuda->run(p, o);
          EXPECT_EQ(t.precision, Precision::BF16);
          const TraceD ref = reference_fp64(p);
          const double scale = ref.output.cwiseAbs().maxCoeff();
          EXPECT_LE((t.output.cast<double>() - ref.output).cwiseAbs().maxCoeff() / scale, 2e-2);
          EXPECT_GT((t.output.cast<double>() - ref.output).cwiseAbs().maxCoeff() / scale, 1e-5)
              << "bf16 operands, not the fp32 ones";
          const Trace c = cpu->run(p, o);
          EXPECT_LE((t.output - c.output).cwiseAbs().maxCoeff() / scale, 2e-3);
        }
  RunOptions o;
  o.variant = Variant::Decode;
  o.precision = Precision::BF16;
  const BenchSample b = cuda->bench(random_problem(1, 50000, 64, 64, 3, 8, 1), o, 1, 3);
  ASSERT_EQ(b.ms.size(), 3u);
  EXPECT_NE(b.kernel.find("split-KV decode bf16 D=64 rows=8"), std::string::npos) << b.kernel;
}

TEST(CudaDecode, RefusesWhatItDoesNotTakeAndIsTimedByBench) {
  ATTNLAB_REQUIRE_CUDA();
  auto cuda = make_backend("cuda");
  RunOptions o;
  o.variant = Variant::Decode;
  EXPECT_NE(test::message_of<InputError>([&] { cuda->run(random_problem(1, 100, 32, 32, 1, 1, 1), o); })
                .find("d_k = d_v = 64 or 128"),
            std::string::npos);
  EXPECT_NE(test::message_of<InputError>([&] { cuda->run(random_problem(17, 100, 64, 64, 1, 1, 1), o); })
                .find("at most 16 query rows"),
            std::string::npos);
  o.precision = Precision::FP64;
  EXPECT_NE(test::message_of<InputError>([&] { cuda->run(random_problem(1, 100, 64, 64, 1, 1, 1), o); })
                .find("computes in fp32 or bf16"),
            std::string::npos);
  o.precision = Precision::FP32;
  const Problem p = random_problem(1, 50000, 128, 128, 2, 8, 1);
  const BenchSample b = cuda->bench(p, o, 1, 3);
  ASSERT_EQ(b.ms.size(), 3u);
  EXPECT_NE(b.kernel.find("split-KV decode fp32 D=128 rows=8"), std::string::npos) << b.kernel;
  const TraceD ref = reference_fp64(p);
  EXPECT_LE((b.output.cast<double>() - ref.output).cwiseAbs().maxCoeff() / ref.output.cwiseAbs().maxCoeff(),
            test::fp32_tolerance(p));
  test::ScopedEnv bad("ATTNLAB_DECODE_CONFIG", "2");
  EXPECT_EQ(test::message_of<InputError>([&] { cuda->run(p, o); }),
            "ATTNLAB_DECODE_CONFIG=2: unknown configuration; valid: 0..1");
}

// Configuration 1 of the decode kernel (ATTNLAB_DECODE_CONFIG, the rows four at a time, padded
// with zero queries): every row count from 2 to 16 that the grouped-query shapes give, whole
// groups of four and not, fp32 and bf16 caches, none and causal, split counts down to one per 7
// keys, against fp64 and against configuration 0 (the same arithmetic up to the order of each
// score's lane sums); the kernel's name says which ran, and one row always runs configuration 0.
TEST(CudaDecode, RowsFourAtATimeMatchFp64AndConfigurationZero) {
  ATTNLAB_REQUIRE_CUDA();
  auto cuda = make_backend("cuda");
  std::uint64_t seed = 300;
  for (auto [heads, kv, n] : {std::tuple{2, 1, 1}, {3, 1, 1}, {5, 1, 1}, {8, 1, 1}, {8, 1, 2}, {13, 1, 1}, {16, 2, 2}})
    for (int m : {40, 3000})
      for (int d : {64, 128})
        for (Precision precision : {Precision::FP32, Precision::BF16})
          for (MaskKind mask : {MaskKind::None, MaskKind::Causal}) {
            Problem p = random_problem(n, m, d, d, seed++, heads, kv);
            p.mask = mask;
            const TraceD ref = reference_fp64(p);
            const double scale = ref.output.cwiseAbs().maxCoeff();
            for (int splits : {0, 7}) {
              SCOPED_TRACE("heads " + std::to_string(heads) + "/" + std::to_string(kv) + " n " + std::to_string(n) +
                           " m " + std::to_string(m) + " d " + std::to_string(d) + " " +
                           std::string(to_string(precision)) + " " + std::string(to_string(mask)) + " splits " +
                           std::to_string(splits));
              RunOptions o;
              o.variant = Variant::Decode;
              o.precision = precision;
              o.splits = splits;
              BenchSample by_row, by_four;  // bench: the output with the kernel's name
              {
                test::ScopedEnv env("ATTNLAB_DECODE_CONFIG", "0");
                by_row = cuda->bench(p, o, 0, 1);
                EXPECT_EQ(by_row.kernel.find("rows-by-four"), std::string::npos) << by_row.kernel;
              }
              {
                test::ScopedEnv env("ATTNLAB_DECODE_CONFIG", "1");
                by_four = cuda->bench(p, o, 0, 1);
                EXPECT_NE(by_four.kernel.find("rows-by-four"), std::string::npos) << by_four.kernel;
              }
              const double err = (by_four.output.cast<double>() - ref.output).cwiseAbs().maxCoeff() / scale;
              const double vs_row = (by_four.output - by_row.output).cwiseAbs().maxCoeff() / scale;
              if (precision == Precision::FP32) {
                EXPECT_LE(err, test::fp32_tolerance(p));
                EXPECT_LE(vs_row, 2 * test::fp32_tolerance(p));
              } else {
                EXPECT_LE(err, 2e-2);
                EXPECT_LE(vs_row, 2e-3);
              }
            }
          }
  test::ScopedEnv env("ATTNLAB_DECODE_CONFIG", "1");
  RunOptions o;
  o.variant = Variant::Decode;
  const BenchSample one = cuda->bench(random_problem(1, 500, 64, 64, 9, 1, 1), o, 0, 1);
  EXPECT_EQ(one.kernel.find("rows-by-four"), std::string::npos) << one.kernel;
}

}  // namespace
}  // namespace attnlab
