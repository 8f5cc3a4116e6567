// What the fuzz targets require of every matrix a reader accepted: the properties the rest of the
// lab relies on. A violation aborts, which libFuzzer reports as a crash with the input saved.
#pragma once

#include <cmath>
#include <cstdlib>

#include "core/types.h"

namespace attnlab::fuzz {

// parse_csv / parse_npy: non-empty, every value finite.
inline void require_finite_matrix(const MatrixF& m) {
  if (m.size() == 0) std::abort();
  for (Eigen::Index i = 0; i < m.size(); ++i)
    if (!std::isfinite(m.data()[i])) std::abort();
}

// parse_mask: non-empty, every value exactly 0 or -inf.
inline void require_mask(const MatrixF& m) {
  if (m.size() == 0) std::abort();
  for (Eigen::Index i = 0; i < m.size(); ++i) {
    const float v = m.data()[i];
    if (!(v == 0.0f || (std::isinf(v) && v < 0))) std::abort();
  }
}

}  // namespace attnlab::fuzz
