// Bundles (core/bundle.h): a manifest and .npy files written here, read back as Problems —
// grouped-query heads shared as the model shares them, one head or all, the bundle's scale, mask,
// bias, RoPE base, causality and tokens — and the CLI on them (run, verify, walk, describe, demo
// --bundle); broken bundles (missing file, wrong shape, a bias that is not finite, a bad RoPE base,
// a manifest that lies, bad JSON) give one error line, exit 2.
#include "core/bundle.h"
#include "core/io.h"
#include "core/modify.h"
#include "cpu/cpu_backend.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>

namespace attnlab {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

struct Made {
  MatrixF q, k, v;
};

// A bundle with one call: heads query heads over kv key/value heads, n queries, m keys.
Made make_bundle(const std::string& dir, int heads, int kv, int n, int m, int d_k, int d_v, Json extra = Json::object(),
                 std::uint64_t seed = 1) {
  const Problem r = random_problem(std::max(n, m), d_k, d_v, seed, heads);
  Made a;
  a.q = r.q().topRows(static_cast<Eigen::Index>(heads) * n);
  a.k = r.k().topRows(static_cast<Eigen::Index>(kv) * m);
  a.v = r.v().topRows(static_cast<Eigen::Index>(kv) * m);
  write_npy(dir + "/q.npy", a.q);
  write_npy(dir + "/k.npy", a.k);
  write_npy(dir + "/v.npy", a.v);
  Json call = {{"name", "blocks.0.attn"}, {"heads", heads}, {"kv_heads", kv}, {"n", n}, {"m", m},
               {"d_k", d_k},  {"d_v", d_v},   {"scale", nullptr}, {"causal", false}, {"mask", nullptr},
               {"q", "q.npy"}, {"k", "k.npy"}, {"v", "v.npy"}, {"output", nullptr}};
  for (auto& [key, value] : extra.items()) call[key] = value;
  Json j = {{"format", "attnlab-bundle"}, {"version", 1}, {"model", "test"}, {"tokens", Json::array()},
            {"calls", Json::array({call})}};
  test::write_file(dir + "/manifest.json", j.dump(1));
  return a;
}

void patch_manifest(const std::string& dir, const std::function<void(Json&)>& f) {
  Json j = Json::parse(test::read_file(dir + "/manifest.json"));
  f(j);
  test::write_file(dir + "/manifest.json", j.dump(1));
}

TEST(Bundle, GroupedQueryHeadsShareTheirKeyValueHead) {
  const test::TempDir d;
  const std::string dpath = d.path().string();
  const Made a = make_bundle(dpath, 4, 2, 5, 5, 8, 3);
  const Bundle b = read_bundle(dpath);
  const Problem p = bundle_problem(b, 0, std::nullopt);
  EXPECT_EQ(p.heads, 4);
  EXPECT_EQ(p.n(), 5);
  EXPECT_EQ(p.q(), a.q);
  // The model's two key/value heads kept, not copied per query head (the backward's dK and dV
  // are then the model's: one per key/value head, summed over its group): query heads 0, 1 read
  // kv head 0; 2, 3 read kv head 1.
  EXPECT_EQ(p.kv_heads(), 2);
  EXPECT_EQ(p.k(), a.k);
  EXPECT_EQ(p.v(), a.v);
  EXPECT_EQ(p.kv_row(1), 0);
  EXPECT_EQ(p.kv_row(2), 5);
  EXPECT_EQ(p.kv_row(3), 5);
  const Problem h3 = bundle_problem(b, 0, 3);
  EXPECT_EQ(h3.heads, 1);
  EXPECT_EQ(h3.q(), a.q.middleRows(15, 5));
  EXPECT_EQ(h3.k(), a.k.middleRows(5, 5));
  EXPECT_NE(h3.source.find("head 3 of 4"), std::string::npos) << h3.source;
  // The same in Chinese, for --lang zh and the viewer in 中文.
  EXPECT_NE(h3.source_in(Lang::Zh).find("调用 0（共 1 个）"), std::string::npos) << h3.source_zh;
  EXPECT_NE(h3.source_in(Lang::Zh).find("头 3（共 4 个）"), std::string::npos) << h3.source_zh;
  EXPECT_NE(h3.source_in(Lang::Zh).find("2 个键/值头，每个由 2 个查询头共享"), std::string::npos) << h3.source_zh;
  EXPECT_EQ(h3.source_in(Lang::En), h3.source);
  EXPECT_FALSE(p.scale.has_value());
  EXPECT_EQ(resolve_layer(b, "blocks.0.attn"), 0);
}

TEST(Bundle, ScaleMaskCausalAndTokens) {
  const test::TempDir d;
  const std::string dpath = d.path().string();
  make_bundle(dpath, 2, 2, 4, 4, 16, 2, {{"scale", 0.3}, {"causal", true}});
  patch_manifest(dpath, [](Json& j) { j["tokens"] = {"w", "x", "y", "z"}; });
  Problem p = bundle_problem(read_bundle(dpath), 0, std::nullopt);
  ASSERT_TRUE(p.scale.has_value());
  EXPECT_DOUBLE_EQ(*p.scale, 0.3);
  EXPECT_EQ(p.mask, MaskKind::Causal);
  EXPECT_EQ(p.query_tokens(), (std::vector<std::string>{"w", "x", "y", "z"}));
  EXPECT_EQ(p.source.find("fit neither"), std::string::npos) << p.source;
  // Labels that fit neither the queries nor the keys are set aside, and the source says so.
  patch_manifest(dpath, [](Json& j) { j["tokens"] = {"w", "x", "y"}; });
  p = bundle_problem(read_bundle(dpath), 0, std::nullopt);
  EXPECT_EQ(p.query_tokens(), (std::vector<std::string>{"0", "1", "2", "3"}));
  EXPECT_NE(p.source.find("its 3 tokens fit neither the 4 queries nor the 4 keys, so positions are numbered"),
            std::string::npos)
      << p.source;
  EXPECT_NE(p.source_zh.find("它的 3 个 token 与 4 个查询、4 个键都不相符"), std::string::npos) << p.source_zh;
  patch_manifest(dpath, [](Json& j) { j["tokens"] = {"w", "x", "y", "z"}; });
  // The default scale written out as a number stays the default.
  patch_manifest(dpath, [](Json& j) { j["calls"][0]["scale"] = 0.25; });
  EXPECT_FALSE(bundle_problem(read_bundle(dpath), 0, 1).scale.has_value());

  // Causal with fewer queries than keys: query i sees keys 0..i (torch's top-left alignment).
  const test::TempDir e;
  const std::string epath = e.path().string();
  make_bundle(epath, 1, 1, 2, 4, 4, 2, {{"causal", true}});
  p = bundle_problem(read_bundle(epath), 0, std::nullopt);
  EXPECT_EQ(p.mask, MaskKind::Custom);
  EXPECT_TRUE(std::isinf(p.edit().custom_mask(0, 1)));
  EXPECT_EQ(p.edit().custom_mask(1, 1), 0.0f);

  // A mask file per head: refused for all heads when the heads differ, used with --head.
  const test::TempDir f;
  const std::string fpath = f.path().string();
  make_bundle(fpath, 2, 2, 3, 3, 4, 2, {{"mask", "mask.npy"}});
  MatrixF mk = MatrixF::Zero(6, 3);
  const float inf = std::numeric_limits<float>::infinity();
  mk(0, 2) = -inf;
  mk(4, 0) = -inf;
  write_npy(fpath + "/mask.npy", mk);
  const Bundle b = read_bundle(fpath);
  EXPECT_NE(test::message_of<InputError>([&] { bundle_problem(b, 0, std::nullopt); }).find("--head"),
            std::string::npos);
  p = bundle_problem(b, 0, 1);
  EXPECT_TRUE(std::isinf(p.edit().custom_mask(1, 0)));
  EXPECT_EQ(p.edit().custom_mask(0, 2), 0.0f);
}

TEST(Bundle, TheCliRunsABundleAsTheCpuBackendWould) {
  const test::TempDir d;
  const std::string dpath = d.path().string();
  make_bundle(dpath, 4, 1, 6, 6, 8, 4, {{"scale", 0.5}, {"causal", true}});
  const Problem p = bundle_problem(read_bundle(dpath), 0, std::nullopt);
  const Trace t = cpu_staged(p);
  const auto r = test::run_attnlab({"run", "--bundle", dpath, "--format", "json", "--backend", "cpu"});
  ASSERT_EQ(r.code, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_EQ(j["heads"], 4);
  EXPECT_EQ(j["scale"], 0.5);
  ASSERT_EQ(j["stages"]["output"].size(), 24u);
  for (int row = 0; row < 24; ++row)
    for (int c = 0; c < 4; ++c) EXPECT_FLOAT_EQ(j["stages"]["output"][row][c].get<float>(), t.output(row, c));
  for (const std::vector<std::string>& cmd :
       {std::vector<std::string>{"run", "--bundle", dpath, "--head", "2", "--lang", "en"},
        {"demo", "--bundle", dpath, "--lang", "en"},
        {"describe", "--bundle", dpath, "--lang", "en"},
        {"verify", "--bundle", dpath, "--lang", "en", "--backend", "cpu"},
        {"walk", "--bundle", dpath, "--head", "3", "--query", "4", "--lang", "en"}}) {
    const auto o = test::run_attnlab(cmd);
    EXPECT_EQ(o.code, 0) << cmd[0] << ": " << o.err;
    EXPECT_TRUE(o.out.find("bundle") != std::string::npos || cmd[0] == "walk" || cmd[0] == "verify")
        << cmd[0] << ": " << o.out.substr(0, 300);
  }
}

// A head read alone (--head h) with ALiBi typed keeps its own slope among the call's heads, as the
// whole call's run gives it (it had been a one-head problem's 2^-8, the call's last head's): its
// output is the whole run's rows of head h, and standard or given slopes alike.
TEST(Bundle, AHeadReadAloneKeepsItsAlibiSlopeAmongTheCallsHeads) {
  const test::TempDir d;
  const std::string dpath = d.path().string();
  make_bundle(dpath, 4, 2, 6, 6, 8, 4);
  for (const std::string spec : {"alibi", "alibi:0.5/0.25/0.125/0.0625"}) {
    const auto all = test::run_attnlab({"run", "--bundle", dpath, "--score-mod", spec, "--format", "json", "--backend", "cpu"});
    ASSERT_EQ(all.code, 0) << all.err;
    const Json a = Json::parse(all.out);
    for (int h : {0, 1, 2}) {
      SCOPED_TRACE(spec + " head " + std::to_string(h));
      const auto one = test::run_attnlab({"run", "--bundle", dpath, "--head", std::to_string(h), "--score-mod", spec,
                                          "--format", "json", "--backend", "cpu"});
      ASSERT_EQ(one.code, 0) << one.err;
      const Json o = Json::parse(one.out);
      ASSERT_EQ(o["stages"]["output"].size(), 6u);
      for (int row = 0; row < 6; ++row)
        for (int c = 0; c < 4; ++c)
          EXPECT_FLOAT_EQ(o["stages"]["output"][row][c].get<float>(), a["stages"]["output"][h * 6 + row][c].get<float>());
    }
  }
}

// The attention of one head in double, written out here (not the lab's reference): q (n, d_k),
// k (m, d_k), v (m, d_v) already rotated, plus bias (n, m) and mask (n, m) on the scaled scores.
MatrixD attention_by_hand(const MatrixD& q, const MatrixD& k, const MatrixD& v, double scale, const MatrixD& bias,
                          const MatrixD& mask) {
  MatrixD s = (q * k.transpose()) * scale + bias + mask;
  for (Eigen::Index r = 0; r < s.rows(); ++r) {
    s.row(r) = (s.row(r).array() - s.row(r).maxCoeff()).exp().matrix();
    s.row(r) /= s.row(r).sum();
  }
  return s * v;
}

TEST(Bundle, BiasAndRopeThetaBecomeTheProblemsModifications) {
  const test::TempDir d;
  const std::string dpath = d.path().string();
  // 2 query heads over 1 key/value head, 3 queries at the end of 5 keys, a bias per head.
  const Made a = make_bundle(dpath, 2, 1, 3, 5, 4, 2,
                             {{"bias", "bias.npy"}, {"rope_theta", 500.0}, {"notes", {"", " captured by hand ", " "}}});
  MatrixF bias(6, 5);
  for (int r = 0; r < 6; ++r)
    for (int c = 0; c < 5; ++c) bias(r, c) = -0.25f * static_cast<float>(r % 3 + 2 - c) + (r >= 3 ? 0.5f : 0.f);
  write_npy(dpath + "/bias.npy", bias);
  const Bundle b = read_bundle(dpath);
  EXPECT_EQ(b.calls[0].bias, "bias.npy");
  EXPECT_EQ(b.calls[0].rope_theta, 500.0);
  EXPECT_EQ(b.calls[0].notes, (std::vector<std::string>{"captured by hand"}));  // blank notes dropped
  const Problem p = bundle_problem(b, 0, std::nullopt);
  // The capture's note goes with the source, in both languages.
  EXPECT_NE(p.source.find("; note: captured by hand"), std::string::npos) << p.source;
  EXPECT_NE(p.source_zh.find("；备注：captured by hand"), std::string::npos) << p.source_zh;
  EXPECT_EQ(p.bias(), bias);
  EXPECT_EQ(p.mods.bias_name, "bias.npy");
  EXPECT_EQ(p.mods.rope_theta, 500.0);
  // Q and K are the bundle's own (un-rotated): the lab rotates them.
  EXPECT_EQ(p.q(), a.q);
  // One head: its rows of a per-head bias.
  const Problem h1 = bundle_problem(b, 0, 1);
  EXPECT_EQ(h1.bias(), bias.middleRows(3, 3));
  // and it says so: head 1's rows of a per-head bias (it had been named shared).
  EXPECT_EQ(h1.mods.bias_head, 1);
  EXPECT_TRUE(test::contains(modifications_text(h1, Lang::En), "(one per head, head 1's)")) << modifications_text(h1, Lang::En);
  EXPECT_EQ(h1.mods.rope_theta, 500.0);

  // The fp64 reference of the call is RoPE (query i at position i + m - n, key j at j), then the
  // scaled scores plus the bias, the softmax and V.
  const TraceD ref = reference_fp64(p);
  const MatrixD kr = rope_rotate(a.k.cast<double>(), 0, 500.0);
  for (int h = 0; h < 2; ++h) {
    const MatrixD qr = rope_rotate(a.q.middleRows(h * 3, 3).cast<double>(), 2, 500.0);
    const MatrixD want = attention_by_hand(qr, kr, a.v.cast<double>(), 0.5, bias.middleRows(h * 3, 3).cast<double>(),
                                           MatrixD::Zero(3, 5));
    EXPECT_LT((ref.output.middleRows(h * 3, 3) - want).cwiseAbs().maxCoeff(), 1e-12) << "head " << h;
  }

  // A bias shared by every head stays (n, m) for one head too; null and absent keys mean none.
  write_npy(dpath + "/bias.npy", bias.topRows(3));
  EXPECT_EQ(bundle_problem(read_bundle(dpath), 0, 1).bias(), bias.topRows(3));
  EXPECT_EQ(bundle_problem(read_bundle(dpath), 0, 1).mods.bias_head, -1);
  patch_manifest(dpath, [](Json& j) {
    j["calls"][0]["bias"] = nullptr;
    j["calls"][0].erase("rope_theta");
  });
  const Problem plain = bundle_problem(read_bundle(dpath), 0, std::nullopt);
  EXPECT_EQ(plain.bias().size(), 0);
  EXPECT_EQ(plain.mods.rope_theta, 0.0);
  EXPECT_TRUE(plain.mods.bias_name.empty());
}

TEST(Bundle, TheCliRunsABundlesBiasAndRope) {
  // What the capture tests rely on: `run --bundle --format json` gives the call's output with the
  // bundle's RoPE and bias applied, on the CPU backend, with the mask beside the bias.
  const test::TempDir d;
  const std::string dpath = d.path().string();
  make_bundle(dpath, 2, 2, 4, 4, 8, 3, {{"bias", "bias.npy"}, {"mask", "mask.npy"}, {"rope_theta", 10000.0}});
  MatrixF bias(8, 4), mask = MatrixF::Zero(4, 4);
  for (int r = 0; r < 8; ++r)
    for (int c = 0; c < 4; ++c) bias(r, c) = (r < 4 ? -0.5f : -0.125f) * static_cast<float>(std::abs(r % 4 - c));
  for (int r = 0; r < 4; ++r)
    for (int c = r + 1; c < 4; ++c) mask(r, c) = -std::numeric_limits<float>::infinity();
  write_npy(dpath + "/bias.npy", bias);
  write_npy(dpath + "/mask.npy", mask);
  const Problem p = bundle_problem(read_bundle(dpath), 0, std::nullopt);
  const TraceD ref = reference_fp64(p);
  const auto r = test::run_attnlab({"run", "--bundle", dpath, "--format", "json", "--backend", "cpu"});
  ASSERT_EQ(r.code, 0) << r.err;
  const Json j = Json::parse(r.out);
  ASSERT_EQ(j["stages"]["output"].size(), 8u);
  for (int row = 0; row < 8; ++row)
    for (int c = 0; c < 3; ++c)
      EXPECT_NEAR(j["stages"]["output"][row][c].get<double>(), ref.output(row, c), 1e-5) << row << "," << c;
}

// One line on stderr starting "error:", exit code 2, mentioning `want`.
void expect_refused(const std::vector<std::string>& args, const std::string& want) {
  const auto r = test::run_attnlab(args);
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
  EXPECT_EQ(test::lines_of(r.err).size(), 1u) << r.err;
  EXPECT_NE(r.err.find(want), std::string::npos) << r.err;
}

// What a call captured stays: --score-mod adds to its bias (a second bias refused), --rope does not
// replace its RoPE base; a call without them takes both.
TEST(Bundle, TheCallsBiasAndRopeStayUnderTheOptions) {
  const test::TempDir d;
  const std::string dpath = d.path().string();
  make_bundle(dpath, 2, 2, 4, 4, 8, 3, {{"bias", "bias.npy"}, {"rope_theta", 10000.0}});
  MatrixF bias(4, 4);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) bias(r, c) = -0.5f * static_cast<float>(std::abs(r - c));
  write_npy(dpath + "/bias.npy", bias);
  Problem p = bundle_problem(read_bundle(dpath), 0, std::nullopt);
  p.mods.softcap = 3;
  const TraceD ref = reference_fp64(p);
  const auto r = test::run_attnlab({"run", "--bundle", dpath, "--score-mod", "softcap:3", "--format", "json", "--backend", "cpu"});
  ASSERT_EQ(r.code, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_NE(j["modifications"].get<std::string>().find("bias bias.npy"), std::string::npos) << j["modifications"];
  for (int row = 0; row < 8; ++row)
    for (int c = 0; c < 3; ++c)
      EXPECT_NEAR(j["stages"]["output"][row][c].get<double>(), ref.output(row, c), 1e-5) << row << "," << c;
  write_npy(dpath + "/other.npy", bias);
  expect_refused({"run", "--bundle", dpath, "--score-mod", "bias:" + dpath + "/other.npy"},
                 "the bundle's call carries its own bias (bias.npy)");
  expect_refused({"run", "--bundle", dpath, "--rope", "500"}, "carries its own RoPE base (θ = 10000)");
  patch_manifest(dpath, [](Json& m) { m["calls"][0]["bias"] = nullptr; m["calls"][0].erase("rope_theta"); });
  const auto both = test::run_attnlab({"run", "--bundle", dpath, "--rope", "500", "--score-mod",
                                       "bias:" + dpath + "/other.npy", "--format", "json", "--backend", "cpu"});
  ASSERT_EQ(both.code, 0) << both.err;
  EXPECT_NE(Json::parse(both.out)["modifications"].get<std::string>().find("RoPE θ=500; bias other.npy"),
            std::string::npos);
}

// Token labels from the manifest are checked as --tokens checks them; names with control
// characters are printed with them escaped.
TEST(Bundle, ManifestLabelsAndNamesStayOnOneLine) {
  const test::TempDir d;
  const std::string dpath = d.path().string();
  make_bundle(dpath, 1, 1, 4, 4, 8, 3);
  patch_manifest(dpath, [](Json& m) { m["tokens"] = {"a", "b\nc", "d", "e"}; });
  expect_refused({"run", "--bundle", dpath}, "manifest.json: token 2 contains a control character or is not valid UTF-8: 'b\\x0Ac'");
  patch_manifest(dpath, [](Json& m) {
    m["tokens"] = {"a", "b", "c", "d"};
    m["model"] = "to\ny";
    m["calls"][0]["name"] = "h\t1";
  });
  const auto r = test::run_attnlab({"run", "--bundle", dpath, "--lang", "en", "--backend", "cpu"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("(to\\x0Ay), call 0 of 1 'h\\x091'"), std::string::npos) << r.out;
}

// A call whose heads have masks of their own is read one head at a time: walk --head H walks that
// head (named as H), forward and backward, equal to `run --head H`'s row.
TEST(Bundle, WalkTakesACallWithAMaskPerHead) {
  const test::TempDir d;
  const std::string dpath = d.path().string();
  make_bundle(dpath, 2, 1, 4, 4, 8, 3, {{"mask", "mask.npy"}});
  MatrixF mask = MatrixF::Zero(8, 4);
  for (int r = 0; r < 4; ++r)
    for (int c = r + 1; c < 4; ++c) mask(4 + r, c) = -std::numeric_limits<float>::infinity();  // head 1 causal
  write_npy(dpath + "/mask.npy", mask);
  expect_refused({"run", "--bundle", dpath}, "pick one head");  // all heads at once: not one mask
  const auto run = test::run_attnlab({"run", "--bundle", dpath, "--head", "1", "--query", "1", "--format", "json", "--backend", "cpu"});
  ASSERT_EQ(run.code, 0) << run.err;
  const Json out = Json::parse(run.out)["stages"]["output"][1];
  for (const bool backward : {false, true}) {
    SCOPED_TRACE(backward);
    std::vector<std::string> args = {"walk", "--bundle", dpath, "--head", "1", "--query", "1", "--format", "json", "--backend", "cpu"};
    if (backward) args.push_back("--backward");
    const auto w = test::run_attnlab(args);
    ASSERT_EQ(w.code, 0) << w.err;
    const Json j = Json::parse(w.out);
    EXPECT_EQ(j["head"], 1) << w.out.substr(0, 400);
    EXPECT_NE(j["source"].get<std::string>().find("head 1 of 2"), std::string::npos) << j["source"];
    if (!backward)
      for (int c = 0; c < 3; ++c) EXPECT_NEAR(j["output"][c].get<double>(), out[c].get<double>(), 1e-6);
  }
}

// A whole-number --layer is always an index, even where another call is named with that number.
TEST(Bundle, AWholeNumberLayerIsAlwaysAnIndex) {
  const test::TempDir d;
  const std::string dir = d.path().string();
  make_bundle(dir, 1, 1, 4, 4, 8, 3);
  patch_manifest(dir, [](Json& j) {
    Json other = j["calls"][0];
    j["calls"][0]["name"] = "1";
    other["name"] = "0";
    j["calls"].push_back(other);
  });
  const Bundle b = read_bundle(dir);
  EXPECT_EQ(resolve_layer(b, "0"), 0);
  EXPECT_EQ(resolve_layer(b, "1"), 1);
  EXPECT_EQ(resolve_layer(b, "01"), 1);
  // A name that two calls carry is no one call's.
  Bundle twice = b;
  twice.calls[1].name = "attn";
  twice.calls[0].name = "attn";
  EXPECT_EQ(test::message_of<InputError>([&] { resolve_layer(twice, "attn"); }),
            "--layer 'attn' names 2 calls (0, 1): give the call's index");
  const auto r = test::run_attnlab({"run", "--bundle", dir, "--layer", "0", "--lang", "en"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("call 0 of 2 '1'"), std::string::npos) << r.out;
}

TEST(Bundle, BrokenBundlesGetOneErrorLine) {
  const test::TempDir d;
  const std::string dpath = d.path().string();
  const std::string dir = dpath;
  make_bundle(dir, 2, 2, 4, 4, 8, 3);
  const std::vector<std::string> run = {"run", "--bundle", dir};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = run;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  expect_refused(with({"--layer", "3"}), "--layer 3 is out of range");
  expect_refused(with({"--layer", "nope"}), "blocks.0.attn");
  expect_refused(with({"--head", "2"}), "--head 2 is out of range");
  expect_refused(with({"--mask", "causal"}), "--mask does not apply to --bundle");
  expect_refused({"run", "--random", "4", "--head", "1"}, "--head must be between 0 and 0, got 1");
  expect_refused({"run", "--random", "4", "--heads", "3", "--head", "3"}, "--head must be between 0 and 2, got 3");
  expect_refused({"run", "--q", "q.csv", "--k", "k.csv", "--v", "v.csv", "--head", "0"},
                 "--head applies to --bundle or to --random N --heads H");
  // A count out of range is printed as the manifest wrote it (above 2^63 it had read "got -1").
  patch_manifest(dir, [](Json& j) { j["calls"][0]["n"] = 18446744073709551615ULL; });
  expect_refused(run, "call 0: 'n' must be between 1 and 16777216, got 18446744073709551615");
  patch_manifest(dir, [](Json& j) { j["calls"][0]["n"] = -3; });
  expect_refused(run, "call 0: 'n' must be between 1 and 16777216, got -3");
  // The manifest lies about n.
  patch_manifest(dir, [](Json& j) { j["calls"][0]["n"] = 5; });
  expect_refused(run, "q.npy: q of call 0 'blocks.0.attn' is 8x8 but the manifest says 10x8");
  patch_manifest(dir, [](Json& j) { j["calls"][0]["n"] = 4; j["calls"][0]["kv_heads"] = 3; });
  expect_refused(run, "cannot share 3 key/value heads");
  patch_manifest(dir, [](Json& j) { j["calls"][0]["kv_heads"] = 1; });
  expect_refused(run, "k.npy: k of call 0");
  patch_manifest(dir, [](Json& j) { j["calls"][0]["kv_heads"] = 2; j["calls"][0]["d_v"] = 4; });
  expect_refused(run, "v.npy: v of call 0");
  patch_manifest(dir, [](Json& j) { j["calls"][0]["d_v"] = 3; j["calls"][0].erase("d_k"); });
  expect_refused(run, "has no 'd_k'");
  // A wrong shape in the file itself, a missing file, a missing mask, a mask with other values.
  patch_manifest(dir, [](Json& j) { j["calls"][0]["d_k"] = 8; });
  write_npy(dir + "/v.npy", MatrixF::Zero(8, 2));
  expect_refused(run, "is 8x2 but the manifest says 8x3");
  fs::remove(dir + "/v.npy");
  expect_refused(run, "v.npy: missing");
  write_npy(dir + "/v.npy", MatrixF::Zero(8, 3));
  patch_manifest(dir, [](Json& j) { j["calls"][0]["mask"] = "mask.npy"; });
  expect_refused(run, "mask.npy: missing");
  write_npy(dir + "/mask.npy", MatrixF::Constant(4, 4, 0.5f));
  expect_refused(run, "0 or -inf");
  write_npy(dir + "/mask.npy", MatrixF::Zero(3, 4));
  expect_refused(run, "mask of call 0 'blocks.0.attn' is 3x4");
  // A row that blocks every key, named with its file and call (it had been "row 2 (2) is fully
  // masked", naming neither).
  MatrixF blocked = MatrixF::Zero(4, 4);
  blocked.row(2).setConstant(-std::numeric_limits<float>::infinity());
  write_npy(dir + "/mask.npy", blocked);
  expect_refused(run, "mask.npy: row 2 blocks every key (the mask of call 0 'blocks.0.attn'): that query's softmax is "
                      "undefined");
  expect_refused({"run", "--bundle", dir, "--lang", "zh"}, "mask.npy：行 2 屏蔽了所有键（调用 0“blocks.0.attn”的掩码）");
  patch_manifest(dir, [](Json& j) { j["calls"][0]["mask"] = "."; });
  expect_refused(run, "'mask' must name a file inside the bundle, got '.'");
  patch_manifest(dir, [](Json& j) { j["calls"][0]["mask"] = "sub/"; });
  expect_refused(run, "'mask' must name a file inside the bundle, got 'sub/'");
  patch_manifest(dir, [](Json& j) { j["calls"][0]["mask"] = "../../etc/passwd"; });
  expect_refused(run, "inside the bundle");
  // A bias: missing, of the wrong shape, with a value that is not finite, outside the bundle.
  patch_manifest(dir, [](Json& j) { j["calls"][0]["mask"] = nullptr; j["calls"][0]["bias"] = "bias.npy"; });
  expect_refused(run, "bias.npy: missing (the manifest's bias of call 0 'blocks.0.attn')");
  write_npy(dir + "/bias.npy", MatrixF::Zero(5, 4));
  expect_refused(run, "bias.npy: bias of call 0 'blocks.0.attn' is 5x4 but the manifest says 4x4 (shared by every "
                      "head) or 8x4 (one per head)");
  MatrixF bad = MatrixF::Zero(8, 4);
  bad(6, 1) = -std::numeric_limits<float>::infinity();
  write_npy(dir + "/bias.npy", bad);
  expect_refused(run, "bias.npy: value -inf at [6, 1] is not finite (the bias of call 0 'blocks.0.attn' holds finite "
                      "numbers; keys a model blocks belong in the mask, as -inf)");
  bad(6, 1) = std::numeric_limits<float>::quiet_NaN();
  write_npy(dir + "/bias.npy", bad);
  expect_refused(run, "bias.npy: value nan at [6, 1] is not finite (the bias of call 0");
  patch_manifest(dir, [](Json& j) { j["calls"][0]["bias"] = "/tmp/bias.npy"; });
  expect_refused(run, "'bias' must name a file inside the bundle");
  // scale: a number above 0 that fp32 holds, refused when the bundle opens (one beyond fp32 had
  // been refused only by the run, as an overflow naming neither the bundle nor the scale).
  patch_manifest(dir, [](Json& j) { j["calls"][0]["bias"] = nullptr; j["calls"][0]["scale"] = 1e300; });
  expect_refused(run, "manifest.json: call 0: 'scale' must be a finite number > 0 and at most fp32's largest "
                      "(3.40282347e+38), got 1e+300");
  expect_refused({"run", "--bundle", dir, "--lang", "zh"}, "：调用 0：“scale”必须是大于 0 且不超过 fp32 最大值");
  patch_manifest(dir, [](Json& j) { j["calls"][0]["scale"] = -1; });
  expect_refused(run, "got -1");
  // rope_theta: a finite number > 0 with an even d_k, or null.
  patch_manifest(dir, [](Json& j) { j["calls"][0]["scale"] = nullptr; j["calls"][0]["rope_theta"] = 0; });
  expect_refused(run, "call 0: 'rope_theta' must be a finite number > 0 (RoPE's base, such as 10000) or null, got 0");
  patch_manifest(dir, [](Json& j) { j["calls"][0]["rope_theta"] = -5.5; });
  expect_refused(run, "got -5.5");
  patch_manifest(dir, [](Json& j) { j["calls"][0]["rope_theta"] = "10000"; });
  expect_refused(run, "'rope_theta' must be a number (RoPE's base) or null");
  patch_manifest(dir, [](Json& j) { j["calls"][0]["rope_theta"] = 10000; j["calls"][0]["d_k"] = 7; });
  expect_refused(run, "'rope_theta' needs an even d_k (RoPE pairs value c with c + d_k/2), got d_k 7");
  patch_manifest(dir, [](Json& j) { j["calls"][0]["rope_theta"] = nullptr; j["calls"][0]["d_k"] = 8; j["calls"][0]["notes"] = "x"; });
  expect_refused(run, "'notes' must be a list of strings");
  patch_manifest(dir, [](Json& j) { j["calls"][0]["notes"] = Json::array({"fine"}); j["calls"][0]["name"] = 5; });
  expect_refused(run, "call 0: 'name' must be a string");
  patch_manifest(dir, [](Json& j) { j["calls"][0]["name"] = "blocks.0.attn"; j["model"] = Json::array({"m"}); });
  expect_refused(run, "manifest.json: 'model' must be a string");
  patch_manifest(dir, [](Json& j) { j["model"] = "test"; });
  EXPECT_EQ(test::run_attnlab(run).code, 0);
  // An output of the wrong shape: refused by run and verify too, which do not use it.
  patch_manifest(dir, [](Json& j) { j["calls"][0]["output"] = "out.npy"; });
  write_npy(dir + "/out.npy", MatrixF::Zero(8, 2));
  expect_refused(run, "out.npy: output of call 0 'blocks.0.attn' is 8x2 but the manifest says 8x3");
  expect_refused({"verify", "--bundle", dir}, "out.npy: output of call 0 'blocks.0.attn' is 8x2 but the manifest says 8x3");
  write_npy(dir + "/out.npy", MatrixF::Zero(8, 3));
  EXPECT_EQ(test::run_attnlab(run).code, 0);
  test::write_file(dir + "/manifest.json", "{\"calls\": [");
  expect_refused(run, "manifest.json: not valid JSON (line 1, column 12)");
  test::write_file(dir + "/manifest.json", "{\n  \"calls\": [\n    1,,\n");
  expect_refused(run, "manifest.json: not valid JSON (line 3, column 7)");
  expect_refused({"run", "--bundle", dir, "--lang", "zh"}, "manifest.json：不是有效的 JSON（第 3 行第 7 列）");
  // The column counts characters, as an editor does: a token of two Chinese characters is four
  // (it counted their bytes: eight).
  test::write_file(dir + "/manifest.json", "{\"tokens\": [\"模型\", \"根据\",,");
  expect_refused(run, "manifest.json: not valid JSON (line 1, column 24)");
  test::write_file(dir + "/manifest.json", "{\"calls\": [], \"version\": 1e400}");
  expect_refused(run, "manifest.json: not valid here: a number out of a double's range");
  test::write_file(dir + "/manifest.json", "{\"calls\": []}");
  expect_refused(run, "has no calls ('calls' must be a list");
  // A capture whose every call was skipped: its first reason, not a corrupt-sounding manifest.
  test::write_file(dir + "/manifest.json",
                   "{\"calls\": [], \"skipped\": [{\"name\": \"layers.0.attn\", \"reason\": \"additive mask with NaN "
                   "or +inf values\"}, {\"name\": \"layers.1.attn\", \"reason\": \"x\"}]}");
  expect_refused(run, "manifest.json: has no calls: every attention call (2) was skipped when it was captured, the "
                      "first, 'layers.0.attn', because: additive mask with NaN or +inf values");
  expect_refused({"run", "--bundle", dir, "--lang", "zh"}, "manifest.json：没有调用：捕获时每个注意力调用（2 个）都被跳过了");
  fs::remove(dir + "/manifest.json");
  expect_refused(run, "manifest.json: missing");
  expect_refused({"run", "--bundle", dir + "/nothing"}, "/nothing: no such directory");
  test::write_file(dir + "/file", "x");
  expect_refused({"run", "--bundle", dir + "/file"}, "/file: not a directory");
  expect_refused({"run", "--bundle", dir, "--random", "4"}, "give one input");
}

}  // namespace
}  // namespace attnlab
