// Keys -> actions, the temperature step of [ and ], the F1 help, command-line parsing (bad flags are
// refused with a message; the temperature message is validate_temperature's), and the UI text table.
#include "core/problem.h"
#include "tests/test_util.h"
#include "viewer/draw/heatmap.h"
#include "viewer/session/keymap.h"
#include "viewer/draw/layout.h"
#include "viewer/app/options.h"
#include "viewer/app/speech.h"
#include "viewer/draw/strings.h"
#include "viewer/views/perf/perf_view.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

using namespace attnlab;
using namespace attnlab::viewer;

TEST(Keymap, EveryDocumentedKeyHasItsAction) {
  EXPECT_EQ(action_for_key(Key::Space), Action::TogglePlay);
  EXPECT_EQ(action_for_key(Key::Right), Action::StepNext);
  EXPECT_EQ(action_for_key(Key::Left), Action::StepPrev);
  EXPECT_EQ(action_for_key(Key::Home), Action::StepHome);
  EXPECT_EQ(action_for_key(Key::Up), Action::QueryPrev);
  EXPECT_EQ(action_for_key(Key::Down), Action::QueryNext);
  EXPECT_EQ(action_for_key(Key::M), Action::ToggleMask);
  EXPECT_EQ(action_for_key(Key::LeftBracket), Action::TemperatureDown);
  EXPECT_EQ(action_for_key(Key::RightBracket), Action::TemperatureUp);
  EXPECT_EQ(action_for_key(Key::L), Action::ToggleLanguage);
  EXPECT_EQ(action_for_key(Key::S), Action::Screenshot);
  EXPECT_EQ(action_for_key(Key::F1), Action::ToggleHelp);
  EXPECT_EQ(action_for_key(Key::Escape), Action::Quit);
  EXPECT_FALSE(action_for_key(Key::Other));
}

// A refusal stays on screen for S (pressed to capture it: the screenshot had lost it), F1, L (it
// is said in the other language), the UI scale and full screen; a step or a query move ends it.
TEST(Keymap, ShowingTheWindowKeepsTheRefusalOnScreen) {
  for (Action a : {Action::Screenshot, Action::ToggleHelp, Action::ToggleLanguage, Action::UiScaleUp,
                   Action::ToggleFullscreen, Action::ToggleMask, Action::TemperatureUp, Action::Quit})
    EXPECT_TRUE(keeps_refusal(a)) << static_cast<int>(a);
  for (Action a : {Action::StepNext, Action::QueryNext, Action::TogglePlay})
    EXPECT_FALSE(keeps_refusal(a)) << static_cast<int>(a);
}

TEST(Keymap, TemperatureStepsByRatioWithinTheSliderRange) {
  EXPECT_DOUBLE_EQ(step_temperature(1.0, true), 1.25);
  EXPECT_DOUBLE_EQ(step_temperature(1.0, false), 0.8);
  EXPECT_DOUBLE_EQ(step_temperature(step_temperature(0.85, true), false), 0.85);
  // ] [ [ from 0.85: exactly 0.68, which the reproduce command and the state dump print as such
  // (the plain quotient is 0.6799999999999999).
  const double t = step_temperature(step_temperature(step_temperature(0.85, true), false), false);
  EXPECT_EQ(t, 0.68);
  EXPECT_EQ(nlohmann::json(t).dump(), "0.68");
  EXPECT_DOUBLE_EQ(step_temperature(0.05, false), kTemperatureMin);
  EXPECT_DOUBLE_EQ(step_temperature(19.0, true), kTemperatureMax);
  // Typed values beyond the range: a key never moves against its direction.
  for (const double t : {1e-30, 0.01, 0.049, 0.05, 1.0, 20.0, 25.0, 1e30}) {
    EXPECT_GE(step_temperature(t, true), t) << t;
    EXPECT_LE(step_temperature(t, false), t) << t;
  }
  EXPECT_DOUBLE_EQ(step_temperature(0.049, true), 0.049 * 1.25);
  EXPECT_DOUBLE_EQ(step_temperature(0.049, false), 0.049);
  EXPECT_DOUBLE_EQ(step_temperature(25.0, false), kTemperatureMax);
  EXPECT_DOUBLE_EQ(step_temperature(25.0, true), 25.0);
}

TEST(Keymap, HelpListsTheSameKeysInBothLanguages) {
  const auto zh = key_help(Lang::Zh, chain_step_keys_help(Lang::Zh)), en = key_help(Lang::En, chain_step_keys_help(Lang::En));
  ASSERT_EQ(zh.size(), en.size());
  EXPECT_GE(en.size(), 10u);
  EXPECT_EQ(zh[1].first, en[1].first);  // arrows are the same symbols
}

namespace {
ViewerOptions parse(std::vector<std::string> a) { return parse_viewer_args(a); }
// parse_viewer_args(a)'s refusal; a failure when it accepts a.
std::string error_of(std::vector<std::string> a) {
  return test::message_of<InputError>([&] { parse_viewer_args(a); });
}
}  // namespace

TEST(Options, ParsesEveryStateFlag) {
  const ViewerOptions o = parse({"--screenshot", "x.png", "--query", "上下文", "--step", "3", "--temperature",
                                 "0.5", "--mask", "causal", "--random", "4096", "--dk", "32", "--dv", "16",
                                 "--seed", "7", "--lang", "zh", "--size", "1920x1080", "--backend", "cpu",
                                 "--pool", "mean", "--state-dump", "s.json"});
  EXPECT_EQ(o.screenshot, "x.png");
  EXPECT_EQ(o.query, "上下文");
  EXPECT_EQ(o.step, 3);
  EXPECT_DOUBLE_EQ(*o.temperature, 0.5);
  EXPECT_EQ(o.mask, MaskKind::Causal);
  EXPECT_EQ(*o.random_n, 4096);
  EXPECT_EQ(o.d_k, 32);
  EXPECT_EQ(o.d_v, 16);
  EXPECT_EQ(o.seed, 7u);
  EXPECT_EQ(*o.lang, Lang::Zh);
  EXPECT_EQ(o.width, 1920);
  EXPECT_EQ(o.height, 1080);
  EXPECT_EQ(o.backend, "cpu");
  EXPECT_EQ(o.pool, PoolMode::Mean);
  EXPECT_EQ(o.state_dump, "s.json");
  const ViewerOptions d = parse({});
  EXPECT_EQ(d.step, 1);
  EXPECT_FALSE(d.temperature);
  EXPECT_EQ(d.backend, "auto");
}

TEST(Options, RefusesBadFlagsWithAMessage) {
  EXPECT_NE(error_of({"--bogus"}).find("unknown option '--bogus'"), std::string::npos);
  EXPECT_NE(error_of({"--step", "7"}).find("--step must be one of 1, 2, 3, 4"), std::string::npos);
  EXPECT_NE(error_of({"--step"}).find("needs a value"), std::string::npos);
  // An option where the value should be is not taken for it (a file named --fullscreen had been
  // written), and a value is read once (the refusal had quoted the next word).
  EXPECT_EQ(error_of({"--screenshot", "--fullscreen"}), "option --screenshot needs a value");
  // --flag=value as attnlab takes it; an empty one is a missing value.
  EXPECT_EQ(parse({"--temperature=2", "--diff=mask=causal"}).temperature, 2.0);
  EXPECT_EQ(error_of({"--temperature="}), "option --temperature needs a value");
  EXPECT_EQ(error_of({"--temperature", "--lang", "zh"}), "option --temperature needs a value");
  EXPECT_EQ(error_of({"--perf-max-seconds", "0", "--random", "8"}),
            "--perf-max-seconds must be a decimal number of seconds above 0 and at most 86400, got '0'");
  EXPECT_NE(error_of({"--mask", "diag"}).find("--mask must be none or causal"), std::string::npos);
  EXPECT_NE(error_of({"--random", "0"}).find("--random must be an integer from 1"), std::string::npos);
  EXPECT_NE(error_of({"--random", "abc"}).find("got 'abc'"), std::string::npos);
  EXPECT_NE(error_of({"--size", "big"}).find("--size must be WxH"), std::string::npos);
  // Below the layout's minimum the window would be drawn at 960 x 600 anyway: refused instead.
  EXPECT_NE(error_of({"--size", "640x480"}).find("--size W must be"), std::string::npos);
  EXPECT_NE(error_of({"--size", "1280x599"}).find("--size H must be"), std::string::npos);
  EXPECT_NE(error_of({"--lang", "fr"}), "");
  EXPECT_NE(error_of({"--backend", "tpu"}).find("unknown backend 'tpu' (use auto, cpu or cuda)"), std::string::npos);
  EXPECT_EQ(error_of({"--dk", "8"}), "--dk applies to --random problems only (the demo has its own values)");
  EXPECT_EQ(error_of({"--bundle", "d", "--seed", "3"}),
            "--seed applies to --random problems only (the bundle gives its shapes and values)");
  EXPECT_NE(error_of({"--temperature", "abc"}).find("temperature must be a finite number > 0"), std::string::npos);
  // An export folder that is not there is refused at once, not at the first export.
  EXPECT_EQ(error_of({"--export-dir", "/nonexistent/x"}), "--export-dir '/nonexistent/x' is not a folder (missing?)");
  EXPECT_EQ(parse({"--export-dir", "."}).export_dir, ".");
  // An option given twice is refused, as the CLI refuses it (not "the last one wins").
  EXPECT_EQ(error_of({"--perf-pass", "both", "--perf-pass", "forward"}), "option --perf-pass is given twice");
  EXPECT_EQ(error_of({"--lang", "en", "--step", "2", "--lang", "zh"}), "option --lang is given twice");
}

// The flags' values and combinations are refused in the catalogue's words (core/messages.h), so
// that --lang zh prints them in Chinese as attnlab does; only the options' syntax (an unknown
// option, a missing value, an option given twice) stays in English, as README says.
TEST(Options, TheFlagsRefusalsAreCatalogued) {
  const std::vector<std::vector<std::string>> bad = {
      {"--step", "7"}, {"--pool", "x"}, {"--stages", "x"}, {"--view", "x"}, {"--ui-scale", "9"},
      {"--size", "big"}, {"--size", "640x480"}, {"--random", "0"}, {"--export-dir", "/nonexistent/x"},
      {"--backend", "tpu"}, {"--bundle", "d", "--random", "8"}, {"--q", "q.csv", "--random", "8"},
      {"--bundle", "d", "--heads", "2"}, {"--bundle", "d", "--head", "-1"}, {"--bundle", "d", "--mask", "causal"},
      {"--layer", "1"}, {"--heads", "2"}, {"--head", "1"}, {"--random", "8", "--heads", "2", "--head", "5"},
      {"--mask", "m.csv"}, {"--tokens", "a,b"}, {"--pattern", "sink"}, {"--fuzz-seed", "1"},
      {"--bench-decode", "1", "--bench-redraw"}, {"--fuzz-events", "1", "--bench-redraw"}, {"--dk", "8"},
      {"--view", "decode", "--cache", "4096", "--cache-dim", "7", "--rope"},
      {"--view", "decode", "--cache", "4096", "--rope"}, {"--score-mod", "alibi:1"}, {"--walk-pass", "x"},
      {"--tile", "0"}, {"--back-step", "x"}, {"--loss", "mse"}, {"--loss", "sum", "--dout-seed", "1"},
      {"--chain-sub", "x"}, {"--chain-rope", "x"}, {"--view", "perf", "--perf-n", "512..256"},
      {"--perf-chart", "x"}, {"--perf-max-seconds", "0"},
      {"--view", "perf", "--backend", "tpu"}, {"--view", "perf", "--perf-variant", "decode"},
      {"--view", "perf", "--perf-precision", "fp64"}, {"--view", "perf", "--perf-mask", "x"},
      {"--query", "1", "--queries", "0,1"}, {"--repeat", "3"}, {"--cache-heads", "8/3"}, {"--cache", "1048576", "--cache-dim", "512"}, {"--cache", "16", "--cache-dim", "0"}};
  std::vector<std::function<void()>> refused;
  for (const std::vector<std::string>& args : bad) refused.push_back([args] { parse_viewer_args(args); });
  // --perf-output, checked when the perf view opens, and the Export field's path
  for (const char* path : {"/nonexistent/p.csv", "/"}) refused.push_back([path] { check_writable(path); });
  for (std::size_t i = 0; i < refused.size(); ++i) {
    const std::string joined = i < bad.size() ? bad[i][0] + " " + bad[i].back() : "check_writable";
    try {
      refused[i]();
      ADD_FAILURE() << "accepted: " << joined;
    } catch (const InputError& e) {
      const Message m = message_of(e);
      EXPECT_NE(m.id, Msg::None) << joined << "-> " << e.what();
      const std::string zh = m.text(Lang::Zh);
      EXPECT_TRUE(std::any_of(zh.begin(), zh.end(), [](char c) { return static_cast<unsigned char>(c) >= 0xE4; }))
          << joined << "-> " << zh;
      for (const char* english : {" must ", " got ", " or ", " takes "})
        EXPECT_EQ(zh.find(english), std::string::npos) << joined << "-> " << zh;
    }
  }
  // The syntax stays in English.
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"--bogus"}, {"--step"}, {"--step", "1", "--step", "2"}}) {
    try {
      parse_viewer_args(args);
      ADD_FAILURE() << "accepted: " << args[0];
    } catch (const InputError& e) {
      EXPECT_EQ(e.id, Msg::None) << e.what();
    }
  }
}

TEST(Options, TemperatureMessageIsTheCoreOne) {
  for (const char* bad : {"0", "-1", "inf", "nan"}) {
    const std::string core =
        test::message_of<InputError>([&] { validate_temperature(std::strtod(bad, nullptr)); });
    ASSERT_FALSE(core.empty()) << bad;
    EXPECT_EQ(error_of({"--temperature", bad}), core);
  }
}

TEST(Strings, EveryEntryExistsInBothLanguages) {
  for (int i = 0; i < static_cast<int>(S::Count_); ++i) {
    EXPECT_STRNE(tr(Lang::En, static_cast<S>(i)), "") << i;
    EXPECT_STRNE(tr(Lang::Zh, static_cast<S>(i)), "") << i;
  }
  EXPECT_STREQ(tr(Lang::Zh, S::StepOf), "步骤 %d / 4");
  EXPECT_STREQ(tr(Lang::En, S::StepOf), "Step %d / 4");
  EXPECT_EQ(science_notes(Lang::Zh).size(), science_notes(Lang::En).size());
  EXPECT_EQ(science_notes(Lang::Zh).size(), 7u);
}

TEST(Strings, Utf8Codepoints) {
  EXPECT_EQ(utf8_codepoints("上下文a√"), (std::vector<unsigned>{0x4E0A, 0x4E0B, 0x6587, 'a', 0x221A}));
  EXPECT_EQ(utf8_codepoints(std::string("\xff" "b")), (std::vector<unsigned>{'b'}));
}

TEST(Speech, PathLookup) {
  EXPECT_TRUE(find_on_path("sh"));
  EXPECT_FALSE(find_on_path("attnlab-no-such-tool-xyz"));
}

TEST(Keymap, ShiftArrowsMoveTheSelectedKeyAndEscIsDocumentedAsClosingTheHelp) {
  EXPECT_EQ(action_for_key(Key::Left, true), Action::KeyPrev);
  EXPECT_EQ(action_for_key(Key::Right, true), Action::KeyNext);
  EXPECT_EQ(action_for_key(Key::Left, false), Action::StepPrev);
  EXPECT_EQ(action_for_key(Key::Space, true), Action::TogglePlay);
  bool esc = false, shift = false;
  for (const auto& [k, d] : key_help(Lang::En, chain_step_keys_help(Lang::En))) {
    if (k == "Esc") esc = d.find("close an open list or this key help") != std::string::npos;
    if (k.find("Shift") != std::string::npos) shift = true;
  }
  EXPECT_TRUE(esc);
  EXPECT_TRUE(shift);
}

TEST(CellLabel, SignificantDigitsWhereTwoDecimalsWouldShowZero) {
  EXPECT_EQ(cell_label(0.000134f), "1.3e-4");
  EXPECT_EQ(cell_label(-0.0042f), "-4.2e-3");
  EXPECT_EQ(cell_label(0.0f), "0.00");  // "0" alone is the chain's mark of a masked weight
  EXPECT_EQ(cell_label(-0.0f), "0.00");
  EXPECT_EQ(cell_label(0.0f, true), "0");
  EXPECT_EQ(cell_label(0.26f), "0.26");
  EXPECT_EQ(cell_label(1.84f), "1.84");
  EXPECT_EQ(cell_label(0.005f), "5.0e-3") << "0.005f lies below 0.005: two decimals would say 0.00";
  EXPECT_EQ(cell_label(0.0051f), "0.01");
}

TEST(CellLabel, LegendNumbersShareOneFormat) {
  EXPECT_EQ(legend_labels({0.09, 1.0}, false), (std::array<std::string, 3>{"1.000", "0.545", "0.090"}));
  EXPECT_EQ(legend_labels({-3.5, 12.75}, false), (std::array<std::string, 3>{"12.8", "4.6", "-3.5"}));
  EXPECT_EQ(legend_labels({1e-8, 1e-2}, true)[0], "1.00e-02");
  EXPECT_EQ(legend_labels({0, 2e6}, false)[0], "2.000e+06");
}

TEST(Presentation, UiScaleKeysFlagsAndFontSize) {
  EXPECT_EQ(action_for_key(Key::Plus, false, true), Action::UiScaleUp);
  EXPECT_EQ(action_for_key(Key::Minus, false, true), Action::UiScaleDown);
  EXPECT_EQ(action_for_key(Key::Zero, false, true), Action::UiScaleReset);
  EXPECT_EQ(action_for_key(Key::Plus, false, false), std::nullopt) << "plain + does nothing";
  EXPECT_EQ(action_for_key(Key::F11, false, false), Action::ToggleFullscreen);
  EXPECT_EQ(font_px_for(800, 1.0f), 18.0f);
  EXPECT_EQ(font_px_for(1080, 1.0f), 22.0f);
  EXPECT_EQ(font_px_for(600, 1.0f), 15.0f);
  EXPECT_EQ(font_px_for(1440, 1.0f), 29.0f) << "above 1080 in proportion (more in test_fit.cpp)";
  EXPECT_EQ(font_px_for(1080, 1.5f), 33.0f);
  EXPECT_EQ(font_px_for(800, 100.0f), font_px_for(800, kMaxUiScale)) << "clamped to the largest scale";
  float s = 1;
  for (int i = 0; i < 40; ++i) s = step_ui_scale(s, true);
  EXPECT_FLOAT_EQ(s, kMaxUiScale);
  for (int i = 0; i < 40; ++i) s = step_ui_scale(s, false);
  EXPECT_FLOAT_EQ(s, kMinUiScale);
  const ViewerOptions o = parse_viewer_args({"--ui-scale", "1.5", "--fullscreen"});
  EXPECT_FLOAT_EQ(o.ui_scale, 1.5f);
  EXPECT_TRUE(o.fullscreen);
  for (const char* bad : {"0", "4", "abc", "1e0", "-1", "", "0.59", "3.01"}) {
    EXPECT_THROW(parse_viewer_args({"--ui-scale", bad}), InputError) << bad;
  }
  // The range's ends as its refusal names them (0.6 as a double is below the float kMinUiScale).
  EXPECT_FLOAT_EQ(parse_viewer_args({"--ui-scale", "0.6"}).ui_scale, kMinUiScale);
  EXPECT_FLOAT_EQ(parse_viewer_args({"--ui-scale", "0.60"}).ui_scale, kMinUiScale);
  EXPECT_FLOAT_EQ(parse_viewer_args({"--ui-scale", "3"}).ui_scale, kMaxUiScale);
}

TEST(CellLabel, OneFormatPerMatrixWhenValuesReachAMillion) {
  EXPECT_TRUE(needs_scientific(-3, 1.06e6));
  EXPECT_TRUE(needs_scientific(-2e6, 5));
  EXPECT_FALSE(needs_scientific(-3, 316099.28));
  EXPECT_EQ(cell_label(316099.28f, true), "3.16e+05");
  EXPECT_EQ(cell_label(1.06e6f, true), "1.06e+06");
  EXPECT_EQ(cell_label(316099.28f, false), "316099.28");
}
