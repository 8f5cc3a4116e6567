// The decode view's logic (viewer/views/decode/decode_view.h): the caches (the input on screen
// decoded token by token, a random prompt growing by a key per token), one token through the
// decode kernel's own steps against the kernel run on the same problem built whole, the checks
// (one pass, fp64), the strip's weights, the settings and their refusals, play, the history, the
// state dump; and headless screenshots of `attnlab-view --view decode` in both languages.
#include "viewer_test_util.h"
#include "core/stats.h"
#include "cpu/cpu_backend.h"
#include "cpu/walk.h"
#include "tests/test_util.h"
#include "viewer/session/session.h"
#include "viewer/views/decode/decode_view.h"
#ifdef ATTNLAB_VIEW_BINARY
#include "viewer/draw/png_io.h"
#endif

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

using namespace attnlab;
using namespace attnlab::viewer;

namespace {

DecodeJob job_for(const DecodeShape& shape, int token, int splits, int head, double temperature = 1.0) {
  DecodeJob j;
  j.shape = shape;
  j.token = token;
  j.splits = splits;
  j.head = head;
  j.temperature = temperature;
  return j;
}

// A random cache: `keys` keys, `heads` query heads over `kv_heads` key/value heads of size `dim`.
DecodeShape random_cache(int keys, int heads, int kv_heads, int dim, std::uint64_t seed = 0) {
  return DecodeShape{keys, heads, kv_heads, dim, seed};
}

std::vector<double> row(const MatrixF& m, Eigen::Index r) {
  std::vector<double> v(m.cols());
  for (Eigen::Index c = 0; c < m.cols(); ++c) v[c] = m(r, c);
  return v;
}

}  // namespace

TEST(DecodeView, TheInputIsDecodedTokenByTokenAsTheCausalRowsOfItsChain) {
  const Problem demo = demo_problem();
  auto cache = DecodeCache::from_input(demo);
  ASSERT_EQ(cache->tokens(), 5);
  EXPECT_EQ(cache->capacity(), 5);
  EXPECT_EQ(cache->keys_at(0), 1);
  EXPECT_EQ(cache->keys_at(4), 5);
  EXPECT_EQ(cache->query_label(2), "上下文");
  // The causal chain of the demo: row t is what decoding token t computes.
  Problem causal = demo;
  causal.mask = MaskKind::Causal;
  const TraceD ref = reference_fp64(causal);
  auto input = std::make_shared<const Problem>(demo);
  DecodeEngine e(/*probe=*/false);
  for (int t = 0; t < 5; ++t) {
    DecodeJob j = job_for(DecodeShape{}, t, 2, 0, demo.temperature);
    j.input = input;
    const DecodeToken r = e.run(j);
    ASSERT_TRUE(r.refusal.empty()) << r.refusal.en;
    EXPECT_EQ(r.token, t);
    EXPECT_EQ(r.keys, t + 1);
    EXPECT_EQ(r.plan.splits, std::min(2, t + 1));
    EXPECT_EQ(static_cast<int>(r.walk.split_states.size()), r.plan.splits);
    EXPECT_EQ(static_cast<int>(r.walk.merges.size()), r.plan.splits - 1);
    for (int c = 0; c < demo.d_v(); ++c) EXPECT_NEAR(r.walk.split_output[c], ref.output(t, c), 1e-6) << t;
    EXPECT_TRUE(r.within);
    EXPECT_LE(r.l_ulps, 2);
    EXPECT_LE(r.one_pass_diff, 1e-6);
    EXPECT_NEAR(std::accumulate(r.shares.begin(), r.shares.end(), 0.0), 1.0, 1e-12);
    ASSERT_EQ(static_cast<int>(r.bins.size()), t + 1);  // a bin per key on a short cache
    for (int k = 0; k <= t; ++k) EXPECT_NEAR(r.bins[k], ref.weights(t, k), 1e-7);
    EXPECT_EQ(r.tail.size(), r.bins.size());
    EXPECT_DOUBLE_EQ(r.bytes, (t + 1) * (demo.d_k() + demo.d_v()) * 4.0);
  }
  EXPECT_EQ(e.builds(), 1) << "the cache is built once for the input";
}

// An input with modifications: each token's row is the causal chain's row with them (RoPE and
// ALiBi at the token's position, the cap, the bias's row, a window, the documents), where the
// view decoded plain attention before; a prefix's positions are the prompt, and decoding starts at
// the prefix's last position.
TEST(DecodeView, TheInputsModificationsApplyAtEachTokensPosition) {
  struct Case {
    const char* what;
    int prefix;
  };
  for (const Case c : {Case{"every modification", 0}, Case{"a prefix", 7}}) {
    SCOPED_TRACE(c.what);
    Problem p = random_problem(9, 12, 8, 6, 29, 1, 1);  // 9 queries at the end of 12 keys
    p.temperature = 0.8;
    p.mods.rope_theta = 50;
    p.mods.alibi = true;
    p.mods.alibi_slopes = {0.3};
    p.mods.softcap = 3;
    p.mods.prefix = c.prefix;
    if (c.prefix == 0) {
      p.mods.window = 5;
      ProblemInputs& in = p.edit();
      in.bias = MatrixF::Random(p.n(), p.m());
      in.documents = {0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2, 2};
    }
    validate(p);
    Problem causal = p;
    causal.mask = MaskKind::Causal;
    const TraceD ref = reference_fp64(causal);
    auto cache = DecodeCache::from_input(p);
    // With the prefix, positions 0..6 are the prompt: the first token is the query at position 6.
    const int first = c.prefix ? c.prefix - 1 - (p.m() - p.n()) : 0;
    ASSERT_EQ(cache->first_query(), first);
    ASSERT_EQ(cache->tokens(), p.n() - first);
    EXPECT_EQ(cache->keys_at(0), p.m() - p.n() + first + 1);
    EXPECT_EQ(cache->query_label(0), std::to_string(p.m() - p.n() + first));  // a random query is named by its position
    auto input = std::make_shared<const Problem>(p);
    DecodeEngine e(/*probe=*/false);
    for (int t = 0; t < cache->tokens(); ++t) {
      DecodeJob j = job_for(DecodeShape{}, t, 2, 0, p.temperature);
      j.input = input;
      const DecodeToken r = e.run(j);
      ASSERT_TRUE(r.refusal.empty()) << r.refusal.en;
      EXPECT_EQ(r.first_query, first);
      const int row = first + t;
      for (int c2 = 0; c2 < p.d_v(); ++c2) EXPECT_NEAR(r.walk.split_output[c2], ref.output(row, c2), 1e-5) << t;
      EXPECT_TRUE(r.within) << t;
      EXPECT_LE(r.one_pass_diff, 1e-6);
      for (int k = 0; k < r.keys; ++k) EXPECT_NEAR(r.bins[k], ref.weights(row, k), 1e-6) << t << " " << k;
    }
  }
}

// A V near fp32's largest values on screen: the kernel's acc overflows with V as given, so the token
// runs on V · 2^-e as the CLI's decode does; the output is multiplied back, the panel says so, and
// the fp64 check reads its bound at that scale.
TEST(DecodeView, AHugeVIsComputedOnVScaledByAPowerOfTwo) {
  Problem p = random_problem(8, 8, 1, 1, 3, 1, 1);
  ProblemInputs in;
  in.q = MatrixF::Constant(8, 1, 1.f);
  in.k = MatrixF::Zero(8, 1);  // every key of equal weight: acc reaches 8 · 3e38
  in.v = MatrixF::Constant(8, 1, 3e38f);
  p.set_inputs(std::move(in));
  auto input = std::make_shared<const Problem>(p);
  DecodeEngine e(false);
  DecodeJob j = job_for(DecodeShape{}, 7, 2, 0);
  j.input = input;
  const DecodeToken r = e.run(j);
  ASSERT_TRUE(r.refusal.empty()) << r.refusal.en;
  EXPECT_GT(r.walk.split_values_exponent, 0);
  ASSERT_EQ(r.walk.split_output.size(), 1u);
  EXPECT_NEAR(r.walk.split_output[0], 3e38, 1e-6 * 3e38);
  EXPECT_TRUE(std::isfinite(r.walk.merges.back().acc[0]));  // the scaled sums, as the kernel held them
  EXPECT_LE(r.one_pass_diff, 1e-6 * 3e38);
  EXPECT_TRUE(r.within);
  EXPECT_GT(r.tolerance, 0);
  EXPECT_NE(std::string(dtr(Lang::En, DT::ValuesScaled)).find("V·2^-%d"), std::string::npos);
  // A V that fits is not scaled.
  DecodeEngine plain(false);
  DecodeJob d = job_for(DecodeShape{}, 4, 2, 0, demo_problem().temperature);
  d.input = std::make_shared<const Problem>(demo_problem());
  EXPECT_EQ(plain.run(d).walk.split_values_exponent, 0);
}

TEST(DecodeView, ATokenOfARandomCacheIsTheDecodeKernelOnThatTokensProblem) {
  DecodeShape shape = random_cache(3000, 4, 2, 16, 7);
  auto cache = DecodeCache::random(shape);
  EXPECT_EQ(cache->tokens(), kDecodeGrow);
  EXPECT_EQ(cache->capacity(), 3000 + kDecodeGrow);
  EXPECT_EQ(cache->keys_at(5), 3006);
  DecodeEngine e(false);
  const DecodeToken r = e.run(job_for(shape, 5, 3, 3, 0.7));
  ASSERT_TRUE(r.refusal.empty()) << r.refusal.en;
  EXPECT_EQ(r.keys, 3006);
  EXPECT_EQ(r.plan.splits, 3);
  EXPECT_EQ(r.kv_head, 1);
  EXPECT_EQ(r.heads, 4);
  EXPECT_EQ(r.kv_heads, 2);
  // The same token built as a problem of its own and run through the kernel whole: the same bits.
  const Problem whole = test::first_keys(cache->at(5, 0.7), 3006);
  const Trace t = cpu_decode(whole, 3);
  EXPECT_EQ(r.walk.split_output, row(t.output, 3));
  EXPECT_EQ(r.walk.split_states.front().j1, 1002);  // 3006 keys in three parts
  EXPECT_EQ(r.walk.split_states.back().j1, 3006);
  EXPECT_TRUE(r.within) << r.fp64_error << " > " << r.tolerance;
  EXPECT_LE(r.l_ulps, 2);
  EXPECT_LE(r.fp64_error, 1e-5);
  EXPECT_LE(static_cast<int>(r.bins.size()), kDecodeStripBins);
  EXPECT_EQ(static_cast<int>(r.tail.size()), kDecodeTail);
  EXPECT_DOUBLE_EQ(r.bytes, 3006.0 * 2 * 32 * 4);
  // Another token of the same shape reuses the cache; a new shape builds one.
  e.run(job_for(shape, 6, 0, 0));
  EXPECT_EQ(e.builds(), 1);
  shape.seed = 8;
  e.run(job_for(shape, 6, 0, 0));
  EXPECT_EQ(e.builds(), 2);
  // The same shape and seed give the same numbers.
  DecodeEngine again(false);
  shape.seed = 7;
  EXPECT_EQ(again.run(job_for(shape, 5, 3, 3, 0.7)).walk.split_output, r.walk.split_output);
}

// A random cache takes the session's modifications at each token's position: under a window the
// kernel reads from the window's first key (on a panel of 16) and the machine's plan cuts only
// those keys; with RoPE, ALiBi (the standard slopes of the cache's heads) and a cap the token is
// the decode kernel on that token's problem with them, bit for bit, and within verify's bound of
// fp64. A change of modifications keeps the cache, but for RoPE turned off (its turned K goes).
TEST(DecodeView, ARandomCacheTakesTheSessionsModifications) {
  DecodeShape shape = random_cache(3000, 4, 2, 16, 7);
  DecodeEngine e(false);
  const DecodeToken plain = e.run(job_for(shape, 5, 0, 3));
  ASSERT_TRUE(plain.refusal.empty()) << plain.refusal.en;
  EXPECT_EQ(plain.first_key, 0);
  EXPECT_DOUBLE_EQ(plain.bytes, 3006.0 * 2 * 32 * 4);

  DecodeJob windowed = job_for(shape, 5, 0, 3);
  windowed.mods.window = 500;
  const DecodeToken w = e.run(windowed);
  ASSERT_TRUE(w.refusal.empty()) << w.refusal.en;
  const int first = (3006 - 500) / 16 * 16;
  EXPECT_EQ(w.first_key, first);
  EXPECT_EQ(w.plan.first, first) << "the machine's plan cuts the window's keys only";
  EXPECT_EQ(w.walk.split_states.back().j1, 3006);
  EXPECT_DOUBLE_EQ(w.bytes, (3006.0 - first) * 2 * 32 * 4);
  EXPECT_TRUE(w.within) << w.fp64_error << " > " << w.tolerance;
  EXPECT_GT(walk_max_abs_diff(w.walk.split_output, plain.walk.split_output), 1e-3);

  DecodeJob mods = job_for(shape, 5, 3, 3, 0.7);
  mods.mods.rope_theta = 500;
  mods.mods.alibi = true;
  mods.mods.softcap = 2;
  mods.mods.window = 700;
  const DecodeToken r = e.run(mods);
  ASSERT_TRUE(r.refusal.empty()) << r.refusal.en;
  EXPECT_TRUE(r.within) << r.fp64_error << " > " << r.tolerance;
  EXPECT_EQ(e.builds(), 1) << "the same keys and values under other modifications";
  // The same token built as a problem of its own, with the modifications, run through the kernel
  // whole: the same bits.
  auto cache = DecodeCache::random(shape);
  cache->set_mods(mods.mods);
  const Problem whole = test::first_keys(cache->at(5, 0.7), 3006);
  EXPECT_EQ(whole.mods.rope_theta, 500);
  const Trace t = cpu_decode(whole, 3);
  EXPECT_EQ(r.walk.split_output, row(t.output, 3));
  // And without them the plain token again, from the cache made again: RoPE's turned K goes with
  // RoPE (the same numbers).
  EXPECT_EQ(e.run(job_for(shape, 5, 0, 3)).walk.split_output, plain.walk.split_output);
  EXPECT_EQ(e.builds(), 2);
  EXPECT_EQ(e.run(windowed).walk.split_output, w.walk.split_output);
  EXPECT_EQ(e.builds(), 2) << "a window alone keeps the cache";
  // RoPE on an odd head size is refused, in both languages.
  DecodeShape odd = shape;
  odd.dim = 15;
  DecodeJob rope = job_for(odd, 0, 0, 0);
  rope.mods.rope_theta = 10000;
  const DecodeToken refused = e.run(rope);
  EXPECT_EQ(refused.refusal.id, Msg::RopeOddDim);
  EXPECT_EQ(refused.refusal.en, "RoPE turns pairs of values: d_k must be even, got 15");
  EXPECT_EQ(refused.refusal.text(Lang::Zh), "RoPE 成对旋转数值：d_k 必须是偶数，当前为 15");

  // A random cache takes no prefix (every token comes after its prompt), and says so.
  DecodeJob prefix = windowed;
  prefix.mods.prefix = 100;
  cache->set_mods(prefix.mods);
  EXPECT_EQ(cache->at(5, 1.0).mods.prefix, 0);
  EXPECT_EQ(cache->at(5, 1.0).mods.window, 500);
  EXPECT_EQ(cache_mods_text(prefix, Lang::En), "window 500");
  prefix.mods.window = 0;
  EXPECT_EQ(cache_mods_text(prefix, Lang::En), "");
}

// The view asks a random cache for the session's modifications too, says when the input brings
// documents that a random cache does not take, and its caveat bar names the window (on the input,
// the input's prefix and documents too).
TEST(DecodeView, TheSessionsModificationsReachARandomCache) {
  const test::TempDir dir("attnlab-decode-cache-mods");
  const std::string ids = dir.file("documents.txt");
  {
    std::ofstream f(ids);
    for (int i = 0; i < 64; ++i) f << (i < 30 ? 0 : 1) << "\n";
  }
  viewer::ViewerOptions o = test::cpu_random_options(64, 16, 16);
  o.documents_file = ids;
  Session s(o);
  ASSERT_EQ(s.problem().documents().size(), 64u);
  DecodeView v(ViewContext{s, true, true}, DecodeView::Options{}, /*probe=*/false);
  DecodeShape c = random_cache(4096, 8, 1, 64);
  v.set_shape(c);
  ModSettings mods;
  mods.alibi = true;
  mods.window = 300;
  mods.prefix = 10;  // the input's: a random cache takes none
  ASSERT_TRUE(s.set_mods(mods));
  v.sync(s);
  ASSERT_NE(v.shown(), nullptr);
  ASSERT_TRUE(v.shown()->refusal.empty()) << v.shown()->refusal.en;
  EXPECT_TRUE(v.shown()->job.mods == mods);
  EXPECT_TRUE(v.shown()->job.input_documents) << "the input's documents are not the cache's";
  EXPECT_FALSE(v.shown()->job.input_bias);
  EXPECT_EQ(v.shown()->first_key, (4097 - 300) / 16 * 16);
  EXPECT_TRUE(v.shown()->within);
  Problem windowed;
  windowed.mask = MaskKind::Causal;
  windowed.mods.window = 300;
  for (Lang l : {Lang::En, Lang::Zh}) EXPECT_EQ(v.mask_sentence(s, l), mask_sentence(windowed, l));
  // Back on the input, its documents are its own: the caveat bar says so.
  v.set_shape(DecodeShape{});
  v.sync(s);
  EXPECT_FALSE(v.shown()->job.input_documents);
  Problem input = s.problem();
  input.mask = MaskKind::Causal;
  EXPECT_EQ(v.mask_sentence(s, Lang::En), mask_sentence(input, Lang::En));
  EXPECT_NE(v.mask_sentence(s, Lang::En), mask_sentence(windowed, Lang::En));
}

TEST(DecodeView, ShapesThatDoNotFitAreRefusedInBothLanguages) {
  DecodeShape s;
  EXPECT_EQ(decode_shape_error(s).text(Lang::En), "") << "the input on screen";
  s.keys = 1048576;
  s.heads = 8;
  s.kv_heads = 8;
  s.dim = 128;
  EXPECT_NE(decode_shape_error(s).text(Lang::En).find("more than the view holds"), std::string::npos);
  EXPECT_NE(decode_shape_error(s).text(Lang::Zh).find("超过本视图的上限"), std::string::npos);
  s.kv_heads = 3;
  EXPECT_NE(decode_shape_error(s).text(Lang::En).find("multiple of the key/value heads"), std::string::npos);
  s.kv_heads = 1;
  EXPECT_EQ(decode_shape_error(s).text(Lang::En), "") << "a million keys of one key/value head at d = 128: within";
  s.keys = kDecodeMaxKeys + 1;
  EXPECT_NE(decode_shape_error(s).text(Lang::En), "");
  // Every offered cache fits with one key/value head at d = 128.
  for (int keys : decode_cache_choices()) {
    DecodeShape c;
    c.keys = keys;
    c.heads = 8;
    c.kv_heads = 1;
    EXPECT_EQ(decode_shape_error(c).text(Lang::En), "") << keys;
  }
  // The engine refuses what the view would not ask for, with the reason.
  DecodeShape big;
  big.keys = 1048576;
  big.heads = big.kv_heads = 8;
  DecodeEngine e(false);
  const DecodeToken r = e.run(job_for(big, 0, 0, 0));
  EXPECT_NE(r.refusal.en.find("more than the view holds"), std::string::npos);
  // The input on screen with more queries than keys cannot be decoded.
  Problem wide = random_problem(2, 2, 4, 4, 1, 1, 1);
  ProblemInputs in;
  in.q = MatrixF::Ones(6, 4);
  in.k = wide.k();
  in.v = wide.v();
  wide.set_inputs(in);
  EXPECT_THROW(DecodeCache::from_input(wide), InputError);
}

TEST(DecodeView, FlagsAreParsedAndCheckedThroughTheRegistry) {
  const ViewerOptions o =
      parse_viewer_args({"--view", "decode", "--cache", "65536", "--cache-heads", "32/8", "--cache-dim", "64", "--split", "4"});
  EXPECT_EQ(o.view, "decode");
  EXPECT_EQ(o.views.decode.keys, 65536);
  EXPECT_EQ(o.views.decode.heads, 32);
  EXPECT_EQ(o.views.decode.kv_heads, 8);
  EXPECT_EQ(o.views.decode.dim, 64);
  EXPECT_EQ(o.views.decode.splits, 4);
  EXPECT_EQ(parse_viewer_args({"--cache-heads", "8"}).views.decode.kv_heads, 8);
  EXPECT_EQ(test::message_of<InputError>([] { parse_viewer_args({"--cache-heads", "8/3"}); }),
            "--cache-heads H/G needs G dividing H (G key/value heads shared by H query heads), got '8/3'");
  EXPECT_EQ(test::message_of<InputError>([] { parse_viewer_args({"--cache", "-1"}); }),
            "--cache must be an integer from 0 to 1048576, got '-1'");
  EXPECT_NE(test::message_of<InputError>([] {
              parse_viewer_args({"--cache", "1048576", "--cache-heads", "8/8", "--cache-dim", "128"});
            }).find("more than the view holds"),
            std::string::npos);
  EXPECT_THROW(parse_viewer_args({"--split", "65"}), InputError);
}

TEST(DecodeView, StepsPlayAndTheHistoryFollowTheTokens) {
  Session s(test::cpu_viewer_options());
  DecodeView v(ViewContext{s, true, true}, DecodeView::Options{}, /*probe=*/false);
  v.sync(s);
  ASSERT_NE(v.shown(), nullptr);
  EXPECT_EQ(v.shown()->token, 0);
  EXPECT_EQ(v.shown()->tokens, 5);
  EXPECT_EQ(v.splits(), 2) << "two splits on the input: the merge is there to see";
  EXPECT_FALSE(v.busy());
  EXPECT_TRUE(v.on_action(Action::StepNext));
  v.sync(s);
  EXPECT_EQ(v.shown()->token, 1);
  EXPECT_EQ(v.shown()->walk.merges.size(), 1u);
  v.on_action(Action::StepHome);
  v.sync(s);
  EXPECT_EQ(v.shown()->token, 0);
  EXPECT_EQ(v.history().size(), 1u) << "stepping back starts the chart again";
  // Play: a token every 1 / speed seconds, wrapping at the end.
  v.set_speed(2);
  v.toggle_play();
  ASSERT_TRUE(v.playing());
  int asked = 0;
  for (int frame = 0; frame < 60; ++frame) {
    asked += v.tick(0.1) ? 1 : 0;
    v.sync(s);
  }
  EXPECT_EQ(asked, 12);
  EXPECT_EQ(v.shown()->token, 12 % 5);
  EXPECT_NEAR(v.tokens_per_second(), 2.0, 0.01);
  v.hidden();
  EXPECT_FALSE(v.playing()) << "work nobody sees stops";
  EXPECT_EQ(v.tokens_per_second(), 0);
  // A temperature change recomputes the token on screen.
  ASSERT_TRUE(s.set_temperature(0.5));
  v.sync(s);
  EXPECT_EQ(v.shown()->job.temperature, 0.5);
  EXPECT_EQ(v.broken(s), "");
  // So does a modification ticked on the input (the problem's revision stays: the same tokens):
  // the token on screen is the causal chain's row with it.
  const std::vector<double> plain = v.shown()->walk.split_output;
  ModSettings cap;
  cap.alibi = true;
  cap.softcap = 0.5;
  ASSERT_TRUE(s.set_mods(cap));
  v.sync(s);
  ASSERT_TRUE(v.shown()->refusal.empty()) << v.shown()->refusal.en;
  EXPECT_TRUE(v.shown()->job.mods == cap);
  Problem capped = s.problem();
  capped.mask = MaskKind::Causal;
  const TraceD ref = reference_fp64(capped);
  const int row = v.shown()->token;
  EXPECT_GT(walk_max_abs_diff(v.shown()->walk.split_output, plain), 1e-3) << "the cap changes the row";
  for (int c2 = 0; c2 < capped.d_v(); ++c2) EXPECT_NEAR(v.shown()->walk.split_output[c2], ref.output(row, c2), 1e-6);
  ASSERT_TRUE(s.set_mods(ModSettings{}));
  v.sync(s);
  EXPECT_LT(walk_max_abs_diff(v.shown()->walk.split_output, plain), 1e-12) << "and unticked, the plain row again";
  // A random cache; ↑/↓ pick the query head; its split count is its own.
  DecodeShape c = random_cache(4096, 8, 1, 64);
  v.set_shape(c);
  EXPECT_EQ(v.splits(), 0);
  v.sync(s);
  EXPECT_EQ(v.shown()->keys, 4097);
  EXPECT_EQ(v.shown()->heads, 8);
  for (int i = 0; i < 10; ++i) v.on_action(Action::QueryNext);
  EXPECT_EQ(v.head(), 7);
  v.sync(s);
  EXPECT_EQ(v.shown()->head, 7);
  EXPECT_EQ(v.shown()->kv_head, 0) << "8 query heads over one cache";
  v.set_shape(DecodeShape{});  // back to the input: one head
  EXPECT_EQ(v.head(), 0);
  // A refused shape is not taken.
  DecodeShape big = c;
  big.keys = 1048576;
  big.kv_heads = 8;
  v.set_shape(big);
  EXPECT_TRUE(v.shape().input());
  // The state dump.
  v.sync(s);
  const nlohmann::json j = nlohmann::json::parse(v.state_json());
  EXPECT_EQ(j["cache"], 0);
  EXPECT_EQ(j["shown"]["keys"], 1);
  EXPECT_EQ(j["shown"]["within_tolerance"], true);
  EXPECT_EQ(j["shown"]["splits"], 1);
}

TEST(DecodeView, EveryTextHasBothLanguages) {
  for (int i = 0; i < static_cast<int>(DT::Count_); ++i) {
    const std::string en = dtr(Lang::En, static_cast<DT>(i)), zh = dtr(Lang::Zh, static_cast<DT>(i));
    EXPECT_FALSE(en.empty()) << i;
    EXPECT_FALSE(zh.empty()) << i;
  }
  EXPECT_EQ(decode_texts().size(), 2u * static_cast<std::size_t>(DT::Count_));
}

// A small cache's read rate is said in a unit that shows it (80 B in 16 µs is 5.00 MB/s, not
// "0.0 GB/s"), and so is a tiny share of the machine's rate.
TEST(DecodeView, RatesAndSharesKeepTheirFigures) {
  EXPECT_EQ(rate_text(80e-9 / 16e-6), "5.00 MB/s");
  EXPECT_EQ(rate_text(512e-9 / 581e-6), "881 kB/s");
  EXPECT_EQ(rate_text(12.34), "12.3 GB/s");
  EXPECT_EQ(rate_text(150), "150 GB/s");
  EXPECT_EQ(rate_text(0.5), "500 MB/s");
  EXPECT_EQ(rate_text(0.9999), "1.00 GB/s");
  EXPECT_EQ(rate_text(3e-10), "0.30 B/s");
  EXPECT_EQ(rate_text(0), "0 B/s");
  EXPECT_EQ(share_text(42.0), "42.0");
  EXPECT_EQ(share_text(0.0417), "0.042");
  EXPECT_EQ(share_text(0.5), "0.50");  // two significant digits kept, as percent_text keeps them
  EXPECT_EQ(share_text(0), "0");
  // The rate's unit travels with the number: the texts themselves name none.
  for (DT t : {DT::Bytes, DT::BytesNoProbe})
    for (Lang l : {Lang::En, Lang::Zh}) EXPECT_EQ(std::string(dtr(l, t)).find("GB/s"), std::string::npos);
}

#ifdef ATTNLAB_VIEW_BINARY
// The viewer's flags reach the decode view's input: the demo with ALiBi, a cap and a prefix of 3
// decodes its last three tokens with them, within verify's bound.
// A window on the input: the kernel reads from the window's first key (rounded down to a panel
// of 16) on, so the bytes per token stop growing with the cache; the machine's plan cuts only
// those keys, a requested one the whole cache; the output is still the causal window's row.
TEST(DecodeView, AWindowsTokensReadTheWindowOnly) {
  Problem p = random_problem(40, 100, 16, 16, 31, 1, 1);  // 40 queries at the end of 100 keys
  p.mods.window = 20;
  validate(p);
  Problem causal = p;
  causal.mask = MaskKind::Causal;
  const TraceD ref = reference_fp64(causal);
  auto input = std::make_shared<const Problem>(p);
  DecodeEngine e(/*probe=*/false);
  for (int splits : {0, 2})
    for (int t : {0, 17, 39}) {
      SCOPED_TRACE(std::to_string(splits) + " splits, token " + std::to_string(t));
      DecodeJob j = job_for(DecodeShape{}, t, splits, 0, p.temperature);
      j.input = input;
      const DecodeToken r = e.run(j);
      ASSERT_TRUE(r.refusal.empty()) << r.refusal.en;
      const int keys = 60 + t + 1, first = (keys - 20) / 16 * 16;
      EXPECT_EQ(r.keys, keys);
      EXPECT_EQ(r.first_key, first);
      EXPECT_EQ(r.plan.first, splits == 0 ? first : 0);
      EXPECT_DOUBLE_EQ(r.bytes, (keys - first) * (16 + 16) * 4.0);
      for (int c = 0; c < p.d_v(); ++c) EXPECT_NEAR(r.walk.split_output[c], ref.output(t, c), 1e-5);
      EXPECT_TRUE(r.within);
    }
}

TEST(DecodeView, TheInputsFlagsReachTheDecodeView) {
  const test::TempDir dir("attnlab-decode-mods");
  const std::string png = dir.file("decode.png"), json = dir.file("decode.json");
  const test::BinaryRun r = test::run_binary(
      "timeout",
      {"60", test::view_binary(), "--screenshot", png, "--state-dump", json, "--view", "decode", "--lang", "en",
       "--backend", "cpu", "--size", "1024x700", "--score-mod", "alibi,softcap:5", "--mask-mod", "prefix:3",
       "--token", "1"},
      "SDL_VIDEODRIVER=dummy LANG=C.UTF-8");
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream in(json);
  const nlohmann::json j = nlohmann::json::parse(in);
  const auto& shown = j["decode"]["shown"];
  EXPECT_EQ(shown["first_query"], 2);
  EXPECT_EQ(shown["tokens"], 3);
  EXPECT_EQ(shown["keys"], 4);
  EXPECT_EQ(shown["within_tolerance"], true);
  // Token 1 is the demo's query 3 (分配) under those modifications, causal (the demo's one head
  // takes ALiBi's one-head slope).
  Problem causal = demo_problem();
  causal.mask = MaskKind::Causal;
  causal.mods.alibi = true;
  causal.mods.softcap = 5;
  causal.mods.prefix = 3;
  const TraceD ref = reference_fp64(causal);
  ASSERT_EQ(shown["output"].size(), static_cast<std::size_t>(causal.d_v()));
  for (int c = 0; c < causal.d_v(); ++c) EXPECT_NEAR(shown["output"][c].get<double>(), ref.output(3, c), 1e-6);
}

TEST(DecodeView, HeadlessScreenshotsInBothLanguages) {
  const test::TempDir dir("attnlab-decode-shots");
  for (const std::string lang : {"en", "zh"}) {
    SCOPED_TRACE(lang);
    const std::string png = dir.file("decode-" + lang + ".png"), json = dir.file("decode-" + lang + ".json");
    const test::BinaryRun r = test::run_binary(
        "timeout",
        {"60", test::view_binary(), "--screenshot", png, "--state-dump", json, "--view", "decode", "--lang", lang,
         "--backend", "cpu", "--size", "1280x800"},
        "SDL_VIDEODRIVER=dummy LANG=C.UTF-8");
    ASSERT_EQ(r.code, 0) << r.err;
    std::ifstream in(json);
    const nlohmann::json j = nlohmann::json::parse(in);
    EXPECT_EQ(j["view"], "decode");
    EXPECT_EQ(j["decode"]["shown"]["tokens"], 5);
    EXPECT_EQ(j["decode"]["shown"]["within_tolerance"], true);
    // The caveat bar names the causal mask the decode reads with, though the demo's is none.
    EXPECT_EQ(j["mask"], "none");
    EXPECT_EQ(j["mask_sentence"], mask_sentence(MaskKind::Causal, lang == "zh" ? Lang::Zh : Lang::En));
    const auto& st = j["decode"]["strip"];
    EXPECT_GT(st["w"].get<double>(), 200);
    // The strip's first slot holds the first token's key: a split colour, not the background.
    const Image img = read_png(png);
    const int x = static_cast<int>(st["x"].get<double>() + 5);
    const int y = static_cast<int>(st["y"].get<double>() + st["h"].get<double>() / 2);
    const std::uint8_t* p = img.at(x, y);
    EXPECT_GT(std::max({p[0], p[1], p[2]}), 120);
  }
}
#endif

// The combine shows the merges that bring keys in: a window leaves the first splits empty, whose
// merges change nothing (they had filled both places, and the one merge that mattered was "… 1
// more merges").
TEST(DecodeView, TheCombineShowsTheMergesThatBringKeysIn) {
  std::vector<WalkMerge> ms(3);
  for (int i = 0; i < 3; ++i) ms[i].index = i + 1;
  ms[2].l_b = 5.0;
  EXPECT_EQ(merges_shown(ms, 2), (std::vector<int>{0, 2}));
  ms[1].l_b = 2.0;
  ms[2].l_a = 2.0;
  EXPECT_EQ(merges_shown(ms, 2), (std::vector<int>{1, 2}));
  EXPECT_EQ(merges_shown(ms, 5), (std::vector<int>{0, 1, 2}));
  EXPECT_TRUE(merges_shown({}, 2).empty());
  EXPECT_STREQ(dtr(Lang::En, DT::MergeMoreOne), "… 1 other merge, the same rule");
}
