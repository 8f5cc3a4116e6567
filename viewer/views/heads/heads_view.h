// The heads view's logic (--view heads), free of SDL and ImGui so that it is unit-tested:
//   - HeadsRun: the softmax weights (step 3) of every head of the layer on screen, each pooled by a
//     backend into a small thumbnail (RunOptions::pool: streamed block by block, one PoolRequest
//     per head, so any N works without an N x N matrix), on its own std::thread; progress; a new
//     job (another layer, temperature, mask, backend) cancels the one in flight
//   - the grid the thumbnails are laid out in, which thumbnail a pixel is on, and their captions
// panel_heads.cpp draws it; a click there opens the head in the chain view (Controller::set_head).
#pragma once

#include "core/pooled.h"
#include "core/types.h"
#include "viewer/session/controller.h"

#include <atomic>
#include <condition_variable>
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

// The thumbnail's RGBA pixels (weights.cols x weights.rows, packed as the heatmap's): the chain
// view's colours for step 3 over the head's own range, on the log scale when log_scale (the chain
// view's default above 64 tokens), masked blocks hatched. Empty while the head has no weights.
std::vector<std::uint32_t> thumb_pixels(const HeadThumb& t, bool log_scale);

// The median of the pixel rows' largest weights (HeadThumb::row_max) of a pooled grid; 0 when
// every cell is masked.
double median_row_max(const PooledGrid& g);

// "head 3 · rows 93.1%" (row_max, left out when < 0; and "· kv 1" for grouped-query heads:
// kv_head >= 0), "…" while the head is computed, in the UI language.
std::string head_caption(Lang lang, int head, int kv_head, const HeadThumb& t);

}  // namespace attnlab::viewer
