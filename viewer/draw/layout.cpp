// Window and heatmap layout (see layout.h).
#include "viewer/draw/layout.h"

#include <algorithm>
#include <cmath>

namespace attnlab::viewer {

bool overlaps(const Rect& a, const Rect& b) {
  return a.x < b.right() && b.x < a.right() && a.y < b.bottom() && b.y < a.bottom();
}

Layout compute_layout(float width, float height, float font_px, float caveat_px) {
  Layout l;
  const float caveat_h = std::floor(
      std::max(std::min(height * 0.2f, font_px * 4.4f), std::min(std::ceil(caveat_px), height * 0.4f)));
  const float body_h = std::max(0.0f, height - caveat_h);
  // Side columns: wide enough for the Chinese labels (about 17 glyphs) but never more than a
  // quarter (controls) or 30% (info) of the window.
  const float controls_w = std::clamp(width * 0.21f, std::min(font_px * 14.0f, width * 0.3f),
                                      std::min(font_px * 22.0f, width * 0.25f));
  const float info_w = std::clamp(width * 0.29f, std::min(font_px * 17.0f, width * 0.34f),
                                  std::min(font_px * 32.0f, width * 0.3f));
  // Whole pixels, so that the panels meet exactly (no float seam or overlap between windows).
  const float cw = std::floor(controls_w), iw = std::floor(info_w), hw = std::max(0.0f, width - cw - iw);
  l.controls = {0, 0, cw, body_h};
  l.heatmap = {cw, 0, hw, body_h};
  l.info = {cw + hw, 0, iw, body_h};
  l.caveat = {0, body_h, width, caveat_h};
  return l;
}

float caveat_text_height(float room, int text_lines, int last_lines, float line_h, float spacing) {
  const auto block = [&](int lines) { return lines * line_h + std::max(0, lines - 1) * spacing; };
  const float text = block(text_lines);
  const float last = last_lines > 0 ? block(last_lines) + (text_lines > 0 ? spacing : 0.0f) : 0.0f;
  if (text <= room - last) return text;
  // Whole lines only: no half line cut at the edge.
  const int fit = static_cast<int>(std::floor((room - last + spacing) / (line_h + spacing)));
  return fit > 0 ? block(std::min(fit, text_lines)) : 0.0f;
}

HeatmapFrame compute_heatmap_frame(const Rect& content, float row_label_w, float col_label_h,
                                   float font_px) {
  HeatmapFrame f;
  const float legend_w = font_px * 5.0f;
  const float pad = font_px * 0.5f;
  const float plot_x = content.x + row_label_w + (row_label_w > 0 ? pad : 0);
  const float plot_y = content.y + col_label_h + (col_label_h > 0 ? pad : 0);
  const float plot_w = std::max(0.0f, content.right() - legend_w - pad - plot_x);
  const float plot_h = std::max(0.0f, content.bottom() - plot_y);
  f.plot_area = {plot_x, plot_y, plot_w, plot_h};
  f.row_labels = {content.x, plot_y, row_label_w, plot_h};
  f.col_labels = {plot_x, content.y, plot_w, col_label_h};
  f.legend = {content.right() - legend_w, plot_y, legend_w, plot_h};
  return f;
}

float font_px_for(int height, float scale) {
  const float h = static_cast<float>(height);
  // Up to 1080 px the size the layout was drawn for (15 px at 600, 18 at 800, 22 from 968 on);
  // above, in proportion to the height, so that text takes the same share of a projector's
  // 1440 or 2160 lines as of 1080, up to kFontTopHeight.
  const float base = h <= 1080.0f ? std::clamp(h / 44.0f, 15.0f, 22.0f)
                                  : 22.0f * std::min(h, kFontTopHeight) / 1080.0f;
  return std::round(base * std::clamp(scale, kMinUiScale, kMaxUiScale));
}

}  // namespace attnlab::viewer
