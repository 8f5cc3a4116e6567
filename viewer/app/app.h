// The window's app (attnlab-view): the Shell every panel draws with (viewer/ui/shell.h: the
// session, playback, display settings, the centre's picture), one view of each kind from the
// registry (viewer/views/registry.h) and which is shown, and the fields of the shared panels (the
// controls' entries, the Compare result, the key help, the speaker, the state dump). Also the
// font set-up (a CJK font found at run time, atlas built from the glyphs actually used), the
// actions keys trigger, and the function that builds a frame's windows. main.cpp owns SDL
// initialisation, the event loop and the headless screenshot path.
#pragma once

#include "viewer/app/options.h"
#include "viewer/app/speech.h"
#include "viewer/app/state_dump.h"
#include "viewer/draw/layout.h"
#include "viewer/session/compare.h"
#include "viewer/session/keymap.h"
#include "viewer/ui/shell.h"
#include "viewer/views/registry.h"

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace attnlab::viewer {

struct App : Shell {
  // Builds the session (its first run), every view (InputError: a view's flag the problem refuses,
  // such as a --diff query that is no token) and asks for the shown view's companion.
  App(const ViewerOptions& o, bool async);

  std::vector<std::unique_ptr<View>> views;  // one of each, in the registry's order
  int shown = 0;                             // index of Shell::view in views
  View& shown_view() { return *views[shown]; }

  bool fullscreen_requested = false;  // F11: main toggles the window's fullscreen
  std::string font_note;  // which font was loaded (or why none was), for --help and the log
  std::set<unsigned> glyphs;                      // the code points the font atlas was built with
  std::uint64_t glyphs_problem = ~std::uint64_t{0};  // the problem (revision) they were checked for
  bool show_help = false;
  bool quit = false;
  std::string state_dump_path;
  std::string last_dump;
  Speaker speaker;
  CompareResult compare;  // the information panel's last Compare (shown while its run is on screen)

  // The controls panel's fields.
  char temp_text[64] = {};
  bool temp_entry_active = false;
  char queries_text[256] = {};      // the typed list of several queries
  bool queries_entry_active = false;
  int in_n, in_dk, in_dv, in_heads;  // the random-mode fields, applied by Generate
  std::uint64_t in_seed;
  int in_mode;                      // 0 demo, 1 random, 2 files, 3 the bundle (the radio's value)
  InputFiles in_files;              // the file fields, applied by Load
  std::string in_bias, in_documents;  // the modifications' file fields, applied by their Load
  // A new input was asked for (input_loaded): once no run is in flight, step 3's scale takes the
  // default of the problem then on screen (log above 64 tokens), as at startup.
  bool log_default_pending = false;
};

// Finds a CJK font (list of known paths, then fc-match), builds the atlas from the glyphs the UI,
// the tokens, the views and the core's texts use. Sets app.font_note and app.glyphs.
void load_fonts(App& app, float font_px);
// True when the problem on screen has changed since the last check and its tokens, layer names or
// description (either language) use a code point the atlas lacks: a file, bundle or pattern
// loaded in the window after the atlas was built. The caller then rebuilds the fonts.
bool glyphs_missing(App& app);

// A key's action: the shown view's first (View::on_action), else the app's. The temperature keys
// are queued on the session (Session::queue_temperature_step) and asked for once a frame.
void apply_action(App& app, Action a);
// The keyboard line under the controls and on the caveat bar: the step keys' line where the view
// shown has steps (the chain's or its own), the other keys' where it has none.
const char* keyboard_line(const App& app);
// A new input was loaded from the controls (demo, Generate, Load, the bundle, another layer): every
// view hears it, and step 3's log scale takes the new problem's default once it is on screen.
void input_loaded(App& app);
// What input_loaded left for the new problem, applied once no run is in flight (every frame).
void apply_input_defaults(App& app);

// The input's buttons of the controls panel (controls_panel.cpp), on the fields as they are: the
// demo, Generate (the random-mode fields), Load (the typed paths): false when refused at once (the
// session's refusal, shown beside them; files that do not read are refused when their run ends).
void choose_demo(App& app);
bool generate_random(App& app);
bool load_typed_files(App& app);
// The information panel's export buttons (info_panel.cpp): into Shell::export_dir, the file's
// name or why it was refused on the status line.
enum class Export { StageCsv, TraceJson, HeatmapPng };
void export_from_window(App& app, Export what);

// Builds every window of one frame (between ImGui::NewFrame and ImGui::Render).
void draw_frame(App& app);

// Current state for --state-dump; writes the file when the JSON changed.
ViewSnapshot snapshot(const App& app);
void dump_state_if_changed(App& app);

// The shared panels, each in its own file; draw_frame lays them out with the shown view's panel.
void draw_controls(App& app, const Layout& l);  // controls_panel.cpp
void draw_info(App& app, const Layout& l);      // info_panel.cpp
void draw_caveat(App& app, const Layout& l);    // caveat_help_panel.cpp
float caveat_height(App& app, float width);     // the bar's height for its lines at `width`: compute_layout's caveat_px
void draw_help(App& app);                       // caveat_help_panel.cpp

}  // namespace attnlab::viewer
