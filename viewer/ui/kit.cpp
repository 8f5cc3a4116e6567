// The ImGui kit the panels share (see kit.h).
#include "viewer/ui/kit.h"

#include "viewer/draw/layout.h"
#include "core/format.h"
#include "viewer/draw/strings.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <iterator>

namespace attnlab::viewer {

ImU32 query_colour(int i) {
  // Saturated hues away from viridis' blue-green-yellow ramp and from each other.
  static constexpr ImU32 kOthers[] = {
      IM_COL32(90, 200, 255, 255),  IM_COL32(255, 90, 210, 255), IM_COL32(255, 170, 200, 255),
      IM_COL32(255, 70, 70, 255),   IM_COL32(190, 140, 255, 255), IM_COL32(160, 255, 90, 255),
      IM_COL32(255, 200, 120, 255),
  };
  if (i <= 0) return kHighlight;
  return kOthers[(i - 1) % std::size(kOthers)];
}

std::string value4(double x) {
  if (std::isnan(x)) return "—";
  if (std::isinf(x)) return x < 0 ? "−∞" : "+∞";
  std::string s = format_number("%.4g", x);
  return s == "-0" ? "0" : s;
}

std::string values4(const std::vector<double>& v, std::size_t max_items) {
  if (v.empty()) return "—";
  std::string s = "[";
  for (std::size_t i = 0; i < v.size() && i < max_items; ++i) s += (i ? ", " : "") + value4(v[i]);
  if (v.size() > max_items) s += ", …";
  return s + "]";
}

ImU32 okabe_ito(std::size_t i) {
  static constexpr ImU32 kPalette[] = {IM_COL32(230, 159, 0, 255),   IM_COL32(86, 180, 233, 255),
                                       IM_COL32(0, 158, 115, 255),   IM_COL32(240, 228, 66, 255),
                                       IM_COL32(0, 114, 178, 255),   IM_COL32(213, 94, 0, 255),
                                       IM_COL32(204, 121, 167, 255), IM_COL32(200, 200, 200, 255)};
  return kPalette[i % std::size(kPalette)];
}

std::string fmt(const char* f, ...) {
  char buf[2048];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

// A heading line between control groups (ImGui 1.86 has no SeparatorText).
void section(const char* text) {
  ImGui::Spacing();
  ImGui::Separator();
  ImGui::TextColored(kHighlightV4, "%s", text);
}

// ImGui 1.86 wraps at spaces and ASCII punctuation only: it splits "0.219" after the dot and
// breaks Chinese runs arbitrarily. wrap_lines (viewer/draw/strings.h) breaks at spaces and around CJK
// characters, never inside a number or a word, and keeps closing punctuation off the start of a
// line. The lines are cached (app.wrap_cache): the description, the notes and the caveat are drawn
// every frame but change only with the state, the language or the panel's width.
void wrapped(Shell& app, const std::string& text, const ImVec4* colour) {
  wrapped_at(app, text, ImGui::GetContentRegionAvail().x, colour);
}

void wrapped_at(Shell& app, const std::string& text, float avail, const ImVec4* colour) {
  const float width = std::max(40.0f, avail);
  ImFont* font = ImGui::GetFont();
  const float size = ImGui::GetFontSize();
  // Unrounded advances add up over the pieces of a line; ImGui::CalcTextSize, which the line used
  // to be measured with, rounds the sum up as below (imgui.cpp 1.86). The rounded width is an
  // integer, so the lines depend on floor(width) alone: the cache key stays put while a panel's
  // width moves by a fraction of a pixel.
  const std::vector<std::string>& lines = app.wrap_cache.lines(
      text, std::floor(width), font, size,
      [font, size](const std::string& s) {
        return font->CalcTextSizeA(size, FLT_MAX, 0.0f, s.data(), s.data() + s.size()).x;
      },
      [](float w) { return static_cast<float>(static_cast<int>(w + 0.99999f)); });
  if (colour) ImGui::PushStyleColor(ImGuiCol_Text, *colour);
  for (const std::string& line : lines) ImGui::TextUnformatted(line.data(), line.data() + line.size());
  if (colour) ImGui::PopStyleColor();
}

// Widths of a radio button, a button and a text with `label` (up to any "##"), as ImGui 1.86 lays
// them out, and SameLine() only when an item that wide still fits on the current line: at the
// minimum window (960 x 600) a row of controls wraps instead of being cut at the panel's edge.
float radio_width(const char* label) {
  return ImGui::GetFrameHeight() + ImGui::GetStyle().ItemInnerSpacing.x + ImGui::CalcTextSize(label, nullptr, true).x;
}
float button_width(const char* label) {
  return ImGui::CalcTextSize(label, nullptr, true).x + 2 * ImGui::GetStyle().FramePadding.x;
}
float text_width(const char* text) { return ImGui::CalcTextSize(text).x; }
void same_line_if_fits(float width) {
  const float right_edge = ImGui::GetWindowPos().x + ImGui::GetWindowContentRegionMax().x;
  if (ImGui::GetItemRectMax().x + ImGui::GetStyle().ItemSpacing.x + width <= right_edge) ImGui::SameLine();
}

double seconds_now() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

bool ensure_texture(Shell& app, SDL_Texture*& tex, int& tex_w, int& tex_h, int w, int h) {
  if (tex && tex_w == w && tex_h == h) return true;
  if (tex) SDL_DestroyTexture(tex);
  tex = SDL_CreateTexture(app.renderer, SDL_PIXELFORMAT_RGBA32, SDL_TEXTUREACCESS_STREAMING, w, h);
  if (!tex) {
    set_status(app, std::string("SDL_CreateTexture: ") + SDL_GetError());
    return false;
  }
  SDL_SetTextureScaleMode(tex, SDL_ScaleModeNearest);
  tex_w = w;
  tex_h = h;
  return true;
}

const char* step_name(Lang l, int step) {
  static constexpr S names[] = {S::Step1, S::Step2, S::Step3, S::Step4};
  return tr(l, names[std::clamp(step, 1, 4) - 1]);
}

void begin_centre(const Layout& l, const std::string& title) {
  ImGui::SetNextWindowPos(ImVec2(l.heatmap.x, l.heatmap.y), ImGuiCond_Always);
  ImGui::SetNextWindowSize(ImVec2(l.heatmap.w, l.heatmap.h), ImGuiCond_Always);
  ImGui::Begin(title.c_str(), nullptr,
               ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoResize | ImGuiWindowFlags_NoCollapse |
                   ImGuiWindowFlags_NoScrollbar | ImGuiWindowFlags_NoScrollWithMouse |
                   ImGuiWindowFlags_NoBringToFrontOnFocus);
}

void begin_wide(const Layout& l, const std::string& title, ImGuiWindowFlags flags) {
  ImGui::SetNextWindowPos(ImVec2(l.heatmap.x, l.heatmap.y), ImGuiCond_Always);
  ImGui::SetNextWindowSize(ImVec2(l.info.right() - l.heatmap.x, l.heatmap.h), ImGuiCond_Always);
  ImGui::Begin(title.c_str(), nullptr,
               flags | ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoResize | ImGuiWindowFlags_NoCollapse |
                   ImGuiWindowFlags_NoBringToFrontOnFocus | ImGuiWindowFlags_NoScrollbar);
}

void upload_texture(Shell& app, std::vector<std::uint32_t> px, int w, int h, const std::string& key,
                    std::chrono::steady_clock::time_point t0) {
  if (!app.heat_tex || app.tex_w != w || app.tex_h != h) {
    if (app.heat_tex) SDL_DestroyTexture(app.heat_tex);
    app.heat_tex = SDL_CreateTexture(app.renderer, SDL_PIXELFORMAT_RGBA32, SDL_TEXTUREACCESS_STREAMING, w, h);
    if (!app.heat_tex) {
      set_status(app, std::string("SDL_CreateTexture: ") + SDL_GetError());
      return;
    }
    SDL_SetTextureScaleMode(app.heat_tex, SDL_ScaleModeNearest);
    app.tex_w = w;
    app.tex_h = h;
  }
  SDL_UpdateTexture(app.heat_tex, nullptr, px.data(), w * 4);
  app.heat_px = std::move(px);
  app.heat_px_w = w;
  app.heat_px_h = h;
  app.heat_key = key;
  app.last_raster_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void draw_hatch(ImDrawList* dl, ImVec2 a, ImVec2 b) {
  dl->AddRectFilled(a, b, IM_COL32(kMaskDark.r, kMaskDark.g, kMaskDark.b, 255));
  dl->PushClipRect(a, b, true);
  for (float x = a.x - (b.y - a.y); x < b.x; x += 8) {
    dl->AddLine(ImVec2(x, b.y), ImVec2(x + (b.y - a.y), a.y),
                IM_COL32(kMaskLight.r, kMaskLight.g, kMaskLight.b, 255), 4);
  }
  dl->PopClipRect();
}

void draw_colour_bar(ImDrawList* dl, float x, float y, float w, float h, const std::array<Rgb8, 256>& table,
                     const std::array<std::string, 3>& labels) {
  const int strips = 64;
  for (int i = 0; i < strips; ++i) {
    const Rgb8 col = table[static_cast<int>(std::lround((1.0 - (i + 0.5) / strips) * 255))];
    dl->AddRectFilled(ImVec2(x, y + h * i / strips), ImVec2(x + w, y + h * (i + 1) / strips + 1),
                      IM_COL32(col.r, col.g, col.b, 255));
  }
  const ImU32 text = ImGui::GetColorU32(ImGuiCol_Text);
  dl->AddRect(ImVec2(x, y), ImVec2(x + w, y + h), text);
  const float fp = ImGui::GetFontSize();
  dl->AddText(ImVec2(x + w + 4, y - 2), text, labels[0].c_str());
  dl->AddText(ImVec2(x + w + 4, y + h / 2 - fp / 2), text, labels[1].c_str());
  dl->AddText(ImVec2(x + w + 4, y + h - fp), text, labels[2].c_str());
}

void map_view_controls(Shell& app, bool same_line) {
  const char* reset = tr(app.lang, S::ResetView);
  if (same_line) same_line_if_fits(button_width(reset));
  if (ImGui::Button(fmt("%s###mapreset", reset).c_str())) app.map_view = HeatView{};
  const std::string zoom = fmt(tr(app.lang, S::Zoom), app.map_view.zoom());
  same_line_if_fits(text_width(zoom.c_str()));
  ImGui::TextUnformatted(zoom.c_str());
}

MapPlot draw_map(Shell& app, const Rect& area, int rows, int cols, const std::vector<std::string>& row_labels,
                 const std::vector<std::string>& col_labels, int highlight_row, const std::string& key,
                 const std::function<std::vector<std::uint32_t>(const PlotGeometry&)>& raster) {
  MapPlot out;
  const float fp = app.font_px;
  HeatView& view = app.map_view;
  if (app.map_view_problem != app.session.problem_revision()) {
    view = HeatView{};
    app.map_view_problem = app.session.problem_revision();
  }
  // Row labels: every one when few, else room for the widest index (the last), shown once zoomed
  // in far enough.
  float row_w = 0;
  const int measured = std::min(rows, static_cast<int>(row_labels.size()));
  if (rows <= 64) {
    for (int r = 0; r < measured; ++r) row_w = std::max(row_w, ImGui::CalcTextSize(row_labels[r].c_str()).x);
  } else if (measured > 0) {
    row_w = ImGui::CalcTextSize(row_labels[measured - 1].c_str()).x;
  }
  if (row_w > 0) row_w += fp * 0.6f;
  const HeatmapFrame frame = compute_heatmap_frame(area, row_w, fp + 4, fp);
  // A legend column wide enough for "1.23e-04" and the words under the bar.
  Rect plot_area = frame.plot_area;
  plot_area.w = std::max(0.0f, plot_area.w - fp * 2.5f);
  out.legend = {plot_area.right() + fp * 0.5f, frame.legend.y, area.right() - plot_area.right() - fp * 0.5f,
                frame.legend.h};
  out.g = place_plot(plot_area.x, plot_area.y, plot_area.w, plot_area.h, rows, cols, view);
  const PlotGeometry& g = out.g;
  app.plot = g;
  if (g.px_w <= 0 || g.px_h <= 0) return out;
  char win[96];
  std::snprintf(win, sizeof win, "|%dx%d|%.9f|%.9f|%.9f|%.9f", g.px_w, g.px_h, view.x0, view.y0, view.x1, view.y1);
  const std::string full_key = key + win;
  if (!app.heat_tex || app.heat_key != full_key) {
    const auto t0 = std::chrono::steady_clock::now();
    upload_texture(app, raster(g), g.px_w, g.px_h, full_key, t0);
  }
  ImDrawList* dl = ImGui::GetWindowDrawList();
  // The plot is one invisible button: hover, wheel to zoom, drag to pan, double-click for the
  // whole matrix (as the chain view's heatmap, apart from the double-click).
  ImGui::SetCursorScreenPos(ImVec2(g.x, g.y));
  ImGui::InvisibleButton("##map", ImVec2(std::max(1.0f, g.w), std::max(1.0f, g.h)));
  const ImGuiIO& io = ImGui::GetIO();
  if (ImGui::IsItemHovered()) {
    out.hover = hit_test(g, io.MousePos.x, io.MousePos.y);
    if (io.MouseWheel != 0) {
      const double fx = view.x0 + (io.MousePos.x - g.x) / g.w * (view.x1 - view.x0);
      const double fy = view.y0 + (io.MousePos.y - g.y) / g.h * (view.y1 - view.y0);
      view = zoom_view(view, fx, fy, std::pow(1.25, io.MouseWheel), rows, cols);
    }
    if (ImGui::IsMouseDoubleClicked(ImGuiMouseButton_Left) || app.double_click) view = HeatView{};
  }
  if (ImGui::IsItemActive() && ImGui::IsMouseDragging(ImGuiMouseButton_Left, 1.0f))
    view = pan_view(view, -io.MouseDelta.x / g.w * (view.x1 - view.x0), -io.MouseDelta.y / g.h * (view.y1 - view.y0));
  if (app.heat_tex)
    dl->AddImage(reinterpret_cast<ImTextureID>(app.heat_tex), ImVec2(g.x, g.y), ImVec2(g.x + g.w, g.y + g.h));
  const ImU32 text = ImGui::GetColorU32(ImGuiCol_Text);
  // Labels of the visible rows and columns, where a cell has room for them.
  const int r0 = static_cast<int>(std::floor(g.first_row)), r1 = static_cast<int>(std::ceil(g.first_row + g.vis_rows));
  const int c0 = static_cast<int>(std::floor(g.first_col)), c1 = static_cast<int>(std::ceil(g.first_col + g.vis_cols));
  if (row_w > 0 && g.cell_h >= fp * 0.9f)
    for (int r = std::max(0, r0); r < std::min(r1, measured); ++r) {
      const float y = row_y(g, r + 0.5);
      if (y < g.y || y > g.y + g.h) continue;
      const ImVec2 ts = ImGui::CalcTextSize(row_labels[r].c_str());
      dl->AddText(ImVec2(g.x - fp * 0.4f - ts.x, y - ts.y / 2), r == highlight_row ? kHighlight : text,
                  row_labels[r].c_str());
    }
  // Only where a column is wide enough for one digit: no label is measured for a pooled axis.
  if (g.cell_w >= fp * 0.6f)
    for (int c = std::max(0, c0); c < std::min({c1, cols, static_cast<int>(col_labels.size())}); ++c) {
      const float x = col_x(g, c + 0.5);
      if (x < g.x || x > g.x + g.w) continue;
      const ImVec2 ts = ImGui::CalcTextSize(col_labels[c].c_str());
      if (ts.x + 4 > g.cell_w) continue;
      dl->AddText(ImVec2(x - ts.x / 2, g.y - ts.y - 4), text, col_labels[c].c_str());
    }
  dl->PushClipRect(ImVec2(g.x - 3, g.y - 3), ImVec2(g.x + g.w + 3, g.y + g.h + 3), true);
  if (highlight_row >= 0)
    if (auto band = row_band(g, highlight_row, 3))
      dl->AddRect(ImVec2(g.x - 2, band->y0 - 2), ImVec2(g.x + g.w + 2, band->y1 + 2), kHighlight, 0, 0, 3);
  if (out.hover && g.cell_w >= 4 && g.cell_h >= 4)
    dl->AddRect(ImVec2(col_x(g, out.hover->col), row_y(g, out.hover->row)),
                ImVec2(col_x(g, out.hover->col + 1), row_y(g, out.hover->row + 1)), IM_COL32_WHITE, 0, 0, 2);
  dl->PopClipRect();
  return out;
}

void set_status(Shell& app, const std::string& text) {
  app.status = text;
  app.status_until = seconds_now() + 4;
}

}  // namespace attnlab::viewer
