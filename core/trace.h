// Trace: everything one run of the chain produced, kept stage by stage so that the CLI, the viewer
// and the tests can show or check any stage; plus the per-stage timings of the backend that ran.
// All N x M stages are (heads*n, m); output is (heads*n, d_v). A fused run keeps only `output`
// (has_stages == false): it never materialises the N x N matrices.
#pragma once

#include "core/pooled.h"
#include "core/types.h"

#include <string>
#include <vector>

namespace attnlab {

struct StageTimings {
  double upload_ms = 0;      // host -> device copies (0 on the CPU)
  double qk_ms = 0;          // S = Q K^T (with the 1/sqrt(d_k) epilogue where the kernel fuses it)
  double scale_mask_ms = 0;  // scaled, mask, logits = (scaled + mask) / T
  double softmax_ms = 0;     // row-wise stable softmax
  double pv_ms = 0;          // O = P V
  double fused_ms = 0;       // the one fused kernel (fused variant only)
  double download_ms = 0;    // device -> host copies (0 on the CPU)
  double total_ms = 0;       // wall time of the whole run, as the user waited for it
};

// The (n, m) stages a run that keeps its stages brings back (RunOptions::stages in core/backend.h): a bit each.
enum StageBit : unsigned {
  kStageScores = 1,
  kStageScaled = 2,
  kStageMask = 4,
  kStageLogits = 8,
  kStageWeights = 16,
  // With score mods (core/modifications.h): the scaled scores plus ALiBi's and the bias's terms,
  // and the soft-capped scores.
  kStageBiased = 32,
  kStageCapped = 64,
  kAllStages = 127,
};

template <class Matrix>
struct TraceT {
  std::string backend;    // "cpu" | "cuda"
  Variant variant = Variant::Staged;
  Precision precision = Precision::FP32;
  // The run kept its stages: those RunOptions::stages asked for (all by default); a stage it did
  // not ask for is empty.
  bool has_stages = true;
  Matrix scores;   // Q K^T
  Matrix scaled;   // Q K^T / sqrt(d_k)
  // Score mods (empty without them): biased = scaled + ALiBi + bias (ALiBi or a bias),
  // capped = C tanh((biased or scaled) / C) (soft-capping); the logits take the last of these.
  Matrix biased;
  Matrix capped;
  Matrix mask;     // 0 / -inf, one head: (n, m)
  Matrix logits;   // (last of scaled, biased, capped + mask) / T
  Matrix weights;  // row-wise softmax(logits); masked entries exactly 0
  Matrix output;   // weights V
  // RoPE (empty without it): Q and K as rotated, (heads n, d_k) and (kv_heads m, d_k): what QK^T
  // multiplied. Kept with the stages.
  Matrix q_rot, k_rot;
  StageTimings timings;
  // Decode: the key splits per key/value head the run used; 0 for the other variants.
  int splits = 0;
  // Streaming runs only (RunOptions::pool / rows): the pooled stages of the requested view and the
  // exact stages of the requested rows.
  PooledStages pooled;
  std::vector<RowStages> rows;
};

using Trace = TraceT<MatrixF>;     // what backends return (fp32 working precision)
using TraceD = TraceT<MatrixD>;    // the fp64 reference

}  // namespace attnlab
