// The chain view's step 1 with RoPE (viewer/views/chain/chain_view.h): the Show row's choices
// (QKᵀ, Q, Q rotated, Q rotated − Q, K, K rotated, K rotated − K) switch the heatmap's matrix to
// the problem's own Q and K and their rotation (checked against the fp64 rotation and against the
// trace's q_rot / k_rot that QKᵀ multiplied), with the colour scale a matrix shares with its
// rotation; a cell's position, pair and angle; the state dump's chain.rope and the --chain-rope
// flag with its refusals; switching RoPE off shows QKᵀ again; streamed problems keep Q and K
// whole; every word in both languages; headless screenshots in both languages, small and streamed.
// Step 2's --chain-sub, its refusals and a screenshot.
#include "viewer_test_util.h"
#include "core/io.h"
#include "core/modify.h"
#include "tests/test_util.h"
#include "viewer/app/options.h"
#include "viewer/draw/strings.h"
#include "viewer/session/export.h"
#include "viewer/session/session.h"
#include "viewer/views/chain/chain_view.h"
#include "viewer/views/registry.h"
#ifdef ATTNLAB_VIEW_BINARY
#include "viewer/draw/png_io.h"
#endif

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <string>
#include <vector>

using namespace attnlab;
using namespace attnlab::viewer;

namespace {

// A random problem of n tokens with RoPE at θ on the CPU.
ViewerOptions rope_options(int n, int d_k, double theta) {
  ViewerOptions o = test::cpu_random_options(n, d_k, 8);
  o.mods.rope_theta = theta;
  o.rope_given = true;
  return o;
}

// max |a - b| over matrices of one shape (infinity when the shapes differ).
double max_abs_diff(const MatrixF& a, const MatrixD& b) {
  if (a.rows() != b.rows() || a.cols() != b.cols()) return INFINITY;
  return (a.cast<double>() - b).cwiseAbs().maxCoeff();
}

}  // namespace

TEST(ChainRope, EachChoiceIsTheProblemsQOrKOrTheirRotation) {
  const double theta = 500;
  Session s(rope_options(24, 8, theta));
  ChainView v;
  const Problem& p = s.problem();
  ASSERT_EQ(p.causal_offset(), 0);
  EXPECT_EQ(v.rope_matrix(s, ChainRope::QK), nullptr);  // the step's own QKᵀ
  // As given: the problem's inputs.
  ASSERT_NE(v.rope_matrix(s, ChainRope::Q), nullptr);
  EXPECT_EQ(*v.rope_matrix(s, ChainRope::Q), p.q());
  EXPECT_EQ(*v.rope_matrix(s, ChainRope::K), p.k());
  // Rotated: what QKᵀ multiplied (the trace's), and the rotation in double rounded once.
  const MatrixF& qr = *v.rope_matrix(s, ChainRope::QRot);
  const MatrixF& kr = *v.rope_matrix(s, ChainRope::KRot);
  ASSERT_EQ(qr.rows(), 24);
  ASSERT_EQ(qr.cols(), 8);
  EXPECT_EQ(qr, s.trace().q_rot);
  EXPECT_EQ(kr, s.trace().k_rot);
  const MatrixD q64 = rope_rotate(p.q().cast<double>(), 0, theta), k64 = rope_rotate(p.k().cast<double>(), 0, theta);
  EXPECT_LT(max_abs_diff(qr, q64), 1e-6);
  EXPECT_LT(max_abs_diff(kr, k64), 1e-6);
  // The rotation changes the rows after position 0, not row 0.
  EXPECT_GT((qr - p.q()).cwiseAbs().maxCoeff(), 0.1f);
  EXPECT_EQ(qr.row(0), p.q().row(0));
  // QKᵀ (the default picture) is the product of the two rotated matrices.
  EXPECT_LT(max_abs_diff(s.trace().scores, (q64 * k64.transpose())), 1e-4);
  // The differences: rotated minus given, 0 in row 0.
  const MatrixF qd = *v.rope_matrix(s, ChainRope::QDiff);
  EXPECT_EQ(qd, (qr - p.q()).eval());
  EXPECT_EQ(qd.row(0).cwiseAbs().maxCoeff(), 0.f);
  const MatrixF& kd = *v.rope_matrix(s, ChainRope::KDiff);
  EXPECT_LT(max_abs_diff(kd, k64 - p.k().cast<double>()), 1e-6);
}

TEST(ChainRope, AMatrixAndItsRotationShareOneColourScale) {
  Session s(rope_options(32, 8, 100));
  ChainView v;
  const Problem& p = s.problem();
  const MatrixF& qr = s.trace().q_rot;
  const MatrixF& kr = s.trace().k_rot;
  const ValueRange q = v.rope_range(s, ChainRope::Q), qrot = v.rope_range(s, ChainRope::QRot);
  EXPECT_DOUBLE_EQ(q.lo, std::min(p.q().minCoeff(), qr.minCoeff()));
  EXPECT_DOUBLE_EQ(q.hi, std::max(p.q().maxCoeff(), qr.maxCoeff()));
  EXPECT_DOUBLE_EQ(qrot.lo, q.lo);
  EXPECT_DOUBLE_EQ(qrot.hi, q.hi);
  const ValueRange k = v.rope_range(s, ChainRope::KRot);
  EXPECT_DOUBLE_EQ(k.lo, std::min(p.k().minCoeff(), kr.minCoeff()));
  EXPECT_DOUBLE_EQ(k.hi, std::max(p.k().maxCoeff(), kr.maxCoeff()));
  EXPECT_NE(k.lo, q.lo);
  // A difference has its own.
  const MatrixF kd = kr - p.k();
  const ValueRange d = v.rope_range(s, ChainRope::KDiff);
  EXPECT_DOUBLE_EQ(d.lo, kd.minCoeff());
  EXPECT_DOUBLE_EQ(d.hi, kd.maxCoeff());
  // Asked again after a new run (another θ): the new rotation's numbers, not the kept ones.
  ModSettings m = s.requested_mods();
  m.rope_theta = 10000;
  ASSERT_TRUE(s.set_mods(m)) << s.error();
  const MatrixF kd2 = s.trace().k_rot - p.k();
  EXPECT_DOUBLE_EQ(v.rope_range(s, ChainRope::KDiff).hi, kd2.maxCoeff());
  EXPECT_EQ(*v.rope_matrix(s, ChainRope::KDiff), kd2);
  EXPECT_EQ(v.rope_range(s, ChainRope::QK).lo, 0);
}

TEST(ChainRope, ACellNamesItsPositionPairAndAngle) {
  const double theta = 300;
  Session s(rope_options(12, 8, theta));
  ChainView v;
  const Problem& p = s.problem();
  const auto c = v.rope_cell(s, ChainRope::QRot, 5, 6);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->pos, 5);
  EXPECT_EQ(c->pair, 2);  // dimension 6 of 8 turns with dimension 2
  EXPECT_EQ(c->partner, 2);
  EXPECT_DOUBLE_EQ(c->frequency, std::pow(theta, -2.0 * 2 / 8));
  EXPECT_DOUBLE_EQ(c->angle, 5 * std::pow(theta, -0.5));
  EXPECT_EQ(c->before, p.q()(5, 6));
  EXPECT_EQ(c->after, s.trace().q_rot(5, 6));
  // The pair turned by that angle, in double.
  const double lo = p.q()(5, 2), hi = p.q()(5, 6);
  EXPECT_NEAR(c->after, hi * std::cos(c->angle) + lo * std::sin(c->angle), 1e-6);
  EXPECT_EQ(c->diff, c->after - c->before);
  const auto k = v.rope_cell(s, ChainRope::KDiff, 3, 1);
  ASSERT_TRUE(k);
  EXPECT_EQ(k->pos, 3);
  EXPECT_EQ(k->partner, 5);
  EXPECT_EQ(k->diff, s.trace().k_rot(3, 1) - p.k()(3, 1));
  EXPECT_FALSE(v.rope_cell(s, ChainRope::QK, 0, 0));
  EXPECT_FALSE(v.rope_cell(s, ChainRope::Q, 12, 0));
  EXPECT_FALSE(v.rope_cell(s, ChainRope::K, 0, 8));
  EXPECT_EQ(v.dim_labels(8).back(), "7");
}

TEST(ChainRope, TheStateDumpAndTheFlag) {
  EXPECT_EQ(parse_viewer_args({"--chain-rope", "k-diff", "--rope"}).views.chain.rope, ChainRope::KDiff);
  EXPECT_FALSE(parse_viewer_args({"--rope"}).views.chain.rope);
  EXPECT_EQ(test::message_of<InputError>([] { parse_viewer_args({"--chain-rope", "rot"}); }),
            "--chain-rope must be one of qk, q, q-rot, q-diff, k, k-rot, k-diff, got 'rot'");
  EXPECT_NE(viewer_usage().find("--chain-rope qk|q|q-rot|q-diff|k|k-rot|k-diff"), std::string::npos);
  for (ChainRope r : kChainRopes) EXPECT_EQ(chain_rope_of(chain_rope_word(r)), r);
  // Given with RoPE: the view opens on it; the dump names it and the matrix it draws.
  Session s(rope_options(24, 8, 10000));
  ChainView::Options o;
  o.rope = ChainRope::KDiff;
  ChainView v(ViewContext{s, true, true}, o);
  EXPECT_EQ(v.rope, ChainRope::KDiff);
  nlohmann::json j;
  v.dump(j, s);
  EXPECT_EQ(j["chain"]["rope"], "k-diff");
  EXPECT_EQ(j["chain"]["rope_rows"], 24);
  EXPECT_EQ(j["chain"]["rope_cols"], 8);
  const MatrixF kd = s.trace().k_rot - s.problem().k();
  EXPECT_DOUBLE_EQ(j["chain"]["rope_range"][0].get<double>(), kd.minCoeff());
  EXPECT_DOUBLE_EQ(j["chain"]["rope_range"][1].get<double>(), kd.maxCoeff());
  // Without RoPE the flag is refused with why (and qk, the default, is not).
  Session plain(test::cpu_random_options(24, 8, 8));
  EXPECT_EQ(test::message_of<InputError>([&] { ChainView(ViewContext{plain, true, true}, o); }),
            "--chain-rope k-diff shows RoPE's Q or K: it needs --rope [THETA] (and an even d_k)");
  o.rope = ChainRope::QK;
  EXPECT_NO_THROW({ ChainView ok(ViewContext{plain, true, true}, o); });
  // Through the registry, as the window makes its views.
  ViewerOptions vo = rope_options(24, 8, 10000);
  vo.views.chain.rope = ChainRope::Q;
  Session s2(vo);
  const auto views = make_views(s2, vo.views, "chain", false);
  nlohmann::json j2;
  views.front()->dump(j2, s2);
  EXPECT_EQ(j2["chain"]["rope"], "q");
}

TEST(ChainRope, SwitchingRopeOffShowsQkAgain) {
  Session s(rope_options(16, 8, 10000));
  ChainView v;
  v.rope = ChainRope::QRot;
  v.prepare(s, 1);
  EXPECT_EQ(v.rope, ChainRope::QRot);
  EXPECT_EQ(v.shown_rope(s), ChainRope::QRot);
  ASSERT_TRUE(s.set_mods(ModSettings{})) << s.error();
  EXPECT_EQ(s.rotated(), nullptr);
  // Before the view's next frame the choice already reads as QKᵀ; the frame resets it.
  EXPECT_EQ(v.shown_rope(s), ChainRope::QK);
  EXPECT_EQ(v.rope_matrix(s, ChainRope::QRot), nullptr);
  nlohmann::json j;
  v.dump(j, s);
  EXPECT_EQ(j["chain"]["rope"], "qk");
  EXPECT_FALSE(j["chain"].contains("rope_rows"));
  v.prepare(s, 1);
  EXPECT_EQ(v.rope, ChainRope::QK);
  // On again: QKᵀ first.
  ModSettings m;
  m.rope_theta = 10000;
  ASSERT_TRUE(s.set_mods(m)) << s.error();
  v.prepare(s, 1);
  EXPECT_EQ(v.shown_rope(s), ChainRope::QK);
  ASSERT_NE(v.rope_matrix(s, ChainRope::QRot), nullptr);
}

// Export CSV writes what the heatmap draws: step 1's RoPE matrix, step 2's sub-stage, else the
// step's stage (View::shown_matrix, the window's export through export_matrix_csv).
TEST(ChainRope, ExportWritesTheMatrixOnScreen) {
  Session s(rope_options(16, 8, 10000));
  ChainView v;
  EXPECT_EQ(v.shown_matrix(s, 1).matrix, nullptr);  // QKᵀ: the step's stage
  v.rope = ChainRope::QRot;
  const View::Shown shown = v.shown_matrix(s, 1);
  ASSERT_NE(shown.matrix, nullptr);
  EXPECT_EQ(shown.word, "q-rot");
  EXPECT_EQ(*shown.matrix, s.trace().q_rot);
  const test::TempDir dir("attnlab-chain-rope-export");
  const std::string stem = (dir.path() / "chain-rope-export").string();
  const std::string path = export_matrix_csv(*shown.matrix, shown.word, stem);
  EXPECT_EQ(path, stem + "-q-rot.csv");
  EXPECT_EQ(read_matrix(path), s.trace().q_rot);
  v.rope = ChainRope::KDiff;
  EXPECT_EQ(v.shown_matrix(s, 1).word, "k-diff");
  EXPECT_EQ(*v.shown_matrix(s, 1).matrix, (s.trace().k_rot - s.problem().k()).eval());
  EXPECT_EQ(v.shown_matrix(s, 3).matrix, nullptr);  // other steps: their stage
  // Step 2 with a soft-cap: the sub-stage chosen, the logits (the stage) by default.
  ModSettings m;
  m.softcap = 3;
  ASSERT_TRUE(s.set_mods(m)) << s.error();
  EXPECT_EQ(v.shown_matrix(s, 1).matrix, nullptr);  // RoPE off: QKᵀ again
  EXPECT_EQ(v.shown_matrix(s, 2).matrix, nullptr);
  v.sub = ChainView::Sub::Scaled;
  EXPECT_EQ(v.shown_matrix(s, 2).word, "scaled");
  EXPECT_EQ(*v.shown_matrix(s, 2).matrix, s.trace().scaled);
  v.sub = ChainView::Sub::Biased;  // no bias in this problem: the logits, the stage
  EXPECT_EQ(v.shown_matrix(s, 2).matrix, nullptr);
}

// --chain-sub: the view opens on that stage of step 2 (what the Show row would pick), the dump and
// the export name it; a stage the problem does not have is refused with why, a bad word with the
// choices.
TEST(ChainSub, TheFlagOpensOnAStageOfStep2) {
  EXPECT_EQ(parse_viewer_args({"--chain-sub", "capped"}).views.chain.sub,
            static_cast<int>(ChainView::Sub::Capped));
  EXPECT_FALSE(parse_viewer_args({}).views.chain.sub);
  EXPECT_EQ(test::message_of<InputError>([] { parse_viewer_args({"--chain-sub", "cap"}); }),
            "--chain-sub must be one of logits, scaled, biased, capped, got 'cap'");
  EXPECT_NE(viewer_usage().find("--chain-sub logits|scaled|biased|capped"), std::string::npos);
  for (ChainView::Sub sub : {ChainView::Sub::Logits, ChainView::Sub::Scaled, ChainView::Sub::Biased,
                             ChainView::Sub::Capped})
    EXPECT_EQ(parse_viewer_args({"--chain-sub", ChainView::sub_word(sub)}).views.chain.sub, static_cast<int>(sub));

  // A soft-capped problem through the registry, as the window makes its views.
  ViewerOptions vo = test::cpu_random_options(16, 8, 8);
  vo.mods.softcap = 3;
  vo.score_mods_given = true;
  vo.views.chain.sub = static_cast<int>(ChainView::Sub::Capped);
  vo.step = 2;
  Session s(vo);
  const auto views = make_views(s, vo.views, "chain", false);
  const View::Shown shown = views.front()->shown_matrix(s, 2);
  ASSERT_NE(shown.matrix, nullptr);
  EXPECT_EQ(shown.word, "capped");
  EXPECT_EQ(*shown.matrix, s.trace().capped);
  nlohmann::json j;
  views.front()->dump(j, s);
  EXPECT_EQ(j["chain"]["sub"], "capped");

  // Stages the problem does not have: refused with what they need; the logits always taken.
  const auto make = [](const ViewerOptions& o, ChainView::Sub sub) {
    Session session(o);
    ChainView::Options co;
    co.sub = static_cast<int>(sub);
    return ChainView(ViewContext{session, true, true}, co).sub;
  };
  const auto refusal = [&](const ViewerOptions& o, ChainView::Sub sub) {
    return test::message_of<InputError>([&] { make(o, sub); });
  };
  EXPECT_EQ(refusal(vo, ChainView::Sub::Biased),
            "--chain-sub biased shows a stage of step 2 that score mods add: it needs --score-mod alibi | bias:FILE");
  ViewerOptions plain = test::cpu_random_options(16, 8, 8);
  EXPECT_EQ(refusal(plain, ChainView::Sub::Scaled),
            "--chain-sub scaled shows a stage of step 2 that score mods add: it needs --score-mod alibi | softcap:C | "
            "bias:FILE");
  plain.mods.alibi = true;
  plain.score_mods_given = true;
  EXPECT_EQ(refusal(plain, ChainView::Sub::Capped),
            "--chain-sub capped shows a stage of step 2 that score mods add: it needs --score-mod softcap:C");
  EXPECT_EQ(make(plain, ChainView::Sub::Biased), ChainView::Sub::Biased);
  EXPECT_EQ(make(plain, ChainView::Sub::Scaled), ChainView::Sub::Scaled);
  EXPECT_EQ(make(test::cpu_random_options(16, 8, 8), ChainView::Sub::Logits), ChainView::Sub::Logits);
}

TEST(ChainRope, StreamedProblemsKeepQAndKWhole) {
  const int n = kKeepStagesMaxTokens + 8;
  Session s(rope_options(n, 8, 10000));
  ASSERT_TRUE(s.streaming());
  EXPECT_EQ(s.trace().q_rot.size(), 0);  // no stage kept
  ChainView v;
  const MatrixF* qr = v.rope_matrix(s, ChainRope::QRot);
  ASSERT_NE(qr, nullptr);
  ASSERT_EQ(qr->rows(), n);
  ASSERT_EQ(qr->cols(), 8);
  // Rows far down the sequence: the rotation at their positions.
  const int r0 = n - 40;
  const MatrixD ref = rope_rotate(s.problem().q().middleRows(r0, 40).cast<double>(), r0, 10000);
  EXPECT_LT(max_abs_diff(qr->middleRows(r0, 40), ref), 1e-5);
  EXPECT_EQ(v.rope_matrix(s, ChainRope::KDiff)->rows(), n);
}

TEST(ChainRope, EveryWordInBothLanguages) {
  for (int i = static_cast<int>(S::RopeQK); i <= static_cast<int>(S::TipRopeValues); ++i) {
    const auto id = static_cast<S>(i);
    const char *en = tr(Lang::En, id), *zh = tr(Lang::Zh, id);
    EXPECT_STRNE(en, "") << i;
    EXPECT_STRNE(en, zh) << i;
    EXPECT_EQ(test::printf_conversions(en), test::printf_conversions(zh)) << i;
  }
  EXPECT_STREQ(tr(Lang::Zh, S::RopeQRot), "旋转后的 Q");
  EXPECT_STREQ(tr(Lang::En, S::RopeKDiff), "K rotated − K");
  EXPECT_NE(std::string(tr(Lang::En, S::RopeNote)).find("position 0 is not turned"), std::string::npos);
  EXPECT_NE(std::string(tr(Lang::Zh, S::RopeNote)).find("位置 0 的行不转"), std::string::npos);
  EXPECT_EQ(test::printf_conversions(tr(Lang::En, S::TipRopeAngle)), "d..");  // %d, %.6g, %.6g
}

#ifdef ATTNLAB_VIEW_BINARY
namespace {

using Shot = test::ViewShot;
const auto shoot = test::view_shot;

// Distinct colours along a row of pixels a quarter down the plot (clear of the query's frame in
// the middle).
int distinct_colours(const Shot& s) {
  const auto& h = s.state["heatmap"];
  const int y = static_cast<int>(h["y"].get<double>() + h["h"].get<double>() / 4);
  std::set<std::uint32_t> seen;
  for (int x = static_cast<int>(h["x"].get<double>()); x < static_cast<int>(h["x"].get<double>() + h["w"].get<double>());
       ++x) {
    const std::uint8_t* p = s.img.at(x, y);
    seen.insert(p[0] | p[1] << 8 | p[2] << 16);
  }
  return static_cast<int>(seen.size());
}

}  // namespace

TEST(ChainRopeScreenshot, QRotatedInBothLanguagesAndStreamedK) {
  const test::TempDir dir("attnlab-chain-rope");
  Session s(rope_options(64, 16, 10000));
  const ValueRange want = ChainView().rope_range(s, ChainRope::QRot);
  for (const std::string lang : {"en", "zh"}) {
    SCOPED_TRACE(lang);
    const Shot shot = shoot(dir, "q-rot-" + lang, {"--random", "64", "--dk", "16", "--dv", "8", "--rope", "10000",
                                                   "--chain-rope", "q-rot", "--lang", lang, "--size", "1600x1000"});
    ASSERT_EQ(shot.code, 0) << shot.err;
    EXPECT_EQ(shot.state["chain"]["rope"], "q-rot");
    EXPECT_EQ(shot.state["heatmap"]["rows"], 64);
    EXPECT_EQ(shot.state["heatmap"]["cols"], 16);
    EXPECT_DOUBLE_EQ(shot.state["chain"]["rope_range"][0].get<double>(), want.lo);
    EXPECT_DOUBLE_EQ(shot.state["chain"]["rope_range"][1].get<double>(), want.hi);
    // At least 32 px a dimension, and a picture (not one colour).
    EXPECT_GE(shot.state["heatmap"]["cell_w"].get<double>(), 32.0 * 0.99);
    EXPECT_GT(distinct_colours(shot), 8);
  }
  // Streamed (no stage kept): K rotated whole, pooled into the plot.
  const Shot big = shoot(dir, "k-rot-big", {"--random", std::to_string(kKeepStagesMaxTokens * 2), "--dk", "64",
                                            "--dv", "8", "--rope", "10000", "--chain-rope", "k-rot"});
  ASSERT_EQ(big.code, 0) << big.err;
  EXPECT_FALSE(big.state["stages_kept"].get<bool>());
  EXPECT_EQ(big.state["heatmap"]["rows"], kKeepStagesMaxTokens * 2);
  EXPECT_EQ(big.state["heatmap"]["cols"], 64);
  EXPECT_GT(distinct_colours(big), 8);
  // Without RoPE: refused at start, with why.
  const Shot bad = shoot(dir, "bad", {"--random", "16", "--dk", "8", "--chain-rope", "q"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_TRUE(test::contains(bad.err, "--chain-rope q shows RoPE's Q or K: it needs --rope")) << bad.err;
}

TEST(ChainSubScreenshot, StepTwoOpensOnTheBiasedScores) {
  const test::TempDir dir("attnlab-chain-sub");
  const Shot shot = shoot(dir, "biased", {"--random", "16", "--dk", "8", "--dv", "8", "--score-mod", "alibi",
                                          "--step", "2", "--chain-sub", "biased", "--size", "1280x800"});
  ASSERT_EQ(shot.code, 0) << shot.err;
  EXPECT_EQ(shot.state["chain"]["sub"], "biased");
  EXPECT_GT(distinct_colours(shot), 8);
  const Shot bad = shoot(dir, "bad", {"--random", "16", "--dk", "8", "--step", "2", "--chain-sub", "capped"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_TRUE(test::contains(bad.err, "--chain-sub capped shows a stage of step 2 that score mods add")) << bad.err;
}
#endif
