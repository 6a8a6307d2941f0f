// Which host processes belong to which share: the owner words the shim writes into a share's usage
// page (tessera/share_region.h make_owner: innermost pid, pid namespace, start time) matched with
// the host's processes. Used by the GPU-time meter (attribution) and the share manager (the live
// processes that keep a share at unprepare). The usage pages' owner words come from the one reader
// (tessera/share_folder/snapshot.h: UsagePageCopy::live_owners).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tessera/status.h"
#include "tessera/unique_fd.h"

namespace tessera::agent {

// The owner word (tessera/share_region.h make_owner) of host process `host_pid`, packed as the
// shim packs its own (both call share::read_process_identity): the innermost pid of the NSpid line
// of <proc_root>/<pid>/status, the inode of <proc_root>/<pid>/ns/pid, field 22 (start time) of
// <proc_root>/<pid>/stat. nullopt when the process is gone, a zombie, or any of these cannot be
// read.
std::optional<uint64_t> process_owner(const std::string& proc_root, int host_pid);

// Owner words of every live process on the host -> its host pid (a scan of <proc_root>).
std::map<uint64_t, int> live_process_owners(const std::string& proc_root = "/proc");

}  // namespace tessera::agent
