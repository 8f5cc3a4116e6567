// The chain view (see chain_view.h).
#include "viewer/views/chain/chain_view.h"

#include "viewer/draw/strings.h"
#include "viewer/session/session.h"

namespace attnlab::viewer {

const char* ChainView::label(Lang lang) { return tr(lang, S::ViewChain); }

void ChainView::prepare(Session& s, int step) { s.set_step(step); }

const MatrixF* chain_sub_matrix(const Session& s, ChainView::Sub sub) {
  const Trace& t = s.trace();
  const MatrixF* m = sub == ChainView::Sub::Scaled   ? &t.scaled
                     : sub == ChainView::Sub::Biased ? &t.biased
                     : sub == ChainView::Sub::Capped ? &t.capped
                                                     : &t.logits;
  return t.has_stages && m->size() > 0 ? m : nullptr;
}

void ChainView::dump(nlohmann::json& j, const Session&) const {
  j["chain"]["sub"] = sub == Sub::Scaled ? "scaled" : sub == Sub::Biased ? "biased" : sub == Sub::Capped ? "capped" : "logits";
}

std::string ChainView::broken(const Session&) const {
  const HeatView& z = zoom;
  if (!(z.x0 >= 0 && z.x0 < z.x1 && z.x1 <= 1 && z.y0 >= 0 && z.y0 < z.y1 && z.y1 <= 1))
    return "the heatmap's window lies outside the matrix";
  return {};
}

}  // namespace attnlab::viewer
