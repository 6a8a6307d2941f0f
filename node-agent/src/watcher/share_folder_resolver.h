// The resolver the agent runs the process watcher with: the share folders under its state folder
// (<shares_dir>/<share id>/usage), each share's cgroups learned from the processes that own its
// slots (their v2 cgroup, /proc/<pid>/cgroup's "0::" line), refreshed by the agent. A slot owner
// in no v2 cgroup of its own makes the share report_all_exits.
#pragma once

#include <string>
#include <vector>

#include "tessera/thread_annotations.h"
#include "watcher/process_watcher.h"

namespace tessera::agent {

class ShareFolderResolver final : public ShareResolver {
 public:
  struct Options {
    std::string shares_dir;  // <state-dir>/shares
    std::string proc_root = "/proc";
    // The cgroup v2 mount: the unified hierarchy of a hybrid host, else the v2 root.
    std::vector<std::string> cgroup_roots{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"};
  };
  explicit ShareFolderResolver(Options options) : options_(std::move(options)) {}

  // Re-reads the share folders and their slot owners' cgroups.
  void refresh() TESSERA_EXCLUDES(mutex_);

  std::vector<WatchedShare> shares() const override TESSERA_EXCLUDES(mutex_);
  std::optional<WatchedShare> share_of(int host_pid, uint64_t cgroup_id,
                                       uint64_t watched_cgroup_id) const override
      TESSERA_EXCLUDES(mutex_);

 private:
  Options options_;
  mutable Mutex mutex_;
  std::vector<WatchedShare> shares_ TESSERA_GUARDED_BY(mutex_);
};

// Whether one of `cgroup_roots` is a cgroup v2 (unified) hierarchy: its root has
// cgroup.controllers, as process_cgroup_v2_id requires. False on a cgroup v1-only host, where no
// process has a v2 cgroup id for the watcher to match.
bool has_unified_cgroup_hierarchy(const std::vector<std::string>& cgroup_roots);

// At the process watcher's start: on a cgroup v1-only host (no unified hierarchy under
// `cgroup_roots`), one warning that the watcher's device-open check needs cgroup v2 and the
// periodic out-of-band check covers unshimmed processes instead. Returns whether it warned.
bool warn_if_cgroup_v1_only(const std::vector<std::string>& cgroup_roots);

// The v2 cgroup id (the inode of its folder under one of `cgroup_roots`) of host process `pid`,
// 0 when it has none there (a cgroup v1-only host), is in the root cgroup, or is gone.
uint64_t process_cgroup_v2_id(const std::string& proc_root, int pid,
                              const std::vector<std::string>& cgroup_roots);

}  // namespace tessera::agent
