// The heads view's logic (see heads_view.h): the thumbnails' run and their grid.
#include "viewer/views/heads/heads_view.h"

#include "core/backend.h"
#include "core/bundle.h"
#include "core/format.h"
#include "core/patterns.h"
#include "viewer/draw/heatmap.h"
#include "viewer/draw/pooling.h"
#include "viewer/draw/strings.h"
#include "engine/registry.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace attnlab::viewer {

// The source on screen but its head, as text.
std::string heads_layer_key(const Session& session) {
  const Source& s = session.shown_source();
  return (s.bundle.empty() ? "" : "bundle|" + s.bundle + "|" + std::to_string(s.layer)) + "|" +
         std::to_string(s.demo) + "|" + std::to_string(s.n) + "|" + std::to_string(s.d_k) + "|" +
         std::to_string(s.d_v) + "|" + std::to_string(s.seed) + "|" + pattern_name(s.pattern) + "|" +
         std::to_string(s.heads) + "|" + s.files.q + "|" + s.files.k + "|" + s.files.v + "|" + s.files.mask + "|" +
         s.files.tokens + "|" + s.files.tokens_file;
}

namespace {

std::string exact(double x) {  // a double as its exact bits
  char bits[32];
  std::snprintf(bits, sizeof bits, "%a", x);
  return bits;
}

// The shown problem's modifications on every head's problem: the settings (RoPE, ALiBi, the cap,
// the window, the prefix) and what the modifications' files gave: the shown problem's own data
// where it is every head's (a shared bias, the documents), and a per-head bias, of which the shown
// head holds its rows alone, read again for the H heads (once: a random problem's heads are made
// together). ALiBi's slopes stay the problem's own: the H heads' standard slopes for a random
// problem of H heads (the shown head holds its one slope), a bundle's given ones.
void take_mods(Problem& p, const Problem& shown, const Source& s) {
  set_mods_of(p, mods_of(shown));
  if (shown.mods.bias_head >= 0) {
    read_mod_files(p, s);
    return;
  }
  if (!s.bias_file.empty()) {
    p.edit().bias = shown.bias();
    p.mods.bias_name = shown.mods.bias_name;
  }
  if (!s.documents_file.empty()) {
    p.edit().documents = shown.documents();
    p.mods.documents_name = shown.mods.documents_name;
  }
}

}  // namespace

std::string heads_key(const Session& session) {
  const Problem& p = session.problem();
  const Source& s = session.shown_source();
  return heads_layer_key(session) + "|" + exact(p.temperature) + "|" + std::string(to_string(p.mask)) + "|" +
         session.ran_backend() + "|mods " + mods_key(mods_of(p)) + "|" + s.bias_file + "|" + s.documents_file + "|" +
         std::to_string(s.load);
}

HeadsJob heads_job(const Session& session) {
  const Source& s = session.shown_source();
  HeadsJob job;
  job.key = heads_key(session);
  job.layer_key = heads_layer_key(session);
  job.backend = session.ran_backend();
  job.heads = session.shown_heads();
  const double t = session.problem().temperature;
  const MaskKind mask = session.problem().mask;
  const std::shared_ptr<const Problem> shown = session.shared_problem();
  if (!s.bundle.empty()) {
    // The call's files read once, every head stacked; a call with a different mask per head
    // (which one Problem cannot hold) is read one head at a time.
    const Bundle b = *session.bundle();
    const int layer = s.layer;
    struct Loaded {
      std::shared_ptr<const Problem> all;
      bool per_head = false;
    };
    auto loaded = std::make_shared<Loaded>();
    job.load = [b, layer, t, loaded, shown, s](int h) {
      const auto ready = [t, &shown, &s](Problem p) {
        p.temperature = t;
        take_mods(p, *shown, s);
        validate(p);
        return std::make_shared<const Problem>(std::move(p));
      };
      if (!loaded->all && !loaded->per_head) {
        try {
          loaded->all = ready(bundle_problem(b, layer, std::nullopt));
        } catch (const InputError&) {
          loaded->per_head = true;  // the other refusals come back below, from the head itself
        }
      }
      if (loaded->all) return HeadProblem{loaded->all, h};
      return HeadProblem{ready(bundle_problem(b, layer, h)), 0};
    };
  } else if (job.heads > 1) {
    // Every head generated once (as the CLI does) and shared by the thumbnails.
    auto all = std::make_shared<std::shared_ptr<const Problem>>();
    job.load = [s, t, mask, all, shown](int h) {
      if (!*all) {
        Problem p = pattern_problem(s.pattern, s.n, s.d_k, s.d_v, s.seed, s.heads);
        // Token labels and a mask file's matrix describe every head alike: the shown head's.
        p.edit().query_tokens = shown->query_tokens();
        p.edit().key_tokens = shown->key_tokens();
        p.edit().custom_mask = shown->custom_mask();
        p.temperature = t;
        p.mask = mask;
        take_mods(p, *shown, s);
        validate(p);
        *all = std::make_shared<const Problem>(std::move(p));
      }
      return HeadProblem{*all, h};
    };
  } else {
    job.load = [p = session.shared_problem()](int) { return HeadProblem{p, 0}; };
  }
  return job;
}


PoolRequest thumbnail_request(int n, int m, int px, PoolMode mode, int head) {
  const AxisMap rows = map_axis(0, n, std::min(n, px), n);
  const AxisMap cols = map_axis(0, m, std::min(m, px), m);
  PoolRequest r;
  r.rows = PoolAxis{rows.begin, rows.end};
  r.cols = PoolAxis{cols.begin, cols.end};
  r.mode = mode;
  r.head = head;
  return r;
}

// ---- the run ----------------------------------------------------------------------------------

HeadsRun::~HeadsRun() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    cancel_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void HeadsRun::start(HeadsJob job, int px, PoolMode mode) {
  key_ = job.key;
  {
    std::lock_guard<std::mutex> lk(mu_);
    const std::uint64_t rev = state_.revision + 1;
    // The old layer's pictures stay while its temperature or mask is recomputed; another layer
    // starts empty.
    const bool same_layer = job.layer_key == layer_key_ && static_cast<int>(state_.thumbs.size()) == job.heads;
    std::vector<HeadThumb> thumbs = same_layer ? std::move(state_.thumbs) : std::vector<HeadThumb>(std::max(0, job.heads));
    for (HeadThumb& t : thumbs) {
      t.done = false;
      t.error.clear();
    }
    layer_key_ = job.layer_key;
    state_ = HeadsSnapshot{};
    state_.key = job.key;
    state_.thumbs = std::move(thumbs);
    state_.running = true;
    state_.revision = rev;
    pending_ = Pending{std::move(job), px, mode, ++started_};
    if (busy_) cancel_ = true;  // the job in flight is superseded
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  }
  wake_.notify_all();
}

void HeadsRun::cancel() { cancel_ = true; }

void HeadsRun::stop() {
  key_.clear();
  std::lock_guard<std::mutex> lk(mu_);
  cancel_ = true;
  if (pending_ && !busy_) {  // queued, not picked up yet: it never runs
    pending_.reset();
    state_.running = false;
    state_.cancelled = true;
    ++state_.revision;
    idle_.notify_all();
  } else {
    pending_.reset();
  }
}

void HeadsRun::join() {
  std::unique_lock<std::mutex> lk(mu_);
  idle_.wait(lk, [this] { return !pending_ && !busy_; });
}

bool HeadsRun::running() const {
  std::lock_guard<std::mutex> lk(mu_);
  return state_.running;
}

std::uint64_t HeadsRun::revision() const {
  std::lock_guard<std::mutex> lk(mu_);
  // The progress of the head in flight changes without a new thumbnail: it counts as a change.
  return state_.revision * 1024 + static_cast<std::uint64_t>(head_progress_.load() * 1000);
}

HeadsSnapshot HeadsRun::snapshot() const {
  std::lock_guard<std::mutex> lk(mu_);
  HeadsSnapshot s = state_;
  const int heads = static_cast<int>(s.thumbs.size());
  if (heads > 0)
    s.progress = s.running ? (s.done + std::clamp(head_progress_.load(), 0.0f, 1.0f)) / heads : 1.0f;
  return s;
}

bool HeadsRun::current(std::uint64_t id) const { return id == started_; }

void HeadsRun::loop() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    wake_.wait(lk, [this] { return stop_ || pending_.has_value(); });
    if (stop_) return;
    Pending p = std::move(*pending_);
    pending_.reset();
    busy_ = true;
    cancel_ = false;
    lk.unlock();
    body(p);
    lk.lock();
    busy_ = false;
    idle_.notify_all();
  }
}

void HeadsRun::body(const Pending& p) {
  for (int h = 0; h < p.job.heads; ++h) {
    HeadThumb t;
    bool cancelled = cancel_;
    if (!cancelled) {
      head_progress_ = 0;
      try {
        const HeadProblem hp = p.job.load(h);
        const Problem& prob = *hp.problem;
        const PoolRequest req = thumbnail_request(prob.n(), prob.m(), p.px, p.mode, hp.index);
        RunOptions opt;
        opt.keep_stages = false;
        opt.output = false;
        opt.pool = &req;
        opt.cancel = &cancel_;
        opt.progress = &head_progress_;
        Trace tr = run_backend(p.job.backend, prob, opt);
        t.weights = std::move(tr.pooled.weights);
        t.max_weight = t.weights.has_range ? t.weights.hi : 0;
        t.row_max = p.mode == PoolMode::Max ? median_row_max(t.weights) : -1;
      } catch (const Cancelled&) {
        cancelled = true;
      } catch (const std::exception& e) {
        t.error = e.what();
      }
    }
    std::lock_guard<std::mutex> lk(mu_);
    if (!current(p.id)) return;  // a newer job owns the snapshot
    if (cancelled) {
      state_.cancelled = true;
      state_.running = false;
      ++state_.revision;
      return;
    }
    t.done = true;
    state_.thumbs[h] = std::move(t);
    ++state_.done;
    // The last thumbnail and the run's end in one revision: a snapshot with every head done but the
    // run still going would draw the progress bar a last time, and the grid below it (where a
    // click lands, what the state dump gives) would move up a frame later.
    if (h + 1 == p.job.heads) finish();
    ++state_.revision;
  }
  if (p.job.heads > 0) return;
  std::lock_guard<std::mutex> lk(mu_);
  if (!current(p.id)) return;
  finish();
  ++state_.revision;
}

void HeadsRun::finish() {
  state_.running = false;
  state_.finished = true;
}

// ---- the grid ---------------------------------------------------------------------------------

ThumbGrid layout_thumbs(int heads, float x, float y, float w, float h, float caption_h, float gap,
                        float max_side) {
  ThumbGrid best;
  best.heads = heads;
  if (heads <= 0 || w <= 0 || h <= 0) return best;
  for (int cols = 1; cols <= heads; ++cols) {
    const int rows = (heads + cols - 1) / cols;
    const float side_w = (w - gap * (cols - 1)) / cols;
    const float side_h = (h - rows * caption_h - gap * (rows - 1)) / rows;
    const float side = std::min({side_w, side_h, max_side});
    if (side > best.side) {
      best.cols = cols;
      best.rows = rows;
      best.side = side;
    }
  }
  // Whole pixels everywhere: every thumbnail is sampled from its texture the same way.
  best.side = std::max(0.0f, std::floor(best.side));
  best.step_x = best.side + std::ceil(gap);
  best.step_y = best.side + std::ceil(caption_h + gap);
  const float used_w = best.cols * best.step_x - std::ceil(gap);
  best.x = std::floor(x + (w - used_w) / 2);
  best.y = std::ceil(y);
  return best;
}

ThumbRect thumb_rect(const ThumbGrid& g, int head) {
  const int r = head / std::max(1, g.cols), c = head % std::max(1, g.cols);
  return {g.x + c * g.step_x, g.y + r * g.step_y, g.side, g.side};
}

int thumb_at(const ThumbGrid& g, float mx, float my) {
  if (g.side <= 0) return -1;
  for (int h = 0; h < g.heads; ++h) {
    const ThumbRect r = thumb_rect(g, h);
    if (mx >= r.x && mx < r.x + r.w && my >= r.y && my < r.y + r.h) return h;
  }
  return -1;
}

double median_row_max(const PooledGrid& g) {
  std::vector<double> best;
  for (int r = 0; r < g.rows; ++r) {
    double m = -1;
    for (int c = 0; c < g.cols; ++c) {
      const PooledCell& cell = g.cells[static_cast<std::size_t>(r) * g.cols + c];
      if (!cell.masked) m = std::max(m, static_cast<double>(cell.value));
    }
    if (m >= 0) best.push_back(m);
  }
  if (best.empty()) return 0;
  const std::size_t mid = best.size() / 2;
  std::nth_element(best.begin(), best.begin() + mid, best.end());
  if (best.size() % 2) return best[mid];
  const double hi = best[mid];
  return (*std::max_element(best.begin(), best.begin() + mid) + hi) / 2;
}

int thumb_zoom(const PooledGrid& g) { return std::max(1, kThumbPixels / std::max({g.rows, g.cols, 1})); }

std::vector<std::uint32_t> thumb_pixels(const HeadThumb& t, bool log_scale) {
  const PooledGrid& g = t.weights;
  if (g.cells.empty()) return {};
  const int k = thumb_zoom(g), h = g.rows * k, w = g.cols * k;
  std::vector<PooledCell> magnified;  // a pooled head's cells are its pixels as they are
  if (k > 1) {
    magnified.resize(static_cast<std::size_t>(h) * w);
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x)
        magnified[static_cast<std::size_t>(y) * w + x] = g.cells[static_cast<std::size_t>(y / k) * g.cols + x / k];
  }
  // rasterize_cells reads only the sizes of the maps when no grid is drawn.
  AxisMap rows, cols;
  rows.begin.assign(h, 0);
  rows.end.assign(h, 1);
  cols.begin.assign(w, 0);
  cols.end.assign(w, 1);
  ValueRange range = g.has_range ? ValueRange{g.lo, g.hi} : ValueRange{};
  if (log_scale) range = log_range(range);
  return rasterize_cells(k > 1 ? magnified : g.cells, rows, cols, range, log_scale, false);
}

std::string head_caption(Lang lang, int head, int kv_head, const HeadThumb& t) {
  char buf[160];
  if (!t.done) {
    std::snprintf(buf, sizeof buf, tr(lang, S::HeadsCaptionPending), head);
  } else if (!t.error.empty()) {
    std::snprintf(buf, sizeof buf, tr(lang, S::HeadsCaptionError), head);
  } else {
    const std::string pct = percent_text(t.row_max);
    if (t.row_max < 0 && kv_head >= 0)
      std::snprintf(buf, sizeof buf, tr(lang, S::HeadsCaptionKvBare), head, kv_head);
    else if (t.row_max < 0)
      std::snprintf(buf, sizeof buf, tr(lang, S::HeadsCaptionBare), head);
    else if (kv_head >= 0)
      std::snprintf(buf, sizeof buf, tr(lang, S::HeadsCaptionKv), head, kv_head, pct.c_str());
    else
      std::snprintf(buf, sizeof buf, tr(lang, S::HeadsCaption), head, pct.c_str());
  }
  return buf;
}

const char* HeadsView::label(Lang lang) { return tr(lang, S::ViewHeads); }

void HeadsView::dump(nlohmann::json& j, const Session&) const {
  j["heads_grid"] = {{"x", grid.x},           {"y", grid.y},           {"side", grid.side},
                     {"step_x", grid.step_x}, {"step_y", grid.step_y}, {"cols", grid.cols},
                     {"rows", grid.rows},     {"done", shown.done},
                     {"captions", captions},  {"header", {{"h", header.h}, {"scrolled", header.scrolled}}}};
}

std::string HeadsView::broken(const Session&) const {
  if (shown.done < 0 || shown.done > static_cast<int>(shown.thumbs.size()))
    return "the heads view has " + std::to_string(shown.done) + " of " + std::to_string(shown.thumbs.size()) +
           " thumbnails done";
  if (!(shown.progress >= 0 && shown.progress <= 1.0f + 1e-6f)) return "the heads view's progress is outside 0..1";
  return {};
}

}  // namespace attnlab::viewer
