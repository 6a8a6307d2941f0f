// Which pod a host process belongs to, and its owner word: the two ways the out-of-band checks map
// a process to a share. A pod's containers run in a cgroup whose path names the pod UID (kubelet's
// systemd driver: ".../kubepods-<qos>-pod<uid, '-' as '_'>.slice/...", its cgroupfs driver:
// ".../kubepods/<qos>/pod<uid>/<container>"), read from /proc/<pid>/cgroup (v1 and v2 lines);
// the owner word (tessera/share_region.h make_owner) is what the shim writes into the usage page.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace tessera::agent {

// The pod UID (with '-', as metadata.uid spells it) named by one cgroup path, or nullopt when the
// path is in no pod's cgroup. The pod component may be at any depth (a kubelet under its own
// cgroup root, a test's tree).
std::optional<std::string> pod_uid_of_cgroup_path(std::string_view path);

// The pod UID of the first line of a /proc/<pid>/cgroup text that names one ("ID:controllers:path"
// lines, v1 and the v2 "0::path").
std::optional<std::string> pod_uid_of_cgroup_file(std::string_view text);

// Host process `host_pid`'s parent as <proc_root>/<pid>/stat says it now (never cached: a
// process's parent changes when the parent exits), nullopt when it cannot be read.
std::optional<int> parent_pid(const std::string& proc_root, int host_pid);

struct ProcessFacts {
  uint64_t start_time = 0;  // /proc/<pid>/stat field 22
  std::optional<uint64_t> owner;
  std::optional<std::string> pod_uid;
};

// Host processes by pid, cached across passes: a known pid costs one read of /proc/<pid>/stat per
// pass (its start time: a reused pid is read again in full); the pod of a cgroup path is parsed
// once per path. Not thread-safe (one checker pass at a time).
class ProcessMap {
 public:
  explicit ProcessMap(std::string proc_root = "/proc") : proc_root_(std::move(proc_root)) {}

  // Starts a pass: facts are checked again on first use in it.
  void begin_pass() { ++pass_; }
  // The facts of a live process, nullopt when it is gone (or a zombie).
  const ProcessFacts* lookup(int host_pid);
  // Drops the pids not looked up in this pass (exited processes).
  void end_pass();
  // Forgets what is known of `host_pid`: its next lookup reads it in full.
  void forget(int host_pid) { processes_.erase(host_pid); }
  // Every live process on the host (a scan of proc_root), owner word -> host pid, from the cache.
  const std::map<uint64_t, int>& live_owners();
  // Every live process on the host (one scan of proc_root, once per pass): pid -> its facts.
  const std::map<int, ProcessFacts>& walk();
  // Its parent's host pid now (the free parent_pid under proc_root).
  std::optional<int> parent_pid(int host_pid) const {
    return agent::parent_pid(proc_root_, host_pid);
  }

  const std::string& proc_root() const { return proc_root_; }
  uint64_t full_reads() const { return full_reads_; }

 private:
  struct Entry {
    ProcessFacts facts;
    uint64_t checked_pass = 0;
    bool alive = false;
  };
  std::string proc_root_;
  uint64_t pass_ = 0;
  uint64_t full_reads_ = 0;
  std::unordered_map<int, Entry> processes_;
  std::unordered_map<std::string, std::optional<std::string>> pods_by_cgroup_;  // path -> pod
  std::map<uint64_t, int> live_owners_;
  std::map<int, ProcessFacts> walked_;
  uint64_t walked_pass_ = 0;
};

}  // namespace tessera::agent
