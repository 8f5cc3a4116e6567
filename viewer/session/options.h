// What the session starts from and the limits it keeps: the problem's source and settings as the
// command line gives them (attnlab-view's flags, parsed in viewer/app/options.cpp, whose
// ViewerOptions extends this), the stages a run brings back (--stages), and the sizes the window
// refuses. Free of SDL and ImGui.
#pragma once

#include "core/backend.h"
#include "core/patterns.h"
#include "core/types.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace attnlab::viewer {

// --stages: which (n, m) stages a run brings back when the stages are kept (N up to
// kKeepStagesMaxTokens). all: every stage (the tables, Compare, JSON export, any step at once).
// step: above kTableMaxTokens, the weights (statistics, row chart, description) and the step on
// screen (and its mask); another step is a new run. auto: step on CUDA above kJsonExportMaxTokens,
// where bringing all five matrices back costs more than the kernels; all otherwise.
enum class StagePolicy { Auto, All, Step };

// The viewer's limits, for flags, fields and refusals alike.
// Above 4096 tokens the viewer streams the stages into pooled views (viewer/session/session.h):
// the limits are what a run costs in time (65536 tokens on two CPU cores take seconds), not memory.
constexpr int kCpuMaxTokens = 65536;
constexpr int kCudaMaxTokens = 1048576;
constexpr int kMaxHeadDim = 1024;  // d_k, d_v
// --heads of a random problem: every head is a thumbnail of the heads view, and Q, K and V of all
// of them are generated for each head shown (the CLI's generator), so both are bounded.
constexpr int kMaxRandomHeads = 64;
constexpr double kMaxRandomInputBytes = 2.0 * (1ull << 30);
// Throws InputError (Msg::RandomInputsTooLarge) when Q, K and V of a random problem of these
// sizes would exceed kMaxRandomInputBytes: --random and Generate in the window alike.
void check_random_inputs(int n, int d_k, int d_v, int heads);
// The largest problem whose whole trace the window writes as JSON (every stage, ~12 bytes per
// number; viewer/session/export.h); above, the command line does it (Session::reproduce_command
// with --format json). Also where --stages auto starts bringing back only the step on screen.
constexpr int kJsonExportMaxTokens = 1024;
constexpr int kTableMaxTokens = 16;         // numeric tables are drawn up to this N
constexpr int kKeepStagesMaxTokens = 4096;  // every stage kept up to this N; streamed above
// Queries selected together (shift-click, a typed list, --queries): the selected query and up to
// kMaxQueries - 1 more, compared in the statistics and overlaid in the row chart.
constexpr int kMaxQueries = 8;

// RoPE's θ sliders' range, logarithmic (the controls' and the position view's).
constexpr double kRopeThetaMin = 10, kRopeThetaMax = 1e7;

// The modifications that are settings of a run (core/modifications.h), as the controls change them;
// a bias and document ids are files of the source (Source::bias_file, documents_file).
struct ModSettings {
  double rope_theta = 0;  // > 0: RoPE with this base
  bool alibi = false;     // the standard slopes of the problem's heads
  double softcap = 0;     // > 0: C tanh(s / C)
  int window = 0;         // >= 1: |i - j| < W
  int prefix = 0;         // >= 1: prefix-LM over the first P positions
  bool operator==(const ModSettings&) const = default;
};

// The session's part of the command line.
struct SessionOptions {
  Precision precision = Precision::FP32;  // --precision fp32|bf16: the run's, in every view
  std::string query;                  // token or 0-based index; empty = default
  std::string queries;                // --queries "3,7,9": several queries, the first selected
  int step = 1;                       // 1..4
  std::optional<double> temperature;  // default: demo 0.85, random 1.0
  MaskKind mask = MaskKind::None;
  // --rope, --score-mod, --mask-mod (viewer/app/options.cpp turns the specs into these): the
  // modifications (each *_given false: those the problem brings, a bundle's RoPE), a bias file
  // and a document-id file.
  ModSettings mods;
  bool rope_given = false, score_mods_given = false, mask_mods_given = false;
  std::string bias_file, documents_file;
  std::optional<int> random_n;        // random mode with N tokens
  Pattern pattern;                    // --pattern P of the random problem (core/patterns.h)
  std::string q_file, k_file, v_file;  // file inputs (CSV or .npy), all three or none
  std::string mask_file;              // --mask FILE (then mask == Custom)
  std::string tokens, tokens_file;    // labels of file or random inputs
  int d_k = 64, d_v = 64;
  std::uint64_t seed = 0;
  int heads = 1;                      // --heads H of the random problem (the CLI's generator)
  std::string bundle;                 // --bundle DIR: a captured model's calls (core/bundle.h)
  std::string layer = "0";            // --layer L: the bundle's call, an index or a name
  int head = 0;                       // --head H: the head the chain and walk views show
  std::string backend = "auto";       // auto | cpu | cuda
  StagePolicy stages = StagePolicy::Auto;  // --stages auto|all|step
  // The backends the session's worker runs, by name ("cpu" | "cuda"); empty: the registry's
  // (engine/registry.h make_backend). Tests hand in one that fails on demand.
  std::function<std::unique_ptr<Backend>(const std::string&)> backends;
  // The window's session: a first run that streams computes the selected rows only and leaves the
  // output to the pass that pools the heatmap's first view (set_view, or the second poll() when
  // no view asks for one), so that the two make one pass over the keys; otherwise (the tests) the
  // first run computes the output at once.
  bool output_with_first_view = false;
};

}  // namespace attnlab::viewer
