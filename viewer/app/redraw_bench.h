// --bench-redraw: what a temperature change costs at N tokens (default 4096), measured, not
// assumed. One redraw = the backend run of the whole chain with every stage kept (what the viewer
// does on a temperature change) + rasterising the weights heatmap at 900 x 900 pixels with pooling
// (the texture upload that follows is a 3 MB copy, not timed here). Runs without a window. Then the
// last redraw's trace (the stages it brought back, and the output) is checked against the fp64
// reference, as `attnlab verify` checks a run: the speed counts only if the numbers are right.
#pragma once

#include "viewer/app/options.h"

#include <iosfwd>

namespace attnlab::viewer {

struct RedrawBench {
  int n = 0, d_k = 0;
  std::string backend;
  double median_ms = 0, min_ms = 0, max_ms = 0;  // backend + heatmap
  double median_backend_ms = 0, median_raster_ms = 0;
  bool checked = false;  // false for streamed problems (no stage kept to check)
  bool check_pass = true;
};

// Prints one line per repetition, a summary line and the check's line (with its table when it
// fails) to `log`.
RedrawBench run_redraw_bench(const ViewerOptions& o, std::ostream& log);

}  // namespace attnlab::viewer
