// The backward walk (cpu/walk_backward.h): one query row through the fused backward's step.
#include "core/gcc12_avx512.h"  // first: see there

#include "cpu/walk_backward.h"

#include "core/modify.h"
#include "cpu/backward.h"
#include "cpu/chains.h"
#include "cpu/fused_backward.h"
#include "cpu/online_softmax.h"
#include "cpu/walk.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace attnlab {

using namespace cpu::online;

BackwardWalk walk_backward_row(const Problem& p, const Upstream& u, int head, int query, int tile) {
  if (tile < 1) throw InputError("tile must be a whole number of keys >= 1, got " + std::to_string(tile));
  validate(p);
  walk_check_row(p, head, query);
  validate_upstream(p, u);
  // The row alone (row_problem: Q's row and K as rotated, ALiBi and the bias as the row's bias, the
  // mask's row): the fused forward's m and l, the fused backward's D and dQ row, and the walk's own
  // steps, in O(m d) whatever n is. Its block mask's tiles come from p's rule at the row's query.
  const Problem r = row_problem(p, head, query);
  const Upstream ur = row_upstream(p, u, head, query);
  const int m = p.m(), d_k = p.d_k(), d_v = p.d_v();
  const MaskRule rule = mask_rule(p), row_rule = mask_rule(r);
  std::vector<float> slopes;
  const ScoreRule score = score_rule<float>(r, slopes);
  const float score_scale = static_cast<float>(r.scale_value());

  Trace forward;
  cpu::RowStats stats;
  const GradTrace fused = on_row_problem(head, query, [&] {
    cpu::fused_into(r, forward, &stats);
    return cpu_fused_backward(r, ur);
  });
  const float scale = stats.scale, mf = stats.m[0], lf = stats.l[0];
  const float inv_l = 1.f / lf, D = fused.D(0, 0);
  const float factor = score.any() ? scale * score_scale : scale;

  BackwardWalk w;
  walk_fill_header(p, head, query, tile, scale, w);
  w.rope = p.mods.rope_theta > 0;
  w.upstream = upstream_text(u, Lang::En);
  w.upstream_zh = upstream_text(u, Lang::Zh);
  w.dout_source = Upstream{u.kind, u.seed, u.file, {}};
  w.m = static_cast<double>(mf) * scale;
  w.l = lf;
  w.lse = w.m + std::log(static_cast<double>(lf));
  w.D = D;
  for (int c = 0; c < d_v; ++c) w.dout.push_back(fused.dout(0, c));

  // Lane 0 of a tile: Qᵀ and dOᵀ columns, S and dP rows of stride ld, as the kernel lays them out.
  constexpr Index ld = kTileCols;
  const int block = std::min(tile, m);
  std::vector<float> qt(static_cast<std::size_t>(d_k) * ld, 0.f), dot(static_cast<std::size_t>(d_v) * ld, 0.f);
  std::vector<float> st(static_cast<std::size_t>(block) * ld, 0.f), dpt(static_cast<std::size_t>(block) * ld, 0.f);
  for (int c = 0; c < d_k; ++c) qt[static_cast<std::size_t>(c) * ld] = r.q()(0, c);
  for (int c = 0; c < d_v; ++c) dot[static_cast<std::size_t>(c) * ld] = fused.dout(0, c);
  std::vector<float> dq(d_k, 0.f);  // the running sum of the tiles' shares, unscaled
  double ds_sum = 0;
  const auto logit = [&](float s) { return std::isinf(s) ? -std::numeric_limits<double>::infinity() : double(s) * scale; };

  const int count = walk_tile_count(m, tile);
  for (int t = 0; t < count; ++t) {
    BackwardWalkTile b;
    b.index = t;
    b.j0 = t * tile;
    b.j1 = std::min(m, b.j0 + tile);
    const int keys = b.j1 - b.j0;
    b.skip = walk_tile_skip(rule, query, b.j0, b.j1);
    b.skipped = b.skip != WalkTile::Skip::None;
    if (!b.skipped) {
      const float* kb = r.k().data() + static_cast<Index>(b.j0) * d_k;
      const float* vb = r.v().data() + static_cast<Index>(b.j0) * d_v;
      rows_madd(keys, kb, d_k, 1, qt.data(), ld, d_k, st.data(), ld, nullptr);
      rows_madd(keys, vb, d_v, 1, dot.data(), ld, d_v, dpt.data(), ld, nullptr);
      if (score.any()) modify_tile(score, score_scale, st.data(), ld, 0, 0, 1, b.j0, keys);
      mask_tile(row_rule, st.data(), ld, 0, 1, b.j0, keys);
      std::vector<float> share(d_k, 0.f);
      double top = -1;
      for (int j = 0; j < keys; ++j) {
        const float s = st[static_cast<std::size_t>(j) * ld], dp = dpt[static_cast<std::size_t>(j) * ld];
        const BackwardPair bp = backward_pair(ei::pset1<Packet>(s), ei::pset1<Packet>(mf), ei::pset1<Packet>(inv_l),
                                              ei::pset1<Packet>(dp), ei::pset1<Packet>(D),
                                              ei::pset1<Packet>(scale * kLog2e), score.softcap);
        const float pj = ei::pfirst(bp.p), dsj = ei::pfirst(bp.ds);
        b.logits.push_back(logit(s));
        if (!std::isinf(s)) ++w.visible;
        b.p.push_back(pj);
        b.dp.push_back(dp);
        // dlogits as the kernel sums it into dT (before a soft-cap's factor): P (dP − D).
        const float dl = pj * (dp - D);
        b.ds.push_back(dl);
        ds_sum += dl;
        if (std::abs(dl) > top && !std::isinf(s)) top = std::abs(dl), b.top = b.j0 + j;
        for (int c = 0; c < d_k; ++c) share[c] = std::fma(dsj, kb[static_cast<Index>(j) * d_k + c], share[c]);
      }
      for (int c = 0; c < d_k; ++c) dq[c] += share[c];
    }
    for (int c = 0; c < d_k; ++c) b.dq.push_back(static_cast<double>(dq[c] * factor));  // carried over a skip
    b.ds_sum = ds_sum;
    w.tiles.push_back(std::move(b));
  }
  // The final row, and the kernel's, turned back into the inputs' frame as the kernel turns its dQ.
  MatrixD final_row(1, d_k), fused_row(1, d_k);
  for (int c = 0; c < d_k; ++c) final_row(0, c) = dq[c] * factor;
  for (int c = 0; c < d_k; ++c) fused_row(0, c) = fused.dq(0, c);
  if (w.rope) {
    const int pos = query + p.causal_offset();
    final_row = rope_rotate_back(final_row, pos, p.mods.rope_theta).cast<float>().cast<double>();
    fused_row = rope_rotate_back(fused_row, pos, p.mods.rope_theta).cast<float>().cast<double>();
  }
  w.fp64_dq = reference_backward_fp64_row(p, u, head, query);
  for (int c = 0; c < d_k; ++c) {
    w.dq.push_back(final_row(0, c));
    w.fused_dq.push_back(fused_row(0, c));
    w.fused_diff = std::max(w.fused_diff, std::abs(w.dq[c] - w.fused_dq[c]));
    w.fp64_error = std::max(w.fp64_error, std::abs(w.dq[c] - w.fp64_dq[c]));
  }
  return w;
}

}  // namespace attnlab
