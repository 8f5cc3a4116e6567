// The walk view's logic (viewer/views/walk/walk_view.h): tile sizes offered, the cache keyed by (revision,
// query, tile), the cursor that Space / ←/→ / Home move, the strip's bins and the chart series;
// and headless screenshots of `attnlab-view --view walk` (the state dump's walk part, the strip's
// orange frame on the current tile, hatched skipped tiles under the causal mask), both languages.
#include "viewer_test_util.h"
#include "cpu/walk.h"
#include "tests/test_util.h"
#include "viewer/session/session.h"
#include "viewer/views/walk/walk_view.h"
#ifdef ATTNLAB_VIEW_BINARY
#include "viewer/draw/png_io.h"
#endif

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

using namespace attnlab;
using namespace attnlab::viewer;

namespace {


}  // namespace

TEST(WalkView, TileChoicesAreEverySizeOnSmallProblemsAndPowersOfTwoOnLarge) {
  EXPECT_EQ(walk_tile_choices(5), (std::vector<int>{1, 2, 3, 4, 5}));
  EXPECT_EQ(walk_tile_choices(100), (std::vector<int>{1, 2, 4, 8, 16, 32, 64, 100}));
  EXPECT_EQ(walk_tile_choices(4096).back(), 4096);
  EXPECT_EQ(walk_tile_for(0, true, 5), 2);
  EXPECT_EQ(walk_tile_for(0, false, 4096), 64);
  EXPECT_EQ(walk_tile_for(0, false, 40), 40);  // 64 > m: the nearest choice, the whole row
  EXPECT_EQ(walk_tile_for(50, false, 4096), 64);
  EXPECT_EQ(walk_tile_for(9, true, 5), 5);
}

TEST(WalkView, CachesByRevisionQueryAndTile) {
  Session c(test::cpu_viewer_options());
  WalkView v;
  const Walk* w = v.update(c, 2);
  ASSERT_NE(w, nullptr) << v.error();
  EXPECT_EQ(v.computed(), 1);
  v.update(c, 2);
  EXPECT_EQ(v.computed(), 1);
  v.update(c, 3);
  EXPECT_EQ(v.computed(), 2);
  ASSERT_TRUE(c.set_temperature(0.5));
  v.update(c, 3);
  EXPECT_EQ(v.computed(), 3);
  ASSERT_TRUE(c.set_query(0));
  w = v.update(c, 3);
  EXPECT_EQ(v.computed(), 4);
  EXPECT_EQ(w->query, 0);
  // The same numbers as the walk engine on the problem on screen.
  const Walk direct = walk_row(c.problem(), 0, 0, 3);
  EXPECT_EQ(w->output, direct.output);
  EXPECT_LT(w->fp64_error, 1e-6);
}

TEST(WalkView, CursorStartsAtTheEndAndTheKeysMoveIt) {
  Session c(test::cpu_viewer_options());
  WalkView v;
  v.update(c, 2);  // 3 tiles
  EXPECT_EQ(v.cursor(), 2);
  v.home();
  EXPECT_EQ(v.cursor(), 0);
  v.prev();
  EXPECT_EQ(v.cursor(), 0);
  v.next();
  v.next();
  v.next();
  EXPECT_EQ(v.cursor(), 2);
  v.home();
  v.toggle_play();
  EXPECT_TRUE(v.playing());
  EXPECT_FALSE(v.tick(0.1));
  EXPECT_TRUE(v.tick(0.5));
  EXPECT_EQ(v.cursor(), 1);
  v.tick(0.6);
  v.tick(0.6);
  EXPECT_EQ(v.cursor(), 0);  // wraps
  v.toggle_play();
  // A stepped cursor survives a temperature change; a new tile size goes back to the end.
  v.next();
  ASSERT_TRUE(c.set_temperature(0.7));
  v.update(c, 2);
  EXPECT_EQ(v.cursor(), 1);
  v.update(c, 1);
  EXPECT_EQ(v.cursor(), 4);
}

TEST(WalkView, StripBinsPoolKeysWithinTilesAndMarkSkippedOnes) {
  ViewerOptions o = test::cpu_viewer_options();
  o.random_n = 300;
  o.d_k = 8;
  o.d_v = 4;
  o.mask = MaskKind::Causal;
  o.query = "100";
  Session c(o);
  WalkView v;
  const Walk* w = v.update(c, 64);
  ASSERT_NE(w, nullptr);
  ASSERT_EQ(w->tiles.size(), 5u);
  EXPECT_TRUE(w->tiles[2].skipped);  // keys 128.. after query 100
  const std::vector<StripBin> bins = walk_strip(*w, 100);
  for (const StripBin& b : bins) {
    EXPECT_GE(b.j0, w->tiles[b.tile].j0);
    EXPECT_LE(b.j1, w->tiles[b.tile].j1);
    if (w->tiles[b.tile].skipped) EXPECT_TRUE(b.masked);
  }
  EXPECT_LE(bins.size(), 100u + w->tiles.size());
  EXPECT_EQ(walk_tile_state(*w, 0, 1), TileState::Consumed);
  EXPECT_EQ(walk_tile_state(*w, 1, 1), TileState::Current);
  EXPECT_EQ(walk_tile_state(*w, 3, 1), TileState::Skipped);
  const auto m = walk_series_m(*w, 4), l = walk_series_l(*w, 4), e = walk_series_convergence(*w, 4);
  EXPECT_EQ(m.size(), 5u);
  for (float x : l) EXPECT_GT(x, 0.f);  // l may shrink when m rises (rescaled), never to 0 here
  EXPECT_LT(e.back(), -5);  // the final output agrees with the staged one
  const auto j = nlohmann::json::parse(v.state_json());
  EXPECT_EQ(j["tiles"], 5);
  EXPECT_EQ(j["skipped_tiles"], 3);
  EXPECT_FALSE(walk_ui_text().empty());
}

#ifdef ATTNLAB_VIEW_BINARY
namespace {

struct WalkShot {
  Image img;
  nlohmann::json state;
};

WalkShot shoot(const test::TempDir& dir, const std::string& name, std::vector<std::string> args) {
  const std::string png = dir.file(name + ".png"), json = dir.file(name + ".json");
  std::vector<std::string> all = {"60", test::view_binary(), "--screenshot", png, "--state-dump", json, "--view", "walk"};
  all.insert(all.end(), args.begin(), args.end());
  const test::BinaryRun r = test::run_binary("timeout", all, "SDL_VIDEODRIVER=dummy LANG=C.UTF-8");
  EXPECT_EQ(r.code, 0) << r.err;
  WalkShot s;
  s.img = read_png(png);
  std::ifstream in(json);
  s.state = nlohmann::json::parse(in);
  return s;
}

bool orange(const std::uint8_t* p) { return p[0] >= 220 && std::abs(p[1] - 140) <= 45 && p[2] <= 70; }

}  // namespace

TEST(WalkViewScreenshot, DemoInBothLanguagesFramesTheCurrentTile) {
  const test::TempDir dir("attnlab-walk-shots");
  for (const std::string lang : {"en", "zh"}) {
    for (const std::string size : {"1280x800", "1920x1080"}) {
      SCOPED_TRACE(lang + " " + size);
      const WalkShot s = shoot(dir, "demo-" + lang + size, {"--lang", lang, "--size", size});
      ASSERT_GT(s.img.width, 0);
      EXPECT_EQ(s.state["view"], "walk");
      const auto& w = s.state["walk"];
      EXPECT_EQ(w["tile"], 2);
      EXPECT_EQ(w["tiles"], 3);
      EXPECT_EQ(w["cursor"], 2);
      EXPECT_LT(w["fp64_error"].get<double>(), 1e-6);
      // Not blank, and the orange frame surrounds the last fifth of the strip (key 4 of 5).
      const float x = w["strip"]["x"], y = w["strip"]["y"], sw = w["strip"]["w"], sh = w["strip"]["h"];
      int frame = 0, distinct = 0;
      std::uint32_t first = 0;
      for (int px = static_cast<int>(x + sw * 0.82f); px < static_cast<int>(x + sw); ++px) {
        frame += orange(s.img.at(px, static_cast<int>(y) - 1)) ? 1 : 0;
      }
      for (int px = static_cast<int>(x); px < static_cast<int>(x + sw); px += 7) {
        const std::uint8_t* p = s.img.at(px, static_cast<int>(y + sh / 2));
        const std::uint32_t c = p[0] | p[1] << 8 | p[2] << 16;
        if (px == static_cast<int>(x)) first = c;
        distinct += c != first ? 1 : 0;
      }
      EXPECT_GT(frame, sw * 0.1f);
      EXPECT_GT(distinct, 3);
    }
  }
}

TEST(WalkViewScreenshot, CausalSkippedTilesAreHatchedAndLargeProblemsWalk) {
  const test::TempDir dir("attnlab-walk-shots");
  const WalkShot s = shoot(dir, "causal", {"--mask", "causal", "--query", "1", "--tile", "1", "--lang", "en"});
  EXPECT_EQ(s.state["walk"]["skipped_tiles"], 3);
  EXPECT_EQ(s.state["walk"]["tiles"], 5);
  const WalkShot big = shoot(dir, "big", {"--random", "4096", "--mask", "causal", "--query", "3000", "--tile", "64",
                                          "--size", "1920x1080"});
  EXPECT_EQ(big.state["walk"]["tiles"], 64);
  EXPECT_EQ(big.state["walk"]["skipped_tiles"], 17);
  EXPECT_LT(big.state["walk"]["max_abs_diff"].get<double>(), 1e-5);
}
#endif
