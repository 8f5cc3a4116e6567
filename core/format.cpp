// Number formatting shared by the text outputs (see core/format.h).
#include "core/format.h"

#include <cstdio>

namespace attnlab {

std::string format_number(const char* spec, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, spec, x);
  return buf;
}

std::string fixed(double x, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, x);
  return buf;
}

std::string short_number(double x) { return format_number("%.6g", x); }

}  // namespace attnlab
