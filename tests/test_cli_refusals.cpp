// The command line's refusals and messages, through the real binary: overflows named by their
// cause (the scores, the logits at this temperature, the output) and the run's precision in every
// CPU variant, in English and Chinese; CLI11's syntax errors in the lab's words; options that
// would be ignored refused; a split count above the keys refused by run as by walk; a --query label
// that names several rows; bf16 verify at a low temperature; walk's CUDA note in Chinese.
#include "core/messages.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace attnlab {
namespace {

using test::contains;

// Expects exit 2, nothing on stdout and one stderr line: "error: " + `line` exactly.
void expect_line(const std::vector<std::string>& args, const std::string& line, const std::string& env = "LANG=C.UTF-8") {
  const test::BinaryRun r = test::run_attnlab(args, env);
  std::string joined;
  for (const std::string& a : args) joined += a + " ";
  EXPECT_EQ(r.code, 2) << joined << r.err;
  EXPECT_TRUE(r.out.empty()) << joined << r.out;
  EXPECT_EQ(r.err, "error: " + line + "\n") << joined;
}

class CliRefusals : public ::testing::Test {
 protected:
  std::string file(const std::string& name, const std::string& bytes) { return test::write_file(dir_.file(name), bytes); }
  test::TempDir dir_{"attnlab-refusals"};
};

// A temperature so small that the logits overflow (the scores are about 1): every variant names
// the logits at this temperature, as the staged chain does, and the run's precision.
TEST_F(CliRefusals, OverflowsNameTheirCauseAndPrecision) {
  const std::string logits = "the logits (scaled scores / temperature) overflow in head 0, query row 0 (inputs too "
                             "large for ";
  for (const char* variant : {"fused", "decode"}) {
    expect_line({"run", "--random", "8", "--temperature", "1e-44", "--variant", variant, "--backend", "cpu"},
                logits + "fp32 at this temperature)");
    expect_line({"run", "--random", "8", "--temperature", "1e-44", "--variant", variant, "--precision", "bf16",
                 "--backend", "cpu"},
                logits + "bf16 at this temperature)");
  }
  expect_line({"run", "--random", "8", "--temperature", "1e-44", "--precision", "bf16", "--backend", "cpu"},
              logits + "bf16 at this temperature)");
  const std::string q = file("q.csv", "1 0\n0 1\n");
  expect_line({"walk", "--q", q, "--k", q, "--v", q, "--temperature", "1e-44", "--backend", "cpu"},
              logits + "fp32 at this temperature)");
  expect_line({"run", "--random", "8", "--temperature", "1e-44", "--variant", "fused", "--backend", "cpu", "--lang", "zh"},
              "logits（缩放分数 / 温度）在头 0、查询行 0 溢出（输入对 fp32 在当前温度下过大）");
  // Finite scores whose largest logit does not fit fp32: the online kernels subtract the row's max
  // before scaling, so they could weigh it, but the staged chain cannot form it; refused alike.
  const std::string wide = file("wide.csv", "1e19 1e19\n1e19 1e19\n");
  for (const char* variant : {"fused", "decode"})
    expect_line({"run", "--q", wide, "--k", wide, "--v", q, "--temperature", "0.1", "--variant", variant, "--backend", "cpu"},
                logits + "fp32 at this temperature)");
  expect_line({"walk", "--q", wide, "--k", wide, "--v", q, "--temperature", "0.1", "--backend", "cpu"},
              logits + "fp32 at this temperature)");
  EXPECT_EQ(test::run_attnlab({"run", "--q", wide, "--k", wide, "--v", q, "--temperature", "0.1", "--backend", "cpu"}).code, 2);
  // Scores that overflow: Q Kᵀ is named, whatever the temperature.
  const std::string big = file("big.csv", "3e38 3e38\n3e38 3e38\n");
  for (const char* variant : {"fused", "decode"})
    expect_line({"run", "--q", big, "--k", big, "--v", q, "--variant", variant, "--backend", "cpu"},
                "QKᵀ overflows in head 0, query row 0 (inputs too large for fp32)");
  expect_line({"run", "--q", big, "--k", big, "--v", q, "--variant", "fused", "--precision", "bf16", "--backend", "cpu"},
              "QKᵀ overflows in head 0, query row 0 (inputs too large for bf16)");
  // Q = K = 0: the logits are 0; a V of ±3e38 is computed in bf16, not called a logit overflow.
  const std::string zero = file("zero.csv", "0 0\n0 0\n"), pm = file("pm.csv", "3e38 -3e38\n3e38 -3e38\n");
  for (const char* variant : {"staged", "fused", "decode"}) {
    const test::BinaryRun r = test::run_attnlab(
        {"run", "--q", zero, "--k", zero, "--v", pm, "--precision", "bf16", "--variant", variant, "--backend", "cpu"});
    EXPECT_EQ(r.code, 0) << variant << ": " << r.err;
  }
}

// CLI11's own wording replaced: an option given twice, an option without its value, an unknown
// option named first (CLI11 listed the words in reverse), a stray word; one line, exit 2, the help.
TEST_F(CliRefusals, OptionSyntaxInTheLabsWords) {
  expect_line({"demo", "--temperature", "1", "--temperature", "2"}, "--temperature is given twice (see attnlab demo --help)");
  expect_line({"backward", "--check", "--check"}, "--check is given twice (see attnlab backward --help)");
  expect_line({"backward", "--check=no"}, "--check is a flag and takes no value, got '--check=no' (see attnlab backward --help)");
  expect_line({"bench", "--baseline", "--n", "8", "--baseline", "--baseline"},
              "--baseline is given 3 times (see attnlab bench --help)");
  EXPECT_EQ(test::run_attnlab({"backward", "--check", "--check", "--help"}).code, 0);  // the help still wins
  expect_line({"run", "--random", "4", "--seed", "1", "--seed", "2", "--seed", "3"},
              "--seed is given 3 times (see attnlab run --help)");
  expect_line({"demo", "--query"}, "--query needs a value (see attnlab demo --help)");
  expect_line({"demo", "--temperature="}, "--temperature needs a value (see attnlab demo --help)");
  // Followed by another option, or by a word after its '=': still no value (CLI11 took the next
  // argument: `--output --check` wrote a file named "--check" and ran no check).
  expect_line({"backward", "--random", "4", "--output", "--check"}, "--output needs a value (see attnlab backward --help)");
  expect_line({"walk", "--output", "--backward"}, "--output needs a value (see attnlab walk --help)");
  expect_line({"run", "--random", "4", "--query=", "2"}, "--query needs a value (see attnlab run --help)");
  expect_line({"run", "--random", "4", "--temperature", "--dk", "2"},
              "--temperature needs a value (see attnlab run --help)");
  // A word that is no subcommand names them all, the last after "or"; a value read as the
  // subcommand says where options go.
  expect_line({"bogus"}, "unknown subcommand 'bogus'; choose demo, run, describe, verify, bench, walk or backward "
                         "(see attnlab --help)");
  expect_line({"--lang", "zh", "demo"}, "unknown subcommand 'zh'; choose demo, run, describe, verify, bench, walk or "
                                        "backward (options go after it: attnlab demo --lang zh; see attnlab --help)");
  expect_line({"demo", "--temp", "0.5"}, "unknown option --temp (see attnlab demo --help)");
  expect_line({"demo", "--tokens", "a,b"}, "unknown option --tokens (see attnlab demo --help)");
  expect_line({"demo", "--temp=0.5"}, "unknown option --temp (see attnlab demo --help)");
  expect_line({"run", "--random", "4", "stray"}, "unexpected argument 'stray' (see attnlab run --help)");
  // The lab's validators read as the conversions do (no "--seed:"), an empty value needs one.
  expect_line({"run", "--random", "4", "--seed", "x"},
              "--seed must be a whole number from 0 to 18446744073709551615, got 'x' (see attnlab run --help)");
  expect_line({"run", "--random", "0x10"}, "--random must be a decimal whole number, got '0x10' (see attnlab run --help)");
  expect_line({"run", "--random", " "}, "--random needs a value (see attnlab run --help)");
  // A negative number is a value (one dash), refused for what it is.
  expect_line({"run", "--random", "4", "--temperature", "-1"},
              "temperature must be a finite number > 0, got -1");
  // `--rope=` is not `--rope` (θ 10000) without a word.
  expect_line({"run", "--random", "4", "--rope="},
              "--rope needs a value after '=' (or none, without the '='; see attnlab run --help)");
}

// Spaces around a whole number are dropped for every whole-number option alike.
TEST_F(CliRefusals, WholeNumbersTakeSpacesAlike) {
  const test::BinaryRun plain = test::run_attnlab({"run", "--random", "6", "--dk", "4", "--seed", "4", "--format", "json"});
  ASSERT_EQ(plain.code, 0) << plain.err;
  const test::BinaryRun spaced =
      test::run_attnlab({"run", "--random", " 6", "--dk", "4 ", "--seed", " 4 ", "--format", "json"});
  ASSERT_EQ(spaced.code, 0) << spaced.err;
  nlohmann::json a = nlohmann::json::parse(plain.out), b = nlohmann::json::parse(spaced.out);
  a.erase("timings_ms");
  b.erase("timings_ms");
  EXPECT_EQ(a, b);
}

// Options another kind of input would ignore are refused; a split count above the keys is refused
// by run's decode as by walk, never clamped.
TEST_F(CliRefusals, OptionsThatWouldBeIgnoredAreRefused) {
  const std::string q = file("q.csv", "1 0\n0 1\n");
  const std::vector<std::string> files = {"run", "--q", q, "--k", q, "--v", q};
  const auto with = [&](std::vector<std::string> a, const std::vector<std::string>& extra) {
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  const std::string from_files = "applies to --random problems only (the files give the shapes and values)";
  expect_line(with(files, {"--dk", "4"}), "--dk " + from_files);
  expect_line(with(files, {"--dv", "4"}), "--dv " + from_files);
  expect_line(with(files, {"--seed", "3"}), "--seed " + from_files);
  expect_line(with(files, {"--dk", "64"}), "--dk " + from_files);  // the default typed is still typed
  expect_line({"walk", "--seed", "3"}, "--seed applies to --random problems only (the demo has its own values)");
  // The demo is one head: --heads beside it is refused, not ignored (walk, describe, verify, backward).
  for (const char* cmd : {"walk", "describe", "verify", "backward"})
    expect_line({cmd, "--heads", "2"}, "--heads applies to --random problems only (the demo has its own values)");
  expect_line({"run", "--random", "8", "--layer", "0"}, "--layer applies to --bundle only");
  expect_line(with(files, {"--layer", "0"}), "--layer applies to --bundle only");
  expect_line({"run", "--random", "8", "--variant", "decode", "--split", "100000000", "--backend", "cpu"},
              "--split must be between 1 and the number of keys (8), got 100000000");
  expect_line({"walk", "--random", "5", "--split", "6"}, "--split must be between 1 and the number of keys (5), got 6");
  EXPECT_EQ(test::run_attnlab({"run", "--random", "8", "--variant", "decode", "--split", "8", "--backend", "cpu"}).code, 0);
  EXPECT_EQ(test::run_attnlab({"run", "--random", "8", "--dk", "4", "--seed", "3"}).code, 0);
}

// --query: a label first, then an index; a label that names several rows picks none of them.
TEST_F(CliRefusals, QueryLabelsComeFirstAndMustBeUnique) {
  const test::BinaryRun r = test::run_attnlab({"run", "--random", "4", "--tokens", "3,2,1,0", "--query", "1", "--lang", "en"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "query 1 (row 2)")) << r.out;
  expect_line({"run", "--random", "4", "--tokens", "a,a,a,a", "--query", "a"}, "label 'a' names 4 rows; give the index");
  const test::BinaryRun index = test::run_attnlab({"run", "--random", "4", "--tokens", "a,a,a,a", "--query", "3", "--lang", "en"});
  ASSERT_EQ(index.code, 0) << index.err;
  EXPECT_TRUE(contains(index.out, "query a (row 3)")) << index.out;
}

// bf16 at T = 0.05: every CPU variant passes verify at bf16's derived allowance.
TEST_F(CliRefusals, Bf16VerifyAtALowTemperaturePasses) {
  for (const char* variant : {"staged", "fused", "decode"}) {
    const test::BinaryRun r = test::run_attnlab({"verify", "--random", "33", "--dk", "64", "--dv", "64", "--temperature",
                                                 "0.05", "--precision", "bf16", "--variant", variant, "--backend", "cpu"});
    EXPECT_EQ(r.code, 0) << variant << "\n" << r.out << r.err;
  }
}

// walk in Chinese: the known reasons for no CUDA device are translated too.
TEST_F(CliRefusals, WalksCudaNoteFollowsTheLanguage) {
  const test::BinaryRun zh = test::run_attnlab({"walk", "--lang", "zh"}, "LANG=C ATTNLAB_CUDA_FAULT=nodevice");
  ASSERT_EQ(zh.code, 0) << zh.err;
  const test::BinaryRun en = test::run_attnlab({"walk", "--lang", "en"}, "LANG=C ATTNLAB_CUDA_FAULT=nodevice");
  ASSERT_EQ(en.code, 0) << en.err;
  if (contains(en.out, "attnlab was built without CUDA")) {
    EXPECT_TRUE(contains(zh.out, "CUDA 融合内核：没有可用的 CUDA 设备：attnlab 构建时未启用 CUDA")) << zh.out;
    EXPECT_FALSE(contains(zh.out, "built without")) << zh.out;
  } else {
    GTEST_SKIP() << "built with CUDA: the no-device reason comes from the driver";
  }
}

// Found by a newcomer's tryout (session 48): refusals that had stayed English under --lang zh,
// values read in forms the other options refuse, and values the fp32 kernels cannot take.
TEST_F(CliRefusals, ValuesAndTheirLanguageAfterATryout) {
  const std::string zh = "LANG=zh_CN.UTF-8";
  expect_line({"run", "--random", "4", "--backend", "gpu"}, "未知的后端“gpu”（可用 auto、cpu 或 cuda）", zh);
  expect_line({"walk", "--tile", "0"}, "--tile 必须是每块的键数，不小于 1 的整数，当前为“0”", zh);
  expect_line({"walk", "--head", "-1"}, "--head 必须是不小于 0 的整数，当前为“-1”", zh);
  expect_line({"run", "--random", "0x10"}, "--random 必须是十进制整数，当前为“0x10”（见 attnlab run --help）", zh);
  expect_line({"run", "--random", "4", "--seed", "-1"},
              "--seed 必须是 0 到 18446744073709551615 之间的整数，当前为“-1”（见 attnlab run --help）", zh);
  expect_line({"run", "--random", "1e3"}, "--random 必须是整数，当前为“1e3”（见 attnlab run --help）", zh);
  // The tolerances and bench's time limit in plain decimal notation, as the temperature.
  expect_line({"verify", "--atol", "0x10"}, "--atol must be a finite number >= 0, got 0x10");
  expect_line({"verify", "--rtol", "1e400"}, "--rtol must be a finite number >= 0, got 1e400");
  expect_line({"bench", "--backend", "cpu", "--max-seconds", "inf"},
              "--max-seconds must be a finite decimal number > 0, got 'inf'");
  // A temperature above fp32's largest number (the kernels divide by it as a float), and ALiBi
  // slopes whose bias overflows fp32.
  expect_line({"run", "--random", "4", "--temperature", "1e39"},
              "temperature 1e+39 is above fp32's largest number (3.4e38), in which the kernels divide by it");
  expect_line({"run", "--random", "8", "--dk", "4", "--dv", "4", "--score-mod", "alibi:1e38"},
              "ALiBi slope 1e+38 times the largest distance 7 does not fit fp32 (the bias -slope·|i - j| would overflow)");
  // A fully masked row is named by its token.
  const std::string qc = file("qc.csv", "1 2\n3 4\n"), mask = file("m.csv", "0 0\n-inf -inf\n");
  expect_line({"run", "--q", qc, "--k", qc, "--v", qc, "--mask", mask, "--tokens", "x,y"},
              "row 1 (y) is fully masked: every key is -inf, so its softmax is undefined");
  // verify says which tolerances it used when they are given.
  const test::BinaryRun given = test::run_attnlab({"verify", "--atol", "1", "--rtol", "0.5"});
  EXPECT_EQ(given.code, 0) << given.err;
  EXPECT_TRUE(contains(given.out, "tolerances: as given, atol = 1, rtol = 0.5 for every compared stage")) << given.out;
  const test::BinaryRun one = test::run_attnlab({"verify", "--atol", "1"});
  EXPECT_TRUE(contains(one.out, "the given atol = 1 replaces every stage's atol above")) << one.out;
  // A truncated .npy header is called truncated, not "not a .npy file".
  const std::string npy = file("t.npy", std::string("\x93NUMPY", 6));
  expect_line({"run", "--q", npy, "--k", npy, "--v", npy}, npy + ": .npy header is truncated");
}

// The walks name the problem's source as run does: a synthetic pattern.
TEST_F(CliRefusals, WalksNameTheirSource) {
  for (const char* backward : {"", "--backward"}) {
    std::vector<std::string> args = {"walk", "--random", "32", "--pattern", "sink", "--lang", "en"};
    if (*backward) args.push_back(backward);
    const test::BinaryRun text = test::run_attnlab(args);
    ASSERT_EQ(text.code, 0) << text.err;
    EXPECT_EQ(text.out.rfind("source: synthetic pattern 'sink'", 0), 0u) << text.out.substr(0, 200);
    args.insert(args.end(), {"--format", "json"});
    const test::BinaryRun json = test::run_attnlab(args);
    ASSERT_EQ(json.code, 0) << json.err;
    EXPECT_TRUE(contains(nlohmann::json::parse(json.out)["source"].get<std::string>(), "synthetic pattern 'sink'"));
  }
  const test::BinaryRun zh = test::run_attnlab({"walk", "--random", "32", "--pattern", "sink", "--lang", "zh"});
  EXPECT_EQ(zh.out.rfind("来源：", 0), 0u) << zh.out.substr(0, 200);
  const test::BinaryRun demo = test::run_attnlab({"walk", "--lang", "en"});
  EXPECT_FALSE(contains(demo.out, "source:")) << "the demo names no source";
}

TEST(CudaReason, TheLabsOwnReasonsAreTranslatedTheDriversKept) {
  EXPECT_EQ(cuda_reason_text("attnlab was built without CUDA", Lang::Zh), "attnlab 构建时未启用 CUDA");
  EXPECT_EQ(cuda_reason_text("cudaGetDeviceCount found no device", Lang::Zh), "cudaGetDeviceCount 没有找到设备");
  EXPECT_EQ(cuda_reason_text("attnlab was built without CUDA", Lang::En), "attnlab was built without CUDA");
  EXPECT_EQ(cuda_reason_text("no CUDA device", Lang::Zh), "没有可用的 CUDA 设备");
  EXPECT_EQ(cuda_reason_text("the CUDA backward is not in this build", Lang::Zh), "此构建不含 CUDA 反向传播");
  EXPECT_EQ(cuda_reason_text("no CUDA device: attnlab was built without CUDA", Lang::Zh),
            "没有可用的 CUDA 设备：attnlab 构建时未启用 CUDA");
  const std::string driver = "cudaGetDeviceCount: cudaErrorNoDevice (no CUDA-capable device is detected)";
  EXPECT_EQ(cuda_reason_text(driver, Lang::Zh), driver);
  EXPECT_EQ(cuda_reason_text("no CUDA device: " + driver, Lang::Zh), "没有可用的 CUDA 设备：" + driver);
}

}  // namespace
}  // namespace attnlab
