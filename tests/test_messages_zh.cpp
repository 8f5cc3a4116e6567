// The refusals in Chinese (core/messages.h): every id has an English and a Chinese template with
// the same placeholders, and the refusals that were English sentences before they joined the
// catalogue (the query's lookup, splits and heads, bundles, patterns, the backward's dO and Y,
// .npy values and file sizes, the command line's range and combination checks) read in Chinese
// with --lang zh: outside their arguments no Latin letter is left but the option names and the few
// symbols and file names the sentence quotes.
#include "core/backward.h"
#include "core/bundle.h"
#include "core/inputs.h"
#include "core/io.h"
#include "core/messages.h"
#include "core/patterns.h"
#include "core/problem.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace attnlab {
namespace {

// The catalogued refusal f() throws.
Message refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return message_of(e);
  }
  ADD_FAILURE() << "no InputError was thrown";
  return {};
}

// Which placeholders the template of `id` in `lang` uses: rendered with a marker for each.
std::set<int> placeholders(Msg id, Lang lang) {
  std::vector<std::string> markers;
  for (int k = 0; k < 10; ++k) markers.push_back("\x01" + std::to_string(k) + "\x02");
  const std::string text = render_message(id, markers, lang);
  std::set<int> used;
  for (int k = 0; k < 10; ++k)
    if (text.find(markers[k]) != std::string::npos) used.insert(k);
  return used;
}

// The Chinese template of m's id with every argument left out, less the words a sentence may quote
// as they are: option names (--dk, --random N, --q/--k/--v) and then the words in `allowed`.
std::string zh_outside_arguments(const Message& m, const std::vector<std::string>& allowed = {}) {
  const std::string t = render_message(m.id, std::vector<std::string>(m.args.size(), ""), Lang::Zh);
  std::string out;
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (t.compare(i, 2, "--") == 0) {  // an option name, and its metavariable (N, H, FILE)
      i += 2;
      while (i < t.size() && (std::isalnum(static_cast<unsigned char>(t[i])) || t[i] == '-' || t[i] == '/')) ++i;
      while (i + 1 < t.size() && t[i] == ' ' && std::isupper(static_cast<unsigned char>(t[i + 1])) &&
             (i + 2 == t.size() || !std::isalpha(static_cast<unsigned char>(t[i + 2])) ||
              std::isupper(static_cast<unsigned char>(t[i + 2])))) {
        i += 1;
        while (i < t.size() && std::isupper(static_cast<unsigned char>(t[i]))) ++i;
      }
      --i;
      continue;
    }
    out += t[i];
  }
  for (const std::string& w : allowed)
    for (std::size_t at; (at = out.find(w)) != std::string::npos;) out.erase(at, w.size());
  return out;
}

bool has_latin_letter(const std::string& s) {
  for (unsigned char c : s)
    if (std::isalpha(c)) return true;
  return false;
}

// The refusal is catalogued and its Chinese holds no Latin letter outside the arguments and the
// allowed words; with `arguments_too`, not even the English words the mixed sentences had inside
// their arguments ("or" between two label counts, "at" before a .npy position, "bytes" after a size).
void expect_chinese(const Message& m, const std::vector<std::string>& allowed = {}, bool arguments_too = true) {
  ASSERT_NE(m.id, Msg::None) << "not catalogued: " << m.en;
  const std::string bare = zh_outside_arguments(m, allowed);
  EXPECT_FALSE(has_latin_letter(bare)) << m.text(Lang::Zh) << "\n  outside the arguments: " << bare;
  if (!arguments_too) return;
  const std::string zh = m.text(Lang::Zh);
  for (const char* english : {" or ", " at ", " bytes", " must ", " out of range", " got "})
    EXPECT_EQ(zh.find(english), std::string::npos) << zh;
}

TEST(MessagesZh, EveryIdHasBothTemplatesWithTheSamePlaceholders) {
  for (int i = 1; i < static_cast<int>(Msg::Count_); ++i) {
    const Msg id = static_cast<Msg>(i);
    EXPECT_EQ(placeholders(id, Lang::En), placeholders(id, Lang::Zh))
        << "id " << i << ":\n  en: " << render_message(id, {}, Lang::En)
        << "\n  zh: " << render_message(id, {}, Lang::Zh);
    EXPECT_FALSE(render_message(id, {}, Lang::Zh).empty()) << i;
  }
}

// Rows, columns and heads count from 0 in the lab, and Chinese names them by their number ("行 2",
// "头 0"): "第 2 行" reads as the second row, one off (the row-statistics title had said "第 2 行"
// of the demo's third row). The ordinals left count from 1: a file's lines, a JSON's line and column.
TEST(MessagesZh, RowsColumnsAndHeadsAreNamedByTheirNumber) {
  const std::regex ordinal("第 \\{[0-9]\\} (行|列|个头)");
  for (int i = 1; i < static_cast<int>(Msg::Count_); ++i) {
    const Msg id = static_cast<Msg>(i);
    if (id == Msg::RowLength || id == Msg::BundleJson) continue;
    const std::string zh = render_message(id, {}, Lang::Zh);
    EXPECT_FALSE(std::regex_search(render_message(id, {"{0}", "{1}", "{2}", "{3}"}, Lang::Zh), ordinal))
        << "id " << i << ": " << zh;
  }
}

// A value quoted in Chinese takes the Chinese quotation marks, in every message alike: in the
// templates, and where the code quoted the value itself (a JSON string's own double quotes stay
// what the file holds).
TEST(MessagesZh, EveryChineseTemplateQuotesWithChineseMarks) {
  for (int i = 1; i < static_cast<int>(Msg::Count_); ++i) {
    const std::string zh = render_message(static_cast<Msg>(i), {}, Lang::Zh);
    EXPECT_EQ(zh.find('\''), std::string::npos) << "id " << i << ": " << zh;
    // and no blank between them and a Chinese character ("当前为 “{1}”" had one, "当前为“{0}”" not;
    // rendered with a number in each place, as "调用 {2}“{3}”" reads)
    const std::string with = render_message(static_cast<Msg>(i), std::vector<std::string>(10, "1"), Lang::Zh);
    for (const char* blank : {" “", "” "})
      for (std::size_t at = with.find(blank); at != std::string::npos; at = with.find(blank, at + 1)) {
        const std::size_t beside = blank[0] == ' ' ? at - 1 : at + std::strlen(blank);
        EXPECT_FALSE(at > 0 && beside < with.size() && static_cast<unsigned char>(with[beside]) >= 0x80)
            << "id " << i << ": " << with;
      }
  }
  Problem p = random_problem(4, 4, 4, 0);
  for (const auto& [mask_mod, spec] : {std::pair{true, "window:abc"}, {false, "softcap:0x10"}, {false, "alibi:nan"}}) {
    const Message m = refusal([&, mask_mod = mask_mod, spec = spec] {
      if (mask_mod) apply_mask_mod_spec(p, spec);
      else apply_score_mod_spec(p, spec);
    });
    EXPECT_EQ(m.text(Lang::Zh).find('\''), std::string::npos) << m.text(Lang::Zh);
    EXPECT_NE(m.text(Lang::Zh).find("“"), std::string::npos) << m.text(Lang::Zh);
    EXPECT_NE(m.en.find('\''), std::string::npos) << m.en;
  }
  const Message temperature = refusal([] { parse_temperature("0x10"); });
  EXPECT_NE(temperature.text(Lang::Zh).find("当前为“0x10”"), std::string::npos) << temperature.text(Lang::Zh);
}

TEST(MessagesZh, TheQueryAndItsHeadsAndSplits) {
  Problem p = random_problem(8, 4, 4, 0);
  const Message index = refusal([&] { resolve_query(p, "9"); });
  EXPECT_EQ(index.id, Msg::QueryIndexRange);
  EXPECT_EQ(index.en, "query index 9 is out of range: there are 8 queries (0..7)");
  EXPECT_EQ(index.text(Lang::Zh), "查询序号 9 超出范围：共有 8 个查询（0..7）");
  expect_chinese(index);

  const Message unknown = refusal([&] { resolve_query(p, "foo"); });
  EXPECT_EQ(unknown.en, "query 'foo' is not a token or index of this problem; tokens are: 0, 1, 2, 3, 4, 5, 6, 7");
  expect_chinese(unknown, {"token"});

  Problem labelled = random_problem(4, 4, 4, 0);
  apply_token_spec(labelled, "a,a,a,a", "");
  // A label with blanks of its own (a bundle's " cat") is found as typed, others without them.
  Problem spaced = random_problem(3, 4, 4, 0);
  spaced.edit().query_tokens = {"The", " cat", " sat"};
  EXPECT_EQ(resolve_query(spaced, " sat"), 2);
  EXPECT_EQ(resolve_query(spaced, " The "), 0);

  const Message twice = refusal([&] { resolve_query(labelled, "a"); });
  EXPECT_EQ(twice.en, "label 'a' names 4 rows; give the index");
  EXPECT_EQ(twice.text(Lang::Zh), "标签“a”对应 4 行；请给出序号");
  expect_chinese(twice);

  expect_chinese(refusal([] { check_split_count(9, 8); }));
  const Message head = refusal([] { one_head(random_problem(4, 2, 2, 0, 2), 5); });
  EXPECT_EQ(head.en, "--head must be between 0 and 1, got 5");
  expect_chinese(head);
}

TEST(MessagesZh, BundlesAndPatterns) {
  const test::TempDir dir("attnlab-zh");
  const Message missing = refusal([&] { read_bundle(dir.file("nothere")); });
  EXPECT_EQ(missing.en, "--bundle " + dir.file("nothere") + ": no such directory");
  expect_chinese(missing);
  expect_chinese(refusal([&] { read_bundle(dir.path().string()); }), {"manifest.json", ".npy"});
  test::write_file(dir.path() / "manifest.json", "{\"calls\": [");
  // The parser's own words (nlohmann::json's, in English) are an argument, as strerror's are.
  expect_chinese(refusal([&] { read_bundle(dir.path().string()); }), {"JSON"}, false);
  test::write_file(dir.path() / "manifest.json", R"({"calls": [{"heads": 2, "kv_heads": 3}]})");
  expect_chinese(refusal([&] { read_bundle(dir.path().string()); }));

  Bundle b;
  b.calls.resize(2);
  const Message layer = refusal([&] { resolve_layer(b, "5"); });
  EXPECT_EQ(layer.en, "--layer 5 is out of range: the bundle's attention calls are 0..1 (2 in all)");
  expect_chinese(layer);
  b.calls.resize(1);
  b.calls[0].name = "attn";
  EXPECT_EQ(refusal([&] { resolve_layer(b, "7"); }).en,
            "--layer 7 is out of range: the bundle's attention calls are 0..0 (1 in all)");
  EXPECT_EQ(refusal([&] { bundle_problem(b, 0, 1); }).en, "--head 1 is out of range: call 'attn' has heads 0..0 (1 in all)");

  const Message dk = refusal([] { check_pattern(parse_pattern("induction"), 512, 4); });
  EXPECT_EQ(dk.en.rfind("--pattern induction needs --dk >= ", 0), 0u) << dk.en;
  expect_chinese(dk);
  expect_chinese(refusal([] { parse_pattern("foo"); }), {"noise", "local:W", "W", "sink", "previous", "induction"});
}

TEST(MessagesZh, TheBackwardsUpstreamGradient) {
  const Problem p = random_problem(6, 4, 3, 0);
  Upstream u;
  u.kind = UpstreamKind::File;
  u.file = "do.npy";
  u.data = MatrixF::Zero(5, 3);
  const Message shape = refusal([&] { validate_upstream(p, u); });
  EXPECT_EQ(shape.en, "dO (--dout do.npy) is 5 x 3, but the output O is 6 x 3 (heads·n x d_v: 1 x 6 query rows, 3 columns)");
  EXPECT_EQ(shape.text(Lang::Zh), "dO（--dout do.npy）为 5 x 3，而输出 O 为 6 x 3（头数·n x d_v：1 x 6 个查询行，3 列）");
  expect_chinese(shape, {"dO", "O", "n", "x", "d_v"});
  u.kind = UpstreamKind::Mse;
  expect_chinese(refusal([&] { validate_upstream(p, u); }), {"Y", "mse:", "O", "n", "x", "d_v"});
}

// The sentences that had English words inside the Chinese: "at [r, c]" after a .npy value and
// "bytes" in a file's size.
TEST(MessagesZh, FileRefusalsHaveNoEnglishInside) {
  const test::TempDir dir("attnlab-zh");
  const std::string nan = test::write_file(
      dir.path() / "nan.npy",
      test::npy_bytes(test::npy_dict("(2, 2)"), test::le_bytes<float>({0.f, std::nanf(""), 0.f, 0.f})));
  const Message value = refusal([&] { read_matrix(nan); });
  EXPECT_EQ(value.id, Msg::NpyValueNotFinite);
  EXPECT_EQ(value.en, nan + ": value nan at [0, 1] is not finite");
  EXPECT_EQ(value.text(Lang::Zh), nan + "：位置 [0, 1] 的数值 nan 不是有限数");
  expect_chinese(value);

  const std::string big = test::write_file(dir.path() / "big.csv", std::string((1u << 20) + 1, '1'));
  const Message size = refusal([&] { read_input_file(big, std::uint64_t{1} << 20); });
  EXPECT_EQ(size.en, big + ": the file has 1048577 bytes (1.000001 MiB), more than 1 MiB (the largest input a problem can "
                           "have); not read");
  expect_chinese(size);
  // A bound below a MiB (tests only) is written in bytes: an argument.
  const std::string small = test::write_file(dir.path() / "small.csv", std::string(100, '1'));
  expect_chinese(refusal([&] { read_input_file(small, 99); }), {}, false);
}

// A file error's reason is the system's (strerror's English: the program keeps the C locale); in
// Chinese the common ones read in Chinese, others stay as the system gives them.
TEST(MessagesZh, AFileErrorsReasonReadsInChinese) {
  const test::TempDir dir("attnlab-zh");
  const std::string missing = (dir.path() / "missing.csv").string();
  const Message open = refusal([&] { read_matrix(missing); });
  EXPECT_EQ(open.id, Msg::CannotOpen);
  EXPECT_EQ(open.en, "cannot open '" + missing + "': No such file or directory");
  EXPECT_EQ(open.text(Lang::Zh), "无法打开“" + missing + "”：没有这个文件或目录");
  const Message write = refusal([&] { write_file(dir.path().string(), "x"); });
  EXPECT_EQ(write.id, Msg::CannotWrite);
  EXPECT_EQ(write.text(Lang::Zh), "无法写入“" + dir.path().string() + "”：这是一个目录");
  EXPECT_EQ(render_message(Msg::CannotRead, {"f", "Some other reason"}, Lang::Zh), "无法读取“f”：Some other reason");
  const test::BinaryRun cli = test::run_attnlab({"run", "--q", missing, "--k", missing, "--v", missing, "--lang", "zh"});
  EXPECT_EQ(cli.err, "error: 无法打开“" + missing + "”：没有这个文件或目录\n");
}

// The command line's own range and combination checks (cli/common.cpp, cli/cmd_backward.cpp).
TEST(MessagesZh, TheCommandLinesChecksFollowTheLanguage) {
  const test::BinaryRun dk = test::run_attnlab({"run", "--random", "8", "--dk", "0", "--lang", "zh"});
  EXPECT_EQ(dk.code, 2);
  EXPECT_EQ(dk.err, "error: --dk 必须在 1 到 65536 之间，当前为 0\n");
  const test::BinaryRun en = test::run_attnlab({"run", "--random", "8", "--dk", "0", "--lang", "en"});
  EXPECT_EQ(en.err, "error: --dk must be between 1 and 65536, got 0\n");
  const test::BinaryRun layer = test::run_attnlab({"run", "--random", "4", "--layer", "1", "--lang", "zh"});
  EXPECT_EQ(layer.err, "error: --layer 只适用于 --bundle\n");
  const test::BinaryRun variant = test::run_attnlab({"backward", "--variant", "decode", "--lang", "zh"});
  EXPECT_EQ(variant.code, 2);
  EXPECT_TRUE(test::contains(variant.err, "反向传播可用 --variant staged")) << variant.err;
  // The options' syntax stays in English, as README says.
  const test::BinaryRun typo = test::run_attnlab({"run", "--temp", "1", "--lang", "zh"});
  EXPECT_TRUE(test::contains(typo.err, "unknown option --temp")) << typo.err;
}

}  // namespace
}  // namespace attnlab
