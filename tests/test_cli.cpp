// Tests of the real `attnlab` binary (ATTNLAB_BINARY): the demo's text against the page's values,
// the JSON interface (schema, full precision, -inf as null), determinism of --random, huge logits
// and tiny temperatures, and every bad input of issue 2: exit code 2 and exactly one stderr line
// "error: ..." naming what is wrong. Each test works in its own temporary directory.
#include "core/backend.h"
#include "core/problem.h"
#include "cpu/cpu_backend.h"
#include "tests/test_util.h"
#include "engine/registry.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace attnlab {
namespace {

using nlohmann::json;

using CliResult = test::BinaryRun;

using test::contains;
using test::le_bytes;

using test::lines_of;

// Collapses runs of spaces so table rows compare "modulo spacing".
std::string squeeze(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == ' ' && (out.empty() || out.back() == ' ')) continue;
    out += c;
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

class Cli : public ::testing::Test {
 protected:
  // Runs the binary with `args` under `env` (e.g. "LANG=C.UTF-8"), capturing both streams.
  CliResult run(const std::vector<std::string>& args, const std::string& env = "LANG=C.UTF-8") {
    return test::run_attnlab(args, env);
  }

  std::string file(const std::string& name, const std::string& bytes) {
    return test::write_file(dir_.file(name), bytes);
  }

  // A .npy v1.0 file: `descr` e.g. "<f4", shape as Python tuple text, raw data bytes.
  std::string npy(const std::string& name, const std::string& descr, const std::string& shape,
                  const std::string& data, bool fortran = false) {
    return file(name, test::npy_bytes(test::npy_dict(shape, descr, fortran ? "True" : "False"),
                                      data));
  }

  // Expects a refusal: exit 2, nothing on stdout, one stderr line "error: " containing `what`.
  void expect_refused(const std::vector<std::string>& args, const std::vector<std::string>& what) {
    const CliResult r = run(args);
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    EXPECT_EQ(r.code, 2) << joined << "\nstderr: " << r.err;
    EXPECT_TRUE(r.out.empty()) << joined << "\nstdout: " << r.out;
    const auto ls = lines_of(r.err);
    ASSERT_EQ(ls.size(), 1u) << joined << "\nstderr: " << r.err;
    EXPECT_EQ(ls[0].rfind("error: ", 0), 0u) << ls[0];
    EXPECT_EQ(r.err.back(), '\n');
    for (const auto& w : what) EXPECT_TRUE(contains(ls[0], w)) << joined << "\n" << ls[0];
    EXPECT_FALSE(contains(ls[0], "terminate")) << ls[0];
  }

  test::TempDir dir_{"attnlab-cli"};
};

// The line of `token` in the table titled `title` of a text rendering, squeezed, marker removed.
std::string table_row(const std::string& text, const std::string& title, const std::string& token) {
  const auto ls = lines_of(text);
  for (std::size_t i = 0; i < ls.size(); ++i) {
    if (ls[i] != title) continue;
    for (std::size_t j = i + 2; j < ls.size() && !ls[j].empty(); ++j) {
      std::string row = squeeze(ls[j]);
      if (row.rfind("> ", 0) == 0) row = row.substr(2);
      if (row.rfind(token + " ", 0) == 0) return row.substr(token.size() + 1);
    }
  }
  return "<no row " + token + " under " + title + ">";
}

std::vector<double> numbers(const std::string& s) {
  std::vector<double> v;
  std::istringstream in(s);
  for (double x; in >> x;) v.push_back(x);
  return v;
}

TEST_F(Cli, DemoTextShowsThePagesValues) {
  const CliResult r = run({"demo", "--lang", "en"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  // QKᵀ row 模型 on the page: 1.84 0.49 1.79 0.99 1.94. Two of these cells are exact ties
  // (0.495, 0.995) that the page's JavaScript doubles round down and fp32 rounds up, so each
  // printed cell may differ from the page by one unit in the last place, never more.
  const std::vector<double> page = {1.84, 0.49, 1.79, 0.99, 1.94};
  const auto got = numbers(table_row(r.out, "QKᵀ (raw scores)", "模型"));
  ASSERT_EQ(got.size(), page.size()) << r.out;
  for (std::size_t i = 0; i < page.size(); ++i) EXPECT_NEAR(got[i], page[i], 0.0101) << i;
  EXPECT_EQ(table_row(r.out, "softmax (attention weights)", "上下文"), "0.22 0.10 0.26 0.17 0.25");
  EXPECT_EQ(table_row(r.out, "Output = softmax(...)V (weighted output)", "上下文"), "0.65 0.55");
  EXPECT_EQ(table_row(r.out, "Q (queries)", "上下文"), "0.85 0.35 1.15");
  EXPECT_TRUE(contains(r.out, "26.0%"));
  EXPECT_TRUE(contains(r.out, "1.561"));
  EXPECT_TRUE(contains(r.out, "1/√3"));
  EXPECT_TRUE(contains(r.out, "5×2"));
  EXPECT_TRUE(contains(r.out, "0.219, 0.102, 0.260, 0.165, 0.254"));
  EXPECT_FALSE(contains(r.out, "nan"));
}

TEST_F(Cli, DemoLanguageFollowsLangAndFlag) {
  const CliResult zh = run({"demo"}, "LANG=zh_CN.UTF-8");
  ASSERT_EQ(zh.code, 0) << zh.err;
  EXPECT_TRUE(contains(zh.out, "QKᵀ（原始分数）"));
  EXPECT_TRUE(contains(zh.out, "最大权重"));
  EXPECT_TRUE(contains(zh.out, "熵"));
  EXPECT_TRUE(contains(zh.out, "0.219、0.102、0.260、0.165、0.254"));
  const CliResult en = run({"demo"}, "LANG=C");
  ASSERT_EQ(en.code, 0) << en.err;
  EXPECT_TRUE(contains(en.out, "QKᵀ (raw scores)"));
  const CliResult forced = run({"demo", "--lang", "zh"}, "LANG=C");
  EXPECT_TRUE(contains(forced.out, "QKᵀ（原始分数）"));
}

// The lab's catalogued refusals follow --lang, else $LANG; CLI11's option-syntax errors stay
// English. Each is one line either way.
TEST_F(Cli, RefusalsFollowTheLanguage) {
  const auto error_line = [&](const std::vector<std::string>& args, const std::string& env) {
    const CliResult r = run(args, env);
    EXPECT_EQ(r.code, 2) << r.err;
    const auto ls = lines_of(r.err);
    EXPECT_EQ(ls.size(), 1u) << r.err;
    return ls.empty() ? std::string() : ls[0];
  };
  const std::string zh = "error: 温度必须是大于 0 的有限数";
  EXPECT_EQ(error_line({"demo", "--lang", "zh", "--temperature", "0"}, "LANG=C").rfind(zh, 0), 0u);
  EXPECT_EQ(error_line({"demo", "--lang=zh", "--temperature", "0"}, "LANG=C").rfind(zh, 0), 0u);
  EXPECT_EQ(error_line({"demo", "--temperature", "0"}, "LANG=zh_CN.UTF-8").rfind(zh, 0), 0u);
  // POSIX's precedence: LC_ALL, then LC_MESSAGES, then LANG (the first set and not empty).
  EXPECT_EQ(error_line({"demo", "--temperature", "0"}, "LANG=C LC_MESSAGES=zh_CN.UTF-8").rfind(zh, 0), 0u);
  EXPECT_EQ(error_line({"demo", "--temperature", "0"}, "LANG=C LC_ALL=zh_CN.UTF-8").rfind(zh, 0), 0u);
  EXPECT_EQ(error_line({"demo", "--temperature", "0"}, "LANG=zh_CN.UTF-8 LC_ALL=C"),
            "error: temperature must be a finite number > 0, got 0");
  EXPECT_EQ(error_line({"demo", "--temperature", "0"}, "LANG=C LC_ALL= LC_MESSAGES=zh_CN.UTF-8").rfind(zh, 0), 0u);
  EXPECT_EQ(error_line({"demo", "--lang", "en", "--temperature", "0"}, "LANG=zh_CN.UTF-8"),
            "error: temperature must be a finite number > 0, got 0");
  EXPECT_TRUE(contains(error_line({"run", "--random", "4", "--mask-mod", "window:0", "--lang", "zh"}, "LANG=C"), "窗口"));
  EXPECT_TRUE(contains(error_line({"demo", "--lang", "zh", "--bogus"}, "LANG=C"), "--bogus"));
  // An option before the subcommand: its value was taken for the subcommand.
  EXPECT_TRUE(contains(error_line({"--lang", "zh", "demo"}, "LANG=C"), "options go after it: attnlab demo --lang zh"));
  // describe prints a paragraph: no csv, and its help (like walk's) does not offer it. A format no
  // command knows is refused in the words of the command's own formats, naming the value.
  expect_refused({"describe", "--format", "csv"}, {"describe prints a paragraph", "not 'csv'"});
  expect_refused({"describe", "--format", "xml"}, {"describe prints a paragraph", "not 'xml'"});
  expect_refused({"walk", "--format", "xml"}, {"walk prints text, json or markdown, not 'xml'"});
  expect_refused({"verify", "--format", "xml"}, {"verify prints text or json, not 'xml'"});
  EXPECT_TRUE(contains(error_line({"walk", "--format", "xml", "--lang", "zh"}, "LANG=C"), "不输出“xml”"));
  for (const char* sub : {"describe", "walk"}) {
    const CliResult help = run({sub, "--help"});
    EXPECT_TRUE(contains(help.out, "text|json|markdown")) << sub;
    EXPECT_FALSE(contains(help.out, "text|json|csv|markdown")) << sub;
  }
}

// --split, 0 included, goes with the decode variant only, and there it is a count from 1 to m as in
// walk and bench (left out, the kernel chooses; a typed 0 had been taken as that); --help wins over a
// value refused on the way to it (CLI11 checks the values first); "none" stands alone in a
// modification list; an exponent's sign is the number's, not a joint of the list.
TEST_F(Cli, SplitHelpNoneAndExponentsInLists) {
  expect_refused({"run", "--random", "8", "--variant", "fused", "--split", "0"}, {"--split S goes with --variant decode"});
  expect_refused({"backward", "--random", "8", "--split", "0"}, {"--split"});
  for (const char* cmd : {"run", "verify", "describe"})
    expect_refused({cmd, "--random", "8", "--variant", "decode", "--split", "0"},
                   {"--split must be between 1 and the number of keys (8), got 0"});
  expect_refused({"demo", "--variant", "decode", "--split", "0"}, {"--split must be between 1 and the number of keys (5), got 0"});
  EXPECT_EQ(run({"run", "--random", "8", "--variant", "decode"}).code, 0);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"demo", "--temperature", "0", "--help"},
        std::vector<std::string>{"walk", "--tile", "x", "-h"}}) {
    const CliResult r = run(args);
    EXPECT_EQ(r.code, 0) << args[0] << ": " << r.err;
    EXPECT_TRUE(contains(r.out, "Usage: attnlab " + args[0])) << r.out;
    EXPECT_TRUE(r.err.empty()) << r.err;
  }
  // A label with a line break or a tab would break the printed tables: refused, its escapes shown.
  expect_refused({"run", "--random", "2", "--tokens", "a\nb,c"}, {"token label 1 contains a control character", "'a\\x0Ab'"});
  expect_refused({"run", "--random", "2", "--tokens", "a,b\tc"}, {"token label 2"});
  expect_refused({"run", "--random", "2", "--tokens-file", file("labels.txt", "a\nb\tc\n")}, {"token label 2"});
  // The demo relabelled: its sentence no longer names the labels, so the texts leave it out.
  const CliResult relabelled = run({"describe", "--tokens", "a,b,c,d,e", "--lang", "en"});
  EXPECT_EQ(relabelled.code, 0) << relabelled.err;
  EXPECT_TRUE(contains(relabelled.out, "The sequence has 5 tokens. The current query is c,")) << relabelled.out;
  EXPECT_FALSE(contains(relabelled.out, "模型根据上下文分配权重")) << relabelled.out;
  // Bytes that are no UTF-8 would make the outputs invalid text: refused, the bytes escaped.
  expect_refused({"run", "--random", "2", "--tokens-file", file("latin1.txt", "a\nb\xFF\xFE\n")},
                 {"token label 2 is not valid UTF-8", "'b\\xFF\\xFE'"});
  expect_refused({"run", "--random", "4", "--mask-mod", "none,causal"}, {"--mask-mod 'none,causal'", "stands alone"});
  expect_refused({"run", "--random", "4", "--score-mod", "none+alibi"}, {"--score-mod 'none+alibi'", "stands alone"});
  EXPECT_EQ(run({"run", "--random", "4", "--mask-mod", " none "}).code, 0);
  const CliResult e = run({"run", "--random", "8", "--score-mod", "alibi+softcap:2e+1", "--format", "json"});
  const CliResult plain = run({"run", "--random", "8", "--score-mod", "alibi,softcap:20", "--format", "json"});
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_EQ(nlohmann::json::parse(e.out)["output"], nlohmann::json::parse(plain.out)["output"]);
}

TEST_F(Cli, DemoJsonFollowsTheSchemaAtFullPrecision) {
  const CliResult r = run({"demo", "--format", "json", "--backend", "cpu"});
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out);
  for (const char* key : {"tokens", "key_tokens", "d_k", "d_v", "temperature", "mask", "backend",
                          "precision", "query", "stages", "rows", "description"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["tokens"], json({"模型", "根据", "上下文", "分配", "权重"}));
  EXPECT_EQ(j["d_k"], 3);
  EXPECT_EQ(j["d_v"], 2);
  EXPECT_DOUBLE_EQ(j["temperature"].get<double>(), 0.85);
  EXPECT_EQ(j["mask"], "none");
  EXPECT_EQ(j["backend"], "cpu");
  EXPECT_EQ(j["precision"], "fp32");
  EXPECT_EQ(j["query"], 2);
  for (const char* s : {"q", "k", "v", "scores", "scaled", "mask", "logits", "weights", "output"})
    EXPECT_TRUE(j["stages"].contains(s)) << s;
  ASSERT_EQ(j["rows"].size(), 5u);
  for (const char* k : {"token", "max_weight", "argmax", "entropy", "unmasked", "perplexity",
                        "weight_sum"})
    EXPECT_TRUE(j["rows"][2].contains(k)) << k;
  EXPECT_NEAR(j["rows"][2]["max_weight"].get<double>(), 0.260, 0.0005);
  EXPECT_EQ(j["rows"][2]["argmax"], 2);
  EXPECT_NEAR(j["rows"][2]["entropy"].get<double>(), 1.561, 0.0005);
  EXPECT_EQ(j["rows"][2]["unmasked"], 5);
  EXPECT_TRUE(contains(j["description"].get<std::string>(), "上下文"));

  // The numbers read back as exactly the CPU backend's floats...
  const Trace t = cpu_staged(demo_problem());
  for (int row = 0; row < 5; ++row)
    for (int c = 0; c < 5; ++c)
      EXPECT_EQ(static_cast<float>(j["stages"]["weights"][row][c].get<double>()),
                t.weights(row, c));
  // ...which takes 9 significant digits for some of them (6 would lose bits).
  std::size_t most = 0;
  const std::regex number(R"((\d+\.\d+))");
  for (std::sregex_iterator it(r.out.begin(), r.out.end(), number), end; it != end; ++it) {
    std::string digits = (*it)[1].str();
    digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
    digits.erase(0, digits.find_first_not_of('0'));
    most = std::max(most, digits.size());
  }
  EXPECT_GE(most, 9u);
}

TEST_F(Cli, CausalJsonWritesMinusInfinityAsNull) {
  const CliResult r = run({"demo", "--mask", "causal", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(contains(r.out, "inf"));
  EXPECT_FALSE(contains(r.out, "NaN"));
  const json j = json::parse(r.out);
  EXPECT_EQ(j["mask"], "causal");
  EXPECT_TRUE(j["stages"]["mask"][0][1].is_null());
  EXPECT_TRUE(j["stages"]["logits"][0][1].is_null());
  EXPECT_EQ(j["stages"]["mask"][1][0].get<double>(), 0.0);
  EXPECT_EQ(j["stages"]["weights"][0][1].get<double>(), 0.0);
  EXPECT_EQ(j["stages"]["weights"][0][0].get<double>(), 1.0);
  EXPECT_EQ(j["rows"][2]["unmasked"], 3);
}

TEST_F(Cli, CsvMarkdownAndOutputFile) {
  const CliResult csv = run({"demo", "--format", "csv"});
  ASSERT_EQ(csv.code, 0) << csv.err;
  EXPECT_EQ(lines_of(csv.out).at(0), "stage,row,col,row_token,col_token,value");
  const CliResult md = run({"demo", "--format", "markdown", "--lang", "en"});
  ASSERT_EQ(md.code, 0) << md.err;
  EXPECT_TRUE(contains(md.out, "| **上下文** | 0.22 | 0.10 | 0.26 | 0.17 | 0.25 |"));
  const std::string out = dir_.file("demo.json");
  const CliResult f = run({"demo", "--format", "json", "--output", out});
  ASSERT_EQ(f.code, 0) << f.err;
  EXPECT_TRUE(f.out.empty());
  EXPECT_EQ(json::parse(test::read_file(out))["query"], 2);
}

TEST_F(Cli, QueryByTokenOrIndexAndTemperature) {
  const CliResult by_token = run({"demo", "--query", "模型", "--format", "json"});
  const CliResult by_index = run({"demo", "--query", "0", "--format", "json"});
  ASSERT_EQ(by_token.code, 0) << by_token.err;
  ASSERT_EQ(by_index.code, 0) << by_index.err;
  json a = json::parse(by_token.out), b = json::parse(by_index.out);
  EXPECT_EQ(a["query"], 0);
  a.erase("timings_ms");
  b.erase("timings_ms");
  EXPECT_EQ(a, b);
  // A lower temperature sharpens the row: its entropy falls.
  const json hot = json::parse(run({"demo", "--temperature", "5", "--format", "json"}).out);
  const json cold = json::parse(run({"demo", "--temperature", "0.1", "--format", "json"}).out);
  EXPECT_DOUBLE_EQ(hot["temperature"].get<double>(), 5.0);
  EXPECT_LT(cold["rows"][2]["entropy"].get<double>(), hot["rows"][2]["entropy"].get<double>());
}

TEST_F(Cli, DescribePrintsOnlyTheDescription) {
  const CliResult r = run({"describe", "--lang", "en"});
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(lines_of(r.out).size(), 1u) << r.out;
  EXPECT_TRUE(contains(r.out, "The current query is 上下文"));
  EXPECT_TRUE(contains(r.out, "0.219, 0.102, 0.260, 0.165, 0.254"));
  const CliResult zh = run({"describe", "--lang", "zh", "--mask", "causal"});
  ASSERT_EQ(zh.code, 0) << zh.err;
  EXPECT_TRUE(contains(zh.out, "因果"));
}

TEST_F(Cli, HelpDocumentsEveryOptionAndExitsZero) {
  const CliResult top = run({"--help"});
  EXPECT_EQ(top.code, 0) << top.err;
  for (const char* s : {"demo", "run", "describe"}) EXPECT_TRUE(contains(top.out, s)) << s;
  const CliResult demo = run({"demo", "--help"});
  EXPECT_EQ(demo.code, 0);
  for (const char* o : {"--query", "--temperature", "--mask", "--lang", "--format", "--backend",
                        "--variant", "--precision"})
    EXPECT_TRUE(contains(demo.out, o)) << o;
  const CliResult runh = run({"run", "--help"});
  EXPECT_EQ(runh.code, 0);
  for (const char* o : {"--q", "--k", "--v", "--random", "--dk", "--dv", "--seed", "--heads",
                        "--tokens", "--tokens-file", "--output", "--mask", "--temperature"})
    EXPECT_TRUE(contains(runh.out, o)) << o;
}

TEST_F(Cli, RunFilesWithTokensAndCustomMask) {
  const std::string q = file("q.csv", "# queries\n1 0 0\n0 1 0\n");
  const std::string k = file("k.csv", "1,0,0\n0,1,0\n0,0,1\n");
  const std::string v = file("v.csv", "1,2\n3,4\n5,6\n");
  const std::string mask = file("mask.csv", "0 -inf 0\n0 0 -inf\n");
  const CliResult r = run({"run", "--q", q, "--k", k, "--v", v, "--mask", mask, "--tokens",
                           "a,b,x,y,z", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["tokens"], json({"a", "b"}));
  EXPECT_EQ(j["key_tokens"], json({"x", "y", "z"}));
  EXPECT_EQ(j["mask"], "custom");
  EXPECT_TRUE(j["stages"]["mask"][0][1].is_null());
  EXPECT_EQ(j["stages"]["weights"][0][1].get<double>(), 0.0);
  EXPECT_EQ(j["stages"]["weights"][1][2].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(j["temperature"].get<double>(), 1.0);
  // Default labels are indices.
  const CliResult plain = run({"run", "--q", q, "--k", k, "--v", v, "--format", "json"});
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_EQ(json::parse(plain.out)["key_tokens"], json({"0", "1", "2"}));
}

TEST_F(Cli, RunNpyInputs) {
  const std::string q = npy("q.npy", "<f4", "(2, 2)", le_bytes(std::vector<float>{1, 0, 0, 1}));
  const std::string k = npy("k.npy", "<f8", "(2, 2)", le_bytes(std::vector<double>{1, 0, 0, 1}));
  const std::string v = file("v.csv", "1\n3\n");
  const CliResult r = run({"run", "--q", q, "--k", k, "--v", v, "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["d_k"], 2);
  EXPECT_EQ(j["d_v"], 1);
}

TEST_F(Cli, RandomProblemsAreDeterministicAndSeeded) {
  const std::vector<std::string> args = {"run", "--random", "8", "--dk", "4", "--dv", "3",
                                         "--seed", "7", "--format", "csv", "--backend", "cpu"};
  const CliResult a = run(args), b = run(args);
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  auto other = args;
  other[8] = "8";
  const CliResult c = run(other);
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_NE(a.out, c.out);
  // q: 8x4, k 8x4, v 8x3, five 8x8 stages, output 8x3
  EXPECT_EQ(lines_of(a.out).size(), 1u + 32 + 32 + 24 + 5 * 64 + 24);
}

TEST_F(Cli, LargeRandomTextIsSummarisedAndHeadsAreStacked) {
  const CliResult r = run({"run", "--random", "200", "--dk", "16", "--dv", "8", "--lang", "en"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "…"));
  EXPECT_TRUE(contains(r.out, "json or csv"));
  EXPECT_LT(lines_of(r.out).size(), 200u);
  const CliResult h = run({"run", "--random", "6", "--dk", "4", "--dv", "2", "--heads", "3",
                           "--format", "json"});
  ASSERT_EQ(h.code, 0) << h.err;
  const json j = json::parse(h.out);
  EXPECT_EQ(j["heads"], 3);
  EXPECT_EQ(j["stages"]["q"].size(), 18u);
  EXPECT_EQ(j["stages"]["weights"].size(), 18u);
  EXPECT_EQ(j["tokens"].size(), 6u);
}

TEST_F(Cli, FusedRunKeepsInputsAndOutput) {
  const CliResult r = run({"run", "--random", "16", "--dk", "4", "--dv", "2", "--variant",
                           "fused", "--backend", "cpu", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["variant"], "fused");
  EXPECT_TRUE(j["stages"].contains("output"));
  EXPECT_EQ(j["stages"]["output"].size(), 16u);
  const CliResult text = run({"run", "--random", "16", "--dk", "4", "--dv", "2", "--variant",
                              "fused", "--backend", "cpu"});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_TRUE(contains(text.out, "Output"));
}

// |logit| up to ~1e36 (scores 1e30 / sqrt(3) / 1e-6) must still give exact weights.
TEST_F(Cli, HugeLogitsAndTinyTemperatureStayExact) {
  const std::string q = file("q.csv", "1e15 0 0\n0 1e15 0\n1e15 1e15 0\n");
  const std::string k = file("k.csv", "1e15 0 0\n-1e15 0 0\n0 1e15 0\n");
  const std::string v = file("v.csv", "1 2\n3 4\n5 6\n");
  const CliResult r = run({"run", "--q", q, "--k", k, "--v", v, "--temperature", "1e-6",
                           "--format", "json", "--backend", "cpu"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(contains(r.out, "nan"));
  EXPECT_FALSE(contains(r.out, "NaN"));
  const json j = json::parse(r.out);
  const json& w = j["stages"]["weights"];
  for (const auto& row : w) {
    double sum = 0;
    for (const auto& x : row) {
      ASSERT_TRUE(x.is_number()) << j["stages"]["weights"].dump();
      sum += x.get<double>();
    }
    EXPECT_NEAR(sum, 1.0, 1e-6);
  }
  // Row 0 scores (1e30, -1e30, 0): all weight on key 0. Row 1: on key 2. Row 2 ties keys 0 and 2.
  EXPECT_EQ(w[0], json({1.0, 0.0, 0.0}));
  EXPECT_EQ(w[1], json({0.0, 0.0, 1.0}));
  EXPECT_EQ(w[2], json({0.5, 0.0, 0.5}));
  EXPECT_EQ(j["stages"]["output"][0], json({1.0, 2.0}));
  EXPECT_EQ(j["stages"]["output"][2], json({3.0, 4.0}));
  for (const auto& row : j["rows"]) EXPECT_TRUE(row["entropy"].is_number());
}

TEST_F(Cli, BadTemperaturesAreRefused) {
  for (const char* t : {"0", "-1", "nan", "inf", "abc", "1e400", ""})
    expect_refused({"demo", "--temperature", t}, {"temperature"});
  expect_refused({"demo", "--temperature=-inf"}, {"temperature"});
  // Decimal notation only, as --seed: strtod's hex floats are refused as typed.
  expect_refused({"demo", "--temperature", "0x10"},
                 {"temperature must be a finite number > 0, got '0x10'"});
  expect_refused({"run", "--random", "4", "--temperature", "0x1p-2"}, {"got '0x1p-2'"});
  expect_refused({"run", "--random", "4", "--temperature", "infinity"}, {"got inf"});
}

TEST_F(Cli, IncompatibleShapesAreNamed) {
  const std::string q = file("q.csv", "1 2 3 4\n5 6 7 8\n");
  const std::string k = file("k.csv", "1 2 3\n4 5 6\n");
  const std::string v = file("v.csv", "1 2\n3 4\n");
  expect_refused({"run", "--q", q, "--k", k, "--v", v}, {"K has 3 columns but Q has 4"});
  const std::string k4 = file("k4.csv", "1 2 3 4\n5 6 7 8\n");
  const std::string v3 = file("v3.csv", "1 2\n3 4\n5 6\n");
  expect_refused({"run", "--q", q, "--k", k4, "--v", v3}, {"V has 3 rows but K has 2"});
}

// Files are held to the tokens --random is held to (a fused run over 3 million keys ran on for
// hours): one key past 2^20 is refused, 2^20 itself runs.
TEST_F(Cli, FilesAreHeldToTheTokenLimit) {
  const std::string q = npy("q.npy", "<f4", "(1, 1)", std::string(4, '\0'));
  const std::string over = npy("over.npy", "<f4", "(1048577, 1)", std::string(4 * 1048577, '\0'));
  expect_refused({"run", "--q", q, "--k", over, "--v", over, "--variant", "fused"},
                 {"K has 1048577 rows per head", "at most 1048576 tokens"});
  expect_refused({"run", "--q", over, "--k", over, "--v", over, "--variant", "fused"},
                 {"Q has 1048577 rows per head"});
  const std::string most = npy("most.npy", "<f4", "(1048576, 1)", std::string(4 * 1048576, '\0'));
  const CliResult r = run({"run", "--q", q, "--k", most, "--v", most, "--variant", "fused"});
  EXPECT_EQ(r.code, 0) << r.err;
}

// Causal puts the queries at the end of the keys: 2 queries of 3 keys are positions 1 and 2, so
// query 0 sees keys 0..1 and key 2 weighs exactly 0; more queries than keys is refused.
TEST_F(Cli, CausalPlacesTheQueriesAtTheEndOfTheKeys) {
  const std::string q = file("q.csv", "1 2 3\n4 5 6\n");
  const std::string k = file("k.csv", "1 2 3\n4 5 6\n7 8 9\n");
  const std::string v = file("v.csv", "1 2\n3 4\n5 6\n");
  const CliResult r = run({"run", "--q", q, "--k", k, "--v", v, "--mask", "causal", "--format", "csv"});
  ASSERT_EQ(r.code, 0) << r.err;
  const CliResult j = run({"run", "--q", q, "--k", k, "--v", v, "--mask", "causal", "--format", "json"});
  ASSERT_EQ(j.code, 0) << j.err;
  const json doc = json::parse(j.out);
  const auto& w = doc["stages"]["weights"];
  EXPECT_EQ(w[0][2].get<double>(), 0.0) << j.out.substr(0, 400);
  EXPECT_GT(w[0][1].get<double>(), 0.0);
  EXPECT_GT(w[1][2].get<double>(), 0.0);
  expect_refused({"run", "--q", k, "--k", q, "--v", file("v2.csv", "1 2\n3 4\n"), "--mask", "causal"},
                 {"no more queries than keys", "3 queries", "2 keys"});
}

// verify's header names the shared key/value heads and the decode run's splits as run's does, in
// both languages and in the JSON (it had said "4 heads x 1 query x 64 keys" alone).
TEST_F(Cli, VerifyNamesTheSharedKeyValueHeadsAndTheSplits) {
  const std::vector<std::string> args = {"verify", "--random", "64", "--queries", "1", "--heads", "4", "--kv-heads",
                                         "1", "--dk", "8", "--dv", "8", "--variant", "decode", "--split", "3"};
  std::vector<std::string> en = args, zh = args, js = args;
  en.insert(en.end(), {"--lang", "en"});
  zh.insert(zh.end(), {"--lang", "zh"});
  js.insert(js.end(), {"--format", "json"});
  const CliResult e = run(en), z = run(zh), j = run(js);
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_TRUE(contains(e.out, "4 heads (sharing 1 key/value head) x 1 query x 64 keys (in 3 splits), d_k 8")) << e.out;
  ASSERT_EQ(z.code, 0) << z.err;
  EXPECT_TRUE(contains(z.out, "4 个头（共用 1 个键/值头） × 1 个查询 × 64 个键（分成 3 份）")) << z.out;
  ASSERT_EQ(j.code, 0) << j.err;
  const nlohmann::json v = nlohmann::json::parse(j.out);
  EXPECT_EQ(v["kv_heads"], 1);
  EXPECT_EQ(v["splits"], 3);
}

// Decode shapes from the command line: --queries and --kv-heads shape a random problem, the decode
// variant prints its split count, the JSON carries heads, kv_heads and splits; wrong values get
// one error line each.
TEST_F(Cli, DecodeShapesAndTheDecodeVariant) {
  const CliResult t = run({"run", "--random", "5000", "--queries", "2", "--heads", "4", "--kv-heads", "2",
                           "--dk", "8", "--dv", "8", "--variant", "decode", "--split", "3", "--mask", "causal",
                           "--lang", "en"});
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_TRUE(contains(t.out, "n=2 queries, m=5000 keys")) << t.out.substr(0, 600);
  EXPECT_TRUE(contains(t.out, "decode · fp32")) << t.out.substr(0, 600);
  EXPECT_TRUE(contains(t.out, "keys in 3 splits")) << t.out.substr(0, 600);
  EXPECT_TRUE(contains(t.out, "4 heads (sharing 2 key/value heads)")) << t.out.substr(0, 600);
  const CliResult j = run({"run", "--random", "3000", "--queries", "1", "--heads", "8", "--kv-heads", "1",
                           "--dk", "8", "--dv", "8", "--variant", "decode", "--format", "json"});
  ASSERT_EQ(j.code, 0) << j.err;
  const json doc = json::parse(j.out);
  EXPECT_EQ(doc["variant"], "decode");
  EXPECT_EQ(doc["heads"], 8);
  EXPECT_EQ(doc["kv_heads"], 1);
  EXPECT_GE(doc["splits"].get<int>(), 1);
  EXPECT_EQ(doc["tokens"], json({"2999"}));
  // A cache stored in bf16 on the CPU; verify holds it to the bf16 bound.
  const CliResult b = run({"verify", "--random", "3000", "--queries", "1", "--heads", "8", "--kv-heads", "2",
                           "--dk", "16", "--dv", "16", "--variant", "decode", "--precision", "bf16", "--backend",
                           "cpu", "--lang", "en"});
  EXPECT_EQ(b.code, 0) << b.out << b.err;
  EXPECT_TRUE(contains(b.out, "PASS")) << b.out;
  expect_refused({"run", "--random", "100", "--queries", "101"}, {"--queries must be between 1 and N = 100"});
  expect_refused({"run", "--random", "100", "--queries", "0"}, {"--queries must be between 1"});
  expect_refused({"run", "--random", "100", "--heads", "6", "--kv-heads", "4"},
                 {"6 query heads cannot share 4 key/value heads evenly"});
  expect_refused({"run", "--random", "100", "--kv-heads", "2"}, {"--kv-heads must be between 1 and --heads 1"});
  expect_refused({"run", "--kv-heads", "2"}, {"--kv-heads shapes a random problem"});
  expect_refused({"run", "--random", "100", "--variant", "decode", "--split", "-2", "--backend", "cpu"},
                 {"--split must be"});
  expect_refused({"run", "--random", "100", "--variant", "prefill"}, {"use staged, fused or decode"});
  // --split cuts the keys of the split-KV kernel only: with another variant it is refused, not ignored.
  expect_refused({"run", "--random", "100", "--split", "3"},
                 {"--split S goes with --variant decode (the split-KV kernel), got --variant staged"});
  expect_refused({"demo", "--variant", "fused", "--split", "2"}, {"got --variant fused"});
}

// A V so large that the unnormalised sum of the online-softmax kernels overflows fp32 while the
// output fits: every CPU variant (fused, decode, bf16, the walk) computes it, as the staged chain
// does, through V scaled by a power of two (cpu/values_range.h); the walk says so. An output that
// does not fit its precision is still refused, in one line that says so.
TEST_F(Cli, AHugeVIsComputedByEveryCpuVariantLikeStaged) {
  const std::string q = file("q.csv", "0.1 0.2\n0.3 0.1\n"), k = file("k.csv", "0.2 0.1\n0.1 0.3\n");
  const std::string v = file("v.csv", "3e38 3e38\n3e38 3e38\n");
  const auto output = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"run", "--q", q, "--k", k, "--v", v, "--backend", "cpu", "--format", "json"};
    args.insert(args.end(), extra.begin(), extra.end());
    const CliResult r = run(args);
    EXPECT_EQ(r.code, 0) << r.err;
    return r.code == 0 ? json::parse(r.out)["stages"]["output"] : json();
  };
  const json staged = output({});
  ASSERT_FALSE(staged.is_null());
  for (const std::vector<std::string>& extra : {std::vector<std::string>{"--variant", "fused"},
                                                std::vector<std::string>{"--variant", "decode"},
                                                std::vector<std::string>{"--variant", "decode", "--split", "2"}}) {
    const json o = output(extra);
    ASSERT_EQ(o.size(), staged.size()) << extra[1];
    for (std::size_t i = 0; i < o.size(); ++i)
      for (std::size_t c = 0; c < o[i].size(); ++c)
        EXPECT_NEAR(o[i][c].get<double>(), staged[i][c].get<double>(), 1e-6 * 3e38) << extra[1];
  }
  for (const char* variant : {"staged", "fused", "decode"}) {
    const json o = output({"--variant", variant, "--precision", "bf16"});
    ASSERT_FALSE(o.is_null()) << variant;
    EXPECT_NEAR(o[0][0].get<double>(), 3e38, 2e-2 * 3e38) << variant;
  }
  const CliResult walk = run({"walk", "--q", q, "--k", k, "--v", v, "--tile", "1", "--lang", "en", "--backend", "cpu"});
  ASSERT_EQ(walk.code, 0) << walk.err;
  EXPECT_TRUE(contains(walk.out, "V scaled: acc overflows fp32 with V as given, so the walk ran on V·2^-")) << walk.out;
  EXPECT_TRUE(contains(walk.out, "max |walk − staged|: 0")) << walk.out;
  const CliResult walk_json = run({"walk", "--q", q, "--k", k, "--v", v, "--format", "json", "--backend", "cpu"});
  ASSERT_EQ(walk_json.code, 0) << walk_json.err;
  EXPECT_GT(json::parse(walk_json.out)["values_exponent"].get<int>(), 0);
  // The fused backward's forward too (a small dO keeps the gradients within fp32): as staged's.
  const std::string dout = file("dout.csv", "1e-30 1e-30\n1e-30 1e-30\n");
  const auto backward = [&](const char* variant) {
    const CliResult r = run({"backward", "--q", q, "--k", k, "--v", v, "--dout", dout, "--variant", variant, "--backend",
                             "cpu", "--format", "csv"});
    EXPECT_EQ(r.code, 0) << variant << ": " << r.err;
    std::vector<double> outputs;  // the output's values in the CSV
    for (const std::string& l : lines_of(r.out))
      if (l.rfind("output,", 0) == 0) outputs.push_back(std::stod(l.substr(l.rfind(',') + 1)));
    return outputs;
  };
  const std::vector<double> fused_o = backward("fused"), staged_o = backward("staged");
  ASSERT_EQ(fused_o.size(), 4u);
  ASSERT_EQ(staged_o.size(), 4u);
  for (std::size_t i = 0; i < fused_o.size(); ++i) EXPECT_NEAR(fused_o[i], staged_o[i], 1e-6 * 3e38) << i;
  // bf16 rounds fp32's largest value up past bf16's range: that output does not fit bf16.
  const std::string vmax = file("vmax.csv", "3.4028235e38 1\n3.4028235e38 1\n");
  expect_refused({"run", "--q", q, "--k", k, "--v", vmax, "--variant", "fused", "--precision", "bf16", "--backend",
                  "cpu", "--lang", "en"},
                 {"the output overflows bf16 in head 0, query row 0"});
  const CliResult fp32 = run({"run", "--q", q, "--k", k, "--v", vmax, "--variant", "fused", "--backend", "cpu"});
  EXPECT_EQ(fp32.code, 0) << fp32.err;
}

TEST_F(Cli, FullyMaskedRowNamesRowAndToken) {
  const std::string mask =
      file("mask.csv", "0 0 0 0 0\n0 0 0 0 0\n-inf -inf -inf -inf -inf\n0 0 0 0 0\n0 0 0 0 0\n");
  expect_refused({"demo", "--mask", mask}, {"row 2", "上下文", "fully masked"});
  const std::string bad = file("bad-mask.csv", "0 0 0 0 0\n0 0.5 0 0 0\n");
  expect_refused({"demo", "--mask", bad}, {"bad-mask.csv"});
}

TEST_F(Cli, NonFiniteInputsAreRefused) {
  const std::string q =
      npy("q.npy", "<f4", "(2, 2)",
          le_bytes(std::vector<float>{1, std::numeric_limits<float>::quiet_NaN(), 0, 1}));
  const std::string k = file("k.csv", "1 0\n0 1\n");
  const std::string v = file("v.csv", "1\n2\n");
  expect_refused({"run", "--q", q, "--k", k, "--v", v}, {"q.npy", "finite"});
  const std::string qi = file("qi.csv", "1 inf\n0 1\n");
  expect_refused({"run", "--q", qi, "--k", k, "--v", v}, {"qi.csv", "finite"});
}

TEST_F(Cli, MalformedCsvNamesFileLineAndColumn) {
  const std::string k = file("k.csv", "1 0\n0 1\n");
  const std::string v = file("v.csv", "1\n2\n");
  expect_refused({"run", "--q", file("empty.csv", ""), "--k", k, "--v", v},
                 {"empty.csv", "empty"});
  expect_refused({"run", "--q", file("ragged.csv", "1 2\n3\n"), "--k", k, "--v", v},
                 {"ragged.csv:2"});
  expect_refused({"run", "--q", file("word.csv", "1,2\n3,abc\n"), "--k", k, "--v", v},
                 {"word.csv:2:2", "abc"});
  expect_refused({"run", "--q", dir_.file("missing.csv"), "--k", k, "--v", v},
                 {"missing.csv"});
}

TEST_F(Cli, MalformedNpyIsRefused) {
  const std::string k = file("k.csv", "1 0\n0 1\n");
  const std::string v = file("v.csv", "1\n2\n");
  expect_refused({"run", "--q", file("junk.npy", "this is not numpy"), "--k", k, "--v", v},
                 {"junk.npy"});
  expect_refused(
      {"run", "--q", npy("big.npy", ">i4", "(2, 2)", std::string(16, '\0')), "--k", k, "--v", v},
      {"big.npy", "dtype"});
  expect_refused({"run", "--q", npy("fortran.npy", "<f4", "(2, 2)", std::string(16, '\0'), true),
                  "--k", k, "--v", v},
                 {"fortran.npy", "Fortran"});
  expect_refused({"run", "--q", npy("rank3.npy", "<f4", "(1, 2, 2)", std::string(16, '\0')),
                  "--k", k, "--v", v},
                 {"rank3.npy", "2-D"});
  expect_refused(
      {"run", "--q", npy("short.npy", "<f4", "(2, 2)", std::string(8, '\0')), "--k", k, "--v", v},
      {"short.npy", "truncated"});
}

// An input that never ends, or a file larger than the largest input a problem can have, is
// refused with one line: at its first byte when that byte cannot be the format (/dev/zero is no
// CSV), else after reading at most one byte past the bound (the real one: this run reads 1 GiB of
// CSV text from a pipe, under a cap on the address space of 1.4 GiB: what it holds stays near the
// bytes read, where a string doubling as they came would hold 1.5 GiB at the end), under timeout(1)
// so that a regression fails instead of hanging.
TEST_F(Cli, EndlessOrHugeInputsAreRefusedAtTheBound) {
  CliResult r = test::run_binary("timeout", {"60", test::attnlab_binary(), "run", "--q", "/dev/zero", "--k",
                                             "/dev/zero", "--v", "/dev/zero"},
                                 "LANG=C.UTF-8");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  ASSERT_EQ(lines_of(r.err).size(), 1u) << r.err;
  EXPECT_EQ(r.err, "error: /dev/zero: byte 0 is a NUL byte, so this is no CSV or text file (binary data?); "
                   "not read further\n");
  const std::string small = file("small.csv", "1,0\n0,1\n");
  r = test::run_binary("sh", {"-c", "ulimit -v 1450000 && yes 1,2 | timeout 60 '" + test::attnlab_binary() +
                                         "' run --q /dev/stdin --k '" +
                                         small + "' --v '" + small + "'"},
                       "LANG=C.UTF-8");
  EXPECT_EQ(r.code, 2) << r.err;
  ASSERT_EQ(lines_of(r.err).size(), 1u) << r.err;
  EXPECT_EQ(r.err, "error: /dev/stdin: more than 1024 MiB (the largest input a problem can have); "
                   "not read further\n");

  // A regular file is judged by its size alone (a sparse file: nothing to read).
  const std::string huge = dir_.file("huge.npy");
  std::filesystem::resize_file(file("huge.npy", ""), (std::uint64_t{1} << 30) + 1);
  const std::string k = file("k.csv", "1,0\n0,1\n");
  expect_refused({"run", "--q", huge, "--k", k, "--v", k},
                 {huge + ": the file has 1073741825 bytes", "more than 1024 MiB", "not read"});
  expect_refused({"run", "--q", k, "--k", k, "--v", k, "--mask", huge}, {huge, "not read"});
  expect_refused({"run", "--q", k, "--k", k, "--v", k, "--tokens-file", huge}, {huge, "not read"});
}

TEST_F(Cli, UnknownQueriesAreRefused) {
  expect_refused({"demo", "--query", "你好"}, {"你好", "模型"});
  expect_refused({"demo", "--query", "7"}, {"7", "out of range"});
  expect_refused({"run", "--random", "4", "--dk", "2", "--dv", "2", "--query", "4"},
                 {"out of range"});
}

TEST_F(Cli, UsageErrorsAreOneLine) {
  expect_refused({"demo", "--bogus"}, {"--bogus"});
  expect_refused({"bogus"}, {"unknown subcommand", "bogus"});
  expect_refused({}, {"subcommand"});
  expect_refused({"demo", "--backend", "bogus"}, {"bogus", "auto"});
  expect_refused({"demo", "--format", "xml"}, {"xml"});
  expect_refused({"demo", "--lang", "fr"}, {"fr"});
  expect_refused({"demo", "--variant", "turbo"}, {"turbo"});
  expect_refused({"demo", "--query"}, {"--query"});
  expect_refused({"run"}, {"--random"});
  expect_refused({"run", "--random", "0"}, {"--random"});
  expect_refused({"run", "--random", "abc"}, {"--random"});
  expect_refused({"run", "--random", "100000000"}, {"--random"});
  expect_refused({"run", "--random", "1000000", "--dk", "4096"}, {"GiB"});
  expect_refused({"run", "--random", "4", "--dk", "0"}, {"--dk"});
  expect_refused({"run", "--random", "4", "--heads", "0"}, {"--heads"});
  expect_refused({"run", "--random", "4", "--tokens", "a,b"}, {"--tokens", "number of labels is 2"});
  expect_refused({"run", "--random", "4", "--queries", "1", "--tokens", "a"},
                 {"number of labels is 1,", "n = 1 queries and m = 4 keys: give n + m = 5"});
  expect_refused({"run", "--random", "4", "--q", "x.csv"}, {"not both"});
  expect_refused({"run", "--random", "4", "--mask", dir_.file("nomask.csv")},
                 {"nomask.csv"});
  expect_refused({"demo", "--mask", "diagonal"}, {"'diagonal'", "none, causal"});
  // Empty values (CLI11 read them as "not given" or 0) and seeds that do not fit 64 bits.
  expect_refused({"describe", "--random", ""}, {"--random needs a value"});
  expect_refused({"demo", "--query", ""}, {"--query needs a value"});
  expect_refused({"run", "--random", "4", "--seed", ""}, {"--seed needs a value"});
  expect_refused({"run", "--random", "4", "--seed", "18446744073709551616"}, {"--seed", "18446744073709551615"});
  expect_refused({"run", "--random", "4", "--seed", "-1"}, {"--seed", "'-1'"});
  expect_refused({"bench", "--seed", "1e3"}, {"--seed", "'1e3'"});
  // Numbers CLI11 cannot convert: what the option takes, not "could not convert".
  expect_refused({"run", "--random", "99999999999"}, {"--random must be a whole number of at most 9 digits", "'99999999999'"});
  expect_refused({"bench", "--repeat", "1e3"}, {"--repeat must be a whole number, got '1e3'"});
  expect_refused({"run", "--random", "4", "--dk", "2.5"}, {"--dk must be a whole number, got '2.5'"});
  expect_refused({"bench", "--max-seconds", "abc"}, {"--max-seconds must be a finite decimal number > 0, got 'abc'"});
  // Whole numbers are decimal: a base prefix is refused, leading zeros are dropped (CLI11 read
  // "010" as octal 8: --seed 010 gave seed 8's problem).
  expect_refused({"run", "--random", "0x10"}, {"--random", "decimal whole number", "'0x10'"});
  expect_refused({"run", "--random", "4", "--seed", "0x10"}, {"--seed", "decimal whole number"});
  expect_refused({"bench", "--repeat", "0b11"}, {"--repeat", "decimal whole number"});
  const auto csv = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"run", "--random", "010", "--dk", "1", "--dv", "1", "--format", "csv"};
    args.insert(args.end(), extra.begin(), extra.end());
    const CliResult r = run(args);
    EXPECT_EQ(r.code, 0) << r.err;
    return r.out;
  };
  EXPECT_TRUE(contains(csv({}), "\nq,9,0,")) << "--random 010 is 10 tokens";
  EXPECT_EQ(csv({"--seed", "010"}), csv({"--seed", "10"}));
  EXPECT_NE(csv({"--seed", "010"}), csv({"--seed", "8"}));
  // An --output that cannot be written is refused before anything runs.
  expect_refused({"demo", "--output", dir_.path()}, {"cannot write", "Is a directory"});
  expect_refused({"demo", "--output", dir_.file("missing/out.txt")}, {"cannot write", "No such file"});
  // nor one that is an input (by any name): the result would replace what it was computed from
  const std::string q = file("q.csv", "1,0\n0,1\n"), k = file("k.csv", "1,0\n0,1\n"), v = file("v.csv", "1\n2\n");
  const std::string y = file("y.csv", "0\n0\n");
  const std::string q_alias = (dir_.path() / "." / "q.csv").string();
  expect_refused({"run", "--q", q, "--k", k, "--v", v, "--format", "csv", "--output", q_alias},
                 {"--output", "is the file that --q reads"});
  expect_refused({"backward", "--q", q, "--k", k, "--v", v, "--loss", "mse:" + y, "--output", y},
                 {"is the file that --loss reads"});
  expect_refused({"walk", "--backward", "--q", q, "--k", k, "--v", v, "--dout", y, "--output", y},
                 {"is the file that --dout reads"});
  EXPECT_EQ(test::read_file(q), "1,0\n0,1\n");
  // A write that fails when it happens (a full device) says so in one line, exit 1 (the input was
  // fine) for --output and stdout alike, whichever command wrote; an old output is replaced whole
  // or not at all (core/io.h write_file).
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"demo", "--output", "/dev/full"},
        std::vector<std::string>{"bench", "--n", "8", "--d", "4", "--repeat", "1", "--warmup", "0", "--backend", "cpu",
                                 "--output", "/dev/full"}}) {
    const CliResult r = run(args);
    EXPECT_EQ(r.code, 1) << args[0] << ": " << r.err;
    const auto ls = lines_of(r.err);  // bench's progress lines come first
    ASSERT_FALSE(ls.empty());
    EXPECT_EQ(std::count_if(ls.begin(), ls.end(), [](const std::string& l) { return l.rfind("error: ", 0) == 0; }), 1);
    EXPECT_EQ(ls.back().rfind("error: cannot write '/dev/full'", 0), 0u) << r.err;
    EXPECT_TRUE(contains(ls.back(), "No space left")) << r.err;
  }
  const CliResult zh = run({"demo", "--output", "/dev/full", "--lang", "zh"});
  EXPECT_EQ(zh.code, 1);
  EXPECT_TRUE(contains(zh.err, "无法写入")) << zh.err;
  const std::string streams = dir_.file("stdout-full.err");
  const int status = std::system((test::shell_quote(test::attnlab_binary()) + " demo >/dev/full 2>" +
                                  test::shell_quote(streams)).c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_EQ(test::read_file(streams), "error: could not write to standard output\n");
  const std::string old = file("old.json", "previous\n");
  const CliResult ok = run({"demo", "--format", "json", "--output", old});
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_EQ(json::parse(test::read_file(old))["d_k"], 3);
  for (const auto& e : std::filesystem::directory_iterator(dir_.path()))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
}

// JSON and CSV hold every number of every stage and are built in memory: a size that fits the
// run but not its rendering is refused with the estimate before anything runs (on any machine
// short of about 2 TB), where text would summarise it.
TEST_F(Cli, CompleteRenderingsThatCannotFitAreRefusedFirst) {
  for (const char* format : {"json", "csv"})
    expect_refused({"run", "--random", "100000", "--dk", "4", "--dv", "4", "--format", format},
                   {"writing every stage as " + std::string(format), "of host memory", "--format text"});
  expect_refused({"run", "--random", "100000", "--dk", "4", "--dv", "4", "--format", "json",
                  "--output", dir_.file("never.json")},
                 {"writing every stage as json"});
  EXPECT_FALSE(std::filesystem::exists(dir_.file("never.json"))) << "the output check leaves no file";
}

// A cap on the process's address space (ulimit -v; here about 400 MB) is memory the machine has
// and the process may not take: the estimate counts the room under the cap, so the run is
// refused before it allocates (one line, exit 2, in --lang's language), not stopped by a failed
// allocation; and the room it names is under the cap, not the machine's MemAvailable.
TEST_F(Cli, ACapOnTheAddressSpaceIsTheRoomTheEstimateCounts) {
  for (const char* lang : {"en", "zh"}) {
    const CliResult r = test::run_binary(
        "bash", {"-c", "ulimit -c 0 -v 400000 && exec \"$0\" \"$@\"", test::attnlab_binary(), "run", "--random",
                 "8192", "--backend", "cpu", "--lang", lang});
    EXPECT_TRUE(r.out.empty()) << r.out.substr(0, 200);
    EXPECT_EQ(r.code, 2) << r.err;
    const auto ls = lines_of(r.err);
    ASSERT_EQ(ls.size(), 1u) << r.err;
    const bool zh = std::string(lang) == "zh";
    EXPECT_TRUE(contains(ls[0], zh ? "主机内存，可用 " : "of host memory, ")) << ls[0];
    // The room named ("…, 85.2 MiB available" / "可用 85.2 MiB；") is under the cap's 390.6 MiB:
    // MiB or KiB, never the machine's GiB.
    const std::string after = zh ? "可用 " : "of host memory, ";
    std::string room = ls[0].substr(ls[0].find(after) + after.size());
    room = room.substr(0, room.find(zh ? "；" : " available"));
    EXPECT_TRUE(room.size() > 4 && (room.substr(room.size() - 4) == " MiB" || room.substr(room.size() - 4) == " KiB"))
        << ls[0];
    // The room named is the one the need was refused against: the need reads above it.
    const std::string about = zh ? "约需 " : "needs about ";
    std::string need = ls[0].substr(ls[0].find(about) + about.size());
    need = need.substr(0, need.find(zh ? " 主机内存" : " of host memory"));
    const auto bytes = [](const std::string& t) {
      const double unit = t.find("GiB") != std::string::npos ? 1 << 30 : t.find("MiB") != std::string::npos ? 1 << 20 : 1 << 10;
      return std::stod(t) * unit;
    };
    EXPECT_GT(bytes(need), bytes(room)) << ls[0];
  }
  // Random inputs that would not fit under the cap are refused before they are generated (an
  // allocation failing halfway said only "out of host memory", exit 1).
  const CliResult r = test::run_binary(
      "bash", {"-c", "ulimit -c 0 -v 400000 && exec \"$0\" \"$@\"", test::attnlab_binary(), "run", "--random",
               "524288", "--dk", "64", "--variant", "fused", "--backend", "cpu", "--lang", "en"});
  EXPECT_EQ(r.code, 2) << r.err;
  ASSERT_EQ(lines_of(r.err).size(), 1u) << r.err;
  EXPECT_TRUE(contains(r.err, "--random 524288 --dk 64 --dv 64 --heads 1: Q, K and V alone need about")) << r.err;
}

// A walk's rendering is counted too: as JSON each of a long row's one-key tiles is an object with
// its acc and output, and under the cap it is refused before the row is walked (it had run out of
// memory half-way, a JSON tree's destructor ending the process, exit 134).
TEST_F(Cli, AWalkThatCouldNotBeRenderedIsRefusedFirst) {
  for (const char* lang : {"en", "zh"}) {
    const CliResult r = test::run_binary(
        "bash", {"-c", "ulimit -c 0 -v 400000 && exec \"$0\" \"$@\"", test::attnlab_binary(), "walk", "--random",
                 "131072", "--dk", "1", "--dv", "64", "--tile", "1", "--format", "json", "--backend", "cpu", "--lang", lang});
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_TRUE(r.out.empty());
    ASSERT_EQ(lines_of(r.err).size(), 1u) << r.err;
    EXPECT_TRUE(contains(r.err, std::string(lang) == "en" ? "writing the walk as json (" : "把游走写成 json（")) << r.err;
  }
}

// A reader that closes the pipe early is a write that failed: one line and exit 1 (SIGPIPE had
// ended the process without a word, exit 141).
TEST_F(Cli, AClosedPipeIsAFailedWrite) {
  const CliResult r = test::run_binary(
      "bash", {"-c", "\"$0\" run --random 600 --format csv --backend cpu 2>\"$1\" | head -c 10 > /dev/null; "
                     "echo \"${PIPESTATUS[0]}\"; cat \"$1\"",
               test::attnlab_binary(), dir_.file("pipe-err.txt")});
  EXPECT_EQ(r.out, "1\nerror: could not write to standard output\n") << r.err;
}

// Arguments echoed in a refusal are printed with their control bytes and invalid UTF-8 escaped.
TEST_F(Cli, EchoedArgumentsAreEscaped) {
  const CliResult r = test::run_binary(test::attnlab_binary(), {"run", "--random", "4", "--query", "\xff\x1b[31mRED"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(contains(r.err, "query '\\xFF\\x1B[31mRED' is not a token")) << r.err;
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos);
}

// A random problem whose run could not fit, or whose --head or walk --tile it does not have, is
// refused from its sizes, before its inputs are generated: under a limit of one second of CPU time,
// which generating a million tokens' Q, K and V (about 200 million normal draws) far exceeds (the
// process would die of SIGXCPU), run, describe, verify, backward and walk answer with the refusal.
// The option's own typos still come first.
TEST_F(Cli, ARandomRunTooLargeIsRefusedBeforeItsInputsAreMade) {
  const auto refused = [](std::vector<std::string> args, const std::string& lang, const std::string& want) {
    args.insert(args.begin(), {"-c", "ulimit -c 0 -t 1 && exec \"$0\" \"$@\"", test::attnlab_binary()});
    for (const char* more : {"--backend", "cpu", "--lang"}) args.push_back(more);
    args.push_back(lang);
    const CliResult r = test::run_binary("bash", args);
    EXPECT_EQ(r.code, 2) << r.err;
    ASSERT_EQ(lines_of(r.err).size(), 1u) << r.err;
    EXPECT_TRUE(contains(r.err, want)) << r.err;
  };
  for (const char* cmd : {"run", "describe"}) {
    SCOPED_TRACE(cmd);
    refused({cmd, "--random", "1048576"}, "en", "the problem (staged chain on the CPU): needs about ");
    refused({cmd, "--random", "1048576"}, "zh", "该问题（CPU 上的 staged 计算链）约需 ");
  }
  refused({"verify", "--random", "1048576"}, "en", "verify (the staged run and the fp64 reference of every stage): needs about ");
  refused({"backward", "--random", "1048576"}, "en",
          "backward (the staged run, every gradient as a heads·n x m matrix): needs about ");
  refused({"backward", "--random", "1048576", "--score-mod", "alibi"}, "zh", "反向传播（staged 运行，每个梯度都是头数·n x m 的矩阵）约需 ");
  // The fp64 check of a decode shape holds bound matrices of the keys' shape, (heads m, d) in
  // double: about 10 GiB here, refused under a cap of 6 GB (once counted at a third of that).
  const CliResult check = test::run_binary(
      "bash", {"-c", "ulimit -c 0 -t 1 -v 6000000 && exec \"$0\" \"$@\"", test::attnlab_binary(), "backward", "--random",
               "262144", "--queries", "1", "--heads", "6", "--check", "--backend", "cpu", "--lang", "en"});
  EXPECT_EQ(check.code, 2) << check.err;
  EXPECT_TRUE(contains(check.err, "backward (the staged run, every gradient, the fp64 check): needs about ")) << check.err;
  for (const char* cmd : {"run", "verify"})
    refused({cmd, "--random", "1048576", "--queries", "1", "--heads", "8", "--head", "9", "--variant", "fused"}, "en",
            "--head must be between 0 and 7, got 9");
  refused({"walk", "--random", "1048576", "--queries", "1", "--heads", "8", "--head", "9"}, "en",
          "--head must be between 0 and 7, got 9");
  refused({"walk", "--random", "1048576", "--tile", "2000000"}, "en",
          "--tile must be between 1 and the number of keys (1048576), got 2000000");
  refused({"run", "--random", "1048576", "--pattern", "loca:5"}, "en", "--pattern");
}

TEST_F(Cli, CudaWithoutADeviceIsRefused) {
  std::string reason;
  if (cuda_available(&reason)) GTEST_SKIP() << "a CUDA device is present; nothing to refuse";
  expect_refused({"demo", "--backend", "cuda"}, {"no CUDA device"});
  // backward says so first, not "add --variant fused" (which could not run either).
  expect_refused({"backward", "--backend", "cuda"}, {"no CUDA device"});
  // auto falls back to the CPU silently when there is no device.
  const CliResult r = run({"demo", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["backend"], "cpu");
}

}  // namespace
}  // namespace attnlab
