// The fused CPU kernel: blockwise attention with an online softmax (FlashAttention-2, Dao 2023,
// Algorithm 1), fp32, one worker thread per core. It never materialises the (n, m) matrices. A
// work item is one (head, block of kQueryBlock queries); it walks the head's keys in blocks of
// kKeyBlock and keeps, per query i of the block, the running max m(i) of the raw scores, the
// running sum l(i) of exp((s - m) * scale) and the unnormalised output acc(i, :):
//   S^T (keys, queries)   = K_blk Q_blk^T                                   tile_madd
//   m_new = max(m, max_j S^T(j, i));  alpha = exp((m - m_new) * scale)
//   P^T   = exp((S^T - m_new) * scale);  l = alpha * l + sum_j P^T(j, i)      online_softmax_step
//   acc^T (d_v, queries)  = acc^T * alpha + V_blk^T P^T                       update_tile
// and writes O = acc / l once at the end.
// Why transposed (queries along the vector lanes): K and V are used straight from the inputs
// (only the query block is packed, once per item, into Q^T), the softmax reductions over the keys
// are vertical (one packet of queries per row, no horizontal sums), and the rescale by alpha is a
// per-lane multiply folded into the load of acc. Both products are the same register-tiled
// micro-kernel (tile_madd) written with Eigen's packet functions, so it is AVX-512 under
// -march=native and AVX2 under x86-64-v3 from one source.
// Causal (n == m): key blocks after the block's last query are never visited; in the diagonal
// block each tile of queries stops at its own last query, and the few scores above the diagonal
// inside a tile are set to -inf. Work items are handed out through an atomic counter, largest
// (last causal blocks) first, so causal's uneven rows still spread over the threads.
// Accuracy: the max is taken on raw scores and the subtraction happens before the scaling, so the
// exp argument for the keys that matter is small and exact to a few ulp; exp_nonpositive is the
// Cephes polynomial Eigen uses (about 1 ulp); the error against fp64 is that of the fp32 dot
// products (about 1e-7 relative at T = 1).
#include "core/gcc12_avx512.h"  // first: see there

#include "cpu/cpu_backend.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <limits>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace attnlab {
namespace {

namespace ei = Eigen::internal;
using Index = Eigen::Index;
using Packet = ei::packet_traits<float>::type;  // Packet16f (AVX-512), Packet8f (AVX2), ...
constexpr int kLanes = ei::packet_traits<float>::size;
// The int packet of the same width (for exp's 2^n). A vector type as a class template argument
// draws GCC's -Wignored-attributes (its alignment attribute is not part of the type); harmless.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wignored-attributes"
using PacketI = ei::unpacket_traits<Packet>::integer_packet;
#pragma GCC diagnostic pop

// The micro-tile: kTileRows rows by kTileVecs packets. Its kTileRows * kTileVecs accumulators,
// kTileVecs loaded B packets and one broadcast fit the register file (32 zmm; 16 ymm for AVX2).
constexpr int kTileVecs = 2;
constexpr int kTileCols = kTileVecs * kLanes;  // queries per tile: 32 (AVX-512), 16 (AVX2)
constexpr int kTileRows = kLanes >= 16 ? 8 : 6;

// A query block is a few tiles wide; a key block's S^T (kKeyBlock, kQueryBlock) stays in L1/L2
// between the three passes over it (scores, softmax, P V).
constexpr int kQueryBlock = 64;
constexpr int kKeyBlock = 128;
static_assert(kQueryBlock % kTileCols == 0, "a query block is whole tiles");

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// exp(x) for x <= 0 (every argument here is a score minus the running max), as Eigen's pexp
// computes it (Cephes: x = n ln2 + r, a degree-6 polynomial in r) but without its clamping:
// below ln(FLT_MIN) the result is exactly 0, so masked keys (-inf) and every key of a row masked
// so far weigh exactly 0 on every ISA (Eigen's clamped exp returns ~1e-39 there on AVX2), and a
// NaN (an overflowed score) stays NaN, which the final check refuses.
inline Packet exp_nonpositive(const Packet& x) {
  const Packet n = ei::pfloor(ei::pmadd(x, ei::pset1<Packet>(1.44269504088896341f),
                                        ei::pset1<Packet>(0.5f)));
  Packet r = ei::pmadd(n, ei::pset1<Packet>(-0.693359375f), x);  // ln2 in two parts
  r = ei::pmadd(n, ei::pset1<Packet>(2.12194440e-4f), r);
  const Packet r2 = ei::pmul(r, r);
  const Packet r3 = ei::pmul(r2, r);
  Packet y = ei::pmadd(ei::pset1<Packet>(1.9875691500e-4f), r, ei::pset1<Packet>(1.3981999507e-3f));
  Packet y1 = ei::pmadd(ei::pset1<Packet>(4.1665795894e-2f), r, ei::pset1<Packet>(1.6666665459e-1f));
  const Packet y2 = ei::padd(r, ei::pset1<Packet>(1.f));
  y = ei::pmadd(y, r, ei::pset1<Packet>(8.3334519073e-3f));
  y1 = ei::pmadd(y1, r, ei::pset1<Packet>(5.0000001201e-1f));
  y = ei::pmadd(y, r3, y1);
  y = ei::pmadd(y, r2, y2);
  // 2^n for n in [-126, 0]: n + 127 written into the exponent field.
  const PacketI bits = ei::plogical_shift_left<23>(
      ei::padd(ei::pcast<Packet, PacketI>(n), ei::pset1<PacketI>(127)));
  const Packet e = ei::pmul(y, ei::preinterpret<Packet>(bits));
  return ei::pselect(ei::pcmp_lt(x, ei::pset1<Packet>(-87.33654f)), ei::pzero(x), e);
}

// c (R, kTileCols) = a (R, depth) b (depth, kTileCols), or, when col_scale is given,
// c = c * col_scale + a b with col_scale (kTileCols) per column. a(r, k) = a[r * a_row + k * a_k]
// is broadcast; row k of b starts at b + k * ldb; row r of c at c + r * ldc.
// The accumulators are a fixed-size array the compiler keeps in registers. They start at 0 and
// the old c is added at the end: a key block's sum is formed on its own, then added to the
// running acc (one long sequential fp32 sum over all keys would lose accuracy as N grows).
template <int R>
void tile_madd(const float* a, Index a_row, Index a_k, const float* b, Index ldb, int depth,
               float* c, Index ldc, const float* col_scale) {
  Packet acc[R][kTileVecs];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < kTileVecs; ++v) acc[r][v] = ei::pzero(acc[r][v]);
  for (int k = 0; k < depth; ++k) {
    Packet bk[kTileVecs];
    for (int v = 0; v < kTileVecs; ++v) bk[v] = ei::ploadu<Packet>(b + k * ldb + v * kLanes);
    const float* ak = a + k * a_k;
    for (int r = 0; r < R; ++r) {
      const Packet ar = ei::pset1<Packet>(ak[r * a_row]);
      for (int v = 0; v < kTileVecs; ++v) acc[r][v] = ei::pmadd(ar, bk[v], acc[r][v]);
    }
  }
  if (col_scale != nullptr) {
    Packet s[kTileVecs];
    for (int v = 0; v < kTileVecs; ++v) s[v] = ei::ploadu<Packet>(col_scale + v * kLanes);
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < kTileVecs; ++v)
        acc[r][v] = ei::pmadd(ei::ploadu<Packet>(c + r * ldc + v * kLanes), s[v], acc[r][v]);
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < kTileVecs; ++v) ei::pstoreu(c + r * ldc + v * kLanes, acc[r][v]);
}

using TileFn = void (*)(const float*, Index, Index, const float*, Index, int, float*, Index,
                        const float*);
template <int... R>
constexpr std::array<TileFn, sizeof...(R)> tile_table(std::integer_sequence<int, R...>) {
  return {&tile_madd<R + 1>...};
}
constexpr auto kTileFns = tile_table(std::make_integer_sequence<int, kTileRows>{});

// tile_madd over `rows` rows of a and c: whole kTileRows tiles, then one shorter tile.
void rows_madd(int rows, const float* a, Index a_row, Index a_k, const float* b, Index ldb,
               int depth, float* c, Index ldc, const float* col_scale) {
  int r0 = 0;
  for (; r0 + kTileRows <= rows; r0 += kTileRows)
    tile_madd<kTileRows>(a + r0 * a_row, a_row, a_k, b, ldb, depth, c + r0 * ldc, ldc, col_scale);
  if (r0 < rows)
    kTileFns[rows - r0 - 1](a + r0 * a_row, a_row, a_k, b, ldb, depth, c + r0 * ldc, ldc,
                            col_scale);
}

// The online softmax's state for the kQueryBlock queries of a work item, one entry per query:
// running max m of the raw scores, running sum l, and the last step's rescale alpha.
struct SoftmaxState {
  float* m;
  float* l;
  float* alpha;
};

// One step of the online softmax for one tile of kTileCols queries (columns) over `keys` keys:
// st (keys, kTileCols), row stride ld, holds raw scores S^T and is overwritten with
// P^T = exp((S^T - m_new) * scale); per query column
//   m_new = max(m, max_j st(j)),  alpha = exp((m - m_new) * scale),  l = alpha * l + sum_j P^T(j)
// and m = m_new; update_tile then rescales acc by alpha and adds P V. Together they are the
// update the online-softmax walk shows, one tile at a time.
void online_softmax_step(float* st, Index ld, int keys, float scale, const SoftmaxState& s) {
  const Packet vscale = ei::pset1<Packet>(scale);
  const Packet neg_inf = ei::pset1<Packet>(kNegInf);
  // Four partial maxes and sums: independent chains, so the loops are not latency-bound, and
  // each sum adds a quarter of the keys (a long sequential fp32 sum would cost accuracy).
  constexpr int kChains = 4;
  const int whole = keys - keys % kChains;
  for (int v = 0; v < kTileVecs; ++v) {
    float* col = st + v * kLanes;
    Packet mx[kChains];
    for (int c = 0; c < kChains; ++c) mx[c] = neg_inf;
    for (int j = 0; j < whole; j += kChains)
      for (int c = 0; c < kChains; ++c)
        mx[c] = ei::pmax(mx[c], ei::ploadu<Packet>(col + (j + c) * ld));
    for (int j = whole; j < keys; ++j) mx[0] = ei::pmax(mx[0], ei::ploadu<Packet>(col + j * ld));
    const Packet m_old = ei::ploadu<Packet>(s.m + v * kLanes);
    const Packet m_new =
        ei::pmax(m_old, ei::pmax(ei::pmax(mx[0], mx[1]), ei::pmax(mx[2], mx[3])));
    // Every key so far masked: shift by 0 instead of -inf, so -inf - -inf never makes a NaN; the
    // weights are then exactly 0 and the first unmasked key's alpha = exp(-inf) = 0 keeps them so.
    const Packet shift = ei::pselect(ei::pcmp_eq(m_new, neg_inf), ei::pzero(m_new), m_new);
    const Packet alpha = exp_nonpositive(ei::pmul(ei::psub(m_old, shift), vscale));
    auto weight = [&](int j) {  // P^T(j) = exp((S^T(j) - shift) * scale), stored over S^T(j)
      float* at = col + j * ld;
      const Packet p = exp_nonpositive(ei::pmul(ei::psub(ei::ploadu<Packet>(at), shift), vscale));
      ei::pstoreu(at, p);
      return p;
    };
    Packet sum[kChains];
    for (int c = 0; c < kChains; ++c) sum[c] = ei::pzero(m_new);
    for (int j = 0; j < whole; j += kChains)
      for (int c = 0; c < kChains; ++c) sum[c] = ei::padd(sum[c], weight(j + c));
    for (int j = whole; j < keys; ++j) sum[0] = ei::padd(sum[0], weight(j));
    const Packet total = ei::padd(ei::padd(sum[0], sum[1]), ei::padd(sum[2], sum[3]));
    const Packet l_old = ei::ploadu<Packet>(s.l + v * kLanes);
    ei::pstoreu(s.l + v * kLanes, ei::pmadd(l_old, alpha, total));
    ei::pstoreu(s.m + v * kLanes, m_new);
    ei::pstoreu(s.alpha + v * kLanes, alpha);
  }
}

// The whole update of one tile of kTileCols queries by one block of `keys` keys (the inner step
// of FlashAttention-2's Algorithm 1): online_softmax_step on its scores, then
//   acc^T (d_v, kTileCols) = acc^T * alpha + V_blk^T P^T
// st (keys, kTileCols), row stride ld: the tile's masked raw scores S^T, left holding P^T;
// v_blk (keys, d_v), row-major; acct (d_v, kTileCols), row stride ld; s: the tile's m, l, alpha.
void update_tile(float* st, Index ld, int keys, const float* v_blk, int d_v, float* acct,
                 float scale, const SoftmaxState& s) {
  online_softmax_step(st, ld, keys, scale, s);
  rows_madd(d_v, v_blk, 1, d_v, st, ld, keys, acct, ld, s.alpha);  // a(r, j) = V_blk(j, r)
}

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

struct FusedJob {
  const Problem& p;
  const MatrixF* mask;  // (n, m) custom mask or nullptr
  float scale;          // 1 / (sqrt(d_k) T)
  MatrixF& out;         // (heads*n, d_v)
};

// One (head, query block): rows [q0, q0 + rows) of head h. Output rows written once at the end.
void run_block(const FusedJob& job, Scratch& w, int h, int q0, int rows) {
  const Problem& p = job.p;
  const int n = p.n(), m = p.m(), d_k = p.d_k(), d_v = p.d_v();
  const bool causal = p.mask == MaskKind::Causal;
  const Index qrow = static_cast<Index>(h) * n + q0;
  const Index krow = static_cast<Index>(h) * m;
  constexpr Index ld = kQueryBlock;

  w.qt.setZero();
  w.qt.leftCols(rows) = p.q.middleRows(qrow, rows).transpose();
  w.m.setConstant(kNegInf);
  w.l.setZero();
  w.acct.setZero();  // alpha of the first step is 0; 0 * 0 keeps it 0 (garbage could be NaN)
  const SoftmaxState state{w.m.data(), w.l.data(), w.alpha.data()};

  // Causal (n == m): keys after the block's last query are masked for every row of the block.
  const int key_end = causal ? std::min(m, q0 + rows) : m;
  for (int k0 = 0; k0 < key_end; k0 += kKeyBlock) {
    const int cols = std::min(kKeyBlock, key_end - k0);
    const float* kb = p.k.data() + (krow + k0) * d_k;  // K_blk (cols, d_k), row-major
    const float* vb = p.v.data() + (krow + k0) * d_v;  // V_blk (cols, d_v), row-major
    for (int i0 = 0; i0 < kQueryBlock; i0 += kTileCols) {
      if (i0 >= rows) break;  // tiles of padding only
      // Keys this tile of queries can see: causal stops at the tile's last query.
      const int keys = causal ? std::clamp(q0 + i0 + kTileCols - k0, 0, cols) : cols;
      if (keys == 0) continue;  // all masked: the tile's state and acc stay as they are
      float* st = w.st.data() + i0;
      rows_madd(keys, kb, d_k, 1, w.qt.data() + i0, ld, d_k, st, ld, nullptr);
      if (causal && k0 + keys - 1 > q0 + i0) {
        // Scores above the diagonal inside the tile: query q0 + i0 + i sees keys k0 + j <= it.
        for (int j = std::max(0, q0 + i0 + 1 - k0); j < keys; ++j) {
          const int first_visible = k0 + j - q0 - i0;  // queries i < this are before key j
          std::fill(st + j * ld, st + j * ld + std::min(first_visible, kTileCols), kNegInf);
        }
      }
      if (job.mask != nullptr) {
        for (int i = 0; i < std::min(kTileCols, rows - i0); ++i) {
          const float* mrow = job.mask->data() + static_cast<Index>(q0 + i0 + i) * m + k0;
          for (int j = 0; j < keys; ++j)
            if (mrow[j] != 0.f) st[j * ld + i] = kNegInf;
        }
      }
      const SoftmaxState tile{state.m + i0, state.l + i0, state.alpha + i0};
      update_tile(st, ld, keys, vb, d_v, w.acct.data() + i0, job.scale, tile);
    }
  }
  // A score that overflowed fp32 turns its query into inf/NaN here (a finite unmasked score
  // always contributes exp(0) = 1 to l); refuse it like the staged chain does.
  const auto mq = w.m.head(rows).array();
  const auto lq = w.l.head(rows).array();
  const auto accq = w.acct.leftCols(rows);
  if (!mq.allFinite() || !(lq > 0.f).all() || !lq.allFinite() || !accq.allFinite()) {
    throw InputError("QKᵀ overflows in head " + std::to_string(h) + ", query rows " +
                     std::to_string(q0) + ".." + std::to_string(q0 + rows - 1) +
                     " (inputs too large for fp32)");
  }
  job.out.middleRows(qrow, rows) = (accq.array().rowwise() / lq).matrix().transpose();
}

unsigned worker_count(std::size_t items, double flops) {
  // Below ~2 MFLOP a thread start costs more than it saves.
  if (flops < 2e6) return 1;
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  return static_cast<unsigned>(std::min<std::size_t>(hw, items));
}

}  // namespace

Trace cpu_fused(const Problem& p) {
  validate(p);
  const auto t0 = std::chrono::steady_clock::now();
  const int n = p.n(), m = p.m(), heads = p.heads, d_k = p.d_k(), d_v = p.d_v();

  Trace t;
  t.backend = "cpu";
  t.variant = Variant::Fused;
  t.precision = Precision::FP32;
  t.has_stages = false;
  t.output.resize(static_cast<Index>(heads) * n, d_v);

  const float scale = static_cast<float>(1.0 / (std::sqrt(static_cast<double>(d_k)) *
                                                p.temperature));
  const FusedJob job{p, p.mask == MaskKind::Custom ? &p.custom_mask : nullptr, scale, t.output};

  const int blocks_per_head = (n + kQueryBlock - 1) / kQueryBlock;
  const std::size_t items = static_cast<std::size_t>(heads) * blocks_per_head;
  const double flops = 4.0 * heads * static_cast<double>(n) * m * std::max(d_k, d_v);
  const unsigned workers = worker_count(items, flops);

  // Causal blocks near the end of a head carry the most keys: hand those out first.
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  // A worker's exception (std::bad_alloc included) is rethrown as it was, after the join.
  std::vector<std::exception_ptr> errors(workers);
  auto work = [&](unsigned id) {
    try {
      Scratch w(d_k, d_v);
      for (std::size_t it = next++; it < items && !failed; it = next++) {
        const int h = static_cast<int>(it % heads);
        const int qb = blocks_per_head - 1 - static_cast<int>(it / heads);
        const int q0 = qb * kQueryBlock;
        run_block(job, w, h, q0, std::min(kQueryBlock, n - q0));
      }
    } catch (...) {
      errors[id] = std::current_exception();
      failed = true;
    }
  };
  if (workers == 1) {
    work(0);
  } else {
    std::vector<std::thread> pool;
    pool.reserve(workers - 1);
    for (unsigned id = 1; id < workers; ++id) pool.emplace_back(work, id);
    work(0);
    for (auto& th : pool) th.join();
  }
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }

  t.timings.total_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  t.timings.fused_ms = t.timings.total_ms;  // the blockwise kernel is the whole run
  return t;
}

}  // namespace attnlab
