// libFuzzer target for the CSV reader: every input goes through parse_csv and through the mask
// path (parse_mask with a .csv name). Rejecting input with attnlab::InputError is the only
// allowed failure; any other exception, a crash or a sanitizer report is a bug. Accepted input
// must also satisfy what the rest of the lab relies on: a non-empty matrix whose values are
// finite (parse_csv) or exactly 0 / -inf (masks).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/io.h"
#include "tests/fuzz/fuzz_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const attnlab::MatrixF m = attnlab::parse_csv(text, "fuzz.csv");
    attnlab::fuzz::require_finite_matrix(m);
  } catch (const attnlab::InputError&) {
  }
  try {
    const attnlab::MatrixF m = attnlab::parse_mask(text, "fuzz_mask.csv");
    attnlab::fuzz::require_mask(m);
  } catch (const attnlab::InputError&) {
  }
  return 0;
}
