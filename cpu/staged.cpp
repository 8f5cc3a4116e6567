// The staged attention chain on the CPU: every stage computed as its own step and, when kept,
// written out whole:
//   scores = Q Kᵀ, scaled = scores / sqrt(d_k), logits = (scaled + mask) / T,
//   weights = row-wise stable softmax(logits), output = weights V.
// Two implementations of the same chain:
//  - plain_chain: the obvious Eigen code, one whole-matrix expression per stage, templated over
//    the matrix type. In double it is reference_fp64, what every backend is checked against; in
//    float it is cpu_staged_plain, the baseline the fast chain is measured against.
//  - the fp32 chain every viewer redraw runs (cpu_staged_into): row blocks of a head go through
//    all four stages while they are in the cache, one thread per core, each stage still written
//    out (into the Trace's reused buffers), or, for problems whose stages do not fit, reduced on
//    the fly into pooled images and exact rows (RunOptions::pool / rows) with per-thread scratch
//    of a few rows only. Masked weights are exactly 0, and weights too small to be normal floats
//    are 0 as well, so P·V never meets subnormals (they made it 10x slower at low temperature).
#include "core/gcc12_avx512.h"  // first: see there

#include "cpu/cpu_backend.h"
#include "cpu/chains.h"
#include "core/messages.h"
#include "core/modify.h"
#include "core/parallel.h"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <chrono>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

namespace attnlab {
namespace {

using Clock = std::chrono::steady_clock;
using ArrayF = Eigen::Array<float, Eigen::Dynamic, 1>;
using RowArrayF = Eigen::Array<float, 1, Eigen::Dynamic>;  // a row of a row-major stage
using RowsMap = Eigen::Map<MatrixF, 0, Eigen::OuterStride<>>;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// ---- the plain chain (fp64 reference, fp32 baseline) ------------------------------------------

// Scores or logits that overflow the working precision would turn the softmax into NaN; they are
// refused with the place where it happened instead. `a` holds rows [row0, row0 + a.rows()) of the
// stacked trace; masked(r, c) tells whether the mask blocks row r (of its head), column c.
template <class Matrix, class Masked>
void locate_overflow(const Matrix& a, Eigen::Index row0, int n, Masked masked, Msg what) {
  for (Eigen::Index r = 0; r < a.rows(); ++r)
    for (Eigen::Index c = 0; c < a.cols(); ++c) {
      const int qr = static_cast<int>((row0 + r) % n);
      if (!masked(qr, static_cast<int>(c)) && !std::isfinite(a(r, c)))
        throw InputError(what, {std::to_string(qr), std::to_string(c)});
    }
}

// The sum of a row of exps, by which the softmax divides it: in double for an fp32 row, rounded
// once. A float sum errs by up to a rounding per term it adds, and the row's weights then sum to
// 1 / (1 + that error): where many terms are alike (a soft-cap's plateau) the roundings lean one
// way, and rows of one or two hundred keys missed the 1e-6 that fp32 rows must sum to within.
// Rounded once from double, the weights sum to 1 within about two roundings.
// Eight double sums side by side (one AVX-512 register; the compiler vectorises the eight
// independent chains, where Eigen's sum of the cast row went a scalar at a time), then added.
template <class Row>
auto row_total(const Row& row) {
  using Scalar = typename Row::Scalar;
  if constexpr (std::is_same_v<Scalar, float>) {
    assert(row.innerStride() == 1);
    const float* x = row.data();
    const Eigen::Index n = row.size();
    double acc[8] = {};
    Eigen::Index j = 0;
    for (; j + 8 <= n; j += 8)
      for (int k = 0; k < 8; ++k) acc[k] += x[j + k];
    double total = 0;
    for (; j < n; ++j) total += x[j];
    for (const double a : acc) total += a;
    return static_cast<float>(total);
  } else {
    return row.sum();
  }
}

// Row-wise softmax, stable: subtract the row max (over unmasked logits) before exp. Masked
// logits are -inf and their weights are exactly 0.0: selected, not left to exp(-inf), because
// Eigen's vectorised exp clamps its argument on some instruction sets (AVX2: to about -88 in
// float, -709 in double) and returns a tiny positive number there instead of 0.
// logits and weights are (rows, m).
template <class Matrix>
void stable_softmax_rows(const Matrix& logits, Matrix& weights) {
  using Scalar = typename Matrix::Scalar;
  constexpr Scalar kInf = -std::numeric_limits<Scalar>::infinity();
  weights.resize(logits.rows(), logits.cols());
  for (Eigen::Index r = 0; r < logits.rows(); ++r) {
    const auto row = logits.row(r).array();
    const auto mx = row.maxCoeff();
    weights.row(r) = (row == kInf).select(Scalar(0), (row - mx).exp()).matrix();
    weights.row(r) /= row_total(weights.row(r));
  }
}

template <class Matrix>
TraceT<Matrix> plain_chain(const Problem& p) {
  using Scalar = typename Matrix::Scalar;
  validate(p);
  const auto t0 = Clock::now();
  const int n = p.n(), m = p.m(), h = p.heads;
  // In fp32 these refer to the problem's own matrices (no copy) or to its RoPE-rotated Q and K
  // (the kernels' copies); in fp64 each is converted once, and RoPE rotates Q and K in double.
  const bool rope = p.mods.rope_theta > 0;
  Matrix q_store, k_store, v_store;
  const Matrix *qp, *kp, *vp;
  if constexpr (std::is_same_v<Scalar, double>) {
    q_store = p.q().template cast<double>();
    k_store = p.k().template cast<double>();
    v_store = p.v().template cast<double>();
    if (rope) {
      for (int hd = 0; hd < h; ++hd)
        q_store.middleRows(static_cast<Eigen::Index>(hd) * n, n) =
            rope_rotate(q_store.middleRows(static_cast<Eigen::Index>(hd) * n, n), p.causal_offset(), p.mods.rope_theta);
      for (int g = 0; g < p.kv_heads(); ++g)
        k_store.middleRows(static_cast<Eigen::Index>(g) * m, m) =
            rope_rotate(k_store.middleRows(static_cast<Eigen::Index>(g) * m, m), 0, p.mods.rope_theta);
    }
    qp = &q_store;
    kp = &k_store;
    vp = &v_store;
  } else {
    const std::shared_ptr<const RotatedQK> rot = rotated_qk(p);  // kept with p's inputs
    qp = &kernel_q(p, rot.get());
    kp = &kernel_k(p, rot.get());
    vp = &p.v();
  }
  const Matrix& q = *qp;
  const Matrix& k = *kp;
  const Matrix& v = *vp;

  TraceT<Matrix> t;
  if (rope) {
    t.q_rot = q;
    t.k_rot = k;
  }
  t.backend = "cpu";
  t.variant = Variant::Staged;
  t.precision = std::is_same_v<Scalar, double> ? Precision::FP64 : Precision::FP32;
  t.mask = mask_matrix(p).template cast<Scalar>();
  const Scalar temperature = static_cast<Scalar>(p.temperature);
  const auto masked = [&](int r, int c) { return std::isinf(t.mask(r, c)); };

  auto s0 = Clock::now();
  t.scores.resize(static_cast<Eigen::Index>(h) * n, m);
  for (int hd = 0; hd < h; ++hd)
    t.scores.middleRows(static_cast<Eigen::Index>(hd) * n, n).noalias() =
        q.middleRows(static_cast<Eigen::Index>(hd) * n, n) *
        k.middleRows(p.kv_row(hd), m).transpose();
  t.timings.qk_ms = ms_since(s0);

  s0 = Clock::now();
  t.scaled = t.scores / scale_divisor<Scalar>(p);
  // Score mods, in their order: ALiBi's and the bias's terms added, then the cap.
  std::vector<Scalar> slopes;
  const ScoreRuleT<Scalar> rule = score_rule<Scalar>(p, slopes);
  const Matrix* last = &t.scaled;
  if (rule.slopes != nullptr || rule.bias != nullptr) {
    t.biased.resize(t.scaled.rows(), m);
    for (Eigen::Index r = 0; r < t.scaled.rows(); ++r)
      for (int c = 0; c < m; ++c)
        t.biased(r, c) = t.scaled(r, c) + rule.added(static_cast<int>(r / n), static_cast<int>(r % n), c);
    // An added term can overflow where the scaled scores fit; the cap would hide it from the
    // logits' check (tanh of ±inf is ±1), so the sums are checked themselves.
    if (!std::isfinite(t.biased.cwiseAbs().maxCoeff())) locate_overflow(t.biased, 0, n, masked, Msg::OverflowBiased);
    last = &t.biased;
  }
  if (rule.softcap > 0) {
    t.capped = last->unaryExpr([&rule](Scalar x) { return rule.cap(x); });
    last = &t.capped;
  }
  t.logits.resize(t.scaled.rows(), m);
  for (int hd = 0; hd < h; ++hd)
    t.logits.middleRows(static_cast<Eigen::Index>(hd) * n, n) =
        (last->middleRows(static_cast<Eigen::Index>(hd) * n, n) + t.mask) / temperature;
  // Unmasked logits are finite exactly when the scores are finite and max|scaled| / T is. A sum
  // is the fast screen (Eigen's allFinite is not vectorised and costs more than the stage):
  // any inf or NaN makes it non-finite; a finite sum that merely overflowed costs one scan.
  if (!std::isfinite(t.scores.sum())) locate_overflow(t.scores, 0, n, masked, Msg::OverflowScores);
  if (!std::isfinite(last->cwiseAbs().maxCoeff() / temperature))
    locate_overflow(t.logits, 0, n, masked, Msg::OverflowLogits);
  t.timings.scale_mask_ms = ms_since(s0);

  s0 = Clock::now();
  stable_softmax_rows(t.logits, t.weights);
  t.timings.softmax_ms = ms_since(s0);

  s0 = Clock::now();
  t.output.resize(static_cast<Eigen::Index>(h) * n, p.d_v());
  for (int hd = 0; hd < h; ++hd)
    t.output.middleRows(static_cast<Eigen::Index>(hd) * n, n).noalias() =
        t.weights.middleRows(static_cast<Eigen::Index>(hd) * n, n) *
        v.middleRows(p.kv_row(hd), m);
  t.timings.pv_ms = ms_since(s0);
  t.timings.total_ms = ms_since(t0);
  return t;
}

// ---- the fp32 chain -----------------------------------------------------------------------------

// What one run needs to know, shared read-only by the workers.
struct Chain {
  const Problem& p;
  int n, m, d_v;
  float scale_div, temperature;  // scaled = scores / scale_div (sqrt(d_k) by default)
  const MatrixF* q;              // Q and K as multiplied: p's, or rotated by RoPE
  const MatrixF* k;
  std::shared_ptr<const RotatedQK> rotated;
  MaskRule rule;                 // the mask kind and the mask mods
  bool mask_mods;                // beyond none / causal / custom
  ScoreRule score;               // the score mods (score.any() false without them)
  std::vector<float> slopes;     // what score.slopes points at
  bool biased, capped;           // the score mods' stages exist
  // Arguments of exp below this give weights too small to be normal floats once divided by the
  // row sum (at most m): they are set to 0 instead (subnormals slow every later operation).
  float exp_cutoff;
  // exp(exp_cutoff) with room for the last bits of a vectorised exp: values below are those
  // clamped at the cutoff.
  float zero_below;

  explicit Chain(const Problem& prob) : p(prob) {
    n = p.n();
    m = p.m();
    d_v = p.d_v();
    scale_div = scale_divisor<float>(p);
    temperature = static_cast<float>(p.temperature);
    rotated = rotated_qk(p);
    q = &kernel_q(p, rotated.get());
    k = &kernel_k(p, rotated.get());
    rule = mask_rule(p);
    mask_mods = has_mask_mods(p);
    score = score_rule<float>(p, slopes);
    biased = score.slopes != nullptr || score.bias != nullptr;
    capped = score.softcap > 0;
    exp_cutoff = std::log(std::numeric_limits<float>::min()) + std::log(static_cast<float>(m));
    zero_below = static_cast<float>(1.5 * std::exp(static_cast<double>(exp_cutoff)));
  }
  Chain(const Chain&) = delete;

  bool masked(int i, int j) const { return !rule.visible(i, j); }
};

// Consumers of a block's stages between the steps (pooling, exact rows). Rows [i0, i0 + rows) of
// `head`; `a` is the block's buffer holding the stage just computed (rows, m) with stride ld.
struct BlockSink {
  virtual ~BlockSink() = default;
  virtual void scores(int head, int i0, int rows, const float* a, Eigen::Index ld) = 0;
  virtual void scaled(int head, int i0, int rows, const float* a, Eigen::Index ld) = 0;
  // The score mods' stages (only when the problem has them).
  virtual void biased(int head, int i0, int rows, const float* a, Eigen::Index ld) = 0;
  virtual void capped(int head, int i0, int rows, const float* a, Eigen::Index ld) = 0;
  virtual void logits(int head, int i0, int rows, const float* a, Eigen::Index ld) = 0;
  virtual void weights(int head, int i0, int rows, const float* a, Eigen::Index ld) = 0;
};

struct StageClock {
  double ms[4] = {0, 0, 0, 0};  // qk (with the scaling), scale_mask, softmax, pv
};

// The four stages of rows [i0, i0 + rows) of `head`. S, C, B, P, L, W: the block's scores,
// scaled, biased, capped, logits and weights, (rows, m) each with stride ld; they may be one
// buffer (computed in place; B and P are used only when the problem has those score mods).
// mask_out: the block's rows of the kept mask, or null. out: output rows, or null to skip P·V.
void chain_block(const Chain& c, int head, int i0, int rows, float* S, float* C, float* B, float* P, float* L,
                 float* W, Eigen::Index ld, float* mask_out, MatrixF* out, BlockSink* sink, StageClock& clock) {
  const Problem& p = c.p;
  const int m = c.m;
  const Eigen::Index qrow = static_cast<Eigen::Index>(head) * c.n + i0;
  const Eigen::Index krow = p.kv_row(head);
  const auto masked = [&c](int r, int j) { return c.masked(r, j); };

  // qk: S = Q_blk Kᵀ (Eigen's GEMM; Q and K rotated by RoPE where p has it), then the scaling
  // while the rows are in the cache.
  auto t = Clock::now();
  RowsMap s(S, rows, m, Eigen::OuterStride<>(ld));
  s.noalias() = c.q->middleRows(qrow, rows) * c.k->middleRows(krow, m).transpose();
  for (int r = 0; r < rows; ++r) {
    auto row = s.row(r).array();
    if (!std::isfinite(row.sum())) locate_overflow(s.row(r), qrow + r, c.n, masked, Msg::OverflowScores);
  }
  if (sink) sink->scores(head, i0, rows, S, ld);
  RowsMap sc(C, rows, m, Eigen::OuterStride<>(ld));
  sc.array() = s.array() / c.scale_div;
  if (sink) sink->scaled(head, i0, rows, C, ld);
  clock.ms[0] += ms_since(t);

  // scale_mask: the score mods (ALiBi's and the bias's terms added, then the cap), then
  // logits = (scores + mask) / T with the mask's rule.
  t = Clock::now();
  const float* last = C;
  if (c.biased) {
    for (int r = 0; r < rows; ++r) {
      const float* in = C + r * ld;
      float* o = B + r * ld;
      for (int j = 0; j < m; ++j) o[j] = in[j] + c.score.added(head, i0 + r, j);
      // Checked themselves: the cap would hide an overflowed sum from the logits' check.
      const Eigen::Map<const Eigen::Matrix<float, 1, Eigen::Dynamic>> sums(o, m);
      if (!std::isfinite(sums.cwiseAbs().maxCoeff())) locate_overflow(sums, qrow + r, c.n, masked, Msg::OverflowBiased);
    }
    last = B;
    if (sink) sink->biased(head, i0, rows, B, ld);
  }
  if (c.capped) {
    RowsMap src(const_cast<float*>(last), rows, m, Eigen::OuterStride<>(ld));
    RowsMap dst(P, rows, m, Eigen::OuterStride<>(ld));
    dst.array() = (src.array() / c.score.softcap).tanh() * c.score.softcap;
    last = P;
    if (sink) sink->capped(head, i0, rows, P, ld);
  }
  const RowsMap in_all(const_cast<float*>(last), rows, m, Eigen::OuterStride<>(ld));
  RowsMap lg(L, rows, m, Eigen::OuterStride<>(ld));
  for (int r = 0; r < rows; ++r) {
    const int i = i0 + r;
    auto in = in_all.row(r).array();
    auto o = lg.row(r).array();
    int lo, hi;
    c.rule.interval(i, lo, hi);
    // Unmasked logits are finite exactly when max |scores| / T is (the scores were checked).
    const bool overflow = !std::isfinite(in.abs().maxCoeff() / c.temperature);
    if (c.rule.custom && !c.mask_mods) {
      const Eigen::Map<const RowArrayF> mrow(c.rule.custom + static_cast<std::size_t>(i) * m, m);
      o = (in + mrow) / c.temperature;
    } else {
      o = in / c.temperature;
      if (lo > 0) o.head(lo).setConstant(kNegInf);
      if (hi < m) o.tail(m - hi).setConstant(kNegInf);
      if (c.rule.elementwise())
        for (int j = lo; j < hi; ++j)
          if (!c.rule.visible(i, j)) o[j] = kNegInf;
    }
    if (overflow)
      locate_overflow(lg.row(r), qrow + r, c.n, masked, Msg::OverflowLogits);
    if (mask_out) {
      Eigen::Map<ArrayF> mo(mask_out + static_cast<std::size_t>(r) * m, m);
      if (c.rule.custom && !c.mask_mods) {
        mo = Eigen::Map<const ArrayF>(c.rule.custom + static_cast<std::size_t>(i) * m, m);
      } else {
        mo.setZero();
        if (lo > 0) mo.head(lo).setConstant(kNegInf);
        if (hi < m) mo.tail(m - hi).setConstant(kNegInf);
        if (c.rule.elementwise())
          for (int j = lo; j < hi; ++j)
            if (!c.rule.visible(i, j)) mo[j] = kNegInf;
      }
    }
  }
  if (sink) sink->logits(head, i0, rows, L, ld);
  clock.ms[1] += ms_since(t);

  // softmax: per row, max, exp of the shifted logits, sum, divide. Masked logits (-inf) and
  // arguments below the cutoff give exactly 0 (selected, not left to the vectorised exp).
  t = Clock::now();
  RowsMap w(W, rows, m, Eigen::OuterStride<>(ld));
  for (int r = 0; r < rows; ++r) {
    auto x = lg.row(r).array();
    auto o = w.row(r).array();
    const float mx = x.maxCoeff();
    // The argument is clamped at the cutoff, so that what lies below (masked -inf included) gives
    // exp(cutoff) whatever the instruction set's exp does with -inf, and is then set to 0 by a
    // plain loop, which the compiler vectorises (Eigen 3.4's select() is evaluated one scalar exp
    // at a time). x and o may be one buffer: the test reads only o.
    o = (x - mx).max(c.exp_cutoff).exp();
    float* wr = o.data();
    for (int j = 0; j < m; ++j) wr[j] = wr[j] < c.zero_below ? 0.f : wr[j];
    o /= row_total(o);
  }
  if (sink) sink->weights(head, i0, rows, W, ld);
  clock.ms[2] += ms_since(t);

  // pv: O_blk = W_blk V (Eigen's GEMM).
  if (out) {
    t = Clock::now();
    out->middleRows(qrow, rows).noalias() = w * p.v().middleRows(krow, m);
    clock.ms[3] += ms_since(t);
  }
}

// Rows per block: Eigen's GEMM packs the head's Kᵀ and V once per call, so a block needs enough
// rows to amortise that (64 measured best at N = 4096, against 8 to 32); very long rows get fewer,
// so that a worker's scratch (rows x m floats) stays at 16 MiB.
int block_rows(int m) { return std::clamp((1 << 22) / std::max(m, 1), 8, 64); }

void check_cancel(const RunOptions& opt) {
  if (opt.cancel && opt.cancel->load(std::memory_order_relaxed)) throw Cancelled();
}

// ---- streaming sinks: pooled images and exact rows ----------------------------------------------

// The viewer's pool_grid reduction (max or mean of the finite, unmasked cells of each pixel's
// block), accumulated row by row: one accumulator per pixel column of the pixel rows that a run
// of source rows feeds.
struct PoolAcc {
  std::vector<float> best;
  std::vector<double> sum;
  std::vector<int> count;
  void reset(int w) {
    best.assign(w, kNegInf);
    sum.assign(w, 0.0);
    count.assign(w, 0);
  }
};

struct RangeAcc {
  float lo = std::numeric_limits<float>::infinity(), hi = kNegInf;
  void merge(const RangeAcc& o) {
    lo = std::min(lo, o.lo);
    hi = std::max(hi, o.hi);
  }
};

// One row's contribution; `use_mask` false for the scores (the mask enters at step 2). Without a
// custom mask or documents the unmasked cells of row i are one interval (all keys, keys up to its
// position when causal, a window around it) whose values are finite (an overflow was refused
// before), so each pixel's span reduces with vectorised max, min and sum; a custom mask or
// documents are tested cell by cell.
void pool_row(const Chain& c, const PoolAxis& cols, int i, const float* row, bool use_mask, PoolAcc& a,
              RangeAcc& range) {
  if (!use_mask || !c.rule.elementwise()) {
    int first = 0, limit = c.m;
    if (use_mask) c.rule.interval(i, first, limit);
    for (int px = 0; px < cols.size(); ++px) {
      const int b = std::max(cols.begin[px], first), e = std::min(cols.end[px], limit);
      if (e <= b) continue;
      const Eigen::Map<const ArrayF> seg(row + b, e - b);
      const float hi = seg.maxCoeff();
      a.best[px] = std::max(a.best[px], hi);
      a.sum[px] += seg.cast<double>().sum();
      a.count[px] += e - b;
      range.lo = std::min(range.lo, seg.minCoeff());
      range.hi = std::max(range.hi, hi);
    }
    return;
  }
  for (int px = 0; px < cols.size(); ++px) {
    float b = a.best[px];
    double s = 0;
    int k = 0;
    for (int j = cols.begin[px]; j < cols.end[px]; ++j) {
      const float v = row[j];
      if ((use_mask && c.masked(i, j)) || !std::isfinite(v)) continue;
      b = std::max(b, v);
      s += v;
      ++k;
      range.lo = std::min(range.lo, v);
      range.hi = std::max(range.hi, v);
    }
    a.best[px] = b;
    a.sum[px] += s;
    a.count[px] += k;
  }
}

void write_pooled(const PoolAcc& a, PoolMode mode, PooledGrid& g, int py0, int py1) {
  for (int py = py0; py < py1; ++py) {
    PooledCell* o = g.cells.data() + static_cast<std::size_t>(py) * g.cols;
    for (int px = 0; px < g.cols; ++px) {
      if (a.count[px] == 0) {
        o[px] = {0.f, true};
      } else {
        o[px] = {mode == PoolMode::Max ? a.best[px] : static_cast<float>(a.sum[px] / a.count[px]), false};
      }
    }
  }
}

// A worker's sink: pools the rows of the item it is on (pool rows [py0, py1) all fed by source
// rows of one interval) and copies the requested exact rows.
struct StreamSink final : BlockSink {
  const Chain& c;
  const RunOptions& opt;
  std::vector<RowStages>& rows_out;  // one per requested row, filled by whoever meets it
  bool pooling = false;
  PoolAcc acc[3];
  RangeAcc range[3];

  StreamSink(const Chain& ch, const RunOptions& o, std::vector<RowStages>& r) : c(ch), opt(o), rows_out(r) {}

  void start_item() {
    for (auto& a : acc) a.reset(opt.pool->cols.size());
  }
  void pool(int k, int head, int i0, int rows, const float* a, Eigen::Index ld) {
    if (!pooling || head != opt.pool->head) return;
    for (int r = 0; r < rows; ++r) pool_row(c, opt.pool->cols, i0 + r, a + r * ld, k > 0, acc[k], range[k]);
  }
  // Copies stage `field` of every requested row inside this block.
  template <class Field>
  void copy_rows(int head, int i0, int rows, const float* a, Eigen::Index ld, Field field) {
    for (std::size_t k = 0; k < opt.rows.size(); ++k) {
      const int g = opt.rows[k];
      const int first = head * c.n + i0;
      if (g < first || g >= first + rows) continue;
      RowStages& rs = rows_out[k];
      std::vector<float>& dst = field(rs);
      dst.assign(a + (g - first) * ld, a + (g - first) * ld + c.m);
    }
  }
  void scores(int head, int i0, int rows, const float* a, Eigen::Index ld) override {
    pool(0, head, i0, rows, a, ld);
    copy_rows(head, i0, rows, a, ld, [](RowStages& r) -> std::vector<float>& { return r.scores; });
  }
  void scaled(int head, int i0, int rows, const float* a, Eigen::Index ld) override {
    copy_rows(head, i0, rows, a, ld, [](RowStages& r) -> std::vector<float>& { return r.scaled; });
  }
  void biased(int head, int i0, int rows, const float* a, Eigen::Index ld) override {
    copy_rows(head, i0, rows, a, ld, [](RowStages& r) -> std::vector<float>& { return r.biased; });
  }
  void capped(int head, int i0, int rows, const float* a, Eigen::Index ld) override {
    copy_rows(head, i0, rows, a, ld, [](RowStages& r) -> std::vector<float>& { return r.capped; });
  }
  void logits(int head, int i0, int rows, const float* a, Eigen::Index ld) override {
    pool(1, head, i0, rows, a, ld);
    copy_rows(head, i0, rows, a, ld, [](RowStages& r) -> std::vector<float>& { return r.logits; });
  }
  void weights(int head, int i0, int rows, const float* a, Eigen::Index ld) override {
    pool(2, head, i0, rows, a, ld);
    copy_rows(head, i0, rows, a, ld, [](RowStages& r) -> std::vector<float>& { return r.weights; });
  }
};

// A work item: source rows [begin, end) of `head`, pooled into pixel rows [py0, py1) (py1 == py0:
// not pooled).
struct Item {
  int head, begin, end, py0, py1;
};

std::vector<Item> plan_items(const Problem& p, const RunOptions& opt, int block) {
  const int n = p.n(), heads = p.heads;
  std::vector<Item> items;
  std::vector<char> covered;
  if (opt.pool) {
    const PoolAxis& r = opt.pool->rows;
    covered.assign(n, 0);
    for (int py = 0; py < r.size();) {
      int py1 = py + 1;
      while (py1 < r.size() && r.begin[py1] == r.begin[py] && r.end[py1] == r.end[py]) ++py1;
      items.push_back({opt.pool->head, r.begin[py], r.end[py], py, py1});
      std::fill(covered.begin() + r.begin[py], covered.begin() + r.end[py], 1);
      py = py1;
    }
  }
  // Rows nothing above computes: all of them when the output is wanted, else the exact rows.
  auto add_rows = [&](int head, int b, int e) {
    for (int i = b; i < e; i += block) items.push_back({head, i, std::min(e, i + block), 0, 0});
  };
  for (int h = 0; h < heads; ++h) {
    const bool pooled_head = opt.pool && h == opt.pool->head;
    if (opt.output) {
      for (int i = 0; i < n;) {
        if (pooled_head && covered[i]) {
          ++i;
          continue;
        }
        int e = i;
        while (e < n && !(pooled_head && covered[e])) ++e;
        add_rows(h, i, e);
        i = e;
      }
    }
  }
  if (!opt.output) {
    for (int g : opt.rows) {
      const int h = g / n, i = g % n;
      if (!(opt.pool && h == opt.pool->head && covered[i])) add_rows(h, i, i + 1);
    }
  }
  // Causal rows near the end of a head carry the most keys: longest items first.
  std::stable_sort(items.begin(), items.end(),
                   [](const Item& a, const Item& b) { return a.end - a.begin > b.end - b.begin; });
  return items;
}


void finish_grid(PooledGrid& g, const RangeAcc& r) {
  g.has_range = r.lo <= r.hi;
  g.lo = g.has_range ? r.lo : 0;
  g.hi = g.has_range ? r.hi : 0;
}

}  // namespace

void cpu::staged_into(const Problem& p, const RunOptions& opt, Trace& t) {
  check_stream_request(p, opt);
  const auto t0 = Clock::now();
  const int n = p.n(), m = p.m(), heads = p.heads, d_v = p.d_v();
  const bool keep = opt.keep_stages && !opt.pool;
  const Chain c(p);

  cpu::begin_trace(t, p, Variant::Staged, Precision::FP32, keep, opt.output, opt.rows);
  if (opt.pool) {
    for (PooledGrid* g : {&t.pooled.scores, &t.pooled.logits, &t.pooled.weights}) {
      g->rows = opt.pool->rows.size();
      g->cols = opt.pool->cols.size();
      g->cells.assign(static_cast<std::size_t>(g->rows) * g->cols, PooledCell{});
    }
  }

  const int block = block_rows(m);
  std::vector<Item> items;
  if (keep) {
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < n; i += block) items.push_back({h, i, std::min(n, i + block), 0, 0});
  } else {
    items = plan_items(p, opt, block);
  }
  long rows_planned = 0;
  for (const Item& it : items) rows_planned += it.end - it.begin;
  const double flops = 4.0 * static_cast<double>(rows_planned) * m * std::max(p.d_k(), d_v);
  const unsigned workers = worker_count(items.size(), flops);
  std::vector<StageClock> clocks(workers);
  std::vector<MatrixF> scratch(workers);
  std::vector<std::unique_ptr<StreamSink>> sinks(workers);
  std::atomic<long> rows_done{0};

  parallel_items(items.size(), workers, [&](unsigned id, std::size_t k) {
    check_cancel(opt);
    const Item& it = items[k];
    MatrixF* out = opt.output ? &t.output : nullptr;
    if (keep) {
      const std::size_t off = (static_cast<std::size_t>(it.head) * n + it.begin) * m;
      float* mask_rows = it.head == 0 ? t.mask.data() + static_cast<std::size_t>(it.begin) * m : nullptr;
      chain_block(c, it.head, it.begin, it.end - it.begin, t.scores.data() + off, t.scaled.data() + off,
                  c.biased ? t.biased.data() + off : nullptr, c.capped ? t.capped.data() + off : nullptr,
                  t.logits.data() + off, t.weights.data() + off, m, mask_rows, out, nullptr, clocks[id]);
    } else {
      if (!sinks[id]) sinks[id] = std::make_unique<StreamSink>(c, opt, t.rows);
      StreamSink& sink = *sinks[id];
      sink.pooling = it.py1 > it.py0;
      if (sink.pooling) sink.start_item();
      MatrixF& buf = scratch[id];
      if (buf.rows() < block) buf.resize(block, m);
      for (int i = it.begin; i < it.end; i += block) {
        check_cancel(opt);
        const int rows = std::min(block, it.end - i);
        // Only the rows the output or an exact row needs go through P·V.
        chain_block(c, it.head, i, rows, buf.data(), buf.data(), buf.data(), buf.data(), buf.data(), buf.data(), m,
                    nullptr, out, &sink, clocks[id]);
      }
      if (sink.pooling) {
        write_pooled(sink.acc[0], opt.pool->mode, t.pooled.scores, it.py0, it.py1);
        write_pooled(sink.acc[1], opt.pool->mode, t.pooled.logits, it.py0, it.py1);
        write_pooled(sink.acc[2], opt.pool->mode, t.pooled.weights, it.py0, it.py1);
      }
    }
    rows_done += it.end - it.begin;
    if (opt.progress) opt.progress->store(static_cast<float>(rows_done.load()) / std::max(1L, rows_planned));
  });

  if (opt.pool) {
    RangeAcc r[3];
    for (const auto& s : sinks)
      if (s)
        for (int k = 0; k < 3; ++k) r[k].merge(s->range[k]);
    finish_grid(t.pooled.scores, r[0]);
    finish_grid(t.pooled.logits, r[1]);
    finish_grid(t.pooled.weights, r[2]);
  }
  for (std::size_t k = 0; k < opt.rows.size(); ++k) {
    RowStages& rs = t.rows[k];
    const int i = rs.row % n;
    if (keep) {  // the kept stages hold the row
      const auto copy = [&](const MatrixF& a, std::vector<float>& v) {
        v.assign(a.data() + static_cast<std::size_t>(rs.row) * m, a.data() + static_cast<std::size_t>(rs.row + 1) * m);
      };
      copy(t.scores, rs.scores);
      copy(t.scaled, rs.scaled);
      if (c.biased) copy(t.biased, rs.biased);
      if (c.capped) copy(t.capped, rs.capped);
      copy(t.logits, rs.logits);
      copy(t.weights, rs.weights);
    }
    rs.mask.assign(m, 0.f);
    for (int j = 0; j < m; ++j)
      if (c.masked(i, j)) rs.mask[j] = kNegInf;
  }
  // The stage times are the workers' time in each stage divided by their number, so that they
  // add up to about the wall time, as the stages of a serial chain do.
  double stage_ms[4] = {0, 0, 0, 0};
  for (const StageClock& sc : clocks)
    for (int k = 0; k < 4; ++k) stage_ms[k] += sc.ms[k] / workers;
  t.timings.qk_ms = stage_ms[0];
  t.timings.scale_mask_ms = stage_ms[1];
  t.timings.softmax_ms = stage_ms[2];
  t.timings.pv_ms = stage_ms[3];
  t.timings.total_ms = ms_since(t0);
}

void cpu_staged_into(const Problem& p, const RunOptions& opt, Trace& t) {
  validate(p);
  cpu::staged_into(p, opt, t);
}

void cpu::begin_trace(Trace& t, const Problem& p, Variant variant, Precision precision, bool keep, bool output,
                      const std::vector<int>& rows) {
  const int n = p.n(), m = p.m();
  const Eigen::Index rows_total = static_cast<Eigen::Index>(p.heads) * n;
  t.backend = "cpu";
  t.variant = variant;
  t.precision = precision;
  t.has_stages = keep;
  t.timings = StageTimings{};
  t.pooled = PooledStages{};
  t.rows.assign(rows.size(), RowStages{});
  for (std::size_t k = 0; k < rows.size(); ++k) t.rows[k].row = rows[k];
  if (keep) {
    t.scores.resize(rows_total, m);
    t.scaled.resize(rows_total, m);
    t.mask.resize(n, m);
    t.logits.resize(rows_total, m);
    t.weights.resize(rows_total, m);
  } else {
    t.scores = t.scaled = t.mask = t.logits = t.weights = MatrixF();
  }
  // The score mods' stages and RoPE's rotated Q and K, with the stages.
  const unsigned mods = problem_stages(p);
  if (keep && (mods & kStageBiased)) t.biased.resize(rows_total, m);
  else t.biased = MatrixF();
  if (keep && (mods & kStageCapped)) t.capped.resize(rows_total, m);
  else t.capped = MatrixF();
  if (const auto rot = keep ? rotated_qk(p) : nullptr) {
    t.q_rot = rot->q;
    t.k_rot = rot->k();
  } else {
    t.q_rot = t.k_rot = MatrixF();
  }
  if (output) {
    t.output.resize(rows_total, p.d_v());
  } else {
    t.output = MatrixF();
  }
}

Trace cpu_staged(const Problem& p) {
  Trace t;
  cpu_staged_into(p, RunOptions{}, t);
  return t;
}

Trace cpu_staged_output_only(const Problem& p) {
  RunOptions o;
  o.keep_stages = false;
  Trace t;
  cpu_staged_into(p, o, t);
  return t;
}

Trace cpu_staged_plain(const Problem& p) { return plain_chain<MatrixF>(p); }

TraceD reference_fp64(const Problem& p) { return plain_chain<MatrixD>(p); }

RowReference reference_fp64_row(const Problem& p, int head, int query, int keys, bool sums) {
  const int m = keys > 0 ? std::min(keys, p.m()) : p.m(), d_v = p.d_v(), n = p.n();
  if (head < 0 || head >= p.heads || query < 0 || query >= n)
    throw InputError("head " + std::to_string(head) + " query " + std::to_string(query) + " is outside the problem");
  constexpr Eigen::Index kBlock = 256;
  // The queries are the last n of the first m keys: the rules' offset, RoPE's positions.
  const int offset = m - n;
  const double theta = p.mods.rope_theta;
  Eigen::RowVectorXd q = p.q().row(static_cast<Eigen::Index>(head) * n + query).cast<double>();
  if (theta > 0) q = rope_rotate(MatrixD(q), query + offset, theta).row(0);
  const Eigen::Index kv = p.kv_row(head);
  const double divisor = scale_divisor<double>(p), temperature = p.temperature;
  MaskRule rule = mask_rule(p);
  rule.offset = offset;
  std::vector<double> slopes;
  ScoreRuleT<double> score = score_rule<double>(p, slopes);
  score.offset = offset;
  int lo, hi;
  rule.interval(query, lo, hi);
  hi = std::min(hi, m);
  RowReference ref;
  std::vector<double>& x = ref.weights;
  x.assign(m, -std::numeric_limits<double>::infinity());
  ref.modified.assign(m, -std::numeric_limits<double>::infinity());
  // Scores as the chain takes them: q . k in double (RoPE in double), / divisor, the score mods,
  // the mask, / T.
  for (Eigen::Index j0 = lo; j0 < hi; j0 += kBlock) {
    const Eigen::Index cols = std::min<Eigen::Index>(kBlock, hi - j0);
    MatrixD kb = p.k().middleRows(kv + j0, cols).cast<double>();
    if (theta > 0) kb = rope_rotate(kb, static_cast<int>(j0), theta);
    const Eigen::VectorXd s = kb * q.transpose();
    for (Eigen::Index j = 0; j < cols; ++j) {
      const int key = static_cast<int>(j0 + j);
      if (rule.elementwise() && !rule.visible(query, key)) continue;
      const double z = score.apply(s(j) / divisor, head, query, key);
      ref.modified[key] = z;
      x[key] = z / temperature;
    }
  }
  double mx = -std::numeric_limits<double>::infinity(), big = 0;
  for (double v : x)
    if (v != -std::numeric_limits<double>::infinity()) {
      mx = std::max(mx, v);
      big = std::max(big, std::abs(v));
    }
  ref.max_abs_logit = big;
  if (!std::isfinite(mx)) throw InputError("the row of head " + std::to_string(head) + ", query " +
                                           std::to_string(query) + " sees no key, or its scores overflow");
  double sum = 0;
  for (double& v : x) {
    v = std::isinf(v) ? 0.0 : std::exp(v - mx);
    sum += v;
  }
  for (double& v : x) v /= sum;
  Eigen::RowVectorXd out = Eigen::RowVectorXd::Zero(d_v), abs_out = Eigen::RowVectorXd::Zero(sums ? d_v : 0);
  for (Eigen::Index j0 = 0; j0 < m; j0 += kBlock) {
    const Eigen::Index cols = std::min<Eigen::Index>(kBlock, m - j0);
    const Eigen::Map<const Eigen::RowVectorXd> w(x.data() + j0, cols);
    const MatrixD vb = p.v().middleRows(kv + j0, cols).cast<double>();
    out.noalias() += w * vb;
    if (sums) abs_out.noalias() += w * vb.cwiseAbs();
  }
  ref.weighted_abs_v.assign(abs_out.data(), abs_out.data() + abs_out.size());
  ref.output.assign(out.data(), out.data() + d_v);
  return ref;
}

}  // namespace attnlab
