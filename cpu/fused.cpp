// The fused CPU kernel: blockwise attention with an online softmax, fp32, Eigen blocks, one
// worker thread per core. It never materialises the (n, m) matrices: per block of kQueryBlock
// queries it walks the keys in blocks of kKeyBlock and keeps only
//   S (rows, cols)    = Q_blk K_blk^T                   Eigen GEMM
//   running max mx, running sum l (per query row)       of the raw scores
//   P (rows, cols)    = exp((S - mx) * scale)           Eigen's vectorised exp
//   acc (rows, d_v)   = acc * exp((mx_old - mx) * scale) + P V_blk
// and writes O = acc / l. Causal: key blocks that start after the block's last query are never
// touched; the block on the diagonal is masked per element. Work items are (head, query block)
// pairs handed out through an atomic counter, so causal's uneven rows still spread over the
// threads.
// Accuracy: the max is taken on raw scores and the subtraction happens before the scaling, so the
// exp argument for the keys that matter is small and exact to a few ulp; the error against fp64
// is that of the fp32 dot products (about 1e-7 relative at T = 1).
#include "core/gcc12_avx512.h"  // first: see there

#include "cpu/cpu_backend.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <limits>
#include <string>
#include <thread>
#include <vector>

namespace attnlab {
namespace {

constexpr int kQueryBlock = 64;
constexpr int kKeyBlock = 256;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

using ArrayF = Eigen::Array<float, Eigen::Dynamic, 1>;

// Per-thread scratch, sized once for the largest block.
struct Scratch {
  MatrixF s, acc;
  ArrayF mx, l, corr;
  Scratch(int d_v)
      : s(kQueryBlock, kKeyBlock),
        acc(kQueryBlock, d_v),
        mx(kQueryBlock),
        l(kQueryBlock),
        corr(kQueryBlock) {}
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
  const int n = p.n(), m = p.m();
  const bool causal = p.mask == MaskKind::Causal;
  const Eigen::Index qrow = static_cast<Eigen::Index>(h) * n + q0;
  const Eigen::Index krow = static_cast<Eigen::Index>(h) * m;
  const auto q_blk = p.q.middleRows(qrow, rows);

  auto mx = w.mx.head(rows);
  auto l = w.l.head(rows);
  auto corr = w.corr.head(rows);
  auto acc = w.acc.topRows(rows);
  mx.setConstant(kNegInf);
  l.setZero();
  acc.setZero();

  // Causal (n == m): keys after the block's last query are masked for every row of the block.
  const int key_end = causal ? std::min(m, q0 + rows) : m;
  for (int k0 = 0; k0 < key_end; k0 += kKeyBlock) {
    const int cols = std::min(kKeyBlock, key_end - k0);
    auto s = w.s.topLeftCorner(rows, cols);
    s.noalias() = q_blk * p.k.middleRows(krow + k0, cols).transpose();
    if (causal && k0 + cols - 1 > q0) {
      for (int i = 0; i < rows; ++i) {
        const int first_masked = q0 + i + 1 - k0;  // keys k0 + j with j >= this are the future
        for (int j = std::max(first_masked, 0); j < cols; ++j) s(i, j) = kNegInf;
      }
    }
    if (job.mask != nullptr) {
      const auto mblk = job.mask->block(q0, k0, rows, cols).array();
      s.array() = (mblk == 0.f).select(s.array(), kNegInf);
    }

    // Row by row: a row of the row-major block is contiguous, so max, exp and sum vectorise
    // (a colwise-broadcast expression over the whole block does not, and is ~14x slower).
    for (int i = 0; i < rows; ++i) {
      auto si = s.row(i).array();
      const float new_max = std::max(mx(i), si.maxCoeff());
      // Every key so far masked: shift by 0 instead of -inf, so -inf - -inf never makes a NaN.
      // The masked weights are then 0, or below 1e-38 where Eigen's vectorised exp clamps its
      // argument (AVX2), and the first unmasked key's correction std::exp(-inf) = 0 wipes them.
      const float shift = new_max == kNegInf ? 0.f : new_max;
      corr(i) = std::exp((mx(i) - shift) * job.scale);
      mx(i) = new_max;
      si = ((si - shift) * job.scale).exp();  // P overwrites S
      l(i) = l(i) * corr(i) + si.sum();
    }
    acc = corr.matrix().asDiagonal() * acc;
    acc.noalias() += s * p.v.middleRows(krow + k0, cols);
  }
  // A score that overflowed fp32 turns its row into inf/NaN here (a finite unmasked score
  // always contributes exp(0) = 1 to l); refuse it like the staged chain does.
  if (!(l > 0.f).all() || !l.allFinite() || !acc.allFinite()) {
    throw InputError("QKᵀ overflows in head " + std::to_string(h) + ", query rows " +
                     std::to_string(q0) + ".." + std::to_string(q0 + rows - 1) +
                     " (inputs too large for fp32)");
  }
  job.out.middleRows(qrow, rows) = l.inverse().matrix().asDiagonal() * acc;
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
  const int n = p.n(), m = p.m(), heads = p.heads, d_v = p.d_v();

  Trace t;
  t.backend = "cpu";
  t.variant = Variant::Fused;
  t.precision = Precision::FP32;
  t.has_stages = false;
  t.output.resize(static_cast<Eigen::Index>(heads) * n, d_v);

  const float scale = static_cast<float>(1.0 / (std::sqrt(static_cast<double>(p.d_k())) *
                                                p.temperature));
  const FusedJob job{p, p.mask == MaskKind::Custom ? &p.custom_mask : nullptr, scale, t.output};

  const int blocks_per_head = (n + kQueryBlock - 1) / kQueryBlock;
  const std::size_t items = static_cast<std::size_t>(heads) * blocks_per_head;
  const double flops = 4.0 * heads * static_cast<double>(n) * m * std::max(p.d_k(), d_v);
  const unsigned workers = worker_count(items, flops);

  // Causal blocks near the end of a head carry the most keys: hand those out first.
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  // A worker's exception (std::bad_alloc included) is rethrown as it was, after the join.
  std::vector<std::exception_ptr> errors(workers);
  auto work = [&](unsigned id) {
    try {
      Scratch w(d_v);
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
