// The host's memory, asked before anything large is allocated: MemAvailable, and the refusal
// (ResourceError) of a need that would not fit, worded through format_bytes.
#pragma once

#include "core/messages.h"

#include <string>
#include <vector>

namespace attnlab {

// MemAvailable from /proc/meminfo in bytes; 0 where it cannot be read (then nothing is refused).
double host_available_bytes();
// Refuses with ResourceError, before anything is allocated, `need` bytes (for `what`) that would
// not fit in 90 % of MemAvailable: "<what>: needs about X of host memory, Y available; <advice>".
// Where MemAvailable cannot be read, nothing is refused.
void check_host_memory(double need, const std::string& what, const std::string& advice);
// The same with a catalogued message (core/messages.h): `args`, then the need and MemAvailable.
void check_host_memory(double need, Msg id, std::vector<std::string> args);

}  // namespace attnlab
