// Number formatting shared by the text outputs (see core/format.h).
#include "core/format.h"

#include "core/types.h"

#include <cmath>
#include <cstdio>
#include <fstream>

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

std::string format_bytes(double bytes) {
  constexpr double kKiB = 1024.0, kMiB = kKiB * 1024, kGiB = kMiB * 1024;
  if (bytes >= kGiB) return format_number("%.1f GiB", bytes / kGiB);
  if (bytes >= 0.1 * kMiB) return format_number("%.1f MiB", bytes / kMiB);
  return format_number("%.1f KiB", bytes / kKiB);
}

double host_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  double kib = 0;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024.0;
  return 0;
}

void check_host_memory(double need, const std::string& what, const std::string& advice) {
  const double avail = host_available_bytes();
  if (avail > 0 && need > 0.9 * avail)
    throw ResourceError(what + ": needs about " + format_bytes(need) + " of host memory, " +
                        format_bytes(avail) + " available; " + advice);
}

void check_host_memory(double need, Msg id, std::vector<std::string> args) {
  const double avail = host_available_bytes();
  if (avail > 0 && need > 0.9 * avail) {
    args.push_back(format_bytes(need));
    args.push_back(format_bytes(avail));
    throw ResourceError(id, std::move(args));
  }
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
