// The chain view (see chain_view.h).
#include "viewer/views/chain/chain_view.h"

#include "viewer/draw/strings.h"
#include "viewer/session/session.h"

namespace attnlab::viewer {

const char* ChainView::label(Lang lang) { return tr(lang, S::ViewChain); }

void ChainView::prepare(Session& s, int step) { s.set_step(step); }

}  // namespace attnlab::viewer
