// Headless screenshots of the real attnlab-view binary (SDL_VIDEODRIVER=dummy, software renderer):
// the PNG is read back and its pixels checked — the orange frame sits on the selected query row,
// masked cells are grey hatching (not a colour of the scale) under the causal mask and nowhere
// without it, the picture changes between steps, a 4096-token causal run pools the mask into the
// upper triangle, the heads view frames the head shown among thumbnails that differ by head — and
// bad flags give one "error: ..." line and exit 2. The precision view (fp32 at T = 1, bf16 at
// T = 0.1) and the diff view (temperature=0.5, variant=fused, mask=causal) at two settings each,
// and bad --diff / --precision values.
#include "core/backend.h"
#include "core/messages.h"
#include "core/problem.h"
#include "heads_test_bundle.h"
#include "tests/test_util.h"
#include "viewer/draw/png_io.h"
#include "engine/registry.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

using namespace attnlab;
using namespace attnlab::viewer;
namespace fs = std::filesystem;

namespace {

// The screenshots of this process (one test under ctest), removed when it exits.
const test::TempDir& work_dir() {
  static const test::TempDir dir("attnlab-view-shots");
  return dir;
}

using ViewRun = test::BinaryRun;

// Runs attnlab-view with `args` under `env_args` (what `env` gets before the binary; the default:
// the dummy video driver) and LANG=C.UTF-8, stopped after 60 s.
ViewRun run_view(const std::vector<std::string>& args,
                 const std::string& env_args = "SDL_VIDEODRIVER=dummy") {
  std::vector<std::string> timed = {"60", test::view_binary()};
  timed.insert(timed.end(), args.begin(), args.end());
  return test::run_binary("timeout", timed, env_args + " LANG=C.UTF-8");
}

struct Shot {
  Image img;
  nlohmann::json state;
  // Heatmap geometry from the state dump.
  float x = 0, y = 0, w = 0, h = 0, cell_w = 0, cell_h = 0;
};

Shot shoot(const std::string& name, std::vector<std::string> args) {
  const std::string png = work_dir().file(name + ".png"), json = work_dir().file(name + ".json");
  args.insert(args.begin(), {"--screenshot", png, "--state-dump", json});
  const ViewRun r = run_view(args);
  EXPECT_EQ(r.code, 0) << r.err;
  Shot s;
  s.img = read_png(png);
  std::ifstream in(json);
  s.state = nlohmann::json::parse(in);
  const auto& h = s.state["heatmap"];
  s.x = h["x"];
  s.y = h["y"];
  s.w = h["w"];
  s.h = h["h"];
  s.cell_w = h["cell_w"];
  s.cell_h = h["cell_h"];
  return s;
}

bool is_highlight(const std::uint8_t* p) { return p[0] >= 220 && std::abs(p[1] - 140) <= 45 && p[2] <= 70; }
bool is_grey(const std::uint8_t* p) {
  return std::max({p[0], p[1], p[2]}) - std::min({p[0], p[1], p[2]}) <= 6 && p[0] >= 40;
}

// Fraction of grey pixels in the top-left quarter of a cell (away from the centred value text).
double grey_fraction(const Shot& s, int row, int col) {
  int grey = 0, total = 0;
  const int x0 = static_cast<int>(s.x + col * s.cell_w + s.cell_w * 0.08f);
  const int y0 = static_cast<int>(s.y + row * s.cell_h + s.cell_h * 0.08f);
  for (int y = y0; y < y0 + static_cast<int>(s.cell_h * 0.25f); ++y) {
    for (int x = x0; x < x0 + static_cast<int>(s.cell_w * 0.25f); ++x) {
      grey += is_grey(s.img.at(x, y));
      ++total;
    }
  }
  return total ? static_cast<double>(grey) / total : 0;
}

// Pixel rows (y, in image pixels) that hold highlight colour in the plot's middle column, from 6 px
// above the plot to 6 px below it; callers compare them with the frame's expected edges.
std::vector<int> highlighted_rows(const Shot& s) {
  std::vector<int> rows;
  const int x = static_cast<int>(s.x + s.w / 2);
  for (int y = static_cast<int>(s.y) - 6; y < static_cast<int>(s.y + s.h) + 6; ++y) {
    if (!is_highlight(s.img.at(x, y))) continue;
    rows.push_back(y);
  }
  return rows;
}

}  // namespace

TEST(Screenshot, WritesAPngOfTheRequestedSize) {
  const Shot s = shoot("size", {"--size", "1920x1080", "--lang", "en"});
  EXPECT_EQ(s.img.width, 1920);
  EXPECT_EQ(s.img.height, 1080);
  EXPECT_EQ(s.state["window"]["w"], 1920);
  EXPECT_EQ(s.state["lang"], "en");
  EXPECT_GT(s.w, 300);
}

// The numeric tables open by default up to N = 8; an ImGui table holds at most 64 columns, so
// wider matrices (the default random d_k = 64, plus the token column) are drawn in pieces that fit
// the panel. This used to abort on ImGui's column assert.
TEST(Screenshot, TablesOfWideMatricesRenderInPieces) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--random", "8"}, {"--random", "8", "--dk", "256", "--dv", "100"},
        {"--random", "1", "--dk", "1", "--dv", "1"}, {"--random", "8", "--lang", "zh", "--step", "4"}}) {
    std::string name = "tables";
    for (const std::string& a : args) name += "_" + a;
    const Shot s = shoot(name, args);
    EXPECT_EQ(s.img.width, 1280) << name;
    EXPECT_EQ(s.state["N"], std::stoi(args[1])) << name;
  }
}

// ImGui aborts when a font file is not a font (or a collection lacks the index): such an
// ATTNLAB_FONT is skipped with one line on stderr, and the next candidate draws the picture.
TEST(Screenshot, AFileThatIsNotAFontIsSkipped) {
  const std::string not_font = work_dir().file("not-a-font.ttf");
  test::write_file(not_font, "this is text, not a TrueType font\n");
  const std::string png = work_dir().file("font.png");
  for (const std::string& spec : {not_font, not_font + ":3"}) {
    fs::remove(png);
    const ViewRun r = run_view({"--screenshot", png}, "SDL_VIDEODRIVER=dummy ATTNLAB_FONT=" + spec);
    EXPECT_EQ(r.code, 0) << spec << "\n" << r.err;
    EXPECT_NE(r.err.find("skipping font " + spec.substr(0, not_font.size())), std::string::npos) << r.err;
    EXPECT_GT(read_png(png).width, 0);
  }
}

TEST(Screenshot, HighlightFramesTheSelectedQueryRow) {
  for (int q : {0, 2, 4}) {
    const Shot s = shoot("query" + std::to_string(q), {"--step", "3", "--query", std::to_string(q)});
    EXPECT_EQ(s.state["query"], q);
    const std::vector<int> ys = highlighted_rows(s);
    ASSERT_FALSE(ys.empty()) << "no highlight pixels for query " << q;
    const float top = s.y + q * s.cell_h, bottom = s.y + (q + 1) * s.cell_h;
    const int lo = *std::min_element(ys.begin(), ys.end()), hi = *std::max_element(ys.begin(), ys.end());
    EXPECT_NEAR(lo, top - 3, 4) << "query " << q;
    EXPECT_NEAR(hi, bottom + 1, 4) << "query " << q;
  }
}

TEST(Screenshot, SeveralQueriesAreFramedInTheirColours) {
  // query_colour(1) and (2) of viewer/ui/kit.cpp: a light blue and a magenta frame.
  const auto is_blue = [](const std::uint8_t* p) { return p[0] <= 130 && p[1] >= 170 && p[2] >= 220; };
  const auto is_magenta = [](const std::uint8_t* p) { return p[0] >= 220 && p[1] <= 130 && p[2] >= 180; };
  const Shot s = shoot("queries", {"--step", "3", "--queries", "2,0,4"});
  EXPECT_EQ(s.state["query"], 2);
  EXPECT_EQ(s.state["queries"], nlohmann::json::array({2, 0, 4}));
  const int x = static_cast<int>(s.x + s.w / 2);
  const auto rows_of = [&](auto is) {
    std::vector<int> ys;
    for (int y = static_cast<int>(s.y) - 6; y < static_cast<int>(s.y + s.h) + 6; ++y)
      if (is(s.img.at(x, y))) ys.push_back(y);
    return ys;
  };
  const std::vector<int> blue = rows_of(is_blue), magenta = rows_of(is_magenta);
  ASSERT_FALSE(blue.empty());
  ASSERT_FALSE(magenta.empty());
  // Row 0's frame around the first row, row 4's around the last; the selected row stays orange.
  EXPECT_NEAR(blue.front(), s.y - 2, 3);
  EXPECT_NEAR(blue.back(), s.y + s.cell_h + 1, 3);
  EXPECT_NEAR(magenta.front(), s.y + 4 * s.cell_h - 2, 3);
  EXPECT_NEAR(magenta.back(), s.y + 5 * s.cell_h + 1, 3);
  const std::vector<int> orange = highlighted_rows(s);
  ASSERT_FALSE(orange.empty());
  EXPECT_NEAR(orange.front(), s.y + 2 * s.cell_h - 3, 4);
}

TEST(Screenshot, MaskedCellsAreGreyOnlyUnderTheCausalMask) {
  const Shot causal = shoot("causal", {"--step", "3", "--mask", "causal", "--query", "4"});
  const Shot none = shoot("nomask", {"--step", "3", "--mask", "none", "--query", "4"});
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 5; ++c) {
      const bool future = c > r;
      if (future) {
        EXPECT_GT(grey_fraction(causal, r, c), 0.9) << "masked cell " << r << "," << c;
      } else {
        EXPECT_LT(grey_fraction(causal, r, c), 0.05) << "unmasked cell " << r << "," << c;
      }
      EXPECT_LT(grey_fraction(none, r, c), 0.05) << "no mask, cell " << r << "," << c;
    }
  }
  // Raw scores (step 1) come before the mask: nothing is hatched there.
  const Shot raw = shoot("causal_step1", {"--step", "1", "--mask", "causal", "--query", "4"});
  EXPECT_LT(grey_fraction(raw, 0, 4), 0.05);
}

TEST(Screenshot, ThePictureChangesBetweenSteps) {
  const Shot a = shoot("step1", {"--step", "1"});
  const Shot b = shoot("step3", {"--step", "3"});
  ASSERT_EQ(a.x, b.x);
  long differ = 0, total = 0;
  for (int y = static_cast<int>(a.y); y < static_cast<int>(a.y + a.h); ++y) {
    for (int x = static_cast<int>(a.x); x < static_cast<int>(a.x + a.w); ++x) {
      differ += !std::equal(a.img.at(x, y), a.img.at(x, y) + 3, b.img.at(x, y));
      ++total;
    }
  }
  EXPECT_GT(differ, total / 4);
  EXPECT_EQ(a.state["step"], 1);
  EXPECT_EQ(b.state["step"], 3);
}

// The row's bar chart is over the keys. At steps 1-3 the plot's columns are the keys and the chart
// sits under them; at step 4 they are the output's dimensions, so the chart keeps the place and
// width of step 3's plot (its own key axis) rather than squeezing five keys under two columns.
TEST(Screenshot, TheRowChartAtStepFourSpansTheKeysNotTheOutputColumns) {
  for (const std::string lang : {"en", "zh"}) {
    const Shot s3 = shoot("chart3-" + lang, {"--step", "3", "--lang", lang, "--size", "1280x800"});
    const Shot s4 = shoot("chart4-" + lang, {"--step", "4", "--lang", lang, "--size", "1280x800"});
    const auto& c3 = s3.state["chain"]["row_chart"];
    const auto& c4 = s4.state["chain"]["row_chart"];
    EXPECT_FALSE(c3["own_axis"].get<bool>());
    EXPECT_FLOAT_EQ(c3["x"].get<float>(), s3.x);
    EXPECT_FLOAT_EQ(c3["w"].get<float>(), s3.w);
    EXPECT_TRUE(c4["own_axis"].get<bool>());
    EXPECT_EQ(c4["first"], 0);
    EXPECT_EQ(c4["end"], 5);
    EXPECT_FLOAT_EQ(c4["x"].get<float>(), s3.x) << lang;
    EXPECT_FLOAT_EQ(c4["w"].get<float>(), s3.w) << lang;
    ASSERT_LT(s4.w, s3.w * 0.6f) << "the output plot is two columns of five rows";
    // The last key's bar (权重, 25 % of 上下文's row) lies right of the output plot, under where
    // step 3's last column is: the chart's teal there.
    int teal = 0;
    for (int y = static_cast<int>(s4.y + s4.h); y < s4.img.height - 80; ++y)
      for (int x = static_cast<int>(s3.x + s3.w * 0.82f); x < static_cast<int>(s3.x + s3.w * 0.98f); ++x) {
        const std::uint8_t* p = s4.img.at(x, y);
        teal += std::abs(p[0] - 70) <= 6 && std::abs(p[1] - 170) <= 6 && std::abs(p[2] - 160) <= 6;
      }
    EXPECT_GT(teal, 100) << lang;
  }
}

TEST(Screenshot, FourThousandTokensPoolTheCausalMask) {
  const Shot s = shoot("r4096", {"--random", "4096", "--step", "3", "--mask", "causal", "--backend", "cpu",
                                "--lang", "en"});
  EXPECT_EQ(s.state["N"], 4096);
  EXPECT_TRUE(s.state["stages_kept"].get<bool>());
  EXPECT_LT(s.cell_w, 1.0f);  // pooled
  // Upper-right corner: all future keys (grey); lower-left: on the scale.
  int grey_ur = 0, grey_ll = 0, n = 0;
  for (int i = 0; i < 20; ++i) {
    for (int j = 0; j < 20; ++j) {
      grey_ur += is_grey(s.img.at(static_cast<int>(s.x + s.w * 0.8f + i), static_cast<int>(s.y + s.h * 0.1f + j)));
      grey_ll += is_grey(s.img.at(static_cast<int>(s.x + s.w * 0.1f + i), static_cast<int>(s.y + s.h * 0.8f + j)));
      ++n;
    }
  }
  EXPECT_EQ(grey_ur, n);
  EXPECT_EQ(grey_ll, 0);
  // The query row (2048, the middle) is framed.
  const std::vector<int> ys = highlighted_rows(s);
  ASSERT_FALSE(ys.empty());
  const float mid = s.y + s.h / 2;
  for (int y : ys) EXPECT_NEAR(y, mid, 6);
}

namespace {

// The heads view's thumbnail of head h, from the state dump's grid (image pixels).
struct ThumbBox {
  int x = 0, y = 0, side = 0;
};
ThumbBox thumb_box(const Shot& s, int h) {
  const auto& g = s.state["heads_grid"];
  const int cols = g["cols"];
  const float x = g["x"], y = g["y"], sx = g["step_x"], sy = g["step_y"], side = g["side"];
  return {static_cast<int>(x + (h % cols) * sx), static_cast<int>(y + (h / cols) * sy), static_cast<int>(side)};
}

// Highlight pixels on the frame drawn 3-5 px outside the thumbnail's edges (its top edge).
int frame_pixels(const Shot& s, const ThumbBox& b) {
  int n = 0;
  for (int x = b.x; x < b.x + b.side; ++x) n += is_highlight(s.img.at(x, b.y - 4));
  return n;
}

// Fraction of grey (masked) pixels in a square of the thumbnail, at fractions (fx, fy) of its side.
double thumb_grey(const Shot& s, const ThumbBox& b, double fx, double fy) {
  int grey = 0, total = 0;
  const int x0 = b.x + static_cast<int>(fx * b.side), y0 = b.y + static_cast<int>(fy * b.side), w = b.side / 8;
  for (int y = y0; y < y0 + w; ++y)
    for (int x = x0; x < x0 + w; ++x) {
      grey += is_grey(s.img.at(x, y));
      ++total;
    }
  return static_cast<double>(grey) / total;
}

long differing_pixels(const Shot& s, const ThumbBox& a, const ThumbBox& b) {
  long n = 0;
  for (int y = 0; y < a.side; ++y)
    for (int x = 0; x < a.side; ++x) n += !std::equal(s.img.at(a.x + x, a.y + y), s.img.at(a.x + x, a.y + y) + 3,
                                                      s.img.at(b.x + x, b.y + y));
  return n;
}

}  // namespace

// A bundle's causal, grouped-query call: four thumbnails, the one of --head framed and no other,
// the future keys hatched, the heads' pictures different (each its own pattern).
TEST(Screenshot, HeadsViewOfABundleFramesTheHeadShown) {
  const std::string dir = work_dir().file("bundle");
  fs::create_directories(dir);
  test::write_heads_bundle(dir);
  for (const std::string lang : {"en", "zh"}) {
    const Shot s = shoot("heads-bundle-" + lang, {"--bundle", dir, "--layer", "blocks.1.attn", "--head", "2", "--view",
                                                  "heads", "--lang", lang, "--backend", "cpu"});
    EXPECT_EQ(s.state["view"], "heads");
    EXPECT_EQ(s.state["layer"], 1);
    EXPECT_EQ(s.state["head"], 2);
    EXPECT_EQ(s.state["heads"], 4);
    EXPECT_EQ(s.state["mask"], "causal");
    EXPECT_EQ(s.state["mode"], "bundle");
    ASSERT_EQ(s.state["heads_grid"]["done"], 4) << "headless waits for every thumbnail";
    ASSERT_GT(s.state["heads_grid"]["side"].get<float>(), 64);
    for (int h = 0; h < 4; ++h) {
      const ThumbBox b = thumb_box(s, h);
      if (h == 2) EXPECT_GT(frame_pixels(s, b), b.side * 9 / 10) << lang << " head " << h;
      else EXPECT_EQ(frame_pixels(s, b), 0) << lang << " head " << h;
      EXPECT_GT(thumb_grey(s, b, 0.8, 0.05), 0.9) << "future keys, head " << h;
      EXPECT_LT(thumb_grey(s, b, 0.05, 0.8), 0.05) << "past keys, head " << h;
    }
    EXPECT_GT(differing_pixels(s, thumb_box(s, 0), thumb_box(s, 2)), 1000) << "sink and previous-token heads";
  }
}

// Random heads with a pattern: the pattern gives every head the same Q and K, so the thumbnails
// are the same picture (the view says so); the local window is the bright diagonal band.
TEST(Screenshot, HeadsViewOfRandomHeadsWithAPattern) {
  const Shot s = shoot("heads-random-pattern", {"--random", "128", "--heads", "4", "--dk", "16", "--pattern", "local:4",
                                                "--view", "heads", "--lang", "zh", "--backend", "cpu"});
  EXPECT_EQ(s.state["heads"], 4);
  EXPECT_EQ(s.state["head"], 0);
  ASSERT_EQ(s.state["heads_grid"]["done"], 4);
  const ThumbBox b0 = thumb_box(s, 0);
  EXPECT_GT(frame_pixels(s, b0), b0.side * 9 / 10);
  for (int h = 1; h < 4; ++h) EXPECT_EQ(differing_pixels(s, b0, thumb_box(s, h)), 0) << "head " << h;
  // Diagonal (bright, yellow end of viridis: high red) against the far corner (dark purple).
  const std::uint8_t* diag = s.img.at(b0.x + b0.side / 2, b0.y + b0.side / 2);
  const std::uint8_t* corner = s.img.at(b0.x + b0.side - 4, b0.y + 4);
  EXPECT_GT(diag[0], 150);
  EXPECT_LT(corner[0], 90);
}

TEST(Screenshot, BadFlagsGiveOneErrorLineAndExitTwo) {
  const std::vector<std::vector<std::string>> bad = {
      {"--step", "7"},     {"--temperature", "0"}, {"--bogus"},
      {"--mask", "diag"},  {"--size", "10x10"},    {"--query", "你好"},
      {"--random", "70000", "--backend", "cpu"}, {"--bundle", "/nonexistent-attnlab-bundle"},
      {"--random", "8", "--heads", "2", "--head", "2"}, {"--view", "head"}};
  // Your own inputs: a shape mismatch, a fully masked row, a mask file that holds other numbers.
  const std::string q = work_dir().file("q.csv"), k = work_dir().file("k.csv"), v = work_dir().file("v.csv");
  const std::string k4 = work_dir().file("k4.csv"), fm = work_dir().file("fm.csv"), m2 = work_dir().file("m2.csv");
  test::write_file(q, "1 0 0\n0 1 0\n");
  test::write_file(k, "1 0 0\n0 1 0\n");
  test::write_file(v, "1 2\n3 4\n");
  test::write_file(k4, "1 0 0 0\n0 1 0 0\n");
  test::write_file(fm, "0 0\n-inf -inf\n");
  test::write_file(m2, "0 0.5\n0 0\n");
  const std::vector<std::vector<std::string>> bad_inputs = {
      {"--q", q, "--k", k4, "--v", v}, {"--q", q, "--k", k, "--v", v, "--mask", fm},
      {"--q", q, "--k", k, "--v", v, "--mask", m2}, {"--q", q, "--k", k},
      {"--q", q, "--k", k, "--v", v, "--tokens", "a,b,c"}};
  auto all = bad;
  all.insert(all.end(), bad_inputs.begin(), bad_inputs.end());
  for (std::vector<std::string> args : all) {
    std::string what;
    for (const std::string& a : args) what += (what.empty() ? "" : " ") + a;
    args.insert(args.begin(), {"--screenshot", work_dir().file("bad.png")});
    const ViewRun r = run_view(args);
    EXPECT_EQ(r.code, 2) << what;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << what << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << what << ": " << r.err;
  }
  const std::string core = test::message_of<InputError>([] { validate_temperature(0); });
  EXPECT_EQ(run_view({"--temperature", "0"}).err, "error: " + core + "\n");
  // A catalogued refusal in --lang's language, as attnlab's: where the flag is read (the
  // temperature) and where the problem is made (RoPE on the demo's odd d_k, in the App).
  EXPECT_EQ(run_view({"--temperature", "0", "--lang", "zh"}).err,
            "error: " + render_message(Msg::TemperatureInvalid, {"0"}, Lang::Zh) + "\n");
  const ViewRun rope = run_view({"--screenshot", work_dir().file("bad.png"), "--rope", "--lang", "zh"});
  EXPECT_EQ(rope.code, 2);
  EXPECT_EQ(rope.err, "error: " + render_message(Msg::RopeOddDim, {"3"}, Lang::Zh) + "\n");
  if (!cuda_available()) {
    const ViewRun r = run_view({"--screenshot", "x.png", "--backend", "cuda"});
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.err.rfind("error: no CUDA device: ", 0), 0u) << r.err;
  }
}

// No display: the interactive viewer refuses at once (SDL would otherwise open an invisible
// offscreen window and run forever); --screenshot still renders, without the Wayland probe's noise.
TEST(Screenshot, WithoutADisplayOnlyHeadlessRuns) {
  const std::string no_display = "-u DISPLAY -u WAYLAND_DISPLAY -u SDL_VIDEODRIVER";
  ViewRun r = run_view({}, no_display);
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(r.err.rfind("error: no display", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  const std::string png = work_dir().file("nodisplay.png");
  r = run_view({"--screenshot", png}, no_display);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::exists(png));
  EXPECT_EQ(r.err.find("XDG_RUNTIME_DIR"), std::string::npos) << r.err;
  // A driver that shows no window, asked for explicitly, without --screenshot: refused too.
  r = run_view({}, "SDL_VIDEODRIVER=dummy");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("shows no window"), std::string::npos) << r.err;
  // A stale DISPLAY (no X server there): the picture renders with nothing on stderr, and the
  // window is refused in one line that names the display.
  const std::string stale = "-u WAYLAND_DISPLAY -u SDL_VIDEODRIVER DISPLAY=:97";
  r = run_view({"--screenshot", png}, stale);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err.find("error:"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("XDG_RUNTIME_DIR"), std::string::npos) << r.err;
  r = run_view({}, stale);
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(r.err.rfind("error: cannot open the X display ':97'", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST(Screenshot, HelpExitsZero) {
  const ViewRun r = run_view({"--help"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("--screenshot"), std::string::npos) << r.out;
}

namespace {

// Pixels of the plot (from the state dump's heatmap rectangle): distinct colours, and how many are
// clearly red (r > b + 60) or clearly blue (b > r + 60).
struct PlotPixels {
  std::size_t colours = 0;
  int red = 0, blue = 0, grey = 0;
};
PlotPixels plot_pixels(const Shot& s) {
  PlotPixels out;
  std::vector<std::uint32_t> seen;
  for (int y = static_cast<int>(s.y) + 1; y < static_cast<int>(s.y + s.h) - 1; ++y)
    for (int x = static_cast<int>(s.x) + 1; x < static_cast<int>(s.x + s.w) - 1; ++x) {
      const std::uint8_t* p = s.img.at(x, y);
      seen.push_back(static_cast<std::uint32_t>(p[0]) << 16 | p[1] << 8 | p[2]);
      out.red += p[0] > p[2] + 60;
      out.blue += p[2] > p[0] + 60;
      out.grey += is_grey(p) && p[0] < 160;
    }
  std::sort(seen.begin(), seen.end());
  out.colours = static_cast<std::size_t>(std::unique(seen.begin(), seen.end()) - seen.begin());
  return out;
}

}  // namespace

// The precision view at two settings: fp32 at T = 1 and bf16 at T = 0.1, step 2 (the logits,
// where 1/T multiplies every rounding error of the scores); the bf16 run's error is orders of
// magnitude above the fp32 one's, and the map is drawn (many colours, no hatching without a mask).
TEST(Screenshot, PrecisionViewFp32AtT1AndBf16AtT01) {
  const Shot f = shoot("prec-fp32", {"--view", "precision", "--backend", "cpu", "--temperature", "1", "--step", "2"});
  const Shot b = shoot("prec-bf16", {"--view", "precision", "--backend", "cpu", "--precision", "bf16",
                                     "--temperature", "0.1", "--step", "2", "--lang", "zh"});
  for (const Shot* s : {&f, &b}) {
    EXPECT_EQ(s->state["view"], "precision");
    ASSERT_EQ(s->state["precision_view"]["status"], "ok");
    EXPECT_EQ(s->state["precision_view"]["step"], 2);
    EXPECT_EQ(s->state["precision_view"]["rows"], 5);
    const PlotPixels px = plot_pixels(*s);
    EXPECT_GT(px.colours, 8u);
    EXPECT_EQ(px.grey, 0) << "nothing masked";
  }
  EXPECT_EQ(f.state["precision"], "fp32");
  EXPECT_EQ(b.state["precision"], "bf16");
  const double e32 = f.state["precision_view"]["max"], e16 = b.state["precision_view"]["max"];
  EXPECT_GT(e32, 0);
  EXPECT_LT(e32, 1e-5);
  EXPECT_GT(e16, 1000 * e32);
  // Causal: the masked upper triangle is hatched.
  const Shot c = shoot("prec-causal", {"--view", "precision", "--backend", "cpu", "--mask", "causal", "--step", "3"});
  EXPECT_EQ(c.state["precision_view"]["masked"], 10);
  EXPECT_GT(plot_pixels(c).grey, 100);
}

// The diff view at two settings: temperature=0.5 at step 3 (the weights sharpen: red and blue
// cells), and variant=fused (only the output exists: step 4, the two kernels agree to rounding).
TEST(Screenshot, DiffViewTemperatureAndFused) {
  const Shot t = shoot("diff-t", {"--view", "diff", "--diff", "temperature=0.5", "--backend", "cpu", "--step", "3"});
  ASSERT_EQ(t.state["diff"]["status"], "ok");
  EXPECT_EQ(t.state["diff"]["spec"], "temperature=0.5");
  EXPECT_GT(t.state["diff"]["max_abs"].get<double>(), 0.05);
  EXPECT_EQ(t.state["diff"]["top"].size(), 8u);
  const PlotPixels px = plot_pixels(t);
  EXPECT_GT(px.red, 500) << "B higher somewhere";
  EXPECT_GT(px.blue, 500) << "and lower elsewhere";
  const Shot f = shoot("diff-fused", {"--view", "diff", "--diff", "variant=fused", "--backend", "cpu", "--step", "2",
                                      "--lang", "zh"});
  ASSERT_EQ(f.state["diff"]["status"], "ok");
  EXPECT_EQ(f.state["diff"]["output_only"], true);
  EXPECT_EQ(f.state["diff"]["step"], 4);
  EXPECT_EQ(f.state["diff"]["cols"], 2);
  EXPECT_LT(f.state["diff"]["max_abs"].get<double>(), 1e-5);
  const Shot m = shoot("diff-causal", {"--view", "diff", "--diff", "mask=causal", "--backend", "cpu", "--step", "3"});
  EXPECT_GT(m.state["diff"]["max_abs"].get<double>(), 0.5);
  // At step 2 only B's mask differs: the cells it masks are not said to agree.
  for (const char* lang : {"en", "zh"}) {
    const Shot l = shoot(std::string("diff-logits-") + lang,
                         {"--view", "diff", "--diff", "mask=causal", "--backend", "cpu", "--step", "2", "--lang", lang});
    ASSERT_EQ(l.state["diff"]["max_abs"], 0);
    EXPECT_EQ(l.state["diff"]["summary"],
              std::string(lang) == "en"
                  ? "B − A = 0 in every cell neither run masks; 10 cells are masked (hatched) in A or B."
                  : "两次运行都未屏蔽的格子，B − A 都是 0；另有 10 个格子在 A 或 B 中被屏蔽（斜线）。");
  }
}

TEST(Screenshot, BadDiffAndPrecisionValuesGiveOneErrorLineAndExitTwo) {
  const std::vector<std::vector<std::string>> bad = {
      {"--view", "diff", "--diff", "colour=red"}, {"--view", "diff", "--diff", "mask=diagonal"},
      {"--view", "diff", "--diff", ""},           {"--view", "diff", "--diff", "temperature=0"},
      {"--view", "diff", "--diff", "mask"},       {"--view", "diff", "--diff", "query=你好"},
      {"--diff", "mask=diagonal"},                {"--precision", "fp64"},
      {"--random", "5000", "--precision", "bf16", "--dk", "8"}};
  for (std::vector<std::string> args : bad) {
    std::string what;
    for (const std::string& a : args) what += (what.empty() ? "" : " ") + a;
    args.insert(args.begin(), {"--screenshot", work_dir().file("bad.png"), "--backend", "cpu"});
    const ViewRun r = run_view(args);
    EXPECT_EQ(r.code, 2) << what;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << what << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << what << ": " << r.err;
  }
  EXPECT_EQ(run_view({"--screenshot", "x.png", "--view", "diff", "--diff", "colour=red"}).err,
            "error: --diff key 'colour' is unknown (use mask, temperature, backend, variant, precision, query)\n");
}
