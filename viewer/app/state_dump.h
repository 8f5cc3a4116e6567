// The viewer's state as JSON (--state-dump FILE.json): what the Xvfb test reads back after sending
// real key presses, and what the screenshot tests use to find the heatmap's cells in the PNG.
// Fields: step, playing, speed, mouse{x,y} (the pointer as the last frame saw it), query, query_token, queries (the selection, query first), mask,
// temperature, lang, mode (demo | random | files | bundle), N, d_k, d_v,
// seed, backend, backend_ran, error, window{w,h}, pool, heatmap{x,y,w,h,rows,cols,first_row,
// first_col,vis_rows,vis_cols,cell_w,cell_h}; precision ("fp32" | "bf16"); layer, head, heads (of
// the layer), bundle (its directory, "" when none); mask_sentence (the caveat bar's); view (its --view word) and the shown view's own
// fields (View::dump): in the walk view
// walk{tile,tiles,cursor,playing,keys,skipped,skipped_tiles,max_abs_diff,fp64_error,strip{x,y,w,h,bins}};
// in the precision view precision_view{status,step,kind,precision,max,mean,arg_row,arg_col,zeros,
// masked,non_finite,hist}; in the diff view diff{status,spec,step,rows,cols,max_abs,mean_abs,arg_row,
// arg_col,changed,masked,top[{row,col,a,b,diff}],b_backend}; in the heads view
// heads_grid{x,y,side,step_x,step_y,cols,rows,done} (the thumbnails' places).
#pragma once

#include "viewer/draw/heatmap.h"
#include "viewer/session/playback.h"
#include "viewer/session/session.h"

#include <nlohmann/json.hpp>

#include <string>

namespace attnlab::viewer {

struct ViewSnapshot {
  const Playback* playback = nullptr;
  Lang lang = Lang::En;
  int width = 0, height = 0;
  PoolMode pool = PoolMode::Max;
  PlotGeometry plot;
  float ui_scale = 1, font_px = 0;  // the presentation size and the font it gave
  bool help_open = false;           // the F1 key help is shown
  int key_sel = -1;                 // the selected key (crosshair), -1: none
  float mouse_x = -1, mouse_y = -1; // where the window's last frame saw the pointer (-1: outside)
  bool mouse_down = false;          // the left button, as the last frame saw it
  std::string view = "chain";       // the view shown
  nlohmann::json view_fields;       // its own fields (View::dump), beside the shared ones
  std::string mask_sentence;        // the caveat bar's (View::mask_sentence)
};

std::string state_json(const Session& c, const ViewSnapshot& v);

// Writes atomically (core/io.h write_file: temporary file + rename) so a reader never sees half a file.
void write_text_file(const std::string& path, const std::string& text);

}  // namespace attnlab::viewer
