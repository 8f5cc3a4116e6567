// Where the viewer may break a line of mixed Chinese / English text (viewer/draw/strings.h:
// wrap_units), without ImGui: numbers and words stay whole, closing punctuation never starts a
// line, and a list of numbers joined by "、" can break after every "、". The lines themselves
// (wrap_lines, with a stand-in font): the same as the greedy loop that measured the growing line,
// paragraphs, over-wide units, leading spaces; and the cache of lines (WrapCache).
#include "core/stats.h"
#include "viewer/app/options.h"
#include "viewer/session/session.h"
#include "viewer/draw/strings.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
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
  EXPECT_EQ(wrap_units("权重（上）"), (std::vector<std::string>{"权", "重", "（上）"}));
}

// Opening brackets and quotes join what follows: "（" never ends a line, whether a Chinese
// character or a word comes next.
TEST(TextWrap, OpeningBracketsNeverEndALine) {
  EXPECT_EQ(wrap_units("无关（log-sum-exp）"), (std::vector<std::string>{"无", "关", "（log-sum-exp）"}));
  EXPECT_EQ(wrap_units("称为“上下文”"), (std::vector<std::string>{"称", "为", "“上", "下", "文”"}));
  EXPECT_EQ(wrap_units("a (b) c"), (std::vector<std::string>{"a", " ", "(b)", " ", "c"}));
  EXPECT_EQ(wrap_units("（ 空"), (std::vector<std::string>{"（", " ", "空"})) << "a space after it breaks as before";
  // The decode panel's sentence at every width: no line ends with an opening bracket.
  const std::string text = "合并：两个状态的合并是精确的，与顺序无关（log-sum-exp）";
  const TextMeasure m = [](const std::string& s) { return 18.0f * static_cast<float>(utf8_codepoints(s).size()); };
  for (float w = 18; w <= 18 * 40; w += 9)
    for (const std::string& line : wrap_lines(text, w, m)) {
      ASSERT_GE(line.size(), 3u);
      EXPECT_NE(line.substr(line.size() - 3), "（") << "width " << w << ": " << line;
    }
}

// The description of a random sequence lists thousands of weights as "0.000、0.001、…": each
// number with its "、" must be a piece of its own, or the whole list is one unbreakable line.
TEST(TextWrap, ListsJoinedByIdeographicCommasBreakAfterEachComma) {
  EXPECT_EQ(wrap_units("0.219、0.102、0.260⋯"),
            (std::vector<std::string>{"0.219、", "0.102、", "0.260⋯"}));
}

// A stand-in font: advances in the shape of a proportional CJK font (ideographs wide, spaces
// narrow, a few thin Latin letters), all multiples of 1/16 px so that float sums are exact in any
// order and the comparison below does not depend on rounding noise.
float advance(unsigned cp) {
  if (cp >= 0x2E80) return 18.0f;
  if (cp == ' ') return 4.5f;
  if (cp == 'i' || cp == 'l' || cp == '.' || cp == ',') return 4.25f;
  if (cp >= '0' && cp <= '9') return 10.0625f;
  return 9.5625f;
}

// The unrounded width, summed glyph by glyph as ImFont::CalcTextSizeA does.
float raw_width(const std::string& s) {
  float w = 0;
  for (unsigned cp : utf8_codepoints(s)) w += advance(cp);
  return w;
}

// ImGui::CalcTextSize's rounding of that sum (imgui.cpp 1.86).
float round_up(float w) { return static_cast<float>(static_cast<int>(w + 0.99999f)); }

// The viewer's earlier loop (ui.cpp before wrap_lines): measure line + unit, rounded, every time,
// with `measure` (default: raw_width) as the font.
std::vector<std::string> greedy_reference(const std::string& text, float width,
                                          float (*measure)(const std::string&) = raw_width) {
  std::vector<std::string> out;
  std::size_t para_start = 0;
  while (para_start <= text.size()) {
    std::size_t para_end = text.find('\n', para_start);
    if (para_end == std::string::npos) para_end = text.size();
    std::string line;
    for (const std::string& u : wrap_units(text.substr(para_start, para_end - para_start))) {
      const std::string candidate = line + u;
      if (line.empty() || round_up(measure(candidate)) <= width) {
        line = line.empty() && u[0] == ' ' ? std::string() : candidate;
      } else {
        out.push_back(line);
        line = u[0] == ' ' ? std::string() : u;
      }
    }
    out.push_back(line);
    para_start = para_end + 1;
  }
  return out;
}

const char* const kMixed =
    "模型根据上下文分配权重。Attention weights describe this one weighted read; 权重为 0.219、0.102、0.260、0.165、0.254。";

std::vector<std::string> make_sample_texts() {
  std::vector<std::string> texts = {
      "",
      "\n",
      kMixed,
      "  leading spaces, then words , and a space before a comma\n\n第二段（带括号）：结束。  ",
      "a_very_long_identifier_that_is_wider_than_any_line_we_try_here_0123456789 短 x",
      caveat(Lang::Zh),
      caveat(Lang::En),
  };
  for (Lang l : {Lang::Zh, Lang::En}) {
    for (const auto& [heading, body] : science_notes(l)) texts.push_back(heading + "\n" + body);
    ViewerOptions o;
    o.backend = "cpu";
    texts.push_back(Session(o).description(l));
    o.random_n = 300;
    o.mask = MaskKind::Causal;
    texts.push_back(Session(o).description(l) + " " + mask_sentence(MaskKind::Causal, l));
  }
  return texts;
}

const std::vector<std::string>& sample_texts() {
  static const std::vector<std::string> texts = make_sample_texts();
  return texts;
}

TEST(WrapLines, SameLinesAsTheGreedyLoopThatMeasuredTheGrowingLine) {
  const std::vector<std::string>& texts = sample_texts();
  int compared = 0;
  for (const std::string& text : texts) {
    for (float width = 40; width <= 700; width += 0.75f) {
      const std::vector<std::string> want = greedy_reference(text, width);
      ASSERT_EQ(wrap_lines(text, width, raw_width, round_up), want) << "width " << width << ": " << text;
      // The rounded width is an integer: the lines depend on floor(width) only (ui.cpp's key).
      ASSERT_EQ(wrap_lines(text, std::floor(width), raw_width, round_up), want);
      ++compared;
    }
  }
  EXPECT_GT(compared, 10000);
}

TEST(WrapLines, EveryLineFitsUnlessItIsOneUnit) {
  const std::string text = kMixed;
  for (float width : {40.0f, 95.5f, 200.0f, 333.0f}) {
    for (const std::string& line : wrap_lines(text, width, raw_width)) {
      if (wrap_units(line).size() > 1) EXPECT_LE(raw_width(line), width) << line;
    }
  }
}

// The heads view's tooltip in Chinese (now drawn with wrap_lines; ImGui's TextWrapped broke it as
// "…为 6." | "9%…"): at every width its percentages stay whole on one line.
TEST(WrapLines, TheHeadsTooltipsPercentagesStayWhole) {
  char buf[512];
  std::snprintf(buf, sizeof buf, tr(Lang::Zh, S::HeadsTip), 4, "6.9", "100.0");
  const std::string text = buf;
  for (float width = 40; width <= 500; width += 1) {
    const std::vector<std::string> lines = wrap_lines(text, width, raw_width, round_up);
    int whole = 0;
    for (const std::string& line : lines) {
      whole += line.find("6.9%") != std::string::npos;
      whole += line.find("100.0%") != std::string::npos;
      EXPECT_NE(line.back(), '.') << "width " << width << ": " << line;
    }
    EXPECT_EQ(whole, 2) << "width " << width;
  }
}

TEST(WrapLines, ParagraphsSplitAtNewlinesAndEmptyOnesStay) {
  EXPECT_EQ(wrap_lines("ab\n\ncd\n", 500, raw_width), (std::vector<std::string>{"ab", "", "cd", ""}));
  EXPECT_EQ(wrap_lines("", 500, raw_width), (std::vector<std::string>{""}));
  EXPECT_EQ(wrap_lines("上下文\nkey", 500, raw_width), (std::vector<std::string>{"上下文", "key"}));
}

TEST(WrapLines, UnitWiderThanTheLineStandsAlone) {
  // "abcdefgh" is 76.1 px, wider than the 40 px line: alone on its line, never cut ("ab " keeps
  // the space that fitted after it).
  EXPECT_EQ(wrap_lines("ab abcdefgh cd", 40, raw_width), (std::vector<std::string>{"ab ", "abcdefgh", "cd"}));
  EXPECT_EQ(wrap_lines("abcdefgh", 40, raw_width), (std::vector<std::string>{"abcdefgh"}));
  // Chinese breaks between characters: 18 px each, two per 40 px line.
  EXPECT_EQ(wrap_lines("注意力机制", 40, raw_width), (std::vector<std::string>{"注意", "力机", "制"}));
}

TEST(WrapLines, LeadingSpaceUnitsAreDroppedAtTheStartOfALine) {
  EXPECT_EQ(wrap_lines("   ab", 500, raw_width), (std::vector<std::string>{"ab"}));
  // The space before "cd" does not fit after "ab" (with it): it is dropped, not carried.
  EXPECT_EQ(wrap_lines("ab cd", 22, raw_width), (std::vector<std::string>{"ab", "cd"}));
  // Closing punctuation after a space joins the piece before the space, never the space alone: a
  // unit " ," or " …" would be dropped whole at the start of a line, and the character with it
  // (the walk's "[-0.02451 … 0.012]" wrapped as "[-0.02451" | "0.012]", two numbers).
  EXPECT_EQ(wrap_units("ab ,cd"), (std::vector<std::string>{"ab ,cd"}));
  EXPECT_EQ(wrap_units("[-0.02451 … 0.012]"), (std::vector<std::string>{"[-0.02451 …", " ", "0.012]"}));
  for (float width = 20; width <= 200; width += 1) {
    std::string all;
    for (const std::string& line : wrap_lines("Σ dS [-0.02451 … 0.012]", width, raw_width)) all += line;
    EXPECT_NE(all.find("…"), std::string::npos) << width;
  }
  // Trailing spaces that fit stay on their line, as they did.
  EXPECT_EQ(wrap_lines("ab  ", 500, raw_width), (std::vector<std::string>{"ab  "}));
}

TEST(WrapLines, MeasuresEachUnitAtMostOnce) {
  const std::string text = kMixed;
  int calls = 0;
  const auto counting = [&](const std::string& s) {
    ++calls;
    return raw_width(s);
  };
  // Sums of 1/16 px steps stay 1/32 px away from this width: no decision is close enough to it
  // to need a whole-line measure.
  wrap_lines(text, 120.03125f, counting);
  EXPECT_LE(calls, static_cast<int>(wrap_units(text).size()));
  EXPECT_GT(calls, 0);
}

// Font units scaled to pixels as stb_truetype does (Noto Sans CJK: 1448 units per 15 px line
// height), so advances are inexact floats. "ab " is 1448 units, exactly 15 px on paper: a line of
// k times "ab " is as wide as a 15k px panel, and whether it fits then depends on the last bits of
// a float sum. Summed unit by unit ("ab" + " ") the bits can differ from the glyph-by-glyph sum the
// line is drawn with; wrap_lines must measure such a line whole and agree with the earlier loop.
float scaled_advance(unsigned cp) {
  const float scale = 15.0f / 1448.0f;
  const int units = cp >= 0x2E80 ? 1000 : cp == ' ' ? 448 : cp >= '0' && cp <= '9' ? 553 : 500;
  return scale * static_cast<float>(units);
}
float scaled_width(const std::string& s) {
  float w = 0;
  for (unsigned cp : utf8_codepoints(s)) w += scaled_advance(cp);
  return w;
}

TEST(WrapLines, LinesExactlyAsWideAsThePanelAreDecidedByTheWholeLinesWidth) {
  std::string text;
  for (int i = 0; i < 120; ++i) text += i % 7 == 6 ? "字 " : "ab ";
  text += "\n0.5 ab 上下文 12 ab ab";
  int whole_line_measures = 0;
  const auto counting = [&](const std::string& s) {
    if (wrap_units(s).size() > 1) ++whole_line_measures;
    return scaled_width(s);
  };
  for (float width = 40; width <= 1800; width += 1) {
    ASSERT_EQ(wrap_lines(text, width, counting, round_up), greedy_reference(text, width, scaled_width))
        << "width " << width;
  }
  EXPECT_GT(whole_line_measures, 0) << "the sweep should meet lines exactly as wide as the panel";
}

TEST(WrapCache, AHitMeasuresNothingAndEveryKeyChangeWrapsAgain) {
  WrapCache cache;
  int calls = 0;
  const auto counting = [&](const std::string& s) {
    ++calls;
    return raw_width(s);
  };
  const int font_a = 0, font_b = 0;
  const std::string text = kMixed;
  const std::vector<std::string> want = wrap_lines(text, 200, raw_width);
  EXPECT_EQ(cache.lines(text, 200, &font_a, 18, counting), want);
  const int first = calls;
  EXPECT_GT(first, 0);
  EXPECT_EQ(cache.lines(text, 200, &font_a, 18, counting), want);
  EXPECT_EQ(cache.lines(std::string(text), 200, &font_a, 18, counting), want);
  EXPECT_EQ(calls, first) << "an unchanged key must not measure";
  EXPECT_EQ(cache.misses(), 1u);
  // Each part of the key: width, font, size, text (another language, another query, ...).
  EXPECT_EQ(cache.lines(text, 150, &font_a, 18, counting), wrap_lines(text, 150, raw_width));
  cache.lines(text, 200, &font_b, 18, counting);
  cache.lines(text, 200, &font_a, 20, counting);
  cache.lines(text + "。", 200, &font_a, 18, counting);
  EXPECT_EQ(cache.misses(), 5u);
  EXPECT_EQ(cache.size(), 5u);
  EXPECT_EQ(cache.lines(text, 200, &font_a, 18, counting), want);
  EXPECT_EQ(cache.misses(), 5u);
}

TEST(WrapCache, StaysBounded) {
  WrapCache cache;
  const int font = 0;
  for (int i = 0; i < 1000; ++i) {
    const std::string text = "temperature " + std::to_string(i);
    EXPECT_EQ(cache.lines(text, 60, &font, 18, raw_width), wrap_lines(text, 60, raw_width));
    EXPECT_LE(cache.size(), WrapCache::kMaxEntries);
  }
}

}  // namespace
}  // namespace attnlab::viewer
