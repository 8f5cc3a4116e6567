// Axis maps and block reductions for the heatmap (see pooling.h).
#include "viewer/draw/pooling.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <mutex>
#include <thread>

namespace attnlab::viewer {

AxisSpan axis_span(double first, double count, int pixels, int total, int pixel) {
  count = std::max(count, 1e-9);
  const double per_pixel = count / pixels;
  int b, e;
  if (per_pixel <= 1.0) {
    b = static_cast<int>(std::floor(first + (pixel + 0.5) * per_pixel));
    e = b + 1;
  } else {
    // Block edges from the same formula on both sides, so neighbouring blocks tile the window
    // without gaps or overlaps.
    b = static_cast<int>(std::floor(first + pixel * per_pixel + 1e-9));
    e = static_cast<int>(std::floor(first + (pixel + 1) * per_pixel + 1e-9));
    if (e <= b) e = b + 1;
  }
  b = std::clamp(b, 0, total - 1);
  e = std::clamp(e, b + 1, total);
  return {b, e};
}

AxisMap map_axis(double first, double count, int pixels, int total) {
  AxisMap m;
  if (pixels <= 0 || total <= 0) return m;
  m.begin.resize(pixels);
  m.end.resize(pixels);
  for (int p = 0; p < pixels; ++p) {
    const AxisSpan s = axis_span(first, count, pixels, total, p);
    m.begin[p] = s.begin;
    m.end[p] = s.end;
    if (s.end - s.begin > 1) m.pooled = true;
  }
  return m;
}

namespace {

// Runs body(begin, end) over [0, count) split into contiguous chunks on up to 8 threads; a 4096 x
// 4096 stage is 16 M cells to scan on every redraw, and the lab workstation has the cores.
template <class Body>
void parallel_rows(int count, long work, Body body) {
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const int threads = work < (1L << 20) ? 1 : static_cast<int>(std::min({hw, 8u, static_cast<unsigned>(count)}));
  if (threads <= 1) {
    body(0, count);
    return;
  }
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    const int b = static_cast<int>(static_cast<long>(count) * t / threads);
    const int e = static_cast<int>(static_cast<long>(count) * (t + 1) / threads);
    pool.emplace_back([&body, b, e] { body(b, e); });
  }
  for (auto& th : pool) th.join();
}

}  // namespace

std::vector<PooledCell> pool_grid(const float* values, [[maybe_unused]] int rows, int cols,
                                  const float* mask, int mask_rows, const AxisMap& rows_map,
                                  const AxisMap& cols_map, PoolMode mode) {
  assert(rows_map.end.empty() || rows_map.end.back() <= rows);
  const int out_h = rows_map.size(), out_w = cols_map.size();
  std::vector<PooledCell> out(static_cast<std::size_t>(out_h) * out_w);
  const long work = static_cast<long>(rows_map.end.empty() ? 0 : rows_map.end.back() - rows_map.begin.front()) *
                    (cols_map.end.empty() ? 0 : cols_map.end.back() - cols_map.begin.front());
  parallel_rows(out_h, work, [&](int py0, int py1) {
    // Per-pixel accumulators for one output row; source rows are streamed once each.
    std::vector<float> best(out_w), low(out_w);
    std::vector<double> sum(out_w);
    std::vector<int> count(out_w);
    for (int py = py0; py < py1; ++py) {
      std::fill(best.begin(), best.end(), -std::numeric_limits<float>::infinity());
      std::fill(low.begin(), low.end(), std::numeric_limits<float>::infinity());
      std::fill(sum.begin(), sum.end(), 0.0);
      std::fill(count.begin(), count.end(), 0);
      for (int r = rows_map.begin[py]; r < rows_map.end[py]; ++r) {
        const float* row = values + static_cast<std::size_t>(r) * cols;
        const float* mrow = mask ? mask + static_cast<std::size_t>(r % mask_rows) * cols : nullptr;
        for (int px = 0; px < out_w; ++px) {
          float b = best[px], lo = low[px];
          double s = 0;
          int n = 0;
          const int c0 = cols_map.begin[px], c1 = cols_map.end[px];
          if (mrow) {
            for (int c = c0; c < c1; ++c) {
              const float v = row[c];
              if (mrow[c] != 0.0f || !std::isfinite(v)) continue;
              b = std::max(b, v);
              lo = std::min(lo, v);
              s += v;
              ++n;
            }
          } else {
            for (int c = c0; c < c1; ++c) {
              const float v = row[c];
              if (!std::isfinite(v)) continue;
              b = std::max(b, v);
              lo = std::min(lo, v);
              s += v;
              ++n;
            }
          }
          best[px] = b;
          low[px] = lo;
          sum[px] += s;
          count[px] += n;
        }
      }
      PooledCell* o = out.data() + static_cast<std::size_t>(py) * out_w;
      for (int px = 0; px < out_w; ++px) {
        if (count[px] == 0) {
          o[px].masked = true;
        } else {
          o[px].value = mode == PoolMode::Max    ? best[px]
                        : mode == PoolMode::Mean ? static_cast<float>(sum[px] / count[px])
                        : -low[px] > best[px]    ? low[px]
                                                 : best[px];
        }
      }
    }
  });
  return out;
}

ValueRange finite_range(const float* values, int rows, int cols, const float* mask, int mask_rows) {
  std::mutex merge;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  parallel_rows(rows, static_cast<long>(rows) * cols, [&](int r0, int r1) {
    float l = std::numeric_limits<float>::infinity(), h = -l;
    for (int r = r0; r < r1; ++r) {
      const float* row = values + static_cast<std::size_t>(r) * cols;
      const float* mrow = mask ? mask + static_cast<std::size_t>(r % mask_rows) * cols : nullptr;
      for (int c = 0; c < cols; ++c) {
        const float v = row[c];
        if ((mrow && mrow[c] != 0.0f) || !std::isfinite(v)) continue;
        l = std::min(l, v);
        h = std::max(h, v);
      }
    }
    std::lock_guard<std::mutex> lock(merge);
    lo = std::min(lo, static_cast<double>(l));
    hi = std::max(hi, static_cast<double>(h));
  });
  if (lo > hi) return {};
  return {lo, hi};
}

}  // namespace attnlab::viewer
