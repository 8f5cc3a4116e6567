// PNG write/read through libstb (see png_io.h).
#include "viewer/draw/png_io.h"

#include "core/io.h"

#include <stb_image.h>
#include <stb_image_write.h>

#include <stdexcept>
#include <string>

namespace attnlab::viewer {

void write_png(const std::string& path, const Image& img) {
  if (img.width <= 0 || img.height <= 0 ||
      img.rgba.size() != static_cast<std::size_t>(img.width) * img.height * 4) {
    throw std::runtime_error("cannot write " + path + ": empty or inconsistent image");
  }
  // Encoded in memory, then written as every file of the lab is (core/io.h write_file: a temporary
  // file renamed over the target, nothing partial left by a failure).
  std::string png;
  const auto append = [](void* to, void* data, int size) {
    static_cast<std::string*>(to)->append(static_cast<const char*>(data), static_cast<std::size_t>(size));
  };
  if (!stbi_write_png_to_func(append, &png, img.width, img.height, 4, img.rgba.data(), img.width * 4)) {
    throw std::runtime_error("cannot write " + path + ": the PNG encoder failed");
  }
  write_file(path, png);
}

Image read_png(const std::string& path) {
  int w = 0, h = 0, ch = 0;
  unsigned char* data = stbi_load(path.c_str(), &w, &h, &ch, 4);
  if (!data) throw std::runtime_error("cannot read " + path + ": " + stbi_failure_reason());
  Image img;
  img.width = w;
  img.height = h;
  img.rgba.assign(data, data + static_cast<std::size_t>(w) * h * 4);
  stbi_image_free(data);
  return img;
}

}  // namespace attnlab::viewer
