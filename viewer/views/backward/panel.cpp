// The backward view (--view backward): the staged backward of the problem on screen played from
// dO back to dQ, dK and dT, each step's gradient beside the forward's stage it belongs to (two
// heatmaps: the stage in viridis, the gradient on a diverging scale symmetric about 0, each
// averaged over the cells of a pixel block when larger than the plot); the controls (steps, play,
// dO, the temperature); beside the maps where the selected row's |dS| mass sits, dT and the row
// over the sweep's temperatures; under them the row's dS in its two parts with its sum, why it is
// 0, the temperature's lesson and the caveats. Takes the right column too (no information panel).
// The numbers come from viewer/views/backward/backward_view.h; the backward is its companion run.
#include "viewer/views/backward/backward_view.h"

#include "viewer/ui/kit.h"

#include "core/format.h"
#include "viewer/draw/colormap.h"
#include "viewer/draw/heatmap.h"
#include "viewer/draw/layout.h"
#include "viewer/draw/pooling.h"
#include "viewer/draw/strings.h"
#include "viewer/session/keymap.h"
#include "viewer/ui/shell.h"

#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace attnlab::viewer {
namespace {

constexpr ImU32 kAxis = IM_COL32(130, 130, 130, 255);
constexpr ImU32 kWeights = IM_COL32(90, 150, 255, 255);
constexpr ImU32 kCentered = IM_COL32(90, 200, 120, 255);

// Where a matrix was drawn: its cells' rectangle and its shape (the hover).
struct Placed {
  Rect r;
  int rows = 0, cols = 0;
};

// The selected row's tick beside a map of thin rows, and the legend after it with a gap: the tick
// never lies on the colour bar.
float row_tick(float fp) { return fp * 0.6f; }
float legend_gap(float fp) { return row_tick(fp) + fp * 0.3f; }

// A map's legend column as wide as what it holds (its gap, the bar and its own labels, the scale's
// word, the masked swatch): a range of 0.29 takes less room than one of 1.3e-05, room the map gets.
float legend_width(Shell& app, const ValueRange& range, bool gradient, bool log_scale, bool masked) {
  const float fp = app.font_px, bar_w = fp * 0.7f;
  float w = text_width(tr(app.lang, log_scale ? S::ScaleLogShort : S::ScaleLinear));
  for (const std::string& t : legend_labels(range, log_scale && !gradient)) w = std::max(w, bar_w + 4 + text_width(t.c_str()));
  if (masked) w = std::max(w, bar_w + 4 + text_width(tr(app.lang, S::Masked)));
  return legend_gap(fp) + w + fp * 0.2f;
}

// A map's edge labels: its rows' (query or key tokens) left of the selected row's tick, its
// columns' (key tokens or dimensions) above it as `plan` says, `col_h` pixels tall.
struct EdgeLabels {
  const std::vector<std::string>* rows = nullptr;
  const std::vector<std::string>* cols = nullptr;
  float row_w = 0;  // the row labels' room: the widest label (the last index above 64 rows) and its gap
  ColumnLabelPlan plan;
  float col_h = 0;
};

// The whole matrix in `r`: what the shared label drawers (kit.h) place labels by.
PlotGeometry whole_plot(const Rect& r, int rows, int cols) {
  PlotGeometry g;
  g.x = r.x;
  g.y = r.y;
  g.w = r.w;
  g.h = r.h;
  g.rows = rows;
  g.cols = cols;
  g.vis_rows = rows;
  g.vis_cols = cols;
  g.cell_w = cols > 0 ? r.w / cols : 0;
  g.cell_h = rows > 0 ? r.h / rows : 0;
  g.px_w = static_cast<int>(r.w);
  g.px_h = static_cast<int>(r.h);
  return g;
}

ColumnLabelPlan column_plan(const Rect& r, int rows, int cols, const std::vector<std::string>& labels) {
  return column_label_plan(whole_plot(r, rows, cols), static_cast<int>(labels.size()),
                           [&](int c) { return ImGui::CalcTextSize(labels[c].c_str()).x; });
}

// One matrix with its cells in `r` (caption at `caption_x` above its column labels) as
// map_picture draws it (each block's entry of largest |value|, masked cells hatched, viridis or
// diverging, log above 64 tokens), its colour legend on the right, the numbers in the cells when
// they fit, the rows' and columns' labels (all where they fit, else ticks, as the chain view's),
// the selected row framed and its label in orange.
Placed draw_matrix(Shell& app, const char* tex_name, std::string& tex_key, MapPicture& picture,
                   BackwardView::MapPlace& place, const MatrixF& m, const MatrixF* mask, const Rect& r,
                   bool gradient, bool log_scale, int highlight_row, const std::string& caption, float caption_x,
                   const EdgeLabels& labels, std::uint64_t adopted) {
  Placed out;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float fp = app.font_px;
  dl->AddText(ImVec2(caption_x, r.y - labels.col_h - fp * 1.4f), ImGui::GetColorU32(ImGuiCol_Text), caption.c_str());
  const int rows = static_cast<int>(m.rows()), cols = static_cast<int>(m.cols());
  if (rows == 0 || cols == 0) return out;
  const float tick = row_tick(fp);
  if (r.w < 4 || r.h < 4) return out;
  // The texture has the map's pixels: magnified cells (a small problem) span several, so that a
  // masked cell's hatching has the chain view's 4-pixel stripes, not one stripe per cell; pooled
  // ones (thousands of tokens) are one bin a pixel.
  const int px_h = static_cast<int>(r.h), px_w = static_cast<int>(r.w);
  const int bins_r = std::min(rows, px_h), bins_c = std::min(cols, px_w);
  const AxisMap rmap = map_axis(0, rows, bins_r, rows), cmap = map_axis(0, cols, bins_c, cols);
  Shell::Texture& tex = app.texture(tex_name);
  const std::string key = std::to_string(adopted) + "|" + caption + "|" + std::to_string(rows) + "x" +
                          std::to_string(cols) + "|" + std::to_string(px_h) + "x" + std::to_string(px_w) +
                          (log_scale ? "|log" : "") + (mask ? "|mask" : "");
  if (!tex.tex || key != tex_key) {
    // Row-major for pool_grid: Eigen's MatrixF is row-major in the lab (core/types.h).
    picture = map_picture(m, mask, gradient, log_scale, rmap, cmap);
    // The cells at their places on the scale, drawn on [0, 1]; then each pixel its cell's.
    std::vector<PooledCell> cells = picture.cells;
    for (PooledCell& c : cells)
      if (!c.masked) c.value = static_cast<float>(picture.position(c.value));
    const AxisMap pr = map_axis(0, bins_r, px_h, bins_r), pc = map_axis(0, bins_c, px_w, bins_c);
    std::vector<PooledCell> placed(static_cast<std::size_t>(px_h) * px_w);
    for (int y = 0; y < px_h; ++y)
      for (int x = 0; x < px_w; ++x)
        placed[static_cast<std::size_t>(y) * px_w + x] = cells[static_cast<std::size_t>(pr.begin[y]) * bins_c + pc.begin[x]];
    const std::vector<std::uint32_t> px =
        rasterize_cells(placed, pr, pc, {0, 1}, false, false, gradient ? &diverging_table() : nullptr);
    if (!ensure_texture(app, tex.tex, tex.w, tex.h, px_w, px_h)) return out;
    SDL_UpdateTexture(tex.tex, nullptr, px.data(), px_w * 4);
    tex_key = key;
  }
  dl->AddImage(reinterpret_cast<ImTextureID>(tex.tex), ImVec2(r.x, r.y), ImVec2(r.right(), r.bottom()));
  // The legend: the colour bar with its ends and middle, the scale's word, the masked swatch.
  {
    const float bar_x = r.right() + legend_gap(fp), bar_w = fp * 0.7f, bar_h = std::min(r.h, fp * 8);
    place = {r.x, r.y, r.w, r.h, r.right(), bar_x};
    draw_colour_bar(dl, bar_x, r.y, bar_w, bar_h, gradient ? diverging_table() : viridis_table(),
                    legend_labels(picture.range, log_scale && !gradient));
    const ImU32 dim = ImGui::ColorConvertFloat4ToU32(kDimV4);
    float y = r.y + bar_h + fp * 0.3f;
    if (y + fp <= r.bottom()) {
      dl->AddText(ImVec2(bar_x, y), dim, tr(app.lang, log_scale ? S::ScaleLogShort : S::ScaleLinear));
      y += fp * 1.2f;
    }
    if (mask && y + fp <= r.bottom()) {
      draw_hatch(dl, ImVec2(bar_x, y), ImVec2(bar_x + bar_w, y + fp), mark(app));
      dl->AddText(ImVec2(bar_x + bar_w + 4, y), dim, tr(app.lang, S::Masked));
    }
  }
  const float cw = r.w / cols, ch = r.h / rows;
  // Numbers in the cells when a cell holds one: white or black, whichever reads on its colour.
  if (cw >= ImGui::CalcTextSize("-0.00").x + 4 && ch >= fp * 1.1f) {
    const auto& table = gradient ? diverging_table() : viridis_table();
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < cols; ++j) {
        const float v = m(i, j);
        if (mask && (*mask)(i, j) != 0.f) continue;  // hatched: masked says it
        const std::string t = std::isfinite(v) ? cell_label(v) : (v < 0 ? "−∞" : "∞");
        const ImVec2 ts = ImGui::CalcTextSize(t.c_str());
        if (ts.x + 4 > cw) continue;  // a tiny value's "1.3e-4" where a cell holds only "0.25"
        const Rgb8 c = table[std::clamp(static_cast<int>(picture.position(v) * 255), 0, 255)];
        const ImU32 ink = cie_lightness(c) > 55 ? IM_COL32(0, 0, 0, 255) : IM_COL32(255, 255, 255, 255);
        dl->AddText(ImVec2(r.x + (j + 0.5f) * cw - ts.x / 2, r.y + (i + 0.5f) * ch - ts.y / 2), ink, t.c_str());
      }
  }
  if (highlight_row >= 0 && highlight_row < rows) {
    // A frame around a row tall enough to keep its cells visible inside; else two ticks beside
    // the map, which hide nothing.
    const float y = r.y + highlight_row * ch, ms = mark(app);
    if (ch >= 6 * ms) {
      dl->AddRect(ImVec2(r.x - ms, y - ms), ImVec2(r.right() + ms, y + ch + ms), kHighlight, 0, 0, 2 * ms);
    } else {
      const float mid = y + ch / 2;
      dl->AddLine(ImVec2(r.x - tick, mid), ImVec2(r.x - 2 * ms, mid), kHighlight, 3 * ms);
      dl->AddLine(ImVec2(r.right() + 2 * ms, mid), ImVec2(r.right() + tick, mid), kHighlight, 3 * ms);
      place.mark_right = r.right() + tick;
    }
  }
  dl->AddRect(ImVec2(r.x, r.y), ImVec2(r.right(), r.bottom()), kAxis);
  // The edge labels: the rows' end left of the selected row's tick (their geometry's left edge
  // moved there), the columns' above the map.
  const PlotGeometry g = whole_plot(r, rows, cols);
  PlotGeometry left = g;
  left.x = r.x - tick;
  const ImU32 text = ImGui::GetColorU32(ImGuiCol_Text);
  if (labels.rows && labels.row_w > 0) {
    const std::vector<std::string>& rl = *labels.rows;
    const auto row_size = [&](int i) { return ImGui::CalcTextSize(rl[i].c_str()); };
    // Inside their room: a token wider than the sample measured is cut, never drawn over the
    // map or the legend on its left.
    place.label_x = left.x - labels.row_w;
    dl->PushClipRect(ImVec2(place.label_x, r.y - fp), ImVec2(left.x, r.bottom() + fp), true);
    draw_row_ticks(dl, left, rl, row_size, {highlight_row}, text, fp);
    if (highlight_row >= 0 && highlight_row < std::min(rows, static_cast<int>(rl.size())))
      draw_row_label(dl, left, rl[highlight_row], row_size(highlight_row), highlight_row, kHighlight, fp);
    dl->PopClipRect();
    place.row_stride = row_tick_stride(g, fp);
  }
  if (labels.cols) {
    const std::vector<std::string>& cl = *labels.cols;
    draw_column_labels(dl, g, cl, [&](int c) { return ImGui::CalcTextSize(cl[c].c_str()); }, labels.plan, text);
    place.labels_top = r.y - labels.col_h;
    place.col_stride = labels.plan.stride;
    place.col_lines = labels.plan.lines;
  }
  out.r = r;
  out.rows = rows;
  out.cols = cols;
  return out;
}

// The cell under the pointer of a placed matrix, or false.
bool hovered_cell(const Placed& p, int& row, int& col) {
  const ImVec2 mp = ImGui::GetIO().MousePos;
  if (p.rows == 0 || !ImGui::IsWindowHovered() || !p.r.contains(mp.x, mp.y)) return false;
  row = std::clamp(static_cast<int>((mp.y - p.r.y) / p.r.h * p.rows), 0, p.rows - 1);
  col = std::clamp(static_cast<int>((mp.x - p.r.x) / p.r.w * p.cols), 0, p.cols - 1);
  return true;
}

// The dS row: a table of the three parts (few keys, where every number fits the panel's width),
// else three strips over the keys. True for the table.
bool draw_row(Shell& app, const Problem& p, const DsRow& r) {
  const Lang lang = app.lang;
  bool table = r.keys <= 12;
  // The table's cells, formatted once: P and dS where P is 0 (a masked key) are exactly 0; dP − D
  // is what it is.
  std::vector<std::string> cells[3];
  if (table) {
    const std::vector<double>* rows[3] = {&r.p, &r.centered, &r.ds};
    for (int k = 0; k < 3; ++k)
      for (int j = 0; j < r.keys; ++j)
        cells[k].push_back(k != 1 && r.p[j] == 0 ? std::string("0") : format_number("%.4f", (*rows[k])[j]));
    const float pad = ImGui::GetStyle().CellPadding.x * 2 + 1;  // a column's padding and its border
    float need = pad;
    for (BT n : {BT::RowKey, BT::RowWeights, BT::RowCentered, BT::RowProduct}) need = std::max(need, text_width(btr(lang, n)) + pad);
    for (int j = 0; j < r.keys; ++j)
      need += pad + std::max({text_width(token_label(p.key_tokens(), j).c_str()), text_width(cells[0][j].c_str()),
                              text_width(cells[1][j].c_str()), text_width(cells[2][j].c_str())});
    table = need <= ImGui::GetContentRegionAvail().x;
  }
  if (table) {
    if (ImGui::BeginTable("##bw_row", r.keys + 1, ImGuiTableFlags_Borders | ImGuiTableFlags_SizingFixedFit)) {
      ImGui::TableNextRow();
      ImGui::TableSetColumnIndex(0);
      ImGui::TextUnformatted(btr(lang, BT::RowKey));
      for (int j = 0; j < r.keys; ++j) {
        ImGui::TableSetColumnIndex(j + 1);
        if (j == r.top)
          ImGui::TextColored(kHighlightV4, "%s", token_label(p.key_tokens(), j).c_str());
        else
          ImGui::TextUnformatted(token_label(p.key_tokens(), j).c_str());
      }
      const auto line = [&](BT name, const std::vector<std::string>& v) {
        ImGui::TableNextRow();
        ImGui::TableSetColumnIndex(0);
        ImGui::TextUnformatted(btr(lang, name));
        for (int j = 0; j < r.keys; ++j) {
          ImGui::TableSetColumnIndex(j + 1);
          ImGui::TextUnformatted(v[j].c_str());
        }
      };
      line(BT::RowWeights, cells[0]);
      line(BT::RowCentered, cells[1]);
      line(BT::RowProduct, cells[2]);
      ImGui::EndTable();
    }
    return true;
  }
  // The names in a column of their own, the strips beside them (keys left to right).
  float name_w = 0;
  for (BT n : {BT::RowWeights, BT::RowCentered, BT::RowProduct}) name_w = std::max(name_w, text_width(btr(lang, n)));
  const float x0 = ImGui::GetCursorPosX();
  const float w = std::max(app.font_px * 4, ImGui::GetContentRegionAvail().x - name_w - app.font_px * 0.5f);
  const float h = app.font_px * 2.2f;
  const auto strip = [&](BT name, const std::vector<double>& v, ImU32 colour) {
    std::vector<float> f(v.begin(), v.end());
    ImGui::AlignTextToFramePadding();
    ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(colour), "%s", btr(lang, name));
    ImGui::SameLine(x0 + name_w + app.font_px * 0.5f);
    ImGui::PushStyleColor(ImGuiCol_PlotLines, colour);
    ImGui::PlotLines(fmt("##bw_%d", static_cast<int>(name)).c_str(), f.data(), static_cast<int>(f.size()), 0, nullptr,
                     FLT_MAX, FLT_MAX, ImVec2(w, h));
    ImGui::PopStyleColor();
  };
  strip(BT::RowWeights, r.p, kWeights);
  strip(BT::RowCentered, r.centered, kCentered);
  strip(BT::RowProduct, r.ds, kHighlight);
  return false;
}

// The sweep of the selected row: where its |dS| mass sits against log T, the T on screen marked.
void draw_sweep(Shell& app, const BackwardView& v, int query, float bottom) {
  const Lang lang = app.lang;
  const std::vector<SweepPoint>& sw = v.sweep();
  if (sw.empty() || query >= static_cast<int>(sw.front().mass.size())) {
    wrapped(app, fmt(btr(lang, BT::SweepNone), kBackwardSweepMaxTokens), &kDimV4);
    return;
  }
  const float fp = app.font_px;
  wrapped(app, fmt(btr(lang, BT::SweepTitle), static_cast<int>(sw.size())), &kDimV4);
  const ImVec2 at = ImGui::GetCursorScreenPos();
  // The chart takes what the band leaves after its axis, the legend and the rounding note, but
  // never less than room for its three labels (1, ½, 0) a line apart: at a large UI scale or in a
  // small window the panel scrolls rather than squeeze it.
  const bool rounded = sweep_rounded_top(sw, query);
  const float line_h = ImGui::GetTextLineHeightWithSpacing();
  const float w = ImGui::GetContentRegionAvail().x;
  const float h = std::clamp(bottom - ImGui::GetCursorScreenPos().y - line_h * (rounded ? 5.5f : 3.5f), fp * 4.5f, fp * 6);
  const ImVec2 a(at.x + fp * 2.2f, at.y + fp * 0.3f), b(at.x + w - fp * 0.5f, at.y + h);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  dl->AddRect(a, b, kAxis);
  const double l0 = std::log(kBackwardTMin), l1 = std::log(kBackwardTMax);
  const auto x_of = [&](double t) { return a.x + static_cast<float>((std::log(t) - l0) / (l1 - l0)) * (b.x - a.x); };
  const auto y_of = [&](double y) { return b.y - static_cast<float>(std::clamp(y, 0.0, 1.0)) * (b.y - a.y); };
  float mass_max = 0;
  for (const SweepPoint& p : sw) mass_max = std::max(mass_max, p.mass[query]);
  // A share is no number where the row has no |dS| mass (the softmax saturated to one key in
  // fp32): the line breaks there.
  const auto line = [&](auto value, ImU32 colour) {
    std::vector<ImVec2> pts;
    const auto flush = [&] {
      if (pts.size() > 1) dl->AddPolyline(pts.data(), static_cast<int>(pts.size()), colour, 0, 2 * mark(app));
      pts.clear();
    };
    for (const SweepPoint& p : sw) {
      const double y = value(p);
      if (!std::isfinite(y)) {
        flush();
        continue;
      }
      pts.emplace_back(x_of(p.temperature), y_of(y));
      dl->AddCircleFilled(pts.back(), 2.5f * mark(app), colour);
    }
    flush();
  };
  line([&](const SweepPoint& p) { return mass_max > 0 ? p.mass[query] / mass_max : 0.0; }, kAxis);
  line([&](const SweepPoint& p) { return p.top_two_share[query]; }, kWeights);
  line([&](const SweepPoint& p) { return p.top_share[query]; }, kHighlight);
  const float xt = x_of(std::clamp(v.temperature(), kBackwardTMin, kBackwardTMax));
  dl->AddLine(ImVec2(xt, a.y), ImVec2(xt, b.y), IM_COL32(255, 255, 255, 160));
  const ImU32 text = ImGui::GetColorU32(ImGuiCol_Text);
  dl->AddText(ImVec2(at.x, a.y - fp * 0.3f), text, "1");
  dl->AddText(ImVec2(at.x, b.y - fp), text, "0");
  dl->AddText(ImVec2(at.x, y_of(0.5) - fp * 0.5f), text, "½");
  dl->AddLine(ImVec2(a.x, y_of(0.5)), ImVec2(b.x, y_of(0.5)), IM_COL32(130, 130, 130, 90));
  const std::string lo = short_number(kBackwardTMin), hi = short_number(kBackwardTMax);
  dl->AddText(ImVec2(a.x, b.y + 2), text, lo.c_str());
  dl->AddText(ImVec2(b.x - ImGui::CalcTextSize(hi.c_str()).x, b.y + 2), text, hi.c_str());
  const char* axis = btr(lang, BT::SweepAxis);
  const float aw = ImGui::CalcTextSize(axis).x;
  dl->AddText(ImVec2(std::max(a.x + ImGui::CalcTextSize(lo.c_str()).x + fp * 0.5f, (a.x + b.x - aw) / 2), b.y + 2), text,
              axis);
  ImGui::Dummy(ImVec2(w, h + fp * 1.3f));
  // The legend: its entries on one line while they fit.
  bool first = true;
  const auto legend = [&](ImU32 colour, const char* t) {
    if (!first) same_line_if_fits(fp * 1.4f + ImGui::GetStyle().ItemSpacing.x + text_width(t));
    first = false;
    const ImVec2 p = ImGui::GetCursorScreenPos();
    dl->AddLine(ImVec2(p.x, p.y + fp * 0.55f), ImVec2(p.x + fp * 1.2f, p.y + fp * 0.55f), colour, 3 * mark(app));
    ImGui::Dummy(ImVec2(fp * 1.4f, fp));
    ImGui::SameLine();
    ImGui::TextUnformatted(t);
  };
  legend(kHighlight, btr(lang, BT::SweepTop));
  legend(kWeights, btr(lang, BT::SweepTopTwo));
  legend(kAxis, btr(lang, BT::SweepMass));
  if (rounded) wrapped(app, btr(lang, BT::SweepRounding), &kDimV4);
}

}  // namespace

void draw_panel(BackwardView& v, Shell& app, const Layout& l) {
  const Lang lang = app.lang;
  Session& s = app.session;
  const float fp = app.font_px;
  // The centre and the right column: the view draws no information panel.
  ImGui::SetNextWindowPos(ImVec2(l.heatmap.x, l.heatmap.y), ImGuiCond_Always);
  ImGui::SetNextWindowSize(ImVec2(l.info.right() - l.heatmap.x, l.heatmap.h), ImGuiCond_Always);
  ImGui::Begin(fmt("%s###backward", btr(lang, BT::Label)).c_str(), nullptr,
               ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoResize | ImGuiWindowFlags_NoCollapse |
                   ImGuiWindowFlags_NoBringToFrontOnFocus);
  const GradTrace* g = v.update(s);
  v.tick(ImGui::GetIO().DeltaTime);

  // Controls: the steps, dO, the temperature.
  if (ImGui::Button(btr(lang, BT::Prev))) v.prev();
  ImGui::SameLine();
  if (ImGui::Button(btr(lang, BT::Next))) v.next();
  ImGui::SameLine();
  if (ImGui::Button(fmt("%s###bw_play", btr(lang, v.playing() ? BT::Pause : BT::Play)).c_str())) v.toggle_play();
  ImGui::SameLine();
  if (ImGui::Button(btr(lang, BT::Home))) v.home();
  if (!v.steps().empty()) {
    ImGui::SameLine();
    ImGui::TextColored(kDimV4, btr(lang, BT::StepOf), v.step() + 1, static_cast<int>(v.steps().size()));
  }
  ImGui::AlignTextToFramePadding();
  ImGui::TextUnformatted(btr(lang, BT::Upstream));
  ImGui::SameLine();
  const bool random = v.upstream().kind == UpstreamKind::Random;
  if (ImGui::RadioButton(btr(lang, BT::UpRandom), random) && !random) v.set_random(0);
  ImGui::SameLine();
  if (ImGui::RadioButton(btr(lang, BT::UpSum), !random) && random) v.set_sum();
  if (random) {
    ImGui::SameLine();
    int seed = static_cast<int>(std::min<std::uint64_t>(v.upstream().seed, 1u << 30));
    ImGui::SetNextItemWidth(fp * 6);
    if (ImGui::InputInt(fmt("%s###bw_seed", btr(lang, BT::Seed)).c_str(), &seed) && seed >= 0)
      v.set_random(static_cast<std::uint64_t>(seed));
  }
  same_line_if_fits(text_width(btr(lang, BT::Temperature)) + fp * 14);
  ImGui::TextUnformatted(btr(lang, BT::Temperature));
  ImGui::SameLine();
  double t = s.requested_temperature();
  ImGui::SetNextItemWidth(fp * 12);
  if (slider_double("###bw_t", t, kBackwardTMin, kBackwardTMax, "%.3g", ImGuiSliderFlags_Logarithmic))
    s.set_temperature(t);

  if (v.status() == BackwardView::Status::TooLarge) {
    wrapped(app, fmt(btr(lang, BT::NeedsStages), kBackwardMaxTokens, std::max(s.problem().n(), s.problem().m()),
                     kBackwardMaxTokens),
            &kHighlightV4);
    wrapped(app, btr(lang, BT::Caveats), &kDimV4);
    ImGui::End();
    return;
  }
  if (!g) {
    if (v.status() == BackwardView::Status::Failed)
      wrapped(app, fmt(btr(lang, BT::Failed), v.error(lang).c_str()), &kErrorV4);
    else
      ImGui::TextColored(kDimV4, "%s", btr(lang, BT::Computing));
    ImGui::End();
    return;
  }
  const Problem& p = v.problem();
  const BackStep step = v.current();
  const StepTexts texts = back_step_texts(step, *g);
  wrapped(app, fmt(btr(lang, BT::Title), v.step() + 1, static_cast<int>(v.steps().size()), btr(lang, texts.title)),
          &kHighlightV4);
  const BT why = texts.why;
  const std::string why_text = why == BT::WhyDout     ? fmt(btr(lang, why), upstream_text(v.upstream(), lang).c_str())
                               : why == BT::WhyScores ? fmt(btr(lang, why), value4(p.scale_value()).c_str())
                               : why == BT::WhyDt     ? fmt(btr(lang, why), value4(g->dT).c_str())
                                                      : std::string(btr(lang, why));
  wrapped(app, why_text);

  static const MatrixF kNone;
  const MatrixF& dt = step == BackStep::Dt ? v.dt_matrix() : kNone;  // an lvalue either way: pair points into it
  const StepPair pair = step_pair(p, *g, step, dt);
  const DsRow& r = v.row(s);
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  // Above 64 tokens the chain view's log scale (its toggle): P by value, a gradient by sign and log |value|.
  const bool log_scale = app.log_weights;
  if (v.mask_checked != v.adopted()) {
    v.mask_checked = v.adopted();
    v.any_masked = g->forward.mask.size() && (g->forward.mask.array() != 0.f).any();
  }
  const MatrixF* mask = v.any_masked ? &g->forward.mask : nullptr;
  const auto mask_of = [&](const MatrixF* m, bool masked) {
    return masked && m && mask && m->rows() == mask->rows() && m->cols() == mask->cols() ? mask : nullptr;
  };
  const auto sel = [&](const MatrixF* m) { return pair.query_rows && m && m->rows() == p.n() ? s.query() : -1; };
  // The two maps: the forward's stage, its gradient; the selected query's row framed on the
  // query side (none for K and V, whose rows are keys).
  struct Map {
    const MatrixF* m;
    const MatrixF* mask;
    bool gradient, log;
    int row;
    std::string caption;
    const char* tex;
    float legend_w = 0;
    MapSize size;
    EdgeLabels labels;
    int rows() const { return m ? static_cast<int>(m->rows()) : 0; }
    int cols() const { return m ? static_cast<int>(m->cols()) : 0; }
  };
  Map maps[2] = {{pair.forward, mask_of(pair.forward, pair.forward_masked), false, log_scale && pair.forward_weights,
                  sel(pair.forward), fmt(btr(lang, BT::Forward), pair.forward_name.in(lang)), "backward-forward", 0, {}, {}},
                 {pair.grad, mask_of(pair.grad, pair.key_cols), true, log_scale, sel(pair.grad),
                  fmt(btr(lang, BT::Gradient), pair.grad_name.in(lang)), "backward-gradient", 0, {}, {}}};
  int shown = 0;
  for (int i = 0; i < 2; ++i) {
    Map& mp = maps[i];
    v.place[i] = {};  // a map not drawn this frame has no place
    if (!mp.m) continue;
    ++shown;
    const std::string key =
        std::to_string(v.adopted()) + "|" + mp.caption + (mp.log ? "|log" : "") + (mp.mask ? "|mask" : "");
    if (key != v.legend_key[i]) {
      v.legend_range[i] = map_range(*mp.m, mp.mask, mp.gradient, mp.log);
      v.legend_key[i] = key;
    }
    mp.legend_w = legend_width(app, v.legend_range[i], mp.gradient, mp.log, mp.mask != nullptr);
    const MapEdges edges = map_edges(pair, *mp.m);
    mp.labels.rows = edges.rows == Edge::Queries ? &p.query_tokens() : &p.key_tokens();
    mp.labels.cols = edges.cols == Edge::Keys   ? &p.key_tokens()
                     : edges.cols == Edge::Dims ? &index_labels(v.dims[i], mp.cols())
                                                : nullptr;
    const float widest = row_labels_width(*mp.labels.rows, mp.rows());
    mp.labels.row_w = widest > 0 ? widest + fp * 0.4f : 0.f;  // draw_row_label's gap
  }
  // A map's column: its row labels, the row tick's margin on either side, the map, its legend.
  const auto column_w = [&](const Map& mp, float map_w) {
    return mp.m ? mp.labels.row_w + fp * 1.4f + mp.legend_w + map_w : 0.f;
  };
  const float caption_h = fp * 1.4f, notes_h = fp * 1.4f, least = fp * 4;
  // Two bands. The upper: the two maps (left) and where the row's |dS| mass sits with the sweep
  // (right, about 15 lines). The lower: the row's parts and sum (left), why it is 0 and the
  // temperature's lesson (right), then the caveats: about 13 lines at the smallest window.
  // The right column gives up its share down to its 15 lines' width for the maps; where they
  // would still be squeezed under a readable width it goes under them instead.
  float right_w = std::max(fp * 15, avail.x * 0.36f);
  const float band_h =
      std::max(fp * 15.5f, std::min((avail.x - right_w - fp) * 0.6f, avail.y - fp * (r.keys <= 12 ? 13 : 14)));
  // The maps' height in the band beside the right column, under `col_h` pixels of column labels;
  // they stand under one line of labels at least.
  const auto band_map_h = [&](float col_h) { return band_h - notes_h - caption_h - col_h; };
  float col_h = column_label_height({}, fp);
  float side_need = fp;
  for (const Map& mp : maps)
    side_need += column_w(mp, std::min(fp * 8, map_size(mp.rows(), mp.cols(), 1e9f, band_map_h(col_h), least).w));
  right_w = std::max(fp * 15, std::min(right_w, avail.x - fp - side_need));
  const bool beside = avail.x - right_w - fp >= side_need;
  const float maps_w = beside ? avail.x - right_w - fp : avail.x;
  // The maps' height under `col_h` pixels of column labels: the band's beside the right column,
  // else what the window shows under them, but never so little that a map is a sliver (the panel
  // scrolls).
  const auto map_h = [&](float col_h) {
    return beside ? band_map_h(col_h)
                  : std::max(fp * 6, std::min(maps_w * 0.6f, avail.y - notes_h * 2 - caption_h - col_h));
  };
  // The two maps side by side while each keeps its least width, else one above the other.
  float pair_need = fp;
  for (const Map& mp : maps) pair_need += column_w(mp, least);
  const bool one_row = shown < 2 || pair_need <= maps_w;
  const float col_w = one_row && shown == 2 ? (maps_w - fp) / 2 : maps_w;
  // The maps under `col_h` pixels of column labels, and the labels' plans for their cells.
  const auto place_maps = [&](float col_h) {
    const auto width = [&](const Map& mp) { return col_w - mp.labels.row_w - fp * 1.4f - mp.legend_w; };
    for (Map& mp : maps)
      if (mp.m) mp.size = map_size(mp.rows(), mp.cols(), width(mp), map_h(col_h), least);
    // Side by side, the rows of two maps of the same rows line up: both take the lower height.
    if (one_row && shown == 2 && maps[0].rows() == maps[1].rows() && maps[0].size.h != maps[1].size.h) {
      const float h = std::min(maps[0].size.h, maps[1].size.h);
      for (Map& mp : maps) mp.size = map_size(mp.rows(), mp.cols(), width(mp), h, least);
    }
    bool two_lines = false;
    for (Map& mp : maps)
      if (mp.m && mp.labels.cols) {
        mp.labels.plan = column_plan(Rect{0, 0, mp.size.w, mp.size.h}, mp.rows(), mp.cols(), *mp.labels.cols);
        two_lines = two_lines || mp.labels.plan.lines == 2;
      }
    return two_lines;
  };
  // Staggered column labels take a second line above the maps (which shrinks their cells a
  // little: the plans are made again for them, as the chain view's heatmap does); a map that
  // needed two lines keeps them while every label still shows.
  if (place_maps(col_h)) {
    bool staggered[2];
    for (int i = 0; i < 2; ++i) staggered[i] = maps[i].labels.plan.lines == 2;
    col_h = column_label_height(ColumnLabelPlan{1, 2, 0}, fp);
    place_maps(col_h);
    for (int i = 0; i < 2; ++i)
      if (staggered[i] && maps[i].labels.plan.stride == 1) maps[i].labels.plan.lines = 2;
  }
  for (Map& mp : maps) mp.labels.col_h = col_h;
  bool fits = shown > 0;
  for (const Map& mp : maps)
    if (mp.m && (mp.size.w < 4 || mp.size.h < 4)) fits = false;

  const auto draw_maps = [&] {
    const ImVec2 at = ImGui::GetCursorScreenPos();
    if (!fits) {
      // As the chain view: a window too small for a map says so rather than drawing captions alone.
      wrapped(app, tr(lang, S::PlotTooSmall), &kDimV4);
      return;
    }
    Placed placed[2];
    float x = at.x, y = at.y, row_h = 0;
    for (int i = 0; i < 2; ++i) {
      const Map& mp = maps[i];
      if (!mp.m) continue;
      if (!one_row && row_h > 0) {
        y += row_h + fp * 0.5f;
        row_h = 0;
      }
      const Rect r{x + mp.labels.row_w + fp * 0.7f, y + caption_h + col_h, mp.size.w, mp.size.h};
      placed[i] = draw_matrix(app, mp.tex, v.tex_key[i], v.picture[i], v.place[i], *mp.m, mp.mask, r, mp.gradient,
                              mp.log, mp.row, mp.caption, x, mp.labels, v.adopted());
      v.place[i].legend_right = r.right() + mp.legend_w;
      row_h = std::max(row_h, caption_h + col_h + mp.size.h);
      if (one_row) x += col_w + fp;
    }
    const Placed &left = placed[0], &right = placed[1];
    int hr = 0, hc = 0;
    for (const Placed* pl : {&left, &right})
      if (hovered_cell(*pl, hr, hc)) {
        const auto value = [&](const MatrixF* m) {
          return m && hr < m->rows() && hc < m->cols() ? value4((*m)(hr, hc)) : std::string("—");
        };
        // Rows are queries or keys (dV, dK); columns keys where the matrix is queries by keys,
        // else dimensions.
        const std::string row_name =
            pair.query_rows ? fmt(btr(lang, BT::TipQuery), token_label(p.query_tokens(), hr).c_str(), hr)
                            : fmt(btr(lang, BT::TipKey), token_label(p.key_tokens(), hr).c_str(), hr);
        const std::string col_name = pair.key_cols ? fmt(btr(lang, BT::TipKey), token_label(p.key_tokens(), hc).c_str(), hc)
                                              : fmt(btr(lang, BT::TipDim), hc);
        std::string tip = row_name + " · " + col_name + "\n" + pair.forward_name.in(lang) + " = " + value(pair.forward) + "\n" +
                          pair.grad_name.in(lang) + " = " + value(pair.grad);
        if (maps[pl == &left ? 0 : 1].mask && (*mask)(hr, hc) != 0.f) tip += std::string("\n") + tr(lang, S::TipMasked);
        ImGui::SetTooltip("%s", tip.c_str());
      }
    ImGui::Dummy(ImVec2(maps_w, y + row_h - at.y));
    if (pair.grad && right.rows > 0 && (pair.grad->rows() > right.r.h || pair.grad->cols() > right.r.w))
      wrapped(app,
              fmt(btr(lang, BT::Pooled), static_cast<int>(std::ceil(pair.grad->rows() / right.r.h)),
                  static_cast<int>(std::ceil(pair.grad->cols() / right.r.w))),
              &kDimV4);
    if (log_scale) wrapped(app, fmt(btr(lang, BT::LogNote), static_cast<int>(kLogDecades)), &kDimV4);
  };
  // `bottom`: where the sweep's chart may reach down to (it keeps its least height past it).
  const auto concentration = [&](float bottom) {
    section(btr(lang, BT::Concentration));
    // A row without |dS| mass (saturated, or one key) has no shares: "—", not 0 %.
    const auto share = [&r](double s) { return r.mass > 0 ? format_number("%.1f %%", s * 100) : std::string("—"); };
    if (r.top >= 0)
      wrapped(app, fmt(btr(lang, BT::TopKey), token_label(p.key_tokens(), r.top).c_str(), value4(r.p[r.top]).c_str(),
                       share(r.top_share).c_str()));
    wrapped(app, fmt(btr(lang, BT::TopTwo), share(r.top_two_share).c_str(), value4(r.mass).c_str()));
    wrapped(app, fmt(btr(lang, BT::Dt), value4(g->dT).c_str()));
    draw_sweep(app, v, r.query, bottom);
  };
  if (!beside) {
    draw_maps();
    concentration(ImGui::GetCursorScreenPos().y + ImGui::GetContentRegionAvail().y);
  } else if (ImGui::BeginTable("##bw_upper", 2, ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_BordersInnerV)) {
    ImGui::TableSetupColumn("##maps", ImGuiTableColumnFlags_WidthFixed, maps_w);
    ImGui::TableSetupColumn("##mass", ImGuiTableColumnFlags_WidthFixed, right_w);
    ImGui::TableNextRow();
    ImGui::TableSetColumnIndex(0);
    const float at_top = ImGui::GetCursorScreenPos().y;
    draw_maps();
    ImGui::TableSetColumnIndex(1);
    concentration(at_top + band_h);
    ImGui::EndTable();
  }
  if (ImGui::BeginTable("##bw_lower", 2, ImGuiTableFlags_SizingStretchSame | ImGuiTableFlags_BordersInnerV)) {
    ImGui::TableNextRow();
    ImGui::TableSetColumnIndex(0);
    section(fmt(btr(lang, BT::RowTitle), token_label(p.query_tokens(), r.query).c_str()).c_str());
    v.row_table = draw_row(app, p, r);
    wrapped(app, fmt(btr(lang, BT::RowSum), format_number("%.2g", r.row_sum).c_str(), value4(r.D).c_str(),
                     value4(r.p_dp).c_str()));
    ImGui::TableSetColumnIndex(1);
    wrapped(app, btr(lang, BT::RowWhy), &kDimV4);
    wrapped(app, btr(lang, BT::TemperatureLesson));
    ImGui::EndTable();
  }
  wrapped(app, btr(lang, BT::Caveats), &kDimV4);
  ImGui::End();
}

}  // namespace attnlab::viewer
