// Number formatting shared by the text outputs: printf-style, so the decimal point never depends
// on an iostream locale, and written once for the CLI tables, the verify report, the bench table
// and the description text.
#pragma once

#include <string>

namespace attnlab {

std::string format_number(const char* spec, double x);  // one printf conversion, e.g. "%.3g"
std::string fixed(double x, int decimals);              // "%.*f": 0.219 at 3 decimals
std::string short_number(double x);                     // "%.6g": a temperature as typed, 0.85

}  // namespace attnlab
