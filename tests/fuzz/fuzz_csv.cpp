// libFuzzer target for the CSV reader: every input goes through parse_csv and through the mask
// path (parse_mask with a .csv name). Rejecting input with attnlab::InputError is the only
// allowed failure; any other exception, a crash or a sanitizer report is a bug. Accepted input
// must also satisfy what the rest of the lab relies on: a non-empty matrix whose values are
// finite (parse_csv) or exactly 0 / -inf (masks).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/io.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const attnlab::MatrixF m = attnlab::parse_csv(text, "fuzz.csv");
    if (m.size() == 0) std::abort();
    for (Eigen::Index i = 0; i < m.size(); ++i) {
      if (!std::isfinite(m.data()[i])) std::abort();
    }
  } catch (const attnlab::InputError&) {
  }
  try {
    const attnlab::MatrixF m = attnlab::parse_mask(text, "fuzz_mask.csv");
    if (m.size() == 0) std::abort();
    for (Eigen::Index i = 0; i < m.size(); ++i) {
      const float v = m.data()[i];
      if (!(v == 0.0f || (std::isinf(v) && v < 0))) std::abort();
    }
  } catch (const attnlab::InputError&) {
  }
  return 0;
}
