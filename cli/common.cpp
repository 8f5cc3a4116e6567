// The options shared by attnlab's subcommands and the code that turns them into a validated
// Problem: the demo, three matrix files (CSV or .npy) or a seeded random problem; temperature,
// mask (none | causal | mask file), token labels, query, language. Every bad value becomes an
// InputError with a message naming the option, so main() can print one line and exit 2.
#include "cli/common.h"

#include "core/backend.h"
#include "core/bundle.h"
#include "core/inputs.h"
#include "core/memory.h"

#include "core/format.h"
#include "core/io.h"
#include "core/messages.h"
#include "core/modify.h"
#include "core/patterns.h"
#include "engine/registry.h"

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

namespace attnlab::cli {
namespace {

// Limits for --random: far beyond what the lab shows, small enough that a typo is refused with
// a message instead of an allocation failure.
constexpr long long kMaxRandomN = kMaxTokens;
constexpr int kMaxDim = 1 << 16;
constexpr int kMaxHeads = 4096;
constexpr double kMaxInputBytes = 8.0 * (1ull << 30);

void check_random_size(const ProblemArgs& a) {
  const long long n = *a.random_n;
  const auto range = [](const char* option, long long most, long long got) {
    return InputError(Msg::OptionRange, {option, "1", std::to_string(most), std::to_string(got)});
  };
  if (n < 1 || n > kMaxRandomN) throw range("--random N", kMaxRandomN, n);
  if (a.d_k < 1 || a.d_k > kMaxDim) throw range("--dk", kMaxDim, a.d_k);
  if (a.d_v < 1 || a.d_v > kMaxDim) throw range("--dv", kMaxDim, a.d_v);
  if (a.heads < 1 || a.heads > kMaxHeads) throw range("--heads", kMaxHeads, a.heads);
  const int q = a.queries.value_or(static_cast<int>(n)), g = a.kv_heads.value_or(a.heads);
  if (q < 1 || q > n) throw InputError(Msg::QueriesRange, {std::to_string(n), std::to_string(q)});
  if (g < 1 || g > a.heads) throw InputError(Msg::KvHeadsRange, {std::to_string(a.heads), std::to_string(g)});
  if (a.heads % g != 0) throw InputError(Msg::KvHeads, {std::to_string(a.heads), std::to_string(g)});
  // One head of the H (one_head's refusal), before all H are generated.
  if (a.head && (*a.head < 0 || *a.head >= a.heads))
    throw InputError(Msg::OptionRange, {"--head", "0", std::to_string(a.heads - 1), std::to_string(*a.head)});
  const double rows = static_cast<double>(a.heads) * static_cast<double>(n);
  if (rows > 2147483647.0) throw InputError(Msg::RandomRows, {std::to_string(n), std::to_string(a.heads)});
  // Every head's inputs are generated, also where --head keeps one of them.
  ProblemSize all;
  all.heads = a.heads;
  all.kv_heads = g;
  all.n = q;
  all.m = static_cast<int>(n);
  all.d_k = a.d_k;
  all.d_v = a.d_v;
  const double bytes = input_bytes(all);
  if (bytes > kMaxInputBytes)
    throw ResourceError(Msg::RandomInputsLimit,
                        {std::to_string(n), std::to_string(a.d_k), std::to_string(a.d_v), std::to_string(a.heads),
                         format_bytes(bytes), format_bytes(kMaxInputBytes)});
  // Under the limit, the room this process has (ulimit -v, a container): refused before generating
  // (the inputs alone: a command's own estimate, build_problem's hook, counts the run on top).
  check_host_memory(bytes, Msg::RandomInputsHost,
                    {std::to_string(n), std::to_string(a.d_k), std::to_string(a.d_v), std::to_string(a.heads)});
}

// Records in a.given that `o` was typed.
CLI::Option* noted(CLI::Option* o, ProblemArgs& a) {
  return o->each([&a, name = o->get_name()](const std::string&) { a.given.insert(name); });
}

// An option of one kind of input given with another: refused, as it would be ignored.
void refuse_given(const ProblemArgs& a, const std::vector<std::string>& names, Msg why) {
  for (const std::string& name : names)
    if (a.given.count(name)) throw InputError(why, {name});
}

}  // namespace

void add_state_options(CLI::App* cmd, ProblemArgs& a) {
  cmd->add_option("--query", a.query,
                  "Query row to select: a token label or a 0-based index "
                  "(default: 上下文 in the demo, else 0)");
  cmd->add_option_function<std::string>(
         "--temperature",
         [&a](const std::string& s) { a.temperature = parse_temperature(s); },
         "Softmax temperature T > 0, a decimal number (default: 0.85 in the demo, else 1.0)")
      ->type_name("T");
  cmd->add_option("--mask", a.mask,
                  "none (bidirectional), causal (query i sees keys up to its position: the n "
                  "queries are the last n of the m keys) or FILE: an n x m mask of 0 / -inf (CSV or .npy)")
      ->type_name("none|causal|FILE");
  cmd->add_option("--rope", a.rope,
                  "Rotary position embedding of Q and K before QKᵀ, with base THETA (default 10000 when "
                  "given without a value); rotate-half: value c turns with value c + d_k/2 (Hugging Face's convention)")
      ->expected(0, 1)
      ->type_name("[THETA]");
  cmd->add_option("--score-mod", a.score_mod,
                  "Modifications of the scaled scores, joined by ',' or '+': alibi (standard slopes), "
                  "alibi:S or alibi:S1/S2/... (given slopes), bias:FILE (an n x m or heads*n x m additive "
                  "matrix, CSV or .npy), softcap:C (C tanh(s/C)); none")
      ->type_name("SPEC");
  cmd->add_option("--mask-mod", a.mask_mod,
                  "Mask modifications with --mask, joined by ',' or '+': causal, window:W (|i - j| < W), "
                  "document:FILE (a document id per position), prefix:P (prefix-LM: the first P positions "
                  "seen both ways, the rest causal); none")
      ->type_name("SPEC");
  cmd->add_option("--lang", a.lang, "Language of the text: zh or en (default: from the locale, LC_ALL, else LC_MESSAGES, else LANG)")
      ->type_name("zh|en");
  cmd->add_option("--format", a.format, "Output format: text (the page's tables), json, csv "
                                        "or markdown")
      ->type_name("text|json|csv|markdown");
  cmd->add_option("--backend", a.backend,
                  "auto (CUDA when a device answers, else CPU), cpu or cuda")
      ->type_name("auto|cpu|cuda");
  cmd->add_option("--variant", a.variant,
                  "staged (every stage kept), fused (online softmax; only the output) or decode "
                  "(split-KV: the keys cut into splits whose partial softmax states are merged)")
      ->type_name("staged|fused|decode");
  cmd->add_option("--split", a.splits,
                  "With --variant decode: key splits per key/value head, 1 to the number of keys "
                  "(left out: chosen from the cores and the number of keys)")
      ->type_name("S")
      ->each([&a](const std::string&) { a.split_given = true; });
  cmd->add_option("--precision", a.precision,
                  "fp32, or bf16 (bf16 operands and weights, fp32 sums: the CUDA bf16 kernels' arithmetic, in every variant)")
      ->type_name("fp32|bf16");
}

void add_bundle_options(CLI::App* cmd, ProblemArgs& a, bool head) {
  cmd->add_option("--bundle", a.bundle,
                  "Instead of files: a bundle of captured attention calls (manifest.json + .npy, "
                  "written by scripts/attnlab_capture.py); its scale, mask and tokens apply")
      ->type_name("DIR");
  noted(cmd->add_option("--layer", a.layer, "The bundle's call to use: its index (default 0; a whole number is always the index) or its name"), a)
      ->type_name("L");
  if (head)
    cmd->add_option("--head", a.head,
                    "One head of the bundle's call, or of --random N --heads H (default: every head, "
                    "stacked)")
      ->type_name("H");
}

void add_input_options(CLI::App* cmd, ProblemArgs& a, bool bundle_head) {
  cmd->add_option("--q", a.q_file, "Q (n x d_k) as CSV or .npy (float32/float64, 2-D, C order)")
      ->type_name("FILE");
  cmd->add_option("--k", a.k_file, "K (m x d_k) as CSV or .npy")->type_name("FILE");
  cmd->add_option("--v", a.v_file, "V (m x d_v) as CSV or .npy")->type_name("FILE");
  cmd->add_option("--random", a.random_n,
                  "Instead of files: a random problem of N positions (N keys, and N queries unless "
                  "--queries), standard-normal entries")
      ->type_name("N");
  noted(cmd->add_option("--dk", a.d_k, "d_k of the random problem (default 64)"), a)->type_name("D");
  noted(cmd->add_option("--dv", a.d_v, "d_v of the random problem (default 64)"), a)->type_name("D");
  noted(cmd->add_option("--seed", a.seed, "Seed of the random problem; same seed, same problem "
                                          "(default 0)"), a)
      ->type_name("S");
  cmd->add_option("--heads", a.heads, "Independent heads (B*H) of the random problem "
                                      "(default 1; tables show head 0)")
      ->type_name("H");
  cmd->add_option("--queries", a.queries,
                  "Queries of the random problem: the last Q of its N positions, against all N keys "
                  "(decode shapes; default N)")
      ->type_name("Q");
  cmd->add_option("--kv-heads", a.kv_heads,
                  "Key/value heads of the random problem, each shared by --heads / G query heads "
                  "(grouped-query attention; default: one per head)")
      ->type_name("G");
  cmd->add_option("--pattern", a.pattern,
                  "Structure of the random problem's Q and K (synthetic, not a trained model): "
                  "noise (default), local:W (a window of +-W), sink (key 0), previous (the key "
                  "before), induction (a repeated sequence; causal)")
      ->type_name("P");
  add_bundle_options(cmd, a, bundle_head);
  cmd->add_option("--tokens", a.tokens,
                  "Token labels a,b,c: n labels (queries, and keys when m = n) or n + m "
                  "(default 0, 1, ...)")
      ->type_name("a,b,c");
  cmd->add_option("--tokens-file", a.tokens_file, "Token labels, one per line")
      ->type_name("FILE");
  cmd->add_option("--output", a.output_file, "Write the result to FILE instead of stdout")
      ->type_name("FILE");
}

namespace {

// The sizes of the random problem a's options describe (checked by check_random_size), of what
// runs: one head with --head.
ProblemSize random_size(const ProblemArgs& a) {
  const int n = static_cast<int>(*a.random_n);
  ProblemSize s;
  s.heads = a.head ? 1 : a.heads;
  s.kv_heads = a.head ? 1 : a.kv_heads.value_or(a.heads);
  s.n = a.queries.value_or(n);
  s.m = n;
  s.d_k = a.d_k;
  s.d_v = a.d_v;
  s.rope = a.rope && *a.rope != "none";
  if (a.score_mod) {  // the spec's form and names (its files are read with the inputs)
    Problem named;
    apply_score_mod_spec(named, *a.score_mod, SpecFiles::NamesOnly);
    s.score_stages = std::popcount(score_mod_stages(named.mods, !named.mods.bias_name.empty()));
  }
  return s;
}

}  // namespace

Problem build_problem(const ProblemArgs& a, bool demo, const std::function<void(const ProblemSize&)>& fits) {
  // Option values that do not depend on the inputs are checked first, so a typo costs nothing.
  check_backend_name(a.backend);
  check_output_path(a.output_file);
  {
    // The files a problem reads: its matrices, a mask, labels, and a modification's bias or documents.
    std::vector<std::pair<std::string, std::string>> inputs = {
        {"--q", a.q_file}, {"--k", a.k_file}, {"--v", a.v_file}, {"--mask", a.mask}, {"--tokens-file", a.tokens_file}};
    for (const auto& [option, spec] : {std::pair{"--score-mod", a.score_mod}, std::pair{"--mask-mod", a.mask_mod}}) {
      std::string item;
      for (const char ch : (spec ? *spec : std::string()) + ",") {
        if (ch != ',' && ch != '+') {
          item += ch;
          continue;
        }
        for (const char* form : {"bias:", "document:"})
          if (item.rfind(form, 0) == 0) inputs.emplace_back(option, item.substr(std::strlen(form)));
        item.clear();
      }
    }
    check_output_not_input(a.output_file, inputs);
  }
  parse_format(a.format);
  parse_variant(a.variant);
  parse_precision(a.precision);
  if (!a.lang.empty()) parse_lang(a.lang);
  const Pattern pattern = a.pattern.empty() ? Pattern{} : parse_pattern(a.pattern);
  if (!a.pattern.empty() && !a.random_n) throw InputError(Msg::PatternNeedsRandom, {});

  if ((a.queries || a.kv_heads) && !a.random_n)
    throw InputError(Msg::ShapesRandom, {a.queries ? "--queries" : "--kv-heads"});
  if (a.bundle.empty() && a.head && !a.random_n) throw InputError(Msg::HeadApplies, {});

  Problem p;
  int bundle_heads = 0;  // the bundle call's query heads
  const bool files = !a.q_file.empty() || !a.k_file.empty() || !a.v_file.empty();
  if (demo) {
    refuse_given(a, {"--dk", "--dv", "--seed"}, Msg::OnlyRandomDemo);
    if (a.heads != 1) throw InputError(Msg::OnlyRandomDemo, {"--heads"});
    p = demo_problem();
  } else if ((files ? 1 : 0) + (a.random_n ? 1 : 0) + (a.bundle.empty() ? 0 : 1) > 1) {
    throw InputError(a.bundle.empty() ? Msg::FilesOrRandom : Msg::OneInput, {});
  } else if (!a.bundle.empty()) {
    refuse_given(a, {"--dk", "--dv", "--seed"}, Msg::OnlyRandomBundle);
    if (a.heads != 1) throw InputError(Msg::HeadsBundle, {});
    if (a.mask != "none") throw InputError(Msg::MaskBundle, {});
    const Bundle b = read_bundle(a.bundle);
    const int layer = resolve_layer(b, a.layer);
    p = bundle_problem(b, layer, a.head);
    bundle_heads = b.calls[static_cast<std::size_t>(layer)].heads;
  } else if (files) {
    refuse_given(a, {"--dk", "--dv", "--seed"}, Msg::OnlyRandomFiles);
    if (a.heads != 1 && !a.q_file.empty() && !a.k_file.empty() && !a.v_file.empty())
      throw InputError(Msg::HeadsRandomOnly, {});
    p = problem_from_files(a.q_file, a.k_file, a.v_file);
  } else if (a.random_n) {
    check_random_size(a);
    if (fits) fits(random_size(a));
    const int n = static_cast<int>(*a.random_n);
    const int q = a.queries.value_or(n), g = a.kv_heads.value_or(a.heads);
    if (pattern.kind == PatternKind::Noise) {
      p = random_problem(q, n, a.d_k, a.d_v, a.seed, a.heads, g);
    } else {
      // A pattern is a whole sequence: its decode shape keeps the last q queries of each head
      // and the keys of the first query head of each group.
      p = decode_view(pattern_problem(pattern, n, a.d_k, a.d_v, a.seed, a.heads), q, g);
    }
  } else {
    throw InputError(Msg::NeedInputs, {});
  }
  if (a.bundle.empty() && (a.layer != "0" || a.given.count("--layer"))) throw InputError(Msg::LayerBundleOnly, {});
  // A typed --split is a count, 0 included (left out, the kernel chooses).
  if (a.split_given && parse_variant(a.variant) == Variant::Decode) check_split_count(a.splits, p.m());

  p.temperature = a.temperature.value_or(demo ? 0.85 : 1.0);
  // The labels before the masks, so that a refusal of a row (fully masked) names the row's token.
  apply_token_spec(p, a.tokens, a.tokens_file);
  // induction comes with its causal mask; --mask causal or a mask file still apply.
  if (a.bundle.empty() && !(pattern.kind == PatternKind::Induction && a.mask == "none"))
    apply_mask_spec(p, a.mask);
  // A bundle's call keeps what it captured: its RoPE base is not replaced, and its bias stays under
  // the score modifications typed (which add to it; a second bias is refused).
  if (a.rope) {
    if (!a.bundle.empty() && p.mods.rope_theta > 0) throw InputError(Msg::BundleGivesRope, {short_number(p.mods.rope_theta)});
    apply_rope_spec(p, a.rope->empty() ? "10000" : *a.rope);
  }
  if (a.score_mod) {
    const MatrixF bias = a.bundle.empty() ? MatrixF() : p.bias();
    const std::string bias_name = p.mods.bias_name;
    apply_score_mod_spec(p, *a.score_mod);
    if (bias.size() > 0) {
      if (!p.mods.bias_name.empty()) throw InputError(Msg::BundleGivesBias, {bias_name});
      p.edit().bias = bias;
      p.mods.bias_name = bias_name;
    }
  }
  if (a.mask_mod) apply_mask_mod_spec(p, *a.mask_mod);
  // A bundle's head read alone keeps its own ALiBi slope among the call's heads (the whole call's
  // run gives it that one), as a random problem's head does below.
  if (!a.bundle.empty() && a.head) keep_head_slope(p, bundle_heads, *a.head);
  // Head h of the H random heads, exactly as generated, after the modifications: it keeps its own
  // ALiBi slope among the H (picked first, it was a one-head problem's) and its rows of a per-head bias.
  if (a.random_n && a.head) p = one_head(p, *a.head);
  validate(p);
  return p;
}

namespace {
// Blanks around the number are dropped, as every number option's (README).
std::uint64_t parse_dout_seed(const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const std::size_t b = text.find_first_not_of(" \t"), e = text.find_last_not_of(" \t");
  const std::string core = b == std::string::npos ? std::string() : text.substr(b, e - b + 1);
  const bool digits = !core.empty() && core.find_first_not_of("0123456789") == std::string::npos;
  const unsigned long long v = digits ? std::strtoull(core.c_str(), &end, 10) : 0;
  if (!digits || errno == ERANGE)
    throw InputError(Msg::DoutSeed, {text});
  return v;
}
}  // namespace

void check_upstream_options(const std::string& dout, const std::string& loss, const std::string& dout_seed) {
  if (!dout.empty() && !loss.empty())
    throw InputError(Msg::UpstreamTwice, {});
  if (!dout_seed.empty() && (!dout.empty() || !loss.empty())) throw InputError(Msg::DoutSeedWith, {});
  if (!loss.empty() && loss != "sum" && loss.rfind("mse", 0) != 0) parse_loss(loss);
  if (!dout_seed.empty()) parse_dout_seed(dout_seed);
}

Upstream upstream_of(const std::string& dout, const std::string& loss, const std::string& dout_seed) {
  check_upstream_options(dout, loss, dout_seed);
  if (!dout.empty()) return upstream_file(dout);
  if (!loss.empty()) return parse_loss(loss);
  return upstream_random(dout_seed.empty() ? 0 : parse_dout_seed(dout_seed));
}

Lang resolve_lang(const ProblemArgs& a) {
  return a.lang.empty() ? lang_from_env() : parse_lang(a.lang);
}

int resolve_query_arg(const ProblemArgs& a, const Problem& p, bool demo) {
  if (a.query.empty()) return demo ? kDemoDefaultQuery : 0;
  return resolve_query(p, a.query);
}

bool uses_inputs(const ProblemArgs& a) {
  return !a.q_file.empty() || !a.k_file.empty() || !a.v_file.empty() || a.random_n.has_value() ||
         !a.bundle.empty();
}

RunOptions run_options(const ProblemArgs& a) {
  RunOptions opt;
  opt.variant = parse_variant(a.variant);
  opt.precision = parse_precision(a.precision);
  opt.splits = a.splits;
  // Only the split-KV kernel cuts the keys: elsewhere --split would be silently ignored.
  if (a.split_given && opt.variant != Variant::Decode)
    throw InputError(Msg::SplitVariant, {a.variant});
  opt.keep_stages = true;
  return opt;
}

Trace run_problem(const ProblemArgs& a, const Problem& p) {
  return run_backend(a.backend, p, run_options(a), resolve_lang(a));
}

void check_output_path(const std::string& path) {
  if (path.empty()) return;
  std::error_code ec;
  const bool existed = std::filesystem::exists(path, ec);
  std::FILE* f = std::fopen(path.c_str(), "ab");
  if (!f) throw InputError(Msg::CannotWrite, {path, std::strerror(errno)});
  std::fclose(f);
  if (!existed) std::filesystem::remove(path, ec);
}

void check_output_not_input(const std::string& output, const std::vector<std::pair<std::string, std::string>>& inputs) {
  if (output.empty()) return;
  for (const auto& [option, path] : inputs) {
    std::error_code ec;
    if (!path.empty() && std::filesystem::equivalent(output, path, ec) && !ec)
      throw InputError(Msg::OutputIsInput, {output, option});
  }
}

std::vector<std::pair<std::string, std::string>> upstream_files(const std::string& dout, const std::string& loss) {
  return {{"--dout", dout}, {"--loss", loss.rfind("mse:", 0) == 0 ? loss.substr(4) : std::string()}};
}

void emit(const std::string& output_file, const std::string& text) {
  if (output_file.empty()) {
    std::cout << text << std::flush;
    if (!std::cout) throw WriteError(message_of(Msg::WriteStdout, {}));
    return;
  }
  try {
    write_file(output_file, text);
  } catch (const InputError& e) {
    throw WriteError(message_of(e));
  }
}

}  // namespace attnlab::cli
