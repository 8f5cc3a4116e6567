// `attnlab backward`: the staged backward pass of the problem run's options describe (the demo
// when no inputs are given): the fp32 staged chain's run, then every gradient as a labelled
// matrix, dO from --dout FILE, --loss sum | mse:FILE or a random dO (--dout-seed S); printed as
// run prints a run (text, markdown, json, csv). --check adds the comparison with the same backward
// in fp64 (core/backward_check.h) and exits 3 when it fails, as verify does.
// --variant fused runs the fused backward (cpu/fused_backward.h: FlashAttention-2's, no (n, m)
// matrix): dQ, dK, dV, D and dT; its --check holds them within the bounds the staged check
// derives (check_fused_backward). --backend cuda runs the CUDA fused backward
// (cuda::fused_backward, fp32 or bf16; --check in fp32 as the CPU's fused); the CPU's are fp32.
// --variant decode is refused with a line saying so.
#include "cli/common.h"

#include "core/backward.h"
#include "core/backward_check.h"
#include "core/backward_report.h"
#include "core/format.h"
#include "core/memory.h"
#include "core/messages.h"
#include "cpu/backward.h"
#include "cpu/cpu_backend.h"
#include "cpu/fused_backward.h"
#include "engine/registry.h"

#include <cerrno>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

namespace attnlab::cli {
namespace {

struct BackwardJob {
  ProblemArgs args;
  std::string dout;       // --dout FILE
  std::string loss;       // --loss sum | mse:FILE
  std::string dout_seed;  // --dout-seed S, as typed
  bool check = false;
};

// JSON and CSV of every stage and gradient are built in memory (run's figure, cli/cmd_demo_run.cpp).
constexpr double kRenderBytesPerNumber = 40;

// The refusals that need no input, first: what this part of the backward does not do yet, and
// options that contradict each other.
void check_options(const BackwardJob& job, Format format) {
  const ProblemArgs& a = job.args;
  const bool cuda = a.backend == "cuda";
  // First: the advice below would send the user to a command that cannot run either.
  std::string reason;
  if (cuda && !cuda_available(&reason)) throw NoDeviceError(Msg::NoDevice, {reason});
  if (cuda && a.variant != "fused") throw InputError(Msg::BackwardCudaFused, {});
  if (a.variant != "staged" && a.variant != "fused") throw InputError(Msg::BackwardVariant, {a.variant});
  if (a.precision != "fp32" && !(cuda && a.precision == "bf16"))
    throw InputError(Msg::BackwardPrecision, {a.precision});
  if (job.check && a.precision == "bf16") throw InputError(Msg::BackwardCheckBf16, {});
  if (a.split_given) throw InputError(Msg::BackwardSplit, {});
  if (job.check && format == Format::Csv) throw InputError(Msg::BackwardCheckCsv, {});
  check_upstream_options(job.dout, job.loss, job.dout_seed);
  check_output_not_input(a.output_file, upstream_files(job.dout, job.loss));
}

// The run, its gradients, with --check the same in fp64 and its bound matrices in double (a few of
// each stage's (heads n, m) and of the inputs' and gradients' shapes: core/backward_check.cpp), and
// a complete rendering, for a problem of size s: refused before anything is allocated when it
// cannot fit (a random problem's before its inputs are made: build_problem's hook).
void check_backward_fits(const BackwardJob& job, Format format, const ProblemSize& s) {
  const bool fused = job.args.variant == "fused";
  const double hnm = static_cast<double>(s.heads) * s.n * s.m;
  const double rows = static_cast<double>(s.heads) * s.n + static_cast<double>(s.kv_heads) * s.m;
  const double run = fused ? fused_backward_bytes(s) : backward_bytes(s);
  double need = run;
  // The fused --check holds the fused gradients within the staged check's bounds: both runs, which
  // share the inputs.
  if (job.check)
    need += reference_backward_bytes(s) + 8.0 * (10 * hnm + 6 * rows * (s.d_k + s.d_v)) +
            (fused ? backward_bytes(s) - input_bytes(s) : 0);
  const bool every_number = format == Format::Json || format == Format::Csv;
  if (every_number) need += kRenderBytesPerNumber * run / 4;
  // The staged run's N x N gradients are what the fused one does without (its --check keeps the
  // staged reference, so the hint is for runs without it).
  check_host_memory(need,
                    job.check      ? (every_number ? Msg::HostMemoryBackwardCheckAll : Msg::HostMemoryBackwardCheck)
                    : !fused       ? Msg::HostMemoryBackwardStaged
                    : every_number ? Msg::HostMemoryBackwardAll
                                   : Msg::HostMemoryBackward,
                    {fused ? "fused" : "staged"});
}

int run_backward(const BackwardJob& job) {
  const ProblemArgs& a = job.args;
  const Format format = parse_format(a.format);
  check_options(job, format);

  const bool demo = !uses_inputs(a);
  const Problem p = build_problem(a, demo, [&](const ProblemSize& s) { check_backward_fits(job, format, s); });
  const int query = resolve_query_arg(a, p, demo);
  const Lang lang = resolve_lang(a);
  const Upstream u = upstream_of(job.dout, job.loss, job.dout_seed);
  validate_upstream(p, u);
  // A random problem's was checked before its inputs took their room.
  if (!a.random_n) check_backward_fits(job, format, size_of(p));
  const bool fused = a.variant == "fused";

  const auto run_cuda = [&] {
    // dO from the upstream: the CPU's fused forward gives O for a loss; a file or seed needs none.
    MatrixF dout = u.kind == UpstreamKind::Random ? random_dout(static_cast<Eigen::Index>(p.heads) * p.n(), p.d_v(), u.seed)
                   : u.kind == UpstreamKind::File ? u.data
                                                  : upstream_dout(u, cpu_fused(p).output, nullptr);
    GradTrace r = run_cuda_backward(p, dout, parse_precision(a.precision));
    upstream_dout(u, r.forward.output, &r.loss);
    return r;
  };
  const GradTrace g = a.backend == "cuda" ? run_cuda() : fused ? cpu_fused_backward(p, u) : cpu_backward(p, u);
  std::optional<BackwardCheck> check;
  if (job.check) {
    const GradTraceD ref = reference_backward_fp64(p, u);
    check = fused ? check_fused_backward(g, ref, check_backward(p, u, cpu_backward(p, u), ref, true))
                  : check_backward(p, u, g, ref);
  }
  emit(a.output_file, render_backward(p, g, u, query, lang, format, check ? &*check : nullptr));
  return check && !check->pass ? 3 : 0;
}

}  // namespace

void register_backward(CLI::App& app, int& exit_code) {
  auto job = std::make_shared<BackwardJob>();
  CLI::App* b = app.add_subcommand(
      "backward",
      "The backward pass, stage by stage: given dO = ∂L/∂O (a file, a loss, or random), every gradient of the "
      "chain as a labelled matrix in the order it runs back (dO, dV = Pᵀ dO, dP = dO Vᵀ, D = rowsum(dO ∘ O), "
      "dlogits = P ∘ (dP − D), back through the temperature, the score mods and the scale, dQ, dK; RoPE turned "
      "back) and dT. Same inputs and options as run (the demo when none are given); --check compares with fp64");
  add_input_options(b, job->args);
  add_state_options(b, job->args);
  b->get_option("--variant")->description(
      "staged (every gradient kept as a matrix, the default) or fused (FlashAttention-2's backward: P recomputed "
      "tile by tile from the forward's m and l; dQ, dK, dV, D and dT, memory O(N))")
      ->type_name("staged|fused");
  // The split-KV kernel has no backward: --split is refused with its reason, and not offered.
  b->get_option("--split")->group("");
  b->get_option("--precision")->description(
      "fp32 (the CPU's backward; --check compares it with fp64), or bf16 with --backend cuda --variant fused");
  b->get_option("--backend")->description(
      "auto or cpu (the CPU), or cuda (the fused backward on the device, with --variant fused; fp32 or bf16)");
  b->add_option("--dout", job->dout,
                "The upstream gradient dO = ∂L/∂O from FILE: heads·n x d_v (the output's shape), finite, CSV or .npy")
      ->type_name("FILE");
  b->add_option("--loss", job->loss,
                "dO from a loss of the output: sum (L = Σ O, dO = 1) or mse:FILE (L = ½ Σ (O − Y)², dO = O − Y, "
                "Y from FILE, heads·n x d_v)")
      ->type_name("sum|mse:FILE");
  b->add_option("--dout-seed", job->dout_seed,
                "Without --dout or --loss: dO is standard normal from the lab's generator with this seed (default 0)")
      ->type_name("S");
  b->add_flag("--check", job->check,
              "Also run the backward in fp64 on the fp64 forward and compare every gradient within its derived bound, "
              "with the masked zeros and the row sums of dlogits; exit 3 when it fails");
  b->footer(
      "Examples:\n"
      "  attnlab backward --lang en\n"
      "  attnlab backward --random 8 --dk 4 --dv 4 --mask causal --loss sum --check\n"
      "  attnlab backward --q q.npy --k k.npy --v v.npy --dout do.npy --format json --output grads.json\n"
      "  attnlab backward --random 16 --heads 4 --kv-heads 2 --queries 4 --mask causal --rope --score-mod softcap:5\n"
      "  attnlab backward --random 65536 --variant fused --mask causal");
  b->callback([job, &exit_code] { exit_code = run_backward(*job); });
}

}  // namespace attnlab::cli
