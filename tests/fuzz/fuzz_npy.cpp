// libFuzzer target for the .npy reader: every input goes through parse_npy and through the mask
// path (parse_mask with a .npy name). Rejecting input with attnlab::InputError is the only allowed
// failure; any other exception (std::bad_alloc from a bogus shape, say), a crash or a sanitizer
// report is a bug. An accepted matrix must be non-empty and finite, and writing it back with
// to_npy_bytes and reading that again must give the same bits.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "core/io.h"
#include "tests/fuzz/fuzz_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    const attnlab::MatrixF m = attnlab::parse_npy(bytes, "fuzz.npy");
    attnlab::fuzz::require_finite_matrix(m);
    const attnlab::MatrixF back = attnlab::parse_npy(attnlab::to_npy_bytes(m), "roundtrip.npy");
    if (back.rows() != m.rows() || back.cols() != m.cols()) std::abort();
    if (std::memcmp(back.data(), m.data(), sizeof(float) * static_cast<std::size_t>(m.size())) !=
        0) {
      std::abort();
    }
  } catch (const attnlab::InputError&) {
  }
  try {
    const attnlab::MatrixF m = attnlab::parse_mask(bytes, "fuzz_mask.npy");
    attnlab::fuzz::require_mask(m);
  } catch (const attnlab::InputError&) {
  }
  return 0;
}
