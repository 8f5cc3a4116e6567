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
         "                    [--q FILE --k FILE --v FILE [--tokens a,b,c | --tokens-file FILE]]\n"
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
      throw InputError("attnlab-view takes alibi with the standard slopes of the heads; given slopes: attnlab run "
                       "--score-mod alibi:S1/S2/...");
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

ViewerOptions parse_viewer_args(const std::vector<std::string>& args, const std::string& program) {
  ViewerOptions o;
  std::string backend_text;  // checked at the end: a list in the perf view, one name elsewhere
  bool pattern_given = false, head_given = false, layer_given = false;
  std::set<std::string> seen;  // each option once, as the CLI takes them: a repeat is refused, not "last wins"
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) == 0 && !seen.insert(a).second) throw InputError("option " + a + " is given twice");
    auto value = [&]() -> const std::string& {
      // An empty value is refused, as the CLI refuses it (`--score-mod ""` had read as none).
      if (i + 1 >= args.size() || args[i + 1].empty()) throw InputError("option " + a + " needs a value");
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
        throw InputError("--step must be 1, 2, 3 or 4, got '" + v + "'");
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
      } else if (v.empty()) {
        throw InputError("--mask needs none, causal or a FILE");
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
      if (x == std::string::npos) throw InputError("--size must be WxH (e.g. 1280x800), got '" + v + "'");
      o.width = parse_flag_int<int>("--size width", v.substr(0, x), kMinWindowW, 7680);
      o.height = parse_flag_int<int>("--size height", v.substr(x + 1), kMinWindowH, 4320);
    } else if (a == "--backend") {
      backend_text = value();
    } else if (a == "--pool") {
      const std::string& v = value();
      if (v == "max") {
        o.pool = PoolMode::Max;
      } else if (v == "mean") {
        o.pool = PoolMode::Mean;
      } else {
        throw InputError("--pool must be max or mean, got '" + v + "'");
      }
    } else if (a == "--stages") {
      const std::string& v = value();
      if (v == "auto") o.stages = StagePolicy::Auto;
      else if (v == "all") o.stages = StagePolicy::All;
      else if (v == "step") o.stages = StagePolicy::Step;
      else throw InputError("--stages must be auto, all or step, got '" + v + "'");
    } else if (a == "--view") {
      const std::string& v = value();
      if (view_index(v) < 0) throw InputError("--view must be " + view_names_text() + ", got '" + v + "'");
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
        throw InputError("--ui-scale must be a decimal number from 0.6 to 3, got '" + v + "'");
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
        throw InputError("--export-dir '" + o.export_dir + "' is not a folder (missing?)");
      if (::access(o.export_dir.c_str(), W_OK | X_OK) != 0)
        throw InputError("cannot write in --export-dir '" + o.export_dir + "' (no permission)");
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
      throw InputError("--backend must be auto, cpu or cuda, got '" + o.backend + "'");
    }
  }
  const bool files = !o.q_file.empty() || !o.k_file.empty() || !o.v_file.empty();
  // The same sentences as the CLI's (cli/common.cpp) for the same mistakes.
  if (!o.bundle.empty() && (files || o.random_n))
    throw InputError("give one input: --bundle DIR, --q/--k/--v files or --random N");
  if (files && o.random_n)
    throw InputError("give either --q/--k/--v files or --random N, not both");
  if (!o.bundle.empty()) {
    if (o.heads != 1)
      throw InputError("--heads applies to --random problems only (use --head H for one head of a bundle)");
    if (o.head < 0)
      throw InputError("--head must be between 0 and the call's last head, got " + std::to_string(o.head));
    if (o.mask != MaskKind::None)
      throw InputError("--mask does not apply to --bundle: the bundle holds each call's mask");
  } else {
    if (layer_given) throw InputError("--layer applies to --bundle only");
    if (o.heads != 1 && !o.random_n) throw InputError("--heads applies to --random problems only");
    if (head_given && !o.random_n) throw InputError("--head applies to --bundle or to --random N --heads H");
    if (o.head < 0 || o.head >= o.heads)
      throw InputError("--head must be between 0 and " + std::to_string(o.heads - 1) + ", got " +
                       std::to_string(o.head));
  }
  if (o.random_n) check_random_inputs(*o.random_n, o.d_k, o.d_v, o.heads);
  if (!files && !o.mask_file.empty())
    throw InputError("--mask must be none or causal, or a mask FILE together with --q, --k and --v; got '" +
                     o.mask_file + "'");
  if (!files && (!o.tokens.empty() || !o.tokens_file.empty()))
    throw InputError("--tokens and --tokens-file label file inputs: add --q, --k and --v");
  if (pattern_given && !o.random_n)
    throw InputError("--pattern describes a random problem: add --random N");
  if (o.random_n) check_pattern(o.pattern, *o.random_n, o.d_k);
  if (o.fuzz_seed && !o.fuzz_events) throw InputError("--fuzz-seed seeds --fuzz-events N: add it");
  if (o.bench_decode_seconds > 0 && (o.bench_redraw || !o.screenshot.empty() || o.fuzz_events))
    throw InputError("--bench-decode runs alone: not with --bench-redraw, --screenshot or --fuzz-events");
  if (o.fuzz_events && (!o.screenshot.empty() || o.bench_redraw))
    throw InputError("--fuzz-events runs the window's loop: not with --screenshot or --bench-redraw");
  if ((o.d_k != 64 || o.d_v != 64 || o.seed != 0) && !o.random_n && !o.bench_redraw) {
    throw InputError("--dk, --dv and --seed describe a random problem: add --random N");
  }
  // RoPE with the decode view's random cache: the cache's head size must be even, and the input on
  // screen takes RoPE as well (the demo's d_k is 3).
  if ((o.view == "decode" || o.bench_decode_seconds > 0) && o.views.decode.keys > 0 && o.mods.rope_theta > 0) {
    if (o.views.decode.dim % 2 != 0)
      throw InputError("--cache-dim " + std::to_string(o.views.decode.dim) +
                       " with --rope: RoPE turns pairs of values, so the cache's head size must be even");
    if (o.bundle.empty() && !files && !o.random_n)
      throw InputError("--rope applies to the input on screen as well as to the cache, and the demo's d_k is 3 "
                       "(odd): add an input of an even d_k, such as --random 64");
  }
  return o;
}

}  // namespace attnlab::viewer
