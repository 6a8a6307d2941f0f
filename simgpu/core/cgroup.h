// Cgroup v2 paths for the simulated R615 driver's memory partitions (the misc backend): which
// cgroup a process is in, and which cgroup a directory under a cgroup2 mount is. Paths are kept
// relative to the root of the cgroup v2 hierarchy ("/", "/a/b"), as the `0::` line of
// /proc/<pid>/cgroup has them, so one cgroup mounted at several places is still one cgroup.
// The parsers are pure (text in, value out) and unit-tested; the readers read /proc.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace simgpu {

struct Cgroup2Mount {
  std::string mount_point;  // where it is mounted ("/sys/fs/cgroup")
  std::string root;         // the directory of the hierarchy mounted there ("/" or "/a")
};

// The path of the `0::` line of /proc/<pid>/cgroup's text; nullopt without one.
std::optional<std::string> parse_proc_cgroup(std::string_view text);
// Every cgroup2 mount listed in /proc/<pid>/mountinfo's text, escapes (\040) decoded.
std::vector<Cgroup2Mount> parse_cgroup2_mounts(std::string_view mountinfo);

// `path` with "." and empty components removed and ".." applied ("/a//b/../c" -> "/a/c");
// nullopt when `path` is not absolute.
std::optional<std::string> normalise_absolute_path(std::string_view path);

// The cgroup (relative to the hierarchy's root) of the directory `directory`, an absolute path
// already canonical (no symlinks, "..": what realpath gives), under the deepest of `mounts` that
// holds it; nullopt when none does.
std::optional<std::string> cgroup_of_directory(std::string_view directory,
                                               const std::vector<Cgroup2Mount>& mounts);

// `ancestor` is `path` or one of its ancestors ("/" is every cgroup's; "/a" is not "/ab"'s).
bool is_same_or_ancestor(std::string_view ancestor, std::string_view path);

// The cgroup v2 path of process `pid` (0: this process), from /proc; nullopt when it cannot be
// read (the process is gone) or it has no `0::` line.
std::optional<std::string> read_process_cgroup(int pid);

// Why a directory is not a cgroup of this machine's cgroup v2 hierarchy.
enum class CgroupLookupError {
  kNoHierarchy,    // no cgroup2 mount in /proc/self/mountinfo (a cgroup v1 machine)
  kNotADirectory,  // the path does not exist or is not a directory
  kOutsideMounts,  // a directory, but under no cgroup2 mount
};

struct CgroupLookup {
  std::optional<std::string> cgroup;  // set on success
  CgroupLookupError error = CgroupLookupError::kNoHierarchy;
};

// The cgroup a directory such as "/sys/fs/cgroup/a/b" names, resolved (realpath) against the
// cgroup2 mounts of /proc/self/mountinfo.
CgroupLookup lookup_cgroup_directory(const char* directory);

}  // namespace simgpu
