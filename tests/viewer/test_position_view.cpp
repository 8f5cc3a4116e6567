// The position view's logic (viewer/views/position/position_view.h): its curves are the lab's
// own arithmetic (plain scores = the staged chain's scaled row, RoPE scores = the kernels' rotated
// Q and K), RoPE's score depends on the distance only, the content-free curve is the query against
// itself, ALiBi's line has the head's slope, θ follows the problem until moved, the cache, the
// refusal-free odd d_k, the headless screenshots in both languages, and every text in both.
#include "core/modify.h"
#include "cpu/cpu_backend.h"
#include "tests/test_util.h"
#include "tests/viewer/viewer_test_util.h"
#include "viewer/views/position/position_view.h"
#include "viewer/views/registry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>

namespace attnlab {
namespace {

using viewer::PositionCurves;
using viewer::PositionView;
using viewer::Session;

TEST(PositionView, CurvesAreTheChainsScores) {
  Problem p = random_problem(40, 16, 8, 5);
  p.mods.rope_theta = 300;
  const PositionCurves c = viewer::position_curves(p, 25, 300);
  ASSERT_EQ(c.keys, 40);
  EXPECT_EQ(c.pos, 25);
  // Without position: the staged chain's scaled scores of the row.
  Problem plain = p;
  plain.mods.rope_theta = 0;
  const Trace t = cpu_staged(plain);
  for (int j = 0; j < 40; ++j) EXPECT_NEAR(c.plain[j], t.scaled(25, j), 1e-5) << j;
  // With RoPE at the problem's θ: its scaled scores.
  const Trace r = cpu_staged(p);
  for (int j = 0; j < 40; ++j) EXPECT_NEAR(c.rope[j], r.scaled(25, j), 1e-5) << j;
  // The content-free curve at Δ = 0 is |q|² scale; ALiBi's line is -slope |Δ|.
  const double q2 = p.q().row(25).cast<double>().squaredNorm();
  EXPECT_NEAR(c.self[25], q2 * p.scale_value(), 1e-9);
  EXPECT_DOUBLE_EQ(c.alibi[20], -c.slope * 5);
  EXPECT_FALSE(c.alibi_on);
  p.mods.alibi = true;
  p.mods.alibi_slopes = {0.125};
  EXPECT_DOUBLE_EQ(viewer::position_curves(p, 25, 300).slope, 0.125);
}

TEST(PositionView, TheComparisonSlopeIsTheSlopeAlibiGivesTheHead) {
  // Off or on, one slope: what switching ALiBi on gives this head (the first standard slope of the
  // problem's heads), so turning ALiBi on changes the scores, not the line drawn.
  for (const int heads : {1, 4}) {
    SCOPED_TRACE(heads);
    Problem p = random_problem(16, 8, 8, 3, heads);
    const PositionCurves off = viewer::position_curves(p, 5, 10000);
    p.mods.alibi = true;
    const PositionCurves on = viewer::position_curves(p, 5, 10000);
    EXPECT_FALSE(off.alibi_on);
    EXPECT_TRUE(on.alibi_on);
    EXPECT_DOUBLE_EQ(off.slope, alibi_slopes(p)[0]);
    EXPECT_DOUBLE_EQ(on.slope, off.slope);
    EXPECT_EQ(off.slope_heads, heads);
    EXPECT_FALSE(off.slope_given);
  }
}

TEST(PositionView, ThePlotRangeFollowsTheContentCurvesNotTheAlibiLine) {
  // At 4096 keys the ALiBi line falls far below the scores; the range holds the three content
  // curves and 0, and leaves the line's far end out.
  const Problem p = random_problem(4096, 16, 8, 11);
  const PositionCurves c = viewer::position_curves(p, 2048, 10000);
  const viewer::PlotRange r = viewer::position_plot_range(c);
  for (const auto* cv : {&c.plain, &c.rope, &c.self})
    for (double x : *cv) {
      EXPECT_GE(x, r.lo);
      EXPECT_LE(x, r.hi);
    }
  EXPECT_LT(r.lo, 0);
  EXPECT_GT(r.hi, 0);
  EXPECT_LT(*std::min_element(c.alibi.begin(), c.alibi.end()), r.lo);
}

TEST(PositionView, KeysTheMaskHidesAreFlagged) {
  Problem p = random_problem(40, 16, 8, 5);
  EXPECT_EQ(viewer::position_curves(p, 25, 10000).masked_keys, 0);
  p.mask = MaskKind::Causal;
  const PositionCurves causal = viewer::position_curves(p, 25, 10000);
  for (int j = 0; j < 40; ++j) EXPECT_EQ(causal.masked[j] != 0, j > 25) << j;
  EXPECT_EQ(causal.masked_keys, 14);
  p.mods.window = 5;  // the latest 5 keys: 21..25
  const PositionCurves window = viewer::position_curves(p, 25, 10000);
  for (int j = 0; j < 40; ++j) EXPECT_EQ(window.masked[j] != 0, j < 21 || j > 25) << j;
  EXPECT_EQ(window.masked_keys, 35);
}

TEST(PositionView, RopeDependsOnTheDistanceOnly) {
  const Problem p = random_problem(64, 32, 8, 9);
  EXPECT_LT(viewer::rope_shift_error(p, 40, 10000, 1000), 1e-9);
  EXPECT_LT(viewer::rope_shift_error(p, 3, 50, 777), 1e-9);
  // The content-free curve is even in Δ: the same at Δ and -Δ.
  const PositionCurves c = viewer::position_curves(p, 32, 10000);
  for (int d = 1; d < 30; ++d) EXPECT_NEAR(c.self[32 - d], c.self[32 + d], 1e-9) << d;
  // Wavelengths: pair 0 turns every 2π positions, the last pair every 2π θ^((d-2)/d).
  EXPECT_NEAR(viewer::rope_wavelength(10000, 0, 64), 2 * 3.14159265358979, 1e-9);
  EXPECT_NEAR(viewer::rope_wavelength(10000, 31, 64), 2 * 3.14159265358979 * std::pow(10000, 62.0 / 64), 1e-6);
}

TEST(PositionView, ThetaFollowsTheProblemUntilMovedAndTheCacheHolds) {
  viewer::ViewerOptions o = test::cpu_random_options(64, 16, 16);
  o.mods.rope_theta = 500;
  o.rope_given = true;
  Session s(o);
  PositionView v;
  EXPECT_EQ(v.theta(s), 500);
  v.update(s);
  v.update(s);
  EXPECT_EQ(v.computed(), 1);
  v.set_theta(2e4);
  EXPECT_EQ(v.theta(s), 2e4);
  EXPECT_EQ(v.update(s).theta, 2e4);
  EXPECT_EQ(v.computed(), 2);
  ASSERT_TRUE(s.set_query(10));
  v.update(s);
  EXPECT_EQ(v.computed(), 3);
  v.set_theta(1);  // clamped to the slider's range
  EXPECT_EQ(v.theta(s), viewer::kRopeThetaMin);
  EXPECT_EQ(v.broken(s), "");
  nlohmann::json j;
  v.dump(j, s);
  EXPECT_EQ(j["position"]["query"], 10);
  // The demo's odd d_k: the plain and ALiBi curves only.
  Session demo(test::cpu_viewer_options());
  PositionView d;
  const PositionCurves& c = d.update(demo);
  EXPECT_FALSE(c.rope_possible);
  EXPECT_EQ(c.plain.size(), 5u);
  EXPECT_TRUE(c.rope.empty());
}

TEST(PositionView, RegisteredWithEveryTextInBothLanguages) {
  EXPECT_GE(viewer::view_index("position"), 0);
  for (int i = 0; i < static_cast<int>(viewer::PT::Count_); ++i) {
    const auto id = static_cast<viewer::PT>(i);
    EXPECT_STRNE(viewer::ptr(Lang::En, id), viewer::ptr(Lang::Zh, id)) << i;
  }
}

#ifdef ATTNLAB_VIEW_BINARY
TEST(PositionView, HeadlessScreenshotsInBothLanguages) {
  const test::TempDir dir("attnlab-position-shots");
  for (const std::string lang : {"en", "zh"}) {
    SCOPED_TRACE(lang);
    const std::string png = dir.file("position-" + lang + ".png"), json = dir.file("position-" + lang + ".json");
    const test::BinaryRun r = test::run_binary(
        "timeout", {"60", test::view_binary(), "--screenshot", png, "--state-dump", json, "--view", "position",
                    "--random", "300", "--dk", "32", "--rope", "--score-mod", "alibi", "--lang", lang, "--backend",
                    "cpu", "--size", "1280x800"},
        "SDL_VIDEODRIVER=dummy LANG=C.UTF-8");
    ASSERT_EQ(r.code, 0) << r.err;
    std::ifstream in(json);
    const nlohmann::json j = nlohmann::json::parse(in);
    EXPECT_EQ(j["view"], "position");
    EXPECT_EQ(j["position"]["rope"], true);
    EXPECT_EQ(j["position"]["theta"], 10000);
    EXPECT_GT(test::read_file(png).size(), 10000u);
  }
}

TEST(PositionView, HeadlessAt4096TheRangeLeavesTheAlibiLineOutAndMaskedKeysAreCounted) {
  const test::TempDir dir("attnlab-position-4096");
  const std::string png = dir.file("position.png"), json = dir.file("position.json");
  const test::BinaryRun r = test::run_binary(
      "timeout", {"120", test::view_binary(), "--screenshot", png, "--state-dump", json, "--view", "position",
                  "--random", "4096", "--dk", "16", "--mask", "causal", "--lang", "en", "--backend", "cpu", "--size",
                  "1024x640"},
      "SDL_VIDEODRIVER=dummy LANG=C.UTF-8");
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream in(json);
  const nlohmann::json j = nlohmann::json::parse(in)["position"];
  EXPECT_EQ(j["query"], 2048);
  EXPECT_DOUBLE_EQ(j["alibi_slope"].get<double>(), 1.0 / 256);  // ALiBi's slope of one head, though off
  EXPECT_EQ(j["alibi_slope_heads"], 1);
  EXPECT_LT(j["alibi_min"].get<double>(), j["y_range"][0].get<double>());
  EXPECT_EQ(j["masked_keys"], 4096 - 2049);
}
#endif

}  // namespace
}  // namespace attnlab
