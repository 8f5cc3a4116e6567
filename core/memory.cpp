// The host's memory (see core/memory.h).
#include "core/memory.h"

#include "core/format.h"
#include "core/types.h"

#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace attnlab {

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

}  // namespace attnlab
