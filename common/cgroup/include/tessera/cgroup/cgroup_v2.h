// cgroup v2 as the NVIDIA driver's memory partitions need it (driver-partitions.md): the
// directories of the unified hierarchy, found from /proc/self/mountinfo (it may be mounted
// anywhere, several times, or not at all on a cgroup v1 machine), a process's cgroup from the
// `0::` line of /proc/<pid>/cgroup, and a child cgroup with an owner. Paths are injectable for
// tests; nothing here needs root except creating and removing cgroups.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "tessera/status.h"

namespace tessera::cgroup {

// One mount of the unified hierarchy: `root` is the cgroup path mounted (the mountinfo's fourth
// field, "/" for the whole hierarchy), `mount_point` the directory it appears at.
struct Mount {
  std::string root;
  std::string mount_point;
  bool operator==(const Mount&) const = default;
};

// Every cgroup2 mount listed in `mountinfo` (the text of /proc/self/mountinfo), in its order.
// Octal escapes (\040 for a space) are decoded. Lines that are not mounts are an error naming the
// line; no cgroup2 mount at all is an empty list, not an error.
Result<std::vector<Mount>> parse_cgroup2_mounts(const std::string& mountinfo);
// The same, read from `path`.
Result<std::vector<Mount>> cgroup2_mounts(const std::string& path = "/proc/self/mountinfo");

// The cgroup v2 path of a process: the `0::` line of `cgroup_file` (the text of
// /proc/<pid>/cgroup),
// "/kubepods/pod.../cri-containerd-..." or "/". kNotFound when there is none (a kernel without
// the unified hierarchy), kInvalidArgument when it is not an absolute path.
Result<std::string> parse_process_cgroup(const std::string& cgroup_file);
Result<std::string> process_cgroup(pid_t pid, const std::string& proc_root = "/proc");

// The directory of cgroup `path` under one of `mounts`: the first mount whose root contains it
// (and where the directory exists, so a mount of a subtree the process is not in is skipped).
// kNotFound naming the path when no mount shows it.
Result<std::string> directory_of(const std::vector<Mount>& mounts, const std::string& path);

// The directory of this process's own cgroup under one of `mounts` (process_cgroup, then
// directory_of): where the agent's probe, `tessera run`'s cgroup and the benchmark's go.
Result<std::string> own_cgroup_directory(const std::vector<Mount>& mounts,
                                         const std::string& proc_root = "/proc");

// A cgroup this process created, removed (rmdir) when the owner goes. The kernel refuses to remove
// a cgroup with members: remove() then says so and keeps the cgroup, to be tried again.
class OwnedCgroup {
 public:
  OwnedCgroup() = default;
  // Creates `parent_directory`/`name` (0755). kAlreadyExists-like errors name the path.
  static Result<OwnedCgroup> create(const std::string& parent_directory, const std::string& name);
  OwnedCgroup(OwnedCgroup&& other) noexcept : directory_(std::move(other.directory_)) {
    other.directory_.clear();
  }
  OwnedCgroup& operator=(OwnedCgroup&& other) noexcept;
  OwnedCgroup(const OwnedCgroup&) = delete;
  OwnedCgroup& operator=(const OwnedCgroup&) = delete;
  ~OwnedCgroup() { (void)remove(); }

  const std::string& directory() const { return directory_; }
  // Moves `pid` into the cgroup (writes cgroup.procs).
  Status add(pid_t pid) const;
  // Removes the cgroup now; ok when there is none. An error names the path and errno, and the
  // cgroup stays owned.
  Status remove();

 private:
  explicit OwnedCgroup(std::string directory) : directory_(std::move(directory)) {}
  std::string directory_;
};

}  // namespace tessera::cgroup
