// The A/B difference view (--view diff --diff KEY=VALUE,...): A is the run on screen, B the same
// inputs with the editor's changes (mask, temperature, backend, variant, precision, query), run by
// the session's worker beside A. A diverging heatmap of B − A of the current step around 0
// (symmetric range ±max|B − A|; per pixel the change of largest magnitude when pooled), its
// legend, the largest changes with their query and key tokens, both settings named. The numbers
// come from viewer/views/diff/diff_view.h.
#include "viewer/views/diff/diff_view.h"

#include "viewer/ui/kit.h"

#include "core/format.h"
#include "viewer/draw/strings.h"

#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace attnlab::viewer {
namespace {

// Four significant digits, trailing zeros kept, so that a column reads evenly (0.09000 beside 0.2867).
std::string num(double v) {
  if (v == 0) return "0";
  return format_number("%#.4g", v);
}

// A combo over an optional setting: "as A" (unset) or one of the choices.
template <class T>
void option_combo(const char* id, const char* label, std::optional<T>& v,
                  const std::vector<std::pair<T, std::string>>& choices, const char* keep, float width) {
  std::string cur = keep;
  for (const auto& [value, name] : choices)
    if (v && *v == value) cur = name;
  ImGui::TextUnformatted(label);
  ImGui::SameLine();
  ImGui::SetNextItemWidth(width);
  if (ImGui::BeginCombo(id, cur.c_str())) {
    if (ImGui::Selectable(keep, !v)) v.reset();
    for (const auto& [value, name] : choices)
      if (ImGui::Selectable(name.c_str(), v && *v == value)) v = value;
    ImGui::EndCombo();
  }
}

void editor(Shell& app, DiffView& v) {
  const Lang lang = app.lang;
  Session& c = app.session;
  const Problem& p = c.problem();
  DiffSpec& d = v.edit;
  const char* keep = tr(lang, S::DiffKeep);
  const float w = app.font_px * 6;
  ImGui::TextColored(kDimV4, "%s", tr(lang, S::DiffEditor));
  option_combo<MaskKind>("##dmask", tr(lang, S::Mask), d.mask,
                         {{MaskKind::None, tr(lang, S::MaskNone)}, {MaskKind::Causal, tr(lang, S::MaskCausal)}}, keep, w);
  ImGui::SameLine();
  bool t_on = d.temperature.has_value();
  if (ImGui::Checkbox("T##dT", &t_on)) d.temperature = t_on ? std::optional<double>(c.problem().temperature) : std::nullopt;
  if (d.temperature) {
    ImGui::SameLine();
    ImGui::SetNextItemWidth(w);
    // Any value typed: Apply refuses one the core does not take, with its message (a T <= 0 had
    // been dropped in silence).
    double t = *d.temperature;
    if (ImGui::InputDouble("##dTv", &t, 0, 0, "%.6g")) d.temperature = t;
  }
  same_line_if_fits(w * 2);
  option_combo<std::string>("##dbackend", tr(lang, S::Backend), d.backend, {{"cpu", "CPU"}, {"cuda", "CUDA"}}, keep, w);
  option_combo<Variant>("##dvariant", tr(lang, S::DiffVariant), d.variant,
                        {{Variant::Staged, tr(lang, S::SetStaged)}, {Variant::Fused, tr(lang, S::SetFused)}}, keep, w);
  ImGui::SameLine();
  option_combo<Precision>("##dprec", tr(lang, S::DiffPrecision), d.precision, {{Precision::FP32, "fp32"}, {Precision::BF16, "bf16"}}, keep, w);
  ImGui::SameLine();
  if (p.n() <= 256) {
    std::vector<std::pair<std::string, std::string>> queries;
    for (int i = 0; i < p.n(); ++i)
      queries.push_back({std::to_string(i), indexed_label(p.query_tokens(), i)});
    option_combo<std::string>("##dquery", tr(lang, S::DiffQuery), d.query, queries, keep, w * 1.3f);
  } else {
    // Thousands of rows: an index field, as the controls' query.
    bool q_on = d.query.has_value();
    if (ImGui::Checkbox(fmt("%s##dq", tr(lang, S::DiffQuery)).c_str(), &q_on))
      d.query = q_on ? std::optional<std::string>(std::to_string(c.query())) : std::nullopt;
    if (d.query) {
      ImGui::SameLine();
      ImGui::SetNextItemWidth(w);
      int qi = std::atoi(d.query->c_str());
      if (ImGui::InputInt("##dqv", &qi)) d.query = std::to_string(std::clamp(qi, 0, p.n() - 1));
    }
  }
  same_line_if_fits(button_width(tr(lang, S::DiffApply)));
  if (ImGui::Button(fmt("%s###dapply", tr(lang, S::DiffApply)).c_str())) {
    v.apply(c, d);
  }
  if (!v.edit_error().empty())
    wrapped(app, std::string(tr(lang, S::ErrorPrefix)) + v.edit_error().text(lang), &kErrorV4);
}

// A change's B − A as the table prints it.
std::string diff_text(const Change& t) { return format_number("%+#.4g", t.diff); }

// The widths the largest changes' table needs to show every cell whole: all six columns, and the
// narrow table's four (#, query, key, B − A); each column its widest text (header or cell) with
// the cell padding, plus the vertical scroll bar.
struct TopWidths {
  float full = 0, narrow = 0;
};
TopWidths top_table_widths(Shell& app, const DiffView& v, const std::vector<std::string>& rows,
                           const std::vector<std::string>& cols) {
  const Lang lang = app.lang;
  const auto w = [](const std::string& s) { return ImGui::CalcTextSize(s.c_str()).x; };
  float c[6] = {w("#"), w(tr(lang, S::DiffColQuery)), w(tr(lang, v.step() == 4 ? S::TipOutputDim : S::DiffColKey)),
                w(tr(lang, S::DiffTipA)), w(tr(lang, S::DiffTipB)), w(tr(lang, S::DiffTipDiff))};
  int rank = 0;
  for (const Change& t : v.top()) {
    c[0] = std::max(c[0], w(std::to_string(++rank)));
    c[1] = std::max(c[1], w(t.row < static_cast<int>(rows.size()) ? rows[t.row] : "?"));
    c[2] = std::max(c[2], w(t.col < static_cast<int>(cols.size()) ? cols[t.col] : "?"));
    c[3] = std::max(c[3], w(num(t.a)));
    c[4] = std::max(c[4], w(num(t.b)));
    c[5] = std::max(c[5], w(diff_text(t)));
  }
  const ImGuiStyle& st = ImGui::GetStyle();
  const float pad = st.CellPadding.x * 2 + 1, edge = st.ScrollbarSize + 2;
  TopWidths out;
  out.narrow = c[0] + c[1] + c[2] + c[5] + 4 * pad + edge;
  out.full = out.narrow + c[3] + c[4] + 2 * pad;
  return out;
}

// The largest changes. Narrow (a panel too narrow for the map beside all six columns: a large UI
// scale, a small window): #, query, key and B − A, with each row's A and B in the row's tooltip.
void top_table(Shell& app, const DiffView& v, const std::vector<std::string>& rows, const std::vector<std::string>& cols,
               float height, bool narrow) {
  const Lang lang = app.lang;
  ImGui::TextColored(kHighlightV4, "%s", tr(lang, S::DiffTop));
  const ImGuiTableFlags flags = ImGuiTableFlags_Borders | ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollY |
                                ImGuiTableFlags_SizingFixedFit;
  if (!ImGui::BeginTable("##diff_top", narrow ? 4 : 6, flags, ImVec2(0, height))) return;
  ImGui::TableSetupScrollFreeze(0, 1);
  ImGui::TableSetupColumn("#");
  ImGui::TableSetupColumn(tr(lang, S::DiffColQuery));
  ImGui::TableSetupColumn(tr(lang, v.step() == 4 ? S::TipOutputDim : S::DiffColKey));
  if (!narrow) {
    ImGui::TableSetupColumn(tr(lang, S::DiffTipA));
    ImGui::TableSetupColumn(tr(lang, S::DiffTipB));
  }
  ImGui::TableSetupColumn(tr(lang, S::DiffTipDiff), ImGuiTableColumnFlags_WidthStretch);
  ImGui::TableHeadersRow();
  int rank = 0;
  for (const Change& t : v.top()) {
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ++rank;
    if (narrow) {
      // The rank as a selectable across the row: the row's hover shows its A and B.
      ImGui::Selectable(fmt("%d##top%d", rank, rank).c_str(), false, ImGuiSelectableFlags_SpanAllColumns);
      if (ImGui::IsItemHovered())
        ImGui::SetTooltip("%s: %s\n%s: %s", tr(lang, S::DiffTipA), num(t.a).c_str(), tr(lang, S::DiffTipB), num(t.b).c_str());
    } else {
      ImGui::Text("%d", rank);
    }
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(t.row < static_cast<int>(rows.size()) ? rows[t.row].c_str() : "?");
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(t.col < static_cast<int>(cols.size()) ? cols[t.col].c_str() : "?");
    if (!narrow) {
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(num(t.a).c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(num(t.b).c_str());
    }
    ImGui::TableNextColumn();
    ImGui::TextColored(t.diff > 0 ? ImVec4(1.0f, 0.55f, 0.5f, 1) : ImVec4(0.55f, 0.75f, 1.0f, 1), "%s",
                       diff_text(t).c_str());
  }
  ImGui::EndTable();
}

}  // namespace

void draw_panel(DiffView& v, Shell& app, const Layout& l) {
  const Lang lang = app.lang;
  Session& c = app.session;
  const int step = v.open_at(app.play.step());
  if (step != app.play.step()) app.play.set_step(step);
  const DiffView::Status st = v.update(c, step);
  const int shown = st == DiffView::Status::Ok ? v.step() : step;
  const std::string title = fmt("%s  ·  %s  ·  %s###heatmap", tr(lang, S::ViewDiff),
                                fmt(tr(lang, S::StepOf), shown).c_str(), step_name(lang, shown, c.problem()));
  // The centre and the right column: the map on the left, the largest changes beside it.
  begin_wide(l, title, ImGuiWindowFlags_NoScrollWithMouse);
  v.panel = {ImGui::GetWindowPos().x, ImGui::GetWindowSize().x};
  // B's editor, both settings and the explanation, scrolled where with them the map would keep
  // less than its minimum: the figures and the map's controls as laid out (below_h), the column
  // labels and a map 5 lines tall.
  begin_header(v.header, "##diff_head", v.below_h + map_min_height());
  editor(app, v);
  const Problem& p = c.problem();
  const RunSetting a = c.setting();
  wrapped(app, fmt(tr(lang, S::DiffA), setting_text(a, p, lang).c_str()));
  const DiffResult* r = diff_of(c);
  if (r) {
    // B's query is the spec's, or else A's current one (the map does not depend on it then).
    RunSetting b = r->b_setting;
    if (!r->spec.query) b.query = a.query;
    wrapped(app, fmt(tr(lang, S::DiffB), setting_text(b, p, lang, &a).c_str()), &kHighlightV4);
  }
  wrapped_capped(app, tr(lang, S::DiffDescription), kExplanationShare, &kDimV4);
  end_header(v.header);
  const float below_top = ImGui::GetCursorPosY();
  switch (st) {
    case DiffView::Status::Streamed:
      wrapped(app, fmt(tr(lang, S::DiffNeedsStages), kKeepStagesMaxTokens, c.n(), kKeepStagesMaxTokens), &kHighlightV4);
      ImGui::End();
      return;
    case DiffView::Status::NoSpec:
      wrapped(app, tr(lang, S::DiffNoSpec), &kHighlightV4);
      ImGui::End();
      return;
    case DiffView::Status::Failed:
      wrapped(app, fmt(tr(lang, S::DiffBError), r->b_error.text(lang).c_str()), &kErrorV4);
      ImGui::End();
      return;
    case DiffView::Status::Computing:
      ImGui::TextColored(kHighlightV4, "%s", tr(lang, S::DiffComputing));
      ImGui::End();
      return;
    case DiffView::Status::Ok: break;
  }
  const DiffMap& m = v.map();
  if (v.output_only()) wrapped(app, tr(lang, S::FusedOnlyOutput), &kHighlightV4);
  if (v.query_diff()) wrapped(app, tr(lang, S::DiffQueryNote), &kDimV4);
  if (v.same_run()) wrapped(app, tr(lang, S::DiffSameRun), &kHighlightV4);
  // Row labels: the query tokens, or for a query diff the one row "B's token − A's token".
  std::vector<std::string> one_row;
  if (v.query_diff())
    one_row = {token_label(p.query_tokens(), r->b_setting.query) + " − " + token_label(p.query_tokens(), a.query)};
  const std::vector<std::string>& rows = v.query_diff() ? one_row : p.query_tokens();
  const std::vector<std::string>& cols = c.column_labels(shown);
  if (m.max_abs == 0) {
    // Where a mask differs, the cells it masks are not "the same": the sentence says which agree.
    v.summary = m.masked > 0 ? fmt(tr(lang, S::DiffIdenticalMasked), m.masked) : std::string(tr(lang, S::DiffIdentical));
    wrapped(app, v.summary, &kHighlightV4);
    if (!v.query_diff() && shown < diff_first_step(r->spec)) wrapped(app, tr(lang, S::DiffBeforeChange), &kHighlightV4);
  } else {
    v.summary = fmt(tr(lang, S::DiffSummary), num(m.max_abs).c_str(), num(m.mean_abs).c_str(), m.changed,
                    m.rows * m.cols - m.masked) +
                "  ·  " +
                fmt(tr(lang, S::DiffMaxAt), rows[m.arg_row].c_str(),
                    m.arg_col < static_cast<int>(cols.size()) ? cols[m.arg_col].c_str() : "?");
    wrapped(app, v.summary, &kHighlightV4);
  }
  map_view_controls(app, false);
  v.below_h = ImGui::GetCursorPosY() - below_top;
  const float fp = app.font_px;
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  // The table beside the map, as wide as its cells need (a third of the panel where that is more,
  // up to 28 lines), narrow where all its columns would leave the map less than its minimum width
  // (the row labels, a plot 8 lines wide and the legend).
  const TopWidths need = top_table_widths(app, v, rows, cols);
  const float full_w = std::max(need.full, std::min(avail.x * 0.3f, fp * 28));
  v.table_narrow = avail.x - full_w - fp < fp * kMapMinWidthLines;
  const float table_w = v.table_narrow ? std::max(need.narrow, fp * 10) : full_w;
  v.table_w = table_w;
  v.table_need = v.table_narrow ? need.narrow : need.full;
  const float table_h = std::max(0.0f, avail.y - ImGui::GetTextLineHeightWithSpacing());
  const Rect area{origin.x, origin.y + fp * 0.3f, std::max(0.0f, avail.x - table_w - fp), std::max(0.0f, avail.y - fp * 0.3f)};
  const ValueRange range = symmetric_range(m);
  char key[160];
  std::snprintf(key, sizeof key, "diff|%llu|%d|%d", static_cast<unsigned long long>(c.revision()), shown, v.computed());
  const MapPlot mp =
      draw_map(app, area, m.rows, m.cols, rows, cols, v.query_diff() ? -1 : c.query(), key, [&](const PlotGeometry& g) {
        const AxisMap rmap = map_axis(g.first_row, g.vis_rows, g.px_h, m.rows);
        const AxisMap cmap = map_axis(g.first_col, g.vis_cols, g.px_w, m.cols);
        return rasterize_cells(pool_signed(m, rmap, cmap), rmap, cmap, range, false, g.cell_w >= 8 && g.cell_h >= 8,
                               &diverging_table());
      });
  app.range = range;
  app.range_log = false;
  v.map_too_small = mp.too_small;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  if (mp.g.px_w > 0) {
    const Rect& L = mp.legend;
    const float bar_h = std::min(mp.g.h, std::max(fp * 6, L.h * 0.55f));
    draw_colour_bar(dl, L.x, mp.g.y, fp * 0.9f, bar_h, diverging_table(), legend_labels(range, false));
    float y = mp.g.y + bar_h + fp * 0.6f;
    // The legend's words broken by the lab's line breaking (ImGui's breaks at spaces only: "A 或 B"
    // | "中被屏蔽（−∞）"); the masked swatch's words in two parts, what and where, each its line.
    ImGui::SetCursorScreenPos(ImVec2(L.x, y));
    ImGui::BeginGroup();  // every line at the legend's x
    wrapped_at(app, tr(lang, S::DiffLegend), L.w);
    ImGui::EndGroup();
    y = ImGui::GetCursorScreenPos().y + fp * 0.2f;
    if (m.masked > 0) {
      draw_hatch(dl, ImVec2(L.x, y), ImVec2(L.x + fp * 0.9f, y + fp), mark(app));
      ImGui::SetCursorScreenPos(ImVec2(L.x + fp * 1.2f, y));
      ImGui::BeginGroup();
      wrapped_at(app, tr(lang, S::DiffMaskedSwatch), L.w - fp * 1.2f);
      wrapped_at(app, tr(lang, S::DiffMaskedWhere), L.w - fp * 1.2f, &kDimV4);
      ImGui::EndGroup();
      y = ImGui::GetCursorScreenPos().y + fp * 0.2f;
    }
    pooled_map_note(app, mp.g, L.x, y, L.w, tr(lang, S::PoolLargestChange));
  }
  ImGui::SetCursorScreenPos(ImVec2(area.right() + fp, origin.y));
  ImGui::BeginGroup();
  top_table(app, v, rows, cols, table_h, v.table_narrow);
  ImGui::EndGroup();

  if (mp.hover) {
    const auto [va, vb] = v.values(c, mp.hover->row, mp.hover->col);
    const float dv = m.at(mp.hover->row, mp.hover->col);
    ImGui::BeginTooltip();
    ImGui::Text("%s: %s", tr(lang, S::TipStage), step_name(lang, shown, c.problem()));
    // The query with its index, as the key (a query diff's one row is "B's token − A's token").
    if (v.query_diff())
      ImGui::Text("%s: %s", tr(lang, S::TipQuery), rows[mp.hover->row].c_str());
    else
      ImGui::Text("%s: %s (#%d)", tr(lang, S::TipQuery), rows[mp.hover->row].c_str(), mp.hover->row);
    ImGui::Text("%s: %s (#%d)", tr(lang, shown == 4 ? S::TipOutputDim : S::TipKey),
                mp.hover->col < static_cast<int>(cols.size()) ? cols[mp.hover->col].c_str() : "?", mp.hover->col);
    ImGui::Text("%s: %.9g", tr(lang, S::DiffTipA), va);
    ImGui::Text("%s: %.9g", tr(lang, S::DiffTipB), vb);
    if (std::isnan(dv)) {
      ImGui::Text("%s: %s", tr(lang, S::DiffTipDiff), tr(lang, S::DiffMaskedLegend));
    } else {
      ImGui::Text("%s: %+.6g", tr(lang, S::DiffTipDiff), dv);
    }
    ImGui::EndTooltip();
  }
  ImGui::End();
}

}  // namespace attnlab::viewer
