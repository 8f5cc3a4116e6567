// Options shared by the attnlab subcommands (demo, run, verify, bench, describe, walk, backward)
// and the code that turns them into a Problem. Each subcommand lives in its own cli/cmd_*.cpp and registers itself
// through one of the register_* functions below; main.cpp only builds the app and maps
// exceptions to exit codes (InputError -> 2, CLI11 parse errors -> 2, anything else -> 1).
#pragma once

#include "core/backward.h"

#include "core/backend.h"
#include "core/messages.h"
#include "core/problem.h"
#include "core/report.h"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>

namespace attnlab::cli {

struct ProblemArgs {
  // input: demo, files or random
  std::string q_file, k_file, v_file;
  std::optional<int> random_n;
  int d_k = 64, d_v = 64;
  std::uint64_t seed = 0;
  int heads = 1;
  std::optional<int> queries;    // --queries Q: the last Q of the N positions (decode); default N
  std::optional<int> kv_heads;   // --kv-heads G: key/value heads shared by the heads; default heads
  int splits = 0;                // --split S of the decode variant; 0: the machine's choice
  bool split_given = false;      // --split was given (0 included: refused beside another variant)
  std::string pattern;           // --pattern of the random problem (core/patterns.h); empty = noise
  // a captured model's bundle (core/bundle.h): directory, call (index or name), one head or all
  std::string bundle;
  std::string layer = "0";
  std::optional<int> head;
  // state
  std::string query;             // token or index; empty = default (demo: 上下文, else 0)
  std::optional<double> temperature;  // default: demo 0.85, else 1.0
  std::string mask = "none";     // none | causal | FILE
  // modifications (core/inputs.h specs); unset: none
  std::optional<std::string> rope;        // --rope [THETA]
  std::optional<std::string> score_mod;   // --score-mod SPEC
  std::optional<std::string> mask_mod;    // --mask-mod SPEC
  std::string tokens, tokens_file;
  std::string lang;              // zh | en; empty = from the locale (lang_from_args)
  std::string format = "text";   // text | json | csv | markdown
  std::string backend = "auto";  // auto | cpu | cuda
  std::string variant = "staged";  // staged | fused | decode
  std::string precision = "fp32";
  std::string output_file;
  // The options of the random problem and of the bundle that were typed (their defaults cannot
  // tell "--dk 64" from nothing): --dk, --dv, --seed, --layer.
  std::set<std::string> given;
};

// Adds --query --temperature --mask --lang --format --backend (and, when `inputs` is true,
// --q --k --v --random --dk --dv --seed --tokens --tokens-file --output) to `cmd`.
void add_state_options(CLI::App* cmd, ProblemArgs& a);
// `bundle_head` false: no --head (walk has its own, the head among the stacked heads).
void add_input_options(CLI::App* cmd, ProblemArgs& a, bool bundle_head = true);
// --bundle --layer (and --head when `head`), part of add_input_options; demo adds them alone.
void add_bundle_options(CLI::App* cmd, ProblemArgs& a, bool head = true);

// Builds and validates the Problem: the demo when `demo` is true, else files, --random or
// --bundle (exactly one of them; otherwise InputError). Applies temperature, mask and tokens.
// `fits`, where given, is called with a random problem's sizes (of what runs: one head with
// --head) once its options are checked and before its inputs are generated: what a command could
// not hold is refused there, not after seconds of generating (at a million tokens).
Problem build_problem(const ProblemArgs& a, bool demo, const std::function<void(const ProblemSize&)>& fits = {});
Lang resolve_lang(const ProblemArgs& a);

// The upstream gradient of `backward` and `walk --backward`, from --dout FILE, --loss sum|mse:FILE
// or --dout-seed S (a random dO; seed 0 when none is given). check_upstream_options refuses, before
// anything is read, both --dout and --loss, --dout-seed with either, an unknown loss and a seed
// that is not a whole number; upstream_of checks the same and reads the files.
void check_upstream_options(const std::string& dout, const std::string& loss, const std::string& dout_seed);
Upstream upstream_of(const std::string& dout, const std::string& loss, const std::string& dout_seed);
// Query row: --query resolved against the problem, or the default (demo 2, else 0).
int resolve_query_arg(const ProblemArgs& a, const Problem& p, bool demo);

// True when the command names its own inputs (files, --random or --bundle), else it runs the demo.
bool uses_inputs(const ProblemArgs& a);
// --variant / --precision as RunOptions, every stage kept: what run_problem runs.
RunOptions run_options(const ProblemArgs& a);
// Runs --backend with run_options(a) on p (fallback as the registry's).
Trace run_problem(const ProblemArgs& a, const Problem& p);

// Refuses with InputError an --output FILE that cannot be written (a directory, a missing folder,
// no permission), before any work: the file is opened for appending and, when it did not exist,
// removed again. An empty path (stdout) passes.
void check_output_path(const std::string& path);
// Refuses an --output FILE that is one of the files the command reads (`inputs`: the option and its
// path), as the same file by any name (a link, ./q.csv): the result would replace its own input.
void check_output_not_input(const std::string& output, const std::vector<std::pair<std::string, std::string>>& inputs);
// The files of --dout FILE and --loss mse:FILE, for check_output_not_input.
std::vector<std::pair<std::string, std::string>> upstream_files(const std::string& dout, const std::string& loss);

// A result that could not be written once the work was done (a full disk, /dev/full, a closed
// pipe): the command's input was fine, so main exits 1, not 2 (README, exit codes), with the
// catalogued words of the failure.
struct WriteError : std::runtime_error {
  Message message;
  explicit WriteError(Message m) : std::runtime_error(m.en), message(std::move(m)) {}
};
// Writes text to --output FILE when given, else stdout; throws WriteError when that fails.
void emit(const std::string& output_file, const std::string& text);

// Subcommand registration; each returns through the exit code stored in `exit_code`.
void register_demo_and_run(CLI::App& app, int& exit_code);   // cli/cmd_demo_run.cpp
void register_describe(CLI::App& app, int& exit_code);       // cli/cmd_demo_run.cpp
void register_verify(CLI::App& app, int& exit_code);         // cli/cmd_verify.cpp
void register_bench(CLI::App& app, int& exit_code);          // cli/cmd_bench.cpp
void register_backward(CLI::App& app, int& exit_code);       // cli/cmd_backward.cpp

}  // namespace attnlab::cli
