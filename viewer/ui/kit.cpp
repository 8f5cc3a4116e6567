// The ImGui kit the panels share (see kit.h).
#include "viewer/ui/kit.h"

#include "viewer/draw/layout.h"
#include "core/format.h"
#include "core/modify.h"
#include "viewer/draw/strings.h"

#include <algorithm>
#include <chrono>
#include <cfloat>
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

std::size_t values_fitting(int rows, int also, std::size_t most,
                           const std::function<const std::vector<double>&(int)>& row) {
  const float room = ImGui::GetContentRegionAvail().x;
  const float row_h = table_row_height();
  const int first = std::max(0, static_cast<int>(ImGui::GetScrollY() / row_h) - 1);
  const int last = std::min(rows, first + static_cast<int>(ImGui::GetWindowHeight() / row_h) + 2);
  std::size_t shown = most;
  const auto fit = [&](int r) {
    const std::vector<double>& v = row(r);
    while (shown > 0 && !v.empty() && text_width(values4(v, shown).c_str()) > room) --shown;
  };
  for (int r = first; r < last; ++r) fit(r);
  if (also >= 0 && also < rows) fit(also);
  return shown;
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

const std::vector<std::string>& wrapped_lines(Shell& app, const std::string& text, float width) {
  ImFont* font = ImGui::GetFont();
  const float size = ImGui::GetFontSize();
  // Unrounded advances add up over the pieces of a line; ImGui::CalcTextSize, which the line used
  // to be measured with, rounds the sum up as below (imgui.cpp 1.86). The rounded width is an
  // integer, so the lines depend on floor(width) alone: the cache key stays put while a panel's
  // width moves by a fraction of a pixel.
  return app.wrap_cache.lines(
      text, std::floor(width), font, size,
      [font, size](const std::string& s) {
        return font->CalcTextSizeA(size, FLT_MAX, 0.0f, s.data(), s.data() + s.size()).x;
      },
      [](float w) { return static_cast<float>(static_cast<int>(w + 0.99999f)); });
}

void wrapped_at(Shell& app, const std::string& text, float avail, const ImVec4* colour) {
  const std::vector<std::string>& lines = wrapped_lines(app, text, std::max(40.0f, avail));
  if (colour) ImGui::PushStyleColor(ImGuiCol_Text, *colour);
  for (const std::string& line : lines) ImGui::TextUnformatted(line.data(), line.data() + line.size());
  if (colour) ImGui::PopStyleColor();
}

void wrapped_capped(Shell& app, const std::string& text, float share, const ImVec4* colour) {
  const float width = std::max(40.0f, ImGui::GetContentRegionAvail().x);
  const std::vector<std::string>& lines = wrapped_lines(app, text, width);
  const float line_h = ImGui::GetTextLineHeightWithSpacing();
  const std::size_t most =
      static_cast<std::size_t>(std::max(1.0f, std::floor(ImGui::GetWindowHeight() * share / std::max(1.0f, line_h))));
  if (lines.size() <= most) {
    wrapped_at(app, text, width, colour);
    return;
  }
  if (colour) ImGui::PushStyleColor(ImGuiCol_Text, *colour);
  ImGui::BeginGroup();
  for (std::size_t i = 0; i + 1 < most; ++i) ImGui::TextUnformatted(lines[i].data(), lines[i].data() + lines[i].size());
  // The last line shown runs into the next one, so that "…" ends it wherever it is cut.
  const std::string last = fit_text(lines[most - 1] + " " + lines[most], width);
  ImGui::TextUnformatted(last.data(), last.data() + last.size());
  ImGui::EndGroup();
  if (colour) ImGui::PopStyleColor();
  if (ImGui::IsItemHovered()) {
    ImGui::BeginTooltip();
    wrapped_at(app, text, std::min(width, app.font_px * 30));
    ImGui::EndTooltip();
  }
}

namespace {
float measure_text(const std::string& s) {
  return ImGui::GetFont()->CalcTextSizeA(ImGui::GetFontSize(), FLT_MAX, 0.0f, s.data(), s.data() + s.size()).x;
}
}  // namespace

std::string fit_text(const std::string& text, float width) { return ellipsize(text, width, measure_text); }

std::string text_fit(const std::string& text, const ImVec4& colour) {
  const float room = ImGui::GetContentRegionAvail().x;
  const bool shortened = text_width(text.c_str()) > room;
  const std::string shown = shortened ? fit_text(text, room) : text;
  ImGui::TextColored(colour, "%s", shown.c_str());
  if (shortened && ImGui::IsItemHovered()) ImGui::SetTooltip("%s", text.c_str());
  return shown;
}

bool radio_fit(const char* label, bool active) {
  const std::string whole = label;
  if (whole.find("##") != std::string::npos) return ImGui::RadioButton(label, active);
  const float room = ImGui::GetContentRegionAvail().x - ImGui::GetFrameHeight() - ImGui::GetStyle().ItemInnerSpacing.x;
  if (text_width(label) <= room) return ImGui::RadioButton(label, active);
  const bool pressed = ImGui::RadioButton((fit_text(whole, room) + "###" + whole).c_str(), active);
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", label);
  return pressed;
}

float table_row_height() { return ImGui::GetTextLineHeight() + 2 * ImGui::GetStyle().CellPadding.y; }

float table_fit_height(int rows, float limit) {
  return std::min(limit, static_cast<float>(rows) * table_row_height() + 2);
}

bool slider_double(const char* label, double& v, double lo, double hi, const char* format,
                   ImGuiSliderFlags flags) {
  return ImGui::SliderScalar(label, ImGuiDataType_Double, &v, &lo, &hi, format, flags);
}

bool header_fit(const char* label, const char* id, ImGuiTreeNodeFlags flags) {
  // The arrow and the paddings beside the label, as ImGui 1.86 lays a framed tree node out.
  const ImGuiStyle& st = ImGui::GetStyle();
  const float room = ImGui::GetContentRegionAvail().x - ImGui::GetFontSize() - st.FramePadding.x * 4;
  const bool shortened = text_width(label) > room;
  const std::string shown = shortened ? fit_text(label, room) : std::string(label);
  const bool open = ImGui::CollapsingHeader((shown + "###" + id).c_str(), flags);
  if (shortened && ImGui::IsItemHovered()) ImGui::SetTooltip("%s", label);
  return open;
}

std::string wrapped_text(Shell& app, const std::string& text, float width, bool balanced) {
  width = std::max(1.0f, width);
  if (text_width(text.c_str()) <= width) return text;
  const auto round_up = [](float w) { return static_cast<float>(static_cast<int>(w + 0.99999f)); };
  const std::vector<std::string> lines =
      balanced ? wrap_balanced(text, std::floor(width), measure_text, round_up)
               : app.wrap_cache.lines(text, std::floor(width), ImGui::GetFont(), ImGui::GetFontSize(), measure_text,
                                      round_up);
  std::string out;
  for (const std::string& line : lines) {
    if (!out.empty()) out += '\n';
    out += fit_text(line, width);
  }
  return out;
}

bool selectable_wrapped(Shell& app, const char* label, bool selected) {
  const std::string whole = label;
  const float width = std::max(40.0f, ImGui::GetContentRegionAvail().x);
  if (text_width(label) <= width) return ImGui::Selectable(label, selected);
  return ImGui::Selectable((wrapped_text(app, whole, width) + "###" + whole).c_str(), selected);
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

void begin_header(ScrollHeader& hd, const char* id, float below_min) {
  const float total = ImGui::GetContentRegionAvail().y;
  hd.scrolled = hd.h > 0 && hd.h + below_min > total;
  if (hd.scrolled) ImGui::BeginChild(id, ImVec2(0, std::max(ImGui::GetTextLineHeight() * 2.5f, total - below_min)), false);
  hd.top = ImGui::GetCursorPosY();
}

float map_min_height() { return ImGui::GetTextLineHeightWithSpacing() * 7; }

void end_header(ScrollHeader& hd) {
  hd.h = ImGui::GetCursorPosY() - hd.top;
  if (hd.scrolled) ImGui::EndChild();
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

void pooled_map_note(Shell& app, const PlotGeometry& g, float x, float y, float width, const char* what) {
  if (!g.pooled() || g.px_w <= 0 || g.px_h <= 0) return;
  const int rows = std::max(1, static_cast<int>(std::ceil(g.vis_rows / g.px_h)));
  const int cols = std::max(1, static_cast<int>(std::ceil(g.vis_cols / g.px_w)));
  ImGui::SetCursorScreenPos(ImVec2(x, y));
  ImGui::BeginGroup();
  wrapped_at(app, fmt(tr(app.lang, S::MapPooled), rows, cols, what), width, &kDimV4);
  ImGui::EndGroup();
}

const char* step_name(Lang l, int step, const Problem& p) {
  static constexpr S names[] = {S::Step1, S::Step2, S::Step3, S::Step4};
  if (step == 2 && has_score_mods(p)) return tr(l, S::Step2Mods);
  return tr(l, names[std::clamp(step, 1, 4) - 1]);
}

namespace {
// "words###id" with the words shortened with "…" to a title bar `width` pixels wide.
std::string fit_title(const std::string& title, float width) {
  const std::size_t id = title.find("###");
  const std::string words = title.substr(0, id);
  const float room = width - 2 * ImGui::GetStyle().FramePadding.x;
  if (text_width(words.c_str()) <= room) return title;
  return fit_text(words, room) + (id == std::string::npos ? "###" + words : title.substr(id));
}
}  // namespace

void begin_centre(const Layout& l, const std::string& title) {
  ImGui::SetNextWindowPos(ImVec2(l.heatmap.x, l.heatmap.y), ImGuiCond_Always);
  ImGui::SetNextWindowSize(ImVec2(l.heatmap.w, l.heatmap.h), ImGuiCond_Always);
  ImGui::Begin(fit_title(title, l.heatmap.w).c_str(), nullptr,
               ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoResize | ImGuiWindowFlags_NoCollapse |
                   ImGuiWindowFlags_NoScrollbar | ImGuiWindowFlags_NoScrollWithMouse |
                   ImGuiWindowFlags_NoBringToFrontOnFocus);
}

void begin_wide(const Layout& l, const std::string& title, ImGuiWindowFlags flags) {
  ImGui::SetNextWindowPos(ImVec2(l.heatmap.x, l.heatmap.y), ImGuiCond_Always);
  ImGui::SetNextWindowSize(ImVec2(l.info.right() - l.heatmap.x, l.heatmap.h), ImGuiCond_Always);
  ImGui::Begin(fit_title(title, l.info.right() - l.heatmap.x).c_str(), nullptr,
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
  app.heat_px_view = app.view;
  app.heat_key = key;
  app.last_raster_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void draw_hatch(ImDrawList* dl, ImVec2 a, ImVec2 b, float scale) {
  dl->AddRectFilled(a, b, IM_COL32(kMaskDark.r, kMaskDark.g, kMaskDark.b, 255));
  dl->PushClipRect(a, b, true);
  for (float x = a.x - (b.y - a.y); x < b.x; x += 8 * scale) {
    dl->AddLine(ImVec2(x, b.y), ImVec2(x + (b.y - a.y), a.y),
                IM_COL32(kMaskLight.r, kMaskLight.g, kMaskLight.b, 255), 4 * scale);
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
  // A bar shorter than three lines keeps the labels that do not run into each other: the ends,
  // or below two lines the range on one line ("lo ⋯ hi").
  if (h < 2 * fp) {
    dl->AddText(ImVec2(x + w + 4, y + h / 2 - fp / 2), text, (labels[2] + " ⋯ " + labels[0]).c_str());
    return;
  }
  dl->AddText(ImVec2(x + w + 4, y - 2), text, labels[0].c_str());
  if (h >= 3 * fp) dl->AddText(ImVec2(x + w + 4, y + h / 2 - fp / 2), text, labels[1].c_str());
  dl->AddText(ImVec2(x + w + 4, y + h - fp), text, labels[2].c_str());
}

ColumnLabelPlan column_label_plan(const PlotGeometry& g, int labels, const std::function<float(int)>& width_of) {
  const int c0 = std::max(0, static_cast<int>(std::floor(g.first_col)));
  const int c1 = std::min({g.cols, labels, static_cast<int>(std::ceil(g.first_col + g.vis_cols))});
  if (c1 <= c0 || !(g.cell_w > 0)) return {};
  // Widest label over a sample of at most ~128 visible columns (index labels grow to the right).
  float widest = 0;
  const int sample_step = std::max(1, (c1 - c0) / 128);
  for (int c = c0; c < c1; c += sample_step) widest = std::max(widest, width_of(c));
  widest = std::max(widest, width_of(c1 - 1));
  // A shortened label keeps at least one character and its ellipsis.
  return plan_column_labels(g.cell_w, widest, 8, text_width("中…"));
}

float column_label_height(const ColumnLabelPlan& plan, float fp) { return fp * plan.lines + 4; }

void draw_column_labels(ImDrawList* dl, const PlotGeometry& g, const std::vector<std::string>& labels,
                        const std::function<ImVec2(int)>& size_of, const ColumnLabelPlan& plan, ImU32 colour) {
  const int c0 = std::max(0, static_cast<int>(std::floor(g.first_col)));
  const int c1 = std::min({g.cols, static_cast<int>(labels.size()), static_cast<int>(std::ceil(g.first_col + g.vis_cols))});
  const int stride = std::max(1, plan.stride);
  for (int c = (c0 / stride) * stride; c < c1; c += stride) {
    if (c < c0) continue;
    ImVec2 ts = size_of(c);
    std::string shortened;
    if (plan.max_w > 0 && ts.x > plan.max_w) {
      shortened = fit_text(labels[c], plan.max_w);
      ts = ImGui::CalcTextSize(shortened.c_str());
    }
    // Centred on the visible part, none on a sliver narrower than the label.
    const auto cs = visible_col_span(g, c);
    if (!cs || cs->size() < std::min(g.cell_w, ts.x + 4) - 0.01f) continue;
    const float lift = plan.lines == 2 && c % 2 == 1 ? ts.y : 0.0f;
    dl->AddText(ImVec2(cs->mid() - ts.x / 2, g.y - ts.y - 4 - lift), colour,
                shortened.empty() ? labels[c].c_str() : shortened.c_str());
  }
}

void draw_row_label(ImDrawList* dl, const PlotGeometry& g, const std::string& label, ImVec2 size, int r,
                    ImU32 colour, float fp) {
  if (r < 0 || r >= g.rows) return;
  const auto rs = visible_row_span(g, r);
  if (!rs || rs->size() < std::min(g.cell_h, fp * 0.8f) - 0.01f) return;
  dl->AddText(ImVec2(g.x - fp * 0.4f - size.x, rs->mid() - size.y / 2), colour, label.c_str());
}

float row_labels_width(const std::vector<std::string>& labels, int rows) {
  const int n = std::min(rows, static_cast<int>(labels.size()));
  if (n <= 0) return 0;
  // Tokens differ in width, an index grows to the last: a sample of at most ~128 and the last.
  const int step = n <= 64 ? 1 : std::max(1, n / 128);
  float w = ImGui::CalcTextSize(labels[n - 1].c_str()).x;
  for (int r = 0; r < n; r += step) w = std::max(w, ImGui::CalcTextSize(labels[r].c_str()).x);
  return w;
}

int row_tick_stride(const PlotGeometry& g, float fp) {
  // Every row's label where a line of text fits its row with a little room; ticks 1.6 lines apart.
  return g.cell_h >= fp * 1.15f ? 1 : tick_stride(g.cell_h, fp * 1.6f);
}

void draw_row_ticks(ImDrawList* dl, const PlotGeometry& g, const std::vector<std::string>& labels,
                    const std::function<ImVec2(int)>& size_of, const std::vector<int>& marked, ImU32 colour, float fp) {
  const int r0 = std::max(0, static_cast<int>(std::floor(g.first_row)));
  const int r1 = std::min({g.rows, static_cast<int>(labels.size()), static_cast<int>(std::ceil(g.first_row + g.vis_rows))});
  const int stride = row_tick_stride(g, fp);
  const auto near_marked = [&](int r) {
    for (int m : marked)
      if (m >= 0 && r != m && std::abs(row_y(g, r + 0.5) - row_y(g, m + 0.5)) < fp) return true;
    return false;
  };
  for (int r = (r0 / stride) * stride; r < r1; r += stride) {
    if (r < r0 || near_marked(r)) continue;
    draw_row_label(dl, g, labels[r], size_of(r), r, colour, fp);
  }
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
  // in far enough. The labels are measured and drawn at `label_scale` of the text's size, as the
  // chain's are: smaller only at a UI scale above the default, down to the default's size, at the
  // largest size that shows every visible row's and column's label whole (at a projector's scale
  // in a small window a few tokens' map had kept one label a side); the window's font scale is
  // label_scale while they are measured and drawn.
  const int measured = std::min(rows, static_cast<int>(row_labels.size()));
  float label_scale = 1, row_w = 0;
  const auto col_size = [&](int c) { return ImGui::CalcTextSize(col_labels[c].c_str()); };
  const int col_count = static_cast<int>(col_labels.size());
  // The plot under `col_h` pixels of column labels.
  const auto place = [&](float col_h) {
    const HeatmapFrame frame = compute_heatmap_frame(area, row_w, col_h, fp);
    // A legend column wide enough for "1.23e-04" and the words under the bar.
    Rect plot_area = frame.plot_area;
    plot_area.w = std::max(0.0f, plot_area.w - fp * 2.5f);
    out.legend = {plot_area.right() + fp * 0.5f, frame.legend.y, area.right() - plot_area.right() - fp * 0.5f,
                  frame.legend.h};
    out.g = place_plot(plot_area.x, plot_area.y, plot_area.w, plot_area.h, rows, cols, view);
    return column_label_plan(out.g, col_count, [&](int c) { return col_size(c).x; });
  };
  // Column labels on two staggered lines take a second line above the plot (which narrows its
  // cells a little: the plan is made again for them).
  ColumnLabelPlan col_plan;
  const auto place_all = [&] {
    const float lfp = fp * label_scale;
    ImGui::SetWindowFontScale(label_scale);
    row_w = row_labels_width(row_labels, rows);
    if (row_w > 0) row_w += lfp * 0.6f;
    col_plan = place(column_label_height({}, lfp));
    if (col_plan.lines == 2) {
      col_plan = place(column_label_height(col_plan, lfp));
      col_plan.lines = std::max(col_plan.lines, col_plan.stride == 1 ? 2 : 1);
    }
    ImGui::SetWindowFontScale(1);
  };
  const float min_label_scale = std::clamp(1.0f / app.ui_scale, 0.5f, 1.0f);
  const auto all_labels = [&] {
    return col_plan.stride == 1 && col_plan.max_w == 0 && out.g.cell_h >= fp * label_scale * 1.15f;
  };
  for (float s = 1;; s = std::max(min_label_scale, s - 0.05f)) {
    label_scale = s;
    place_all();
    if (all_labels() || s <= min_label_scale) break;
  }
  if (!all_labels() && label_scale < 1) {  // no size shows them all: full-size ticks, as at scale 1
    label_scale = 1;
    place_all();
  }
  out.label_scale = label_scale;
  out.all_labels = all_labels();
  const PlotGeometry& g = out.g;
  app.plot = g;
  if (g.px_w <= 0 || g.px_h <= 0 || g.h < 2 * fp) {
    out.too_small = true;
    out.g.px_w = out.g.px_h = 0;
    ImGui::SetCursorScreenPos(ImVec2(area.x, area.y));
    wrapped_at(app, tr(app.lang, S::PlotTooSmall), area.w, &kDimV4);
    return out;
  }
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
  // Labels of the visible rows and columns: all where they fit, else evenly spaced ticks (the
  // chain's rule), the highlighted row's always.
  ImGui::SetWindowFontScale(label_scale);
  if (row_w > 0) {
    const float lfp = fp * label_scale;
    const auto row_size = [&](int r) { return ImGui::CalcTextSize(row_labels[r].c_str()); };
    draw_row_ticks(dl, g, row_labels, row_size, {highlight_row}, text, lfp);
    if (highlight_row >= 0 && highlight_row < measured)
      draw_row_label(dl, g, row_labels[highlight_row], row_size(highlight_row), highlight_row, kHighlight, lfp);
  }
  draw_column_labels(dl, g, col_labels, col_size, col_plan, text);
  ImGui::SetWindowFontScale(1);
  const float s = mark(app);
  dl->PushClipRect(ImVec2(g.x - 3 * s, g.y - 3 * s), ImVec2(g.x + g.w + 3 * s, g.y + g.h + 3 * s), true);
  if (highlight_row >= 0)
    if (auto band = row_band(g, highlight_row, 3 * s))
      dl->AddRect(ImVec2(g.x - 2 * s, band->y0 - 2 * s), ImVec2(g.x + g.w + 2 * s, band->y1 + 2 * s), kHighlight, 0, 0,
                  3 * s);
  if (out.hover && g.cell_w >= 4 && g.cell_h >= 4)
    dl->AddRect(ImVec2(col_x(g, out.hover->col), row_y(g, out.hover->row)),
                ImVec2(col_x(g, out.hover->col + 1), row_y(g, out.hover->row + 1)), IM_COL32_WHITE, 0, 0, 2 * s);
  dl->PopClipRect();
  return out;
}

void set_status(Shell& app, std::function<std::string(Lang)> text) {
  // Four seconds, longer for a long line (a refusal that names a whole command to run instead):
  // time to read it at about fifteen bytes a second.
  const double read_s = static_cast<double>(text(app.lang).size()) / 15;
  app.status = std::move(text);
  app.status_until = seconds_now() + std::max(4.0, read_s);
}

void set_status(Shell& app, const std::string& text) {
  set_status(app, [text](Lang) { return text; });
}

}  // namespace attnlab::viewer
