// Heatmap geometry and rasterisation (see heatmap.h).
#include "viewer/draw/heatmap.h"

#include "core/format.h"

#include <cstdio>
#include <string>

#include <algorithm>
#include <cmath>
#include <limits>

namespace attnlab::viewer {
namespace {

HeatView clamp_view(HeatView v) {
  const double w = std::min(1.0, v.x1 - v.x0), h = std::min(1.0, v.y1 - v.y0);
  v.x0 = std::clamp(v.x0, 0.0, 1.0 - w);
  v.y0 = std::clamp(v.y0, 0.0, 1.0 - h);
  v.x1 = v.x0 + w;
  v.y1 = v.y0 + h;
  return v;
}

}  // namespace

HeatView zoom_view(HeatView v, double fx, double fy, double factor, int rows, int cols) {
  const double cur = v.x1 - v.x0;
  const double min_w = std::min(1.0, 2.0 / std::max(1, std::max(rows, cols)));
  const double w = std::clamp(cur / factor, min_w, 1.0);
  // Keep the point under the cursor at the same place on screen.
  const double ux = (fx - v.x0) / (v.x1 - v.x0), uy = (fy - v.y0) / (v.y1 - v.y0);
  HeatView out{fx - ux * w, fy - uy * w, 0, 0};
  out.x1 = out.x0 + w;
  out.y1 = out.y0 + w;
  return clamp_view(out);
}

HeatView pan_view(HeatView v, double dx, double dy) {
  v.x0 += dx;
  v.x1 += dx;
  v.y0 += dy;
  v.y1 += dy;
  return clamp_view(v);
}

PlotGeometry place_plot(float ax, float ay, float aw, float ah, int rows, int cols, HeatView view, float min_w) {
  PlotGeometry g;
  g.rows = rows;
  g.cols = cols;
  g.first_row = view.y0 * rows;
  g.first_col = view.x0 * cols;
  g.vis_rows = (view.y1 - view.y0) * rows;
  g.vis_cols = (view.x1 - view.x0) * cols;
  if (rows <= 0 || cols <= 0 || aw < 1 || ah < 1) return g;
  // Square cells (pooled or not) so a causal diagonal runs at 45 degrees and zooming keeps the
  // plot's shape; a matrix too skinny for that (more rows than columns: the 4096 x 64 output) is
  // widened to min_w px, and one too flat (more columns than rows: the 1 x 64 output of one
  // token, 8 x 1024) is made 160 px tall. A square matrix stays square in any room (the demo's
  // 5 x 5 in a small window at a large UI scale had been widened to min_w).
  const double cell = std::min(aw / g.vis_cols, ah / g.vis_rows);
  const double least_h = g.vis_cols > g.vis_rows ? std::min(ah, 160.0f) : 0.0;
  const double least_w = g.vis_rows > g.vis_cols ? std::min(aw, min_w) : 0.0;
  const double h = std::clamp(cell * g.vis_rows, least_h, static_cast<double>(ah));
  const double w = std::clamp(cell * g.vis_cols, least_w, static_cast<double>(aw));
  g.px_w = std::max(1, static_cast<int>(std::floor(w)));
  g.px_h = std::max(1, static_cast<int>(std::floor(h)));
  g.w = static_cast<float>(g.px_w);
  g.h = static_cast<float>(g.px_h);
  g.x = std::floor(ax + (aw - g.w) / 2);
  g.y = std::floor(ay + (ah - g.h) / 2);
  g.cell_w = static_cast<float>(g.w / g.vis_cols);
  g.cell_h = static_cast<float>(g.h / g.vis_rows);
  return g;
}

std::optional<Cell> hit_test(const PlotGeometry& g, float mx, float my) {
  if (g.px_w <= 0 || mx < g.x || my < g.y || mx >= g.x + g.w || my >= g.y + g.h) return {};
  const double c = g.first_col + (mx - g.x) / g.w * g.vis_cols;
  const double r = g.first_row + (my - g.y) / g.h * g.vis_rows;
  return Cell{std::clamp(static_cast<int>(std::floor(r)), 0, g.rows - 1),
              std::clamp(static_cast<int>(std::floor(c)), 0, g.cols - 1)};
}

float col_x(const PlotGeometry& g, double col) {
  return static_cast<float>(g.x + (col - g.first_col) / g.vis_cols * g.w);
}

float row_y(const PlotGeometry& g, double row) {
  return static_cast<float>(g.y + (row - g.first_row) / g.vis_rows * g.h);
}

std::optional<Span> visible_row_span(const PlotGeometry& g, int row) {
  const float lo = std::max(row_y(g, row), g.y), hi = std::min(row_y(g, row + 1), g.y + g.h);
  if (hi <= lo) return {};
  return Span{lo, hi};
}

std::optional<Span> visible_col_span(const PlotGeometry& g, int col) {
  const float lo = std::max(col_x(g, col), g.x), hi = std::min(col_x(g, col + 1), g.x + g.w);
  if (hi <= lo) return {};
  return Span{lo, hi};
}

std::optional<Band> row_band(const PlotGeometry& g, int row, float min_px) {
  float y0 = row_y(g, row), y1 = row_y(g, row + 1);
  if (y1 <= g.y || y0 >= g.y + g.h) return {};
  if (y1 - y0 < min_px) {
    const float mid = (y0 + y1) / 2;
    y0 = mid - min_px / 2;
    y1 = mid + min_px / 2;
  }
  return Band{std::max(y0, g.y), std::min(y1, g.y + g.h)};
}

int tick_stride(float cell, float need) {
  if (!(cell > 0)) return 1;
  int stride = 1;
  // The cap keeps a degenerate cell (a fraction of a pixel per million columns) from overflowing.
  while (stride * cell < need && stride < (1 << 29)) stride = stride < 2 ? 2 : stride < 5 ? 5 : stride * 2;
  return stride;
}

ColumnLabelPlan plan_column_labels(float cell_w, float widest, float pad, float min_w) {
  ColumnLabelPlan p;
  const float need = widest + pad;
  if (cell_w >= need) return p;
  if (2 * cell_w >= need) {
    p.lines = 2;
    return p;
  }
  if (2 * cell_w - pad >= min_w) {
    p.lines = 2;
    p.max_w = 2 * cell_w - pad;
    return p;
  }
  p.stride = tick_stride(cell_w, need);
  return p;
}

float fit_scale(float w, float h, float box_w, float box_h, float min_scale) {
  if (!(w > 0) || !(h > 0)) return 1;
  const float s = std::min({1.0f, box_w / w, box_h / h});
  return s >= min_scale ? s : 0.0f;
}

double scale_pos(double v, ValueRange r, bool log_scale) {
  if (!(r.hi > r.lo)) return 0.5;
  if (log_scale) {
    if (!(r.lo > 0) || !(v > r.lo)) return 0;
    return std::log(v / r.lo) / std::log(r.hi / r.lo);
  }
  return (v - r.lo) / (r.hi - r.lo);
}

double scale_value(double t, ValueRange r, bool log_scale) {
  if (log_scale && r.lo > 0 && r.hi > r.lo) return r.lo * std::pow(r.hi / r.lo, t);
  return r.lo + t * (r.hi - r.lo);
}

ValueRange log_range(ValueRange linear) {
  const double floor_v = linear.hi * std::pow(10.0, -kLogDecades);
  ValueRange r{std::max(linear.lo, floor_v), linear.hi};
  if (!(r.lo > 0)) r.lo = std::numeric_limits<double>::min();
  return r;
}

std::vector<std::uint32_t> rasterize(const RasterInput& in, const PlotGeometry& g) {
  if (g.px_w <= 0 || g.px_h <= 0 || !in.values)
    return std::vector<std::uint32_t>(static_cast<std::size_t>(std::max(0, g.px_w)) * std::max(0, g.px_h));
  const AxisMap rmap = map_axis(g.first_row, g.vis_rows, g.px_h, in.rows);
  const AxisMap cmap = map_axis(g.first_col, g.vis_cols, g.px_w, in.cols);
  const std::vector<PooledCell> cells =
      pool_grid(in.values, in.rows, in.cols, in.mask, in.mask_rows, rmap, cmap, in.pool);
  return rasterize_cells(cells, rmap, cmap, in.range, in.log_scale, g.cell_w >= 8 && g.cell_h >= 8, in.palette);
}

std::vector<std::uint32_t> rasterize_cells(const std::vector<PooledCell>& cells, const AxisMap& rmap,
                                           const AxisMap& cmap, ValueRange range, bool log_scale, bool grid,
                                           const std::array<Rgb8, 256>* palette) {
  const int px_h = rmap.size(), px_w = cmap.size();
  std::vector<std::uint32_t> px(static_cast<std::size_t>(px_w) * px_h);
  if (px.empty() || cells.size() != px.size()) return px;
  // A grid gap on the last pixel of each cell, only when cells are large (magnified axes).
  const std::uint32_t gap = pack_rgba(kGridGap);
  const std::uint32_t hatch_dark = pack_rgba(kMaskDark), hatch_light = pack_rgba(kMaskLight);
  std::vector<std::uint32_t> lut(256);
  const std::array<Rgb8, 256>& table = palette ? *palette : viridis_table();
  for (int i = 0; i < 256; ++i) lut[i] = pack_rgba(table[i]);
  for (int y = 0; y < px_h; ++y) {
    const bool row_edge = grid && y + 1 < px_h && rmap.begin[y + 1] != rmap.begin[y];
    for (int x = 0; x < px_w; ++x) {
      const std::size_t i = static_cast<std::size_t>(y) * px_w + x;
      const bool col_edge = grid && x + 1 < px_w && cmap.begin[x + 1] != cmap.begin[x];
      if (row_edge || col_edge) {
        px[i] = gap;
        continue;
      }
      const PooledCell& c = cells[i];
      if (c.masked) {
        // Diagonal stripes 4 px wide: reads as "blocked" at any zoom and is not on the scale.
        px[i] = ((x + y) / 4) % 2 ? hatch_light : hatch_dark;
      } else {
        const double t = std::clamp(scale_pos(c.value, range, log_scale), 0.0, 1.0);
        px[i] = lut[static_cast<int>(std::lround(t * 255))];
      }
    }
  }
  return px;
}

std::string cell_label(float v, bool scientific) {
  // An exact zero that is no masked weight reads as its neighbours do ("0.00"); the chain writes
  // a masked weight's "0" itself.
  if (v == 0.f) return scientific ? "0" : table_value(0.f);
  if (scientific && std::isfinite(v)) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2e", static_cast<double>(v));
    return buf;
  }
  if (std::isfinite(v) && std::abs(static_cast<double>(v)) < 0.005) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1e", static_cast<double>(v));  // 1.3e-04
    std::string t = buf;
    const auto e = t.find("e-0");
    if (e != std::string::npos) t.erase(e + 2, 1);  // 1.3e-4
    return t;
  }
  return table_value(v);
}

std::array<std::string, 3> legend_labels(ValueRange r, bool log_scale) {
  const double mid = scale_value(0.5, r, log_scale);
  char a[32], b[32], c[32];
  if (log_scale) {
    std::snprintf(a, sizeof a, "%.2e", r.hi);
    std::snprintf(b, sizeof b, "%.2e", mid);
    std::snprintf(c, sizeof c, "%.2e", r.lo);
  } else {
    const double span = r.hi - r.lo;
    const double big = std::max(std::abs(r.hi), std::abs(r.lo));
    if (big >= 1e6 || (big > 0 && big < 1e-3)) {
      std::snprintf(a, sizeof a, "%.3e", r.hi);
      std::snprintf(b, sizeof b, "%.3e", mid);
      std::snprintf(c, sizeof c, "%.3e", r.lo);
    } else {
      // One number of decimals for the three, enough to tell the ends of the range apart.
      const int d = span > 0 ? std::clamp(2 - static_cast<int>(std::floor(std::log10(span))), 0, 6) : 2;
      std::snprintf(a, sizeof a, "%.*f", d, r.hi);
      std::snprintf(b, sizeof b, "%.*f", d, mid);
      std::snprintf(c, sizeof c, "%.*f", d, r.lo);
    }
  }
  return {a, b, c};
}

}  // namespace attnlab::viewer
