// The chain view (--view chain, the default): the staged chain's four steps as a heatmap of the
// step on screen (kept stages, or a streamed problem's pooled view), with the selected rows, the
// row chart and the exact cell under the pointer (viewer/views/chain/panel.cpp draws it). Its own
// state is the heatmap's window into the matrix (wheel zoom, drag pan), which a new input shows
// whole again, and which stage of step 1 (RoPE's Q and K) or step 2 (the score mods) the heatmap
// draws; the step, the selection and the picture's texture are the session's and the shell's,
// shared with the other views. Its flags: --chain-rope, --chain-sub.
#pragma once

#include "viewer/draw/heatmap.h"
#include "viewer/draw/pooling.h"
#include "viewer/draw/row_chart.h"
#include "viewer/views/view.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace attnlab::viewer {

// Step 1 with RoPE: what the heatmap draws. QK is the step's own matrix (QKᵀ of the rotated Q and
// K, the default); the others are n x d_k (Q's) or m x d_k (K's) matrices, rows tokens and columns
// dimensions: the inputs, their rotation by position, and the rotation's change (rotated - given).
enum class ChainRope { QK, Q, QRot, QDiff, K, KRot, KDiff };
// Every choice in the Show row's order.
inline constexpr ChainRope kChainRopes[] = {ChainRope::QK, ChainRope::Q,    ChainRope::QRot, ChainRope::QDiff,
                                            ChainRope::K,  ChainRope::KRot, ChainRope::KDiff};
// "qk", "q", "q-rot", "q-diff", "k", "k-rot", "k-diff": the flag's words and the state dump's.
const char* chain_rope_word(ChainRope r);
std::optional<ChainRope> chain_rope_of(const std::string& word);
// The rows of r's matrix are keys (K's), not queries.
constexpr bool chain_rope_keys(ChainRope r) {
  return r == ChainRope::K || r == ChainRope::KRot || r == ChainRope::KDiff;
}

// What one cell (row, col) of a RoPE matrix is: the token's position, the pair its dimension is
// turned in (values c and c + d/2 of a row, c < d/2), the angle, and the value before the
// rotation, after it, and their difference.
struct RopeCell {
  int pos = 0;
  int pair = 0;           // c
  int partner = 0;        // the other dimension of the pair
  double frequency = 0;   // θ^(-2c/d) (core's rope_frequency)
  double angle = 0;       // pos * frequency, radians
  float before = 0, after = 0, diff = 0;
};

class ChainView final : public View {
 public:
  struct Options {
    std::optional<ChainRope> rope;  // --chain-rope
    std::optional<int> sub;         // --chain-sub (a Sub)
  };
  static const char* label(Lang lang);
  static bool parse_flag(const std::string& flag, const FlagValue& value, Options& o);
  static void finish_options(Options&, bool, std::string&) {}
  static std::string usage();
  ChainView() = default;
  // A RoPE matrix asked for (--chain-rope) of a problem without RoPE, or a sub-stage of step 2
  // (--chain-sub) the problem does not have: InputError.
  ChainView(const ViewContext& ctx, const Options& o);

  // The chain's step decides which stages a run brings back; a problem without RoPE shows QKᵀ at
  // step 1 again (switching RoPE off resets the choice).
  void prepare(Session& s, int step) override;
  bool chain_steps() const override { return true; }
  bool selects_keys() const override { return true; }  // the heatmap's crosshair column
  void input_loaded() override { zoom = HeatView{}; }
  std::string broken(const Session& s) const override;
  void dump(nlohmann::json& j, const Session& s) const override;

  HeatView zoom;  // the heatmap's window (the whole matrix by default)
  // Where the panel drew the row's bar chart last: its pixels across, the keys [first, end) they
  // span, and whether it has its own key axis (the plot's columns are dimensions: step 4, RoPE's
  // Q and K) rather than the plot's columns.
  struct ChartSpan {
    float x = 0, w = 0;
    int first = 0, end = 0;
    bool own_axis = false;
    std::string title;  // the chart's title as drawn (its top weights that fit, "…")
    // The rank numbers' boxes as drawn, and what they keep off: the other queries' tokens at the
    // chart's right end (legend) and the bars with those queries' outlines over them (bars).
    std::vector<LabelBox> ranks, legend, bars;
  } chart;
  // How the panel drew the heatmap's column labels last (heatmap.h plan_column_labels), and the
  // size of the values in its cells (0: none drawn).
  ColumnLabelPlan col_labels;
  float value_px = 0;
  // Where the panel drew step 1's or step 2's chooser of what the heatmap shows, as a combo box (at
  // a UI scale above the default): its x, y, w, h in pixels (all 0 where there is none), and while
  // it is open its entries', in order. The dump has them for the Xvfb tests, which click them.
  std::array<float, 4> chooser{};
  std::vector<std::array<float, 4>> chooser_items;
  // The status line under the plot as drawn (a run's progress, the pooling or streaming note; "…"
  // where the panel is narrower), empty where there is none.
  std::string status;
  // Step 2 with score mods (kept stages): which of the stages between QKᵀ and the logits the
  // heatmap shows, in the chain's order; the logits when the problem has no such stage.
  enum class Sub { Logits, Scaled, Biased, Capped } sub = Sub::Logits;
  // --chain-sub's words (logits, scaled, biased, capped), also the exported file's and the dump's.
  static const char* sub_word(Sub sub);
  // Step 1 with RoPE: QKᵀ, or Q, K, their rotations or the rotations' change.
  ChainRope rope = ChainRope::QK;

  // The choice as shown for s: QK when the problem on screen has no RoPE.
  ChainRope shown_rope(const Session& s) const;
  // The matrix of choice r for the problem on screen (Q and K from its inputs, the rotated ones
  // from Session::rotated, the differences made here and kept until the session's revision
  // changes); null for QK and without RoPE.
  const MatrixF* rope_matrix(const Session& s, ChainRope r) const;
  // The colour scale of r's heatmap: Q and Q rotated share one (the smallest and largest value of
  // both), K and K rotated another, so that flipping between a matrix and its rotation changes
  // only the colours the rotation changes; each difference has its own. {0, 0} for QK.
  ValueRange rope_range(const Session& s, ChainRope r) const;
  // Cell (row, col) of r's matrix; nullopt for QK, without RoPE, or outside the matrix.
  std::optional<RopeCell> rope_cell(const Session& s, ChainRope r, int row, int col) const;
  // Whether step `step` has the sub-stages' Show row: step 2 of a problem whose stages are kept and
  // that has a biased or capped stage.
  static bool has_subs(const Session& s, int step);
  // Step 2's sub-stage as drawn: `sub` where has_subs and the problem keeps it, else the logits.
  Sub shown_sub(const Session& s, int step) const;
  // Step 1's RoPE matrix or step 2's sub-stage when one is drawn instead of the step's stage.
  Shown shown_matrix(const Session& s, int step) const override;
  // "0".."d-1": the dimensions' labels of the RoPE matrices' columns.
  const std::vector<std::string>& dim_labels(int d) const;

 private:
  // The difference on screen (rope_matrix) and the last range asked for, by session revision.
  struct RopeCache {
    std::uint64_t revision = ~std::uint64_t{0};
    ChainRope diff_of = ChainRope::QK;
    MatrixF diff;
    ChainRope range_of = ChainRope::QK;
    std::uint64_t range_revision = ~std::uint64_t{0};
    ValueRange range;
  };
  mutable RopeCache cache_;
  mutable std::vector<std::string> dims_;
};

// The matrix of step 2's sub-stage `s` in the trace on screen (null when that stage is not kept:
// a problem without that modification, or a streamed one).
const MatrixF* chain_sub_matrix(const Session& s, ChainView::Sub sub);

void draw_panel(ChainView& v, Shell& app, const Layout& l);

}  // namespace attnlab::viewer
