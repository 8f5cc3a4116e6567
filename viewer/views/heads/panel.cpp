// The heads view's panel (--view heads): every head of the current layer as a thumbnail of its
// softmax weights (computed by HeadsRun on its own thread, viewer/views/heads/heads_view.h), in one SDL
// texture; the head shown elsewhere framed, the hovered one named, a click opens it in the chain
// view. Headless (--screenshot) waits for every thumbnail before the picture. While a new
// temperature or mask is computed the old thumbnails stay, captioned "…".
#include "viewer/views/heads/heads_view.h"

#include "viewer/ui/kit.h"

#include "core/format.h"
#include "viewer/draw/strings.h"

#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace attnlab::viewer {
namespace {

// The thumbnails' pixels into one texture: slot h of a grid of kThumbPixels squares holds head
// h's pixels in its top-left corner. Rebuilt when the thumbnails or the colour scale change.
void update_heads_texture(Shell& app, HeadsView& v) {
  const HeadsSnapshot& s = v.shown;
  Shell::Texture& tex = app.texture("heads");
  const int heads = static_cast<int>(s.thumbs.size());
  if (heads == 0) return;
  const std::string key = std::to_string(s.revision) + "|" + std::to_string(app.log_weights);
  if (tex.tex && key == v.tex_key) return;
  const int cols = static_cast<int>(std::ceil(std::sqrt(static_cast<double>(heads))));
  const int rows = (heads + cols - 1) / cols;
  const int w = cols * kThumbPixels, h = rows * kThumbPixels;
  if (!ensure_texture(app, tex.tex, tex.w, tex.h, w, h)) return;
  std::vector<std::uint32_t> atlas(static_cast<std::size_t>(w) * h, pack_rgba(kGridGap));
  for (int i = 0; i < heads; ++i) {
    const HeadThumb& t = s.thumbs[i];
    const std::vector<std::uint32_t> px = thumb_pixels(t, app.log_weights);
    if (px.empty()) continue;
    const int x0 = (i % cols) * kThumbPixels, y0 = (i / cols) * kThumbPixels;
    const int k = thumb_zoom(t.weights), pw = t.weights.cols * k;
    for (int y = 0; y < t.weights.rows * k; ++y)
      std::copy_n(px.data() + static_cast<std::size_t>(y) * pw, pw, atlas.data() + static_cast<std::size_t>(y0 + y) * w + x0);
  }
  SDL_UpdateTexture(tex.tex, nullptr, atlas.data(), w * 4);
  v.tex_cols = cols;
  v.tex_key = key;
}

std::string pct_text(double w) { return percent_text(w); }

}  // namespace

void draw_panel(HeadsView& v, Shell& app, const Layout& l) {
  const Lang lang = app.lang;
  Session& c = app.session;
  begin_centre(l, fmt("%s###heatmap", tr(lang, S::ViewHeads)));
  // The latest layer wins: another key (or pooling) cancels the run in flight and starts this one.
  const std::string pool_key = app.pool == PoolMode::Max ? "|max" : "|mean";
  if (v.run.key() != heads_key(c) + pool_key) {
    HeadsJob job = heads_job(c);
    job.key += pool_key;
    job.layer_key += pool_key;
    v.run.start(std::move(job), kThumbPixels, app.pool);
    if (!c.async()) v.run.join();
  }
  const std::uint64_t rev = v.run.revision();
  if (rev != v.shown_rev) {
    v.shown = v.run.snapshot();
    v.shown_rev = rev;
  }
  const HeadsSnapshot& s = v.shown;
  const int heads = static_cast<int>(s.thumbs.size());
  const Bundle* b = c.from_bundle() ? c.bundle() : nullptr;
  // The title on one line, shortened with "…" where the panel is narrow (the whole in its tooltip).
  if (b) {
    const int layer = c.shown_layer();
    text_fit(fmt(tr(lang, S::HeadsTitleLayer), layer, b->calls[layer].name.c_str(), heads), kHighlightV4);
  } else {
    text_fit(fmt(tr(lang, S::HeadsTitle), heads), kHighlightV4);
  }
  if (s.running) {
    ImGui::ProgressBar(s.progress, ImVec2(-FLT_MIN, 0),
                       fmt(tr(lang, S::HeadsProgress), std::min(s.done + 1, heads), heads).c_str());
  }
  const bool log_scale = app.log_weights;
  // The explanation, scrolled where with it the thumbnails would keep less than a map's minimum
  // height (a large UI scale in a small window).
  begin_header(v.header, "##heads_head", map_min_height());
  wrapped(app,
          fmt(tr(lang, S::HeadsNote), tr(lang, app.pool == PoolMode::Max ? S::PoolMax : S::PoolMean), kThumbPixels,
              kThumbPixels, tr(lang, log_scale ? S::ScaleLog : S::ScaleLinear)),
          &kDimV4);
  if (heads <= 1) wrapped(app, tr(lang, S::HeadsOneHead), &kDimV4);
  if (!b && heads > 1 && c.random_pattern().kind != PatternKind::Noise && !c.demo() && !c.from_files())
    wrapped(app, tr(lang, S::HeadsPattern), &kDimV4);
  end_header(v.header);
  for (int h = 0; h < heads; ++h) {
    if (s.thumbs[h].error.empty()) continue;
    wrapped(app, fmt(tr(lang, S::HeadsError), h, s.thumbs[h].error.c_str()), &kErrorV4);
    break;  // the first one: the others usually say the same
  }
  update_heads_texture(app, v);
  const Shell::Texture& tex = app.texture("heads");

  // The grid in what is left of the window.
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  // Captions below the frame the head shown gets (5 px outside its thumbnail).
  const float caption_h = ImGui::GetTextLineHeightWithSpacing() + 6;
  // 6 px of margin: the frame of the head shown lies outside its thumbnail.
  v.grid = layout_thumbs(heads, origin.x + 6, origin.y + 6, avail.x - 12, avail.y - 12, caption_h,
                                 std::max(12.0f, app.font_px * 0.7f), 4.0f * kThumbPixels);
  const ThumbGrid& g = v.grid;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  const int hovered = ImGui::IsWindowHovered() ? thumb_at(g, mouse.x, mouse.y) : -1;
  const int shown = c.head();
  const bool grouped = c.kv_heads() != c.heads();
  v.captions.clear();
  for (int h = 0; h < heads; ++h) {
    const ThumbRect r = thumb_rect(g, h);
    const HeadThumb& t = s.thumbs[h];
    dl->AddRectFilled(ImVec2(r.x, r.y), ImVec2(r.x + r.w, r.y + r.h), pack_rgba(kGridGap));
    if (tex.tex && !t.weights.cells.empty()) {
      // Non-square heads (n != m) keep their aspect inside the square.
      const float aspect = static_cast<float>(t.weights.rows) / t.weights.cols;
      const float iw = aspect <= 1 ? r.w : r.w / aspect, ih = aspect <= 1 ? r.h * aspect : r.h;
      const float ix = r.x + (r.w - iw) / 2, iy = r.y + (r.h - ih) / 2;
      const int sx = (h % v.tex_cols) * kThumbPixels, sy = (h / v.tex_cols) * kThumbPixels;
      const ImVec2 uv0(static_cast<float>(sx) / tex.w, static_cast<float>(sy) / tex.h);
      const int k = thumb_zoom(t.weights);
      const ImVec2 uv1(static_cast<float>(sx + t.weights.cols * k) / tex.w,
                       static_cast<float>(sy + t.weights.rows * k) / tex.h);
      dl->AddImage(reinterpret_cast<ImTextureID>(tex.tex), ImVec2(ix, iy), ImVec2(ix + iw, iy + ih), uv0, uv1);
    }
    const float ms = mark(app);  // frames grow with the text
    if (h == shown) {
      dl->AddRect(ImVec2(r.x - 4 * ms, r.y - 4 * ms), ImVec2(r.x + r.w + 4 * ms, r.y + r.h + 4 * ms), kHighlight, 0, 0,
                  3 * ms);
    } else if (h == hovered) {
      dl->AddRect(ImVec2(r.x - 3 * ms, r.y - 3 * ms), ImVec2(r.x + r.w + 3 * ms, r.y + r.h + 3 * ms),
                  IM_COL32(230, 230, 230, 255), 0, 0, 2 * ms);
    }
    // The caption, shortened with "…" to the thumbnail's step less a gap (captions side by side
    // had run together), never into "head h": that alone where "head h…" would not fit, the
    // number alone where even "head h" would not (the whole caption is in the hover's tooltip).
    const float room = g.step_x - app.font_px * 0.3f;
    std::string cap = head_caption(lang, h, grouped ? c.kv_head_of(h) : -1, t);
    if (text_width(cap.c_str()) > room) {
      const std::string bare = fmt(tr(lang, S::HeadsCaptionBare), h);
      cap = text_width(bare.c_str()) > room                 ? std::to_string(h)
            : text_width((bare + "…").c_str()) > room ? bare
                                                           : fit_text(cap, room);
    }
    v.captions.push_back(cap);
    dl->PushClipRect(ImVec2(r.x, r.y + r.h), ImVec2(r.x + g.step_x, r.y + r.h + caption_h), true);
    dl->AddText(ImVec2(r.x, r.y + r.h + 7), h == shown ? kHighlight : IM_COL32(220, 220, 220, 255), cap.c_str());
    dl->PopClipRect();
  }
  if (hovered >= 0) {
    const HeadThumb& t = s.thumbs[hovered];
    ImGui::BeginTooltip();
    // The lab's line breaking, not ImGui's: numbers ("6.9%") stay whole in Chinese text.
    const float tip_w = ImGui::GetFontSize() * 24;
    const std::string top = t.done ? pct_text(t.max_weight) : "…";
    if (t.done && t.row_max < 0)
      wrapped_at(app, fmt(tr(lang, S::HeadsTipMean), hovered, top.c_str()), tip_w);
    else
      wrapped_at(app, fmt(tr(lang, S::HeadsTip), hovered, t.done ? pct_text(t.row_max).c_str() : "…", top.c_str()),
                 tip_w);
    if (grouped)
      wrapped_at(app, fmt(tr(lang, S::HeadsTipKv), c.kv_head_of(hovered), c.heads() / std::max(1, c.kv_heads())),
                 tip_w);
    ImGui::EndTooltip();
    if (ImGui::IsMouseClicked(ImGuiMouseButton_Left)) {
      c.clear_error();
      c.set_head(hovered);
      app.view = "chain";  // the head opens in the chain view
    }
  }
  ImGui::End();
}

}  // namespace attnlab::viewer
