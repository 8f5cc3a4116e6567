// The walk view (--view walk): the CPU fused kernel's online softmax of the selected query row,
// key tile by key tile. A row strip of the query's logits (keys pooled to the pixels there are)
// with the current tile framed, consumed tiles marked under the strip and skipped tiles hatched;
// the sentence of the current tile; a running table of (tile, keys, tile max, m, α, l, output so
// far); small charts of m, l and the distance of the output so far to the staged output; the
// output row against the staged one with the final differences and the fp64 error; the tile size
// control. The walk itself comes from viewer/views/walk/walk_view.h (the kernel's own update step), computed
// on the UI thread for one row (O(m d)) and cached by (revision, query, tile).
// The backward pass (the Forward / Backward switch): the same strip, tiles and keys over the fused
// backward's walk of the row (the view's companion, computed on the session's worker): the tile's
// sentence, m, l, L and D, the tile's table of x_j, P_j, dP_j, dS_j (bars when it has more keys than
// rows fit), charts of Σ dS and |dQ| so far, the running dQ against the fused backward's and fp64's.
// Why a row strip and not the whole matrix: the walk is per query row (the kernel's state m, l,
// acc is per row), and a strip works the same at 5 and at 4096 tokens without any N x N buffer.
#include "viewer/views/walk/walk_view.h"

#include "viewer/ui/kit.h"

#include "core/format.h"
#include "cpu/walk_backward.h"
#include "viewer/draw/colormap.h"
#include "viewer/draw/strings.h"

#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

namespace attnlab::viewer {
namespace {

constexpr ImU32 kConsumed = IM_COL32(0, 190, 190, 255);  // teal: outside viridis' yellow end


template <class Tile>
std::string key_range(const Tile& t) {
  return t.j1 - t.j0 == 1 ? std::to_string(t.j0) : std::to_string(t.j0) + "–" + std::to_string(t.j1 - 1);
}

// `scale`: the stripes' width and spacing (mark).
void hatch(ImDrawList* dl, ImVec2 a, ImVec2 b, float scale) {
  dl->AddRectFilled(a, b, IM_COL32(kMaskLight.r, kMaskLight.g, kMaskLight.b, 255));
  dl->PushClipRect(a, b, true);
  for (float x = a.x - (b.y - a.y); x < b.x; x += 7 * scale)
    dl->AddLine(ImVec2(x, b.y), ImVec2(x + (b.y - a.y), a.y), IM_COL32(kMaskDark.r, kMaskDark.g, kMaskDark.b, 255),
                3 * scale);
  dl->PopClipRect();
}

// The pass switch, the tile size, the stepping buttons and where the cursor is (w: the walk shown,
// null while there is none).
template <class W>
void tile_controls(Shell& app, WalkView& v, const W* w, int tile) {
  const Lang lang = app.lang;
  ImGui::TextUnformatted(wbtr(lang, WB::Pass));
  for (const WalkPass p : {WalkPass::Forward, WalkPass::Backward}) {
    const char* word = wbtr(lang, p == WalkPass::Forward ? WB::Forward : WB::Backward);
    ImGui::SameLine();
    if (ImGui::RadioButton(word, v.pass() == p)) v.set_pass(p);
  }
  const std::vector<int> choices = walk_tile_choices(app.session.problem().m(), tile);
  same_line_if_fits(text_width(tr(lang, S::WalkTileSize)) + app.font_px * 6);
  ImGui::TextUnformatted(tr(lang, S::WalkTileSize));
  ImGui::SameLine();
  ImGui::SetNextItemWidth(app.font_px * 5);
  if (ImGui::BeginCombo("##walk_tile", std::to_string(tile).c_str())) {
    for (int b : choices)
      if (ImGui::Selectable(std::to_string(b).c_str(), b == tile)) v.tile = b;
    ImGui::EndCombo();
  }
  same_line_if_fits(button_width(tr(lang, S::WalkFirst)));
  if (ImGui::Button(tr(lang, S::WalkFirst))) v.home();
  same_line_if_fits(button_width(tr(lang, S::Prev)));
  if (ImGui::Button(tr(lang, S::Prev))) v.prev();
  same_line_if_fits(button_width(tr(lang, S::Next)));
  if (ImGui::Button(tr(lang, S::Next))) v.next();
  const char* play = tr(lang, v.playing() ? S::Pause : S::Play);
  same_line_if_fits(button_width(play));
  if (ImGui::Button(play)) v.toggle_play();
  if (w && v.cursor() < static_cast<int>(w->tiles.size())) {
    const auto& t = w->tiles[v.cursor()];
    const std::string where =
        fmt(wbtr(lang, WB::TileOf), t.index, static_cast<int>(w->tiles.size()), key_range(t).c_str());
    same_line_if_fits(text_width(where.c_str()));
    // On a line of its own still wider than the panel (a large UI scale): "…", the whole in its tooltip.
    text_fit(where, ImGui::GetStyleColorVec4(ImGuiCol_Text));
  }
}

template <class W>
void strip(Shell& app, WalkView& v, const W& w, const std::string& caption) {
  wrapped(app, caption, &kDimV4);  // a long query token or a large UI scale: wrapped, never cut at the edge
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 at = ImGui::GetCursorScreenPos();
  const float width = std::max(32.f, ImGui::GetContentRegionAvail().x - 4);
  const float h = app.font_px * 2.0f, bar = std::max(4.f, app.font_px * 0.3f);
  const std::vector<StripBin> bins = walk_strip(w, static_cast<int>(width));
  const auto [lo, hi] = walk_logit_range(w);
  const int cursor = v.cursor();
  const float per_key = width / static_cast<float>(w.keys);
  auto x_of = [&](int key) { return at.x + 2 + per_key * static_cast<float>(key); };
  const float ms = mark(app);  // the frame and the stripes grow with the text
  const float y0 = at.y + 2 * ms, y1 = y0 + h;
  for (const StripBin& b : bins) {
    const ImVec2 a(x_of(b.j0), y0), c(std::max(x_of(b.j1), x_of(b.j0) + 1), y1);
    if (w.tiles[b.tile].skipped) continue;  // hatched per tile below
    if (b.masked) {
      dl->AddRectFilled(a, c, IM_COL32(kMaskDark.r, kMaskDark.g, kMaskDark.b, 255));
      continue;
    }
    const Rgb8 col = viridis(hi > lo ? (b.value - lo) / (hi - lo) : 0.5);
    dl->AddRectFilled(a, c, IM_COL32(col.r, col.g, col.b, 255));
  }
  for (const auto& t : w.tiles) {
    const ImVec2 a(x_of(t.j0), y0), c(x_of(t.j1), y1);
    const TileState s = walk_tile_state(w, t.index, cursor);
    if (s == TileState::Skipped) hatch(dl, a, c, ms);
    if (s == TileState::Consumed) dl->AddRectFilled(ImVec2(a.x, y1 + 3), ImVec2(c.x - 1, y1 + 3 + bar), kConsumed);
    if (s == TileState::Pending) dl->AddRectFilled(a, c, IM_COL32(0, 0, 0, 110));  // not loaded yet
    if (per_key * static_cast<float>(w.tile) >= 6 && t.index > 0)
      dl->AddLine(ImVec2(a.x, y0), ImVec2(a.x, y1), IM_COL32(20, 20, 24, 255), 1);
  }
  const auto& cur = w.tiles[cursor];
  dl->AddRect(ImVec2(x_of(cur.j0) - 2 * ms, y0 - 2 * ms), ImVec2(x_of(cur.j1) + 2 * ms, y1 + 2 * ms), kHighlight, 0, 0,
              3 * ms);
  v.strip = {at.x + 2, y0, width, h, static_cast<int>(bins.size())};
  ImGui::Dummy(ImVec2(width + 4, h + bar + 6 + 2 * ms));
  ImGui::TextColored(kDimV4, "x: %s … %s", value4(lo).c_str(), value4(hi).c_str());
}

void running_table(Shell& app, WalkView& v, const Walk& w, float height) {
  const Lang lang = app.lang;
  const int cursor = v.cursor();
  const ImGuiTableFlags flags = ImGuiTableFlags_Borders | ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollY |
                                ImGuiTableFlags_SizingFixedFit;
  // The last column's header as the last frame broke it into lines (one until it is drawn): the
  // table ends under its last row.
  static int scrolled_to = -1;
  static std::string last_header;
  const int header_lines = 1 + static_cast<int>(std::count(last_header.begin(), last_header.end(), '\n'));
  if (!ImGui::BeginTable("##walk_table", 7, flags,
                         ImVec2(0, table_fit_height(static_cast<int>(w.tiles.size()) + header_lines, height))))
    return;
  ImGui::TableSetupScrollFreeze(0, 1);
  ImGui::TableSetupColumn(tr(lang, S::WalkColTile));
  ImGui::TableSetupColumn(tr(lang, S::WalkColKeys));
  ImGui::TableSetupColumn(tr(lang, S::WalkColTileMax));
  ImGui::TableSetupColumn("m");
  ImGui::TableSetupColumn("α");
  ImGui::TableSetupColumn("l");
  ImGui::TableSetupColumn(tr(lang, S::WalkColOutput), ImGuiTableColumnFlags_WidthStretch);
  // The headers as TableHeadersRow draws them, the last one (the column that takes what the others
  // leave) broken into lines at its width rather than cut.
  ImGui::TableNextRow(ImGuiTableRowFlags_Headers);
  for (int col = 0; col < 7; ++col) {
    if (!ImGui::TableSetColumnIndex(col)) continue;
    const char* name = ImGui::TableGetColumnName(col);
    ImGui::PushID(col);
    if (col < 6) {
      ImGui::TableHeader(name);
    } else {
      const std::string header = wrapped_text(app, name, ImGui::GetContentRegionAvail().x, true);
      // A header that takes another line moves the rows: the cursor's row is scrolled to again.
      if (header != last_header) scrolled_to = -1;
      last_header = header;
      ImGui::TableHeader(header.c_str());
    }
    ImGui::PopID();
  }
  ImGuiListClipper clip;
  clip.Begin(static_cast<int>(w.tiles.size()));
  if (scrolled_to != cursor) clip.ForceDisplayRangeByIndices(cursor, cursor + 1);
  std::optional<std::size_t> shown;  // the values each output cell shows this frame
  while (clip.Step()) {
    for (int i = clip.DisplayStart; i < clip.DisplayEnd; ++i) {
      const WalkTile& t = w.tiles[i];
      ImGui::TableNextRow();
      const bool pending = i > cursor;
      if (i == cursor) ImGui::TableSetBgColor(ImGuiTableBgTarget_RowBg1, IM_COL32(120, 70, 0, 150));
      if (pending) ImGui::PushStyleColor(ImGuiCol_Text, ImVec4(0.5f, 0.5f, 0.5f, 1.f));
      ImGui::TableNextColumn();
      ImGui::Text("%d", t.index);
      if (i == cursor && scrolled_to != cursor) {
        ImGui::SetScrollHereY(0.5f);
        scrolled_to = cursor;
      }
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(key_range(t).c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(t.skipped ? tr(lang, S::WalkSkipped) : value4(t.tile_max).c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(value4(t.m).c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(t.skipped ? "—" : value4(t.alpha).c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(value4(t.l).c_str());
      ImGui::TableNextColumn();
      if (t.output.empty()) {
        ImGui::TextUnformatted(tr(lang, S::WalkNothingYet));
      } else {
        // The first three values, or as many as the column holds on every row in view and the
        // cursor's, the same count on each ("[0.006022, …]"); never a number cut short ("[…]": the
        // row under the table has them). Decided once a frame at the first such cell, where the
        // column's width is known, over the rows the table's scroll shows (not the clipper's step,
        // whose first is row 0 alone).
        if (!shown)
          shown = values_fitting(static_cast<int>(w.tiles.size()), cursor, 3,
                                 [&](int r) -> const std::vector<double>& { return w.tiles[r].output; });
        ImGui::TextUnformatted(*shown == 0 ? "[…]" : values4(t.output, *shown).c_str());
      }
      if (pending) ImGui::PopStyleColor();
    }
  }
  ImGui::EndTable();
}

// `later`: how many charts come after this one in the column, each wanting its title's lines.
void chart(Shell& app, const char* label, const std::vector<float>& values, int count, float width, int later) {
  // The x axis always spans every tile; the line ends at the last tile with a value (the cursor).
  count = std::max(count, 1);
  const WalkChartScale s = walk_chart_scale(values);
  // The title wrapped to the column, so that its range is never cut off; the range on one line,
  // beside the title where it fits, else under it.
  std::string range = s.from == s.to ? std::string("= ") : std::string("[");
  range += value4(s.from);
  if (s.from != s.to) range += " … " + value4(s.to) + "]";
  wrapped(app, label, &kDimV4);
  same_line_if_fits(ImGui::CalcTextSize(range.c_str()).x + ImGui::GetStyle().ItemSpacing.x);
  ImGui::TextColored(kDimV4, "%s", range.c_str());
  const float title_h = 2 * ImGui::GetTextLineHeightWithSpacing();
  const float height = std::max(app.font_px * 1.5f, (ImGui::GetContentRegionAvail().y - later * title_h) / (later + 1) -
                                                         ImGui::GetStyle().ItemSpacing.y);
  // PlotLines' frame and colours, drawn here: PlotLines clamps a missing value onto its bottom edge.
  const ImGuiStyle& st = ImGui::GetStyle();
  const ImVec2 p0 = ImGui::GetCursorScreenPos(), p1(p0.x + width, p0.y + height);
  ImGui::InvisibleButton(fmt("##%s", label).c_str(), ImVec2(width, height));
  ImDrawList* dl = ImGui::GetWindowDrawList();
  dl->AddRectFilled(p0, p1, ImGui::GetColorU32(ImGuiCol_FrameBg), st.FrameRounding);
  const ImVec2 in0(p0.x + st.FramePadding.x, p0.y + st.FramePadding.y);
  const std::vector<WalkChartPoint> pts = walk_chart_points(values, count, s, std::max(1.0f, width - 2 * st.FramePadding.x),
                                                            std::max(1.0f, height - 2 * st.FramePadding.y));
  const ImU32 col = ImGui::GetColorU32(ImGuiCol_PlotLines);
  const auto at = [&](const WalkChartPoint& q) { return ImVec2(in0.x + q.x, in0.y + q.y); };
  if (count == 1 && pts[0].has) {  // one tile (all keys in one): its value across the chart
    dl->AddLine(ImVec2(p0.x + st.FramePadding.x, at(pts[0]).y), ImVec2(p1.x - st.FramePadding.x, at(pts[0]).y), col);
  }
  for (std::size_t i = 0; i + 1 < pts.size(); ++i)
    if (pts[i].has && pts[i + 1].has) dl->AddLine(at(pts[i]), at(pts[i + 1]), col);
  for (const WalkChartPoint& q : pts)
    if (q.has) dl->AddCircleFilled(at(q), std::max(1.5f, app.font_px * 0.1f), col);
  if (ImGui::IsItemHovered()) {  // the nearest tile's value, as PlotLines' tooltip gave it
    const float x = ImGui::GetIO().MousePos.x - in0.x;
    std::size_t best = 0;
    for (std::size_t i = 1; i < pts.size(); ++i)
      if (std::abs(pts[i].x - x) < std::abs(pts[best].x - x)) best = i;
    if (pts[best].has) ImGui::SetTooltip("%d: %s", static_cast<int>(best), value4(values[best]).c_str());
  }
}

struct Series {
  const char* label;
  std::vector<float> values;
};

// The band between the strip and the rows at the bottom (`bottom` pixels left under it, `need`
// pixels at least: the window scrolls to the rows then): `left` (a table; called with its width
// and height) beside a column of charts over `count` tiles. Where `left` would get less than
// `left_w` pixels beside the charts (a large UI scale), it takes the whole width and the charts
// go under it, each band at least `need` tall (the window scrolls).
template <class Left>
WalkView::Middle middle(Shell& app, float bottom, float need, float left_w, int count, const std::vector<Series>& charts,
                        Left left) {
  const float mid = std::max(need, ImGui::GetContentRegionAvail().y - bottom);
  const float width = ImGui::GetContentRegionAvail().x;
  const float chart_w = std::max(app.font_px * 8, width * 0.34f);
  const bool stacked = width - chart_w - 8 < left_w;
  const float lw = stacked ? width : width - chart_w - 8, cw = stacked ? width : chart_w;
  const float band = stacked ? std::max(need, mid * 0.5f) : mid;  // each of the two bands' height
  ImGui::BeginChild("##walk_left", ImVec2(lw, band), false);
  left(lw, band);
  ImGui::EndChild();
  if (!stacked) ImGui::SameLine();
  ImGui::BeginChild("##walk_charts", ImVec2(cw, band), false);
  const int n = static_cast<int>(charts.size());
  for (int i = 0; i < n; ++i) chart(app, charts[i].label, charts[i].values, count, cw - 4, n - 1 - i);
  ImGui::EndChild();
  return {lw, stacked};
}

void output_rows(Shell& app, WalkView& v, const Walk& w) {
  const Lang lang = app.lang;
  const WalkTile& t = w.tiles[v.cursor()];
  // As many of the first 8 values as fit beside the longer label (as the backward's dQ rows).
  const float label = std::max(text_width(tr(lang, S::WalkOutputNow)), text_width(tr(lang, S::WalkStaged)));
  const float room = ImGui::GetContentRegionAvail().x - label - app.font_px;
  const int dims = std::clamp(static_cast<int>(room / (app.font_px * 4.6f)), 1, std::min(w.d_v, 8));
  if (ImGui::BeginTable("##walk_out", dims + 1, ImGuiTableFlags_Borders | ImGuiTableFlags_SizingFixedFit)) {
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(tr(lang, S::WalkOutputNow));
    for (int c = 0; c < dims; ++c) {
      ImGui::TableNextColumn();
      ImGui::TextColored(kHighlightV4, "%s", t.output.empty() ? "—" : value4(t.output[c]).c_str());
    }
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(tr(lang, S::WalkStaged));
    for (int c = 0; c < dims; ++c) {
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(c < static_cast<int>(w.staged_output.size()) ? value4(w.staged_output[c]).c_str() : "—");
    }
    ImGui::EndTable();
  }
  wrapped(app, fmt(tr(lang, S::WalkFinal), format_number("%.3g", w.max_abs_diff).c_str(),
                   format_number("%.3g", w.cpu_fused_diff).c_str(), format_number("%.3g", w.fp64_error).c_str()));
}

// The tile's keys, one row each: x_j, P_j, dP_j, dS_j; the key the tile pushes most in orange.
void key_table(Shell& app, const BackwardWalk& w, const BackwardWalkTile& t, float height) {
  const ImGuiTableFlags flags = ImGuiTableFlags_Borders | ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollY |
                                ImGuiTableFlags_SizingFixedFit;
  if (!ImGui::BeginTable("##walk_back_keys", 5, flags, ImVec2(0, table_fit_height(t.j1 - t.j0 + 1, height)))) return;
  ImGui::TableSetupScrollFreeze(0, 1);
  ImGui::TableSetupColumn(wbtr(app.lang, WB::ColKey));
  for (const char* h : {"x_j", "P_j", "dP_j", "dS_j"}) ImGui::TableSetupColumn(h);
  ImGui::TableHeadersRow();
  for (int j = t.j0; j < t.j1; ++j) {
    const int i = j - t.j0;
    ImGui::TableNextRow();
    if (j == t.top) ImGui::TableSetBgColor(ImGuiTableBgTarget_RowBg1, IM_COL32(120, 70, 0, 150));
    ImGui::TableNextColumn();
    // Random inputs name each token by its index: the number once, not twice.
    if (w.key_tokens[j] == std::to_string(j))
      ImGui::Text("%d", j);
    else
      ImGui::Text("%d %s", j, w.key_tokens[j].c_str());
    for (const double x : {t.logits[i], t.p[i], t.dp[i], t.ds[i]}) {
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(value4(x).c_str());
    }
  }
  ImGui::EndTable();
}

// A tile with more keys than rows fit: P_j and dS_j as bars, keys pooled to the width there is.
void key_bars(Shell& app, const BackwardWalkTile& t, float width) {
  const int bins = std::max(1, std::min(t.j1 - t.j0, static_cast<int>(width / 3)));
  const std::vector<float> p = walk_bars(t.p, bins), ds = walk_bars(t.ds, bins);
  wrapped(app, fmt(wbtr(app.lang, WB::Bars), t.j1 - t.j0, static_cast<int>(p.size())), &kDimV4);
  // What is left under the caption: two labels and two plots.
  const float rest = ImGui::GetContentRegionAvail().y - 2 * ImGui::GetTextLineHeightWithSpacing() -
                     2 * ImGui::GetStyle().ItemSpacing.y - 2;
  const float h = std::max(app.font_px * 1.5f, rest / 2);
  float pmax = 0, dmax = 0;
  for (float x : p) pmax = std::max(pmax, x);
  for (float x : ds) dmax = std::max(dmax, std::abs(x));
  ImGui::TextColored(kDimV4, "P_j  [0 … %s]", value4(pmax).c_str());
  ImGui::PlotHistogram("##walk_back_p", p.data(), static_cast<int>(p.size()), 0, nullptr, 0, pmax > 0 ? pmax : 1,
                       ImVec2(width, h));
  ImGui::TextColored(kDimV4, "dS_j  [%s … %s]", value4(-dmax).c_str(), value4(dmax).c_str());
  const float lim = dmax > 0 ? dmax : 1;
  ImGui::PlotHistogram("##walk_back_ds", ds.data(), static_cast<int>(ds.size()), 0, nullptr, -lim, lim,
                       ImVec2(width, h));
}

// dQ so far against the fused backward's and fp64's (the first values), its norm and the final check.
void dq_rows(Shell& app, WalkView& v, const BackwardWalk& w) {
  const Lang lang = app.lang;
  const std::vector<double> now = walk_backward_dq_at(w, v.cursor());
  // As many of the first 8 values as fit beside the longest label.
  float label = 0;
  for (const WB id : {WB::DqNow, WB::Fused, WB::Fp64}) label = std::max(label, text_width(wbtr(lang, id)));
  const float room = ImGui::GetContentRegionAvail().x - label - app.font_px;
  const int dims = std::clamp(static_cast<int>(room / (app.font_px * 4.6f)), 1, std::min(w.d_k, 8));
  if (ImGui::BeginTable("##walk_back_dq", dims + 1, ImGuiTableFlags_Borders | ImGuiTableFlags_SizingFixedFit)) {
    const auto row = [&](const char* label, const std::vector<double>* values, bool lit) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(label);
      for (int c = 0; c < dims; ++c) {
        ImGui::TableNextColumn();
        const std::string x = values && c < static_cast<int>(values->size()) ? value4((*values)[c]) : "—";
        if (lit) ImGui::TextColored(kHighlightV4, "%s", x.c_str());
        else ImGui::TextUnformatted(x.c_str());
      }
    };
    row(wbtr(lang, WB::DqNow), &now, true);
    row(wbtr(lang, WB::Fused), &w.fused_dq, false);
    row(wbtr(lang, WB::Fp64), &w.fp64_dq, false);
    ImGui::EndTable();
  }
  ImGui::TextUnformatted(fmt(wbtr(lang, WB::DqNorm), value4(walk_norm(now)).c_str(), dims, w.d_k).c_str());
  const std::string fused = format_number("%.3g", w.fused_diff);
  wrapped(app, fmt(wbtr(lang, WB::Final), fused.c_str(), format_number("%.3g", w.fp64_error).c_str()));
}

void draw_backward(WalkView& v, Shell& app, int tile) {
  const Lang lang = app.lang;
  const Session& c = app.session;
  const BackwardWalk* w = v.update_backward(c);
  v.tick(ImGui::GetIO().DeltaTime);
  tile_controls(app, v, w, tile);
  if (v.status() == WalkView::Status::Failed) {
    wrapped(app, fmt(wbtr(lang, WB::Failed), v.backward_error(lang).c_str()), &kErrorV4);
    return;
  }
  if (v.status() == WalkView::Status::Computing) wrapped(app, wbtr(lang, WB::Computing), &kDimV4);
  if (!w || v.pass() != WalkPass::Backward || v.cursor() >= static_cast<int>(w->tiles.size())) return;
  const BackwardWalkTile& t = w->tiles[v.cursor()];
  wrapped(app, backward_walk_tile_sentence(*w, v.cursor(), lang), &kHighlightV4);
  strip(app, v, *w, fmt(wbtr(lang, WB::Strip), w->query_token.c_str(), w->keys, w->tile));
  wrapped(app, wbtr(lang, WB::Legend), &kDimV4);
  wrapped(app, fmt(wbtr(lang, WB::Stats), value4(w->m).c_str(), value4(w->l).c_str(), value4(w->lse).c_str(),
                   value4(w->D).c_str()));
  wrapped(app, fmt(wbtr(lang, WB::Upstream), (lang == Lang::Zh ? w->upstream_zh : w->upstream).c_str()), &kDimV4);
  // Under it: dQ rows, norm, final line, notes.
  // At least the room of the bars' caption, two labels and two plots, and of the two charts.
  // The key table's five columns want about 14 lines' width.
  v.middle = middle(app, app.font_px * (w->rope ? 12.5f : 11.f), app.font_px * 11, app.font_px * 14, static_cast<int>(w->tiles.size()),
         {{wbtr(lang, WB::ChartDsSum), walk_series_ds_sum(*w, v.cursor())},
          {wbtr(lang, WB::ChartDqNorm), walk_series_dq_norm(*w, v.cursor())}},
         [&](float width, float height) {
           if (t.skipped) wrapped(app, tr(lang, S::WalkSkipped), &kDimV4);
           else if (t.j1 - t.j0 <= kWalkBackwardRowsMax) key_table(app, *w, t, height);
           else key_bars(app, t, width - 8);
         });
  dq_rows(app, v, *w);
  if (w->rope) wrapped(app, wbtr(lang, WB::Rope), &kDimV4);
  wrapped(app, wbtr(lang, WB::Caveat), &kDimV4);
}

}  // namespace

void draw_panel(WalkView& v, Shell& app, const Layout& l) {
  const Lang lang = app.lang;
  ImGui::SetNextWindowPos(ImVec2(l.heatmap.x, l.heatmap.y), ImGuiCond_Always);
  ImGui::SetNextWindowSize(ImVec2(l.heatmap.w, l.heatmap.h), ImGuiCond_Always);
  const std::string title = v.pass() == WalkPass::Backward
                                ? fmt("%s · %s###heatmap", tr(lang, S::ViewWalk), wbtr(lang, WB::Backward))
                                : fmt("%s###heatmap", tr(lang, S::ViewWalk));
  ImGui::Begin(title.c_str(), nullptr,
               ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoResize | ImGuiWindowFlags_NoCollapse);
  const Session& c = app.session;
  const int tile = walk_tile_for(v.tile, c.demo(), c.problem().m());
  if (v.pass() == WalkPass::Backward) {
    draw_backward(v, app, tile);
    ImGui::End();
    return;
  }
  const Walk* w = v.update(c, tile);
  v.tick(ImGui::GetIO().DeltaTime);
  tile_controls(app, v, w, tile);
  if (!w || v.pass() != WalkPass::Forward) {
    if (!w) wrapped(app, fmt(tr(lang, S::WalkError), v.error().c_str()), &kErrorV4);
    ImGui::End();
    return;
  }
  wrapped(app, walk_tile_sentence(*w, v.cursor(), lang), &kHighlightV4);
  strip(app, v, *w, fmt(tr(lang, S::WalkStrip), w->query_token.c_str(), w->keys, w->tile));
  wrapped(app, tr(lang, S::WalkLegend), &kDimV4);
  // Under it: output rows, final line, notes.
  // The running table's seven columns want about 17 lines' width.
  v.middle = middle(app, app.font_px * 8.5f, app.font_px * 6, app.font_px * 17, static_cast<int>(w->tiles.size()),
         {{tr(lang, S::WalkChartM), walk_series_m(*w, v.cursor())},
          {tr(lang, S::WalkChartL), walk_series_l(*w, v.cursor())},
          {tr(lang, S::WalkChartErr), walk_series_convergence(*w, v.cursor())}},
         [&](float, float height) { running_table(app, v, *w, height); });
  output_rows(app, v, *w);
  wrapped(app, tr(lang, w->score_mods ? S::WalkUnitsMods : S::WalkUnits), &kDimV4);
  wrapped(app, tr(lang, S::WalkCuda), &kDimV4);
  ImGui::End();
}

}  // namespace attnlab::viewer
