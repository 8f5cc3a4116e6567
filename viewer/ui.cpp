// The ImGui windows of attnlab-view (see ui.h): controls on the left, the heatmap in the centre,
// statistics / description / tables / performance / notes on the right, the caveat bar at the
// bottom, and the F1 key help. Everything the windows show comes from the Controller; the heatmap
// pixels come from rasterize() (viewer/heatmap.h) and are uploaded into one SDL texture.
#include "viewer/ui.h"

#include "core/format.h"

#include "viewer/font_file.h"
#include "viewer/strings.h"

#include <imgui.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <sys/stat.h>
#include <vector>

namespace attnlab::viewer {
namespace {

// Outside the viridis scale (which has no saturated orange): the selected query row.
constexpr ImU32 kHighlight = IM_COL32(255, 140, 0, 255);
const ImVec4 kHighlightV4(1.0f, 0.55f, 0.0f, 1.0f);
const ImVec4 kErrorV4(1.0f, 0.45f, 0.45f, 1.0f);
const ImVec4 kDimV4(0.7f, 0.7f, 0.7f, 1.0f);

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
// breaks Chinese runs arbitrarily. wrap_lines (viewer/strings.h) breaks at spaces and around CJK
// characters, never inside a number or a word, and keeps closing punctuation off the start of a
// line. The lines are cached (app.wrap_cache): the description, the notes and the caveat are drawn
// every frame but change only with the state, the language or the panel's width.
void wrapped(App& app, const std::string& text, const ImVec4* colour = nullptr) {
  const float width = std::max(40.0f, ImGui::GetContentRegionAvail().x);
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

const char* step_name(Lang l, int step) {
  static constexpr S names[] = {S::Step1, S::Step2, S::Step3, S::Step4};
  return tr(l, names[std::clamp(step, 1, 4) - 1]);
}

// ---- fonts ------------------------------------------------------------------------------------

struct FontFile {
  std::string path;
  int index = 0;
};

bool file_exists(const std::string& p) {
  struct stat st{};
  return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string run_fc_match(const char* pattern) {
  const std::string cmd = std::string("fc-match -f '%{file}:%{index}' '") + pattern + "' 2>/dev/null";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  if (!pipe) return {};
  char buf[1024] = {};
  const std::size_t got = std::fread(buf, 1, sizeof buf - 1, pipe.get());
  return std::string(buf, got);
}

FontFile parse_font_spec(const std::string& spec) {
  const auto colon = spec.rfind(':');
  if (colon != std::string::npos && colon + 1 < spec.size() &&
      spec.find_first_not_of("0123456789", colon + 1) == std::string::npos) {
    return {spec.substr(0, colon), std::stoi(spec.substr(colon + 1))};
  }
  return {spec, 0};
}

// Known Debian locations first (fonts-noto-cjk; index 2 of the .ttc is the Simplified Chinese
// face), then whatever fontconfig says serves Chinese. $ATTNLAB_FONT=path[:index] overrides.
std::vector<FontFile> cjk_font_candidates() {
  std::vector<FontFile> c;
  if (const char* env = std::getenv("ATTNLAB_FONT"); env && *env) c.push_back(parse_font_spec(env));
  c.push_back({"/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc", 2});
  c.push_back({"/usr/share/fonts/truetype/noto/NotoSansCJK-Regular.ttc", 2});
  c.push_back({"/usr/share/fonts/opentype/noto/NotoSansCJKsc-Regular.otf", 0});
  for (const char* pattern : {"Noto Sans CJK SC", ":lang=zh-cn"}) {
    const std::string m = run_fc_match(pattern);
    if (!m.empty()) c.push_back(parse_font_spec(m));
  }
  c.push_back({"/usr/share/fonts/truetype/wqy/wqy-microhei.ttc", 0});
  c.push_back({"/usr/share/fonts/truetype/droid/DroidSansFallbackFull.ttf", 0});
  return c;
}

}  // namespace

void load_fonts(App& app, float font_px) {
  app.font_px = font_px;
  ImGuiIO& io = ImGui::GetIO();
  // Glyphs: every UI string, the tokens, the core's description/caveat/mask texts in both
  // languages, plus the symbol blocks numbers and formulas use. Building from what is used keeps
  // the atlas at a few hundred CJK glyphs instead of 20 000.
  std::set<unsigned> cps;
  auto add_text = [&](const std::string& s) {
    for (unsigned cp : utf8_codepoints(s)) cps.insert(cp);
  };
  for (const std::string& s : all_ui_text()) add_text(s);
  for (const std::string& t : app.ctl.problem().query_tokens) add_text(t);
  for (const std::string& t : app.ctl.problem().key_tokens) add_text(t);
  add_text(demo_problem().sentence);
  for (const std::string& t : demo_problem().query_tokens) add_text(t);
  for (Lang l : {Lang::Zh, Lang::En}) {
    add_text(app.ctl.description(l));
    add_text(caveat(l));
    for (MaskKind m : {MaskKind::None, MaskKind::Causal, MaskKind::Custom}) add_text(mask_sentence(m, l));
  }
  for (unsigned a = 0x20; a <= 0xFF; ++a) cps.insert(a);
  for (auto [lo, hi] : {std::pair{0x2000u, 0x206Fu}, {0x2070u, 0x209Fu}, {0x2190u, 0x21FFu},
                        {0x2200u, 0x22FFu}, {0x25A0u, 0x25FFu}, {0x3000u, 0x303Fu},
                        {0xFF00u, 0xFFEFu}, {0x1D40u, 0x1D40u}}) {
    for (unsigned a = lo; a <= hi; ++a) cps.insert(a);
  }
  static std::vector<ImWchar> ranges;  // must outlive the atlas build
  ranges.clear();
  for (auto it = cps.begin(); it != cps.end();) {
    if (*it > 0xFFFF) break;  // ImWchar is 16-bit in Debian's build
    unsigned lo = *it, hi = *it;
    for (++it; it != cps.end() && *it == hi + 1 && *it <= 0xFFFF; ++it) hi = *it;
    ranges.push_back(static_cast<ImWchar>(lo));
    ranges.push_back(static_cast<ImWchar>(hi));
  }
  ranges.push_back(0);

  ImFont* font = nullptr;
  for (const FontFile& f : cjk_font_candidates()) {
    if (!file_exists(f.path)) continue;
    if (!font_file_usable(f.path, f.index)) {
      std::fprintf(stderr, "attnlab-view: skipping font %s:%d (not a TrueType/OpenType font, or no such index)\n",
                   f.path.c_str(), f.index);
      continue;
    }
    ImFontConfig cfg;
    cfg.FontNo = f.index;
    cfg.OversampleH = 2;
    cfg.OversampleV = 1;
    font = io.Fonts->AddFontFromFileTTF(f.path.c_str(), font_px, &cfg, ranges.data());
    if (font) {
      app.font_note = f.path + ":" + std::to_string(f.index);
      break;
    }
  }
  if (!font) {
    app.font_note = "no CJK font found (install fonts-noto-cjk); Chinese text shows as '?'";
    ImFontConfig cfg;
    cfg.SizePixels = font_px;
    io.Fonts->AddFontDefault(&cfg);
    return;
  }
  // Noto Sans CJK lacks a few formula glyphs (superscript T, subscript k); DejaVu fills them in.
  // In merge mode ImGui keeps glyphs already present, so DejaVu only adds the missing ones.
  const char* dejavu = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
  if (file_exists(dejavu) && font_file_usable(dejavu, 0)) {
    ImFontConfig cfg;
    cfg.MergeMode = true;
    io.Fonts->AddFontFromFileTTF(dejavu, font_px, &cfg, ranges.data());
  }
}

void set_status(App& app, const std::string& text) {
  app.status = text;
  app.status_until = seconds_now() + 4;
}

void apply_action(App& app, Action a) {
  Controller& c = app.ctl;
  switch (a) {
    case Action::TogglePlay: app.play.toggle_play(); break;
    case Action::StepNext: app.play.next(); break;
    case Action::StepPrev: app.play.prev(); break;
    case Action::StepHome: app.play.home(); break;
    case Action::QueryPrev: c.move_query(-1); break;
    case Action::QueryNext: c.move_query(+1); break;
    case Action::ToggleMask: c.toggle_mask(); break;
    case Action::TemperatureDown:
    case Action::TemperatureUp:
      app.pending_temperature = step_temperature(app.pending_temperature.value_or(c.problem().temperature),
                                                 a == Action::TemperatureUp);
      break;
    case Action::ToggleLanguage: app.lang = app.lang == Lang::Zh ? Lang::En : Lang::Zh; break;
    case Action::Screenshot: app.screenshot_requested = true; break;
    case Action::ToggleHelp: app.show_help = !app.show_help; break;
    case Action::Quit: app.quit = true; break;
  }
}


void apply_pending(App& app) {
  if (!app.pending_temperature) return;
  const double t = *app.pending_temperature;
  app.pending_temperature.reset();
  app.ctl.set_temperature(t);
}

ViewSnapshot snapshot(const App& app) {
  ViewSnapshot s;
  s.playback = &app.play;
  s.lang = app.lang;
  if (app.window) SDL_GetWindowSize(app.window, &s.width, &s.height);
  s.pool = app.pool;
  s.plot = app.plot;
  return s;
}

void dump_state_if_changed(App& app) {
  if (app.state_dump_path.empty()) return;
  const std::string json = state_json(app.ctl, snapshot(app));
  if (json == app.last_dump) return;
  write_text_file(app.state_dump_path, json);
  app.last_dump = json;
}

namespace {

// ---- heatmap ----------------------------------------------------------------------------------

void update_texture(App& app, const MatrixF& m, bool masked_step, bool log_scale) {
  const PlotGeometry& g = app.plot;
  const Trace& t = app.ctl.trace();
  char key[256];
  std::snprintf(key, sizeof key, "%llu|%p|%d|%d|%d|%.9f|%.9f|%.9f|%.9f|%d|%d",
                static_cast<unsigned long long>(app.ctl.revision()), static_cast<const void*>(&m),
                g.px_w, g.px_h, static_cast<int>(app.pool), app.view.x0, app.view.y0, app.view.x1,
                app.view.y1, masked_step ? 1 : 0, log_scale ? 1 : 0);
  if (app.heat_tex && key == app.heat_key) return;
  const auto t0 = std::chrono::steady_clock::now();
  RasterInput in;
  in.values = m.data();
  in.rows = static_cast<int>(m.rows());
  in.cols = static_cast<int>(m.cols());
  in.mask = masked_step && t.mask.size() ? t.mask.data() : nullptr;
  in.mask_rows = static_cast<int>(t.mask.rows());
  in.range = finite_range(in.values, in.rows, in.cols, in.mask, in.mask_rows);
  in.log_scale = log_scale;
  if (log_scale) in.range = log_range(in.range);
  in.pool = app.pool;
  app.range = in.range;
  app.range_log = log_scale;
  const std::vector<std::uint32_t> px = rasterize(in, g);
  if (!app.heat_tex || app.tex_w != g.px_w || app.tex_h != g.px_h) {
    if (app.heat_tex) SDL_DestroyTexture(app.heat_tex);
    app.heat_tex = SDL_CreateTexture(app.renderer, SDL_PIXELFORMAT_RGBA32, SDL_TEXTUREACCESS_STREAMING,
                                     g.px_w, g.px_h);
    if (!app.heat_tex) {
      set_status(app, std::string("SDL_CreateTexture: ") + SDL_GetError());
      return;
    }
    SDL_SetTextureScaleMode(app.heat_tex, SDL_ScaleModeNearest);
    app.tex_w = g.px_w;
    app.tex_h = g.px_h;
  }
  SDL_UpdateTexture(app.heat_tex, nullptr, px.data(), g.px_w * 4);
  app.heat_key = key;
  app.last_raster_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
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
void update_texture_pooled(App& app, const PooledGrid& pg, int step, bool log_scale, bool grid) {
  const PoolRequest& v = app.ctl.pooled_view();
  char key[160];
  std::snprintf(key, sizeof key, "pooled|%llu|%d|%d|%d|%d|%d", static_cast<unsigned long long>(app.ctl.revision()),
                step, pg.rows, pg.cols, log_scale ? 1 : 0, grid ? 1 : 0);
  if (app.heat_tex && key == app.heat_key) return;
  const auto t0 = std::chrono::steady_clock::now();
  ValueRange range = pg.has_range ? ValueRange{pg.lo, pg.hi} : ValueRange{};
  if (log_scale) range = log_range(range);
  app.range = range;
  app.range_log = log_scale;
  const std::vector<std::uint32_t> px =
      rasterize_cells(pg.cells, to_axis_map(v.rows), to_axis_map(v.cols), range, log_scale, grid);
  if (!app.heat_tex || app.tex_w != pg.cols || app.tex_h != pg.rows) {
    if (app.heat_tex) SDL_DestroyTexture(app.heat_tex);
    app.heat_tex = SDL_CreateTexture(app.renderer, SDL_PIXELFORMAT_RGBA32, SDL_TEXTUREACCESS_STREAMING, pg.cols, pg.rows);
    if (!app.heat_tex) {
      set_status(app, std::string("SDL_CreateTexture: ") + SDL_GetError());
      return;
    }
    SDL_SetTextureScaleMode(app.heat_tex, SDL_ScaleModeNearest);
    app.tex_w = pg.cols;
    app.tex_h = pg.rows;
  }
  SDL_UpdateTexture(app.heat_tex, nullptr, px.data(), pg.cols * 4);
  app.heat_key = key;
  app.last_raster_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Hatched swatch (the legend's "masked" entry and masked cells' look in the legend).
void draw_hatch(ImDrawList* dl, ImVec2 a, ImVec2 b) {
  dl->AddRectFilled(a, b, IM_COL32(kMaskDark.r, kMaskDark.g, kMaskDark.b, 255));
  dl->PushClipRect(a, b, true);
  for (float x = a.x - (b.y - a.y); x < b.x; x += 8) {
    dl->AddLine(ImVec2(x, b.y), ImVec2(x + (b.y - a.y), a.y),
                IM_COL32(kMaskLight.r, kMaskLight.g, kMaskLight.b, 255), 4);
  }
  dl->PopClipRect();
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

// ImGui::CalcTextSize(labels[i]), measured on first use.
ImVec2 label_size(LabelSizes& s, const std::vector<std::string>& labels, int i) {
  if (s.w[i] < 0) {
    const ImVec2 ts = ImGui::CalcTextSize(labels[i].c_str());
    s.w[i] = ts.x;
    s.h[i] = ts.y;
  }
  return ImVec2(s.w[i], s.h[i]);
}

void draw_heatmap(App& app, const Layout& l) {
  const Lang lang = app.lang;
  Controller& c = app.ctl;
  const int step = app.play.step();
  ImGui::SetNextWindowPos(ImVec2(l.heatmap.x, l.heatmap.y), ImGuiCond_Always);
  ImGui::SetNextWindowSize(ImVec2(l.heatmap.w, l.heatmap.h), ImGuiCond_Always);
  const std::string title = fmt("%s  ·  %s###heatmap", fmt(tr(lang, S::StepOf), step).c_str(), step_name(lang, step));
  ImGui::Begin(title.c_str(), nullptr,
               ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoResize | ImGuiWindowFlags_NoCollapse |
                   ImGuiWindowFlags_NoScrollbar | ImGuiWindowFlags_NoScrollWithMouse |
                   ImGuiWindowFlags_NoBringToFrontOnFocus);
  // Toolbar: pooling, view reset, zoom, hint.
  ImGui::TextUnformatted(tr(lang, S::Pooling));
  same_line_if_fits(radio_width(tr(lang, S::PoolMax)));
  if (ImGui::RadioButton(tr(lang, S::PoolMax), app.pool == PoolMode::Max)) app.pool = PoolMode::Max;
  same_line_if_fits(radio_width(tr(lang, S::PoolMean)));
  if (ImGui::RadioButton(tr(lang, S::PoolMean), app.pool == PoolMode::Mean)) app.pool = PoolMode::Mean;
  same_line_if_fits(button_width(tr(lang, S::ResetView)));
  if (ImGui::Button(tr(lang, S::ResetView))) app.view = HeatView{};
  const std::string zoom = fmt(tr(lang, S::Zoom), app.view.zoom());
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
  ImGui::TextColored(kDimV4, "%s", tr(lang, S::HeatHint));

  // Streamed problems (N above kKeepStagesMaxTokens): steps 1-3 come as the pooled image of this
  // view, computed block by block by the backend; the output (step 4) is kept whole.
  const bool streamed = c.streaming() && step <= 3;
  const PooledGrid* pg = streamed ? c.pooled_stage(step) : nullptr;
  const MatrixF* mp = streamed ? nullptr : c.stage_matrix(step);
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
  const bool masked_step = c.step_shows_mask(step) && (streamed || c.stage_matrix(step) == mp);
  const Problem& p = c.problem();
  const int col_step = step == 4 || is_output ? 4 : step;
  const std::vector<std::string>& col_labels = c.column_labels(col_step);
  const std::vector<std::string>& row_labels = p.query_tokens;
  const float fp = app.font_px;
  // Key tokens and output dimensions keep a cache each, so playing through the steps re-measures
  // nothing.
  LabelSizes& col_sizes = col_step == 4 ? app.dim_sizes : app.key_sizes;
  keep_label_sizes(app.row_sizes, c.problem_revision(), 0, row_labels.size());
  keep_label_sizes(col_sizes, c.problem_revision(), col_step == 4 ? 2 : 1, col_labels.size());

  // Label sizes: every label when few, the widest index otherwise.
  float row_label_w = 0;
  if (rows <= 64) {
    for (int r = 0; r < static_cast<int>(row_labels.size()); ++r) {
      row_label_w = std::max(row_label_w, label_size(app.row_sizes, row_labels, r).x);
    }
  } else {
    row_label_w = label_size(app.row_sizes, row_labels, static_cast<int>(row_labels.size()) - 1).x;
  }
  row_label_w += fp * 0.6f;
  const float col_label_h = fp + 4;

  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const Rect content{origin.x, origin.y, avail.x, std::max(0.0f, avail.y - fp * 1.6f)};
  const HeatmapFrame frame = compute_heatmap_frame(content, row_label_w, col_label_h, fp);
  app.plot = place_plot(frame.plot_area.x, frame.plot_area.y, frame.plot_area.w, frame.plot_area.h,
                        rows, cols, app.view);
  const PlotGeometry& g = app.plot;
  // A window made smaller than its minimum (a tiling window manager, or none) leaves no plot:
  // nothing to draw, and the label strides below would never reach a cell size of 0.
  if (g.px_w <= 0 || g.px_h <= 0 || !(g.cell_w > 0) || !(g.cell_h > 0)) {
    ImGui::TextColored(kDimV4, "%s", tr(app.lang, S::PlotTooSmall));
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
    update_texture(app, *mp, masked_step, log_scale);
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
  ImGui::InvisibleButton("##plot", ImVec2(std::max(1.0f, g.w), std::max(1.0f, g.h)));
  const bool hovered = ImGui::IsItemHovered();
  ImGuiIO& io = ImGui::GetIO();
  if (hovered && io.MouseWheel != 0) {
    const double fx = app.view.x0 + (io.MousePos.x - g.x) / g.w * (app.view.x1 - app.view.x0);
    const double fy = app.view.y0 + (io.MousePos.y - g.y) / g.h * (app.view.y1 - app.view.y0);
    app.view = zoom_view(app.view, fx, fy, std::pow(1.25, io.MouseWheel), rows, cols);
  }
  if (ImGui::IsItemActive() && ImGui::IsMouseDragging(ImGuiMouseButton_Left, 1.0f)) {
    app.view = pan_view(app.view, -io.MouseDelta.x / g.w * (app.view.x1 - app.view.x0),
                        -io.MouseDelta.y / g.h * (app.view.y1 - app.view.y0));
  }
  if (app.heat_tex) {
    dl->AddImage(reinterpret_cast<ImTextureID>(app.heat_tex), ImVec2(g.x, g.y), ImVec2(g.x + g.w, g.y + g.h));
  }

  // Values inside cells when they fit (2 decimals, as the page's tables).
  const float value_w = ImGui::CalcTextSize("-0.00").x + 6;
  const int r0 = std::max(0, static_cast<int>(std::floor(g.first_row)));
  const int r1 = std::min(rows, static_cast<int>(std::ceil(g.first_row + g.vis_rows)));
  const int c0 = std::max(0, static_cast<int>(std::floor(g.first_col)));
  const int c1 = std::min(cols, static_cast<int>(std::ceil(g.first_col + g.vis_cols)));
  // A value goes at the centre of the cell's visible part, and only where that part holds it (a
  // cell cut by the plot's edge when zoomed or panned).
  dl->PushClipRect(ImVec2(g.x, g.y), ImVec2(g.x + g.w, g.y + g.h), true);
  if (g.cell_w >= value_w && g.cell_h >= fp + 2 && (r1 - r0) * (c1 - c0) <= 4096) {
    for (int r = r0; r < r1; ++r) {
      const auto rs = visible_row_span(g, r);
      if (!rs || rs->size() < fp + 2) continue;
      for (int cc = c0; cc < c1; ++cc) {
        const auto cs = visible_col_span(g, cc);
        if (!cs || cs->size() < value_w) continue;
        const auto cell = exact_cell(r, cc, cs->mid(), rs->mid());
        if (!cell) continue;
        const bool is_masked = cell->masked;
        const float v = cell->value;
        std::string text = table_value(v);
        ImU32 colour = IM_COL32_WHITE;
        if (!is_masked) {
          const Rgb8 bg = viridis(std::clamp(scale_pos(v, app.range, app.range_log), 0.0, 1.0));
          colour = cie_lightness(bg) > 55 ? IM_COL32_BLACK : IM_COL32_WHITE;
        }
        const ImVec2 ts = ImGui::CalcTextSize(text.c_str());
        const ImVec2 at(cs->mid() - ts.x / 2, rs->mid() - ts.y / 2);
        if (is_masked) {
          // The hatching's two greys give white text too little contrast; a dark box behind it
          // makes "−∞" read at any stripe phase.
          dl->AddRectFilled(ImVec2(at.x - 3, at.y - 1), ImVec2(at.x + ts.x + 3, at.y + ts.y + 1),
                            IM_COL32(0, 0, 0, 200), 3);
        }
        dl->AddText(at, colour, text.c_str());
      }
    }
  }
  dl->PopClipRect();

  // Row labels (query tokens): all when they fit, else evenly spaced ticks; the query always. A
  // label sits at the centre of its row's visible part, and a row cut by the plot's edge gets one
  // only while most of a line of text's height is visible.
  const int query = c.query();
  const float qmid = row_y(g, query + 0.5);
  auto row_label = [&](int r, ImU32 colour) {
    const auto rs = visible_row_span(g, r);
    if (!rs || rs->size() < std::min(g.cell_h, fp * 0.8f) - 0.01f) return;
    const ImVec2 ts = label_size(app.row_sizes, row_labels, r);
    dl->AddText(ImVec2(g.x - fp * 0.4f - ts.x, rs->mid() - ts.y / 2), colour, row_labels[r].c_str());
  };
  const ImU32 label_col = ImGui::GetColorU32(ImGuiCol_Text);
  int row_stride = 1;
  while (row_stride * g.cell_h < fp * 1.6f) row_stride = row_stride < 2 ? 2 : row_stride < 5 ? 5 : row_stride * 2;
  for (int r = (r0 / row_stride) * row_stride; r < r1; r += row_stride) {
    if (r < r0 || (r != query && std::abs(row_y(g, r + 0.5) - qmid) < fp)) continue;
    row_label(r, label_col);
  }
  row_label(query, kHighlight);
  // Column labels (key tokens or output dimensions).
  float col_w_needed = 0;
  // Widest label over a sample of at most ~128 visible columns (index labels grow to the right).
  const int sample_step = std::max(1, (c1 - c0) / 128);
  for (int cc = c0; cc < c1; cc += sample_step) {
    col_w_needed = std::max(col_w_needed, label_size(col_sizes, col_labels, cc).x + 8);
  }
  if (c1 > c0) col_w_needed = std::max(col_w_needed, label_size(col_sizes, col_labels, c1 - 1).x + 8);
  int col_stride = 1;
  while (col_stride * g.cell_w < col_w_needed) col_stride = col_stride < 2 ? 2 : col_stride < 5 ? 5 : col_stride * 2;
  for (int cc = (c0 / col_stride) * col_stride; cc < c1; cc += col_stride) {
    if (cc < c0) continue;
    // As the row labels: centred on the visible part, none on a sliver narrower than the label.
    const ImVec2 ts = label_size(col_sizes, col_labels, cc);
    const auto cs = visible_col_span(g, cc);
    if (!cs || cs->size() < std::min(g.cell_w, ts.x + 4) - 0.01f) continue;
    dl->AddText(ImVec2(cs->mid() - ts.x / 2, g.y - ts.y - 4), label_col, col_labels[cc].c_str());
  }

  // Selected query row: an orange frame, at least 3 px tall so one row of 4096 stays visible.
  if (auto band = row_band(g, query, 3)) {
    dl->AddRect(ImVec2(g.x - 2, band->y0 - 2), ImVec2(g.x + g.w + 2, band->y1 + 2), kHighlight, 0, 0, 3);
  }

  // Legend: colour bar from lo (bottom) to hi (top), its numbers, the masked swatch.
  {
    const Rect& L = frame.legend;
    const float bar_x = L.x + 4, bar_w = fp * 0.9f;
    const float bar_top = g.y, bar_h = std::min(g.h, std::max(fp * 6, L.h * 0.55f));
    const int strips = 64;
    for (int i = 0; i < strips; ++i) {
      const Rgb8 col = viridis(1.0 - (i + 0.5) / strips);
      dl->AddRectFilled(ImVec2(bar_x, bar_top + bar_h * i / strips),
                        ImVec2(bar_x + bar_w, bar_top + bar_h * (i + 1) / strips + 1),
                        IM_COL32(col.r, col.g, col.b, 255));
    }
    dl->AddRect(ImVec2(bar_x, bar_top), ImVec2(bar_x + bar_w, bar_top + bar_h), label_col);
    const float tx = bar_x + bar_w + 4;
    dl->AddText(ImVec2(tx, bar_top - 2), label_col, fmt("%.3g", app.range.hi).c_str());
    dl->AddText(ImVec2(tx, bar_top + bar_h / 2 - fp / 2), label_col,
                fmt("%.3g", scale_value(0.5, app.range, app.range_log)).c_str());
    dl->AddText(ImVec2(tx, bar_top + bar_h - fp), label_col, fmt("%.3g", app.range.lo).c_str());
    float y = bar_top + bar_h + fp * 0.6f;
    dl->AddText(ImVec2(bar_x, y), label_col,
                app.range_log ? tr(lang, S::ScaleLogShort) : tr(lang, S::Legend));
    y += fp * 1.3f;
    if (masked_step) {
      draw_hatch(dl, ImVec2(bar_x, y), ImVec2(bar_x + bar_w, y + fp));
      dl->AddText(ImVec2(tx, y), label_col, tr(lang, S::Masked));
    }
  }

  // Status lines under the plot: a run in flight, the pooling note, the streaming note.
  ImGui::SetCursorScreenPos(ImVec2(content.x, content.bottom() + fp * 0.3f));
  if (c.busy()) {
    ImGui::TextColored(kHighlightV4, tr(lang, S::Computing), 100.0 * c.progress());
  } else if (g.pooled()) {
    const char* mode = tr(lang, app.pool == PoolMode::Max ? S::PoolMax : S::PoolMean);
    ImGui::TextColored(kDimV4, tr(lang, S::PooledNote), rows, cols, g.px_h, g.px_w, mode);
  } else if (streamed) {
    ImGui::TextColored(kDimV4, tr(lang, S::Streamed), rows, rows, cols);
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
      ImGui::Text("%s: %s", tr(lang, S::TipStage), step_name(lang, is_output ? 4 : step));
      ImGui::Text("%s: %s (#%d)", tr(lang, S::TipQuery), row_labels[cell->row].c_str(), cell->row);
      if (is_output) {
        ImGui::Text("%s: %d", tr(lang, S::TipOutputDim), cell->col + 1);
      } else {
        ImGui::Text("%s: %s (#%d)", tr(lang, S::TipKey), col_labels[cell->col].c_str(), cell->col);
      }
      if (!exact) {
        ImGui::TextColored(kDimV4, "%s", tr(lang, S::TipExactNeedsRow));
      } else if (exact->masked) {
        ImGui::Text("%s: %s", tr(lang, S::TipValue), tr(lang, S::TipMasked));
      } else {
        ImGui::Text("%s: %.6g", tr(lang, S::TipValue), exact->value);
      }
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
          ImGui::TextColored(kDimV4, tr(lang, S::TipPooled), mode, rs.begin, rs.end - 1, cs.begin, cs.end - 1,
                             shown.c_str());
        }
      }
      ImGui::EndTooltip();
    }
  }
  ImGui::End();
}

// ---- controls ---------------------------------------------------------------------------------

void draw_controls(App& app, const Layout& l) {
  const Lang lang = app.lang;
  Controller& c = app.ctl;
  ImGui::SetNextWindowPos(ImVec2(l.controls.x, l.controls.y), ImGuiCond_Always);
  ImGui::SetNextWindowSize(ImVec2(l.controls.w, l.controls.h), ImGuiCond_Always);
  ImGui::Begin(fmt("%s###controls", tr(lang, S::Controls)).c_str(), nullptr,
               ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoResize | ImGuiWindowFlags_NoCollapse |
                   ImGuiWindowFlags_NoBringToFrontOnFocus);
  // Language.
  ImGui::TextUnformatted(tr(lang, S::Language));
  ImGui::SameLine();
  if (ImGui::RadioButton("中文", app.lang == Lang::Zh)) app.lang = Lang::Zh;
  ImGui::SameLine();
  if (ImGui::RadioButton("English", app.lang == Lang::En)) app.lang = Lang::En;

  // Step playback.
  section(tr(lang, S::Steps));
  ImGui::TextColored(kHighlightV4, tr(lang, S::StepOf), app.play.step());
  for (int k = 1; k <= kSteps; ++k) {
    if (ImGui::Selectable(step_name(lang, k), app.play.step() == k)) app.play.set_step(k);
  }
  if (ImGui::Button(tr(lang, S::Prev))) app.play.prev();
  const char* play = tr(lang, app.play.playing() ? S::Pause : S::Play);
  same_line_if_fits(button_width(play));
  if (ImGui::Button(fmt("%s###play", play).c_str())) {
    app.play.toggle_play();
  }
  same_line_if_fits(button_width(tr(lang, S::Next)));
  if (ImGui::Button(tr(lang, S::Next))) app.play.next();
  same_line_if_fits(button_width(tr(lang, S::Reset)));
  if (ImGui::Button(tr(lang, S::Reset))) app.play.home();
  float speed = static_cast<float>(app.play.speed());
  ImGui::SetNextItemWidth(-(ImGui::CalcTextSize(tr(lang, S::Speed)).x + ImGui::GetStyle().ItemInnerSpacing.x));
  if (ImGui::SliderFloat(fmt("%s###speed", tr(lang, S::Speed)).c_str(), &speed, kMinSpeed, kMaxSpeed, "%.2f",
                         ImGuiSliderFlags_Logarithmic)) {
    app.play.set_speed(speed);
  }

  // Query, temperature, mask.
  section(tr(lang, S::Query));
  const Problem& p = c.problem();
  if (p.n() <= 256) {
    const std::string cur = fmt("%s (#%d)", p.query_tokens[c.query()].c_str(), c.query());
    ImGui::SetNextItemWidth(-FLT_MIN);
    if (ImGui::BeginCombo("###query", cur.c_str())) {
      for (int i = 0; i < p.n(); ++i) {
        const bool sel = i == c.query();
        if (ImGui::Selectable(fmt("%s (#%d)###q%d", p.query_tokens[i].c_str(), i, i).c_str(), sel)) c.set_query(i);
        if (sel) ImGui::SetItemDefaultFocus();
      }
      ImGui::EndCombo();
    }
  } else {
    int q = c.query();
    if (ImGui::InputInt("###queryidx", &q)) c.set_query(std::clamp(q, 0, p.n() - 1));
  }
  ImGui::TextUnformatted(tr(lang, S::Temperature));
  // Live at every size: each value the slider reports is a request, run off this thread; the
  // latest one wins and the picture follows as fast as the backend does.
  float t = static_cast<float>(c.requested_temperature());
  ImGui::SetNextItemWidth(-FLT_MIN);
  if (ImGui::SliderFloat("###tslider", &t, static_cast<float>(kTemperatureMin), static_cast<float>(kTemperatureMax),
                         "%.4g", ImGuiSliderFlags_Logarithmic)) {
    c.set_temperature(t);
  }
  // The typed entry follows the state whenever the user is not typing in it.
  if (!app.temp_entry_active) std::snprintf(app.temp_text, sizeof app.temp_text, "%.4g", c.requested_temperature());
  ImGui::SetNextItemWidth(ImGui::GetContentRegionAvail().x * 0.5f);
  if (ImGui::InputText("###ttext", app.temp_text, sizeof app.temp_text, ImGuiInputTextFlags_EnterReturnsTrue)) {
    c.set_temperature_text(app.temp_text);
  }
  app.temp_entry_active = ImGui::IsItemActive();
  ImGui::SameLine();
  ImGui::TextColored(kDimV4, "%s", tr(lang, S::TemperatureEntry));
  if (!c.error().empty()) {
    wrapped(app, std::string(tr(lang, S::ErrorPrefix)) + c.error(), &kErrorV4);
  }
  ImGui::TextUnformatted(tr(lang, S::Mask));
  const MaskKind mk = c.requested_mask();
  if (ImGui::RadioButton(tr(lang, S::MaskNone), mk == MaskKind::None)) c.set_mask(MaskKind::None);
  same_line_if_fits(radio_width(tr(lang, S::MaskCausal)));
  if (ImGui::RadioButton(tr(lang, S::MaskCausal), mk == MaskKind::Causal)) c.set_mask(MaskKind::Causal);

  // Backend.
  ImGui::TextUnformatted(tr(lang, S::Backend));
  if (ImGui::RadioButton("CPU (Eigen)", c.backend() == "cpu")) c.set_backend("cpu");
  ImGui::SameLine();
  ImGui::BeginDisabled(!c.cuda_ok());
  if (ImGui::RadioButton("CUDA", c.backend() == "cuda")) c.set_backend("cuda");
  ImGui::EndDisabled();
  if (!c.cuda_ok()) wrapped(app, fmt(tr(lang, S::CudaUnavailable), c.cuda_reason().c_str()), &kDimV4);

  // Input: demo or random.
  section(tr(lang, S::Input));
  if (ImGui::RadioButton(tr(lang, S::ModeDemo), app.in_mode == 0)) {
    app.in_mode = 0;
    app.random_error.clear();
    app.random_over_limit = 0;
    if (!c.demo() && c.load_demo()) {
      app.view = HeatView{};
      app.log_weights = false;
    }
  }
  if (ImGui::RadioButton(tr(lang, S::ModeRandom), app.in_mode == 1)) app.in_mode = 1;
  if (app.in_mode == 1) {
    ImGui::SetNextItemWidth(ImGui::GetContentRegionAvail().x * 0.5f);
    ImGui::InputInt("N", &app.in_n, 256, 1024);
    ImGui::SetNextItemWidth(ImGui::GetContentRegionAvail().x * 0.5f);
    ImGui::InputInt("d_k", &app.in_dk);
    ImGui::SetNextItemWidth(ImGui::GetContentRegionAvail().x * 0.5f);
    ImGui::InputInt("d_v", &app.in_dv);
    ImGui::SetNextItemWidth(ImGui::GetContentRegionAvail().x * 0.5f);
    // The whole 64-bit range the command line takes (an int field lost seeds above 2^31 - 1).
    ImGui::InputScalar("seed", ImGuiDataType_U64, &app.in_seed);
    // Out-of-range values stay in the fields as typed and are refused by Generate, with the
    // reason (they used to be clamped silently).
    if (ImGui::Button(tr(lang, S::Generate))) {
      app.random_error.clear();
      app.random_over_limit = 0;
      if (app.in_n > c.max_tokens()) {
        // Refused here, beside the button that asked; worded below, in the UI's language.
        app.random_over_limit = app.in_n;
      } else if (c.load_random(app.in_n, app.in_dk, app.in_dv, app.in_seed)) {
        app.view = HeatView{};
        app.log_weights = c.n() > 64;
        app.in_mode = 1;
      } else {
        app.random_error = c.error();
        c.clear_error();
      }
    }
    if (app.random_over_limit > 0)
      app.random_error = fmt(tr(lang, S::RandomOverLimit), app.random_over_limit,
                             c.backend() == "cuda" ? "CUDA" : "CPU", c.max_tokens());
    if (!app.random_error.empty()) wrapped(app, std::string(tr(lang, S::ErrorPrefix)) + app.random_error, &kErrorV4);
    if (c.demo()) wrapped(app, tr(lang, S::RandomPending), &kDimV4);
    wrapped(app, tr(lang, S::RandomLimits), &kDimV4);
  }
  ImGui::Separator();
  wrapped(app, tr(lang, S::KeyboardLine), &kDimV4);
  ImGui::End();
}

// ---- information panel ------------------------------------------------------------------------

// The Compare table's names (variants, stages) in the UI language; backend names stay as they are.
std::string compare_term(Lang lang, const std::string& name) {
  static const std::pair<const char*, S> kTerms[] = {
      {"staged", S::TermStaged}, {"fused", S::TermFused},     {"scores", S::TermScores},
      {"scaled", S::TermScaled}, {"logits", S::TermLogits},   {"weights", S::TermWeights},
      {"output", S::TermOutput}};
  for (const auto& [key, s] : kTerms)
    if (name == key) return tr(lang, s);
  return name;
}

// How many value columns of `m` fit beside the token column in the panel's width: the widest
// number the matrix prints (its largest finite magnitude, negative) or column label, plus the
// cell padding and border; at least 1, at most 63 (an ImGui table holds 64 columns).
int table_columns_that_fit(const MatrixF& m, const std::vector<std::string>& rows,
                           const std::vector<std::string>& cols) {
  const float pad = 2 * ImGui::GetStyle().CellPadding.x + 1;
  float token_w = ImGui::CalcTextSize("token").x;
  for (const std::string& r : rows) token_w = std::max(token_w, ImGui::CalcTextSize(r.c_str()).x);
  const float widest = m.size() == 0 ? 0.f : m.array().isFinite().select(m.array().abs(), 0.f).maxCoeff();
  float col_w = std::max(ImGui::CalcTextSize(table_value(-widest).c_str()).x, ImGui::CalcTextSize("−∞").x);
  for (const std::string& c : cols) col_w = std::max(col_w, ImGui::CalcTextSize(c.c_str()).x);
  const float avail = ImGui::GetContentRegionAvail().x - token_w - pad;
  return std::clamp(static_cast<int>(avail / (col_w + pad)), 1, 63);
}

// A matrix too wide for the panel (d_k = 64 of a random sequence, N = 16 at 1280 px) is drawn as
// consecutive tables of the columns that fit, each headed by its column range.
void matrix_table(const char* id, const std::string& title, const MatrixF& m, const std::vector<std::string>& rows,
                  const std::vector<std::string>& cols, int highlight_row, bool current, Lang lang) {
  if (current) {
    ImGui::TextColored(kHighlightV4, "%s  %s", title.c_str(), tr(lang, S::CurrentStep));
  } else {
    ImGui::TextUnformatted(title.c_str());
  }
  const int nc = static_cast<int>(m.cols());
  const int chunk = table_columns_that_fit(m, rows, cols);
  for (int c0 = 0; c0 < nc; c0 += chunk) {
    const int cn = std::min(chunk, nc - c0);
    if (nc > chunk)
      ImGui::TextColored(kDimV4, tr(lang, S::TableColumns), c0 + 1, c0 + cn, nc);
    ImGui::PushID(c0);
    if (ImGui::BeginTable(id, cn + 1, ImGuiTableFlags_Borders | ImGuiTableFlags_SizingFixedFit)) {
      ImGui::TableSetupColumn("token");
      for (int j = c0; j < c0 + cn; ++j)
        ImGui::TableSetupColumn(j < static_cast<int>(cols.size()) ? cols[j].c_str() : "");
      ImGui::TableHeadersRow();
      for (int i = 0; i < m.rows(); ++i) {
        ImGui::TableNextRow();
        if (i == highlight_row) ImGui::TableSetBgColor(ImGuiTableBgTarget_RowBg1, IM_COL32(255, 140, 0, 70));
        ImGui::TableSetColumnIndex(0);
        ImGui::TextUnformatted(i < static_cast<int>(rows.size()) ? rows[i].c_str() : "");
        for (int j = c0; j < c0 + cn; ++j) {
          ImGui::TableSetColumnIndex(j - c0 + 1);
          ImGui::TextUnformatted(table_value(m(i, j)).c_str());
        }
      }
      ImGui::EndTable();
    }
    ImGui::PopID();
  }
}

void draw_info(App& app, const Layout& l) {
  const Lang lang = app.lang;
  Controller& c = app.ctl;
  const Problem& p = c.problem();
  const Trace& t = c.trace();
  ImGui::SetNextWindowPos(ImVec2(l.info.x, l.info.y), ImGuiCond_Always);
  ImGui::SetNextWindowSize(ImVec2(l.info.w, l.info.h), ImGuiCond_Always);
  ImGui::Begin(fmt("%s###info", tr(lang, S::RowStats)).c_str(), nullptr,
               ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoResize | ImGuiWindowFlags_NoCollapse |
                   ImGuiWindowFlags_NoBringToFrontOnFocus | ImGuiWindowFlags_NoTitleBar);

  // Row statistics.
  if (ImGui::CollapsingHeader(fmt("%s###stats", tr(lang, S::RowStats)).c_str(), ImGuiTreeNodeFlags_DefaultOpen)) {
    ImGui::Text("%s: %s (#%d)", tr(lang, S::TipQuery), p.query_tokens[c.query()].c_str(), c.query());
    if (auto st = c.stats()) {
      // One decimal as on the page; significant digits below 1 %, where thousands of keys share it.
      ImGui::Text(st->max_weight < 0.01 ? "%s: %.2g%% (%s %s)" : "%s: %.1f%% (%s %s)", tr(lang, S::MaxWeight),
                  st->max_weight * 100, tr(lang, S::Argmax),
                  p.key_tokens[st->argmax].c_str());
      ImGui::Text("%s: %.3f", tr(lang, S::Entropy), st->entropy);
      ImGui::Text("%s: %d", tr(lang, S::Effective), st->unmasked);
      ImGui::Text("%s: %.3f", tr(lang, S::Perplexity), st->perplexity);
      ImGui::Text("%s: %.6f", tr(lang, S::WeightSum), st->weight_sum);
    }
    ImGui::Text("%s: 1/√%d = %.4f", tr(lang, S::Scale), p.d_k(), 1.0 / std::sqrt(static_cast<double>(p.d_k())));
    ImGui::Text("%s: %d×%d", tr(lang, S::OutputShape), p.n(), p.d_v());
  }

  // Description, regenerated from the current state every frame (it is cheap: one row).
  if (ImGui::CollapsingHeader(fmt("%s###desc", tr(lang, S::Description)).c_str(), ImGuiTreeNodeFlags_DefaultOpen)) {
    const std::string& d = c.description(lang);
    wrapped(app, d);
    if (ImGui::Button(fmt("%s###copy", tr(lang, S::Copy)).c_str())) {
      SDL_SetClipboardText(d.c_str());
      set_status(app, tr(lang, S::Copied));
    }
    ImGui::SameLine();
    ImGui::BeginDisabled(!app.speaker.available());
    if (app.speaker.speaking()) {
      if (ImGui::Button(fmt("%s###speak", tr(lang, S::StopSpeaking)).c_str())) app.speaker.stop();
    } else if (ImGui::Button(fmt("%s###speak", tr(lang, S::Speak)).c_str())) {
      app.speaker.speak(d, lang);
    }
    ImGui::EndDisabled();
    if (!app.speaker.available()) ImGui::TextColored(kDimV4, "%s", tr(lang, S::NoEspeak));
    if (!app.speaker.speaking() && !app.speaker.problem().empty()) {
      wrapped(app, fmt(tr(lang, S::SpeakProblem), app.speaker.problem().c_str()), &kDimV4);
    }
  }

  // Numeric tables of every stage.
  if (ImGui::CollapsingHeader(fmt("%s###tables", tr(lang, S::Tables)).c_str(),
                              p.n() <= 8 ? ImGuiTreeNodeFlags_DefaultOpen : 0)) {
    ImGui::TextColored(kHighlightV4, "%s", tr(lang, S::PageHeading));
    wrapped(app, fmt(tr(lang, S::PageIntro), p.d_k()));
    if (p.n() > kTableMaxTokens || !t.has_stages) {
      wrapped(app, fmt(tr(lang, S::TablesTooLarge), kTableMaxTokens, p.n()));
    } else {
      const int step = app.play.step();
      const int q = c.query();
      std::vector<std::string> dims_k, dims_v;
      for (int j = 1; j <= p.d_k(); ++j) dims_k.push_back(std::to_string(j));
      for (int j = 1; j <= p.d_v(); ++j) dims_v.push_back(std::to_string(j));
      matrix_table("tq", tr(lang, S::TableQ), p.q, p.query_tokens, dims_k, q, false, lang);
      matrix_table("tk", tr(lang, S::TableK), p.k, p.key_tokens, dims_k, -1, false, lang);
      matrix_table("tv", tr(lang, S::TableV), p.v, p.key_tokens, dims_v, -1, step == 4, lang);
      std::vector<std::string> key_idx;
      for (int j = 1; j <= p.m(); ++j) key_idx.push_back(std::to_string(j));
      matrix_table("ts", tr(lang, S::TableScores), t.scores, p.query_tokens, key_idx, q, step == 1, lang);
      matrix_table("tsc", fmt(tr(lang, S::TableScaled), p.d_k()), t.scaled, p.query_tokens, key_idx, q, step == 2, lang);
      matrix_table("tm", tr(lang, S::TableMask), t.mask, p.query_tokens, key_idx, q, step == 2, lang);
      matrix_table("tl", tr(lang, S::TableLogits), t.logits, p.query_tokens, key_idx, q, step == 2, lang);
      matrix_table("tw", tr(lang, S::TableWeights), t.weights, p.query_tokens, key_idx, q, step == 3, lang);
      matrix_table("to", tr(lang, S::TableOutput), t.output, p.query_tokens, dims_v, q, step == 4, lang);
    }
  }

  // Performance.
  if (ImGui::CollapsingHeader(fmt("%s###perf", tr(lang, S::Performance)).c_str(), ImGuiTreeNodeFlags_DefaultOpen)) {
    ImGui::Text("%s: %s (N=%d, d_k=%d, d_v=%d)", tr(lang, S::BackendRan), t.backend.c_str(), p.n(), p.d_k(), p.d_v());
    const StageTimings& tm = t.timings;
    if (ImGui::BeginTable("timings", 2, ImGuiTableFlags_Borders | ImGuiTableFlags_SizingFixedFit)) {
      const std::pair<S, double> rows[] = {{S::TimeUpload, tm.upload_ms},   {S::TimeQk, tm.qk_ms},
                                           {S::TimeScaleMask, tm.scale_mask_ms}, {S::TimeSoftmax, tm.softmax_ms},
                                           {S::TimePv, tm.pv_ms},           {S::TimeDownload, tm.download_ms},
                                           {S::TimeTotal, tm.total_ms}};
      for (const auto& [label, ms] : rows) {
        ImGui::TableNextRow();
        ImGui::TableSetColumnIndex(0);
        ImGui::TextUnformatted(tr(lang, label));
        ImGui::TableSetColumnIndex(1);
        ImGui::Text("%.3f ms", ms);
      }
      ImGui::EndTable();
    }
    wrapped(app, fmt(tr(lang, S::Redraw), c.last_run_ms(), app.last_raster_ms));
    // Compare: CPU vs CUDA (needs a device), and staged vs fused on the chosen backend (always).
    const std::string why = c.compare_unavailable_reason();
    ImGui::BeginDisabled(!why.empty());
    if (ImGui::Button(fmt("%s###compare", tr(lang, S::Compare)).c_str())) c.run_compare();
    ImGui::EndDisabled();
    same_line_if_fits(button_width(tr(lang, S::CompareVariants)));
    if (ImGui::Button(fmt("%s###comparev", tr(lang, S::CompareVariants)).c_str())) c.run_variant_compare();
    if (!why.empty()) {
      if (!c.cuda_ok()) {
        wrapped(app, fmt(tr(lang, S::CompareNeedsCuda), why.c_str()), &kDimV4);
      } else {
        wrapped(app, tr(lang, S::CompareCpuLimit), &kDimV4);
      }
    }
    const CompareResult& cr = c.last_compare();
    if (!cr.error.empty()) wrapped(app, cr.error, &kErrorV4);
    if (cr.done) {
      const std::string a_name = compare_term(lang, cr.a_name), b_name = compare_term(lang, cr.b_name);
      wrapped(app, fmt("%s: %.2f× (%s %.3f ms / %s %.3f ms)", tr(lang, S::SpeedUp), cr.speed_up(),
                       a_name.c_str(), cr.a_total_ms, b_name.c_str(), cr.b_total_ms));
      if (ImGui::BeginTable("compare", 4, ImGuiTableFlags_Borders | ImGuiTableFlags_SizingFixedFit)) {
        ImGui::TableSetupColumn(tr(lang, S::Stage));
        ImGui::TableSetupColumn(fmt("%s ms", a_name.c_str()).c_str());
        ImGui::TableSetupColumn(fmt("%s ms", b_name.c_str()).c_str());
        ImGui::TableSetupColumn(tr(lang, S::MaxDiff));
        ImGui::TableHeadersRow();
        for (const StageCompare& s : cr.stages) {
          ImGui::TableNextRow();
          ImGui::TableSetColumnIndex(0);
          ImGui::TextUnformatted(compare_term(lang, s.stage).c_str());
          ImGui::TableSetColumnIndex(1);
          ImGui::Text("%.3f", s.a_ms);
          ImGui::TableSetColumnIndex(2);
          ImGui::Text("%.3f", s.b_ms);
          ImGui::TableSetColumnIndex(3);
          ImGui::Text("%.3g", s.max_abs_diff);
        }
        ImGui::EndTable();
      }
    }
  }

  // Scientific notes (SPEC.md).
  if (ImGui::CollapsingHeader(fmt("%s###notes", tr(lang, S::Notes)).c_str())) {
    wrapped(app, tr(lang, S::NotesIntro));
    for (const auto& [heading, body] : science_notes(lang)) {
      ImGui::TextColored(kHighlightV4, "%s", heading.c_str());
      wrapped(app, body);
    }
    ImGui::TextColored(kDimV4, "%s", tr(lang, S::NotesRelated));
  }
  ImGui::End();
}

// ---- caveat bar and help ----------------------------------------------------------------------

void draw_caveat(App& app, const Layout& l) {
  const Lang lang = app.lang;
  Controller& c = app.ctl;
  ImGui::SetNextWindowPos(ImVec2(l.caveat.x, l.caveat.y), ImGuiCond_Always);
  ImGui::SetNextWindowSize(ImVec2(l.caveat.w, l.caveat.h), ImGuiCond_Always);
  ImGui::Begin("###caveat", nullptr,
               ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoResize | ImGuiWindowFlags_NoCollapse |
                   ImGuiWindowFlags_NoTitleBar | ImGuiWindowFlags_NoBringToFrontOnFocus |
                   ImGuiWindowFlags_NoScrollbar);
  const std::string line = mask_sentence(c.problem().mask, lang) + " " + caveat(lang);
  wrapped(app, line);
  // A fresh status (screenshot saved, copied) is newer than any refusal still standing.
  if (!app.status.empty() && seconds_now() < app.status_until) {
    ImGui::TextColored(kHighlightV4, "%s", app.status.c_str());
  } else if (!c.error().empty()) {
    ImGui::TextColored(kErrorV4, "%s%s", tr(lang, S::ErrorPrefix), c.error().c_str());
  } else {
    ImGui::TextColored(kDimV4, "%s", tr(lang, S::KeyboardLine));
  }
  ImGui::End();
}

void draw_help(App& app) {
  if (!app.show_help) return;
  const Lang lang = app.lang;
  const ImVec2 ds = ImGui::GetIO().DisplaySize;
  ImGui::SetNextWindowPos(ImVec2(ds.x / 2, ds.y / 2), ImGuiCond_Always, ImVec2(0.5f, 0.5f));
  bool open = true;
  ImGui::Begin(fmt("%s###help", tr(lang, S::Keys)).c_str(), &open,
               ImGuiWindowFlags_AlwaysAutoResize | ImGuiWindowFlags_NoCollapse);
  if (ImGui::BeginTable("keys", 2, ImGuiTableFlags_Borders | ImGuiTableFlags_SizingFixedFit)) {
    for (const auto& [k, d] : key_help(lang)) {
      ImGui::TableNextRow();
      ImGui::TableSetColumnIndex(0);
      ImGui::TextColored(kHighlightV4, "%s", k.c_str());
      ImGui::TableSetColumnIndex(1);
      ImGui::TextUnformatted(d.c_str());
    }
    ImGui::EndTable();
  }
  ImGui::End();
  if (!open) app.show_help = false;
}

}  // namespace

void draw_frame(App& app) {
  const ImVec2 ds = ImGui::GetIO().DisplaySize;
  const Layout l = compute_layout(ds.x, ds.y, app.font_px);
  draw_controls(app, l);
  draw_heatmap(app, l);
  draw_info(app, l);
  draw_caveat(app, l);
  draw_help(app);
}

}  // namespace attnlab::viewer
