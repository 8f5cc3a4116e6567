// The views of the window, in the order of the radio buttons: the one list the app reads for the
// --view names and every view's own flags, the radio buttons, the state dump, the keys' actions,
// the companion runs, the font atlas and the panel drawn in the centre. To add a view: make its
// folder (viewer/views/view.h says what a view type provides), include its header here and add
// its line to ATTNLAB_VIEWS; nothing else in the viewer changes.
#pragma once

#include "viewer/views/backward/backward_view.h"
#include "viewer/views/chain/chain_view.h"
#include "viewer/views/decode/decode_view.h"
#include "viewer/views/diff/diff_view.h"
#include "viewer/views/heads/heads_view.h"
#include "viewer/views/perf/perf_view.h"
#include "viewer/views/position/position_view.h"
#include "viewer/views/precision/precision_view.h"
#include "viewer/views/view.h"
#include "viewer/views/walk/walk_view.h"

#include <memory>
#include <string>
#include <vector>

// X(name, Type): `name` is the view's --view word and its field of ViewOptions.
#define ATTNLAB_VIEWS(X)        \
  X(chain, ChainView)           \
  X(walk, WalkView)             \
  X(heads, HeadsView)           \
  X(perf, PerfView)             \
  X(precision, PrecisionView)   \
  X(diff, DiffView)             \
  X(decode, DecodeView)         \
  X(position, PositionView)     \
  X(backward, BackwardView)

namespace attnlab::viewer {

// Every view's options (its flags' values), one field per view.
struct ViewOptions {
#define ATTNLAB_VIEW_OPTIONS(name, Type) Type::Options name;
  ATTNLAB_VIEWS(ATTNLAB_VIEW_OPTIONS)
#undef ATTNLAB_VIEW_OPTIONS
};

// The --view words in the registry's order.
const std::vector<std::string>& view_names();
// The index of a view's word, -1 when there is none.
int view_index(const std::string& name);
// "chain, walk, heads, perf, precision, diff, decode, position, backward".
std::string view_names_text();
// The radio button's text of view i.
const char* view_label(int i, Lang lang);
// Hands `flag` to each view in turn: true when one took it (its value then read with `value`).
bool parse_view_flag(const std::string& flag, const FlagValue& value, ViewOptions& o);
// Every view's finish_options after the last flag; `shown` names the view the window opens on.
void finish_view_options(ViewOptions& o, const std::string& shown, std::string& backend);
// The views' lines of --help.
std::string views_usage();
// One view of each kind, in the registry's order (a view's refusal: InputError).
// step_given: --step was on the command line (ViewContext::step_given).
std::vector<std::unique_ptr<View>> make_views(Session& s, const ViewOptions& o, const std::string& shown,
                                              bool headless, bool step_given = false);

}  // namespace attnlab::viewer
