// The CPU split-KV decode kernel (cpu/decode.h has the algorithm). The products are Eigen's. Up
// to kRowsAsGemv query rows per key/value head (decode proper, grouped heads, a few new tokens)
// each row is its own pair of matrix-vector products over the key block, vectorised along d: the
// block comes from memory once and stays in L2 between the rows (a GEMM of so few rows is slower
// than its rows one by one). More rows: one small GEMM per block and product. The exp is the
// fused kernel's exp_nonpositive (exactly 0 for masked keys) over packets of a row padded with
// -inf to whole packets. The next block's K and V are prefetched while the current one is worked
// on.
#include "core/gcc12_avx512.h"  // first: see there

#include "cpu/decode.h"

#include "cpu/bf16.h"
#include "cpu/bf16_packets.h"
#include "cpu/chains.h"
#include "cpu/cpu_backend.h"
#include "cpu/online_softmax.h"
#include "core/parallel.h"

#include <algorithm>
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif
#include <chrono>
#include <cmath>
#include <string>
#include <thread>

namespace attnlab::cpu::decode {
namespace {

using namespace cpu::online;
using RowsMap = Eigen::Map<MatrixF, 0, Eigen::OuterStride<>>;
using ConstRows = Eigen::Map<const MatrixF>;

// Keys per block: K_blk and V_blk (d = 128: 128 KiB each) stay in L2 between the two products.
constexpr int kKeyBlock = 256;
static_assert(kKeyBlock % kLanes == 0, "a block row is whole packets");
// No split shorter than this: its partial state and its share of the combine stay small beside
// the keys it reads.
constexpr int kMinSplitKeys = 2048;
// Items per worker the automatic plan aims at, so that uneven items still spread.
constexpr int kItemsPerWorker = 4;
constexpr int kRowsAsGemv = 16;

int round_up(int x, int to) { return (x + to - 1) / to * to; }

// Row i's scores of the key block [b0, b0 + cols): the keys it may not see set to -inf (causal
// offset `off` >= 0: it sees keys j <= i + off; a custom mask's row, stride m), the padding to
// `padded` too; returns the largest score left (-inf when none).
float mask_row(float* row, int i, int b0, int cols, int padded, int off, const float* custom, int m) {
  const int visible = off >= 0 ? std::clamp(i + off + 1 - b0, 0, cols) : cols;
  std::fill(row + visible, row + padded, kNegInf);
  if (custom != nullptr) {
    const float* mrow = custom + static_cast<std::size_t>(i) * m + b0;
    for (int j = 0; j < visible; ++j)
      if (mrow[j] != 0.f) row[j] = kNegInf;
  }
  Packet mx = ei::pset1<Packet>(kNegInf);
  for (int j = 0; j < padded; j += kLanes) mx = ei::pmax(mx, ei::ploadu<Packet>(row + j));
  return ei::predux_max(mx);
}

// A software prefetch of `count` floats, one request per cache line.
void prefetch(const float* x, std::size_t count) {
  for (std::size_t i = 0; i < count; i += 16) __builtin_prefetch(x + i, 0, 1);
}

}  // namespace

SplitPlan plan_splits(const Problem& p, unsigned workers, int requested, int keys) {
  if (requested < 0)
    throw InputError("--split must be a number of key splits >= 1 (0: the machine's choice), got " +
                     std::to_string(requested));
  const int m = keys > 0 ? std::min(keys, p.m()) : p.m();
  int splits = requested;
  if (splits == 0) {
    const int want = (static_cast<int>(std::max(1u, workers)) * kItemsPerWorker + p.kv_heads() - 1) / p.kv_heads();
    splits = std::clamp(want, 1, std::max(1, m / kMinSplitKeys));
  }
  splits = std::min(splits, m);
  SplitPlan plan;
  // Whole key blocks per split when the splits are long enough, so only the last block is short.
  const int per = (m + splits - 1) / splits;
  plan.keys_per_split = per >= 4 * kKeyBlock ? round_up(per, kKeyBlock) : per;
  plan.splits = (m + plan.keys_per_split - 1) / plan.keys_per_split;
  return plan;
}

void split_partial(const Problem& p, int g, int k0, int k1, Partial& out, MatrixF& scratch, int keys) {
  const int n = p.n(), group = p.kv_group, rows = group * n, d_k = p.d_k(), d_v = p.d_v();
  const int m = p.m(), off = (keys > 0 ? keys : m) - n;
  const bool causal = p.mask == MaskKind::Causal;
  const float* custom = p.mask == MaskKind::Custom ? p.custom_mask().data() : nullptr;
  const float scale = fused_scale(p);
  const Eigen::Index kv = static_cast<Eigen::Index>(g) * m;
  // Q_g: the kv_group query heads of key/value head g are consecutive rows of Q.
  const ConstRows qg(p.q().data() + static_cast<Eigen::Index>(g) * rows * d_k, rows, d_k);

  out.m.assign(rows, kNegInf);
  out.l.assign(rows, 0.f);
  out.acc.setZero(rows, d_v);
  if (scratch.rows() < rows || scratch.cols() < kKeyBlock) scratch.resize(rows, kKeyBlock);
  const Eigen::Index ld = scratch.cols();

  for (int b0 = k0; b0 < k1; b0 += kKeyBlock) {
    const int cols = std::min(kKeyBlock, k1 - b0);
    const int padded = round_up(cols, kLanes);
    const ConstRows kb(p.k().data() + (kv + b0) * d_k, cols, d_k);
    const ConstRows vb(p.v().data() + (kv + b0) * d_v, cols, d_v);
    // The next block's K and V requested now, so that their reads overlap this block's work.
    if (b0 + kKeyBlock < k1) {
      const int next = std::min(kKeyBlock, k1 - b0 - kKeyBlock);
      prefetch(p.k().data() + (kv + b0 + kKeyBlock) * d_k, static_cast<std::size_t>(next) * d_k);
      prefetch(p.v().data() + (kv + b0 + kKeyBlock) * d_v, static_cast<std::size_t>(next) * d_v);
    }
    RowsMap s(scratch.data(), rows, cols, Eigen::OuterStride<>(ld));
    if (rows <= kRowsAsGemv) {
      for (int r = 0; r < rows; ++r) s.row(r).noalias() = qg.row(r) * kb.transpose();
    } else {
      s.noalias() = qg * kb.transpose();
    }
    for (int r = 0; r < rows; ++r) {
      float* row = scratch.data() + r * ld;
      // The online-softmax step of the row (as online_softmax_step, along the row's packets).
      const float m_old = out.m[r];
      const float m_new = std::max(m_old, mask_row(row, r % n, b0, cols, padded, causal ? off : -1, custom, m));
      if (m_new == kNegInf) {  // nothing visible so far: the row's weights are 0
        std::fill(row, row + cols, 0.f);
        continue;
      }
      const float alpha = m_old == kNegInf ? 0.f : std::exp((m_old - m_new) * scale);
      const Packet shift = ei::pset1<Packet>(m_new), vscale = ei::pset1<Packet>(scale);
      Packet sum = ei::pset1<Packet>(0.f);
      for (int j = 0; j < padded; j += kLanes) {
        const Packet w = exp_nonpositive(ei::pmul(ei::psub(ei::ploadu<Packet>(row + j), shift), vscale));
        ei::pstoreu(row + j, w);
        sum = ei::padd(sum, w);
      }
      out.l[r] = out.l[r] * alpha + ei::predux(sum);
      out.m[r] = m_new;
      if (alpha != 1.f) out.acc.row(r) *= alpha;
    }
    if (rows <= kRowsAsGemv) {
      for (int r = 0; r < rows; ++r) out.acc.row(r).noalias() += s.row(r) * vb;
    } else {
      out.acc.noalias() += s * vb;
    }
  }
}

std::shared_ptr<const Bf16KV> bf16_cache(const Problem& p) {
  return p.bf16_kv([](const ProblemInputs& in) {
    Bf16KV b;
    b.k.resize(static_cast<std::size_t>(in.k.size()));
    b.v.resize(static_cast<std::size_t>(in.v.size()));
    for (std::size_t i = 0; i < b.k.size(); ++i) b.k[i] = bf16_bits(in.k.data()[i]);
    for (std::size_t i = 0; i < b.v.size(); ++i) b.v[i] = bf16_bits(in.v.data()[i]);
    return b;
  });
}

void split_partial_bf16(const Problem& p, const Bf16KV& kvb, int g, int k0, int k1, Partial& out, MatrixF& scratch,
                        MatrixF& kbuf, int keys) {
  const int n = p.n(), group = p.kv_group, rows = group * n, d_k = p.d_k(), d_v = p.d_v();
  const int m = p.m(), off = (keys > 0 ? keys : m) - n;
  const bool causal = p.mask == MaskKind::Causal;
  const float* custom = p.mask == MaskKind::Custom ? p.custom_mask().data() : nullptr;
  const float c = bf16_scale_log2(p);
  const Eigen::Index kv = static_cast<Eigen::Index>(g) * m;
  const MatrixF qg = bf16_round(MatrixF(ConstRows(p.q().data() + static_cast<Eigen::Index>(g) * rows * d_k, rows, d_k)));

  out.m.assign(rows, kNegInf);
  out.l.assign(rows, 0.f);
  out.acc.setZero(rows, d_v);
  if (scratch.rows() < rows || scratch.cols() < kKeyBlock) scratch.resize(rows, kKeyBlock);
  if (kbuf.rows() < kKeyBlock || kbuf.cols() < std::max(d_k, d_v)) kbuf.resize(kKeyBlock, std::max(d_k, d_v));
  const Eigen::Index ld = scratch.cols();
  // A block of bf16 rows widened to fp32 (exact) into kbuf, as a (cols, d) matrix.
  const auto widen = [&](const std::uint16_t* src, int cols, int d) {
    float* dst = kbuf.data();
    const std::size_t count = static_cast<std::size_t>(cols) * d;
    std::size_t i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= count; i += 16) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
      _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
    }
#elif defined(__AVX2__)
    for (; i + 8 <= count; i += 8) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
      _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
    }
#endif
    for (; i < count; ++i) dst[i] = bf16_to_float(src[i]);
    return ConstRows(dst, cols, d);
  };

  for (int b0 = k0; b0 < k1; b0 += kKeyBlock) {
    const int cols = std::min(kKeyBlock, k1 - b0);
    const int padded = round_up(cols, kLanes);
    RowsMap s(scratch.data(), rows, cols, Eigen::OuterStride<>(ld));
    {
      const ConstRows kb = widen(kvb.k.data() + (kv + b0) * d_k, cols, d_k);
      for (int r = 0; r < rows; ++r) s.row(r).noalias() = qg.row(r) * kb.transpose();
    }
    for (int r = 0; r < rows; ++r) {
      float* row = scratch.data() + r * ld;
      const float m_old = out.m[r];
      const float m_new = std::max(m_old, mask_row(row, r % n, b0, cols, padded, causal ? off : -1, custom, m));
      if (m_new == kNegInf) {
        std::fill(row, row + cols, 0.f);
        continue;
      }
      // The bf16 kernels' step (cpu/bf16.cpp): shift = m c, corr = 2^(m_old c - shift),
      // p_j = bf16(2^(s_j c - shift)), exactly 0 for a masked key.
      const float shift = m_new * c;
      const float corr =
          m_old == kNegInf ? 0.f : ei::pfirst(bf16_packets::exp2_nonpositive(ei::pset1<Packet>(m_old * c - shift)));
      const Packet vshift = ei::pset1<Packet>(-shift), vc = ei::pset1<Packet>(c);
      Packet sum = ei::pzero(vc);
      for (int j = 0; j < padded; j += kLanes) {
        const Packet w =
            bf16_packets::round_bf16(bf16_packets::exp2_nonpositive(ei::pmadd(ei::ploadu<Packet>(row + j), vc, vshift)));
        ei::pstoreu(row + j, w);
        sum = ei::padd(sum, w);
      }
      out.l[r] = out.l[r] * corr + ei::predux(sum);
      out.m[r] = m_new;
      if (corr != 1.f) out.acc.row(r) *= corr;
    }
    const ConstRows vb = widen(kvb.v.data() + (kv + b0) * d_v, cols, d_v);
    for (int r = 0; r < rows; ++r) out.acc.row(r).noalias() += s.row(r) * vb;
  }
}

}  // namespace attnlab::cpu::decode

namespace attnlab {

void cpu::decode::decode_keys(const Problem& p, int keys, const SplitPlan& plan, const std::atomic<bool>* cancel,
                             std::atomic<float>* progress, std::vector<Partial>& partials, MatrixF& output,
                             Precision precision) {
  const int n = p.n(), d_v = p.d_v(), G = p.kv_heads(), group = p.kv_group;
  const bool bf16 = precision == Precision::BF16;
  const std::shared_ptr<const Bf16KV> kvb = bf16 ? bf16_cache(p) : nullptr;
  const std::size_t items = static_cast<std::size_t>(G) * plan.splits;
  const double flops = 4.0 * p.heads * static_cast<double>(n) * keys * std::max(p.d_k(), d_v);
  const unsigned workers = worker_count(items, flops);

  partials.resize(items);
  std::vector<MatrixF> scratch(workers), widened(workers);
  std::atomic<std::size_t> done{0};
  parallel_items(items, workers, [&](unsigned id, std::size_t it) {
    if (cancel && cancel->load(std::memory_order_relaxed)) throw Cancelled();
    const int g = static_cast<int>(it / plan.splits), s = static_cast<int>(it % plan.splits);
    if (bf16)
      split_partial_bf16(p, *kvb, g, plan.begin(s), plan.end(s, keys), partials[it], scratch[id], widened[id], keys);
    else
      split_partial(p, g, plan.begin(s), plan.end(s, keys), partials[it], scratch[id], keys);
    if (progress) progress->store(static_cast<float>(++done) / static_cast<float>(items));
  });

  // The combine: every query row merges its splits' states in split order, then O = acc / l.
  const float scale = fused_scale(p);
  output.resize(static_cast<Eigen::Index>(p.heads) * n, d_v);
  for (int g = 0; g < G; ++g) {
    for (int r = 0; r < group * n; ++r) {
      const Partial& first = partials[static_cast<std::size_t>(g) * plan.splits];
      float mr = first.m[r], lr = first.l[r];
      Eigen::RowVectorXf acc = first.acc.row(r);
      for (int s = 1; s < plan.splits; ++s) {
        const Partial& b = partials[static_cast<std::size_t>(g) * plan.splits + s];
        merge_states(mr, lr, acc.data(), b.m[r], b.l[r], b.acc.row(r).data(), d_v, scale);
      }
      const int h = g * group + r / n, i = r % n;
      // A score that overflowed fp32 leaves m, l or acc non-finite: refused as the fused kernel does.
      if (!std::isfinite(mr) || !(lr > 0.f) || !std::isfinite(lr) || !acc.allFinite())
        throw InputError("QKᵀ overflows in head " + std::to_string(h) + ", query row " + std::to_string(i) +
                         " (inputs too large for fp32)");
      output.row(static_cast<Eigen::Index>(h) * n + i) = acc / lr;
    }
  }
}

void cpu::decode_into(const Problem& p, const RunOptions& opt, Trace& t) {
  using namespace cpu::decode;
  const auto t0 = std::chrono::steady_clock::now();
  cpu::begin_trace(t, p, Variant::Decode, opt.precision, /*keep=*/false, /*output=*/true);
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const SplitPlan plan = plan_splits(p, hw, opt.splits);
  t.splits = plan.splits;
  std::vector<Partial> partials;
  decode_keys(p, p.m(), plan, opt.cancel, opt.progress, partials, t.output, opt.precision);
  t.timings.total_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  t.timings.fused_ms = t.timings.total_ms;
}

Trace cpu_decode(const Problem& p, int splits) {
  validate(p);
  RunOptions opt;
  opt.variant = Variant::Decode;
  opt.splits = splits;
  Trace t;
  cpu::decode_into(p, opt, t);
  return t;
}

}  // namespace attnlab
