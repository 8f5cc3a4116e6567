// Redraw benchmark (see redraw_bench.h).
#include "viewer/app/redraw_bench.h"

#include "core/verify.h"
#include "cpu/cpu_backend.h"
#include "viewer/session/session.h"
#include "viewer/draw/heatmap.h"

#include <algorithm>
#include <chrono>
#include <ostream>
#include <string>
#include <vector>

namespace attnlab::viewer {
namespace {

}  // namespace

RedrawBench run_redraw_bench(const ViewerOptions& opts, std::ostream& log) {
  using clock = std::chrono::steady_clock;
  ViewerOptions o = opts;
  if (!o.random_n) o.random_n = 4096;
  Session c(o);
  RedrawBench r;
  r.n = c.n();
  r.d_k = c.problem().d_k();
  r.backend = c.backend();
  std::vector<double> total, backend, raster;
  double t = c.problem().temperature;
  // The heatmap's view of the whole matrix on 900 x 900 pixels: what a streamed problem (N above
  // kKeepStagesMaxTokens) computes its pooled stages for.
  const PlotGeometry g = place_plot(0, 0, 900, 900, c.n(), c.problem().m(), HeatView{});
  const AxisMap rmap = map_axis(g.first_row, g.vis_rows, g.px_h, c.n());
  const AxisMap cmap = map_axis(g.first_col, g.vis_cols, g.px_w, c.problem().m());
  PoolRequest view;
  view.rows = PoolAxis{rmap.begin, rmap.end};
  view.cols = PoolAxis{cmap.begin, cmap.end};
  view.mode = o.pool;
  c.set_view(view);
  for (int i = 0; i < o.repeat; ++i) {
    // Alternate up and down like a learner pressing [ and ].
    t = i % 2 ? t / 1.25 : t * 1.25;
    const auto t0 = clock::now();
    if (!c.set_temperature(t)) throw error_of(c.error_message());
    const auto t1 = clock::now();
    std::vector<std::uint32_t> px;
    if (const PooledGrid* pg = c.pooled_stage(3)) {
      px = rasterize_cells(pg->cells, rmap, cmap, ValueRange{pg->lo, pg->hi}, false, false);
    } else {
      const MatrixF* w = c.stage_matrix(3);
      if (!w) throw ResourceError("the stages were not kept (not enough memory), nothing to draw");
      RasterInput in;
      in.values = w->data();
      in.rows = static_cast<int>(w->rows());
      in.cols = static_cast<int>(w->cols());
      in.mask = c.trace().mask.size() ? c.trace().mask.data() : nullptr;
      in.mask_rows = static_cast<int>(c.trace().mask.rows());
      in.range = finite_range(in.values, in.rows, in.cols, in.mask, in.mask_rows);
      in.pool = o.pool;
      px = rasterize(in, g);
    }
    const auto t2 = clock::now();
    const double b = std::chrono::duration<double, std::milli>(t1 - t0).count();
    const double h = std::chrono::duration<double, std::milli>(t2 - t1).count();
    backend.push_back(b);
    raster.push_back(h);
    total.push_back(b + h);
    const StageTimings& tm = c.trace().timings;
    log << "redraw " << (i + 1) << "/" << o.repeat << ": T=" << t << " backend " << b
        << " ms + heatmap " << h << " ms (" << px.size() << " px) = " << (b + h)
        << " ms; inside the backend: upload " << tm.upload_ms << ", QK " << tm.qk_ms
        << ", scale/mask " << tm.scale_mask_ms << ", softmax " << tm.softmax_ms << ", PV "
        << tm.pv_ms << ", fused " << tm.fused_ms << ", download " << tm.download_ms << ", total "
        << tm.total_ms << " ms" << (!c.stages_kept() && c.trace().backend == "cuda"
                ? " (streamed on CUDA: softmax = the row statistics pass, QK = the pooling pass)"
                : "")
        << "\n";
  }
  r.median_ms = median_of(total);
  r.min_ms = *std::min_element(total.begin(), total.end());
  r.max_ms = *std::max_element(total.begin(), total.end());
  r.median_backend_ms = median_of(backend);
  r.median_raster_ms = median_of(raster);
  std::string kept;
  for (const std::string& name : stage_names(present_stages(c.trace()))) kept += (kept.empty() ? "" : ",") + name;
  log << "redraw N=" << r.n << " d_k=" << r.d_k << " backend=" << r.backend << " (ran "
      << c.trace().backend << "; stages back: " << (kept.empty() ? "none, streamed" : kept)
      << "): median " << r.median_ms << " ms (backend " << r.median_backend_ms << " ms, heatmap " << r.median_raster_ms << " ms), min " << r.min_ms << " ms, max "
      << r.max_ms << " ms over " << o.repeat << " temperature changes\n";
  if (c.stages_kept()) {
    VerifyOptions vo;
    vo.stages = present_stages(c.trace());
    const VerifyReport v = verify_trace(c.problem(), c.trace(), reference_fp64(c.problem()), vo);
    r.checked = true;
    r.check_pass = v.pass;
    log << "check of the last redraw (" << kept << ", output) against the fp64 reference: "
        << (v.pass ? "PASS" : "FAIL") << "\n";
    if (!v.pass) log << render_verify_text(v);
  } else {
    log << "check: not run (a streamed problem keeps no stage)\n";
  }
  return r;
}

}  // namespace attnlab::viewer
