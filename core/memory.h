// The host's memory, asked before anything large is allocated: the room this process has
// (MemAvailable, an address-space cap, a cgroup's limit), and the refusal (ResourceError) of a
// need that would not fit, worded through format_bytes.
#pragma once

#include "core/messages.h"

#include <optional>
#include <string>
#include <vector>

namespace attnlab {

// The bytes this process may still allocate: MemAvailable from /proc/meminfo, lowered to the room
// under a cap on its address space (RLIMIT_AS, ulimit -v: the cap less VmSize) and under its
// cgroup's memory limit (cgroup_room_bytes); nullopt where none of them can be read (then nothing
// is refused). A room of 0 is a room: everything is refused.
std::optional<double> host_available_bytes();
// The room under the memory limit of the cgroup that `proc_cgroup` (the text of /proc/self/cgroup)
// names, with cgroupfs mounted at `root` (v2: memory.max less memory.current; v1: root/memory's
// memory.limit_in_bytes less memory.usage_in_bytes; the usage less its inactive file pages, which
// are reclaimed under pressure): the tightest such room of the process's group and each group
// above it up to the mount's root, or of that root alone where the group's path is not under the
// mount (a container sees its own group there); nullopt where no limit is set or none can be read.
std::optional<double> cgroup_room_bytes(const std::string& proc_cgroup, const std::string& root);
// Refuses with ResourceError, before anything is allocated, `need` bytes (for `what`) that would
// not fit in 90 % of host_available_bytes: "<what>: needs about X of host memory, Y available;
// <advice>", Y being those 90 % (the room the run may take; the rest is left for what no estimate
// counts). Where no room can be read, nothing is refused.
void check_host_memory(double need, const std::string& what, const std::string& advice);
// The same with a catalogued message (core/messages.h): `args`, then the need and the room.
void check_host_memory(double need, Msg id, std::vector<std::string> args);

}  // namespace attnlab
