// The walk view's logic, free of SDL and ImGui (viewer/views/walk/panel.cpp draws it): the tile sizes
// offered, the walk of the selected row computed through the CPU fused kernel's own update step
// (cpu/walk.h walk_row, then check_walk against the staged chain, the kernel and fp64) and cached
// by (session revision, query, tile), the cursor over the tiles that Space, ←/→ and Home move,
// the row strip's bins (keys pooled to the pixels there are, each bin's tile and state) and the
// series of the small charts. Unit-tested in tests/viewer/test_walk_view.cpp.
//
// Two passes (--walk-pass, the panel's switch): the forward above, and the backward, the same row
// through the fused backward's own step (cpu/walk_backward.h walk_backward_row: P_j recomputed
// from m and l, dP_j, dS_j, the running Σ dS and dQ, then dQ against the fused backward and fp64)
// for dO standard normal of seed 0. The backward's check runs the fused backward over the whole
// problem, so it is the view's companion run (viewer/session/companion.h) on the session's worker,
// keyed by query and tile; the tiles, the cursor and its keys are the forward's.
#pragma once

#include "core/backward.h"
#include "core/messages.h"
#include "core/walk.h"
#include "core/walk_backward.h"
#include "viewer/session/companion.h"
#include "viewer/session/session.h"
#include "viewer/views/view.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace attnlab::viewer {

// Every size 1..m on small problems (m <= kWalkAllSizesMax), powers of two up to m otherwise
// (m itself added when it is not one), and `current` (the size on screen, a typed --tile B) in its place.
constexpr int kWalkAllSizesMax = 16;
std::vector<int> walk_tile_choices(int keys, int current = 0);
// --tile B as asked (0: core's default_walk_tile), as the CLI's walk takes it: at most the keys.
int walk_tile_for(int requested, bool demo, int keys);

// Text the walk view draws beyond the S:: table (the sentences of every kind, both languages):
// what the font atlas must also cover.
std::vector<std::string> walk_ui_text();

enum class TileState { Consumed, Current, Pending, Skipped };
TileState walk_tile_state(const Walk& w, int tile, int cursor);
TileState walk_tile_state(const BackwardWalk& w, int tile, int cursor);

// One bin of the row strip: keys [j0, j1) (one key, or several pooled into one pixel column),
// the largest logit among them (-inf: all masked), and the tile they belong to (bins never span
// two tiles when a tile is at least a pixel wide).
struct StripBin {
  int j0 = 0, j1 = 0;
  double value = 0;
  bool masked = false;   // every key of the bin masked (or its tile skipped)
  int tile = 0;
};
std::vector<StripBin> walk_strip(const Walk& w, int max_bins);
std::vector<StripBin> walk_strip(const BackwardWalk& w, int max_bins);

// Finite range of the logits over all computed tiles (lo == hi when one value; {0, 1} when none).
std::pair<double, double> walk_logit_range(const Walk& w);
std::pair<double, double> walk_logit_range(const BackwardWalk& w);

// The charts up to and including tile `cursor`: m and l per tile (m's -inf as NaN, which the
// chart leaves out) and log10 max |output so far - staged output| (NaN where there is no output
// yet; exact agreement as -12).
std::vector<float> walk_series_m(const Walk& w, int cursor);
std::vector<float> walk_series_l(const Walk& w, int cursor);
std::vector<float> walk_series_convergence(const Walk& w, int cursor);

// A chart's scale over `values` (NaN: no value yet): the range its label prints (from == to for a
// constant series, one tile) and the y range of the plot (a constant series sits in the middle
// of a band of one unit around it; no value at all: [0, 1]).
struct WalkChartScale {
  float from = 0, to = 1;
  float lo = 0, hi = 1;
};
WalkChartScale walk_chart_scale(const std::vector<float>& values);
// Where each of a chart's `count` tiles sits in a box of w × h pixels (y down): x spread over every
// tile (one tile: the middle), y from the scale's lo (bottom) to hi (top); `has` false for a tile
// without a value (NaN, or past `values`: a tile not walked yet), which the chart leaves out, so
// the line ends at the current tile (ImGui's PlotLines had drawn the tiles to come on its bottom
// edge, a drop that never happened).
struct WalkChartPoint {
  float x = 0, y = 0;
  bool has = false;
};
std::vector<WalkChartPoint> walk_chart_points(const std::vector<float>& values, int count, const WalkChartScale& s,
                                              float w, float h);

// ---- the backward pass ----
enum class WalkPass { Forward, Backward };
const char* walk_pass_word(WalkPass p);  // "forward" | "backward" (--walk-pass, the state dump)

// The backward mode's words and the tile under the stepping buttons (walk_view.cpp), English and Chinese.
enum class WB {
  Pass, Forward, Backward, TileOf, Strip, Legend, Stats, Upstream, ColKey, Bars, ChartDsSum,
  ChartDqNorm, DqNow, DqNorm, Fused, Fp64, Final, Rope, Caveat, Computing, Failed,
  Count_
};
const char* wbtr(Lang lang, WB id);
std::vector<std::string> walk_backward_texts();

// The tile's keys shown one row each up to this many (the CLI's table, kWalkKeyRowsMax); wider
// tiles are drawn as bars.
constexpr int kWalkBackwardRowsMax = kWalkKeyRowsMax;
// dO of the backward mode: standard normal, seed 0 (the CLI's and the backward view's default).
Upstream walk_backward_upstream();

// dQ after tile `cursor` (the kernel's frame): the last loaded tile's at or before it, zeros
// before any (d_k).
std::vector<double> walk_backward_dq_at(const BackwardWalk& w, int cursor);
double walk_norm(const std::vector<double>& v);
// The charts up to tile `cursor`: Σ dS so far, and |dQ so far|.
std::vector<float> walk_series_ds_sum(const BackwardWalk& w, int cursor);
std::vector<float> walk_series_dq_norm(const BackwardWalk& w, int cursor);
// `values` pooled to at most `bins` bars, each the entry of largest magnitude among its keys
// (signed, so a dS bar keeps its sign); non-finite entries count as 0.
std::vector<float> walk_bars(const std::vector<double>& values, int bins);

// The companion: walk_backward_row of the problem on screen (head 0) at one query and tile.
struct WalkBackwardResult : CompanionResult {
  std::shared_ptr<const Problem> problem;
  std::shared_ptr<const BackwardWalk> walk;  // null when it failed (error says why)
  Message error;
};
class WalkBackwardCompanion final : public Companion {
 public:
  WalkBackwardCompanion(int query, int tile) : query_(query), tile_(tile) {}
  std::string key() const override;
  std::shared_ptr<const CompanionResult> compute(const CompanionInput& in) const override;
  bool streams() const override { return true; }  // one row: O(m d) at any n
  int query() const { return query_; }
  int tile() const { return tile_; }

 private:
  int query_, tile_;
};

class WalkView final : public View {
 public:
  struct Options {
    int tile = 0;  // --tile B, keys per tile (0: walk_tile_for's default)
    WalkPass pass = WalkPass::Forward;  // --walk-pass
  };
  enum class Status { Ok, Computing, Failed };
  static const char* label(Lang lang);
  static bool parse_flag(const std::string& flag, const FlagValue& value, Options& o);
  static void finish_options(Options&, bool, std::string&) {}
  static std::string usage();
  WalkView() = default;
  WalkView(const ViewContext&, const Options& o) : tile(o.tile), pass_(o.pass) {}

  // Backward: asks the session for the backward walk of the selected query at the tile size shown.
  void prepare(Session& s, int step) override;
  std::shared_ptr<const Companion> companion() const override {
    return pass_ == WalkPass::Backward ? companion_ : nullptr;
  }
  // Space, ←/→ and Home step through the key tiles instead of the chain's steps.
  bool on_action(Action a) override;
  StepKeysHelp step_keys_help(Lang lang) const override;
  void dump(nlohmann::json& j, const Session& s) const override;
  std::string broken(const Session& s) const override;
  std::vector<std::string> texts() const override;

  int tile = 0;  // the tile size asked for (the panel's choices, --tile; 0: the default)

  // The walk of the session's selected row at `tile` keys per tile, recomputed only when the
  // state on screen (revision), the query or the tile changed. Null (and error()) when refused.
  const Walk* update(const Session& c, int tile);
  const Walk* walk() const { return walk_ ? &*walk_ : nullptr; }
  const std::string& error() const { return error_; }
  int computed() const { return computed_; }  // how many walks were computed (cache tests)

  // The pass shown; the cursor stays on its tile across a switch.
  WalkPass pass() const { return pass_; }
  void set_pass(WalkPass p) {
    pass_ = p;
    adopted(false);
  }
  // The backward walk on screen, adopted from the companion (null: status() says why). Call after
  // prepare(), with the tile shown.
  const BackwardWalk* update_backward(const Session& s);
  const BackwardWalk* backward() const { return bwalk_.get(); }
  Status status() const { return status_; }
  std::string backward_error(Lang lang) const { return berror_.text(lang); }

  // The tile shown: starts at the last (the whole walk done); Home goes to the first.
  int cursor() const { return cursor_; }
  bool playing() const { return playing_; }
  void next();
  void prev();
  void home();
  void toggle_play();
  void hidden() override { playing_ = false; }  // stops, as the decode view does (it had frozen and resumed)
  // Playing: one tile per 1 / speed seconds, wrapping from the last to the first. True on change.
  bool tick(double dt);
  double speed() const { return speed_; }

  // Where the panel drew the strip (the state dump), screen pixels.
  struct StripRect {
    float x = 0, y = 0, w = 0, h = 0;
    int bins = 0;
  } strip;
  // The band under it: the table's width, and whether the charts went under it (a panel too narrow
  // for both side by side).
  struct Middle {
    float table_w = 0;
    bool stacked = false;
  } middle;

  // The walk part of the state dump: pass, tile, tiles, cursor, playing, current keys, diffs,
  // strip; backward: the status, m, l, L, D, the tile's P and dS, Σ dS, dQ so far, the final dQ.
  std::string state_json() const;

 private:
  int count() const;
  // A walk of `tiles` tiles was adopted; a new tile size or problem goes back to the end.
  void adopted(bool new_shape);
  std::optional<Walk> walk_;
  std::string error_;
  std::uint64_t revision_ = ~std::uint64_t{0}, problem_revision_ = ~std::uint64_t{0};
  int query_ = -1, tile_ = -1;
  const Problem* problem_ = nullptr;
  int cursor_ = 0;
  bool at_end_ = true;  // follow the last tile until the user steps
  bool playing_ = false;
  double speed_ = 2.0, elapsed_ = 0;
  int computed_ = 0;
  WalkPass pass_ = WalkPass::Forward;
  std::shared_ptr<const WalkBackwardCompanion> companion_;
  std::shared_ptr<const BackwardWalk> bwalk_;
  // The tile size and problem the cursor stands on (either pass's walk): another goes to the end.
  std::uint64_t shape_problem_ = ~std::uint64_t{0};
  int shape_tile_ = -1;
  Status status_ = Status::Computing;
  Message berror_;
};

void draw_panel(WalkView& v, Shell& app, const Layout& l);

}  // namespace attnlab::viewer
