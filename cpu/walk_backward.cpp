// The backward walk (cpu/walk_backward.h): one query row through the fused backward's step.
#include "core/gcc12_avx512.h"  // first: see there

#include "cpu/walk_backward.h"

#include "core/modify.h"
#include "cpu/backward.h"
#include "cpu/chains.h"
#include "cpu/fused_backward.h"
#include "cpu/online_softmax.h"
#include "cpu/walk.h"

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
  const int n = p.n(), m = p.m(), d_k = p.d_k(), d_v = p.d_v();
  const std::shared_ptr<const RotatedQK> rot = rotated_qk(p);
  const MaskRule rule = mask_rule(p);
  std::vector<float> slopes;
  const ScoreRule score = score_rule<float>(p, slopes);
  const float score_scale = static_cast<float>(p.scale_value());

  // The fused forward's statistics and the fused backward of the whole problem (the comparison).
  Trace forward;
  cpu::RowStats stats;
  cpu::fused_into(p, forward, &stats);
  const GradTrace fused = cpu_fused_backward(p, u);
  const Index row = static_cast<Index>(head) * n + query;
  const float scale = stats.scale, mf = stats.m[row], lf = stats.l[row];
  const float inv_l = 1.f / lf, D = fused.D(row, 0);
  const float factor = score.any() ? scale * score_scale : scale;

  BackwardWalk w;
  walk_fill_header(p, head, query, tile, scale, w);
  w.rope = rot != nullptr;
  w.upstream = upstream_text(u, Lang::En);
  w.upstream_zh = upstream_text(u, Lang::Zh);
  w.m = static_cast<double>(mf) * scale;
  w.l = lf;
  w.lse = w.m + std::log(static_cast<double>(lf));
  w.D = D;
  for (int c = 0; c < d_v; ++c) w.dout.push_back(fused.dout(row, c));

  // Lane 0 of a tile: Qᵀ and dOᵀ columns, S and dP rows of stride ld, as the kernel lays them out.
  constexpr Index ld = kTileCols;
  const int block = std::min(tile, m);
  std::vector<float> qt(static_cast<std::size_t>(d_k) * ld, 0.f), dot(static_cast<std::size_t>(d_v) * ld, 0.f);
  std::vector<float> st(static_cast<std::size_t>(block) * ld, 0.f), dpt(static_cast<std::size_t>(block) * ld, 0.f);
  const MatrixF& q = kernel_q(p, rot.get());
  const MatrixF& k = kernel_k(p, rot.get());
  for (int c = 0; c < d_k; ++c) qt[static_cast<std::size_t>(c) * ld] = q(row, c);
  for (int c = 0; c < d_v; ++c) dot[static_cast<std::size_t>(c) * ld] = fused.dout(row, c);
  const Index krow = p.kv_row(head);
  std::vector<float> dq(d_k, 0.f);  // the running sum of the tiles' shares, unscaled
  double ds_sum = 0;
  const auto logit = [&](float s) { return std::isinf(s) ? -std::numeric_limits<double>::infinity() : double(s) * scale; };

  const int count = walk_tile_count(m, tile);
  for (int t = 0; t < count; ++t) {
    BackwardWalkTile r;
    r.index = t;
    r.j0 = t * tile;
    r.j1 = std::min(m, r.j0 + tile);
    const int keys = r.j1 - r.j0;
    r.skip = walk_tile_skip(rule, query, r.j0, r.j1);
    r.skipped = r.skip != WalkTile::Skip::None;
    if (!r.skipped) {
      const float* kb = k.data() + (krow + r.j0) * d_k;
      const float* vb = p.v().data() + (krow + r.j0) * d_v;
      rows_madd(keys, kb, d_k, 1, qt.data(), ld, d_k, st.data(), ld, nullptr);
      rows_madd(keys, vb, d_v, 1, dot.data(), ld, d_v, dpt.data(), ld, nullptr);
      if (score.any()) modify_tile(score, score_scale, st.data(), ld, head, query, 1, r.j0, keys);
      mask_tile(rule, st.data(), ld, query, 1, r.j0, keys);
      std::vector<float> share(d_k, 0.f);
      double top = -1;
      for (int j = 0; j < keys; ++j) {
        const float s = st[static_cast<std::size_t>(j) * ld], dp = dpt[static_cast<std::size_t>(j) * ld];
        const BackwardPair b = backward_pair(ei::pset1<Packet>(s), ei::pset1<Packet>(mf), ei::pset1<Packet>(inv_l),
                                             ei::pset1<Packet>(dp), ei::pset1<Packet>(D), ei::pset1<Packet>(scale * kLog2e),
                                             score.softcap);
        const float pj = ei::pfirst(b.p), dsj = ei::pfirst(b.ds);
        r.logits.push_back(logit(s));
        r.p.push_back(pj);
        r.dp.push_back(dp);
        // dlogits as the kernel sums it into dT (before a soft-cap's factor): P (dP − D).
        const float dl = pj * (dp - D);
        r.ds.push_back(dl);
        ds_sum += dl;
        if (std::abs(dl) > top && !std::isinf(s)) top = std::abs(dl), r.top = r.j0 + j;
        for (int c = 0; c < d_k; ++c) share[c] = std::fma(dsj, kb[static_cast<Index>(j) * d_k + c], share[c]);
      }
      for (int c = 0; c < d_k; ++c) dq[c] += share[c];
      for (int c = 0; c < d_k; ++c) r.dq.push_back(static_cast<double>(dq[c] * factor));
    }
    r.ds_sum = ds_sum;
    w.tiles.push_back(std::move(r));
  }
  MatrixD final_row(1, d_k);
  for (int c = 0; c < d_k; ++c) final_row(0, c) = dq[c] * factor;
  if (rot) final_row = rope_rotate_back(final_row, query + p.causal_offset(), p.mods.rope_theta).cast<float>().cast<double>();
  for (int c = 0; c < d_k; ++c) {
    w.dq.push_back(final_row(0, c));
    w.fused_dq.push_back(fused.dq(row, c));
    w.fused_diff = std::max(w.fused_diff, std::abs(w.dq[c] - w.fused_dq[c]));
  }
  if (static_cast<double>(p.heads) * n * m <= kBackwardWalkFp64Limit) {
    const GradTraceD ref = reference_backward_fp64(p, u);
    std::vector<double> r64;
    for (int c = 0; c < d_k; ++c) {
      r64.push_back(ref.dq(row, c));
      w.fp64_error = std::max(w.fp64_error, std::abs(w.dq[c] - r64[c]));
    }
    w.fp64_dq = std::move(r64);
  } else {
    w.fp64_note = "not computed: heads·n·m above " + std::to_string(static_cast<long long>(kBackwardWalkFp64Limit)) +
                  " (the fp64 staged backward keeps every (n, m) stage)";
  }
  return w;
}

}  // namespace attnlab
