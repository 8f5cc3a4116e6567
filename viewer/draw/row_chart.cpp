// The selected row's bar chart (see row_chart.h).
#include "viewer/draw/row_chart.h"

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
  for (int j = 0; j < m; ++j)
    if (usable(j)) idx.push_back(j);
  const int take = std::min<int>(k, static_cast<int>(idx.size()));
  std::partial_sort(idx.begin(), idx.begin() + take, idx.end(),
                    [&](int a, int b) { return w[a] > w[b] || (w[a] == w[b] && a < b); });
  for (int i = 0; i < take; ++i) c.top.push_back({idx[i], w[idx[i]]});
  c.max = c.top.empty() ? 0.f : c.top.front().weight;
  return c;
}

}  // namespace attnlab::viewer
