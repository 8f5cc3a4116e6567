// The fused CPU backward (cpu/fused_backward.h has the algorithm). A work item is one key block of
// one key/value head: it owns those rows of dK and dV (accumulated in its tiles over every query
// block of every query head reading that key/value head, then written once), and adds each query
// block's share of dQ under that block's lock (a query block's rows receive from every key block).
// Tiles are transposed as in the forward (cpu/fused.cpp): keys along the rows, queries along the
// vector lanes, so S and dP of a tile are the forward's register-tiled product (rows_madd) on
// K_j and V_j straight from the inputs, the recomputed P and dS are per-lane expressions with m, l
// and D in the lanes, and the three products that follow read those tiles as their left factors:
//   dV_j (keys, d_v) += Pᵀ-tile · dO_i        a(r = key, k = query) = tile(key, query)
//   dK_j (keys, d_k) += dSᵀ-tile · Q_i
//   dQ_i (queries, d_k) = dS-tile · K_j      a(r = query, k = key) = tile(key, query)
// with dO_i, Q_i and K_j copied into rows padded to whole packets. The block mask
// (core/modifications.h) of (query block, key block) says which pairs of blocks are Empty
// (skipped), Full or Partial (the element mask: −inf before the exp, so P and dS are exactly 0
// there); each pair visits only the keys some query of the block may see.
// The chain's factors: dS is dlogits; dlogits → the scores QKᵀ multiplies by the online scale (no
// score mods: logits = s · scale / T), or by (1 − tanh²) per element for a soft-cap and then 1/T
// and the scale (score mods). ALiBi and a bias add terms without inputs: nothing to multiply. The
// scalar factors are applied to dQ and dK once at the end. dT = −(1/T) Σ dlogits ∘ logits sums each
// tile in fp32 lanes and the tiles in double.
// RoPE: the products use the rotated Q and K (as the forward); their gradients are turned back to
// the inputs' frame in double at the end (rope_rotate_back).
// Order of summation: dQ's key blocks are added in whatever order the threads reach a query block,
// so dQ may differ between runs in its last bits (within the same bound); dK and dV do not.
#include "core/gcc12_avx512.h"  // first: see there

#include "cpu/fused_backward.h"

#include "core/modify.h"
#include "core/parallel.h"
#include "cpu/chains.h"
#include "cpu/cpu_backend.h"
#include "cpu/online_softmax.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace attnlab {
namespace {

using namespace cpu::online;
using Clock = std::chrono::steady_clock;

constexpr int kQueryBlock = 64;  // queries of a tile: whole packets
constexpr int kKeyBlock = 64;    // keys of a work item: the rows of its dK, dV tiles
static_assert(kQueryBlock % kTileCols == 0, "a query block is whole tiles");

int padded(int d) { return (d + kTileCols - 1) / kTileCols * kTileCols; }

// Per-thread tiles, sized once (row-major). The (keys, queries) tiles have ld = kQueryBlock.
struct Scratch {
  int dkp, dvp;    // d_k, d_v padded to whole tiles of the micro-kernel
  MatrixF qt;      // (d_k, kQueryBlock)    Q_iᵀ
  MatrixF dot;     // (d_v, kQueryBlock)    dO_iᵀ
  MatrixF qpad;    // (kQueryBlock, dkp)    Q_i
  MatrixF dopad;   // (kQueryBlock, dvp)    dO_i
  MatrixF kpad;    // (kKeyBlock, dkp)      K_j
  MatrixF st;      // (kKeyBlock, kQueryBlock): S, then P
  MatrixF dpt;     // (kKeyBlock, kQueryBlock): dP, then dS
  MatrixF dq;      // (kQueryBlock, dkp)    the block's share of dQ
  MatrixF dk, dv;  // (kKeyBlock, dkp), (kKeyBlock, dvp): the item's dK_j, dV_j
  Eigen::RowVectorXf m, inv_l, d, ones;  // (kQueryBlock); ones: (max(dkp, dvp)), to accumulate
  Scratch(int d_k, int d_v)
      : dkp(padded(d_k)), dvp(padded(d_v)),
        qt(d_k, kQueryBlock), dot(d_v, kQueryBlock),
        qpad(kQueryBlock, dkp), dopad(kQueryBlock, dvp), kpad(kKeyBlock, dkp),
        st(kKeyBlock, kQueryBlock), dpt(kKeyBlock, kQueryBlock),
        dq(kQueryBlock, dkp), dk(kKeyBlock, dkp), dv(kKeyBlock, dvp),
        m(kQueryBlock), inv_l(kQueryBlock), d(kQueryBlock), ones(std::max(dkp, dvp)) {
    ones.setOnes();
    qpad.setZero();
    dopad.setZero();
    kpad.setZero();
  }
};

struct BackwardJob {
  const Problem& p;
  const MatrixF& q;  // Q and K as multiplied (rotated by RoPE)
  const MatrixF& k;
  const MatrixF& dout;
  const cpu::RowStats& stats;
  const std::vector<float>& D;
  const MaskRule& rule;
  const BlockMask& blocks;  // (query blocks of kQueryBlock, key blocks of kKeyBlock)
  const ScoreRule& score;
  float score_scale;
  MatrixF& dq;  // (heads n, d_k), added to under locks[h * query blocks + block]
  MatrixF& dk;  // (kv_heads m, d_k)
  MatrixF& dv;  // (kv_heads m, d_v)
  std::vector<std::mutex>& locks;
  int query_blocks;
};

// P and dS of the first `rows` queries of a block (whole packets: the tiles rows_madd filled) by
// the keys [0, keys) of the tile (rows of st and dpt): st holds
// the masked raw (or modified) scores, dpt holds dP; on return st holds P, dpt holds dS (dlogits
// times the soft-cap's 1 − tanh² where there is one). Returns Σ dlogits ∘ s over the tile (masked
// pairs left out), for dT.
double recompute_tile(Scratch& w, int rows, int keys, float scale, float softcap) {
  constexpr Index ld = kQueryBlock;
  const Packet vscale = ei::pset1<Packet>(scale), neg_inf = ei::pset1<Packet>(kNegInf);
  const Packet inv_cap = ei::pset1<Packet>(softcap > 0 ? 1.f / softcap : 0.f), one = ei::pset1<Packet>(1.f);
  Packet dt = ei::pzero(vscale);
  // Lanes past the tiles hold another block's numbers (or none): never read.
  for (int v = 0; v < (rows + kLanes - 1) / kLanes; ++v) {
    const Packet m = ei::ploadu<Packet>(w.m.data() + v * kLanes);
    const Packet inv_l = ei::ploadu<Packet>(w.inv_l.data() + v * kLanes);
    const Packet d = ei::ploadu<Packet>(w.d.data() + v * kLanes);
    for (int j = 0; j < keys; ++j) {
      float* sp = w.st.data() + j * ld + v * kLanes;
      float* dp = w.dpt.data() + j * ld + v * kLanes;
      const Packet s = ei::ploadu<Packet>(sp);
      const Packet p = ei::pmul(exp_nonpositive(ei::pmul(ei::psub(s, m), vscale)), inv_l);
      Packet ds = ei::pmul(p, ei::psub(ei::ploadu<Packet>(dp), d));
      // A masked pair has P = 0 and dS = 0, but 0 · (−inf) is no number: its s counts as 0.
      const Packet s0 = ei::pselect(ei::pcmp_eq(s, neg_inf), ei::pzero(s), s);
      dt = ei::pmadd(ds, s0, dt);
      if (softcap > 0) {
        const Packet t = ei::pmul(s0, inv_cap);
        ds = ei::pmul(ds, ei::pmul(ei::psub(one, t), ei::padd(one, t)));
      }
      ei::pstoreu(sp, p);
      ei::pstoreu(dp, ds);
    }
  }
  return static_cast<double>(ei::predux(dt));
}

// One key block [k0, k0 + cols) of key/value head g, against every query block of the heads that
// read it. Returns its Σ dlogits ∘ s.
double run_key_block(const BackwardJob& job, Scratch& w, int g, int k0, int cols) {
  const Problem& p = job.p;
  const int n = p.n(), d_k = p.d_k(), d_v = p.d_v();
  const int dkp = w.dkp, dvp = w.dvp;
  const Index krow = static_cast<Index>(g) * p.m() + k0;
  constexpr Index ld = kQueryBlock;
  const float* kb = job.k.data() + krow * d_k;      // K_j (cols, d_k), row-major
  const float* vb = p.v().data() + krow * d_v;      // V_j (cols, d_v)
  for (int j = 0; j < cols; ++j) std::copy_n(kb + static_cast<Index>(j) * d_k, d_k, w.kpad.data() + j * dkp);
  w.dk.setZero();
  w.dv.setZero();
  const float scale = job.stats.scale;
  const float softcap = job.score.softcap;
  double dt = 0;
  const int group = p.heads / p.kv_heads();
  for (int h = g * group; h < (g + 1) * group; ++h) {
    for (int qb = 0; qb < job.query_blocks; ++qb) {
      const BlockKind kind = job.blocks.at(qb, k0 / kKeyBlock);
      if (kind == BlockKind::Empty) continue;
      const int q0 = qb * kQueryBlock, rows = std::min(kQueryBlock, n - q0);
      // The keys [j0, j1) of the block some query of it may see.
      int lo = p.m(), hi = 0;
      for (int i = q0; i < q0 + rows; ++i) {
        int a, b;
        job.rule.interval(i, a, b);
        if (a < b) lo = std::min(lo, a), hi = std::max(hi, b);
      }
      const int j0 = std::clamp(lo - k0, 0, cols), j1 = std::clamp(hi - k0, j0, cols);
      if (j1 == j0) continue;
      const int keys = j1 - j0;
      const Index qrow = static_cast<Index>(h) * n + q0;

      // The query block's Q_i, dO_i (transposed for S and dP, padded rows for dK and dV) and its
      // m, 1/l, D; lanes past the block's rows get m = +inf and 1/l = 0, so P = 0 there.
      w.qt.setZero();
      w.dot.setZero();
      w.qt.leftCols(rows) = job.q.middleRows(qrow, rows).transpose();
      w.dot.leftCols(rows) = job.dout.middleRows(qrow, rows).transpose();
      for (int i = 0; i < rows; ++i) {
        std::copy_n(job.q.data() + (qrow + i) * d_k, d_k, w.qpad.data() + i * dkp);
        std::copy_n(job.dout.data() + (qrow + i) * d_v, d_v, w.dopad.data() + i * dvp);
        w.m[i] = job.stats.m[qrow + i];
        w.inv_l[i] = 1.f / job.stats.l[qrow + i];
        w.d[i] = job.D[qrow + i];
      }
      for (int i = rows; i < kQueryBlock; ++i) {
        std::fill_n(w.qpad.data() + i * dkp, dkp, 0.f);
        std::fill_n(w.dopad.data() + i * dvp, dvp, 0.f);
        w.m[i] = std::numeric_limits<float>::infinity();
        w.inv_l[i] = 0.f;
        w.d[i] = 0.f;
      }

      // S = K_j Q_iᵀ and dP = V_j dO_iᵀ, tile by tile of kTileCols queries; the score mods, the
      // element mask.
      for (int i0 = 0; i0 < rows; i0 += kTileCols) {
        float* st = w.st.data() + i0;
        rows_madd(keys, kb + static_cast<Index>(j0) * d_k, d_k, 1, w.qt.data() + i0, ld, d_k, st, ld, nullptr);
        rows_madd(keys, vb + static_cast<Index>(j0) * d_v, d_v, 1, w.dot.data() + i0, ld, d_v,
                  w.dpt.data() + i0, ld, nullptr);
        if (job.score.any())
          modify_tile(job.score, job.score_scale, st, ld, h, q0 + i0, std::min(kTileCols, rows - i0), k0 + j0, keys);
      }
      if (kind == BlockKind::Partial) mask_tile(job.rule, w.st.data(), ld, q0, rows, k0 + j0, keys);
      dt += recompute_tile(w, rows, keys, scale, softcap);

      // dV_j += Pᵀ dO_i, dK_j += dSᵀ Q_i (rows of the tiles: keys; depth: the block's queries).
      for (int c = 0; c < dvp; c += kTileCols)
        rows_madd(keys, w.st.data(), ld, 1, w.dopad.data() + c, dvp, rows, w.dv.data() + j0 * dvp + c, dvp,
                  w.ones.data());
      for (int c = 0; c < dkp; c += kTileCols)
        rows_madd(keys, w.dpt.data(), ld, 1, w.qpad.data() + c, dkp, rows, w.dk.data() + j0 * dkp + c, dkp,
                  w.ones.data());
      // dQ_i's share: dS K_j (rows: queries; depth: the keys), added under the block's lock.
      for (int c = 0; c < dkp; c += kTileCols)
        rows_madd(rows, w.dpt.data(), 1, ld, w.kpad.data() + j0 * dkp + c, dkp, keys, w.dq.data() + c, dkp,
                  nullptr);
      {
        const std::lock_guard<std::mutex> lock(job.locks[static_cast<std::size_t>(h) * job.query_blocks + qb]);
        for (int i = 0; i < rows; ++i) {
          float* to = job.dq.data() + (qrow + i) * d_k;
          const float* from = w.dq.data() + i * dkp;
          for (int c = 0; c < d_k; ++c) to[c] += from[c];
        }
      }
    }
  }
  for (int j = 0; j < cols; ++j) {
    std::copy_n(w.dk.data() + j * dkp, d_k, job.dk.data() + (krow + j) * d_k);
    std::copy_n(w.dv.data() + j * dvp, d_v, job.dv.data() + (krow + j) * d_v);
  }
  return dt;
}

}  // namespace

GradTrace cpu_fused_backward(const Problem& p, const Upstream& u) {
  validate(p);
  validate_upstream(p, u);
  GradTrace g;
  cpu::RowStats stats;
  cpu::fused_into(p, g.forward, &stats);
  g.dout = upstream_dout(u, g.forward.output, &g.loss);

  const auto t0 = Clock::now();
  const int n = p.n(), m = p.m(), heads = p.heads, kv_heads = p.kv_heads(), d_k = p.d_k(), d_v = p.d_v();
  const Index hn = static_cast<Index>(heads) * n;
  const std::shared_ptr<const RotatedQK> rot = rotated_qk(p);
  const MaskRule rule = mask_rule(p);
  const BlockMask blocks = block_mask(p, kQueryBlock, kKeyBlock);
  std::vector<float> slopes;
  const ScoreRule score = score_rule<float>(p, slopes);

  g.D = (g.dout.array() * g.forward.output.array()).rowwise().sum().matrix();
  const std::vector<float> D(g.D.data(), g.D.data() + hn);
  MatrixF dq = MatrixF::Zero(hn, d_k);
  g.dk.resize(static_cast<Index>(kv_heads) * m, d_k);
  g.dv.resize(static_cast<Index>(kv_heads) * m, d_v);
  const int query_blocks = (n + kQueryBlock - 1) / kQueryBlock;
  std::vector<std::mutex> locks(static_cast<std::size_t>(heads) * query_blocks);
  const BackwardJob job{p,     kernel_q(p, rot.get()), kernel_k(p, rot.get()), g.dout, stats, D, rule, blocks,
                        score, static_cast<float>(p.scale_value()), dq, g.dk, g.dv, locks, query_blocks};

  // Items: (key block, key/value head), the first key blocks first (under a causal mask they
  // meet the most queries).
  const int key_blocks = (m + kKeyBlock - 1) / kKeyBlock;
  const std::size_t items = static_cast<std::size_t>(kv_heads) * key_blocks;
  const double flops = 10.0 * heads * static_cast<double>(n) * m * std::max(d_k, d_v);
  const unsigned workers = worker_count(items, flops);
  std::vector<std::unique_ptr<Scratch>> scratch(workers);
  std::vector<double> dt(items, 0.0);
  parallel_items(items, workers, [&](unsigned id, std::size_t it) {
    if (!scratch[id]) scratch[id] = std::make_unique<Scratch>(d_k, d_v);
    const int kv = static_cast<int>(it % kv_heads), kb = static_cast<int>(it / kv_heads);
    const int k0 = kb * kKeyBlock;
    dt[it] = run_key_block(job, *scratch[id], kv, k0, std::min(kKeyBlock, m - k0));
  });

  // The scalar factors of dlogits → dscores: the online scale (scale / T), or 1 / T and the scale
  // with score mods (the cap's factor is in dS already).
  const bool mods = score.any();
  const float factor = mods ? stats.scale * static_cast<float>(p.scale_value()) : stats.scale;
  dq *= factor;
  g.dk *= factor;
  double sum = 0;
  for (double x : dt) sum += x;
  // Σ dlogits ∘ logits with logits = s · online scale.
  g.dT = -sum * stats.scale / p.temperature;
  if (p.mods.rope_theta > 0) {
    const double theta = p.mods.rope_theta;
    for (int h = 0; h < heads; ++h)
      dq.middleRows(static_cast<Index>(h) * n, n) =
          rope_rotate_back(dq.middleRows(static_cast<Index>(h) * n, n).cast<double>(), p.causal_offset(), theta)
              .cast<float>();
    for (int kv = 0; kv < kv_heads; ++kv)
      g.dk.middleRows(static_cast<Index>(kv) * m, m) =
          rope_rotate_back(g.dk.middleRows(static_cast<Index>(kv) * m, m).cast<double>(), 0, theta).cast<float>();
  }
  g.dq = std::move(dq);
  if (!g.dq.allFinite() || !g.dk.allFinite() || !g.dv.allFinite() || !std::isfinite(g.dT))
    throw InputError("the backward's gradients overflow fp32 (inputs or dO too large)");
  g.backward_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  return g;
}

double fused_backward_bytes(const Problem& p) {
  const double hn = static_cast<double>(p.heads) * p.n(), kvm = static_cast<double>(p.kv_heads()) * p.m();
  const double dkp = padded(p.d_k()), dvp = padded(p.d_v());
  const double tiles = 2.0 * kKeyBlock * kQueryBlock + kQueryBlock * (2.0 * p.d_k() + 2 * p.d_v() + 3 * dkp + dvp) +
                       kKeyBlock * (2 * dkp + dvp);
  const double threads = std::max(1u, std::thread::hardware_concurrency());
  return 4.0 * (hn * (2.0 * p.d_v() + p.d_k() + 3) + kvm * (p.d_k() + p.d_v()) + threads * tiles);
}

}  // namespace attnlab
