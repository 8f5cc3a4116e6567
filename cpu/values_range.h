// The CPU kernels' side of core/output_range.h: an online-softmax kernel whose acc overflowed with
// finite scores throws ValuesOverflow (cpu/online_softmax.h row_overflow); run_values_in_range then
// runs it again on V · 2^-e and the caller multiplies what is linear in V by 2^e. One place for
// every CPU variant.
#pragma once

#include "core/output_range.h"
#include "core/problem.h"
#include "core/trace.h"
#include "core/types.h"

#include <optional>

namespace attnlab::cpu {

// Thrown by a kernel whose acc overflowed with finite scores (cpu/online_softmax.h throw_overflow).
struct ValuesOverflow : InputError {
  using InputError::InputError;
};

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
