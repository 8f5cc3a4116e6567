// `attnlab demo`, `attnlab run` and `attnlab describe`: build the Problem from the options, run it
// on the chosen backend through the registry (the CLI never computes attention itself), and
// print the rendering (text tables, json, csv, markdown) or, for describe, only the description.
#include "cli/common.h"

#include "core/backend.h"
#include "core/format.h"
#include "core/memory.h"
#include "core/stats.h"
#include "cpu/cpu_backend.h"
#include "engine/registry.h"

#include <nlohmann/json.hpp>

#include <memory>

namespace attnlab::cli {
namespace {

struct Job {
  ProblemArgs args;
  bool demo = false;
};

// JSON and CSV are complete (every number of every kept stage) and are built in memory before
// they are written: about 40 bytes per number at the process's peak, the run included (measured
// with GNU time: 0.80 GB for N = 2048, d = 16, staged, 21 million numbers, either format).
// Text and markdown summarise large problems.
constexpr double kRenderBytesPerNumber = 40;
// JSON's `rows` besides: an object of seven fields per query row of every head (its tree and its
// text), whatever the run keeps.
constexpr double kJsonBytesPerRow = 1024;

void check_rendering_fits(const ProblemArgs& a, const ProblemSize& s, Format format) {
  if (format != Format::Json && format != Format::Csv) return;
  const RunOptions opt = run_options(a);
  // What is rendered is what the run holds: inputs, output and the kept stages, all fp32.
  const double run_bytes = host_working_set_bytes(s, opt);
  const double numbers = run_bytes / sizeof(float);
  const double rows = format == Format::Json ? static_cast<double>(s.heads) * s.n : 0;
  check_host_memory(run_bytes + kRenderBytesPerNumber * numbers + kJsonBytesPerRow * rows, Msg::HostMemoryRender,
                    {a.format, format_number("%.3g", numbers)});
}

// A random problem that could not be rendered or run (on the CPU) is refused from its sizes
// (build_problem's hook), in that order as for what was built; the rendering and the backend check
// again what was built.
std::function<void(const ProblemSize&)> random_fits(const ProblemArgs& a, Format format) {
  return [&a, format](const ProblemSize& s) {
    check_rendering_fits(a, s, format);
    if (a.backend == "cpu" || (a.backend == "auto" && !cuda_available())) check_cpu_run_fits(s, run_options(a));
  };
}

void run_and_render(const Job& job) {
  const ProblemArgs& a = job.args;
  const bool demo = job.demo && !uses_inputs(a);  // demo --bundle DIR shows the bundle
  const Format format = parse_format(a.format);
  const Problem p = build_problem(a, demo, random_fits(a, format));
  const int query = resolve_query_arg(a, p, demo);
  const Lang lang = resolve_lang(a);
  check_rendering_fits(a, size_of(p), format);
  const Trace t = run_problem(a, p);
  emit(a.output_file, render(p, t, query, lang, format));
}

// The demo or, when any input option is given, the problem those options describe.
}  // namespace

void register_demo_and_run(CLI::App& app, int& exit_code) {
  auto demo = std::make_shared<Job>();
  demo->demo = true;
  CLI::App* d = app.add_subcommand(
      "demo",
      "The page's 5-token demo (模型 根据 上下文 分配 权重, d_k=3, d_v=2): every stage of the "
      "chain as a labelled table, the selected row's statistics, the description and the caveat");
  add_state_options(d, demo->args);
  add_bundle_options(d, demo->args);
  d->footer("Examples:\n  attnlab demo --lang en\n  attnlab demo --query 模型 --temperature 0.3 "
            "--mask causal\n  attnlab demo --format json");
  d->add_option("--output", demo->args.output_file, "Write the result to FILE instead of stdout")
      ->type_name("FILE");
  d->callback([demo, &exit_code] {
    run_and_render(*demo);
    exit_code = 0;
  });

  auto run = std::make_shared<Job>();
  CLI::App* r = app.add_subcommand(
      "run",
      "Any problem: Q, K, V from CSV/.npy files (--q --k --v) or a seeded random problem "
      "(--random N); same state and output options as demo");
  add_input_options(r, run->args);
  add_state_options(r, run->args);
  r->footer(
      "Files: CSV (comma or whitespace separated, '#' comments) or .npy (float32/float64, 2-D, "
      "C order).\nExamples:\n"
      "  attnlab run --random 64 --dk 16 --dv 8 --seed 1 --mask causal --query 5\n"
      "  attnlab run --q q.csv --k k.csv --v v.npy --tokens a,b,c --format json --output out.json");
  r->callback([run, &exit_code] {
    run_and_render(*run);
    exit_code = 0;
  });
}

void register_describe(CLI::App& app, int& exit_code) {
  auto job = std::make_shared<Job>();
  CLI::App* c = app.add_subcommand(
      "describe",
      "Only the description of the current picture (the demo, or the problem given by --q/--k/--v "
      "or --random), regenerated from the state; same options as demo and run");
  add_input_options(c, job->args);
  add_state_options(c, job->args);
  c->get_option("--format")->description("Output format: text, json ({\"description\": ...}) or markdown")
      ->type_name("text|json|markdown");
  c->callback([job, &exit_code] {
    const ProblemArgs& a = job->args;
    const Format format = parse_format_among(a.format, {Format::Text, Format::Json, Format::Markdown}, Msg::DescribeFormat);
    const bool demo = !uses_inputs(a);
    // The run's refusal alone: the description is a sentence.
    const Problem p = build_problem(a, demo, random_fits(a, Format::Text));
    const int query = resolve_query_arg(a, p, demo);
    const Lang lang = resolve_lang(a);
    const Trace t = run_problem(a, p);
    const std::string text = describe(p, t, query, lang);
    // json: {"description": "..."} for tools; every other format prints the sentence as it is.
    if (format == Format::Json)
      emit(a.output_file, nlohmann::json{{"description", text}}.dump(-1, ' ', false,
                                                          nlohmann::json::error_handler_t::replace) +
                  "\n");
    else
      emit(a.output_file, text + "\n");
    exit_code = 0;
  });
}

}  // namespace attnlab::cli
