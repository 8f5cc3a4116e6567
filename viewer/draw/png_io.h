// PNG files of the headless mode and the S key, through stb_image_write from Debian's libstb
// (already a dependency: Debian's libimgui links its font rasteriser from libstb), and the reader
// the screenshot tests use (stb_image). Pixels are RGBA, 8 bits per channel, rows top to bottom.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace attnlab::viewer {

struct Image {
  int width = 0, height = 0;
  std::vector<std::uint8_t> rgba;  // width * height * 4
  const std::uint8_t* at(int x, int y) const { return &rgba[(static_cast<std::size_t>(y) * width + x) * 4]; }
};

// Throws std::runtime_error naming the file when it cannot be written.
void write_png(const std::string& path, const Image& img);
// Throws std::runtime_error naming the file when it cannot be read or decoded.
Image read_png(const std::string& path);

}  // namespace attnlab::viewer
