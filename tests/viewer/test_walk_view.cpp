// The walk view's logic (viewer/views/walk/walk_view.h): tile sizes offered, the cache keyed by (revision,
// query, tile), the cursor that Space / ←/→ / Home move, the strip's bins and the chart series;
// and headless screenshots of `attnlab-view --view walk` (the state dump's walk part, the strip's
// orange frame on the current tile, hatched skipped tiles under the causal mask), both languages.
// The backward pass (--walk-pass backward): its walk is walk_backward_row's on the problem on
// screen (dO of seed 0), computed as the view's companion; the same tiles and keys step it; the
// state dump has the tile's dS and the final dQ; its words exist in both languages.
#include "viewer_test_util.h"
#include "cpu/walk.h"
#include "cpu/walk_backward.h"
#include "viewer/app/options.h"
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

// The backward pass shown on s: its companion asked for (as the app's frame does) and adopted.
const BackwardWalk* show_backward(Session& s, WalkView& v) {
  v.set_pass(WalkPass::Backward);
  v.prepare(s, 1);
  s.wait();
  return v.update_backward(s);
}

}  // namespace

// One tile: the chart's label prints the one value (m = 2.323, not [1.823 … 2.823]); the plot
// still gets a band around it. Several values: their own range; none yet: nothing to print.
TEST(WalkView, AChartLabelsTheRangeOfItsValues) {
  const WalkChartScale one = walk_chart_scale({2.323f});
  EXPECT_EQ(one.from, 2.323f);
  EXPECT_EQ(one.to, 2.323f);
  EXPECT_LT(one.lo, 2.323f);
  EXPECT_GT(one.hi, 2.323f);
  const WalkChartScale some = walk_chart_scale({1.5f, std::nanf(""), -2.0f});
  EXPECT_EQ(some.from, -2.0f);
  EXPECT_EQ(some.to, 1.5f);
  EXPECT_EQ(some.lo, -2.0f);
  EXPECT_EQ(some.hi, 1.5f);
}

// The charts' x axis spans every tile and their line ends at the cursor: a tile not walked yet has
// no point (PlotLines had drawn those tiles on its bottom edge, a drop after the current tile).
TEST(WalkView, AChartsLineEndsAtTheLastTileWithAValue) {
  const std::vector<float> values = {1.0f, std::nanf(""), 2.0f};  // three tiles walked, m = -inf at the second
  const WalkChartScale s = walk_chart_scale(values);
  const std::vector<WalkChartPoint> p = walk_chart_points(values, 5, s, 100, 40);
  ASSERT_EQ(p.size(), 5u);
  EXPECT_TRUE(p[0].has);
  EXPECT_FALSE(p[1].has);
  EXPECT_TRUE(p[2].has);
  EXPECT_FALSE(p[3].has) << "not walked yet";
  EXPECT_FALSE(p[4].has);
  for (int i = 0; i < 5; ++i) EXPECT_FLOAT_EQ(p[i].x, 25.0f * i);
  EXPECT_FLOAT_EQ(p[0].y, 40) << "the smallest value at the bottom";
  EXPECT_FLOAT_EQ(p[2].y, 0) << "the largest at the top";
  const std::vector<WalkChartPoint> one = walk_chart_points({3.0f}, 1, walk_chart_scale({3.0f}), 100, 40);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_TRUE(one[0].has);
  EXPECT_FLOAT_EQ(one[0].x, 50);
  EXPECT_FLOAT_EQ(one[0].y, 20) << "a constant in the middle of its band";
}

TEST(WalkView, TileChoicesAreEverySizeOnSmallProblemsAndPowersOfTwoOnLarge) {
  EXPECT_EQ(walk_tile_choices(5), (std::vector<int>{1, 2, 3, 4, 5}));
  EXPECT_EQ(walk_tile_choices(100), (std::vector<int>{1, 2, 4, 8, 16, 32, 64, 100}));
  EXPECT_EQ(walk_tile_choices(4096).back(), 4096);
  EXPECT_EQ(walk_tile_for(0, true, 5), 2);
  EXPECT_EQ(walk_tile_for(0, false, 4096), 64);
  // Short rows: at least 4 tiles by default (a power of two), 64 from 256 keys on.
  EXPECT_EQ(walk_tile_for(0, false, 40), 8);
  EXPECT_EQ(walk_tile_for(0, false, 64), 16);
  EXPECT_EQ(walk_tile_for(0, false, 255), 32);
  EXPECT_EQ(walk_tile_for(0, false, 256), 64);
  EXPECT_EQ(walk_tile_for(0, false, 3), 1);
  for (int keys = 4; keys <= 256; ++keys) {
    const int b = walk_tile_for(0, false, keys);
    EXPECT_GE((keys + b - 1) / b, 4) << keys << " keys, tile " << b;
  }
  EXPECT_EQ(walk_tile_for(100, false, 40), 40);  // above m: the whole row
  EXPECT_EQ(walk_tile_for(9, true, 5), 5);
  // A typed size is the CLI's walk --tile B, not moved to a power of two (it had been: --tile 6
  // over 37 keys walked tiles of 4 without a word), and the box lists it in its place.
  EXPECT_EQ(walk_tile_for(50, false, 4096), 50);
  EXPECT_EQ(walk_tile_for(6, false, 37), 6);
  EXPECT_EQ(walk_tile_choices(37, 6), (std::vector<int>{1, 2, 4, 6, 8, 16, 32, 37}));
  EXPECT_EQ(walk_tile_choices(37, 8), walk_tile_choices(37));
  EXPECT_EQ(walk_tile_choices(5, 3), walk_tile_choices(5));
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
  v.hidden();  // another view shown: it stops playing
  EXPECT_FALSE(v.playing());
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

TEST(WalkViewBackward, SwitchingToBackwardShowsWalkBackwardRowOfTheProblemOnScreen) {
  Session s(test::cpu_viewer_options());
  WalkView v;
  ASSERT_NE(v.update(s, 2), nullptr);
  EXPECT_EQ(v.companion(), nullptr);  // the forward asks for nothing beside the run
  v.home();
  const BackwardWalk* b = show_backward(s, v);
  ASSERT_NE(b, nullptr) << v.backward_error(Lang::En);
  EXPECT_EQ(v.status(), WalkView::Status::Ok);
  ASSERT_NE(v.companion(), nullptr);
  EXPECT_EQ(v.cursor(), 0);  // the tile the forward was on
  const BackwardWalk direct = walk_backward_row(s.problem(), upstream_random(0), 0, s.query(), 2);
  ASSERT_EQ(b->tiles.size(), direct.tiles.size());
  for (std::size_t t = 0; t < direct.tiles.size(); ++t) {
    EXPECT_EQ(b->tiles[t].ds, direct.tiles[t].ds) << t;
    EXPECT_EQ(b->tiles[t].dq, direct.tiles[t].dq) << t;
  }
  EXPECT_EQ(b->dq, direct.dq);
  EXPECT_EQ(b->D, direct.D);
  EXPECT_LT(b->fused_diff, 1e-6);
  EXPECT_LT(b->fp64_error, 1e-6);
  // A new query asks for that row's walk; back to forward drops the companion.
  ASSERT_TRUE(s.set_query(0));
  b = show_backward(s, v);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->query, 0);
  EXPECT_EQ(b->dq, walk_backward_row(s.problem(), upstream_random(0), 0, 0, 2).dq);
  v.set_pass(WalkPass::Forward);
  EXPECT_EQ(v.companion(), nullptr);
}

TEST(WalkViewBackward, TheTilesStepAndTheStateDumpHasEachTilesDsAndTheFinalDq) {
  Session s(test::cpu_random_options(300, 8, 4, MaskKind::Causal));
  ASSERT_TRUE(s.set_query(100));
  WalkView v;
  v.tile = 64;
  const BackwardWalk* b = show_backward(s, v);
  ASSERT_NE(b, nullptr) << v.backward_error(Lang::En);
  ASSERT_EQ(b->tiles.size(), 5u);
  EXPECT_EQ(v.cursor(), 4);  // starts at the end
  EXPECT_TRUE(b->tiles[2].skipped);
  EXPECT_EQ(walk_tile_state(*b, 1, 2), TileState::Consumed);
  EXPECT_EQ(walk_tile_state(*b, 3, 1), TileState::Skipped);
  EXPECT_TRUE(v.on_action(Action::StepHome));
  EXPECT_EQ(v.cursor(), 0);
  nlohmann::json j = nlohmann::json::parse(v.state_json());
  EXPECT_EQ(j["pass"], "backward");
  EXPECT_EQ(j["status"], "ok");
  EXPECT_EQ(j["tiles"], 5);
  EXPECT_EQ(j["skipped_tiles"], 3);
  EXPECT_EQ(j["keys"], (nlohmann::json{0, 64}));
  EXPECT_EQ(j["ds"].get<std::vector<double>>(), b->tiles[0].ds);
  EXPECT_EQ(j["dq"].get<std::vector<double>>(), b->tiles[0].dq);
  EXPECT_EQ(j["final_dq"].get<std::vector<double>>(), b->dq);
  EXPECT_DOUBLE_EQ(j["lse"].get<double>(), b->m + std::log(b->l));
  EXPECT_TRUE(v.on_action(Action::StepNext));
  j = nlohmann::json::parse(v.state_json());
  EXPECT_EQ(j["cursor"], 1);
  EXPECT_EQ(j["ds"].get<std::vector<double>>(), b->tiles[1].ds);
  EXPECT_EQ(j["ds_sum"].get<double>(), b->tiles[1].ds_sum);
  // A skipped tile adds nothing: the dQ so far is the tile before's.
  v.next();
  j = nlohmann::json::parse(v.state_json());
  EXPECT_TRUE(j["skipped"].get<bool>());
  EXPECT_EQ(j["dq"].get<std::vector<double>>(), b->tiles[1].dq);
  EXPECT_EQ(walk_backward_dq_at(*b, 2), b->tiles[1].dq);
  // Σ dS runs to 0 at the end; the final dQ is walk_backward_row's, the fused backward's within fp32.
  v.next();
  v.next();
  EXPECT_EQ(v.cursor(), 4);
  EXPECT_LT(std::abs(walk_series_ds_sum(*b, 4).back()), 1e-5f);
  EXPECT_EQ(walk_series_dq_norm(*b, 4).size(), 5u);
  EXPECT_EQ(b->dq, walk_backward_row(s.problem(), upstream_random(0), 0, 100, 64).dq);
  for (std::size_t c = 0; c < b->dq.size(); ++c) EXPECT_NEAR(b->dq[c], b->fused_dq[c], 1e-5);
  // Playing wraps as the forward does.
  v.toggle_play();
  EXPECT_EQ(v.cursor(), 0);
  EXPECT_TRUE(v.tick(0.6));
  EXPECT_EQ(v.cursor(), 1);
  EXPECT_TRUE(v.broken(s).empty());
}

TEST(WalkViewBackward, BarsKeepTheSignOfTheLargestEntry) {
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(walk_bars({0.1, -0.3, 0.2, -inf, 0.05}, 3), (std::vector<float>{-0.3f, 0.2f, 0.05f}));
  EXPECT_EQ(walk_bars({1, 2}, 8), (std::vector<float>{1, 2}));
  EXPECT_TRUE(walk_bars({}, 4).empty());
  EXPECT_DOUBLE_EQ(walk_norm({3, 4}), 5);
}

TEST(WalkViewBackward, TheFlagAndItsRefusals) {
  EXPECT_EQ(parse_viewer_args({"--view", "walk", "--walk-pass", "backward"}).views.walk.pass, WalkPass::Backward);
  EXPECT_EQ(parse_viewer_args({"--walk-pass", "forward"}).views.walk.pass, WalkPass::Forward);
  EXPECT_EQ(test::message_of<InputError>([] { parse_viewer_args({"--walk-pass", "back"}); }),
            "--walk-pass must be one of forward, backward, got 'back'");
  EXPECT_NE(viewer_usage().find("--walk-pass forward|backward"), std::string::npos);
  // Above what the session keeps (it streams), the row's walk is still computed: it costs O(m d).
  Session big(test::cpu_random_options(kKeepStagesMaxTokens + 8, 8, 8));
  ASSERT_TRUE(big.streaming());
  WalkView v;
  const BackwardWalk* b = show_backward(big, v);
  ASSERT_NE(b, nullptr) << v.backward_error(Lang::En);
  EXPECT_EQ(v.status(), WalkView::Status::Ok);
  EXPECT_EQ(nlohmann::json::parse(v.state_json())["status"], "ok");
  EXPECT_EQ(b->dq, walk_backward_row(big.problem(), upstream_random(0), 0, big.query(), b->tile).dq);
}

TEST(WalkViewBackward, EveryWordInBothLanguages) {
  for (int i = 0; i < static_cast<int>(WB::Count_); ++i) {
    const auto id = static_cast<WB>(i);
    const char *en = wbtr(Lang::En, id), *zh = wbtr(Lang::Zh, id);
    EXPECT_STRNE(en, "") << i;
    EXPECT_STRNE(en, zh) << i;
    EXPECT_EQ(test::printf_conversions(en), test::printf_conversions(zh)) << i;
  }
  EXPECT_NE(std::string(wbtr(Lang::En, WB::Caveat)).find("Only this row's dQ"), std::string::npos);
  EXPECT_NE(std::string(wbtr(Lang::Zh, WB::Caveat)).find("只有这一行的 dQ"), std::string::npos);
  // The font atlas gets the tile sentences of every kind in both languages.
  const std::vector<std::string> texts = WalkView().texts();
  bool zh_skip = false, en_skip = false;
  for (const std::string& t : texts) {
    zh_skip |= t.find("跳过：在窗口之外") != std::string::npos;
    en_skip |= t.find("Skipped: other documents' keys") != std::string::npos;
  }
  EXPECT_TRUE(zh_skip);
  EXPECT_TRUE(en_skip);
}

#ifdef ATTNLAB_VIEW_BINARY
namespace {

// The walk view's screenshot: test::view_shot with --view walk, which must succeed.
test::ViewShot shoot(const test::TempDir& dir, const std::string& name, std::vector<std::string> args) {
  args.insert(args.begin(), {"--view", "walk"});
  test::ViewShot s = test::view_shot(dir, name, args);
  EXPECT_EQ(s.code, 0) << s.err;
  return s;
}

bool orange(const std::uint8_t* p) { return p[0] >= 220 && std::abs(p[1] - 140) <= 45 && p[2] <= 70; }

}  // namespace

TEST(WalkViewScreenshot, DemoInBothLanguagesFramesTheCurrentTile) {
  const test::TempDir dir("attnlab-walk-shots");
  for (const std::string lang : {"en", "zh"}) {
    for (const std::string size : {"1280x800", "1920x1080"}) {
      SCOPED_TRACE(lang + " " + size);
      const test::ViewShot s = shoot(dir, "demo-" + lang + size, {"--lang", lang, "--size", size});
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

// At a projector's UI scale the running table keeps the width of its seven columns: the charts
// go under it where the panel cannot hold both side by side (at scale 1 they stand beside it).
TEST(WalkViewScreenshot, AtALargeUiScaleTheTableTakesTheWholeWidth) {
  const test::TempDir dir("attnlab-walk-shots");
  for (const std::string pass : {"forward", "backward"}) {
    SCOPED_TRACE(pass);
    const test::ViewShot one = shoot(dir, "scale1-" + pass, {"--lang", "zh", "--size", "1920x1080", "--walk-pass", pass});
    EXPECT_FALSE(one.state["walk"]["middle"]["stacked"].get<bool>());
    const test::ViewShot two =
        shoot(dir, "scale2-" + pass, {"--lang", "zh", "--size", "1920x1080", "--ui-scale", "2", "--walk-pass", pass});
    const float fp = two.state["font_px"].get<float>();
    EXPECT_TRUE(two.state["walk"]["middle"]["stacked"].get<bool>());
    EXPECT_GE(two.state["walk"]["middle"]["table_w"].get<float>(), fp * (pass == "forward" ? 17 : 14));
  }
}

TEST(WalkViewScreenshot, CausalSkippedTilesAreHatchedAndLargeProblemsWalk) {
  const test::TempDir dir("attnlab-walk-shots");
  const test::ViewShot s = shoot(dir, "causal", {"--mask", "causal", "--query", "1", "--tile", "1", "--lang", "en"});
  EXPECT_EQ(s.state["walk"]["skipped_tiles"], 3);
  EXPECT_EQ(s.state["walk"]["tiles"], 5);
  const auto big = shoot(dir, "big", {"--random", "4096", "--mask", "causal", "--query", "3000", "--tile", "64",
                                          "--size", "1920x1080"});
  EXPECT_EQ(big.state["walk"]["tiles"], 64);
  EXPECT_EQ(big.state["walk"]["skipped_tiles"], 17);
  EXPECT_LT(big.state["walk"]["max_abs_diff"].get<double>(), 1e-5);
}

TEST(WalkViewScreenshot, BackwardInBothLanguages) {
  const test::TempDir dir("attnlab-walk-shots");
  for (const std::string lang : {"en", "zh"}) {
    SCOPED_TRACE(lang);
    const auto s = shoot(dir, "backward-" + lang, {"--walk-pass", "backward", "--lang", lang, "--random", "256",
                                                       "--mask", "causal", "--query", "200"});
    const auto& w = s.state["walk"];
    EXPECT_EQ(w["pass"], "backward");
    EXPECT_EQ(w["status"], "ok");
    EXPECT_EQ(w["tiles"], 4);
    EXPECT_EQ(w["cursor"], 3);
    EXPECT_EQ(w["ds"].size(), 64u);
    EXPECT_LT(w["fused_max_abs_diff"].get<double>(), 1e-5);
    EXPECT_LT(w["fp64_error"].get<double>(), 1e-5);
    EXPECT_GT(w["strip"]["bins"].get<int>(), 0);
  }
}
#endif
