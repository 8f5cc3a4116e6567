// Companion runs: what a view needs computed beside every run of the state on screen (the
// precision view's fp64 reference, the diff view's B run), on the session's worker, in the same
// job as the run, and adopted together with it, so that the pair on screen always belongs to one
// request. A view describes its companion (an immutable Companion: views/<name>/ defines its own)
// and reads the result back (Session::companion<T>()); the session knows none of them.
#pragma once

#include "core/problem.h"
#include "core/trace.h"
#include "core/types.h"

#include <atomic>
#include <memory>
#include <string>

namespace attnlab::viewer {

// The settings one run depends on beyond the problem's inputs (the diff view's A and B).
struct RunSetting {
  double temperature = 1;
  MaskKind mask = MaskKind::None;
  std::string backend = "cpu";
  Variant variant = Variant::Staged;
  Precision precision = Precision::FP32;
  int query = 0;
  bool operator==(const RunSetting&) const = default;
  // True when a run with `b` computes the same numbers as with this one (only the query differs).
  bool same_run(const RunSetting& b) const {
    return temperature == b.temperature && mask == b.mask && backend == b.backend && variant == b.variant &&
           precision == b.precision;
  }
};

// What a companion is computed from, on the worker.
struct CompanionInput {
  std::shared_ptr<const Problem> problem;  // the run's problem
  // The run's trace when the companion is computed beside it; null when the companion alone is
  // computed for the trace on screen (the view asked for it after the run).
  const Trace* main = nullptr;
  RunSetting setting;     // the run's request (its query clamped to the rows, the backend asked for)
  int step = 1;           // the chain's step on screen when the job was posted
  bool cuda_ok = false;
  std::string cuda_reason;
  const std::atomic<bool>* cancel = nullptr;  // for the runs a companion makes
};

// A companion's result; views derive their own.
class CompanionResult {
 public:
  virtual ~CompanionResult() = default;
};

class Companion {
 public:
  virtual ~Companion() = default;
  // Which computation this is: a companion of another key needs a new run; one of the same key
  // replaces the one asked for without a run (it may carry hints for later runs, such as the
  // precision view's error kind).
  virtual std::string key() const = 0;
  // On the worker. May throw Cancelled (the whole job is abandoned); any other failure is the
  // result's to carry (the view says why), so that the run it belongs to is still adopted.
  virtual std::shared_ptr<const CompanionResult> compute(const CompanionInput& in) const = 0;
  // Whether it is computed also where the session streams (its problem too large to keep every
  // stage): only a companion whose cost does not grow with n·m, such as one row's walk.
  virtual bool streams() const { return false; }
};

}  // namespace attnlab::viewer
