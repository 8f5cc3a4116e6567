// See font_file.h.
#include "viewer/draw/font_file.h"

#include <cstdint>
#include <fstream>

namespace attnlab::viewer {

bool font_file_usable(const std::string& path, int index) {
  if (index < 0) return false;
  std::ifstream in(path, std::ios::binary);
  unsigned char h[12] = {};
  if (!in.read(reinterpret_cast<char*>(h), sizeof h)) return false;
  const auto be32 = [&h](int at) {
    return static_cast<std::uint32_t>(h[at]) << 24 | static_cast<std::uint32_t>(h[at + 1]) << 16 |
           static_cast<std::uint32_t>(h[at + 2]) << 8 | static_cast<std::uint32_t>(h[at + 3]);
  };
  const std::uint32_t tag = be32(0);
  if (tag == 0x00010000u || tag == 0x74727565u /* true */ || tag == 0x4F54544Fu /* OTTO */)
    return index == 0;
  if (tag == 0x74746366u /* ttcf */) {
    const std::uint32_t version = be32(4);
    return (version == 0x00010000u || version == 0x00020000u) &&
           static_cast<std::uint32_t>(index) < be32(8);
  }
  return false;
}

}  // namespace attnlab::viewer
