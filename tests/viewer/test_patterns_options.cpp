// attnlab-view's --pattern: parsed with the CLI's refusals, carried by the session's random
// source (Generate keeps it) and named in the reproduce command.
#include "core/patterns.h"
#include "tests/test_util.h"
#include "viewer/session/session.h"
#include "viewer/app/options.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace attnlab;
using namespace attnlab::viewer;

namespace {
std::string refusal(std::vector<std::string> a) {
  return test::message_of<InputError>([&] { parse_viewer_args(a); });
}
}  // namespace

TEST(ViewerPattern, OptionsParse) {
  const ViewerOptions o = parse_viewer_args({"--random", "64", "--pattern", "local:3"});
  EXPECT_EQ(o.pattern.kind, PatternKind::Local);
  EXPECT_EQ(o.pattern.window, 3);
  EXPECT_EQ(parse_viewer_args({"--random", "64"}).pattern.kind, PatternKind::Noise);
  EXPECT_NE(refusal({"--random", "64", "--pattern", "foo"}).find("got 'foo'"), std::string::npos);
  EXPECT_NE(refusal({"--random", "64", "--pattern", "local:-1"}).find("local:W"), std::string::npos);
  EXPECT_NE(refusal({"--pattern", "sink"}).find("add --random N"), std::string::npos);
  EXPECT_EQ(refusal({"--random", "64", "--dk", "8", "--pattern", "previous"}),
            "--pattern previous needs --dk >= 16, got 8");
}

TEST(ViewerPattern, TheSessionKeepsThePatternAndReproducesIt) {
  ViewerOptions o = parse_viewer_args({"--random", "32", "--dk", "16", "--dv", "4", "--pattern", "induction"});
  o.backend = "cpu";
  Session c(o, false);
  EXPECT_EQ(c.random_pattern().kind, PatternKind::Induction);
  EXPECT_EQ(c.requested_mask(), MaskKind::Causal);
  EXPECT_NE(c.reproduce_command().find("--pattern induction"), std::string::npos) << c.reproduce_command();
  ASSERT_TRUE(c.load_random(48, 32, 4, 7));
  EXPECT_EQ(c.random_pattern().kind, PatternKind::Induction);
  EXPECT_FALSE(c.load_random(48, 4, 4, 7));
  EXPECT_NE(c.error().find("needs --dk >= "), std::string::npos) << c.error();
}
