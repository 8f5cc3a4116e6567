// The host's memory (see core/memory.h).
#include "core/memory.h"

#include "core/format.h"
#include "core/types.h"

#include <sys/resource.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace attnlab {

namespace {

// The first number of a file (a cgroup's limit or usage); nullopt where it cannot be read or
// says "max".
std::optional<double> file_number(const std::string& path) {
  std::ifstream in(path);
  double v = 0;
  if (in >> v) return v;
  return std::nullopt;
}

// VmSize of this process in bytes (its address space), 0 where /proc/self/status cannot be read.
double address_space_bytes() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmSize:", 0) == 0) {
      std::istringstream words(line.substr(7));
      double kib = 0;
      if (words >> kib) return kib * 1024.0;
    }
  return 0;
}

// The value of `key` in a cgroup's memory.stat ("key value" lines), 0 where it is not there.
double stat_value(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string k;
  double v = 0;
  while (in >> k >> v)
    if (k == key) return v;
  return 0;
}

}  // namespace

std::optional<double> cgroup_room_bytes(const std::string& proc_cgroup, const std::string& root) {
  // Limits at or above 2^60 bytes are "no limit" (v1 writes one near 2^63).
  constexpr double kNoLimit = 1152921504606846976.0;
  std::istringstream lines(proc_cgroup);
  for (std::string line; std::getline(lines, line);) {
    // "0::PATH" (v2) or "N:memory:PATH" (v1, a controller list naming memory).
    const std::size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    const bool v2 = line.compare(0, a, "0") == 0 && controllers.empty();
    bool v1 = false;
    for (std::size_t i = 0; !v2 && i <= controllers.size();) {
      const std::size_t comma = std::min(controllers.find(',', i), controllers.size());
      v1 = v1 || controllers.compare(i, comma - i, "memory") == 0;
      i = comma + 1;
    }
    if (!v2 && !v1) continue;
    const std::string mount = root + (v2 ? "" : "/memory");
    const char* limit_file = v2 ? "/memory.max" : "/memory.limit_in_bytes";
    const char* usage_file = v2 ? "/memory.current" : "/memory.usage_in_bytes";
    // Inactive file pages count in the usage but are reclaimed under pressure (MemAvailable
    // counts them free too): a container whose page cache filled it to its limit still has them.
    const char* reclaimable = v2 ? "inactive_file" : "total_inactive_file";
    // The process's group and each group above it up to the mount's root: the tightest room of
    // them. A path not under the mount (a container without its own cgroup namespace sees the
    // host's path, its own group at the mount's root) is the root alone: its prefixes there would
    // be other groups.
    std::optional<double> room;
    for (std::string rel = std::filesystem::is_directory(mount + path) ? path : "";;) {
      const std::string dir = mount + rel;
      const std::optional<double> limit = file_number(dir + limit_file);  // nullopt: "max" or absent
      if (limit && *limit < kNoLimit) {
        const double used = file_number(dir + usage_file).value_or(0.0) - stat_value(dir + "/memory.stat", reclaimable);
        const double here = std::max(0.0, *limit - std::max(0.0, used));
        room = room ? std::min(*room, here) : here;
      }
      if (rel.empty() || rel == "/") break;
      rel.erase(std::min(rel.size(), rel.find_last_of('/')));
    }
    if (room) return room;
  }
  return std::nullopt;
}

std::optional<double> host_available_bytes() {
  std::optional<double> avail;
  {
    std::ifstream in("/proc/meminfo");
    std::string key, unit;
    double kib = 0;
    while (in >> key >> kib >> unit)
      if (key == "MemAvailable:") {
        avail = kib * 1024.0;
        break;
      }
  }
  // The room an allocation really has: under a cap on the address space (ulimit -v) and a
  // cgroup's memory limit (a container) as well as the machine's.
  const auto cap = [&avail](double room) { avail = avail ? std::min(*avail, room) : room; };
  rlimit rl{};
  if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
    cap(std::max(0.0, static_cast<double>(rl.rlim_cur) - address_space_bytes()));
  std::ifstream self("/proc/self/cgroup");
  const std::string groups((std::istreambuf_iterator<char>(self)), std::istreambuf_iterator<char>());
  if (const std::optional<double> room = cgroup_room_bytes(groups, "/sys/fs/cgroup")) cap(*room);
  return avail;
}

namespace {

// The room a run may take: nine tenths of what is free (the rest for what no estimate counts). It
// is the room a refusal names, so that a refused need always reads above it.
std::optional<double> usable_room() {
  const std::optional<double> avail = host_available_bytes();
  return avail ? std::optional<double>(0.9 * *avail) : std::nullopt;
}

}  // namespace

void check_host_memory(double need, const std::string& what, const std::string& advice) {
  const std::optional<double> room = usable_room();
  if (room && need > *room)
    throw ResourceError(what + ": needs about " + format_bytes(need) + " of host memory, " + format_bytes(*room) +
                        " available; " + advice);
}

void check_host_memory(double need, Msg id, std::vector<std::string> args) {
  const std::optional<double> room = usable_room();
  if (room && need > *room) {
    args.push_back(format_bytes(need));
    args.push_back(format_bytes(*room));
    throw ResourceError(id, std::move(args));
  }
}

}  // namespace attnlab
