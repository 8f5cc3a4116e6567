// The shell: what every panel draws with, the views' and the app's alike. The session (the shared
// state of the lab), the chain's playback, the language, font and display settings, the wrapped
// text cache and label sizes, the one picture of the centre (its SDL texture, the pixels kept for
// the PNG export, where it was placed, its colour range), the precision and diff views' shared
// window into their map, the selected key, the status line, textures a view keeps by name, and
// which view is shown. A view's own state is the view's (viewer/views/<name>/); the App
// (viewer/app/app.h) adds the views and the shared panels' fields.
#pragma once

#include "viewer/draw/heatmap.h"
#include "viewer/draw/pooling.h"
#include "viewer/draw/strings.h"
#include "viewer/session/playback.h"
#include "viewer/session/session.h"

#include <SDL.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace attnlab::viewer {

// The sizes (ImGui::CalcTextSize) of one list of heatmap labels: the query tokens, the key tokens
// or the output dimensions. Each is measured the first time it is needed and kept while the
// problem (Session::problem_revision, which fixes the labels), the list and the font stay; the
// heatmap needs them every frame, for up to 4096 labels.
struct LabelSizes {
  std::uint64_t problem = ~std::uint64_t{0};
  int list = -1;                 // 0 query tokens, 1 key tokens, 2 output dimensions
  const void* font = nullptr;
  float font_size = 0;
  std::vector<float> w, h;       // w < 0: not measured yet
};

struct Shell {
  // async: backend runs off the UI thread (the interactive viewer); headless runs wait for them.
  Shell(const SessionOptions& o, bool async) : session(o, async) {}
  ~Shell() { release_textures(); }
  Shell(const Shell&) = delete;
  Shell& operator=(const Shell&) = delete;

  Session session;
  Playback play;
  std::string view = "chain";  // the view shown (a word of viewer/views/registry.h); a panel may set it
  Lang lang = Lang::En;
  PoolMode pool = PoolMode::Max;
  bool log_weights = false;  // step 3 on a log colour scale (default for more than 64 tokens)
  float font_px = 18;
  float ui_scale = 1;        // Ctrl + / Ctrl − / Ctrl 0, --ui-scale
  int key_sel = -1;          // the selected key (crosshair column of steps 1-3), -1: none
  bool screenshot_requested = false;
  std::string export_dir;    // --export-dir: where exports and screenshots go ("": the current directory)
  // SDL counted a double-click of the left button this frame (its own timing, at the moment it
  // read the events: two presses read in one slow frame still make one; ImGui, which samples the
  // button once a frame, would see one click). draw_map takes either.
  bool double_click = false;
  // The transient message (screenshot saved, copied; set_status) worded in a language: drawn in
  // the one shown, also after L while it shows.
  std::function<std::string(Lang)> status;
  double status_until = 0;   // seconds (SDL_GetTicks64 / 1000) when it disappears

  SDL_Window* window = nullptr;
  SDL_Renderer* renderer = nullptr;
  // The centre's picture (the chain's heatmap, the precision and diff maps).
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
  std::string heat_px_view;  // the view that drew them (Export PNG writes them only in that view)
  HeatView map_view;  // the precision and diff views' window into their map (draw_map)
  std::uint64_t map_view_problem = 0;  // the problem it belongs to: a new one shows the whole map
  WrapCache wrap_cache;      // wrapped text's lines, kept between frames
  LabelSizes row_sizes, key_sizes, dim_sizes;  // heatmap labels: queries, keys, output dims

  // A texture a view keeps (the heads view's thumbnails), by name; destroyed with the window.
  struct Texture {
    SDL_Texture* tex = nullptr;
    int w = 0, h = 0;
  };
  Texture& texture(const std::string& name) { return textures_[name]; }
  // Before the renderer goes (the app's teardown), and in the destructor.
  void release_textures() {
    for (auto& [name, t] : textures_)
      if (t.tex) SDL_DestroyTexture(t.tex);
    textures_.clear();
    if (heat_tex) SDL_DestroyTexture(heat_tex);
    heat_tex = nullptr;
  }

 private:
  std::map<std::string, Texture> textures_;
};

}  // namespace attnlab::viewer
