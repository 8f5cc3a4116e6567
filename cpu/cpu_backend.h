// The Eigen CPU backend (the lab's reference on every machine) and the fp64 reference chain.
//   staged  — every stage materialised, fp32 (cpu/staged.cpp)
//   fused   — blockwise online softmax, never materialises N x N, fp32, threads (cpu/fused.cpp)
//   fp64    — the same staged chain in double; what tests and `verify` compare against
#pragma once

#include "core/backend.h"

#include <memory>

namespace attnlab {

std::unique_ptr<Backend> make_cpu_backend();

// Staged chain in fp32: every stage of the Trace filled. Validates first.
Trace cpu_staged(const Problem& p);
// The same, keeping only `output` and the mask (has_stages = false): large problems, benchmarks.
Trace cpu_staged_output_only(const Problem& p);
// The same chain in double precision on the fp32 inputs (upcast). Validates first.
TraceD reference_fp64(const Problem& p);
// Fused blockwise kernel (online softmax), fp32; fills only output (has_stages = false).
// Implemented in cpu/fused.cpp.
Trace cpu_fused(const Problem& p);

}  // namespace attnlab
