// The CPU backend object: dispatches the staged and fused variants, estimates the working set
// before allocating, and times repeated runs for `attnlab bench` with a steady clock.
#include "cpu/cpu_backend.h"

#include "core/format.h"

#include <algorithm>
#include <chrono>
#include <string>

namespace attnlab {

double host_working_set_bytes(const Problem& p, const RunOptions& opt) {
  const double hn = static_cast<double>(p.heads) * p.n();
  const double inputs = 4.0 * (p.q.size() + p.k.size() + p.v.size());
  const double output = 4.0 * hn * p.d_v();
  const double stages = opt.variant == Variant::Staged ? 4.0 * (4.0 * hn * p.m() + 1.0 * p.n() * p.m()) : 0;
  return inputs + output + stages;
}

double reference_fp64_bytes(const Problem& p) {
  const double hn = static_cast<double>(p.heads) * p.n();
  return 8.0 * (4.0 * hn * p.m() + 1.0 * p.n() * p.m() + hn * p.d_v());
}

namespace {

void check_fits(const Problem& p, const RunOptions& opt) {
  check_host_memory(host_working_set_bytes(p, opt),
                    "the problem (" + std::string(to_string(opt.variant)) + " chain on the CPU)",
                    "try --variant fused or a smaller N");
}

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }

  static void check(const Problem& p, const RunOptions& opt) {
    if (opt.precision != Precision::FP32)
      throw InputError("the CPU backend computes in fp32 only; bf16 needs --backend cuda --variant fused");
    validate(p);
    check_fits(p, opt);
  }

  static Trace compute(const Problem& p, const RunOptions& opt) {
    if (opt.variant == Variant::Fused) return cpu_fused(p);
    return opt.keep_stages ? cpu_staged(p) : cpu_staged_output_only(p);
  }

  Trace run(const Problem& p, const RunOptions& opt) override {
    check(p, opt);
    return compute(p, opt);
  }

  // Checked once; the timed repetitions are the computation alone (no /proc/meminfo read).
  BenchSample bench(const Problem& p, const RunOptions& opt, int warmup, int repeat) override {
    RunOptions o = opt;
    o.keep_stages = false;
    check(p, o);
    BenchSample s;
    s.peak_bytes = static_cast<std::size_t>(host_working_set_bytes(p, opt));
    for (int i = 0; i < warmup; ++i) compute(p, o);
    for (int i = 0; i < repeat; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      Trace t = compute(p, o);
      s.ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      if (o.variant == Variant::Staged) s.stages.push_back(t.timings);
      if (i + 1 == repeat) s.output = std::move(t.output);
    }
    return s;
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace attnlab
