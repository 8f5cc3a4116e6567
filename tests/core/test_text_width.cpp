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

// Labels must be UTF-8 (core/io.cpp check_label): the validator, and the escaped form of a name
// that goes into one line.
TEST(TextWidth, Utf8IsCheckedAndNamesPrintable) {
  for (const char* good : {"", "abc", "上下文", "e\xCC\x81", "\xF0\x9F\x98\x80", "\xF4\x8F\xBF\xBF"})
    EXPECT_TRUE(valid_utf8(good)) << good;
  for (const char* bad : {"\xFF", "a\x80", "\xC0\xAF", "\xE0\x80\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80",
                          "\xE4\xB8", "\xF5\x80\x80\x80"})
    EXPECT_FALSE(valid_utf8(bad)) << bad;
  EXPECT_EQ(printable("上下文"), "上下文");
  EXPECT_EQ(printable("a\nb\tc\x1b[31m"), "a\\x0Ab\\x09c\\x1B[31m");
  EXPECT_EQ(printable("b\xFF\xFE"), "b\\xFF\\xFE");
  EXPECT_EQ(printable("\xE4\xB8"), "\\xE4\\xB8");  // a sequence cut short: each byte escaped
}

TEST(TextWidth, PaddingCountsColumnsNotBytes) {
  EXPECT_EQ(pad_left("上下文", 8), "  上下文");
  EXPECT_EQ(pad_right("上下文", 8), "上下文  ");
  EXPECT_EQ(pad_right("e\xCC\x81", 3), "e\xCC\x81  ");
  EXPECT_EQ(pad_left("wide", 2), "wide");  // already wider: as is
}

}  // namespace
}  // namespace attnlab
