// The walk view's logic (see walk_view.h). The numbers come from cpu/walk.h (the CPU fused
// kernel's update step); this file only caches, pools for the strip and picks what to chart.
#include "viewer/views/walk/walk_view.h"

#include "viewer/draw/strings.h"

#include "cpu/walk.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

namespace attnlab::viewer {

std::vector<int> walk_tile_choices(int keys) {
  std::vector<int> c;
  if (keys <= kWalkAllSizesMax) {
    for (int b = 1; b <= keys; ++b) c.push_back(b);
    return c;
  }
  for (int b = 1; b <= keys; b *= 2) c.push_back(b);
  if (c.back() != keys) c.push_back(keys);
  return c;
}

int walk_tile_for(int requested, bool demo, int keys) {
  const int want = requested > 0 ? requested : demo ? 2 : 64;
  const std::vector<int> c = walk_tile_choices(std::max(1, keys));
  int best = c.front();
  for (int b : c)
    if (std::abs(b - want) < std::abs(best - want)) best = b;
  return best;
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

TileState walk_tile_state(const Walk& w, int tile, int cursor) {
  if (w.tiles.at(tile).skipped) return TileState::Skipped;
  if (tile < cursor) return TileState::Consumed;
  return tile == cursor ? TileState::Current : TileState::Pending;
}

std::vector<StripBin> walk_strip(const Walk& w, int max_bins) {
  std::vector<StripBin> bins;
  if (w.keys <= 0 || max_bins <= 0) return bins;
  const int per = (w.keys + max_bins - 1) / max_bins;  // keys per bin
  for (const WalkTile& t : w.tiles) {
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

std::pair<double, double> walk_logit_range(const Walk& w) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const WalkTile& t : w.tiles)
    for (double x : t.logits)
      if (std::isfinite(x)) {
        lo = std::min(lo, x);
        hi = std::max(hi, x);
      }
  if (lo > hi) return {0.0, 1.0};
  return {lo, hi};
}

std::vector<float> walk_series_m(const Walk& w, int cursor) {
  std::vector<float> s;
  for (int t = 0; t <= cursor && t < static_cast<int>(w.tiles.size()); ++t)
    s.push_back(std::isfinite(w.tiles[t].m) ? static_cast<float>(w.tiles[t].m) : std::nanf(""));
  return s;
}

std::vector<float> walk_series_l(const Walk& w, int cursor) {
  std::vector<float> s;
  for (int t = 0; t <= cursor && t < static_cast<int>(w.tiles.size()); ++t)
    s.push_back(static_cast<float>(w.tiles[t].l));
  return s;
}

std::vector<float> walk_series_convergence(const Walk& w, int cursor) {
  std::vector<float> s;
  for (int t = 0; t <= cursor && t < static_cast<int>(w.tiles.size()); ++t) {
    const auto& out = w.tiles[t].output;
    if (out.empty() || w.staged_output.size() != out.size()) {
      s.push_back(std::nanf(""));
      continue;
    }
    const double d = walk_max_abs_diff(out, w.staged_output);
    s.push_back(d > 1e-12 ? static_cast<float>(std::log10(d)) : -12.f);
  }
  return s;
}

const Walk* WalkView::update(const Session& c, int tile) {
  const Problem& p = c.problem();
  if (c.revision() == revision_ && c.query() == query_ && tile == tile_ && &p == problem_)
    return walk();
  // A new tile size or a new problem (demo / random) starts at the end again; a temperature,
  // mask or query change keeps the tile the user stepped to.
  const bool new_walk_shape = tile != tile_ || c.problem_revision() != problem_revision_;
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
  if (new_walk_shape) at_end_ = true;
  if (at_end_) cursor_ = std::max(0, count() - 1);
  cursor_ = std::clamp(cursor_, 0, std::max(0, count() - 1));
  return walk();
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
  j["tile"] = tile_;
  j["tiles"] = count();
  j["cursor"] = cursor_;
  j["playing"] = playing_;
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
  j["strip"] = {{"x", strip.x}, {"y", strip.y}, {"w", strip.w}, {"h", strip.h}, {"bins", strip.bins}};
  return j.dump();
}

const char* WalkView::label(Lang lang) { return tr(lang, S::ViewWalk); }

bool WalkView::parse_flag(const std::string& flag, const FlagValue& value, Options& o) {
  if (flag != "--tile") return false;
  o.tile = parse_flag_int<int>(flag, value(), 1, kCudaMaxTokens);
  return true;
}

std::string WalkView::usage() { return "  --view walk: [--tile B]  (keys per tile of the walk; default 2 on the demo, 64 otherwise)\n"; }

bool WalkView::on_action(Action a) {
  switch (a) {
    case Action::TogglePlay: toggle_play(); return true;
    case Action::StepNext: next(); return true;
    case Action::StepPrev: prev(); return true;
    case Action::StepHome: home(); return true;
    default: return false;
  }
}

void WalkView::dump(nlohmann::json& j, const Session&) const { j["walk"] = nlohmann::json::parse(state_json()); }

std::string WalkView::broken(const Session&) const {
  if (count() > 0 && (cursor_ < 0 || cursor_ >= count()))
    return "the walk's cursor " + std::to_string(cursor_) + " is outside its " + std::to_string(count()) + " tiles";
  if (tile < 0) return "the walk's tile size is negative";
  return {};
}

}  // namespace attnlab::viewer
