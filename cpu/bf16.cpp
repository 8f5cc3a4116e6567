// The bf16 chain on the CPU, staged and fused: the arithmetic of cpu/bf16.h (that of the CUDA
// kernel kernels/fused_bf16.cu), in one place for both variants.
//   Operands     Q, K, V rounded to bf16: as packed bf16 pairs for the AVX-512 BF16 dot products,
//                once per run; elsewhere as bf16-rounded fp32 values for the fp32 kernels'
//                register tiles (exact products, fp32 sums), Q once per run, K and V in the
//                tiles' panels once per key/value head, kept with the problem's inputs.
//   qk_block     S (rows, keys) = Q_blk K_blkᵀ, fp32 accumulation.
//   softmax_row  one online-softmax step of one query row over one key block: max, shift, corr,
//                P = bf16(exp2(fma(s, c, -shift))), l = l * corr + sum P.
//   pv_block     acc (rows, d_v) = acc * corr + P V_blk, fp32 accumulation.
// Fused: a work item is (head, block of kQueryBlock queries), walking the key blocks of
// kKeyBlock that the block mask does not rule out, then O = acc * (1 / l). Staged: a work item
// is (head, block of kQueryBlock queries) over all m keys in one block, every stage written out.
// Rows of the scratch score block are padded to whole groups of keys with -inf (weight 0).
#include "core/gcc12_avx512.h"  // first: see there

#include "cpu/bf16.h"
#include "cpu/bf16_packets.h"
#include "cpu/online_softmax.h"

#include "cpu/cpu_backend.h"
#include "cpu/chains.h"
#include "core/modify.h"
#include "core/parallel.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#if defined(__AVX512BF16__) && defined(__AVX512BW__)
#include <immintrin.h>
#define ATTNLAB_CPU_DPBF16 1
#else
#define ATTNLAB_CPU_DPBF16 0
#endif

namespace attnlab {

bool cpu_bf16_uses_dpbf16() { return ATTNLAB_CPU_DPBF16 != 0; }

namespace {

namespace ei = Eigen::internal;
using Index = Eigen::Index;
using Clock = std::chrono::steady_clock;
using Packet = ei::packet_traits<float>::type;
constexpr int kLanes = ei::packet_traits<float>::size;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wignored-attributes"
using PacketI = ei::unpacket_traits<Packet>::integer_packet;
#pragma GCC diagnostic pop

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int kQueryBlock = 64;
constexpr int kKeyBlock = 128;
// Keys are computed in groups of kKeyGroup (two 16-lane dot-product packets); a score row of the
// scratch block is padded to a whole number of groups.
constexpr int kKeyGroup = 32;
static_assert(kKeyBlock % kKeyGroup == 0 && kKeyGroup % 16 == 0 && 16 % kLanes == 0);

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

int round_up(int x, int to) { return (x + to - 1) / to * to; }

using bf16_packets::exp2_nonpositive;
using bf16_packets::round_bf16;

// One online-softmax step of one query row (see cpu/bf16.h): s (len, a multiple of kLanes) holds
// the row's raw scores over one key block, -inf where masked or padding, and is overwritten with
// P = bf16(exp2(fma(s, c, -shift))). Updates the running max m and sum l; returns corr, the
// factor the row's acc is rescaled by before P V is added.
float softmax_row(float* s, int len, float c, float& m, float& l) {
  Packet mx0 = ei::pset1<Packet>(kNegInf), mx1 = mx0;
  int j = 0;
  for (; j + 2 * kLanes <= len; j += 2 * kLanes) {
    mx0 = ei::pmax(mx0, ei::ploadu<Packet>(s + j));
    mx1 = ei::pmax(mx1, ei::ploadu<Packet>(s + j + kLanes));
  }
  for (; j < len; j += kLanes) mx0 = ei::pmax(mx0, ei::ploadu<Packet>(s + j));
  const float m_new = std::max(m, ei::predux_max(ei::pmax(mx0, mx1)));
  // Every key so far masked: shift by 0, never by -inf (-inf - -inf is NaN).
  const float shift = m_new == kNegInf ? 0.f : m_new * c;
  const float corr = exp2_nonpositive(m * c - shift);
  const Packet vc = ei::pset1<Packet>(c), vshift = ei::pset1<Packet>(-shift);
  Packet sum0 = ei::pzero(vc), sum1 = sum0;
  auto weight = [&](int at) {
    const Packet p = round_bf16(exp2_nonpositive(ei::pmadd(ei::ploadu<Packet>(s + at), vc, vshift)));
    ei::pstoreu(s + at, p);
    return p;
  };
  for (j = 0; j + 2 * kLanes <= len; j += 2 * kLanes) {
    sum0 = ei::padd(sum0, weight(j));
    sum1 = ei::padd(sum1, weight(j + kLanes));
  }
  for (; j < len; j += kLanes) sum0 = ei::padd(sum0, weight(j));
  l = l * corr + ei::predux(ei::padd(sum0, sum1));
  m = m_new;
  return corr;
}

// ---- the operands and the two products ---------------------------------------------------------

#if !ATTNLAB_CPU_DPBF16
// K and V rounded to bf16 for the fp32 kernels' register tiles (exact products, fp32 sums), once
// per key/value head: K in panels of kTileCols keys, each (d_k, kTileCols), so that a row of
// scores is a broadcast query value times one panel row; V in panels of kTileCols of its dims,
// each (m_pad, kTileCols). A tile's panel rows are consecutive in memory (a row-major Kᵀ or V of
// thousands of columns would put the rows a tile reads in the same few L1 sets). Padding keys and
// dims are zero. Made once per problem and kept with its inputs (Problem::derived), as the decode
// kernel keeps its bf16 cache: the viewer's every slider move and bench's every repetition reuse
// it, and a decode shape's cache of millions of values is not rounded and paged in again.
struct KvTiles {
  static constexpr int kTile = cpu::online::kTileCols;
  int m_pad = 0, d_k = 0, dvp = 0;  // dvp: d_v rounded up to whole panels
  std::unique_ptr<float[]> kt, v;
  // Where key/value head g's panel holding key j starts in kt, and the one holding dim c in v.
  std::size_t k_panel(int g, int j) const {
    return (static_cast<std::size_t>(g) * (m_pad / kTile) + j / kTile) * d_k * kTile;
  }
  std::size_t v_panel(int g, int c) const {
    return (static_cast<std::size_t>(g) * (dvp / kTile) + c / kTile) * m_pad * kTile;
  }
};

// K as multiplied (rotated by RoPE where p has it) and V in KvTiles; the key/value head count
// (the layout) and θ are part of the key.
std::shared_ptr<const KvTiles> kv_tiles(const Problem& p, const MatrixF& K) {
  const std::string key =
      "kv/bf16_tiles/" + std::to_string(p.kv_heads()) + "/rope" + std::to_string(p.mods.rope_theta);
  return p.derived<KvTiles>(key, [&](const ProblemInputs& in) {
    constexpr int T = KvTiles::kTile;
    const int kv_heads = p.kv_heads(), m = p.m(), d_k = p.d_k(), d_v = p.d_v();
    KvTiles t;
    t.m_pad = round_up(m, kKeyGroup);
    t.d_k = d_k;
    t.dvp = round_up(d_v, T);
    // Left uninitialised and written whole, zeros included, by the items: one per T keys of a
    // key/value head, so that the pages are first touched on every core.
    t.kt.reset(new float[static_cast<std::size_t>(kv_heads) * t.m_pad * d_k]);
    t.v.reset(new float[static_cast<std::size_t>(kv_heads) * t.m_pad * t.dvp]);
    const int panels = t.m_pad / T;
    const std::size_t items = static_cast<std::size_t>(kv_heads) * panels;
    parallel_items(items, worker_count(items, 4.0 * kv_heads * m * (d_k + d_v)), [&](unsigned, std::size_t it) {
      const int g = static_cast<int>(it / panels), j0 = static_cast<int>(it % panels) * T;
      float* kp = t.kt.get() + t.k_panel(g, j0);  // this item's panel of K
      for (int j = j0; j < j0 + T; ++j) {
        const Index row = static_cast<Index>(g) * m + j;
        const bool key = j < m;
        for (int c = 0; c < d_k; ++c) kp[c * T + j - j0] = key ? bf16_round(K(row, c)) : 0.f;
        for (int c0 = 0; c0 < t.dvp; c0 += T) {  // row j of each panel of V
          float* vp = t.v.get() + t.v_panel(g, c0) + static_cast<std::size_t>(j) * T;
          for (int c = c0; c < c0 + T; ++c) vp[c - c0] = key && c < d_v ? bf16_round(in.v(row, c)) : 0.f;
        }
      }
    });
    return t;
  }, "kv/bf16_tiles/");
}
#endif

// Q, K, V of one run in bf16, in the layout the products read: with AVX-512 BF16, K and V packed
// once per query head (a grouped key/value head is packed for each query head that reads it).
struct Operands {
  int heads = 0, n = 0, m = 0, d_k = 0, d_v = 0;
  int m_pad = 0;  // keys per head rounded up to kKeyGroup (padding keys are zero)
#if ATTNLAB_CPU_DPBF16
  // Pairs of bf16 (element 2t in the low half of word t), zero-padded.
  int kp = 0;                   // d_k pairs per row: ceil(d_k / 2)
  int dg = 0;                   // d_v groups of 16 dims: ceil(d_v / 16)
  std::vector<std::uint32_t> q;  // (heads*n, kp): query rows
  std::vector<std::uint32_t> k;  // per head, per group of 16 keys g: (kp, 16) words, pair t of key
                                 // 16g + lane at [(h * m_pad/16 + g) * kp + t] * 16 + lane
  std::vector<std::uint32_t> v;  // per head, per key pair jj: (dg, 16) words, the pair
                                 // (V[2jj][d], V[2jj+1][d]) at [(h * m_pad/2 + jj) * dg + d/16] * 16 + d%16
#else
  // Q rounded to bf16 (heads*n, d_k), row-major, and K and V rounded in the tiles' panels, kept
  // with the problem's inputs (KvTiles above); query head h reads key/value head h / group.
  int group = 1;
  MatrixF q;
  std::shared_ptr<const KvTiles> kv;
#endif
};

#if ATTNLAB_CPU_DPBF16
std::uint32_t pair_of(float lo, float hi) {
  return static_cast<std::uint32_t>(bf16_bits(lo)) | static_cast<std::uint32_t>(bf16_bits(hi)) << 16;
}
#endif

Operands make_operands(const Problem& p) {
  // Q and K as multiplied: rotated by RoPE where p has it (kept with p's inputs).
  const std::shared_ptr<const RotatedQK> rot = rotated_qk(p);
  const MatrixF& Q = kernel_q(p, rot.get());
  const MatrixF& K = kernel_k(p, rot.get());
  Operands o;
  o.heads = p.heads;
  o.n = p.n();
  o.m = p.m();
  o.d_k = p.d_k();
  o.d_v = p.d_v();
  o.m_pad = round_up(p.m(), kKeyGroup);
#if ATTNLAB_CPU_DPBF16
  const int heads = o.heads, n = o.n, m = o.m, d_k = o.d_k, d_v = o.d_v, mp = o.m_pad;
  o.kp = (d_k + 1) / 2;
  o.dg = (d_v + 15) / 16;
  const auto at = [](const MatrixF& a, Index r, int c, int cols) { return c < cols ? a(r, c) : 0.f; };
  o.q.resize(static_cast<std::size_t>(heads) * n * o.kp);
  for (Index r = 0; r < static_cast<Index>(heads) * n; ++r)
    for (int t = 0; t < o.kp; ++t)
      o.q[r * o.kp + t] = pair_of(Q(r, 2 * t), at(Q, r, 2 * t + 1, d_k));
  o.k.assign(static_cast<std::size_t>(heads) * mp * o.kp, 0u);
  for (int h = 0; h < heads; ++h)
    for (int j = 0; j < m; ++j) {
      const Index r = p.kv_row(h) + j;
      std::uint32_t* dst = o.k.data() + (static_cast<std::size_t>(h) * (mp / 16) + j / 16) * o.kp * 16 + j % 16;
      for (int t = 0; t < o.kp; ++t) dst[t * 16] = pair_of(K(r, 2 * t), at(K, r, 2 * t + 1, d_k));
    }
  o.v.assign(static_cast<std::size_t>(heads) * (mp / 2) * o.dg * 16, 0u);
  for (int h = 0; h < heads; ++h)
    for (int jj = 0; jj < mp / 2; ++jj) {
      std::uint32_t* dst = o.v.data() + (static_cast<std::size_t>(h) * (mp / 2) + jj) * o.dg * 16;
      const Index r0 = p.kv_row(h) + 2 * jj;
      for (int d = 0; d < d_v; ++d) {
        const float lo = 2 * jj < m ? p.v()(r0, d) : 0.f;
        const float hi = 2 * jj + 1 < m ? p.v()(r0 + 1, d) : 0.f;
        dst[d] = pair_of(lo, hi);
      }
    }
#else
  o.group = p.kv_group;
  o.q = bf16_round(Q);
  o.kv = kv_tiles(p, K);
#endif
  return o;
}

#if ATTNLAB_CPU_DPBF16
inline __m512 dp(__m512 acc, __m512i a, __m512i b) {
  return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
}

// s (R, 32) = R query rows (qw, kp words a row) . 32 keys (kg: two groups of 16 keys, kp * 16
// words each, one after the other).
template <int R>
void qk_tile(const std::uint32_t* qw, int kp, const std::uint32_t* kg, float* s, Index ld) {
  __m512 acc[R][2];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  const std::uint32_t* kg1 = kg + static_cast<std::size_t>(kp) * 16;
  for (int t = 0; t < kp; ++t) {
    const __m512i b0 = _mm512_loadu_si512(kg + t * 16);
    const __m512i b1 = _mm512_loadu_si512(kg1 + t * 16);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512i a = _mm512_set1_epi32(static_cast<int>(qw[r * kp + t]));
      acc[r][0] = dp(acc[r][0], a, b0);
      acc[r][1] = dp(acc[r][1], a, b1);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    _mm512_storeu_ps(s + r * ld, acc[r][0]);
    _mm512_storeu_ps(s + r * ld + 16, acc[r][1]);
  }
}

// acc (R, 16 G) = acc * corr (per row) + P (R rows of pw, `pairs` words each, row stride pld)
// . V (vg: `pairs` key pairs, dg * 16 words each, starting at dim group 0 of the tile).
template <int R, int G>
void pv_tile(const std::uint32_t* pw, Index pld, int pairs, const std::uint32_t* vg, int dg,
             float* acc, Index ald, const float* corr) {
  __m512 c[R][G];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const __m512 a = _mm512_set1_ps(corr[r]);
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) c[r][g] = _mm512_mul_ps(_mm512_loadu_ps(acc + r * ald + 16 * g), a);
  }
  for (int jj = 0; jj < pairs; ++jj) {
    __m512i b[G];
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) b[g] = _mm512_loadu_si512(vg + (static_cast<std::size_t>(jj) * dg + g) * 16);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512i a = _mm512_set1_epi32(static_cast<int>(pw[r * pld + jj]));
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) c[r][g] = dp(c[r][g], a, b[g]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) _mm512_storeu_ps(acc + r * ald + 16 * g, c[r][g]);
}

using QkFn = void (*)(const std::uint32_t*, int, const std::uint32_t*, float*, Index);
using PvFn = void (*)(const std::uint32_t*, Index, int, const std::uint32_t*, int, float*, Index,
                      const float*);
constexpr int kQkRows = 8;  // 16 accumulators
constexpr int kPvRows = 6;  // up to 24 accumulators
template <int... R>
constexpr std::array<QkFn, sizeof...(R)> qk_table(std::integer_sequence<int, R...>) {
  return {&qk_tile<R + 1>...};
}
template <int G, int... R>
constexpr std::array<PvFn, sizeof...(R)> pv_row_table(std::integer_sequence<int, R...>) {
  return {&pv_tile<R + 1, G>...};
}
constexpr auto kQkFns = qk_table(std::make_integer_sequence<int, kQkRows>{});
constexpr std::array<std::array<PvFn, kPvRows>, 4> kPvFns = {
    pv_row_table<1>(std::make_integer_sequence<int, kPvRows>{}),
    pv_row_table<2>(std::make_integer_sequence<int, kPvRows>{}),
    pv_row_table<3>(std::make_integer_sequence<int, kPvRows>{}),
    pv_row_table<4>(std::make_integer_sequence<int, kPvRows>{})};
#endif

// Per-thread scratch for one block of up to kQueryBlock query rows.
struct Scratch {
  MatrixF s;     // (kQueryBlock, key columns) scores, then P
  MatrixF acc;   // (kQueryBlock, d_v padded: to 16 on the dot-product path, else to whole tiles)
  std::vector<float> m, l, corr;  // (kQueryBlock) running max, sum, last rescale
#if ATTNLAB_CPU_DPBF16
  std::vector<std::uint32_t> pw;  // (kQueryBlock, key columns / 2) P as bf16 pairs
#else
  std::vector<float> ones;  // (dvp) the column scale that makes P V's tiles accumulate
#endif
  Scratch(const Operands& o, int key_cols)
      : s(kQueryBlock, key_cols),
#if ATTNLAB_CPU_DPBF16
        acc(kQueryBlock, round_up(o.d_v, 16)),
#else
        acc(kQueryBlock, o.kv->dvp),
#endif
        m(kQueryBlock),
        l(kQueryBlock),
        corr(kQueryBlock) {
#if ATTNLAB_CPU_DPBF16
    pw.resize(static_cast<std::size_t>(kQueryBlock) * key_cols / 2);
#else
    ones.assign(o.kv->dvp, 1.f);
#endif
  }
};

// S (rows, cols) = Q rows [qrow, qrow + rows) . keys [k0, k0 + cols) of head h, into the scratch's
// score block (cols a multiple of kKeyGroup; keys past m are zero rows of K, so 0).
void qk_block(const Operands& o, int h, Index qrow, int rows, int k0, int cols, Scratch& w) {
  const Index ld = w.s.cols();
#if ATTNLAB_CPU_DPBF16
  for (int j0 = 0; j0 < cols; j0 += kKeyGroup) {
    const std::uint32_t* kg =
        o.k.data() + (static_cast<std::size_t>(h) * (o.m_pad / 16) + (k0 + j0) / 16) * o.kp * 16;
    int r0 = 0;
    for (; r0 + kQkRows <= rows; r0 += kQkRows)
      qk_tile<kQkRows>(o.q.data() + (qrow + r0) * o.kp, o.kp, kg, w.s.data() + r0 * ld + j0, ld);
    if (r0 < rows)
      kQkFns[rows - r0 - 1](o.q.data() + (qrow + r0) * o.kp, o.kp, kg, w.s.data() + r0 * ld + j0, ld);
  }
#else
  // The fp32 kernels' register tiles (cpu/online_softmax.h), a panel of keys at a time:
  // S(r, j) = sum_c q(r, c) K_panel(c, j).
  constexpr int T = KvTiles::kTile;
  const KvTiles& t = *o.kv;
  for (int j0 = 0; j0 < cols; j0 += T)
    cpu::online::rows_madd(rows, o.q.data() + qrow * o.d_k, o.d_k, 1, t.kt.get() + t.k_panel(h / o.group, k0 + j0), T,
                           o.d_k, w.s.data() + j0, ld, nullptr);
#endif
}

// acc (rows, d_v) = acc * corr + P (the scratch's block, `cols` keys from k0) . V of head h.
void pv_block(const Operands& o, int h, int rows, int k0, int cols, Scratch& w) {
  const Index ld = w.s.cols();
#if ATTNLAB_CPU_DPBF16
  const Index ald = w.acc.cols();
  // P rows as bf16 pairs: the weights are already bf16 values, so this only takes their top half.
  const int pairs = cols / 2;
  const Index pld = ld / 2;
  for (int r = 0; r < rows; ++r) {
    const float* src = w.s.data() + r * ld;
    std::uint32_t* dst = w.pw.data() + r * pld;
    for (int jj = 0; jj < pairs; jj += 16) {
      const __m512i lohi0 = _mm512_loadu_si512(src + 2 * jj);       // P[2jj .. 2jj+15]
      const __m512i lohi1 = _mm512_loadu_si512(src + 2 * jj + 16);  // P[2jj+16 .. 2jj+31]
      // Word t = hi16(P[2t]) | hi16(P[2t+1]) << 16: even floats' top halves low, odd ones' high.
      const __m512i idx = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37,
                                           35, 33, 31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9,
                                           7, 5, 3, 1);
      _mm512_storeu_si512(dst + jj, _mm512_permutex2var_epi16(lohi0, idx, lohi1));
    }
  }
  const std::uint32_t* vh = o.v.data() + (static_cast<std::size_t>(h) * (o.m_pad / 2) + k0 / 2) * o.dg * 16;
  for (int g0 = 0; g0 < o.dg; g0 += 4) {
    const int g = std::min(4, o.dg - g0);
    int r0 = 0;
    for (; r0 < rows; r0 += kPvRows) {
      const int rr = std::min(kPvRows, rows - r0);
      kPvFns[g - 1][rr - 1](w.pw.data() + r0 * pld, pld, pairs, vh + g0 * 16, o.dg,
                            w.acc.data() + r0 * ald + 16 * g0, ald, w.corr.data() + r0);
    }
  }
#else
  // acc rescaled row by row, then acc = acc · 1 + P V_blk in the fp32 kernels' register tiles, a
  // panel of V's dims at a time.
  constexpr int T = KvTiles::kTile;
  const KvTiles& t = *o.kv;
  auto acc = w.acc.topRows(rows);
  for (int r = 0; r < rows; ++r)
    if (w.corr[r] != 1.f) acc.row(r) *= w.corr[r];
  for (int c0 = 0; c0 < t.dvp; c0 += T) {
    const float* vb = t.v.get() + t.v_panel(h / o.group, c0) + static_cast<std::size_t>(k0) * T;
    cpu::online::rows_madd(rows, w.s.data(), ld, 1, vb, T, cols, w.acc.data() + c0, w.acc.cols(), w.ones.data());
  }
#endif
}

// Scores that are not finite (checked before the mask, over the block's `cols` columns, the
// padding included, which is 0): the inputs overflow fp32's range in Q Kᵀ.
void check_scores(const Scratch& w, int rows, int cols, int h, Index q0) {
  for (int r = 0; r < rows; ++r) {
    const float* s = w.s.data() + r * w.s.cols();
    // x * 0 is 0 for a finite x and NaN for inf or NaN, so the sum is NaN exactly when one is.
    Packet probe = ei::pzero(ei::pset1<Packet>(0.f));
    for (int j = 0; j < cols; j += kLanes)
      probe = ei::padd(probe, ei::pmul(ei::ploadu<Packet>(s + j), ei::pzero(probe)));
    if (!(ei::predux(probe) == 0.f))
      cpu::online::throw_overflow(cpu::online::RowOverflow::Scores, h, static_cast<int>(q0 + r), Precision::BF16);
  }
}

// Masks the scratch's scores of query rows [q0, q0 + rows) of a head against keys
// [k0, k0 + cols): -inf where the mask's rule (the mask kind and the mask mods) blocks the pair
// and for keys past `key_end`.
void apply_mask(const MaskRule& rule, Scratch& w, int q0, int rows, int k0, int cols, int key_end) {
  const Index ld = w.s.cols();
  for (int r = 0; r < rows; ++r) {
    float* s = w.s.data() + r * ld;
    const int q = q0 + r;
    int lo, hi;
    rule.interval(q, lo, hi);
    const int first = std::clamp(lo - k0, 0, cols);
    const int visible = std::clamp(std::min(key_end, hi) - k0, first, cols);
    std::fill(s, s + first, kNegInf);
    std::fill(s + visible, s + cols, kNegInf);
    if (rule.elementwise())
      for (int j = first; j < visible; ++j)
        if (!rule.visible(q, k0 + j)) s[j] = kNegInf;
  }
}

// The score mods on the scratch's raw scores of query rows [q0, q0 + rows) of head h against keys
// [k0, k0 + keys): s = mod(s * score_scale) (cpu/online_softmax.h modify_row, the fused fp32
// kernel's arithmetic row by row).
void modify_scores(const ScoreRule& rule, float score_scale, Scratch& w, int h, int q0, int rows, int k0, int keys) {
  const Index ld = w.s.cols();
  for (int r = 0; r < rows; ++r) cpu::online::modify_row(rule, score_scale, w.s.data() + r * ld, h, q0 + r, k0, keys);
}

// A query row whose max, sum or output is not finite (the scores were checked): the logits (the
// max times c) overflowed, or, with both finite, the weighted sum of V (cpu/online_softmax.h
// row_overflow; the m it is given is the logit max, finite exactly when the scores times c are).
void check_rows(const Scratch& w, int rows, float c, int h, int q0) {
  for (int r = 0; r < rows; ++r) {
    const auto what = cpu::online::row_overflow(w.m[r] * c, w.l[r], w.acc.row(r).allFinite(), 1.f);
    if (what != cpu::online::RowOverflow::None)
      cpu::online::throw_overflow(what == cpu::online::RowOverflow::Scores ? cpu::online::RowOverflow::Logits : what, h,
                                  q0 + r, Precision::BF16);
  }
}

void reset_state(Scratch& w) {
  std::fill(w.m.begin(), w.m.end(), kNegInf);
  std::fill(w.l.begin(), w.l.end(), 0.f);
  w.acc.setZero();
}

// The scratch's output rows, acc * (1 / l), into out rows [orow, orow + rows).
void write_output(const Scratch& w, int rows, int d_v, MatrixF& out, Index orow) {
  for (int r = 0; r < rows; ++r)
    out.row(orow + r) = w.acc.row(r).head(d_v) * (1.f / w.l[r]);
}

unsigned workers_for(std::size_t items, const Problem& p) {
  return worker_count(items, 4.0 * p.heads * static_cast<double>(p.n()) * p.m() *
                                      std::max(p.d_k(), p.d_v()));
}

}  // namespace

namespace {

void fused_bf16_into_once(const Problem& p, Trace& t) {
  const auto t0 = Clock::now();
  const int n = p.n(), m = p.m(), heads = p.heads, d_v = p.d_v();
  cpu::begin_trace(t, p, Variant::Fused, Precision::BF16, /*keep=*/false, /*output=*/true);

  const Operands o = make_operands(p);
  const MaskRule rule = mask_rule(p);
  const BlockMask blocks = block_mask(p, kQueryBlock, kKeyBlock);
  std::vector<float> slopes;
  const ScoreRule score = score_rule<float>(p, slopes);
  const float score_scale = static_cast<float>(p.scale_value());
  // Score mods: the scores are scaled and modified first, and c is log2(e) / T (bf16_scale_log2).
  const float c = bf16_scale_log2(p);
  const int blocks_per_head = (n + kQueryBlock - 1) / kQueryBlock;
  const std::size_t items = static_cast<std::size_t>(heads) * blocks_per_head;
  const unsigned workers = workers_for(items, p);
  std::vector<Scratch> scratch;
  scratch.reserve(workers);
  for (unsigned i = 0; i < workers; ++i) scratch.emplace_back(o, kKeyBlock);

  // Causal blocks near the end of a head carry the most keys: handed out first.
  parallel_items(items, workers, [&](unsigned id, std::size_t it) {
    Scratch& w = scratch[id];
    const int h = static_cast<int>(it % heads);
    const int q0 = (blocks_per_head - 1 - static_cast<int>(it / heads)) * kQueryBlock;
    const int rows = std::min(kQueryBlock, n - q0);
    const Index qrow = static_cast<Index>(h) * n + q0;
    reset_state(w);
    for (int k0 = 0; k0 < m; k0 += kKeyBlock) {
      // The block mask: key blocks no query of the block may see are never visited.
      if (blocks.at(q0 / kQueryBlock, k0 / kKeyBlock) == BlockKind::Empty) continue;
      const int keys = std::min(kKeyBlock, m - k0);
      const int cols = round_up(keys, kKeyGroup);
      qk_block(o, h, qrow, rows, k0, cols, w);
      check_scores(w, rows, cols, h, q0);
      if (score.any()) modify_scores(score, score_scale, w, h, q0, rows, k0, keys);
      apply_mask(rule, w, q0, rows, k0, cols, m);
      for (int r = 0; r < rows; ++r)
        w.corr[r] = softmax_row(w.s.data() + r * w.s.cols(), cols, c, w.m[r], w.l[r]);
      pv_block(o, h, rows, k0, cols, w);
    }
    check_rows(w, rows, c, h, q0);
    write_output(w, rows, d_v, t.output, qrow);
  });

  t.timings.total_ms = ms_since(t0);
  t.timings.fused_ms = t.timings.total_ms;
}

}  // namespace

void cpu::fused_bf16_into(const Problem& p, Trace& t) {
  output_in_range(p, Precision::BF16, t, [](const Problem& q, Trace& out) { fused_bf16_into_once(q, out); });
}

Trace cpu_fused_bf16(const Problem& p) {
  validate(p);
  Trace t;
  cpu::fused_bf16_into(p, t);
  return t;
}

namespace {

void staged_bf16_into_once(const Problem& p, const RunOptions& opt, Trace& t) {
  if (opt.pool || !opt.rows.empty())
    throw InputError("pooled views and exact rows come from the fp32 staged chain, not the bf16 one");
  const auto t0 = Clock::now();
  const int n = p.n(), m = p.m(), heads = p.heads, d_v = p.d_v();
  const bool keep = opt.keep_stages;
  cpu::begin_trace(t, p, Variant::Staged, Precision::BF16, keep, opt.output);
  if (keep) t.mask = mask_matrix(p);
  const MaskRule rule = mask_rule(p);
  std::vector<float> slopes;
  const ScoreRule score = score_rule<float>(p, slopes);
  const float score_scale = static_cast<float>(p.scale_value());

  const auto prep = Clock::now();
  const Operands o = make_operands(p);
  const double prep_ms = ms_since(prep);
  const float c = bf16_scale_log2(p);
  const float sqrt_dk = scale_divisor<float>(p);  // sqrt(d_k) by default
  const float temperature = static_cast<float>(p.temperature);
  const int cols = o.m_pad;  // one key block: every key
  const int blocks_per_head = (n + kQueryBlock - 1) / kQueryBlock;
  const std::size_t items = static_cast<std::size_t>(heads) * blocks_per_head;
  const unsigned workers = workers_for(items, p);
  std::vector<Scratch> scratch;
  scratch.reserve(workers);
  for (unsigned i = 0; i < workers; ++i) scratch.emplace_back(o, cols);
  std::vector<std::array<double, 4>> stage_ms(workers, {0, 0, 0, 0});

  parallel_items(items, workers, [&](unsigned id, std::size_t it) {
    Scratch& w = scratch[id];
    std::array<double, 4>& ms = stage_ms[id];
    const int h = static_cast<int>(it % heads);
    const int q0 = static_cast<int>(it / heads) * kQueryBlock;
    const int rows = std::min(kQueryBlock, n - q0);
    const Index qrow = static_cast<Index>(h) * n + q0;
    const Index ld = w.s.cols();
    auto s0 = Clock::now();
    reset_state(w);
    qk_block(o, h, qrow, rows, 0, cols, w);
    check_scores(w, rows, cols, h, q0);
    if (keep)
      for (int r = 0; r < rows; ++r)
        t.scores.row(qrow + r) = Eigen::Map<const Eigen::RowVectorXf>(w.s.data() + r * ld, m);
    ms[0] += ms_since(s0);

    s0 = Clock::now();
    if (score.any()) modify_scores(score, score_scale, w, h, q0, rows, 0, m);
    if (keep)
      for (int r = 0; r < rows; ++r) {
        const auto sc = t.scores.row(qrow + r).array();
        t.scaled.row(qrow + r) = (sc / sqrt_dk).matrix();
        // The score mods' stages, as the fp32 chain forms them from the scaled scores.
        const Eigen::Index i = q0 + r;
        const float* last = t.scaled.row(qrow + r).data();
        if (t.biased.size() > 0) {
          for (int j = 0; j < m; ++j) t.biased(qrow + r, j) = last[j] + score.added(h, static_cast<int>(i), j);
          last = t.biased.row(qrow + r).data();
        }
        if (t.capped.size() > 0) {
          for (int j = 0; j < m; ++j) t.capped(qrow + r, j) = score.cap(last[j]);
          last = t.capped.row(qrow + r).data();
        }
        t.logits.row(qrow + r) =
            ((Eigen::Map<const Eigen::RowVectorXf>(last, m).array() + t.mask.row(i).array()) / temperature).matrix();
      }
    apply_mask(rule, w, q0, rows, 0, cols, m);
    ms[1] += ms_since(s0);

    s0 = Clock::now();
    for (int r = 0; r < rows; ++r)
      w.corr[r] = softmax_row(w.s.data() + r * ld, cols, c, w.m[r], w.l[r]);
    if (keep)
      for (int r = 0; r < rows; ++r)
        t.weights.row(qrow + r) =
            Eigen::Map<const Eigen::RowVectorXf>(w.s.data() + r * ld, m) * (1.f / w.l[r]);
    ms[2] += ms_since(s0);

    s0 = Clock::now();
    if (opt.output) {
      // Causal: the weights past the block's last query are 0; P V stops there.
      int pv_cols = 0;
      for (int r = 0; r < rows; ++r) {
        int lo, hi;
        rule.interval(q0 + r, lo, hi);
        pv_cols = std::max(pv_cols, hi);
      }
      pv_cols = std::min(cols, round_up(pv_cols, kKeyGroup));
      pv_block(o, h, rows, 0, pv_cols, w);
      check_rows(w, rows, c, h, q0);
      write_output(w, rows, d_v, t.output, qrow);
    } else {
      check_rows(w, rows, c, h, q0);
    }
    ms[3] += ms_since(s0);
  });

  double total[4] = {0, 0, 0, 0};
  for (const auto& ms : stage_ms)
    for (int k = 0; k < 4; ++k) total[k] += ms[k] / workers;
  // The rounding of the inputs counts in the qk stage: it is what the products read.
  t.timings.qk_ms = total[0] + prep_ms;
  t.timings.scale_mask_ms = total[1];
  t.timings.softmax_ms = total[2];
  t.timings.pv_ms = total[3];
  t.timings.total_ms = ms_since(t0);
}

}  // namespace

void cpu::staged_bf16_into(const Problem& p, const RunOptions& opt, Trace& t) {
  output_in_range(p, Precision::BF16, t, [&opt](const Problem& q, Trace& out) { staged_bf16_into_once(q, opt, out); });
}

void cpu_staged_bf16_into(const Problem& p, const RunOptions& opt, Trace& t) {
  validate(p);
  cpu::staged_bf16_into(p, opt, t);
}

}  // namespace attnlab
