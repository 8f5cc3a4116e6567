// The fused CPU kernel: blockwise attention with an online softmax (FlashAttention-2, Dao 2023,
// Algorithm 1), fp32, one worker thread per core. It never materialises the (n, m) matrices. A
// work item is one (head, block of kQueryBlock queries); it walks the head's keys in blocks of
// kKeyBlock and keeps, per query i of the block, the running max m(i) of the raw scores, the
// running sum l(i) of exp((s - m) * scale) and the unnormalised output acc(i, :):
//   S^T (keys, queries)   = K_blk Q_blk^T                                   tile_madd
//   m_new = max(m, max_j S^T(j, i));  alpha = exp((m - m_new) * scale)
//   P^T   = exp((S^T - m_new) * scale);  l = alpha * l + sum_j P^T(j, i)      online_softmax_step
//   acc^T (d_v, queries)  = acc^T * alpha + V_blk^T P^T                       update_tile
// and writes O = acc * (1 / l) once at the end.
// Why transposed (queries along the vector lanes): K and V are used straight from the inputs
// (only the query block is packed, once per item, into Q^T; from d_v = 128 on, V also once per
// run into strips for the wide tiles' P V: VStrips), the softmax reductions over the keys
// are vertical (one packet of queries per row, no horizontal sums), and the rescale by alpha is a
// per-lane multiply folded into the load of acc. Both products are the same register-tiled
// micro-kernel (tile_madd) written with Eigen's packet functions, so it is AVX-512 under
// -march=native and AVX2 under x86-64-v3 from one source.
// Masks (core/modifications.h): a block mask computed once per run (block_mask: tiles of
// kTileCols queries by key blocks of kKeyBlock) says which tiles are Empty (never visited: after
// a causal diagonal, outside a window, other documents' keys), Full (no element mask) or Partial;
// each tile visits only the keys some query of it may see (a causal diagonal stops at the tile's
// last query, a window starts at its first query's window), and a Partial tile sets the pairs
// its rule blocks to -inf (mask_tile). Score mods (ALiBi, a bias, soft-capping) turn a tile's raw
// scores into modified scaled scores before the online softmax (modify_tile); m is then kept in
// those units and the exp takes 1 / T (online_scale). RoPE: the kernel multiplies the problem's
// rotated Q and K (rotated_qk, made once per problem). Work items are handed out through an
// atomic counter, largest (last causal blocks) first, so causal's uneven rows still spread; under
// a sliding window an item is a run of neighbouring blocks, which share most of their keys.
// Accuracy: the max is taken on raw scores and the subtraction happens before the scaling, so the
// exp argument for the keys that matter is small and exact to a few ulp; the exp is taken in base 2
// (exp2_nonpositive, within about 1 ulp, the scale times log2 e); the error against fp64 is that
// of the fp32 dot products (about 1e-7 relative at T = 1).
#include "core/gcc12_avx512.h"  // first: see there

#include "cpu/cpu_backend.h"
#include "cpu/chains.h"
#include "core/parallel.h"
#include "cpu/online_softmax.h"
#include "core/modify.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace attnlab {
namespace {

using namespace cpu::online;

// A query block is a few tiles wide; a key block's S^T (kKeyBlock, kQueryBlock) stays in L1
// between the three passes over it (scores, softmax, P V), beside the block's V rows.
constexpr int kQueryBlock = 64;
constexpr int kKeyBlock = kFusedKeyBlock;
constexpr std::size_t kMaxChunk = 32;  // query blocks per work item at most, under a window (fused_into)
static_assert(kQueryBlock % kTileCols == 0, "a query block is whole tiles");

// Per-thread scratch, sized once. Rows are kQueryBlock floats: one column per query.
struct Scratch {
  MatrixF qt;    // (d_k, kQueryBlock)       Q_blk^T, zero in the columns past the block's rows
  MatrixF st;    // (kKeyBlock, kQueryBlock) S^T, then P^T
  MatrixF acct;  // (d_v, kQueryBlock)       acc^T
  Eigen::RowVectorXf m, l, alpha;  // (kQueryBlock)
  Scratch(int d_k, int d_v)
      : qt(d_k, kQueryBlock),
        st(kKeyBlock, kQueryBlock),
        acct(d_v, kQueryBlock),
        m(kQueryBlock),
        l(kQueryBlock),
        alpha(kQueryBlock) {}
};

// V in strips, the wide tiles' left factor of P V (rows_madd over d_v rows of acc^T, a kWideRows
// rows' tile broadcasting those values of each key in turn). Read in place, a tile's keys are a
// row of V apart and the tile touches a line per key (two where its values straddle a line), at
// a stride that grows with d_v: past d_v = 64 the product ran slower the longer V's rows, well
// below its speed at 64 from d_v = 128 on. Packed, strip s of key block b (values s kWideRows ..
// + kWideRows − 1 of the block's kKeyBlock keys) is one run of floats, key j's values at
// j kWideRows, zero past d_v and past the last key (every float written: the buffer is not zeroed
// first). The copy is a pass over V once per run, O(m d_v) against the kernel's O(n m d): it is
// made only where the product gains the most and the pass is a small share of the run, d_v >= 128
// and n at least kStripQueryBlocks query blocks (at fewer, or at d_v below 128, the pass cost about
// what the product gained). The products are the same sums in the same order: the output is the
// same bit for bit.
// Narrow tiles (a causal diagonal, a window's edges, a short block) read V in place.
constexpr int kStripQueryBlocks = 32;
struct VStrips {
  int strips = 0, key_blocks = 0;  // per key block of a key/value head; 0 strips: none made
  std::unique_ptr<float[]> data;   // null: V read in place
  static constexpr Index kStrip = Index{kKeyBlock} * kWideRows;  // floats of one strip
  // The strips' shape for a problem of size s where the kernel makes them, else none (no data yet
  // either way).
  static VStrips shape(const ProblemSize& s) {
    VStrips v;
    if (s.d_v < 128 || s.n < kStripQueryBlocks * kQueryBlock) return v;
    v.strips = (s.d_v + kWideRows - 1) / kWideRows;
    v.key_blocks = (s.m + kKeyBlock - 1) / kKeyBlock;
    return v;
  }
  std::size_t floats(int kv_heads) const { return static_cast<std::size_t>(kv_heads) * key_blocks * strips * kStrip; }
  // Strip 0 of key/value head g's key block b; strip s follows at s kStrip.
  const float* at(int g, int b) const { return data.get() + (static_cast<Index>(g) * key_blocks + b) * strips * kStrip; }
};

VStrips v_strips(const Problem& p) {
  VStrips v = VStrips::shape(size_of(p));
  if (v.strips == 0) return v;
  const int m = p.m(), d_v = p.d_v();
  const std::size_t blocks = static_cast<std::size_t>(p.kv_heads()) * v.key_blocks;
  const std::size_t floats = v.floats(p.kv_heads());
  v.data.reset(new float[floats]);
  parallel_items(blocks, worker_count(blocks, 1e3 * static_cast<double>(floats)), [&](unsigned, std::size_t it) {
    const int g = static_cast<int>(it / v.key_blocks), k0 = static_cast<int>(it % v.key_blocks) * kKeyBlock;
    const int cols = std::min(kKeyBlock, m - k0);
    float* to = v.data.get() + it * v.strips * VStrips::kStrip;
    for (int s = 0; s < v.strips; ++s, to += VStrips::kStrip) {
      const int r0 = s * kWideRows, rows = std::min(kWideRows, d_v - r0);
      for (int j = 0; j < kKeyBlock; ++j) {
        float* key = to + j * kWideRows;
        const float* from = p.v().data() + (static_cast<Index>(g) * m + k0 + j) * d_v + r0;
        for (int r = 0; r < kWideRows; ++r) key[r] = j < cols && r < rows ? from[r] : 0.f;
      }
    }
  });
  return v;
}

struct FusedJob {
  const Problem& p;
  const MatrixF& q;     // Q and K as multiplied: p's, or rotated by RoPE
  const MatrixF& k;
  const MaskRule& rule;     // the mask kind and the mask mods
  const BlockMask& blocks;  // (query tiles of kTileCols, key blocks of kKeyBlock)
  const ScoreRule& score;   // the score mods (score.any() false without them)
  // Without score mods: fused_scale(p) = 1 / (sqrt(d_k) T) (or scale / T), applied inside the exp
  // to raw scores. With them: the scores are scaled (score_scale) and modified first, and the exp
  // takes 1 / T.
  float scale;
  float score_scale;
  MatrixF& out;         // (heads*n, d_v)
  cpu::RowStats* stats;  // when given: every row's final m and l (the backward's log-sum-exp)
  const VStrips& strips;  // V in strips for the wide tiles' P V (empty: V read in place)
};

// Software prefetches of a few ranges, issued a share at a time.
struct Prefetch {
  std::array<const char*, 3> at{};
  std::array<std::size_t, 3> bytes{};
  int ranges = 0, r = 0;
  std::size_t done = 0, share = 0;
  void add(const float* x, std::size_t floats) {
    assert(ranges < static_cast<int>(at.size()));
    at[ranges] = reinterpret_cast<const char*>(x);
    bytes[ranges++] = floats * sizeof(float);
  }
  void plan(int steps) {
    std::size_t lines = 0;
    for (int i = 0; i < ranges; ++i) lines += (bytes[i] + 63) / 64;
    share = (lines + steps - 1) / steps;
  }
  void step() {
    for (std::size_t n = 0; n < share && r < ranges;) {
      if (done >= bytes[r]) {
        ++r, done = 0;
        continue;
      }
      __builtin_prefetch(at[r] + done, 0, 2);
      done += 64, ++n;
    }
  }
  void rest() {  // every line not issued yet
    share = ~std::size_t{0};
    step();
  }
};

// The shares the next item's prefetch is planned on per key block: about the fewest micro-tile
// steps a key block that visits keys takes (two narrow tiles over a one-key window's 32 keys take
// ten; a wide step over a whole block of 64 keys at d_v = 64 takes 22). Blocks with more steps
// issue everything early; what a block with fewer leaves is issued at the item's end (rest).
constexpr int kPrefetchStepsPerKeyBlock = 12;

// rows_madd a micro-tile's rows at a time, a share of the prefetches after each. a_tile: the step
// from one micro-tile's a to the next one's (a_row times its rows by default; a strip's size for
// V in strips).
template <int V = kTileVecs>
void rows_madd_ahead(Prefetch& ahead, int rows, const float* a, Index a_row, Index a_k, const float* b, Index ldb,
                     int depth, float* c, Index ldc, const float* col_scale, Index a_tile = 0) {
  constexpr int kR = kRowsOf<V>;
  if (a_tile == 0) a_tile = kR * a_row;
  for (int r0 = 0; r0 < rows; r0 += kR) {
    rows_madd<V>(std::min(kR, rows - r0), a + r0 / kR * a_tile, a_row, a_k, b, ldb, depth, c + r0 * ldc, ldc,
                 col_scale);
    ahead.step();
  }
}

// One (head, query block): rows [q0, q0 + rows) of head h. Output rows written once at the end.
// next_q0: the first query of the block this worker likely runs next, or -1.
// Each tile of kTileCols queries visits the key blocks the block mask does not rule out, and of
// those only the keys some query of the tile may see (a causal diagonal stops at the tile's last
// query, a window starts at its first query's window); a Partial tile gets the element mask.
void run_block(const FusedJob& job, Scratch& w, int h, int q0, int rows, int next_q0) {
  const Problem& p = job.p;
  const int m = p.m(), d_k = p.d_k(), d_v = p.d_v();
  const Index qrow = static_cast<Index>(h) * p.n() + q0;
  const Index krow = p.kv_row(h);
  const int g = p.kv_head(h);
  constexpr Index ld = kQueryBlock;

  if (rows < kQueryBlock) w.qt.setZero();
  transpose_into(job.q.data() + qrow * d_k, d_k, rows, d_k, w.qt.data(), ld);
  w.m.setConstant(kNegInf);
  w.l.setZero();
  w.acct.setZero();  // alpha of the first step is 0; 0 * 0 keeps it 0 (garbage could be NaN)
  const SoftmaxState state{w.m.data(), w.l.data(), w.alpha.data()};

  // The keys [lo, hi) some query of each tile may see.
  std::array<int, kQueryBlock / kTileCols> tile_lo{}, tile_hi{};
  int key_begin = m, key_end = 0;  // the keys some tile may see: key blocks outside are not walked
  for (int i0 = 0; i0 < rows; i0 += kTileCols) {
    int lo = m, hi = 0;
    for (int i = q0 + i0; i < std::min(q0 + rows, q0 + i0 + kTileCols); ++i) {
      int a, b;
      job.rule.interval(i, a, b);
      if (a < b) lo = std::min(lo, a), hi = std::max(hi, b);
    }
    tile_lo[i0 / kTileCols] = lo;
    tile_hi[i0 / kTileCols] = hi;
    key_begin = std::min(key_begin, lo);
    key_end = std::max(key_end, hi);
  }
  const int first_block = key_begin / kKeyBlock * kKeyBlock;
  // The block this worker likely runs next (next_q0, from fused_into: two blocks down when the
  // workers take blocks in turn, the one just below within a chunk): its Q rows and the K and V
  // rows of its key blocks before this block's first (the ones this worker has not read; at least
  // its first block, at most two, never past its last key) are brought towards L2 while this block
  // runs, a share after each micro-tile's rows of the products (rows_madd_ahead), planned on
  // kPrefetchStepsPerKeyBlock a key block and what is left issued at the block's end: issued in
  // larger bursts, the prefetches waited on each other's line fills (a prefetch stalls while the
  // fill buffers are full). A block that meets few keys (a short window) would otherwise wait on
  // each line, its K and V read by no other block before.
  Prefetch ahead;
  if (next_q0 >= 0) {
    const int nq = next_q0;
    int a0, b0, a1, b1;
    job.rule.interval(nq, a0, b0);
    job.rule.interval(nq + kQueryBlock - 1, a1, b1);
    const int nk = std::min(a0, a1) / kKeyBlock * kKeyBlock;
    const int nend = std::min({m, (std::max(b0, b1) + kKeyBlock - 1) / kKeyBlock * kKeyBlock,
                               std::max(nk + kKeyBlock, std::min(first_block, nk + 2 * kKeyBlock))});
    const int ncols = std::max(0, nend - nk);
    ahead.add(job.q.data() + (qrow - q0 + nq) * d_k, static_cast<std::size_t>(kQueryBlock) * d_k);
    ahead.add(job.k.data() + (krow + nk) * d_k, static_cast<std::size_t>(ncols) * d_k);
    ahead.add(p.v().data() + (krow + nk) * d_v, static_cast<std::size_t>(ncols) * d_v);
    ahead.plan(std::max(1, (key_end - first_block + kKeyBlock - 1) / kKeyBlock * kPrefetchStepsPerKeyBlock));
  }
  for (int k0 = first_block; k0 < key_end; k0 += kKeyBlock) {
    const int cols = std::min(kKeyBlock, m - k0);
    const float* kb = job.k.data() + (krow + k0) * d_k;  // K_blk (cols, d_k), row-major
    const float* vb = p.v().data() + (krow + k0) * d_v;  // V_blk (cols, d_v), row-major
    for (int i0 = 0; i0 < kQueryBlock;) {
      if (i0 >= rows) break;  // tiles of padding only
      const int t = i0 / kTileCols;
      // Each tile's kind in the block mask and the keys [j0, j1) of this block it may see.
      constexpr int kPer = kWideCols / kTileCols;
      BlockKind kind[kPer]{};
      int j0[kPer]{}, j1[kPer]{};
      for (int u = 0; u < kPer && t + u < kQueryBlock / kTileCols; ++u) {
        kind[u] = job.blocks.at((q0 + i0) / kTileCols + u, k0 / kKeyBlock);
        j0[u] = std::clamp(tile_lo[t + u] - k0, 0, cols);
        j1[u] = std::clamp(tile_hi[t + u] - k0, j0[u], cols);
      }
      const auto visits = [&](int u) { return kind[u] != BlockKind::Empty && j1[u] > j0[u]; };
      // kWideCols / kTileCols tiles that are all real queries and see the same keys of this block
      // share one wide product each for S and P V: the same sums, per element, in the same order,
      // with fewer loads per multiply-add. Their kinds may differ (one of them Partial).
      bool wide = i0 % kWideCols == 0 && i0 + kWideCols <= rows && visits(0);
      for (int u = 1; wide && u < kPer; ++u) wide = visits(u) && j0[u] == j0[0] && j1[u] == j1[0];
      const int width = wide ? kWideCols : kTileCols;
      const int next = i0 + width;
      if (!visits(0)) {  // every pair masked: the tile's state stays
        i0 = next;
        continue;
      }
      const int first = j0[0];
      const int keys = j1[0] - first;
      float* st = w.st.data() + i0;
      if (wide)
        rows_madd_ahead<kWideVecs>(ahead, keys, kb + static_cast<Index>(first) * d_k, d_k, 1, w.qt.data() + i0, ld,
                                   d_k, st, ld, nullptr);
      else
        rows_madd_ahead(ahead, keys, kb + static_cast<Index>(first) * d_k, d_k, 1, w.qt.data() + i0, ld, d_k, st, ld,
                        nullptr);
      for (int u = i0; u < next; u += kTileCols) {
        const int lanes = std::min(kTileCols, rows - u);
        float* su = w.st.data() + u;
        if (job.score.any()) modify_tile(job.score, job.score_scale, su, ld, h, q0 + u, lanes, k0 + first, keys);
        if (kind[(u - i0) / kTileCols] == BlockKind::Partial) mask_tile(job.rule, su, ld, q0 + u, lanes, k0 + first, keys);
        const SoftmaxState tile{state.m + u, state.l + u, state.alpha + u};
        if (!wide) {
          update_tile(su, ld, keys, vb + static_cast<Index>(first) * d_v, d_v, w.acct.data() + u, job.scale, tile,
                      k0 + first);
        } else {
          online_softmax_step(su, ld, keys, job.scale, tile, k0 + first);
        }
      }
      if (wide && job.strips.data)  // the same product, V's values from its strips
        rows_madd_ahead<kWideVecs>(ahead, d_v, job.strips.at(g, k0 / kKeyBlock) + first * kWideRows, 1, kWideRows,
                                   st, ld, keys, w.acct.data() + i0, ld, state.alpha + i0, VStrips::kStrip);
      else if (wide)  // acc^T = acc^T * alpha + V_blk^T P^T over the wide tile (update_tile's product)
        rows_madd_ahead<kWideVecs>(ahead, d_v, vb + static_cast<Index>(first) * d_v, 1, d_v, st, ld, keys,
                                   w.acct.data() + i0, ld, state.alpha + i0);
      else
        ahead.step();
      i0 = next;
    }
  }
  ahead.rest();
  // A score that overflowed fp32 turns its query into inf/NaN here (a finite unmasked score
  // always contributes exp(0) = 1 to l), and a row whose largest logit (m times the scale) does
  // not fit fp32 is one the staged chain cannot form: both refused as the staged chain does.
  // acc^T's columns past the block's rows hold zero queries (0 / 0 would be NaN): they are neither
  // checked nor divided.
  const auto mq = w.m.head(rows).array();
  const auto lq = w.l.head(rows).array();
  bool acc_finite = true;
  for (int c = 0; c < d_v && acc_finite; ++c) acc_finite = all_finite(w.acct.data() + c * ld, rows);
  if (!mq.allFinite() || !(mq * job.scale).allFinite() || !(lq > 0.f).all() || !lq.allFinite() || !acc_finite) {
    // The first row that overflowed, named as the staged chain would name it.
    for (int i = 0; i < rows; ++i) {
      bool row_finite = true;
      for (int c = 0; c < d_v; ++c) row_finite = row_finite && std::isfinite(w.acct.data()[c * ld + i]);
      const RowOverflow what = row_overflow(w.m[i], w.l[i], row_finite, job.scale);
      if (what != RowOverflow::None) throw_overflow(what, h, q0 + i, Precision::FP32);
    }
  }
  // O = acc * (1 / l): one division per query (a division per element of acc would cost more
  // than the block's transposes), the products taken as acc^T is transposed into O's rows.
  alignas(64) float inv_l[kQueryBlock];
  const int whole = rows - rows % kLanes;
  for (int i = 0; i < whole; i += kLanes)
    ei::pstore(inv_l + i, ei::pdiv(ei::pset1<Packet>(1.f), ei::ploadu<Packet>(w.l.data() + i)));
  for (int i = whole; i < rows; ++i) inv_l[i] = 1.f / w.l[i];
  transpose_into(w.acct.data(), ld, d_v, rows, job.out.data() + qrow * d_v, d_v, /*stream=*/true, inv_l);
#if defined(__AVX512F__)
  _mm_sfence();  // the streamed rows ordered before the item is reported done
#endif
  if (job.stats != nullptr) {
    std::copy_n(w.m.data(), rows, job.stats->m.data() + qrow);
    std::copy_n(w.l.data(), rows, job.stats->l.data() + qrow);
  }
}

}  // namespace

std::size_t cpu::fused_v_strip_floats(const ProblemSize& s) { return VStrips::shape(s).floats(s.kv_heads); }

namespace {

void fused_into_once(const Problem& p, Trace& t, cpu::RowStats* stats) {
  const auto t0 = std::chrono::steady_clock::now();
  const int n = p.n(), m = p.m(), heads = p.heads, d_k = p.d_k(), d_v = p.d_v();
  cpu::begin_trace(t, p, Variant::Fused, Precision::FP32, /*keep=*/false, /*output=*/true);

  const std::shared_ptr<const RotatedQK> rot = rotated_qk(p);
  const MaskRule rule = mask_rule(p);
  const BlockMask blocks = block_mask(p, kTileCols, kKeyBlock);
  std::vector<float> slopes;
  const ScoreRule score = score_rule<float>(p, slopes);
  const float scale = online_scale(p);
  if (stats != nullptr) {
    stats->m.assign(static_cast<std::size_t>(heads) * n, 0.f);
    stats->l.assign(static_cast<std::size_t>(heads) * n, 0.f);
    stats->scale = scale;
  }
  const VStrips strips = v_strips(p);
  const FusedJob job{p,     kernel_q(p, rot.get()), kernel_k(p, rot.get()), rule, blocks, score, scale,
                     static_cast<float>(p.scale_value()), t.output, stats, strips};

  const int blocks_per_head = (n + kQueryBlock - 1) / kQueryBlock;
  const std::size_t items = static_cast<std::size_t>(heads) * blocks_per_head;
  const double flops = 4.0 * heads * static_cast<double>(n) * m * std::max(d_k, d_v);
  const unsigned workers = worker_count(items, flops);

  // Head by head, so that both workers read the same head's K and V while it lasts; within a
  // head the causal blocks near the end carry the most keys: hand those out first. Each worker
  // sizes its scratch once, on its first item.
  // Under a sliding window (a band of keys at most a quarter of them), work items of `chunk`
  // neighbouring query blocks of a head, taken top down: a worker's next block is then mostly the
  // one just below, whose keys are mostly the ones this block read, still in this core's L2 (the
  // first of a chunk follows the other worker's chunk, and reads its band afresh). With blocks
  // dealt one at a time the workers alternate, and each one's next block sees two new key blocks
  // of its band. Several chunks per worker, so that the last ones still spread. Without a band
  // every block reads every key (or, causal, every key below it) and blocks are dealt one by one.
  const bool band = rule.window > 0 && 4 * (static_cast<long long>(rule.window) + kQueryBlock) <= m;
  const int chunk =
      band ? static_cast<int>(std::clamp<std::size_t>(items / (16 * std::size_t{workers}), 1, kMaxChunk)) : 1;
  const int chunks_per_head = (blocks_per_head + chunk - 1) / chunk;
  std::vector<std::unique_ptr<Scratch>> scratch(workers);
  parallel_items(static_cast<std::size_t>(heads) * chunks_per_head, workers, [&](unsigned id, std::size_t it) {
    if (!scratch[id]) scratch[id] = std::make_unique<Scratch>(d_k, d_v);
    const int h = static_cast<int>(it / chunks_per_head);
    const int c = static_cast<int>(it % chunks_per_head);
    for (int j = 0; j < chunk; ++j) {
      const int qb = blocks_per_head - 1 - (c * chunk + j);
      if (qb < 0) break;
      // The next block this worker likely runs: the next of its chunk, or the first of the chunk
      // after the one the other worker is taking (none past the head's first block).
      const int next = j + 1 < chunk ? qb - 1 : qb - 1 - chunk;
      const int q0 = qb * kQueryBlock;
      run_block(job, *scratch[id], h, q0, std::min(kQueryBlock, n - q0), next >= 0 ? next * kQueryBlock : -1);
    }
  });

  t.timings.total_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  t.timings.fused_ms = t.timings.total_ms;  // the blockwise kernel is the whole run
}

}  // namespace

void cpu::fused_into(const Problem& p, Trace& t, RowStats* stats) {
  output_in_range(p, Precision::FP32, t, [stats](const Problem& q, Trace& out) { fused_into_once(q, out, stats); });
}

Trace cpu_fused(const Problem& p) {
  validate(p);
  Trace t;
  cpu::fused_into(p, t);
  return t;
}

}  // namespace attnlab
