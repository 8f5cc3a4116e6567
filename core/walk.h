// The online-softmax walk of one query row, key tile by key tile, as data, and its renderings:
// text and markdown (one table per tile, zh/en, a sentence per tile saying what happened) and a
// stable JSON for outside tools. The numbers are filled by the CPU fused kernel's own update step
// (cpu/walk.h walk_row); this file only holds and prints them, it computes no attention.
//
// Units. The kernel keeps its running max in raw scores s_j = q . k_j and applies
// scale = 1 / (sqrt(d_k) T) inside the exp. The walk reports the logits x_j = s_j * scale and the
// running max m in the same logit units (m = m_raw * scale): exp((s_j - m_raw) * scale) is
// exp(x_j - m), so the table reads like FlashAttention-2's Algorithm 1. alpha, l, acc, the
// weights exp(x_j - m) and the outputs are the kernel's fp32 values as it computed them.
#pragma once

#include "core/report.h"
#include "core/types.h"

#include <optional>
#include <string>
#include <vector>

namespace attnlab {

struct WalkTile {
  int index = 0;
  int j0 = 0, j1 = 0;            // keys [j0, j1) of the head
  // No key of the tile is visible to the row, as the block mask finds it: never loaded. Why:
  // after the query (causal, or past a prefix), outside its window, or other documents' keys.
  bool skipped = false;
  enum class Skip { None, AfterQuery, Window, Document } skip = Skip::None;
  std::vector<double> logits;    // (j1 - j0) x_j, -inf where masked; empty when skipped
  std::vector<double> weights;   // (j1 - j0) exp(x_j - m) as the kernel stored them (P)
  double tile_max = 0;           // max_j x_j of the tile (-inf: every key masked)
  double m_prev = 0;             // the running max before the tile (-inf: nothing yet)
  double m = 0;                  // the running max after it
  double alpha = 0;              // exp(m_prev - m): 0 while nothing was accumulated
  double l = 0;                  // running sum after the tile
  std::vector<double> acc;       // (d_v) unnormalised accumulator after the tile
  std::vector<double> output;    // (d_v) acc / l; empty while l == 0 (nothing accumulated)
  int masked = 0;                // keys of the tile that are masked
};

// Split-KV (`walk --split S`): the partial online-softmax state of the row over one split of the
// keys, as the decode kernel computed it (cpu/decode.h split_partial), m in logit units.
struct WalkSplit {
  int index = 0;
  int j0 = 0, j1 = 0;            // keys [j0, j1)
  double m = 0, l = 0;           // m = -inf, l = 0: the row sees none of the split's keys
  std::vector<double> acc;       // (d_v) unnormalised
};

// One step of the combine: the merged state so far (A, splits 0..index-1) with split `index` (B):
//   m = max(m_A, m_B);  a = exp(m_A - m);  b = exp(m_B - m);  l = a l_A + b l_B;  acc = a acc_A + b acc_B
struct WalkMerge {
  int index = 0;
  double m_a = 0, m_b = 0, m = 0, a = 0, b = 0;
  double l_a = 0, l_b = 0, l = 0;
  std::vector<double> acc;       // (d_v) after the merge
};

// What every walk of one row says about it (the forward's and the backward's, core/walk_backward.h).
struct WalkHeader {
  int query = 0, head = 0, tile = 1;
  int keys = 0;                  // m, keys per head
  int d_k = 0, d_v = 0;
  double temperature = 1;
  MaskKind mask = MaskKind::None;
  int prefix = 0;                // the prefix rule's P (mask_text), 0 none
  double scale = 1;              // 1 / (sqrt(d_k) T) or s / T, the fp32 value the kernel uses
  std::optional<double> explicit_scale;  // the problem's explicit scale s; empty = 1/sqrt(d_k)
  // The problem's modifications (modifications_text, en and zh; empty without any). With score
  // mods the kernel works on the modified scaled scores and `scale` is 1 / T.
  std::string modifications, modifications_zh;
  // Where the problem came from (a bundle's call and head, a pattern, one head of several; en and
  // zh; empty for the demo, files and a plain random problem), as run's texts name it.
  std::string source, source_zh;
  bool score_mods = false;
  std::string query_token;
  std::vector<std::string> key_tokens;  // m labels
};

struct Walk : WalkHeader {
  std::vector<WalkTile> tiles;
  std::vector<double> output;           // (d_v) final acc / l, the kernel's fp32 division
  // e > 0: acc overflowed fp32 with V as given, so the walk ran on V · 2^-e (cpu/values_range.h):
  // the tiles' acc are the sums of V · 2^-e, every output is multiplied back by 2^e.
  int values_exponent = 0;

  // The checks (cpu/walk.h check_walk): the same row through the staged chain, the fp64
  // reference and the CPU fused kernel itself, and, where a device ran it, the CUDA fused kernel.
  std::vector<double> staged_output, fp64_output, cpu_fused_output;
  std::optional<std::vector<double>> cuda_fused_output;
  std::string cuda_note;                // why there is no CUDA output (no device, not asked)
  double max_abs_diff = 0;              // max |walk - staged|
  double fp64_error = 0;                // max |walk - fp64|
  double cpu_fused_diff = 0;            // max |walk - CPU fused|
  std::optional<double> cuda_fused_diff;  // max |walk - CUDA fused|

  // Split-KV (splits > 0): each split's state, the merges in split order, the merged output
  // (acc / l, fp32) and how far it is from the one-pass walk: max |Δ output|, and |Δ l| in units in
  // the last place of the walk's fp32 l.
  int splits = 0;
  std::vector<WalkSplit> split_states;
  std::vector<WalkMerge> merges;
  std::vector<double> split_output;
  double split_max_abs_diff = 0;
  double split_l_ulps = 0;
  double split_fp64_error = 0;          // max |merged - fp64|
  // e > 0: the splits ran on V · 2^-e (their acc are those sums, split_output is multiplied back):
  // the walk's own e, or, where only the splits' sums overflow (a split of many keys of nearly equal
  // weight in a row that one key dominates), one of their own.
  int split_values_exponent = 0;
};

// Tiles covering the keys: ceil(m / tile).
int walk_tile_count(int keys, int tile);

// The walk's default keys per tile (`attnlab walk` and the walk view): 2 on the demo; otherwise
// 64, or on a row of fewer than 256 keys the largest power of two that still gives at least 4
// tiles (one tile would leave nothing to step through).
int default_walk_tile(bool demo, int keys);

// What happened at tile t, one sentence ("the new tile holds a larger logit, 1.43 > 1.25, so
// everything so far is rescaled by α = 0.835").
std::string walk_tile_sentence(const Walk& w, int t, Lang lang);

// Text and markdown: a heading, one table per tile (its keys when the tile has at most
// kWalkKeyRowsMax keys, then tile max, m, α, l, acc, output) with its sentence, then the final
// output against the staged chain, the kernels and fp64. JSON: the stable shape the README
// documents, -inf (and any other non-finite number) as null. Csv throws InputError.
constexpr int kWalkKeyRowsMax = 16;
std::string render_walk(const Walk& w, Lang lang, Format format);

}  // namespace attnlab
