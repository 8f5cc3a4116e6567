// Unit tests of core/report.cpp's render(): the page-style text (titles, −∞, statistics, column
// alignment by display width with CJK tokens), markdown, the long-form CSV and the JSON schema,
// whose numbers must read back as exactly the trace's floats. Traces come from the CPU backend.
#include "core/report.h"
#include "core/format.h"
#include "core/inputs.h"
#include "core/report_parts.h"
#include "tests/test_util.h"

#include "core/stats.h"
#include "cpu/cpu_backend.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

namespace attnlab {
namespace {

using nlohmann::json;

using test::lines_of;

// An independent display width: CJK ideographs and fullwidth forms are 2 columns, the rest 1.
int width_of(const std::string& s) {
  int w = 0;
  for (std::size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    char32_t cp;
    int len;
    if (b < 0x80) {
      cp = b;
      len = 1;
    } else if ((b >> 5) == 0x6) {
      cp = b & 0x1F;
      len = 2;
    } else if ((b >> 4) == 0xE) {
      cp = b & 0x0F;
      len = 3;
    } else {
      cp = b & 0x07;
      len = 4;
    }
    for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    i += len;
    const bool wide = (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0xFF00 && cp <= 0xFF60) ||
                      (cp >= 0x3000 && cp <= 0x303E);
    w += wide ? 2 : 1;
  }
  return w;
}

// The lines of the table under `title` (header included), up to the blank line.
std::vector<std::string> table_under(const std::string& text, const std::string& title) {
  const auto ls = lines_of(text);
  std::vector<std::string> out;
  for (std::size_t i = 0; i < ls.size(); ++i) {
    if (ls[i] != title) continue;
    for (std::size_t j = i + 1; j < ls.size() && !ls[j].empty(); ++j) out.push_back(ls[j]);
    break;
  }
  return out;
}

using test::contains;

struct DemoRun {
  Problem p;
  Trace t;
};

DemoRun demo_run(MaskKind mask = MaskKind::None) {
  DemoRun r{demo_problem(), {}};
  r.p.mask = mask;
  r.t = cpu_staged(r.p);
  return r;
}

TEST(Report, TextHasEveryStageTitleInOrderZh) {
  const DemoRun r = demo_run();
  const std::string text = render(r.p, r.t, kDemoDefaultQuery, Lang::Zh, Format::Text);
  const std::vector<std::string> titles = {
      "Q（查询）", "K（键）", "V（值）", "QKᵀ（原始分数）", "QKᵀ / √d_k（缩放分数，d_k=3）",
      "Mask（0 保留，−∞ 屏蔽）", "softmax（注意力权重）", "Output = softmax(...)V（加权输出）"};
  std::size_t pos = 0;
  for (const auto& t : titles) {
    const std::size_t at = text.find(t, pos);
    ASSERT_NE(at, std::string::npos) << "missing or out of order: " << t;
    pos = at;
  }
  EXPECT_TRUE(contains(text, "Mask 后 logits")) << text;
  EXPECT_TRUE(contains(text, "最大权重")) << text;
  EXPECT_TRUE(contains(text, "26.0%"));
  EXPECT_TRUE(contains(text, "熵"));
  EXPECT_TRUE(contains(text, "1.561"));
  EXPECT_TRUE(contains(text, "有效位置"));
  EXPECT_TRUE(contains(text, "困惑度"));
  EXPECT_TRUE(contains(text, "1/√3"));
  EXPECT_TRUE(contains(text, "5×2"));
  EXPECT_TRUE(contains(text, describe(r.p, r.t, kDemoDefaultQuery, Lang::Zh)));
  EXPECT_TRUE(contains(text, caveat(Lang::Zh)));
}

TEST(Report, TextEnglishTitlesAndStatistics) {
  const DemoRun r = demo_run();
  const std::string text = render(r.p, r.t, kDemoDefaultQuery, Lang::En, Format::Text);
  for (const char* t : {"QKᵀ (raw scores)", "softmax (attention weights)", "max weight",
                        "entropy", "effective positions", "perplexity", "output shape"})
    EXPECT_TRUE(contains(text, t)) << t;
  EXPECT_TRUE(contains(text, caveat(Lang::En)));
  EXPECT_FALSE(contains(text, "nan"));
  // A row's largest weight below 1 % keeps two significant digits, as the viewer's statistics
  // (a flat row of 512 keys had read "max weight: 0.0%").
  Problem flat = random_problem(512, 4, 2, 1);
  flat.temperature = 1000;
  const Trace ft = cpu_staged(flat);
  const std::string s = render(flat, ft, 0, Lang::En, Format::Text);
  const RowStats st = row_stats(ft, 0);
  ASSERT_LT(st.max_weight, 0.01);
  const std::size_t at = s.find("max weight:");
  ASSERT_NE(at, std::string::npos);
  const std::string line = s.substr(at, s.find('\n', at) - at);
  EXPECT_EQ(line.substr(line.find_first_not_of(' ', 11)).rfind(percent_text(st.max_weight) + "%", 0), 0u) << line;
}

TEST(Report, SmallNegativesSignlessQuotesDoubledAndEdgeUnderscoresEscaped) {
  EXPECT_EQ(table_value(-0.001f), "0.00") << "no '-0.00' in a table";
  EXPECT_EQ(table_value(-0.006f), "-0.01");
  EXPECT_EQ(csv_field("x\"y"), "\"x\"\"y\"") << "a quote inside a field is doubled";
  EXPECT_EQ(format_bytes(200 * 1024.0), "0.2 MiB");
  EXPECT_EQ(report_parts::md_escape("a_"), "a\\_") << "an underscore ending a word";
  EXPECT_EQ(report_parts::md_escape("_a"), "\\_a");
  EXPECT_EQ(report_parts::md_escape("d_k"), "d_k") << "inside a word it stays";
}

TEST(Report, TheQueryRowIsShownAtEveryPlaceOfALongTable) {
  // Tables of more rows than they show keep both edges and the query: the last query before the
  // bottom edge among them.
  const Problem p = random_problem(20, 20, 4, 4, 3);
  const Trace t = cpu_staged(p);
  for (int query : {0, 6, 12, 13, 14, 19}) {
    const std::string text = render(p, t, query, Lang::En, Format::Text);
    EXPECT_TRUE(contains(text, "> " + std::to_string(query) + " ")) << query;
  }
}

TEST(Report, FewerQueriesThanKeysFromFilesAreTheLastPositions) {
  test::TempDir dir;
  const std::string q = test::write_file(dir.file("q.csv"), "1,0\n0,1\n");
  const std::string k = test::write_file(dir.file("k.csv"), "1,0\n0,1\n1,1\n0,0\n");
  const std::string v = test::write_file(dir.file("v.csv"), "1,2\n3,4\n5,6\n7,8\n");
  const Problem p = problem_from_files(q, k, v);
  EXPECT_EQ(p.query_tokens(), (std::vector<std::string>{"2", "3"}));
  EXPECT_EQ(p.key_tokens(), (std::vector<std::string>{"0", "1", "2", "3"}));
}

// Right-aligned numeric columns under left-aligned CJK labels: every line of a table has the
// same display width, and each value ends in the column its header ends in.
TEST(Report, TextColumnsAlignByDisplayWidth) {
  const DemoRun r = demo_run();
  const std::string text = render(r.p, r.t, kDemoDefaultQuery, Lang::Zh, Format::Text);
  for (const char* title : {"QKᵀ（原始分数）", "V（值）", "softmax（注意力权重）"}) {
    const auto table = table_under(text, title);
    ASSERT_EQ(table.size(), 6u) << title;
    const int w = width_of(table[0]);
    for (const auto& l : table) EXPECT_EQ(width_of(l), w) << title << ": '" << l << "'";
  }
  // The 上下文 column header ends where its numbers end: both lines have the same width and the
  // numbers are right-aligned, so the prefix up to the header's end has the same width as the
  // prefix up to the value's end.
  const auto scores = table_under(text, "QKᵀ（原始分数）");
  const std::size_t h_end = scores[0].find("上下文") + std::string("上下文").size();
  const std::size_t v_end = scores[3].find("2.1") + 4;  // 上下文 row, 上下文 column (2.10/2.11)
  EXPECT_EQ(width_of(scores[0].substr(0, h_end)), width_of(scores[3].substr(0, v_end)));
}

TEST(Report, CausalMaskShowsMinusInfinityAndZeroWeights) {
  const DemoRun r = demo_run(MaskKind::Causal);
  const std::string text = render(r.p, r.t, 0, Lang::En, Format::Text);
  const auto mask = table_under(text, "Mask (0 keeps, −∞ blocks)");
  ASSERT_EQ(mask.size(), 6u);
  EXPECT_TRUE(contains(mask[1], "−∞"));   // row 模型 blocks every later key
  EXPECT_FALSE(contains(mask[5], "−∞"));  // the last row reads everything
  EXPECT_TRUE(contains(text, "effective positions:  1"));
}

TEST(Report, JsonRoundTripsTheTraceExactly) {
  const DemoRun r = demo_run(MaskKind::Causal);
  const json j = json::parse(render(r.p, r.t, 3, Lang::Zh, Format::Json));
  EXPECT_EQ(j["tokens"], json(r.p.query_tokens()));
  EXPECT_EQ(j["key_tokens"], json(r.p.key_tokens()));
  EXPECT_EQ(j["d_k"], 3);
  EXPECT_EQ(j["d_v"], 2);
  EXPECT_DOUBLE_EQ(j["temperature"].get<double>(), 0.85);
  EXPECT_EQ(j["mask"], "causal");
  EXPECT_EQ(j["backend"], "cpu");
  EXPECT_EQ(j["precision"], "fp32");
  EXPECT_EQ(j["variant"], "staged");
  EXPECT_EQ(j["heads"], 1);
  EXPECT_EQ(j["query"], 3);
  for (const char* k : {"upload", "qk", "scale_mask", "softmax", "pv", "fused", "download", "total"})
    EXPECT_TRUE(j["timings_ms"].contains(k)) << k;
  const std::vector<std::pair<std::string, const MatrixF*>> stages = {
      {"q", &r.p.q()},          {"k", &r.p.k()},           {"v", &r.p.v()},
      {"scores", &r.t.scores}, {"scaled", &r.t.scaled}, {"mask", &r.t.mask},
      {"logits", &r.t.logits}, {"weights", &r.t.weights}, {"output", &r.t.output}};
  for (const auto& [key, m] : stages) {
    const json& s = j["stages"][key];
    ASSERT_EQ(s.size(), static_cast<std::size_t>(m->rows())) << key;
    for (Eigen::Index row = 0; row < m->rows(); ++row) {
      ASSERT_EQ(s[row].size(), static_cast<std::size_t>(m->cols())) << key;
      for (Eigen::Index c = 0; c < m->cols(); ++c) {
        const float want = (*m)(row, c);
        if (std::isinf(want)) {
          EXPECT_TRUE(s[row][c].is_null()) << key << " " << row << "," << c;
        } else {
          ASSERT_TRUE(s[row][c].is_number()) << key;
          EXPECT_EQ(static_cast<float>(s[row][c].get<double>()), want) << key << " " << row << "," << c;
        }
      }
    }
  }
  ASSERT_EQ(j["rows"].size(), 5u);
  for (int row = 0; row < 5; ++row) {
    const RowStats s = row_stats(r.t, row);
    const json& jr = j["rows"][row];
    EXPECT_EQ(jr["token"], r.p.query_tokens()[row]);
    EXPECT_DOUBLE_EQ(jr["max_weight"].get<double>(), s.max_weight);
    EXPECT_EQ(jr["argmax"], s.argmax);
    EXPECT_DOUBLE_EQ(jr["entropy"].get<double>(), s.entropy);
    EXPECT_EQ(jr["unmasked"], s.unmasked);
    EXPECT_EQ(jr["unmasked"], row + 1);  // causal: row r reads r + 1 keys
    EXPECT_DOUBLE_EQ(jr["perplexity"].get<double>(), s.perplexity);
    EXPECT_NEAR(jr["weight_sum"].get<double>(), 1.0, 1e-6);
  }
  EXPECT_EQ(j["description"], describe(r.p, r.t, 3, Lang::Zh));
}

TEST(Report, JsonOfAFusedTraceHoldsInputsAndOutputOnly) {
  DemoRun r = demo_run();
  r.t.has_stages = false;
  r.t.variant = Variant::Fused;
  for (MatrixF* m : {&r.t.scores, &r.t.scaled, &r.t.mask, &r.t.logits, &r.t.weights})
    m->resize(0, 0);
  const auto j = nlohmann::ordered_json::parse(render(r.p, r.t, 2, Lang::En, Format::Json));
  std::vector<std::string> keys;
  for (const auto& [k, v] : j["stages"].items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"q", "k", "v", "output"}));
  EXPECT_TRUE(j["rows"].empty());
  EXPECT_EQ(j["variant"], "fused");
  const std::string text = render(r.p, r.t, 2, Lang::En, Format::Text);
  EXPECT_TRUE(contains(text, "Output = softmax(...)V"));
  EXPECT_FALSE(contains(text, "softmax (attention weights)"));
  EXPECT_TRUE(contains(text, "--variant staged"));
}

TEST(Report, CsvIsLongFormAndComplete) {
  const DemoRun r = demo_run(MaskKind::Causal);
  const std::string csv = render(r.p, r.t, 2, Lang::En, Format::Csv);
  const auto ls = lines_of(csv);
  ASSERT_FALSE(ls.empty());
  EXPECT_EQ(ls[0], "stage,row,col,row_token,col_token,value");
  // q 15 + k 15 + v 10 + five 5x5 stages + output 10 = 175 values
  EXPECT_EQ(ls.size(), 1u + 15 + 15 + 10 + 5 * 25 + 10);
  EXPECT_TRUE(contains(csv, "\nmask,0,1,模型,根据,-inf\n"));
  EXPECT_TRUE(contains(csv, "\nweights,0,1,模型,根据,0\n"));
  // Full precision: the value column reads back as the trace's float.
  for (const auto& l : ls) {
    if (l.rfind("weights,2,0,", 0) != 0) continue;
    const float v = std::stof(l.substr(l.rfind(',') + 1));
    EXPECT_EQ(v, r.t.weights(2, 0));
  }
}

TEST(Report, MarkdownTables) {
  const DemoRun r = demo_run();
  const std::string md = render(r.p, r.t, 2, Lang::En, Format::Markdown);
  EXPECT_TRUE(contains(md, "### QKᵀ (raw scores)"));
  EXPECT_TRUE(contains(md, "| token | 模型 | 根据 | 上下文 | 分配 | 权重 |"));
  EXPECT_TRUE(contains(md, "|---|---:|"));
  // The selected query's row label in bold (the text's "> " marker), the others plain.
  EXPECT_TRUE(contains(md, "| **上下文** | 0.22 | 0.10 | 0.26 | 0.17 | 0.25 |"));
  EXPECT_TRUE(contains(md, "| 模型 | 1.20 |")) << md;
  EXPECT_FALSE(contains(md, "**模型**"));
  EXPECT_FALSE(contains(md, "| > "));
  EXPECT_TRUE(contains(md, "26.0%"));
}

TEST(Report, LargeProblemsAreSummarisedInTextButCompleteInJson) {
  Problem p = random_problem(40, 20, 3, 5);
  const Trace t = cpu_staged(p);
  const std::string text = render(p, t, 20, Lang::En, Format::Text);
  EXPECT_TRUE(contains(text, "…"));
  EXPECT_TRUE(contains(text, "json or csv"));
  const auto scores = table_under(text, "QKᵀ (raw scores)");
  // header + 6 first + gap + the selected row 20 + gap + 6 last
  EXPECT_EQ(scores.size(), 1u + 6 + 1 + 1 + 1 + 6);
  bool selected = false;
  for (const auto& l : scores) selected = selected || l.rfind("> 20 ", 0) == 0;
  EXPECT_TRUE(selected) << "the selected query row stays visible";
  const json j = json::parse(render(p, t, 20, Lang::En, Format::Json));
  EXPECT_EQ(j["stages"]["weights"].size(), 40u);
  EXPECT_EQ(j["stages"]["weights"][0].size(), 40u);
}

// The weights of thousands of keys read 0.00 with two decimals: the table prints them times a
// power of ten that its title names; the demo's weights (up to 0.26) stay as the page prints them.
TEST(Report, ATableOfSmallValuesNamesItsPowerOfTen) {
  Problem p = random_problem(2048, 8, 8, 3);
  const Trace t = cpu_staged(p);
  for (const Format f : {Format::Text, Format::Markdown}) {
    const std::string text = render(p, t, 0, Lang::En, f);
    const std::size_t title = text.find("softmax (attention weights)  ");  // "\\[" in markdown
    const std::size_t at = text.find("values × 1e-", title);
    ASSERT_NE(title, std::string::npos);
    ASSERT_LT(at, title + 40) << text.substr(title, 200);
    const int e = std::stoi(text.substr(text.find("1e-", at) + 2));
    // the table's first weight, as printed, is the weight times 10^-e
    const std::string row = text.substr(text.find(f == Format::Text ? "\n> 0 " : "| **0** |", at));
    std::istringstream in(row.substr(f == Format::Text ? 4 : 9));
    std::string cell;
    in >> cell;
    if (cell == "|") in >> cell;
    EXPECT_NEAR(std::stod(cell), t.weights(0, 0) / std::pow(10.0, e), 0.006) << row.substr(0, 80);
  }
  const DemoRun d = demo_run();
  EXPECT_EQ(render(d.p, d.t, 2, Lang::En, Format::Text).find("[values ×"), std::string::npos);
}

TEST(Report, MultiHeadShowsHeadZeroAndSaysSo) {
  Problem p = random_problem(4, 3, 2, 9, 3);
  const Trace t = cpu_staged(p);
  const std::string text = render(p, t, 1, Lang::En, Format::Text);
  EXPECT_TRUE(contains(text, "3 heads"));
  EXPECT_TRUE(contains(text, "head 0"));
  EXPECT_EQ(table_under(text, "QKᵀ (raw scores)").size(), 5u);
  const json j = json::parse(render(p, t, 1, Lang::En, Format::Json));
  EXPECT_EQ(j["heads"], 3);
  EXPECT_EQ(j["stages"]["q"].size(), 12u);
  EXPECT_EQ(j["stages"]["mask"].size(), 4u);
  EXPECT_EQ(j["rows"].size(), 12u);
}

// A decode shape of two heads (two queries, eight keys): a query stage shows head 0's two query
// rows, a key stage head 0's eight key rows (each stage holds both heads' rows, stacked).
TEST(Report, MultiHeadDecodeTablesShowHeadZerosRowsOfEachAxis) {
  const Problem p = random_problem(2, 8, 4, 4, 3, 2, 2);
  const Trace t = cpu_staged(p);
  const std::string text = render(p, t, 1, Lang::En, Format::Text);
  EXPECT_EQ(table_under(text, "Q (queries)").size(), 3u) << text;
  EXPECT_EQ(table_under(text, "K (keys)").size(), 9u) << text;
  EXPECT_EQ(table_under(text, "V (values)").size(), 9u) << text;
  EXPECT_EQ(table_under(text, "QKᵀ (raw scores)").size(), 3u) << text;
}

TEST(Report, ParseFormat) {
  EXPECT_EQ(parse_format("text"), Format::Text);
  EXPECT_EQ(parse_format("json"), Format::Json);
  EXPECT_EQ(parse_format("csv"), Format::Csv);
  EXPECT_EQ(parse_format("markdown"), Format::Markdown);
  EXPECT_THROW(parse_format("xml"), InputError);
}

}  // namespace
}  // namespace attnlab
