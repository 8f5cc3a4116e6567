// The chain view (--view chain, the default): the staged chain's four steps as a heatmap of the
// step on screen (kept stages, or a streamed problem's pooled view), with the selected rows, the
// row chart and the exact cell under the pointer (viewer/views/chain/panel.cpp draws it). Its own
// state is the heatmap's window into the matrix (wheel zoom, drag pan), which a new input shows
// whole again; the step, the selection and the picture's texture are the session's and the
// shell's, shared with the other views.
#pragma once

#include "viewer/draw/heatmap.h"
#include "viewer/views/view.h"

#include <string>

namespace attnlab::viewer {

class ChainView final : public View, public WithoutFlags {
 public:
  static const char* label(Lang lang);
  ChainView() = default;
  ChainView(const ViewContext&, const Options&) {}

  // The chain's step decides which stages a run brings back.
  void prepare(Session& s, int step) override;
  void input_loaded() override { zoom = HeatView{}; }
  std::string broken(const Session& s) const override;
  void dump(nlohmann::json& j, const Session& s) const override;

  HeatView zoom;  // the heatmap's window (the whole matrix by default)
  // Step 2 with score mods (kept stages): which of the stages between QKᵀ and the logits the
  // heatmap shows, in the chain's order; the logits when the problem has no such stage.
  enum class Sub { Logits, Scaled, Biased, Capped } sub = Sub::Logits;
};

// The matrix of step 2's sub-stage `s` in the trace on screen (null when that stage is not kept:
// a problem without that modification, or a streamed one).
const MatrixF* chain_sub_matrix(const Session& s, ChainView::Sub sub);

void draw_panel(ChainView& v, Shell& app, const Layout& l);

}  // namespace attnlab::viewer
