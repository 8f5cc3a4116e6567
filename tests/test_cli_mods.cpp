// The modifications through the real binary: --rope, --score-mod and --mask-mod on run, verify
// and walk (the JSON names them and its output is the in-process kernel's on the same problem),
// bench's --score-mod / --mask-mod lists (one case per value, FLOPs by the visible pairs, the CSV
// and JSON columns), and every wrong value refused with one "error:" line and exit code 2.
#include "core/inputs.h"
#include "core/modify.h"
#include "cpu/cpu_backend.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace attnlab {
namespace {

using nlohmann::json;

test::BinaryRun attnlab(std::vector<std::string> args) { return test::run_attnlab(args, "LANG=C.UTF-8"); }

TEST(ModsCli, RunNamesTheModificationsAndComputesThem) {
  const std::vector<std::string> common = {"--random", "64", "--heads", "2", "--dk", "8", "--dv", "8", "--seed", "3",
                                           "--score-mod", "alibi+softcap:5", "--mask-mod", "causal,window:9",
                                           "--rope", "500"};
  std::vector<std::string> args = {"run", "--variant", "fused", "--format", "json"};
  args.insert(args.end(), common.begin(), common.end());
  const test::BinaryRun r = attnlab(args);
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["modifications"], "RoPE θ=500; ALiBi (standard slopes); soft-cap C=5; window 9");
  EXPECT_EQ(j["mods"]["rope_theta"], 500);
  EXPECT_EQ(j["mods"]["window"], 9);
  EXPECT_EQ(j["mods"]["alibi_slopes"].size(), 2u);
  EXPECT_EQ(j["mask"], "causal");
  // The same problem in process: the fused kernel's output, bit for bit as JSON prints it.
  Problem p = random_problem(64, 8, 8, 3, 2);
  apply_rope_spec(p, "500");
  apply_score_mod_spec(p, "alibi+softcap:5");
  apply_mask_mod_spec(p, "causal,window:9");
  const Trace t = cpu_fused(p);
  ASSERT_TRUE(j["stages"].contains("output"));
  EXPECT_NEAR(j["stages"]["output"][5][3].get<double>(), t.output(5, 3), 1e-6);

  // The text names them in both languages; verify passes every variant.
  std::vector<std::string> text = {"run", "--lang", "zh"};
  text.insert(text.end(), common.begin(), common.end());
  const test::BinaryRun z = attnlab(text);
  ASSERT_EQ(z.code, 0) << z.err;
  EXPECT_TRUE(test::contains(z.out, "修改：RoPE θ=500；ALiBi（标准斜率）；软上限 C=5；窗口 9"));
  EXPECT_TRUE(test::contains(z.out, "加上 ALiBi 后的分数"));
  for (const char* variant : {"staged", "fused", "decode"}) {
    std::vector<std::string> v = {"verify", "--variant", variant};
    v.insert(v.end(), common.begin(), common.end());
    const test::BinaryRun vr = attnlab(v);
    EXPECT_EQ(vr.code, 0) << variant << "\n" << vr.out << vr.err;
    EXPECT_TRUE(test::contains(vr.out, "PASS")) << vr.out;
  }
}

TEST(ModsCli, WalkShowsTheSkippedTiles) {
  const test::BinaryRun r = attnlab({"walk", "--random", "256", "--query", "200", "--mask-mod", "causal,window:40",
                                     "--tile", "32", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out);
  int skipped = 0;
  for (const json& t : j["tiles"]) {
    if (!t["skipped"].get<bool>()) continue;
    ++skipped;
    EXPECT_TRUE(t["skip_reason"] == "window" || t["skip_reason"] == "causal") << t.dump();
  }
  EXPECT_EQ(skipped, 6);  // 8 tiles, the window's 40 keys 161..200 in tiles 5 and 6
  EXPECT_EQ(j["modifications"], "window 40");
}

TEST(ModsCli, BenchListsOneCasePerModificationAndCountsTheVisiblePairs) {
  const test::BinaryRun r =
      attnlab({"bench", "--backend", "cpu", "--variant", "fused", "--precision", "fp32", "--n", "256", "--d", "16",
               "--score-mod", "none,alibi,softcap:30", "--mask-mod", "none,causal+window:32", "--rope", "10000",
               "--repeat", "2", "--warmup", "0", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out);
  ASSERT_EQ(j["cases"].size(), 6u);
  double full = 0, window = 0;
  for (const json& c : j["cases"]) {
    EXPECT_EQ(c["rope"], "10000");
    EXPECT_LT(c["rel_err"].get<double>(), 1e-5) << c.dump();
    if (c["mask_mod"] == "none") full = c["flops"];
    else window = c["flops"];
  }
  // 256 queries of a causal window of 32: 32 keys each but the first 31 rows' fewer.
  EXPECT_DOUBLE_EQ(window, 4.0 * 16 * (256.0 * 32 - 31 * 32 / 2.0));
  EXPECT_DOUBLE_EQ(full, 4.0 * 16 * 256 * 256);
  const test::BinaryRun csv =
      attnlab({"bench", "--backend", "cpu", "--variant", "fused", "--precision", "fp32", "--n", "64", "--d", "8",
               "--score-mod", "alibi", "--mask-mod", "prefix:16", "--repeat", "1", "--warmup", "0", "--format", "csv"});
  ASSERT_EQ(csv.code, 0) << csv.err;
  const std::vector<std::string> lines = test::lines_of(csv.out);
  ASSERT_GE(lines.size(), 2u);
  EXPECT_TRUE(test::contains(lines[1], ",alibi,prefix:16,,")) << lines[1];
}

TEST(ModsCli, WrongValuesGetOneErrorLine) {
  const std::vector<std::vector<std::string>> cases = {
      {"run", "--random", "8", "--score-mod", "tanh"},
      {"run", "--random", "8", "--score-mod", "softcap:0"},
      {"run", "--random", "8", "--mask-mod", "window:0"},
      {"run", "--random", "8", "--mask-mod", "prefix:99"},
      {"run", "--random", "8", "--rope", "-1"},
      {"run", "--random", "8", "--dk", "3", "--rope"},
      {"run", "--random", "8", "--score-mod", "bias:/no/such/file.npy"},
      {"run", "--random", "8", "--mask-mod", "document:/no/such/file.csv"},
      {"run", "--random", "8", "--heads", "3", "--score-mod", "alibi:1/2"},
      {"bench", "--backend", "cpu", "--score-mod", "bias:x.npy"},
      {"bench", "--backend", "cpu", "--mask-mod", "document:x.csv"},
      {"bench", "--backend", "cpu", "--mask-mod", "window:0"},
      {"walk", "--random", "8", "--mask-mod", "window:x"},
  };
  for (const auto& c : cases) {
    const test::BinaryRun r = attnlab(c);
    EXPECT_EQ(r.code, 2) << c[1] << " " << c.back() << "\n" << r.err;
    const std::vector<std::string> lines = test::lines_of(r.err);
    ASSERT_EQ(lines.size(), 1u) << r.err;
    EXPECT_EQ(lines[0].rfind("error: ", 0), 0u) << lines[0];
  }
}

// --head h of --heads H keeps head h's ALiBi slope among the H (picked before the modifications,
// it was a one-head problem's 2^-8), as the viewer's session does.
TEST(ModsCli, OneHeadKeepsItsAlibiSlopeAmongTheHeads) {
  const test::BinaryRun r =
      attnlab({"run", "--random", "8", "--heads", "8", "--head", "3", "--score-mod", "alibi", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out);
  ASSERT_EQ(j["mods"]["alibi_slopes"].size(), 1u) << j["mods"].dump();
  EXPECT_EQ(j["mods"]["alibi_slopes"][0].get<double>(), standard_alibi_slopes(8)[3]);
}

// --head h of a per-head bias: the head's rows of the file, named so (it read "(shared)": the one
// head's problem holds n rows), and the same output as head h of the whole run.
TEST(ModsCli, OneHeadOfAPerHeadBiasIsNamedAsThatHeadsRows) {
  test::TempDir dir("attnlab-mods-cli");
  std::string csv;
  for (int r = 0; r < 12; ++r)
    for (int c = 0; c < 6; ++c) csv += std::to_string((r * 7 + c * 3) % 11 - 5) + (c == 5 ? "\n" : ",");
  test::write_file(dir.file("b.csv"), csv);
  const auto run = [&](std::vector<std::string> more) {
    std::vector<std::string> args = {"run",  "--random", "6", "--heads", "2", "--dk", "4", "--dv", "4",
                                     "--score-mod", "bias:" + dir.file("b.csv")};
    args.insert(args.end(), more.begin(), more.end());
    return attnlab(args);
  };
  const test::BinaryRun h = run({"--head", "1", "--format", "json"}), all = run({"--format", "json"});
  ASSERT_EQ(h.code, 0) << h.err;
  ASSERT_EQ(all.code, 0) << all.err;
  const json jh = json::parse(h.out), ja = json::parse(all.out);
  EXPECT_EQ(jh["modifications"], "bias b.csv (one per head, head 1's)");
  EXPECT_EQ(jh["mods"]["bias"]["per_head"], true);
  EXPECT_EQ(jh["mods"]["bias"]["head"], 1);
  EXPECT_EQ(ja["modifications"], "bias b.csv (per head)");
  EXPECT_FALSE(ja["mods"]["bias"].contains("head"));
  for (int i = 0; i < 6; ++i)
    for (int c = 0; c < 4; ++c)
      EXPECT_EQ(jh["stages"]["output"][i][c], ja["stages"]["output"][6 + i][c]) << i << "," << c;
  const test::BinaryRun z = run({"--head", "1", "--lang", "zh"});
  ASSERT_EQ(z.code, 0) << z.err;
  EXPECT_TRUE(test::contains(z.out, "修改：偏置 b.csv（每个头一份，这里是头 1 的）")) << z.out;
}

// A prefix rule is prefix-LM (it implies causal): every header names that mask, where run's said
// "mask: none" for a prefix alone and "causal" beside --mask causal. JSON keeps the kind given.
TEST(ModsCli, APrefixIsNamedPrefixLMInEveryHeader) {
  EXPECT_EQ(mask_text(MaskKind::Custom, 2, Lang::En), "custom + prefix-LM");
  EXPECT_EQ(mask_text(MaskKind::Causal, 0, Lang::Zh), "因果");
  const std::vector<std::string> mask_alone = {"--random", "8", "--dk", "4", "--dv", "4", "--mask-mod", "prefix:3"};
  std::vector<std::string> with_causal = mask_alone;
  with_causal.insert(with_causal.end(), {"--mask", "causal"});
  for (const auto& common : {mask_alone, with_causal}) {
    const auto run = [&](std::vector<std::string> head, std::vector<std::string> tail = {}) {
      head.insert(head.end(), common.begin(), common.end());
      head.insert(head.end(), tail.begin(), tail.end());
      const test::BinaryRun r = attnlab(head);
      EXPECT_EQ(r.code, 0) << r.err;
      return r.out;
    };
    EXPECT_TRUE(test::contains(run({"run"}), "; mask: prefix-LM\n"));
    EXPECT_TRUE(test::contains(run({"run", "--lang", "zh"}), "；掩码：前缀 LM\n"));
    EXPECT_TRUE(test::contains(run({"verify"}), ", mask prefix-LM\n"));
    EXPECT_TRUE(test::contains(run({"verify", "--lang", "zh"}), "，掩码 前缀 LM\n"));
    EXPECT_TRUE(test::contains(run({"walk", "--query", "5", "--tile", "4"}), ", mask prefix-LM;"));
    EXPECT_TRUE(test::contains(run({"walk", "--backward", "--query", "5", "--tile", "4", "--lang", "zh"}), "，掩码 前缀 LM；"));
    EXPECT_EQ(json::parse(run({"run", "--format", "json"}))["mask"], common.size() == mask_alone.size() ? "none" : "causal");
  }
}

// Refusals that name their real cause: causal as a mask mod beside a mask file (it was "unknown
// mask modification 'causal (with a mask file)'"), and a document id past fp32's exact whole
// numbers (it was "must be whole numbers, got 9.9999998e+10": 16777217 read as 16777216 would
// merge two documents).
TEST(ModsCli, RefusalsNameTheirCause) {
  test::TempDir dir("attnlab-mods-cli");
  const std::string mask = test::write_file(dir.file("mask.csv"), "0 0 0 0\n0 0 0 0\n0 0 0 0\n0 0 0 0\n");
  const std::string docs = test::write_file(dir.file("docs.csv"), "0\n0\n16777217\n16777217\n");
  const std::string fine = test::write_file(dir.file("fine.csv"), "0\n0\n16777215\n16777215\n");
  const auto refused = [](const std::vector<std::string>& args, const std::string& what) {
    const test::BinaryRun r = attnlab(args);
    EXPECT_EQ(r.code, 2) << r.err;
    const std::vector<std::string> lines = test::lines_of(r.err);
    ASSERT_EQ(lines.size(), 1u) << r.err;
    EXPECT_TRUE(test::contains(lines[0], what)) << lines[0];
  };
  refused({"run", "--random", "4", "--mask", mask, "--mask-mod", "causal"},
          "the mask modification 'causal' does not go with a mask file");
  refused({"run", "--random", "4", "--mask-mod", "document:" + docs},
          "document ids must be whole numbers from -16777215 to 16777215, got ≈1.68e+07 at position 2");
  EXPECT_EQ(attnlab({"run", "--random", "4", "--mask-mod", "document:" + fine}).code, 0);
  // One row or one column: a matrix's order is not the positions' (2 x 2 would be read row by row).
  const std::string square = test::write_file(dir.file("square.csv"), "0,0\n1,1\n");
  refused({"run", "--random", "4", "--mask-mod", "document:" + square},
          "the document ids are a 2x2 matrix; give them as one row or one column, one per position");
  const std::string row = test::write_file(dir.file("row.csv"), "0,0,1,1\n");
  EXPECT_EQ(attnlab({"run", "--random", "4", "--mask-mod", "document:" + row}).code, 0);
  // np.save(np.array([0, 0, 1, 1])): a 1-D array of int64, the ids as numpy writes them
  std::string ids;
  for (const char id : {0, 0, 1, 1}) ids += std::string(1, id) + std::string(7, '\0');
  const std::string saved = test::write_file(dir.file("ids.npy"), test::npy_bytes(test::npy_dict("(4,)", "<i8"), ids));
  const test::BinaryRun r = attnlab({"run", "--random", "4", "--mask-mod", "document:" + saved, "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["mods"]["documents"]["positions"], 4);
  EXPECT_TRUE(j["stages"]["weights"][0][2] == 0.0 && j["stages"]["weights"][2][1] == 0.0) << "documents 0, 0 | 1, 1";
  EXPECT_GT(j["stages"]["weights"][3][2].get<double>(), 0.0);
}

}  // namespace
}  // namespace attnlab
