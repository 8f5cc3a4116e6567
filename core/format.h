// Formatting shared by the text outputs: numbers printf-style (so the decimal point never depends
// on an iostream locale), byte sizes and CSV fields, written once for the CLI tables, the verify
// report, the bench table and CSV, and the description text.
#pragma once

#include "core/messages.h"

#include <string>
#include <vector>

namespace attnlab {

std::string format_number(const char* spec, double x);  // one printf conversion, e.g. "%.3g"
std::string fixed(double x, int decimals);              // "%.*f": 0.219 at 3 decimals
std::string short_number(double x);                     // "%.6g": a temperature as typed, 0.85
std::string format_bytes(double bytes);                 // "12.3 GiB", "4.0 MiB", "512.0 KiB"
// A matrix entry as the page's tables show it: two decimals, −∞ / +∞, "n/a" for NaN, never
// "-0.00" (%.2e from 1e6 on). The CLI's tables and the viewer's cells and tables.
std::string table_value(float x);
// One CSV field: as is, or quoted (quotes doubled) when it holds , " or a line break.
std::string csv_field(const std::string& s);

// MemAvailable from /proc/meminfo in bytes; 0 where it cannot be read (then nothing is refused).
// Here because every memory refusal message prints it through format_bytes.
double host_available_bytes();
// Refuses with ResourceError, before anything is allocated, `need` bytes (for `what`) that would
// not fit in 90 % of MemAvailable: "<what>: needs about X of host memory, Y available; <advice>".
// Where MemAvailable cannot be read, nothing is refused.
void check_host_memory(double need, const std::string& what, const std::string& advice);
// The same with a catalogued message (core/messages.h): `args`, then the need and MemAvailable.
void check_host_memory(double need, Msg id, std::vector<std::string> args);

}  // namespace attnlab
