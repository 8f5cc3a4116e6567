// Heatmap geometry and rasterisation, free of SDL: the zoom/pan window (as fractions of the matrix,
// so it survives a change between the n x m stages and the n x d_v output), where the plot sits in
// its area, which exact cell a pixel shows (hover reports the exact cell even when pooled), the
// band of the selected query row, and the RGBA image the SDL texture is filled from.
#pragma once

#include "viewer/draw/colormap.h"
#include "viewer/draw/pooling.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace attnlab::viewer {

// The visible window as fractions [x0, x1) x [y0, y1) of the matrix's columns and rows.
struct HeatView {
  double x0 = 0, y0 = 0, x1 = 1, y1 = 1;
  double zoom() const { return 1.0 / (x1 - x0); }
};

// Zooms by `factor` (> 1 zooms in) keeping the fraction (fx, fy) under the cursor fixed. The window
// never shows less than 2 cells of the larger axis nor more than the whole matrix.
HeatView zoom_view(HeatView v, double fx, double fy, double factor, int rows, int cols);
// Shifts by (dx, dy) fractions, clamped to the matrix.
HeatView pan_view(HeatView v, double dx, double dy);

struct PlotGeometry {
  float x = 0, y = 0, w = 0, h = 0;          // the plot's pixels inside the area
  int rows = 0, cols = 0;                    // whole matrix
  double first_row = 0, first_col = 0;       // visible window, in cells (fractional)
  double vis_rows = 0, vis_cols = 0;
  float cell_w = 0, cell_h = 0;              // pixels per cell (< 1 when pooled)
  int px_w = 0, px_h = 0;                    // raster size (integer pixels of the plot)
  bool pooled() const { return cell_w < 1 || cell_h < 1; }
};

// Places a rows x cols matrix seen through `view` in the area (ax, ay, aw, ah), centred, with
// square cells (less than a pixel each when pooled), as large as the area allows; never narrower
// than min(aw, min_w) pixels (the 4096 x 64 output; a matrix of tokens by dimensions asks for
// more, so that its few columns can be told apart).
PlotGeometry place_plot(float ax, float ay, float aw, float ah, int rows, int cols, HeatView view,
                        float min_w = 160);

// The exact cell under pixel (mx, my), or nothing outside the plot.
struct Cell {
  int row = 0, col = 0;
};
std::optional<Cell> hit_test(const PlotGeometry& g, float mx, float my);

// Vertical pixel band [y0, y1) of a row, at least `min_px` tall (centred on the row) so a single
// row of a 4096-row plot stays visible; nothing when the row is outside the view.
struct Band {
  float y0 = 0, y1 = 0;
};
std::optional<Band> row_band(const PlotGeometry& g, int row, float min_px = 3);
// Horizontal pixel position of a column's left edge (may be outside the plot when zoomed).
float col_x(const PlotGeometry& g, double col);
float row_y(const PlotGeometry& g, double row);

// The part of a row's (column's) pixel span inside the plot: [lo, hi), and its centre, where a
// label or a value belongs when the cell is cut by the plot's edge (zoomed or panned). Nothing
// when the cell is wholly outside.
struct Span {
  float lo = 0, hi = 0;
  float size() const { return hi - lo; }
  float mid() const { return (lo + hi) / 2; }
};
std::optional<Span> visible_row_span(const PlotGeometry& g, int row);
std::optional<Span> visible_col_span(const PlotGeometry& g, int col);

// Axis labels. The stride of tick labels along an axis: every label (1) while `need` pixels fit in
// a cell of `cell` pixels, else every 2nd, 5th, 10th, 20th, 40th … (the chain view's rule, which
// the precision and diff maps share: labels 0, 320, … 3840 at 4096 tokens).
int tick_stride(float cell, float need);

// How the column labels go above a plot whose columns are `cell_w` pixels wide, the widest
// visible label `widest` pixels, `pad` pixels kept between neighbours:
// - every column, on one line, where the widest fits its cell;
// - every column, on two staggered lines (a label may then take two cells), where it fits two;
// - every column on two staggered lines shortened to two cells less the pad (max_w: the caller
//   ellipsizes them, strings.h ellipsize) where that leaves `min_w` pixels (a glyph and "…");
// - else evenly spaced ticks (stride: tick_stride) of whole labels on one line.
struct ColumnLabelPlan {
  int stride = 1;
  int lines = 1;     // 2: the odd columns' labels a line above the even ones'
  float max_w = 0;   // > 0: labels wider than this are shortened to it
};
ColumnLabelPlan plan_column_labels(float cell_w, float widest, float pad, float min_w);

// The scale (at most 1, at least min_scale) at which a text of w x h pixels fits a box of box_w x
// box_h pixels; 0 when it does not fit even at min_scale. (The heatmap's values in cells that a
// large UI scale made too small for them: drawn smaller rather than not at all.)
float fit_scale(float w, float h, float box_w, float box_h, float min_scale);

struct RasterInput {
  const float* values = nullptr;  // rows x cols, row-major
  int rows = 0, cols = 0;
  const float* mask = nullptr;    // mask_rows x cols additive mask (0 / -inf), or null
  int mask_rows = 0;
  ValueRange range;               // the colour scale's [lo, hi]
  PoolMode pool = PoolMode::Max;
  bool log_scale = false;         // weights of thousands of tokens span decades (see log_range)
  const std::array<Rgb8, 256>* palette = nullptr;  // the colour table (null: viridis)
};

// RGBA pixels (px_w x px_h, packed as pack_rgba) of the plot: viridis over [lo, hi], masked cells
// hatched with diagonal grey stripes, a dark gap between cells when cells are >= 8 px.
std::vector<std::uint32_t> rasterize(const RasterInput& in, const PlotGeometry& g);
// The same from cells already pooled over rmap x cmap (a streamed problem's pooled stage): one
// pixel per cell, rmap.size() rows of cmap.size(); `grid` draws the gaps between large cells.
// `palette`: the colour table (null: viridis).
std::vector<std::uint32_t> rasterize_cells(const std::vector<PooledCell>& cells, const AxisMap& rmap,
                                           const AxisMap& cmap, ValueRange range, bool log_scale, bool grid,
                                           const std::array<Rgb8, 256>* palette = nullptr);

// Scale position in [0, 1] of a value (0.5 when the range is empty). With log_scale the range must
// come from log_range (lo > 0) and t = ln(v / lo) / ln(hi / lo), values <= lo at 0.
double scale_pos(double v, ValueRange r, bool log_scale = false);
// The value at scale position t (the legend's numbers).
double scale_value(double t, ValueRange r, bool log_scale = false);

// A log scale's range for non-negative data: [max(lo, hi * 1e-6), hi], so a softmax row of 4096
// weights shows its structure over six decades instead of one bright speck on a dark field.
constexpr double kLogDecades = 6;
ValueRange log_range(ValueRange linear);

// A cell's value as its label in the heatmap: the page's two decimals (table_value), an exact
// zero too ("0.00": a bare "0" is the chain's mark of a masked weight), and two significant digits ("1.3e-4") where two decimals would show 0 for a value
// that is not (thousands of keys share one row's weight).
// scientific: every label of the matrix in "%.2e" (one format per matrix: a matrix whose values
// reach 1e6, where two decimals would switch to exponents for some cells only).
std::string cell_label(float v, bool scientific = false);
// Whether a matrix with values in [lo, hi] is labelled in scientific notation.
inline bool needs_scientific(double lo, double hi) { return std::max(-lo, hi) >= 1e6 || std::max(lo, -hi) >= 1e6; }

// The legend's three numbers (top, middle, bottom) in one format: the same decimals for all on a
// linear scale (1.000 / 0.545 / 0.090), scientific notation on a log scale or for very large or
// very small ranges.
std::array<std::string, 3> legend_labels(ValueRange r, bool log_scale);

}  // namespace attnlab::viewer
