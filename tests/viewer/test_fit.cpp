// What keeps the window readable on a projector and in a small window: the font's size at every
// window height (viewer/draw/layout.h font_px_for, mark_scale), labels shortened with "…" and
// short labels broken into even lines (viewer/draw/strings.h ellipsize, wrap_balanced), the
// heatmap's tick stride and column label plan, values drawn smaller to fit their cells
// (viewer/draw/heatmap.h), the row chart's title (viewer/draw/row_chart.h), the precision map's
// log scale clamped as the chain's (viewer/views/precision/precision_view.h); and, with the
// binary, what the window did with them at 2560 x 1440 and at 960 x 600 with a large UI scale.
#include "viewer/draw/heatmap.h"
#include "viewer/draw/layout.h"
#include "viewer/draw/row_chart.h"
#include "viewer/draw/strings.h"
#include "viewer/views/precision/precision_view.h"
#include "tests/viewer/viewer_test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace attnlab::viewer {
namespace {

// A stand-in font: every code point 1 px wide.
float per_code_point(const std::string& s) { return static_cast<float>(utf8_codepoints(s).size()); }

TEST(Fit, FontFollowsTheWindowAboveTenEighty) {
  // The sizes the layout was drawn for stay.
  EXPECT_EQ(font_px_for(600, 1.0f), 15.0f);
  EXPECT_EQ(font_px_for(800, 1.0f), 18.0f);
  EXPECT_EQ(font_px_for(1080, 1.0f), 22.0f);
  // Above, in proportion to the height, up to a 4K window's.
  EXPECT_EQ(font_px_for(1440, 1.0f), 29.0f);
  EXPECT_EQ(font_px_for(2160, 1.0f), 44.0f);
  EXPECT_EQ(font_px_for(4320, 1.0f), 44.0f) << "no larger than a 4K window's";
  EXPECT_EQ(font_px_for(1440, 2.0f), 59.0f);
  EXPECT_EQ(font_px_for(2160, 100.0f), 44.0f * kMaxUiScale) << "the largest font there is";
  float last = 0;
  for (int h = 600; h <= 4320; h += 8) {
    const float px = font_px_for(h, 1.0f);
    EXPECT_GE(px, last) << "never smaller in a taller window (" << h << " px)";
    last = px;
  }
}

TEST(Fit, MarksGrowWithTheTextInWholeSteps) {
  EXPECT_EQ(mark_scale(15), 1.0f);
  EXPECT_EQ(mark_scale(font_px_for(1080, 1.0f)), 1.0f) << "as drawn at 1080 lines and below";
  EXPECT_EQ(mark_scale(font_px_for(1440, 1.0f)), 2.0f);
  EXPECT_EQ(mark_scale(font_px_for(2160, 1.0f)), 2.0f);
  EXPECT_EQ(mark_scale(font_px_for(1440, 2.0f)), 3.0f);
  EXPECT_EQ(mark_scale(44.0f * kMaxUiScale), 7.0f);
}

TEST(Fit, EllipsizeKeepsWholeWordsAndCharacters) {
  EXPECT_EQ(ellipsize("Heads", 5, per_code_point), "Heads") << "what fits stays whole";
  EXPECT_EQ(ellipsize("Precision (error vs fp64)", 12, per_code_point), "Precision…");
  EXPECT_EQ(ellipsize("Precision (error vs fp64)", 19, per_code_point), "Precision (error…");
  EXPECT_EQ(ellipsize("融合内核（在线 softmax）", 8, per_code_point), "融合内核（在线…");
  EXPECT_EQ(ellipsize("融合内核（在线 softmax）", 5, per_code_point), "融合内核…");
  EXPECT_EQ(ellipsize("abcdefghij", 5, per_code_point), "abcd…") << "one long word: its first letters";
  EXPECT_EQ(ellipsize("上下文", 0.5f, per_code_point), "…");
  for (float w = 1; w < 30; ++w) EXPECT_LE(per_code_point(ellipsize("a b c d e f g h 上下文 0.219", w, per_code_point)), w);
}

TEST(Fit, BalancedLinesOfAShortLabel) {
  EXPECT_EQ(wrap_lines("当前输出", 3, per_code_point), (std::vector<std::string>{"当前输", "出"}));
  EXPECT_EQ(wrap_balanced("当前输出", 3, per_code_point), (std::vector<std::string>{"当前", "输出"}));
  EXPECT_EQ(wrap_balanced("output so far", 10, per_code_point), (std::vector<std::string>{"output", "so far"}));
  EXPECT_EQ(wrap_balanced("tile max", 8, per_code_point), (std::vector<std::string>{"tile max"})) << "one line stays";
}

TEST(Fit, TickStrideIsTheChainsRule) {
  EXPECT_EQ(tick_stride(30, 20), 1);
  EXPECT_EQ(tick_stride(15, 20), 2);
  EXPECT_EQ(tick_stride(7, 20), 5);
  EXPECT_EQ(tick_stride(3, 20), 10);
  // 4096 tokens on 1024 pixels, labels 47 px apart: 0, 320, 640 … 3840.
  EXPECT_EQ(tick_stride(0.25f, 47), 320);
  EXPECT_EQ(tick_stride(0, 47), 1) << "no cells: no loop";
}

TEST(Fit, ColumnLabelsGoOnOneLineTwoLinesShortenedOrAsTicks) {
  // The widest label 30 px, 8 px between labels, shortened ones at least 16 px.
  ColumnLabelPlan p = plan_column_labels(40, 30, 8, 16);
  EXPECT_EQ(p.stride, 1);
  EXPECT_EQ(p.lines, 1);
  EXPECT_EQ(p.max_w, 0);
  p = plan_column_labels(20, 30, 8, 16);
  EXPECT_EQ(p.stride, 1);
  EXPECT_EQ(p.lines, 2) << "staggered: a label may take two cells";
  EXPECT_EQ(p.max_w, 0);
  p = plan_column_labels(12, 30, 8, 16);
  EXPECT_EQ(p.stride, 1) << "every column keeps its label, shortened";
  EXPECT_EQ(p.lines, 2);
  EXPECT_FLOAT_EQ(p.max_w, 16);
  p = plan_column_labels(0.25f, 30, 8, 16);
  EXPECT_EQ(p.lines, 1);
  EXPECT_EQ(p.max_w, 0);
  EXPECT_EQ(p.stride, tick_stride(0.25f, 38)) << "thousands of columns: ticks";
}

TEST(Fit, ValuesAreDrawnSmallerOnlyDownToTheLeastScale) {
  EXPECT_EQ(fit_scale(40, 20, 50, 30, 0.5f), 1.0f) << "fits: full size";
  EXPECT_FLOAT_EQ(fit_scale(40, 20, 30, 30, 0.5f), 0.75f);
  EXPECT_FLOAT_EQ(fit_scale(40, 20, 50, 12, 0.5f), 0.6f) << "the height decides too";
  EXPECT_EQ(fit_scale(40, 20, 15, 30, 0.5f), 0.0f) << "not below the least scale";
  EXPECT_EQ(fit_scale(40, 20, 39, 30, 1.0f), 0.0f) << "a least scale of 1: full size or nothing";
}

TEST(Fit, RowChartTitleDropsWholeEntries) {
  RowChart c;
  c.top = {{2, 0.26f}, {4, 0.254f}, {0, 0.219f}};
  const std::vector<std::string> keys = {"模型", "根据", "上下文", "分配", "权重"};
  const std::string head = "查询“上下文”的权重";
  const std::string full = head + top_weights_text(c, keys);
  EXPECT_EQ(fit_row_chart_title(head, c, keys, 200, per_code_point), full);
  const std::string two = head + "  ·  1) 上下文 26.0%, 2) 权重 25.4%, …";
  EXPECT_EQ(top_weights_text(c, keys, 2), "  ·  1) 上下文 26.0%, 2) 权重 25.4%, …");
  EXPECT_EQ(fit_row_chart_title(head, c, keys, per_code_point(full) - 1, per_code_point), two);
  EXPECT_EQ(fit_row_chart_title(head, c, keys, per_code_point(head) + 3, per_code_point), head) << "no entry fits";
  EXPECT_EQ(fit_row_chart_title(head, c, keys, 5, per_code_point), "查询“上…");
}

TEST(Fit, PrecisionScaleSpansAtMostTheChainsDecades) {
  // Errors of 1e-30 and 1e-2: the scale from 1e-2 · 10^-6, as the chain's log scale.
  const float x[] = {0.0f, 0.5f};
  const double ref[] = {1e-30, 0.51};
  const ErrorMap m = error_map(x, ref, 1, 2, nullptr, 0, ErrorKind::Abs, Precision::FP32);
  EXPECT_LT(m.min_positive, 1e-20);
  const ValueRange r = m.colour_range();
  EXPECT_NEAR(std::log10(r.hi / r.lo), kLogDecades, 1e-9);
  EXPECT_DOUBLE_EQ(r.lo, log_range({m.min_positive, r.hi}).lo) << "the chain's rule";
  EXPECT_TRUE(m.colour_clamped());
  // A map within six decades keeps its own smallest error, unclamped.
  const double near[] = {1.25, 0.5078125};
  const ErrorMap n = error_map(x, near, 1, 2, nullptr, 0, ErrorKind::Abs, Precision::FP32);
  EXPECT_DOUBLE_EQ(n.colour_range().lo, n.min_positive);
  EXPECT_FALSE(n.colour_clamped());
}

TEST(Fit, NewWordsExistInBothLanguages) {
  for (S s : {S::PrecLegendClamped, S::DiffMaskedSwatch, S::DiffMaskedWhere}) {
    EXPECT_STRNE(tr(Lang::En, s), tr(Lang::Zh, s));
    EXPECT_EQ(test::printf_conversions(tr(Lang::En, s)), test::printf_conversions(tr(Lang::Zh, s)));
  }
}

#ifdef ATTNLAB_VIEW_BINARY
// The window itself: the font at 2560 x 1440 and 3840 x 2160; at 960 x 600 and UI scale 1.5 the
// demo's five column labels, its values and a title that ends cleanly; the precision view's scale
// at T = 0.05 in bf16 within six decades, and its map with ticks at 4096 tokens.
TEST(FitWindow, TextGrowsOnLargeWindowsAndSmallWindowsKeepEveryLabel) {
  test::TempDir dir;
  for (const auto& [size, px] : {std::pair{"2560x1440", 29.0}, {"3840x2160", 44.0}}) {
    const test::ViewShot s = test::view_shot(dir, std::string("big") + size, {"--size", size, "--lang", "zh"});
    ASSERT_EQ(s.code, 0) << s.err;
    EXPECT_EQ(s.state["font_px"].get<double>(), px) << size;
  }
  for (const char* lang : {"zh", "en"}) {
    const test::ViewShot s =
        test::view_shot(dir, std::string("small-") + lang, {"--ui-scale", "1.5", "--size", "960x600", "--lang", lang});
    ASSERT_EQ(s.code, 0) << s.err;
    const nlohmann::json& ch = s.state["chain"];
    EXPECT_EQ(ch["col_labels"]["stride"], 1) << lang << ": every key's label";
    EXPECT_GT(ch["value_px"].get<double>(), 0) << lang << ": the values in the cells";
    const std::string title = ch["row_chart"]["title"];
    EXPECT_TRUE(title.size() >= 3 && title.compare(title.size() - 3, 3, "…") == 0) << title;
    // The values at scale 1.5 drawn no smaller than the text at scale 1.
    EXPECT_GE(ch["value_px"].get<double>(), font_px_for(600, 1.0f) - 0.5);
  }
  const test::ViewShot roomy = test::view_shot(dir, "roomy", {"--size", "1920x1080", "--lang", "zh"});
  ASSERT_EQ(roomy.code, 0) << roomy.err;
  EXPECT_EQ(roomy.state["chain"]["row_chart"]["title"], "查询“上下文”的权重  ·  1) 上下文 26.0%, 2) 权重 25.4%, 3) 模型 21.9%");
  EXPECT_EQ(roomy.state["chain"]["col_labels"]["lines"], 1);
}

// Several queries: the row chart's rank numbers meet neither the other queries' outlines over the
// bars nor their tokens at the chart's right end (which had covered the number over 权重).
TEST(FitWindow, TheRankNumbersKeepOffTheOtherQueriesOutlinesAndTokens) {
  test::TempDir dir;
  for (const auto& [size, lang] : {std::pair{"1280x800", "en"}, {"1920x1080", "zh"}, {"960x600", "zh"}}) {
    const test::ViewShot s =
        test::view_shot(dir, std::string("ranks-") + size + lang, {"--queries", "2,0,4", "--step", "3", "--size", size, "--lang", lang});
    ASSERT_EQ(s.code, 0) << s.err;
    const nlohmann::json& rc = s.state["chain"]["row_chart"];
    ASSERT_EQ(rc["ranks"].size(), 3u) << size;
    // The two other queries' tokens, side by side at the chart's right end, and the bars under them.
    ASSERT_EQ(rc["legend"].size(), 2u) << size;
    const double chart_end = rc["x"].get<double>() + rc["w"].get<double>();
    EXPECT_NEAR(rc["legend"][0][0].get<double>() + rc["legend"][0][2].get<double>(), chart_end, 1.0) << size;
    EXPECT_LT(rc["legend"][1][0].get<double>() + rc["legend"][1][2].get<double>(), rc["legend"][0][0].get<double>())
        << size;
    ASSERT_FALSE(rc["bars"].empty()) << size;
    // The outlines stay under the tokens (they had run through their glyphs).
    for (const auto& l : rc["legend"])
      for (const auto& b : rc["bars"])
        EXPECT_LE(l[1].get<double>() + l[3].get<double>(), b[1].get<double>() + 0.01)
            << size << " " << lang << ": token " << l.dump() << " over bar " << b.dump();
    nlohmann::json keep_off = rc["legend"];
    for (const auto& b : rc["bars"]) keep_off.push_back(b);
    for (const auto& r : rc["ranks"])
      for (const auto& k : keep_off) {
        const bool apart = r[0].get<double>() + r[2].get<double>() <= k[0].get<double>() + 0.01 ||
                           k[0].get<double>() + k[2].get<double>() <= r[0].get<double>() + 0.01 ||
                           r[1].get<double>() + r[3].get<double>() <= k[1].get<double>() + 0.01 ||
                           k[1].get<double>() + k[3].get<double>() <= r[1].get<double>() + 0.01;
        EXPECT_TRUE(apart) << size << " " << lang << ": rank " << r.dump() << " meets " << k.dump();
      }
  }
}

TEST(FitWindow, PrecisionScaleIsClampedToSixDecades) {
  test::TempDir dir;
  const test::ViewShot s = test::view_shot(dir, "prec", {"--random", "256", "--temperature", "0.05", "--step", "3",
                                                         "--view", "precision", "--precision", "bf16", "--lang", "en"});
  ASSERT_EQ(s.code, 0) << s.err;
  const nlohmann::json& pv = s.state["precision_view"];
  ASSERT_EQ(pv["status"], "ok");
  const double lo = pv["colour_range"][0], hi = pv["colour_range"][1];
  EXPECT_NEAR(std::log10(hi / lo), kLogDecades, 1e-6);
  EXPECT_TRUE(pv["colour_clamped"].get<bool>());
}

// Step 2 of a problem with a score mod at UI scale 2 in a 1024 x 640 window: under the toolbar of
// the sub-stages the row's bar chart gives its height to the heatmap, which had been refused as
// "too small" (and would be shorter than the chart); the same step at scale 1 keeps its chart.
TEST(FitWindow, TheChainsHeatmapTakesTheRowChartsHeightWhenTheToolbarLeavesTooLittle) {
  test::TempDir dir;
  for (const char* lang : {"en", "zh"}) {
    const test::ViewShot s = test::view_shot(dir, std::string("sub-ui2-") + lang,
                                             {"--step", "2", "--score-mod", "alibi", "--ui-scale", "2", "--size",
                                              "1024x640", "--lang", lang});
    ASSERT_EQ(s.code, 0) << s.err;
    const nlohmann::json& h = s.state["heatmap"];
    EXPECT_EQ(h["vis_rows"].get<double>(), 5.0) << lang;
    EXPECT_GE(h["h"].get<double>(), 2 * s.state["font_px"].get<double>()) << lang << ": a plot, not the refusal";
    EXPECT_EQ(s.state["chain"]["row_chart"]["title"], "") << lang << ": no chart";
    const test::ViewShot one =
        test::view_shot(dir, std::string("sub-ui1-") + lang, {"--step", "2", "--score-mod", "alibi", "--size", "1024x640", "--lang", lang});
    ASSERT_EQ(one.code, 0) << one.err;
    EXPECT_NE(one.state["chain"]["row_chart"]["title"], "") << lang << ": the chart at scale 1";
  }
}

// The pooling note under the chain's heatmap has one line of room: in Chinese at UI scale 2 on
// 1920 x 1080 it was cut off at the panel's right edge mid-character; it now ends in "…" (whole in
// its tooltip), and at scale 1 it is whole.
TEST(FitWindow, TheChainsPoolingNoteEndsInAnEllipsisWhereThePanelIsNarrower) {
  test::TempDir dir;
  const test::ViewShot big = test::view_shot(
      dir, "pool-ui2-zh", {"--random", "1024", "--dk", "16", "--dv", "16", "--ui-scale", "2", "--size", "1920x1080", "--lang", "zh"});
  ASSERT_EQ(big.code, 0) << big.err;
  const std::string cut = big.state["chain"]["status"];
  const std::string ellipsis = "…";
  ASSERT_GT(cut.size(), ellipsis.size());
  EXPECT_EQ(cut.substr(cut.size() - ellipsis.size()), ellipsis) << cut;
  EXPECT_EQ(cut.rfind("1024×1024 矩阵显示在", 0), 0u) << cut;
  for (const char* lang : {"en", "zh"}) {
    const test::ViewShot one = test::view_shot(dir, std::string("pool-ui1-") + lang,
                                               {"--random", "1024", "--dk", "16", "--dv", "16", "--size", "1920x1080", "--lang", lang});
    ASSERT_EQ(one.code, 0) << one.err;
    const std::string whole = one.state["chain"]["status"];
    EXPECT_EQ(whole.find(ellipsis), std::string::npos) << whole;
    EXPECT_NE(whole.find(std::string(lang) == "en" ? "pools a block (max)" : "每个像素池化一个区块（最大值）"), std::string::npos)
        << whole;
  }
}

// A projector's 1280 x 800 at UI scale 2, 1024 tokens: the diff view's editor, settings and
// explanation had left its map no room (0 px), the precision view's a strip; their headers now
// scroll where the map would keep less than its minimum, and the diff's table of largest changes
// keeps four columns where all six would leave the map less than its width. At scale 1 on
// 1920 x 1080 neither scrolls and the table has all six.
TEST(FitWindow, TheDiffAndPrecisionMapsKeepRoomAtAProjectorsUiScale) {
  test::TempDir dir;
  for (const char* view : {"diff", "precision"}) {
    const bool diff = std::string(view) == "diff";
    const std::string key = diff ? "diff" : "precision_view";
    std::vector<std::string> input = {"--random", "1024", "--dk", "16", "--dv", "16"};
    if (diff) input.insert(input.end(), {"--diff", "temperature=0.5"});
    for (const char* lang : {"en", "zh"}) {
      std::vector<std::string> args = input;
      args.insert(args.end(), {"--view", view, "--lang", lang, "--ui-scale", "2", "--size", "1280x800"});
      const test::ViewShot s = test::view_shot(dir, std::string(view) + "-ui2-" + lang, args);
      ASSERT_EQ(s.code, 0) << s.err;
      const double fp = s.state["font_px"].get<double>();
      EXPECT_TRUE(s.state[key]["header"]["scrolled"].get<bool>()) << view << " " << lang;
      EXPECT_GE(s.state["heatmap"]["h"].get<double>(), 4 * fp) << view << " " << lang << ": a map, not a strip";
      EXPECT_GE(s.state["heatmap"]["w"].get<double>(), 4 * fp) << view << " " << lang;
      if (diff) EXPECT_TRUE(s.state["diff"]["table_narrow"].get<bool>()) << lang;
      EXPECT_FALSE(s.state[key]["map_too_small"].get<bool>()) << view << " " << lang;
    }
    std::vector<std::string> args = input;
    args.insert(args.end(), {"--view", view, "--size", "1920x1080"});
    const test::ViewShot one = test::view_shot(dir, std::string(view) + "-ui1", args);
    ASSERT_EQ(one.code, 0) << one.err;
    EXPECT_FALSE(one.state[key]["header"]["scrolled"].get<bool>()) << view;
    EXPECT_GT(one.state[key]["header"]["h"].get<double>(), 0) << view;
    if (diff) EXPECT_FALSE(one.state["diff"]["table_narrow"].get<bool>());
  }
}

// A window too small for any map at its UI scale (1024 x 768 at scale 2: 512 x 384 at scale 1):
// the precision and diff views say so, as the chain does, where the map had shrunk to a few pixels
// or nothing and its colour bar to a strip.
TEST(FitWindow, TheDiffAndPrecisionViewsSayWhenNoMapFits) {
  test::TempDir dir;
  for (const char* view : {"diff", "precision"}) {
    const bool diff = std::string(view) == "diff";
    for (const char* lang : {"en", "zh"}) {
      std::vector<std::string> args = {"--view", view, "--lang", lang, "--ui-scale", "2", "--size", "1024x768"};
      if (diff) args.insert(args.end(), {"--diff", "temperature=0.5"});
      const test::ViewShot s = test::view_shot(dir, std::string(view) + "-tiny-" + lang, args);
      ASSERT_EQ(s.code, 0) << s.err;
      EXPECT_TRUE(s.state[diff ? "diff" : "precision_view"]["map_too_small"].get<bool>()) << view << " " << lang;
    }
  }
}

// The diff view's table of largest changes as wide as its widest cells: at 960 x 600 its B − A
// column had been cut mid-number ("+4.17" for 4.17e-07) in a table of a fixed third of the panel.
TEST(FitWindow, TheDiffTablesCellsAreWhole) {
  test::TempDir dir;
  const std::vector<std::vector<std::string>> cases = {
      {"--random", "64", "--diff", "variant=fused", "--step", "4", "--size", "960x600"},
      {"--random", "512", "--diff", "query=5", "--step", "3", "--size", "1280x800"},
      {"--diff", "query=0", "--step", "3", "--size", "1280x800", "--lang", "zh"},
      {"--random", "64", "--diff", "variant=fused", "--size", "960x600", "--ui-scale", "2"}};
  for (std::size_t i = 0; i < cases.size(); ++i) {
    std::vector<std::string> args = cases[i];
    args.insert(args.end(), {"--view", "diff"});
    std::string name;
    for (const std::string& a : cases[i]) name += " " + a;
    const test::ViewShot s = test::view_shot(dir, "diff-table-" + std::to_string(i), args);
    ASSERT_EQ(s.code, 0) << s.err;
    const auto& d = s.state["diff"];
    ASSERT_GT(d["top"].size(), 0u) << name;
    // The width asked for holds the widest B − A as printed (digits are over 0.4 of a line wide),
    // and the table is given it.
    const double fp = s.state["font_px"].get<double>(), need = d["table"]["need"].get<double>();
    for (const auto& t : d["top"]) {
      char text[32];
      std::snprintf(text, sizeof text, "%+.4g", t["diff"].get<double>());
      EXPECT_GE(need, std::string(text).size() * 0.4 * fp) << name << " " << text;
    }
    EXPECT_GE(d["table"]["w"].get<double>(), need) << name;
  }
}

// The heads view at 1280 x 800, UI scale 2, 8 heads: its explanation had left the thumbnails
// 16 px squares with their captions cut to "hea"; the explanation now scrolls where the grid
// would keep less than a map's minimum, and a caption wider than its thumbnail's step ends in
// "…" ("head h" alone where "head h…" would not fit, the number alone where "head h" would not).
// At scale 1 on 1920 x 1080 neither.
TEST(FitWindow, TheHeadsThumbnailsKeepRoomAndWholeCaptionsAtAProjectorsUiScale) {
  test::TempDir dir;
  const std::vector<std::string> input = {"--view", "heads", "--random", "256", "--heads", "8", "--pattern", "induction"};
  const std::string ellipsis = "…";
  for (const char* lang : {"en", "zh"}) {
    std::vector<std::string> args = input;
    args.insert(args.end(), {"--lang", lang, "--ui-scale", "2", "--size", "1280x800"});
    const test::ViewShot s = test::view_shot(dir, std::string("heads-ui2-") + lang, args);
    ASSERT_EQ(s.code, 0) << s.err;
    const nlohmann::json& g = s.state["heads_grid"];
    EXPECT_TRUE(g["header"]["scrolled"].get<bool>()) << lang;
    EXPECT_GE(g["side"].get<double>(), 2 * s.state["font_px"].get<double>()) << lang << ": thumbnails, not specks";
    ASSERT_EQ(g["captions"].size(), 8u) << lang;
    for (std::size_t h = 0; h < 8; ++h) {
      const std::string cap = g["captions"][h];
      const std::string head = (std::string(lang) == "en" ? "head " : "头 ") + std::to_string(h);
      EXPECT_EQ(cap.rfind(head, 0), 0u) << cap << ": the head's name whole";
      EXPECT_TRUE(cap == head || cap.substr(cap.size() - ellipsis.size()) == ellipsis) << cap;
    }
    std::vector<std::string> one = input;
    one.insert(one.end(), {"--lang", lang, "--size", "1920x1080"});
    const test::ViewShot w = test::view_shot(dir, std::string("heads-ui1-") + lang, one);
    ASSERT_EQ(w.code, 0) << w.err;
    EXPECT_FALSE(w.state["heads_grid"]["header"]["scrolled"].get<bool>()) << lang;
    for (const auto& cap : w.state["heads_grid"]["captions"])
      EXPECT_EQ(cap.get<std::string>().find(ellipsis), std::string::npos) << cap;
  }
}

// The dump writes the UI scale as given (1.1, where the float's double read 1.100000023841858).
TEST(FitWindow, TheDumpWritesTheUiScaleAsGiven) {
  test::TempDir dir;
  const test::ViewShot s = test::view_shot(dir, "scale", {"--ui-scale", "1.1", "--size", "1280x800"});
  ASSERT_EQ(s.code, 0) << s.err;
  EXPECT_EQ(s.state["ui_scale"].get<double>(), 1.1);
}

// At UI scale 2 on 2560 x 1440 the precision view's explanation is cut to a share of the window
// and the histogram gives way, so the map keeps room (it had none: the text filled the centre).
TEST(FitWindow, ThePrecisionMapKeepsRoomAtALargeUiScale) {
  test::TempDir dir;
  for (const char* lang : {"en", "zh"}) {
    const test::ViewShot s = test::view_shot(
        dir, std::string("prec-ui2-") + lang, {"--view", "precision", "--ui-scale", "2", "--size", "2560x1440", "--lang", lang});
    ASSERT_EQ(s.code, 0) << s.err;
    const nlohmann::json& h = s.state["heatmap"];
    EXPECT_EQ(h["vis_rows"].get<double>(), 5.0) << lang;
    EXPECT_GE(h["h"].get<double>(), 5 * s.state["font_px"].get<double>()) << lang << ": the five rows a line tall each";
  }
  // In a small window at that scale the map's labels shrink, as the chain's do, down to the
  // default scale's size, so every token labels its row and column (one label a side had shown).
  for (const char* lang : {"en", "zh"}) {
    const test::ViewShot s = test::view_shot(dir, std::string("prec-small-") + lang,
                                             {"--view", "precision", "--step", "3", "--precision", "bf16", "--ui-scale",
                                              "2", "--size", "960x600", "--lang", lang});
    ASSERT_EQ(s.code, 0) << s.err;
    const nlohmann::json& labels = s.state["precision_view"]["map_labels"];
    EXPECT_TRUE(labels["all"].get<bool>()) << lang << " " << labels.dump();
    EXPECT_LT(labels["scale"].get<double>(), 1.0) << lang;
    EXPECT_GE(labels["scale"].get<double>(), 0.5) << lang;
  }
}
#endif

}  // namespace
}  // namespace attnlab::viewer
