// attnlab-view's command line, parsed without SDL so that bad flags are tested and refused before a
// window opens (one line "error: ..." and exit 2 in main).
//   attnlab-view [--screenshot FILE.png] [--query Q] [--queries LIST] [--step K] [--temperature T]
//                [--mask none|causal|FILE] [--random N] [--dk D] [--dv D] [--seed S]
//                [--q FILE --k FILE --v FILE [--tokens a,b,c | --tokens-file FILE]] [--lang zh|en]
//                [--heads H] [--bundle DIR [--layer L]] [--head H]
//                [--size WxH] [--backend auto|cpu|cuda] [--pool max|mean] [--state-dump FILE.json]
//                [--stages auto|all|step]
//                [--view NAME] [--ui-scale S] [--fullscreen] [--precision fp32|bf16]
//                and each view's own flags (viewer/views/registry.h: --tile, --diff, --perf-*)
//                [--bench-redraw] [--repeat R] [--bench-decode S] [--help]
#pragma once

#include "core/types.h"
#include "viewer/draw/pooling.h"
#include "viewer/session/options.h"
#include "viewer/views/registry.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace attnlab::viewer {

constexpr int kMinWindowW = 960, kMinWindowH = 600;  // the layout's minimum (and --size's)

// The session's flags (SessionOptions: the problem, its settings, the backend), the window's, the
// view it opens on and every view's own flags.
struct ViewerOptions : SessionOptions {
  std::string view = "chain";         // --view NAME (a word of viewer/views/registry.h)
  bool step_given = false;            // --step was given: the view opens on that step
  ViewOptions views;                  // each view's flags (--tile, --diff, --perf-*, ...)
  float ui_scale = 1.0f;              // --ui-scale S: text and controls S times the default
  bool fullscreen = false;            // --fullscreen
  std::string screenshot;             // non-empty: headless, render and write this PNG
  std::optional<Lang> lang;           // default from $LANG
  int width = 1280, height = 800;
  PoolMode pool = PoolMode::Max;
  std::string state_dump;             // write the state as JSON here on every change and on exit
  bool bench_redraw = false;          // time temperature redraws without a window, print ms
  int repeat = 5;                     // --bench-redraw repetitions
  double bench_decode_seconds = 0;    // --bench-decode S: the decode view's play for S seconds
  std::string export_dir;             // --export-dir DIR: exports and screenshots ("": here)
  long fuzz_events = 0;               // --fuzz-events N: the UI event fuzzer (viewer/app/fuzz.h)
  std::optional<std::uint64_t> fuzz_seed;  // --fuzz-seed S (default 1)
  bool help = false;
};

// Throws InputError ("unknown option '--foo'", "--step must be 1, 2, 3 or 4, got '7'",
// "temperature must be a finite number > 0, got 0", ...).
ViewerOptions parse_viewer_args(const std::vector<std::string>& args, const std::string& program = "attnlab-view");

std::string viewer_usage();

}  // namespace attnlab::viewer
