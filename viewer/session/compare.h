// Compare (the information panel's buttons): two runs of the problem on screen side by side, CPU
// against CUDA (the staged chain on both), or the staged chain against the fused kernel on the
// chosen backend (works without a GPU); each stage's max |difference| and time. A result belongs
// to the run it compared (Session::run_revision). Free of SDL and ImGui.
#pragma once

#include "core/types.h"
#include "viewer/session/session.h"

#include <cstdint>
#include <string>
#include <vector>

namespace attnlab::viewer {

struct StageCompare {
  std::string stage;        // "scores" | "scaled" | "logits" | "weights" | "output"
  double max_abs_diff = 0;  // max |b - a| over all entries (-inf == -inf counts as 0)
  double a_ms = 0, b_ms = 0;  // the stage's time in each run (0 when not timed apart)
};

struct CompareResult {
  bool done = false;
  std::string error;          // why it could not run
  std::string a_name, b_name;  // "CPU" / "CUDA", or "staged" / "fused"
  double a_total_ms = 0, b_total_ms = 0;
  std::vector<StageCompare> stages;
  std::uint64_t run = 0;      // Session::run_revision of the run it compared
  double speed_up() const { return b_total_ms > 0 ? a_total_ms / b_total_ms : 0; }  // a / b
};

// max |a - b| over all entries; equal infinities count as 0, any other non-finite mismatch (or a
// shape mismatch) as +inf.
double max_abs_diff(const MatrixF& a, const MatrixF& b);

std::string compare_unavailable_reason(const Session& s);  // empty when CPU-vs-CUDA Compare can run
CompareResult run_compare(const Session& s);          // CPU and CUDA on the problem on screen
CompareResult run_variant_compare(const Session& s);  // staged vs fused on the chosen backend

}  // namespace attnlab::viewer
