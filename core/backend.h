// The Backend interface: a backend turns a validated Problem into a Trace. cpu/ and kernels/
// implement it; engine/registry.h (the layer above both) names them and picks one ("auto"), so
// that core/ knows no backend. The CLI, the viewer and the tests never compute attention
// themselves, they ask a backend. Also here: the stages a run brings back (RunOptions::stages) and
// the checks every backend applies to a streaming request.
#pragma once

#include "core/pooled.h"
#include "core/problem.h"
#include "core/trace.h"

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace attnlab {

struct RunOptions {
  Variant variant = Variant::Staged;
  Precision precision = Precision::FP32;  // bf16: the CPU (staged, fused) and the CUDA fused kernel
  // false: compute every stage but bring back only `output` (large problems, benchmarks).
  bool keep_stages = true;
  // With keep_stages: the stages that come back (StageBit); the others are computed but left
  // empty in the Trace. The CUDA backend then downloads only these (the viewer on a GPU asks for
  // the step on screen and the weights instead of all five matrices).
  unsigned stages = kAllStages;

  // Streaming (staged variant, stages not kept): the pooled image of stages 1-3 over this request
  // goes into Trace::pooled, computed block by block without any (n, m) matrix.
  const PoolRequest* pool = nullptr;
  // Exact rows (of the stacked trace) whose stages go into Trace::rows, all m keys each.
  std::vector<int> rows;
  // false: skip the output (and every query row that neither `pool` nor `rows` needs), e.g. when
  // only the view was zoomed; Trace::output is then empty.
  bool output = true;

  // Set by another thread to stop the run at the next block: it then throws Cancelled.
  const std::atomic<bool>* cancel = nullptr;
  // Written by the backend as the run advances, 0..1 (may stay 0 where a backend cannot tell).
  std::atomic<float>* progress = nullptr;

  // Decode: key splits per key/value head; 0 lets the backend choose (cores, SMs, cache length).
  int splits = 0;
};

// Timings of repeated runs with the inputs already resident (device memory on CUDA): what
// `attnlab bench` reports. ms[i] is one repetition of the whole chain (staged: all four stages;
// fused: the one kernel), measured with CUDA events on the GPU and a steady clock on the CPU.
struct BenchSample {
  std::vector<double> ms;
  // Staged only: the stage times (qk, scale_mask, softmax, pv) of each timed repetition, parallel
  // to ms and measured the same way; empty for fused runs.
  std::vector<StageTimings> stages;
  std::size_t peak_bytes = 0;  // device (CUDA) or working-set (CPU) bytes the run needed
  MatrixF output;              // the output of the last repetition, for the error check
  // The kernel that ran, where a backend has several for one variant (CUDA fused: its family and
  // tile parameters, cuda::last_fused_kernel(); the CUDA backward: cuda::last_backward_kernel());
  // the decode kernels with their split count; empty otherwise.
  std::string kernel;
  int splits = 0;  // the decode kernels: the split count that ran (given, or the kernel's choice)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "cpu" | "cuda"
  // Throws InputError for a problem or option combination it cannot run (with the reason),
  // ResourceError when the estimated memory need does not fit, DeviceError on device failures.
  virtual Trace run(const Problem& p, const RunOptions& opt) = 0;
  // The same into an existing Trace: a backend may reuse out's buffers when the shapes match, so
  // repeated runs of one size (the viewer on every temperature change) allocate nothing new. On an
  // exception `out` is left in an unspecified (but valid) state.
  virtual void run_into(const Problem& p, const RunOptions& opt, Trace& out) { out = run(p, opt); }
  // Uploads once, runs `warmup` untimed and `repeat` timed repetitions. Same errors as run().
  virtual BenchSample bench(const Problem& p, const RunOptions& opt, int warmup, int repeat) = 0;
};

// Throws InputError unless the streaming parts of `opt` fit `p`: every exact row inside the
// stacked rows, the pooled head inside the heads, each pooled axis non-empty with non-decreasing,
// non-empty intervals inside the rows (keys). Every backend checks a streaming request with it.
void check_stream_request(const Problem& p, const RunOptions& opt);

// "scores", "scaled", "mask", "logits", "weights": the names of the bits in `stages`, in that order.
std::vector<std::string> stage_names(unsigned stages);

// The stages a trace holds (StageBit: its non-empty ones; 0 when it kept none).
unsigned present_stages(const Trace& t);
// The stages a run of p that keeps every stage brings back: the five of the chain, and biased /
// capped when p has those score mods.
unsigned problem_stages(const Problem& p);
// The score mods' part of that rule: kStageBiased with ALiBi or a bias (`bias`: the problem has or
// names a bias matrix), kStageCapped with a soft-cap.
unsigned score_mod_stages(const Modifications& md, bool bias);

// Empties the (n, m) stages of a kept-stage trace that `opt.stages` does not ask for (what a
// backend that computes every stage anyway does before it returns).
void drop_unrequested_stages(const RunOptions& opt, Trace& t);

}  // namespace attnlab
