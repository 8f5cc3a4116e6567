// Formatting shared by the text outputs: numbers printf-style (so the decimal point never depends
// on an iostream locale), byte sizes, CSV fields and the display width of text in a terminal, written once for the CLI tables, the verify
// report, the bench table and CSV, and the description text.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace attnlab {

std::string format_number(const char* spec, double x);  // one printf conversion, e.g. "%.3g"
std::string fixed(double x, int decimals);              // "%.*f": 0.219 at 3 decimals
std::string short_number(double x);                     // "%.6g": a temperature as typed, 0.85
std::string two_digits(double x);                       // two significant digits, a 0 kept: 0.50, 0.0042
// A weight (0..1) as a percentage, without the "%": one decimal ("26.0"), two significant digits
// below 1 % ("0.56", "0.0042", never "0.0"). Every percentage of a weight the viewer and the CLI's
// statistics show is written this way.
std::string percent_text(double weight);
// The shortest text that reads back as the same value (std::to_chars: locale-free, unlike
// printf): "0.85", not "0.850000024".
std::string shortest_text(double x);
std::string shortest_text(float x);
// A count with its noun in English: "1 key", "4 keys" (the singular for exactly one).
std::string count_text(long long n, const char* one, const char* many);
std::string format_bytes(double bytes);                 // "12.3 GiB", "4.0 MiB", "512.0 KiB"
// A matrix entry as the page's tables show it: two decimals, −∞ / +∞, "n/a" for NaN, never
// "-0.00" (%.2e from 1e6 on). The CLI's tables and the viewer's cells and tables.
std::string table_value(float x);
// Columns a terminal gives UTF-8 text (the CLI's tables, verify's report, the walk's tables):
// 0 for combining marks and zero-width characters, 2 for East Asian Wide and Fullwidth code points
// (CJK, Hangul, fullwidth punctuation, emoji), 1 otherwise (ambiguous-width characters such as ∞
// count 1, as in non-CJK locales); an invalid byte counts as one column.
int display_width(const std::string& s);
// Whether s is well-formed UTF-8 (no stray continuation byte, no overlong form, no surrogate, no
// code point above U+10FFFF, no sequence cut short).
bool valid_utf8(std::string_view s);
// s with its control characters (below 0x20, 0x7F) and the bytes that are no UTF-8 written as
// \xNN: a name from a file (a bundle's model, a call's name, a file name) that goes into one line.
std::string printable(std::string_view s);
// s padded with spaces to `width` columns on the left (right-aligned) or the right; as is when
// it is that wide already.
std::string pad_left(const std::string& s, int width);
std::string pad_right(const std::string& s, int width);
// One CSV field: as is, or quoted (quotes doubled) when it holds , " or a line break.
std::string csv_field(const std::string& s);

}  // namespace attnlab
