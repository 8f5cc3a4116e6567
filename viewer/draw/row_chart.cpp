// The selected row's bar chart (see row_chart.h).
#include "viewer/draw/row_chart.h"

#include "core/format.h"
#include "viewer/draw/strings.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace attnlab::viewer {

RowChart row_chart(const float* w, const float* mask, int m, const AxisMap& cols, int k) {
  RowChart c;
  const auto usable = [&](int j) { return (mask == nullptr || mask[j] == 0.f) && std::isfinite(w[j]); };
  c.bins.assign(cols.size(), 0.f);
  for (int px = 0; px < cols.size(); ++px)
    for (int j = cols.begin[px]; j < cols.end[px] && j < m; ++j)
      if (usable(j)) c.bins[px] = std::max(c.bins[px], w[j]);
  std::vector<int> idx;
  idx.reserve(m);
  // The top keys among the weights above 0 (a low temperature's underflowed ones are no "top").
  for (int j = 0; j < m; ++j)
    if (usable(j) && w[j] > 0) idx.push_back(j);
  const int take = std::min<int>(k, static_cast<int>(idx.size()));
  std::partial_sort(idx.begin(), idx.begin() + take, idx.end(),
                    [&](int a, int b) { return w[a] > w[b] || (w[a] == w[b] && a < b); });
  for (int i = 0; i < take; ++i) c.top.push_back({idx[i], w[idx[i]]});
  // The row's largest weight, with or without a top list (k = 0: another query's outline, whose
  // peak had been left out of the chart's scale and drawn above it).
  for (int j : idx) c.max = std::max(c.max, w[j]);
  return c;
}

std::string top_weights_text(const RowChart& c, const std::vector<std::string>& keys) {
  return top_weights_text(c, keys, c.top.size());
}

std::string top_weights_text(const RowChart& c, const std::vector<std::string>& keys, std::size_t items) {
  std::string out;
  const std::size_t n = std::min(items, c.top.size());
  for (std::size_t r = 0; r < n; ++r)
    out += (r == 0 ? "  ·  " : ", ") + std::to_string(r + 1) + ") " + keys.at(c.top[r].key) + " " +
           percent_text(c.top[r].weight) + "%";
  if (n > 0 && n < c.top.size()) out += ", …";
  return out;
}

std::string fit_row_chart_title(const std::string& head, const RowChart& c, const std::vector<std::string>& keys,
                                float width, const TextMeasure& measure) {
  for (std::size_t k = c.top.size() + 1; k-- > 0;) {
    const std::string t = head + top_weights_text(c, keys, k);
    if (measure(t) <= width) return t;
  }
  return ellipsize(head, width, measure);
}

std::vector<LabelBox> place_labels(const std::vector<LabelBox>& wish, float lo_x, float hi_x, float top_y,
                                   const std::vector<LabelBox>& bars) {
  const auto meet = [](const LabelBox& a, const LabelBox& b) {
    return a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h;
  };
  std::vector<LabelBox> out;
  out.reserve(wish.size());
  for (const LabelBox& want : wish) {
    const auto fit = [&](float x, float y) {
      LabelBox b = want;
      b.x = std::clamp(x, lo_x, std::max(lo_x, hi_x - want.w));
      b.y = std::max(y, top_y);
      return b;
    };
    // What this number must not meet: the numbers placed, and the bars within a few label widths
    // (the candidates never move further than that).
    std::vector<LabelBox> block = out;
    for (const LabelBox& b : bars)
      if (b.x < want.x + want.w * 4 && want.x - want.w * 3 < b.x + b.w) block.push_back(b);
    std::vector<LabelBox> cand = {fit(want.x, want.y)};
    for (const LabelBox& p : block) {
      cand.push_back(fit(p.x + p.w, want.y));
      cand.push_back(fit(p.x - want.w, want.y));
      cand.push_back(fit(want.x, p.y - want.h));
      cand.push_back(fit(p.x + p.w, p.y - want.h));
      cand.push_back(fit(p.x - want.w, p.y - want.h));
    }
    const auto dist = [&](const LabelBox& b) {
      return (b.x - want.x) * (b.x - want.x) + (b.y - want.y) * (b.y - want.y);
    };
    std::stable_sort(cand.begin(), cand.end(), [&](const LabelBox& a, const LabelBox& b) { return dist(a) < dist(b); });
    LabelBox chosen = want;
    for (const LabelBox& c : cand)
      if (std::none_of(block.begin(), block.end(), [&](const LabelBox& p) { return meet(c, p); })) {
        chosen = c;
        break;
      }
    out.push_back(chosen);
  }
  return out;
}

}  // namespace attnlab::viewer
