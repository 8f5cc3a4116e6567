// The ImGui side of attnlab-view: the App (controller, playback, view and the SDL objects the UI
// draws with), the font set-up (a CJK font found at run time, atlas built from the glyphs actually
// used), the actions keys trigger, and one function that builds a frame's windows. main.cpp owns
// SDL initialisation, the event loop and the headless screenshot path.
#pragma once

#include "viewer/session/controller.h"
#include "viewer/views/diff/diff_view.h"
#include "viewer/views/heads/heads_view.h"
#include "viewer/draw/heatmap.h"
#include "viewer/session/keymap.h"
#include "viewer/draw/layout.h"
#include "viewer/views/perf/perf_view.h"
#include "viewer/session/playback.h"
#include "viewer/views/precision/precision_view.h"
#include "viewer/app/speech.h"
#include "viewer/app/state_dump.h"
#include "viewer/draw/strings.h"
#include "viewer/views/walk/walk_view.h"

#include <SDL.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace attnlab::viewer {

// The sizes (ImGui::CalcTextSize) of one list of heatmap labels: the query tokens, the key tokens
// or the output dimensions. Each is measured the first time it is needed and kept while the
// problem (Controller::problem_revision, which fixes the labels), the list and the font stay; the
// heatmap needs them every frame, for up to 4096 labels.
struct LabelSizes {
  std::uint64_t problem = ~std::uint64_t{0};
  int list = -1;                 // 0 query tokens, 1 key tokens, 2 output dimensions
  const void* font = nullptr;
  float font_size = 0;
  std::vector<float> w, h;       // w < 0: not measured yet
};

struct App;
// Tells the controller which companion runs the view shown needs (the fp64 reference for the
// precision view, B for the diff view); a no-op when unchanged.
void update_companions(App& app);
// The perf view's state from the options (panel_perf.cpp); headless (--screenshot) in the perf view
// runs the sweep to the end here and writes --perf-output (InputError when it cannot).
void init_perf(App& app, const ViewerOptions& o, bool headless);

struct App {
  // async: backend runs off the UI thread (the interactive viewer); headless runs wait for them.
  App(const ViewerOptions& o, bool async)
      : ctl(o, async), view_kind(o.view), walk_tile(o.tile), pool(o.pool), state_dump_path(o.state_dump), in_n(ctl.random_n()),
        in_dk(ctl.random_dk()), in_dv(ctl.random_dv()), in_heads(ctl.random_heads()), in_seed(ctl.random_seed()),
        in_mode(ctl.from_bundle() ? 3 : ctl.from_files() ? 2 : ctl.demo() ? 0 : 1), in_files(ctl.files()) {
    log_weights = ctl.n() > 64;
    init_perf(*this, o, !async);
    if (o.diff) {
      ctl.check_diff(*o.diff);  // a query that is no token, CUDA without a device: exit 2
      diff = o.diff;
      diff_edit = *o.diff;
    }
    update_companions(*this);
  }

  Controller ctl;
  Playback play;
  ViewKind view_kind = ViewKind::Chain;  // which view the centre panel shows
  int walk_tile = 0;                // keys per tile of the walk view (0: its default)
  WalkView walk;                    // the walk view: cached walk of the selected row, tile cursor
  PerfViewState perf;               // the perf view: its sweep on its own thread, the chart shown
  PrecisionView prec;               // the precision view: the error map of the step shown
  ErrorKind prec_kind = ErrorKind::Abs;
  DiffView diffv;                   // the diff view: B − A of the step shown
  std::optional<DiffSpec> diff;     // B's changes as applied (--diff, the editor's Apply)
  DiffSpec diff_edit;               // the editor's fields
  Message diff_error;               // why the last Apply was refused
  // The heads view (panel_heads.cpp): the thumbnails' run, the copy of its state drawn, their one
  // texture (a grid of kThumbPixels slots) and where they were placed (hover, click, state dump).
  HeadsRun heads_run;
  HeadsSnapshot heads;
  std::uint64_t heads_rev = ~std::uint64_t{0};
  SDL_Texture* heads_tex = nullptr;
  int heads_tex_w = 0, heads_tex_h = 0, heads_tex_cols = 1;
  std::string heads_tex_key;
  ThumbGrid heads_grid;
  Lang lang = Lang::En;
  PoolMode pool = PoolMode::Max;
  HeatView view;
  HeatView map_view;  // the precision and diff views' window into their map (draw_map)
  std::uint64_t map_view_problem = 0;  // the problem it belongs to: a new one shows the whole map
  bool log_weights = false;  // step 3 on a log colour scale (default for more than 64 tokens)
  float font_px = 18;
  float ui_scale = 1;               // Ctrl + / Ctrl − / Ctrl 0, --ui-scale
  bool fullscreen_requested = false;  // F11: main toggles the window's fullscreen
  std::string font_note;  // which font was loaded (or why none was), for --help and the log
  std::set<unsigned> glyphs;                      // the code points the font atlas was built with
  std::uint64_t glyphs_problem = ~std::uint64_t{0};  // the problem (revision) they were checked for

  SDL_Window* window = nullptr;
  SDL_Renderer* renderer = nullptr;
  SDL_Texture* heat_tex = nullptr;
  int tex_w = 0, tex_h = 0;
  std::string heat_key;      // what the texture currently shows; redrawn when it changes
  int heat_step = 0;         // the step the heatmap last drew (kept while another step's matrix comes)
  PlotGeometry plot;         // last placed plot (hover, dumps)
  ValueRange range;          // colour range of the current stage
  bool range_log = false;    // range is a log scale (weights, log_weights on)
  double last_raster_ms = 0;
  std::vector<std::uint32_t> heat_px;  // the texture's pixels, for the PNG export
  int heat_px_w = 0, heat_px_h = 0;
  WrapCache wrap_cache;      // wrapped text's lines, kept between frames
  LabelSizes row_sizes, key_sizes, dim_sizes;  // heatmap labels: queries, keys, output dims

  int key_sel = -1;          // the selected key (crosshair column of steps 1-3), -1: none
  bool show_help = false;
  bool quit = false;
  bool screenshot_requested = false;
  std::string status;        // transient message (screenshot saved, copied)
  double status_until = 0;   // seconds (SDL_GetTicks64 / 1000) when it disappears
  std::string state_dump_path;
  std::string last_dump;

  Speaker speaker;
  char temp_text[64] = {};
  bool temp_entry_active = false;
  char queries_text[256] = {};      // the typed list of several queries
  bool queries_entry_active = false;
  // [ and ] steps since the last frame, applied as one run by apply_pending (held keys repeat
  // faster than a run at 4096 tokens takes: one run per key queued seconds of them).
  std::optional<double> pending_temperature;
  int in_n, in_dk, in_dv, in_heads;  // the random-mode fields, applied by Generate
  std::uint64_t in_seed;
  int in_mode;                      // 0 demo, 1 random, 2 files, 3 the bundle (the radio's value)
  InputFiles in_files;              // the file fields, applied by Load
  Message random_error;             // why the last Generate or Load was refused (shown beside it,
                                    // in the UI language)
  int random_over_limit = 0;        // or the N it refused as over the backend's limit (0: none),
                                    // worded at draw time so that it follows the language
};

// Finds a CJK font (list of known paths, then fc-match), builds the atlas from the glyphs the UI,
// the tokens and the core's texts use. Sets app.font_note and app.glyphs.
void load_fonts(App& app, float font_px);
// True when the problem on screen has changed since the last check and its tokens, layer names or
// description (either language) use a code point the atlas lacks: a file, bundle or pattern
// loaded in the window after the atlas was built. The caller then rebuilds the fonts.
bool glyphs_missing(App& app);

void apply_action(App& app, Action a);
// Runs what apply_action queued (the temperature steps of [ and ]): once per frame, after the
// frame's events.
void apply_pending(App& app);

// Builds every window of one frame (between ImGui::NewFrame and ImGui::Render).
void draw_frame(App& app);


// Current state for --state-dump; writes the file when the JSON changed.
ViewSnapshot snapshot(const App& app);
void dump_state_if_changed(App& app);

void set_status(App& app, const std::string& text);

}  // namespace attnlab::viewer
