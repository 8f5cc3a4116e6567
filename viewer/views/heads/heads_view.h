// The heads view's logic (--view heads), free of SDL and ImGui so that it is unit-tested:
//   - HeadsRun: the softmax weights (step 3) of every head of the layer on screen, each pooled by a
//     backend into a small thumbnail (RunOptions::pool: streamed block by block, one PoolRequest
//     per head, so any N works without an N x N matrix), on its own std::thread; progress; a new
//     job (another layer, temperature, mask, backend) cancels the one in flight
//   - the grid the thumbnails are laid out in, which thumbnail a pixel is on, and their captions
// viewer/views/heads/panel.cpp draws it; a click there opens the head in the chain view (Session::set_head).
#pragma once

#include "core/pooled.h"
#include "core/types.h"
#include "viewer/draw/layout.h"
#include "viewer/session/session.h"
#include "viewer/views/view.h"

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace attnlab::viewer {

// The pooled resolution of a thumbnail: at most this many pixels a side (a head of fewer tokens
// has one pixel per cell).
constexpr int kThumbPixels = 96;

// One head of the current layer for the thumbnails: `problem`
// holds it as head `index` of its stacked heads (a random problem's heads are generated together,
// a bundle's are read one at a time, so that heads with different masks work too).
struct HeadProblem {
  std::shared_ptr<const Problem> problem;
  int index = 0;
};
// What the heads view computes: the heads of the layer on screen with its temperature and mask,
// on the backend that drew it. `key` changes exactly when the thumbnails do (a new layer, source,
// temperature, mask or backend; not the head shown); `layer_key` only with the layer or source
// (the thumbnails of the old temperature stay on screen while the new ones are computed). load(h)
// runs on the heads view's thread.
struct HeadsJob {
  std::string key, layer_key;
  int heads = 1;
  std::function<HeadProblem(int head)> load;
  std::string backend = "cpu";
};

// The heads of the problem on screen, for the heads view, and its key alone (asked every frame).
HeadsJob heads_job(const Session& s);
std::string heads_key(const Session& s);
std::string heads_layer_key(const Session& s);

// A request covering every cell of an n x m head: min(n, px) pixel rows over the queries and
// min(m, px) pixel columns over the keys (the viewer's map_axis over the whole matrix).
PoolRequest thumbnail_request(int n, int m, int px, PoolMode mode, int head);

struct HeadThumb {
  bool done = false;      // computed for the current job
  PooledGrid weights;     // the pooled softmax weights; lo..hi is the head's colour scale (while
                          // not done: the previous job's of the same layer, or empty)
  double max_weight = 0;  // the largest weight of the head (the grid's hi: every cell is covered)
  // The median over the thumbnail's pixel rows of each one's largest weight: how peaked a typical
  // row is (a causal head's max_weight is always 1, from its first row). With pooled rows a pixel
  // row's largest weight is that of the rows it covers. -1 under mean pooling, where a pixel's
  // value is a block's mean and says nothing of a row's largest weight.
  double row_max = 0;
  std::string error;      // why this head could not be computed
};

struct HeadsSnapshot {
  std::string key;                // HeadsJob::key of what is computed
  std::vector<HeadThumb> thumbs;  // one per head, filled as they finish
  int done = 0;                   // heads finished (with or without error)
  bool running = false, finished = false, cancelled = false;
  float progress = 0;             // of the whole layer, 0..1
  std::uint64_t revision = 0;     // bumped on every change
};

// The thumbnails' worker: one thread for the view's lifetime, one job at a time; a newer job
// replaces the one queued and cancels the one in flight (the latest layer wins), without the UI
// thread waiting for it.
class HeadsRun {
 public:
  HeadsRun() = default;
  ~HeadsRun();  // cancels and joins
  HeadsRun(const HeadsRun&) = delete;
  HeadsRun& operator=(const HeadsRun&) = delete;

  // Computes `job`'s heads at `px` pixels a side from now on; returns at once. The snapshot
  // switches to the new key immediately (thumbnails of the same layer_key are kept until
  // recomputed, others emptied).
  void start(HeadsJob job, int px = kThumbPixels, PoolMode mode = PoolMode::Max);
  void cancel();  // stops the job in flight at the backend's next block (or the next head)
  // cancel(), and forget the key, so that the next start() of the same job computes it again
  // (the view is left while its thumbnails are computed).
  void stop();
  void join();    // waits until no job is queued or running
  bool running() const;
  const std::string& key() const { return key_; }  // of the last start (UI thread only)
  std::uint64_t revision() const;
  HeadsSnapshot snapshot() const;

 private:
  struct Pending {
    HeadsJob job;
    int px = kThumbPixels;
    PoolMode mode = PoolMode::Max;
    std::uint64_t id = 0;
  };
  void loop();
  void body(const Pending& p);
  bool current(std::uint64_t id) const;  // under mu_: no newer job has been started
  void finish();                         // under mu_: the run ended (every head done, or none to do)
  std::string key_;
  std::string layer_key_;
  std::thread thread_;
  std::atomic<bool> cancel_{false};
  std::atomic<float> head_progress_{0};
  mutable std::mutex mu_;
  std::condition_variable wake_, idle_;
  std::optional<Pending> pending_;
  bool busy_ = false, stop_ = false;
  std::uint64_t started_ = 0;  // id of the newest job
  HeadsSnapshot state_;
};

// ---- the grid ---------------------------------------------------------------------------------
// Square thumbnails in rows, each with a caption line under it, as large as the area allows (at
// most max_side pixels), centred horizontally, on whole pixels.
struct ThumbGrid {
  int heads = 0, cols = 1, rows = 1;
  float x = 0, y = 0;       // top-left of the first thumbnail
  float side = 0;           // a thumbnail's side
  float step_x = 0, step_y = 0;  // from one thumbnail to the next (side + gap, + caption below)
};
struct ThumbRect {
  float x = 0, y = 0, w = 0, h = 0;
};
ThumbGrid layout_thumbs(int heads, float x, float y, float w, float h, float caption_h, float gap,
                        float max_side);
ThumbRect thumb_rect(const ThumbGrid& g, int head);
// The head whose thumbnail holds (mx, my), -1 when none.
int thumb_at(const ThumbGrid& g, float mx, float my);

// How many texture pixels a thumbnail's cell spans each way: a small head's cells are magnified
// to fill most of kThumbPixels, so that its masked cells' hatching has the stripes of a pooled
// one (the chain view's 4-pixel stripes), not one stripe per cell; 1 for a pooled head.
int thumb_zoom(const PooledGrid& g);
// The thumbnail's RGBA pixels (weights.cols x weights.rows cells of thumb_zoom pixels each way,
// packed as the heatmap's): the chain view's colours for step 3 over the head's own range, on the
// log scale when log_scale (the chain view's default above 64 tokens), masked cells hatched. Empty
// while the head has no weights.
std::vector<std::uint32_t> thumb_pixels(const HeadThumb& t, bool log_scale);

// The median of the pixel rows' largest weights (HeadThumb::row_max) of a pooled grid; 0 when
// every cell is masked.
double median_row_max(const PooledGrid& g);

// "head 3 · rows 93.1%" (row_max, left out when < 0; and "· kv 1" for grouped-query heads:
// kv_head >= 0), "…" while the head is computed, in the UI language.
std::string head_caption(Lang lang, int head, int kv_head, const HeadThumb& t);

// ---- the view ---------------------------------------------------------------------------------
// Its state: the thumbnails' run, the copy of its state drawn, where the thumbnails were placed
// (hover, click, state dump) and how the one texture that holds them is laid out (the texture
// itself is the shell's, Shell::texture("heads")).
class HeadsView final : public View, public WithoutFlags {
 public:
  static const char* label(Lang lang);
  HeadsView() = default;
  HeadsView(const ViewContext&, const Options&) {}

  // Thumbnails nobody sees are not computed: leaving the view stops them (they are computed again,
  // the old pictures shown meanwhile, when the view is shown again).
  void hidden() override {
    if (run.running()) run.stop();
  }
  void dump(nlohmann::json& j, const Session& s) const override;
  std::string broken(const Session& s) const override;
  // No steps; a click on a thumbnail opens its head in the chain view.
  StepKeysHelp step_keys_help(Lang lang) const override {
    StepKeysHelp h = View::step_keys_help(lang);
    h.click = lang == Lang::Zh ? "在缩略图上：在分步链视图中打开该头" : "on a thumbnail: open its head in the staged chain view";
    h.shift_click = lang == Lang::Zh ? "与单击相同" : "the same as a click";
    return h;
  }

  HeadsRun run;
  HeadsSnapshot shown;                          // the copy of run's state drawn
  std::uint64_t shown_rev = ~std::uint64_t{0};  // run's revision it was taken at
  std::string tex_key;                          // what the texture holds
  int tex_cols = 1;                             // thumbnails per row in the texture
  ThumbGrid grid;                               // where they were drawn
  // The panel's last frame: the explanation as a header that scrolls above the grid (kit.h
  // begin_header) and the captions as drawn (shortened with "…", or the head's number alone,
  // where a thumbnail is narrower than its caption). In the state dump.
  ScrollHeader header;
  std::vector<std::string> captions;
};

void draw_panel(HeadsView& v, Shell& app, const Layout& l);

}  // namespace attnlab::viewer
