// The fp32 staged chain of the CPU backend (cpu/staged.cpp): row blocks through all four stages,
// threads, reused buffers, the streaming results (exact rows, pooled views) and cancellation.
// Checked against the plain Eigen chain in fp32 and the fp64 reference, and each streaming result
// against the same values out of a run that kept every stage.
#include "core/backend.h"
#include "core/verify.h"
#include "cpu/cpu_backend.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <limits>

namespace attnlab {
namespace {

using test::make_problem;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// max |a - b| / max(1, max |b|), equal infinities counting as 0.
double rel_diff(const MatrixF& a, const MatrixF& b) {
  EXPECT_EQ(a.rows(), b.rows());
  EXPECT_EQ(a.cols(), b.cols());
  double worst = 0, scale = 1;
  for (Eigen::Index i = 0; i < a.size(); ++i) {
    const float x = a.data()[i], y = b.data()[i];
    if (std::isfinite(y)) scale = std::max(scale, std::abs(static_cast<double>(y)));
    if (x == y) continue;
    worst = std::max(worst, std::abs(static_cast<double>(x) - y));
  }
  return worst / scale;
}

struct Shape {
  int n, d_k, d_v, heads;
  MaskKind mask;
  double temperature;
};

class StagedCpuSweep : public ::testing::TestWithParam<Shape> {};

// Every stage of the blocked, threaded chain equals the plain whole-matrix chain to fp32 rounding
// and passes verify against fp64 (masked weights exactly 0 included).
TEST_P(StagedCpuSweep, MatchesThePlainChainAndFp64) {
  const Shape s = GetParam();
  const Problem p = make_problem(s.n, s.d_k, s.d_v, s.heads, s.mask, s.temperature, 11);
  const Trace t = cpu_staged(p);
  const Trace plain = cpu_staged_plain(p);
  ASSERT_TRUE(t.has_stages);
  EXPECT_LT(rel_diff(t.scores, plain.scores), 1e-6);
  EXPECT_LT(rel_diff(t.scaled, plain.scaled), 1e-6);
  EXPECT_EQ(rel_diff(t.mask, plain.mask), 0);
  EXPECT_LT(rel_diff(t.logits, plain.logits), 1e-6);
  EXPECT_LT(rel_diff(t.weights, plain.weights), 1e-6);
  EXPECT_LT(rel_diff(t.output, plain.output), 1e-6);
  const VerifyReport r = verify_trace(p, t, reference_fp64(p));
  EXPECT_TRUE(r.pass) << render_verify_text(r);
}

INSTANTIATE_TEST_SUITE_P(Shapes, StagedCpuSweep,
                         ::testing::Values(Shape{5, 3, 2, 1, MaskKind::None, 0.85},
                                           Shape{1, 4, 3, 1, MaskKind::None, 1.0},
                                           Shape{63, 8, 5, 1, MaskKind::Causal, 0.5},
                                           Shape{65, 16, 16, 3, MaskKind::Custom, 2.0},
                                           Shape{200, 64, 64, 2, MaskKind::Causal, 0.01},
                                           Shape{517, 32, 7, 1, MaskKind::None, 1.0},
                                           Shape{300, 128, 64, 1, MaskKind::Custom, 50.0}),
                         [](const ::testing::TestParamInfo<Shape>& i) {
                           const Shape& s = i.param;
                           return "n" + std::to_string(s.n) + "_dk" + std::to_string(s.d_k) + "_dv" +
                                  std::to_string(s.d_v) + "_h" + std::to_string(s.heads) + "_" +
                                  std::string(to_string(s.mask));
                         });

TEST(StagedCpu, KeysAndQueriesOfDifferentLengths) {
  Problem p = random_problem(37, 8, 4, 3);
  p.edit().k = random_problem(90, 8, 4, 4).k();
  p.edit().v = random_problem(90, 8, 4, 5).v();
  p.edit().key_tokens = index_tokens(90);
  const Trace t = cpu_staged(p);
  EXPECT_LT(rel_diff(t.weights, cpu_staged_plain(p).weights), 1e-6);
  EXPECT_LT(rel_diff(t.output, cpu_staged_plain(p).output), 1e-6);
}

// Reused buffers give the same numbers as fresh ones, also when the shape changes in between.
TEST(StagedCpu, RunIntoReusesBuffersWithoutChangingResults) {
  const auto backend = make_cpu_backend();
  const Problem a = make_problem(130, 16, 8, 1, MaskKind::Causal, 0.7, 1);
  const Problem b = make_problem(40, 16, 8, 2, MaskKind::None, 1.3, 2);
  Trace t;
  backend->run_into(a, RunOptions{}, t);
  const float* weights_buffer = t.weights.data();
  backend->run_into(a, RunOptions{}, t);
  EXPECT_EQ(t.weights.data(), weights_buffer) << "same shape: the buffer is reused";
  EXPECT_EQ(rel_diff(t.weights, cpu_staged(a).weights), 0);
  backend->run_into(b, RunOptions{}, t);
  EXPECT_EQ(rel_diff(t.output, cpu_staged(b).output), 0);
  EXPECT_EQ(rel_diff(t.logits, cpu_staged(b).logits), 0);
}

TEST(StagedCpu, OutputOnlyHoldsNoStagesAndTheSameOutput) {
  const Problem p = make_problem(300, 32, 16, 2, MaskKind::Custom, 0.9, 3);
  const Trace kept = cpu_staged(p);
  const Trace out = cpu_staged_output_only(p);
  EXPECT_FALSE(out.has_stages);
  EXPECT_EQ(out.scores.size() + out.weights.size() + out.mask.size(), 0);
  EXPECT_EQ(rel_diff(out.output, kept.output), 0);
}

// At a low temperature most weights underflow: they are exactly 0, never subnormal (which made
// P·V ten times slower), and every row still sums to 1.
TEST(StagedCpu, LowTemperatureGivesNoSubnormalWeights) {
  const Problem p = make_problem(256, 64, 16, 1, MaskKind::Causal, 0.002, 4);
  const Trace t = cpu_staged(p);
  int zeros = 0;
  for (Eigen::Index i = 0; i < t.weights.size(); ++i) {
    const float w = t.weights.data()[i];
    ASSERT_TRUE(w == 0.f || std::fpclassify(w) == FP_NORMAL) << "weight " << w << " at " << i;
    zeros += w == 0.f;
  }
  EXPECT_GT(zeros, t.weights.size() / 2 + t.weights.size() / 4);
  for (Eigen::Index r = 0; r < t.weights.rows(); ++r) EXPECT_NEAR(t.weights.row(r).sum(), 1.0, 1e-5);
  const VerifyReport rep = verify_trace(p, t, reference_fp64(p));
  EXPECT_TRUE(rep.pass) << render_verify_text(rep);
}

TEST(StagedCpu, OverflowIsRefusedWithThePlace) {
  Problem p = random_problem(20, 4, 2, 1);
  p.edit().q(7, 1) = 2e19f;
  p.edit().k(3, 1) = 2e19f;
  const std::string msg = test::message_of<InputError>([&] { cpu_staged(p); });
  EXPECT_NE(msg.find("QKᵀ overflows at row 7, column 3"), std::string::npos) << msg;
  Problem q = random_problem(20, 4, 2, 1);
  q.temperature = 1e-37;
  q.edit().q *= 1e4f;
  const std::string m2 = test::message_of<InputError>([&] { cpu_staged_output_only(q); });
  EXPECT_NE(m2.find("the logits"), std::string::npos) << m2;
}

// ---- streaming: exact rows, cancellation, progress -----------------------------------------------

TEST(StagedCpuStreaming, ExactRowsEqualTheKeptStages) {
  const Problem p = make_problem(200, 16, 8, 2, MaskKind::Custom, 0.6, 5);
  const Trace kept = cpu_staged(p);
  for (bool output : {true, false}) {
    RunOptions o;
    o.keep_stages = false;
    o.output = output;
    o.rows = {0, 133, 399};
    Trace t;
    cpu_staged_into(p, o, t);
    EXPECT_EQ(t.output.size(), output ? kept.output.size() : 0);
    ASSERT_EQ(t.rows.size(), 3u);
    for (const RowStages& r : t.rows) {
      const int m = p.m();
      ASSERT_EQ(static_cast<int>(r.weights.size()), m);
      for (int j = 0; j < m; ++j) {
        EXPECT_NEAR(r.scores[j], kept.scores(r.row, j), 1e-6 * (1 + std::abs(kept.scores(r.row, j))));
        EXPECT_NEAR(r.scaled[j], kept.scaled(r.row, j), 1e-6 * (1 + std::abs(kept.scaled(r.row, j))));
        EXPECT_EQ(r.mask[j], kept.mask(r.row % p.n(), j));
        if (std::isinf(kept.logits(r.row, j))) {
          EXPECT_EQ(r.logits[j], kNegInf);
          EXPECT_EQ(r.weights[j], 0.f);
        } else {
          EXPECT_NEAR(r.logits[j], kept.logits(r.row, j), 1e-6 * (1 + std::abs(kept.logits(r.row, j))));
          EXPECT_NEAR(r.weights[j], kept.weights(r.row, j), 1e-7);
        }
      }
    }
  }
}

TEST(StagedCpuStreaming, ExactRowsOfAKeptRunAreItsStages) {
  const Problem p = make_problem(50, 8, 4, 1, MaskKind::Causal, 0.8, 9);
  RunOptions o;
  o.rows = {17};
  Trace t;
  cpu_staged_into(p, o, t);
  ASSERT_TRUE(t.has_stages);
  ASSERT_EQ(t.rows.size(), 1u);
  for (int j = 0; j < 50; ++j) {
    EXPECT_EQ(t.rows[0].scores[j], t.scores(17, j));
    EXPECT_EQ(t.rows[0].weights[j], t.weights(17, j));
    EXPECT_EQ(t.rows[0].mask[j], t.mask(17, j));
  }
}

TEST(StagedCpuStreaming, BadRowsAndPoolRequestsAreRefused) {
  const Problem p = make_problem(10, 4, 2, 1, MaskKind::None, 1, 6);
  RunOptions o;
  o.keep_stages = false;
  o.rows = {10};
  Trace t;
  EXPECT_THROW(cpu_staged_into(p, o, t), InputError);
  PoolRequest r;
  r.rows.begin = {0};
  r.rows.end = {11};
  r.cols.begin = {0};
  r.cols.end = {10};
  o.rows = {};
  o.pool = &r;
  EXPECT_THROW(cpu_staged_into(p, o, t), InputError);
  r.rows.end = {10};
  r.head = 1;
  EXPECT_THROW(cpu_staged_into(p, o, t), InputError);
}

TEST(StagedCpuStreaming, CancelStopsTheRunAndProgressReachesOne) {
  const Problem p = make_problem(400, 16, 8, 1, MaskKind::None, 1, 7);
  std::atomic<bool> cancel{true};
  std::atomic<float> progress{0};
  RunOptions o;
  o.cancel = &cancel;
  o.progress = &progress;
  Trace t;
  EXPECT_THROW(cpu_staged_into(p, o, t), Cancelled);
  EXPECT_EQ(progress.load(), 0.f);
  cancel = false;
  cpu_staged_into(p, o, t);
  EXPECT_EQ(progress.load(), 1.f);
  EXPECT_EQ(rel_diff(t.output, cpu_staged(p).output), 0);
}

// A long sequence streamed through a few rows of scratch: the pooled view of a window and the
// selected row come back without any (n, m) matrix.
TEST(StagedCpuStreaming, LongSequenceNeedsNoSquareMatrix) {
  const int n = 65536;
  const Problem p = make_problem(n, 16, 4, 1, MaskKind::Causal, 1.0, 8);
  PoolRequest r;
  for (int px = 0; px < 4; ++px) {
    r.rows.begin.push_back(40000 + 2 * px);
    r.rows.end.push_back(40002 + 2 * px);
    r.cols.begin.push_back(39990 + 5 * px);
    r.cols.end.push_back(39995 + 5 * px);
  }
  RunOptions o;
  o.keep_stages = false;
  o.output = false;
  o.pool = &r;
  o.rows = {40003};
  EXPECT_LT(host_working_set_bytes(p, o), 2.0 * (1 << 30));
  Trace t;
  cpu_staged_into(p, o, t);
  EXPECT_EQ(t.scores.size() + t.weights.size() + t.output.size(), 0);
  ASSERT_EQ(t.pooled.weights.cells.size(), 16u);
  ASSERT_EQ(t.rows.size(), 1u);
  const RowStages& row = t.rows[0];
  // Causal: keys after 40003 are masked, the pooled block of columns 40005..40009 for rows
  // 40006.. are partly visible.
  EXPECT_EQ(row.weights[40004], 0.f);
  EXPECT_EQ(row.mask[40004], kNegInf);
  double sum = 0;
  for (float w : row.weights) sum += w;
  EXPECT_NEAR(sum, 1.0, 1e-4);
  // Pixel (row 1, col 0): rows 40002..40003, columns 39990..39994, all unmasked; its max weight
  // for row 40003 is at most the row's own max.
  const PooledCell& cell = t.pooled.weights.cells[1 * 4 + 0];
  EXPECT_FALSE(cell.masked);
  EXPECT_GT(cell.value, 0.f);
  // Pixel (row 0, col 3): rows 40000..40001, columns 40005..40009: all in the future, masked.
  EXPECT_TRUE(t.pooled.weights.cells[0 * 4 + 3].masked);
  EXPECT_FALSE(t.pooled.scores.cells[0 * 4 + 3].masked) << "the scores are shown unmasked";
}

// RunOptions::stages: the chain computes every stage, and only the requested ones come back, each
// equal to the full run's; the output and the exact rows are there either way.
TEST(StagedCpu, OnlyTheRequestedStagesComeBack) {
  const auto backend = make_cpu_backend();
  const Problem p = make_problem(70, 16, 8, 1, MaskKind::Causal, 0.7, 4);
  const Trace full = backend->run(p, RunOptions{});
  RunOptions opt;
  opt.stages = kStageLogits | kStageWeights;
  opt.rows = {3, 69};
  Trace t;
  backend->run_into(p, RunOptions{}, t);  // a reused trace that held every stage
  backend->run_into(p, opt, t);
  EXPECT_TRUE(t.has_stages);
  EXPECT_EQ(t.scores.size() + t.scaled.size() + t.mask.size(), 0);
  EXPECT_EQ(t.logits, full.logits);
  EXPECT_EQ(t.weights, full.weights);
  EXPECT_EQ(t.output, full.output);
  ASSERT_EQ(t.rows.size(), 2u);
  EXPECT_EQ(t.rows[1].row, 69);
  EXPECT_EQ(t.rows[1].scores, std::vector<float>(full.scores.data() + 69 * 70, full.scores.data() + 70 * 70));
  // Without kept stages the stage set changes nothing.
  opt.keep_stages = false;
  opt.rows.clear();
  EXPECT_EQ(backend->run(p, opt).output, full.output);
}

}  // namespace
}  // namespace attnlab
