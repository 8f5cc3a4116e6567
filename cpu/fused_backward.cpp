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
// scalar factors are applied once: to a key block's dK as it writes it out, to dQ at the end.
// dT = −(1/T) Σ dlogits ∘ logits sums each tile in fp32 lanes and the tiles in double.
// RoPE: the products use the rotated Q and K (as the forward); their gradients are turned back to
// the inputs' frame in double at the end (rope_rotate_back_rows, in place over the cores).
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
#include <array>
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
constexpr int kKeyBlock = 128;   // keys of a work item: the rows of its dK, dV tiles
static_assert(kQueryBlock % kWideCols == 0, "a query block is whole wide tiles");

int padded(int d) { return (d + kTileCols - 1) / kTileCols * kTileCols; }

// dq times `factor`, and whether every entry is finite (read in storage order: Eigen's allFinite on
// a row-major matrix walks it by columns, a cache miss per entry once the matrix outgrows the
// cache), in blocks of rows over the cores.
bool scale_and_check(MatrixF& dq, float factor) {
  constexpr Index kRows = 1024;
  const std::size_t items = static_cast<std::size_t>((dq.rows() + kRows - 1) / kRows);
  std::vector<char> ok(items, 1);
  parallel_items(items, worker_count(items, 1e3 * static_cast<double>(dq.size())), [&](unsigned, std::size_t it) {
    const Index r0 = static_cast<Index>(it) * kRows, rows = std::min(kRows, dq.rows() - r0);
    dq.middleRows(r0, rows) *= factor;
    ok[it] = cpu::online::all_finite(dq.data() + r0 * dq.cols(), rows * dq.cols());
  });
  return std::all_of(ok.begin(), ok.end(), [](char x) { return x != 0; });
}

// A partial tile's pairs as ranges, tile-local: query lane i sees at most the keys [klo[i], khi[i])
// (the mask rule's interval; documents and a custom mask may block more), key j is seen by at most
// the lanes [qlo[j], qhi[j]). A product's terms outside them are exact zeros (P and dS of masked
// pairs), so they are left out.
struct TileRanges {
  std::array<int, kQueryBlock> klo, khi;
  std::array<int, kKeyBlock> qlo, qhi;
};

// Per-thread tiles, sized once (row-major). The (keys, queries) tiles have ld = kQueryBlock.
struct Scratch {
  int dkp, dvp;    // d_k, d_v padded to whole tiles of the micro-kernel
  MatrixF kpad;    // (kKeyBlock, dkp)      K_j
  MatrixF qt, dot; // (d_k, kQueryBlock), (d_v, kQueryBlock): Q_iᵀ, dO_iᵀ, zero lanes past the rows
  MatrixF st;      // (kKeyBlock, kQueryBlock): S, then P
  MatrixF dpt;     // (kKeyBlock, kQueryBlock): dP, then dS
  MatrixF dq;      // (kQueryBlock, dkp)    the block's share of dQ
  MatrixF dk, dv;  // (kKeyBlock, dkp), (kKeyBlock, dvp): the item's dK_j, dV_j
  Eigen::RowVectorXf ones;  // (max(dkp, dvp)): the column scale that makes a product accumulate
  TileRanges ranges;        // the current partial tile's
  Scratch(int d_k, int d_v)
      : dkp(padded(d_k)), dvp(padded(d_v)), kpad(kKeyBlock, dkp), qt(d_k, kQueryBlock), dot(d_v, kQueryBlock),
        st(kKeyBlock, kQueryBlock), dpt(kKeyBlock, kQueryBlock),
        dq(kQueryBlock, dkp), dk(kKeyBlock, dkp), dv(kKeyBlock, dvp), ones(std::max(dkp, dvp)) {
    ones.setOnes();
    kpad.setZero();
  }
};

// Every query block's operands that are laid out once per problem: Q_i and dO_i as rows of dkp,
// dvp floats for dK and dV (the inputs themselves when d is whole tiles: no copy); the rows' m,
// 1/l and D, lanes past the rows m = +inf and 1/l = 0 (P = 0 there). Q_iᵀ and dO_iᵀ, for S and dP,
// are transposed by each step into its thread's tiles, where the two products find them in L1: a
// copy of both laid out once per problem cost its fresh pages on every call, and every step read
// its block of it back from L2 or beyond.
struct Packed {
  int dkp = 0, dvp = 0;
  std::vector<float> qp, dop, m, inv_l, d;
  const float* q_rows = nullptr;   // Q_i of block b at q_rows + b * kQueryBlock * dkp
  const float* do_rows = nullptr;
};

// Block b = h * query_blocks + qb of the stacked rows (qb's rows of head h): its rows of D =
// rowsum(dO ∘ O) computed, its operands laid out, and its rows of dQ zeroed, by the thread that
// will first touch them.
void pack_block(Packed& k, const MatrixF& q, const MatrixF& dout, const MatrixF& out, const cpu::RowStats& stats,
                MatrixF& D, int n, int query_blocks, std::size_t b, MatrixF& dq) {
  const int d_k = static_cast<int>(q.cols()), d_v = static_cast<int>(dout.cols());
  const int h = static_cast<int>(b / query_blocks), q0 = static_cast<int>(b % query_blocks) * kQueryBlock;
  const int rows = std::min(kQueryBlock, n - q0);
  const Index qrow = static_cast<Index>(h) * n + q0;
  D.middleRows(qrow, rows) = (dout.middleRows(qrow, rows).array() * out.middleRows(qrow, rows).array()).rowwise().sum();
  std::fill_n(dq.data() + qrow * d_k, static_cast<Index>(rows) * d_k, 0.f);
  if (!k.qp.empty())
    for (int i = 0; i < rows; ++i) std::copy_n(q.data() + (qrow + i) * d_k, d_k, k.qp.data() + (b * kQueryBlock + i) * k.dkp);
  if (!k.dop.empty())
    for (int i = 0; i < rows; ++i)
      std::copy_n(dout.data() + (qrow + i) * d_v, d_v, k.dop.data() + (b * kQueryBlock + i) * k.dvp);
  for (int i = 0; i < kQueryBlock; ++i) {
    const std::size_t at = b * kQueryBlock + i;
    k.m[at] = i < rows ? stats.m[qrow + i] : std::numeric_limits<float>::infinity();
    k.inv_l[at] = i < rows ? 1.f / stats.l[qrow + i] : 0.f;
    k.d[at] = i < rows ? D(qrow + i, 0) : 0.f;
  }
}

struct BackwardJob {
  const Problem& p;
  const MatrixF& q;  // Q and K as multiplied (rotated by RoPE)
  const MatrixF& k;
  const MatrixF& dout;
  const cpu::RowStats& stats;
  const Packed& packed;
  const MaskRule& rule;
  const BlockMask& blocks;  // (query blocks of kQueryBlock, key blocks of kKeyBlock)
  const ScoreRule& score;
  float score_scale;
  float factor;  // dlogits → dscores' scalar factor: dK's as it is written, dQ's at the end
  MatrixF& dq;  // (heads n, d_k), added to under locks[h * query blocks + block]
  MatrixF& dk;  // (kv_heads m, d_k)
  MatrixF& dv;  // (kv_heads m, d_v)
  std::vector<std::mutex>& locks;
  int query_blocks;
};

// The ranges of the tile of queries [q0, q0 + rows) by keys [k0, k0 + keys), when the intervals
// grow with the query (the causal rule, windows and prefixes, alone or together: then the lanes
// that see a key are one run of them); false where they do not.
bool tile_ranges(const MaskRule& rule, int q0, int rows, int k0, int keys, TileRanges& t) {
  for (int i = 0; i < rows; ++i) {
    int a, b;
    rule.interval(q0 + i, a, b);
    t.klo[i] = std::clamp(a - k0, 0, keys);
    t.khi[i] = std::clamp(b - k0, t.klo[i], keys);
    if (i > 0 && (t.klo[i] < t.klo[i - 1] || t.khi[i] < t.khi[i - 1])) return false;
  }
  // Key j: from the first lane whose interval ends after it to the last that starts at or before it.
  int from = 0, to = 0;
  for (int j = 0; j < keys; ++j) {
    while (from < rows && t.khi[from] <= j) ++from;
    while (to < rows && t.klo[to] <= j) ++to;
    t.qlo[j] = from;
    t.qhi[j] = std::max(from, to);
  }
  return true;
}

// rows_madd where row r's terms are only those in [lo[r], hi[r]) of the depth (lo null: all): each
// tile of rows runs over the union of its rows' ranges (none: depth 0, which keeps c with
// col_scale and zeroes it without).
template <int V>
void ranged_rows_madd(int rows, const float* a, Index a_row, Index a_k, const float* b, Index ldb, int depth, float* c,
                      Index ldc, const float* col_scale, const int* lo, const int* hi) {
  if (lo == nullptr) return rows_madd<V>(rows, a, a_row, a_k, b, ldb, depth, c, ldc, col_scale);
  constexpr int kR = kRowsOf<V>;
  for (int r0 = 0; r0 < rows; r0 += kR) {
    const int count = std::min(kR, rows - r0);
    int from = depth, to = 0;
    for (int r = r0; r < r0 + count; ++r) from = std::min(from, lo[r]), to = std::max(to, hi[r]);
    to = std::max(to, from);
    kTileFns<V>[count - 1](a + r0 * a_row + from * a_k, a_row, a_k, b + from * ldb, ldb, to - from, c + r0 * ldc, ldc,
                           col_scale);
  }
}

// c (rows, ldc) = a b (+ c · col_scale) over ldc columns (whole kTileCols): wide tiles, then narrow;
// row r's terms in [lo[r], hi[r]) of the depth only, when lo is given.
void cols_madd(int rows, const float* a, Index a_row, Index a_k, const float* b, int ldb, int depth, float* c, int ldc,
               const float* col_scale, const int* lo = nullptr, const int* hi = nullptr) {
  int c0 = 0;
  for (; c0 + kWideCols <= ldc; c0 += kWideCols)
    ranged_rows_madd<kWideVecs>(rows, a, a_row, a_k, b + c0, ldb, depth, c + c0, ldc, col_scale, lo, hi);
  for (; c0 < ldc; c0 += kTileCols)
    ranged_rows_madd<kTileVecs>(rows, a, a_row, a_k, b + c0, ldb, depth, c + c0, ldc, col_scale, lo, hi);
}

// P and dS of the first `rows` queries of a block (whole packets: the tiles rows_madd filled) by
// the keys [0, keys) of the tile (rows of st and dpt): st holds
// the masked raw (or modified) scores, dpt holds dP; on return st holds P, dpt holds dS (dlogits
// times the soft-cap's 1 − tanh² where there is one). Returns Σ dlogits ∘ s over the tile (masked
// pairs left out), for dT.
double recompute_tile(Scratch& w, const float* m_row, const float* inv_l_row, const float* d_row, int rows, int keys,
                      float scale, float softcap) {
  constexpr Index ld = kQueryBlock;
  const Packet vscale = ei::pset1<Packet>(scale * kLog2e);  // backward_pair's exp is in base 2
  Packet dt = ei::pzero(vscale);
  // Lanes past the tiles hold another block's numbers (or none): never read.
  for (int v = 0; v < (rows + kLanes - 1) / kLanes; ++v) {
    const Packet m = ei::ploadu<Packet>(m_row + v * kLanes);
    const Packet inv_l = ei::ploadu<Packet>(inv_l_row + v * kLanes);
    const Packet d = ei::ploadu<Packet>(d_row + v * kLanes);
    for (int j = 0; j < keys; ++j) {
      float* sp = w.st.data() + j * ld + v * kLanes;
      float* dp = w.dpt.data() + j * ld + v * kLanes;
      const BackwardPair r = backward_pair(ei::ploadu<Packet>(sp), m, inv_l, ei::ploadu<Packet>(dp), d, vscale, softcap);
      dt = ei::padd(dt, r.dt_term);
      ei::pstoreu(sp, r.p);
      ei::pstoreu(dp, r.ds);
    }
  }
  return static_cast<double>(ei::predux(dt));
}

struct KeyBlockSums {
  double dt = 0;        // Σ dlogits ∘ s
  bool finite = false;  // every entry of its dK and dV rows
};

// One key block [k0, k0 + cols) of key/value head g, against every query block of the heads that
// read it.
KeyBlockSums run_key_block(const BackwardJob& job, Scratch& w, int g, int k0, int cols) {
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
  // Each key block starts at the query block level with it (its share of the way down) and wraps
  // round: threads on neighbouring key blocks meet different query blocks at a time, so they
  // seldom wait for the same dQ lock.
  const int key_blocks = (p.m() + kKeyBlock - 1) / kKeyBlock;
  const int first = static_cast<int>(static_cast<long long>(k0 / kKeyBlock) * job.query_blocks / key_blocks);
  for (int h = g * group; h < (g + 1) * group; ++h) {
    for (int step = 0; step < job.query_blocks; ++step) {
      const int qb = (first + step) % job.query_blocks;
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

      const std::size_t blk = static_cast<std::size_t>(h) * job.query_blocks + qb;
      const Packed& pk = job.packed;
      if (rows < kQueryBlock) w.qt.setZero(), w.dot.setZero();
      transpose_into(job.q.data() + qrow * d_k, d_k, rows, d_k, w.qt.data(), ld);
      transpose_into(job.dout.data() + qrow * d_v, d_v, rows, d_v, w.dot.data(), ld);
      const float* qt = w.qt.data();
      const float* dot = w.dot.data();
      const float* qp = pk.qp.empty() ? pk.q_rows + qrow * dkp : pk.qp.data() + blk * kQueryBlock * dkp;
      const float* dop = pk.dop.empty() ? pk.do_rows + qrow * dvp : pk.dop.data() + blk * kQueryBlock * dvp;
      const std::size_t lane0 = blk * kQueryBlock;

      // S = K_j Q_iᵀ and dP = V_j dO_iᵀ over the block's queries in wide tiles (lanes past its rows
      // are zero queries); the score mods, the element mask.
      for (int i0 = 0; i0 < rows; i0 += kWideCols) {
        rows_madd<kWideVecs>(keys, kb + static_cast<Index>(j0) * d_k, d_k, 1, qt + i0, ld, d_k, w.st.data() + i0, ld,
                             nullptr);
        rows_madd<kWideVecs>(keys, vb + static_cast<Index>(j0) * d_v, d_v, 1, dot + i0, ld, d_v, w.dpt.data() + i0,
                             ld, nullptr);
      }
      if (job.score.any())
        for (int i0 = 0; i0 < rows; i0 += kTileCols)
          modify_tile(job.score, job.score_scale, w.st.data() + i0, ld, h, q0 + i0, std::min(kTileCols, rows - i0),
                      k0 + j0, keys);
      if (kind == BlockKind::Partial) mask_tile(job.rule, w.st.data(), ld, q0, rows, k0 + j0, keys);
      dt += recompute_tile(w, pk.m.data() + lane0, pk.inv_l.data() + lane0, pk.d.data() + lane0, rows, keys, scale,
                           softcap);

      // dV_j += Pᵀ dO_i, dK_j += dSᵀ Q_i (rows of the tiles: keys; depth: the block's queries); a
      // partial tile's over the pairs its mask may let through.
      TileRanges& tr = w.ranges;
      const bool ranged = kind == BlockKind::Partial && tile_ranges(job.rule, q0, rows, k0 + j0, keys, tr);
      const int* qlo = ranged ? tr.qlo.data() : nullptr;
      const int* qhi = ranged ? tr.qhi.data() : nullptr;
      const int* klo = ranged ? tr.klo.data() : nullptr;
      const int* khi = ranged ? tr.khi.data() : nullptr;
      cols_madd(keys, w.st.data(), ld, 1, dop, dvp, rows, w.dv.data() + j0 * dvp, dvp, w.ones.data(), qlo, qhi);
      cols_madd(keys, w.dpt.data(), ld, 1, qp, dkp, rows, w.dk.data() + j0 * dkp, dkp, w.ones.data(), qlo, qhi);
      // dQ_i's share: dS K_j (rows: queries; depth: the keys), added under the block's lock: straight
      // into dQ's rows when they are whole tiles (c = c · 1 + dS K_j, the same sum as adding the
      // share afterwards), else through the thread's tile.
      const float* kj = w.kpad.data() + j0 * dkp;
      const bool direct = dkp == d_k;
      if (!direct) cols_madd(rows, w.dpt.data(), 1, ld, kj, dkp, keys, w.dq.data(), dkp, nullptr, klo, khi);
      const std::lock_guard<std::mutex> lock(job.locks[static_cast<std::size_t>(h) * job.query_blocks + qb]);
      if (direct) {
        cols_madd(rows, w.dpt.data(), 1, ld, kj, dkp, keys, job.dq.data() + qrow * d_k, d_k, w.ones.data(), klo, khi);
        continue;
      }
      for (int i = 0; i < rows; ++i) {
        float* to = job.dq.data() + (qrow + i) * d_k;
        const float* from = w.dq.data() + i * dkp;
        for (int c = 0; c < d_k; ++c) to[c] += from[c];
      }
    }
  }
  // dK_j times the factor and dV_j, written once and checked while they are in the cache.
  for (int j = 0; j < cols; ++j) {
    const float* from = w.dk.data() + j * dkp;
    float* to = job.dk.data() + (krow + j) * d_k;
    for (int c = 0; c < d_k; ++c) to[c] = from[c] * job.factor;
    std::copy_n(w.dv.data() + j * dvp, d_v, job.dv.data() + (krow + j) * d_v);
  }
  return {dt, cpu::online::all_finite(job.dk.data() + krow * d_k, static_cast<Index>(cols) * d_k) &&
                  cpu::online::all_finite(job.dv.data() + krow * d_v, static_cast<Index>(cols) * d_v)};
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

  g.D.resize(hn, 1);  // block by block in pack_block
  const MatrixF& q_in = kernel_q(p, rot.get());
  MatrixF dq(hn, d_k);  // zeroed block by block in pack_block
  g.dk.resize(static_cast<Index>(kv_heads) * m, d_k);
  g.dv.resize(static_cast<Index>(kv_heads) * m, d_v);
  const int query_blocks = (n + kQueryBlock - 1) / kQueryBlock;
  const std::size_t qblocks = static_cast<std::size_t>(heads) * query_blocks;
  std::vector<std::mutex> locks(qblocks);
  Packed packed;
  packed.dkp = padded(d_k);
  packed.dvp = padded(d_v);
  packed.m.resize(qblocks * kQueryBlock);
  packed.inv_l.resize(qblocks * kQueryBlock);
  packed.d.resize(qblocks * kQueryBlock);
  // Rows of whole tiles are read in place (the last block's rows past n are never read: the
  // products' depth is the block's rows); others are copied into zero-padded rows.
  if (packed.dkp == d_k) packed.q_rows = q_in.data();
  else packed.qp.assign(qblocks * kQueryBlock * packed.dkp, 0.f);
  if (packed.dvp == d_v) packed.do_rows = g.dout.data();
  else packed.dop.assign(qblocks * kQueryBlock * packed.dvp, 0.f);
  parallel_items(qblocks, worker_count(qblocks, 4.0 * hn * (d_k + d_v)), [&](unsigned, std::size_t b) {
    pack_block(packed, q_in, g.dout, g.forward.output, stats, g.D, n, query_blocks, b, dq);
  });
  // The scalar factors of dlogits → dscores: the online scale (scale / T), or 1 / T and the scale
  // with score mods (the cap's factor is in dS already).
  const float factor = score.any() ? stats.scale * static_cast<float>(p.scale_value()) : stats.scale;
  const BackwardJob job{p,     q_in,   kernel_k(p, rot.get()), g.dout, stats, packed, rule,  blocks, score,
                        static_cast<float>(p.scale_value()), factor, dq, g.dk, g.dv, locks, query_blocks};

  // Items: the key blocks of one key/value head after another, each head's first key blocks first
  // (under a causal mask they meet the most queries): the threads share one head's query blocks
  // in the cache at a time instead of streaming one head each.
  const int key_blocks = (m + kKeyBlock - 1) / kKeyBlock;
  const std::size_t items = static_cast<std::size_t>(kv_heads) * key_blocks;
  const double flops = 10.0 * heads * static_cast<double>(n) * m * std::max(d_k, d_v);
  const unsigned workers = worker_count(items, flops);
  std::vector<std::unique_ptr<Scratch>> scratch(workers);
  std::vector<KeyBlockSums> sums(items);
  parallel_items(items, workers, [&](unsigned id, std::size_t it) {
    if (!scratch[id]) scratch[id] = std::make_unique<Scratch>(d_k, d_v);
    const int kv = static_cast<int>(it / key_blocks), kb = static_cast<int>(it % key_blocks);
    const int k0 = kb * kKeyBlock;
    sums[it] = run_key_block(job, *scratch[id], kv, k0, std::min(kKeyBlock, m - k0));
  });

  bool finite = scale_and_check(dq, factor);
  double sum = 0;
  for (const KeyBlockSums& s : sums) sum += s.dt, finite = finite && s.finite;
  // Σ dlogits ∘ logits with logits = s · online scale.
  g.dT = -sum * stats.scale / p.temperature + 0.0;  // + 0.0: a sum of 0 is dT = 0, not -0
  if (p.mods.rope_theta > 0) {
    rope_rotate_back_rows(dq, heads, n, p.causal_offset(), p.mods.rope_theta);
    rope_rotate_back_rows(g.dk, kv_heads, m, 0, p.mods.rope_theta);
    // A rotated pair can outgrow fp32 where its parts did not.
    finite = finite && cpu::online::all_finite(dq.data(), dq.size()) && cpu::online::all_finite(g.dk.data(), g.dk.size());
  }
  g.dq = std::move(dq);
  if (!finite || !std::isfinite(g.dT))
    throw InputError(Msg::OverflowGradients, {});
  g.backward_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  return g;
}

double fused_backward_bytes(const ProblemSize& s) {
  const double hn = static_cast<double>(s.heads) * s.n, kvm = static_cast<double>(s.kv_heads) * s.m;
  const double dkp = padded(s.d_k), dvp = padded(s.d_v);
  const double tiles = 2.0 * kKeyBlock * kQueryBlock + kQueryBlock * (3.0 * s.d_k + 3 * s.d_v + 3 * dkp + dvp) +
                       kKeyBlock * (2 * dkp + dvp);
  const double threads = std::max(1u, std::thread::hardware_concurrency());
  // RoPE: Q and K turned (rotated_qk) besides; the gradients turn back in place.
  const double turned = s.rope ? (hn + kvm) * s.d_k : 0;
  // Q, K, V; O, dO, dQ, dK, dV; D, m, l.
  return 4.0 * (hn * (2.0 * s.d_v + 2.0 * s.d_k + 3) + 2.0 * kvm * (s.d_k + s.d_v) + turned + threads * tiles);
}

}  // namespace attnlab
