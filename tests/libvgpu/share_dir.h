// A share directory as the node agent prepares it, for tests: writes the limits page, reads the
// usage page.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "region.h"
#include "tessera/share_contract.h"
#include "tessera/share_region.h"

namespace tessera::vgpu::testing {

inline std::string sim_uuid(int index) {
  char uuid[64];
  std::snprintf(uuid, sizeof uuid, "GPU-5e1a0000-7e55-4e2a-9000-%012x", index);
  return uuid;
}

// A share directory as the node agent prepares it.
class ShareDir {
 public:
  explicit ShareDir(const std::vector<std::pair<std::string, uint64_t>>& devices) {
    char path[] = "/tmp/tessera-share-XXXXXX";
    if (!mkdtemp(path)) std::abort();
    path_ = path;
    const std::string limits = path_ + "/limits";
    const int fd = open(limits.c_str(), O_RDWR | O_CREAT | O_EXCL, 0644);
    if (fd < 0 || ftruncate(fd, sizeof(share::LimitsPage)) != 0) std::abort();
    void* memory =
        mmap(nullptr, sizeof(share::LimitsPage), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (memory == MAP_FAILED) std::abort();
    limits_ = static_cast<share::LimitsPage*>(memory);
    share::init_limits_page(*limits_);
    for (size_t i = 0; i < devices.size(); ++i) {
      std::snprintf(limits_->devices[i].uuid, share::kUuidBytes, "%s", devices[i].first.c_str());
      limits_->devices[i].memory_limit.store(devices[i].second);
      limits_->devices[i].cores_request.store(100);
    }
    limits_->device_count.store(static_cast<uint32_t>(devices.size()));
    limits_->generation.fetch_add(1);
  }
  ~ShareDir() {
    munmap(limits_, sizeof(share::LimitsPage));
    if (usage_) munmap(usage_, sizeof(share::UsagePage));
    unlink((path_ + "/limits").c_str());
    unlink((path_ + "/usage").c_str());
    unlink((path_ + "/" + share::kMpsMarkerFile).c_str());
    rmdir(path_.c_str());
  }
  const std::string& path() const { return path_; }
  // Marks the share as served by an MPS control daemon, as the agent's MPS backend does.
  void mark_mps() {
    const int fd = open((path_ + "/" + share::kMpsMarkerFile).c_str(), O_WRONLY | O_CREAT, 0644);
    if (fd < 0) std::abort();
    close(fd);
  }
  void set_limit(int device, uint64_t bytes) {
    limits_->devices[device].memory_limit.store(bytes);
    limits_->generation.fetch_add(1);
  }
  // The context cost the agent measured on `device` (LimitsPage::Measured::context_overhead).
  void set_context_overhead(int device, uint64_t bytes) {
    limits_->measured[device].context_overhead.store(bytes);
  }
  void set_cores(int device, uint32_t percent) {
    limits_->devices[device].cores_request.store(percent);
    limits_->generation.fetch_add(1);
  }
  share::UsagePage* usage() {
    if (!usage_) {
      const int fd = open((path_ + "/usage").c_str(), O_RDWR);
      if (fd < 0) return nullptr;
      void* memory =
          mmap(nullptr, sizeof(share::UsagePage), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      close(fd);
      if (memory == MAP_FAILED) return nullptr;
      usage_ = static_cast<share::UsagePage*>(memory);
    }
    return usage_;
  }
  // Clears the slots of processes that are gone, as the shim's next reclaim would.
  int reclaim() {
    Region region;
    return region.open_share_dir(path_.c_str()) ? region.reclaim_dead() : -1;
  }
  // The contexts word of the first claimed slot (0 when none).
  uint32_t contexts_word() {
    share::UsagePage* page = usage();
    if (!page) return 0;
    for (const auto& slot : page->slots) {
      if (slot.owner.load() != 0) return slot.contexts.load();
    }
    return 0;
  }
  // What the share holds on `device` (0 when no process ever opened the usage page).
  uint64_t used(int device = 0) {
    share::UsagePage* page = usage();
    return page ? share::share_usage(*page, static_cast<uint32_t>(device)) : 0;
  }

 private:
  std::string path_;
  share::LimitsPage* limits_ = nullptr;
  share::UsagePage* usage_ = nullptr;
};

}  // namespace tessera::vgpu::testing
