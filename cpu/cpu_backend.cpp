// The CPU backend object: dispatches the staged and fused variants, fp32 or bf16, estimates the
// working set before allocating, and times repeated runs for `attnlab bench` with a steady clock.
#include "cpu/cpu_backend.h"
#include "cpu/chains.h"

#include "core/format.h"
#include "core/memory.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

namespace attnlab {

double host_working_set_bytes(const ProblemSize& s, const RunOptions& opt) {
  const double hn = static_cast<double>(s.heads) * s.n, kvm = static_cast<double>(s.kv_heads) * s.m;
  const double q = hn * s.d_k, k = kvm * s.d_k;
  // bf16: the inputs' bf16 copies besides (packed pairs or rounded fp32; at most 4 bytes each).
  const double input_copies = opt.precision == Precision::BF16 ? 2.0 : 1.0;
  double inputs = input_copies * input_bytes(s);
  // RoPE: Q and K turned (rotated_qk), kept with the inputs.
  if (s.rope) inputs += 4.0 * (q + k);
  // Decode: K in the kernel's panels besides (cpu/decode.cpp), in the cache's precision.
  if (opt.variant == Variant::Decode) inputs += (opt.precision == Precision::BF16 ? 2.0 : 4.0) * k;
  // Fused fp32: V in strips for the wide tiles' P V besides, where the kernel makes them.
  if (opt.variant == Variant::Fused && opt.precision == Precision::FP32) inputs += 4.0 * cpu::fused_v_strip_floats(s);
  const double output = 4.0 * hn * s.d_v;
  const bool kept = opt.variant == Variant::Staged && opt.keep_stages && !opt.pool;
  const double stages = kept ? kept_stage_bytes(s) : 0;
  // Without kept stages the staged chain holds a few rows of every stage per worker.
  const double workers = std::max(1u, std::thread::hardware_concurrency());
  double scratch = opt.variant == Variant::Staged && !kept ? 4.0 * 64 * s.m * workers : 0;
  // bf16 staged, kept stages or not: a block of 64 rows of scores (padded to 32 keys) and of
  // their bf16 pairs per worker.
  if (opt.variant == Variant::Staged && opt.precision == Precision::BF16)
    scratch = 6.0 * 64 * (s.m + 32) * workers;
  return inputs + output + stages + scratch;
}

double host_working_set_bytes(const Problem& p, const RunOptions& opt) {
  return host_working_set_bytes(size_of(p), opt);
}

double kept_stage_bytes(const ProblemSize& s) {
  return 4.0 * ((4.0 + s.score_stages) * s.heads * s.n * static_cast<double>(s.m) + 1.0 * s.n * s.m);
}

void check_cpu_run_fits(const ProblemSize& s, const RunOptions& opt) {
  // The staged chain's refusal suggests the fused kernel; the online kernels' has no lighter variant to name.
  check_host_memory(host_working_set_bytes(s, opt),
                    opt.variant == Variant::Staged ? Msg::HostMemoryCpuRun : Msg::HostMemoryCpuOnline,
                    {std::string(to_string(opt.variant))});
}

double reference_fp64_bytes(const ProblemSize& s) {
  // The kept stages in double, and the output.
  return 2.0 * kept_stage_bytes(s) + 8.0 * s.heads * s.n * static_cast<double>(s.d_v);
}

namespace {

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }

  static void check(const Problem& p, const RunOptions& opt) {
    if (opt.precision != Precision::FP32 && opt.precision != Precision::BF16)
      throw InputError("the CPU backend computes in fp32 or bf16 (fp64 is the reference)");
    validate(p);
    check_cpu_run_fits(size_of(p), opt);
  }

  // A run of a problem check() accepted: the chains do not validate it again.
  static void compute(const Problem& p, const RunOptions& opt, Trace& out) {
    const bool bf16 = opt.precision == Precision::BF16;
    if (opt.variant == Variant::Decode) {
      if (opt.pool || !opt.rows.empty())
        throw InputError("pooled views and exact rows come from the staged chain, not the decode kernel");
      cpu::decode_into(p, opt, out);
      return;
    }
    if (opt.variant == Variant::Fused) {
      if (opt.pool || !opt.rows.empty())
        throw InputError("pooled views and exact rows come from the staged chain, not the fused kernel");
      bf16 ? cpu::fused_bf16_into(p, out) : cpu::fused_into(p, out);
      return;
    }
    if (bf16)
      cpu::staged_bf16_into(p, opt, out);
    else
      cpu::staged_into(p, opt, out);
  }

  Trace run(const Problem& p, const RunOptions& opt) override {
    Trace t;
    run_into(p, opt, t);
    return t;
  }

  // The staged chain computes every stage into the trace (each is the next one's input), then
  // leaves out what opt.stages does not ask for.
  void run_into(const Problem& p, const RunOptions& opt, Trace& out) override {
    check(p, opt);
    compute(p, opt, out);
    drop_unrequested_stages(opt, out);
  }

  // Checked once; the timed repetitions are the computation alone (no /proc/meminfo read), into
  // one Trace whose buffers every repetition reuses, as the viewer's redraws do. The staged chain
  // keeps every stage: what it costs to show them.
  BenchSample bench(const Problem& p, const RunOptions& opt, int warmup, int repeat) override {
    RunOptions o = opt;
    o.keep_stages = o.variant == Variant::Staged;
    check(p, o);
    BenchSample s;
    s.peak_bytes = static_cast<std::size_t>(host_working_set_bytes(p, o));
    // opt.cancel (the perf view's Cancel) is checked between repetitions only: a repetition is
    // either timed whole or not run.
    const std::atomic<bool>* cancel = o.cancel;
    o.cancel = nullptr;
    const auto stop = [cancel] {
      if (cancel && cancel->load()) throw Cancelled();
    };
    Trace t;
    for (int i = 0; i < warmup; ++i) {
      stop();
      compute(p, o, t);
    }
    for (int i = 0; i < repeat; ++i) {
      stop();
      const auto t0 = std::chrono::steady_clock::now();
      compute(p, o, t);
      s.ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      if (o.variant == Variant::Staged) s.stages.push_back(t.timings);
    }
    // The decode kernel's split count (opt.splits, or the cores' and the cache's choice).
    if (o.variant == Variant::Decode) {
      s.kernel = "cpu split-KV decode splits=" + std::to_string(t.splits);
      s.splits = t.splits;
    }
    s.output = std::move(t.output);
    return s;
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace attnlab
