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
// Causal (the n queries are the last n of the m positions): key blocks after the block's last
// query are never visited; in the diagonal block each tile of queries stops at its own last
// query, and the few scores above the diagonal inside a tile are set to -inf. Work items are handed out through an atomic counter, largest
// (last causal blocks) first, so causal's uneven rows still spread over the threads.
// Accuracy: the max is taken on raw scores and the subtraction happens before the scaling, so the
// exp argument for the keys that matter is small and exact to a few ulp; exp_nonpositive is the
// Cephes polynomial Eigen uses (about 1 ulp); the error against fp64 is that of the fp32 dot
// products (about 1e-7 relative at T = 1).
#include "core/gcc12_avx512.h"  // first: see there

#include "cpu/cpu_backend.h"
#include "cpu/chains.h"
#include "core/parallel.h"
#include "cpu/online_softmax.h"

#include <algorithm>
#include <array>
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

// A query block is a few tiles wide; a key block's S^T (kKeyBlock, kQueryBlock) stays in L1/L2
// between the three passes over it (scores, softmax, P V).
constexpr int kQueryBlock = 64;
constexpr int kKeyBlock = 128;
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

struct FusedJob {
  const Problem& p;
  const MatrixF* mask;  // (n, m) custom mask or nullptr
  float scale;          // fused_scale(p): 1 / (sqrt(d_k) T), or scale / T
  MatrixF& out;         // (heads*n, d_v)
};

// One (head, query block): rows [q0, q0 + rows) of head h. Output rows written once at the end.
void run_block(const FusedJob& job, Scratch& w, int h, int q0, int rows) {
  const Problem& p = job.p;
  const int n = p.n(), m = p.m(), d_k = p.d_k(), d_v = p.d_v();
  const bool causal = p.mask == MaskKind::Causal;
  const Index qrow = static_cast<Index>(h) * n + q0;
  const Index krow = p.kv_row(h);
  // Causal: query q0 + i is at position qpos + i of the keys (the queries are the last n).
  const int qpos = q0 + (causal ? p.causal_offset() : 0);
  constexpr Index ld = kQueryBlock;

  w.qt.setZero();
  w.qt.leftCols(rows) = p.q().middleRows(qrow, rows).transpose();
  w.m.setConstant(kNegInf);
  w.l.setZero();
  w.acct.setZero();  // alpha of the first step is 0; 0 * 0 keeps it 0 (garbage could be NaN)
  const SoftmaxState state{w.m.data(), w.l.data(), w.alpha.data()};

  // Causal: keys after the block's last query are masked for every row of the block.
  const int key_end = causal ? std::min(m, qpos + rows) : m;
  for (int k0 = 0; k0 < key_end; k0 += kKeyBlock) {
    const int cols = std::min(kKeyBlock, key_end - k0);
    const float* kb = p.k().data() + (krow + k0) * d_k;  // K_blk (cols, d_k), row-major
    const float* vb = p.v().data() + (krow + k0) * d_v;  // V_blk (cols, d_v), row-major
    for (int i0 = 0; i0 < kQueryBlock; i0 += kTileCols) {
      if (i0 >= rows) break;  // tiles of padding only
      // Keys this tile of queries can see: causal stops at the tile's last query.
      const int keys = causal ? std::clamp(qpos + i0 + kTileCols - k0, 0, cols) : cols;
      if (keys == 0) continue;  // all masked: the tile's state and acc stay as they are
      float* st = w.st.data() + i0;
      rows_madd(keys, kb, d_k, 1, w.qt.data() + i0, ld, d_k, st, ld, nullptr);
      if (causal && k0 + keys - 1 > qpos + i0) {
        // Scores above the diagonal inside the tile: query q0 + i0 + i sees keys k0 + j <= its
        // position qpos + i0 + i.
        for (int j = std::max(0, qpos + i0 + 1 - k0); j < keys; ++j) {
          const int first_visible = k0 + j - qpos - i0;  // queries i < this are before key j
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

}  // namespace

void cpu::fused_into(const Problem& p, Trace& t) {
  const auto t0 = std::chrono::steady_clock::now();
  const int n = p.n(), m = p.m(), heads = p.heads, d_k = p.d_k(), d_v = p.d_v();
  cpu::begin_trace(t, p, Variant::Fused, Precision::FP32, /*keep=*/false, /*output=*/true);

  const float scale = fused_scale(p);
  const FusedJob job{p, p.mask == MaskKind::Custom ? &p.custom_mask() : nullptr, scale, t.output};

  const int blocks_per_head = (n + kQueryBlock - 1) / kQueryBlock;
  const std::size_t items = static_cast<std::size_t>(heads) * blocks_per_head;
  const double flops = 4.0 * heads * static_cast<double>(n) * m * std::max(d_k, d_v);
  const unsigned workers = worker_count(items, flops);

  // Causal blocks near the end of a head carry the most keys: hand those out first. Each worker
  // sizes its scratch once, on its first item.
  std::vector<std::unique_ptr<Scratch>> scratch(workers);
  parallel_items(items, workers, [&](unsigned id, std::size_t it) {
    if (!scratch[id]) scratch[id] = std::make_unique<Scratch>(d_k, d_v);
    const int h = static_cast<int>(it % heads);
    const int qb = blocks_per_head - 1 - static_cast<int>(it / heads);
    const int q0 = qb * kQueryBlock;
    run_block(job, *scratch[id], h, q0, std::min(kQueryBlock, n - q0));
  });

  t.timings.total_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  t.timings.fused_ms = t.timings.total_ms;  // the blockwise kernel is the whole run
}

Trace cpu_fused(const Problem& p) {
  validate(p);
  Trace t;
  cpu::fused_into(p, t);
  return t;
}

}  // namespace attnlab
