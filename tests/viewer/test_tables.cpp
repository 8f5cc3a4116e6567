// The information panel's numeric tables head their columns as the CLI's tables do (`attnlab demo`,
// `attnlab run`): the key tokens over every matrix of keys (QKᵀ, the scaled and modified scores, the
// mask, the logits, the weights), feature numbers from 1 over Q, K, V, their RoPE rotations and the
// output. Checked against the lists the panel draws, and against the CLI's own header lines.
#include "viewer_test_util.h"
#include "tests/test_util.h"
#include "viewer/session/session.h"
#include "viewer/session/tables.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

using namespace attnlab;
using namespace attnlab::viewer;

namespace {

const NumericTable* find_table(const std::vector<NumericTable>& ts, const std::string& id) {
  for (const NumericTable& t : ts)
    if (id == t.id) return &t;
  return nullptr;
}

}  // namespace

TEST(NumericTables, KeyColumnsAreTheKeyTokensAndFeaturesCountFromOne) {
  Session c(test::cpu_viewer_options());
  const Problem& p = c.problem();
  const std::vector<NumericTable> ts = numeric_tables(p, c.trace());
  const std::vector<std::string> keys = {"模型", "根据", "上下文", "分配", "权重"};
  for (const char* id : {"ts", "tsc", "tm", "tl", "tw"}) {
    const NumericTable* t = find_table(ts, id);
    ASSERT_NE(t, nullptr) << id;
    EXPECT_EQ(table_column_labels(p, *t), keys) << id;
  }
  for (const char* id : {"tq", "tk"}) EXPECT_EQ(table_column_labels(p, *find_table(ts, id)),
                                                (std::vector<std::string>{"1", "2", "3"})) << id;
  for (const char* id : {"tv", "to"}) EXPECT_EQ(table_column_labels(p, *find_table(ts, id)),
                                                (std::vector<std::string>{"1", "2"})) << id;
  // No RoPE, no score mods: their tables are left out.
  EXPECT_EQ(find_table(ts, "tqr"), nullptr);
  EXPECT_EQ(find_table(ts, "tb"), nullptr);
  EXPECT_EQ(feature_labels(0), std::vector<std::string>{});
}

TEST(NumericTables, RopeTablesCountTheirFeaturesFromOne) {
  ViewerOptions o = test::cpu_random_options(6, 4, 2);
  o.mods.rope_theta = 10000;
  o.rope_given = true;
  Session c(o);
  const Problem& p = c.problem();
  const std::vector<NumericTable> ts = numeric_tables(p, c.trace());
  for (const char* id : {"tqr", "tkr"}) {
    const NumericTable* t = find_table(ts, id);
    ASSERT_NE(t, nullptr) << id;
    EXPECT_EQ(table_column_labels(p, *t), (std::vector<std::string>{"1", "2", "3", "4"})) << id;
  }
  EXPECT_EQ(table_column_labels(p, *find_table(ts, "ts")), p.key_tokens());
}

#ifdef ATTNLAB_BINARY
// The header line under each table title of `attnlab demo --lang en`: its words after "token".
std::vector<std::string> cli_header(const std::string& out, const std::string& title) {
  const std::size_t at = out.find("\n" + title);
  if (at == std::string::npos) return {};
  const std::size_t line = out.find('\n', at + 1) + 1;
  std::istringstream words(out.substr(line, out.find('\n', line) - line));
  std::vector<std::string> h;
  std::string w;
  words >> w;  // token
  while (words >> w) h.push_back(w);
  return h;
}

TEST(NumericTables, HeadersAreTheClisHeaders) {
  const test::BinaryRun run = test::run_attnlab({"demo", "--lang", "en"});
  ASSERT_EQ(run.code, 0) << run.err;
  Session c(test::cpu_viewer_options());
  const Problem& p = c.problem();
  const std::vector<NumericTable> ts = numeric_tables(p, c.trace());
  const std::pair<const char*, const char*> pairs[] = {
      {"tq", "Q (queries)"}, {"tk", "K (keys)"}, {"tv", "V (values)"}, {"ts", "QKᵀ (raw scores)"},
      {"tw", "softmax (attention weights)"}, {"to", "Output = softmax(...)V"}};
  for (const auto& [id, title] : pairs) {
    const std::vector<std::string> cli = cli_header(run.out, title);
    ASSERT_FALSE(cli.empty()) << title << "\n" << run.out;
    EXPECT_EQ(table_column_labels(p, *find_table(ts, id)), cli) << title;
  }
}
#endif
