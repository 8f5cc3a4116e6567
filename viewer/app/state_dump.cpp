// State dump as JSON (see state_dump.h).
#include "viewer/app/state_dump.h"

#include "core/format.h"
#include "core/io.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <stdexcept>

namespace attnlab::viewer {

std::string state_json(const Session& c, const ViewSnapshot& v) {
  const Problem& p = c.problem();
  nlohmann::json j;
  j["step"] = v.playback ? v.playback->step() : 1;
  j["playing"] = v.playback ? v.playback->playing() : false;
  j["speed"] = v.playback ? v.playback->speed() : 1.0;
  j["query"] = c.query();
  j["query_token"] = p.query_tokens().at(c.query());
  j["queries"] = c.queries();
  j["mask"] = std::string(to_string(p.mask));
  j["temperature"] = p.temperature;
  j["lang"] = std::string(to_string(v.lang));
  j["mode"] = c.demo() ? "demo" : c.from_bundle() ? "bundle" : c.from_files() ? "files" : "random";
  j["N"] = p.n();
  j["M"] = p.m();
  j["d_k"] = p.d_k();
  j["d_v"] = p.d_v();
  j["seed"] = c.random_seed();
  j["backend"] = c.backend();
  j["backend_ran"] = c.trace().backend;
  j["error"] = c.error();
  j["stages_kept"] = c.stages_kept();
  j["stages"] = stage_names(present_stages(c.trace()));  // all, or the step's and the weights
  j["window"] = {{"w", v.width}, {"h", v.height}};
  j["pool"] = v.pool == PoolMode::Max ? "max" : "mean";
  j["ui_scale"] = std::stod(shortest_text(v.ui_scale));  // as the float reads (1.1, not 1.100000023841858)
  j["font_px"] = v.font_px;
  j["help_open"] = v.help_open;
  j["key_sel"] = v.key_sel;
  j["mouse"] = {{"x", v.mouse_x}, {"y", v.mouse_y}, {"down", v.mouse_down}};
  const PlotGeometry& g = v.plot;
  j["heatmap"] = {{"x", g.x}, {"y", g.y}, {"w", g.w}, {"h", g.h}, {"rows", g.rows}, {"cols", g.cols},
                  {"first_row", g.first_row}, {"first_col", g.first_col}, {"vis_rows", g.vis_rows},
                  {"vis_cols", g.vis_cols}, {"cell_w", g.cell_w}, {"cell_h", g.cell_h}};
  j["precision"] = std::string(to_string(c.precision()));
  j["layer"] = c.shown_layer();
  j["head"] = c.shown_head();
  j["heads"] = c.shown_heads();
  j["bundle"] = c.from_bundle() && c.bundle() ? c.bundle()->dir : "";
  j["mask_sentence"] = v.mask_sentence;
  j["view"] = v.view;
  if (v.view_fields.is_object())
    for (const auto& [key, value] : v.view_fields.items()) j[key] = value;
  return j.dump(2) + "\n";
}

void write_text_file(const std::string& path, const std::string& text) { write_file(path, text); }

}  // namespace attnlab::viewer
