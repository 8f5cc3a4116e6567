// The backward walk of one query row (`attnlab walk --backward`), as data, and its renderings:
// FlashAttention-2's backward seen from one query, key tile by key tile. The forward kept the row's
// log-sum-exp in two parts, its running max m and sum l; the backward recomputes the row's weights
// of each tile from them (P_j = exp(x_j − m) / l, never stored between the passes), takes
// dP_j = dO · V_j, dS_j = P_j (dP_j − D) with D = dO · O, and adds dS_j K_j into the row's dQ. The
// numbers are filled by cpu/walk_backward.h with the fused backward's own functions; this file
// only holds and prints them. Units as the forward walk (core/walk.h): logits x_j = s_j · scale.
#pragma once

#include "core/backward.h"
#include "core/report.h"
#include "core/types.h"
#include "core/walk.h"

#include <optional>
#include <string>
#include <vector>

namespace attnlab {

struct BackwardWalkTile {
  int index = 0;
  int j0 = 0, j1 = 0;              // keys [j0, j1)
  bool skipped = false;            // the block mask rules every key out: never loaded
  WalkTile::Skip skip = WalkTile::Skip::None;
  std::vector<double> logits;      // x_j, -inf where masked (empty when skipped)
  std::vector<double> p;           // P_j recomputed from m and l (the kernel's fp32)
  std::vector<double> dp;          // dP_j = dO · V_j
  std::vector<double> ds;          // dS_j = P_j (dP_j − D) (dlogits; exactly 0 where masked)
  double ds_sum = 0;               // Σ_j dS_j over the keys so far (→ 0 at the end)
  int top = -1;                    // the key of the tile with the largest |dS| (-1: none)
  std::vector<double> dq;          // (d_k) the row's dQ after the tile (scaled, in the kernel's frame;
                                   // a skipped tile carries it over, as the forward's carries m, l, acc)
};

struct BackwardWalk : WalkHeader {  // scale: the online scale (logit = s · scale)
  bool rope = false;
  std::string upstream, upstream_zh;  // what dO is (upstream_text)
  Upstream dout_source;            // the same for the JSON: its kind, seed or file (no data)
  double m = 0, l = 0;             // the forward's row statistics (m in logit units)
  double lse = 0;                  // L = m + log l: P_j = exp(x_j − L)
  double D = 0;                    // dO · O
  int visible = 0;                 // the keys the row sees (1: its dS is 0 in exact arithmetic)
  std::vector<double> dout;        // (d_v) the row's dO
  std::vector<BackwardWalkTile> tiles;
  std::vector<double> dq;          // (d_k) the walk's final dQ row, in the inputs' frame
  std::vector<double> fused_dq;    // the CPU fused backward's row
  double fused_diff = 0;           // max |walk − fused|
  std::vector<double> fp64_dq;     // the fp64 backward's row (cpu/backward.h reference_backward_fp64_row)
  double fp64_error = 0;           // max |walk − fp64|
  // The error reaches the fp64 row's largest |entry| (an fp64 row of zeros: any error): the fp32
  // row carries no right digit (very low temperatures, where the scale multiplies fp32's rounding).
  bool fp64_error_reaches_scale() const;
};

// What tile t did, one sentence: the key it pushes most and which way, and Σ dS so far; for a
// skipped tile why the block mask rules it out. What the text and the viewer's walk view print.
std::string backward_walk_tile_sentence(const BackwardWalk& w, int t, Lang lang);

// Text and markdown: a heading with m, l, L and D, one table per tile (key, x_j, P_j, dP_j, dS_j
// when the tile has at most kWalkKeyRowsMax keys), its Σ dS so far, the key it pushes most and the
// dQ so far, then the final dQ against the fused backward and fp64. JSON: every number, -inf as
// null. Csv throws InputError.
std::string render_backward_walk(const BackwardWalk& w, Lang lang, Format format);

}  // namespace attnlab
