// The UI event fuzzer's SDL-free half (viewer/app/fuzz_events.h): a seed gives the same events
// every time, every kind of event comes up, the view switches leave the home view and come back,
// and the state dump's invariants catch each kind of broken state (a checker that cannot fail
// would prove nothing). The window half runs in the suite as ui_fuzz_* (viewer/CMakeLists.txt).
#include "viewer/app/fuzz_events.h"
#include "viewer/app/state_dump.h"
#include "viewer_test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <set>
#include <string>

using namespace attnlab;
using namespace attnlab::viewer;

namespace {

std::string transcript(std::uint64_t seed, int bursts) {
  FuzzGenerator g(seed, 6, 2);
  std::string out;
  for (int i = 0; i < bursts; ++i)
    for (const FuzzEvent& e : g.burst()) out += describe(e) + "\n";
  return out;
}

}  // namespace

TEST(FuzzEvents, ASeedGivesTheSameEventsEveryTimeAndAnotherSeedOthers) {
  EXPECT_EQ(transcript(7, 300), transcript(7, 300));
  EXPECT_NE(transcript(7, 300), transcript(8, 300));
  // The numbers themselves are fixed by the seed (splitmix64), not by the standard library.
  FuzzRandom r(0);
  EXPECT_EQ(r.next(), 0xE220A8397B1DCDAFull);
}

TEST(FuzzEvents, EveryKindComesUpAndEveryValueIsInRange) {
  const int views = 6, home = 4;
  FuzzGenerator g(1, views, home);
  std::map<FuzzKind, int> seen;
  std::set<int> keys, loads, exports, views_shown;
  int shown = home;
  long bursts = 0, events = 0;
  for (int i = 0; i < 3000; ++i, ++bursts) {
    const std::vector<FuzzEvent> b = g.burst();
    ASSERT_GE(b.size(), 1u);
    ASSERT_LE(b.size(), 8u);
    for (std::size_t j = 0; j < b.size(); ++j) {
      const FuzzEvent& e = b[j];
      ++events;
      ++seen[e.kind];
      if (e.kind == FuzzKind::Drag) {
        EXPECT_EQ(j + 1, b.size()) << "a drag ends its burst";
        EXPECT_GE(e.frames, 2);
      }
      if (e.kind == FuzzKind::Key) {
        ASSERT_LT(e.key, static_cast<int>(fuzz_key_names().size()));
        keys.insert(e.key);
      }
      if (e.kind == FuzzKind::Text) EXPECT_LT(e.text.size(), 32u) << "one SDL_TEXTINPUT";
      if (e.kind == FuzzKind::Load) loads.insert(e.slot);
      if (e.kind == FuzzKind::Export) exports.insert(e.slot);
      if (e.kind == FuzzKind::View) {
        ASSERT_GE(e.view, 0);
        ASSERT_LT(e.view, views);
        // Away from the home view, then back.
        if (shown == home) EXPECT_NE(e.view, home); else EXPECT_EQ(e.view, home);
        shown = e.view;
        views_shown.insert(e.view);
      }
      if (e.kind == FuzzKind::Resize) EXPECT_TRUE(e.w > 0 && e.h > 0);
      if (e.kind == FuzzKind::Click) EXPECT_TRUE(e.button >= 1 && e.button <= 3);
    }
  }
  for (int k = 0; k < static_cast<int>(FuzzKind::Count_); ++k)
    EXPECT_GT(seen[static_cast<FuzzKind>(k)], 0) << to_string(static_cast<FuzzKind>(k));
  EXPECT_EQ(keys.size(), fuzz_key_names().size());
  EXPECT_EQ(loads.size(), static_cast<std::size_t>(kFuzzLoadSlots));
  EXPECT_EQ(exports.size(), static_cast<std::size_t>(3 * kFuzzExportDestinations));
  EXPECT_EQ(views_shown.size(), static_cast<std::size_t>(views));
  EXPECT_GT(events, 2 * bursts) << "bursts of several events";
}

// A real dump of the demo holds; each kind of damage is named.
TEST(FuzzEvents, TheStateChecksCatchEveryKindOfBrokenState) {
  Session s(test::cpu_viewer_options());
  ViewSnapshot v;
  v.view = "chain";
  v.font_px = 18;
  const std::string good = state_json(s, v);
  EXPECT_TRUE(state_broken(good).empty()) << state_broken(good).front();

  const auto broken_by = [&](const std::function<void(nlohmann::json&)>& damage) {
    nlohmann::json j = nlohmann::json::parse(good);
    damage(j);
    const std::vector<std::string> b = state_broken(j.dump());
    return b.empty() ? std::string("(nothing)") : b.front();
  };
  EXPECT_NE(state_broken("{\"step\": 1,").front().find("does not parse"), std::string::npos);
  EXPECT_NE(broken_by([](auto& j) { j.erase("M"); }).find("no number \"M\""), std::string::npos);
  EXPECT_NE(broken_by([](auto& j) { j["step"] = 5; }).find("step"), std::string::npos);
  EXPECT_NE(broken_by([](auto& j) { j["step"] = 2.5; }).find("step"), std::string::npos);
  EXPECT_NE(broken_by([](auto& j) { j["query"] = 5; }).find("query 5"), std::string::npos);
  EXPECT_NE(broken_by([](auto& j) { j["query"] = -1; }).find("query"), std::string::npos);
  EXPECT_NE(broken_by([](auto& j) { j["queries"] = nlohmann::json::array({1, 9}); }).find("selected query"),
            std::string::npos);
  EXPECT_NE(broken_by([](auto& j) { j["queries"] = nlohmann::json::array(); }).find("no queries"), std::string::npos);
  EXPECT_NE(broken_by([](auto& j) { j["temperature"] = 0; }).find("temperature"), std::string::npos);
  EXPECT_NE(broken_by([](auto& j) { j["temperature"] = nullptr; }).find("temperature"), std::string::npos);
  EXPECT_NE(broken_by([](auto& j) { j["key_sel"] = 5; }).find("selected key 5"), std::string::npos);
  EXPECT_NE(broken_by([](auto& j) { j["key_sel"] = -2; }).find("selected key"), std::string::npos);
  EXPECT_NE(broken_by([](auto& j) { j["font_px"] = 0; }).find("font"), std::string::npos);
  EXPECT_NE(broken_by([](auto& j) { j["ui_scale"] = -1; }).find("UI scale"), std::string::npos);
  EXPECT_NE(broken_by([](auto& j) { j["head"] = 1; }).find("head 1"), std::string::npos);
  EXPECT_NE(broken_by([](auto& j) {
              j["heatmap"]["rows"] = 5;
              j["heatmap"]["cols"] = 5;
              j["heatmap"]["first_row"] = 3;
              j["heatmap"]["vis_rows"] = 3;
            }).find("heatmap's rows"),
            std::string::npos);
  EXPECT_NE(broken_by([](auto& j) { j.erase("heatmap"); }).find("no heatmap"), std::string::npos);
  EXPECT_NE(broken_by([](auto& j) { j.erase("view"); }).find("no view"), std::string::npos);
}
