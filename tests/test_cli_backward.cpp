// `attnlab backward` through the real binary: the text in both languages, the JSON's gradients equal
// to the in-process backward on the same problem, --dout and --loss files, --check's PASS and its
// JSON, CSV's one-value rows, and every refusal with one "error:" line and exit code 2.
#include "core/backward.h"
#include "core/inputs.h"
#include "core/io.h"
#include "cpu/backward.h"
#include "engine/registry.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace attnlab {
namespace {

using nlohmann::json;

test::BinaryRun attnlab(std::vector<std::string> args) { return test::run_attnlab(args, "LANG=C.UTF-8"); }

MatrixF matrix_of(const json& rows) {
  MatrixF m(static_cast<Eigen::Index>(rows.size()), static_cast<Eigen::Index>(rows.at(0).size()));
  for (Eigen::Index r = 0; r < m.rows(); ++r)
    for (Eigen::Index c = 0; c < m.cols(); ++c) m(r, c) = rows[r][c].get<float>();
  return m;
}

TEST(BackwardCli, DemoPrintsEveryGradientInBothLanguages) {
  const test::BinaryRun en = attnlab({"backward", "--lang", "en"});
  ASSERT_EQ(en.code, 0) << en.err;
  for (const char* s : {"Backward pass", "upstream gradient dO: standard normal (--dout-seed 0)",
                        "dO = ∂L/∂O (the upstream gradient)", "dV = Pᵀ·dO (gradient of the values)",
                        "dP = dO·Vᵀ (gradient of the weights)", "D = rowsum(dO ∘ O)", "dlogits = P ∘ (dP − D)",
                        "d scaled = dlogits / T (T=0.85)", "d(QKᵀ) = d scaled / √d_k", "dQ = d(QKᵀ)·K",
                        "dK = d(QKᵀ)ᵀ·Q", "dT = ∂L/∂T", "Gradients of query 上下文 (row 2)", "> 上下文"})
    EXPECT_TRUE(test::contains(en.out, s)) << s;
  const test::BinaryRun zh = attnlab({"backward", "--lang", "zh", "--loss", "sum"});
  ASSERT_EQ(zh.code, 0) << zh.err;
  for (const char* s : {"反向传播", "损失 L = Σ O（dO 全为 1）", "dV = Pᵀ·dO（值的梯度）", "dP = dO·Vᵀ（权重的梯度）",
                        "dlogits = P ∘ (dP − D)（logits 的梯度", "查询“上下文”（行 2）的梯度", "梯度下降"})
    EXPECT_TRUE(test::contains(zh.out, s)) << s;
}

// A row that sees one key: its dlogits are exactly 0 (they sum to 0; the one entry is the sum), no
// gradient reaches its Q through the scores, and no key is named to raise or lower (the stats had
// named key 0 for both, at the rounding of dP - D, beside a text saying the row is 0).
TEST(BackwardCli, ARowOfOneKeyHasNoGradientAndNamesNoKey) {
  const test::BinaryRun j = attnlab({"backward", "--random", "16", "--seed", "3", "--mask", "causal", "--format", "json"});
  ASSERT_EQ(j.code, 0) << j.err;
  const json g = json::parse(j.out);
  const MatrixF dlogits = matrix_of(g["gradients"]["dlogits"]), dq = matrix_of(g["gradients"]["dQ"]);
  for (Eigen::Index c = 0; c < dlogits.cols(); ++c) EXPECT_EQ(dlogits(0, c), 0.0f) << c;
  for (Eigen::Index c = 0; c < dq.cols(); ++c) EXPECT_EQ(dq(0, c), 0.0f) << c;
  for (const char* lang : {"en", "zh"}) {
    const test::BinaryRun r = attnlab({"backward", "--random", "16", "--seed", "3", "--mask", "causal", "--query", "0",
                                       "--lang", lang});
    ASSERT_EQ(r.code, 0) << r.err;
    const bool en = std::string(lang) == "en";
    EXPECT_TRUE(test::contains(r.out, en ? "none: the row sees one key" : "无：该行只看见一个键")) << r.out;
    EXPECT_FALSE(test::contains(r.out, en ? "raises most" : "升高最多")) << r.out;
    EXPECT_FALSE(test::contains(r.out, "。 ")) << "no space after a Chinese full stop";
  }
}

// A saturated row (T = 0.001: one weight 1 in fp32, the others 0): every dlogits is 0 and the text
// says why, naming no key (it had named key 0 as both raised most and lowered most, at dlogits 0).
TEST(BackwardCli, ASaturatedRowNamesNoKey) {
  const std::vector<std::string> args = {"backward", "--random", "10", "--dk", "8", "--dv", "4", "--seed", "4",
                                         "--temperature", "0.001", "--query", "5"};
  std::vector<std::string> as_json = args;
  as_json.insert(as_json.end(), {"--format", "json"});
  const test::BinaryRun j = attnlab(as_json);
  ASSERT_EQ(j.code, 0) << j.err;
  const MatrixF dlogits = matrix_of(json::parse(j.out)["gradients"]["dlogits"]);
  for (Eigen::Index c = 0; c < dlogits.cols(); ++c) ASSERT_EQ(dlogits(5, c), 0.0f) << c;
  for (const char* lang : {"en", "zh"}) {
    std::vector<std::string> a = args;
    a.insert(a.end(), {"--lang", lang});
    const test::BinaryRun r = attnlab(a);
    ASSERT_EQ(r.code, 0) << r.err;
    const bool en = std::string(lang) == "en";
    EXPECT_TRUE(test::contains(r.out, en ? "none: the softmax saturated, every dlogits of the row is 0"
                                         : "无：softmax 已饱和，该行的 dlogits 全为 0")) << r.out;
    EXPECT_TRUE(test::contains(r.out, en ? "softmax has saturated" : "softmax 已饱和：")) << r.out;
    EXPECT_FALSE(test::contains(r.out, en ? "raises most" : "升高最多")) << r.out;
    EXPECT_FALSE(test::contains(r.out, en ? "most toward key" : "最多移向键")) << r.out;
  }
}

TEST(BackwardCli, ModificationsNameTheirGradients) {
  const test::BinaryRun r = attnlab({"backward", "--random", "6", "--dk", "4", "--dv", "2", "--lang", "en", "--rope",
                                     "--score-mod", "alibi,softcap:3", "--mask", "causal"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* s : {"d capped = dlogits / T (gradient of the soft-capped scores, T=1)",
                        "d biased = d capped ∘ (1 − tanh²(biased / C))", "d scaled = d biased (ALiBi",
                        "dQ_rot = d(QKᵀ)·K_rot", "dQ = RoPEᵀ(dQ_rot)", "dK = RoPEᵀ(dK_rot)"})
    EXPECT_TRUE(test::contains(r.out, s)) << s;
}

TEST(BackwardCli, JsonHoldsTheInProcessGradients) {
  const test::BinaryRun r =
      attnlab({"backward", "--random", "5", "--queries", "3", "--heads", "4", "--kv-heads", "2", "--dk", "4", "--dv",
               "3", "--seed", "2", "--mask", "causal", "--rope", "--score-mod", "softcap:3", "--dout-seed", "7",
               "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out);
  // The gradients in the order the chain runs back (json sorts its keys; ordered_json keeps them).
  const nlohmann::ordered_json in_order = nlohmann::ordered_json::parse(r.out);
  std::vector<std::string> names;
  for (const auto& [k, v] : in_order["gradients"].items()) names.push_back(k);
  EXPECT_EQ(names, (std::vector<std::string>{"dO", "dV", "dP", "D", "dlogits", "dcapped", "dscaled", "dscores", "dQ_rot",
                                             "dK_rot", "dQ", "dK"}));
  EXPECT_EQ(j["upstream"], (json{{"kind", "random"}, {"seed", 7}}));
  EXPECT_FALSE(j.contains("loss"));
  EXPECT_FALSE(j.contains("check"));
  Problem p = random_problem(3, 5, 4, 3, 2, 4, 2);
  p.mask = MaskKind::Causal;
  apply_rope_spec(p, "10000");
  apply_score_mod_spec(p, "softcap:3");
  const GradTrace g = cpu_backward(p, upstream_random(7));
  // Floats printed with 9 significant digits read back exactly.
  EXPECT_EQ(matrix_of(j["gradients"]["dO"]), g.dout);
  EXPECT_EQ(matrix_of(j["gradients"]["dV"]), g.dv);
  EXPECT_EQ(matrix_of(j["gradients"]["dQ"]), g.dq);
  EXPECT_EQ(matrix_of(j["gradients"]["dK"]), g.dk);
  EXPECT_EQ(matrix_of(j["gradients"]["D"]), g.D);
  EXPECT_EQ(j["dT"].get<double>(), g.dT);
  EXPECT_EQ(matrix_of(j["stages"]["output"]), g.forward.output);
}

TEST(BackwardCli, DoutAndLossFiles) {
  const test::TempDir dir;
  const MatrixF dout = random_problem(4, 2, 1, 5).q();
  write_npy(dir.file("do.npy"), dout);
  const std::vector<std::string> in = {"backward", "--random", "4", "--dk", "3", "--dv", "2", "--seed", "1"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> a = in;
    a.insert(a.end(), more.begin(), more.end());
    return attnlab(a);
  };
  test::BinaryRun r = with({"--dout", dir.file("do.npy"), "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(matrix_of(j["gradients"]["dO"]), dout);
  EXPECT_EQ(j["upstream"]["kind"], "file");

  // mse: L = ½ Σ (O − Y)² of the run's own output, dO = O − Y.
  const MatrixF y = random_problem(4, 2, 1, 6).q();
  write_csv(dir.file("y.csv"), y);
  r = with({"--loss", "mse:" + dir.file("y.csv"), "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  j = json::parse(r.out);
  const MatrixF o = matrix_of(j["stages"]["output"]);
  const MatrixF y_read = read_matrix(dir.file("y.csv"));
  EXPECT_NEAR(j["loss"].get<double>(), 0.5 * (o - y_read).cast<double>().squaredNorm(), 1e-6);
  EXPECT_EQ(matrix_of(j["gradients"]["dO"]), MatrixF(o - y_read));
  EXPECT_EQ(j["upstream"]["kind"], "mse");

  // sum: CSV ends with dT and the loss as one-value rows.
  r = with({"--loss", "sum", "--format", "csv"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto lines = test::lines_of(r.out);
  ASSERT_GE(lines.size(), 3u);
  EXPECT_EQ(lines[0], "stage,row,col,row_token,col_token,value");
  EXPECT_EQ(lines[lines.size() - 2].rfind("dT,0,0,,,", 0), 0u);
  EXPECT_EQ(lines.back().rfind("loss,0,0,,,", 0), 0u);
  EXPECT_TRUE(test::contains(r.out, "\ndlogits,1,0,1,0,"));

  // Another seed, another dO; the same seed, the same.
  const auto dout_of = [&](const std::string& seed) {
    return matrix_of(json::parse(with({"--dout-seed", seed, "--format", "json"}).out)["gradients"]["dO"]);
  };
  EXPECT_EQ(dout_of("3"), dout_of("3"));
  EXPECT_NE(dout_of("3"), dout_of("4"));
  EXPECT_EQ(dout_of(" 3 "), dout_of("3")) << "blanks around a number are dropped, as every option's";
}

TEST(BackwardCli, CheckPrintsPassAndItsJson) {
  test::BinaryRun r = attnlab({"backward", "--check", "--lang", "en", "--mask", "causal"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto lines = test::lines_of(r.out);
  EXPECT_EQ(lines.back(), "PASS");
  EXPECT_TRUE(test::contains(r.out, "Check against fp64"));
  EXPECT_TRUE(test::contains(r.out, "masked (query, key) pairs: 10; every gradient from dlogits on exactly 0 at 10"));
  r = attnlab({"backward", "--check", "--format", "json", "--random", "8", "--dk", "4", "--dv", "4", "--heads", "2",
               "--score-mod", "alibi"});
  ASSERT_EQ(r.code, 0) << r.err;
  const json c = json::parse(r.out)["check"];
  EXPECT_TRUE(c["pass"].get<bool>());
  std::vector<std::string> names;
  for (const json& g : c["gradients"]) {
    names.push_back(g["name"]);
    EXPECT_TRUE(g["pass"].get<bool>()) << g.dump();
  }
  EXPECT_EQ(names, (std::vector<std::string>{"dO", "dV", "dP", "D", "dlogits", "dbiased", "dscaled", "dscores", "dQ",
                                             "dK", "dT"}));
  EXPECT_TRUE(c["row_sums"]["fp32"]["pass"].get<bool>());
  for (const json& g : c["gradients"]) EXPECT_TRUE(g["informative"].get<bool>()) << g.dump();
  EXPECT_FALSE(test::contains(attnlab({"backward", "--check", "--lang", "en"}).out, "warning"));
}

// Where the forward's fp32 logits err by as much as the gradients are large (T = 1e-3, nearly
// one-hot rows), the bounds reach the gradients' scale: the pass stands, with a warning that it
// cannot tell a wrong gradient, in both languages and in the JSON.
TEST(BackwardCli, CheckWarnsWhereABoundReachesTheGradientsScale) {
  const std::vector<std::string> args = {"backward", "--check", "--random", "40", "--dk", "8", "--dv", "8",
                                         "--temperature", "1e-3", "--backend", "cpu"};
  std::vector<std::string> en = args, zh = args, js = args;
  en.insert(en.end(), {"--lang", "en"});
  zh.insert(zh.end(), {"--lang", "zh"});
  js.insert(js.end(), {"--format", "json"});
  const test::BinaryRun r = attnlab(en);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(test::contains(r.out, "dT ")) << r.out;
  EXPECT_TRUE(test::contains(r.out, "pass  (bound >= scale)\n")) << r.out;
  EXPECT_TRUE(test::contains(r.out, "\nwarning: the bound of ")) << r.out;
  EXPECT_TRUE(test::contains(r.out, "dT reaches the gradient's own scale")) << r.out;
  EXPECT_EQ(test::lines_of(r.out).back(), "PASS");
  EXPECT_TRUE(test::contains(attnlab(zh).out, "的界不小于梯度本身的量级"));
  const json c = json::parse(attnlab(js).out)["check"];
  EXPECT_FALSE(c["gradients"].back()["informative"].get<bool>()) << c.dump();
}

TEST(BackwardCli, FusedGivesTheGradientsWithoutTheNByNMatricesAndChecksThem) {
  test::BinaryRun r = attnlab({"backward", "--variant", "fused", "--check", "--format", "json", "--random", "70", "--dk",
                               "8", "--dv", "8", "--heads", "2", "--mask", "causal", "--score-mod", "softcap:2"});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(r.out);
  std::vector<std::string> grads;
  for (const auto& [name, value] : j["gradients"].items()) grads.push_back(name);
  EXPECT_EQ(grads, (std::vector<std::string>{"dO", "dV", "D", "dQ", "dK"})) << "no (n, m) gradient in the fused run";
  const json c = j["check"];
  EXPECT_TRUE(c["pass"].get<bool>()) << c.dump();
  EXPECT_TRUE(c["fused"].get<bool>());
  std::vector<std::string> checked;
  for (const json& g : c["gradients"]) checked.push_back(g["name"]);
  EXPECT_EQ(checked, (std::vector<std::string>{"dV", "D", "dQ", "dK", "dT"}));
  // The same gradients as the staged backward, to fp32's rounding.
  const test::BinaryRun s = attnlab({"backward", "--format", "json", "--random", "70", "--dk", "8", "--dv", "8", "--heads",
                                     "2", "--mask", "causal", "--score-mod", "softcap:2"});
  ASSERT_EQ(s.code, 0) << s.err;
  EXPECT_NEAR(j["dT"].get<double>(), json::parse(s.out)["dT"].get<double>(), 1e-4);
  r = attnlab({"backward", "--variant", "fused", "--lang", "en"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(test::contains(r.out, "backward: cpu · fused · fp32")) << r.out;
  EXPECT_TRUE(test::contains(r.out, "The fused backward keeps no (n, m) matrix")) << r.out;
  EXPECT_FALSE(test::contains(r.out, "dlogits = P ∘ (dP − D) (gradient of the logits")) << r.out;
}

TEST(BackwardCli, RefusalsGetOneErrorLine) {
  const test::TempDir dir;
  write_csv(dir.file("small.csv"), MatrixF::Zero(2, 2));
  write_file(dir.file("nan.csv"), "1,2\n3,nan\n4,5\n6,7\n8,9\n");
  write_csv(dir.file("huge.csv"), MatrixF::Constant(5, 2, 3e38f));  // finite, but dO·V is not
  const struct {
    std::vector<std::string> args;
    std::string says;
  } cases[] = {
      {{"--variant", "decode"}, "backward runs --variant staged (every gradient kept as a matrix) or fused"},
      // Without a device that comes first: the advice would lead to a command that cannot run.
      {{"--backend", "cuda"},
       cuda_available() ? "backward on CUDA is the fused backward: add --variant fused" : "no CUDA device"},
      {{"--precision", "bf16"}, "backward computes in fp32"},
      {{"--dout", dir.file("small.csv"), "--loss", "sum"}, "--dout FILE or --loss sum|mse:FILE, not both"},
      {{"--dout-seed", "3", "--loss", "sum"}, "--dout-seed seeds the random dO"},
      {{"--dout-seed", "x3"}, "--dout-seed must be a whole number"},
      {{"--loss", "l1"}, "unknown loss 'l1'"},
      {{"--loss", "mse"}, "--loss mse needs its target"},
      {{"--loss", "mse:"}, "--loss mse needs its target"},
      {{"--dout", dir.file("small.csv")}, "is 2 x 2, but the output O is 5 x 2"},
      {{"--dout", dir.file("nan.csv")}, "nan.csv"},
      {{"--dout", dir.file("missing.npy")}, "missing.npy"},
      {{"--dout", dir.file("huge.csv")}, "the backward's gradients overflow fp32"},
      {{"--dout", dir.file("huge.csv"), "--check"}, "the backward's gradients overflow fp32"},
      {{"--check", "--format", "csv"}, "--check prints its comparison with text, markdown or json, not csv"},
      // Refused from the sizes before anything is allocated (terabytes at this N), on any machine.
      {{"--random", "200000", "--check"}, "of host memory"},
      {{"--random", "200000"}, "--variant fused computes the same gradients without those matrices"},
      {{"--random", "200000", "--format", "json"}, "--variant fused computes the same gradients"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {"backward"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const test::BinaryRun r = attnlab(args);
    EXPECT_EQ(r.code, 2) << c.says << ": " << r.err;
    EXPECT_EQ(test::lines_of(r.err).size(), 1u) << r.err;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
    EXPECT_TRUE(test::contains(r.err, c.says)) << r.err;
    EXPECT_TRUE(r.out.empty()) << c.says;
  }
}

}  // namespace
}  // namespace attnlab
