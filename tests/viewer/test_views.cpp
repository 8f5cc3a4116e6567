// The view registry (viewer/views/registry.h): the one list the --view names, the views' own
// flags and usage, the radio buttons' labels, the views the app makes, their companions and their
// part of the state dump come from. What a new view gets by its registry line alone.
#include "viewer_test_util.h"
#include "tests/test_util.h"
#include "viewer/app/options.h"
#include "viewer/app/state_dump.h"
#include "viewer/draw/strings.h"
#include "viewer/session/session.h"
#include "viewer/views/decode/decode_view.h"
#include "viewer/views/registry.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <array>
#include <map>
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
  EXPECT_EQ(view_names_text(), "chain, walk, heads, perf, precision, diff, decode, position, backward");
}

TEST(Views, ViewAndItsFlagsAreParsedThroughTheRegistry) {
  for (const std::string& name : view_names()) EXPECT_EQ(parse_viewer_args({"--view", name}).view, name);
  EXPECT_EQ(test::message_of<InputError>([] { parse_viewer_args({"--view", "forward"}); }),
            "--view must be one of chain, walk, heads, perf, precision, diff, decode, position, backward, got 'forward'");
  // A view's own flag lands in its options; a flag no view knows is still refused.
  EXPECT_EQ(parse_viewer_args({"--view", "walk", "--tile", "8"}).views.walk.tile, 8);
  EXPECT_EQ(test::message_of<InputError>([] { parse_viewer_args({"--tile", "0"}); }),
            "--tile must be an integer from 1 to 1048576, got '0'");
  EXPECT_EQ(test::message_of<InputError>([] { parse_viewer_args({"--perf-bogus", "1"}); }),
            "unknown option '--perf-bogus' (see attnlab-view --help)");
  EXPECT_EQ(test::message_of<InputError>([] { parse_viewer_args({"--bogus"}, "attnlab-view-bench"); }),
            "unknown option '--bogus' (see attnlab-view-bench --help)");
  // A view's cross-checks run after every flag, whatever their order.
  EXPECT_TRUE(test::contains(
      test::message_of<InputError>([] { parse_viewer_args({"--cache-dim", "512", "--cache", "1048576"}); }),
      "more than the view holds"));
  // A view's flags without --view for it preset the view (it opens with them when shown), as every
  // view's do: --diff among them (it was refused alone).
  EXPECT_TRUE(parse_viewer_args({"--diff", "temperature=2"}).views.diff.spec);
  EXPECT_TRUE(parse_viewer_args({"--diff", "temperature=2", "--view", "diff"}).views.diff.spec);
  EXPECT_EQ(parse_viewer_args({"--cache", "4096"}).views.decode.keys, 4096);
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

// Every view says what the step keys act on: the chain's steps (chain, precision, diff: the
// controls' step buttons), steps of its own (walk, decode, backward: it takes Space, ← / → and
// Home), or nothing (heads, perf, position: the keys do nothing, the step buttons are hidden). The
// F1 help says the same per view, in both languages.
TEST(Views, TheStepKeysActOnlyOnTheStepsTheViewShows) {
  ViewerOptions o = parse_viewer_args({"--backend", "cpu"});
  Session s(o);
  const std::vector<std::unique_ptr<View>> views = make_views(s, o.views, o.view, false);
  const std::set<std::string> chain = {"chain", "precision", "diff"}, own = {"walk", "decode", "backward"};
  for (std::size_t i = 0; i < views.size(); ++i) {
    const std::string& name = view_names()[i];
    View& v = *views[i];
    EXPECT_EQ(v.chain_steps(), chain.count(name) == 1) << name;
    bool takes = true;
    for (Action a : {Action::StepNext, Action::StepPrev, Action::StepHome, Action::TogglePlay, Action::TogglePlay})
      takes = v.on_action(a) && takes;
    EXPECT_EQ(takes, own.count(name) == 1) << name << ": its own steps take every step key";
    EXPECT_FALSE(v.chain_steps() && takes) << name << ": never both";
    for (Lang l : {Lang::En, Lang::Zh}) {
      const StepKeysHelp h = v.step_keys_help(l);
      EXPECT_EQ(h.play.empty(), !v.chain_steps() && !takes) << name << ": the help says the keys do nothing";
      EXPECT_FALSE(h.query.empty()) << name;
      const auto help = key_help(l, h);
      ASSERT_GE(help.size(), 3u);
      if (h.play.empty()) {
        EXPECT_EQ(help[0].second, help[1].second) << name << ": Space and ← / → both do nothing";
      } else {
        EXPECT_EQ(help[0].second, h.play);
        EXPECT_EQ(help[1].second, h.step);
        EXPECT_EQ(help[2].second, h.home);
      }
    }
    if (own.count(name)) {
      EXPECT_NE(v.step_keys_help(Lang::En).step, chain_step_keys_help(Lang::En).step) << name << ": its own words";
    }
  }
  EXPECT_TRUE(is_step_action(Action::TogglePlay));
  EXPECT_TRUE(is_step_action(Action::StepHome));
  EXPECT_FALSE(is_step_action(Action::QueryNext));
  EXPECT_FALSE(is_step_action(Action::KeyNext));
  EXPECT_EQ(views[view_index("decode")]->step_keys_help(Lang::En).query, "previous / next query head");
  EXPECT_EQ(views[view_index("position")]->step_keys_help(Lang::En).query, chain_step_keys_help(Lang::En).query);
}

// Shift + ← / → move the selected key, which only the chain view draws (its heatmap's crosshair
// column): elsewhere they used to move it unseen (the walk, precision, diff, heads, decode... views
// draw none) while F1 there promised the crosshair. Now they do nothing outside the chain view,
// and F1 says so there, in both languages.
TEST(Views, ShiftArrowsMoveTheSelectedKeyOnlyWhereAViewDrawsIt) {
  ViewerOptions o = parse_viewer_args({"--backend", "cpu"});
  Session s(o);
  const std::vector<std::unique_ptr<View>> views = make_views(s, o.views, o.view, false);
  for (Lang l : {Lang::En, Lang::Zh}) EXPECT_FALSE(chain_step_keys_help(l).key.empty());
  EXPECT_NE(chain_step_keys_help(Lang::En).key, chain_step_keys_help(Lang::Zh).key);
  for (std::size_t i = 0; i < views.size(); ++i) {
    const std::string& name = view_names()[i];
    View& v = *views[i];
    const bool draws = name == "chain";
    EXPECT_EQ(v.selects_keys(), draws) << name;
    for (Action a : {Action::KeyPrev, Action::KeyNext}) {
      EXPECT_FALSE(v.on_action(a)) << name << ": no view takes them itself";
      EXPECT_EQ(app_acts_on(v, a), draws) << name;
    }
    for (Action a : {Action::QueryNext, Action::ToggleMask, Action::TemperatureUp, Action::ToggleLanguage,
                     Action::Screenshot, Action::ToggleHelp, Action::UiScaleUp, Action::ToggleFullscreen,
                     Action::Quit})
      EXPECT_TRUE(app_acts_on(v, a)) << name;
    for (Action a : {Action::StepNext, Action::TogglePlay}) EXPECT_EQ(app_acts_on(v, a), v.chain_steps()) << name;
    std::string line[2];
    for (Lang l : {Lang::En, Lang::Zh}) {
      const StepKeysHelp h = v.step_keys_help(l);
      EXPECT_EQ(h.key.empty(), !draws) << name;
      const auto help = key_help(l, h);
      const auto it = std::find_if(help.begin(), help.end(), [](const auto& p) { return p.first == "Shift + ← / →"; });
      ASSERT_NE(it, help.end()) << name;
      if (draws) {
        EXPECT_EQ(it->second, chain_step_keys_help(l).key) << name;
      } else {
        EXPECT_EQ(it->second, l == Lang::En ? "nothing in this view (it draws no selected key)"
                                            : "本视图中无作用（没有选中键的十字线）")
            << name;
      }
      line[l == Lang::Zh] = it->second;
    }
    EXPECT_NE(line[0], line[1]) << name << ": both languages";
  }
}

// The F1 help's mouse lines are the shown view's: it listed the chain's (a click selects a cell's
// query and key, Shift + click a compared query, the wheel zooms the heatmap) in every view, where
// a click selects no cell (precision, diff, walk, perf, position, backward), opens a head (heads,
// Shift + click too) or selects a query head (decode), and only the chain, precision and diff
// views zoom a map.
TEST(Views, TheHelpsMouseLinesSayWhatTheMouseDoesInTheViewShown) {
  ViewerOptions o = parse_viewer_args({"--backend", "cpu"});
  Session s(o);
  const std::vector<std::unique_ptr<View>> views = make_views(s, o.views, o.view, false);
  // Which of click, Shift + click and wheel / drag do something in each view.
  const std::map<std::string, std::array<bool, 3>> acts = {
      {"chain", {true, true, true}},      {"walk", {false, false, false}},  {"perf", {false, false, false}},
      {"precision", {false, false, true}}, {"diff", {false, false, true}},  {"heads", {true, true, false}},
      {"position", {false, false, false}}, {"decode", {true, false, false}}, {"backward", {false, false, false}}};
  ASSERT_EQ(acts.size(), views.size());
  for (std::size_t i = 0; i < views.size(); ++i) {
    const std::string& name = view_names()[i];
    ASSERT_EQ(acts.count(name), 1u) << name;
    const auto& a = acts.at(name);
    std::array<std::string, 3> en;
    for (Lang l : {Lang::En, Lang::Zh}) {
      const bool zh = l == Lang::Zh;
      const StepKeysHelp h = views[i]->step_keys_help(l);
      EXPECT_EQ(!h.click.empty(), a[0]) << name;
      EXPECT_EQ(!h.shift_click.empty(), a[1]) << name;
      EXPECT_EQ(!h.wheel.empty(), a[2]) << name;
      const auto help = key_help(l, h);
      const auto line = [&](const std::string& key) {
        const auto it = std::find_if(help.begin(), help.end(), [&](const auto& p) { return p.first == key; });
        return it == help.end() ? std::string("(missing)") : it->second;
      };
      const std::array<std::string, 3> got = {line(zh ? "单击" : "Click"), line(zh ? "Shift + 单击" : "Shift + click"),
                                              line(zh ? "滚轮 / 拖动" : "Wheel / drag")};
      const std::array<std::string, 3> none = {zh ? "本视图中不选择单元格" : "selects no cell in this view",
                                               zh ? "本视图中不选择单元格" : "selects no cell in this view",
                                               zh ? "本视图中无作用（没有可缩放的图）" : "nothing in this view (no map to zoom)"};
      const std::array<std::string, 3> own = {h.click, h.shift_click, h.wheel};
      for (int k = 0; k < 3; ++k) {
        EXPECT_EQ(got[k], a[k] ? own[k] : none[k]) << name << " line " << k;
        if (zh) EXPECT_NE(got[k], en[k]) << name << " line " << k << ": both languages";
        else en[k] = got[k];
      }
    }
  }
  EXPECT_EQ(views[view_index("chain")]->step_keys_help(Lang::En).click, "select the cell's query row and key");
  EXPECT_EQ(views[view_index("precision")]->step_keys_help(Lang::Zh).wheel, zoomable_map_help(Lang::Zh));
}

// M and [ / ] set the controls' mask and temperature in every view; the decode view reads the keys
// up to each token whatever the mask, and the perf view's sweep uses neither them nor the query
// (its masks are its own checkboxes). F1 there said only "toggle the mask", "temperature ÷ 1.25",
// "previous / next query token", as if the view followed them; it now says whose they are.
TEST(Views, TheHelpSaysWhereMaskTemperatureAndQueryKeysOnlySetTheOtherViews) {
  ViewerOptions o = parse_viewer_args({"--backend", "cpu"});
  Session s(o);
  const std::vector<std::unique_ptr<View>> views = make_views(s, o.views, o.view, false);
  for (Lang l : {Lang::En, Lang::Zh}) {
    const auto line = [&](const std::string& view, const std::string& key) {
      const auto help = key_help(l, views[view_index(view)]->step_keys_help(l));
      const auto it = std::find_if(help.begin(), help.end(), [&](const auto& p) { return p.first == key; });
      return it == help.end() ? std::string("(missing)") : it->second;
    };
    const std::string mask = line("chain", "M"), temperature = line("chain", "[ / ]"), query = line("chain", "↑ / ↓");
    EXPECT_EQ(mask, l == Lang::En ? "toggle the mask (none / causal)" : "切换掩码（双向 / 因果）");
    for (const std::string& v : view_names()) {
      const bool perf = v == "perf", decode = v == "decode";
      EXPECT_EQ(line(v, "M") == mask, !perf && !decode) << v;
      EXPECT_EQ(line(v, "[ / ]") == temperature, !perf) << v;
      EXPECT_EQ(line(v, "↑ / ↓") == query, !perf && !decode) << v;  // decode: its query heads
    }
    for (const std::string& v : {"perf", "decode"}) {
      const std::string m = line(v, "M");
      EXPECT_NE(m.find(l == Lang::En ? "other views" : "其他视图"), std::string::npos) << v << ": " << m;
    }
    EXPECT_NE(line("perf", "[ / ]").find(l == Lang::En ? "other views" : "其他视图"), std::string::npos);
    EXPECT_NE(line("perf", "↑ / ↓").find(l == Lang::En ? "other views" : "其他视图"), std::string::npos);
  }
}

// The keyboard line under each view: the step keys where it has steps, ↑ ↓ / M / [ ] where it has
// none, and where it uses neither the mask nor the temperature (perf's sweep), that those keys set
// the other views'.
// f(view name, its key help) for every view, in both languages.
template <class F>
void each_views_key_help(F&& f) {
  ViewerOptions o = parse_viewer_args({"--backend", "cpu"});
  Session s(o);
  const std::vector<std::unique_ptr<View>> views = make_views(s, o.views, o.view, false);
  for (Lang l : {Lang::En, Lang::Zh})
    for (const std::string& v : view_names()) f(v, views[view_index(v)]->step_keys_help(l));
}

TEST(Views, TheKeyboardLineUnderAViewNamesTheKeysThatActThere) {
  each_views_key_help([](const std::string& v, const StepKeysHelp& h) {
    const KeyboardLineKind want = v == "perf"                      ? KeyboardLineKind::OtherViews
                                  : v == "heads" || v == "position" ? KeyboardLineKind::NoSteps
                                                                    : KeyboardLineKind::Steps;
    EXPECT_EQ(keyboard_line_kind(h), want) << v;
  });
  EXPECT_NE(std::string(viewer::tr(Lang::En, viewer::S::KeyboardLineOtherViews)).find("act on the other views"), std::string::npos);
  EXPECT_NE(std::string(viewer::tr(Lang::Zh, viewer::S::KeyboardLineOtherViews)).find("其他视图"), std::string::npos);
}

// The controls' temperature and mask say beside them where the shown view does not use them (the
// decode view: its new token reads the keys up to its own; the perf view: its sweep's own), from
// the view's key help, so the panel, F1 and the keyboard line agree.
TEST(Views, TheControlsSayWhereTheShownViewHasItsOwnMaskOrTemperature) {
  each_views_key_help([](const std::string& v, const StepKeysHelp& h) {
    EXPECT_EQ(!h.mask.empty(), v == "decode" || v == "perf") << v;
    EXPECT_EQ(!h.temperature.empty(), v == "perf") << v;
  });
  EXPECT_NE(std::string(viewer::tr(Lang::En, viewer::S::PanelMaskOtherViews)).find("the other views'"), std::string::npos);
  EXPECT_NE(std::string(viewer::tr(Lang::Zh, viewer::S::PanelMaskOtherViews)).find("其他视图"), std::string::npos);
  EXPECT_NE(std::string(viewer::tr(Lang::En, viewer::S::PanelTemperatureOtherViews)).find("the other views'"), std::string::npos);
  EXPECT_NE(std::string(viewer::tr(Lang::Zh, viewer::S::PanelTemperatureOtherViews)).find("其他视图"), std::string::npos);
}

// Chinese names a head or a layer, counted from 0, by its number ("头 0"), never as an ordinal
// ("第 0 个头" reads "the zeroth"); the diff's summary has no English word.
TEST(Views, ChineseNamesHeadsAndLayersByNumber) {
  const auto fmt = [](const char* f, auto... args) {
    char buf[256];
    std::snprintf(buf, sizeof buf, f, args...);
    return std::string(buf);
  };
  EXPECT_EQ(fmt(viewer::tr(Lang::Zh, viewer::S::HeadsShown), 0, 2, 4), "层 0 · 头 2（共 4 个）");
  EXPECT_EQ(fmt(viewer::tr(Lang::Zh, viewer::S::HeadsShownHead), 0, 4), "头 0（共 4 个）");
  EXPECT_EQ(fmt(viewer::tr(Lang::Zh, viewer::S::HeadsTitleLayer), 1, "blocks.1", 4), "层 1“blocks.1”：4 个头 · 注意力权重（第 3 步）");
  EXPECT_EQ(fmt(viewer::dtr(Lang::Zh, viewer::DT::SplitsTitle), 0).rfind("头 0 ", 0), 0u);
  EXPECT_EQ(std::string(viewer::tr(Lang::Zh, viewer::S::DiffSummary)).find("max"), std::string::npos);
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
