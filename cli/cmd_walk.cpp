// `attnlab walk`: the online softmax of one query row, key tile by key tile, through the CPU fused
// kernel's own update step (cpu/walk.h), then the final output against the staged chain, the CPU
// fused kernel, the CUDA fused kernel (when a device answers) and fp64. Problem options as demo
// and run (the demo when no inputs are given), plus --head and --tile. --backward walks the row
// through the fused backward instead (cpu/walk_backward.h): P recomputed from the forward's m and
// l, dP, dS, the running dQ, key tile by key tile; dO as `attnlab backward` takes it.
#include "cli/common.h"

#include "core/backend.h"
#include "core/format.h"
#include "core/memory.h"
#include "core/walk.h"
#include "cpu/walk.h"
#include "cpu/walk_backward.h"
#include "engine/registry.h"

#include <algorithm>
#include <memory>
#include <string>

namespace attnlab::cli {
namespace {

struct WalkJob {
  ProblemArgs args;
  std::string tile;  // as typed; empty = default_walk_tile
  std::string head = "0";
  bool backward = false;
  std::string dout, loss, dout_seed;  // --backward's upstream, as `attnlab backward` takes it
  bool split_given = false;  // --split typed (run's default 0, "automatic", is no split count here)
};

// A whole number >= min as typed, blanks around it allowed as the other options allow them:
// digits only (no sign, no spaces inside, no exponent); else the refusal `refusal`
// (Msg::WalkTileCount, WalkHeadCount) of the text.
int parse_count(const std::string& typed, int min, Msg refusal) {
  const std::string text = trim_blanks(typed);
  const bool digits = !text.empty() && text.size() <= 9 &&
                      text.find_first_not_of("0123456789") == std::string::npos;
  const long long v = digits ? std::stoll(text) : -1;
  if (!digits || v < min) throw InputError(refusal, {text});
  return static_cast<int>(v);
}

// The walk is rendered in memory before it is written: each key's logit, exp and weight (P, dP
// and dS backward), and per tile its acc and output (its dQ backward) and a few figures; the bytes
// a number takes at the process's peak, JSON's tree and text's lines, were measured with GNU time.
// Refused before the row is walked where that would not fit (it had run out of memory half-way,
// a JSON tree's destructor then ending the process).
void check_walk_fits(const Problem& p, int tile, bool backward, Format format, const std::string& word) {
  const double keys = p.m(), tiles = walk_tile_count(p.m(), tile);
  const double numbers = 3 * keys + tiles * ((backward ? p.d_k() : 2.0 * p.d_v()) + 10);
  check_host_memory(numbers * (format == Format::Json ? 100 : 20), Msg::HostMemoryWalk,
                    {word, format_number("%.3g", numbers)});
}

void run_walk(const WalkJob& job) {
  const ProblemArgs& a = job.args;
  const bool demo = !uses_inputs(a);
  // Typos in --tile and --head cost nothing: checked before the problem is built.
  const int tile_arg = job.tile.empty() ? 0 : parse_count(job.tile, 1, Msg::WalkTileCount);
  const int head = parse_count(job.head, 0, Msg::WalkHeadCount);
  const Format format = parse_format_among(a.format, {Format::Text, Format::Json, Format::Markdown}, Msg::WalkFormat);
  const auto head_range = [head](int heads) {
    return InputError(Msg::OptionRange, {"--head", "0", std::to_string(heads - 1), std::to_string(head)});
  };
  const auto tile_range = [](int m, int tile) {
    return InputError(Msg::WalkTileRange, {std::to_string(m), std::to_string(tile)});
  };
  // A random problem's head and tile are checked against its sizes before its inputs are generated.
  const auto fits = [&](const ProblemSize& s) {
    if (head >= s.heads) throw head_range(s.heads);
    if (tile_arg > s.m) throw tile_range(s.m, tile_arg);
  };
  // A bundle's call with a different mask for each head is read one head at a time: the walk's
  // head alone, walked as head 0 of that problem and named as the head it is (`shown`).
  Problem p;
  int walked = head;
  try {
    p = build_problem(a, demo, fits);
  } catch (const InputError& e) {
    if (a.bundle.empty() || e.id != Msg::BundleMaskPerHead) throw;
    ProblemArgs one = a;
    one.head = head;
    p = build_problem(one, demo);
    walked = 0;
  }
  const auto shown = [head](auto& w) { w.head = head; };
  const int query = resolve_query_arg(a, p, demo);
  const Lang lang = resolve_lang(a);
  const int tile = tile_arg > 0 ? tile_arg : default_walk_tile(demo, p.m());
  if (walked >= p.heads) throw head_range(p.heads);
  if (tile > p.m()) throw tile_range(p.m(), tile);
  check_walk_fits(p, tile, job.backward, format, a.format);

  if (!job.backward && (!job.dout.empty() || !job.loss.empty() || !job.dout_seed.empty()))
    throw InputError(Msg::WalkBackwardOnly, {});
  if (job.backward) {
    if (job.split_given) throw InputError(Msg::WalkSplitBackward, {});
    if (a.backend == "cuda")
      throw InputError(Msg::WalkBackwardCuda, {});
    check_output_not_input(a.output_file, upstream_files(job.dout, job.loss));
    const Upstream u = upstream_of(job.dout, job.loss, job.dout_seed);
    BackwardWalk w = walk_backward_row(p, u, walked, query, tile);
    shown(w);
    emit(a.output_file, render_backward_walk(w, lang, format));
    return;
  }
  Walk w = walk_row(p, walked, query, tile);
  check_walk(p, w);
  if (job.split_given) walk_splits(p, a.splits, w);  // it refuses S outside 1..m, an explicit 0 too
  shown(w);
  // The CUDA fused kernel on the whole problem, the row read back: only where a device answers
  // and --backend is not cpu.
  std::string reason;
  if (a.backend == "cpu") {
    w.cuda_note = lang == Lang::Zh ? "未运行（--backend cpu）" : "not run (--backend cpu)";
  } else if (!cuda_available(&reason)) {
    if (a.backend == "cuda") throw NoDeviceError(Msg::NoDevice, {reason});
    w.cuda_note = render_message(Msg::NoDevice, {cuda_reason_text(reason, lang)}, lang);
  } else {
    RunOptions opt;
    opt.variant = Variant::Fused;
    opt.keep_stages = false;
    const Trace t = run_backend("cuda", p, opt);
    const Eigen::Index row = static_cast<Eigen::Index>(walked) * p.n() + query;
    std::vector<double> out(static_cast<std::size_t>(p.d_v()));
    for (int c = 0; c < p.d_v(); ++c) out[c] = t.output(row, c);
    w.cuda_fused_diff = walk_max_abs_diff(w.output, out);
    w.cuda_fused_output = std::move(out);
  }
  emit(a.output_file, render_walk(w, lang, format));
}

}  // namespace

void register_walk(CLI::App& app, int& exit_code) {
  auto job = std::make_shared<WalkJob>();
  CLI::App* c = app.add_subcommand(
      "walk",
      "Inside the fused kernel: the online softmax of one query row, key tile by key tile (tile "
      "max, running max m, rescale α, running sum l, accumulator, output so far), computed by the "
      "CPU fused kernel's own update step; then the output against the staged chain, the kernels "
      "and fp64. The demo when no inputs are given");
  add_input_options(c, job->args, /*bundle_head=*/false);  // --head below: the head of the problem
  add_state_options(c, job->args);
  // The walk is the fp32 fused kernel's own step: a --variant or --precision would be ignored.
  c->remove_option(c->get_option("--variant"));
  c->remove_option(c->get_option("--precision"));
  c->get_option("--format")->description("Output format: text, json or markdown")->type_name("text|json|markdown");
  // --split is run's with another meaning here: it asks for the split walk, without --variant decode.
  c->get_option("--split")->description(
      "After the walk: the same row split-KV, as the decode kernel computes it with the keys in S splits (1..m): "
      "each split's state, each merge, the merged output against the walk and fp64 (default: none)");
  c->add_option("--tile", job->tile, "Keys per tile, 1..m (default: 2 on the demo, else 64, or below 256 keys the largest power of two giving at least 4 full tiles)")
      ->type_name("B");
  c->add_option("--head", job->head, "Head of a --heads problem (default 0)")->type_name("H");
  c->add_flag("--backward", job->backward,
              "Walk the row through the fused backward (FlashAttention-2's): P recomputed from the forward's m and l, "
              "dP = dO·V, dS = P (dP − D), the running dQ, tile by tile; then dQ against the fused backward and fp64");
  c->add_option("--dout", job->dout, "With --backward: dO from FILE ((heads·n) x d_v, CSV or .npy)")->type_name("FILE");
  c->add_option("--loss", job->loss, "With --backward: dO from a loss, sum or mse:FILE")->type_name("sum|mse:FILE");
  c->add_option("--dout-seed", job->dout_seed, "With --backward: seed of the random dO (default 0)")->type_name("S");
  c->footer("Examples:\n  attnlab walk --lang en\n  attnlab walk --mask causal --query 3 --tile 2\n"
            "  attnlab walk --random 4096 --dk 64 --dv 64 --tile 64 --query 100 --format json\n"
            "  attnlab walk --random 65536 --queries 1 --heads 8 --kv-heads 2 --head 5 --mask causal --split 4\n"
            "  attnlab walk --backward --lang en\n"
            "  attnlab walk --backward --random 256 --mask causal --query 200 --tile 64 --loss sum");
  c->callback([job, c, &exit_code] {
    job->split_given = c->count("--split") > 0;
    run_walk(*job);
    exit_code = 0;
  });
}

}  // namespace attnlab::cli
