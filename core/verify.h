// Verification of a backend's Trace against the fp64 reference chain (reference_fp64 in
// cpu/cpu_backend.h) computed on the same fp32 inputs: what `attnlab verify` prints and what the
// parity tests assert.
//
// Per stage (scores, scaled, mask, logits, weights, output; only output for a fused trace):
// max absolute error, max relative error (over |ref| > atol, where a relative error means
// something), and the check |x - ref| <= atol + rtol * |ref| on every element. -inf must match
// -inf exactly (logits, mask); NaN never passes. Besides: the worst row-sum deviation
// |sum_j w_ij - 1| of the weights and whether every masked weight is exactly 0.0.
//
// Default tolerances (default_tolerance), printed with the figures:
//   fp32  scores, scaled, biased, rtol 1e-5, atol 1e-6 * max|ref| of that stage, and at least
//         capped, logits      the stage before's atol carried through the step between them (the
//                             scale; an added term or the soft-cap, whose slope is at most 1;
//                             1 / T); the scores' at least 8 ulp(fp32) * max|q_row| max|k_row|
//                             (what a dot product of cancelling terms errs by, which 1e-6 of
//                             the largest score misses where every score is small). Without a
//                             cap the stages are multiples of each other and so are these
//                             floors; the cap shrinks its stage while an error before it passes
//                             on whole
//         mask                    exact (atol = rtol = 0)
//         weights                 rtol 1e-5, atol max(1e-6, L / 2)
//         output                  rtol 1e-5, atol 1e-6 * max|ref output| + L * max|V|
//     where L = 8 ulp(fp32) * max|ref logit|: the rounding every fp32 chain must make when it
//     stores the logits (and the dot products behind them); with a soft-cap, max|ref logit| is
//     at least the largest score before the cap over T (the cap passes the scores' rounding on
//     whole where it shrinks the logits; L16 alike). A softmax passes at most half of a
//     logit error on to a weight, and an output row at most (max error of its logits) * max|V|;
//     at ordinary temperatures L is below 1e-5, at T = 1e-3 it is what fp32 logits can deliver.
//   Where the weights' or the output's allowance reaches the stage's whole range (1; V's widest
//   column span), the report says the check cannot tell a wrong value there (informative false).
//   bf16  (staged and fused, CPU and CUDA)
//         scores                  rtol 2e-2, atol max(2e-2, B)
//         scaled                  rtol 2e-2, atol max(2e-2, B / sqrt(d_k))
//         logits                  rtol 2e-2, atol max(2e-2, B / (sqrt(d_k) T))
//         mask                    exact (atol = rtol = 0)
//         weights                 rtol 2e-2, atol max(2e-2, L16 / 2)
//         output                  rtol 2e-2, atol max(2e-2, L16 * max|V| + V16); weight rows sum
//                                 to 1 within 2e-2
//     where B = (2u + u^2 + 1.01 d_k 2^-24) max|q_row| max|k_row| (u = 2^-8, over the heads): the
//     rounding bound of the scores once Q and K are rounded to bf16 (bf16_score_bound), and
//     L16 = 2^-8 * max|ref logit|: bf16's unit roundoff (8 significant bits) at the largest logit,
//     what logits computed from bf16 values can deliver. As for fp32's L, a softmax passes at most
//     half of it to a weight and an output row at most L16 * max|V|; it grows as the temperature
//     falls, where 2e-2 no longer bounds what bf16 delivers. V16 = 3u max_ic Σ_j P_ij |V_jc|: V
//     rounded to bf16 (u), P rounded to bf16 before P·V and l summed from the rounded P (2u), each
//     relative to the sum behind the entry, which 2e-2 of |O| misses where the terms cancel (a
//     large V at a high temperature: O near 0, Σ P |V| near max|V|).
// VerifyOptions' atol / rtol, when given, replace the defaults for every compared stage.
#pragma once

#include "core/problem.h"
#include "core/trace.h"

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace attnlab {

// The relative tolerance of fp32 stages, and bf16's tolerance (relative and absolute): also the
// error bounds of `attnlab bench` (engine/bench.h error_bound).
inline constexpr double kRtolFp32 = 1e-5;
inline constexpr double kBf16Tol = 2e-2;

struct Tolerance {
  double atol = 0;
  double rtol = 0;
};

struct StageCheck {
  std::string stage;               // scores | scaled | mask | logits | weights | output
  Tolerance tol;
  double max_abs_err = 0;          // over elements where both are finite
  std::optional<double> max_rel_err;  // over finite elements with |ref| > atol; none where no element is
  std::size_t elements = 0;
  std::size_t failures = 0;        // elements outside tolerance, -inf / NaN mismatches included
  std::size_t inf_mismatches = 0;  // -inf against finite (either way), or NaN
  long long worst_row = -1, worst_col = -1;  // first element with the largest excess, if any
  std::string note;                // e.g. a shape mismatch
  // Weights and output only: the widest difference any value inside the stage's range can have
  // from the reference (1 for weights in [0, 1]; for the output, the widest column span of V,
  // since each output is a weighted mean of V's rows), and whether the allowance is below it. At
  // an extreme temperature the bound of what fp32 (or bf16) logits can deliver reaches the whole
  // range: the check then passes every value in range and says nothing of its correctness.
  double range = 0;
  bool informative = true;
  bool pass = true;
};

struct VerifyOptions {
  std::optional<double> atol, rtol;  // replace the default tolerances of every compared stage
  // With kept stages, the (n, m) stages compared (StageBit); a run that brought back only some
  // (RunOptions::stages) is checked on those. The output is always compared.
  unsigned stages = kAllStages;
};

struct VerifyReport {
  std::string backend;
  Variant variant = Variant::Staged;
  Precision precision = Precision::FP32;
  int heads = 1, n = 0, m = 0, d_k = 0, d_v = 0;
  int kv_heads = 1;  // the key/value heads the query heads share (the header says so where fewer)
  int splits = 0;    // the decode run's key splits per key/value head (0: another variant)
  double temperature = 1;
  MaskKind mask = MaskKind::None;
  int prefix = 0;  // the prefix rule's P (mask_text), 0 none
  // modifications_text and the problem's source (a bundle, a synthetic pattern) in each language;
  // empty where it has none.
  std::string modifications, modifications_zh, source, source_zh;
  // The tolerances given on the command line (--atol, --rtol), which replace the defaults for every
  // stage but the mask; empty where the default applies.
  std::optional<double> atol_given, rtol_given;

  std::vector<StageCheck> stages;

  bool weights_checked = false;    // false for fused traces (no weights materialised)
  double worst_row_sum_dev = 0;    // max over rows of |sum_j w_ij - 1|
  long long worst_row_sum_row = -1;
  double row_sum_tol = 0;
  bool row_sum_pass = true;
  std::size_t masked_count = 0;    // (row, key) pairs masked, over all heads
  std::size_t masked_nonzero = 0;  // of which the weight is not exactly 0.0
  bool masked_zero = true;

  bool pass = true;
  // The stages whose allowance spans their whole range (StageCheck::informative false).
  std::vector<std::string> uninformative() const;
};

// max over the output's entries of Σ_j P_ij |V_jc| (P the reference's weights): the size of the sum
// behind an output entry, which its rounding errors scale with even where its terms cancel (the
// output then near 0).
double max_weighted_abs_v(const Problem& p, const TraceD& ref);

// The default tolerance of `stage` for a trace of `precision` (see the header comment).
Tolerance default_tolerance(const std::string& stage, const Problem& p, const TraceD& ref,
                            Precision precision);

// Compares `t` (any backend) with `ref` = reference_fp64(p). Never throws on a mismatch: a shape
// or value mismatch is a failed stage in the report.
VerifyReport verify_trace(const Problem& p, const Trace& t, const TraceD& ref,
                          const VerifyOptions& opt = {});

// Human-readable table in `lang`, ending in a line "PASS" or "FAIL" (in zh the line starts with
// it, followed by the Chinese word). Stage names and figures are the same in both languages.
std::string render_verify_text(const VerifyReport& r, Lang lang = Lang::En);
// The same figures as a JSON object (non-finite numbers as null).
std::string render_verify_json(const VerifyReport& r);

}  // namespace attnlab
