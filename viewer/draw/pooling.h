// Down-sampling of a large matrix to the pixels that show it. Each output pixel of an axis covers a
// contiguous interval of source cells: one cell when the visible cells fit in the pixels (the cell is
// simply magnified), a block of cells when they do not (pooling). A pooled pixel is the max or the
// mean of the unmasked cells of its block; a block whose cells are all masked stays masked. Nothing
// here touches SDL, so the reductions are unit-tested on small matrices.
#pragma once

#include "core/pooled.h"  // PoolMode, PooledCell: shared with the backends' streamed pooling

#include <cstdint>
#include <vector>

namespace attnlab::viewer {

// For each of `pixels` output pixels, the source interval [begin, end) along one axis.
struct AxisMap {
  std::vector<int> begin, end;
  bool pooled = false;  // true when at least one pixel covers more than one cell
  int size() const { return static_cast<int>(begin.size()); }
};

// Maps `pixels` pixels onto the visible window [first, first + count) of an axis with `total`
// cells (first and count may be fractional: zoomed views). count <= pixels magnifies (nearest
// cell of the pixel's centre); count > pixels pools into blocks of floor(count / pixels) or one
// more cells. Every interval is non-empty and inside [0, total).
AxisMap map_axis(double first, double count, int pixels, int total);

// One entry of map_axis(first, count, pixels, total): the source interval [begin, end) of pixel
// `pixel` (0 <= pixel < pixels, total > 0), computed alone, without the other pixels' entries (the
// hover tooltip reads one pooled pixel). map_axis is built from it, so the two always agree.
struct AxisSpan {
  int begin = 0, end = 0;
};
AxisSpan axis_span(double first, double count, int pixels, int total, int pixel);

// Reduces `values` (rows x cols, row-major) over the blocks rows_map x cols_map. `mask` (may be null)
// is an additive mask of mask_rows x cols (0 keeps, -inf blocks) applied to row r as mask row
// r % mask_rows, which is how a stacked multi-head trace shares one mask. Non-finite values in the
// data are treated as masked too. Output: rows_map.size() x cols_map.size(), row-major: each block's
// max, mean or (Extreme) entry of largest |value|.
std::vector<PooledCell> pool_grid(const float* values, int rows, int cols, const float* mask,
                                  int mask_rows, const AxisMap& rows_map, const AxisMap& cols_map,
                                  PoolMode mode);

// Smallest and largest finite, unmasked value (the colour scale's range). lo == hi when constant;
// both 0 when nothing is finite.
struct ValueRange {
  double lo = 0, hi = 0;
};
ValueRange finite_range(const float* values, int rows, int cols, const float* mask, int mask_rows);

}  // namespace attnlab::viewer
