// Where the viewer may break a line of mixed Chinese / English text (viewer/strings.h:
// wrap_units), without ImGui: numbers and words stay whole, closing punctuation never starts a
// line, and a list of numbers joined by "、" can break after every "、".
#include "viewer/strings.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace attnlab::viewer {
namespace {

std::string join(const std::vector<std::string>& units) {
  std::string s;
  for (const auto& u : units) s += u;
  return s;
}

TEST(TextWrap, UnitsConcatenateToTheInput) {
  for (const std::string s : {"", "abc", "权重为 0.219、0.102。", "a  b", "（上下文）, 0.5…"}) {
    EXPECT_EQ(join(wrap_units(s)), s);
  }
}

TEST(TextWrap, NumbersAndWordsStayWhole) {
  EXPECT_EQ(wrap_units("weights 0.219, 0.102."),
            (std::vector<std::string>{"weights", " ", "0.219,", " ", "0.102."}));
}

TEST(TextWrap, ChineseBreaksAroundEveryCharacterButNotBeforeClosingPunctuation) {
  EXPECT_EQ(wrap_units("上下文。"), (std::vector<std::string>{"上", "下", "文。"}));
  EXPECT_EQ(wrap_units("权重（上）"), (std::vector<std::string>{"权", "重", "（", "上）"}));
}

// The description of a random sequence lists thousands of weights as "0.000、0.001、…": each
// number with its "、" must be a piece of its own, or the whole list is one unbreakable line.
TEST(TextWrap, ListsJoinedByIdeographicCommasBreakAfterEachComma) {
  EXPECT_EQ(wrap_units("0.219、0.102、0.260⋯"),
            (std::vector<std::string>{"0.219、", "0.102、", "0.260⋯"}));
}

}  // namespace
}  // namespace attnlab::viewer
