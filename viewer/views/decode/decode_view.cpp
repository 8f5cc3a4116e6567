// The decode view's logic (see decode_view.h). The numbers come from cpu/decode.h (the kernel's
// items and combine), cpu/walk.h (its merge, read split by split) and the fp64 reference row; this
// file builds the cache, keeps the token on screen and its history, and pools the weights.
#include "core/gcc12_avx512.h"  // first: see there

#include "viewer/views/decode/decode_view.h"

#include "core/format.h"
#include "core/modify.h"
#include "core/parallel.h"
#include "core/stats.h"
#include "core/verify.h"
#include "cpu/cpu_backend.h"
#include "cpu/decode.h"
#include "cpu/values_range.h"
#include "cpu/walk.h"
#include "engine/bench.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <mutex>
#include <thread>

namespace attnlab::viewer {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

const std::vector<int>& decode_cache_choices() {
  static const std::vector<int> c = {4096, 16384, 65536, 262144, 1048576};
  return c;
}

const std::vector<DecodeHeads>& decode_heads_choices() {
  static const std::vector<DecodeHeads> c = {{1, 1}, {8, 1}, {8, 8}, {32, 8}};
  return c;
}

const std::vector<int>& decode_dim_choices() {
  static const std::vector<int> c = {64, 128};
  return c;
}

const std::vector<int>& decode_split_choices() {
  static const std::vector<int> c = {0, 1, 2, 3, 4, 8, 16, 32, 64};
  return c;
}

double decode_cache_bytes(const DecodeShape& s) {
  return (static_cast<double>(s.keys) + kDecodeGrow) * s.kv_heads * 2.0 * s.dim * sizeof(float);
}

Message decode_shape_error(const DecodeShape& s) {
  if (s.input()) return {};
  if (s.keys < 1 || s.keys > kDecodeMaxKeys)
    return message_of(Msg::DecodeCacheKeys, {std::to_string(kDecodeMaxKeys), std::to_string(s.keys)});
  if (s.dim < 1 || s.dim > 512) return message_of(Msg::DecodeHeadDim, {"512", std::to_string(s.dim)});
  if (s.heads < 1 || s.heads > 64 || s.kv_heads < 1 || s.heads % s.kv_heads != 0)
    return message_of(Msg::DecodeHeadsMultiple, {std::to_string(s.heads), std::to_string(s.kv_heads)});
  const double bytes = decode_cache_bytes(s);
  if (bytes > kDecodeMaxCacheBytes)
    return message_of(Msg::DecodeCacheBytes,
                      {format_number("%.2f", bytes / 1e9), format_number("%.2f", kDecodeMaxCacheBytes / 1e9)});
  return {};
}

// ---- the cache -----------------------------------------------------------------------------------

std::unique_ptr<DecodeCache> DecodeCache::from_input(const Problem& head) {
  const int n = head.n(), m = head.m();
  if (n > m) throw InputError(Msg::QueriesOverKeys, {std::to_string(n), std::to_string(m)});
  auto c = std::make_unique<DecodeCache>();
  ProblemInputs in;
  in.q = MatrixF::Zero(1, head.d_k());
  in.k = head.k();
  in.v = head.v();
  in.query_tokens = head.query_tokens();
  in.key_tokens = head.key_tokens();
  // The modifications at each token's position (the kernel places the one query at the end of
  // the keys it reads): RoPE, ALiBi (the head's slope), the cap, a window, the documents of every
  // position, a prefix; the bias is the token's row of the input's (at()).
  in.documents = head.documents();
  if (head.bias().size() > 0) {
    in.bias = MatrixF::Zero(1, m);
    c->bias_rows_ = head.bias();
  }
  c->problem_.set_inputs(std::move(in));
  c->problem_.scale = head.scale;
  c->problem_.mods = head.mods;
  c->problem_.source = head.source;
  c->problem_.source_zh = head.source_zh;
  // A prefix's positions are the prompt, read in one prefill where each sees all of the prefix:
  // decoding starts at the prefix's last position, the first whose row sees only keys before it.
  const int prefix_last = head.mods.prefix > 0 ? head.mods.prefix - 1 - (m - n) : 0;
  c->first_query_ = std::clamp(prefix_last, 0, n - 1);
  c->tokens_ = n - c->first_query_;
  c->queries_ = head.q().bottomRows(c->tokens_);
  c->first_keys_ = m - n + 1 + c->first_query_;
  c->input_ = true;
  c->max_abs_v_ = c->problem_.v().cwiseAbs().maxCoeff();
  return c;
}

std::unique_ptr<DecodeCache> DecodeCache::random(const DecodeShape& s) {
  if (const Message e = decode_shape_error(s); !e.empty()) throw error_of(e);
  auto c = std::make_unique<DecodeCache>();
  Problem r = random_problem(kDecodeGrow, s.keys + kDecodeGrow, s.dim, s.dim, s.seed, s.heads, s.kv_heads);
  ProblemInputs in;
  ProblemInputs& made = r.edit();  // nothing else holds it: no copy
  c->queries_ = std::move(made.q);
  in.k = std::move(made.k);
  in.v = std::move(made.v);
  in.q = MatrixF::Zero(s.heads, s.dim);
  c->problem_.set_inputs(std::move(in));
  c->problem_.heads = s.heads;
  c->problem_.kv_group = s.heads / s.kv_heads;
  c->tokens_ = kDecodeGrow;
  c->first_keys_ = s.keys + 1;
  c->max_abs_v_ = c->problem_.v().cwiseAbs().maxCoeff();
  return c;
}

void DecodeCache::set_mods(const ModSettings& m) {
  if (input_) return;
  if (m.rope_theta > 0 && problem_.d_k() % 2 != 0) throw InputError(Msg::RopeOddDim, {std::to_string(problem_.d_k())});
  ModSettings cache = m;
  cache.prefix = 0;
  set_mods_of(problem_, cache);  // no slopes given: the standard ones of the cache's heads
}

std::string cache_mods_text(const DecodeJob& j, Lang lang) {
  Problem mods;
  set_mods_of(mods, j.mods);
  mods.mods.prefix = 0;
  return has_modifications(mods) ? modifications_text(mods, lang) : std::string();
}

const Problem& DecodeCache::at(int token, double temperature) {
  // The cache's own Q (no copy); the derived data of the cache (the kernel's panels of K, a bf16
  // copy) stays with it from token to token.
  MatrixF& q = problem_.edit_q();
  for (int h = 0; h < problem_.heads; ++h) q.row(h) = queries_.row(static_cast<Eigen::Index>(h) * tokens_ + token);
  if (bias_rows_.size() > 0) problem_.edit_bias().row(0) = bias_rows_.row(first_query_ + token);
  problem_.temperature = temperature;
  return problem_;
}

std::string DecodeCache::query_label(int token) const {
  return input_ ? token_label(problem_.query_tokens(), first_query_ + token) : std::to_string(keys_at(token) - 1);
}

// ---- one token ---------------------------------------------------------------------------------

double decode_read_gbs(bool measure) {
  static std::mutex mu;
  static double gbs = -1;  // -1: never measured
  std::lock_guard<std::mutex> lk(mu);
  if (gbs < 0 && measure) {
    try {
      gbs = bench::host_read_probe_all_cores();
    } catch (const std::exception&) {
      gbs = 0;
    }
  }
  return std::max(gbs, 0.0);
}

DecodeToken DecodeEngine::run(const DecodeJob& job) {
  DecodeToken out;
  out.job = job;
  // A random cache is made again (the same numbers) when RoPE is turned off: its turned K goes.
  const bool rebuild = !cache_ || !(job.shape == shape_) ||
                       (job.shape.input() && (job.input_revision != input_revision_ || !(job.mods == mods_))) ||
                       (!job.shape.input() && rope_kept_ && !(job.mods.rope_theta > 0));
  if (rebuild) {
    const auto t0 = std::chrono::steady_clock::now();
    cache_.reset();
    cache_error_ = Message{};
    rope_kept_ = false;
    shape_ = job.shape;
    input_revision_ = job.input_revision;
    mods_ = job.mods;
    try {
      if (job.shape.input() && !job.input) throw InputError(Msg::DecodeNoInput, {});
      cache_ = job.shape.input() ? DecodeCache::from_input(*job.input) : DecodeCache::random(job.shape);
      ++builds_;
    } catch (const std::exception& e) {
      cache_error_ = message_of(e);
    }
    out.build_ms = ms_since(t0);
  }
  if (!cache_) {
    out.refusal = cache_error_;
    return out;
  }
  out.read_gbs = decode_read_gbs(probe_);

  const int token = std::clamp(job.token, 0, cache_->tokens() - 1);
  try {
    cache_->set_mods(job.mods);  // a random cache's: the same keys under the session's modifications
  } catch (const std::exception& e) {
    out.refusal = message_of(e);
    return out;
  }
  const Problem& p = cache_->at(token, job.temperature);
  const int keys = cache_->keys_at(token), head = std::clamp(job.head, 0, p.heads - 1);
  out.tokens = cache_->tokens();
  out.keys = keys;
  out.capacity = cache_->capacity();
  out.heads = p.heads;
  out.kv_heads = p.kv_heads();
  out.d_k = p.d_k();
  out.d_v = p.d_v();
  out.head = head;
  out.kv_head = p.kv_head(head);
  out.query_label = cache_->query_label(token);
  out.token = token;
  out.first_query = cache_->first_query();

  using namespace cpu::decode;
  try {
    const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    const SplitPlan plan = plan_splits(p, hw, std::min(job.splits, keys), keys);
    out.plan = plan;
    out.first_key = decode_first_key(p, keys);
    std::vector<Partial> partials;
    MatrixF output;
    // RoPE's turn of K and the kernel's layout of K come with the cache (a serving engine turns
    // and lays out a key once, when it writes it): made with the first token and kept (edit_q
    // keeps them), the new Q's turn before the clock starts, so the time is the kernel's (the
    // first token's had held the layout of the whole cache).
    prepare_keys(p);
    if (p.mods.rope_theta > 0) rope_kept_ = true;
    const auto t0 = std::chrono::steady_clock::now();
    // A V near fp32's largest values: acc overflows where the output fits, so the kernel runs again
    // on V · 2^-e and what is linear in V is multiplied back (cpu/values_range.h), as the CLI's decode.
    const cpu::ValuesRun ran = cpu::run_values_in_range_kept(
        p, [&](const Problem& q) { decode_keys(q, keys, plan, cancel_, nullptr, partials, output); });
    const int e = ran.e;
    const Problem& kp = ran.problem(p);  // the problem the kernel ran
    const double back = std::ldexp(1.0, e);
    out.kernel_ms = ms_since(t0);
    out.bytes = static_cast<double>(keys - out.first_key) * p.kv_heads() * (p.d_k() + p.d_v()) * sizeof(float);
    out.gbs = out.kernel_ms > 0 ? out.bytes / (out.kernel_ms * 1e6) : 0;

    // The selected head's row as the kernel combined it, split by split.
    const int g = out.kv_head;
    out.walk.head = head;
    out.walk.keys = keys;
    out.walk.d_k = p.d_k();
    out.walk.d_v = p.d_v();
    out.walk.temperature = p.temperature;
    out.walk.scale = online_scale(p);
    out.merged_l = walk_record_splits(kp, plan, keys, partials.data() + static_cast<std::size_t>(g) * plan.splits,
                                      head, 0, out.walk);
    out.walk.values_exponent = out.walk.split_values_exponent = e;
    for (double& x : out.walk.split_output) x *= back;

    // The two checks side by side (each one thread): one pass over every key, the same kernel
    // step as one split; and the fp64 row with its weights.
    if (cancel_ && cancel_->load()) throw Cancelled();
    Partial one;
    RowReference ref;
    parallel_items(2, std::min(2u, hw), [&](unsigned, std::size_t item) {
      if (item == 0) {
        MatrixF scratch;
        split_partial(kp, g, 0, keys, one, scratch, keys);
      } else {
        ref = reference_fp64_row(p, head, 0, keys);
      }
    });
    out.fp64 = std::move(ref.output);
    const std::vector<double>& w = ref.weights;
    const int r = partial_row(p, head, 0);
    out.one_pass_l = one.l[r];
    out.one_pass.resize(p.d_v());
    for (int c = 0; c < p.d_v(); ++c) out.one_pass[c] = one.acc(r, c) / one.l[r] * back;
    out.one_pass_diff = walk_max_abs_diff(out.walk.split_output, out.one_pass);
    const float ulp = std::nextafter(out.one_pass_l, std::numeric_limits<float>::infinity()) - out.one_pass_l;
    out.l_ulps = std::abs(static_cast<double>(out.merged_l) - out.one_pass_l) / ulp;

    // fp64, at verify's fp32 output tolerance: rtol 1e-5, atol 1e-6 max|ref| + 8 ulp(1) max|logit| max|V|.
    out.fp64_error = walk_max_abs_diff(out.walk.split_output, out.fp64);
    double max_ref = 0;
    for (double x : out.fp64) max_ref = std::max(max_ref, std::abs(x));
    const double atol = 1e-6 * max_ref + 8 * std::ldexp(1.0, -23) * ref.max_abs_logit * cache_->max_abs_v();
    out.within = true;
    double worst = -std::numeric_limits<double>::infinity();
    for (int c = 0; c < p.d_v(); ++c) {
      const double bound = atol + kRtolFp32 * std::abs(out.fp64[c]), err = std::abs(out.walk.split_output[c] - out.fp64[c]);
      if (!(err <= bound)) out.within = false;
      if (err - bound > worst) {
        worst = err - bound;
        out.tolerance = bound;
      }
    }

    // Each split's share of the weight: l_s exp(m_s - m) over the merged l (logit units).
    double big = -std::numeric_limits<double>::infinity(), total = 0;
    for (const WalkSplit& s : out.walk.split_states) big = std::max(big, s.m);
    for (const WalkSplit& s : out.walk.split_states) {
      const double share = std::isinf(s.m) ? 0.0 : s.l * std::exp(s.m - big);
      out.shares.push_back(share);
      total += share;
    }
    for (double& s : out.shares) s = total > 0 ? s / total : 0;

    // The strip: the weights max-pooled to at most kDecodeStripBins bins, and the newest keys.
    const int bins = std::min(keys, kDecodeStripBins);
    out.bins.assign(bins, 0.f);
    for (int j = 0; j < keys; ++j) {
      const int b = static_cast<int>(static_cast<long long>(j) * bins / keys);
      out.bins[b] = std::max(out.bins[b], static_cast<float>(w[j]));
    }
    for (int j = std::max(0, keys - kDecodeTail); j < keys; ++j) out.tail.push_back(static_cast<float>(w[j]));
  } catch (const Cancelled&) {
    out.cancelled = true;
  } catch (const std::exception& e) {
    out.refusal = message_of(e);
  }
  return out;
}

// ---- the view ----------------------------------------------------------------------------------

DecodeView::DecodeView(const ViewContext& c, const Options& o, bool probe)
    : engine_(std::make_unique<DecodeEngine>(probe)),
      worker_([e = engine_.get()](DecodeJob j) { return e->run(j); }) {
  shape_.keys = o.keys;
  shape_.heads = o.heads;
  shape_.kv_heads = o.kv_heads;
  shape_.dim = o.dim;
  if (o.splits >= 0) splits_input_ = splits_cache_ = o.splits;
  token_ = o.token;
  engine_->set_cancel(worker_.cancel_flag());
  if (c.session.async()) worker_.start();
}

DecodeView::~DecodeView() { worker_.stop(); }

const char* DecodeView::label(Lang lang) { return dtr(lang, DT::Label); }

bool DecodeView::parse_flag(const std::string& flag, const FlagValue& value, Options& o) {
  if (flag == "--cache") {
    o.keys = parse_flag_int<int>(flag, value(), 0, kDecodeMaxKeys);
  } else if (flag == "--cache-heads") {
    const std::string& v = value();
    const std::size_t slash = v.find('/');
    o.heads = parse_flag_int<int>(flag, v.substr(0, slash), 1, 64);
    o.kv_heads = slash == std::string::npos ? o.heads : parse_flag_int<int>(flag, v.substr(slash + 1), 1, 64);
    if (o.heads % o.kv_heads != 0)
      throw InputError(Msg::CacheHeadsDivide, {v});
  } else if (flag == "--cache-dim") {
    o.dim = parse_flag_int<int>(flag, value(), 1, 512);
  } else if (flag == "--token") {
    o.token = parse_flag_int<int>(flag, value(), 0, kDecodeMaxKeys);
  } else if (flag == "--split") {
    o.splits = parse_flag_int<int>(flag, value(), 0, kDecodeMaxSplits);
  } else {
    return false;
  }
  return true;
}

void DecodeView::finish_options(Options& o, bool, std::string&) {
  DecodeShape s;
  s.keys = o.keys;
  s.heads = o.heads;
  s.kv_heads = o.kv_heads;
  s.dim = o.dim;
  if (const Message e = decode_shape_error(s); !e.empty()) throw error_of(e);
}

std::string DecodeView::usage() {
  return "  --view decode: [--cache M] [--cache-heads H/G] [--cache-dim D] [--split S] [--token T]\n"
         "                 (one new token at a time against a KV cache: M keys of a random cache that grows\n"
         "                 by a key per token, 0 (default) the input on screen; H query heads over G\n"
         "                 key/value heads, default 8/1; head size D, default 128; S key splits, 0 the\n"
         "                 machine's choice (the default on a random cache, 2 on the input); T the token it\n"
         "                 opens on, from 0)\n";
}

std::vector<std::string> DecodeView::texts() const { return decode_texts(); }

DecodeJob DecodeView::wanted(const Session& s) const {
  DecodeJob j;
  j.shape = shape_;
  j.mods = mods_of(s.problem());
  if (shape_.input()) {
    j.input = s.shared_problem();
    j.input_revision = s.problem_revision();
  } else {
    j.input_bias = s.problem().bias().size() > 0;
    j.input_documents = !s.problem().documents().empty();
  }
  j.temperature = s.problem().temperature;
  j.token = token_;
  j.splits = splits();
  j.head = head_;
  return j;
}

void DecodeView::sync(const Session& s) {
  for (DecodeToken& t : worker_.take()) adopt(std::move(t));
  wanted_ = wanted(s);
  if (!posted_ || !posted_->same(*wanted_)) post(*wanted_);
}

void DecodeView::post(const DecodeJob& j) {
  posted_ = j;
  pending_ = true;
  if (std::optional<DecodeToken> r = worker_.post(j)) adopt(std::move(*r));
}

void DecodeView::adopt(DecodeToken t) {
  if (t.cancelled) return;  // a newer request replaced it
  const bool current = posted_ && t.job.same(*posted_);
  if (current) pending_ = false;
  // The settings of the chart: a new shape, input, split count or temperature starts it again.
  const std::uint64_t key = std::hash<std::string>{}(
      std::to_string(t.job.shape.keys) + "/" + std::to_string(t.job.shape.heads) + "/" +
      std::to_string(t.job.shape.kv_heads) + "/" + std::to_string(t.job.shape.dim) + "/" +
      std::to_string(t.job.input_revision) + "/" + mods_key(t.job.mods) + "/" + std::to_string(t.job.splits) + "/" +
      format_number("%.17g", t.job.temperature));
  if (key != history_key_) history_.clear();
  history_key_ = key;
  if (t.refusal.empty()) {
    if (!history_.empty() && history_.back().token >= t.token) history_.clear();  // rewound
    DecodePoint pt;
    pt.token = t.token;
    pt.keys = t.keys;
    pt.ms = t.kernel_ms;
    pt.floor_ms = t.read_gbs > 0 ? t.bytes / (t.read_gbs * 1e6) : 0;
    history_.push_back(pt);
    while (history_.size() > kDecodeHistory) history_.pop_front();
    if (playing_) {
      adopted_at_.push_back(clock_);
      while (adopted_at_.size() > 2 && clock_ - adopted_at_.front() > 2.0) adopted_at_.pop_front();
    }
  }
  if (current && t.tokens > 0) {
    token_ = std::clamp(token_, 0, t.tokens - 1);
    head_ = std::clamp(head_, 0, t.heads - 1);
  }
  shown_ = std::move(t);
}

bool DecodeView::tick(double dt) {
  clock_ += dt;
  if (!playing_) return false;
  elapsed_ += dt;
  if (pending_ || worker_.busy() || tokens() == 0) return false;
  if (elapsed_ < 1.0 / speed()) return false;
  elapsed_ = 0;
  token_ = token_ + 1 >= tokens() ? 0 : token_ + 1;
  if (wanted_) {
    wanted_->token = token_;
    post(*wanted_);
  }
  return true;
}

void DecodeView::toggle_play() {
  playing_ = !playing_;
  elapsed_ = 0;
  adopted_at_.clear();
  if (playing_ && tokens() > 0 && token_ >= tokens() - 1) token_ = 0;  // from the start again
}

void DecodeView::next() { token_ = tokens() > 0 ? std::min(token_ + 1, tokens() - 1) : token_ + 1; }
void DecodeView::prev() { token_ = std::max(token_ - 1, 0); }
void DecodeView::home() {
  token_ = 0;
  elapsed_ = 0;
}

void DecodeView::set_head(int h) {
  const int heads = shape_.input() ? 1 : shape_.heads;
  head_ = std::clamp(h, 0, heads - 1);
}

void DecodeView::set_shape(const DecodeShape& s) {
  if (s == shape_ || !decode_shape_error(s).empty()) return;
  shape_ = s;
  token_ = 0;
  set_head(head_);
  adopted_at_.clear();
}

void DecodeView::set_splits(int s) {
  (shape_.input() ? splits_input_ : splits_cache_) = std::clamp(s, 0, kDecodeMaxSplits);
}

void DecodeView::set_speed(double tps) {
  (shape_.input() ? speed_input_ : speed_cache_) = std::clamp(tps, kMinSpeed, kMaxSpeed);
}

double DecodeView::tokens_per_second() const {
  if (!playing_ || adopted_at_.size() < 2) return 0;
  const double span = adopted_at_.back() - adopted_at_.front();
  return span > 0 ? static_cast<double>(adopted_at_.size() - 1) / span : 0;
}

void DecodeView::prepare(Session& s, int) { sync(s); }

void DecodeView::hidden() { playing_ = false; }

bool DecodeView::on_action(Action a) {
  switch (a) {
    case Action::QueryPrev: set_head(head_ - 1); return true;
    case Action::QueryNext: set_head(head_ + 1); return true;
    default: return take_step_keys(*this, a);
  }
}

StepKeysHelp DecodeView::step_keys_help(Lang lang) const {
  const bool zh = lang == Lang::Zh;
  return {zh ? "播放 / 暂停解码" : "play / pause decoding", zh ? "后退 / 前进一个 token" : "one token back / forward",
          zh ? "回到第一个 token" : "back to the first token",
          shape_.heads > 1 ? (zh ? "上一个 / 下一个查询头" : "previous / next query head")
                           : (zh ? "无（缓存只有一个查询头）" : "nothing (the cache has one query head)"),
          {},  // no selected key
          zh ? "在头示意图的查询头上：选中该头" : "on a query head of the heads diagram: select that head",
          {},  // no Shift + click
          {},  // no map to zoom
          zh ? "切换其他视图的掩码（解码时每个新 token 只读取它及之前的键）"
             : "toggle the other views' mask (each new token reads the keys up to its own)"};
}

std::string DecodeView::state_json() const {
  nlohmann::json j;
  j["cache"] = shape_.keys;
  j["heads"] = shape_.heads;
  j["kv_heads"] = shape_.kv_heads;
  j["dim"] = shape_.dim;
  j["split_asked"] = splits();
  j["token"] = token_;
  j["head"] = head_;
  j["playing"] = playing_;
  j["speed"] = speed();
  j["tokens_per_second"] = tokens_per_second();
  j["busy"] = busy();
  j["history"] = history_.size();
  if (shown_) {
    const DecodeToken& t = *shown_;
    j["shown"] = {{"token", t.token},
                  {"first_query", t.first_query},
                  {"tokens", t.tokens},
                  {"keys", t.keys},
                  {"capacity", t.capacity},
                  {"heads", t.heads},
                  {"kv_heads", t.kv_heads},
                  {"d", t.d_k},
                  {"splits", t.plan.splits},
                  {"split_first", t.plan.first},
                  {"first_key", t.first_key},
                  {"head", t.head},
                  {"kv_head", t.kv_head},
                  {"error", t.refusal.en},
                  {"output", t.walk.split_output},
                  {"one_pass_max_abs_diff", t.one_pass_diff},
                  {"l_ulps", t.l_ulps},
                  {"fp64_error", t.fp64_error},
                  {"within_tolerance", t.within},
                  {"kernel_ms", t.kernel_ms},
                  {"bytes", t.bytes},
                  {"gbs", t.gbs},
                  {"read_gbs", t.read_gbs}};
  }
  j["strip"] = {{"x", strip.x}, {"y", strip.y}, {"w", strip.w}, {"h", strip.h}};
  j["heads_box"] = {{"x", heads_box.x}, {"y", heads_box.y}, {"w", heads_box.w}, {"h", heads_box.h}};
  return j.dump();
}

std::string DecodeView::mask_sentence(const Session& s, Lang lang) const {
  // Causal, with the session's window, and the input's prefix and documents (a random cache takes
  // neither: DecodeCache::set_mods).
  Problem causal = shape_.input() ? s.problem() : Problem{};  // a copy shares the inputs
  causal.mask = MaskKind::Causal;
  causal.mods.window = s.problem().mods.window;
  return attnlab::mask_sentence(causal, lang);
}

void DecodeView::dump(nlohmann::json& j, const Session&) const { j["decode"] = nlohmann::json::parse(state_json()); }

std::string DecodeView::broken(const Session&) const {
  if (token_ < 0) return "the decode view's token " + std::to_string(token_) + " is negative";
  const int heads = shape_.input() ? 1 : shape_.heads;
  if (head_ < 0 || head_ >= heads)
    return "the decode view's head " + std::to_string(head_) + " is outside its " + std::to_string(heads) + " heads";
  if (splits() < 0 || splits() > kDecodeMaxSplits) return "the decode view's split count is outside 0..64";
  if (!decode_shape_error(shape_).empty()) return "the decode view holds a refused shape";
  if (shown_ && !pending_ && shown_->refusal.empty() && shown_->tokens > 0 && token_ >= shown_->tokens)
    return "the decode view's token " + std::to_string(token_) + " is outside its " + std::to_string(shown_->tokens) +
           " tokens";
  return {};
}

}  // namespace attnlab::viewer
