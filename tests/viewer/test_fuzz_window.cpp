// The UI event fuzzer's window half, on the normal build (the long runs under ASan + UBSan are the
// ui_fuzz_* tests): it needs no display, the events reach ImGui (the pointer, presses, a text
// field's keyboard), every kind of event is sent, and the same seed repeats the same run: the
// same summary and the same shared state at the end. Its flags are refused when misused.
#include "tests/test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <regex>
#include <string>
#include <vector>

using namespace attnlab;

namespace {

struct FuzzRun {
  test::BinaryRun r;
  nlohmann::json state;
};

FuzzRun fuzz(const std::vector<std::string>& extra, const test::TempDir& dir, const std::string& name) {
  const std::string dump = dir.file(name + ".json");
  std::vector<std::string> args = {"300", test::view_binary(), "--backend", "cpu", "--size", "960x600",
                                   "--state-dump", dump, "--perf-n", "16", "--perf-repeat", "1", "--perf-warmup", "0"};
  args.insert(args.end(), extra.begin(), extra.end());
  // No display at all: the fuzzer takes SDL's dummy driver itself.
  FuzzRun f{test::run_binary("timeout", args, "-u DISPLAY -u WAYLAND_DISPLAY LANG=C.UTF-8"), {}};
  try {
    f.state = nlohmann::json::parse(test::read_file(dump));
  } catch (const std::exception&) {
  }
  return f;
}

// The number a regular expression's one group catches in the summary, -1 when none.
long count_of(const std::string& summary, const std::string& re) {
  std::smatch m;
  if (!std::regex_search(summary, m, std::regex(re))) return -1;
  return std::stol(m[1]);
}

}  // namespace

TEST(FuzzWindow, RunsWithoutADisplayAndTheEventsReachImGui) {
  const test::TempDir dir("attnlab-fuzz-window");
  const FuzzRun f = fuzz({"--fuzz-events", "600", "--fuzz-seed", "1"}, dir, "a");
  ASSERT_EQ(f.r.code, 0) << f.r.err << f.r.out;
  const std::string& s = f.r.out;
  EXPECT_NE(s.find("fuzz: seed 1: 600 events over "), std::string::npos) << s;
  EXPECT_NE(s.find("every invariant held"), std::string::npos) << s;
  for (const char* kind : {"key", "text", "move", "click", "double-click", "drag", "wheel", "view"})
    EXPECT_GT(count_of(s, std::string("(?:\\(|, )") + kind + " ([0-9]+)"), 0) << kind << "\n" << s;
  EXPECT_GT(count_of(s, "pointer in ([0-9]+) frames"), 200) << s;
  EXPECT_GT(count_of(s, "([0-9]+) presses"), 20) << s;
  EXPECT_GT(count_of(s, "typing in ([0-9]+) frames"), 0) << "a text field had the keyboard\n" << s;
  EXPECT_TRUE(f.state.is_object()) << "the state dump was written";
}

TEST(FuzzWindow, TheSameSeedRepeatsTheSameRun) {
  const test::TempDir dir("attnlab-fuzz-repeat");
  const std::vector<std::string> args = {"--fuzz-events", "500", "--fuzz-seed", "42", "--view", "walk"};
  const FuzzRun a = fuzz(args, dir, "a"), b = fuzz(args, dir, "b");
  ASSERT_EQ(a.r.code, 0) << a.r.err;
  ASSERT_EQ(b.r.code, 0) << b.r.err;
  EXPECT_EQ(a.r.out, b.r.out) << "the same events, refusals and ImGui counts";
  for (const char* k : {"step", "query", "queries", "temperature", "mode", "N", "M", "d_k", "d_v", "seed", "lang",
                        "window", "ui_scale", "key_sel", "view", "error", "layer", "head", "mask", "precision"})
    EXPECT_EQ(a.state[k], b.state[k]) << k;
  const FuzzRun c = fuzz({"--fuzz-events", "500", "--fuzz-seed", "43", "--view", "walk"}, dir, "c");
  EXPECT_NE(a.r.out, c.r.out) << "another seed, another run";
}

TEST(FuzzWindow, ItsFlagsAreRefusedWhenMisused) {
  const test::TempDir dir("attnlab-fuzz-flags");
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"--fuzz-events", "0"}, {"--fuzz-events", "x"}, {"--fuzz-seed", "3"},
        {"--fuzz-events", "10", "--fuzz-seed", "-1"}, {"--fuzz-events", "10", "--screenshot", dir.file("x.png")},
        {"--export-dir", ""}}) {
    std::vector<std::string> args = {"30", test::view_binary()};
    args.insert(args.end(), bad.begin(), bad.end());
    const test::BinaryRun r = test::run_binary("timeout", args, "-u DISPLAY LANG=C.UTF-8");
    EXPECT_EQ(r.code, 2) << bad[0] << " " << r.err;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}
