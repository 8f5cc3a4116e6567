// The selected query's row as a bar chart under the heatmap (every step): the softmax weights
// over the keys, one bar per pixel column (the max of the keys the column covers, so a single
// strong key is never averaged away at 4096 tokens), and the k largest weights of the whole row
// marked with their tokens. Free of SDL and ImGui; viewer/views/chain/panel.cpp draws it.
#pragma once

#include "viewer/draw/pooling.h"
#include "viewer/draw/strings.h"

#include <string>
#include <vector>

namespace attnlab::viewer {

struct RowChart {
  std::vector<float> bins;  // one per pixel column: max weight of its keys (0 when all masked)
  float max = 0;            // the row's largest weight (the chart's full height)
  struct Top {
    int key = 0;
    float weight = 0;
  };
  std::vector<Top> top;     // the k largest weights, largest first (lowest key on ties)
};

// w: the row's m weights; mask: its m mask entries (0 / -inf) or null; cols: the pixel columns.
RowChart row_chart(const float* w, const float* mask, int m, const AxisMap& cols, int k);

// The title's list of the top weights: "  ·  1) 上下文 26.0%, 2) 权重 25.4%, …" (keys: the key
// tokens), each percentage as percent_text writes it, the statistics' format. With `items`, the
// first `items` of them, and ", …" after them where some are left out.
std::string top_weights_text(const RowChart& c, const std::vector<std::string>& keys);
std::string top_weights_text(const RowChart& c, const std::vector<std::string>& keys, std::size_t items);

// The chart's title in `width` pixels: `head` (whose weights) with the most top weights that fit
// (top_weights_text), none where not even the first does; `head` ellipsized where it alone is too
// wide. A small window or a large UI scale drops whole entries, never half of one.
std::string fit_row_chart_title(const std::string& head, const RowChart& c, const std::vector<std::string>& keys,
                                float width, const TextMeasure& measure);

// A label's box in pixels: top-left corner and size.
struct LabelBox {
  float x = 0, y = 0, w = 0, h = 0;
};
// Where the rank numbers over the top bars go, in order: each at its wish when that box meets no
// label placed before it and none of the `bars` (the chart's bars, where a number must not be
// drawn: a taller neighbour), otherwise at the nearest free box beside (left, right) or on top of
// a placed label or a bar near it, kept within [lo_x, hi_x] and not above top_y (neighbouring
// keys' numbers would be drawn over each other or over the bars). Where no free box is left, the
// wish.
std::vector<LabelBox> place_labels(const std::vector<LabelBox>& wish, float lo_x, float hi_x, float top_y,
                                   const std::vector<LabelBox>& bars = {});

}  // namespace attnlab::viewer
