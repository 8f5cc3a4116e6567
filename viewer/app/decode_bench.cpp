// The decode view's play benchmark (see decode_bench.h).
#include "viewer/app/decode_bench.h"

#include "core/format.h"
#include "viewer/session/session.h"
#include "viewer/views/decode/decode_view.h"

#include <algorithm>
#include <chrono>
#include <ostream>
#include <thread>
#include <vector>

namespace attnlab::viewer {
namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

DecodeBench run_decode_bench(const ViewerOptions& o, std::ostream& log) {
  Session s(o, /*async=*/true);
  DecodeView v(ViewContext{s, false, true}, o.views.decode);
  DecodeBench r;
  const auto frame = std::chrono::microseconds(16667);
  // The cache is built and the read rate measured before the clock starts.
  const Clock::time_point b0 = Clock::now();
  while (!v.shown() || v.busy()) {
    v.sync(s);
    std::this_thread::sleep_for(frame);
  }
  r.build_ms = ms_between(b0, Clock::now());
  if (!v.shown()->refusal.empty()) throw error_of(v.shown()->refusal);
  v.set_speed(DecodeView::kMaxSpeed);
  v.toggle_play();
  std::vector<double> kernel, gbs, frames;
  const DecodeToken* last = v.shown();
  int last_token = last->token;
  const Clock::time_point t0 = Clock::now();
  Clock::time_point prev = t0, next = t0 + frame;
  while (ms_between(t0, Clock::now()) < o.bench_decode_seconds * 1000) {
    const Clock::time_point f0 = Clock::now();
    v.sync(s);
    v.tick(ms_between(prev, f0) / 1000);
    const Clock::time_point f1 = Clock::now();
    frames.push_back(ms_between(f0, f1));
    prev = f0;
    const DecodeToken* t = v.shown();
    if (t && t->token != last_token && t->refusal.empty()) {
      ++r.tokens;
      kernel.push_back(t->kernel_ms);
      gbs.push_back(t->gbs);
      r.read_gbs = t->read_gbs;
      if (!t->within) {
        r.check_pass = false;
        log << "token " << t->token << ": max error " << format_number("%.3g", t->fp64_error) << " over the bound "
            << format_number("%.3g", t->tolerance) << "\n";
      }
      last_token = t->token;
    }
    std::this_thread::sleep_until(next);
    next += frame;
  }
  r.seconds = ms_between(t0, Clock::now()) / 1000;
  r.tokens_per_second = r.tokens / r.seconds;
  r.median_kernel_ms = median(kernel);
  if (!kernel.empty()) {
    r.min_kernel_ms = *std::min_element(kernel.begin(), kernel.end());
    r.max_kernel_ms = *std::max_element(kernel.begin(), kernel.end());
  }
  r.median_gbs = median(gbs);
  r.median_frame_ms = median(frames);
  r.max_frame_ms = frames.empty() ? 0 : *std::max_element(frames.begin(), frames.end());
  const DecodeToken& t = *v.shown();
  log << "decode view play: cache " << count_text(t.keys, "key", "keys") << ", "
      << count_text(t.heads, "query head", "query heads") << " over "
      << count_text(t.kv_heads, "key/value head", "key/value heads") << ", d " << t.d_k << ", "
      << count_text(t.plan.splits, "split", "splits") << "; built in "
      << format_number("%.0f", r.build_ms) << " ms\n";
  // A random cache's modifications, and under a window the keys its tokens read.
  std::string mods = t.job.shape.input() ? std::string() : cache_mods_text(t.job, Lang::En);
  if (!mods.empty()) mods = "modifications: " + mods;
  if (t.first_key > 0)
    mods += (mods.empty() ? "" : "; ") + std::string("the last token read keys ") + std::to_string(t.first_key) +
            " … " + std::to_string(t.keys - 1);
  if (!mods.empty()) log << mods << "\n";
  log << r.tokens << " tokens in " << format_number("%.1f", r.seconds) << " s: "
      << format_number("%.1f", r.tokens_per_second) << " tokens/s shown (asked " << DecodeView::kMaxSpeed << ")\n";
  log << "kernel per token: median " << format_number("%.2f", r.median_kernel_ms) << " ms (min "
      << format_number("%.2f", r.min_kernel_ms) << ", max " << format_number("%.2f", r.max_kernel_ms) << "), "
      << format_number("%.1f", r.median_gbs) << " GB/s";
  if (r.read_gbs > 0)
    log << " = " << format_number("%.0f", 100 * r.median_gbs / r.read_gbs) << "% of the read rate "
        << format_number("%.1f", r.read_gbs) << " GB/s";
  log << "\nUI thread per frame: median " << format_number("%.3f", r.median_frame_ms) << " ms, max "
      << format_number("%.2f", r.max_frame_ms) << " ms over " << frames.size() << " frames\n";
  log << (r.check_pass ? "every token within verify's fp32 bound of fp64\n" : "FAILED: a token outside the bound\n");
  return r;
}

}  // namespace attnlab::viewer
