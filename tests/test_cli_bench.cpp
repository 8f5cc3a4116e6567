// `attnlab bench` through the real binary (issue 4): every combination of the lists is either
// timed or listed as skipped with its reason; a timed case reports median/min/max, TFLOP/s by the
// 4·N²·d rule (half for causal), bytes and GB/s, peak memory and the error against fp64 from the
// same run; staged cases add their four stages; a progress line per case goes to stderr; JSON,
// CSV and table renderings agree on what ran; bad options get one "error:" line and exit 2.
// CPU cases only run here, fp32 and bf16 staged and fused (bf16: 2-byte inputs, a bf16-sized
// error); CUDA cases are skipped with the registry's reason where no device answers (on a GPU
// machine they run, and the same checks apply), CUDA bf16 off the fused kernel's rules everywhere.
// A run with a CPU case measures the host copy rate once and names it in the header and JSON;
// --baseline adds a "plain" row (cpu_staged_plain) beside every CPU fp32 staged case and the
// staged / plain ratio (never asserted to favour either: no wall-clock claims here).
#include "core/backend.h"
#include "kernels/tile_config.h"
#include "tests/test_util.h"
#include "engine/registry.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace attnlab {
namespace {

using nlohmann::json;

test::BinaryRun bench(std::vector<std::string> args, const std::string& env = "LANG=C.UTF-8") {
  args.insert(args.begin(), "bench");
  return test::run_attnlab(args, env);
}

using test::lines_of;

const std::vector<std::string> kSweep = {
    "--backend", "cpu,cuda", "--variant", "staged,fused", "--precision", "fp32,bf16",
    "--n", "64,96", "--d", "8,16", "--heads", "1,2", "--mask", "none,causal",
    "--repeat", "3", "--warmup", "1"};
constexpr int kCombinations = 2 * 2 * 2 * 2 * 2 * 2 * 2;

// CUDA alone without a device times nothing: refused as run's --backend cuda is, where beside the
// CPU its cases are listed as skipped (above). It had exited 0 with a table of skipped rows.
TEST(BenchCli, CudaAloneWithoutADeviceIsRefused) {
  std::string reason;
  if (cuda_available(&reason)) GTEST_SKIP() << "a CUDA device answers";
  for (const bool zh : {false, true}) {
    const test::BinaryRun r =
        bench({"--backend", "cuda", "--n", "64", "--repeat", "1"}, zh ? "LANG=zh_CN.UTF-8" : "LANG=C.UTF-8");
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_EQ(lines_of(r.err).size(), 1u) << r.err;
    EXPECT_EQ(r.err.rfind(zh ? "error: 没有可用的 CUDA 设备：" : "error: no CUDA device: ", 0), 0u) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

TEST(BenchCli, EveryCombinationIsTimedOrSkippedWithItsReason) {
  std::vector<std::string> args = kSweep;
  args.insert(args.end(), {"--format", "json"});
  const test::BinaryRun r = bench(args);
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out);
  const json& cases = j["cases"];
  const json& skipped = j["skipped"];
  EXPECT_EQ(static_cast<int>(cases.size() + skipped.size()), kCombinations);
  EXPECT_EQ(j["repeat"], 3);
  EXPECT_EQ(j["warmup"], 1);
  EXPECT_TRUE(j.contains("kernel_configs"));
  EXPECT_TRUE(j.contains("cpu"));

  std::string reason;
  const bool cuda = cuda_available(&reason);
  int cpu_ran = 0;
  for (const json& c : cases) {
    SCOPED_TRACE(c.dump());
    EXPECT_EQ(c["status"], "ok");
    const bool bf16 = c["precision"] == "bf16";
    if (bf16 && c["backend"] == "cuda") EXPECT_EQ(c["variant"], "fused") << "CUDA bf16 is fused only";
    if (c["backend"] == "cpu") ++cpu_ran;
    const double n = c["n"], d = c["d"], heads = c["heads"];
    const double flops = 4 * heads * n * n * d / (c["mask"] == "causal" ? 2 : 1);
    EXPECT_DOUBLE_EQ(c["flops"].get<double>(), flops);
    const double med = c["median_ms"], lo = c["min_ms"], hi = c["max_ms"];
    EXPECT_GT(lo, 0);
    EXPECT_LE(lo, med);
    EXPECT_LE(med, hi);
    EXPECT_EQ(c["repeat"], 3);
    EXPECT_NEAR(c["tflops"].get<double>(), flops / (med * 1e-3) / 1e12, 1e-9 * flops);
    const double min_bytes = c["min_bytes"], moved = c["moved_bytes"];
    // Q, K, V read (fp32, or bf16 at 2 bytes), O written in fp32.
    EXPECT_DOUBLE_EQ(min_bytes, heads * n * d * ((bf16 ? 2.0 : 4.0) * 3 + 4.0));
    if (c["variant"] == "staged") {
      // The four kernels' own floors: QKᵀ 2Nd + 2N², scale/mask 2N², softmax 2N², P·V N² + 2Nd
      // floats per head (none and causal masks are computed, not read), bf16 or not.
      EXPECT_DOUBLE_EQ(moved, 4.0 * heads * (7 * n * n + 4 * n * d));
      ASSERT_TRUE(c.contains("stages"));
      std::set<std::string> names;
      for (const json& s : c["stages"]) {
        names.insert(s["stage"].get<std::string>());
        EXPECT_GT(s["bytes"].get<double>(), 0);
        EXPECT_GE(s["median_ms"].get<double>(), 0);
        // From the same repetitions as the chain: no stage takes longer than the slowest chain.
        EXPECT_LE(s["median_ms"].get<double>(), hi);
      }
      EXPECT_EQ(names, (std::set<std::string>{"qk", "scale_mask", "softmax", "pv"}));
    } else {
      EXPECT_DOUBLE_EQ(moved, min_bytes);
    }
    EXPECT_NEAR(c["gbs"].get<double>(), moved / (med * 1e-3) / 1e9, 1e-9 * moved);
    EXPECT_GT(c["peak_bytes"].get<double>(), 0);
    ASSERT_TRUE(c["rel_err"].is_number());
    EXPECT_LT(c["rel_err"].get<double>(), bf16 ? 2e-2 : 1e-5);  // bf16-sized against fp32-sized
    EXPECT_EQ(c["reference"], "fp64 full");
  }
  EXPECT_EQ(cpu_ran, 2 * 2 * 2 * 2 * 2 * 2)
      << "every CPU combination runs, fp32 and bf16 (variant, precision, mask, heads, d, n)";
  for (const json& s : skipped) {
    SCOPED_TRACE(s.dump());
    EXPECT_EQ(s["status"], "skipped");
    const std::string why = s["reason"];
    EXPECT_EQ(s["backend"], "cuda") << "the CPU runs every case here, bf16 included";
    if (s["precision"] == "bf16") {
      const int d = s["d"];
      if (s["variant"] != "fused")
        EXPECT_EQ(why, "bf16 on cuda runs only on the fused and decode kernels");
      else  // the kernel's own rule (d here is 8 or 16), before the device is asked
        EXPECT_EQ(why, cuda::fused_bf16_shape_error(d, d));
    } else {
      EXPECT_FALSE(cuda) << "a CUDA fp32 case was skipped although a device answers: " << why;
      EXPECT_EQ(why, "no CUDA device: " + reason);
    }
  }
}

TEST(BenchCli, OneProgressLinePerCaseOnStderr) {
  std::vector<std::string> args = kSweep;
  args.insert(args.end(), {"--format", "csv"});
  const test::BinaryRun r = bench(args);
  ASSERT_EQ(r.code, 0) << r.err;
  int progress = 0;
  // Appended, not "/" + to_string(...): GCC 12 warns (-Wstringop-overflow) on that operator+ here.
  std::string of_all = "/";
  of_all += std::to_string(kCombinations);
  of_all += "] ";
  for (const std::string& l : lines_of(r.err)) {
    if (l.rfind("[", 0) != 0) continue;
    ++progress;
    EXPECT_NE(l.find(of_all), std::string::npos) << l;
    EXPECT_TRUE(l.find(" ms median of 3, ") != std::string::npos || l.find(": skipped (") != std::string::npos)
        << l;
  }
  EXPECT_EQ(progress, kCombinations);
  // CSV: a header, then one row per combination.
  const auto rows = lines_of(r.out);
  ASSERT_EQ(static_cast<int>(rows.size()), kCombinations + 1);
  EXPECT_EQ(rows[0].rfind("backend,variant,precision,mask,heads,n,d,status,median_ms", 0), 0u);
}

TEST(BenchCli, TableListsTimedCasesStagesAndSkippedOnes) {
  const test::BinaryRun r = bench({"--backend", "cpu,cuda", "--variant", "staged,fused",
                                   "--precision", "fp32,bf16", "--n", "48", "--d", "8", "--repeat",
                                   "2"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("median ms"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("stages of cpu staged fp32 none heads=1 n=48 d=8:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("stages of cpu staged bf16 none heads=1 n=48 d=8:"), std::string::npos) << r.out;
  // CUDA bf16 is fused only, refused before any device is asked: skipped on every machine; without
  // a device the other CUDA cases are skipped with the registry's reason.
  const std::size_t skipped = r.out.find("\nskipped:\n");
  ASSERT_NE(skipped, std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n  cuda staged bf16 none heads=1 n=48 d=8: bf16 on cuda runs only on the "
                       "fused and decode kernels\n", skipped),
            std::string::npos)
      << r.out;
  std::string reason;
  if (!cuda_available(&reason))
    EXPECT_NE(r.out.find("\n  cuda fused fp32 none heads=1 n=48 d=8: no CUDA device: " + reason + "\n",
                         skipped),
              std::string::npos)
        << r.out;
  EXPECT_EQ(r.out.find("\n  cpu ", skipped), std::string::npos) << "every CPU case runs: " << r.out;
  EXPECT_EQ(r.out.find("nan"), std::string::npos) << r.out;
}

// Above 2^22 head·N² entries the reference is 64 evenly spread rows of head 0, recomputed in
// double; the output says so.
TEST(BenchCli, LargeCasesAreCheckedOnSampledRows) {
  const test::BinaryRun r = bench({"--backend", "cpu", "--variant", "fused", "--precision", "fp32",
                                   "--n", "2100", "--d", "8", "--repeat", "1", "--warmup", "0",
                                   "--mask", "none,causal", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const json cases = json::parse(r.out)["cases"];
  ASSERT_EQ(cases.size(), 2u);
  for (const json& c : cases) {  // the causal rows are built one by one, not from an N x N mask
    SCOPED_TRACE(c.dump());
    EXPECT_EQ(c["reference"], "fp64 64 rows of head 0");
    EXPECT_LT(c["rel_err"].get<double>(), 1e-5);
  }
}

TEST(BenchCli, CasesOverTheTimeBudgetAreSkippedWithTheEstimate) {
  const test::BinaryRun r = bench({"--backend", "cpu", "--variant", "staged", "--precision", "fp32",
                                   "--n", "4096", "--d", "64", "--max-seconds", "0.001",
                                   "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out);
  ASSERT_EQ(j["skipped"].size(), 1u);
  const std::string why = j["skipped"][0]["reason"];
  EXPECT_EQ(why.rfind("would take ~", 0), 0u) << why;
  EXPECT_NE(why.find("over --max-seconds 0.001"), std::string::npos) << why;
}

TEST(BenchCli, KernelConfigurationsInEffectAreRecorded) {
  const test::BinaryRun r = bench({"--backend", "cpu", "--variant", "fused", "--precision", "fp32",
                                   "--n", "16", "--d", "8", "--repeat", "1", "--format", "json"},
                                  "LANG=C.UTF-8 ATTNLAB_FUSED_CONFIG=2 ATTNLAB_BACKWARD_CONFIG=1 ATTNLAB_DECODE_CONFIG=1");
  ASSERT_EQ(r.code, 0) << r.err;
  const json k = json::parse(r.out)["kernel_configs"];
  EXPECT_EQ(k["ATTNLAB_FUSED_CONFIG"], "2");
  EXPECT_EQ(k["ATTNLAB_STAGED_CONFIG"], "default");
  EXPECT_EQ(k["ATTNLAB_BACKWARD_CONFIG"], "1");
  EXPECT_EQ(k["ATTNLAB_DECODE_CONFIG"], "1");
  EXPECT_EQ(k.size(), 4u) << k.dump();
  const test::BinaryRun t = bench({"--backend", "cpu", "--variant", "fused", "--precision", "fp32",
                                   "--n", "16", "--d", "8", "--repeat", "1"},
                                  "LANG=C.UTF-8 ATTNLAB_STAGED_CONFIG=1");
  EXPECT_NE(t.out.find("kernel configuration: ATTNLAB_STAGED_CONFIG=1\n"), std::string::npos) << t.out;
}

// --split LIST: each split count one decode case, run with that count (the kernel says so), named
// in the label, the JSON, the CSV and the table; the other variants keep one case each; without
// the decode variant it is refused.
TEST(BenchCli, DecodeSplitsAreCasesOfTheirOwn) {
  const std::vector<std::string> shape = {"--backend", "cpu", "--precision", "fp32", "--n", "3000", "--d", "8",
                                          "--heads", "2", "--kv-heads", "1", "--queries", "1", "--repeat", "1"};
  std::vector<std::string> args = shape;
  for (const char* a : {"--variant", "fused,decode", "--split", "3,7", "--format", "json"}) args.push_back(a);
  const test::BinaryRun r = bench(args);
  ASSERT_EQ(r.code, 0) << r.err;
  const json cases = json::parse(r.out)["cases"];
  ASSERT_EQ(cases.size(), 3u) << r.out;
  EXPECT_EQ(cases[0]["variant"], "fused");
  EXPECT_EQ(cases[0]["splits"], 0);
  EXPECT_FALSE(cases[0].contains("splits_chosen"));
  for (int k : {1, 2}) {
    const int splits = k == 1 ? 3 : 7;
    EXPECT_EQ(cases[k]["variant"], "decode");
    EXPECT_EQ(cases[k]["splits"], splits);
    EXPECT_EQ(cases[k]["status"], "ok");
    EXPECT_EQ(cases[k]["kernel"], "cpu split-KV decode splits=" + std::to_string(splits));
    EXPECT_EQ(cases[k]["splits_chosen"], "given");
  }
  EXPECT_NE(r.err.find("cpu decode fp32 none heads=2 n=3000 d=8 q=1 kv=1 splits=7: "), std::string::npos) << r.err;
  args = shape;
  for (const char* a : {"--variant", "decode", "--split", "5", "--format", "csv"}) args.push_back(a);
  const test::BinaryRun c = bench(args);
  ASSERT_EQ(c.code, 0) << c.err;
  const auto rows = lines_of(c.out);
  ASSERT_EQ(rows.size(), 2u) << c.out;
  EXPECT_NE(rows[0].find(",pass,splits,reason"), std::string::npos) << rows[0];
  EXPECT_NE(rows[1].find(",forward,5,"), std::string::npos) << rows[1];
  args = shape;
  for (const char* a : {"--variant", "decode", "--split", "5"}) args.push_back(a);
  const test::BinaryRun t = bench(args);
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_NE(t.out.find("q=1 kv=1 splits=5]"), std::string::npos) << t.out;
  args = shape;
  for (const char* a : {"--variant", "fused", "--split", "5"}) args.push_back(a);
  const test::BinaryRun bad = bench(args);
  EXPECT_EQ(bad.code, 2);
  EXPECT_EQ(bad.err, "error: --split goes with --variant decode (the split-KV kernel), got --variant fused\n");
  // Without --split the kernel chooses, and the JSON gives the count that ran (it had said 0).
  args = shape;
  for (const char* a : {"--variant", "decode", "--format", "json"}) args.push_back(a);
  const test::BinaryRun chosen = bench(args);
  ASSERT_EQ(chosen.code, 0) << chosen.err;
  const json only = json::parse(chosen.out)["cases"][0];
  EXPECT_GT(only["splits"].get<int>(), 0) << only.dump();
  EXPECT_EQ(only["kernel"], "cpu split-KV decode splits=" + std::to_string(only["splits"].get<int>()));
  EXPECT_EQ(only["splits_chosen"], "kernel");
}

// --format text, the word every other command takes for its people's format, is bench's table
// (it had been refused).
TEST(BenchCli, FormatTextIsTheTable) {
  const std::vector<std::string> args = {"--backend", "cpu", "--variant", "fused", "--precision", "fp32",
                                         "--n", "16", "--d", "8", "--repeat", "1", "--format"};
  std::vector<std::string> text = args;
  text.push_back("text");
  const test::BinaryRun r = bench(text);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("attnlab bench  ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("cpu   fused  fp32 none"), std::string::npos) << r.out;
  std::vector<std::string> bad = args;
  bad.push_back("markdown");
  EXPECT_EQ(bench(bad).err, "error: --format takes table (or text), json or csv, got 'markdown'\n");
}

TEST(BenchCli, OutputFileGetsTheReport) {
  const test::TempDir dir("attnlab-bench");
  const std::string path = dir.file("report.csv");
  const test::BinaryRun r = bench({"--backend", "cpu", "--variant", "fused", "--precision", "fp32",
                                   "--n", "16", "--d", "8", "--repeat", "1", "--format", "csv",
                                   "--output", path});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  const std::string text = test::read_file(path);
  EXPECT_EQ(lines_of(text).size(), 2u) << text;
}

// The number after `key` in `text` (e.g. "single-thread copy " -> 12.3), or -1 when absent.
double number_after(const std::string& text, const std::string& key) {
  const std::size_t at = text.find(key);
  if (at == std::string::npos) return -1;
  return std::strtod(text.c_str() + at + key.size(), nullptr);
}

TEST(BenchCli, HostCopyRateIsInTheHeaderAndJsonOfACpuRun) {
  const std::vector<std::string> args = {"--backend", "cpu", "--variant", "fused", "--precision",
                                         "fp32", "--n", "32", "--d", "8", "--repeat", "1"};
  const test::BinaryRun t = bench(args);
  ASSERT_EQ(t.code, 0) << t.err;
  const auto ls = lines_of(t.out);
  ASSERT_GE(ls.size(), 2u) << t.out;
  EXPECT_EQ(ls[1].rfind("cpu: ", 0), 0u) << ls[1];
  EXPECT_NE(ls[1].find(" GB/s (read + written, 256 MiB memcpy)"), std::string::npos) << ls[1];
  EXPECT_GT(number_after(ls[1], ", single-thread copy "), 0) << ls[1];

  std::vector<std::string> jargs = args;
  jargs.insert(jargs.end(), {"--format", "json"});
  const test::BinaryRun r = bench(jargs);
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out);
  ASSERT_TRUE(j["host_copy_gbs"].is_number()) << j.dump();
  EXPECT_GT(j["host_copy_gbs"].get<double>(), 0);
  const std::string rule = j["host_copy_rule"];
  EXPECT_NE(rule.find("single-thread"), std::string::npos) << rule;
  EXPECT_NE(rule.find("bytes read + bytes written"), std::string::npos) << rule;
  EXPECT_EQ(j["baseline"], false);

  // No CPU case to run (the CPU's over the time budget; CUDA's skipped without a device, run on a
  // GPU): no probe, the key is null on either kind of machine.
  const test::BinaryRun n = bench({"--backend", "cpu,cuda", "--variant", "fused", "--precision", "fp32", "--n", "32",
                                   "--d", "8", "--repeat", "1", "--max-seconds", "1e-9", "--format", "json"});
  ASSERT_EQ(n.code, 0) << n.err;
  EXPECT_TRUE(json::parse(n.out)["host_copy_gbs"].is_null()) << n.out;
}

TEST(BenchCli, BaselineAddsAPlainRowPerCpuStagedCase) {
  const std::vector<std::string> args = {
      "--backend", "cpu,cuda", "--variant", "staged,fused", "--precision", "fp32,bf16",
      "--n", "48,64", "--d", "8", "--mask", "none,causal", "--repeat", "2", "--warmup", "1"};
  std::vector<std::string> with = args;
  with.insert(with.end(), {"--baseline", "--format", "json"});
  const test::BinaryRun r = bench(with);
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["baseline"], true);
  EXPECT_TRUE(j["baseline_rule"].is_string());
  std::set<std::string> staged_shapes, plain_shapes;
  const auto shape = [](const json& c) {
    return c["mask"].get<std::string>() + " " + c["n"].dump() + " " + c["d"].dump() + " " +
           c["heads"].dump();
  };
  for (const json& c : j["cases"]) {
    SCOPED_TRACE(c.dump());
    if (c["variant"] == "plain") {
      EXPECT_EQ(c["backend"], "cpu");
      EXPECT_EQ(c["precision"], "fp32");
      plain_shapes.insert(shape(c));
      EXPECT_EQ(c["repeat"], 2);
      EXPECT_LE(c["min_ms"].get<double>(), c["median_ms"].get<double>());
      ASSERT_TRUE(c["rel_err"].is_number());
      EXPECT_LT(c["rel_err"].get<double>(), 1e-5);
      EXPECT_EQ(c["reference"], "fp64 full");
      const double n = c["n"], d = c["d"];
      EXPECT_DOUBLE_EQ(c["moved_bytes"].get<double>(), 4.0 * (7 * n * n + 4 * n * d));  // staged rule
      EXPECT_EQ(c["stages"].size(), 4u);
      EXPECT_FALSE(c.contains("staged_over_plain"));
    } else if (c["backend"] == "cpu" && c["variant"] == "staged" && c["precision"] == "fp32") {
      staged_shapes.insert(shape(c));
      ASSERT_TRUE(c["staged_over_plain"].is_number());
      EXPECT_GT(c["staged_over_plain"].get<double>(), 0);
    } else {
      // Fused, CUDA and CPU bf16 staged cases ignore the flag (the baseline is fp32).
      EXPECT_FALSE(c.contains("staged_over_plain"));
    }
  }
  EXPECT_EQ(staged_shapes.size(), 4u);
  EXPECT_EQ(plain_shapes, staged_shapes) << "one plain row per CPU fp32 staged case";
  for (const json& s : j["skipped"]) EXPECT_NE(s["variant"], "plain") << s.dump();

  // Without the flag: no plain row, no ratio.
  std::vector<std::string> without = args;
  without.insert(without.end(), {"--format", "json"});
  const test::BinaryRun w = bench(without);
  ASSERT_EQ(w.code, 0) << w.err;
  const json k = json::parse(w.out);
  EXPECT_EQ(k["baseline"], false);
  for (const json& c : k["cases"]) {
    EXPECT_NE(c["variant"], "plain") << c.dump();
    EXPECT_FALSE(c.contains("staged_over_plain")) << c.dump();
  }

  // No CPU fp32 staged forward case (fused only, the backward pass only): the flag would time
  // nothing, and is refused.
  for (const std::vector<std::string> none :
       {std::vector<std::string>{"--variant", "fused"}, {"--variant", "staged", "--pass", "backward"}}) {
    std::vector<std::string> a = {"--backend", "cpu", "--precision", "fp32", "--n", "48", "--d", "8",
                                  "--repeat", "1", "--baseline"};
    a.insert(a.end(), none.begin(), none.end());
    const test::BinaryRun f = bench(a);
    EXPECT_EQ(f.code, 2) << f.out;
    EXPECT_EQ(lines_of(f.err).size(), 1u) << f.err;
    EXPECT_NE(f.err.find("--baseline times the plain chain beside the CPU fp32 staged forward cases"), std::string::npos);
  }
  // Both passes: the forward staged case gets its ratio, the backward one none (the plain chain is
  // a forward).
  const test::BinaryRun b = bench({"--backend", "cpu", "--variant", "staged", "--precision", "fp32", "--n", "48",
                                   "--d", "8", "--repeat", "1", "--warmup", "0", "--baseline", "--pass", "both",
                                   "--format", "json"});
  ASSERT_EQ(b.code, 0) << b.err;
  int ratios = 0;
  const json both = json::parse(b.out);
  for (const json& c : both["cases"]) {
    EXPECT_EQ(c.contains("staged_over_plain"), c["variant"] == "staged" && c["pass"] == "forward") << c.dump();
    ratios += c.contains("staged_over_plain");
  }
  EXPECT_EQ(ratios, 1);
}

TEST(BenchCli, BaselineTableShowsTheRatioAndCsvKeepsItsColumns) {
  const std::vector<std::string> args = {"--backend", "cpu", "--variant", "staged,fused",
                                         "--precision", "fp32", "--n", "64", "--d", "8",
                                         "--repeat", "1", "--baseline"};
  const test::BinaryRun t = bench(args);
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_NE(t.out.find("\ncpu   plain  fp32 none       1     64    8 "), std::string::npos) << t.out;
  const std::string key = "  cpu staged fp32 none heads=1 n=64 d=8: staged / plain ";
  EXPECT_GT(number_after(t.out, key), 0) << t.out;
  EXPECT_NE(t.out.find("× ("), std::string::npos) << t.out;
  EXPECT_EQ(t.out.find("nan"), std::string::npos) << t.out;
  const test::BinaryRun plain_less = bench({"--backend", "cpu", "--variant", "staged",
                                            "--precision", "fp32", "--n", "64", "--d", "8",
                                            "--repeat", "1"});
  ASSERT_EQ(plain_less.code, 0) << plain_less.err;
  EXPECT_EQ(plain_less.out.find("staged / plain"), std::string::npos) << plain_less.out;

  std::vector<std::string> csv = args;
  csv.insert(csv.end(), {"--format", "csv"});
  const test::BinaryRun c = bench(csv);
  ASSERT_EQ(c.code, 0) << c.err;
  const auto rows = lines_of(c.out);
  ASSERT_EQ(rows.size(), 4u) << c.out;  // header, staged, plain, fused
  EXPECT_EQ(rows[0],
            "backend,variant,precision,mask,heads,n,d,status,median_ms,min_ms,max_ms,tflops,gbs,"
            "min_bytes,moved_bytes,peak_bytes,rel_err,reference,queries,kv_heads,kv_bytes,kv_gbs,score_mod,mask_mod,rope,pass,splits,reason");
  EXPECT_EQ(rows[1].rfind("cpu,staged,fp32,", 0), 0u) << rows[1];
  EXPECT_EQ(rows[2].rfind("cpu,plain,fp32,none,1,64,8,ok,", 0), 0u) << rows[2];
  EXPECT_EQ(rows[3].rfind("cpu,fused,fp32,", 0), 0u) << rows[3];
}

TEST(BenchCli, BadOptionsAreOneErrorLine) {
  const std::vector<std::vector<std::string>> bad = {
      {"--n", "0"},           {"--n", "abc"},        {"--d", "-4"},          {"--heads", "0"},
      {"--repeat", "0"},      {"--warmup", "-1"},    {"--backend", "gpu"},   {"--variant", "flash"},
      {"--variant", "plain"},
      {"--precision", "fp64"}, {"--mask", "diag"},   {"--format", "xml"},    {"--max-seconds", "0"},
      // list items: empty, repeated, not a whole number; an --output that cannot be written
      {"--n", "64,,128"},     {"--n", ",64"},        {"--d", "8,"},          {"--n", "64,64"},
      {"--backend", "cpu,,cuda"}, {"--mask", "none,none"}, {"--n", "1e3"},   {"--heads", ""},
      {"--split", "0"},       {"--split", "2,2"},
      {"--output", "/nonexistent-attnlab-dir/report.csv"}};
  for (const auto& args : bad) {
    const test::BinaryRun r = bench(args);
    const std::string joined = args[0] + " " + args[1];
    EXPECT_EQ(r.code, 2) << joined << "\n" << r.err;
    EXPECT_TRUE(r.out.empty()) << joined << "\n" << r.out;
    const auto ls = lines_of(r.err);
    ASSERT_EQ(ls.size(), 1u) << joined << "\n" << r.err;
    EXPECT_EQ(ls[0].rfind("error: ", 0), 0u) << ls[0];
  }
}

TEST(BenchCli, InterleaveTimesTheCasesInTurnAndGivesTheRoundByRoundRatio) {
  const test::BinaryRun r = bench({"--backend", "cpu", "--variant", "fused", "--precision", "fp32", "--n", "64", "--d", "8",
                                   "--score-mod", "none,softcap:5", "--repeat", "4", "--warmup", "1", "--interleave"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("repeat 4 (interleaved: every case once per round)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("interleaved: each case's time over cpu fused fp32 none heads=1 n=64 d=8's in the same round"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("    cpu fused fp32 none heads=1 n=64 d=8 score=softcap:5: "), std::string::npos) << r.out;
  int progress = 0;
  for (const std::string& l : lines_of(r.err))
    if (l.find(" ms median of 4 interleaved, ") != std::string::npos) ++progress;
  EXPECT_EQ(progress, 2) << r.err;
  // Progress while it runs: each case once warmed up, then each round.
  EXPECT_NE(r.err.find("[cpu fused fp32 none heads=1 n=64 d=8 score=softcap:5] warmed up\n"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("interleaved round 4/4 done\n"), std::string::npos) << r.err;
  const test::BinaryRun help = test::run_attnlab({"bench", "--help"});
  EXPECT_NE(help.out.find("--interleave"), std::string::npos);
}

}  // namespace
}  // namespace attnlab
