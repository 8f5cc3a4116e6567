// The one-pass streamed pooling (kernels/stream_pool.cu: pool_states_kernel, then rows_from_states
// and weights_from_states), its arithmetic and its choice, as plain functions: the kernels call
// them, and tests/test_stream_onepass.cpp runs them on the host against the CPU chain's pooled
// weights, so the algorithm is tested without a GPU.
//
// The two-pass design reads every score twice: a statistics pass for each row's softmax (max, sum
// of exp) over all m keys, then a pooling pass that needs those statistics for the weights. Where
// the view covers every key once, in order (a whole-matrix view, the long-sequence case), one pass
// suffices: per (query row, pixel column) it keeps the online-softmax state of the row's logits
// over the pixel's keys (PixelState), and pools the scores and logits, which need no statistics.
// The row's statistics are then the merge of its states over the pixels (the log-sum-exp rule,
// exact in any order), and each pixel's weights follow from its states without a score:
//   max   the largest weight of row r over the pixel's keys is weight(state.mx), as exp and the
//         division by the row's sum are monotone;
//   mean  the sum of row r's weights over the pixel's keys is state.sum * exp(state.mx - M_r) / S_r,
//         and the count is state.count.
// Scores and logits are bit for bit the two-pass ones (the same cells, the same sequential fmaf
// chain); the weights agree within fp32 rounding (sums merged in another order).
//
// A pixel's keys are walked in tiles that never straddle two pixels, so a pixel narrower than a
// tile wastes lanes; choose_passes compares the padded cells of both designs.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#if defined(__CUDACC__)
#define ATTNLAB_ONEPASS_FN __host__ __device__ __forceinline__
#else
#define ATTNLAB_ONEPASS_FN inline
#endif

namespace attnlab::cuda::onepass {

// A query row's logits over the keys of one pixel column: their max, the sum of exp(logit - max),
// their min and their count (unmasked cells with a finite logit). count 0: no cell.
struct alignas(16) PixelState {
  float mx, sum, lo;
  int count;
};

ATTNLAB_ONEPASS_FN PixelState empty_state() { return PixelState{-INFINITY, 0.f, INFINITY, 0}; }

// Adds a finite logit.
ATTNLAB_ONEPASS_FN void add(PixelState& s, float l) {
  if (l > s.mx) {
    s.sum = s.sum * expf(s.mx - l) + 1.f;  // the first logit: expf(-inf) = 0, sum becomes 1
    s.mx = l;
  } else {
    s.sum += expf(l - s.mx);
  }
  s.lo = fminf(s.lo, l);
  ++s.count;
}

// Merges o into s (the log-sum-exp rule).
ATTNLAB_ONEPASS_FN void merge(PixelState& s, const PixelState& o) {
  if (o.count == 0) return;
  if (s.count == 0) {
    s = o;
    return;
  }
  const float nm = fmaxf(s.mx, o.mx);
  s.sum = s.sum * expf(s.mx - nm) + o.sum * expf(o.mx - nm);
  s.mx = nm;
  s.lo = fminf(s.lo, o.lo);
  s.count += o.count;
}

// The chain's weight of a logit in a row with (row_max, row_sum): 0 where it would be subnormal
// (logit - row_max below `cutoff`), as the CPU chain and the two-pass kernels make it.
ATTNLAB_ONEPASS_FN float weight(float logit, float row_max, float row_sum, float cutoff) {
  const float x = logit - row_max;
  return x < cutoff ? 0.f : expf(x) / row_sum;
}

// The largest weight of a row's cells in the pixel (state.count > 0).
ATTNLAB_ONEPASS_FN float max_weight(const PixelState& s, float row_max, float row_sum, float cutoff) {
  return weight(s.mx, row_max, row_sum, cutoff);
}

// The sum of a row's weights in the pixel (state.count > 0); 0 where even the largest is 0.
ATTNLAB_ONEPASS_FN double weight_sum(const PixelState& s, float row_max, float row_sum, float cutoff) {
  const float x = s.mx - row_max;
  if (x < cutoff) return 0.0;
  return static_cast<double>(s.sum) * static_cast<double>(expf(x)) / static_cast<double>(row_sum);
}

// ---- the choice (host) ----------------------------------------------------------------------------

// Tiles of the kernels: 64 rows by 64 keys.
inline constexpr int kTile = 64;
// One launch's states stay below this (rows x pixels x 16 bytes).
inline constexpr std::size_t kStateBytesCap = std::size_t{64} << 20;

inline long padded(long count) { return (count + kTile - 1) / kTile * kTile; }

// Cells each design computes, counting the padding of its tiles: the two-pass design the
// statistics of `stat_rows` rows over all m keys plus every group's rows over the view's flat
// columns in chunks (chunk_px, px_flat as PoolLayout's); the one-pass design every group's rows
// over each pixel's keys, a pixel at a time.
struct PassCells {
  double two = 0, one = 0;
};

inline PassCells pass_cells(long stat_rows, int m, const std::vector<int>& group_begin,
                            const std::vector<int>& group_end, const std::vector<int>& px_flat,
                            const std::vector<int>& chunk_px) {
  PassCells c;
  double group_rows = 0;
  for (std::size_t g = 0; g < group_begin.size(); ++g) group_rows += padded(group_end[g] - group_begin[g]);
  double chunk_cols = 0, pixel_cols = 0;
  for (std::size_t k = 0; k + 1 < chunk_px.size(); ++k)
    chunk_cols += padded(px_flat[chunk_px[k + 1]] - px_flat[chunk_px[k]]);
  for (std::size_t px = 0; px + 1 < px_flat.size(); ++px) pixel_cols += padded(px_flat[px + 1] - px_flat[px]);
  c.two = static_cast<double>(padded(stat_rows)) * padded(m) + group_rows * chunk_cols;
  c.one = group_rows * pixel_cols;
  return c;
}

// Whether one pass can pool the view: its flat columns are the m keys once each, in order, each
// query row is in at most one group (groups ascending), and the largest group's states fit in a
// launch (kStateBytesCap).
inline bool one_pass_possible(int m, const std::vector<int>& flat_col, const std::vector<int>& group_begin,
                              const std::vector<int>& group_end, int width) {
  if (width <= 0 || group_begin.empty() || static_cast<long>(flat_col.size()) != m) return false;
  for (int f = 0; f < m; ++f)
    if (flat_col[f] != f) return false;
  long largest = 0;
  for (std::size_t g = 0; g < group_begin.size(); ++g) {
    if (g > 0 && group_begin[g] < group_end[g - 1]) return false;
    largest = std::max<long>(largest, group_end[g] - group_begin[g]);
  }
  return static_cast<double>(largest) * width * sizeof(PixelState) <= static_cast<double>(kStateBytesCap);
}

// The design a view gets: `forced` 1 or 2 (ATTNLAB_STREAM_PASSES) where possible; otherwise one
// pass where possible and its padded cells are at most three quarters of the two passes' (its
// cells carry the pooling of both two-pass kernels: a margin for that).
inline int choose_passes(bool possible, const PassCells& cells, int forced) {
  if (!possible) return 2;
  if (forced == 1 || forced == 2) return forced;
  return cells.one <= 0.75 * cells.two ? 1 : 2;
}

}  // namespace attnlab::cuda::onepass
