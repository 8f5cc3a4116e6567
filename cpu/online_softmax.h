// The CPU fused kernel's per-tile update (cpu/fused.cpp): the online softmax step of
// FlashAttention-2's Algorithm 1 on a tile of kTileCols queries (vector lanes) by a block of keys,
// and the register-tiled product it uses. In a header so that the kernel and the online-softmax
// walk (cpu/walk.cpp, `attnlab walk`, the viewer's walk view) run one and the same function: what
// the walk shows is what the kernel computes. Units: the running max m is kept in raw scores
// (q . k, before the scaling), and the scale 1 / (sqrt(d_k) T) is applied inside the exp.
// Every caller is built with the same -march (set globally by the top-level CMakeLists.txt), so
// these inline functions have one definition in the program.
#pragma once

#include "core/messages.h"
#include "core/modifications.h"
#include "core/types.h"
#include "cpu/bf16_packets.h"
#include "cpu/values_range.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace attnlab::cpu::online {

namespace ei = Eigen::internal;
using Index = Eigen::Index;
using Packet = ei::packet_traits<float>::type;  // Packet16f (AVX-512), Packet8f (AVX2), ...
constexpr int kLanes = ei::packet_traits<float>::size;
// The int packet of the same width (for exp's 2^n). A vector type as a class template argument
// draws GCC's -Wignored-attributes (its alignment attribute is not part of the type); harmless.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wignored-attributes"
using PacketI = ei::unpacket_traits<Packet>::integer_packet;
using PacketSquare = ei::PacketBlock<Packet, kLanes>;  // kLanes packets, for ptranspose
#pragma GCC diagnostic pop

// A square of kLanes packets transposed in place. With AVX-512, four rounds of sixteen shuffles
// (pairs of floats, pairs of doubles, then 128-bit quarters twice); Eigen's ptranspose of 16 packets
// goes through 256-bit halves at about twice the cost, which showed in the fused kernel's profile
// when a query block meets few key blocks (a sliding window).
inline void transpose_square(PacketSquare& b) {
#if defined(__AVX512F__)
  if constexpr (kLanes == 16) {
    __m512 t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
      t[i] = _mm512_unpacklo_ps(b.packet[i], b.packet[i + 1]);
      t[i + 1] = _mm512_unpackhi_ps(b.packet[i], b.packet[i + 1]);
    }
    // u[4 g + j]: in its 128-bit quarter q, column 4 q + j of rows 4 g .. 4 g + 3.
    for (int g = 0; g < 16; g += 4) {
      const __m512d t0 = _mm512_castps_pd(t[g]), t1 = _mm512_castps_pd(t[g + 1]);
      const __m512d t2 = _mm512_castps_pd(t[g + 2]), t3 = _mm512_castps_pd(t[g + 3]);
      u[g] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
      u[g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
      u[g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
      u[g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
    }
    // Column 4 q + j: quarter q of u[j], u[4 + j], u[8 + j], u[12 + j].
    for (int j = 0; j < 4; ++j) {
      const __m512 ab02 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x88), ab13 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xdd);
      const __m512 cd02 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x88),
                   cd13 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xdd);
      b.packet[j] = _mm512_shuffle_f32x4(ab02, cd02, 0x88);
      b.packet[8 + j] = _mm512_shuffle_f32x4(ab02, cd02, 0xdd);
      b.packet[4 + j] = _mm512_shuffle_f32x4(ab13, cd13, 0x88);
      b.packet[12 + j] = _mm512_shuffle_f32x4(ab13, cd13, 0xdd);
    }
    return;
  }
#endif
  ei::ptranspose(b);
}

// dst (cols, rows) = src (rows, cols) transposed; src row r at src + r * lds, dst row c at
// dst + c * ldd. Squares of kLanes by kLanes a packet at a time, the rest one element at a time.
// With col_scale (cols), dst(c, r) = src(r, c) * col_scale[c].
inline void transpose_into(const float* src, Index lds, int rows, int cols, float* dst, Index ldd,
                           [[maybe_unused]] bool stream = false, const float* col_scale = nullptr) {
  const int whole_r = rows - rows % kLanes, whole_c = cols - cols % kLanes;
  for (int r0 = 0; r0 < whole_r; r0 += kLanes)
    for (int c0 = 0; c0 < whole_c; c0 += kLanes) {
      PacketSquare block;
      for (int r = 0; r < kLanes; ++r) block.packet[r] = ei::ploadu<Packet>(src + (r0 + r) * lds + c0);
      if (col_scale != nullptr) {
        const Packet s = ei::ploadu<Packet>(col_scale + c0);
        for (int r = 0; r < kLanes; ++r) block.packet[r] = ei::pmul(block.packet[r], s);
      }
      transpose_square(block);
#if defined(__AVX512F__)
      if constexpr (kLanes == 16)
        if (stream && reinterpret_cast<std::uintptr_t>(dst + r0) % 64 == 0 && ldd % 16 == 0) {
          for (int c = 0; c < kLanes; ++c) _mm512_stream_ps(dst + (c0 + c) * ldd + r0, block.packet[c]);
          continue;
        }
#endif
      for (int c = 0; c < kLanes; ++c) ei::pstoreu(dst + (c0 + c) * ldd + r0, block.packet[c]);
    }
  for (int r = 0; r < rows; ++r)
    for (int c = r < whole_r ? whole_c : 0; c < cols; ++c)
      dst[c * ldd + r] = col_scale != nullptr ? src[r * lds + c] * col_scale[c] : src[r * lds + c];
}

// Whether every one of the `count` floats at x is finite (x - x is 0 exactly for those, NaN for
// an infinity or a NaN), a packet at a time.
inline bool all_finite(const float* x, Index count) {
  const Index whole = count - count % kLanes;
  Packet z = ei::pset1<Packet>(0.f);
  for (Index i = 0; i < whole; i += kLanes) {
    const Packet v = ei::ploadu<Packet>(x + i);
    z = ei::padd(z, ei::psub(v, v));
  }
  float rest = 0.f;
  for (Index i = whole; i < count; ++i) rest += x[i] - x[i];
  return ei::predux(z) + rest == 0.f;
}

// The micro-tile: kTileRows rows by kTileVecs packets. Its kTileRows * kTileVecs accumulators,
// kTileVecs loaded B packets and one broadcast fit the register file (32 zmm; 16 ymm for AVX2).
constexpr int kTileVecs = 2;
constexpr int kTileCols = kTileVecs * kLanes;  // queries per tile: 32 (AVX-512), 16 (AVX2)
constexpr int kTileRows = kLanes >= 16 ? 8 : 6;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The CPU fused kernel's key block (cpu/fused.cpp): it walks a head's keys this many at a time.
// Here because the walk (cpu/walk.h) reproduces the kernel bit for bit at this tile size.
// Key blocks of 64 keep a block's Pᵀ (64 keys × 64 queries) and its V rows in L1 together while
// P·V's tiles re-read them (at 128 they exceed L1); measured, 64 and 128 are within the noise of
// each other (docs/PERFORMANCE.md).
constexpr int kFusedKeyBlock = 64;

// The kernels take exp(x) as 2^(x log2 e) (cpu/bf16_packets.h exp2_nonpositive, every CPU kernel's
// exp): every caller's x is a difference of scores times a scale, and the scale is multiplied by
// kLog2e once per call (one rounding), so the conversion costs nothing per element.
constexpr float kLog2e = 1.44269504088896341f;
using bf16_packets::exp2_nonpositive;

// tanh(y) = y + y z P(z), z = y²: soft_cap's polynomial for |y| <= 1.
inline Packet tanh_within_one(const Packet& y) {
  const Packet z = ei::pmul(y, y);
  Packet p = ei::pmadd(z, ei::pset1<Packet>(-3.5844946978613734e-04f), ei::pset1<Packet>(2.301365602761507e-03f));
  p = ei::pmadd(z, p, ei::pset1<Packet>(-7.946123369038105e-03f));
  p = ei::pmadd(z, p, ei::pset1<Packet>(2.14866790920496e-02f));
  p = ei::pmadd(z, p, ei::pset1<Packet>(-5.3879812359809875e-02f));
  p = ei::pmadd(z, p, ei::pset1<Packet>(1.3332344591617584e-01f));
  p = ei::pmadd(z, p, ei::pset1<Packet>(-3.3333295583724976e-01f));
  return ei::pmadd(ei::pmul(y, z), p, y);
}

// The soft-cap C tanh(x / C) of a packet of scaled scores x (inv = 1 / C, cap = C), lane by lane.
// Within the cap (|x / C| <= 1, the usual case: a cap is set above the logits it should leave
// alone), tanh(y) = y + y z P(z), z = y², P of degree 6 fitted to tanh's relative error on [0, 1]
// (within 0.9 ulp of tanh in fp32); beyond it, Eigen's rational tanh (clamped at ±8, with a
// division). A packet with no lane beyond the cap computes only the polynomial (about half the
// instructions of the rational one, and no division); one with a lane beyond computes both and
// takes each lane's own, so that a lane's value never depends on its neighbours (the walk's
// one-query tiles are the kernel's tiles bit for bit, and so are the backward's). Both are
// checked against tanh in double (tests/test_modifications.cpp).
inline Packet soft_cap(const Packet& x, const Packet& inv, const Packet& cap) {
  const Packet y = ei::pmul(x, inv);
  const Packet a = ei::pabs(y), one = ei::pset1<Packet>(1.f);
  // Lanes with "not |y| <= 1", a NaN among them (it takes Eigen's path and stays NaN).
  const Packet beyond = ei::pcmp_lt_or_nan(one, a);
  if (!ei::predux_any(beyond)) return ei::pmul(tanh_within_one(y), cap);
  Packet t = ei::ptanh(y);
  if (ei::predux_any(ei::pcmp_le(a, one))) t = ei::pselect(beyond, t, tanh_within_one(y));
  return ei::pmul(t, cap);
}

// c (R, kTileCols) = a (R, depth) b (depth, kTileCols), or, when col_scale is given,
// c = c * col_scale + a b with col_scale (kTileCols) per column. a(r, k) = a[r * a_row + k * a_k]
// is broadcast; row k of b starts at b + k * ldb; row r of c at c + r * ldc.
// The accumulators are a fixed-size array the compiler keeps in registers. They start at 0 and
// the old c is added at the end: a key block's sum is formed on its own, then added to the
// running acc (one long sequential fp32 sum over all keys would lose accuracy as N grows).
// Every loop over the tile is unrolled whole: GCC then keeps acc in registers from the first
// zero to the last store (left to itself it unrolled only the main loop and copied acc through
// the stack before and after it, a cost that a short depth does not hide). Never inlined: inlined
// into the fused forward's block loop, GCC ran short of integer registers there and reloaded
// the row offsets of the broadcasts from the stack in every step of the main loop (called, it
// keeps them in registers; the speed difference is within the VM's noise).
template <int R, int V = kTileVecs>
__attribute__((noinline))
void tile_madd(const float* a, Index a_row, Index a_k, const float* b, Index ldb, int depth,
               float* c, Index ldc, const float* col_scale) {
  Packet acc[R][V];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) acc[r][v] = ei::pset1<Packet>(0.f);
  for (int k = 0; k < depth; ++k) {
    Packet bk[V];
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) bk[v] = ei::ploadu<Packet>(b + k * ldb + v * kLanes);
    const float* ak = a + k * a_k;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const Packet ar = ei::pset1<Packet>(ak[r * a_row]);
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) acc[r][v] = ei::pmadd(ar, bk[v], acc[r][v]);
    }
  }
  if (col_scale != nullptr) {
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) {
      const Packet s = ei::ploadu<Packet>(col_scale + v * kLanes);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
        acc[r][v] = ei::pmadd(ei::ploadu<Packet>(c + r * ldc + v * kLanes), s, acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) ei::pstoreu(c + r * ldc + v * kLanes, acc[r][v]);
}

using TileFn = void (*)(const float*, Index, Index, const float*, Index, int, float*, Index,
                        const float*);
template <int V, int... R>
constexpr std::array<TileFn, sizeof...(R)> tile_table(std::integer_sequence<int, R...>) {
  return {&tile_madd<R + 1, V>...};
}
// The wide tile, for products whose columns come in whole kWideCols: with 32 vector registers
// (AVX-512) twice kTileCols columns by 6 rows, fewer loads per multiply-add; with 16 (AVX2) the
// narrow tile already fills the register file, and the wide one is the same tile.
constexpr int kWideVecs = (kLanes >= 16 ? 2 : 1) * kTileVecs;
constexpr int kWideCols = kWideVecs * kLanes;
constexpr int kWideRows = kLanes >= 16 ? 6 : kTileRows;
template <int V>
constexpr int kRowsOf = V == kTileVecs ? kTileRows : kWideRows;
template <int V>
inline constexpr auto kTileFns = tile_table<V>(std::make_integer_sequence<int, kRowsOf<V>>{});

// tile_madd over `rows` rows of a and c: whole tiles of kRowsOf<V> rows, then one shorter tile;
// V packets of columns (kTileVecs by default).
template <int V = kTileVecs>
inline void rows_madd(int rows, const float* a, Index a_row, Index a_k, const float* b, Index ldb,
               int depth, float* c, Index ldc, const float* col_scale) {
  constexpr int kR = kRowsOf<V>;
  int r0 = 0;
  for (; r0 + kR <= rows; r0 += kR)
    tile_madd<kR, V>(a + r0 * a_row, a_row, a_k, b, ldb, depth, c + r0 * ldc, ldc, col_scale);
  if (r0 < rows)
    kTileFns<V>[rows - r0 - 1](a + r0 * a_row, a_row, a_k, b, ldb, depth, c + r0 * ldc, ldc,
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
// The sum runs in four chains, and a key's chain is its own index mod 4 (`first`: the index of
// st's first key in the head's keys): a range widened by masked keys, whose weights are exactly
// 0, then adds the same terms to the same chains in the same order. So the kernel, which visits
// only the keys a tile may see, and the walk, which visits whole key blocks, agree bit for bit
// however each one cuts the range.
inline void online_softmax_step(float* st, Index ld, int keys, float scale, const SoftmaxState& s, int first = 0) {
  const Packet vscale = ei::pset1<Packet>(scale * kLog2e);
  const Packet neg_inf = ei::pset1<Packet>(kNegInf);
  // Four partial maxes and sums: independent chains, so the loops are not latency-bound, and
  // each sum adds a quarter of the keys (a long sequential fp32 sum would cost accuracy).
  constexpr int kChains = 4;
  const int whole = keys - keys % kChains;
  // Keys [0, lead) complete the group of four that st's first key falls in (key j in chain
  // (first + j) mod 4); [lead, body_end) are whole groups (key j + c in chain c); the keys after
  // them begin a last group (key body_end + c in chain c).
  const int lead = std::min(keys, (kChains - first % kChains) % kChains);
  const int body_end = lead + (keys - lead) / kChains * kChains;
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
    const Packet alpha = exp2_nonpositive(ei::pmul(ei::psub(m_old, shift), vscale));
    auto weight = [&](int j) {  // P^T(j) = exp((S^T(j) - shift) * scale), stored over S^T(j)
      float* at = col + j * ld;
      const Packet p = exp2_nonpositive(ei::pmul(ei::psub(ei::ploadu<Packet>(at), shift), vscale));
      ei::pstoreu(at, p);
      return p;
    };
    Packet sum[kChains];
    for (int c = 0; c < kChains; ++c) sum[c] = ei::pzero(m_new);
    for (int j = 0; j < lead; ++j) sum[(first + j) % kChains] = ei::padd(sum[(first + j) % kChains], weight(j));
    for (int j = lead; j < body_end; j += kChains)
      for (int c = 0; c < kChains; ++c) sum[c] = ei::padd(sum[c], weight(j + c));
    for (int j = body_end; j < keys; ++j) sum[j - body_end] = ei::padd(sum[j - body_end], weight(j));
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
inline void update_tile(float* st, Index ld, int keys, const float* v_blk, int d_v, float* acct,
                 float scale, const SoftmaxState& s, int first = 0) {
  online_softmax_step(st, ld, keys, scale, s, first);
  rows_madd(d_v, v_blk, 1, d_v, st, ld, keys, acct, ld, s.alpha);  // a(r, j) = V_blk(j, r)
}

// The score mods (core/modifications.h) on a tile's raw scores st (keys [k0, k0 + keys) by
// kTileCols query lanes from query i0 of head h, `lanes` of them real): st = mod(st * score_scale), one packet of queries at a time for ALiBi and the cap,
// the bias (its rows are queries) through transposed blocks.
inline void modify_tile(const ScoreRule& r, float score_scale, float* st, Index ld, int h, int i0, int lanes, int k0,
                        int keys) {
  // One pass over the tile for the scaling, ALiBi and the cap, in that order per element; a bias
  // (added one element at a time, between ALiBi and the cap) splits it in two.
  const Packet vscale = ei::pset1<Packet>(score_scale);
  alignas(64) float pos[kTileCols];  // ALiBi's query positions in the lanes
  for (int l = 0; l < kTileCols; ++l) pos[l] = static_cast<float>(i0 + l + r.offset);
  const Packet slope = ei::pset1<Packet>(r.slopes != nullptr ? r.slopes[h] : 0.f);
  // s / C as s times 1 / C (a division per packet would cost more than the exp that follows).
  const bool cap_now = r.softcap > 0 && r.bias == nullptr;
  const Packet cap = ei::pset1<Packet>(r.softcap), inv = ei::pset1<Packet>(r.softcap > 0 ? 1.f / r.softcap : 0.f);
  for (int j = 0; j < keys; ++j) {
    const Packet key = ei::pset1<Packet>(static_cast<float>(k0 + j));
    for (int v = 0; v < kTileVecs; ++v) {
      float* at = st + j * ld + v * kLanes;
      Packet x = ei::pmul(ei::ploadu<Packet>(at), vscale);
      if (r.slopes != nullptr)  // -slope |pos_i - j|
        x = ei::psub(x, ei::pmul(slope, ei::pabs(ei::psub(ei::pload<Packet>(pos + v * kLanes), key))));
      if (cap_now) x = soft_cap(x, inv, cap);
      ei::pstoreu(at, x);
    }
  }
  if (r.bias == nullptr) return;
  const float* b = r.bias + (static_cast<std::size_t>(r.bias_per_head ? h : 0) * r.n + i0) * r.m + k0;
  // The bias's rows are queries, the tile's lanes are: kLanes rows of kLanes keys at a time are
  // loaded and transposed into packets of query lanes, then added, one add per element as in the
  // loop after it (the same bits), which takes the lanes and keys left over.
  const int whole_lanes = lanes - lanes % kLanes, whole_keys = keys - keys % kLanes;
  for (int l0 = 0; l0 < whole_lanes; l0 += kLanes)
    for (int j0 = 0; j0 < whole_keys; j0 += kLanes) {
      PacketSquare block;
      for (int l = 0; l < kLanes; ++l) block.packet[l] = ei::ploadu<Packet>(b + static_cast<std::size_t>(l0 + l) * r.m + j0);
      transpose_square(block);
      for (int j = 0; j < kLanes; ++j) {
        float* at = st + (j0 + j) * ld + l0;
        ei::pstoreu(at, ei::padd(ei::ploadu<Packet>(at), block.packet[j]));
      }
    }
  for (int l = 0; l < lanes; ++l)
    for (int j = l < whole_lanes ? whole_keys : 0; j < keys; ++j) st[j * ld + l] += b[static_cast<std::size_t>(l) * r.m + j];
  if (r.softcap > 0)
    for (int j = 0; j < keys; ++j)
      for (int v = 0; v < kTileVecs; ++v) {
        float* at = st + j * ld + v * kLanes;
        ei::pstoreu(at, soft_cap(ei::ploadu<Packet>(at), inv, cap));
      }
}

// The same score mods on one query row's raw scores s of keys [k0, k0 + keys) (query i of head h;
// keys contiguous: the bf16 kernels' and the decode kernel's layout), a packet of keys at a time.
inline void modify_row(const ScoreRule& r, float score_scale, float* s, int h, int i, int k0, int keys) {
  const Packet vscale = ei::pset1<Packet>(score_scale);
  const int whole = keys - keys % kLanes;
  const float* b = r.bias == nullptr
                       ? nullptr
                       : r.bias + (static_cast<std::size_t>(r.bias_per_head ? h : 0) * r.n + i) * r.m + k0;
  const Packet slope = ei::pset1<Packet>(r.slopes != nullptr ? r.slopes[h] : 0.f);
  const Packet pos = ei::pset1<Packet>(static_cast<float>(i + r.offset - k0));
  const Packet cap = ei::pset1<Packet>(r.softcap), inv = ei::pset1<Packet>(r.softcap > 0 ? 1.f / r.softcap : 0.f);
  alignas(64) float lane[kLanes];
  for (int l = 0; l < kLanes; ++l) lane[l] = static_cast<float>(l);
  const Packet lanes = ei::pload<Packet>(lane);
  for (int j = 0; j < whole; j += kLanes) {
    Packet x = ei::pmul(ei::ploadu<Packet>(s + j), vscale);
    if (r.slopes != nullptr) {
      const Packet key = ei::padd(lanes, ei::pset1<Packet>(static_cast<float>(j)));
      x = ei::psub(x, ei::pmul(slope, ei::pabs(ei::psub(pos, key))));
    }
    if (b != nullptr) x = ei::padd(x, ei::ploadu<Packet>(b + j));
    if (r.softcap > 0) x = soft_cap(x, inv, cap);
    ei::pstoreu(s + j, x);
  }
  for (int j = whole; j < keys; ++j) {  // the rest one at a time, with the same operations
    float x = s[j] * score_scale;
    if (r.slopes != nullptr) x -= r.slopes[h] * std::abs(static_cast<float>(i + r.offset - k0) - static_cast<float>(j));
    if (b != nullptr) x += b[j];
    if (r.softcap > 0) x = ei::pfirst(soft_cap(ei::pset1<Packet>(x), inv, cap));
    s[j] = x;
  }
}

// A partial tile's element mask: query lane l (query i0 + l) keeps the keys of [k0, k0 + keys) its
// rule lets through; the others become -inf. The intervals a packet of lanes at a time (key rows
// that every lane keeps are not visited); the documents' and a custom mask's pairs one by one.
// `lanes` may exceed a tile's kTileCols (the backward masks a whole query block at once).
inline void mask_tile(const MaskRule& rule, float* st, Index ld, int i0, int lanes, int k0, int keys) {
  if (lanes > kTileCols) {
    for (int g = 0; g < lanes; g += kTileCols)
      mask_tile(rule, st + g, ld, i0 + g, std::min(kTileCols, lanes - g), k0, keys);
    return;
  }
  alignas(64) float lo_of[kTileCols], hi_of[kTileCols];  // lanes past `lanes` keep every key
  int all_from = 0, all_to = keys;  // [all_from, all_to): key rows every lane keeps
  for (int l = 0; l < kTileCols; ++l) {
    int lo = 0, hi = keys;
    if (l < lanes) {
      rule.interval(i0 + l, lo, hi);
      lo = std::clamp(lo - k0, 0, keys);
      hi = std::clamp(hi - k0, lo, keys);
    }
    lo_of[l] = static_cast<float>(lo);
    hi_of[l] = static_cast<float>(hi);
    all_from = std::max(all_from, lo);
    all_to = std::min(all_to, hi);
  }
  const auto cut = [&](int j) {
    const Packet key = ei::pset1<Packet>(static_cast<float>(j));
    for (int v = 0; v < kTileVecs; ++v) {
      float* at = st + j * ld + v * kLanes;
      const Packet keep = ei::pand(ei::pcmp_le(ei::pload<Packet>(lo_of + v * kLanes), key),
                                   ei::pcmp_lt(key, ei::pload<Packet>(hi_of + v * kLanes)));
      ei::pstoreu(at, ei::pselect(keep, ei::ploadu<Packet>(at), ei::pset1<Packet>(kNegInf)));
    }
  };
  if (all_to <= all_from) {
    for (int j = 0; j < keys; ++j) cut(j);
  } else {
    for (int j = 0; j < all_from; ++j) cut(j);
    for (int j = all_to; j < keys; ++j) cut(j);
  }
  if (!rule.elementwise()) return;
  for (int l = 0; l < lanes; ++l)
    for (int j = static_cast<int>(lo_of[l]); j < static_cast<int>(hi_of[l]); ++j)
      if (!rule.visible(i0 + l, k0 + j)) st[j * ld + l] = kNegInf;
}

// The fused backward's step for one packet of (key, query) pairs (cpu/fused_backward.cpp, and the
// backward walk, cpu/walk_backward.cpp, which runs it on one lane): from the pair's raw (or
// modified) score s, the row's forward statistics m and 1/l and D = dO · O, and dP = dO · V_j,
//   P  = exp((s − m) · scale) / l                 the weight, recomputed (scale2 = scale · log2 e:
//                                                 the exp in base 2, as the forward takes it)
//   dS = P (dP − D)                               dlogits
//   dS · s                                        its term of dT (0 where masked: 0 · −inf is no number)
//   dS ∘ (1 − t)(1 + t), t = s / C                with a soft-cap C (s is the capped score): what
//                                                 the products dK and dQ take
struct BackwardPair {
  Packet p, ds, dt_term;
};
inline BackwardPair backward_pair(const Packet& s, const Packet& m, const Packet& inv_l, const Packet& dp,
                                  const Packet& d, const Packet& scale2, float softcap) {
  const Packet p = ei::pmul(exp2_nonpositive(ei::pmul(ei::psub(s, m), scale2)), inv_l);
  Packet ds = ei::pmul(p, ei::psub(dp, d));
  const Packet s0 = ei::pselect(ei::pcmp_eq(s, ei::pset1<Packet>(kNegInf)), ei::pzero(s), s);
  const Packet dt_term = ei::pmul(ds, s0);
  if (softcap > 0) {
    const Packet one = ei::pset1<Packet>(1.f), t = ei::pmul(s0, ei::pset1<Packet>(1.f / softcap));
    ds = ei::pmul(ds, ei::pmul(ei::psub(one, t), ei::padd(one, t)));
  }
  return {p, ds, dt_term};
}

// Merging the online-softmax states of two key ranges A and B of one query (split-KV's combine,
// cpu/decode.cpp): with m = max(m_A, m_B), a = exp((m_A - m) * scale), b = exp((m_B - m) * scale),
//   l = a l_A + b l_B,   acc = a acc_A + b acc_B
// which is the state of the union of the ranges, in any order of merging (up to rounding). A range
// no key of which is visible (m = -inf, l = 0) has factor exp(-inf) = 0: the other side is kept.
struct MergeFactors {
  float m, a, b;
};
inline MergeFactors merge_factors(float m_a, float m_b, float scale) {
  const float m = std::max(m_a, m_b);
  if (m == kNegInf) return {kNegInf, 0.f, 0.f};  // both empty: nothing to weigh
  return {m, std::exp((m_a - m) * scale), std::exp((m_b - m) * scale)};
}
// (m, l, acc) := the merge of itself (A) and (m_b, l_b, acc_b) (B); acc and acc_b hold d_v values.
inline void merge_states(float& m, float& l, float* acc, float m_b, float l_b, const float* acc_b, int d_v,
                         float scale) {
  const MergeFactors f = merge_factors(m, m_b, scale);
  if (f.m == kNegInf) return;
  l = l * f.a + l_b * f.b;
  for (int c = 0; c < d_v; ++c) acc[c] = acc[c] * f.a + acc_b[c] * f.b;
  m = f.m;
}

// What overflowed in one query row's online-softmax state, named as the staged chain names it:
// the scores (the running max m, in raw scores, is not finite: Q Kᵀ or a score mod overflowed),
// the logits at this temperature (m is finite but the row's largest logit m · to_logit is not, as
// the staged chain would find forming it, or l is no finite sum > 0: the scale 1 / (√d_k T) took
// the exponents out of range), or, with both finite, the weighted sum of V in acc. to_logit is
// the factor from m's units to logits (online_scale; 1 where m is given as a logit). acc is
// unnormalised (up to l · max |V|, l up to the number of keys), so it can overflow where the output
// acc / l fits: cpu/values_range.h answers that by running again with V scaled.
enum class RowOverflow { None, Scores, Logits, Values };
inline RowOverflow row_overflow(float m, float l, bool acc_finite, float to_logit) {
  if (!std::isfinite(m)) return RowOverflow::Scores;
  if (!std::isfinite(m * to_logit) || !(l > 0.f) || !std::isfinite(l)) return RowOverflow::Logits;
  return acc_finite ? RowOverflow::None : RowOverflow::Values;
}

// Throws the refusal of `what` (not None) in head `head`, query row `row` of a run in `precision`:
// InputError with Msg::OverflowScoresRow or OverflowLogitsRow, or cpu::ValuesOverflow (which
// cpu/values_range.h catches; its text, should it reach a person, says what happened).
[[noreturn]] inline void throw_overflow(RowOverflow what, int head, int row, Precision precision) {
  const std::vector<std::string> args = {std::to_string(head), std::to_string(row), std::string(to_string(precision))};
  if (what == RowOverflow::Scores) throw InputError(Msg::OverflowScoresRow, args);
  if (what == RowOverflow::Logits) throw InputError(Msg::OverflowLogitsRow, args);
  throw cpu::ValuesOverflow("the weighted sum of V overflows " + args[2] + " in head " + args[0] + ", query row " + args[1]);
}

}  // namespace attnlab::cpu::online
