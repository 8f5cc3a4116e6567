// Window layout, free of SDL: where the control panel, the heatmap, the information panel and the
// always-visible caveat bar go for a given window size, and how the heatmap's panel is split into
// labels, plot area and legend. Sizes scale with the font so the layout holds from 1280 x 800 to
// 1920 x 1080 and stays usable down to 960 x 600.
#pragma once

#include <algorithm>
#include <cmath>

namespace attnlab::viewer {

struct Rect {
  float x = 0, y = 0, w = 0, h = 0;
  float right() const { return x + w; }
  float bottom() const { return y + h; }
  bool contains(float px, float py) const { return px >= x && py >= y && px < x + w && py < y + h; }
};

bool overlaps(const Rect& a, const Rect& b);

struct Layout {
  Rect controls;  // left column: state, playback, mode, backend
  Rect heatmap;   // centre: the heatmap window
  Rect info;      // right column: statistics, description, tables, performance, notes
  Rect caveat;    // bottom bar across the window: the standing caveat and the status line
};

// font_px: the UI font size. Side columns take a share of the width within font-relative bounds;
// the heatmap gets the rest (at least 40% of the width at 1280 px and above). caveat_px: the
// height the caveat bar's wrapped lines need (draw_caveat's measure; 0: none given); the bar is
// at least its usual height and grows to that, up to two fifths of the window, so that its last
// line (the keys, a refusal) is never cut off.
Layout compute_layout(float width, float height, float font_px, float caveat_px = 0);

// Where the bar's lines need more than its two fifths (a small window at a large UI scale), its
// last lines (the keys, a status, a refusal: `last_lines` of them) keep their place at the bottom
// and the mask sentence and caveat above them (`text_lines`) get what is left of the bar's inner
// height `room`, scrolled with the wheel. The height the text's lines get: all of them where
// everything fits, else the whole lines that the room less the last lines and one spacing holds
// (no half line at the edge), possibly none. Lines are
// `line_h` tall with `spacing` between them.
float caveat_text_height(float room, int text_lines, int last_lines, float line_h, float spacing);

// The UI font size for a window `height` pixels tall at UI scale `scale` (Ctrl + / Ctrl − / Ctrl
// 0, --ui-scale): 15 px at the 600 minimum, 18 px at 800, 22 px at 1080, and above 1080 in
// proportion to the height (29 px at 1440, 44 px at 2160 and above: kFontTopHeight), times the
// scale (clamped to kMinUiScale..kMaxUiScale), rounded to whole pixels so the atlas is rebuilt
// only when the size really changes. The largest is 44 px times kMaxUiScale; the app builds fonts
// of 32 px and more without horizontal oversampling, which would double their atlas's width.
constexpr float kMinUiScale = 0.6f, kMaxUiScale = 3.0f;
// The window height above which the text stops growing (a 4K screen's).
constexpr float kFontTopHeight = 2160.0f;
float font_px_for(int height, float scale);

// What the marks the panels draw themselves (markers, legend swatches, frames, hatching, line
// widths), given in pixels for an 18 px font, are multiplied by at font size font_px: the whole
// number nearest font_px / 18, at least 1, so that a mark keeps its size beside the text at a large
// UI scale or on a 4K window and its lines stay whole pixels wide (1 up to 26 px: the sizes of
// 1080 lines and below are the ones drawn for).
inline float mark_scale(float font_px) { return std::max(1.0f, std::round(font_px / 18.0f)); }

struct HeatmapFrame {
  Rect plot_area;  // where place_plot() may put the cells
  Rect row_labels; // query tokens, left of the plot area
  Rect col_labels; // key tokens, above the plot area
  Rect legend;     // colour bar and its numbers, right of the plot area
};

// Splits the heatmap window's content rectangle. row_label_w and col_label_h are the measured label
// sizes (0 hides them, as for thousands of tokens).
HeatmapFrame compute_heatmap_frame(const Rect& content, float row_label_w, float col_label_h,
                                   float font_px);

// A panel's header that scrolls where the plot under it would keep too little room (kit.h
// begin_header, end_header): the panel's state from frame to frame, in the views' state dumps.
struct ScrollHeader {
  float h = 0;            // the header's height as last laid out
  bool scrolled = false;  // whether it is drawn in the scrolled region this frame
  float top = 0;          // the cursor's y where it began
};

}  // namespace attnlab::viewer
