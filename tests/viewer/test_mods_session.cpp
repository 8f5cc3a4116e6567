// The modifications in the viewer's session: the flags (--rope, --score-mod, --mask-mod) as the
// CLI takes them, set_mods (one run, the inputs shared, the core's refusals in both languages
// before any run), the stages and the mask the chain shows, the command that reproduces it.
#include "core/modify.h"
#include "core/verify.h"
#include "cpu/cpu_backend.h"
#include "tests/test_util.h"
#include "tests/viewer/viewer_test_util.h"
#include "viewer/app/options.h"
#include "viewer/session/session.h"
#include "viewer/views/chain/chain_view.h"
#include "viewer/views/heads/heads_view.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace attnlab {
namespace {

using viewer::ModSettings;
using viewer::Session;

TEST(ModsSession, FlagsAreTheCommandLinesSpecs) {
  const viewer::ViewerOptions o = viewer::parse_viewer_args(
      {"--random", "32", "--rope", "--score-mod", "alibi+softcap:4", "--mask-mod", "causal,window:6"});
  EXPECT_EQ(o.mods.rope_theta, 10000);
  EXPECT_TRUE(o.mods.alibi);
  EXPECT_EQ(o.mods.softcap, 4);
  EXPECT_EQ(o.mods.window, 6);
  EXPECT_EQ(o.mask, MaskKind::Causal);
  EXPECT_EQ(viewer::parse_viewer_args({"--rope", "500", "--random", "8"}).mods.rope_theta, 500);
  // An empty value as the CLI reads it: a bare --rope, and no spec for the others (they read as
  // none, in silence).
  EXPECT_EQ(viewer::parse_viewer_args({"--rope", "", "--random", "8"}).mods.rope_theta, 10000);
  EXPECT_EQ(test::message_of<InputError>([] { viewer::parse_viewer_args({"--score-mod", ""}); }),
            "option --score-mod needs a value");
  EXPECT_EQ(test::message_of<InputError>([] { viewer::parse_viewer_args({"--mask-mod", "", "--random", "8"}); }),
            "option --mask-mod needs a value");
  // RoPE on the decode view's random cache: its head size even, and an input that takes RoPE too.
  EXPECT_EQ(test::message_of<InputError>([] {
              viewer::parse_viewer_args({"--view", "decode", "--cache", "64", "--cache-dim", "7", "--random", "8", "--rope"});
            }),
            "--cache-dim 7 with --rope: RoPE turns pairs of values, so the cache's head size must be even");
  EXPECT_TRUE(test::contains(
      test::message_of<InputError>([] { viewer::parse_viewer_args({"--view", "decode", "--cache", "64", "--rope"}); }),
      "the demo's d_k is 3 (odd): add an input of an even d_k"));
  EXPECT_EQ(viewer::parse_viewer_args({"--view", "decode", "--cache", "64", "--rope", "--random", "8"}).mods.rope_theta,
            10000);
  EXPECT_EQ(test::message_of<InputError>([] { viewer::parse_viewer_args({"--score-mod", "softcap:0"}); }),
            "the soft-cap C must be a finite fp32 number > 0 (from 1.2e-38 to 3.4e38), got 0");
  EXPECT_EQ(test::message_of<InputError>([] { viewer::parse_viewer_args({"--mask-mod", "window"}); }),
            "unknown mask modification 'window': use none, causal, window:W, document:FILE or prefix:P, joined by ',' or '+'");
  EXPECT_NE(test::message_of<InputError>([] { viewer::parse_viewer_args({"--score-mod", "alibi:0.5"}); })
                .find("given slopes: attnlab run"),
            std::string::npos);
}

TEST(ModsSession, SetModsRunsTheModifiedChainAndSharesTheInputs) {
  viewer::ViewerOptions o = test::cpu_random_options(24, 8, 8, MaskKind::Causal);
  Session s(o);
  const ProblemInputs* inputs = s.problem().inputs();
  ModSettings m;
  m.window = 4;
  m.alibi = true;
  m.softcap = 3;
  m.rope_theta = 200;
  ASSERT_TRUE(s.set_mods(m)) << s.error();
  EXPECT_EQ(s.problem().inputs(), inputs);  // no matrix copied
  EXPECT_EQ(s.problem().mods.window, 4);
  const Trace& t = s.trace();
  ASSERT_GT(t.biased.size(), 0);
  ASSERT_GT(t.capped.size(), 0);
  ASSERT_GT(t.q_rot.size(), 0);
  EXPECT_TRUE(verify_trace(s.problem(), t, reference_fp64(s.problem())).pass);
  // Query 10 sees keys 7..10 only; the chain's step 2 and 3 show that mask.
  EXPECT_TRUE(std::isinf(t.mask(10, 6)));
  EXPECT_EQ(t.mask(10, 7), 0.f);
  EXPECT_TRUE(s.step_shows_mask(2));
  const std::string cmd = s.reproduce_command();
  EXPECT_TRUE(test::contains(cmd, "--rope 200")) << cmd;
  EXPECT_TRUE(test::contains(cmd, "--score-mod alibi+softcap:3")) << cmd;
  EXPECT_TRUE(test::contains(cmd, "--mask-mod window:4")) << cmd;
  EXPECT_TRUE(test::contains(s.description(Lang::En), "The chain is modified: RoPE θ=200")) << s.description(Lang::En);
  // A window alone (no causal mask) still shows its mask.
  ASSERT_TRUE(s.set_mask(MaskKind::None));
  EXPECT_TRUE(s.step_shows_mask(3));
  // Back to none: the plain chain, no modification stage.
  ASSERT_TRUE(s.set_mods(ModSettings{}));
  EXPECT_FALSE(has_modifications(s.problem()));
  EXPECT_EQ(s.trace().biased.size(), 0);
}

TEST(ModsSession, TheChainsStepTwoShowsTheStagesTheModificationsAdd) {
  viewer::ViewerOptions o = test::cpu_random_options(12, 8, 8, MaskKind::Causal);
  o.mods.alibi = true;
  o.mods.softcap = 2;
  o.score_mods_given = true;
  Session s(o);
  using Sub = viewer::ChainView::Sub;
  EXPECT_EQ(viewer::chain_sub_matrix(s, Sub::Scaled), &s.trace().scaled);
  EXPECT_EQ(viewer::chain_sub_matrix(s, Sub::Biased), &s.trace().biased);
  EXPECT_EQ(viewer::chain_sub_matrix(s, Sub::Capped), &s.trace().capped);
  EXPECT_EQ(viewer::chain_sub_matrix(s, Sub::Logits), &s.trace().logits);
  // Without the cap: no capped stage to show.
  ModSettings m = s.requested_mods();
  m.softcap = 0;
  ASSERT_TRUE(s.set_mods(m));
  EXPECT_EQ(viewer::chain_sub_matrix(s, Sub::Capped), nullptr);
  viewer::ChainView v;
  v.sub = Sub::Biased;
  nlohmann::json j;
  v.dump(j, s);
  EXPECT_EQ(j["chain"]["sub"], "biased");
}

// A prefix set on a longer problem covers a shorter new input's positions (the core refuses a
// prefix beyond them; the demo had been refused and the long problem kept); a longer input
// keeps it.
TEST(ModsSession, APrefixLongerThanANewInputIsClampedToItsPositions) {
  viewer::ViewerOptions o = test::cpu_random_options(64, 4, 4);
  o.mods.prefix = 32;
  o.mask_mods_given = true;
  Session s(o);
  ASSERT_EQ(s.problem().mods.prefix, 32);
  ASSERT_TRUE(s.load_demo()) << s.error();
  EXPECT_TRUE(s.demo());
  EXPECT_EQ(s.problem().mods.prefix, 5);
  EXPECT_EQ(s.requested_mods().prefix, 5);
  EXPECT_TRUE(verify_trace(s.problem(), s.trace(), reference_fp64(s.problem())).pass);
  // The clamped value is the request's: a temperature change runs the same problem.
  ASSERT_TRUE(s.set_temperature(0.5)) << s.error();
  EXPECT_EQ(s.problem().mods.prefix, 5);
  ASSERT_TRUE(s.load_random(48, 4, 4, 2)) << s.error();
  EXPECT_EQ(s.problem().mods.prefix, 5);
}

TEST(ModsSession, BiasAndDocumentFilesAreReadWithTheInputs) {
  test::TempDir dir;
  test::write_file(dir.file("bias.csv"), "0,1,2\n0,0,0\n-1,-2,-3\n");
  test::write_file(dir.file("docs.csv"), "0,0,1\n");
  test::write_file(dir.file("wrong.csv"), "0,1\n");
  viewer::ViewerOptions o = test::cpu_random_options(3, 4, 4);
  Session s(o);
  ASSERT_TRUE(s.set_mod_files(dir.file("bias.csv"), dir.file("docs.csv"))) << s.error();
  EXPECT_EQ(s.problem().bias()(2, 1), -2.f);
  EXPECT_EQ(s.problem().documents(), (std::vector<int>{0, 0, 1}));
  EXPECT_TRUE(std::isinf(s.trace().mask(2, 0)));  // another document
  EXPECT_TRUE(test::contains(s.reproduce_command(), "bias:" + dir.file("bias.csv"))) << s.reproduce_command();
  EXPECT_TRUE(verify_trace(s.problem(), s.trace(), reference_fp64(s.problem())).pass);
  // A bias of the wrong shape: the core's message, the state on screen kept.
  EXPECT_FALSE(s.set_mod_files(dir.file("wrong.csv"), ""));
  EXPECT_TRUE(test::contains(s.error(), "the bias is 1x2 but must be 3x3")) << s.error();
  EXPECT_EQ(s.problem().bias()(2, 1), -2.f);
  // A new input drops the files of the old one's shape.
  ASSERT_TRUE(s.load_random(5, 4, 4, 1));
  EXPECT_EQ(s.problem().bias().size(), 0);
}

// A per-head bias for --heads H: the shown head takes its rows, named so, as the CLI's --head does
// (it was refused: the file was read into the one head's problem); the heads view's problem holds
// the H heads' rows.
TEST(ModsSession, APerHeadBiasGivesTheShownHeadItsRows) {
  test::TempDir dir;
  test::write_file(dir.file("bias.csv"), "0,1,2\n0,0,0\n-1,-2,-3\n5,6,7\n8,9,10\n11,12,13\n");
  viewer::ViewerOptions o = test::cpu_random_options(3, 4, 4);
  o.heads = 2;
  o.head = 1;
  Session s(o);
  ASSERT_TRUE(s.set_mod_files(dir.file("bias.csv"), "")) << s.error();
  ASSERT_EQ(s.problem().bias().rows(), 3);
  EXPECT_EQ(s.problem().bias()(0, 0), 5.f);
  EXPECT_EQ(s.problem().bias()(2, 2), 13.f);
  EXPECT_TRUE(test::contains(s.description(Lang::En), "bias bias.csv (one per head, head 1's)")) << s.description(Lang::En);
  EXPECT_TRUE(verify_trace(s.problem(), s.trace(), reference_fp64(s.problem())).pass);
  const viewer::HeadProblem all = viewer::heads_job(s).load(0);
  ASSERT_EQ(all.problem->bias().rows(), 6);
  EXPECT_EQ(all.problem->bias()(4, 1), 9.f);
}

#ifdef ATTNLAB_VIEW_BINARY
// The flags' bias and document files are read once, with the inputs (the flags' check reads no
// file), so a pipe serves as it does for attnlab run: the documents reach the caveat bar, the bias
// the chain's stages.
TEST(ModsSession, TheFlagsFilesAreReadOnceSoAPipeServes) {
  test::TempDir dir;
  const std::string png = dir.file("p.png"), json = dir.file("p.json");
  const auto run = [&](const std::string& lines, const std::string& flag, const std::string& spec) {
    const std::string cmd = "printf '" + lines + "' | SDL_VIDEODRIVER=dummy LANG=C.UTF-8 timeout 60 '" +
                            test::view_binary() + "' --screenshot '" + png + "' --state-dump '" + json +
                            "' --backend cpu --lang en --random 3 --dk 4 --dv 4 " + flag + " " + spec;
    const test::BinaryRun r = test::run_binary("sh", {"-c", cmd});
    EXPECT_EQ(r.code, 0) << r.err;
    std::ifstream in(json);
    return r.code == 0 ? nlohmann::json::parse(in) : nlohmann::json{};
  };
  const nlohmann::json docs = run("0\\n0\\n1\\n", "--mask-mod", "document:/dev/stdin");
  EXPECT_TRUE(test::contains(docs.value("mask_sentence", ""), "Packed documents")) << docs.dump();
  const nlohmann::json bias = run("0,1,2\\n0,0,0\\n-1,-2,-3\\n", "--score-mod", "bias:/dev/stdin");
  EXPECT_TRUE(test::contains(bias.dump(), "biased")) << bias.dump();
}
#endif

TEST(ModsSession, RefusalsKeepTheStateAndSpeakBothLanguages) {
  Session s(test::cpu_viewer_options());  // the demo: d_k = 3
  ModSettings m;
  m.rope_theta = 10000;
  EXPECT_FALSE(s.set_mods(m));
  EXPECT_EQ(s.error_message().id, Msg::RopeOddDim);
  EXPECT_EQ(s.error_text(Lang::Zh), "RoPE 成对旋转数值：d_k 必须是偶数，当前为 3");
  EXPECT_EQ(s.requested_mods(), ModSettings{});
  m = ModSettings{};
  m.prefix = 9;
  EXPECT_FALSE(s.set_mods(m));
  EXPECT_EQ(s.error_message().id, Msg::PrefixInvalid);
  m.prefix = 2;
  EXPECT_TRUE(s.set_mods(m)) << s.error();
  EXPECT_EQ(s.problem().mods.prefix, 2);
}

// A slider's value typed as 0 (Ctrl+click) is refused with the CLI's line for that spec, where it
// had switched the modification off in silence (0 is "none" in the settings); a value the core
// refuses otherwise says the value typed (1e40, not fp32's inf). The settings stay.
TEST(ModsSession, ASliderValueThatReadsAsOffIsRefused) {
  Session s(test::cpu_random_options(16, 8, 8));
  ModSettings on;
  on.rope_theta = 500;
  on.softcap = 5;
  on.window = 4;
  on.prefix = 3;
  ASSERT_TRUE(s.set_mods(on)) << s.error();
  using Knob = Session::ModKnob;
  const auto refused = [&](Knob k, double v) {
    EXPECT_FALSE(s.set_mod_value(k, v));
    EXPECT_EQ(s.requested_mods(), on);
    EXPECT_EQ(s.problem().mods.window, 4);
    return s.error();
  };
  EXPECT_EQ(refused(Knob::RopeTheta, 0), "RoPE's base θ must be a finite number > 0, got 0");
  EXPECT_EQ(s.error_message().id, Msg::RopeTheta);
  EXPECT_EQ(refused(Knob::RopeTheta, -3), "RoPE's base θ must be a finite number > 0, got -3");
  refused(Knob::Softcap, 0);
  EXPECT_EQ(s.error_message().id, Msg::SoftcapInvalid);
  EXPECT_TRUE(test::contains(refused(Knob::Softcap, 1e40), "got 1e+40")) << s.error();
  refused(Knob::Window, 0);
  EXPECT_EQ(s.error_message().id, Msg::WindowInvalid);
  refused(Knob::Prefix, 0);
  EXPECT_EQ(s.error_message().id, Msg::PrefixNotWhole);
  // Values the core takes are one request each, kept as typed.
  ASSERT_TRUE(s.set_mod_value(Knob::RopeTheta, 0.001)) << s.error();
  EXPECT_EQ(s.problem().mods.rope_theta, 0.001);
  ASSERT_TRUE(s.set_mod_value(Knob::Softcap, 1e30)) << s.error();
  EXPECT_EQ(s.problem().mods.softcap, 1e30);
  ASSERT_TRUE(s.set_mod_value(Knob::Window, 7)) << s.error();
  EXPECT_EQ(s.problem().mods.window, 7);
}

}  // namespace
}  // namespace attnlab
