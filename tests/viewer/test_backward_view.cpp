// The backward view's logic (viewer/views/backward/backward_view.h): its backward is the staged
// backward's own (backward_of the session's run, equal to cpu_backward), the steps it walks back
// (the mods' steps only with mods) and the keys that move them, the dS row's parts and its sum of
// 0, the dT entries summing to dT, masked keys' zero gradient, the gradient gathering on the top
// keys as the temperature falls on the demo, dO from the seed or the sum loss (the flags), the
// refusal above kBackwardMaxTokens, the state dump, every text in both languages with the same
// conversions, and the headless screenshots.
#include "cpu/backward.h"
#include "tests/test_util.h"
#include "tests/viewer/viewer_test_util.h"
#include "viewer/app/options.h"
#include "viewer/draw/png_io.h"
#include "viewer/session/session.h"
#include "viewer/views/backward/backward_view.h"
#include "viewer/views/registry.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

namespace attnlab {
namespace {

using viewer::BackStep;
using viewer::BackwardView;
using viewer::Session;

// The view shown on s: its companion handed over (as the app does every frame) and adopted.
const GradTrace* show(Session& s, BackwardView& v) {
  s.set_companion(v.companion());
  s.wait();
  return v.update(s);
}

std::vector<std::string> words(const BackwardView& v) {
  std::vector<std::string> out;
  for (BackStep b : v.steps()) out.emplace_back(viewer::back_step_word(b));
  return out;
}

TEST(BackwardView, ItsBackwardIsTheStagedBackwardOfTheRunOnScreen) {
  Session s(test::cpu_viewer_options());
  BackwardView v;
  const GradTrace* g = show(s, v);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(v.status(), BackwardView::Status::Ok);
  // Asked for after the run on screen: its own staged CPU run; beside the next run, that run's.
  EXPECT_FALSE(v.on_screen_run());
  ASSERT_TRUE(s.set_temperature(0.85));
  ASSERT_TRUE(s.set_temperature(0.7));
  g = show(s, v);
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(v.on_screen_run());
  const GradTrace ref = cpu_backward(s.problem(), upstream_random(0));
  EXPECT_TRUE(g->dq.isApprox(ref.dq, 1e-5f));
  EXPECT_TRUE(g->dk.isApprox(ref.dk, 1e-5f));
  EXPECT_TRUE(g->dv.isApprox(ref.dv, 1e-5f));
  EXPECT_NEAR(g->dT, ref.dT, 1e-6 * std::max(1.0, std::abs(ref.dT)));
  // The dT step's entries sum to the backward's dT.
  EXPECT_NEAR(v.dt_matrix().cast<double>().sum(), g->dT, 1e-5 * std::max(1.0, std::abs(g->dT)));
}

TEST(BackwardView, StepsRunBackAndTheChainsKeysMoveThem) {
  Session s(test::cpu_viewer_options());
  BackwardView v;
  ASSERT_NE(show(s, v), nullptr);
  const std::vector<std::string> plain = {"dout", "dv", "dp", "D", "ds", "dscaled", "dscores", "dq", "dk", "dT"};
  EXPECT_EQ(words(v), plain);
  EXPECT_EQ(v.step(), 0);
  EXPECT_TRUE(v.on_action(viewer::Action::StepNext));
  EXPECT_TRUE(v.on_action(viewer::Action::StepNext));
  EXPECT_EQ(v.current(), BackStep::Dp);
  EXPECT_TRUE(v.on_action(viewer::Action::StepPrev));
  EXPECT_EQ(v.current(), BackStep::Dv);
  for (int i = 0; i < 20; ++i) v.next();
  EXPECT_EQ(v.current(), BackStep::Dt);  // stops at the last
  EXPECT_TRUE(v.on_action(viewer::Action::StepHome));
  EXPECT_EQ(v.step(), 0);
  EXPECT_FALSE(v.on_action(viewer::Action::ToggleMask));  // the app's own meaning stays
  // Play: a step per kBackwardStepSeconds of frame time (the frames' dt, no clock), wrapping.
  EXPECT_TRUE(v.on_action(viewer::Action::TogglePlay));
  EXPECT_TRUE(v.playing());
  EXPECT_FALSE(v.tick(viewer::kBackwardStepSeconds / 2));
  EXPECT_TRUE(v.tick(viewer::kBackwardStepSeconds / 2));
  EXPECT_EQ(v.step(), 1);
  for (int i = 0; i < 9; ++i) v.tick(viewer::kBackwardStepSeconds);
  EXPECT_EQ(v.step(), 0);
  v.toggle_play();
  EXPECT_FALSE(v.tick(10));
  // Hidden, it stops playing (it had frozen and resumed when shown again).
  v.toggle_play();
  v.hidden();
  EXPECT_FALSE(v.playing());
  // Each step pairs a forward stage with a gradient of the same shape (D: one value per row).
  for (BackStep b : v.steps()) {
    const viewer::StepPair pair = viewer::step_pair(s.problem(), *show(s, v), b, v.dt_matrix());
    ASSERT_NE(pair.forward, nullptr) << viewer::back_step_word(b);
    ASSERT_NE(pair.grad, nullptr) << viewer::back_step_word(b);
    EXPECT_EQ(pair.forward->rows(), pair.grad->rows()) << viewer::back_step_word(b);
    if (b != BackStep::D) EXPECT_EQ(pair.forward->cols(), pair.grad->cols()) << viewer::back_step_word(b);
    EXPECT_EQ(pair.query_rows, b != BackStep::Dv && b != BackStep::Dk) << viewer::back_step_word(b);
  }
  // With every score mod and RoPE, their steps come in the chain's order, and a step index
  // beyond a shorter walk is clamped.
  viewer::ViewerOptions o = test::cpu_random_options(24, 8, 4);
  o.mods.rope_theta = 100;
  o.rope_given = true;
  o.mods.alibi = true;
  o.mods.softcap = 5;
  o.score_mods_given = true;
  Session m(o);
  BackwardView w;
  ASSERT_NE(show(m, w), nullptr);
  const std::vector<std::string> all = {"dout", "dv",      "dp",      "D",      "ds", "dcapped", "dbiased",
                                        "dscaled", "dscores", "dq_rot", "dq", "dk", "dT"};
  EXPECT_EQ(words(w), all);
  EXPECT_EQ(w.broken(m), "");
  // Each step's texts say what its gradient came back through, the forward's next stage: d capped
  // through ÷ T, d biased through the cap, d scaled through ALiBi (they had been one step late:
  // "passes through unchanged" beside the map the cap had shrunk).
  const auto texts = [](BackStep b, const GradTrace& g) {
    const viewer::StepTexts t = viewer::back_step_texts(b, g);
    return std::pair{t.title, t.why};
  };
  const GradTrace& gm = *show(m, w);
  EXPECT_EQ(texts(BackStep::Capped, gm), std::pair(viewer::BT::StepTemperature, viewer::BT::WhyTemperature));
  EXPECT_EQ(texts(BackStep::Biased, gm), std::pair(viewer::BT::StepCapped, viewer::BT::WhyCapped));
  EXPECT_EQ(texts(BackStep::Scaled, gm), std::pair(viewer::BT::StepBiased, viewer::BT::WhyBiased));
  EXPECT_EQ(texts(BackStep::Ds, gm), std::pair(viewer::BT::StepDs, viewer::BT::WhyDs));
  // and the maps agree: d capped is dS / T, d scaled is d biased.
  const float t = static_cast<float>(m.problem().temperature);
  EXPECT_TRUE(gm.dcapped.isApprox(gm.dlogits / t, 1e-6f));
  EXPECT_EQ(gm.dscaled, gm.dbiased);
  const GradTrace& gp = *show(s, v);  // no mods: d scaled through ÷ T
  EXPECT_EQ(texts(BackStep::Scaled, gp), std::pair(viewer::BT::StepTemperature, viewer::BT::WhyTemperature));
  // A modification switched off or on keeps the step on screen (the list's positions move), or
  // takes the nearest one before it that the new list has.
  for (int i = 0; i < 7; ++i) w.next();
  ASSERT_EQ(w.current(), BackStep::Scaled);
  viewer::ModSettings less = m.requested_mods();
  less.softcap = 0;
  ASSERT_TRUE(m.set_mods(less)) << m.error();
  ASSERT_NE(show(m, w), nullptr);
  EXPECT_EQ(w.current(), BackStep::Scaled);
  less.rope_theta = 0;
  ASSERT_TRUE(m.set_mods(less)) << m.error();
  ASSERT_NE(show(m, w), nullptr);
  EXPECT_EQ(w.current(), BackStep::Scaled);
  for (int i = 0; i < 2; ++i) w.next();
  ASSERT_EQ(w.current(), BackStep::Dq);
  viewer::ModSettings more = less;
  more.rope_theta = 100;
  more.softcap = 5;
  ASSERT_TRUE(m.set_mods(more)) << m.error();
  ASSERT_NE(show(m, w), nullptr);
  EXPECT_EQ(w.current(), BackStep::Dq);
  // The step's own modification gone: the one before it.
  w.prev();
  w.prev();
  ASSERT_EQ(w.current(), BackStep::Scores);
  w.next();
  ASSERT_EQ(w.current(), BackStep::Rope);
  more.rope_theta = 0;
  ASSERT_TRUE(m.set_mods(more)) << m.error();
  ASSERT_NE(show(m, w), nullptr);
  EXPECT_EQ(w.current(), BackStep::Scores);
}

TEST(BackwardView, TheDsRowSumsToZeroAndMaskedKeysGetNothing) {
  for (const bool causal : {false, true}) {
    SCOPED_TRACE(causal);
    viewer::ViewerOptions o = test::cpu_random_options(64, 16, 8, causal ? MaskKind::Causal : MaskKind::None);
    Session s(o);
    ASSERT_TRUE(s.set_query(40));
    BackwardView v;
    const GradTrace* g = show(s, v);
    ASSERT_NE(g, nullptr);
    const viewer::DsRow& r = v.row(s);
    EXPECT_EQ(r.query, 40);
    ASSERT_EQ(r.keys, 64);
    double scale = 0;
    for (int j = 0; j < 64; ++j) {
      scale = std::max(scale, std::abs(r.p[j] * r.centered[j]));
      // dS is the product of its two parts, as the backward computed it.
      EXPECT_NEAR(r.ds[j], r.p[j] * r.centered[j], 1e-5 * std::max(1.0, std::abs(r.centered[j]))) << j;
    }
    EXPECT_LT(std::abs(r.row_sum), 1e-5 * std::max(1.0, scale * 64));
    // Σ_j P dP = D: what makes the sum 0.
    EXPECT_NEAR(r.p_dp, r.D, 1e-5 * std::max(1.0, std::abs(r.D)));
    if (causal) {
      for (int j = 41; j < 64; ++j) {
        EXPECT_EQ(r.ds[j], 0.0) << j;
        // A masked key keeps its dP − D (it had shown 0): its dS is 0 because its P is.
        EXPECT_EQ(r.p[j], 0.0) << j;
        EXPECT_DOUBLE_EQ(r.centered[j], static_cast<double>(g->dp(40, j)) - r.D) << j;
        EXPECT_EQ(v.dt_matrix()(40, j), 0.0f) << j;
      }
    }
    nlohmann::json j;
    v.dump(j, s);
    EXPECT_EQ(j["backward"]["query"], 40);
    EXPECT_LT(std::abs(j["backward"]["row_sum"].get<double>()), 1e-4);
  }
}

TEST(BackwardView, PooledMapsKeepEachBlocksLargestEntryAndShowTheCausalTriangle) {
  // 1024 tokens in 128 x 128 pixel blocks: blocks above the diagonal are wholly masked (hatched);
  // the others show their entry of largest |value|, which the log scales spread over the colours.
  Problem p = random_problem(1024, 16, 16, 7);
  p.mask = MaskKind::Causal;
  const GradTrace g = cpu_backward(p, upstream_random(0));
  ASSERT_EQ(g.forward.mask.rows(), 1024);
  const viewer::AxisMap axis = viewer::map_axis(0, 1024, 128, 1024);
  const viewer::MapPicture ds = viewer::map_picture(g.dlogits, &g.forward.mask, true, true, axis, axis);
  const viewer::MapPicture w = viewer::map_picture(g.forward.weights, &g.forward.mask, false, true, axis, axis);
  ASSERT_EQ(ds.cells.size(), 128u * 128u);
  EXPECT_EQ(ds.masked_blocks, 128 * 127 / 2);
  EXPECT_EQ(w.masked_blocks, 128 * 127 / 2);
  int ds_coloured = 0, w_coloured = 0;
  for (int br = 0; br < 128; ++br)
    for (int bc = 0; bc < 128; ++bc) {
      const std::size_t i = static_cast<std::size_t>(br) * 128 + bc;
      ASSERT_EQ(ds.cells[i].masked, bc > br) << br << " " << bc;
      if (bc > br) continue;
      // The block's entry of largest |value| among the cells the query sees.
      float best = 0;
      for (int r = br * 8; r < br * 8 + 8; ++r)
        for (int c = bc * 8; c < std::min(bc * 8 + 8, r + 1); ++c)
          if (std::abs(g.dlogits(r, c)) > std::abs(best)) best = g.dlogits(r, c);
      EXPECT_EQ(ds.cells[i].value, best) << br << " " << bc;
      EXPECT_GT(w.cells[i].value, 0.f);
      ds_coloured += std::abs(ds.position(ds.cells[i].value) - 0.5) > 0.15;
      w_coloured += w.position(w.cells[i].value) > 0.3;
    }
  // Most blocks take a colour well away from the scale's neutral centre (dS) and its bottom (P).
  const int shown = 128 * 129 / 2;
  EXPECT_GT(ds_coloured, shown / 2);
  EXPECT_GT(w_coloured, shown / 2);
  EXPECT_DOUBLE_EQ(ds.range.lo, -ds.range.hi);
  EXPECT_DOUBLE_EQ(ds.position(0), 0.5);
}

TEST(BackwardView, LowerTemperatureGathersTheGradientOnTheTopKeysOfTheDemo) {
  Session s(test::cpu_viewer_options());
  BackwardView v;
  s.set_companion(v.companion());
  double last_share = -1, last_top = -1, last_mass = 1e300;
  for (const double t : {5.0, 2.0, 1.0, 0.5, 0.25, 0.12, 0.06}) {
    SCOPED_TRACE(t);
    ASSERT_TRUE(s.set_temperature(t));
    ASSERT_NE(show(s, v), nullptr);
    EXPECT_EQ(v.temperature(), t);
    const viewer::DsRow& r = v.row(s);
    EXPECT_EQ(r.top, 2);  // 上下文, the demo's largest weight at every temperature
    EXPECT_GT(r.top_two_share, last_share);
    EXPECT_GE(r.top_share, last_top - 1e-9);
    EXPECT_LE(r.top_share, 0.5 + 1e-6);  // the top entry is minus the others' sum
    EXPECT_LT(r.mass, last_mass);  // the row's |dS| shrinks as the softmax saturates
    last_share = r.top_two_share;
    last_top = r.top_share;
    last_mass = r.mass;
  }
  EXPECT_GT(last_share, 0.8);
  EXPECT_GT(last_top, 0.45);
}

TEST(BackwardView, TheSweepIsTheBackwardAtEachTemperature) {
  Session s(test::cpu_viewer_options());
  BackwardView v;
  ASSERT_NE(show(s, v), nullptr);
  const std::vector<double> ts = viewer::sweep_temperatures();
  ASSERT_EQ(v.sweep().size(), ts.size());
  EXPECT_DOUBLE_EQ(ts.front(), viewer::kBackwardTMin);
  EXPECT_NEAR(ts.back(), viewer::kBackwardTMax, 1e-12);
  // A point of the sweep is what the view shows at that temperature.
  ASSERT_TRUE(s.set_temperature(ts[3]));
  ASSERT_NE(show(s, v), nullptr);
  const viewer::DsRow& r = v.row(s);
  EXPECT_NEAR(v.sweep()[3].top_two_share[2], r.top_two_share, 1e-6);
  EXPECT_NEAR(v.sweep()[3].mass[2], r.mass, 1e-6);
  // Falling temperatures on the demo: the top two keys' share rises (the sweep's order is rising T).
  for (std::size_t k = 1; k < ts.size(); ++k)
    EXPECT_LT(v.sweep()[k].top_two_share[2], v.sweep()[k - 1].top_two_share[2]) << ts[k];
  EXPECT_FALSE(viewer::sweep_rounded_top(v.sweep(), 2));
  // Row 40 of 64 causal tokens at T = 0.05: the top weight rounds to 1 in fp32, its dS to 0.
  Session r64(test::cpu_random_options(64, 64, 64, MaskKind::Causal));
  BackwardView u;
  ASSERT_NE(show(r64, u), nullptr);
  EXPECT_EQ(u.sweep().front().top_share[40], 0.0f);
  EXPECT_TRUE(viewer::sweep_rounded_top(u.sweep(), 40));
  // Above kBackwardSweepMaxTokens the companion leaves the sweep out.
  Session big(test::cpu_random_options(viewer::kBackwardSweepMaxTokens + 1, 4, 4));
  BackwardView w;
  ASSERT_NE(show(big, w), nullptr);
  EXPECT_TRUE(w.sweep().empty());
}

TEST(BackwardView, UpstreamFromTheSeedOrTheSumLossAndItsFlags) {
  Session s(test::cpu_viewer_options());
  BackwardView v;
  const GradTrace* g = show(s, v);
  ASSERT_NE(g, nullptr);
  const MatrixF seed0 = g->dout;
  EXPECT_TRUE(seed0.isApprox(random_dout(5, 2, 0)));
  v.set_random(7);
  g = show(s, v);
  ASSERT_NE(g, nullptr);
  EXPECT_FALSE(g->dout.isApprox(seed0));
  v.set_sum();
  g = show(s, v);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->dout, MatrixF::Ones(5, 2));
  nlohmann::json j;
  v.dump(j, s);
  EXPECT_EQ(j["backward"]["upstream"], "sum");

  const viewer::ViewerOptions o = viewer::parse_viewer_args({"--view", "backward", "--dout-seed", "12"});
  EXPECT_EQ(o.views.backward.dout_seed, 12u);
  EXPECT_FALSE(o.views.backward.sum);
  EXPECT_TRUE(viewer::parse_viewer_args({"--loss", "sum"}).views.backward.sum);
  EXPECT_EQ(test::message_of<InputError>([] { viewer::parse_viewer_args({"--loss", "mse:y.csv"}); }),
            "--loss in the viewer takes sum (dO = 1 everywhere), got 'mse:y.csv'");
  EXPECT_EQ(BackwardView(o.views.backward).upstream().seed, 12u);
  EXPECT_NE(viewer::viewer_usage().find("--dout-seed"), std::string::npos);
  // A seed beside --loss sum would be dropped: refused in either order, with the CLI's line.
  for (const std::vector<std::string> args : {std::vector<std::string>{"--loss", "sum", "--dout-seed", "3"},
                                              {"--dout-seed", "3", "--loss", "sum"}})
    EXPECT_EQ(test::message_of<InputError>([&] { viewer::parse_viewer_args(args); }),
              "--dout-seed seeds the random dO; it does not apply with --dout or --loss");
  // --back-step: the step it opens on, once the backward has it.
  EXPECT_EQ(test::message_of<InputError>([] { viewer::parse_viewer_args({"--back-step", "dx"}); }),
            "--back-step must be one of dout, dv, dp, D, ds, dcapped, dbiased, dscaled, dscores, dq_rot, dq, dk, dT, "
            "got 'dx'");
  BackwardView at_ds(viewer::parse_viewer_args({"--back-step", "ds"}).views.backward);
  ASSERT_NE(show(s, at_ds), nullptr);
  EXPECT_EQ(at_ds.current(), BackStep::Ds);
  // A step of a modification the problem does not have: refused with what it needs, as the window
  // makes its views; taken where the problem has it.
  const auto refusal = [](const viewer::ViewerOptions& vo, const std::string& step) {
    Session session(vo);
    BackwardView::Options bo;
    bo.step = step;
    return test::message_of<InputError>([&] { BackwardView(viewer::ViewContext{session, true, true}, bo); });
  };
  viewer::ViewerOptions plain = test::cpu_random_options(16, 8, 8);
  EXPECT_EQ(refusal(plain, "dcapped"),
            "--back-step dcapped opens on the gradient of a stage that a modification adds: it needs --score-mod "
            "softcap:C");
  EXPECT_EQ(refusal(plain, "dbiased"),
            "--back-step dbiased opens on the gradient of a stage that a modification adds: it needs --score-mod "
            "alibi | bias:FILE");
  EXPECT_EQ(refusal(plain, "dq_rot"),
            "--back-step dq_rot opens on the gradient of a stage that a modification adds: it needs --rope [THETA]");
  plain.mods.softcap = 3;
  plain.score_mods_given = true;
  Session capped(plain);
  BackwardView::Options bo;
  bo.step = "dcapped";
  BackwardView at_capped(viewer::ViewContext{capped, true, true}, bo);
  ASSERT_NE(show(capped, at_capped), nullptr);
  EXPECT_EQ(at_capped.current(), BackStep::Capped);
}

TEST(BackwardView, RefusedAboveItsSizeWithoutComputing) {
  Session s(test::cpu_random_options(viewer::kBackwardMaxTokens + 4, 8, 8));
  BackwardView v;
  EXPECT_EQ(show(s, v), nullptr);
  EXPECT_EQ(v.status(), BackwardView::Status::TooLarge);
  // The companion itself refuses a problem that large (the worker computes nothing).
  viewer::CompanionInput in;
  in.problem = s.shared_problem();
  const auto r = viewer::BackwardCompanion(upstream_random(0)).compute(in);
  EXPECT_EQ(dynamic_cast<const viewer::BackwardResult&>(*r).grad, nullptr);
  nlohmann::json j;
  v.dump(j, s);
  EXPECT_EQ(j["backward"]["status"], "too_large");
}

// A map's size in its box: square cells as large as fit, a narrow matrix narrow but never under
// the least side, a square one never a stripe.
TEST(BackwardView, MapsKeepSquareCellsAndALeastSide) {
  using viewer::map_size;
  const auto square = map_size(5, 5, 400, 300, 40);
  EXPECT_FLOAT_EQ(square.w, 300);
  EXPECT_FLOAT_EQ(square.h, 300);
  const auto tall_box = map_size(5, 5, 100, 600, 40);
  EXPECT_FLOAT_EQ(tall_box.w, 100);
  EXPECT_FLOAT_EQ(tall_box.h, 100);
  const auto column = map_size(4096, 64, 400, 500, 40);  // V or dV: narrow, at least the least side
  EXPECT_FLOAT_EQ(column.w, 40);
  EXPECT_FLOAT_EQ(column.h, 500);
  const auto d = map_size(5, 1, 400, 300, 40);  // D: square cells
  EXPECT_FLOAT_EQ(d.w, 60);
  EXPECT_FLOAT_EQ(d.h, 300);
  const auto wide = map_size(5, 64, 400, 300, 40);  // few rows: short, not a hairline
  EXPECT_FLOAT_EQ(wide.w, 400);
  EXPECT_FLOAT_EQ(wide.h, 40);
  const auto small = map_size(5, 5, 20, 300, 40);  // the box wins over the least side
  EXPECT_FLOAT_EQ(small.w, 20);
  EXPECT_FLOAT_EQ(small.h, 20);
  EXPECT_EQ(map_size(5, 5, -3, 300, 40).w, 0);
  EXPECT_EQ(map_size(0, 5, 300, 300, 40).h, 0);
}

TEST(BackwardView, RegisteredWithEveryTextInBothLanguages) {
  EXPECT_GE(viewer::view_index("backward"), 0);
  for (int i = 0; i < static_cast<int>(viewer::BT::Count_); ++i) {
    const auto id = static_cast<viewer::BT>(i);
    const char *en = viewer::btr(Lang::En, id), *zh = viewer::btr(Lang::Zh, id);
    EXPECT_STRNE(en, "") << i;
    EXPECT_STRNE(en, zh) << i;
    EXPECT_EQ(test::printf_conversions(en), test::printf_conversions(zh)) << i;
  }
  // The caveats say what these gradients are not, and what masked positions get.
  EXPECT_NE(std::string(viewer::btr(Lang::En, viewer::BT::Caveats)).find("not of a model's training loss"),
            std::string::npos);
  EXPECT_NE(std::string(viewer::btr(Lang::Zh, viewer::BT::Caveats)).find("梯度恰好为零"), std::string::npos);
  // The maps' names: symbols, or words with their Chinese ("前向：capped" had shown in Chinese);
  // logits is the Chinese texts' own term.
  Problem p = random_problem(4, 4, 4, 1);
  p.mods.softcap = 3;
  p.mods.alibi = true;
  p.mods.rope_theta = 100;
  const GradTrace g = cpu_backward(p, Upstream{});
  const MatrixF dt = viewer::dt_terms(g, p.temperature);
  for (int s = 0; s <= static_cast<int>(viewer::BackStep::Dt); ++s) {
    const viewer::StepPair pair = viewer::step_pair(p, g, static_cast<viewer::BackStep>(s), dt);
    for (const char* name : {pair.forward_name.in(Lang::Zh), pair.grad_name.in(Lang::Zh)}) {
      std::string word;
      for (const char* c = name;; ++c) {
        if (*c >= 'a' && *c <= 'z') {
          word += *c;
          continue;
        }
        EXPECT_TRUE(word.size() < 3 || word == "logits") << s << ": " << name;
        word.clear();
        if (!*c) break;
      }
    }
  }
}

#ifdef ATTNLAB_VIEW_BINARY
TEST(BackwardView, HeadlessScreenshotsInBothLanguages) {
  const test::TempDir dir("attnlab-backward-shots");
  for (const std::string lang : {"en", "zh"}) {
    SCOPED_TRACE(lang);
    const std::string png = dir.file("backward-" + lang + ".png"), json = dir.file("backward-" + lang + ".json");
    const test::BinaryRun r = test::run_binary(
        "timeout", {"60", test::view_binary(), "--screenshot", png, "--state-dump", json, "--view", "backward",
                    "--lang", lang, "--backend", "cpu", "--size", "1280x800", "--dout-seed", "3"},
        "SDL_VIDEODRIVER=dummy LANG=C.UTF-8");
    ASSERT_EQ(r.code, 0) << r.err;
    std::ifstream in(json);
    const nlohmann::json j = nlohmann::json::parse(in);
    EXPECT_EQ(j["view"], "backward");
    EXPECT_EQ(j["backward"]["status"], "ok");
    EXPECT_EQ(j["backward"]["dout_seed"], 3);
    EXPECT_EQ(j["backward"]["current"], "dout");
    EXPECT_LT(std::abs(j["backward"]["row_sum"].get<double>()), 1e-5);
    // Nothing masked: no "masked" swatch beside the maps (the forward keeps a mask of zeros).
    EXPECT_FALSE(j["backward"]["any_masked"].get<bool>());
    EXPECT_TRUE(j["backward"]["row_table"].get<bool>());  // the demo's 5 keys: a table of numbers
    EXPECT_GT(test::read_file(png).size(), 10000u);
  }
}

// The dS row is a table of numbers only where every number fits the panel: 12 keys at 1280 x 800
// had cut them to "0.(" in columns of one character; they are strips there, a table when wide
// (the masked keys' dP − D are numbers too: a wide window, not only a large one).
TEST(BackwardView, TheDsRowIsATableOnlyWhereItsNumbersFit) {
  const test::TempDir dir("attnlab-backward-row");
  for (const auto& [size, table] : {std::pair<std::string, bool>{"1280x800", false}, {"3840x1200", true}}) {
    SCOPED_TRACE(size);
    const std::string png = dir.file("b.png"), json = dir.file("b.json");
    const test::BinaryRun r = test::run_binary(
        "timeout", {"60", test::view_binary(), "--screenshot", png, "--state-dump", json, "--view", "backward",
                    "--random", "12", "--mask", "causal", "--back-step", "ds", "--lang", "en", "--backend", "cpu",
                    "--size", size},
        "SDL_VIDEODRIVER=dummy LANG=C.UTF-8");
    ASSERT_EQ(r.code, 0) << r.err;
    std::ifstream in(json);
    const nlohmann::json j = nlohmann::json::parse(in);
    EXPECT_EQ(j["backward"]["row_table"].get<bool>(), table);
  }
}

// At a projector's UI scale the two maps of a square matrix stay square and readable, inside the
// window (the right column goes under them rather than squeezing them).
TEST(BackwardView, HeadlessMapsStaySquareAtALargeUiScale) {
  const test::TempDir dir("attnlab-backward-scale");
  const std::string png = dir.file("backward.png"), json = dir.file("backward.json");
  const test::BinaryRun r = test::run_binary(
      "timeout", {"60", test::view_binary(), "--screenshot", png, "--state-dump", json, "--view", "backward",
                  "--back-step", "ds", "--lang", "en", "--backend", "cpu", "--size", "1920x1080", "--ui-scale", "2"},
      "SDL_VIDEODRIVER=dummy LANG=C.UTF-8");
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream in(json);
  const nlohmann::json j = nlohmann::json::parse(in);
  const float fp = j["font_px"].get<float>(), window_w = j["window"]["w"].get<float>();
  ASSERT_EQ(j["backward"]["maps"].size(), 2u);
  for (const nlohmann::json& m : j["backward"]["maps"]) {
    const auto& pl = m["place"];
    const float w = pl["w"].get<float>(), h = pl["h"].get<float>();
    EXPECT_GE(w, 4 * fp);
    EXPECT_NEAR(w, h, 1.0f);
    EXPECT_LT(pl["legend_x"].get<float>() + fp, window_w);
  }
}

// Every step's two maps are labelled by what their rows and columns are: as many query or key
// tokens as the matrix has rows, as many key tokens or dimensions as it has columns, none on a
// single column. n != m, d_k != d_v and every modification tell the kinds apart.
TEST(BackwardView, EveryMapIsLabelledByWhatItsRowsAndColumnsAre) {
  Problem p = random_problem(4, 7, 6, 3, 5, 1, 1);
  p.mods.rope_theta = 10000;
  p.mods.alibi = true;
  p.mods.softcap = 20;
  const GradTrace g = cpu_backward(p, upstream_random(0));
  const MatrixF dt = viewer::dt_terms(g, p.temperature);
  const std::vector<BackStep> steps = viewer::backward_steps(g);
  ASSERT_EQ(steps.size(), 13u);
  for (BackStep s : steps) {
    SCOPED_TRACE(viewer::back_step_word(s));
    const viewer::StepPair pair = viewer::step_pair(p, g, s, dt);
    for (const MatrixF* m : {pair.forward, pair.grad}) {
      ASSERT_NE(m, nullptr);
      const viewer::MapEdges e = viewer::map_edges(pair, *m);
      ASSERT_TRUE(e.rows == viewer::Edge::Queries || e.rows == viewer::Edge::Keys);
      EXPECT_EQ(m->rows(), e.rows == viewer::Edge::Queries ? p.n() : p.m());
      switch (e.cols) {
        case viewer::Edge::Keys: EXPECT_EQ(m->cols(), p.m()); break;
        case viewer::Edge::Dims:
          EXPECT_TRUE(m->cols() == p.d_k() || m->cols() == p.d_v()) << m->cols();
          break;
        case viewer::Edge::None: EXPECT_EQ(m->cols(), 1); break;
        case viewer::Edge::Queries: ADD_FAILURE() << "columns are never queries"; break;
      }
    }
  }
}

// Pixels of `img` in [x0, x1) x [y0, y1) that are text: light grey to white, or the selected
// row's orange.
struct TextInk {
  int light = 0, orange = 0;
};
TextInk ink_in(const viewer::Image& img, float x0, float x1, float y0, float y1) {
  TextInk t;
  for (int y = std::max(0, static_cast<int>(y0)); y < std::min(img.height, static_cast<int>(y1)); ++y)
    for (int x = std::max(0, static_cast<int>(x0)); x < std::min(img.width, static_cast<int>(x1)); ++x) {
      const std::uint8_t* p = img.at(x, y);
      t.light += p[0] >= 170 && p[1] >= 170 && p[2] >= 170;
      t.orange += p[0] >= 220 && std::abs(p[1] - 140) <= 45 && p[2] <= 70;
    }
  return t;
}

// Both maps name their rows and columns: at 5 tokens every row's token left of the map (the
// selected query's in orange) and every key's above P and dS; on dV's rows the keys (none
// orange) and its columns the dimensions; D's single column no label; at 512 tokens evenly spaced
// ticks. The row labels stay right of the map on their left's legend.
TEST(BackwardView, HeadlessMapsNameTheirRowsAndColumns) {
  const test::TempDir dir("attnlab-backward-labels");
  struct Case {
    std::vector<std::string> args;
    bool every, query_rows;
    int rows;
    int cols[2];  // each map's columns; 0: no column labels
  };
  const Case cases[] = {
      {{"--back-step", "ds", "--lang", "zh"}, true, true, 5, {5, 5}},
      {{"--back-step", "dv", "--lang", "en"}, true, false, 5, {2, 2}},
      {{"--back-step", "D", "--lang", "en"}, true, true, 5, {2, 0}},
      {{"--back-step", "ds", "--lang", "en", "--random", "512", "--dk", "16"}, false, true, 512, {512, 512}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args[1] + " " + c.args[3] + " " + std::to_string(c.rows));
    const std::string png = dir.file("labels.png"), json = dir.file("labels.json");
    std::vector<std::string> args = {"120", test::view_binary(), "--screenshot", png, "--state-dump", json, "--view",
                                     "backward", "--backend", "cpu", "--size", "1280x800"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const test::BinaryRun r = test::run_binary("timeout", args, "SDL_VIDEODRIVER=dummy LANG=C.UTF-8");
    ASSERT_EQ(r.code, 0) << r.err;
    std::ifstream in(json);
    const nlohmann::json j = nlohmann::json::parse(in);
    const float fp = j["font_px"].get<float>();
    const int query = j["backward"]["query"].get<int>();
    const viewer::Image img = viewer::read_png(png);
    ASSERT_EQ(j["backward"]["maps"].size(), 2u);
    float left_legend = 0;
    for (int i = 0; i < 2; ++i) {
      const nlohmann::json& m = j["backward"]["maps"][i];
      const auto& pl = m["place"];
      const float x = pl["x"].get<float>(), y = pl["y"].get<float>(), w = pl["w"].get<float>(), h = pl["h"].get<float>();
      const float label_x = pl["label_x"].get<float>(), labels_top = pl["labels_top"].get<float>();
      EXPECT_GT(label_x, left_legend) << "the row labels begin after the left map's legend";
      left_legend = pl["legend_right"].get<float>();
      const int row_stride = m["labels"]["row_stride"].get<int>(), col_stride = m["labels"]["col_stride"].get<int>();
      EXPECT_EQ(row_stride == 1, c.every);
      EXPECT_GE(row_stride, 1);
      // Ink left of the labelled rows (the labels end before the selected row's tick): every row,
      // or with ticks the first three ticks' rows but one within a line of the query (left out).
      const float query_mid = y + h * (query + 0.5f) / c.rows;
      for (int k = 0; k < (c.every ? c.rows : 3); ++k) {
        const int row = k * row_stride;
        const float mid = y + h * (row + 0.5f) / c.rows;
        if (!c.every && std::abs(mid - query_mid) < fp) continue;
        const TextInk t = ink_in(img, label_x, x - fp * 0.9f, mid - fp * 0.4f, mid + fp * 0.4f);
        EXPECT_GT(t.light + t.orange, 0) << "row " << row;
      }
      if (c.query_rows) {
        EXPECT_GT(ink_in(img, label_x, x - fp * 0.9f, query_mid - 2, query_mid + 2).orange, 0) << "the query's label";
      } else {
        EXPECT_EQ(ink_in(img, label_x, x - fp * 0.9f, y, y + h).orange, 0);
      }
      // Ink above the labelled columns, about their middles: every column, or the first three
      // ticks'; none above a single column.
      const int cols = c.cols[i];
      if (cols == 0) {
        EXPECT_EQ(col_stride, 0);
        EXPECT_EQ(ink_in(img, x, x + w, y - fp * 1.5f, y - 1).light, 0);
        continue;
      }
      EXPECT_EQ(col_stride == 1, c.every);
      EXPECT_GE(col_stride, 1);
      for (int k = 0; k < (c.every ? cols : 3); ++k) {
        const int col = k * col_stride;
        const float mid = x + w * (col + 0.5f) / cols, half = c.every ? w / cols / 2 : fp * 0.5f;
        EXPECT_GT(ink_in(img, mid - half, mid + half, labels_top, y - 1).light, 0) << "column " << col;
      }
    }
  }
}

TEST(BackwardView, HeadlessCausalDsMapsAreHatchedOnALogScale) {
  const test::TempDir dir("attnlab-backward-causal");
  const std::string png = dir.file("backward.png"), json = dir.file("backward.json");
  const test::BinaryRun r = test::run_binary(
      "timeout", {"120", test::view_binary(), "--screenshot", png, "--state-dump", json, "--view", "backward",
                  "--random", "512", "--dk", "16", "--mask", "causal", "--back-step", "ds", "--lang", "en",
                  "--backend", "cpu", "--size", "1280x720"},
      "SDL_VIDEODRIVER=dummy LANG=C.UTF-8");
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream in(json);
  const nlohmann::json j = nlohmann::json::parse(in)["backward"];
  ASSERT_EQ(j["current"], "ds");
  EXPECT_TRUE(j["any_masked"].get<bool>());
  ASSERT_EQ(j["maps"].size(), 2u);
  for (const nlohmann::json& m : j["maps"]) {
    EXPECT_TRUE(m["log_scale"].get<bool>());
    // About half of the blocks lie above the diagonal, wholly masked.
    EXPECT_GT(m["masked_blocks"].get<int>(), m["blocks"].get<int>() / 3);
  }
  EXPECT_FALSE(j["maps"][0]["gradient"].get<bool>());
  EXPECT_TRUE(j["maps"][1]["gradient"].get<bool>());
  // Rows thinner than a frame get an orange tick on each side of the map; the right one ends
  // before the colour legend begins, and no orange lies on the legend's bar.
  const viewer::Image img = viewer::read_png(png);
  for (const nlohmann::json& m : j["maps"]) {
    const auto& pl = m["place"];
    const float legend_x = pl["legend_x"].get<float>(), mark_right = pl["mark_right"].get<float>();
    EXPECT_GT(mark_right, pl["x"].get<float>() + pl["w"].get<float>()) << "the row is marked by ticks";
    EXPECT_LT(mark_right + 2, legend_x);
    int orange = 0;
    for (int y = static_cast<int>(pl["y"].get<float>()); y < static_cast<int>(pl["y"].get<float>() + pl["h"].get<float>()); ++y)
      for (int x = static_cast<int>(legend_x) + 1; x < static_cast<int>(legend_x) + 6; ++x) {
        const std::uint8_t* p = img.at(x, y);
        orange += p[0] >= 220 && std::abs(p[1] - 140) <= 45 && p[2] <= 70;
      }
    EXPECT_EQ(orange, 0);
  }
}
#endif

}  // namespace
}  // namespace attnlab
