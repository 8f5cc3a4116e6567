// Heads in the viewer (issue 15): the flags (--bundle, --layer, --head, --heads, --view heads) good
// and bad; the session shows one head of a bundle's call exactly as core/bundle reads it, and
// one head of a random problem of several exactly as the CLI generates them (its reproduce command,
// run by the CLI, prints the same weights); the heads view's thumbnails equal each head's weights
// pooled independently; a new layer cancels the thumbnails in flight; the grid and the captions.
#include "viewer_test_util.h"
#include "heads_test_bundle.h"
#include "core/backend.h"
#include "core/bundle.h"
#include "core/modify.h"
#include "cpu/cpu_backend.h"
#include "tests/test_util.h"
#include "viewer/session/session.h"
#include "viewer/views/heads/heads_view.h"
#include "viewer/app/options.h"
#include "viewer/draw/colormap.h"
#include "viewer/draw/pooling.h"

#include <gtest/gtest.h>

#include <atomic>
#include <limits>
#include <condition_variable>
#include <mutex>
#include <sstream>

using namespace attnlab;
using namespace attnlab::viewer;

namespace {

ViewerOptions bundle_options(const std::string& dir, const std::string& layer, int head) {
  ViewerOptions o = test::cpu_viewer_options();
  o.bundle = dir;
  o.layer = layer;
  o.head = head;
  return o;
}

ViewerOptions random_options(int n, int d_k, int d_v, int heads, std::uint64_t seed = 0) {
  ViewerOptions o = test::cpu_viewer_options();
  o.random_n = n;
  o.d_k = d_k;
  o.d_v = d_v;
  o.heads = heads;
  o.seed = seed;
  return o;
}

// The weights of head `head` of `p` (stacked heads) pooled as a thumbnail, from a run that kept
// every stage: the reference the heads view's streamed thumbnails must equal.
std::vector<PooledCell> reference_thumb(const Problem& p, int head, PoolMode mode = PoolMode::Max) {
  Problem one = p;
  if (p.heads > 1) {
    const Eigen::Index n = p.n(), m = p.m();
    one.heads = 1;
    one.edit().q = p.q().middleRows(head * n, n);
    one.edit().k = p.k().middleRows(head * m, m);
    one.edit().v = p.v().middleRows(head * m, m);
  }
  const Trace t = cpu_staged(one);
  const AxisMap rows = map_axis(0, one.n(), std::min(one.n(), kThumbPixels), one.n());
  const AxisMap cols = map_axis(0, one.m(), std::min(one.m(), kThumbPixels), one.m());
  return pool_grid(t.weights.data(), one.n(), one.m(), t.mask.data(), static_cast<int>(t.mask.rows()), rows, cols,
                   mode);
}

void expect_same_cells(const std::vector<PooledCell>& got, const std::vector<PooledCell>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(got[i].masked, want[i].masked) << what << " pixel " << i;
    if (!want[i].masked) ASSERT_NEAR(got[i].value, want[i].value, 2e-6 * (1 + std::abs(want[i].value))) << what << " pixel " << i;
  }
}

// The test bundle (heads_test_bundle.h) in a directory of its own, and its manifest.
struct TestBundle {
  test::TempDir tmp{"attnlab-heads"};
  std::string dir = tmp.path().string();
  Bundle b = (test::write_heads_bundle(dir), read_bundle(dir));
};

HeadsSnapshot run_to_end(const HeadsJob& job) {
  HeadsRun run;
  run.start(job);
  run.join();
  return run.snapshot();
}

}  // namespace

// ---- options ----------------------------------------------------------------------------------

TEST(HeadsOptions, BundleLayerHeadHeadsAndTheView) {
  ViewerOptions o = parse_viewer_args({"--bundle", "d", "--layer", "blocks.1.attn", "--head", "3", "--view", "heads"});
  EXPECT_EQ(o.bundle, "d");
  EXPECT_EQ(o.layer, "blocks.1.attn");
  EXPECT_EQ(o.head, 3);
  EXPECT_EQ(o.view, "heads");
  o = parse_viewer_args({"--random", "64", "--heads", "4", "--head", "2"});
  EXPECT_EQ(o.heads, 4);
  EXPECT_EQ(o.head, 2);
  o = parse_viewer_args({"--random", "64"});
  EXPECT_EQ(o.heads, 1);
  EXPECT_EQ(o.head, 0);
  EXPECT_TRUE(o.bundle.empty());
}

TEST(HeadsOptions, BadCombinationsAreRefusedWithTheReason) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"--bundle", "d", "--random", "8"}, "give one input: --bundle DIR"},
      {{"--bundle", "d", "--q", "q.csv", "--k", "k.csv", "--v", "v.csv"}, "give one input"},
      {{"--bundle", "d", "--heads", "2"}, "--heads applies to --random problems only"},
      {{"--bundle", "d", "--mask", "causal"}, "--mask does not apply to --bundle"},
      {{"--layer", "1"}, "--layer applies to --bundle only"},
      {{"--heads", "2"}, "--heads applies to --random problems only"},
      {{"--head", "1"}, "--head applies to --bundle or to --random N --heads H"},
      {{"--random", "8", "--heads", "4", "--head", "4"}, "--head must be between 0 and 3, got 4"},
      {{"--random", "8", "--heads", "0"}, "--heads must be an integer from 1 to 64, got '0'"},
      {{"--random", "8", "--heads", "65"}, "--heads must be an integer from 1 to 64"},
      {{"--random", "8", "--head", "-1", "--heads", "2"}, "--head must be between 0 and 1, got -1"},
      {{"--bundle", "d", "--head", "-1"}, "--head must be between 0 and the call's last head, got -1"},
      {{"--bundle", ""}, "option --bundle needs a value"},
      {{"--view", "head"}, "--view must be one of chain, walk, heads, perf, precision, diff, decode, position, backward, got 'head'"},
      {{"--random", "65536", "--heads", "64", "--dk", "1024"}, "the viewer's limit is 2.0 GiB"},
  };
  for (const auto& [args, want] : bad) {
    std::string what;
    for (const std::string& a : args) what += a + " ";
    const std::string msg = test::message_of<InputError>([&] { parse_viewer_args(args); });
    EXPECT_NE(msg.find(want), std::string::npos) << what << "-> " << msg;
  }
}

// Generate in the window with a head count out of range: the same sentence as the flag's, in
// the UI language, and the problem on screen stays.
TEST(HeadsOptions, TheWindowsHeadsRefusalSpeaksBothLanguages) {
  Session c(test::cpu_viewer_options());
  EXPECT_FALSE(c.load_random(8, 4, 4, 0, kMaxRandomHeads + 1));
  EXPECT_EQ(c.error(), "--heads must be an integer from 1 to 64, got '65'");
  EXPECT_EQ(c.error_text(Lang::Zh), "--heads 必须是 1 到 64 的整数，当前为“65”");
  EXPECT_TRUE(c.demo());
  // Q, K and V over the viewer's limit: the flag's sentence too (one check for both).
  EXPECT_FALSE(c.load_random(65536, 1024, 1024, 0, 64));
  EXPECT_EQ(c.error_message().id, Msg::RandomInputsTooLarge);
  EXPECT_NE(c.error().find("the viewer's limit is 2.0 GiB"), std::string::npos) << c.error();
  EXPECT_NE(c.error_text(Lang::Zh).find("查看器的上限是 2.0 GiB"), std::string::npos) << c.error_text(Lang::Zh);
  EXPECT_TRUE(c.demo());
}

// ---- the session: one head of a bundle ------------------------------------------------------

TEST(HeadsSession, ShowsTheBundlesLayerAndHeadAsCoreReadsIt) {
  const TestBundle tb;
  const std::string& dir = tb.dir;
  const Bundle& b = tb.b;
  Session c(bundle_options(dir, "blocks.1.attn", 3));
  const auto expect_problem = [&](int layer, int head) {
    const Problem want = bundle_problem(b, layer, head);
    const Problem& got = c.problem();
    EXPECT_EQ(got.heads, 1);
    EXPECT_EQ(got.q(), want.q()) << layer << "/" << head;
    EXPECT_EQ(got.k(), want.k()) << layer << "/" << head;
    EXPECT_EQ(got.v(), want.v()) << layer << "/" << head;
    EXPECT_EQ(got.mask, want.mask) << layer << "/" << head;
    EXPECT_EQ(got.source, want.source);
    EXPECT_EQ(c.shown_layer(), layer);
    EXPECT_EQ(c.shown_head(), head);
  };
  EXPECT_TRUE(c.from_bundle());
  EXPECT_FALSE(c.demo());
  EXPECT_EQ(c.layer_count(), 2);
  EXPECT_EQ(c.heads(), 4);
  EXPECT_EQ(c.kv_heads(), 2);
  EXPECT_EQ(c.kv_head_of(1), 0);
  EXPECT_EQ(c.kv_head_of(3), 1);
  expect_problem(1, 3);
  EXPECT_EQ(c.problem().mask, MaskKind::Causal);  // the call's own
  EXPECT_NE(c.description(Lang::En).find("call 1 of 2 'blocks.1.attn', head 3 of 4"), std::string::npos)
      << c.description(Lang::En);
  EXPECT_EQ(c.reproduce_command().rfind("attnlab run --bundle " + dir + " --layer 1 --head 3 --query ", 0), 0u)
      << c.reproduce_command();
  EXPECT_EQ(c.reproduce_command().find("--mask"), std::string::npos) << "the CLI refuses --mask with --bundle";
  // Another head, another layer (the head stays: layer 0 has it too); each a new backend run.
  ASSERT_TRUE(c.set_head(1));
  expect_problem(1, 1);
  ASSERT_TRUE(c.set_layer(0));
  expect_problem(0, 1);
  EXPECT_EQ(c.problem().mask, MaskKind::None);  // layer 0 is bidirectional
  EXPECT_EQ(c.kv_heads(), 4);
  // The bundle's mask cannot be switched, said in the UI's words (it had quoted the command line's
  // --mask and --bundle); a head outside the layer is refused; the state stays.
  EXPECT_FALSE(c.set_mask(MaskKind::Causal));
  EXPECT_EQ(c.error(), "a bundle's call holds its own mask: it cannot be switched here");
  EXPECT_FALSE(c.toggle_mask());  // the M key
  EXPECT_EQ(c.error_text(Lang::Zh), "数据包里的调用带着自己的掩码：这里不能切换");
  EXPECT_EQ(c.problem().mask, MaskKind::None);
  EXPECT_FALSE(c.set_head(4));
  EXPECT_EQ(c.error_text(Lang::Zh), "头 4 超出范围：0..3");
  expect_problem(0, 1);
  // The weights on screen are the backend's for that head.
  const Trace ref = cpu_staged(bundle_problem(b, 0, 1));
  ASSERT_NE(c.stage_matrix(3), nullptr);
  EXPECT_EQ(*c.stage_matrix(3), ref.weights);
  // Away to the demo and back to the bundle.
  ASSERT_TRUE(c.load_demo());
  EXPECT_TRUE(c.demo());
  EXPECT_EQ(c.heads(), 1);
  ASSERT_TRUE(c.load_bundle(1));
  expect_problem(1, 0);
}

// The interactive viewer: head and layer changes run on the worker; the last one wins, and the query
// follows a layer of fewer tokens.
TEST(HeadsSession, AsyncHeadAndLayerChangesEndOnTheLastOne) {
  const TestBundle tb;
  Session c(bundle_options(tb.dir, "1", 0), /*async=*/true);
  ASSERT_TRUE(c.set_query(120));
  for (int h = 0; h < 4; ++h) ASSERT_TRUE(c.set_head(h));
  ASSERT_TRUE(c.set_layer(0));
  EXPECT_EQ(c.layer(), 0);  // the pickers follow at once
  EXPECT_EQ(c.head(), 3);
  c.wait();
  EXPECT_EQ(c.shown_layer(), 0);
  EXPECT_EQ(c.shown_head(), 3);
  EXPECT_EQ(c.problem().q(), bundle_problem(tb.b, 0, 3).q());
  EXPECT_EQ(c.query(), 39);  // layer 0 has 40 queries
  EXPECT_TRUE(c.error().empty()) << c.error();
}

TEST(HeadsSession, BadLayerOrHeadComesFromCoreBundle) {
  const TestBundle tb;
  const std::string& dir = tb.dir;
  const Bundle& b = tb.b;
  std::string msg = test::message_of<InputError>([&] { Session c(bundle_options(dir, "7", 0)); });
  EXPECT_EQ(msg, test::message_of<InputError>([&] { resolve_layer(b, "7"); }));
  msg = test::message_of<InputError>([&] { Session c(bundle_options(dir, "nope", 0)); });
  EXPECT_EQ(msg, test::message_of<InputError>([&] { resolve_layer(b, "nope"); }));
  msg = test::message_of<InputError>([&] { Session c(bundle_options(dir, "0", 4)); });
  EXPECT_EQ(msg, test::message_of<InputError>([&] { bundle_problem(b, 0, 4); }));
  msg = test::message_of<InputError>([&] { Session c(bundle_options(dir + "/missing", "0", 0)); });
  EXPECT_EQ(msg, test::message_of<InputError>([&] { read_bundle(dir + "/missing"); }));
}

// ---- the session: one head of a random problem of several ------------------------------------

TEST(HeadsSession, RandomHeadsAreTheCLIsHeadsAndDiffer) {
  ViewerOptions o = random_options(24, 8, 4, 4, 5);
  Session c(o);
  EXPECT_EQ(c.heads(), 4);
  const Problem all = random_problem(24, 8, 4, 5, 4);  // what `attnlab run --random 24 --heads 4` builds
  std::vector<MatrixF> q, k;
  for (int h = 0; h < 4; ++h) {
    ASSERT_TRUE(c.set_head(h));
    EXPECT_EQ(c.problem().heads, 1);
    EXPECT_EQ(c.problem().q(), all.q().middleRows(h * 24, 24)) << h;
    EXPECT_EQ(c.problem().k(), all.k().middleRows(h * 24, 24)) << h;
    EXPECT_EQ(c.problem().v(), all.v().middleRows(h * 24, 24)) << h;
    EXPECT_NE(c.description(Lang::En).find("head " + std::to_string(h) + " of 4"), std::string::npos);
    q.push_back(c.problem().q());
    k.push_back(c.problem().k());
  }
  for (int a = 0; a < 4; ++a)
    for (int b = a + 1; b < 4; ++b) {
      EXPECT_NE(q[a], q[b]) << a << " " << b;
      EXPECT_NE(k[a], k[b]) << a << " " << b;
    }
  // A pattern: the CLI's generator again (its heads share Q and K, core/patterns.h).
  o.pattern = parse_pattern("sink");
  o.head = 2;
  Session p(o);
  const Problem pat = pattern_problem(o.pattern, 24, 8, 4, 5, 4);
  EXPECT_EQ(p.problem().q(), pat.q().middleRows(2 * 24, 24));
  EXPECT_EQ(p.problem().v(), pat.v().middleRows(2 * 24, 24));
  EXPECT_NE(p.reproduce_command().find("--pattern sink --heads 4"), std::string::npos) << p.reproduce_command();
  // Generate keeps the heads unless told otherwise; the head shown stays when it exists.
  ASSERT_TRUE(c.set_head(3));
  ASSERT_TRUE(c.load_random(16, 8, 4, 1));
  EXPECT_EQ(c.heads(), 4);
  EXPECT_EQ(c.head(), 3);
  ASSERT_TRUE(c.load_random(16, 8, 4, 1, 2));
  EXPECT_EQ(c.heads(), 2);
  EXPECT_EQ(c.head(), 0);
  EXPECT_FALSE(c.load_random(16, 8, 4, 1, 65));
}

#ifdef ATTNLAB_BINARY
// The command under "the problem on screen, on the command line", run by the CLI: head h of a
// random problem of H heads (--heads H --head h) and a bundle's head print the viewer's weights.
// Both on the CPU backend.
TEST(HeadsSession, TheReproduceCommandPrintsTheHeadsWeights) {
  const TestBundle tb;
  const std::string& dir = tb.dir;
  ViewerOptions r = random_options(12, 4, 3, 3);
  r.head = 2;
  const Session random(r);
  const Session bundle(bundle_options(dir, "0", 2));
  for (const Session* c : {&random, &bundle}) {
    std::vector<std::string> args;
    std::istringstream words(c->reproduce_command());
    std::string w;
    words >> w;  // attnlab
    while (words >> w) args.push_back(w);
    const test::BinaryRun run = test::run_attnlab(args);
    ASSERT_EQ(run.code, 0) << c->reproduce_command() << "\n" << run.err;
    const MatrixF& want = *c->stage_matrix(3);
    const int first = 0;
    int seen = 0;
    for (const std::string& line : test::lines_of(run.out)) {
      if (line.rfind("weights,", 0) != 0) continue;
      std::vector<std::string> f;
      std::istringstream cells(line);
      for (std::string cell; std::getline(cells, cell, ',');) f.push_back(cell);
      ASSERT_EQ(f.size(), 6u) << line;
      const int row = std::stoi(f[1]) - first, col = std::stoi(f[2]);
      if (row < 0 || row >= c->n()) continue;
      EXPECT_NEAR(std::stod(f[5]), want(row, col), 1e-6) << c->reproduce_command() << ": " << line;
      ++seen;
    }
    EXPECT_EQ(seen, c->n() * c->problem().m()) << c->reproduce_command();
  }
}
#endif

// ---- the thumbnails ---------------------------------------------------------------------------

TEST(HeadsThumbnails, EachEqualsItsHeadsWeightsPooledIndependently) {
  const TestBundle tb;
  const std::string& dir = tb.dir;
  const Bundle& b = tb.b;
  Session c(bundle_options(dir, "0", 0));
  for (int layer : {0, 1}) {
    ASSERT_TRUE(c.set_layer(layer));
    const HeadsSnapshot s = run_to_end(heads_job(c));
    EXPECT_TRUE(s.finished);
    ASSERT_EQ(s.done, 4);
    ASSERT_EQ(s.thumbs.size(), 4u);
    std::vector<std::vector<PooledCell>> refs;
    for (int h = 0; h < 4; ++h) {
      const HeadThumb& t = s.thumbs[h];
      EXPECT_TRUE(t.error.empty()) << t.error;
      const int n = b.calls[layer].n;
      EXPECT_EQ(t.weights.rows, std::min(n, kThumbPixels));  // layer 1: 130 tokens pooled to 96
      refs.push_back(reference_thumb(bundle_problem(b, layer, h), 0));
      expect_same_cells(t.weights.cells, refs.back(), "layer " + std::to_string(layer) + " head " + std::to_string(h));
      double hi = 0;
      for (const PooledCell& p : refs.back())
        if (!p.masked) hi = std::max(hi, static_cast<double>(p.value));
      EXPECT_NEAR(t.max_weight, hi, 1e-6);
      // Layer 0 is not pooled: the median over the rows of each row's exact largest weight.
      if (layer == 0) {
        const Trace kept = cpu_staged(bundle_problem(b, layer, h));
        std::vector<double> best;
        for (int r = 0; r < n; ++r) best.push_back(kept.weights.row(r).maxCoeff());
        std::sort(best.begin(), best.end());
        EXPECT_NEAR(t.row_max, (best[n / 2 - 1] + best[n / 2]) / 2, 1e-6) << "head " << h;
      }
      const int k = thumb_zoom(t.weights);
      EXPECT_EQ(k, layer == 0 ? kThumbPixels / n : 1);  // a small head magnified, a pooled one not
      EXPECT_EQ(thumb_pixels(t, false).size(), t.weights.cells.size() * k * k);
    }
    // The heads differ (each its own pattern), so a thumbnail of the wrong head would fail above.
    for (int h = 1; h < 4; ++h) {
      bool differ = false;
      for (std::size_t i = 0; i < refs[0].size() && !differ; ++i) differ = refs[0][i].value != refs[h][i].value;
      EXPECT_TRUE(differ) << "layer " << layer << " heads 0 and " << h;
    }
  }
  // The causal layer's future keys are masked in its thumbnails.
  EXPECT_TRUE(run_to_end(heads_job(c)).thumbs[2].weights.cells[kThumbPixels - 1].masked);
}

// A call's files are read once for all its thumbnails, every head stacked; a call with a different
// mask per head (which one stacked problem cannot hold) is read one head at a time, and each
// thumbnail still shows its own head under its own mask.
// A small head's masked cell is hatched in stripes inside the cell (both greys in every masked
// cell of the 5-token causal demo), not one grey for the whole cell.
TEST(HeadsThumbnails, ASmallHeadsMaskedCellsAreHatchedWithinTheCell) {
  HeadThumb t;
  t.weights.rows = t.weights.cols = 5;
  t.weights.cells.resize(25);
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 5; ++j) {
      PooledCell& c = t.weights.cells[i * 5 + j];
      c.masked = j > i;
      c.value = c.masked ? 0.f : 0.2f;
    }
  t.weights.lo = 0.2;
  t.weights.hi = 0.2;
  t.weights.has_range = true;
  const int k = thumb_zoom(t.weights);
  EXPECT_EQ(k, kThumbPixels / 5);
  const std::vector<std::uint32_t> px = thumb_pixels(t, false);
  ASSERT_EQ(px.size(), static_cast<std::size_t>(25 * k * k));
  const int w = 5 * k;
  for (int i = 0; i < 5; ++i)
    for (int j = i + 1; j < 5; ++j) {
      bool dark = false, light = false;
      for (int y = i * k; y < (i + 1) * k; ++y)
        for (int x = j * k; x < (j + 1) * k; ++x) {
          dark |= px[static_cast<std::size_t>(y) * w + x] == pack_rgba(kMaskDark);
          light |= px[static_cast<std::size_t>(y) * w + x] == pack_rgba(kMaskLight);
        }
      EXPECT_TRUE(dark && light) << "cell (" << i << ", " << j << ")";
    }
}

TEST(HeadsThumbnails, ACallWithAMaskPerHeadIsReadHeadByHead) {
  const test::TempDir tmp("attnlab-heads-masks");
  const std::string dir = tmp.path().string();
  const Problem src = random_problem(8, 4, 4, 9, 2);
  write_npy(dir + "/q.npy", src.q());
  write_npy(dir + "/k.npy", src.k());
  write_npy(dir + "/v.npy", src.v());
  MatrixF mask = MatrixF::Zero(16, 8);
  for (int r = 0; r < 8; ++r) {
    mask(r, 7) = -std::numeric_limits<float>::infinity();      // head 0: key 7 blocked
    mask(8 + r, 0) = -std::numeric_limits<float>::infinity();  // head 1: key 0 blocked
  }
  write_npy(dir + "/mask.npy", mask);
  const nlohmann::json call = {{"name", "a"}, {"heads", 2}, {"kv_heads", 2}, {"n", 8}, {"m", 8}, {"d_k", 4},
                               {"d_v", 4}, {"scale", nullptr}, {"causal", false}, {"mask", "mask.npy"},
                               {"q", "q.npy"}, {"k", "k.npy"}, {"v", "v.npy"}, {"output", nullptr}};
  write_file(dir + "/manifest.json",
             nlohmann::json{{"format", "attnlab-bundle"}, {"version", 1}, {"tokens", nlohmann::json::array()},
                            {"calls", nlohmann::json::array({call})}}
                 .dump());
  const Bundle b = read_bundle(dir);
  EXPECT_THROW(bundle_problem(b, 0, std::nullopt), InputError) << "one stacked problem cannot hold both masks";
  Session c(bundle_options(dir, "0", 0));
  const HeadsSnapshot s = run_to_end(heads_job(c));
  ASSERT_EQ(s.done, 2);
  for (int h = 0; h < 2; ++h) {
    EXPECT_TRUE(s.thumbs[h].error.empty()) << s.thumbs[h].error;
    expect_same_cells(s.thumbs[h].weights.cells, reference_thumb(bundle_problem(b, 0, h), 0), "head " + std::to_string(h));
  }
  EXPECT_TRUE(s.thumbs[0].weights.cells[7].masked);
  EXPECT_FALSE(s.thumbs[0].weights.cells[0].masked);
  EXPECT_TRUE(s.thumbs[1].weights.cells[0].masked);
  EXPECT_FALSE(s.thumbs[1].weights.cells[7].masked);
}

TEST(HeadsThumbnails, RandomHeadsAtTheCurrentTemperatureAndMask) {
  const ViewerOptions o = random_options(200, 16, 8, 3);
  Session c(o);
  ASSERT_TRUE(c.set_temperature(0.5));
  ASSERT_TRUE(c.set_mask(MaskKind::Causal));
  const std::string key = heads_key(c);
  const HeadsSnapshot s = run_to_end(heads_job(c));
  EXPECT_EQ(s.key, key);
  Problem all = random_problem(200, 16, 8, 0, 3);
  all.temperature = 0.5;
  all.mask = MaskKind::Causal;
  for (int h = 0; h < 3; ++h) expect_same_cells(s.thumbs[h].weights.cells, reference_thumb(all, h), "head " + std::to_string(h));
  // The head shown is not part of the key (the thumbnails stay); the temperature is.
  ASSERT_TRUE(c.set_head(2));
  EXPECT_EQ(heads_key(c), key);
  ASSERT_TRUE(c.set_temperature(0.7));
  EXPECT_NE(heads_key(c), key);
}

// A mask file given with --random N --heads H masks every head's thumbnail as the chain view's
// head (they had been computed without its matrix).
TEST(HeadsThumbnails, RandomHeadsTakeTheMaskFile) {
  test::TempDir dir;
  std::string rows;
  for (int i = 0; i < 40; ++i) {
    for (int j = 0; j < 40; ++j) rows += std::string(j == 0 ? "" : ",") + (j <= i && (i - j) % 3 == 0 ? "0" : "-inf");
    rows += "\n";
  }
  const std::string mask = test::write_file(dir.file("m.csv"), rows);
  Session c(parse_viewer_args({"--random", "40", "--dk", "8", "--dv", "4", "--heads", "3", "--mask", mask, "--backend", "cpu"}));
  ASSERT_EQ(c.problem().mask, MaskKind::Custom);
  const HeadsSnapshot s = run_to_end(heads_job(c));
  for (int h = 0; h < 3; ++h) {
    ASSERT_TRUE(c.set_head(h)) << c.error();
    ASSERT_TRUE(s.thumbs[h].error.empty()) << s.thumbs[h].error;
    expect_same_cells(s.thumbs[h].weights.cells, reference_thumb(c.problem(), 0), "head " + std::to_string(h));
  }
}

// The thumbnails have the modifications of the head on screen: each is the weights the chain view
// shows for that head (RoPE, ALiBi with the head's own slope among the H, the cap, a window, a
// document file); a modification changed is a new key. They had been the plain heads.
TEST(HeadsThumbnails, RandomHeadsHaveTheModificationsOfTheHeadOnScreen) {
  ViewerOptions o = random_options(96, 8, 4, 3);
  o.mods.rope_theta = 100;
  o.rope_given = true;
  o.mods.alibi = true;
  o.mods.softcap = 2;
  o.score_mods_given = true;
  o.mods.window = 20;
  o.mask_mods_given = true;
  Session c(o);
  test::TempDir dir;
  std::string ids;
  for (int j = 0; j < 96; ++j) ids += (j == 0 ? "" : ",") + std::to_string(j / 40);
  ASSERT_TRUE(c.set_mod_files("", test::write_file(dir.file("docs.csv"), ids + "\n"))) << c.error();
  const std::string key = heads_key(c);
  const HeadsSnapshot s = run_to_end(heads_job(c));
  for (int h = 0; h < 3; ++h) {
    ASSERT_TRUE(c.set_head(h)) << c.error();
    ASSERT_TRUE(s.thumbs[h].error.empty()) << s.thumbs[h].error;
    expect_same_cells(s.thumbs[h].weights.cells, reference_thumb(c.problem(), 0), "head " + std::to_string(h));
  }
  EXPECT_EQ(heads_key(c), key);
  viewer::ModSettings m = c.requested_mods();
  m.window = 0;
  ASSERT_TRUE(c.set_mods(m)) << c.error();
  EXPECT_NE(heads_key(c), key);
  // One head: the thumbnail is the problem on screen, a new key with each modification.
  Session one(random_options(64, 8, 4, 1));
  const std::string plain = heads_key(one);
  m = one.requested_mods();
  m.softcap = 1;
  ASSERT_TRUE(one.set_mods(m)) << one.error();
  EXPECT_NE(heads_key(one), plain);
  expect_same_cells(run_to_end(heads_job(one)).thumbs[0].weights.cells, reference_thumb(one.problem(), 0), "one head");
}

// A bundle's head with ALiBi switched on has its own slope among the call's heads (the CLI's
// --head gives the same), and the thumbnails are those heads as the chain view shows them.
TEST(HeadsThumbnails, BundleHeadsWithAlibiKeepTheirOwnSlopes) {
  const TestBundle tb;
  Session c(bundle_options(tb.dir, "1", 0));
  viewer::ModSettings m = c.requested_mods();
  m.alibi = true;
  m.window = 30;
  ASSERT_TRUE(c.set_mods(m)) << c.error();
  const HeadsSnapshot s = run_to_end(heads_job(c));
  const std::vector<double> standard = standard_alibi_slopes(4);
  for (int h = 0; h < 4; ++h) {
    ASSERT_TRUE(c.set_head(h)) << c.error();
    EXPECT_EQ(alibi_slopes(c.problem()), std::vector<double>{standard[static_cast<std::size_t>(h)]}) << h;
    ASSERT_TRUE(s.thumbs[h].error.empty()) << s.thumbs[h].error;
    expect_same_cells(s.thumbs[h].weights.cells, reference_thumb(c.problem(), 0), "head " + std::to_string(h));
  }
}

// A new layer while the thumbnails of the old one are computed: the old run stops at its next
// head (its loader is never asked for the heads after the one in flight) and the new one's
// thumbnails are what the snapshot holds.
TEST(HeadsThumbnails, ANewLayerCancelsTheOldComputation) {
  const TestBundle tb;
  const std::string& dir = tb.dir;
  Session c(bundle_options(dir, "0", 0));
  HeadsJob old_job = heads_job(c);
  std::mutex mu;
  std::condition_variable cv;
  bool reached = false, release = false;
  std::vector<int> asked;
  const auto load = old_job.load;
  old_job.load = [&, load](int h) {
    std::unique_lock<std::mutex> lk(mu);
    asked.push_back(h);
    if (h == 1) {
      reached = true;
      cv.notify_all();
      cv.wait(lk, [&] { return release; });
    }
    return load(h);
  };
  HeadsRun run;
  run.start(old_job);
  {
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return reached; });
  }
  EXPECT_TRUE(run.running());
  ASSERT_TRUE(c.set_layer(1));
  run.cancel();  // what start() does first; here before the loader returns, so the order is known
  {
    std::lock_guard<std::mutex> lk(mu);
    release = true;
  }
  cv.notify_all();
  const HeadsJob new_job = heads_job(c);
  ASSERT_NE(new_job.key, old_job.key);
  run.start(new_job);
  run.join();
  EXPECT_EQ(asked, (std::vector<int>{0, 1})) << "the old layer went on after the cancel";
  const HeadsSnapshot s = run.snapshot();
  EXPECT_EQ(s.key, new_job.key);
  EXPECT_TRUE(s.finished);
  EXPECT_FALSE(s.cancelled);
  ASSERT_EQ(s.done, 4);
  EXPECT_EQ(s.thumbs[0].weights.rows, kThumbPixels);  // layer 1's 130 tokens, not layer 0's 40
  expect_same_cells(s.thumbs[3].weights.cells, reference_thumb(bundle_problem(read_bundle(dir), 1, 3), 0), "head 3");
}

// A new temperature keeps the layer's thumbnails on screen until each is recomputed; a new layer
// shows none of the old layer's.
TEST(HeadsThumbnails, OldPicturesStayOnlyForTheSameLayer) {
  const TestBundle tb;
  Session c(bundle_options(tb.dir, "0", 0));
  HeadsRun run;
  run.start(heads_job(c));
  run.join();
  ASSERT_TRUE(c.set_temperature(0.5));
  run.start(heads_job(c));
  for (const HeadThumb& t : run.snapshot().thumbs) EXPECT_FALSE(t.weights.cells.empty());
  run.join();
  HeadsSnapshot s = run.snapshot();
  EXPECT_EQ(s.done, 4);
  Problem h2 = bundle_problem(tb.b, 0, 2);
  h2.temperature = 0.5;
  expect_same_cells(s.thumbs[2].weights.cells, reference_thumb(h2, 0), "head 2 at T 0.5");
  ASSERT_TRUE(c.set_layer(1));
  run.start(heads_job(c));
  for (const HeadThumb& t : run.snapshot().thumbs) {
    if (t.done) EXPECT_EQ(t.weights.rows, kThumbPixels);  // layer 1's
    else EXPECT_TRUE(t.weights.cells.empty());
  }
  run.join();
}

// Mean pooling (the Pooling choice): the thumbnails are the mean-pooled weights, and no "rows"
// figure (a block's mean says nothing of a row's largest weight).
TEST(HeadsThumbnails, MeanPoolingGivesMeanPooledThumbnails) {
  const TestBundle tb;
  Session c(bundle_options(tb.dir, "1", 0));
  HeadsRun run;
  run.start(heads_job(c), kThumbPixels, PoolMode::Mean);
  run.join();
  const HeadsSnapshot s = run.snapshot();
  ASSERT_EQ(s.done, 4);
  for (int h = 0; h < 4; ++h) {
    expect_same_cells(s.thumbs[h].weights.cells, reference_thumb(bundle_problem(tb.b, 1, h), 0, PoolMode::Mean),
                      "head " + std::to_string(h));
    EXPECT_LT(s.thumbs[h].row_max, 0);
  }
}

// Leaving the view stops the run; showing it again computes the same job again.
TEST(HeadsThumbnails, StopForgetsTheKeySoTheSameJobRunsAgain) {
  const TestBundle tb;
  Session c(bundle_options(tb.dir, "1", 0));
  HeadsRun run;
  run.start(heads_job(c));
  EXPECT_EQ(run.key(), heads_key(c));
  run.stop();
  run.join();
  EXPECT_TRUE(run.key().empty());
  EXPECT_FALSE(run.running());
  run.start(heads_job(c));
  run.join();
  const HeadsSnapshot s = run.snapshot();
  EXPECT_TRUE(s.finished);
  EXPECT_EQ(s.done, 4);
}

// The last thumbnail and the run's end come in one revision: no snapshot, however often taken, has
// every head done while the run still goes on (one would draw the progress bar a last time, and
// the grid, where a click lands and what the state dump gives, would move a frame later). A
// thread taking snapshots back to back stands at the lock while the worker ends each head.
TEST(HeadsThumbnails, NoSnapshotHasEveryHeadDoneWhileTheRunGoesOn) {
  Session c(random_options(8, 4, 4, 2));
  const HeadsJob job = heads_job(c);
  int seen_done = 0;
  for (int rep = 0; rep < 200; ++rep) {
    HeadsRun run;
    run.start(job);
    for (;;) {
      const HeadsSnapshot s = run.snapshot();
      ASSERT_FALSE(s.running && s.done == 2) << "round " << rep;
      if (!s.running) {
        seen_done += s.done == 2;
        break;
      }
    }
  }
  EXPECT_EQ(seen_done, 200);
}

// ---- the grid and the captions ----------------------------------------------------------------

TEST(HeadsGrid, ThumbnailsFitTheAreaWithoutOverlapAndAreHit) {
  for (int heads : {1, 4, 7, 12, 64}) {
    const float x = 100, y = 50, w = 600, h = 500, cap = 20, gap = 8;
    const ThumbGrid g = layout_thumbs(heads, x, y, w, h, cap, gap, 384);
    ASSERT_GT(g.side, 0) << heads;
    EXPECT_LE(g.side, 384);
    EXPECT_GE(g.cols * g.rows, heads);
    for (int i = 0; i < heads; ++i) {
      const ThumbRect r = thumb_rect(g, i);
      EXPECT_GE(r.x, x - 0.5f) << heads << "/" << i;
      EXPECT_LE(r.x + r.w, x + w + 0.5f) << heads << "/" << i;
      EXPECT_GE(r.y, y);
      EXPECT_LE(r.y + r.h + cap, y + h + 0.5f) << heads << "/" << i;
      EXPECT_EQ(thumb_at(g, r.x + r.w / 2, r.y + r.h / 2), i);
      EXPECT_EQ(thumb_at(g, r.x + r.w / 2, r.y + r.h + cap / 2), -1) << "the caption is not the thumbnail";
      if (i > 0) {
        const ThumbRect p = thumb_rect(g, i - 1);
        EXPECT_TRUE(p.x + p.w <= r.x || p.y + p.h <= r.y) << heads << "/" << i;
      }
    }
    EXPECT_EQ(thumb_at(g, x - 5, y - 5), -1);
  }
  EXPECT_EQ(layout_thumbs(0, 0, 0, 100, 100, 10, 2, 50).side, 0);
}

TEST(HeadsGrid, CaptionsNameTheHeadItsKeyValueHeadAndItsMaxWeight) {
  HeadThumb t;
  EXPECT_EQ(head_caption(Lang::En, 3, -1, t), "head 3 · …");
  t.done = true;
  t.max_weight = 1;
  t.row_max = 0.931;
  EXPECT_EQ(head_caption(Lang::En, 3, -1, t), "head 3 · rows 93.1%");
  EXPECT_EQ(head_caption(Lang::En, 3, 1, t), "head 3 · kv 1 · rows 93.1%");
  EXPECT_EQ(head_caption(Lang::Zh, 3, 1, t), "头 3 · kv 1 · 行最大 93.1%");
  t.row_max = 0.004;
  EXPECT_EQ(head_caption(Lang::En, 0, -1, t), "head 0 · rows 0.40%");  // two significant digits
  t.row_max = -1;  // mean pooling
  EXPECT_EQ(head_caption(Lang::En, 0, -1, t), "head 0");
  EXPECT_EQ(head_caption(Lang::Zh, 5, 2, t), "头 5 · kv 2");
  t.error = "row 2 is fully masked";
  EXPECT_EQ(head_caption(Lang::Zh, 0, -1, t), "头 0 · 无法计算");
}
