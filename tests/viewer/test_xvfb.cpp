// The real window under Xvfb: start attnlab-view with --state-dump, press Right, Down and m with
// xdotool (real X key events through XTEST), and read the state back: step 2, query 3 (below the
// default 上下文), causal mask; then Escape closes it cleanly (exit 0). Skipped, visibly, when
// xvfb-run or xdotool is not installed.
#include "tests/test_util.h"
#include "viewer/app/speech.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>

namespace fs = std::filesystem;
using attnlab::viewer::find_on_path;

// Runs `actions` (shell lines; $wid is the viewer's window) under a fresh Xvfb against the real
// viewer, started with `flags` and --state-dump `dump`: the script waits for the first dump (the
// window is up), runs the actions, then quits with Escape and prints viewer_exit=<status>. The
// viewer has its own timeout, so one that hangs does not outlive a failed test.
//
// The actions never sleep for a guessed time: `wait_for EXPR` waits until the state dump
// satisfies the Python expression EXPR over the dump `j` (a generous bound, 60 s, so that a busy
// machine only makes it slower; a timeout says so on stderr and the test's checks then fail with
// it), and `move X Y` moves the pointer and waits until a frame has seen it there (mouse in the
// dump; the warp is followed by a relative move there and back, since SDL refreshes its global
// pointer position from XInput2 motion, which a warp alone does not send). Every key and button is pressed and released as separate events after the state showed
// the previous one: a press never shares a frame with what it depends on. `click` presses the left
// button, waits until a frame has seen it down (mouse.down in the dump), then releases it and waits
// again: ImGui 1.86 drops a click whose press and release land in one frame, which a busy machine
// made happen now and then. SDL counts
// double-clicks itself (SDL_MOUSE_DOUBLE_CLICK_TIME, raised here so that two clicks read in one
// slow frame or in two stay one double-click).
attnlab::test::BinaryRun run_under_xvfb(const fs::path& dir, const std::string& flags,
                                        const fs::path& dump, const std::string& actions) {
  const fs::path script = dir / "actions.sh";
  {
    std::ofstream sh(script);
    sh << "dump='" << dump.string() << "'\n"
       << "wait_for() {\n"
          "  python3 - \"$dump\" \"$1\" <<'PY'\n"
          "import json, sys, time\n"
          "path, expr = sys.argv[1], sys.argv[2]\n"
          "end = time.time() + 60\n"
          "while True:\n"
          "    try:\n"
          "        with open(path) as f: j = json.load(f)\n"
          "        if eval(expr): sys.exit(0)\n"
          "    except (OSError, ValueError, KeyError, TypeError): pass\n"
          "    if time.time() > end:\n"
          "        print('wait_for timed out: ' + expr, file=sys.stderr); sys.exit(1)\n"
          "    time.sleep(0.03)\n"
          "PY\n"
          "}\n"
       << "move() { xdotool mousemove --window \"$wid\" \"$1\" \"$2\" mousemove_relative 1 0 mousemove_relative -- -1 0; "
          "wait_for \"abs(j['mouse']['x']-($1))<1.5 and abs(j['mouse']['y']-($2))<1.5\"; }\n"
       << "press() { xdotool keydown \"$1\"; xdotool keyup \"$1\"; }\n"
       << "click() { xdotool mousedown 1; wait_for \"j['mouse']['down']\"; xdotool mouseup 1; "
          "wait_for \"not j['mouse']['down']\"; }\n"
       << "export SDL_MOUSE_DOUBLE_CLICK_TIME=5000\n"
       << "timeout -s KILL 170 '" << attnlab::test::view_binary() << "' " << flags << " --state-dump \"$dump\" &\n"
       << "pid=$!\n"
       << "wait_for 'True'\n"
       << "wid=$(xdotool search --sync --name attnlab | head -n 1)\n"
       << "xdotool windowfocus --sync \"$wid\"\n"
       << actions
       << "xdotool windowfocus --sync \"$wid\"\n"
       << "press Escape\n"
       << "wait $pid\n"
       << "echo viewer_exit=$?\n";
  }
  return attnlab::test::run_binary(
      "timeout", {"180", "xvfb-run", "-a", "-s", "-screen 0 1280x800x24", "sh", script.string()},
      "-u SDL_VIDEODRIVER");
}

// A shell line setting $cx and $cy to the screen point at fractions (fx, fy) of the plot whose
// geometry the state dump holds (python3 reads it); fx and fy are Python expressions of the
// plot's rows and cols (j['rows'], j['cols']).
std::string plot_point(const std::string& fx, const std::string& fy) {
  return "eval $(python3 -c \"import json;j=json.load(open('$dump'))['heatmap'];print('cx=%d cy=%d' % "
         "(j['x']+j['w']*(" + fx + "), j['y']+j['h']*(" + fy + ")))\")\n";
}

// A shell line copying the state dump to `to` (what the test reads back).
std::string copy_dump(const fs::path& to) { return "cp \"$dump\" '" + to.string() + "'\n"; }

// A state dump the actions copied; a failure (with the run's output) when it is missing.
nlohmann::json read_dump(const fs::path& p, const std::string& out) {
  std::ifstream in(p);
  EXPECT_TRUE(in) << p << out;
  return in ? nlohmann::json::parse(in) : nlohmann::json{};
}

#define ATTNLAB_REQUIRE_XVFB()                                                                   \
  do {                                                                                           \
    if (!find_on_path("xvfb-run")) GTEST_SKIP() << "xvfb-run not installed (apt install xvfb xauth)"; \
    if (!find_on_path("xdotool")) GTEST_SKIP() << "xdotool not installed (apt install xdotool)"; \
  } while (0)

TEST(Xvfb, RealKeyPressesChangeStepQueryAndMask) {
  ATTNLAB_REQUIRE_XVFB();
  const attnlab::test::TempDir tmp("attnlab-view-xvfb");
  const fs::path dump = tmp.path() / "state.json", during = tmp.path() / "during.json";
  // Keys to the focused window; the dump is copied while the viewer still runs.
  const attnlab::test::BinaryRun r = run_under_xvfb(
      tmp.path(), "--lang en --size 1280x800", dump,
      "press Right; wait_for \"j['step'] == 2\"\n"
      "press Down; wait_for \"j['query'] == 3\"\n"
      "press m; wait_for \"j['mask'] == 'causal'\"\n" +
          copy_dump(during));
  const std::string out = r.out + r.err;
  ASSERT_EQ(r.code, 0) << out;
  EXPECT_NE(out.find("viewer_exit=0"), std::string::npos) << out;
  std::ifstream in(during);
  ASSERT_TRUE(in) << "no state dump: " << out;
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["step"], 2) << out;
  EXPECT_EQ(j["query"], 3);
  EXPECT_EQ(j["query_token"], "分配");
  EXPECT_EQ(j["mask"], "causal");
  // The dump written on exit agrees.
  std::ifstream fin(dump);
  const auto f = nlohmann::json::parse(fin);
  EXPECT_EQ(f["step"], 2);
  EXPECT_EQ(f["mask"], "causal");
}

// Without a window manager nothing enforces the window's minimum size: squeezed to 300 x 150 and
// 1280 x 180 the heatmap has no room at all. The viewer used to spin for ever in its label loops
// there; it must keep drawing (a note instead of the plot) and still quit with Escape.
TEST(Xvfb, AWindowSqueezedBelowItsMinimumKeepsRunning) {
  ATTNLAB_REQUIRE_XVFB();
  const attnlab::test::TempDir tmp("attnlab-view-xvfb");
  const attnlab::test::BinaryRun r = run_under_xvfb(
      tmp.path(), "--lang en", tmp.path() / "state.json",
      "for size in '300 150' '1280 180' '380 800' '1280 800'; do\n"
      "  set -- $size; xdotool windowsize \"$wid\" $1 $2\n"
      "  wait_for \"j['window']['w'] == $1 and j['window']['h'] == $2\"\n"
      "done\n");
  const std::string out = r.out + r.err;
  EXPECT_EQ(r.code, 0) << out;
  EXPECT_NE(out.find("viewer_exit=0"), std::string::npos) << out;
}

// F11 twice under a server without a window manager (which sends no size event on the way
// back): the window, the size SDL reports and the layout drawn in it return to 1024 x 640; the
// centre's plot lies inside the window again.
TEST(Xvfb, LeavingFullscreenLaysOutForTheWindowSizeAgain) {
  ATTNLAB_REQUIRE_XVFB();
  const attnlab::test::TempDir tmp("attnlab-view-xvfb");
  const fs::path full = tmp.path() / "full.json", back = tmp.path() / "back.json";
  const attnlab::test::BinaryRun r = run_under_xvfb(
      tmp.path(), "--lang en --size 1024x640", tmp.path() / "state.json",
      "press F11; wait_for \"j['window']['w'] == 1280 and j['window']['h'] == 800\"\n" + copy_dump(full) +
          "press F11; wait_for \"j['window']['w'] == 1024\"\n" + copy_dump(back) +
          "xdotool getwindowgeometry \"$wid\"\n");
  const std::string out = r.out + r.err;
  ASSERT_EQ(r.code, 0) << out;
  EXPECT_NE(out.find("Geometry: 1024x640"), std::string::npos) << out;
  EXPECT_EQ(read_dump(full, out)["window"]["w"], 1280) << out;
  const auto j = read_dump(back, out);
  EXPECT_EQ(j["window"]["w"], 1024) << out;
  EXPECT_EQ(j["window"]["h"], 640) << out;
  const auto& g = j["heatmap"];
  EXPECT_LE(g["x"].get<double>() + g["w"].get<double>(), 1024) << out;
  EXPECT_LE(g["y"].get<double>() + g["h"].get<double>(), 640) << out;
}

// The presenter's keys through real X events: F1 opens the help and Esc closes it without
// quitting; Ctrl + enlarges the UI (the font is rebuilt larger); a click on a cell selects its
// query row and key. The final Escape (from run_under_xvfb) then quits.
TEST(Xvfb, HelpEscUiScaleAndClickSelection) {
  ATTNLAB_REQUIRE_XVFB();
  const attnlab::test::TempDir tmp("attnlab-view-xvfb3");
  const fs::path dump = tmp.path() / "state.json", after_esc = tmp.path() / "esc.json",
                 after = tmp.path() / "after.json";
  // The cell of row 4, column 1: from the plot's geometry in the dump (python3 reads it).
  const attnlab::test::BinaryRun r = run_under_xvfb(
      tmp.path(), "--lang en --size 1280x800", dump,
      "press F1; wait_for \"j['help_open']\"\n"
      "press Escape; wait_for \"not j['help_open']\"\n" +
          copy_dump(after_esc) + plot_point("1.5/j['cols']", "4.5/j['rows']") +
          "move $cx $cy\n"
          "click; wait_for \"j['query'] == 4 and j['key_sel'] == 1\"\n"
          "xdotool keydown ctrl; xdotool keydown plus; xdotool keyup plus; xdotool keyup ctrl\n"
          "wait_for \"j['ui_scale'] > 1.05\"\n"
          "fp=$(python3 -c \"import json;print(json.load(open('" + after_esc.string() + "'))['font_px'])\")\n"
          "wait_for \"j['font_px'] > $fp\"\n" +
          copy_dump(after));
  const std::string out = r.out + r.err;
  ASSERT_EQ(r.code, 0) << out;
  EXPECT_NE(out.find("viewer_exit=0"), std::string::npos) << out;
  std::ifstream e(after_esc);
  ASSERT_TRUE(e) << out;
  const auto je = nlohmann::json::parse(e);
  EXPECT_FALSE(je["help_open"]) << "Esc closed the help";
  std::ifstream a(after);
  ASSERT_TRUE(a) << out;
  const auto ja = nlohmann::json::parse(a);
  EXPECT_EQ(ja["query"], 4) << out;
  EXPECT_EQ(ja["key_sel"], 1) << out;
  EXPECT_GT(ja["ui_scale"].get<double>(), 1.05);
  EXPECT_GT(ja["font_px"].get<double>(), je["font_px"].get<double>());
}

// At UI scale 2 step 1's RoPE chooser is one combo box (radio buttons on three lines had taken the
// plot's height): a click opens it, a click on its fifth entry shows K. Both from the rectangles in
// the dump (chain.chooser).
TEST(Xvfb, TheRopeChoosersComboAtALargeUiScale) {
  ATTNLAB_REQUIRE_XVFB();
  const attnlab::test::TempDir tmp("attnlab-view-xvfb-combo");
  const fs::path dump = tmp.path() / "state.json", after = tmp.path() / "after.json";
  const std::string at = "eval $(python3 -c \"import json;c=json.load(open('$dump'))['chain']['chooser'];"
                         "r=c['items'][4] if c['items'] else c['rect'];print('cx=%d cy=%d' % (r[0]+r[2]/2, r[1]+r[3]/2))\")\n";
  const attnlab::test::BinaryRun r = run_under_xvfb(
      tmp.path(), "--lang en --size 1920x1080 --ui-scale 2 --random 16 --dk 8 --dv 8 --rope --chain-rope q", dump,
      "wait_for \"j['chain']['chooser']['rect'][2] > 0 and j['chain']['rope'] == 'q'\"\n" + at +
          "move $cx $cy\nclick; wait_for \"len(j['chain']['chooser']['items']) == 7\"\n" + at +
          "move $cx $cy\nclick; wait_for \"j['chain']['rope'] == 'k'\"\n" + copy_dump(after));
  const std::string out = r.out + r.err;
  ASSERT_EQ(r.code, 0) << out;
  EXPECT_NE(out.find("viewer_exit=0"), std::string::npos) << out;
  const nlohmann::json j = read_dump(after, out);
  EXPECT_EQ(j["chain"]["rope"], "k") << out;
  EXPECT_TRUE(j["chain"]["chooser"]["items"].empty()) << "closed after the choice";
}

// Shift + ← / → move the selected key where the view draws it (the chain's crosshair) and nothing
// elsewhere: in the walk view they used to move it unseen. Down (the query) after them shows that
// the frame has read them.
TEST(Xvfb, ShiftArrowsMoveTheSelectedKeyOnlyInTheChainView) {
  ATTNLAB_REQUIRE_XVFB();
  const std::string shift_right =
      "xdotool keydown shift; xdotool keydown Right; xdotool keyup Right; xdotool keyup shift\n";
  for (const std::string view : {"walk", "chain"}) {
    const attnlab::test::TempDir tmp("attnlab-view-xvfb-shift");
    const fs::path dump = tmp.path() / "state.json", after = tmp.path() / "after.json";
    const attnlab::test::BinaryRun r = run_under_xvfb(
        tmp.path(), "--lang en --size 1280x800 --view " + view, dump,
        shift_right + "press Down; wait_for \"j['query'] == 3\"\n" + copy_dump(after));
    const std::string out = r.out + r.err;
    ASSERT_EQ(r.code, 0) << out;
    EXPECT_NE(out.find("viewer_exit=0"), std::string::npos) << out;
    std::ifstream a(after);
    ASSERT_TRUE(a) << out;
    const auto ja = nlohmann::json::parse(a);
    // The chain: from the query row (2) one key right; the walk: no key selected.
    EXPECT_EQ(ja["key_sel"], view == "chain" ? 3 : -1) << view << "\n" << out;
    EXPECT_EQ(ja["step"], 1) << view << ": Shift + → is no step";
    if (view == "walk") EXPECT_EQ(ja["walk"]["cursor"], 2) << "nor a tile of the walk";
  }
}

// Shift + click adds rows to the queries compared and takes one out again; a plain click then
// selects one query.
TEST(Xvfb, ShiftClickSelectsSeveralQueries) {
  ATTNLAB_REQUIRE_XVFB();
  const attnlab::test::TempDir tmp("attnlab-view-xvfb4");
  const fs::path dump = tmp.path() / "state.json", after_add = tmp.path() / "add.json",
                 after_remove = tmp.path() / "remove.json", after_plain = tmp.path() / "plain.json";
  // The centres of rows 0, 1 and 4 in column 2, from the plot's geometry in the dump.
  const std::string where =
      "eval $(python3 -c \"import json;j=json.load(open('$dump'))['heatmap'];x=j['x']+j['w']*2.5/j['cols'];"
      "y=lambda r:j['y']+j['h']*(r+0.5)/j['rows'];print('cx=%d y0=%d y1=%d y4=%d' % (x,y(0),y(1),y(4)))\")\n";
  // Shift stays down until the click's effect shows: a release read in the click's frame would
  // make it a plain click.
  const auto shift_click = [](const char* y, const std::string& queries) {
    return std::string("move $cx $") + y + "\nxdotool keydown shift; click\n" +
           "wait_for \"j['queries'] == " + queries + "\"; xdotool keyup shift\n";
  };
  const attnlab::test::BinaryRun r = run_under_xvfb(
      tmp.path(), "--lang en --size 1280x800 --step 3", dump,
      where + shift_click("y0", "[2, 0]") + shift_click("y4", "[2, 0, 4]") + shift_click("y1", "[2, 0, 1, 4]") +
          copy_dump(after_add) + shift_click("y4", "[2, 0, 1]") + copy_dump(after_remove) +
          "move $cx $y1\nclick; wait_for \"j['queries'] == [1]\"\n" +
          copy_dump(after_plain));
  const std::string out = r.out + r.err;
  ASSERT_EQ(r.code, 0) << out;
  EXPECT_NE(out.find("viewer_exit=0"), std::string::npos) << out;
  const auto read = [&](const fs::path& p) { return read_dump(p, out); };
  // The demo selects 上下文 (row 2); rows 0, 4 and 1 join it, in ascending order after it.
  EXPECT_EQ(read(after_add)["queries"], nlohmann::json::array({2, 0, 1, 4})) << out;
  EXPECT_EQ(read(after_remove)["queries"], nlohmann::json::array({2, 0, 1})) << out;
  const auto plain = read(after_plain);
  EXPECT_EQ(plain["queries"], nlohmann::json::array({1})) << out;
  EXPECT_EQ(plain["query"], 1) << out;
}

// The heads view under real X events: a click on the third thumbnail (its place from the first
// state dump) opens head 2 in the chain view, and nothing else: the release of that click lands on
// the chain's heatmap, which must not take it for a click of its own (the query stays, no key).
TEST(Xvfb, ClickingAThumbnailOpensItsHeadInTheChainView) {
  ATTNLAB_REQUIRE_XVFB();
  const attnlab::test::TempDir tmp("attnlab-view-xvfb4");
  const fs::path dump = tmp.path() / "state.json", before = tmp.path() / "before.json",
                 after = tmp.path() / "after.json";
  const std::string click =
      "eval $(python3 -c \"import json;g=json.load(open('$dump'))['heads_grid'];h=2;print('cx=%d cy=%d' % "
      "(g['x']+(h%g['cols'])*g['step_x']+g['side']/2, g['y']+(h//g['cols'])*g['step_y']+g['side']/2))\")\n";
  const attnlab::test::BinaryRun r = run_under_xvfb(
      tmp.path(), "--lang en --size 1280x800 --backend cpu --view heads --random 64 --heads 4 --dk 16", dump,
      "wait_for \"j['heads_grid']['done'] == 4\"\n" + click + "move $cx $cy\n" + copy_dump(before) +
          "click; wait_for \"j['view'] == 'chain'\"\n" +
          copy_dump(after));
  const std::string out = r.out + r.err;
  ASSERT_EQ(r.code, 0) << out;
  EXPECT_NE(out.find("viewer_exit=0"), std::string::npos) << out;
  std::ifstream a(after);
  ASSERT_TRUE(a) << out;
  const auto j = nlohmann::json::parse(a);
  EXPECT_EQ(j["view"], "chain") << out;
  EXPECT_EQ(j["head"], 2) << out;
  EXPECT_EQ(j["heads"], 4);
  const auto b = read_dump(before, out);
  EXPECT_EQ(j["query"], b["query"]) << out;
  EXPECT_EQ(j["queries"], b["queries"]) << out;
  EXPECT_EQ(j["key_sel"], -1) << out;
}

// The precision view's map under real X events: the wheel over the map zooms in (fewer rows
// visible), a double-click shows the whole map again.
TEST(Xvfb, WheelZoomsThePrecisionMapAndADoubleClickResetsIt) {
  ATTNLAB_REQUIRE_XVFB();
  const attnlab::test::TempDir tmp("attnlab-view-xvfb6");
  const fs::path dump = tmp.path() / "state.json", zoomed = tmp.path() / "zoomed.json",
                 reset = tmp.path() / "reset.json";
  const attnlab::test::BinaryRun r = run_under_xvfb(
      tmp.path(), "--lang en --size 1280x800 --backend cpu --random 64 --dk 8 --dv 8 --view precision --step 3", dump,
      "wait_for \"j['precision_view']['status'] == 'ok'\"\n" + plot_point("0.5", "0.5") +
          "move $cx $cy\n"
          "for i in 1 2 3 4 5; do xdotool click 4; done; wait_for \"j['heatmap']['vis_rows'] < 40\"\n" +
          copy_dump(zoomed) +
          "xdotool click --repeat 2 --delay 80 1; wait_for \"j['heatmap']['vis_rows'] == 64\"\n" +
          copy_dump(reset));
  const std::string out = r.out + r.err;
  ASSERT_EQ(r.code, 0) << out;
  EXPECT_NE(out.find("viewer_exit=0"), std::string::npos) << out;
  const auto z = read_dump(zoomed, out)["heatmap"];
  EXPECT_EQ(z["rows"], 64) << out;
  EXPECT_LT(z["vis_rows"].get<double>(), 40.0) << z.dump() << out;
  EXPECT_DOUBLE_EQ(read_dump(reset, out)["heatmap"]["vis_rows"].get<double>(), 64.0) << out;
}
