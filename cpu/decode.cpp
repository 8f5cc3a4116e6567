// The CPU split-KV decode kernel (cpu/decode.h has the algorithm). Up to kRowsAsGemv query rows
// per key/value head (decode proper, grouped heads, a few new tokens) each row is its own pair of
// matrix-vector products over a block of 256 keys, vectorised along d: the block comes from
// memory once and stays in L1/L2 between the rows (a GEMM of so few rows is slower than its rows
// one by one). With head dims that are whole 16-float vectors the products are this file's own
// (`direct` below), for both cache precisions, on AVX-512 and on AVX2 (its vectors are 8 floats
// and its tiles smaller, as 16 registers allow). The keys are then read from K in panels of 16
// keys (made once per problem, kept with its inputs: the layout a serving engine would write each
// new key into), so the scores of 16 keys are the lanes of one FMA chain per row, with no
// horizontal sums; P V runs in register tiles of a few rows that fold the rescale of acc in. The
// memory streams are spread through the products a few lines at a time, into L2: the block's
// value rows while its scores form, the next block's panels while P V runs. A bf16 cache's panels
// hold bf16 pairs: their products are bf16 dot products where the CPU has AVX-512 BF16, and fp32
// FMAs on the pairs widened in registers on AVX2; its value rows are widened in registers. On
// AVX-512 without BF16 a bf16 cache is read from its row-major rows instead (the scores of 16 keys
// from 16 dot products reduced together). Elsewhere the products are Eigen's, on a bf16 cache
// after widening each block to fp32. More rows: one small GEMM per block and product.
// The exp is the fused kernel's exp2_nonpositive (exactly 0 for masked keys) over packets of a row
// padded with -inf to whole packets.
#include "core/gcc12_avx512.h"  // first: see there

#include "cpu/decode.h"

#include "cpu/bf16.h"
#include "cpu/bf16_packets.h"
#include "cpu/chains.h"
#include "cpu/cpu_backend.h"
#include "cpu/online_softmax.h"
#include "core/modify.h"
#include "core/parallel.h"

#include <algorithm>
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif
// The kernel's own products (namespace direct below): AVX-512, or AVX2 with FMA.
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#define ATTNLAB_DECODE_DIRECT 1
#else
#define ATTNLAB_DECODE_DIRECT 0
#endif
// A bf16 cache's keys read from bf16 panels (AVX-512 BF16, and AVX2); AVX-512 without BF16 reads
// its row-major rows.
#if defined(__AVX512BF16__) || (ATTNLAB_DECODE_DIRECT && !defined(__AVX512F__))
#define ATTNLAB_DECODE_BF16_PANELS 1
#else
#define ATTNLAB_DECODE_BF16_PANELS 0
#endif
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <string>
#include <thread>
#include <vector>

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

// Row r's scores of the key block [b0, b0 + cols) (query i of query head h; the rule's offset
// places the queries at the end of the keys in use): the score mods applied to the scores times
// score_scale where p has them, the keys the mask rule blocks set to -inf, the padding to `padded`
// too; returns the largest score left (-inf when none).
float mask_row(float* row, const MaskRule& rule, const ScoreRule& score, float score_scale, int h, int i, int b0,
               int cols, int padded) {
  int lo, hi;
  rule.interval(i, lo, hi);
  const int first = std::clamp(lo - b0, 0, cols), visible = std::clamp(hi - b0, first, cols);
  if (score.any()) modify_row(score, score_scale, row + first, h, i, b0 + first, visible - first);
  std::fill(row, row + first, kNegInf);
  std::fill(row + visible, row + padded, kNegInf);
  if (rule.elementwise())
    for (int j = first; j < visible; ++j)
      if (!rule.visible(i, b0 + j)) row[j] = kNegInf;
  Packet mx = ei::pset1<Packet>(kNegInf);
  for (int j = 0; j < padded; j += kLanes) mx = ei::pmax(mx, ei::ploadu<Packet>(row + j));
  return ei::predux_max(mx);
}

// A software prefetch of `count` values from x, one read request per 64-byte line, with
// __builtin_prefetch's locality (3: into L1, 2: into L2, 1: the Eigen path's choice).
template <int Locality, class E>
void prefetch(const E* x, std::size_t count) {
  const char* c = reinterpret_cast<const char*>(x);
  for (std::size_t b = 0; b < count * sizeof(E); b += 64) __builtin_prefetch(c + b, 0, Locality);
}

// The online-softmax step of one row of block scores (fp32 arithmetic): the row's weights in
// place, m and l updated; returns the factor acc is to be rescaled by (1 when nothing is visible
// so far: the weights are then 0).
float step_fp32(float* row, int padded, float scale, float row_max, float& m, float& l) {
  const float m_old = m, m_new = std::max(m_old, row_max);
  if (m_new == kNegInf) {
    std::fill(row, row + padded, 0.f);
    return 1.f;
  }
  const float alpha = m_old == kNegInf ? 0.f : std::exp((m_old - m_new) * scale);
  const Packet shift = ei::pset1<Packet>(m_new), vscale = ei::pset1<Packet>(scale * kLog2e);
  Packet sum = ei::pset1<Packet>(0.f);
  for (int j = 0; j < padded; j += kLanes) {
    const Packet w = exp2_nonpositive(ei::pmul(ei::psub(ei::ploadu<Packet>(row + j), shift), vscale));
    ei::pstoreu(row + j, w);
    sum = ei::padd(sum, w);
  }
  l = l * alpha + ei::predux(sum);
  m = m_new;
  return alpha;
}

// The same step in the lab's bf16 arithmetic (cpu/bf16.cpp): shift = m c, corr = 2^(m_old c -
// shift), p_j = bf16(2^(s_j c - shift)), exactly 0 for a masked key; l sums the rounded weights.
float step_bf16(float* row, int padded, float c, float row_max, float& m, float& l) {
  const float m_old = m, m_new = std::max(m_old, row_max);
  if (m_new == kNegInf) {
    std::fill(row, row + padded, 0.f);
    return 1.f;
  }
  const float shift = m_new * c;
  const float corr = m_old == kNegInf ? 0.f : bf16_packets::exp2_nonpositive(m_old * c - shift);
  const Packet vshift = ei::pset1<Packet>(-shift), vc = ei::pset1<Packet>(c);
  Packet sum = ei::pzero(vc);
  for (int j = 0; j < padded; j += kLanes) {
    const Packet w =
        bf16_packets::round_bf16(bf16_packets::exp2_nonpositive(ei::pmadd(ei::ploadu<Packet>(row + j), vc, vshift)));
    ei::pstoreu(row + j, w);
    sum = ei::padd(sum, w);
  }
  l = l * corr + ei::predux(sum);
  m = m_new;
  return corr;
}

constexpr int kPanel = 16;  // keys per panel of K

// Panel b of K (its keys [16 b, 16 b + 16)) in the kernel's layout: fp32 (d, 16), element (c, i)
// = K(16 b + i, c); bf16 (d / 2, 16, 2), element (c / 2, i, c % 2), so that one 64-byte row holds
// a pair of values of each of the 16 keys (what one AVX-512 BF16 dot product takes).
template <class E>
constexpr std::size_t panel_offset(int i, int c) {
  if constexpr (std::is_same_v<E, float>)
    return static_cast<std::size_t>(c) * kPanel + i;
  else
    return static_cast<std::size_t>(c / 2) * 2 * kPanel + 2 * i + c % 2;
}

#if ATTNLAB_DECODE_DIRECT
// The kernel's own products, for head dims that are whole 16-float vectors, in both cache
// precisions, on AVX-512 and on AVX2. One source for both widths: a vector (Packet) is
// 16 floats on AVX-512 and 8 on AVX2, a panel row of 16 keys kPanelVecs of them, and the tiles'
// accumulators are sized to the register file (32 vector registers; 16 on AVX2).
namespace direct {

constexpr int kGroup = 16;      // keys whose scores are formed together
constexpr int kAheadGroups = 4;  // key rows prefetched this many groups ahead
constexpr int kPanelVecs = kGroup / kLanes;  // vectors per panel row: 1 (AVX-512), 2 (AVX2)
constexpr bool kWide = kLanes >= 16;  // 32 vector registers
// The accumulators a tile keeps beside its loads and a broadcast: P V's, and the scores'.
constexpr int kAccRegs = kWide ? 24 : 12;
constexpr int kScoreAcc = kWide ? 16 : 12;
constexpr int kScoreRows = kWide ? 8 : 6;  // score rows per tile (each at least one panel)
constexpr int kMaxTileVecs = kWide ? 4 : 2;  // P V works on d_v in pieces of at most 64 (AVX2: 16) values

// A vector of a cache row as fp32: a float load, or bf16 widened (exact).
inline Packet vload(const float* x) { return ei::ploadu<Packet>(x); }
#if defined(__AVX512F__)
inline Packet vload(const std::uint16_t* x) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
#else
inline Packet vload(const std::uint16_t* x) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
#endif

#if defined(__AVX512F__)
// The row-major path of a bf16 cache where the CPU has no AVX-512 BF16 (AVX-512 only).

// v[0..15] summed lane-wise into one vector: lane L holds the sum of v[kOrder[L]]'s lanes. A
// tree of 256-bit, 128-bit and in-lane shuffles, 15 additions; the order it leaves is the 4 x 4
// transpose kOrder, its own inverse, so feeding key kOrder[i] as v[i] leaves key L in lane L.
constexpr int kOrder[16] = {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};
inline __m512 reduce16(const __m512* v) {
  __m512 u[8], w[4], z[2];
  for (int i = 0; i < 8; ++i)
    u[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                         _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE));
  for (int i = 0; i < 4; ++i)
    w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], 0x88),
                         _mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], 0xDD));
  for (int i = 0; i < 2; ++i)
    z[i] = _mm512_add_ps(_mm512_unpacklo_ps(w[2 * i], w[2 * i + 1]), _mm512_unpackhi_ps(w[2 * i], w[2 * i + 1]));
  return _mm512_add_ps(_mm512_shuffle_ps(z[0], z[1], 0x44), _mm512_shuffle_ps(z[0], z[1], 0xEE));
}

// The memory side of one group of keys [g, g + count) of a block: the group's value rows
// requested into L2 (P V reads them once the block's scores are done, so both streams stay in
// flight), and the key rows kAheadGroups groups ahead, up to `limit`, into L1. Then the group's
// 16 key rows in kOrder (a short last group repeats its last key, whose surplus scores the caller
// masks; no row from `limit` on is read).
template <class E>
void group_rows(const E* keys, int d, const E* vals, int d_v, int g, int count, int limit, const E* (&kr)[kGroup]) {
  prefetch<2>(vals + static_cast<std::size_t>(g) * d_v, static_cast<std::size_t>(count) * d_v);
  const int ahead = g + kAheadGroups * kGroup, ahead_keys = std::min(kGroup, limit - ahead);
  if (ahead_keys > 0) prefetch<3>(keys + static_cast<std::size_t>(ahead) * d, static_cast<std::size_t>(ahead_keys) * d);
  for (int i = 0; i < kGroup; ++i) kr[i] = keys + static_cast<std::size_t>(g + std::min(kOrder[i], count - 1)) * d;
}

// The scores s[r * ld + j] = q_r . k_j of `rows` query rows (fp32, d values each) against keys
// [b0, b0 + cols) of `keys` (row-major, d values each), 16 keys at a time; `vals` (d_v values a
// row) and `limit` for group_rows.
template <class E>
void scores(const float* q, int rows, int d, const E* keys, const E* vals, int d_v, int b0, int cols, int limit,
            float* s, Eigen::Index ld) {
  for (int j0 = 0; j0 < cols; j0 += kGroup) {
    const E* kr[kGroup];
    group_rows(keys, d, vals, d_v, b0 + j0, std::min(kGroup, cols - j0), limit, kr);
    for (int r = 0; r < rows; ++r) {
      const float* qr = q + static_cast<std::size_t>(r) * d;
      __m512 a[kGroup];
#pragma GCC unroll 16
      for (int i = 0; i < kGroup; ++i) a[i] = _mm512_setzero_ps();
      for (int c = 0; c < d; c += 16) {
        const __m512 qc = _mm512_loadu_ps(qr + c);
#pragma GCC unroll 16
        for (int i = 0; i < kGroup; ++i) a[i] = _mm512_fmadd_ps(vload(kr[i] + c), qc, a[i]);
      }
      _mm512_storeu_ps(s + r * ld + j0, reduce16(a));
    }
  }
}
#endif

// The scores of `rows` query rows against keys [b0, b0 + cols) of a key/value head's K in panels
// (panels: that head's first panel; b0 a multiple of 16). Panel b holds keys [16 b, 16 b + 16) as
// a (d, 16) block, so a row's scores of a panel are the 16 lanes of one FMA chain over c:
// s(r, 16 b + i) = sum_c q(r, c) K_panel_b(c, i), a broadcast of q(r, c) times one panel row. No
// horizontal sums (the row-major path's shuffle tree); up to 8 rows by NP panels per tile.
// A range of memory requested a few lines at a time, spread through the products instead of in
// one burst (a burst of hundreds of requests fills the core's miss buffers and stalls it).
struct Stream {
  const char* at = nullptr;
  const char* end = nullptr;
  template <int Locality>
  void step(int lines) {
    for (int i = 0; i < lines && at < end; ++i, at += 64) __builtin_prefetch(at, 0, Locality);
  }
};
template <class E>
Stream stream(const E* x, std::size_t count) {
  const char* c = reinterpret_cast<const char*>(x);
  return {c, c + count * sizeof(E)};
}

// R rows of scores against NP panels: s(r, 16 b + i) = sum_c q(r, c) K_panel_b(c, i), each panel
// row times a broadcast of q(r, c) (fp32), or for a bf16 cache of the pair q(r, c), q(r, c + 1)
// (AVX-512 BF16, Q the bf16 bits of q) or of q(r, c) and then q(r, c + 1) times the panel row's
// two halves widened (AVX2, Q fp32), so a row's scores of a panel are the 16 lanes of one FMA
// chain: no horizontal sums (the row-major path's shuffle tree). `vals` is requested `vlines`
// lines per step.
// A panel's 16 keys are kPanelVecs vectors: accumulator a[r][b * kPanelVecs + u] holds keys
// [16 b + u kLanes, 16 b + (u + 1) kLanes) of row r.
template <int R, int NP, class Q, class E>
void panel_tile(const Q* q, int d, const E* pan, float* s, Eigen::Index ld, Stream& vals, int vlines) {
  constexpr int NA = NP * kPanelVecs;
  static_assert(R * NA <= kScoreAcc, "a score tile's accumulators fit beside its loads");
  Packet a[R][NA];
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NA; ++b) a[r][b] = ei::pset1<Packet>(0.f);
  const std::size_t stride = static_cast<std::size_t>(d) * kGroup;
  if constexpr (std::is_same_v<E, float>) {
    for (int c = 0; c < d; ++c) {
      vals.step<2>(vlines);
      Packet k[NA];
      for (int b = 0; b < NA; ++b)
        k[b] = vload(pan + (b / kPanelVecs) * stride + static_cast<std::size_t>(c) * kGroup + (b % kPanelVecs) * kLanes);
      for (int r = 0; r < R; ++r) {
        const Packet w = ei::pset1<Packet>(q[static_cast<std::size_t>(r) * d + c]);
        for (int b = 0; b < NA; ++b) a[r][b] = ei::pmadd(w, k[b], a[r][b]);
      }
    }
  } else {
#if defined(__AVX512BF16__)
    for (int c = 0; c < d; c += 2) {
      vals.step<2>(vlines);
      __m512i k[NP];
      for (int b = 0; b < NP; ++b)
        k[b] = _mm512_loadu_si512(pan + b * stride + static_cast<std::size_t>(c) * kGroup);
      for (int r = 0; r < R; ++r) {
        std::uint32_t pair;
        std::memcpy(&pair, q + static_cast<std::size_t>(r) * d + c, sizeof pair);
        const __m512bh w = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair));
        for (int b = 0; b < NP; ++b) a[r][b] = _mm512_dpbf16_ps(a[r][b], (__m512bh)k[b], w);
      }
    }
#elif !defined(__AVX512F__)
    // AVX2: 8 keys' pairs of a panel row are one 256-bit load of 32-bit lanes, key i's value of c
    // in the low half of lane i and of c + 1 in the high half; widened exactly, c's vector is the
    // lanes shifted up 16 bits and c + 1's the lanes with the low half cleared. Each product of a
    // bf16 key and a bf16-rounded query is exact in fp32, as in dpbf16; the sums are fp32.
    const __m256i high = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
    for (int c = 0; c < d; c += 2) {
      vals.step<2>(vlines);
#pragma GCC unroll 2
      for (int half = 0; half < 2; ++half) {
        Packet k[NA];
        for (int b = 0; b < NA; ++b) {
          const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(
              pan + (b / kPanelVecs) * stride + static_cast<std::size_t>(c) * kGroup + (b % kPanelVecs) * 2 * kLanes));
          k[b] = _mm256_castsi256_ps(half == 0 ? _mm256_slli_epi32(x, 16) : _mm256_and_si256(x, high));
        }
        for (int r = 0; r < R; ++r) {
          const Packet w = ei::pset1<Packet>(q[static_cast<std::size_t>(r) * d + c + half]);
          for (int b = 0; b < NA; ++b) a[r][b] = ei::pmadd(w, k[b], a[r][b]);
        }
      }
    }
#endif
  }
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NA; ++b) ei::pstoreu(s + r * ld + (b / kPanelVecs) * kGroup + (b % kPanelVecs) * kLanes, a[r][b]);
}

// The scores of rows [0, R) of q against the `cols` keys of a block whose panels start at `pan`,
// NP panels at a time (R * NP accumulators, at most 16), then the rest one by one. With `fetch`
// (the first tile of rows of a block) the value rows of each step's keys are requested into L2 for
// P V, a few lines per step of the products (P V in turn requests the next block's panels).
template <int R, class Q, class E>
void panel_rows(const Q* q, int d, const E* pan, const E* vals, int d_v, int cols, bool fetch, float* s,
                Eigen::Index ld) {
  constexpr int NP = std::max(1, std::min(4, kScoreAcc / (R * kPanelVecs)));
  const std::size_t stride = static_cast<std::size_t>(d) * kGroup;
  const int np = (cols + kGroup - 1) / kGroup;
  const int steps = std::is_same_v<E, float> ? d : d / 2;
  const int vlines = static_cast<int>((NP * kGroup * d_v * sizeof(E) / 64 + steps - 1) / steps);
  int b = 0;
  for (; b + NP <= np; b += NP) {
    Stream vs = fetch ? stream(vals + static_cast<std::size_t>(b) * kGroup * d_v,
                               static_cast<std::size_t>(NP) * kGroup * d_v)
                      : Stream{};
    panel_tile<R, NP>(q, d, pan + b * stride, s + b * kGroup, ld, vs, vlines);
  }
  for (; b < np; ++b) {
    Stream vs = fetch ? stream(vals + static_cast<std::size_t>(b) * kGroup * d_v, static_cast<std::size_t>(kGroup) * d_v)
                      : Stream{};
    panel_tile<R, 1>(q, d, pan + b * stride, s + b * kGroup, ld, vs, vlines);
  }
}

// Every row of the block's scores from the panels, rows 8 at a time. The block starts `shift` keys
// into its first panel (a split that does not start on a panel): then the panels' scores go to
// `tmp` (rows, kKeyBlock + 16) first and the block's own columns are copied out.
template <class Q, class E>
void panel_scores(const Q* q, int rows, int d, const E* pan, int shift, const E* vals, int d_v, int cols, float* s,
                  Eigen::Index ld, MatrixF& tmp) {
  if (shift > 0) {
    if (tmp.rows() < rows || tmp.cols() < kKeyBlock + kGroup) tmp.resize(rows, kKeyBlock + kGroup);
    const Eigen::Index tld = tmp.cols();
    panel_scores(q, rows, d, pan, 0, vals - static_cast<std::size_t>(shift) * d_v, d_v, cols + shift, tmp.data(), tld,
                 tmp);
    for (int r = 0; r < rows; ++r) std::copy_n(tmp.data() + r * tld + shift, cols, s + r * ld);
    return;
  }
  for (int r0 = 0; r0 < rows; r0 += kScoreRows) {
    const Q* qr = q + static_cast<std::size_t>(r0) * d;
    float* sr = s + r0 * ld;
    // One row alone leaves the memory to the hardware's prefetchers (its products are light, and
    // the requests would only take the core's miss buffers from them).
    const bool fetch = r0 == 0 && rows > 1;
    static_assert(kScoreRows >= 6 && kScoreRows <= 8, "the switch below has tiles of 1 to 8 rows");
    switch (std::min(kScoreRows, rows - r0)) {  // (the cases past kScoreRows are never reached)
      case 1: panel_rows<1>(qr, d, pan, vals, d_v, cols, fetch, sr, ld); break;
      case 2: panel_rows<2>(qr, d, pan, vals, d_v, cols, fetch, sr, ld); break;
      case 3: panel_rows<3>(qr, d, pan, vals, d_v, cols, fetch, sr, ld); break;
      case 4: panel_rows<4>(qr, d, pan, vals, d_v, cols, fetch, sr, ld); break;
      case 5: panel_rows<5>(qr, d, pan, vals, d_v, cols, fetch, sr, ld); break;
      case 6: panel_rows<6>(qr, d, pan, vals, d_v, cols, fetch, sr, ld); break;
      case 7: panel_rows<std::min(7, kScoreRows)>(qr, d, pan, vals, d_v, cols, fetch, sr, ld); break;
      default: panel_rows<kScoreRows>(qr, d, pan, vals, d_v, cols, fetch, sr, ld); break;
    }
  }
}


// acc(r, :) = acc(r, :) * alpha[r] + sum_j p(r, j) V(j, :) over values [v0, v0 + NV kLanes) of d_v,
// for TR rows at once (their accumulators in registers, each V vector loaded once for all rows).
// TR and NV are compile-time and every loop over them unrolled whole, so that the TR x NV
// accumulators stay in registers from the first zero to the last store (with a run-time row
// count GCC kept them in a stack array: a store beside every FMA).
// With `next` (the next block's key rows or panels) the tile requests `lines` lines of them into
// L2 per value row it reads, so the key stream stays in flight while P V computes. Into L2, not
// L1: a block of keys is larger than L1, and the lines requested early would only push out the
// value rows P V is reading.
template <int NV, int TR, class E>
void pv_tile(const float* p, Eigen::Index ld, const E* vals, int d_v, int v0, int cols, float* acc,
             const float* alpha, Stream& next, int lines) {
  Stream ns = next;  // in a register through the loop, not written back each key
  static_assert(TR * NV <= kAccRegs, "a P V tile's accumulators fit beside its loads");
  Packet a[TR][NV];
#pragma GCC unroll 8
  for (int t = 0; t < TR; ++t)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) a[t][v] = ei::pset1<Packet>(0.f);
  for (int j = 0; j < cols; ++j) {
    const E* vr = vals + static_cast<std::size_t>(j) * d_v + v0;
    ns.step<2>(lines);
    Packet x[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) x[v] = vload(vr + kLanes * v);
#pragma GCC unroll 8
    for (int t = 0; t < TR; ++t) {
      const Packet w = ei::pset1<Packet>(p[t * ld + j]);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) a[t][v] = ei::pmadd(w, x[v], a[t][v]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < TR; ++t)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      float* o = acc + static_cast<std::size_t>(t) * d_v + v0 + kLanes * v;
      ei::pstoreu(o, ei::pmadd(ei::ploadu<Packet>(o), ei::pset1<Packet>(alpha[t]), a[t][v]));
    }
  next = ns;
}

// Rows per P V tile: TR * NV accumulators (at most kAccRegs), NV loads and a broadcast in the
// register file.
constexpr int kPvTileRows = 6;
static_assert(kPvTileRows * kMaxTileVecs <= kAccRegs, "a tile's accumulators fit beside its loads");
// Seven or eight rows in one tile instead: pieces of at most kPvWideVecs vectors, so that its
// accumulators fit as well.
constexpr int kPvWideRows = 8, kPvWideVecs = kWide ? 3 : 1;
static_assert(kPvWideRows * kPvWideVecs <= kAccRegs && kPvWideRows - 1 > kPvTileRows && kPvWideVecs < kMaxTileVecs,
              "the wide tile's accumulators fit, and its pieces are narrower");

// The rows in tiles of at most kPvTileRows rows, as even as they go (13 rows: tiles of 4, 4 and 5, not
// 6, 6 and 1), each tile of its own compile-time height; seven or eight rows in pieces of at most
// kPvWideVecs vectors as one tile (see pv).
template <int NV, class E>
void pv_rows(const float* p, Eigen::Index ld, int rows, const E* vals, int d_v, int v0, int cols, float* acc,
             const float* alpha, Stream& next, int lines) {
  if constexpr (NV <= kPvWideVecs) {
    if (rows > kPvTileRows && rows <= kPvWideRows) {
      if (rows == kPvWideRows)
        pv_tile<NV, kPvWideRows>(p, ld, vals, d_v, v0, cols, acc, alpha, next, lines);
      else
        pv_tile<NV, kPvWideRows - 1>(p, ld, vals, d_v, v0, cols, acc, alpha, next, lines);
      return;
    }
  }
  const int tiles = (rows + kPvTileRows - 1) / kPvTileRows;
  for (int t = 0, r0 = 0; t < tiles; ++t) {
    const int h = (rows - r0) / (tiles - t);  // the rows left over the tiles left, the larger ones last
    const float* pt = p + r0 * ld;
    float* at = acc + static_cast<std::size_t>(r0) * d_v;
    switch (h) {
      case 1: pv_tile<NV, 1>(pt, ld, vals, d_v, v0, cols, at, alpha + r0, next, lines); break;
      case 2: pv_tile<NV, 2>(pt, ld, vals, d_v, v0, cols, at, alpha + r0, next, lines); break;
      case 3: pv_tile<NV, 3>(pt, ld, vals, d_v, v0, cols, at, alpha + r0, next, lines); break;
      case 4: pv_tile<NV, 4>(pt, ld, vals, d_v, v0, cols, at, alpha + r0, next, lines); break;
      case 5: pv_tile<NV, 5>(pt, ld, vals, d_v, v0, cols, at, alpha + r0, next, lines); break;
      default: pv_tile<NV, kPvTileRows>(pt, ld, vals, d_v, v0, cols, at, alpha + r0, next, lines); break;
    }
    r0 += h;
  }
}

// P V of a whole block into acc (rows, d_v), d_v in pieces of a few vectors (below). The
// next block's key rows or panels (`next`, `count` values from there; nullptr after the last
// block) are requested a few lines per key of every tile, so that the key stream stays in flight
// all through P V.
template <class E>
void pv(const float* p, Eigen::Index ld, int rows, const E* vals, int d_v, int cols, float* acc, const float* alpha,
        const E* next, std::size_t count) {
  Stream ns = next ? stream(next, count) : Stream{};
  // Seven or eight rows (eight query heads over one key/value head) make one tile of every row in
  // pieces of at most kPvWideVecs vectors, so that each value row is read once for all of them
  // (two tiles of four read every value twice from L2); other row counts, tiles of at most
  // kPvTileRows rows in pieces of at most kMaxTileVecs vectors.
  const bool one_tile = rows > kPvTileRows && rows <= kPvWideRows;
  const int vecs = one_tile ? kPvWideVecs : kMaxTileVecs;
  const int pieces = (d_v / kLanes + vecs - 1) / vecs;  // d_v is whole vectors here
  const int passes = pieces * (one_tile ? 1 : (rows + kPvTileRows - 1) / kPvTileRows);
  const std::size_t total = count * sizeof(E) / 64 + 1;
  const int lines = static_cast<int>((total + static_cast<std::size_t>(passes) * cols - 1) / (static_cast<std::size_t>(passes) * cols));
  static_assert(kMaxTileVecs >= 2 && kMaxTileVecs <= 4, "the switch below has pieces of 1 to 4 vectors");
  for (int v0 = 0; v0 < d_v; v0 += kLanes * vecs) {  // each piece rescales its own values
    switch (std::min(vecs, (d_v - v0) / kLanes)) {  // (the cases past kMaxTileVecs are never reached)
      case 1: pv_rows<1>(p, ld, rows, vals, d_v, v0, cols, acc, alpha, ns, lines); break;
      case 2: pv_rows<2>(p, ld, rows, vals, d_v, v0, cols, acc, alpha, ns, lines); break;
      case 3: pv_rows<std::min(3, kMaxTileVecs)>(p, ld, rows, vals, d_v, v0, cols, acc, alpha, ns, lines); break;
      default: pv_rows<kMaxTileVecs>(p, ld, rows, vals, d_v, v0, cols, acc, alpha, ns, lines); break;
    }
  }
}

}  // namespace direct
#endif

}  // namespace

bool direct_products(const Problem& p) {
#if ATTNLAB_DECODE_DIRECT
  return p.kv_group * p.n() <= kRowsAsGemv && p.d_k() % 16 == 0 && p.d_v() % 16 == 0;
#else
  static_cast<void>(p);
  return false;
#endif
}

namespace {

// A split's keys [k0, k1) narrowed to those decode_keys_read (k0 >= k1: nothing to read).
void narrow_to_keys_read(const Problem& p, int used, int& k0, int& k1) {
  int lo, hi;
  decode_keys_read(p, used, lo, hi);
  k0 = std::max(k0, lo);
  k1 = std::min(k1, hi);
}

}  // namespace

SplitPlan plan_splits(const Problem& p, unsigned workers, int requested, int keys) {
  if (requested < 0)
    throw InputError("--split must be a number of key splits >= 1 (0: the machine's choice), got " +
                     std::to_string(requested));
  const int m = keys > 0 ? std::min(keys, p.m()) : p.m();
  // The keys cut: all of them for a requested plan; the machine's plan, only those read.
  int lo = 0, hi = m;
  if (requested == 0) decode_keys_read(p, m, lo, hi);
  const int span = hi - lo;
  int splits = requested;
  if (splits == 0) {
    const int want = (static_cast<int>(std::max(1u, workers)) * kItemsPerWorker + p.kv_heads() - 1) / p.kv_heads();
    splits = std::clamp(want, 1, std::max(1, span / kMinSplitKeys));
  }
  splits = std::min(splits, span);
  // The machine's splits are whole key blocks when they are long enough, so only the last block
  // is short; a requested count cuts single keys.
  const int unit = requested == 0 && span / splits >= 4 * kKeyBlock ? kKeyBlock : 1;
  return SplitPlan{.splits = splits, .first = lo, .span = span, .unit = unit};
}

namespace {

// The problem's mask and score rules with the queries placed at the end of the first `keys`
// keys (offset keys - n: the cache in use), and the scale the score mods take.
struct Rules {
  std::vector<float> slopes;  // first: score points into it
  MaskRule mask;
  ScoreRule score;
  float score_scale;
  Rules(const Problem& p, int offset) : mask(mask_rule(p)), score(score_rule<float>(p, slopes)) {
    mask.offset = offset;
    score.offset = offset;
    score_scale = static_cast<float>(p.scale_value());
  }
  Rules(const Rules&) = delete;
};

// K of every key/value head in the decode kernel's panels (panel_offset): head g's panel b starts
// at data[(g * panels + b) * d * 16]; keys past m are 0. Made once per problem, as a serving
// engine writes each new key into its page of the cache. E: float, or bf16 bits from the bf16
// copy of K.
template <class E>
struct KPanels {
  std::vector<E> data;
  int panels = 0;  // per key/value head
};

template <class E>
std::shared_ptr<const KPanels<E>> k_panels(const Problem& p, const E* k) {
  const int G = p.kv_heads(), m = p.m(), d = p.d_k();
  // K as multiplied: rotated by RoPE where p has it, so θ is part of the key.
  const std::string key = std::string(std::is_same_v<E, float> ? "kv/decode_k_panels/" : "kv/decode_k_panels_bf16/") +
                          std::to_string(G) + "/rope" + std::to_string(p.mods.rope_theta);
  return p.derived<KPanels<E>>(key, [&](const ProblemInputs&) {
    KPanels<E> kp;
    kp.panels = (m + 15) / 16;
    kp.data.assign(static_cast<std::size_t>(G) * kp.panels * d * 16, E{});
    for (int g = 0; g < G; ++g)
      for (int j = 0; j < m; ++j) {
        const E* row = k + (static_cast<std::size_t>(g) * m + j) * d;
        E* pan = kp.data.data() + (static_cast<std::size_t>(g) * kp.panels + j / 16) * d * 16;
        for (int c = 0; c < d; ++c) pan[panel_offset<E>(j % 16, c)] = row[c];
      }
    return kp;
  }, std::is_same_v<E, float> ? "kv/decode_k_panels/" : "kv/decode_k_panels_bf16/");
}

// Q_g (the kv_group query heads of key/value head g, consecutive rows) as the kernel multiplies
// it. rotated_qk turns the queries at the end of all m keys; when the kernel reads only the first
// off + n (a cache with room for more keys, as the viewer's decode view grows it) the queries sit
// at off + i, and RoPE turns Q_g's rows here at those positions, into `local`.
const float* queries_of(const Problem& p, const RotatedQK* rot, int g, int off, MatrixF& local) {
  const int n = p.n(), rows = p.kv_group * n, d = p.d_k();
  const Eigen::Index first = static_cast<Eigen::Index>(g) * rows;
  if (!rot || off == p.causal_offset()) return kernel_q(p, rot).data() + first * d;
  local.resize(rows, d);
  for (int r = 0; r < rows; ++r)
    local.row(r) = rope_rotate(MatrixD(p.q().row(first + r).cast<double>()), off + r % n, p.mods.rope_theta)
                       .cast<float>();
  return local.data();
}

}  // namespace

void prepare_keys(const Problem& p) {
  const std::shared_ptr<const RotatedQK> rot = rotated_qk(p);
  if (direct_products(p)) k_panels(p, kernel_k(p, rot.get()).data());
}

void split_partial(const Problem& p, int g, int k0, int k1, Partial& out, MatrixF& scratch, int keys) {
  const int n = p.n(), group = p.kv_group, rows = group * n, d_k = p.d_k(), d_v = p.d_v();
  const int m = p.m(), off = (keys > 0 ? keys : m) - n;
  out.m.assign(rows, kNegInf);
  out.l.assign(rows, 0.f);
  out.acc.setZero(rows, d_v);
  narrow_to_keys_read(p, off + n, k0, k1);  // a window's keys only
  if (k0 >= k1) return;                     // none: the empty state, nothing made for it
  const Rules rules(p, off);
  const float scale = online_scale(p);
  const Eigen::Index kv = static_cast<Eigen::Index>(g) * m;
  const bool direct = direct_products(p);
  // Q and K as multiplied (rotated by RoPE where p has it); Q_g: the kv_group query heads of
  // key/value head g are consecutive rows of Q.
  const std::shared_ptr<const RotatedQK> rot = rotated_qk(p);
  MatrixF turned;
  const float* q = queries_of(p, rot.get(), g, off, turned);
  const ConstRows qg(q, rows, d_k);
  const float* k_all = kernel_k(p, rot.get()).data() + kv * d_k;
  const float* v_all = p.v().data() + kv * d_v;
  const std::shared_ptr<const KPanels<float>> kp =
      direct ? k_panels(p, kernel_k(p, rot.get()).data()) : nullptr;
  [[maybe_unused]] const float* panels =
      kp ? kp->data.data() + static_cast<std::size_t>(g) * kp->panels * d_k * 16 : nullptr;

  if (scratch.rows() < rows || scratch.cols() < kKeyBlock) scratch.resize(rows, kKeyBlock);
  const Eigen::Index ld = scratch.cols();
  std::vector<float> alpha(rows);
  MatrixF tmp;  // the panels' scores of a block that starts inside a panel

  for (int b0 = k0; b0 < k1; b0 += kKeyBlock) {
    const int cols = std::min(kKeyBlock, k1 - b0);
    const int padded = round_up(cols, kLanes);
    const ConstRows kb(k_all + static_cast<Eigen::Index>(b0) * d_k, cols, d_k);
    const ConstRows vb(v_all + static_cast<Eigen::Index>(b0) * d_v, cols, d_v);
    RowsMap s(scratch.data(), rows, cols, Eigen::OuterStride<>(ld));
    if (direct) {
#if ATTNLAB_DECODE_DIRECT
      direct::panel_scores(q, rows, d_k, panels + static_cast<std::size_t>(b0 / 16) * 16 * d_k, b0 % 16,
                           v_all + static_cast<Eigen::Index>(b0) * d_v, d_v, cols, scratch.data(), ld, tmp);
#endif
    } else {
      // The next block's K and V requested now, so that their reads overlap this block's work.
      if (b0 + kKeyBlock < k1) {
        const int next = std::min(kKeyBlock, k1 - b0 - kKeyBlock);
        prefetch<1>(k_all + static_cast<Eigen::Index>(b0 + kKeyBlock) * d_k, static_cast<std::size_t>(next) * d_k);
        prefetch<1>(v_all + static_cast<Eigen::Index>(b0 + kKeyBlock) * d_v, static_cast<std::size_t>(next) * d_v);
      }
      if (rows <= kRowsAsGemv) {
        for (int r = 0; r < rows; ++r) s.row(r).noalias() = qg.row(r) * kb.transpose();
      } else {
        s.noalias() = qg * kb.transpose();
      }
    }
    for (int r = 0; r < rows; ++r) {
      float* row = scratch.data() + r * ld;
      const float mx = mask_row(row, rules.mask, rules.score, rules.score_scale, g * group + r / n, r % n, b0, cols,
                                padded);
      alpha[r] = step_fp32(row, padded, scale, mx, out.m[r], out.l[r]);
    }
    if (direct) {
#if ATTNLAB_DECODE_DIRECT
      // The panels of the next block (from the one it starts in); none for one row (above).
      const float* next =
          b0 + cols < k1 && rows > 1 ? panels + static_cast<std::size_t>((b0 + cols) / 16) * 16 * d_k : nullptr;
      const int next_keys = std::min(kKeyBlock, k1 - b0 - cols) + 16;
      direct::pv(scratch.data(), ld, rows, vb.data(), d_v, cols, out.acc.data(), alpha.data(), next,
                 static_cast<std::size_t>(next_keys) * d_k);
#endif
    } else {
      for (int r = 0; r < rows; ++r)
        if (alpha[r] != 1.f) out.acc.row(r) *= alpha[r];
      if (rows <= kRowsAsGemv) {
        for (int r = 0; r < rows; ++r) out.acc.row(r).noalias() += s.row(r) * vb;
      } else {
        out.acc.noalias() += s * vb;
      }
    }
  }
}

std::shared_ptr<const Bf16KV> bf16_cache(const Problem& p) {
  // K as multiplied: rotated by RoPE where p has it (θ is part of the key).
  const std::shared_ptr<const RotatedQK> rot = rotated_qk(p);
  const MatrixF& k = kernel_k(p, rot.get());
  return p.derived<Bf16KV>("kv/bf16/rope" + std::to_string(p.mods.rope_theta), [&](const ProblemInputs& in) {
    Bf16KV b;
    b.k.resize(static_cast<std::size_t>(k.size()));
    b.v.resize(static_cast<std::size_t>(in.v.size()));
    for (std::size_t i = 0; i < b.k.size(); ++i) b.k[i] = bf16_bits(k.data()[i]);
    for (std::size_t i = 0; i < b.v.size(); ++i) b.v[i] = bf16_bits(in.v.data()[i]);
    return b;
  }, "kv/bf16/");
}

void split_partial_bf16(const Problem& p, const Bf16KV& kvb, int g, int k0, int k1, Partial& out, MatrixF& scratch,
                        MatrixF& kbuf, int keys) {
  const int n = p.n(), group = p.kv_group, rows = group * n, d_k = p.d_k(), d_v = p.d_v();
  const int m = p.m(), off = (keys > 0 ? keys : m) - n;
  out.m.assign(rows, kNegInf);
  out.l.assign(rows, 0.f);
  out.acc.setZero(rows, d_v);
  narrow_to_keys_read(p, off + n, k0, k1);  // a window's keys only
  if (k0 >= k1) return;                     // none: the empty state, nothing made for it
  const Rules rules(p, off);
  const float c = bf16_scale_log2(p);
  const Eigen::Index kv = static_cast<Eigen::Index>(g) * m;
  const bool direct = direct_products(p);
  const std::shared_ptr<const RotatedQK> rot = rotated_qk(p);  // Q as multiplied
  MatrixF turned;
  const MatrixF qg = bf16_round(MatrixF(ConstRows(queries_of(p, rot.get(), g, off, turned), rows, d_k)));
  const std::uint16_t* k_all = kvb.k.data() + kv * d_k;
  const std::uint16_t* v_all = kvb.v.data() + kv * d_v;
#if ATTNLAB_DECODE_BF16_PANELS
#if defined(__AVX512BF16__)
  std::vector<std::uint16_t> qb(static_cast<std::size_t>(qg.size()));  // Q_g's bf16 bits (exact: qg is rounded)
  for (std::size_t i = 0; i < qb.size(); ++i) qb[i] = bf16_bits(qg.data()[i]);
#else
  const float* qb = qg.data();  // AVX2: the rounded values, times the panels' widened halves
#endif
  // Where the CPU has AVX-512 BF16, or on AVX2, the keys are read from the bf16 panels of K.
  const auto kp = direct ? k_panels(p, kvb.k.data()) : nullptr;
  const std::uint16_t* panels = kp ? kp->data.data() + static_cast<std::size_t>(g) * kp->panels * d_k * 16 : nullptr;
  MatrixF tmp;  // the panels' scores of a block that starts inside a panel
#endif

  if (scratch.rows() < rows || scratch.cols() < kKeyBlock) scratch.resize(rows, kKeyBlock);
  if (!direct && (kbuf.rows() < kKeyBlock || kbuf.cols() < std::max(d_k, d_v)))
    kbuf.resize(kKeyBlock, std::max(d_k, d_v));
  const Eigen::Index ld = scratch.cols();
  std::vector<float> corr(rows);
  // A block of bf16 rows widened to fp32 (exact) into kbuf, as a (cols, d) matrix.
  const auto widen = [&](const std::uint16_t* src, int cols, int d) {
    float* dst = kbuf.data();
    const std::size_t count = static_cast<std::size_t>(cols) * d;
    std::size_t i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= count; i += 16) _mm512_storeu_ps(dst + i, direct::vload(src + i));
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
    if (direct) {
#if ATTNLAB_DECODE_BF16_PANELS
      direct::panel_scores(&qb[0], rows, d_k, panels + static_cast<std::size_t>(b0 / 16) * 16 * d_k, b0 % 16,
                           v_all + static_cast<Eigen::Index>(b0) * d_v, d_v, cols, scratch.data(), ld, tmp);
#elif defined(__AVX512F__)
      direct::scores(qg.data(), rows, d_k, k_all, v_all, d_v, b0, cols, k1, scratch.data(), ld);
#endif
    } else {
      const ConstRows kb = widen(k_all + static_cast<Eigen::Index>(b0) * d_k, cols, d_k);
      for (int r = 0; r < rows; ++r) s.row(r).noalias() = qg.row(r) * kb.transpose();
    }
    for (int r = 0; r < rows; ++r) {
      float* row = scratch.data() + r * ld;
      const float mx = mask_row(row, rules.mask, rules.score, rules.score_scale, g * group + r / n, r % n, b0, cols,
                                padded);
      corr[r] = step_bf16(row, padded, c, mx, out.m[r], out.l[r]);
    }
    if (direct) {
#if ATTNLAB_DECODE_DIRECT
#if ATTNLAB_DECODE_BF16_PANELS
      // The next block's panels (from the one it starts in); none for one row (see panel_scores).
      const std::uint16_t* next =
          b0 + cols < k1 && rows > 1 ? panels + static_cast<std::size_t>((b0 + cols) / 16) * 16 * d_k : nullptr;
      const int next_keys = std::min(kKeyBlock, k1 - b0 - cols) + 16;
#else
      const std::uint16_t* next = b0 + cols < k1 ? k_all + static_cast<Eigen::Index>(b0 + cols) * d_k : nullptr;
      const int next_keys = std::min(kKeyBlock, k1 - b0 - cols);
#endif
      direct::pv(scratch.data(), ld, rows, v_all + static_cast<Eigen::Index>(b0) * d_v, d_v, cols, out.acc.data(),
                 corr.data(), next, static_cast<std::size_t>(next_keys) * d_k);
#endif
    } else {
      for (int r = 0; r < rows; ++r)
        if (corr[r] != 1.f) out.acc.row(r) *= corr[r];
      const ConstRows vb = widen(v_all + static_cast<Eigen::Index>(b0) * d_v, cols, d_v);
      for (int r = 0; r < rows; ++r) out.acc.row(r).noalias() += s.row(r) * vb;
    }
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
  const float scale = online_scale(p);
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
      const cpu::online::RowOverflow what = cpu::online::row_overflow(mr, lr, acc.allFinite(), scale);
      if (what != cpu::online::RowOverflow::None) cpu::online::throw_overflow(what, h, i, precision);
      output.row(static_cast<Eigen::Index>(h) * n + i) = acc / lr;
    }
  }
}

namespace {

void decode_into_once(const Problem& p, const RunOptions& opt, Trace& t) {
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

}  // namespace

void cpu::decode_into(const Problem& p, const RunOptions& opt, Trace& t) {
  output_in_range(p, opt.precision, t, [&opt](const Problem& q, Trace& out) { decode_into_once(q, opt, out); });
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
