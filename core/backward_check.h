// The fp32 backward (cpu_backward) held to the fp64 one (reference_backward_fp64) on the same
// inputs and dO: what `attnlab backward --check` prints and the tests assert. Besides the
// comparison, two properties of the gradients in both precisions: masked entries carry exactly
// zero gradient from dlogits on, and every row of dlogits sums to zero.
//
// The bound of each entry. The fp32 gradients are computed from the fp32 forward run, whose
// errors against fp64 are verify's business (core/verify.h; its report comes along here). So the
// bound takes the forward's errors as measured — ΔP, ΔO, Δlogits, Δcapped and, with RoPE, the
// rotated ΔQr, ΔKr (|fp32 − fp64| entry by entry) — and carries them to first order through each
// formula of core/backward.h, adding the rounding of the backward's own fp32 arithmetic: u = 2⁻²⁴
// relative for an elementwise step, γ_k = k·u / (1 − k·u) of the sum of |terms| for a sum of k
// products (the standard bound for any order of summation, FMA or not). With |X| the entrywise
// absolute value and E_X the bound of X (all in double, from the fp64 run's values):
//   E_dO      = 0 for a given or random dO (both precisions read the same floats);
//               ΔO + u|dO| for mse (dO = O − Y)
//   E_dV_g    = Σ_{h of g} (ΔP_hᵀ |dO_h| + P_hᵀ E_dO_h) + γ_{group·n} Σ_h P_hᵀ |dO_h|
//   E_dP      = E_dO |V|ᵀ + γ_{d_v} |dO| |V|ᵀ
//   E_D       = rowsum(E_dO ∘ |O| + |dO| ∘ ΔO) + γ_{d_v} rowsum(|dO| ∘ |O|)
//   E_dlogits = ΔP ∘ |dP − D| + P ∘ (E_dP + E_D + u |dP − D|) + u |dlogits|   (0 where masked)
//   E_dT      = (Σ E_dlogits |logits| + |dlogits| Δlogits) / T + N u₆₄ Σ |dlogits ∘ logits| / T
//   E_dlast   = E_dlogits / T + 2u |dlast|                 (the division, and T rounded to fp32)
//   soft-cap  t = capped / C, f = (1 − t)(1 + t):  E_t = Δcapped / C + 2u|t|,  E_f = 2 E_t + 3u f,
//             E_dx = E_dcapped f + |dcapped| E_f + u |dx|
//   E_dscaled = E_dbiased (a copy),  E_dscores = E_dscaled · s + 2u |dscores|
//   E_dQr_h   = E_dscores_h |Kr_g| + |dscores_h| ΔKr_g + γ_m |dscores_h| |Kr_g|
//   E_dKr_g   = Σ_h (E_dscores_hᵀ |Qr_h| + |dscores_h|ᵀ ΔQr_h) + γ_{group·n} Σ_h |dscores_h|ᵀ |Qr_h|
//   RoPE      E_dQ at c and c + d/2 = E_dQr(c) + E_dQr(c + d/2) + u |dQ| (|cos|, |sin| <= 1), as dK
// Each entry passes when |fp32 − fp64| <= 2 E: the factor 2 covers what first order leaves out
// (products of two errors, and the fp64 run's own rounding, some 10⁻⁹ of E). An entry whose bound
// is 0 must match exactly: dO when given, and the rows of dK and dV of keys no query sees. The
// γ terms are worst cases (a real sum errs about √k·u): the bound cannot fail from rounding, and
// stays far below a gradient's scale at the lab's sizes and ordinary temperatures (the tests hold
// it under 10⁻³ of it), where a wrong term moves entries by their own size. Where the forward's
// own errors make it reach the gradient's scale (GradCheck::informative), the report warns that
// the check can no longer tell a wrong gradient.
//
// Row sums. Σ_j dlogits_ij = Σ_j P_ij dP_ij − D_i Σ_j P_ij = D_i − D_i = 0 exactly in exact
// arithmetic (Σ_j P_ij dP_ij = dO_i · (P V)_i = dO_i · O_i). In a precision of unit u the stored
// P, O and dP leave |Σ_j dlogits_ij| <= |D_i| |1 − Σ_j P_ij| + (m + 2 d_v + 2) 1.01 u (A_i + Σ_j
// |dlogits_ij|), A_i = Σ_j P_ij (|dO_i| · |V_j|): the bound checked, with Σ_j P_ij as stored.
#pragma once

#include "core/backward.h"
#include "core/verify.h"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace attnlab {

struct GradCheck {
  std::string name;            // dO dV dP D dlogits dcapped dbiased dscaled dscores dQ_rot dK_rot dQ dK dT
  std::size_t elements = 0;
  std::size_t failures = 0;    // entries with |fp32 − fp64| > bound (a NaN fails)
  double max_abs_err = 0;
  double max_bound = 0;        // the largest bound of an entry (2 E)
  double max_abs_ref = 0;      // the largest |fp64| entry: the gradient's scale
  double worst_ratio = 0;      // max |fp32 − fp64| / bound over entries (0 / 0 counts 0)
  long long worst_row = -1, worst_col = -1;
  bool pass = true;
  // Whether the bound stays below the gradient's own scale. Where it does not (an extreme
  // temperature, whose fp32 logits carry errors of their own size), a gradient of zeros, or one
  // wrong by its own size, would pass: the report says so beside the verdict.
  bool informative() const { return !(max_bound > 0 && max_bound >= max_abs_ref); }
};

struct RowSumCheck {
  double worst = 0;        // max_i |Σ_j dlogits_ij|
  double worst_ratio = 0;  // max_i |Σ_j dlogits_ij| / bound_i
  long long worst_row = -1;
  bool pass = true;
};

struct BackwardCheck {
  VerifyReport forward;          // the forward run against fp64 at verify's tolerances
  std::vector<GradCheck> grads;  // in the order the chain runs back
  std::size_t masked = 0;        // masked (query row, key) pairs, over every head
  std::size_t masked_nonzero = 0;  // of which some gradient from dlogits on is not exactly 0 (fp32 or fp64)
  RowSumCheck rows32, rows64;    // the rows of dlogits, fp32 and fp64
  // check_fused_backward's: the fused gradients held within the largest bound of the staged
  // run's entries; the forward, masked and row-sum parts are the staged run's.
  bool fused = false;
  // What the fused backward's own weights may add to the largest bound of dV and of D
  // (check_fused_backward), from check_backward: 2 (2 max|Δlogit| + κ u) times the largest sum of
  // |terms| the weights enter, Σ_h P_hᵀ |dO_h| for dV and rowsum(|dO| ∘ (P |V|)) for D through
  // O = P V (κ below). Computed only when check_backward is asked for them (fused_extras), which
  // check_fused_backward requires.
  double fused_dv_extra = 0, fused_d_extra = 0;
  bool has_fused_extras = false;
  bool pass = true;
};

// Compares g (fp32) with ref (fp64) of the same problem and upstream gradient u (its kind says
// whether dO carries the forward's error: mse). Never throws on a mismatch. fused_extras: also
// the extras check_fused_backward adds to the bounds (a product of P and |V| per head, which a
// staged check alone does not need).
BackwardCheck check_backward(const Problem& p, const Upstream& u, const GradTrace& g, const GradTraceD& ref,
                             bool fused_extras = false);

// The fused backward (cpu/fused_backward.h: dV, D, dQ, dK and dT, no (n, m) matrix) against the
// same fp64 run, each gradient within the largest entry bound `staged` (check_backward of the fp32
// staged backward of the same problem and dO) derived for it: the fused kernel computes the same
// formulas in fp32 from the same inputs, in another order (the γ terms hold for any order) and
// with P recomputed from the forward's m and l (an error of the staged softmax's kind). The staged
// bound carries the staged run's measured ΔP, entry by entry; the fused run's weights come from
// its own scores (the same dot products in another order, whose logits err as much as the staged
// run's, max|Δlogit| measured there) and are recomputed (2^x by a polynomial within 1.3 ulp, its
// argument's rounding, at most ln 2 · |x| 2^-|x| <= 0.54 ulp of the weight, the product with 1 / l
// and that quotient's rounding: κ = 4 ulp), so a weight of the fused run may be off by
// P (2 max|Δlogit| + κ u) where the staged one is not. Where a gradient has few terms (dV of one
// query, D of a one-column V) that shows beside the bound's other parts, so dV and D get it on top
// (fused_dv_extra, fused_d_extra). dQ, dK and dT keep the staged bound: sums over the keys, their
// γ_m terms have covered the difference in every random draw (tests/test_random_problems.cpp and
// its soak). Passes when every gradient does and the staged check passes (else its bounds prove nothing); the
// forward's report, the masked count and the row sums are the staged check's. `staged` must have
// been made with fused_extras (std::logic_error otherwise).
BackwardCheck check_fused_backward(const GradTrace& fused, const GradTraceD& ref, const BackwardCheck& staged);

// The report as text (a table, the masked and row-sum lines, PASS or FAIL last) and as JSON.
std::string render_backward_check_text(const BackwardCheck& c, Lang lang);
nlohmann::ordered_json backward_check_json(const BackwardCheck& c);

}  // namespace attnlab
