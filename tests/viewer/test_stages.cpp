// Which stages a kept-stage run brings back (viewer --stages, Session::set_step, kept_stages):
// the policy per backend and size, the step on screen deciding the stages, a step change that runs
// only when the step's matrix is missing, the numbers equal to a run that keeps every stage, the
// export refusals, the state dump's list, and the same in async mode (the pending step).
#include "viewer_test_util.h"
#include "core/backend.h"
#include "core/patterns.h"
#include "viewer/session/session.h"
#include "viewer/session/export.h"
#include "viewer/app/options.h"
#include "viewer/session/playback.h"
#include "viewer/app/state_dump.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

using namespace attnlab;
using namespace attnlab::viewer;

namespace {

ViewerOptions step_options(int n, int step, MaskKind mask = MaskKind::None) {
  ViewerOptions o = test::cpu_random_options(n, 16, 8, mask);
  o.step = step;
  o.stages = StagePolicy::Step;
  return o;
}

Problem problem_of(int n, MaskKind mask = MaskKind::None) {
  Problem p = random_problem(n, 4, 4, 0);
  p.mask = mask;
  return p;
}

}  // namespace

TEST(Stages, PolicyPerBackendAndSize) {
  const unsigned all = problem_stages(problem_of(8));
  // auto: every stage on the CPU at any size, and on CUDA up to the JSON export's limit.
  EXPECT_EQ(kept_stages(StagePolicy::Auto, "cpu", problem_of(kKeepStagesMaxTokens), 1), all);
  EXPECT_EQ(kept_stages(StagePolicy::Auto, "cuda", problem_of(kJsonExportMaxTokens), 1), all);
  EXPECT_EQ(kept_stages(StagePolicy::Auto, "cuda", problem_of(kJsonExportMaxTokens + 1), 1),
            unsigned{kStageScores | kStageWeights});
  // step: above the tables' limit on any backend; all: always.
  EXPECT_EQ(kept_stages(StagePolicy::Step, "cpu", problem_of(kTableMaxTokens), 2), all);
  EXPECT_EQ(kept_stages(StagePolicy::Step, "cpu", problem_of(kTableMaxTokens + 1), 2),
            unsigned{kStageLogits | kStageWeights});
  EXPECT_EQ(kept_stages(StagePolicy::All, "cuda", problem_of(4096), 2), all);
  // The mask comes along at the steps that show it, when there is one; the output step needs
  // only the weights (statistics, row chart, description).
  EXPECT_EQ(kept_stages(StagePolicy::Step, "cpu", problem_of(64, MaskKind::Causal), 2),
            unsigned{kStageLogits | kStageWeights | kStageMask});
  EXPECT_EQ(kept_stages(StagePolicy::Step, "cpu", problem_of(64, MaskKind::Causal), 3),
            unsigned{kStageWeights | kStageMask});
  EXPECT_EQ(kept_stages(StagePolicy::Step, "cpu", problem_of(64, MaskKind::Causal), 1),
            unsigned{kStageScores | kStageWeights});
  EXPECT_EQ(kept_stages(StagePolicy::Step, "cpu", problem_of(64), 4), unsigned{kStageWeights});
}

TEST(Stages, TheStepOnScreenDecidesWhatComesBackAndTheNumbersAreTheFullRuns) {
  Session c(step_options(64, 1, MaskKind::Causal));
  ViewerOptions all_o = step_options(64, 1, MaskKind::Causal);
  all_o.stages = StagePolicy::All;
  Session all(all_o);
  ASSERT_TRUE(all.all_stages_kept());
  EXPECT_FALSE(c.all_stages_kept());
  EXPECT_EQ(present_stages(c.trace()), unsigned{kStageScores | kStageWeights});
  EXPECT_EQ(c.trace().scores, all.trace().scores);
  EXPECT_EQ(c.trace().weights, all.trace().weights);
  EXPECT_EQ(c.trace().output, all.trace().output);
  ASSERT_TRUE(c.stats().has_value());
  EXPECT_EQ(c.stats()->max_weight, all.stats()->max_weight);
  EXPECT_EQ(c.description(Lang::En), all.description(Lang::En));

  // Step 2: a new run brings the logits and the mask; the scores are gone.
  const auto r0 = c.revision();
  c.set_step(2);
  EXPECT_GT(c.revision(), r0);
  EXPECT_EQ(present_stages(c.trace()), unsigned{kStageLogits | kStageWeights | kStageMask});
  EXPECT_EQ(c.trace().logits, all.trace().logits);
  EXPECT_EQ(c.trace().mask, all.trace().mask);
  EXPECT_EQ(c.stage_matrix(1), nullptr);
  ASSERT_NE(c.stage_matrix(2), nullptr);
  EXPECT_FALSE(c.stage_pending(2));

  // Steps 3 and 4 need nothing the trace lacks: no run.
  const auto r1 = c.revision();
  c.set_step(3);
  c.set_step(4);
  EXPECT_EQ(c.revision(), r1);

  // A temperature change runs for the step on screen (4: the weights and the output only).
  ASSERT_TRUE(c.set_temperature(0.5));
  ASSERT_TRUE(all.set_temperature(0.5));
  EXPECT_EQ(present_stages(c.trace()), unsigned{kStageWeights});
  EXPECT_EQ(c.trace().weights, all.trace().weights);
  EXPECT_EQ(c.trace().output, all.trace().output);
  c.set_step(1);
  EXPECT_EQ(c.trace().scores, all.trace().scores);
}

TEST(Stages, SmallProblemsAndStreamedOnesAreUnchanged) {
  // The tables (N up to kTableMaxTokens) show every stage; a streamed problem keeps none.
  Session small(step_options(kTableMaxTokens, 1));
  EXPECT_TRUE(small.all_stages_kept());
  Session streamed(step_options(kKeepStagesMaxTokens + 1, 1));
  ASSERT_TRUE(streamed.streaming());
  const auto r0 = streamed.revision();
  streamed.set_step(2);
  EXPECT_EQ(streamed.revision(), r0);
  EXPECT_FALSE(streamed.stage_pending(2));
}

TEST(Stages, ExportsSayWhatTheyNeed) {
  Session c(step_options(64, 3));
  const test::TempDir dir("attnlab-stages-export");
  const std::string stem = (dir.path() / "stages").string();
  EXPECT_NO_THROW({
    const std::string path = export_stage_csv(c, 3, stem);
    EXPECT_FALSE(path.empty());
  });
  try {
    export_trace_json(c, Lang::En, stem);
    ADD_FAILURE() << "JSON export of a trace without every stage";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--stages all"), std::string::npos) << e.what();
    const Message m = message_of(e);  // the status line says it in the UI language
    EXPECT_EQ(m.id, Msg::ExportJsonStages);
    EXPECT_NE(m.text(Lang::Zh).find("请以 --stages all 启动"), std::string::npos) << m.text(Lang::Zh);
  }
}

TEST(Stages, StateDumpListsTheStagesOnScreen) {
  Session c(step_options(64, 2));
  Playback play;
  play.set_step(2);
  ViewSnapshot v;
  v.playback = &play;
  const auto j = nlohmann::json::parse(state_json(c, v));
  EXPECT_EQ(j["stages"], nlohmann::json({"logits", "weights"}));
}

TEST(Stages, AsyncStepChangeIsPendingUntilItsRunArrives) {
  Session c(step_options(512, 1), /*async=*/true);
  c.set_step(2);
  // Before poll() the trace on screen is still step 1's: step 2's matrix is on its way.
  EXPECT_TRUE(c.stage_pending(2));
  EXPECT_EQ(c.stage_matrix(2), nullptr);
  c.wait();
  EXPECT_FALSE(c.stage_pending(2));
  ASSERT_NE(c.stage_matrix(2), nullptr);
  EXPECT_EQ(c.stage_matrix(2)->rows(), 512);
}

TEST(Stages, OptionIsParsedAndCheckedAsTheOthers) {
  EXPECT_EQ(parse_viewer_args({"--stages", "step"}).stages, StagePolicy::Step);
  EXPECT_EQ(parse_viewer_args({"--stages", "all"}).stages, StagePolicy::All);
  EXPECT_EQ(parse_viewer_args({}).stages, StagePolicy::Auto);
  try {
    parse_viewer_args({"--stages", "some"});
    ADD_FAILURE() << "accepted --stages some";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "--stages must be one of auto, all, step, got 'some'");
  }
}
