// The heatmap panel: the current step's matrix (kept stages, or a streamed problem's pooled view)
// uploaded into one SDL texture, its labels, the selected row's frame, the legend, values inside
// cells that are large enough, the status lines under the plot and the tooltip with the exact
// cell; wheel zooms, drag pans.
#include "viewer/views/chain/chain_view.h"

#include "viewer/ui/kit.h"

#include "core/format.h"
#include "viewer/draw/row_chart.h"
#include "viewer/draw/strings.h"

#include <imgui.h>

#include <algorithm>
#include <chrono>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace attnlab::viewer {
namespace {

// ---- heatmap ----------------------------------------------------------------------------------

// `rope`: which of step 1's RoPE matrices m is (coloured on rope_range's scale), or QK for a stage of
// the chain (coloured on its own range).
void update_texture(Shell& app, const ChainView& view, const MatrixF& m, bool masked_step, bool log_scale,
                    ChainRope rope) {
  const PlotGeometry& g = app.plot;
  const Trace& t = app.session.trace();
  char key[256];
  std::snprintf(key, sizeof key, "%llu|%p|%d|%d|%d|%.9f|%.9f|%.9f|%.9f|%d|%d|%d",
                static_cast<unsigned long long>(app.session.revision()), static_cast<const void*>(&m),
                g.px_w, g.px_h, static_cast<int>(app.pool), view.zoom.x0, view.zoom.y0, view.zoom.x1,
                view.zoom.y1, masked_step ? 1 : 0, log_scale ? 1 : 0, static_cast<int>(rope));
  if (app.heat_tex && key == app.heat_key) return;
  const auto t0 = std::chrono::steady_clock::now();
  RasterInput in;
  in.values = m.data();
  in.rows = static_cast<int>(m.rows());
  in.cols = static_cast<int>(m.cols());
  in.mask = masked_step && t.mask.size() ? t.mask.data() : nullptr;
  in.mask_rows = static_cast<int>(t.mask.rows());
  in.range = rope != ChainRope::QK ? view.rope_range(app.session, rope)
                                   : finite_range(in.values, in.rows, in.cols, in.mask, in.mask_rows);
  in.log_scale = log_scale;
  if (log_scale) in.range = log_range(in.range);
  in.pool = app.pool;
  app.range = in.range;
  app.range_log = log_scale;
  std::vector<std::uint32_t> px = rasterize(in, g);
  upload_texture(app, std::move(px), g.px_w, g.px_h, key, t0);
}

// "row 7" or "rows 7–9" (the same for columns): a pooled block or a window in words.
std::string span_text(Lang lang, int b, int e_inclusive, bool rows) {
  if (b == e_inclusive) return fmt(tr(lang, rows ? S::RowOne : S::ColOne), b);
  return fmt(tr(lang, rows ? S::RowRange : S::ColRange), b, e_inclusive);
}

AxisMap to_axis_map(const PoolAxis& a) {
  AxisMap m;
  m.begin = a.begin;
  m.end = a.end;
  for (int i = 0; i < a.size(); ++i) m.pooled = m.pooled || a.end[i] - a.begin[i] > 1;
  return m;
}

bool same_axes(const PoolAxis& a, const AxisMap& b) { return a.begin == b.begin && a.end == b.end; }

// A streamed problem's texture: the pooled stage as the backend computed it for its view (while a
// newer view is computed, the old picture is stretched over the plot).
void update_texture_pooled(Shell& app, const PooledGrid& pg, int step, bool log_scale, bool grid) {
  const PoolRequest& v = app.session.pooled_view();
  char key[160];
  std::snprintf(key, sizeof key, "pooled|%llu|%d|%d|%d|%d|%d", static_cast<unsigned long long>(app.session.revision()),
                step, pg.rows, pg.cols, log_scale ? 1 : 0, grid ? 1 : 0);
  if (app.heat_tex && key == app.heat_key) return;
  const auto t0 = std::chrono::steady_clock::now();
  ValueRange range = pg.has_range ? ValueRange{pg.lo, pg.hi} : ValueRange{};
  if (log_scale) range = log_range(range);
  app.range = range;
  app.range_log = log_scale;
  std::vector<std::uint32_t> px =
      rasterize_cells(pg.cells, to_axis_map(v.rows), to_axis_map(v.cols), range, log_scale, grid);
  upload_texture(app, std::move(px), pg.cols, pg.rows, key, t0);
}

// Starts `s` afresh unless it already holds the sizes of the same `count` labels (list `list` of
// problem revision `problem`) in the current font.
void keep_label_sizes(LabelSizes& s, std::uint64_t problem, int list, std::size_t count) {
  const void* font = ImGui::GetFont();
  const float size = ImGui::GetFontSize();
  if (s.problem == problem && s.list == list && s.font == font && s.font_size == size && s.w.size() == count) {
    return;
  }
  s.problem = problem;
  s.list = list;
  s.font = font;
  s.font_size = size;
  s.w.assign(count, -1.0f);
  s.h.assign(count, 0.0f);
}

// ImGui::CalcTextSize(labels[i]) at the font size `s` was kept for, measured on first use (the
// labels may be drawn smaller meanwhile: the window's font scale does not change what is kept).
ImVec2 label_size(LabelSizes& s, const std::vector<std::string>& labels, int i) {
  if (s.w[i] < 0) {
    const std::string& t = labels[i];
    const ImVec2 ts = ImGui::GetFont()->CalcTextSizeA(s.font_size, FLT_MAX, 0.0f, t.data(), t.data() + t.size());
    s.w[i] = std::floor(ts.x + 0.99999f);  // rounded up as ImGui::CalcTextSize rounds
    s.h[i] = ts.y;
  }
  return ImVec2(s.w[i], s.h[i]);
}


// The Show row's word of a RoPE choice.
S rope_label(ChainRope r) {
  switch (r) {
    case ChainRope::QK: return S::RopeQK;
    case ChainRope::Q: return S::RopeQ;
    case ChainRope::QRot: return S::RopeQRot;
    case ChainRope::QDiff: return S::RopeQDiff;
    case ChainRope::K: return S::RopeK;
    case ChainRope::KRot: return S::RopeKRot;
    case ChainRope::KDiff: return S::RopeKDiff;
  }
  return S::RopeQK;
}

}  // namespace

void draw_panel(ChainView& view, Shell& app, const Layout& l) {
  const Lang lang = app.lang;
  Session& c = app.session;
  const int shown_step = app.play.step();
  view.chooser = {};
  view.chooser_items.clear();
  // Step 1 of a problem with RoPE: Q, K, their rotations or the rotations' change may take QKᵀ's
  // place (n x d_k or m x d_k, kept whole even when the problem is streamed).
  const ChainRope rope = shown_step == 1 ? view.shown_rope(c) : ChainRope::QK;
  const MatrixF* rope_m = view.rope_matrix(c, rope);
  std::string title = fmt("%s  ·  %s", fmt(tr(lang, S::StepOf), shown_step).c_str(), step_name(lang, shown_step, c.problem()));
  if (rope_m) title += fmt("  ·  %s", tr(lang, rope_label(rope)));
  begin_centre(l, title + "###heatmap");
  // --stages step (or auto on CUDA): the trace on screen was run for another step, and the run
  // that brings this one is on its way. The last picture stays meanwhile (under a note), so that
  // stepping through the chain does not flash an empty plot.
  const bool pending = !rope_m && c.stage_pending(shown_step);
  const bool keep_last = pending && app.heat_step >= 1 && app.heat_step <= 3 && c.stage_matrix(app.heat_step);
  const int step = keep_last ? app.heat_step : shown_step;
  if (pending) {
    ImGui::TextColored(kDimV4, "%s", tr(lang, S::StageComing));
    if (!keep_last) {
      ImGui::End();
      return;
    }
  }
  app.heat_step = step;
  // Toolbar: pooling, view reset, zoom, hint.
  ImGui::TextUnformatted(tr(lang, S::Pooling));
  same_line_if_fits(radio_width(tr(lang, S::PoolMax)));
  if (ImGui::RadioButton(tr(lang, S::PoolMax), app.pool == PoolMode::Max)) app.pool = PoolMode::Max;
  same_line_if_fits(radio_width(tr(lang, S::PoolMean)));
  if (ImGui::RadioButton(tr(lang, S::PoolMean), app.pool == PoolMode::Mean)) app.pool = PoolMode::Mean;
  same_line_if_fits(button_width(tr(lang, S::ResetView)));
  if (ImGui::Button(tr(lang, S::ResetView))) view.zoom = HeatView{};
  const std::string zoom = fmt(tr(lang, S::Zoom), view.zoom.zoom());
  same_line_if_fits(text_width(zoom.c_str()));
  ImGui::TextUnformatted(zoom.c_str());
  if (step == 3) {
    same_line_if_fits(text_width(" | ") + radio_width(tr(lang, S::ScaleLinear)));
    ImGui::TextUnformatted(" | ");
    ImGui::SameLine();
    if (ImGui::RadioButton(tr(lang, S::ScaleLinear), !app.log_weights)) app.log_weights = false;
    same_line_if_fits(radio_width(tr(lang, S::ScaleLog)));
    if (ImGui::RadioButton(tr(lang, S::ScaleLog), app.log_weights)) app.log_weights = true;
  }
  // The choosers of what step 1 (RoPE) and step 2 (score mods) show: radio buttons, or at a UI
  // scale above the default, where they wrapped onto two or three lines taken from the plot's
  // height, one line with a combo box. Choice i: its word (nullptr: not offered), whether it is the
  // current one, and pick(i) to make it so.
  const auto chooser = [&](const char* id, int count, auto&& word, auto&& current, auto&& pick) {
    ImGui::TextUnformatted(tr(lang, S::SubShow));
    if (app.ui_scale > 1) {
      const char* shown = "";
      float widest = 0;
      for (int i = 0; i < count; ++i) {
        if (word(i) == nullptr) continue;
        if (current(i)) shown = word(i);
        widest = std::max(widest, text_width(word(i)));
      }
      ImGui::SameLine();
      const float width = std::min(ImGui::GetContentRegionAvail().x, widest + ImGui::GetFrameHeight() * 2);
      const ImVec2 at = ImGui::GetCursorScreenPos();
      view.chooser = {at.x, at.y, width, ImGui::GetFrameHeight()};
      ImGui::SetNextItemWidth(width);
      if (ImGui::BeginCombo(fmt("##%s", id).c_str(), shown)) {
        for (int i = 0; i < count; ++i) {
          if (word(i) == nullptr) continue;
          if (ImGui::Selectable(fmt("%s##%d", word(i), i).c_str(), current(i))) pick(i);
          const ImVec2 lo = ImGui::GetItemRectMin(), hi = ImGui::GetItemRectMax();
          view.chooser_items.push_back({lo.x, lo.y, hi.x - lo.x, hi.y - lo.y});
        }
        ImGui::EndCombo();
      }
      return;
    }
    for (int i = 0; i < count; ++i) {
      const char* w = word(i);
      if (w == nullptr) continue;
      same_line_if_fits(radio_width(w));
      if (ImGui::RadioButton(fmt("%s###%s%d", w, id, i).c_str(), current(i))) pick(i);
    }
  };
  // Step 2 of a problem with score mods: the stages between the scaled scores and the logits.
  if (ChainView::has_subs(c, step)) {
    const std::pair<ChainView::Sub, S> items[] = {{ChainView::Sub::Scaled, S::SubScaled},
                                                  {ChainView::Sub::Biased, S::SubBiased},
                                                  {ChainView::Sub::Capped, S::SubCapped},
                                                  {ChainView::Sub::Logits, S::SubLogits}};
    chooser(
        "sub", 4,
        [&](int i) -> const char* { return chain_sub_matrix(c, items[i].first) ? tr(lang, items[i].second) : nullptr; },
        [&](int i) { return view.sub == items[i].first; }, [&](int i) { view.sub = items[i].first; });
  }
  const ChainView::Sub sub = view.shown_sub(c, step);
  // Step 1 of a problem with RoPE: the matrices QKᵀ multiplied, before and after the rotation.
  if (step == 1 && c.rotated()) {
    chooser(
        "rope", static_cast<int>(std::size(kChainRopes)),
        [&](int i) -> const char* { return tr(lang, rope_label(kChainRopes[i])); },
        [&](int i) { return view.rope == kChainRopes[i]; }, [&](int i) { view.rope = kChainRopes[i]; });
  }
  // A RoPE matrix: rows tokens (queries, or keys for K's), columns the dimensions of d_k.
  const bool rope_shown = step == 1 && rope_m;
  const bool key_rows = rope_shown && chain_rope_keys(rope);
  const bool dims_axis = step == 4 || (c.stage_matrix(step) == nullptr && !c.streaming());
  // Wrapped: at a large UI scale the hint is wider than the panel. There it keeps to one line (the
  // whole in its tooltip): every line of the toolbar is taken from the plot's height.
  const std::string hint =
      key_rows ? std::string(tr(lang, S::RopeHintK))
               : fmt(tr(lang, S::HeatHint), tr(lang, rope_shown ? S::AxisDimsK : dims_axis ? S::AxisDims : S::AxisKeys));
  if (app.ui_scale > 1) {
    wrapped_capped(app, hint, ImGui::GetTextLineHeightWithSpacing() * 1.5f / std::max(1.0f, ImGui::GetWindowHeight()),
                   &kDimV4);
  } else {
    wrapped(app, hint, &kDimV4);
  }

  // Streamed problems (N above kKeepStagesMaxTokens): steps 1-3 come as the pooled image of this
  // view, computed block by block by the backend; the output (step 4) is kept whole, and so are
  // RoPE's Q and K (N x d_k).
  const bool streamed = c.streaming() && step <= 3 && !rope_shown;
  const PooledGrid* pg = streamed ? c.pooled_stage(step) : nullptr;
  const MatrixF* mp = streamed                        ? nullptr
                      : rope_shown                    ? rope_m
                      : sub != ChainView::Sub::Logits ? chain_sub_matrix(c, sub)
                                                      : c.stage_matrix(step);
  // The notes on what the plot shows: at a large UI scale in half the share a map view's
  // explanation may take (the whole in the tooltip), since the toolbar above already took lines.
  const auto note = [&](const char* text) {
    if (app.ui_scale > 1)
      wrapped_capped(app, text, kExplanationShare / 2, &kDimV4);
    else
      wrapped(app, text, &kDimV4);
  };
  if (sub != ChainView::Sub::Logits) note(tr(lang, S::SubNote));
  if (rope_shown) note(tr(lang, rope == ChainRope::QDiff || rope == ChainRope::KDiff ? S::RopeNoteDiff : S::RopeNote));
  if (!streamed && !mp) {
    wrapped(app, fmt(tr(lang, S::StagesNotKept), c.stages_need_gb(), c.available_gb()));
    mp = c.stage_matrix(4);
  }
  if (!streamed && !mp) {
    ImGui::End();
    return;
  }
  const bool is_output = !streamed && mp == c.stage_matrix(4);
  const int rows = streamed ? c.problem().n() : static_cast<int>(mp->rows());
  const int cols = streamed ? c.problem().m() : static_cast<int>(mp->cols());
  // The sub-stages come before the mask: drawn unmasked.
  const bool masked_step = c.step_shows_mask(step) && (streamed || c.stage_matrix(step) == mp);
  const Problem& p = c.problem();
  const int col_step = step == 4 || is_output ? 4 : step;
  const std::vector<std::string>& col_labels = rope_shown ? view.dim_labels(p.d_k()) : c.column_labels(col_step);
  const std::vector<std::string>& row_labels = key_rows ? p.key_tokens() : p.query_tokens();
  const float fp = app.font_px;
  // Key tokens and output dimensions keep a cache each, so playing through the steps re-measures
  // nothing (K's rows are the key tokens: the keys' cache; Q's and K's columns: the dimensions').
  LabelSizes& row_sizes = key_rows ? app.key_sizes : app.row_sizes;
  LabelSizes& col_sizes = rope_shown || col_step == 4 ? app.dim_sizes : app.key_sizes;
  keep_label_sizes(row_sizes, c.problem_revision(), key_rows ? 1 : 0, row_labels.size());
  keep_label_sizes(col_sizes, c.problem_revision(), rope_shown ? 3 : col_step == 4 ? 2 : 1, col_labels.size());

  // Label sizes: every label when few, the widest index otherwise.
  float row_widest = 0;
  if (rows <= 64) {
    for (int r = 0; r < static_cast<int>(row_labels.size()); ++r) {
      row_widest = std::max(row_widest, label_size(row_sizes, row_labels, r).x);
    }
  } else {
    row_widest = label_size(row_sizes, row_labels, static_cast<int>(row_labels.size()) - 1).x;
  }
  // The labels are drawn at `label_scale` of the text's size: smaller only at a UI scale above the
  // default, where the text grew but the window did not and full-size labels would leave a few
  // tokens' plot small and labelled by ticks; then at the largest size, down to the text's size at
  // the default scale (as the values in the cells), at which every visible row's and column's
  // label shows whole.
  float label_scale = 1;
  const auto scaled = [&](ImVec2 v) { return ImVec2(v.x * label_scale, v.y * label_scale); };
  const auto row_size = [&](int r) { return scaled(label_size(row_sizes, row_labels, r)); };
  const auto col_size = [&](int cc) { return scaled(label_size(col_sizes, col_labels, cc)); };

  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  // Under the plot: one status line, then the selected row's bar chart (given up below where the
  // plot would otherwise be too short: the heatmap is the step). The chart: at least its title,
  // the rank numbers and about a line of bars, and the key tokens under its axis where it has its
  // own (step 4, RoPE's Q and K; at the minimum they had left the bars no room).
  const float chart_min = fp * (is_output || rope_shown ? 4.6f : 3.5f);
  float chart_h = std::clamp(avail.y * 0.18f, chart_min, fp * 7.0f);
  Rect content{origin.x, origin.y, avail.x, std::max(0.0f, avail.y - fp * 1.6f - chart_h)};
  HeatmapFrame frame;
  // The plot under `col_h` pixels of column labels, and how its column labels go (measured in the
  // labels' font: the caller has set the window's font scale to label_scale).
  const auto place = [&](float col_h) {
    const float lfp = fp * label_scale;
    frame = compute_heatmap_frame(content, row_widest * label_scale + lfp * 0.6f, col_h, fp);
    // RoPE's matrices: a few dimensions by many tokens, at least 32 px a column (not square cells).
    app.plot = place_plot(frame.plot_area.x, frame.plot_area.y, frame.plot_area.w, frame.plot_area.h, rows, cols,
                          view.zoom, rope_shown ? std::max(160.0f, 32.0f * cols) : 160.0f);
    return column_label_plan(app.plot, static_cast<int>(col_labels.size()), [&](int cc) { return col_size(cc).x; });
  };
  // Labels on two staggered lines take a second line above the plot (which narrows its cells a
  // little: the plan is made again for them). Where the narrower cells then take ticks, which fit
  // on one line, the plot is placed under one line again with ticks: the second line's room would
  // otherwise stay empty above a smaller plot.
  const auto place_all = [&] {
    const float lfp = fp * label_scale;
    ColumnLabelPlan plan = place(column_label_height({}, lfp));
    if (plan.lines == 2) {
      plan = place(column_label_height(plan, lfp));
      if (plan.stride == 1) {
        plan.lines = 2;
      } else {
        const int stride = plan.stride;
        place(column_label_height({}, lfp));
        plan = ColumnLabelPlan{};
        plan.stride = stride;
      }
    }
    return plan;
  };
  const float min_label_scale = std::clamp(1.0f / app.ui_scale, 0.5f, 1.0f);
  // Every visible label whole: columns on one line or two, unshortened; rows tall enough for
  // draw_row_ticks to label each one.
  const auto all_labels = [&](const ColumnLabelPlan& plan) {
    return plan.stride == 1 && plan.max_w == 0 && app.plot.cell_h >= fp * label_scale * 1.15f;
  };
  ColumnLabelPlan col_plan;
  const auto place_labelled = [&] {
    for (float s = 1;; s = std::max(min_label_scale, s - 0.05f)) {
      label_scale = s;
      ImGui::SetWindowFontScale(label_scale);
      col_plan = place_all();
      ImGui::SetWindowFontScale(1);
      if (all_labels(col_plan) || s <= min_label_scale) break;
    }
    if (!all_labels(col_plan) && label_scale < 1) {
      // No size shows them all: full-size labels, every few rows and columns, as at scale 1, unless
      // they leave the plot too little height (below: the small labels' room may still keep one).
      const float small = label_scale;
      label_scale = 1;
      col_plan = place_all();
      if (frame.plot_area.h < 2 * fp) {
        label_scale = small;
        ImGui::SetWindowFontScale(label_scale);
        col_plan = place_all();
        ImGui::SetWindowFontScale(1);
      }
    }
  };
  place_labelled();
  // A plot less than two lines tall or shorter than the chart under it (a large UI scale in a
  // small window, under a toolbar of several lines): the row's bar chart gives its height to the
  // plot, the step's own picture.
  if (frame.plot_area.h < std::max(2 * fp, chart_h)) {
    chart_h = 0;
    content.h = std::max(0.0f, avail.y - fp * 1.6f);
    place_labelled();
  }
  const PlotGeometry& g = app.plot;
  view.col_labels = col_plan;
  view.value_px = 0;
  const float ms = mark(app);
  // A window made smaller than its minimum (a tiling window manager, or none) leaves no plot:
  // nothing to draw, and the label strides below would never reach a cell size of 0.
  // Nor is a plot less than two lines tall (a large UI scale in a small window), which place_plot
  // would still stretch to its minimum width: a strip whose legend's numbers overlap.
  if (g.px_w <= 0 || g.px_h <= 0 || !(g.cell_w > 0) || !(g.cell_h > 0) || frame.plot_area.h < 2 * fp) {
    wrapped(app, tr(app.lang, S::PlotTooSmall), &kDimV4);
    ImGui::End();
    return;
  }
  // Only the softmax weights (never negative) get the log scale.
  const bool log_scale = app.log_weights && step == 3 && !is_output;
  const AxisMap rmap_now = map_axis(g.first_row, g.vis_rows, g.px_h, rows);
  const AxisMap cmap_now = map_axis(g.first_col, g.vis_cols, g.px_w, cols);
  // The pooled grid is this view's (not an older one stretched while the new one is computed).
  const bool pooled_current = pg && same_axes(c.pooled_view().rows, rmap_now) && same_axes(c.pooled_view().cols, cmap_now) &&
                              c.pooled_view().mode == app.pool;
  if (streamed) {
    PoolRequest view;
    view.rows = PoolAxis{rmap_now.begin, rmap_now.end};
    view.cols = PoolAxis{cmap_now.begin, cmap_now.end};
    view.mode = app.pool;
    c.set_view(view);
    if (pg) update_texture_pooled(app, *pg, step, log_scale, g.cell_w >= 8 && g.cell_h >= 8);
  } else {
    update_texture(app, view, *mp, masked_step, log_scale, rope_shown ? rope : ChainRope::QK);
  }
  // One cell's value and whether it is masked, where it is known exactly: every cell of a kept
  // stage; of a streamed one, the cells the current view shows one per pixel, and the query's row.
  const MatrixF& tmask = c.trace().mask;
  const RowStages* qrow = c.query_row();
  auto exact_cell = [&](int r, int cc, float px_x, float px_y) -> std::optional<PooledCell> {
    if (!streamed) {
      const bool mk = masked_step && tmask.size() && tmask(r % tmask.rows(), cc) != 0.0f;
      return PooledCell{(*mp)(r, cc), mk};
    }
    if (qrow && r == c.query()) {
      const std::vector<float>& v = step == 1 ? qrow->scores : step == 2 ? qrow->logits : qrow->weights;
      return PooledCell{v[cc], masked_step && qrow->mask[cc] != 0.0f};
    }
    if (!pooled_current) return std::nullopt;
    const int x = std::clamp(static_cast<int>(px_x - g.x), 0, g.px_w - 1);
    const int y = std::clamp(static_cast<int>(px_y - g.y), 0, g.px_h - 1);
    if (rmap_now.begin[y] != r || rmap_now.end[y] != r + 1 || cmap_now.begin[x] != cc || cmap_now.end[x] != cc + 1)
      return std::nullopt;
    return pg->cells[static_cast<std::size_t>(y) * pg->cols + x];
  };

  ImDrawList* dl = ImGui::GetWindowDrawList();
  // The whole plot is one invisible button: hover, drag to pan, wheel to zoom.
  ImGui::SetCursorScreenPos(ImVec2(g.x, g.y));
  // It reports a click only when the press was on it too: a release alone is no click here (a
  // click on a heads-view thumbnail opens this view between its press and its release).
  const bool clicked = ImGui::InvisibleButton("##plot", ImVec2(std::max(1.0f, g.w), std::max(1.0f, g.h)));
  const bool hovered = ImGui::IsItemHovered();
  ImGuiIO& io = ImGui::GetIO();
  if (hovered && io.MouseWheel != 0) {
    const double fx = view.zoom.x0 + (io.MousePos.x - g.x) / g.w * (view.zoom.x1 - view.zoom.x0);
    const double fy = view.zoom.y0 + (io.MousePos.y - g.y) / g.h * (view.zoom.y1 - view.zoom.y0);
    view.zoom = zoom_view(view.zoom, fx, fy, std::pow(1.25, io.MouseWheel), rows, cols);
  }
  if (ImGui::IsItemActive() && ImGui::IsMouseDragging(ImGuiMouseButton_Left, 1.0f)) {
    view.zoom = pan_view(view.zoom, -io.MouseDelta.x / g.w * (view.zoom.x1 - view.zoom.x0),
                        -io.MouseDelta.y / g.h * (view.zoom.y1 - view.zoom.y0));
  }
  // A click (released without dragging) selects the cell's query row and key; with Shift it adds
  // the row to the queries compared, or takes it out.
  if (clicked && io.MouseDragMaxDistanceSqr[0] < 16) {
    if (auto cell = hit_test(g, io.MousePos.x, io.MousePos.y)) {
      c.clear_error();
      if (key_rows) {
        app.key_sel = cell->row;  // K's rows are the keys
      } else if (io.KeyShift) {
        c.toggle_query(cell->row);
      } else {
        c.set_queries({cell->row});
        if (!is_output && !rope_shown) app.key_sel = cell->col;
      }
    }
  }
  if (app.heat_tex) {
    dl->AddImage(reinterpret_cast<ImTextureID>(app.heat_tex), ImVec2(g.x, g.y), ImVec2(g.x + g.w, g.y + g.h));
  }

  // Values inside cells when they fit (2 decimals, as the page's tables).
  const int r0 = std::max(0, static_cast<int>(std::floor(g.first_row)));
  const int r1 = std::min(rows, static_cast<int>(std::ceil(g.first_row + g.vis_rows)));
  const int c0 = std::max(0, static_cast<int>(std::floor(g.first_col)));
  const int c1 = std::min(cols, static_cast<int>(std::ceil(g.first_col + g.vis_cols)));
  // A value goes at the centre of the cell's visible part, and only where that part holds it (a
  // cell cut by the plot's edge when zoomed or panned).
  dl->PushClipRect(ImVec2(g.x, g.y), ImVec2(g.x + g.w, g.y + g.h), true);
  const bool scientific = !app.range_log && needs_scientific(app.range.lo, app.range.hi);
  // Where a cell holds "-0.00" the values are drawn at the text's size. Where it does not at a UI
  // scale above 1, they are drawn smaller, at the size the widest value in view fits its cell
  // with two pixels to spare (a column's visible span and a label's width rounded up to whole
  // pixels then never decide, column by column, which cells keep their values), down to the size
  // the text has at scale 1.
  const float dash_w = ImGui::CalcTextSize("-0.00").x;
  const float min_value_scale = std::min(1.0f, 1.0f / app.ui_scale);
  float value_scale = fit_scale(dash_w, fp, g.cell_w - 6, g.cell_h - 2, 1.0f);
  float value_w = dash_w + 6;  // the visible part of a column that holds a value
  struct CellText {
    int r, cc;
    std::string text;
    bool masked;
    ImU32 colour;
  };
  std::vector<CellText> values;
  // (Most values are at least as wide as "0.00": cells that cannot hold it at the smallest size
  // are not looked at.)
  const bool may_shrink =
      min_value_scale < 1 && fit_scale(ImGui::CalcTextSize("0.00").x, fp, g.cell_w - 4, g.cell_h - 2, min_value_scale) > 0;
  if ((value_scale > 0 || may_shrink) && (r1 - r0) * (c1 - c0) <= 4096) {
    for (int r = r0; r < r1; ++r) {
      const auto rs = visible_row_span(g, r);
      if (!rs) continue;
      for (int cc = c0; cc < c1; ++cc) {
        const auto cs = visible_col_span(g, cc);
        if (!cs) continue;
        const auto cell = exact_cell(r, cc, cs->mid(), rs->mid());
        if (!cell) continue;
        const bool is_masked = cell->masked;
        const float v = cell->value;
        ImU32 colour = IM_COL32_WHITE;
        if (!is_masked) {
          const Rgb8 bg = viridis(std::clamp(scale_pos(v, app.range, app.range_log), 0.0, 1.0));
          colour = cie_lightness(bg) > 55 ? IM_COL32_BLACK : IM_COL32_WHITE;
        }
        values.push_back({r, cc, is_masked && step == 3 ? std::string("0") : cell_label(v, scientific), is_masked, colour});
      }
    }
    if (value_scale == 0 && !values.empty()) {
      float widest = 0;
      for (const CellText& t : values) widest = std::max(widest, ImGui::CalcTextSize(t.text.c_str()).x);
      value_scale = fit_scale(widest, fp, g.cell_w - 6, g.cell_h - 2, min_value_scale);
      value_w = widest * value_scale + 4;
    }
  }
  const float value_px = fp * value_scale;
  if (!values.empty()) view.value_px = value_px;
  ImFont* font = ImGui::GetFont();
  for (const CellText& t : value_scale > 0 ? values : std::vector<CellText>{}) {
    const auto rs = visible_row_span(g, t.r);
    const auto cs = visible_col_span(g, t.cc);
    if (!rs || rs->size() < value_px + 2 || !cs || cs->size() < value_w) continue;
    // As ImGui::CalcTextSize measures (rounded up to whole pixels), at the values' size.
    const ImVec2 raw = font->CalcTextSizeA(value_px, FLT_MAX, 0.0f, t.text.data(), t.text.data() + t.text.size());
    const ImVec2 ts(std::floor(raw.x + 0.99999f), raw.y);
    if (ts.x + 4 > cs->size()) continue;  // a long label (1.3e-4) waits for more zoom
    const ImVec2 at(cs->mid() - ts.x / 2, rs->mid() - ts.y / 2);
    if (t.masked) {
      // The hatching's two greys give white text too little contrast; a dark box behind it
      // makes "−∞" read at any stripe phase.
      dl->AddRectFilled(ImVec2(at.x - 3, at.y - 1), ImVec2(at.x + ts.x + 3, at.y + ts.y + 1), IM_COL32(0, 0, 0, 200), 3);
    }
    dl->AddText(font, value_px, at, t.colour, t.text.c_str());
  }
  dl->PopClipRect();

  // Row labels (query tokens): all when they fit, else evenly spaced ticks; the query always. A
  // label sits at the centre of its row's visible part, and a row cut by the plot's edge gets one
  // only while most of a line of text's height is visible.
  const int query = c.query();
  // The row set apart: the query, or on K's rows the selected key (-1: none).
  const int marked = key_rows ? app.key_sel : query;
  // The labels in their own size (label_scale): the window's font scale sets what the draw list
  // writes and what the shortened labels are measured in.
  const float label_fp = fp * label_scale;
  ImGui::SetWindowFontScale(label_scale);
  auto row_label = [&](int r, ImU32 colour) {
    if (r >= 0 && r < rows) draw_row_label(dl, g, row_labels[r], row_size(r), r, colour, label_fp);
  };
  const ImU32 label_col = ImGui::GetColorU32(ImGuiCol_Text);
  // The ticks keep off every labelled row: the marked one, and the other selected queries.
  const std::vector<int>& queries = c.queries();
  draw_row_ticks(dl, g, row_labels, row_size, key_rows ? std::vector<int>{marked} : queries, label_col, label_fp);
  if (key_rows) {
    row_label(marked, IM_COL32_WHITE);
  } else {
    for (std::size_t i = 1; i < queries.size(); ++i) row_label(queries[i], query_colour(static_cast<int>(i)));
    row_label(query, kHighlight);
  }
  // Column labels (key tokens or output dimensions): every one where they fit, on one line or
  // two, shortened where they must be; else evenly spaced ticks.
  draw_column_labels(dl, g, col_labels, col_size, col_plan, label_col);
  ImGui::SetWindowFontScale(1);

  // K's rows: the selected key's row framed in white.
  // (Frames' sizes grow with the text: ms.)
  if (key_rows && marked >= 0 && marked < rows) {
    if (auto band = row_band(g, marked, 3 * ms))
      dl->AddRect(ImVec2(g.x - 2 * ms, band->y0 - 2 * ms), ImVec2(g.x + g.w + 2 * ms, band->y1 + 2 * ms),
                  IM_COL32(255, 255, 255, 220), 0, 0, 2 * ms);
  }
  // The other selected queries: frames in their colours, thinner; the selected query's on top.
  for (std::size_t i = 1; i < queries.size() && !key_rows; ++i)
    if (auto band = row_band(g, queries[i], 3 * ms))
      dl->AddRect(ImVec2(g.x - 2 * ms, band->y0 - 2 * ms), ImVec2(g.x + g.w + 2 * ms, band->y1 + 2 * ms),
                  query_colour(static_cast<int>(i)), 0, 0, 2 * ms);
  // Selected query row: an orange frame, at least 3 px tall so one row of 4096 stays visible.
  if (auto band = key_rows ? std::nullopt : row_band(g, query, 3 * ms)) {
    dl->AddRect(ImVec2(g.x - 2 * ms, band->y0 - 2 * ms), ImVec2(g.x + g.w + 2 * ms, band->y1 + 2 * ms), kHighlight, 0,
                0, 3 * ms);
  }
  // Selected key: a white column frame (the crosshair with the query's row), at least 3 px wide.
  if (!is_output && !rope_shown && app.key_sel >= 0 && app.key_sel < cols) {
    float x0 = col_x(g, app.key_sel), x1 = col_x(g, app.key_sel + 1.0);
    if (x1 - x0 < 3 * ms) {
      const float mid = (x0 + x1) / 2;
      x0 = mid - 1.5f * ms;
      x1 = mid + 1.5f * ms;
    }
    if (x1 > g.x && x0 < g.x + g.w) {
      dl->PushClipRect(ImVec2(g.x - 3 * ms, g.y - 3 * ms), ImVec2(g.x + g.w + 3 * ms, g.y + g.h + 3 * ms), true);
      dl->AddRect(ImVec2(x0 - ms, g.y - 2 * ms), ImVec2(x1 + ms, g.y + g.h + 2 * ms), IM_COL32(255, 255, 255, 220), 0,
                  0, 2 * ms);
      dl->PopClipRect();
    }
  }

  // Legend: colour bar from lo (bottom) to hi (top), its numbers, the masked swatch.
  {
    const Rect& L = frame.legend;
    const float bar_x = L.x + 4, bar_w = fp * 0.9f;
    // The scale's word (and the masked swatch) under the bar stay above the status line: where
    // the plot takes the panel's height, the bar gives them its foot.
    const float under = fp * (masked_step ? 2.9f : 1.6f);
    const float bar_top = g.y,
                bar_h = std::max(fp, std::min({g.h, std::max(fp * 6, L.h * 0.55f), L.bottom() - bar_top - under}));
    // A streamed problem before its first picture has no range yet: "…", not a scale of zeros.
    const std::array<std::string, 3> labels =
        streamed && !pg ? std::array<std::string, 3>{"…", "", "…"} : legend_labels(app.range, app.range_log);
    draw_colour_bar(dl, bar_x, bar_top, bar_w, bar_h, viridis_table(), labels);
    const float tx = bar_x + bar_w + 4 * ms;
    float y = bar_top + bar_h + fp * 0.6f;
    dl->AddText(ImVec2(bar_x, y), label_col,
                app.range_log ? tr(lang, S::ScaleLogShort) : tr(lang, S::Legend));
    y += fp * 1.3f;
    if (masked_step) {
      draw_hatch(dl, ImVec2(bar_x, y), ImVec2(bar_x + bar_w, y + fp), ms);
      dl->AddText(ImVec2(tx, y), label_col, tr(lang, S::Masked));
    }
  }

  // The selected row as a bar chart: its weights over the keys, aligned with the plot's columns
  // where they are the keys (steps 1-3); where they are dimensions (step 4, RoPE's Q and K) over
  // every key, in the place and width the weights' plot has at step 3, with the key tokens under
  // its axis. The three largest weights named. The other selected queries are drawn over it as
  // outlines in their colours, on the same height scale. None where the plot took its height.
  view.chart = ChainView::ChartSpan{};
  if (chart_h > 0) {
    const Trace& tr_ = c.trace();
    // The weights and mask entries of row q, from the kept stages or its exact streamed row.
    const auto weights_of = [&](int q, const float*& w, const float*& wmask) {
      w = wmask = nullptr;
      if (tr_.has_stages && tr_.weights.rows() > q) {
        w = tr_.weights.data() + static_cast<std::size_t>(q) * tr_.weights.cols();
        if (tr_.mask.size()) wmask = tr_.mask.data() + static_cast<std::size_t>(q % tr_.mask.rows()) * tr_.mask.cols();
      } else if (const RowStages* r = c.row_of(q)) {
        w = r->weights.data();
        wmask = r->mask.data();
      }
    };
    const float* w = nullptr;
    const float* wmask = nullptr;
    weights_of(query, w, wmask);
    const int m = p.m();
    const bool keys_axis = !is_output && !rope_shown;
    const PlotGeometry kg = keys_axis ? g
                                      : place_plot(frame.plot_area.x, frame.plot_area.y, frame.plot_area.w,
                                                   frame.plot_area.h, p.n(), m, HeatView{});
    const AxisMap cmap = keys_axis ? cmap_now : map_axis(0, m, kg.px_w, m);
    const float label_h = fp * 1.1f;
    const float top_y = content.bottom() + fp * 1.5f,
                base_y = top_y + chart_h - fp * 0.2f - (keys_axis ? 0.0f : label_h);
    view.chart = ChainView::ChartSpan{kg.x, kg.w, cmap.size() ? cmap.begin.front() : 0,
                                      cmap.size() ? cmap.end.back() : 0, !keys_axis, {}};
    dl->AddLine(ImVec2(kg.x, base_y), ImVec2(kg.x + kg.w, base_y), IM_COL32(120, 120, 120, 255));
    if (!keys_axis && m > 0) {
      // The key tokens under the axis: all when they fit, else evenly spaced.
      const std::vector<std::string>& keys = c.column_labels(3);
      keep_label_sizes(app.key_sizes, c.problem_revision(), 1, keys.size());
      const float key_w = kg.w / m;
      float need = label_size(app.key_sizes, keys, m - 1).x + 8;
      for (int j = 0; j < m; j += std::max(1, m / 128)) need = std::max(need, label_size(app.key_sizes, keys, j).x + 8);
      int stride = 1;
      while (stride * key_w < need) stride = stride < 2 ? 2 : stride < 5 ? 5 : stride * 2;
      for (int j = 0; j < m; j += stride) {
        const ImVec2 ts = label_size(app.key_sizes, keys, j);
        const float mid = std::clamp(kg.x + (j + 0.5f) * key_w, kg.x + ts.x / 2, kg.x + kg.w - ts.x / 2);
        dl->AddText(ImVec2(mid - ts.x / 2, base_y + 2), label_col, keys[j].c_str());
      }
    }
    // The row chart is a query's (row_labels are the keys' while K's rotated rows are shown).
    const std::vector<std::string>& query_labels = p.query_tokens();
    const std::string head = fmt(tr(lang, S::RowChartTitle), query_labels[query].c_str());
    // One line at most: the top weights that fit, then "…" (the numbers over the bars stay).
    const auto measure = [](const std::string& t) { return ImGui::CalcTextSize(t.c_str()).x; };
    std::string title = ellipsize(head, content.w, measure);
    if (w && cmap.size() == kg.px_w && m > 0) {
      const RowChart rc = row_chart(w, wmask, m, cmap, 3);
      std::vector<std::pair<int, RowChart>> others;  // (index in queries, chart)
      float scale_max = rc.max;
      for (std::size_t i = 1; i < queries.size(); ++i) {
        const float* ow = nullptr;
        const float* omask = nullptr;
        weights_of(queries[i], ow, omask);
        if (!ow) continue;
        others.emplace_back(static_cast<int>(i), row_chart(ow, omask, m, cmap, 0));
        scale_max = std::max(scale_max, others.back().second.max);
      }
      // The largest weights named in the title line, numbered; their bars orange, numbered too.
      title = fit_row_chart_title(head, rc, p.key_tokens(), content.w, measure);
      // The bars under the title line and, with other queries, under their tokens' line and the
      // width of their outlines (the outlines had run through the tokens' glyphs).
      float legend_h = 0;
      for (const auto& o : others) legend_h = std::max(legend_h, ImGui::CalcTextSize(query_labels[queries[o.first]].c_str()).y);
      const float bar_h = base_y - top_y - label_h * 2 - (others.empty() ? 0.0f : std::max(0.0f, legend_h - label_h) + 2 * ms);
      // A weight's bar height on the chart's scale (at least a pixel; 0 for none).
      const auto height = [&](float v) { return v > 0 && scale_max > 0 ? std::max(1.0f, bar_h * v / scale_max) : 0.0f; };
      const float px_w = kg.w / std::max(1, kg.px_w);
      for (int px = 0; px < kg.px_w; ++px) {
        const float h = height(rc.bins[px]);
        if (h <= 0) continue;
        dl->AddRectFilled(ImVec2(kg.x + px * px_w, base_y - h), ImVec2(kg.x + (px + 1) * px_w, base_y),
                          IM_COL32(70, 170, 160, 255));
      }
      // The top bars, then their rank numbers, each over its bar where it meets no other number
      // (neighbouring keys' numbers are moved beside or above: place_labels).
      std::vector<LabelBox> wish;
      std::vector<std::string> nums;
      for (std::size_t r = 0; r < rc.top.size(); ++r) {
        const RowChart::Top& t = rc.top[r];
        // The pixel columns the key covers (several when magnified): the mark at their middle.
        int px0 = -1, px1 = -1;
        for (int i = 0; i < cmap.size(); ++i)
          if (cmap.begin[i] <= t.key && t.key < cmap.end[i]) {
            if (px0 < 0) px0 = i;
            px1 = i;
          } else if (px0 >= 0) {
            break;
          }
        if (px0 < 0) continue;  // outside the zoomed window
        const float x = kg.x + (px0 + px1 + 1) * 0.5f * px_w;
        const float h = height(t.weight);
        const float half = std::max(ms, px_w / 2);
        dl->AddRectFilled(ImVec2(x - half, base_y - h), ImVec2(x + half, base_y), kHighlight);
        nums.push_back(std::to_string(r + 1));
        const ImVec2 ts = ImGui::CalcTextSize(nums.back().c_str());
        wish.push_back({x - ts.x / 2, base_y - h - ts.y, ts.x + fp * 0.2f, ts.y});
      }
      // The other queries: the outline of each one's bars (a step line), and its token in its
      // colour at the chart's right end.
      std::vector<LabelBox> legend;  // the other queries' tokens
      float legend_x = kg.x + kg.w;
      for (auto it = others.rbegin(); it != others.rend(); ++it) {
        const ImU32 col = query_colour(it->first);
        std::vector<ImVec2> line;
        line.reserve(2 * static_cast<std::size_t>(kg.px_w));
        for (int px = 0; px < kg.px_w; ++px) {
          const float y = base_y - height(it->second.bins[px]);
          line.emplace_back(kg.x + px * px_w, y);
          line.emplace_back(kg.x + (px + 1) * px_w, y);
        }
        dl->AddPolyline(line.data(), static_cast<int>(line.size()), col, 0, 1.5f * ms);
        const std::string& tok = query_labels[queries[it->first]];
        const ImVec2 ts = ImGui::CalcTextSize(tok.c_str());
        legend_x -= ts.x;
        dl->AddText(ImVec2(legend_x, top_y + label_h), col, tok.c_str());
        legend.push_back({legend_x, top_y + label_h, ts.x, ts.y});
        legend_x -= fp * 0.6f;
      }
      // The bars with the outlines over them as boxes (runs of one height merged): each column up
      // to the higher of its bar and the outlines (with their line's width).
      std::vector<LabelBox> bars;
      for (int px = 0; px < kg.px_w; ++px) {
        float h = height(rc.bins[px]);
        for (const auto& o : others)
          if (o.second.bins[px] > 0) h = std::max(h, height(o.second.bins[px]) + ms);
        if (h <= 0) continue;
        if (!bars.empty() && bars.back().h == h && bars.back().x + bars.back().w >= kg.x + px * px_w - 0.01f)
          bars.back().w = kg.x + (px + 1) * px_w - bars.back().x;
        else
          bars.push_back({kg.x + px * px_w, base_y - h, px_w, h});
      }
      std::vector<LabelBox> keep_off = legend;  // where the numbers must not go
      keep_off.insert(keep_off.end(), bars.begin(), bars.end());
      // The rank numbers last, over everything: each over its bar where it meets nothing, else
      // moved beside or above (place_labels).
      const std::vector<LabelBox> at = place_labels(wish, kg.x, kg.x + kg.w, top_y + label_h, keep_off);
      for (std::size_t r = 0; r < at.size(); ++r) dl->AddText(ImVec2(at[r].x, at[r].y), kHighlight, nums[r].c_str());
      view.chart.ranks = at;
      view.chart.legend = std::move(legend);
      view.chart.bars = std::move(bars);
    }
    dl->AddText(ImVec2(content.x, top_y), label_col, title.c_str());
    view.chart.title = title;
  }

  // Status lines under the plot: a run in flight, the pooling note, the streaming note. One line of
  // room: a line wider than the panel (Chinese at a large UI scale) ends in "…", whole in its tooltip.
  ImGui::SetCursorScreenPos(ImVec2(content.x, content.bottom() + fp * 0.3f));
  view.status.clear();
  if (c.busy()) {
    view.status = text_fit(fmt(tr(lang, S::Computing), 100.0 * c.progress()), kHighlightV4);
  } else if (g.pooled()) {
    const char* mode = tr(lang, app.pool == PoolMode::Max ? S::PoolMax : S::PoolMean);
    if (view.zoom.zoom() > 1.0001 || view.zoom.y1 - view.zoom.y0 < 0.9999) {
      const int vr0 = rmap_now.begin.front(), vr1 = rmap_now.end.back() - 1;
      const int vc0 = cmap_now.begin.front(), vc1 = cmap_now.end.back() - 1;
      view.status = text_fit(fmt(tr(lang, S::PooledNoteZoomed), span_text(lang, vr0, vr1, true).c_str(),
                                 span_text(lang, vc0, vc1, false).c_str(), rows, cols, g.px_h, g.px_w, mode),
                             kDimV4);
    } else {
      view.status = text_fit(fmt(tr(lang, S::PooledNote), rows, cols, g.px_h, g.px_w, mode), kDimV4);
    }
  } else if (streamed) {
    view.status = text_fit(fmt(tr(lang, S::Streamed), rows, rows, cols), kDimV4);
  }

  // Hover: the exact cell (and, when pooled, what the pixel shows).
  if (hovered) {
    if (auto cell = hit_test(g, io.MousePos.x, io.MousePos.y)) {
      const auto exact = exact_cell(cell->row, cell->col, io.MousePos.x, io.MousePos.y);
      if (g.cell_w >= 4 && g.cell_h >= 4) {
        dl->PushClipRect(ImVec2(g.x, g.y), ImVec2(g.x + g.w, g.y + g.h), true);
        dl->AddRect(ImVec2(col_x(g, cell->col), row_y(g, cell->row)),
                    ImVec2(col_x(g, cell->col + 1), row_y(g, cell->row + 1)), IM_COL32_WHITE, 0, 0, 2);
        dl->PopClipRect();
      }
      ImGui::BeginTooltip();
      const auto rc = rope_shown ? view.rope_cell(c, rope, cell->row, cell->col) : std::nullopt;
      if (rc) {
        // A RoPE matrix: the token and its position, the dimension's pair and angle, the value
        // before and after the rotation.
        ImGui::Text("%s: %s", tr(lang, S::TipStage), tr(lang, rope_label(rope)));
        ImGui::Text("%s: %s (#%d)  ·  %s %d", tr(lang, key_rows ? S::TipKey : S::TipQuery),
                    row_labels[cell->row].c_str(), cell->row, tr(lang, S::TipPosition), rc->pos);
        ImGui::Text(tr(lang, S::TipDimPair), cell->col, rc->pair, std::min(cell->col, rc->partner),
                    std::max(cell->col, rc->partner));
        ImGui::Text(tr(lang, S::TipRopeAngle), rc->pos, rc->frequency, rc->angle);
      } else {
        ImGui::Text("%s: %s", tr(lang, S::TipStage),
                    sub == ChainView::Sub::Scaled   ? tr(lang, S::SubScaled)
                    : sub == ChainView::Sub::Biased ? tr(lang, S::SubBiased)
                    : sub == ChainView::Sub::Capped ? tr(lang, S::SubCapped)
                                                    : step_name(lang, is_output ? 4 : step, c.problem()));
        ImGui::Text("%s: %s (#%d)", tr(lang, S::TipQuery), row_labels[cell->row].c_str(), cell->row);
        if (is_output) {
          ImGui::Text("%s: %d", tr(lang, S::TipOutputDim), cell->col);
        } else {
          ImGui::Text("%s: %s (#%d)", tr(lang, S::TipKey), col_labels[cell->col].c_str(), cell->col);
        }
      }
      if (!exact) {
        ImGui::TextColored(kDimV4, "%s", tr(lang, S::TipExactNeedsRow));
      } else if (exact->masked) {
        ImGui::Text("%s: %s", tr(lang, S::TipValue), tr(lang, step == 3 ? S::TipMaskedWeight : S::TipMasked));
      } else {
        ImGui::Text("%s: %.6g", tr(lang, S::TipValue), exact->value);
      }
      if (rc) ImGui::Text(tr(lang, S::TipRopeValues), rc->before, rc->after, rc->diff);
      if (g.pooled()) {
        const int px = std::clamp(static_cast<int>(io.MousePos.x - g.x), 0, g.px_w - 1);
        const int py = std::clamp(static_cast<int>(io.MousePos.y - g.y), 0, g.px_h - 1);
        // The one block this pixel pools, as rasterize's axis maps have it.
        const AxisSpan rs = axis_span(g.first_row, g.vis_rows, g.px_h, rows, py);
        const AxisSpan cs = axis_span(g.first_col, g.vis_cols, g.px_w, cols, px);
        std::optional<PooledCell> pooled;
        if (!streamed) {
          AxisMap r1m, c1m;
          r1m.begin = {rs.begin};
          r1m.end = {rs.end};
          c1m.begin = {cs.begin};
          c1m.end = {cs.end};
          pooled = pool_grid(mp->data(), rows, cols, masked_step && tmask.size() ? tmask.data() : nullptr,
                             static_cast<int>(tmask.rows()), r1m, c1m, app.pool)[0];
        } else if (pooled_current) {
          pooled = pg->cells[static_cast<std::size_t>(py) * pg->cols + px];
        }
        if (pooled) {
          const char* mode = tr(lang, app.pool == PoolMode::Max ? S::PoolMax : S::PoolMean);
          const std::string shown = pooled->masked ? std::string(tr(lang, S::Masked)) : fmt("%.4g", pooled->value);
          ImGui::TextColored(kDimV4, tr(lang, S::TipPooled), mode, span_text(lang, rs.begin, rs.end - 1, true).c_str(),
                             span_text(lang, cs.begin, cs.end - 1, false).c_str(), shown.c_str());
        }
      }
      ImGui::EndTooltip();
    }
  }
  ImGui::End();
}

}  // namespace attnlab::viewer
