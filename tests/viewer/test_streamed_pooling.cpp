// The backend's streamed pooling (RunOptions::pool, computed row block by row block without any
// (n, m) matrix) against the viewer's pool_grid over the stages of a run that kept them: the same
// picture, pixel for pixel, for max and mean, every mask, pooled and magnified axes and zoomed
// windows; and the colour range equal to finite_range over the window.
#include "core/backend.h"
#include "cpu/cpu_backend.h"
#include "viewer/draw/pooling.h"

#include "../test_util.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace attnlab;
using namespace attnlab::viewer;

namespace {

PoolAxis to_axis(const AxisMap& m) { return PoolAxis{m.begin, m.end}; }

struct Window {
  double first_row, rows, first_col, cols;
  int px_h, px_w;
};

void expect_same_picture(const Problem& p, const Window& w, PoolMode mode) {
  const Trace kept = cpu_staged(p);
  const AxisMap rmap = map_axis(w.first_row, w.rows, w.px_h, p.n());
  const AxisMap cmap = map_axis(w.first_col, w.cols, w.px_w, p.m());
  PoolRequest req;
  req.rows = to_axis(rmap);
  req.cols = to_axis(cmap);
  req.mode = mode;
  RunOptions o;
  o.keep_stages = false;
  o.pool = &req;
  Trace t;
  cpu_staged_into(p, o, t);
  const std::pair<const MatrixF*, const PooledGrid*> stages[] = {
      {&kept.scores, &t.pooled.scores}, {&kept.logits, &t.pooled.logits}, {&kept.weights, &t.pooled.weights}};
  for (int s = 0; s < 3; ++s) {
    const MatrixF& m = *stages[s].first;
    const PooledGrid& g = *stages[s].second;
    const float* mask = s > 0 ? kept.mask.data() : nullptr;
    const auto ref = pool_grid(m.data(), static_cast<int>(m.rows()), static_cast<int>(m.cols()), mask,
                               static_cast<int>(kept.mask.rows()), rmap, cmap, mode);
    ASSERT_EQ(g.cells.size(), ref.size());
    ASSERT_EQ(g.rows, w.px_h);
    ASSERT_EQ(g.cols, w.px_w);
    for (std::size_t i = 0; i < ref.size(); ++i) {
      ASSERT_EQ(g.cells[i].masked, ref[i].masked) << "stage " << s << " pixel " << i;
      if (!ref[i].masked)
        ASSERT_NEAR(g.cells[i].value, ref[i].value, 2e-6 * (1 + std::abs(ref[i].value))) << "stage " << s << " pixel " << i;
    }
    // The range covers exactly the window's cells.
    const int r0 = rmap.begin.front(), r1 = rmap.end.back(), c0 = cmap.begin.front(), c1 = cmap.end.back();
    MatrixF win = m.block(r0, c0, r1 - r0, c1 - c0);
    MatrixF wmask = kept.mask.block(r0, c0, r1 - r0, c1 - c0);
    const ValueRange vr = finite_range(win.data(), static_cast<int>(win.rows()), static_cast<int>(win.cols()),
                                       mask ? wmask.data() : nullptr, static_cast<int>(wmask.rows()));
    bool any = false;
    for (const PooledCell& c : ref) any = any || !c.masked;
    ASSERT_EQ(g.has_range, any) << "stage " << s;
    if (!any) continue;
    EXPECT_NEAR(g.lo, vr.lo, 2e-6 * (1 + std::abs(vr.lo))) << "stage " << s;
    EXPECT_NEAR(g.hi, vr.hi, 2e-6 * (1 + std::abs(vr.hi))) << "stage " << s;
  }
}

}  // namespace

TEST(StreamedPooling, WholeViewPooledMatchesPoolGrid) {
  for (MaskKind mask : {MaskKind::None, MaskKind::Causal, MaskKind::Custom})
    for (PoolMode mode : {PoolMode::Max, PoolMode::Mean}) {
      SCOPED_TRACE(std::string(to_string(mask)) + (mode == PoolMode::Max ? " max" : " mean"));
      const Problem p = test::make_problem(301, 16, 4, 1, mask, 0.7, 21);
      expect_same_picture(p, {0, 301, 0, 301, 37, 53}, mode);
    }
}

TEST(StreamedPooling, MagnifiedAndZoomedWindowsMatchPoolGrid) {
  const Problem p = test::make_problem(150, 8, 4, 1, MaskKind::Causal, 1.3, 22);
  expect_same_picture(p, {0, 150, 0, 150, 300, 300}, PoolMode::Max);      // every cell magnified
  expect_same_picture(p, {40.5, 20.25, 30.0, 30, 64, 45}, PoolMode::Mean);  // zoomed, magnified
  expect_same_picture(p, {40.5, 20.25, 90.0, 30, 64, 45}, PoolMode::Max);   // all in the future
  expect_same_picture(p, {10, 100, 0, 150, 33, 300}, PoolMode::Mean);       // rows pooled, cols not
}

TEST(StreamedPooling, OtherHeadsAndTheOutputComeAlong) {
  const Problem p = test::make_problem(64, 8, 4, 3, MaskKind::None, 1.0, 23);
  const AxisMap rmap = map_axis(0, 64, 16, 64), cmap = map_axis(0, 64, 16, 64);
  PoolRequest req;
  req.rows = to_axis(rmap);
  req.cols = to_axis(cmap);
  req.head = 2;
  RunOptions o;
  o.keep_stages = false;
  o.pool = &req;
  Trace t;
  cpu_staged_into(p, o, t);
  const Trace kept = cpu_staged(p);
  EXPECT_EQ((t.output - kept.output).cwiseAbs().maxCoeff(), 0.f);
  const MatrixF head2 = kept.weights.middleRows(2 * 64, 64);
  const auto ref = pool_grid(head2.data(), 64, 64, kept.mask.data(), 64, rmap, cmap, PoolMode::Max);
  for (std::size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(t.pooled.weights.cells[i].value, ref[i].value, 1e-7);
}
