// The walk view's logic, free of SDL and ImGui (viewer/views/walk/panel.cpp draws it): the tile sizes
// offered, the walk of the selected row computed through the CPU fused kernel's own update step
// (cpu/walk.h walk_row, then check_walk against the staged chain, the kernel and fp64) and cached
// by (session revision, query, tile), the cursor over the tiles that Space, ←/→ and Home move,
// the row strip's bins (keys pooled to the pixels there are, each bin's tile and state) and the
// series of the small charts. Unit-tested in tests/viewer/test_walk_view.cpp.
#pragma once

#include "core/walk.h"
#include "viewer/session/session.h"
#include "viewer/views/view.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace attnlab::viewer {

// Every size 1..m on small problems (m <= kWalkAllSizesMax), powers of two up to m otherwise
// (m itself added when it is not one).
constexpr int kWalkAllSizesMax = 16;
std::vector<int> walk_tile_choices(int keys);
// --tile B as asked (0: the default, 2 on the demo, 64 otherwise), moved to the nearest choice.
int walk_tile_for(int requested, bool demo, int keys);

// Text the walk view draws beyond the S:: table (the sentences of every kind, both languages):
// what the font atlas must also cover.
std::vector<std::string> walk_ui_text();

enum class TileState { Consumed, Current, Pending, Skipped };
TileState walk_tile_state(const Walk& w, int tile, int cursor);

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

// Finite range of the logits over all computed tiles (lo == hi when one value; {0, 1} when none).
std::pair<double, double> walk_logit_range(const Walk& w);

// The charts up to and including tile `cursor`: m and l per tile (m's -inf as NaN, which the
// chart leaves out) and log10 max |output so far - staged output| (NaN where there is no output
// yet; exact agreement as -12).
std::vector<float> walk_series_m(const Walk& w, int cursor);
std::vector<float> walk_series_l(const Walk& w, int cursor);
std::vector<float> walk_series_convergence(const Walk& w, int cursor);

class WalkView final : public View {
 public:
  struct Options {
    int tile = 0;  // --tile B, keys per tile (0: walk_tile_for's default)
  };
  static const char* label(Lang lang);
  static bool parse_flag(const std::string& flag, const FlagValue& value, Options& o);
  static void finish_options(Options&, bool, std::string&) {}
  static std::string usage();
  WalkView() = default;
  WalkView(const ViewContext&, const Options& o) : tile(o.tile) {}

  // Space, ←/→ and Home step through the key tiles instead of the chain's steps.
  bool on_action(Action a) override;
  void dump(nlohmann::json& j, const Session& s) const override;
  std::string broken(const Session& s) const override;
  std::vector<std::string> texts() const override { return walk_ui_text(); }

  int tile = 0;  // the tile size asked for (the panel's choices, --tile; 0: the default)

  // The walk of the session's selected row at `tile` keys per tile, recomputed only when the
  // state on screen (revision), the query or the tile changed. Null (and error()) when refused.
  const Walk* update(const Session& c, int tile);
  const Walk* walk() const { return walk_ ? &*walk_ : nullptr; }
  const std::string& error() const { return error_; }
  int computed() const { return computed_; }  // how many walks were computed (cache tests)

  // The tile shown: starts at the last (the whole walk done); Home goes to the first.
  int cursor() const { return cursor_; }
  bool playing() const { return playing_; }
  void next();
  void prev();
  void home();
  void toggle_play();
  // Playing: one tile per 1 / speed seconds, wrapping from the last to the first. True on change.
  bool tick(double dt);
  double speed() const { return speed_; }

  // Where the panel drew the strip (the state dump), screen pixels.
  struct StripRect {
    float x = 0, y = 0, w = 0, h = 0;
    int bins = 0;
  } strip;

  // The walk part of the state dump: tile, tiles, cursor, playing, current keys, diffs, strip.
  std::string state_json() const;

 private:
  int count() const { return walk_ ? static_cast<int>(walk_->tiles.size()) : 0; }
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
};

void draw_panel(WalkView& v, Shell& app, const Layout& l);

}  // namespace attnlab::viewer
