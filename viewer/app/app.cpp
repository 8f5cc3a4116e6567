// The window's app (see app.h): the App's construction, fonts, the actions keys trigger, the state
// dump, and draw_frame, which lays out the panels: the controls on the left (controls_panel.cpp),
// the shown view's panel in the centre (found through the registry), the information panel on the
// right beside the views that have it (info_panel.cpp), the caveat bar at the bottom and the F1 help
// (caveat_help_panel.cpp). Everything the windows show comes from the session and the views.
#include "viewer/app/app.h"

#include "core/format.h"

#include "viewer/draw/font_file.h"
#include "viewer/ui/kit.h"
#include "viewer/draw/strings.h"

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

// The code points of what the problem on screen shows: its tokens, a bundle's layer names and
// directory, the description in both languages.
static std::set<unsigned> problem_codepoints(const App& app) {
  std::set<unsigned> cps;
  const auto add_text = [&](const std::string& s) {
    for (unsigned cp : utf8_codepoints(s)) cps.insert(cp);
  };
  for (const std::string& t : app.session.problem().query_tokens()) add_text(t);
  for (const std::string& t : app.session.problem().key_tokens()) add_text(t);
  if (const Bundle* b = app.session.bundle()) {
    for (const BundleCall& call : b->calls) add_text(call.name);
    for (const std::string& t : b->tokens) add_text(t);
    add_text(b->dir);
  }
  for (Lang l : {Lang::Zh, Lang::En}) add_text(app.session.description(l));
  return cps;
}

bool glyphs_missing(App& app) {
  if (app.glyphs_problem == app.session.problem_revision() || app.glyphs.empty()) return false;
  app.glyphs_problem = app.session.problem_revision();
  for (unsigned cp : problem_codepoints(app))
    if (cp <= 0xFFFF && !app.glyphs.count(cp)) return true;
  return false;
}

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
  for (unsigned cp : problem_codepoints(app)) cps.insert(cp);
  app.glyphs_problem = app.session.problem_revision();
  for (const std::string& s : all_ui_text()) add_text(s);
  for (Lang l : {Lang::Zh, Lang::En})
    for (const auto& v : app.views)
      for (const auto& [k, d] : key_help(l, v->step_keys_help(l))) {
        add_text(k);
        add_text(d);
      }
  for (const auto& v : app.views)
    for (const std::string& s : v->texts()) add_text(s);
  // Every catalogued message (refusals, faults, the CUDA note), in both languages.
  for (int id = 0; id < static_cast<int>(Msg::Count_); ++id)
    for (Lang l : {Lang::Zh, Lang::En}) add_text(render_message(static_cast<Msg>(id), {}, l));
  add_text(demo_problem().sentence);
  const Problem demo = demo_problem();
  for (const std::string& t : demo.query_tokens()) add_text(t);
  for (Lang l : {Lang::Zh, Lang::En}) {
    add_text(caveat(l));
    for (const std::string& s : mask_sentence_texts(l)) add_text(s);
  }
  for (unsigned a = 0x20; a <= 0xFF; ++a) cps.insert(a);
  for (auto [lo, hi] : {std::pair{0x2000u, 0x206Fu}, {0x2070u, 0x209Fu}, {0x2190u, 0x21FFu},
                        {0x2200u, 0x22FFu}, {0x25A0u, 0x25FFu}, {0x3000u, 0x303Fu},
                        {0xFF00u, 0xFFEFu}, {0x1D40u, 0x1D40u}}) {
    for (unsigned a = lo; a <= hi; ++a) cps.insert(a);
  }
  app.glyphs = cps;
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
    // Horizontal oversampling sharpens small text only; above 32 px it would double an atlas
    // that a 4K window at a large UI scale already fills (viewer/draw/layout.h font_px_for).
    cfg.OversampleH = font_px >= 32 ? 1 : 2;
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

// The panel of each view, in the registry's order: draw_panel of its type (its panel*.cpp).
namespace {
using PanelFn = void (*)(View&, Shell&, const Layout&);
#define ATTNLAB_VIEW_PANEL(name, Type) [](View& v, Shell& s, const Layout& l) { draw_panel(static_cast<Type&>(v), s, l); },
constexpr PanelFn kPanels[] = {ATTNLAB_VIEWS(ATTNLAB_VIEW_PANEL)};
#undef ATTNLAB_VIEW_PANEL
}  // namespace

App::App(const ViewerOptions& o, bool async)
    : Shell(o, async), in_n(session.random_n()), in_dk(session.random_dk()), in_dv(session.random_dv()),
      in_heads(session.random_heads()), in_seed(session.random_seed()),
      in_mode(session.from_bundle() ? 3 : session.from_files() ? 2 : session.demo() ? 0 : 1),
      in_files(session.files()), in_bias(session.source().bias_file),
      in_documents(session.source().documents_file) {
  view = o.view;
  shown = std::max(0, view_index(o.view));
  pool = o.pool;
  state_dump_path = o.state_dump;
  log_weights = session.n() > 64;
  views = make_views(session, o.views, o.view, !async, o.step_given);
  session.set_companion(shown_view().companion());
}

void input_loaded(App& app) {
  for (auto& v : app.views) v->input_loaded();
  app.log_default_pending = true;
  apply_input_defaults(app);
}

void apply_input_defaults(App& app) {
  if (!app.log_default_pending || app.session.busy()) return;
  app.log_weights = app.session.n() > 64;
  app.log_default_pending = false;
}

const char* keyboard_line(const App& app) {
  switch (keyboard_line_kind(app.views[app.shown]->step_keys_help(app.lang))) {
    case KeyboardLineKind::Steps: return tr(app.lang, S::KeyboardLine);
    case KeyboardLineKind::NoSteps: return tr(app.lang, S::KeyboardLineNoSteps);
    case KeyboardLineKind::OtherViews: break;
  }
  return tr(app.lang, S::KeyboardLineOtherViews);
}

void apply_action(App& app, Action a) {
  Session& c = app.session;
  // The view first (the walk's playback keys step through its key tiles); the step keys it leaves
  // drive the chain's playback only where the view shows the chain's steps, and Shift + ← / →
  // move the selected key only where the view draws it. A key that does nothing leaves a refusal
  // on screen; one that acts ends it unless it keeps it (keeps_refusal).
  const std::string before = c.error();
  if (app.shown_view().on_action(a)) {
    if (!keeps_refusal(a) && c.error() == before) c.clear_error();  // not a refusal the view just made
    return;
  }
  if (!app_acts_on(app.shown_view(), a)) return;
  if (!keeps_refusal(a)) c.clear_error();
  switch (a) {
    case Action::TogglePlay: app.play.toggle_play(); break;
    case Action::StepNext: app.play.next(); break;
    case Action::StepPrev: app.play.prev(); break;
    case Action::StepHome: app.play.home(); break;
    case Action::QueryPrev: c.move_query(-1); break;
    case Action::QueryNext: c.move_query(+1); break;
    case Action::ToggleMask: c.toggle_mask(); break;  // a bundle's refusal shows in the UI language
    case Action::TemperatureDown:
    case Action::TemperatureUp: c.queue_temperature_step(a == Action::TemperatureUp); break;
    case Action::ToggleLanguage: app.lang = app.lang == Lang::Zh ? Lang::En : Lang::Zh; break;
    case Action::Screenshot: app.screenshot_requested = true; break;
    case Action::ToggleHelp: app.show_help = !app.show_help; break;
    case Action::UiScaleUp:
    case Action::UiScaleDown: app.ui_scale = step_ui_scale(app.ui_scale, a == Action::UiScaleUp); break;
    case Action::UiScaleReset: app.ui_scale = 1; break;
    case Action::ToggleFullscreen: app.fullscreen_requested = true; break;
    case Action::KeyPrev:
    case Action::KeyNext: {
      const int m = c.problem().m();
      // From the selected query's own key (the last n of the m positions are the queries').
      const int from = app.key_sel < 0 ? c.query() + m - c.problem().n() : app.key_sel;
      app.key_sel = std::clamp(from + (a == Action::KeyNext ? 1 : -1), 0, m - 1);
      break;
    }
    case Action::Quit:
      // Esc closes the key help first; only with nothing open does it quit.
      if (app.show_help) {
        app.show_help = false;
      } else {
        app.quit = true;
      }
      break;
  }
}

ViewSnapshot snapshot(const App& app) {
  ViewSnapshot s;
  s.playback = &app.play;
  s.lang = app.lang;
  if (app.window) SDL_GetWindowSize(app.window, &s.width, &s.height);
  s.pool = app.pool;
  s.plot = app.plot;
  s.view = view_names()[app.shown];
  s.view_fields = nlohmann::json::object();
  app.views[app.shown]->dump(s.view_fields, app.session);
  s.mask_sentence = app.views[app.shown]->mask_sentence(app.session, app.lang);
  s.ui_scale = app.ui_scale;
  s.font_px = app.font_px;
  s.help_open = app.show_help;
  s.key_sel = app.key_sel;
  if (ImGui::GetCurrentContext() && ImGui::IsMousePosValid()) {
    s.mouse_x = ImGui::GetIO().MousePos.x;
    s.mouse_y = ImGui::GetIO().MousePos.y;
  }
  if (ImGui::GetCurrentContext()) s.mouse_down = ImGui::GetIO().MouseDown[0];
  return s;
}

void dump_state_if_changed(App& app) {
  if (app.state_dump_path.empty()) return;
  const std::string json = state_json(app.session, snapshot(app));
  if (json == app.last_dump) return;
  write_text_file(app.state_dump_path, json);
  app.last_dump = json;
}

void draw_frame(App& app) {
  // A key selected in a larger problem than the one now on screen (a new input, another layer)
  // selects nothing.
  if (app.key_sel >= app.session.problem().m()) app.key_sel = -1;
  apply_input_defaults(app);
  const ImVec2 ds = ImGui::GetIO().DisplaySize;
  // Below the layout's minimum (nothing enforces it without a window manager) the panels would be
  // cut: one note says so instead.
  if (ds.x < kMinWindowW || ds.y < kMinWindowH) {
    ImGui::SetNextWindowPos(ImVec2(0, 0), ImGuiCond_Always);
    ImGui::SetNextWindowSize(ds, ImGuiCond_Always);
    ImGui::Begin("###toosmall", nullptr, ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoMove);
    wrapped(app, fmt(tr(app.lang, S::WindowTooSmall), static_cast<int>(ds.x), static_cast<int>(ds.y), kMinWindowW,
                     kMinWindowH));
    ImGui::End();
    draw_help(app);
    return;
  }
  const Layout l = compute_layout(ds.x, ds.y, app.font_px, caveat_height(app, ds.x));
  // The shown view's companion runs (another view's are dropped) and what it asks of the session;
  // again when the controls (or a panel, last frame) chose another view, which is drawn at once.
  const auto show = [&app] {
    if (app.view != view_names()[app.shown]) app.shown = std::max(0, view_index(app.view));
    View& v = app.shown_view();
    app.session.set_companion(v.companion());
    // The chain's playback does not move out of sight: a view without its steps pauses it.
    if (!v.chain_steps()) app.play.set_playing(false);
    v.prepare(app.session, app.play.step());
  };
  show();
  for (std::size_t i = 0; i < app.views.size(); ++i)
    if (static_cast<int>(i) != app.shown) app.views[i]->hidden();
  draw_controls(app, l);
  if (app.view != view_names()[app.shown]) show();
  View& v = app.shown_view();
  kPanels[app.shown](v, app, l);
  if (v.info_panel()) draw_info(app, l);
  draw_caveat(app, l);
  draw_help(app);
}

}  // namespace attnlab::viewer
