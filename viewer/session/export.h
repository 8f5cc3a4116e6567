// Export from the window, through the writers the CLI uses: the current stage as CSV (core/io's
// write_csv, the matrix format --q/--k/--v read back), the whole trace as JSON (core/report's
// render, as `attnlab run --format json`), the heatmap as PNG (the rasterised pixels, one per
// plot pixel). Each writes a new file `stem` + suffix (export_stem: the export folder) and returns its
// name; a stage that is not kept (a streamed problem) or a trace too large for JSON is refused
// with InputError saying what to use instead. Free of SDL: unit-tested.
#pragma once

#include "viewer/session/session.h"

#include <cstdint>
#include <string>
#include <vector>

namespace attnlab::viewer {

// "attnlab-view-20261201-104700" from the local time (`prefix` first), in `dir` ("dir/attnlab-...")
// when it is not empty (--export-dir), else in the current directory.
std::string export_stem(const std::string& dir = "", const char* prefix = "attnlab-view");
// `base` + `ext` where no file has that name, else the first free of base-2, base-3, …: two
// exports of one kind within the same second each keep their file.
std::string unused_name(const std::string& base, const std::string& ext);
// step 1..4 (scores, logits, weights, output) of the trace on screen.
std::string export_stage_csv(const Session& c, int step, const std::string& stem);
// A matrix the heatmap draws in place of its step's stage (View::shown_matrix): `stem-word.csv`.
std::string export_matrix_csv(const MatrixF& m, const std::string& word, const std::string& stem);
std::string export_trace_json(const Session& c, Lang lang, const std::string& stem);
// px: rows of packed RGBA (colormap.h pack_rgba), w x h.
std::string export_heatmap_png(const std::vector<std::uint32_t>& px, int w, int h, const std::string& stem);

}  // namespace attnlab::viewer
