// Values whose weighted sum overflows fp32 before it is normalised. The online-softmax kernels
// (fused fp32 and bf16, decode, the walk, the fused backward's forward) keep acc = Σ_j p_j V_j with
// weights p_j <= 1 and divide by l = Σ_j p_j only at the end, so acc reaches l · max |V| (l up to
// the number of keys) where the output acc / l is at most max |V|: a V near fp32's largest values
// overflows acc while the staged chain, which normalises first, computes the output. Such a run
// throws ValuesOverflow (cpu/online_softmax.h row_overflow); run_values_in_range then runs it again
// on V · 2^-e and the caller multiplies what is linear in V by 2^e. Powers of two change only the
// exponent, so the result is the same to the bit except where a scaled value of V becomes
// subnormal (|V| below 2^(e - 126)), whose low bits are lost; an output that does not fit fp32
// even so is refused (Msg::OverflowOutputRow). One place for every CPU variant; the CUDA kernels
// keep their own refusal.
#pragma once

#include "core/problem.h"
#include "core/trace.h"
#include "core/types.h"

#include <optional>

namespace attnlab::cpu {

// Thrown by a kernel whose acc overflowed with finite scores (cpu/online_softmax.h throw_overflow).
struct ValuesOverflow : InputError {
  using InputError::InputError;
};

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

// What run_values_in_range_kept ran: e (0 when V as given passed) and, for e > 0, the problem
// with V · 2^-e, for a caller that reads more of what the kernel ran on afterwards.
struct ValuesRun {
  int e = 0;
  std::optional<Problem> scaled;
  const Problem& problem(const Problem& given) const { return scaled ? *scaled : given; }
};

// Runs run(p); where it throws ValuesOverflow, runs run(with_values_scaled(p, e)). What the run
// made that is linear in V (the output, acc) is then 2^-e times its value: the caller scales it
// back.
template <class Run>
ValuesRun run_values_in_range_kept(const Problem& p, Run&& run) {
  try {
    run(p);
    return {};
  } catch (const ValuesOverflow&) {
  }
  ValuesRun r;
  r.e = values_exponent(p);
  r.scaled.emplace(with_values_scaled(p, r.e));
  run(*r.scaled);
  return r;
}

// The same, returning e only (0 when the first run passed).
template <class Run>
int run_values_in_range(const Problem& p, Run&& run) {
  return run_values_in_range_kept(p, run).e;
}

// run(q, t) for p into t: where acc overflowed, again on V · 2^-e, and t.output scaled back.
// What every CPU online-softmax chain (cpu/chains.h) is wrapped in.
template <class Run>
void output_in_range(const Problem& p, Precision precision, Trace& t, Run&& run) {
  const int e = run_values_in_range(p, [&](const Problem& q) { run(q, t); });
  if (e > 0) scale_values_back(t.output, e, p.n(), precision);
}

}  // namespace attnlab::cpu
