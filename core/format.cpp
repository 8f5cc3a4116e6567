// Number formatting shared by the text outputs (see core/format.h).
#include "core/format.h"

#include "core/types.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace attnlab {

std::string format_number(const char* spec, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, spec, x);
  return buf;
}

std::string shortest_text(double x) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, r.ptr);
}

std::string shortest_text(float x) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, r.ptr);
}

std::string count_text(long long n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

std::string fixed(double x, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, x);
  return buf;
}

std::string short_number(double x) { return format_number("%.6g", x); }

std::string two_digits(double x) { return format_number("%#.2g", x); }

std::string percent_text(double weight) {
  return weight < 0.01 ? two_digits(weight * 100) : format_number("%.1f", weight * 100);
}

std::string format_bytes(double bytes) {
  constexpr double kKiB = 1024.0, kMiB = kKiB * 1024, kGiB = kMiB * 1024;
  if (bytes >= kGiB) return format_number("%.1f GiB", bytes / kGiB);
  if (bytes >= 0.1 * kMiB) return format_number("%.1f MiB", bytes / kMiB);
  return format_number("%.1f KiB", bytes / kKiB);
}

// Decodes one UTF-8 code point starting at s[i]; advances i. Invalid bytes count as one column.
namespace {

char32_t next_code_point(const std::string& s, std::size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  int len = b0 < 0x80 ? 1 : (b0 >> 5) == 0x6 ? 2 : (b0 >> 4) == 0xE ? 3 : (b0 >> 3) == 0x1E ? 4 : 1;
  if (i + len > s.size()) len = 1;
  char32_t cp = len == 1 ? b0 : len == 2 ? (b0 & 0x1F) : len == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += len;
  return cp;
}

// Columns a terminal gives one code point: 0 for combining marks and zero-width characters,
// 2 for East Asian Wide and Fullwidth ranges (CJK, Hangul, fullwidth punctuation, emoji),
// 1 otherwise (ambiguous-width characters such as ∞ count as 1, as in non-CJK locales).
int code_point_width(char32_t c) {
  if (c == 0) return 0;
  if ((c >= 0x0300 && c <= 0x036F) || (c >= 0x200B && c <= 0x200F) || c == 0xFEFF) return 0;
  if ((c >= 0x1100 && c <= 0x115F) || (c >= 0x2E80 && c <= 0x303E) ||
      (c >= 0x3041 && c <= 0x33FF) || (c >= 0x3400 && c <= 0x4DBF) ||
      (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0xA000 && c <= 0xA4CF) ||
      (c >= 0xAC00 && c <= 0xD7A3) || (c >= 0xF900 && c <= 0xFAFF) ||
      (c >= 0xFE30 && c <= 0xFE4F) || (c >= 0xFF00 && c <= 0xFF60) ||
      (c >= 0xFFE0 && c <= 0xFFE6) || (c >= 0x1F300 && c <= 0x1F64F) ||
      (c >= 0x1F900 && c <= 0x1F9FF) || (c >= 0x20000 && c <= 0x3FFFD))
    return 2;
  return 1;
}

}  // namespace

int display_width(const std::string& s) {
  int w = 0;
  for (std::size_t i = 0; i < s.size();) w += code_point_width(next_code_point(s, i));
  return w;
}

namespace {
// The length of the well-formed UTF-8 sequence at s[i], or 0 where there is none.
std::size_t utf8_length(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b0 = b(i);
  if (b0 < 0x80) return 1;
  const std::size_t len = b0 >= 0xC2 && b0 <= 0xDF ? 2 : b0 >= 0xE0 && b0 <= 0xEF ? 3 : b0 >= 0xF0 && b0 <= 0xF4 ? 4 : 0;
  if (len == 0 || i + len > s.size()) return 0;
  for (std::size_t k = 1; k < len; ++k)
    if ((b(i + k) & 0xC0) != 0x80) return 0;
  const unsigned char b1 = b(i + 1);
  if ((b0 == 0xE0 && b1 < 0xA0) || (b0 == 0xED && b1 > 0x9F) || (b0 == 0xF0 && b1 < 0x90) || (b0 == 0xF4 && b1 > 0x8F))
    return 0;  // overlong, a surrogate, above U+10FFFF
  return len;
}
}  // namespace

bool valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t len = utf8_length(s, i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

std::string printable(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t len = utf8_length(s, i);
    const auto u = static_cast<unsigned char>(s[i]);
    if (len == 0 || u < 0x20 || u == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", u);
      out += buf;
      ++i;
    } else {
      out.append(s.substr(i, len));
      i += len;
    }
  }
  return out;
}

std::string pad_left(const std::string& s, int width) {
  const int w = display_width(s);
  return w >= width ? s : std::string(width - w, ' ') + s;
}

std::string pad_right(const std::string& s, int width) {
  const int w = display_width(s);
  return w >= width ? s : s + std::string(width - w, ' ');
}

std::string table_value(float x) {
  if (std::isnan(x)) return "n/a";
  if (std::isinf(x)) return x < 0 ? "−∞" : "+∞";
  std::string s = format_number(std::fabs(x) < 1e6f ? "%.2f" : "%.2e", static_cast<double>(x));
  if (s == "-0.00") s = "0.00";
  return s;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string o = "\"";
  for (char ch : s) {
    if (ch == '"') o += '"';
    o += ch;
  }
  return o + "\"";
}

}  // namespace attnlab
