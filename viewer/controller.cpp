// The viewer's controller (see controller.h).
#include "viewer/controller.h"

#include "core/format.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <sstream>
#include <utility>

namespace attnlab::viewer {
namespace {

double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

std::string limit_message(int n, const std::string& backend) {
  std::ostringstream s;
  if (backend == "cuda") {
    s << "N = " << n << " is above the viewer's CUDA limit of " << kCudaMaxTokens << " tokens";
  } else {
    s << "N = " << n << " is above the viewer's CPU limit of " << kCpuMaxTokens
      << " tokens; the CUDA backend goes up to " << kCudaMaxTokens;
  }
  return s.str();
}

}  // namespace

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

Controller::Controller(const ViewerOptions& o) {
  cuda_ok_ = cuda_available(&cuda_reason_);
  if (o.backend == "cuda" && !cuda_ok_) throw NoDeviceError("no CUDA device: " + cuda_reason_);
  backend_ = o.backend == "auto" ? (cuda_ok_ ? "cuda" : "cpu") : o.backend;
  rand_dk_ = o.d_k;
  rand_dv_ = o.d_v;
  rand_seed_ = o.seed;
  if (o.random_n) {
    rand_n_ = *o.random_n;
    if (rand_n_ > max_tokens()) throw InputError(limit_message(rand_n_, backend_));
    problem_ = random_problem(rand_n_, rand_dk_, rand_dv_, rand_seed_);
    demo_ = false;
    query_ = rand_n_ / 2;
  } else {
    problem_ = demo_problem();
    demo_ = true;
    query_ = kDemoDefaultQuery;
  }
  if (o.temperature) problem_.temperature = *o.temperature;
  problem_.mask = o.mask;
  if (!o.query.empty()) query_ = resolve_query(problem_, o.query);
  validate(problem_);
  run_now();  // errors here are the command line's: they propagate to main
}

void Controller::run_now() {
  RunOptions opt;
  const double cells = static_cast<double>(problem_.q.rows()) * problem_.m();
  // scores, scaled, logits, weights (+ mask, one head) as fp32: what keep_stages costs.
  const double need = 4.0 * (4.0 * cells + static_cast<double>(problem_.n()) * problem_.m());
  const double avail = host_available_bytes();
  need_gb_ = need / 1e9;
  avail_gb_ = avail / 1e9;
  // Two traces live at once while the new one is built (the old one stays for "last valid state").
  opt.keep_stages = avail <= 0 || 2 * need < 0.7 * avail;
  if (!opt.keep_stages) {
    spare_ = Trace{};  // the spare goes first: there may then be room for one trace
    if (need < 0.7 * avail) {
      trace_ = Trace{};  // free the old stages first, then there is room for the new ones
      opt.keep_stages = true;
    }
  }
  // The new run fills the spare trace, whose buffers are reused when the size did not change (the
  // CUDA backend then downloads into memory that is already mapped); on success the two swap, on
  // failure trace_ is untouched: the last valid state stays on screen.
  const double t0 = now_ms();
  run_backend_into(backend_, problem_, opt, spare_);
  last_run_ms_ = now_ms() - t0;
  std::swap(trace_, spare_);
  // The spare now holds the previous trace: worth keeping for the next run only at this size (a
  // 4096-token trace kept after going back to the demo held 300 MB for nothing).
  if (spare_.weights.size() != trace_.weights.size() || spare_.output.size() != trace_.output.size())
    spare_ = Trace{};
  ++revision_;
  compare_ = CompareResult{};  // a comparison belongs to the problem it ran on
}

bool Controller::rerun(const std::function<void()>& undo) {
  try {
    validate(problem_);
    run_now();
    error_.clear();
    return true;
  } catch (const std::exception& e) {
    error_ = e.what();
    undo();
    // The old trace is normally still there; it is gone only when memory forced run_now to free it.
    if (trace_.output.rows() == 0) {
      try {
        run_now();
      } catch (const std::exception&) {
      }
    }
    return false;
  }
}

bool Controller::replace_problem(Problem p, bool demo, int query) {
  // The old problem is moved aside, not copied, and moved back if the new one is refused.
  Problem old = std::exchange(problem_, std::move(p));
  const bool old_demo = std::exchange(demo_, demo);
  const int old_query = std::exchange(query_, query);
  // Bumped on refusal too (the old problem comes back): a needless re-measure, never a stale one.
  ++problem_revision_;
  return rerun([&] {
    problem_ = std::move(old);
    demo_ = old_demo;
    query_ = old_query;
  });
}

bool Controller::set_temperature(double t) {
  try {
    validate_temperature(t);
  } catch (const InputError& e) {
    error_ = e.what();
    return false;
  }
  if (t == problem_.temperature) {
    error_.clear();  // an accepted action ends the last refusal's message
    return true;
  }
  const double old = problem_.temperature;
  problem_.temperature = t;
  return rerun([&] { problem_.temperature = old; });
}

bool Controller::set_temperature_text(const std::string& text) {
  try {
    return set_temperature(parse_temperature(text));
  } catch (const InputError& e) {
    error_ = e.what();
    return false;
  }
}

bool Controller::set_query(int q) {
  if (q < 0 || q >= n()) {
    error_ = "query " + std::to_string(q) + " is outside 0.." + std::to_string(n() - 1);
    return false;
  }
  query_ = q;
  error_.clear();
  return true;
}

bool Controller::move_query(int delta) {
  return set_query(std::clamp(query_ + delta, 0, n() - 1));
}

bool Controller::set_mask(MaskKind m) {
  if (m == problem_.mask) {
    error_.clear();
    return true;
  }
  const MaskKind old = problem_.mask;
  problem_.mask = m;
  return rerun([&] { problem_.mask = old; });
}

bool Controller::toggle_mask() {
  return set_mask(problem_.mask == MaskKind::None ? MaskKind::Causal : MaskKind::None);
}

bool Controller::set_backend(const std::string& name) {
  if (name == backend_) {
    error_.clear();
    return true;
  }
  if (name == "cuda" && !cuda_ok_) {
    error_ = "no CUDA device: " + cuda_reason_;
    return false;
  }
  if (name != "cpu" && name != "cuda") {
    error_ = "unknown backend '" + name + "'";
    return false;
  }
  if (name == "cpu" && n() > kCpuMaxTokens) {
    error_ = limit_message(n(), "cpu");
    return false;
  }
  const std::string old = backend_;
  backend_ = name;
  return rerun([&] { backend_ = old; });
}

bool Controller::load_demo() {
  Problem p = demo_problem();
  p.temperature = problem_.temperature;
  p.mask = problem_.mask;
  return replace_problem(std::move(p), /*demo=*/true, kDemoDefaultQuery);
}

bool Controller::load_random(int n_tokens, int d_k, int d_v, std::uint64_t seed) {
  if (n_tokens < 1 || d_k < 1 || d_v < 1) {
    error_ = "N, d_k and d_v must be at least 1";
    return false;
  }
  if (n_tokens > max_tokens()) {
    error_ = limit_message(n_tokens, backend_);
    return false;
  }
  Problem p;
  try {
    p = random_problem(n_tokens, d_k, d_v, seed);
  } catch (const std::exception& e) {
    error_ = e.what();
    return false;
  }
  p.temperature = problem_.temperature;
  p.mask = problem_.mask;
  if (!replace_problem(std::move(p), /*demo=*/false, n_tokens / 2)) return false;
  rand_n_ = n_tokens;
  rand_dk_ = d_k;
  rand_dv_ = d_v;
  rand_seed_ = seed;
  return true;
}

std::string Controller::compare_unavailable_reason() const {
  if (!cuda_ok_) return cuda_reason_.empty() ? "no CUDA device" : cuda_reason_;
  if (n() > kCpuMaxTokens) return limit_message(n(), "cpu");
  return {};
}

const CompareResult& Controller::run_compare() {
  compare_ = CompareResult{};
  compare_.a_name = "CPU";
  compare_.b_name = "CUDA";
  const std::string why = compare_unavailable_reason();
  if (!why.empty()) {
    compare_.error = why;
    return compare_;
  }
  try {
    RunOptions opt;
    opt.keep_stages = true;
    // The chosen backend's staged run of this problem is on screen already: only the other one
    // runs (both run only when the trace kept no stages).
    Trace cpu_run, gpu_run;
    const bool reuse = trace_.has_stages && trace_.variant == Variant::Staged;
    const Trace& cpu =
        reuse && backend_ == "cpu" ? trace_ : (cpu_run = make_backend("cpu")->run(problem_, opt));
    const Trace& gpu =
        reuse && backend_ == "cuda" ? trace_ : (gpu_run = make_backend("cuda")->run(problem_, opt));
    compare_.a_total_ms = cpu.timings.total_ms;
    compare_.b_total_ms = gpu.timings.total_ms;
    const StageTimings& a = cpu.timings;
    const StageTimings& b = gpu.timings;
    compare_.stages = {
        {"scores", max_abs_diff(gpu.scores, cpu.scores), a.qk_ms, b.qk_ms},
        {"scaled", max_abs_diff(gpu.scaled, cpu.scaled), 0, 0},
        {"logits", max_abs_diff(gpu.logits, cpu.logits), a.scale_mask_ms, b.scale_mask_ms},
        {"weights", max_abs_diff(gpu.weights, cpu.weights), a.softmax_ms, b.softmax_ms},
        {"output", max_abs_diff(gpu.output, cpu.output), a.pv_ms, b.pv_ms},
    };
    compare_.done = true;
  } catch (const std::exception& e) {
    compare_.error = e.what();
  }
  return compare_;
}

const CompareResult& Controller::run_variant_compare() {
  compare_ = CompareResult{};
  compare_.a_name = "staged";
  compare_.b_name = "fused";
  try {
    RunOptions staged;
    staged.keep_stages = false;  // the output is what both compute; time it alone
    RunOptions fused = staged;
    fused.variant = Variant::Fused;
    const auto backend = make_backend(backend_);
    const Trace a = backend->run(problem_, staged);
    const Trace b = backend->run(problem_, fused);
    compare_.a_total_ms = a.timings.total_ms;
    compare_.b_total_ms = b.timings.total_ms;
    compare_.stages = {{"output", max_abs_diff(b.output, a.output), a.timings.total_ms,
                        b.timings.total_ms}};
    compare_.done = true;
  } catch (const std::exception& e) {
    compare_.error = e.what();
  }
  return compare_;
}

const MatrixF* Controller::stage_matrix(int step) const {
  const MatrixF* m = nullptr;
  switch (step) {
    case 1: m = &trace_.scores; break;
    case 2: m = &trace_.logits; break;
    case 3: m = &trace_.weights; break;
    case 4: m = &trace_.output; break;
    default: return nullptr;
  }
  return m->size() > 0 ? m : nullptr;
}

const std::vector<std::string>& Controller::column_labels(int step) const {
  if (step == 4) {
    if (static_cast<int>(dim_labels_.size()) != problem_.d_v()) {
      dim_labels_.clear();
      for (int j = 1; j <= problem_.d_v(); ++j) dim_labels_.push_back(std::to_string(j));
    }
    return dim_labels_;
  }
  return problem_.key_tokens;
}

const std::string& Controller::description(Lang lang) const {
  DescriptionCache& d = description_;
  if (d.revision != revision_ || d.query != query_ || d.lang != lang) {
    d.text = trace_.has_stages ? describe(problem_, trace_, query_, lang) : caveat(lang);
    d.revision = revision_;
    d.query = query_;
    d.lang = lang;
  }
  return d.text;
}

std::optional<RowStats> Controller::stats() const {
  if (!trace_.has_stages || trace_.weights.size() == 0) return std::nullopt;
  return row_stats(trace_, query_);
}

}  // namespace attnlab::viewer
