// The one-pass streamed pooling's arithmetic and choice (kernels/stream_onepass.h), on the host:
//   - PixelState's add and merge against the softmax statistics computed directly, over any split
//     of a row's keys into pixels and of a pixel's keys into the kernel's 16 threads
//   - the pooled weights of a whole view, built as the CUDA kernels build them (a state per row
//     and pixel from the kernel's tiles of 64 keys and its 16 threads of 4 columns merged as its
//     shuffles merge them, the rows' statistics merged from the states, the weights from the
//     states alone), against the CPU chain's pooled weights: max and mean, masks none, causal and
//     custom, at a temperature that makes the weights sharp (most far below the largest) and at 1
//   - when one pass is possible, and which design choose_passes picks (also for the view widths
//     docs/PERFORMANCE.md names)
// The kernels themselves run in tests/gpu/test_cuda_streaming.cpp (on a device).
#include "kernels/stream_onepass.h"

#include "core/backend.h"
#include "cpu/cpu_backend.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace attnlab {
namespace {

namespace op = cuda::onepass;

bool near(double a, double b, double rel) { return std::abs(a - b) <= rel * std::abs(b) + 1e-12; }

TEST(StreamOnePass, StatesMergeToTheRowsSoftmaxStatistics) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 3.f);
  for (int trial = 0; trial < 50; ++trial) {
    const int m = 1 + static_cast<int>(rng() % 700);
    std::vector<float> l(m);
    for (float& x : l) x = nd(rng);
    double mx = -INFINITY, lo = INFINITY;
    for (float x : l) mx = std::max<double>(mx, x), lo = std::min<double>(lo, x);
    double sum = 0;
    for (float x : l) sum += std::exp(x - mx);
    // The keys in pixels of random widths, each pixel's keys over 16 threads of 4 columns per tile.
    op::PixelState row = op::empty_state();
    for (int k0 = 0; k0 < m;) {
      const int k1 = std::min(m, k0 + 1 + static_cast<int>(rng() % 200));
      op::PixelState lane[16];
      for (auto& s : lane) s = op::empty_state();
      for (int c = k0; c < k1; ++c) op::add(lane[((c - k0) % op::kTile) / 4], l[c]);
      for (int off = 8; off > 0; off /= 2) {
        op::PixelState next[16];
        for (int t = 0; t < 16; ++t) {
          next[t] = lane[t];
          op::merge(next[t], lane[t ^ off]);
        }
        std::copy(next, next + 16, lane);
      }
      EXPECT_EQ(lane[0].count, k1 - k0);
      op::merge(row, lane[0]);
      k0 = k1;
    }
    EXPECT_EQ(row.count, m);
    EXPECT_EQ(row.mx, static_cast<float>(mx));
    EXPECT_EQ(row.lo, static_cast<float>(lo));
    EXPECT_TRUE(near(row.sum, sum, 1e-5)) << row.sum << " against " << sum;
  }
  // An empty state merges as nothing, both ways.
  op::PixelState a = op::empty_state(), b = op::empty_state();
  op::add(b, 1.5f);
  op::merge(a, op::empty_state());
  EXPECT_EQ(a.count, 0);
  op::merge(a, b);
  EXPECT_EQ(a.mx, 1.5f);
  EXPECT_EQ(a.sum, 1.f);
  op::merge(b, op::empty_state());
  EXPECT_EQ(b.count, 1);
}

// The weights grid of a whole view as the one-pass kernels make it, from the chain's own logits
// (t keeps its stages): pool_states_kernel's states, rows_from_states_kernel's statistics,
// weights_from_states_kernel's pooling.
PooledGrid one_pass_weights(const Problem& p, const Trace& t, const PoolRequest& r) {
  const int m = p.m(), width = r.cols.size(), height = r.rows.size();
  const float cutoff = std::log(std::numeric_limits<float>::min()) + std::log(static_cast<float>(m));
  const Eigen::Index base = static_cast<Eigen::Index>(r.head) * p.n();
  PooledGrid g;
  g.rows = height;
  g.cols = width;
  g.cells.resize(static_cast<std::size_t>(height) * width);
  float lo = INFINITY, hi = -INFINITY;
  for (int py = 0; py < height; ++py) {
    const int rb = r.rows.begin[py], re = r.rows.end[py];
    std::vector<op::PixelState> states(static_cast<std::size_t>(re - rb) * width);
    for (int i = rb; i < re; ++i)
      for (int px = 0; px < width; ++px) {
        op::PixelState lane[16];
        for (auto& s : lane) s = op::empty_state();
        for (int c = r.cols.begin[px]; c < r.cols.end[px]; ++c) {
          const float l = t.logits(base + i, c);
          if (std::isfinite(l)) op::add(lane[((c - r.cols.begin[px]) % op::kTile) / 4], l);
        }
        for (int off = 8; off > 0; off /= 2)
          for (int k = 0; k < 16; ++k)
            if ((k & off) == 0) {  // lane 0's result only needs the lanes below `off`
              op::PixelState s = lane[k];
              op::merge(s, lane[k ^ off]);
              lane[k] = s;
            }
        states[static_cast<std::size_t>(i - rb) * width + px] = lane[0];
      }
    std::vector<float> row_max(re - rb), row_sum(re - rb);
    for (int i = rb; i < re; ++i) {
      op::PixelState acc = op::empty_state();
      for (int px = 0; px < width; ++px) op::merge(acc, states[static_cast<std::size_t>(i - rb) * width + px]);
      row_max[i - rb] = acc.mx;
      row_sum[i - rb] = acc.sum;
      if (acc.count > 0) {
        lo = std::min(lo, op::weight(acc.lo, acc.mx, acc.sum, cutoff));
        hi = std::max(hi, op::weight(acc.mx, acc.mx, acc.sum, cutoff));
      }
    }
    for (int px = 0; px < width; ++px) {
      double sum = 0;
      long long count = 0;
      float mx = -INFINITY;
      for (int i = rb; i < re; ++i) {
        const op::PixelState& st = states[static_cast<std::size_t>(i - rb) * width + px];
        if (st.count == 0) continue;
        count += st.count;
        if (r.mode == PoolMode::Mean)
          sum += op::weight_sum(st, row_max[i - rb], row_sum[i - rb], cutoff);
        else
          mx = std::max(mx, op::max_weight(st, row_max[i - rb], row_sum[i - rb], cutoff));
      }
      PooledCell& cell = g.cells[static_cast<std::size_t>(py) * width + px];
      cell.masked = count == 0;
      cell.value = count == 0 ? 0.f : r.mode == PoolMode::Mean ? static_cast<float>(sum / count) : mx;
    }
  }
  g.has_range = lo <= hi;
  g.lo = g.has_range ? lo : 0;
  g.hi = g.has_range ? hi : 0;
  return g;
}

TEST(StreamOnePass, WholeViewWeightsEqualTheCpuChains) {
  const int n = 600;
  for (MaskKind mask : {MaskKind::None, MaskKind::Causal, MaskKind::Custom}) {
    for (double temperature : {0.05, 1.0}) {
      const Problem p = test::make_problem(n, 16, 8, 2, mask, temperature, 31 + static_cast<int>(mask));
      Trace kept;
      cpu_staged_into(p, RunOptions{}, kept);
      ASSERT_TRUE(kept.has_stages);
      for (PoolMode mode : {PoolMode::Max, PoolMode::Mean}) {
        // Pixels of about 133 keys (three tiles, the last partial) and groups of about 43 rows.
        PoolRequest r;
        r.rows = test::pool_axis(0, n, 14);
        r.cols = test::pool_axis(0, n, 9);
        r.mode = mode;
        r.head = 1;
        SCOPED_TRACE(std::string(to_string(mask)) + ", T " + std::to_string(temperature) +
                     (mode == PoolMode::Max ? ", max" : ", mean"));
        RunOptions o;
        o.keep_stages = false;
        o.output = false;
        o.pool = &r;
        Trace streamed;
        cpu_staged_into(p, o, streamed);
        const PooledGrid& c = streamed.pooled.weights;
        const PooledGrid g = one_pass_weights(p, kept, r);
        ASSERT_EQ(g.cells.size(), c.cells.size());
        int failures = 0;
        for (std::size_t k = 0; k < c.cells.size() && failures < 5; ++k) {
          const bool ok = g.cells[k].masked == c.cells[k].masked &&
                          (c.cells[k].masked || near(g.cells[k].value, c.cells[k].value, 1e-5));
          if (!ok) {
            ADD_FAILURE() << "pixel " << k << ": one pass " << g.cells[k].value << (g.cells[k].masked ? " (masked)" : "")
                          << ", the chain " << c.cells[k].value << (c.cells[k].masked ? " (masked)" : "");
            ++failures;
          }
        }
        EXPECT_EQ(g.has_range, c.has_range);
        EXPECT_TRUE(near(g.lo, c.lo, 1e-5)) << g.lo << " against " << c.lo;
        EXPECT_TRUE(near(g.hi, c.hi, 1e-5)) << g.hi << " against " << c.hi;
        if (mask == MaskKind::Causal) {
          EXPECT_TRUE(c.cells[8].masked) << "the top right pixel of a causal view has no visible key";
        }
      }
    }
  }
}

// Flat columns and pixel bounds of `pixels` pixels over keys [lo, hi) (as plan_stream lays them).
struct Columns {
  std::vector<int> px_flat, flat_col, chunk_px;
};
Columns columns(const PoolAxis& a, int chunk_flat = 1024, int chunk_pixels = 64) {
  Columns c;
  c.px_flat.push_back(0);
  for (int px = 0; px < a.size(); ++px) {
    for (int j = a.begin[px]; j < a.end[px]; ++j) c.flat_col.push_back(j);
    c.px_flat.push_back(static_cast<int>(c.flat_col.size()));
  }
  c.chunk_px.push_back(0);
  for (int px = 0; px < a.size(); ++px) {
    const int start = c.chunk_px.back();
    if (px > start && (px - start == chunk_pixels || c.px_flat[px] - c.px_flat[start] >= chunk_flat))
      c.chunk_px.push_back(px);
  }
  c.chunk_px.push_back(a.size());
  return c;
}

TEST(StreamOnePass, OnePassOnlyWhereTheViewCoversEveryKeyOnceAndItPays) {
  // A million tokens on 900 x 900 pixels: about 1165 keys a pixel, one pass.
  const int big = 1 << 20;
  const PoolAxis rows = test::pool_axis(0, big, 900), cols = test::pool_axis(0, big, 900);
  const Columns c = columns(cols);
  ASSERT_TRUE(op::one_pass_possible(big, c.flat_col, rows.begin, rows.end, 900));
  const op::PassCells cells = op::pass_cells(big, big, rows.begin, rows.end, c.px_flat, c.chunk_px);
  EXPECT_LT(cells.one, 0.6 * cells.two);
  EXPECT_EQ(op::choose_passes(true, cells, 0), 1);
  EXPECT_EQ(op::choose_passes(true, cells, 2), 2) << "ATTNLAB_STREAM_PASSES=2 forces two passes";

  // 300 tokens on 150 pixel columns (two keys a pixel): the tiles of one pass would be mostly
  // padding, so two passes, unless forced.
  const PoolAxis r300 = test::pool_axis(0, 300, 37), c300 = test::pool_axis(0, 300, 150);
  const Columns s = columns(c300);
  ASSERT_TRUE(op::one_pass_possible(300, s.flat_col, r300.begin, r300.end, 150));
  const op::PassCells small = op::pass_cells(300, 300, r300.begin, r300.end, s.px_flat, s.chunk_px);
  EXPECT_GT(small.one, small.two);
  EXPECT_EQ(op::choose_passes(true, small, 0), 2);
  EXPECT_EQ(op::choose_passes(true, small, 1), 1) << "ATTNLAB_STREAM_PASSES=1 forces one pass";

  // Not possible: a zoomed window of the keys, magnified keys (pixels share a key), groups of
  // rows that overlap, a group whose states would not fit a launch.
  const Columns zoom = columns(test::pool_axis(90, 230, 70));
  EXPECT_FALSE(op::one_pass_possible(300, zoom.flat_col, r300.begin, r300.end, 70));
  const Columns magnified = columns(test::pool_axis(0, 40, 96));
  EXPECT_FALSE(op::one_pass_possible(40, magnified.flat_col, r300.begin, r300.end, 96));
  EXPECT_FALSE(op::one_pass_possible(300, s.flat_col, {0, 100}, {150, 300}, 150));
  EXPECT_TRUE(op::one_pass_possible(300, s.flat_col, {0, 150}, {150, 300}, 150));
  const Columns wide = columns(test::pool_axis(0, big, 4096));
  EXPECT_FALSE(op::one_pass_possible(big, wide.flat_col, {0}, {big}, 4096))
      << "one group of a million rows on 4096 pixels: 64 GiB of states";
  EXPECT_EQ(op::choose_passes(false, cells, 1), 2) << "forcing one pass where it is impossible";
}

// The passes a whole view of n tokens on `pixels` x `pixels` gets by default.
int default_passes(int n, int pixels) {
  const PoolAxis a = test::pool_axis(0, n, pixels);
  const Columns c = columns(a);
  return op::choose_passes(op::one_pass_possible(n, c.flat_col, a.begin, a.end, pixels),
                           op::pass_cells(n, n, a.begin, a.end, c.px_flat, c.chunk_px), 0);
}

// What docs/PERFORMANCE.md says of the choice ("The one-pass streamed pooling").
TEST(StreamOnePass, TheChoiceTheDocsState) {
  for (int w = 200; w <= 4180; w += 20) EXPECT_EQ(default_passes(1 << 20, w), 1) << w << " pixels";
  EXPECT_EQ(default_passes(65536, 600), 1);
  EXPECT_EQ(default_passes(65536, 500), 2);
}

}  // namespace
}  // namespace attnlab
