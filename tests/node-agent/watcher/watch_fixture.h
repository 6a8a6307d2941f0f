// What the process watcher's tests share: a share folder with a usage page, children that claim a
// slot in it (through the common contract code, as the shim does) or open a device node, a
// recording FindingHandler.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "model/finding.h"
#include "tessera/share_contract.h"
#include "tessera/share_region.h"

namespace tessera::agent::testing {

// (Not TempDir: the plugin's test_support.h has one in this namespace, and both are linked into
// agent_tests.)
class WatchTempDir {
 public:
  WatchTempDir() {
    char pattern[] = "/tmp/tessera-watch-XXXXXX";
    path_ = mkdtemp(pattern);
  }
  ~WatchTempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

class RecordingFindings final : public FindingHandler {
 public:
  void handle(const Finding& finding) override {
    std::lock_guard lock(mutex_);
    findings_.push_back(finding);
  }
  std::vector<Finding> findings() const {
    std::lock_guard lock(mutex_);
    return findings_;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<Finding> findings_;
};

// Claims a free slot of `page` for `owner` and reserves `bytes` on device 0, as the shim's
// claim_slot does. The slot's index, or -1.
inline int claim_slot(share::UsagePage& page, uint64_t owner, uint32_t pid, uint64_t start_time,
                      uint64_t bytes) {
  for (uint32_t i = 0; i < share::kMaxSlots; ++i) {
    uint64_t expected = 0;
    if (!page.slots[i].owner.compare_exchange_strong(expected, owner)) continue;
    uint32_t high = page.slot_high_water.load();
    while (high < i + 1 && !page.slot_high_water.compare_exchange_weak(high, i + 1)) {
    }
    page.slots[i].pid.store(pid);
    page.slots[i].start_time.store(start_time);
    page.slots[i].bytes[0].store(bytes);
    page.slots[i].generation.fetch_add(1);
    return static_cast<int>(i);
  }
  return -1;
}

// A child that (optionally) joins the v2 cgroup `cgroup_procs` (its cgroup.procs file), claims a
// slot in <share_dir>/usage when `share_dir` is set, opens `device` when set (mapping `mapped`
// first when set), reports its owner word through a pipe, then waits to be killed.
struct Child {
  pid_t pid = -1;
  uint64_t owner = 0;
  int open_error = 0;  // errno of the device open (0 = opened)
  bool ok = false;     // the child did all it was asked to
};

inline Child spawn_child(const std::string& cgroup_procs, const std::string& share_dir,
                         const std::string& device, const std::string& mapped = "") {
  int ready[2];
  Child child;
  if (pipe(ready) != 0) return child;
  child.pid = fork();
  if (child.pid == 0) {
    close(ready[0]);
    struct Report {
      uint64_t owner;
      int open_error;
      int ok;
    } report{0, 0, 0};
    bool fine = true;
    if (!cgroup_procs.empty()) {
      const int procs = open(cgroup_procs.c_str(), O_WRONLY);
      fine = procs >= 0 && write(procs, "0", 1) == 1;
      if (procs >= 0) close(procs);
    }
    share::ProcessIdentity identity;
    fine = fine && share::read_process_identity("/proc", share::kSelfPid, identity) == 0;
    report.owner = identity.owner();
    if (fine && !share_dir.empty()) {
      share::UsagePage* page = nullptr;
      fine = share::open_or_create_usage_page(share_dir.c_str(), page) == 0 &&
             claim_slot(*page, report.owner, identity.pid, identity.start_time, 1 << 20) >= 0;
    }
    if (fine && !mapped.empty()) {
      const int fd = open(mapped.c_str(), O_RDONLY);
      fine = fd >= 0 && mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE, fd, 0) != MAP_FAILED;
    }
    if (fine && !device.empty()) {
      const int fd = open(device.c_str(), O_RDONLY);
      report.open_error = fd < 0 ? errno : 0;
    }
    report.ok = fine ? 1 : 0;
    if (write(ready[1], &report, sizeof(report)) != sizeof(report)) _exit(2);
    for (;;) pause();
  }
  close(ready[1]);
  struct {
    uint64_t owner;
    int open_error;
    int ok;
  } report{};
  if (child.pid > 0 && read(ready[0], &report, sizeof(report)) == sizeof(report)) {
    child.owner = report.owner;
    child.open_error = report.open_error;
    child.ok = report.ok != 0;
  }
  close(ready[0]);
  return child;
}

inline void reap(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

}  // namespace tessera::agent::testing
