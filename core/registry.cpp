// The backend registry: which backends this build offers, "auto" = CUDA when a device answers,
// else the CPU; and the one place where a CUDA failure under "auto" becomes a CPU run with one
// line on stderr.
#include "core/backend.h"
#include "cpu/cpu_backend.h"

#ifdef ATTNLAB_HAVE_CUDA
#include "kernels/cuda_backend.h"
#endif

#include <iostream>

namespace attnlab {

bool cuda_available(std::string* reason) {
#ifdef ATTNLAB_HAVE_CUDA
  return cuda::device_available(reason);
#else
  if (reason) *reason = "attnlab was built without CUDA";
  return false;
#endif
}

void check_backend_name(const std::string& name) {
  if (name != "auto" && name != "cpu" && name != "cuda")
    throw InputError("unknown backend '" + name + "' (use auto, cpu or cuda)");
}

std::unique_ptr<Backend> make_backend(const std::string& name) {
  check_backend_name(name);
  if (name == "cpu") return make_cpu_backend();
  if (name == "cuda") {
#ifdef ATTNLAB_HAVE_CUDA
    return cuda::make_backend();
#else
    throw NoDeviceError("no CUDA device: attnlab was built without CUDA");
#endif
  }
  if (cuda_available()) return make_backend("cuda");  // "auto"
  return make_cpu_backend();
}

void run_backend_into(const std::string& name, const Problem& p, const RunOptions& opt, Trace& out) {
  std::unique_ptr<Backend> backend = make_backend(name);
  if (name != "auto" || backend->name() == "cpu") return backend->run_into(p, opt, out);
  try {
    return backend->run_into(p, opt, out);
  } catch (const DeviceError& e) {
    std::cerr << "attnlab: CUDA failed (" << e.what() << "); falling back to the CPU\n";
  } catch (const ResourceError& e) {
    std::cerr << "attnlab: CUDA refused the problem (" << e.what() << "); falling back to the CPU\n";
  }
  // The CPU runs the requested precision (bf16 included: the CUDA bf16 kernel's arithmetic).
  make_cpu_backend()->run_into(p, opt, out);
}

Trace run_backend(const std::string& name, const Problem& p, const RunOptions& opt) {
  Trace t;
  run_backend_into(name, p, opt, t);
  return t;
}

namespace {

// The (n, m) stages of a trace by StageBit, in the order of stage_names.
struct StageEntry {
  unsigned bit;
  const char* name;
  MatrixF Trace::*matrix;
};
constexpr StageEntry kStageEntries[] = {{kStageScores, "scores", &Trace::scores},
                                        {kStageScaled, "scaled", &Trace::scaled},
                                        {kStageMask, "mask", &Trace::mask},
                                        {kStageLogits, "logits", &Trace::logits},
                                        {kStageWeights, "weights", &Trace::weights}};

}  // namespace

std::vector<std::string> stage_names(unsigned stages) {
  std::vector<std::string> out;
  for (const StageEntry& e : kStageEntries)
    if (stages & e.bit) out.emplace_back(e.name);
  return out;
}

unsigned present_stages(const Trace& t) {
  unsigned s = 0;
  if (t.has_stages)
    for (const StageEntry& e : kStageEntries)
      if ((t.*e.matrix).size() > 0) s |= e.bit;
  return s;
}

void drop_unrequested_stages(const RunOptions& opt, Trace& t) {
  if (!t.has_stages) return;
  for (const StageEntry& e : kStageEntries)
    if (!(opt.stages & e.bit)) t.*e.matrix = MatrixF();
}

void check_stream_request(const Problem& p, const RunOptions& opt) {
  const long total = static_cast<long>(p.heads) * p.n();
  for (int g : opt.rows)
    if (g < 0 || g >= total)
      throw InputError("row " + std::to_string(g) + " is outside 0.." + std::to_string(total - 1));
  if (!opt.pool) return;
  const PoolRequest& r = *opt.pool;
  if (r.head < 0 || r.head >= p.heads)
    throw InputError("pooled head " + std::to_string(r.head) + " is outside 0.." + std::to_string(p.heads - 1));
  const auto check_axis = [](const PoolAxis& a, int total, const char* what) {
    if (a.begin.size() != a.end.size() || a.begin.empty())
      throw InputError(std::string("pooled ") + what + ": no pixels, or begin/end of different lengths");
    for (int i = 0; i < a.size(); ++i)
      if (a.begin[i] < 0 || a.end[i] <= a.begin[i] || a.end[i] > total || (i > 0 && a.begin[i] < a.begin[i - 1]))
        throw InputError(std::string("pooled ") + what + ": pixel " + std::to_string(i) +
                         " covers an empty or out-of-range interval");
  };
  check_axis(r.rows, p.n(), "rows");
  check_axis(r.cols, p.m(), "columns");
}

}  // namespace attnlab
