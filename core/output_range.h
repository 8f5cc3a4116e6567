// An output that fp32 can hold although a kernel's running sums cannot, for every backend.
//
// The online-softmax kernels (fused fp32 and bf16, decode, the walk, the fused backward's forward)
// keep acc = Σ_j p_j V_j with weights p_j <= 1 and divide by l = Σ_j p_j only at the end, so acc
// reaches l · max |V| (l up to the number of keys) where the output acc / l is at most max |V|: a V
// near fp32's largest values overflows acc while the staged chain, which normalises first, computes
// the output. Such a problem is run again on V · 2^-e and what is linear in V multiplied by 2^e.
// Powers of two change only the exponent, so the result is the same to the bit except where a
// scaled value of V becomes subnormal (|V| below 2^(e - 126)), whose low bits are lost; an output
// that does not fit the precision even so is refused (Msg::OverflowOutputRow).
//
// The CPU kernels know which of their sums overflowed (cpu/values_range.h). The CUDA kernels do not
// say: output_in_range_after names the cause of a row that came out not finite from the inputs.
#pragma once

#include "core/messages.h"
#include "core/problem.h"
#include "core/trace.h"
#include "core/types.h"

namespace attnlab {

// The exponent e >= 1 for which m · max |V| · 2^-e stays below half fp32's largest value: no
// unnormalised sum over p's m keys can overflow.
int values_exponent(const Problem& p);

// p with V multiplied by 2^-e (a copy of the inputs; the derived data goes with edit()).
Problem with_values_scaled(const Problem& p, int e);

// The refusal of an output row that does not fit `precision` (Msg::OverflowOutputRow).
[[noreturn]] void refuse_output_row(int head, int row, Precision precision);

// out (rows of d_v values; row r is query r % n of head r / n) times 2^e; a row that does not fit
// `precision`'s range is refused with Msg::OverflowOutputRow.
void scale_values_back(MatrixF& out, int e, int n, Precision precision);

// The first row of out with a value that is not finite, or -1.
Eigen::Index first_row_not_finite(const MatrixF& out);

// Whether query `row` of head `head` has a visible key whose score the kernels may not hold in
// fp32: q · k (Q and K rotated where p has RoPE) with Σ_c |q_c k_c| beyond fp32's largest value
// (bf16: its inputs rounded, so a margin of 2^-7 below it), or, with score mods, the modified
// scaled score beyond it. Computed in double from p's inputs.
bool row_scores_overflow(const Problem& p, int head, int row, Precision precision);

// run(q, t) for p into t, for kernels that leave a row not finite without saying why (the CUDA
// ones). Where a row of t.output is not finite, p runs again on V · 2^-e, where no sum of V can
// overflow, and t.output is scaled back. A row still not finite there is refused by its cause: its
// scores (Msg::OverflowScoresRow, as the staged chain names them) or else its logits at this
// temperature (Msg::OverflowLogitsRow).
template <class Run>
void output_in_range_after(const Problem& p, Precision precision, Trace& t, Run&& run) {
  run(p, t);
  if (first_row_not_finite(t.output) < 0) return;
  const int e = values_exponent(p);
  run(with_values_scaled(p, e), t);
  if (const Eigen::Index bad = first_row_not_finite(t.output); bad >= 0) {
    const int n = p.n(), head = static_cast<int>(bad / n), row = static_cast<int>(bad % n);
    const Msg why = row_scores_overflow(p, head, row, precision) ? Msg::OverflowScoresRow : Msg::OverflowLogitsRow;
    throw InputError(why, {std::to_string(head), std::to_string(row), std::string(to_string(precision))});
  }
  scale_values_back(t.output, e, p.n(), precision);
}

}  // namespace attnlab
