// The CPU split-KV decode kernel (Flash-Decoding, Dao et al. 2023), fp32: n new queries (the last
// n positions) of H query heads against a cache of m keys of G = H / kv_group key/value heads.
// The keys of every key/value head are cut into splits; a work item is one (key/value head,
// split): it walks its keys in blocks and keeps the online-softmax state (m, l, acc) of every
// query row of its group (kv_group query heads x n queries, so the cache is read once per
// key/value head, not once per query head):
//   S (R, keys)  = Q_g K_blkᵀ                       R = kv_group * n rows of Q_g
//   m_new = max(m, max_j S(r, j));  alpha = exp((m - m_new) * scale)
//   P = exp((S - m_new) * scale);  l = alpha * l + sum_j P(r, j);  acc = alpha * acc + P V_blk
// Then the combine merges each row's partial states by the log-sum-exp rule (merge_states in
// cpu/online_softmax.h), split 0 first, and writes O = acc / l. Units as in the fused kernel: m is
// in raw scores (q . k), the scale 1 / (sqrt(d_k) T) is applied inside the exp.
// These functions are the kernel's own steps, public so that `attnlab walk --split` and the
// viewer show what the kernel computes.
#pragma once

#include "core/backend.h"
#include "core/modifications.h"

#include <algorithm>
#include <atomic>
#include <vector>

namespace attnlab::cpu::decode {

// How the keys of every key/value head are cut: split s holds keys [begin(s), end(s, m)), the
// `span` keys from `first` in `splits` near-equal parts counted in units of `unit` keys (the
// machine's plan: whole key blocks when its splits are long, only the last block short; a
// requested count: single keys, so --split S runs S splits whose lengths differ by one key at most).
struct SplitPlan {
  int splits = 1;
  int first = 0;  // the first key cut: 0, or where the keys some query may see begin (plan_splits)
  int span = 0;   // the keys cut, from `first`
  int unit = 1;   // keys per unit: a split begins on a unit from `first`
  int units() const { return (span + unit - 1) / unit; }
  int begin(int s) const { return first + std::min(span, unit * near_equal_begin(s, units(), splits)); }
  int end(int s, int m) const { return std::min(m, begin(s + 1)); }
  // The split that holds key j (a key before `first`: split 0; past the last split: the last).
  int split_of(int j) const {
    const long long u = std::max(0, j - first) / unit;
    const long long s = ((u + 1) * splits - 1) / std::max(1, units());
    return static_cast<int>(std::min<long long>(s, splits - 1));
  }
};

// The split count the machine and the cache length ask for: enough items for every worker
// (a few each, so uneven splits still spread) but no split shorter than a few thousand keys;
// `requested` > 0 asks for exactly that many (at most one per key). `keys` is the cache length in use
// (0: p.m(); see decode_keys). The machine's plan cuts only the keys from decode_first_key on (a
// window's: its split count follows the window's length, not the cache's); a requested plan
// cuts them all, and its splits before a window's first key read nothing (their states are
// empty). Throws InputError for requested < 0.
SplitPlan plan_splits(const Problem& p, unsigned workers, int requested = 0, int keys = 0);

// The online-softmax state of the R = kv_group * n query rows of one key/value head over one key
// range; row r is query r % n of query head g * kv_group + r / n. m = -inf and l = 0 for a row
// that sees none of the range's keys.
struct Partial {
  std::vector<float> m, l;  // (R)
  MatrixF acc;              // (R, d_v), unnormalised
};

// The partial state of key/value head g over keys [k0, k1) (the item's loop above), into `out`:
// of those keys, only the ones from decode_first_key (core/modify.h) on up to the last one a query may see are read
// (none: the empty state).
// `scratch` is the caller's block of scores, reused between calls. `keys` is the cache length in
// use (0: p.m()), where a causal mask places the queries.
void split_partial(const Problem& p, int g, int k0, int k1, Partial& out, MatrixF& scratch, int keys = 0);

// The same step on a cache stored in bf16 (bf16_cache: K and V at half the bytes), in the
// lab's bf16 arithmetic (cpu/bf16.h): Q rounded to bf16, S = Q K_blkᵀ from the bf16 values with
// fp32 sums, the weights exp2(s c - m c) (c = log2(e) * scale) rounded to bf16, l the sum of the
// rounded weights, acc += P V_blk in fp32. m stays in raw scores, so two states merge as the fp32
// ones do (merge_states: exp((m_a - m) scale) = exp2((m_a - m) c)). `kbuf` holds a block of K or V
// widened to fp32.
void split_partial_bf16(const Problem& p, const Bf16KV& kv, int g, int k0, int k1, Partial& out, MatrixF& scratch,
                        MatrixF& kbuf, int keys = 0);

// The whole kernel over the first `keys` keys of every key/value head (0 < keys <= p.m(): a cache
// with room for more keys than it holds yet, as the viewer's decode view grows it one token at a
// time; the queries are the last n of those keys): every (key/value head, split) item of `plan`
// in parallel, then the combine into `output` (heads * n, d_v). `partials` keeps every item's
// state, item g * plan.splits + s. Throws Cancelled when *cancel turns true, InputError when a
// score overflows fp32. What decode_into runs with keys = p.m().
// precision BF16: the items are split_partial_bf16 on the problem's bf16 copy of K and V.
void decode_keys(const Problem& p, int keys, const SplitPlan& plan, const std::atomic<bool>* cancel,
                 std::atomic<float>* progress, std::vector<Partial>& partials, MatrixF& output,
                 Precision precision = Precision::FP32);

// Whether the kernel forms its products itself rather than through Eigen (cpu/decode.cpp): d_k and
// d_v whole 16-float vectors, at most 16 query rows per key/value head, and an AVX-512 or an AVX2
// build (either cache precision).
bool direct_products(const Problem& p);

// K in the kernel's layout (its panels, where direct_products holds), made and kept with p's inputs
// as split_partial makes it on its first call: for a caller that times tokens one by one (the
// viewer's decode view), before the clock, as a serving engine lays out each key when it is
// written, not when a token reads it. RoPE's turn of K (rotated_qk) comes with it.
void prepare_keys(const Problem& p);

// The problem's K and V in bf16 (round to nearest even), made once and kept with its inputs.
std::shared_ptr<const Bf16KV> bf16_cache(const Problem& p);

// The row of query `query` of query head `head` inside its key/value head's Partial.
inline int partial_row(const Problem& p, int head, int query) {
  return (head % p.kv_group) * p.n() + query;
}

}  // namespace attnlab::cpu::decode
