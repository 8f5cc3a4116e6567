// font_file_usable: what the viewer checks before handing a font file to ImGui, whose atlas build
// aborts on a file that is not a font or on a collection index that does not exist (a wrong
// ATTNLAB_FONT did exactly that).
#include "tests/test_util.h"
#include "viewer/draw/font_file.h"

#include <gtest/gtest.h>

#include <string>

using attnlab::viewer::font_file_usable;

namespace {

std::string header(const std::string& tag, unsigned version, unsigned fonts) {
  std::string h = tag;
  for (unsigned v : {version, fonts})
    for (int shift = 24; shift >= 0; shift -= 8) h += static_cast<char>((v >> shift) & 0xFF);
  return h + std::string(64, '\0');
}

TEST(FontFile, SingleFontsTakeIndexZeroOnly) {
  const attnlab::test::TempDir dir("attnlab-font");
  for (const std::string tag : {std::string("\x00\x01\x00\x00", 4), std::string("true"), std::string("OTTO")}) {
    const std::string path = dir.file("f.ttf");
    attnlab::test::write_file(path, header(tag, 0, 0));
    EXPECT_TRUE(font_file_usable(path, 0));
    EXPECT_FALSE(font_file_usable(path, 1));
    EXPECT_FALSE(font_file_usable(path, -1));
  }
}

TEST(FontFile, CollectionsTakeTheIndicesTheyHold) {
  const attnlab::test::TempDir dir("attnlab-font");
  const std::string path = dir.file("f.ttc");
  attnlab::test::write_file(path, header("ttcf", 0x00010000u, 2));
  EXPECT_TRUE(font_file_usable(path, 0));
  EXPECT_TRUE(font_file_usable(path, 1));
  EXPECT_FALSE(font_file_usable(path, 2));
  attnlab::test::write_file(path, header("ttcf", 0x00030000u, 2));  // unknown version
  EXPECT_FALSE(font_file_usable(path, 0));
}

TEST(FontFile, AnythingElseIsRefused) {
  const attnlab::test::TempDir dir("attnlab-font");
  const std::string text = dir.file("readme.md"), tiny = dir.file("tiny.ttf");
  attnlab::test::write_file(text, "# not a font, but a file that exists\n");
  attnlab::test::write_file(tiny, "OTT");
  EXPECT_FALSE(font_file_usable(text, 0));
  EXPECT_FALSE(font_file_usable(tiny, 0));
  EXPECT_FALSE(font_file_usable(dir.file("missing.ttf"), 0));
  EXPECT_FALSE(font_file_usable(dir.path(), 0));
}

}  // namespace
