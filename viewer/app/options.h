// attnlab-view's command line, parsed without SDL so that bad flags are tested and refused before a
// window opens (one line "error: ..." and exit 2 in main).
//   attnlab-view [--screenshot FILE.png] [--query Q] [--queries LIST] [--step K] [--temperature T]
//                [--mask none|causal|FILE] [--random N] [--dk D] [--dv D] [--seed S]
//                [--q FILE --k FILE --v FILE [--tokens a,b,c | --tokens-file FILE]] [--lang zh|en]
//                [--heads H] [--bundle DIR [--layer L]] [--head H]
//                [--size WxH] [--backend auto|cpu|cuda] [--pool max|mean] [--state-dump FILE.json]
//                [--stages auto|all|step]
//                [--view chain|walk|heads|perf|precision|diff] [--tile B] [--ui-scale S] [--fullscreen]
//                [--precision fp32|bf16] [--diff KEY=VALUE[,KEY=VALUE...]]
//                [--perf-variant L] [--perf-precision L] [--perf-n L|A..B] [--perf-d L]
//                [--perf-heads L] [--perf-mask L] [--perf-repeat R] [--perf-warmup W]
//                [--perf-max-seconds S] [--perf-chart NAME] [--perf-output FILE.csv]
//                (in the perf view --backend takes a list: cpu, cuda or cpu,cuda)
//                [--bench-redraw] [--repeat R] [--help]
#pragma once

#include "core/types.h"
#include "core/patterns.h"
#include "viewer/views/diff/diff_view.h"
#include "viewer/views/perf/perf_view.h"
#include "viewer/draw/pooling.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace attnlab::viewer {

// --stages: which (n, m) stages a run brings back when the stages are kept (N up to
// kKeepStagesMaxTokens). all: every stage (the tables, Compare, JSON export, any step at once).
// step: above kTableMaxTokens, the weights (statistics, row chart, description) and the step on
// screen (and its mask); another step is a new run. auto: step on CUDA above kJsonExportMaxTokens,
// where bringing all five matrices back costs more than the kernels; all otherwise.
enum class StagePolicy { Auto, All, Step };

// The viewer's limits, for flags, fields and refusals alike.
// Above 4096 tokens the viewer streams the stages into pooled views (viewer/session/controller.h): the
// limits are what a run costs in time (65536 tokens on two CPU cores take seconds), not memory.
constexpr int kCpuMaxTokens = 65536;
constexpr int kCudaMaxTokens = 1048576;
constexpr int kMaxHeadDim = 1024;  // d_k, d_v
constexpr int kMinWindowW = 960, kMinWindowH = 600;  // the layout's minimum (and --size's)
// --heads of a random problem: every head is a thumbnail of the heads view, and Q, K and V of all
// of them are generated for each head shown (the CLI's generator), so both are bounded.
constexpr int kMaxRandomHeads = 64;
constexpr double kMaxRandomInputBytes = 2.0 * (1ull << 30);
// Throws InputError (Msg::RandomInputsTooLarge) when Q, K and V of a random problem of these
// sizes would exceed kMaxRandomInputBytes: --random and Generate in the window alike.
void check_random_inputs(int n, int d_k, int d_v, int heads);
// The largest problem whose whole trace the window writes as JSON (every stage, ~12 bytes per
// number; viewer/session/export.h); above, the command line does it (Controller::reproduce_command with
// --format json). Also where --stages auto starts bringing back only the step on screen.
constexpr int kJsonExportMaxTokens = 1024;

// The views of the window: the staged chain's four steps (the default), the fused kernel's online
// softmax walked tile by tile, the performance sweep (viewer/views/perf/perf_view.h), the error of the run
// against fp64 (viewer/views/precision/precision_view.h), B − A of two settings (viewer/views/diff/diff_view.h), every head of
// the current layer as a thumbnail (viewer/views/heads/heads_view.h).
enum class ViewKind { Chain, Walk, Perf, Precision, Diff, Heads };

struct ViewerOptions {
  ViewKind view = ViewKind::Chain;    // --view chain|walk|heads|perf|precision|diff
  Precision precision = Precision::FP32;  // --precision fp32|bf16: the run's, in every view
  std::optional<DiffSpec> diff;       // --diff KEY=VALUE,...: the diff view's B (needs --view diff)
  float ui_scale = 1.0f;              // --ui-scale S: text and controls S times the default
  bool fullscreen = false;            // --fullscreen
  int tile = 0;                       // --tile B, keys per tile of the walk view (0: its default)
  std::string screenshot;             // non-empty: headless, render and write this PNG
  std::string query;                  // token or 0-based index; empty = default
  std::string queries;                // --queries "3,7,9": several queries, the first selected
  int step = 1;                       // 1..4
  std::optional<double> temperature;  // default: demo 0.85, random 1.0
  MaskKind mask = MaskKind::None;
  std::optional<int> random_n;        // random mode with N tokens
  Pattern pattern;                    // --pattern P of the random problem (core/patterns.h)
  std::string q_file, k_file, v_file;  // file inputs (CSV or .npy), all three or none
  std::string mask_file;              // --mask FILE (then mask == Custom)
  std::string tokens, tokens_file;    // labels of file inputs
  int d_k = 64, d_v = 64;
  std::uint64_t seed = 0;
  int heads = 1;                      // --heads H of the random problem (the CLI's generator)
  std::string bundle;                 // --bundle DIR: a captured model's calls (core/bundle.h)
  std::string layer = "0";            // --layer L: the bundle's call, an index or a name
  int head = 0;                       // --head H: the head the chain and walk views show
  std::optional<Lang> lang;           // default from $LANG
  int width = 1280, height = 800;
  std::string backend = "auto";       // auto | cpu | cuda
  PoolMode pool = PoolMode::Max;
  StagePolicy stages = StagePolicy::Auto;  // --stages auto|all|step
  std::string state_dump;             // write the state as JSON here on every change and on exit
  bool bench_redraw = false;          // time temperature redraws without a window, print ms
  int repeat = 5;                     // --bench-redraw repetitions
  bool help = false;
  // The perf view's sweep (--backend as a list, --perf-*); headless (--screenshot) runs it to the
  // end before the picture, and writes bench's CSV to perf_output when given.
  bench::Spec perf = default_perf_spec();
  std::string perf_output;            // --perf-output FILE.csv
  PerfChart perf_chart = PerfChart::Time;  // --perf-chart time|tflops|speedup|roofline|memory
};

// Throws InputError ("unknown option '--foo'", "--step must be 1, 2, 3 or 4, got '7'",
// "temperature must be a finite number > 0, got 0", ...).
ViewerOptions parse_viewer_args(const std::vector<std::string>& args);

std::string viewer_usage();

}  // namespace attnlab::viewer
