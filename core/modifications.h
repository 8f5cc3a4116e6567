// Position and score modifications of the attention chain: what real models run instead of the
// textbook chain, as data of the Problem that every backend reads the same way (the model is
// PyTorch FlexAttention's score_mod / mask_mod and its block mask).
//
//   position   RoPE rotates Q and K before QKᵀ (the rotate-half convention of LLaMA and GPT-NeoX:
//              value c is paired with c + d/2, turned by the angle pos · θ^(-2c/d) for c < d/2).
//   score mods on the scaled scores s = QKᵀ · scale, in this fixed order:
//              ALiBi      s - slope_h · |pos_i - j|      (standard slopes 2^(-8(h+1)/H), or given)
//              bias       s + B(h, i, j)                 (an additive float matrix: a captured
//                                                         model's float mask; shared or per head)
//              soft-cap   C · tanh(s / C)                (Gemma 2)
//              then the logits are (s + mask) / T as before.
//   mask mods  with the mask kind (none, causal, a mask file), every rule must let a key through:
//              window W   |pos_i - j| < W  (with causal: the W most recent keys, the query's own
//                         among them)
//              document   doc(pos_i) == doc(j)  (one id per position: packed sequences)
//              prefix P   prefix-LM: keys j < P are seen by every query, the rest causally
//                         (prefix implies causal)
//
// pos_i = i + (m - n): the n queries are the last n of the m positions, as for the causal mask.
// MaskRule and ScoreRule are plain data with inline functions, included by .cu files too: one
// definition of each modification for the CPU kernels, the CUDA kernels, the fp64 reference and
// the walk. block_mask() classifies tiles once per problem so fused kernels skip what a mask rules
// out: a window of W costs O(N W), not O(N²).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#if defined(__CUDACC__)
#define ATTNLAB_HD __host__ __device__
#else
#define ATTNLAB_HD
#endif

namespace attnlab {

// The modifications a Problem carries (bias values and document ids live in its inputs, shared
// like Q, K and V; they are in use exactly when present there).
struct Modifications {
  double rope_theta = 0;             // > 0: RoPE with this base; 0: none
  bool alibi = false;
  std::vector<double> alibi_slopes;  // given: one per query head, or one for all; empty: standard
  double softcap = 0;                // C > 0: C tanh(s / C); 0: none
  int window = 0;                    // W >= 1: |pos_i - j| < W; 0: none
  int prefix = 0;                    // P >= 1: prefix-LM over the first P positions; 0: none
  std::string bias_name;             // where the bias came from (file name), for the texts
  int bias_head = -1;                // h: the bias is head h's rows of a per-head one (one_head); -1 not
  std::string documents_name;        // where the document ids came from
};

// Which keys query i (0..n-1, of every head) may see: the mask kind's rule and the mask mods.
struct MaskRule {
  int m = 0;
  int offset = 0;                   // query i is at position i + offset
  bool causal = false;
  int window = 0, prefix = 0;
  const int* documents = nullptr;   // m ids, or null
  const float* custom = nullptr;    // (n, m) of 0 / -inf, or null

  // Keys [lo, hi) that the causal, window and prefix rules let query i see (the documents and a
  // custom mask may block some of them).
  ATTNLAB_HD void interval(int i, int& lo, int& hi) const {
    const int pos = i + offset;
    lo = 0;
    hi = m;
    if (causal) hi = pos + 1 > prefix ? pos + 1 : prefix;
    if (window > 0) {
      if (pos - window + 1 > lo) lo = pos - window + 1;
      if (pos + window < hi) hi = pos + window;
    }
    if (hi > m) hi = m;
    if (lo > hi) lo = hi;
  }
  // The keys [lo, hi) some query 0..n-1 may see: the union of their intervals (one range, as a
  // query's interval moves with its position; hi <= lo when none). What the decode kernels narrow
  // their key splits to.
  ATTNLAB_HD void union_interval(int n, int& lo, int& hi) const {
    lo = m;
    hi = 0;
    for (int i = 0; i < n; ++i) {
      int a, b;
      interval(i, a, b);
      if (a < b) {
        lo = a < lo ? a : lo;
        hi = b > hi ? b : hi;
      }
    }
  }
  // Whether some key of the interval may still be blocked (documents, a custom mask).
  ATTNLAB_HD bool elementwise() const { return documents != nullptr || custom != nullptr; }
  // Whether the documents or a custom mask block key j of query i (inside its interval or not).
  ATTNLAB_HD bool blocked(int i, int j) const {
    if (documents != nullptr && documents[i + offset] != documents[j]) return true;
    return custom != nullptr && custom[static_cast<std::size_t>(i) * m + j] != 0.f;
  }
  ATTNLAB_HD bool visible(int i, int j) const {
    int lo, hi;
    interval(i, lo, hi);
    return j >= lo && j < hi && !blocked(i, j);
  }
};

// Where part s of `count` keys cut into `parts` near-equal parts begins (s = parts: the end): their
// lengths differ by one key at most, none empty while parts <= count. How the decode kernels cut
// their keys into splits (cpu/decode.h's SplitPlan, in units of whole key blocks or of keys;
// kernels/decode.cu's, in keys).
ATTNLAB_HD inline int near_equal_begin(int s, int count, int parts) {
  return static_cast<int>(static_cast<long long>(s) * count / parts);
}

// The score mods of query head h, query i, key j on a scaled score s (T: float in the kernels,
// double in the fp64 reference).
template <class T>
struct ScoreRuleT {
  int n = 0, m = 0;
  int offset = 0;                 // query i is at position i + offset
  const T* slopes = nullptr;      // ALiBi slope of every query head, or null
  const float* bias = nullptr;    // (n, m) shared, or (heads n, m) one per head; or null
  bool bias_per_head = false;
  T softcap = 0;                  // C, or 0

  ATTNLAB_HD bool any() const { return slopes != nullptr || bias != nullptr || softcap > 0; }
  // ALiBi's and the bias's term (what is added to s), with the distance i + offset - j given in T
  // (a kernel counts it in float from one conversion per row: integers, exact below 2^24).
  ATTNLAB_HD T added_at(int h, int i, int j, T dist) const {
    T a = 0;
    if (slopes != nullptr) a -= slopes[h] * (dist < 0 ? -dist : dist);
    if (bias != nullptr)
      a += static_cast<T>(bias[(static_cast<std::size_t>(bias_per_head ? h : 0) * n + i) * m + j]);
    return a;
  }
  ATTNLAB_HD T added(int h, int i, int j) const { return added_at(h, i, j, static_cast<T>(i + offset - j)); }
  ATTNLAB_HD T cap(T s) const { return softcap > 0 ? softcap * tanh_(s / softcap) : s; }
  ATTNLAB_HD T apply_at(T s, int h, int i, int j, T dist) const { return cap(s + added_at(h, i, j, dist)); }
  ATTNLAB_HD T apply(T s, int h, int i, int j) const { return cap(s + added(h, i, j)); }

 private:
  ATTNLAB_HD static T tanh_(T x) {
#if defined(__CUDA_ARCH__)
    return tanh(x);
#else
    return std::tanh(x);
#endif
  }
};
using ScoreRule = ScoreRuleT<float>;

// Tiles of a (query tile) x (key tile) grid: what a fused kernel does with each.
enum class BlockKind : std::uint8_t {
  Empty = 0,    // every pair masked: skipped entirely
  Full = 1,     // every pair visible: no element mask
  Partial = 2,  // some masked: the element mask (MaskRule::visible) applies
};

// The block mask of one head (every head shares the mask): kind(qb, kb) for query tile qb (queries
// [qb q_tile, (qb + 1) q_tile)) and key tile kb. Computed once per problem in O(n/q_tile · n)
// from the rules' intervals (documents by their id ranges; a custom mask scanned).
struct BlockMask {
  int q_tile = 0, k_tile = 0, q_blocks = 0, k_blocks = 0;
  std::vector<BlockKind> kind;  // (q_blocks, k_blocks), row-major
  BlockKind at(int qb, int kb) const { return kind[static_cast<std::size_t>(qb) * k_blocks + kb]; }
  // How many tiles are not empty (what a fused kernel computes), and all of them.
  std::size_t visited() const;
  std::size_t total() const { return kind.size(); }
};

}  // namespace attnlab
