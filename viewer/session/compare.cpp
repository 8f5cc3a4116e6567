// Compare (see compare.h).
#include "viewer/session/compare.h"

#include "core/messages.h"
#include "engine/registry.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace attnlab::viewer {

double max_abs_diff(const MatrixF& a, const MatrixF& b) {
  if (a.rows() != b.rows() || a.cols() != b.cols()) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (Eigen::Index i = 0; i < a.size(); ++i) {
    const float x = a.data()[i], y = b.data()[i];
    if (x == y) continue;  // also equal infinities (masked logits)
    const double d = std::abs(static_cast<double>(x) - static_cast<double>(y));
    if (!std::isfinite(d)) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, d);
  }
  return worst;
}

std::string compare_unavailable_reason(const Session& s) {
  if (!s.cuda_ok()) return s.cuda_reason().empty() ? "no CUDA device" : s.cuda_reason();
  if (s.n() > kKeepStagesMaxTokens)
    return "Compare keeps every stage on both backends, which the viewer does up to N = " + std::to_string(kKeepStagesMaxTokens);
  return {};
}

CompareResult run_compare(const Session& s) {
  CompareResult out;
  out.run = s.run_revision();
  out.a_name = "CPU";
  out.b_name = "CUDA";
  const std::string why = compare_unavailable_reason(s);
  if (!why.empty()) {
    out.error = why;
    return out;
  }
  try {
    RunOptions opt;
    opt.keep_stages = true;
    // The chosen backend's staged run of this problem is on screen already: only the other one
    // runs (both run only when the trace kept no stages).
    Trace cpu_run, gpu_run;
    // (Compare is fp32: a bf16 run on screen is not reused; nor one that kept only some stages,
    // --stages step or auto above its size on CUDA, whose missing ones would compare as empty.)
    const bool reuse = s.all_stages_kept() && s.trace().variant == Variant::Staged && s.trace().precision == Precision::FP32;
    const std::string& ran = s.trace().backend;
    const Trace& cpu =
        reuse && ran == "cpu" ? s.trace() : (cpu_run = make_backend("cpu")->run(s.problem(), opt));
    const Trace& gpu =
        reuse && ran == "cuda" ? s.trace() : (gpu_run = make_backend("cuda")->run(s.problem(), opt));
    out.a_total_ms = cpu.timings.total_ms;
    out.b_total_ms = gpu.timings.total_ms;
    const StageTimings& a = cpu.timings;
    const StageTimings& b = gpu.timings;
    out.stages = {
        {"scores", max_abs_diff(gpu.scores, cpu.scores), a.qk_ms, b.qk_ms},
        {"scaled", max_abs_diff(gpu.scaled, cpu.scaled), 0, 0},
        {"logits", max_abs_diff(gpu.logits, cpu.logits), a.scale_mask_ms, b.scale_mask_ms},
        {"weights", max_abs_diff(gpu.weights, cpu.weights), a.softmax_ms, b.softmax_ms},
        {"output", max_abs_diff(gpu.output, cpu.output), a.pv_ms, b.pv_ms},
    };
    out.done = true;
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  return out;
}

CompareResult run_variant_compare(const Session& s) {
  CompareResult out;
  out.run = s.run_revision();
  out.a_name = "staged";
  out.b_name = "fused";
  try {
    RunOptions staged;
    staged.keep_stages = false;  // the output is what both compute; time it alone
    RunOptions fused = staged;
    fused.variant = Variant::Fused;
    const auto backend = make_backend(s.trace().backend.empty() ? s.backend() : s.trace().backend);
    const Trace a = backend->run(s.problem(), staged);
    const Trace b = backend->run(s.problem(), fused);
    out.a_total_ms = a.timings.total_ms;
    out.b_total_ms = b.timings.total_ms;
    out.stages = {{"output", max_abs_diff(b.output, a.output), a.timings.total_ms, b.timings.total_ms}};
    out.done = true;
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  return out;
}

}  // namespace attnlab::viewer
