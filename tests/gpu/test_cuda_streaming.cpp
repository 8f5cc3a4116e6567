// The CUDA backend's streaming runs (RunOptions::pool / rows on the staged variant; kernels/
// stream_pool.cu) against the CPU chain's streaming runs (cpu_staged_into with the same request):
//   - pooled grids of scores, logits and weights for max and mean, masks none / causal / custom,
//     pooled, magnified and zoomed windows, two heads with the view on head 1; and a full view of
//     4096 tokens whose pixels are wider than a chunk of columns; each under both pooling designs
//     (kernels/stream_onepass.h: two passes, and one where the view covers every key once)
//   - exact rows (all four stages and the mask), with and without the output; the output of a
//     streamed run against the CPU's
//   - the CPU's refusals: bad rows, pool axes and head (same messages), requests on the fused
//     variant, logits that overflow fp32; a run that does not fit (ATTNLAB_CUDA_FAULT=oom)
//   - cancel before and during a run throws Cancelled; progress reaches 1 otherwise
//   - 262144 tokens, d 64, a small window: the plan is the inputs plus a few MiB, the device's
//     free memory (polled through cudaMemGetInfo during the run) never drops by more than the plan
//     and a slack for other processes, and the results equal the CPU's
// Every test SKIPs ("no CUDA device: <reason>") without a device.
#include "core/backend.h"
#include "cpu/cpu_backend.h"
#include "tests/test_util.h"

#include "engine/registry.h"
#ifdef ATTNLAB_HAVE_CUDA
#include "kernels/cuda_backend.h"

#include <cuda_runtime.h>
#endif

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <thread>
#include <vector>

namespace attnlab {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

Trace cpu_run(const Problem& p, const RunOptions& o) {
  Trace t;
  cpu_staged_into(p, o, t);
  return t;
}

// Cells masked alike; values within tol * (1 + |cpu|); the same range.
void expect_grid_near(const PooledGrid& g, const PooledGrid& c, double tol, const char* what) {
  ASSERT_EQ(g.rows, c.rows) << what;
  ASSERT_EQ(g.cols, c.cols) << what;
  ASSERT_EQ(g.cells.size(), c.cells.size()) << what;
  int failures = 0;
  for (std::size_t i = 0; i < c.cells.size() && failures < 5; ++i) {
    const PooledCell& a = g.cells[i];
    const PooledCell& b = c.cells[i];
    if (a.masked != b.masked) {
      ADD_FAILURE() << what << ": cell " << i << " masked " << a.masked << " on CUDA, " << b.masked
                    << " on the CPU";
      ++failures;
    } else if (!b.masked && std::abs(a.value - b.value) > tol * (1 + std::abs(b.value))) {
      ADD_FAILURE() << what << ": cell " << i << " (row " << i / c.cols << ", col " << i % c.cols
                    << ") is " << a.value << " on CUDA, " << b.value << " on the CPU";
      ++failures;
    }
  }
  EXPECT_EQ(g.has_range, c.has_range) << what;
  EXPECT_NEAR(g.lo, c.lo, tol * (1 + std::abs(c.lo))) << what;
  EXPECT_NEAR(g.hi, c.hi, tol * (1 + std::abs(c.hi))) << what;
}

// Scores and logits: fp32 dot products in another order (GEMM on the CPU, a sequential chain on
// the device). Weights: test::fp32_tolerance, the bound the parity tests use.
void expect_pooled_near(const Problem& p, const PooledStages& g, const PooledStages& c) {
  ASSERT_FALSE(g.empty());
  expect_grid_near(g.scores, c.scores, 1e-5, "scores");
  expect_grid_near(g.logits, c.logits, 1e-5, "logits");
  expect_grid_near(g.weights, c.weights, test::fp32_tolerance(p), "weights");
}

void expect_rows_near(const Problem& p, const std::vector<RowStages>& g, const std::vector<RowStages>& c) {
  ASSERT_EQ(g.size(), c.size());
  const double tol = test::fp32_tolerance(p);
  for (std::size_t k = 0; k < c.size(); ++k) {
    ASSERT_EQ(g[k].row, c[k].row);
    const std::size_t m = c[k].scores.size();
    ASSERT_EQ(m, static_cast<std::size_t>(p.m()));
    ASSERT_EQ(g[k].scores.size(), m);
    ASSERT_EQ(g[k].scaled.size(), m);
    ASSERT_EQ(g[k].logits.size(), m);
    ASSERT_EQ(g[k].weights.size(), m);
    ASSERT_EQ(g[k].mask, c[k].mask) << "row " << c[k].row;
    int failures = 0;
    for (std::size_t j = 0; j < m && failures < 5; ++j) {
      const auto near = [&](float a, float b, double t) { return std::abs(a - b) <= t * (1 + std::abs(b)); };
      bool ok = near(g[k].scores[j], c[k].scores[j], 1e-5) && near(g[k].scaled[j], c[k].scaled[j], 1e-5);
      if (std::isinf(c[k].logits[j]))
        ok = ok && g[k].logits[j] == kNegInf && g[k].weights[j] == 0.f;
      else
        ok = ok && near(g[k].logits[j], c[k].logits[j], 1e-5) && near(g[k].weights[j], c[k].weights[j], tol);
      if (!ok) {
        ADD_FAILURE() << "row " << c[k].row << ", key " << j << ": CUDA (" << g[k].scores[j] << ", "
                      << g[k].scaled[j] << ", " << g[k].logits[j] << ", " << g[k].weights[j] << "), CPU ("
                      << c[k].scores[j] << ", " << c[k].scaled[j] << ", " << c[k].logits[j] << ", "
                      << c[k].weights[j] << ")";
        ++failures;
      }
    }
  }
}

RunOptions streamed(const PoolRequest* view, bool output = false) {
  RunOptions o;
  o.keep_stages = false;
  o.output = output;
  o.pool = view;
  return o;
}

// A streamed run of `view` that `cancel` stops and that reports to `progress`.
RunOptions watched(const PoolRequest* view, const std::atomic<bool>& cancel, std::atomic<float>& progress) {
  RunOptions o = streamed(view);
  o.cancel = &cancel;
  o.progress = &progress;
  return o;
}

// The whole n x n matrix on px x px pixels.
PoolRequest whole_view(int n, int px) {
  PoolRequest r;
  r.rows = test::pool_axis(0, n, px);
  r.cols = test::pool_axis(0, n, px);
  return r;
}

struct Window {
  const char* name;
  int r0, r1, c0, c1, rows_px, cols_px;
};

// n = 300: the whole matrix pooled (about 8 x 2 cells a pixel, more than 64 pixel columns: two
// chunks), a magnified corner (40 x 30 cells on 96 x 80 pixels: pixels share cells, so that
// pixel rows repeat), a zoomed window off the diagonal (the causal mask cuts through it).
const Window kWindows[] = {
    {"pooled", 0, 300, 0, 300, 37, 150},
    {"magnified", 0, 40, 10, 40, 96, 80},
    {"zoomed", 120, 200, 90, 230, 50, 70},
};

// Under both pooling designs (kernels/stream_onepass.h): the default (two passes on these narrow
// pixels) and one pass forced (ATTNLAB_STREAM_PASSES=1; only the whole view can take it).
TEST(CudaStreaming, PooledGridsEqualTheCpu) {
  ATTNLAB_REQUIRE_CUDA();
  auto cuda = make_backend("cuda");
  for (const char* passes : {"", "1"})
  for (MaskKind mask : {MaskKind::None, MaskKind::Causal, MaskKind::Custom}) {
    test::ScopedEnv env("ATTNLAB_STREAM_PASSES", passes);
    const Problem p = test::make_problem(300, 24, 8, 2, mask, 0.7, 11 + static_cast<int>(mask));
    for (PoolMode mode : {PoolMode::Max, PoolMode::Mean}) {
      for (const Window& w : kWindows) {
        SCOPED_TRACE(std::string(to_string(mask)) + ", " + (mode == PoolMode::Max ? "max" : "mean") +
                     ", " + w.name + (*passes ? ", one pass forced" : ""));
        PoolRequest r;
        r.rows = test::pool_axis(w.r0, w.r1, w.rows_px);
        r.cols = test::pool_axis(w.c0, w.c1, w.cols_px);
        r.mode = mode;
        r.head = 1;
        const RunOptions o = streamed(&r);
        const Trace g = cuda->run(p, o);
        const Trace c = cpu_run(p, o);
        EXPECT_EQ(g.backend, "cuda");
        EXPECT_FALSE(g.has_stages);
        EXPECT_EQ(g.scores.size() + g.weights.size() + g.output.size(), 0);
        expect_pooled_near(p, g.pooled, c.pooled);
      }
    }
  }
}

// 4096 tokens, the whole matrix on 40 x 3 pixels: each pixel column is about 1365 keys (more
// than a chunk's 1024 flat columns, several tiles of 64), each pixel row about 102 queries
// (two row tiles); low temperature makes the weights sharp. The default pools it in one pass;
// ATTNLAB_STREAM_PASSES=2 in two.
TEST(CudaStreaming, FullViewWithWidePixelsEqualsTheCpu) {
  ATTNLAB_REQUIRE_CUDA();
  auto cuda = make_backend("cuda");
  for (const char* passes : {"", "2"})
  for (MaskKind mask : {MaskKind::Causal, MaskKind::Custom}) {
    test::ScopedEnv env("ATTNLAB_STREAM_PASSES", passes);
    const Problem p = test::make_problem(4096, 64, 16, 2, mask, 0.05, 21);
    for (PoolMode mode : {PoolMode::Max, PoolMode::Mean}) {
      SCOPED_TRACE(std::string(to_string(mask)) + (mode == PoolMode::Max ? ", max" : ", mean") +
                   (*passes ? ", two passes forced" : ""));
      PoolRequest r;
      r.rows = test::pool_axis(0, 4096, 40);
      r.cols = test::pool_axis(0, 4096, 3);
      r.mode = mode;
      r.head = 1;
      const RunOptions o = streamed(&r);
      expect_pooled_near(p, cuda->run(p, o).pooled, cpu_run(p, o).pooled);
    }
  }
}

TEST(CudaStreaming, ExactRowsEqualTheCpu) {
  ATTNLAB_REQUIRE_CUDA();
  auto cuda = make_backend("cuda");
  for (MaskKind mask : {MaskKind::None, MaskKind::Causal, MaskKind::Custom}) {
    const Problem p = test::make_problem(200, 16, 8, 2, mask, 0.6, 5);
    for (bool output : {false, true}) {
      SCOPED_TRACE(std::string(to_string(mask)) + (output ? ", with output" : ", no output"));
      RunOptions o = streamed(nullptr, output);
      o.rows = {0, 133, 399, 133};
      const Trace g = cuda->run(p, o);
      const Trace c = cpu_run(p, o);
      expect_rows_near(p, g.rows, c.rows);
      EXPECT_TRUE(g.pooled.empty());
      ASSERT_EQ(g.output.size(), c.output.size());
      if (output) {
        const double err = (g.output - c.output).cwiseAbs().maxCoeff();
        EXPECT_LE(err, test::fp32_tolerance(p) * (1 + c.output.cwiseAbs().maxCoeff()));
      }
    }
  }
}

// A view and a row of the same run (the viewer's request), with the output: all three as the CPU.
// Also with one pass forced: the view's rows then get their statistics from the pooling, the exact
// row inside the view (head 2, row 250) reads them, the one outside (head 0) its own pass's.
TEST(CudaStreaming, ViewRowAndOutputTogether) {
  ATTNLAB_REQUIRE_CUDA();
  for (const char* passes : {"", "1"}) {
  SCOPED_TRACE(*passes ? "one pass forced" : "default");
  test::ScopedEnv env("ATTNLAB_STREAM_PASSES", passes);
  const Problem p = test::make_problem(513, 32, 32, 3, MaskKind::Causal, 1.3, 9);
  PoolRequest r;
  r.rows = test::pool_axis(100, 400, 64);
  r.cols = test::pool_axis(0, 513, 90);
  r.mode = PoolMode::Mean;
  r.head = 2;
  RunOptions o = streamed(&r, true);
  o.rows = {2 * 513 + 250, 7};
  const Trace g = make_backend("cuda")->run(p, o);
  const Trace c = cpu_run(p, o);
  expect_pooled_near(p, g.pooled, c.pooled);
  expect_rows_near(p, g.rows, c.rows);
  ASSERT_EQ(g.output.rows(), c.output.rows());
  EXPECT_LE((g.output - c.output).cwiseAbs().maxCoeff(), 1e-4);
  }
}

TEST(CudaStreaming, BadRequestsAreRefusedAsOnTheCpu) {
  ATTNLAB_REQUIRE_CUDA();
  auto cuda = make_backend("cuda");
  auto cpu = make_backend("cpu");
  const Problem p = test::make_problem(10, 4, 2, 2, MaskKind::None, 1, 6);
  const auto same_refusal = [&](const RunOptions& o) {
    const std::string a = test::message_of<InputError>([&] { cuda->run(p, o); });
    const std::string b = test::message_of<InputError>([&] { cpu->run(p, o); });
    EXPECT_FALSE(b.empty());
    EXPECT_EQ(a, b);
  };
  RunOptions o = streamed(nullptr);
  o.rows = {20};
  same_refusal(o);
  o.rows = {-1};
  same_refusal(o);
  PoolRequest r;
  r.rows = test::pool_axis(0, 10, 4);
  r.cols = test::pool_axis(0, 10, 4);
  o.rows = {};
  o.pool = &r;
  r.head = 2;
  same_refusal(o);
  r.head = 1;
  r.rows.end[3] = 11;
  same_refusal(o);
  r.rows = test::pool_axis(0, 10, 4);
  r.cols.begin[2] = r.cols.end[2];
  same_refusal(o);
  r.cols = PoolAxis{};
  same_refusal(o);
}

// Logits beyond fp32 (a temperature of 1e-40) are refused as the CPU chain refuses them (by either
// pooling design), and a streamed run that does not fit (ATTNLAB_CUDA_FAULT=oom: 1 MiB free) is
// refused with its needs.
TEST(CudaStreaming, OverflowAndMemoryAreRefused) {
  ATTNLAB_REQUIRE_CUDA();
  const PoolRequest r = whole_view(64, 8);
  for (const char* passes : {"", "1"}) {  // the overflow records of both pooling designs
    test::ScopedEnv env("ATTNLAB_STREAM_PASSES", passes);
    const Problem p = test::make_problem(64, 16, 16, 1, MaskKind::Causal, 1e-40, 3);
    const RunOptions o = streamed(&r);
    const std::string g = test::message_of<InputError>([&] { make_backend("cuda")->run(p, o); });
    const std::string c = test::message_of<InputError>([&] { make_backend("cpu")->run(p, o); });
    EXPECT_TRUE(test::contains(c, "the logits (scaled scores / temperature) overflow at row")) << c;
    EXPECT_TRUE(test::contains(g, "the logits (scaled scores / temperature) overflow at row")) << g;
  }
  {
    const Problem p = test::make_problem(4096, 64, 64, 1, MaskKind::None, 1, 3);
    test::ScopedEnv oom("ATTNLAB_CUDA_FAULT", "oom");
    const std::string g =
        test::message_of<ResourceError>([&] { make_backend("cuda")->run(p, streamed(&r)); });
    EXPECT_TRUE(test::contains(g, "the streamed view needs")) << g;
    EXPECT_TRUE(test::contains(g, "1.0 MiB free")) << g;
  }
}

TEST(CudaStreaming, FusedVariantRefusesViewsAndRows) {
  ATTNLAB_REQUIRE_CUDA();
  const Problem p = test::make_problem(64, 16, 16, 1, MaskKind::None, 1, 3);
  const PoolRequest r = whole_view(64, 8);
  for (int k = 0; k < 2; ++k) {
    RunOptions o;
    o.variant = Variant::Fused;
    if (k == 0) o.pool = &r;
    else o.rows = {3};
    const std::string msg = test::message_of<InputError>([&] { make_backend("cuda")->run(p, o); });
    EXPECT_EQ(msg, "pooled views and exact rows come from the staged chain, not the fused kernel");
    EXPECT_EQ(msg, test::message_of<InputError>([&] { make_backend("cpu")->run(p, o); }));
  }
}

TEST(CudaStreaming, CancelThrowsAndProgressReachesOne) {
  ATTNLAB_REQUIRE_CUDA();
  auto cuda = make_backend("cuda");
  // Set before the run: nothing is launched.
  {
    const Problem p = test::make_problem(400, 16, 8, 1, MaskKind::None, 1, 7);
    const PoolRequest r = whole_view(400, 20);
    std::atomic<bool> cancel{true};
    std::atomic<float> progress{0};
    const RunOptions o = watched(&r, cancel, progress);
    EXPECT_THROW(cuda->run(p, o), Cancelled);
    EXPECT_EQ(progress.load(), 0.f);
    cancel = false;
    const Trace t = cuda->run(p, o);
    EXPECT_EQ(progress.load(), 1.f);
    expect_pooled_near(p, t.pooled, cpu_run(p, o).pooled);
  }
  // Set during a run of many launches (131072 tokens, the whole matrix, a few launches per pass),
  // after the first has reported progress: the run stops at the next launch boundary.
  {
    const Problem p = test::make_problem(131072, 64, 8, 1, MaskKind::Causal, 1, 8);
    const PoolRequest r = whole_view(131072, 256);
    std::atomic<bool> cancel{false};
    std::atomic<float> progress{0};
    const RunOptions o = watched(&r, cancel, progress);
    // Cancelled once the first launch has reported progress: no guess of how long a launch takes.
    std::atomic<bool> returned{false};
    std::thread stopper([&] {
      while (progress.load() == 0.f && !returned) std::this_thread::yield();
      cancel = true;
    });
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_THROW(cuda->run(p, o), Cancelled);
    returned = true;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    stopper.join();
    EXPECT_LT(progress.load(), 1.f);
    std::printf("cancelled after %.3f s at progress %.3f\n", s, progress.load());
  }
}

// 262144 tokens: one (n, m) fp32 stage would be 256 GiB, more than the device has. A 64 x 64
// window around the diagonal and one exact row need the inputs and a few rows only.
TEST(CudaStreaming, LongSequenceNeedsNoSquareMatrix) {
  ATTNLAB_REQUIRE_CUDA();
#ifdef ATTNLAB_HAVE_CUDA
  const int n = 262144;
  const Problem p = test::make_problem(n, 64, 64, 1, MaskKind::Causal, 1.0, 8);
  PoolRequest r;
  r.rows = test::pool_axis(200000, 200128, 64);
  r.cols = test::pool_axis(199950, 200078, 64);
  r.mode = PoolMode::Max;
  RunOptions o = streamed(&r);
  o.rows = {200003};

  const std::size_t plan = cuda::streamed_device_bytes(p, o);
  const std::size_t inputs = 2 * static_cast<std::size_t>(n) * 64 * sizeof(float);  // Q and K
  EXPECT_LT(plan, inputs + (std::size_t{64} << 20)) << "inputs plus a few MiB of rows and grids";

  auto cuda = make_backend("cuda");
  std::size_t free0 = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free0, &total), cudaSuccess);
  std::atomic<bool> done{false};
  std::size_t lowest = free0;
  std::thread watcher([&] {
    while (!done) {
      std::size_t f = 0, t = 0;
      if (cudaMemGetInfo(&f, &t) == cudaSuccess) lowest = std::min(lowest, f);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  Trace g;
  try {
    g = cuda->run(p, o);
  } catch (...) {
    done = true;
    watcher.join();
    throw;
  }
  done = true;
  watcher.join();
  const std::size_t drop = free0 - std::min(free0, lowest);
  std::printf("plan %.1f MiB, free memory dropped by at most %.1f MiB during the run\n",
              plan / 1048576.0, drop / 1048576.0);
  // cudaMemGetInfo sees the whole device: under scripts/gpu-check's parallel ctest other test
  // processes allocate too, hence the slack of 8 GiB. Still far below one (n, m) stage (256 GiB,
  // more than the device has, so the run's success alone excludes one).
  EXPECT_LT(drop, plan + (std::size_t{8} << 30));

  const Trace c = cpu_run(p, o);
  expect_pooled_near(p, g.pooled, c.pooled);
  expect_rows_near(p, g.rows, c.rows);
  EXPECT_EQ(g.rows[0].weights[200004], 0.f);
  double sum = 0;
  for (float w : g.rows[0].weights) sum += w;
  EXPECT_NEAR(sum, 1.0, 1e-4);
#endif
}

// Exact rows of a run that keeps its stages are copied from them (no second computation).
TEST(CudaStreaming, ExactRowsOfAKeptRunAreItsStages) {
  ATTNLAB_REQUIRE_CUDA();
  const Problem p = test::make_problem(100, 8, 8, 2, MaskKind::Custom, 1, 4);
  RunOptions o;
  o.rows = {5, 150};
  const Trace t = make_backend("cuda")->run(p, o);
  ASSERT_TRUE(t.has_stages);
  ASSERT_EQ(t.rows.size(), 2u);
  for (const RowStages& rs : t.rows) {
    for (int j = 0; j < p.m(); ++j) {
      EXPECT_EQ(rs.scores[j], t.scores(rs.row, j));
      EXPECT_EQ(rs.weights[j], t.weights(rs.row, j));
      EXPECT_EQ(rs.mask[j], t.mask(rs.row % p.n(), j));
    }
  }
}

}  // namespace
}  // namespace attnlab
