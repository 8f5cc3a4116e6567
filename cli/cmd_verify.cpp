// `attnlab verify`: runs a backend (auto | cpu | cuda, staged or fused, fp32 or bf16) and the fp64
// CPU reference on the same inputs (the demo by default, or --q/--k/--v files, or --random N), then
// prints per stage the max absolute and relative error with the tolerances used, the worst row-sum
// deviation and whether every masked weight is exactly 0; last PASS or FAIL.
// Exit codes: 0 PASS, 3 FAIL, 2 bad input (main.cpp maps the InputError), 1 device failure.
#include "cli/common.h"

#include "core/backend.h"
#include "core/format.h"
#include "core/memory.h"
#include "core/verify.h"
#include "cpu/cpu_backend.h"

#include <cmath>
#include <memory>
#include <optional>

namespace attnlab::cli {
namespace {

struct VerifyJob {
  ProblemArgs args;
  std::optional<std::string> atol, rtol;  // as typed
};

// A tolerance as typed, read as the temperature is (parse_plain_number: plain decimal notation,
// not "0x10", "inf" or "1e400"), finite and >= 0.
std::optional<double> check_tolerance(const char* name, const std::optional<std::string>& text) {
  if (!text) return std::nullopt;
  const std::optional<double> v = parse_plain_number(*text);
  if (!v || !(std::isfinite(*v) && *v >= 0)) throw InputError(Msg::ToleranceInvalid, {name, trim_blanks(*text)});
  return v;
}

int run_verify(const VerifyJob& job) {
  const ProblemArgs& a = job.args;
  const std::optional<double> atol = check_tolerance("--atol", job.atol), rtol = check_tolerance("--rtol", job.rtol);
  const Format format = parse_format_among(a.format, {Format::Text, Format::Json}, Msg::VerifyFormat);

  const bool demo = !uses_inputs(a);
  // The backend checks its own run; the fp64 reference of every stage comes on top. A random
  // problem is checked from its sizes first, before its inputs are generated.
  const auto check_fits = [&a](const ProblemSize& s) {
    check_host_memory(host_working_set_bytes(s, run_options(a)) + reference_fp64_bytes(s), Msg::HostMemoryVerify,
                      {a.variant});
  };
  const Problem p = build_problem(a, demo, check_fits);
  check_fits(size_of(p));
  const Trace t = run_problem(a, p);
  const TraceD ref = reference_fp64(p);

  VerifyOptions vo;
  vo.atol = atol;
  vo.rtol = rtol;
  const VerifyReport report = verify_trace(p, t, ref, vo);
  emit(a.output_file, format == Format::Json ? render_verify_json(report)
                                                 : render_verify_text(report, resolve_lang(a)));
  return report.pass ? 0 : 3;
}

}  // namespace

void register_verify(CLI::App& app, int& exit_code) {
  auto job = std::make_shared<VerifyJob>();
  CLI::App* v = app.add_subcommand(
      "verify",
      "Run a backend and the fp64 CPU reference on the same inputs (the demo, --q/--k/--v files "
      "or --random N) and compare every stage: max abs/rel error against |x - ref| <= atol + "
      "rtol*|ref|, worst row-sum deviation, masked weights exactly 0; PASS (exit 0) or FAIL "
      "(exit 3)");
  add_input_options(v, job->args);
  add_state_options(v, job->args);
  // verify checks every row and prints no table: a query to select and token labels would change
  // nothing in its report, so they are not taken (an unknown option, not one silently ignored).
  for (const char* name : {"--query", "--tokens", "--tokens-file"}) v->remove_option(v->get_option(name));
  // verify prints its report, not the stages: two of the shared formats apply.
  v->get_option("--format")->description("Output format: text or json")->type_name("text|json");
  // Kept as typed; check_tolerance reads them in run_verify.
  const auto tolerance = [](std::optional<std::string>& to) { return [&to](const std::string& s) { to = s; }; };
  v->add_option_function<std::string>("--atol", tolerance(job->atol),
                                      "Absolute tolerance for every compared stage, a decimal number >= 0 "
                                      "(default: per stage, printed)")
      ->type_name("A");
  v->add_option_function<std::string>("--rtol", tolerance(job->rtol),
                                      "Relative tolerance for every compared stage, a decimal number >= 0 "
                                      "(default: 1e-5 fp32, 2e-2 bf16)")
      ->type_name("R");
  v->callback([job, &exit_code] { exit_code = run_verify(*job); });
}

}  // namespace attnlab::cli
