// The one display-width function of the text outputs (core/format.h): the CLI's tables, verify's
// report and the walk's tables pad with it, so a token lines up however it is written.
#include "core/format.h"

#include <gtest/gtest.h>

#include <string>

namespace attnlab {
namespace {

TEST(TextWidth, ColumnsOfEachKindOfCodePoint) {
  EXPECT_EQ(display_width(""), 0);
  EXPECT_EQ(display_width("abc"), 3);
  EXPECT_EQ(display_width("上下文"), 6);          // CJK ideographs: two columns each
  EXPECT_EQ(display_width("한"), 2);              // Hangul syllable
  EXPECT_EQ(display_width("，"), 2);              // fullwidth punctuation
  EXPECT_EQ(display_width("e\xCC\x81"), 1);        // e + combining acute: one column
  EXPECT_EQ(display_width("a\xE2\x80\x8B" "b"), 2);  // a zero-width space between a and b
  EXPECT_EQ(display_width("\xF0\x9F\x98\x80"), 2);  // 😀 (U+1F600)
  EXPECT_EQ(display_width("\xF0\xA0\x80\x80"), 2);  // U+20000, CJK extension B
  EXPECT_EQ(display_width("−∞"), 2);              // ambiguous width counts one
  EXPECT_EQ(display_width("\xFF" "a"), 2);         // an invalid byte counts one
  EXPECT_EQ(display_width("\xE4\xB8"), 2);         // a truncated sequence: each byte one
}

TEST(TextWidth, PaddingCountsColumnsNotBytes) {
  EXPECT_EQ(pad_left("上下文", 8), "  上下文");
  EXPECT_EQ(pad_right("上下文", 8), "上下文  ");
  EXPECT_EQ(pad_right("e\xCC\x81", 3), "e\xCC\x81  ");
  EXPECT_EQ(pad_left("wide", 2), "wide");  // already wider: as is
}

}  // namespace
}  // namespace attnlab
