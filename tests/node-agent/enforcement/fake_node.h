// Test doubles of the out-of-band checks' inputs: a /proc tree (stat, status, ns/pid, cgroup per
// process), NVML's per-process figures, share folders with a limits and a usage page, and the
// slots a shim (or a hostile tenant) writes into it.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "enforcement/checker.h"
#include "tessera/share_contract.h"
#include "tessera/share_folder/limits_writer.h"
#include "tessera/share_region.h"

namespace tessera::agent::testing {

namespace fs = std::filesystem;

inline fs::path fresh_folder(const std::string& name) {
  const fs::path base = fs::temp_directory_path() / (name + "-" + std::to_string(getpid()));
  fs::remove_all(base);
  fs::create_directories(base);
  return base;
}

// "/kubepods/besteffort/pod<uid>/<container>" as kubelet's cgroupfs driver names it (v1 and v2
// lines, as /proc/<pid>/cgroup shows them on a hybrid host).
inline std::string pod_cgroup_file(const std::string& pod_uid) {
  const std::string path = "/kubepods/besteffort/pod" + pod_uid + "/0123456789abcdef";
  return "12:memory:" + path + "\n5:cpu,cpuacct:" + path + "\n0::" + path + "\n";
}

class FakeProc {
 public:
  explicit FakeProc(fs::path root) : root_(std::move(root)) { fs::create_directories(root_); }
  const fs::path& root() const { return root_; }

  // A live process `host_pid`, pid `inner_pid` in pid namespace `ns`, started at `start_time`,
  // a child of `parent`.
  void add(int host_pid, uint64_t start_time, const std::string& cgroup = "0::/\n",
           uint64_t ns = 4026531836, int inner_pid = 0, int parent = 1) {
    const fs::path dir = root_ / std::to_string(host_pid);
    fs::create_directories(dir / "ns");
    std::ofstream(dir / "stat") << host_pid << " (tenant) S " << parent
                                << " 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 " << start_time
                                << " 0 0\n";
    const int inner = inner_pid ? inner_pid : host_pid;
    std::ofstream(dir / "status") << "Name:\ttenant\nState:\tS (sleeping)\nPid:\t" << host_pid
                                  << "\nNSpid:\t" << host_pid << "\t" << inner << "\n";
    std::ofstream(dir / "cgroup") << cgroup;
    std::error_code ec;
    fs::remove(dir / "ns" / "pid", ec);
    fs::create_symlink("pid:[" + std::to_string(ns) + "]", dir / "ns" / "pid");
  }
  void remove(int host_pid) { fs::remove_all(root_ / std::to_string(host_pid)); }
  // The owner word the shim of that process writes.
  static uint64_t owner(int host_pid, uint64_t start_time, uint64_t ns = 4026531836,
                        int inner_pid = 0) {
    return share::make_owner(static_cast<uint32_t>(inner_pid ? inner_pid : host_pid), ns,
                             start_time);
  }

 private:
  fs::path root_;
};

class FakeGpus final : public GpuProcessSource {
 public:
  Result<std::vector<GpuProcessMemory>> memory(const std::string& uuid) override {
    ++memory_calls;
    asked.insert(uuid);
    if (lost.count(uuid)) return unavailable("GPU " + uuid + " is lost");
    return processes[uuid];
  }
  Result<std::vector<GpuProcessBusy>> busy(const std::string& uuid) override {
    // As NVML on a MIG device: NOT_SUPPORTED (kFailedPrecondition).
    if (busy_unsupported.count(uuid))
      return failed_precondition("process utilisation of " + uuid + ": Not Supported");
    return utilization[uuid];
  }
  // The GPU's free memory (reclaim); a GPU not in `free` does not say.
  Result<uint64_t> free_memory(const std::string& uuid) override {
    const auto it = free.find(uuid);
    if (it == free.end()) return unavailable("no free-memory figure for " + uuid);
    return it->second;
  }
  std::map<std::string, uint64_t> free;
  std::map<std::string, std::vector<GpuProcessMemory>> processes;
  std::map<std::string, std::vector<GpuProcessBusy>> utilization;
  std::set<std::string> lost;
  std::set<std::string> busy_unsupported;  // MIG devices: no per-process utilisation
  std::set<std::string> asked;             // every UUID memory() was asked for
  uint64_t memory_calls = 0;
};

class RecordingHandler final : public FindingHandler {
 public:
  void handle(const Finding& finding) override { findings.push_back(finding); }
  std::vector<Finding> findings;
};

// A share folder with a limits page for `uuid` and an empty usage page.
inline void make_share_folder(const fs::path& folder, const std::string& uuid, uint64_t limit) {
  fs::create_directories(folder);
  share_folder::DeviceLimit device;
  device.uuid = uuid;
  device.memory_limit = limit;
  ASSERT_EQ(share_folder::write_limits(folder.string(), {device}).message(), "");
  ASSERT_EQ(share::create_usage_page(folder.string().c_str()), 0);
}

// Writes one slot of <folder>/usage as a shim would (and raises the high-water mark).
inline void write_slot(const fs::path& folder, uint32_t index, uint64_t owner, uint64_t bytes,
                       uint32_t device = 0, bool raise_mark = true) {
  share::UsagePage* page = nullptr;
  ASSERT_EQ(share::map_usage_page((folder / "usage").c_str(), true, page), 0);
  page->slots[index].owner.store(owner);
  page->slots[index].bytes[device].store(bytes);
  if (raise_mark && page->slot_high_water.load() < index + 1)
    page->slot_high_water.store(index + 1);
  share::unmap_usage_page(page);
}

// A copy of <folder>/usage's page as it is now (read with the shim's own mapping: test data).
struct PageCopy {
  uint32_t high_water = 0;
  std::vector<uint64_t> owners, bytes;  // per slot, device 0
  bool valid = false;
};
inline PageCopy copy_page(const fs::path& folder) {
  PageCopy copy;
  share::UsagePage* page = nullptr;
  if (share::map_usage_page((folder / "usage").c_str(), false, page) != 0) return copy;
  copy.valid = true;
  copy.high_water = page->slot_high_water.load();
  for (uint32_t i = 0; i < share::kMaxSlots; ++i) {
    copy.owners.push_back(page->slots[i].owner.load());
    copy.bytes.push_back(page->slots[i].bytes[0].load());
  }
  share::unmap_usage_page(page);
  return copy;
}

}  // namespace tessera::agent::testing
