// The decode view's logic (--view decode), free of SDL and ImGui (viewer/views/decode/panel.cpp
// draws it; unit-tested in tests/viewer/test_decode_view.cpp): one new token against a KV cache,
// token by token, through the CPU split-KV decode kernel's own steps (cpu/decode.h decode_keys:
// every split's partial state, the combine) and checked against a one-pass run of the same row
// and the fp64 reference.
//   - DecodeCache: the cache and the queries of every token. Either the input on screen (the
//     session's head, decoded token by token: token t's query against the keys of tokens 0..t, the
//     causal row t) or a random prompt of thousands to a million keys that grows by one key per
//     token, with H query heads over G key/value heads and head size d.
//   - DecodeEngine: one token on the view's worker: builds the cache when the shape changes,
//     measures the machine's read rate once (the bandwidth line), runs the kernel over the keys
//     of the token, keeps the selected head's split states and merges (cpu/walk.h
//     walk_record_splits, the kernel's merge), the one-pass state (split_partial over every key)
//     and the fp64 row with its weights (pooled for the strip), and the kernel's time and bytes.
//   - DecodeView: the settings (cache, heads, d, splits, the selected query head), the token on
//     screen, play (a token every 1 / speed seconds when the last one is in: the window never
//     waits for the kernel), the history of times per token and the tokens per second shown.
#pragma once

#include "core/problem.h"
#include "core/walk.h"
#include "cpu/decode.h"
#include "viewer/session/session.h"
#include "viewer/session/worker.h"
#include "viewer/views/view.h"

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace attnlab::viewer {

// The random caches the panel offers (prompt keys), their heads (query / key-value) and sizes.
const std::vector<int>& decode_cache_choices();
struct DecodeHeads {
  int heads = 1, kv_heads = 1;
  bool operator==(const DecodeHeads&) const = default;
};
const std::vector<DecodeHeads>& decode_heads_choices();
const std::vector<int>& decode_dim_choices();
const std::vector<int>& decode_split_choices();  // 0 (the machine's plan), then counts

constexpr int kDecodeMaxKeys = 1 << 20;       // --cache's largest prompt
constexpr int kDecodeGrow = 256;              // tokens a random cache grows by, then rewinds
constexpr double kDecodeMaxCacheBytes = 1.25 * 1073741824.0;  // K + V the view holds (fp32)
constexpr int kDecodeHistory = 240;           // tokens the time chart keeps
constexpr int kDecodeStripBins = 1024;        // the strip's weights pooled to at most this many
constexpr int kDecodeTail = 24;               // the newest slots, drawn one by one
constexpr int kDecodeMaxSplits = 64;

// What the cache is. keys 0: the input on screen (one head; heads, kv_heads and dim are then the
// input's). Otherwise a random prompt of `keys` keys, H = heads query heads over G = kv_heads
// key/value heads of size dim (d_k = d_v), seeded.
struct DecodeShape {
  int keys = 0;
  int heads = 8, kv_heads = 1, dim = 128;
  std::uint64_t seed = 0;
  bool input() const { return keys == 0; }
  bool operator==(const DecodeShape&) const = default;
};
// K + V of a random shape's cache at its full length (prompt + kDecodeGrow keys), fp32 bytes.
double decode_cache_bytes(const DecodeShape& s);
// Why the view refuses a shape (an empty Message when it does not): more than kDecodeMaxCacheBytes,
// kv_heads not dividing heads, keys or dim outside their range.
Message decode_shape_error(const DecodeShape& s);

// The cache and the queries of its tokens. The problem the kernel runs has one query per head and
// the cache's full length of keys; token t reads its first keys_at(t). Used by one thread at a time
// (the view's worker).
class DecodeCache {
 public:
  // The input on screen (`head` is one head, n <= m): token t is query row first_query() + t
  // against keys [0, first_query() + t + m - n] (the causal mask's row), with the input's
  // modifications at that position (RoPE, ALiBi, the cap, the bias's row, a window, the
  // documents, a prefix). A prefix of P positions is the prompt, prefilled: the first token is the
  // query at position P - 1 (0 without a prefix). InputError when n > m.
  static std::unique_ptr<DecodeCache> from_input(const Problem& head);
  // A random prompt (shape.keys keys) and kDecodeGrow tokens after it: token t's queries against
  // keys [0, shape.keys + t]. The same shape gives the same numbers.
  static std::unique_ptr<DecodeCache> random(const DecodeShape& shape);
  // A random cache's modifications: the session's RoPE, ALiBi (the standard slopes of the cache's
  // heads), cap and window, at each token's own position as on the input; the keys and values
  // stay. Not a prefix: every token of a random cache comes after its prompt and reads the keys
  // up to its own, which a prefix would not change. InputError for RoPE on an odd head size. The
  // input's modifications come with it (from_input): ignored there.
  void set_mods(const ModSettings& m);
  int tokens() const { return tokens_; }
  int first_query() const { return first_query_; }
  int keys_at(int token) const { return first_keys_ + token; }
  int capacity() const { return problem_.m(); }
  // The problem with token t's queries in place (its Q replaced: nothing else holds it).
  const Problem& at(int token, double temperature);
  std::string query_label(int token) const;
  double max_abs_v() const { return max_abs_v_; }

 private:
  Problem problem_;
  MatrixF queries_;        // every token's queries: head h's of token t at row h * tokens_ + t
  int tokens_ = 0;
  int first_keys_ = 1;     // keys token 0 reads
  int first_query_ = 0;    // the input's query of token 0
  MatrixF bias_rows_;      // the input's bias (n, m), or empty: token t's row is first_query_ + t
  bool input_ = false;     // the input on screen (its labels); else a random cache (positions)
  double max_abs_v_ = 0;
};

// One token's request.
struct DecodeJob {
  DecodeShape shape;
  std::shared_ptr<const Problem> input;  // shape.input(): the session's head on screen
  std::uint64_t input_revision = 0;      // Session::problem_revision of `input`
  ModSettings mods;                      // the session's modifications (a toggle keeps the revision)
  // A random cache: the session's input has a bias, document ids, which belong to the input's
  // positions and which a random cache does not take (the panel says so).
  bool input_bias = false, input_documents = false;
  int token = 0;
  double temperature = 1;
  int splits = 0;  // 0: the machine's plan (plan_splits)
  int head = 0;    // the query head whose row is shown
  unsigned parts = 1;
  // The same request (the input by revision, not by pointer).
  bool same(const DecodeJob& b) const {
    return shape == b.shape && input_revision == b.input_revision && mods == b.mods &&
           input_bias == b.input_bias && input_documents == b.input_documents && token == b.token && temperature == b.temperature && splits == b.splits &&
           head == b.head;
  }
};

// The modifications a random cache takes from the job (DecodeCache::set_mods: no prefix) as
// modifications_text says them in `lang`; "" when there are none.
std::string cache_mods_text(const DecodeJob& j, Lang lang);

// One token's result.
struct DecodeToken {
  DecodeJob job;        // as asked
  // Why nothing was computed (a refused shape, an overflow), with its id and arguments where the
  // error had them (both languages); empty when the token was computed.
  Message refusal;
  bool cancelled = false;
  int token = 0;        // the token computed (the job's, within the cache's tokens)
  int first_query = 0;  // the input's query of token 0 (after a prefix's prompt)
  int tokens = 0, keys = 0, capacity = 0;
  int heads = 1, kv_heads = 1, d_k = 0, d_v = 0;
  cpu::decode::SplitPlan plan;  // the token's splits: how many, where each begins
  int first_key = 0;    // the first key the kernel reads (decode_first_key, core/modify.h: a window's)
  int head = 0, kv_head = 0;
  std::string query_label;
  // The selected head's row: split_states, merges and split_output (the kernel's combine); l of
  // the merge in fp32.
  Walk walk;
  float merged_l = 0;
  std::vector<double> one_pass;     // the same row in one split over every key (split_partial)
  float one_pass_l = 0;
  double one_pass_diff = 0;         // max |merged - one pass|
  double l_ulps = 0;                // |l merged - l one pass| in ulps of the latter
  std::vector<double> fp64;         // reference_fp64_row
  double fp64_error = 0;            // max |merged - fp64|
  double tolerance = 0;             // verify's fp32 output bound at the row's worst element
  bool within = false;              // every element within atol + rtol |ref|
  std::vector<double> shares;       // each split's share of the row's softmax weight (sums to 1)
  std::vector<float> bins;          // the row's weights over keys [0, keys), max-pooled
  std::vector<float> tail;          // the weights of the last min(keys, kDecodeTail) keys
  double kernel_ms = 0;             // decode_keys for every head (the time per token)
  double bytes = 0;                 // K + V read by the kernel: (keys - first_key) * G * (d_k + d_v) * 4
  double gbs = 0;                   // bytes / kernel time
  double read_gbs = 0;              // the machine's measured read rate (0: not measured)
  double build_ms = 0;              // the cache was built for this token (0: reused)
};

// The machine's all-thread read rate, measured once per process (engine/bench.h
// host_read_probe_all_cores); `measure` false: only what was measured before (0 if nothing).
double decode_read_gbs(bool measure);

// Computes tokens on the view's worker thread; keeps the cache between tokens.
class DecodeEngine {
 public:
  explicit DecodeEngine(bool probe = true) : probe_(probe) {}
  void set_cancel(const std::atomic<bool>* c) { cancel_ = c; }
  DecodeToken run(const DecodeJob& job);
  int builds() const { return builds_; }  // caches built (tests)

 private:
  std::unique_ptr<DecodeCache> cache_;
  DecodeShape shape_;
  std::uint64_t input_revision_ = ~std::uint64_t{0};
  ModSettings mods_;
  Message cache_error_;
  bool rope_kept_ = false;  // the random cache holds RoPE's turned K (run: dropped with RoPE)
  bool probe_ = true;
  const std::atomic<bool>* cancel_ = nullptr;
  int builds_ = 0;
};

// One point of the time chart.
struct DecodePoint {
  int token = 0, keys = 0;
  double ms = 0;        // the kernel's time
  double floor_ms = 0;  // bytes / the machine's read rate (0: not measured)
};

// The text the view draws, both languages (viewer/views/decode/decode_text.cpp): printf formats
// where a text has numbers in it.
enum class DT {
  Label, First, Cache, CacheInput, CacheKeys, Heads, HeadsItem, Dim, Splits, SplitsAuto, Speed, TokenOf,
  Building, Computing, SentenceInput, SentenceCache, InputNote, StripTitle, Newest, Future, HeadsTitle,
  HeadsShare, HeadsOwn, SplitsTitle, ColSplit, ColKeys, ColShare, MergeTitle, MergeM, MergeAB, MergeL,
  MergeAcc, MergeMore, MergeMoreOne, MergeNone, Output, CheckOnePass, CheckFp64, Within, Outside, TimeTitle, Bytes,
  BytesNoProbe, Tps, TpsPaused, Measured, Floor, Caveat, Refused, HeadPick, SentenceFirst, QueryHeads, QueryHead,
  CacheKeyCount, CacheKeyOne, KvHeadCount, KvHeadOne, SplitCount, SplitsParallel, SplitOne, MergeOneKey,
  ValuesScaled, QueryHeadCount, QueryHeadOne, InputModsNote, PrefixPrompt, CustomMaskNote, Unread, SentenceWindow,
  SentenceCacheWindow, CacheModsNote, CacheBiasNote, CacheDocumentsNote, Count_
};
const char* dtr(Lang lang, DT t);
// A read rate in GB/s said with its unit where it shows three significant digits: "12.3 GB/s",
// "5.00 MB/s", "312 kB/s" (decimal units, as bench's), so a small cache's rate never reads
// "0.0 GB/s"; "0 B/s" for 0 or less.
std::string rate_text(double gbs);
// A percentage: one decimal from 1 %, two significant digits below ("0.042", "0.50"), "0" for 0.
std::string share_text(double percent);
// Which of a row's merges the combine shows, at most `most`, in order: those that bring visible keys
// together first (both states not empty), then those that bring a split's keys in at all; a merge
// of empty states changes nothing (a window's splits before it).
std::vector<int> merges_shown(const std::vector<WalkMerge>& ms, int most);
// Every text of the table in both languages (the font atlas' share of the view).
std::vector<std::string> decode_texts();

class DecodeView final : public View {
 public:
  struct Options {
    int keys = 0;     // --cache M (0: the input on screen)
    int heads = 8, kv_heads = 1;  // --cache-heads H/G
    int dim = 128;    // --cache-dim D
    int splits = -1;  // --split S (0: the machine's; -1: not given: 2 on the input, else 0)
    int token = 0;    // --token T: the token the view opens on (within the cache's tokens)
  };
  static const char* label(Lang lang);
  static bool parse_flag(const std::string& flag, const FlagValue& value, Options& o);
  static void finish_options(Options& o, bool shown, std::string& backend);
  static std::string usage();
  // `probe`: measure the machine's read rate for the bandwidth line (tests turn it off).
  DecodeView(const ViewContext& c, const Options& o, bool probe = true);
  ~DecodeView() override;

  void prepare(Session& s, int step) override;
  void hidden() override;
  bool on_action(Action a) override;
  StepKeysHelp step_keys_help(Lang lang) const override;
  void dump(nlohmann::json& j, const Session& s) const override;
  std::string broken(const Session& s) const override;
  bool info_panel() const override { return false; }
  // The causal sentence whatever the mask on screen: each new token reads the keys up to its own.
  std::string mask_sentence(const Session& s, Lang lang) const override;
  std::vector<std::string> texts() const override;

  // ---- what the panel and the tests drive ----
  // Adopts finished tokens and asks for the one wanted (the session's input and temperature,
  // the settings, the token): what prepare does every frame.
  void sync(const Session& s);
  // Playing: the next token once the last one is in and 1 / speed seconds have passed, asked for
  // at once (with what the last sync wanted besides). True when a token was asked for.
  bool tick(double dt);
  void toggle_play();
  bool playing() const { return playing_; }
  void next();
  void prev();
  void home();
  void set_head(int h);
  void set_shape(const DecodeShape& s);
  void set_splits(int s);  // of the cache on screen (the input and the random cache keep their own)
  void set_speed(double tokens_per_second);
  double speed() const { return shape_.input() ? speed_input_ : speed_cache_; }
  static constexpr double kMinSpeed = 0.25, kMaxSpeed = 60;

  const DecodeShape& shape() const { return shape_; }
  int splits() const { return shape_.input() ? splits_input_ : splits_cache_; }
  int head() const { return head_; }
  int token() const { return token_; }
  // The token on screen (null until the first is in) and whether a newer one is being computed.
  const DecodeToken* shown() const { return shown_ ? &*shown_ : nullptr; }
  bool busy() const { return worker_.busy() || pending_; }
  const std::deque<DecodePoint>& history() const { return history_; }
  // Tokens adopted per second over the last two seconds of play (0 when not playing).
  double tokens_per_second() const;
  // Where the panel drew the strip and the heads (the state dump), screen pixels.
  struct Rect4 {
    float x = 0, y = 0, w = 0, h = 0;
  } strip, heads_box;

  std::string state_json() const;

 private:
  void adopt(DecodeToken t);
  void post(const DecodeJob& j);
  DecodeJob wanted(const Session& s) const;
  int tokens() const { return shown_ ? shown_->tokens : 0; }

  DecodeShape shape_;
  int splits_input_ = 2, splits_cache_ = 0, head_ = 0, token_ = 0;
  bool playing_ = false;
  double speed_input_ = 1.0, speed_cache_ = 30.0;
  double elapsed_ = 0, clock_ = 0;
  std::deque<double> adopted_at_;  // clock_ of the tokens adopted while playing
  std::optional<DecodeToken> shown_;
  std::optional<DecodeJob> posted_, wanted_;  // the last asked for; what the last sync wanted
  bool pending_ = false;  // posted and not yet adopted
  std::deque<DecodePoint> history_;
  std::uint64_t history_key_ = 0;
  std::unique_ptr<DecodeEngine> engine_;  // before worker_: the worker stops first
  Worker<DecodeJob, DecodeToken> worker_;
};

void draw_panel(DecodeView& v, Shell& app, const Layout& l);

}  // namespace attnlab::viewer
