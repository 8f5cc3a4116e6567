// The position view's logic (--view position), free of SDL and ImGui (viewer/views/position/panel.cpp
// draws it; unit-tested in tests/viewer/test_position_view.cpp): why RoPE makes attention depend on
// distance, and what ALiBi does instead. For the selected query of the head on screen, every key's
// scaled score against its relative distance Δ = pos_i − j (the key Δ positions before the query):
//   plain   q·k_j · scale, no position at all (the content alone)
//   rope    the same after RoPE at the view's θ (core/modify.h rope_rotate, the kernels' rotation)
//   alibi   the ALiBi term −slope·|Δ| with the slope ALiBi gives this head (alibi_slopes of the
//           problem with ALiBi switched on: the same slope whether ALiBi is on or off)
//   self    the content-free RoPE curve: the query against itself placed Δ positions away,
//           Σ_c (q_c² + q_{c+d/2}²) cos(Δ θ^(−2c/d)) · scale: what RoPE alone does to a score
// RoPE's score depends on the positions only through Δ (a rotation by pos θ_c of each pair; the
// product of two rotations is the rotation by their difference): rope_shift_error() checks that on
// the curves themselves. Keys the mask hides from the query are flagged (drawn greyed). The plot's
// y-range follows the content curves (plain, rope, self); the ALiBi line is clipped to it.
// Computed on the UI thread (O(m d)) and cached by (revision, query, θ).
#pragma once

#include "core/problem.h"
#include "viewer/session/session.h"
#include "viewer/views/view.h"

#include <cstdint>
#include <string>
#include <vector>

namespace attnlab::viewer {

// The view's words (position_text.cpp), English and Chinese.
enum class PT {
  Label, Title, Theta, ThetaHint, UseProblemTheta, Plain, Rope, Alibi, Self, AxisDistance, AxisScore,
  Sentence, SentenceAlibiOff, Shift, OddDim, Lesson, Caveats, Wavelengths, Query, Legend, Tip,
  SlopeStandard, SlopeGiven, AlibiLeaves, MaskedKeys, TipMasked, SlopeStandardOne, LessonOddDim,
  Count_
};
const char* ptr(Lang lang, PT id);
std::vector<std::string> position_texts();

constexpr int kPositionShift = 1000;  // the shift the view checks RoPE's invariance with

struct PositionCurves {
  int query = 0;     // the query's row, and its position (row + m - n)
  int pos = 0;
  int keys = 0;      // m
  double theta = 10000;
  double slope = 0;  // ALiBi's slope used for `alibi`: what ALiBi gives this head, on or off
  bool alibi_on = false;  // the problem has ALiBi
  bool slope_given = false;  // the slope was given, else the first of slope_heads heads' standard slopes
  int slope_heads = 1;
  bool rope_possible = true;  // d_k even
  // Per key j (m values each): the curves above, in scaled-score units (before the temperature).
  std::vector<double> plain, rope, alibi, self;
  std::vector<char> masked;  // per key: 1 where the mask hides it from the query
  int masked_keys = 0;
  // rope_shift_error at kPositionShift (PositionView::update fills it; -1 when not computed).
  double shift_error = -1;
  int distance(int key) const { return pos - key; }
};

// The curves of query row `query` of p (one head) with RoPE at `theta` (> 0).
PositionCurves position_curves(const Problem& p, int query, double theta);

// The plot's y-range [lo, hi]: the content curves (plain, rope, self) and 0, padded by a twentieth
// of their span on each side; the ALiBi line is left out (it is clipped to this range).
struct PlotRange {
  double lo = -1, hi = 1;
};
PlotRange position_plot_range(const PositionCurves& c);

// max |rope score of (q at pos + s, k_j at j + s) - rope score at (pos, j)| over the keys: RoPE's
// shift invariance, on the problem's own vectors (about 1e-12: rounding only).
double rope_shift_error(const Problem& p, int query, double theta, int shift);

// The wavelength of RoPE's pair c at θ: 2π θ^(2c/d), positions.
double rope_wavelength(double theta, int c, int d);

class PositionView final : public View, public WithoutFlags {
 public:
  static const char* label(Lang lang) { return ptr(lang, PT::Label); }
  PositionView() = default;
  PositionView(const ViewContext&, const Options&) {}

  // The curves of the session's selected query at theta(); recomputed only when the state on
  // screen (revision), the query or θ changed. With an odd d_k only the plain and ALiBi curves
  // come (rope_possible false).
  const PositionCurves& update(const Session& s);
  const PlotRange& plot_range() const { return range_; }
  // θ: the problem's own when it has RoPE and the slider was not moved, else the slider's.
  double theta(const Session& s) const;
  void set_theta(double t);
  bool theta_moved() const { return theta_moved_; }
  int computed() const { return computed_; }

  void dump(nlohmann::json& j, const Session& s) const override;
  std::string broken(const Session& s) const override;
  std::vector<std::string> texts() const override { return position_texts(); }

 private:
  PositionCurves curves_;
  PlotRange range_;
  std::uint64_t revision_ = ~std::uint64_t{0};
  int query_ = -1;
  double theta_ = 10000, computed_theta_ = -1;
  bool theta_moved_ = false;
  int computed_ = 0;
};

void draw_panel(PositionView& v, Shell& app, const Layout& l);

}  // namespace attnlab::viewer
