// The view registry (viewer/views/registry.h): the one list the --view names, the views' own
// flags and usage, the radio buttons' labels, the views the app makes, their companions and their
// part of the state dump come from. What a new view gets by its registry line alone.
#include "viewer_test_util.h"
#include "tests/test_util.h"
#include "viewer/app/options.h"
#include "viewer/app/state_dump.h"
#include "viewer/session/session.h"
#include "viewer/views/registry.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <set>
#include <string>
#include <vector>

using namespace attnlab;
using namespace attnlab::viewer;

TEST(Views, TheRegistryNamesEveryViewOnceInTheRadioButtonsOrder) {
  const std::vector<std::string> want = {"chain", "walk", "heads", "perf", "precision", "diff", "decode", "position", "backward"};
  EXPECT_EQ(view_names(), want);
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(view_index(want[i]), static_cast<int>(i));
    const std::string zh = view_label(static_cast<int>(i), Lang::Zh), en = view_label(static_cast<int>(i), Lang::En);
    EXPECT_FALSE(zh.empty());
    EXPECT_FALSE(en.empty());
    EXPECT_NE(zh, en) << want[i] << ": a label in each language";
  }
  EXPECT_EQ(view_index("forward"), -1);
  EXPECT_EQ(view_names_text(), "chain, walk, heads, perf, precision, diff, decode, position or backward");
}

TEST(Views, ViewAndItsFlagsAreParsedThroughTheRegistry) {
  for (const std::string& name : view_names()) EXPECT_EQ(parse_viewer_args({"--view", name}).view, name);
  EXPECT_EQ(test::message_of<InputError>([] { parse_viewer_args({"--view", "forward"}); }),
            "--view must be chain, walk, heads, perf, precision, diff, decode, position or backward, got 'forward'");
  // A view's own flag lands in its options; a flag no view knows is still refused.
  EXPECT_EQ(parse_viewer_args({"--view", "walk", "--tile", "8"}).views.walk.tile, 8);
  EXPECT_EQ(test::message_of<InputError>([] { parse_viewer_args({"--tile", "0"}); }),
            "--tile must be an integer from 1 to 1048576, got '0'");
  EXPECT_EQ(test::message_of<InputError>([] { parse_viewer_args({"--perf-bogus", "1"}); }),
            "unknown option '--perf-bogus' (see attnlab-view --help)");
  // A view's cross-checks run after every flag, whatever their order.
  EXPECT_EQ(test::message_of<InputError>([] { parse_viewer_args({"--diff", "temperature=2"}); }),
            "--diff describes the diff view's B: add --view diff");
  EXPECT_TRUE(parse_viewer_args({"--diff", "temperature=2", "--view", "diff"}).views.diff.spec);
  // The perf view takes --backend as its list; elsewhere it is the session's one backend.
  const ViewerOptions perf = parse_viewer_args({"--backend", "cpu", "--view", "perf"});
  EXPECT_EQ(perf.views.perf.spec.backends, std::vector<std::string>{"cpu"});
  EXPECT_EQ(perf.backend, "auto");
  EXPECT_EQ(parse_viewer_args({"--backend", "cpu"}).backend, "cpu");
  // Every view's flags are in --help.
  const std::string usage = viewer_usage();
  for (const char* flag : {"--tile", "--diff", "--perf-n", "--perf-chart", "--cache", "--cache-heads", "--split",
                           "chain|walk|heads|perf|precision|diff|decode"})
    EXPECT_NE(usage.find(flag), std::string::npos) << flag;
}

// One view of each kind; only the views that need runs beside the chain name a companion, and
// each view's fields of the state dump come next to the shared ones.
TEST(Views, TheAppsViewsTheirCompanionsAndTheirPartOfTheStateDump) {
  ViewerOptions o = parse_viewer_args({"--view", "diff", "--diff", "temperature=0.5", "--backend", "cpu"});
  Session s(o);
  const std::vector<std::unique_ptr<View>> views = make_views(s, o.views, o.view, /*headless=*/false);
  ASSERT_EQ(views.size(), view_names().size());
  std::set<std::string> keys;
  for (std::size_t i = 0; i < views.size(); ++i) {
    const std::string& name = view_names()[i];
    const auto c = views[i]->companion();
    EXPECT_EQ(c != nullptr, name == "precision" || name == "diff" || name == "backward") << name;
    if (c) keys.insert(c->key());
    ViewSnapshot snap;
    snap.view = name;
    snap.view_fields = nlohmann::json::object();
    views[i]->dump(snap.view_fields, s);
    const auto j = nlohmann::json::parse(state_json(s, snap));
    EXPECT_EQ(j["view"], name);
    EXPECT_EQ(j["N"], 5) << "the shared fields stay";
    for (const auto& [key, value] : snap.view_fields.items()) EXPECT_EQ(j[key], value) << name << " " << key;
  }
  EXPECT_EQ(keys.size(), 3u) << "three different computations";
  EXPECT_EQ(views[view_index("perf")]->info_panel(), false);
  EXPECT_EQ(views[view_index("decode")]->info_panel(), false);
  EXPECT_EQ(views[view_index("backward")]->info_panel(), false);
  EXPECT_EQ(views[view_index("chain")]->info_panel(), true);
  // The diff view's --diff is checked against the problem: a query that is no token is refused.
  ViewerOptions bad = parse_viewer_args({"--view", "diff", "--diff", "query=你好", "--backend", "cpu"});
  Session s2(bad);
  EXPECT_THROW(make_views(s2, bad.views, bad.view, false), InputError);
}

// The session runs the shown view's companion and drops another's: a view switch leaves no
// result of the view left behind.
TEST(Views, TheSessionKeepsOnlyTheShownViewsCompanion) {
  ViewerOptions o = parse_viewer_args({"--view", "diff", "--diff", "temperature=0.5", "--backend", "cpu"});
  Session s(o);
  std::vector<std::unique_ptr<View>> views = make_views(s, o.views, o.view, false);
  View& diff = *views[view_index("diff")];
  View& precision = *views[view_index("precision")];
  s.set_companion(diff.companion());
  ASSERT_NE(diff_of(s), nullptr);
  EXPECT_EQ(s.companion<ReferenceResult>(), nullptr);
  s.set_companion(precision.companion());
  EXPECT_EQ(diff_of(s), nullptr);
  ASSERT_NE(reference_of(s), nullptr);
  // Another kind is the same computation: the reference stays, nothing is recomputed.
  const TraceD* ref = reference_of(s);
  static_cast<PrecisionView&>(precision).set_kind(ErrorKind::Rel);
  s.set_companion(precision.companion());
  EXPECT_EQ(reference_of(s), ref);
  s.set_companion(views[view_index("chain")]->companion());
  EXPECT_EQ(reference_of(s), nullptr);
  EXPECT_FALSE(s.companions_busy());
}
