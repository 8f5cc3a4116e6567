// attnlab: the command-line lab. Builds the CLI11 app from the subcommands' register_* functions
// and is the one place that turns errors into exit codes, each with one line on stderr:
//   0  success (and --help)
//   2  bad input or usage: CLI11 parse errors, InputError (incl. NoDeviceError, ResourceError)
//   1  internal failure: DeviceError, a result that could not be written (WriteError), anything else
// Subcommands may set other codes through `exit_code` (verify: 3 on FAIL).
#include "core/lang_args.h"
#include "cli/common.h"
#include "core/format.h"
#include "core/messages.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <new>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace attnlab::cli { void register_walk(CLI::App& app, int& exit_code); }  // cli/cmd_walk.cpp

namespace {

// CLI11 messages can span lines; the contract is exactly one line.
std::string one_line(const std::string& msg) {
  std::string out;
  bool space = false;
  for (char ch : msg) {
    if (ch == '\n' || ch == '\r' || ch == '\t' || ch == ' ') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += ch;
  }
  return out.empty() ? "unknown error" : out;
}

// CLI11 starts its messages with a capital ("The following argument ..."); after "error: " the
// lab's own style is lower case. Library messages keep their case ("K has 3 columns ...").
std::string lower_first(std::string s) {
  if (s.size() > 1 && std::isupper(static_cast<unsigned char>(s[0])) &&
      std::islower(static_cast<unsigned char>(s[1])))
    s[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(s[0])));
  return s;
}

// One line, its control bytes and invalid UTF-8 escaped (\x1B): an argument echoed in a refusal
// is printed as the terminal would not act on it.
int fail(const std::string& msg, int code) {
  std::cerr << "error: " << attnlab::printable(one_line(msg)) << std::endl;
  return code;
}

std::string subcommand_names(const CLI::App& app) {
  std::string names;
  const auto subs = app.get_subcommands([](const CLI::App*) { return true; });
  for (std::size_t i = 0; i < subs.size(); ++i)
    names += (i == 0 ? "" : i + 1 == subs.size() ? " or " : ", ") + subs[i]->get_name();
  return names;
}

// CLI11's ConversionError ("Could not convert: --repeat = 1e3") says neither what the option
// takes nor why the value failed. Every option that reaches it is a number the lab reads through
// CLI11 (the others are read as text and checked by the lab with their own messages), so the
// value's form tells the reason: digits alone overflowed the option's integer type; a number
// strtod reads whole (1e3, 2.5) was refused by an integer option, as a real one would have taken
// it; anything else is no number at all. Catalogued (Msg::NumberDigits, NumberWhole, NumberAny),
// so they read in --lang's language; an empty Message for any other ConversionError.
attnlab::Message conversion_message(const std::string& what) {
  using attnlab::Msg;
  const std::string head = "Could not convert: ";
  const std::size_t eq = what.find(" = ");
  if (what.rfind(head, 0) != 0 || eq == std::string::npos) return {};
  const std::string name = what.substr(head.size(), eq - head.size());
  const std::string value = what.substr(eq + 3);
  const std::size_t sign = !value.empty() && (value[0] == '-' || value[0] == '+') ? 1 : 0;
  const bool digits = value.size() > sign && value.find_first_not_of("0123456789", sign) == std::string::npos;
  if (digits) return attnlab::message_of(Msg::NumberDigits, {name, value});
  char* end = nullptr;
  std::strtod(value.c_str(), &end);
  const bool real = !value.empty() && end == value.c_str() + value.size() &&
                    !std::isspace(static_cast<unsigned char>(value[0]));
  return attnlab::message_of(real ? Msg::NumberWhole : Msg::NumberAny, {name, value});
}

// The validators' refusals, as syntax_message reads them back: "<form><value>'".
const std::string kDecimalForm = "must be a decimal whole number, got '";
const std::string kSeedForm = "must be a whole number from 0 to 18446744073709551615, got '";

// CLI11's own wording for an option given twice ("--temperature: At Most 1 required but received
// 2"), one without its value ("--query: 1 required TEXT missing", also for `--query=`) and words
// it did not expect ("The following arguments were not expected: 0.5 --temp", joined in reverse)
// in the lab's: "--temperature is given twice", "--query needs a value", "unknown option --temp"
// (the first option among them, in the order typed), in English; the lab's validators' refusals
// of a number's form (Msg::NumberDecimal, SeedRange) catalogued. An empty Message for any other.
attnlab::Message syntax_message(const std::string& what) {
  using attnlab::Msg;
  const auto english = [](const std::string& text) { return attnlab::Message{Msg::None, {}, text}; };
  const std::size_t colon = what.find(": ");
  const std::string name = colon == std::string::npos ? std::string() : what.substr(0, colon);
  const std::string rest = colon == std::string::npos ? std::string() : what.substr(colon + 2);
  const std::string at_most = "At Most ", received = " required but received ";
  if (rest.rfind(at_most, 0) == 0 && rest.find(received) != std::string::npos) {
    const std::string times = rest.substr(rest.find(received) + received.size());
    return english(name + " is given " + (times == "2" ? std::string("twice") : times + " times"));
  }
  // The lab's own validators (refuse_empty_and_overflowing_values): "--seed: must be ..., got 'x'"
  // reads as the conversions' "--random must be ...".
  for (const auto& [form, id] : {std::pair<std::string, Msg>{kDecimalForm, Msg::NumberDecimal},
                                 std::pair<std::string, Msg>{kSeedForm, Msg::SeedRange}})
    if (!name.empty() && name[0] == '-' && rest.rfind(form, 0) == 0 && rest.size() > form.size() + 1 && rest.back() == '\'')
      return attnlab::message_of(id, {name, rest.substr(form.size(), rest.size() - form.size() - 1)});
  if (!name.empty() && name[0] == '-' && rest == "an empty value is not allowed") return english(name + " needs a value");
  if (rest.size() > 8 && rest.compare(rest.size() - 8, 8, " missing") == 0 && rest.find(" required ") != std::string::npos)
    return english(name + " needs a value");
  for (const char* head : {"The following arguments were not expected: ", "The following argument was not expected: "}) {
    if (what.rfind(head, 0) != 0) continue;
    std::vector<std::string> words;
    std::istringstream in(what.substr(std::string(head).size()));
    for (std::string w; in >> w;) words.insert(words.begin(), w);
    for (const std::string& w : words)
      if (w.size() > 1 && w[0] == '-') return english("unknown option " + w.substr(0, w.find('=')));
    return english("unexpected argument '" + (words.empty() ? std::string() : words.front()) + "'");
  }
  return {};
}

// CLI11 2.1 reads an empty value as "not given" or as 0 (`--random ''` ran the demo, `--seed ''`
// seed 0) and saturates a 64-bit overflow without a word: every option that takes a value refuses
// an empty one, and --seed refuses anything but a decimal number that fits 64 bits.
void refuse_empty_and_overflowing_values(CLI::App& app) {
  const CLI::Validator nonempty(
      [](std::string& v) { return v.empty() ? std::string("an empty value is not allowed") : std::string(); },
      "", "nonempty");
  const CLI::Validator seed(
      [](std::string& v) {
        errno = 0;
        char* end = nullptr;
        const bool digits = !v.empty() && v.find_first_not_of("0123456789") == std::string::npos;
        if (digits) std::strtoull(v.c_str(), &end, 10);
        return digits && errno != ERANGE ? std::string() : kSeedForm + v + "'";
      },
      "", "seed");
  // CLI11 reads integers in C's base 0: --seed 010 was seed 8 and --random 0x10 16 tokens. The
  // whole-number options take decimal digits only: leading zeros are dropped ("010" is 10) and a
  // base prefix is refused. The same names are decimal lists or text the lab reads as decimal in
  // some subcommands (bench --heads, walk --head), where "010" stays 10.
  const CLI::Validator decimal(
      [](std::string& v) {
        // Spaces around the number are dropped, as the conversion of the other whole-number
        // options drops leading ones (" 4" is 4 everywhere).
        const std::size_t from = v.find_first_not_of(" \t"), to = v.find_last_not_of(" \t");
        v = from == std::string::npos ? std::string() : v.substr(from, to - from + 1);
        const std::size_t sign = !v.empty() && (v[0] == '-' || v[0] == '+') ? 1 : 0;
        if (v.size() > sign + 1 && v[sign] == '0' && std::isalpha(static_cast<unsigned char>(v[sign + 1])))
          return kDecimalForm + v + "'";
        if (v.size() > sign + 1 && v.find_first_not_of("0123456789", sign) == std::string::npos) {
          const std::size_t first = std::min(v.find_first_not_of('0', sign), v.size() - 1);
          v.erase(sign, first - sign);
        }
        return std::string();
      },
      "", "decimal");
  const std::set<std::string> whole = {"--random", "--dk",    "--dv",     "--seed",   "--heads", "--queries",
                                       "--kv-heads", "--split", "--head", "--repeat", "--warmup"};
  for (CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    for (CLI::Option* opt : sub->get_options([](const CLI::Option* o) { return o->get_items_expected_min() >= 1; })) {
      opt->check(nonempty);
      if (whole.count(opt->get_name())) opt->transform(decimal);
      if (opt->get_name() == "--seed") opt->check(seed);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  // A reader that closed the pipe (attnlab run | head) is a write that failed: the one error
  // line and exit 1, as for any other (the signal would end the process without a word).
  std::signal(SIGPIPE, SIG_IGN);
  CLI::App app{
      "attnlab — a lab for scaled dot-product attention: QKᵀ, the √d_k scaling, the mask, the "
      "temperature, a stable row-wise softmax and P·V, every stage shown and checkable; Eigen on "
      "the CPU (the reference), CUDA kernels on an NVIDIA GPU.\n"
      "Exit codes: 0 success, 2 bad input or usage, 1 internal error, 3 verify's FAIL or backward --check's "
      "gradient outside its bound.",
      "attnlab"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Help for every subcommand");

  int exit_code = 0;
  attnlab::cli::register_demo_and_run(app, exit_code);
  attnlab::cli::register_describe(app, exit_code);
  attnlab::cli::register_verify(app, exit_code);
  attnlab::cli::register_bench(app, exit_code);
  attnlab::cli::register_walk(app, exit_code);
  attnlab::cli::register_backward(app, exit_code);
  refuse_empty_and_overflowing_values(app);

  // Which subcommand the user meant, for messages ("see attnlab demo --help").
  std::string sub;
  for (int i = 1; i < argc && sub.empty(); ++i) {
    const std::string arg = argv[i];
    if (arg.empty() || arg[0] == '-') continue;
    bool known = false;
    for (const auto* s : app.get_subcommands([](const CLI::App*) { return true; }))
      known = known || s->get_name() == arg;
    // `attnlab --lang zh demo`: the option's value read as the subcommand.
    const bool after_option = i > 1 && argv[i - 1][0] == '-';
    if (!known)
      return fail("unknown subcommand '" + arg + "'; choose " + subcommand_names(app) +
                      (after_option ? " (options go after it: attnlab demo " + std::string(argv[i - 1]) + " " + arg +
                                          "; see attnlab --help)"
                                    : " (see attnlab --help)"),
                  2);
    sub = arg;
  }

  // An option whose value may be left out (`--rope` alone is θ = 10000) reads `--opt=` as left
  // out too: refused, as every other option's empty value is (refuse_empty_and_overflowing_values).
  for (const CLI::App* s : app.get_subcommands([](const CLI::App*) { return true; }))
    for (const CLI::Option* o : s->get_options([](const CLI::Option* o) {
           return o->get_items_expected_min() == 0 && o->get_items_expected_max() >= 1;
         }))
      for (int i = 1; i < argc; ++i)
        if (std::string(argv[i]) == o->get_name() + "=")
          return fail(o->get_name() + " needs a value after '=' (or none, without the '='; see attnlab " +
                          (sub.empty() ? "" : sub + " ") + "--help)",
                      2);

  // An option that takes a value, given none: CLI11 2.1 takes the next argument as its value
  // (`--output --check` wrote a file named "--check" and ran no check) and reads `--query= 2` as
  // `--query 2`. The next argument that is an option (it starts with "--"; a negative number has
  // one dash), or nothing after the '=', is no value.
  if (!sub.empty())
    for (const CLI::Option* o : app.get_subcommand(sub)->get_options(
             [](const CLI::Option* o) { return o->get_items_expected_min() >= 1; }))
      for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == o->get_name() + "=" ||
            (arg == o->get_name() && i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) == 0))
          return fail(o->get_name() + " needs a value (see attnlab " + sub + " --help)", 2);
      }

  // The help printed, or one line when it could not be written (`--help > /dev/full`).
  const auto help = [&](const CLI::ParseError& e) {
    const int code = app.exit(e);
    std::cout.flush();
    return std::cout ? code
                     : fail(attnlab::render_message(attnlab::Msg::WriteStdout, {}, attnlab::lang_from_args(argc, argv)), 1);
  };
  // CLI11 reads the options' values (and runs their callbacks: --temperature's check) before it
  // looks for --help, so `demo --temperature 0 --help` was refused: with --help asked for, a value
  // refused on the way is no reason to withhold the help.
  bool help_asked = false, all_asked = false;  // all_asked: --help-all, which help_asked includes
  for (int i = 1; i < argc && std::string(argv[i]) != "--"; ++i) {
    const std::string arg = argv[i];
    all_asked = all_asked || arg == "--help-all";
    help_asked = help_asked || arg == "-h" || arg == "--help" || arg == "--help-all";
  }
  const auto help_anyway = [&] { return all_asked ? help(CLI::CallForAllHelp()) : help(CLI::CallForHelp()); };
  // A flag given twice (`--check --check`) is refused as an option given twice is: CLI11 counts
  // it and goes on; and a flag takes no value (CLI11 reads `--check=no` as the flag off, and
  // `--check=x` as "must be a number"). Its names as typed, before a "--".
  if (!sub.empty() && !help_asked)
    for (const CLI::Option* o : app.get_subcommand(sub)->get_options(
             [](const CLI::Option* o) { return o->get_items_expected_max() == 0; })) {
      int times = 0;
      for (int i = 1; i < argc && std::string(argv[i]) != "--"; ++i) {
        const std::string arg = argv[i];
        for (const std::string& name : o->get_lnames()) {
          if (arg.rfind("--" + name + "=", 0) == 0)
            return fail("--" + name + " is a flag and takes no value, got '" + arg + "' (see attnlab " + sub + " --help)", 2);
          times += arg == "--" + name;
        }
        for (const std::string& name : o->get_snames()) times += arg == "-" + name;
      }
      if (times > 1)
        return fail(o->get_name() + " is given " + (times == 2 ? std::string("twice") : std::to_string(times) + " times") +
                        " (see attnlab " + sub + " --help)",
                    2);
    }
  try {
    app.parse(argc, argv);
    return exit_code;
  } catch (const CLI::CallForHelp& e) {
    return help(e);
  } catch (const CLI::CallForAllHelp& e) {
    return help(e);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return help(e);
    if (help_asked) return help_anyway();
    std::string msg = e.what();
    const attnlab::Message clear =
        dynamic_cast<const CLI::ConversionError*>(&e) ? conversion_message(msg) : syntax_message(msg);
    const attnlab::Lang lang = attnlab::lang_from_args(argc, argv);
    if (!clear.empty()) msg = clear.text(lang);
    if (dynamic_cast<const CLI::RequiredError*>(&e) && sub.empty())
      msg = "a subcommand is required: " + subcommand_names(app);
    const std::string help = "attnlab " + (sub.empty() ? "" : sub + " ") + "--help";
    // A catalogued refusal in Chinese points to the help in Chinese brackets; the syntax errors'
    // English keeps English ones.
    const bool zh = lang == attnlab::Lang::Zh && clear.id != attnlab::Msg::None;
    return fail(lower_first(one_line(msg)) + (zh ? "（见 " + help + "）" : " (see " + help + ")"), 2);
  } catch (const attnlab::cli::WriteError& e) {
    // The lab's catalogued refusals (core/messages.h: inputs, files, values, modifications) in
    // --lang's language (lang_from_args); CLI11's syntax errors above and the few uncatalogued
    // messages stay English.
    return fail(e.message.text(attnlab::lang_from_args(argc, argv)), 1);
  } catch (const attnlab::InputError& e) {
    if (help_asked) return help_anyway();
    return fail(attnlab::message_of(e).text(attnlab::lang_from_args(argc, argv)), 2);
  } catch (const attnlab::DeviceError& e) {
    return fail(e.what(), 1);
  } catch (const std::bad_alloc&) {
    return fail(attnlab::render_message(attnlab::Msg::OutOfHostMemory, {}, attnlab::lang_from_args(argc, argv)), 1);
  } catch (const std::exception& e) {
    return fail(e.what(), 1);
  } catch (...) {
    return fail("internal error", 1);
  }
}
