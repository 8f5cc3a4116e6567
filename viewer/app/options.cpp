// Command-line parsing of attnlab-view (see options.h).
#include "viewer/app/options.h"

#include "core/format.h"
#include "core/inputs.h"
#include "core/problem.h"
#include "core/messages.h"
#include "viewer/draw/layout.h"

#include <charconv>
#include <filesystem>
#include <cmath>
#include <cstdlib>
#include <set>
#include <system_error>

#include <unistd.h>

namespace attnlab::viewer {

std::string viewer_usage() {
  return "usage: attnlab-view [--screenshot FILE.png] [--query TOKEN|INDEX] [--queries LIST] [--step 1-4]\n"
         "                    [--temperature T] [--mask none|causal|FILE] [--random N] [--dk D] [--dv D]\n"
         "                    [--rope [THETA]] [--score-mod SPEC] [--mask-mod SPEC]\n"
         "                    [--pattern noise|local:W|sink|previous|induction]\n"
         "                    [--q FILE --k FILE --v FILE] [--tokens a,b,c | --tokens-file FILE]\n"
         "                    (a mask FILE and the tokens go with the files or --random N)\n"
         "                    [--heads H] [--bundle DIR [--layer L]] [--head H]\n"
         "                    [--seed S] [--lang zh|en] [--size WxH] [--backend auto|cpu|cuda]\n"
         "                    [--pool max|mean] [--state-dump FILE.json]\n"
         "                    [--stages auto|all|step]  (the stages a run brings back; auto: the\n"
         "                    step on screen and the weights on CUDA above " +
         std::to_string(kJsonExportMaxTokens) + " tokens, else all)\n"
         "                    [--view " + [] {
           std::string names;
           for (const std::string& n : view_names()) names += (names.empty() ? "" : "|") + n;
           return names;
         }() + "] [--precision fp32|bf16]\n"
         "                    [--ui-scale S] [--fullscreen] [--bench-redraw [--repeat R]] [--bench-decode S]\n"
         "                    [--export-dir DIR] [--fuzz-events N [--fuzz-seed S]]\n" +
         views_usage() +
         "Interactive lab for scaled dot-product attention (F1 in the window lists the keys).\n"
         "--bundle DIR shows one call (--layer: index or name) of a captured model, --head H one of its\n"
         "heads; --heads H makes a random problem of H heads. --view heads: every head as a thumbnail.\n"
         "--rope, --score-mod and --mask-mod take attnlab run's specs (RoPE, alibi, softcap:C, bias:FILE;\n"
         "causal, window:W, document:FILE, prefix:P); the controls panel changes them too.\n"
         "--screenshot renders a few frames without input, writes the PNG and exits (works with\n"
         "SDL_VIDEODRIVER=dummy; in the perf view it runs the sweep to the end first). --bench-redraw\n"
         "times temperature changes (backend + heatmap)\n"
         "without a window, for --random N (default 4096), and prints milliseconds. --bench-decode S plays\n"
         "the decode view (its --cache flags) for S seconds without a window and prints the tokens shown\n"
         "per second, the kernel's time and read rate per token and the UI thread's time per frame.\n"
         "--export-dir DIR: an existing folder for the window's exports and screenshots (default: here).\n"
         "--fuzz-events N: the UI event fuzzer (docs/VIEWER.md): N seeded input events (keys, text,\n"
         "clicks, drags, wheel, resizes, view switches, Load/Generate/Export with good and bad paths)\n"
         "through the real event loop without a window, the state checked after every frame; exit 1\n"
         "and the event that broke it when one did. --fuzz-seed S (default 1) reproduces a run.\n";
}

namespace {

// --score-mod / --mask-mod as the CLI takes them (core/inputs.h specs, their refusals): the
// settings into o.mods, the files (bias:FILE, document:FILE) into o's file names (read once, with
// the inputs: not here, where a pipe's one read would be spent), causal into the mask. Given ALiBi
// slopes are the command line's (attnlab run).
void take_mod_spec(ViewerOptions& o, const std::string& flag, const std::string& spec) {
  Problem scratch = demo_problem();
  const bool score = flag == "--score-mod";
  if (score) apply_score_mod_spec(scratch, spec, SpecFiles::NamesOnly);
  else apply_mask_mod_spec(scratch, spec, SpecFiles::NamesOnly);
  std::string item;
  const auto take_file = [&] {
    const auto a = item.find_first_not_of(" \t");
    const std::string t = a == std::string::npos ? std::string() : item.substr(a);
    if (t.rfind("bias:", 0) == 0) o.bias_file = t.substr(5);
    if (t.rfind("document:", 0) == 0) o.documents_file = t.substr(9);
    item.clear();
  };
  for (char ch : spec) {
    if (ch == ',' || ch == '+') take_file();
    else item += ch;
  }
  take_file();
  if (score) {
    if (!scratch.mods.alibi_slopes.empty())
      throw InputError(Msg::AlibiViewerSlopes, {});
    o.mods.alibi = scratch.mods.alibi;
    o.mods.softcap = scratch.mods.softcap;
    o.score_mods_given = true;
  } else {
    o.mods.window = scratch.mods.window;
    o.mods.prefix = scratch.mods.prefix;
    if (scratch.mask == MaskKind::Causal) o.mask = MaskKind::Causal;
    o.mask_mods_given = true;
  }
}

}  // namespace

ViewerOptions parse_viewer_args(const std::vector<std::string>& typed, const std::string& program) {
  // --flag=value reads as --flag value, as attnlab takes it (a value may hold '=' of its own:
  // --diff=mask=causal).
  std::vector<std::string> args;
  for (const std::string& a : typed) {
    const std::size_t eq = a.rfind("--", 0) == 0 ? a.find('=') : std::string::npos;
    if (eq == std::string::npos) {
      args.push_back(a);
    } else {
      args.push_back(a.substr(0, eq));
      args.push_back(a.substr(eq + 1));
    }
  }
  ViewerOptions o;
  std::string backend_text;  // checked at the end: a list in the perf view, one name elsewhere
  bool pattern_given = false, head_given = false, layer_given = false;
  std::set<std::string> seen;  // each option once, as the CLI takes them: a repeat is refused, not "last wins"
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) == 0 && !seen.insert(a).second) throw InputError("option " + a + " is given twice");
    auto value = [&]() -> const std::string& {
      // An empty value is refused, as the CLI refuses it (`--score-mod ""` had read as none), and so
      // is an option in its place (`--screenshot --fullscreen` had written a file named --fullscreen).
      if (i + 1 >= args.size() || args[i + 1].empty() || args[i + 1].rfind("--", 0) == 0)
        throw InputError("option " + a + " needs a value");
      return args[++i];
    };
    if (a == "--help" || a == "-h") {
      o.help = true;
    } else if (a == "--screenshot") {
      o.screenshot = value();
    } else if (a == "--query") {
      o.query = value();
    } else if (a == "--queries") {
      o.queries = value();
      if (o.queries.find_first_not_of(" \t") == std::string::npos) throw InputError(Msg::QueryListEmptyItem, {o.queries});
    } else if (a == "--step") {
      const std::string& v = value();
      if (v != "1" && v != "2" && v != "3" && v != "4") {
        throw InputError(Msg::OptionWords, {a, "1, 2, 3, 4", v});
      }
      o.step = v[0] - '0';
      o.step_given = true;
    } else if (a == "--temperature") {
      o.temperature = parse_temperature(value());
    } else if (a == "--mask") {
      const std::string& v = value();
      if (v == "none") {
        o.mask = MaskKind::None;
      } else if (v == "causal") {
        o.mask = MaskKind::Causal;
      } else {
        o.mask = MaskKind::Custom;  // a mask file, read with the inputs (core/inputs.h)
        o.mask_file = v;
      }
    } else if (a == "--rope") {
      // As the CLI's: a value is optional (10000 without one, or with an empty one).
      const bool has = i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0;
      const bool bare = !has || args[i + 1].empty();
      if (has && bare) ++i;
      Problem scratch = demo_problem();  // only the spec is checked here; the problem validates θ with d_k
      apply_rope_spec(scratch, bare ? "10000" : value());
      o.mods.rope_theta = scratch.mods.rope_theta;
      o.rope_given = true;
    } else if (a == "--score-mod" || a == "--mask-mod") {
      take_mod_spec(o, a, value());
    } else if (a == "--q") {
      o.q_file = value();
    } else if (a == "--k") {
      o.k_file = value();
    } else if (a == "--v") {
      o.v_file = value();
    } else if (a == "--tokens") {
      o.tokens = value();
    } else if (a == "--tokens-file") {
      o.tokens_file = value();
    } else if (a == "--random") {
      o.random_n = parse_flag_int<int>(a, value(), 1, kCudaMaxTokens);
    } else if (a == "--pattern") {
      o.pattern = parse_pattern(value());
      pattern_given = true;
    } else if (a == "--heads") {
      o.heads = parse_flag_int<int>(a, value(), 1, kMaxRandomHeads);
    } else if (a == "--head") {
      // Its range is the heads' (checked below, for a bundle against the call's): a negative one is
      // refused there with it.
      o.head = parse_flag_int<int>(a, value(), -(1 << 20), 1 << 20);
      head_given = true;
    } else if (a == "--bundle") {
      o.bundle = value();
    } else if (a == "--layer") {
      o.layer = value();
      layer_given = true;
    } else if (a == "--dk") {
      o.d_k = parse_flag_int<int>(a, value(), 1, kMaxHeadDim);
    } else if (a == "--dv") {
      o.d_v = parse_flag_int<int>(a, value(), 1, kMaxHeadDim);
    } else if (a == "--seed") {
      o.seed = parse_flag_int<std::uint64_t>(a, value(), 0, UINT64_MAX);
    } else if (a == "--lang") {
      o.lang = parse_lang(value());
    } else if (a == "--size") {
      const std::string& v = value();
      const auto x = v.find('x');
      if (x == std::string::npos) throw InputError(Msg::SizeForm, {v});
      o.width = parse_flag_int<int>("--size W", v.substr(0, x), kMinWindowW, 7680);
      o.height = parse_flag_int<int>("--size H", v.substr(x + 1), kMinWindowH, 4320);
    } else if (a == "--backend") {
      backend_text = value();
    } else if (a == "--pool") {
      const std::string& v = value();
      if (v == "max") {
        o.pool = PoolMode::Max;
      } else if (v == "mean") {
        o.pool = PoolMode::Mean;
      } else {
        throw InputError(Msg::OptionWords, {a, "max, mean", v});
      }
    } else if (a == "--stages") {
      const std::string& v = value();
      if (v == "auto") o.stages = StagePolicy::Auto;
      else if (v == "all") o.stages = StagePolicy::All;
      else if (v == "step") o.stages = StagePolicy::Step;
      else throw InputError(Msg::OptionWords, {a, "auto, all, step", v});
    } else if (a == "--view") {
      const std::string& v = value();
      if (view_index(v) < 0) throw InputError(Msg::OptionWords, {a, view_names_text(), v});
      o.view = v;
    } else if (a == "--precision") {
      const std::string& v = value();
      if (v == "fp32") o.precision = Precision::FP32;
      else if (v == "bf16") o.precision = Precision::BF16;
      else throw InputError(Msg::RunPrecision, {v});
    } else if (a == "--ui-scale") {
      const std::string& v = value();
      char* end = nullptr;
      // Compared as the float the window keeps: kMinUiScale, 0.6f, is a little above 0.6.
      const float sc = static_cast<float>(std::strtod(v.c_str(), &end));
      if (v.empty() || end != v.c_str() + v.size() || !(sc >= kMinUiScale && sc <= kMaxUiScale) ||
          v.find_first_not_of("0123456789.") != std::string::npos) {
        throw InputError(Msg::DecimalRange, {a, "0.6", "3", v});
      }
      o.ui_scale = sc;
    } else if (a == "--fullscreen") {
      o.fullscreen = true;
    } else if (a == "--state-dump") {
      o.state_dump = value();
    } else if (a == "--export-dir") {
      o.export_dir = value();
      // Refused here, as --perf-output is, rather than at the first export (S, the buttons).
      std::error_code ec;
      if (!std::filesystem::is_directory(o.export_dir, ec))
        throw InputError(Msg::ExportDirMissing, {o.export_dir});
      if (::access(o.export_dir.c_str(), W_OK | X_OK) != 0)
        throw InputError(Msg::ExportDirDenied, {o.export_dir});
    } else if (a == "--fuzz-events") {
      o.fuzz_events = parse_flag_int<long>(a, value(), 1, 100'000'000);
    } else if (a == "--fuzz-seed") {
      o.fuzz_seed = parse_flag_int<std::uint64_t>(a, value(), 0, ~std::uint64_t{0});
    } else if (a == "--bench-redraw") {
      o.bench_redraw = true;
    } else if (a == "--bench-decode") {
      o.bench_decode_seconds = parse_flag_int<int>(a, value(), 1, 600);
    } else if (a == "--repeat") {
      o.repeat = parse_flag_int<int>(a, value(), 1, 1000);
    } else if (!parse_view_flag(a, value, o.views)) {
      throw InputError("unknown option '" + a + "' (see " + program + " --help)");
    }
  }
  // A view may read a shared flag its own way (the perf view's --backend list): it takes it here.
  finish_view_options(o.views, o.view, backend_text);
  if (!backend_text.empty()) {
    o.backend = backend_text;
    if (o.backend != "auto" && o.backend != "cpu" && o.backend != "cuda") {
      throw InputError(Msg::UnknownBackend, {o.backend});
    }
  }
  const bool files = !o.q_file.empty() || !o.k_file.empty() || !o.v_file.empty();
  // The same sentences as the CLI's (cli/common.cpp) for the same mistakes.
  if (!o.bundle.empty() && (files || o.random_n))
    throw InputError(Msg::OneInput, {});
  if (files && o.random_n)
    throw InputError(Msg::FilesOrRandom, {});
  if (!o.bundle.empty()) {
    if (o.heads != 1)
      throw InputError(Msg::HeadsBundle, {});
    if (o.head < 0)
      throw InputError(Msg::HeadBundleRange, {std::to_string(o.head)});
    if (o.mask != MaskKind::None)
      throw InputError(Msg::MaskBundle, {});
  } else {
    if (layer_given) throw InputError(Msg::LayerBundleOnly, {});
    if (o.heads != 1 && !o.random_n) throw InputError(Msg::HeadsRandomOnly, {});
    if (head_given && !o.random_n) throw InputError(Msg::HeadApplies, {});
    if (o.head < 0 || o.head >= o.heads)
      throw InputError(Msg::OptionRange, {"--head", "0", std::to_string(o.heads - 1), std::to_string(o.head)});
  }
  if (o.random_n) check_random_inputs(*o.random_n, o.d_k, o.d_v, o.heads);
  // A mask file and token labels go with file inputs and random ones, as the CLI takes them.
  if (!files && !o.random_n && !o.mask_file.empty())
    throw InputError(Msg::MaskFileNeedsFiles, {o.mask_file});
  if (!files && !o.random_n && (!o.tokens.empty() || !o.tokens_file.empty()))
    throw InputError(Msg::TokensNeedFiles, {});
  if (pattern_given && !o.random_n)
    throw InputError(Msg::PatternNeedsRandom, {});
  if (o.random_n) check_pattern(o.pattern, *o.random_n, o.d_k);
  if (o.fuzz_seed && !o.fuzz_events) throw InputError(Msg::FuzzSeedAlone, {});
  if (seen.count("--repeat") && !o.bench_redraw) throw InputError(Msg::RepeatAlone, {});
  if (seen.count("--query") && seen.count("--queries")) throw InputError(Msg::QueryAndQueries, {});
  if (o.bench_decode_seconds > 0 && (o.bench_redraw || !o.screenshot.empty() || o.fuzz_events))
    throw InputError(Msg::BenchDecodeAlone, {});
  if (o.fuzz_events && (!o.screenshot.empty() || o.bench_redraw))
    throw InputError(Msg::FuzzAlone, {});
  if ((o.d_k != 64 || o.d_v != 64 || o.seed != 0) && !o.random_n && !o.bench_redraw) {
    // The CLI's sentences (cli/common.cpp): the first of them given, and what gives the values instead.
    const char* flag = o.d_k != 64 ? "--dk" : o.d_v != 64 ? "--dv" : "--seed";
    throw InputError(!o.bundle.empty() ? Msg::OnlyRandomBundle : files ? Msg::OnlyRandomFiles : Msg::OnlyRandomDemo, {flag});
  }
  // RoPE with the decode view's random cache: the cache's head size must be even, and the input on
  // screen takes RoPE as well (the demo's d_k is 3).
  if ((o.view == "decode" || o.bench_decode_seconds > 0) && o.views.decode.keys > 0 && o.mods.rope_theta > 0) {
    if (o.views.decode.dim % 2 != 0)
      throw InputError(Msg::CacheDimRope, {std::to_string(o.views.decode.dim)});
    if (o.bundle.empty() && !files && !o.random_n)
      throw InputError(Msg::RopeDemoOdd, {});
  }
  return o;
}

}  // namespace attnlab::viewer
