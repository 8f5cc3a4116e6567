// --bench-decode S: the decode view's play without a window, measured, not assumed. The view
// (viewer/views/decode/decode_view.h, its --cache / --cache-heads / --cache-dim / --split) plays
// at its fastest speed for S seconds on its worker thread while this thread runs the window's
// frames at 60 per second: each frame's share of the UI thread (the view's sync and tick, what
// the window's frame adds to its drawing) is timed, so a frozen window shows as a long frame.
// Reported: the tokens shown per second, the kernel's time per token (median, spread) and read
// rate against the machine's, the UI thread's frame times, and whether every token's output was
// within verify's fp32 bound of fp64 (a token outside fails the run, however fast).
#pragma once

#include "viewer/app/options.h"

#include <iosfwd>

namespace attnlab::viewer {

struct DecodeBench {
  int tokens = 0;                 // tokens shown during the timed seconds
  double seconds = 0;
  double tokens_per_second = 0;
  double median_kernel_ms = 0, min_kernel_ms = 0, max_kernel_ms = 0;
  double median_gbs = 0, read_gbs = 0;
  double median_frame_ms = 0, max_frame_ms = 0;  // the UI thread's share of a frame
  double build_ms = 0;            // the cache and the read probe, before the clock starts
  bool check_pass = true;
};

DecodeBench run_decode_bench(const ViewerOptions& o, std::ostream& log);

}  // namespace attnlab::viewer
