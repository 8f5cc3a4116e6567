// Pooled views of the (n, m) stages, computed by a backend block by block without any N x N
// matrix: what the viewer draws for problems whose stages do not fit in memory (tens of thousands
// of tokens). A request names, per pixel row and per pixel column, the contiguous source interval
// the pixel covers (the viewer's map_axis); the backend returns, for the scores, the logits and the
// softmax weights of one head, the max or the mean of the unmasked cells of every pixel's block, and
// the range of the cells it visited. A block whose cells are all masked (or not finite) is masked.
// The same reduction as the viewer's pool_grid over a materialised stage, so that both paths give
// the same picture; the tests compare them.
#pragma once

#include <cstdint>
#include <vector>

namespace attnlab {

// Extreme: the block's entry of largest |value|, its sign kept (a gradient's map, whose blocks
// hold both signs). Only the viewer's pool_grid computes it; a PoolRequest to a backend asks for
// Max or Mean.
enum class PoolMode { Max, Mean, Extreme };

struct PooledCell {
  float value = 0;
  bool masked = false;
};

// One axis of a request: pixel p covers source cells [begin[p], end[p]); intervals are
// non-decreasing (consecutive pixels may share one cell when magnified) and inside [0, total).
struct PoolAxis {
  std::vector<int> begin, end;
  int size() const { return static_cast<int>(begin.size()); }
};

struct PoolRequest {
  PoolAxis rows;  // query rows of `head`
  PoolAxis cols;  // keys
  PoolMode mode = PoolMode::Max;
  int head = 0;
};

// rows x cols pixels, row-major. lo/hi: the smallest and largest finite unmasked value of the
// cells the request covers (the colour scale); has_range false when there was none.
struct PooledGrid {
  int rows = 0, cols = 0;
  std::vector<PooledCell> cells;
  double lo = 0, hi = 0;
  bool has_range = false;
};

// Steps 1-3 of the chain: scores (no mask: the mask enters at step 2), logits and weights (masked
// cells excluded).
struct PooledStages {
  PooledGrid scores, logits, weights;
  bool empty() const { return scores.cells.empty(); }
};

// The exact stages of one query row (all m keys), for the selected row's statistics and chart.
struct RowStages {
  int row = -1;  // row of the stacked trace (head * n + query)
  std::vector<float> scores, scaled, logits, weights, mask;  // m each; mask 0 / -inf
  std::vector<float> biased, capped;  // the score mods' stages (empty without them)
};

}  // namespace attnlab
