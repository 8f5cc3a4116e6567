// The walk view's logic (see walk_view.h). The numbers come from cpu/walk.h (the CPU fused
// kernel's update step) and cpu/walk_backward.h (the fused backward's step); this file only
// caches, pools for the strip and the bars, picks what to chart and holds the backward's words.
#include "viewer/views/walk/walk_view.h"

#include "viewer/draw/strings.h"

#include "cpu/walk.h"
#include "cpu/walk_backward.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

namespace attnlab::viewer {
namespace {

struct Entry {
  WB id;
  Text text;
};

constexpr Entry kTexts[] = {
    {WB::Pass, {"Pass", "传播方向"}},
    {WB::Forward, {"Forward", "前向"}},
    {WB::Backward, {"Backward", "反向"}},
    // Either pass's tile under the stepping buttons: its index (from 0, as the tables and the
    // sentences number tiles), how many tiles there are, its keys.
    {WB::TileOf, {"tile %d of %d (numbered from 0) · keys %s", "第 %d 块（共 %d 块，从 0 编号）· 键 %s"}},
    {WB::Strip,
     {"Logits x_j of query “%s” (%d keys), the fused backward's tiles of %d",
      "查询“%s”的 logits x_j（%d 个键），融合反向的块，每块 %d 个键"}},
    {WB::Legend,
     {"orange frame: the tile being processed · teal bar: its dS K already in dQ · hatched: skipped (never "
      "loaded, dS = 0) · dark grey: masked",
      "橙框：正在处理的块 · 青色条：其 dS K 已加进 dQ · 斜线：跳过（从不加载，dS = 0）· 深灰：已屏蔽"}},
    {WB::Stats,
     {"What the forward kept for the row: m = %s, l = %s, so L = m + log l = %s; and D = dO · O = %s",
      "前向为该行保存的：m = %s，l = %s，即 L = m + log l = %s；以及 D = dO · O = %s"}},
    {WB::Upstream,
     {"%s. Each tile: P_j = exp(x_j − m) / l recomputed (no N × N P kept between the passes), dP_j = dO · V_j, "
      "dS_j = P_j (dP_j − D), then dS_j K_j (times s/T, the scale over the temperature) added to the row's dQ.",
      "%s。每一块：重算 P_j = exp(x_j − m) / l（前向与反向之间不保存 N × N 的 P），dP_j = dO · V_j，"
      "dS_j = P_j (dP_j − D)，再把 dS_j K_j（乘以 s/T，即缩放除以温度）加进该行的 dQ。"}},
    {WB::ColKey, {"key", "键"}},
    {WB::Bars,
     {"%d keys, too many for a table: P_j (top) and dS_j (bottom) in %d bars, each the key of largest |value|",
      "%d 个键，表格放不下：P_j（上）和 dS_j（下）画成 %d 根柱，每根取 |值| 最大的键"}},
    {WB::ChartDsSum, {"Σ dS so far (→ 0)", "到此为止的 Σ dS（→ 0）"}},
    {WB::ChartDqNorm, {"|dQ| so far", "到此为止的 |dQ|"}},
    {WB::DqNow, {"dQ so far", "到此为止的 dQ"}},
    {WB::DqNorm, {"|dQ so far| = %s (first %d of %d values shown)", "当前 |dQ| = %s（显示前 %d 个值，共 %d 个）"}},
    {WB::Fused, {"fused backward's dQ", "融合反向的 dQ"}},
    {WB::Fp64, {"fp64 backward's dQ", "fp64 反向的 dQ"}},
    {WB::Final,
     {"final dQ: max|walk − fused backward| = %s · error against fp64 = %s",
      "最终 dQ：max|游走 − 融合反向| = %s · 相对 fp64 的误差 = %s"}},
    {WB::Rope,
     {"With RoPE the running dQ is in the rotated frame; the final dQ is turned back by RoPEᵀ.",
      "使用 RoPE 时，运行中的 dQ 在旋转后的坐标中；最终 dQ 用 RoPEᵀ 转回。"}},
    {WB::Caveat,
     {"Only this row's dQ: dK and dV sum over every query that reads a key, which the kernel's work items add "
      "up and one row cannot show. dO is a toy upstream gradient, not a model's loss; the numbers are the CPU "
      "fused backward's fp32.",
      "这里只有这一行的 dQ：dK 和 dV 要对读取某个键的所有查询求和，由内核的各个工作项累加，一行看不到。dO 是玩具上游梯度，"
      "不是模型的损失；数值是 CPU 融合反向的 fp32 结果。"}},
    {WB::Computing, {"computing the backward walk…", "正在计算反向游走…"}},
    {WB::Failed, {"backward walk refused: %s", "反向游走无法计算：%s"}},
};
constexpr bool texts_in_order() {
  for (std::size_t i = 0; i < std::size(kTexts); ++i)
    if (kTexts[i].id != static_cast<WB>(i)) return false;
  return std::size(kTexts) == static_cast<std::size_t>(WB::Count_);
}
static_assert(texts_in_order(), "one entry per WB, in WB's order");

// The strip and the tiles' states read the same fields of both walks' tiles.
template <class W>
TileState tile_state_of(const W& w, int tile, int cursor) {
  if (w.tiles.at(tile).skipped) return TileState::Skipped;
  if (tile < cursor) return TileState::Consumed;
  return tile == cursor ? TileState::Current : TileState::Pending;
}

template <class W>
std::vector<StripBin> strip_of(const W& w, int max_bins) {
  std::vector<StripBin> bins;
  if (w.keys <= 0 || max_bins <= 0) return bins;
  const int per = (w.keys + max_bins - 1) / max_bins;  // keys per bin
  for (const auto& t : w.tiles) {
    for (int j0 = t.j0; j0 < t.j1; j0 += per) {
      StripBin b;
      b.j0 = j0;
      b.j1 = std::min(t.j1, j0 + per);
      b.tile = t.index;
      b.value = -std::numeric_limits<double>::infinity();
      if (!t.skipped)
        for (int j = b.j0; j < b.j1; ++j) b.value = std::max(b.value, t.logits[j - t.j0]);
      b.masked = t.skipped || std::isinf(b.value);
      bins.push_back(b);
    }
  }
  return bins;
}

template <class W>
std::pair<double, double> logit_range_of(const W& w) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const auto& t : w.tiles)
    for (double x : t.logits)
      if (std::isfinite(x)) {
        lo = std::min(lo, x);
        hi = std::max(hi, x);
      }
  if (lo > hi) return {0.0, 1.0};
  return {lo, hi};
}

// One value per tile up to and including `cursor`: what the small charts plot.
template <class W, class F>
std::vector<float> series_of(const W& w, int cursor, F value) {
  std::vector<float> s;
  for (int t = 0; t <= cursor && t < static_cast<int>(w.tiles.size()); ++t) s.push_back(value(t));
  return s;
}

}  // namespace

const char* wbtr(Lang lang, WB id) { return kTexts[static_cast<int>(id)].text.in(lang); }

std::vector<std::string> walk_backward_texts() {
  std::vector<std::string> out = texts_of(kTexts);
  for (const Lang l : {Lang::En, Lang::Zh}) out.push_back(upstream_text(walk_backward_upstream(), l));
  // One synthetic walk with a skipped tile of each reason and a loaded one of each sign.
  BackwardWalk w;
  w.key_tokens = {"a", "b"};
  for (const WalkTile::Skip skip :
       {WalkTile::Skip::AfterQuery, WalkTile::Skip::Window, WalkTile::Skip::Document, WalkTile::Skip::None}) {
    BackwardWalkTile t;
    t.index = static_cast<int>(w.tiles.size());
    t.skip = skip;
    t.skipped = skip != WalkTile::Skip::None;
    w.tiles.push_back(t);
  }
  for (const double ds : {0.5, -0.5}) {
    BackwardWalkTile t;
    t.index = static_cast<int>(w.tiles.size());
    t.j1 = 1;
    t.top = 0;
    t.ds = {ds};
    w.tiles.push_back(t);
  }
  for (const Lang l : {Lang::En, Lang::Zh})
    for (int t = 0; t < static_cast<int>(w.tiles.size()); ++t) out.push_back(backward_walk_tile_sentence(w, t, l));
  out.push_back("x_j P_j dP_j dS_j |dQ| Σ ∘ −∞");
  return out;
}

const char* walk_pass_word(WalkPass p) { return p == WalkPass::Backward ? "backward" : "forward"; }

Upstream walk_backward_upstream() { return upstream_random(0); }

std::vector<double> walk_backward_dq_at(const BackwardWalk& w, int cursor) {
  const int t = std::min(cursor, static_cast<int>(w.tiles.size()) - 1);
  if (t >= 0) return w.tiles[t].dq;  // a skipped tile's is the one before it
  return std::vector<double>(static_cast<std::size_t>(std::max(0, w.d_k)), 0.0);
}

double walk_norm(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s);
}

std::vector<float> walk_series_ds_sum(const BackwardWalk& w, int cursor) {
  return series_of(w, cursor, [&](int t) { return static_cast<float>(w.tiles[t].ds_sum); });
}

std::vector<float> walk_series_dq_norm(const BackwardWalk& w, int cursor) {
  return series_of(w, cursor, [&](int t) { return static_cast<float>(walk_norm(walk_backward_dq_at(w, t))); });
}

WalkChartScale walk_chart_scale(const std::vector<float>& values) {
  WalkChartScale s;
  float lo = INFINITY, hi = -INFINITY;
  for (float x : values)
    if (std::isfinite(x)) {
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
  if (!(lo <= hi)) return s;
  s.from = s.lo = lo;
  s.to = s.hi = hi;
  if (hi - lo < 1e-6f) s.lo = lo - 0.5f, s.hi = hi + 0.5f;
  return s;
}

std::vector<WalkChartPoint> walk_chart_points(const std::vector<float>& values, int count, const WalkChartScale& s,
                                              float w, float h) {
  std::vector<WalkChartPoint> out(static_cast<std::size_t>(std::max(count, 0)));
  for (int i = 0; i < count; ++i) {
    WalkChartPoint& p = out[static_cast<std::size_t>(i)];
    p.x = count == 1 ? w / 2 : w * static_cast<float>(i) / static_cast<float>(count - 1);
    const float v = i < static_cast<int>(values.size()) ? values[static_cast<std::size_t>(i)] : NAN;
    if (!std::isfinite(v)) continue;
    p.has = true;
    p.y = h - std::clamp((v - s.lo) / (s.hi - s.lo), 0.0f, 1.0f) * h;
  }
  return out;
}

std::vector<float> walk_bars(const std::vector<double>& values, int bins) {
  std::vector<float> out;
  const int n = static_cast<int>(values.size());
  if (n == 0 || bins <= 0) return out;
  const int per = (n + bins - 1) / bins;
  for (int j0 = 0; j0 < n; j0 += per) {
    double best = 0;
    for (int j = j0; j < std::min(n, j0 + per); ++j)
      if (std::isfinite(values[j]) && std::abs(values[j]) > std::abs(best)) best = values[j];
    out.push_back(static_cast<float>(best));
  }
  return out;
}

std::string WalkBackwardCompanion::key() const {
  return "walk backward: query " + std::to_string(query_) + ", tile " + std::to_string(tile_);
}

std::shared_ptr<const CompanionResult> WalkBackwardCompanion::compute(const CompanionInput& in) const {
  auto out = std::make_shared<WalkBackwardResult>();
  out->problem = in.problem;
  const Problem& p = *in.problem;
  try {
    const int query = std::clamp(query_, 0, std::max(0, p.n() - 1));
    out->walk = std::make_shared<const BackwardWalk>(
        walk_backward_row(p, walk_backward_upstream(), 0, query, std::clamp(tile_, 1, std::max(1, p.m()))));
  } catch (const Cancelled&) {
    throw;
  } catch (const std::exception& e) {
    out->walk.reset();
    out->error = message_of(e);
  }
  return out;
}

std::vector<int> walk_tile_choices(int keys, int current) {
  std::vector<int> c;
  if (keys <= kWalkAllSizesMax) {
    for (int b = 1; b <= keys; ++b) c.push_back(b);
    return c;
  }
  for (int b = 1; b <= keys; b *= 2) c.push_back(b);
  if (c.back() != keys) c.push_back(keys);
  if (current >= 1 && current <= keys && !std::binary_search(c.begin(), c.end(), current))
    c.insert(std::lower_bound(c.begin(), c.end(), current), current);
  return c;
}

int walk_tile_for(int requested, bool demo, int keys) {
  // As the CLI's walk --tile B: kept as given (core's default when 0), the whole row above the keys.
  return std::min(requested > 0 ? requested : default_walk_tile(demo, keys), std::max(1, keys));
}

std::vector<std::string> walk_ui_text() {
  // One synthetic walk holding every kind of tile the sentences describe.
  const double inf = std::numeric_limits<double>::infinity();
  Walk w;
  w.query = 1;
  w.tile = 2;
  auto tile = [&](bool skipped, double prev, double tmax, double m, int masked) {
    WalkTile t;
    t.index = static_cast<int>(w.tiles.size());
    t.j0 = 2 * t.index;
    t.j1 = t.j0 + 2;
    t.skipped = skipped;
    t.m_prev = prev;
    t.tile_max = tmax;
    t.m = m;
    t.alpha = 0.5;
    t.masked = masked;
    w.tiles.push_back(t);
  };
  tile(false, -inf, -inf, -inf, 2);  // fully masked, nothing yet
  tile(false, -inf, 1.0, 1.0, 1);    // the first keys that count
  tile(false, 1.0, 2.0, 2.0, 0);     // a larger logit
  tile(false, 2.0, 1.0, 2.0, 1);     // smaller
  tile(false, 2.0, -inf, 2.0, 2);    // fully masked later
  tile(true, 2.0, -inf, 2.0, 2);     // skipped
  std::vector<std::string> out;
  for (Lang l : {Lang::Zh, Lang::En})
    for (int t = 0; t < static_cast<int>(w.tiles.size()); ++t) out.push_back(walk_tile_sentence(w, t, l));
  out.push_back("−∞ +∞ — … α ≤ > –");
  return out;
}

TileState walk_tile_state(const Walk& w, int tile, int cursor) { return tile_state_of(w, tile, cursor); }
TileState walk_tile_state(const BackwardWalk& w, int tile, int cursor) { return tile_state_of(w, tile, cursor); }
std::vector<StripBin> walk_strip(const Walk& w, int max_bins) { return strip_of(w, max_bins); }
std::vector<StripBin> walk_strip(const BackwardWalk& w, int max_bins) { return strip_of(w, max_bins); }
std::pair<double, double> walk_logit_range(const Walk& w) { return logit_range_of(w); }
std::pair<double, double> walk_logit_range(const BackwardWalk& w) { return logit_range_of(w); }

std::vector<float> walk_series_m(const Walk& w, int cursor) {
  return series_of(w, cursor, [&](int t) {
    return std::isfinite(w.tiles[t].m) ? static_cast<float>(w.tiles[t].m) : std::nanf("");
  });
}

std::vector<float> walk_series_l(const Walk& w, int cursor) {
  return series_of(w, cursor, [&](int t) { return static_cast<float>(w.tiles[t].l); });
}

std::vector<float> walk_series_convergence(const Walk& w, int cursor) {
  return series_of(w, cursor, [&](int t) {
    const auto& out = w.tiles[t].output;
    if (out.empty() || w.staged_output.size() != out.size()) return std::nanf("");
    const double d = walk_max_abs_diff(out, w.staged_output);
    return d > 1e-12 ? static_cast<float>(std::log10(d)) : -12.f;
  });
}

const Walk* WalkView::update(const Session& c, int tile) {
  const Problem& p = c.problem();
  if (c.revision() == revision_ && c.query() == query_ && tile == tile_ && &p == problem_)
    return walk();
  // A new tile size or a new problem (demo / random) starts at the end again; a temperature,
  // mask or query change keeps the tile the user stepped to.
  const bool new_walk_shape = tile != shape_tile_ || c.problem_revision() != shape_problem_;
  shape_tile_ = tile;
  shape_problem_ = c.problem_revision();
  problem_revision_ = c.problem_revision();
  revision_ = c.revision();
  query_ = c.query();
  tile_ = tile;
  problem_ = &p;
  error_.clear();
  try {
    Walk w = walk_row(p, 0, c.query(), std::clamp(tile, 1, std::max(1, p.m())));
    check_walk(p, w);
    walk_ = std::move(w);
    ++computed_;
  } catch (const std::exception& e) {
    walk_.reset();
    error_ = e.what();
  }
  adopted(new_walk_shape);
  return walk();
}

int WalkView::count() const {
  if (pass_ == WalkPass::Backward) return bwalk_ ? static_cast<int>(bwalk_->tiles.size()) : 0;
  return walk_ ? static_cast<int>(walk_->tiles.size()) : 0;
}

void WalkView::adopted(bool new_shape) {
  if (count() == 0) return;  // nothing of this pass yet: the cursor waits for its walk
  if (new_shape) at_end_ = true;
  if (at_end_) cursor_ = std::max(0, count() - 1);
  cursor_ = std::clamp(cursor_, 0, std::max(0, count() - 1));
}

void WalkView::prepare(Session& s, int) {
  if (pass_ != WalkPass::Backward) return;
  const int t = walk_tile_for(tile, s.demo(), s.problem().m());
  if (!companion_ || companion_->query() != s.query() || companion_->tile() != t)
    companion_ = std::make_shared<const WalkBackwardCompanion>(s.query(), t);
  s.set_companion(companion_);  // the app hands it over before prepare: this frame's, at once
}

const BackwardWalk* WalkView::update_backward(const Session& s) {
  const WalkBackwardResult* r = s.companion<WalkBackwardResult>();
  if (!r) {
    // Asked for and not there yet: the last one stays on screen meanwhile (it names its own query).
    status_ = Status::Computing;
    return bwalk_.get();
  }
  if (!r->walk) {
    status_ = Status::Failed;
    berror_ = r->error;
    bwalk_.reset();
    return nullptr;
  }
  status_ = Status::Ok;
  if (r->walk != bwalk_) {
    // As the forward: a new tile size or problem starts at the end, a temperature, mask or query
    // change keeps the tile the user stepped to.
    const bool new_shape = r->walk->tile != shape_tile_ || s.problem_revision() != shape_problem_;
    bwalk_ = r->walk;
    shape_tile_ = bwalk_->tile;
    shape_problem_ = s.problem_revision();
    adopted(new_shape);
  }
  return bwalk_.get();
}

void WalkView::next() {
  cursor_ = std::min(cursor_ + 1, std::max(0, count() - 1));
  at_end_ = cursor_ == count() - 1;
}

void WalkView::prev() {
  cursor_ = std::max(cursor_ - 1, 0);
  at_end_ = false;
}

void WalkView::home() {
  cursor_ = 0;
  at_end_ = count() <= 1;
  elapsed_ = 0;
}

void WalkView::toggle_play() {
  playing_ = !playing_;
  elapsed_ = 0;
  // Play from the start when the walk is already at its end.
  if (playing_ && cursor_ >= count() - 1) {
    cursor_ = 0;
    at_end_ = count() <= 1;
  }
}

bool WalkView::tick(double dt) {
  if (!playing_ || count() <= 1) return false;
  elapsed_ += dt;
  if (elapsed_ < 1.0 / speed_) return false;
  elapsed_ = 0;
  cursor_ = cursor_ + 1 >= count() ? 0 : cursor_ + 1;
  at_end_ = false;
  return true;
}

std::string WalkView::state_json() const {
  nlohmann::json j;
  j["pass"] = walk_pass_word(pass_);
  j["tile"] = pass_ == WalkPass::Backward ? (bwalk_ ? bwalk_->tile : 0) : tile_;
  j["tiles"] = count();
  j["cursor"] = cursor_;
  j["playing"] = playing_;
  if (pass_ == WalkPass::Backward) {
    j["status"] = status_ == Status::Ok ? "ok" : status_ == Status::Failed ? "failed" : "computing";
    j["error"] = berror_.text(Lang::En);
    j["dout_seed"] = walk_backward_upstream().seed;
    if (bwalk_ && count() > 0) {
      const BackwardWalk& w = *bwalk_;
      const BackwardWalkTile& t = w.tiles.at(cursor_);
      j["query"] = w.query;
      j["keys"] = {t.j0, t.j1};
      j["skipped"] = t.skipped;
      int skipped = 0;
      for (const BackwardWalkTile& u : w.tiles) skipped += u.skipped ? 1 : 0;
      j["skipped_tiles"] = skipped;
      j["m"] = w.m;
      j["l"] = w.l;
      j["lse"] = w.lse;
      j["D"] = w.D;
      j["p"] = t.p;
      j["ds"] = t.ds;
      j["ds_sum"] = t.ds_sum;
      j["dq"] = walk_backward_dq_at(w, cursor_);
      j["final_dq"] = w.dq;
      j["fused_dq"] = w.fused_dq;
      j["fused_max_abs_diff"] = w.fused_diff;
      j["fp64_error"] = w.fp64_error;
    }
  } else {
    j["error"] = error_;
    if (walk_) {
      const WalkTile& t = walk_->tiles.at(cursor_);
      j["keys"] = {t.j0, t.j1};
      j["skipped"] = t.skipped;
      int skipped = 0;
      for (const WalkTile& u : walk_->tiles) skipped += u.skipped ? 1 : 0;
      j["skipped_tiles"] = skipped;
      j["max_abs_diff"] = walk_->max_abs_diff;
      j["fp64_error"] = walk_->fp64_error;
      j["cpu_fused_max_abs_diff"] = walk_->cpu_fused_diff;
    }
  }
  j["strip"] = {{"x", strip.x}, {"y", strip.y}, {"w", strip.w}, {"h", strip.h}, {"bins", strip.bins}};
  j["middle"] = {{"table_w", middle.table_w}, {"stacked", middle.stacked}};
  return j.dump();
}

const char* WalkView::label(Lang lang) { return tr(lang, S::ViewWalk); }

bool WalkView::parse_flag(const std::string& flag, const FlagValue& value, Options& o) {
  if (flag == "--tile") {
    o.tile = parse_flag_int<int>(flag, value(), 1, kCudaMaxTokens);
    return true;
  }
  if (flag != "--walk-pass") return false;
  const std::string& v = value();
  if (v == "forward") o.pass = WalkPass::Forward;
  else if (v == "backward") o.pass = WalkPass::Backward;
  else throw InputError(Msg::OptionWords, {"--walk-pass", "forward, backward", v});
  return true;
}

std::string WalkView::usage() {
  return "  --view walk: [--tile B] [--walk-pass forward|backward]\n"
         "                 (keys per tile of the walk; default 2 on the demo, 64 otherwise, fewer below\n"
         "                 256 keys so that there are at least 4 full tiles; the pass it opens\n"
         "                 on: the forward's online softmax, or the fused backward's step with dO standard\n"
         "                 normal of seed 0: P, dP and dS per tile and the row's running dQ)\n";
}

bool WalkView::on_action(Action a) { return take_step_keys(*this, a); }

StepKeysHelp WalkView::step_keys_help(Lang lang) const {
  const bool zh = lang == Lang::Zh;
  return {zh ? "播放 / 暂停游走（每秒两块，循环）" : "play / pause the walk (two tiles a second, wrapping)",
          zh ? "后退 / 前进一块" : "one tile back / forward", zh ? "回到第一块" : "back to the first tile",
          chain_step_keys_help(lang).query};
}

std::vector<std::string> WalkView::texts() const {
  std::vector<std::string> out = walk_ui_text();
  for (std::string& t : walk_backward_texts()) out.push_back(std::move(t));
  return out;
}

void WalkView::dump(nlohmann::json& j, const Session&) const { j["walk"] = nlohmann::json::parse(state_json()); }

std::string WalkView::broken(const Session&) const {
  if (count() > 0 && (cursor_ < 0 || cursor_ >= count()))
    return "the walk's cursor " + std::to_string(cursor_) + " is outside its " + std::to_string(count()) + " tiles";
  if (tile < 0) return "the walk's tile size is negative";
  return {};
}

}  // namespace attnlab::viewer
