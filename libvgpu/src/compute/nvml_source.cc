#include "compute/nvml_source.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>

#include "glibc_compat.h"
#include "log.h"

namespace tessera::vgpu {
using DlsymFn = void* (*)(void*, const char*);
DlsymFn real_dlsym();  // interpose.cc: the real dlsym, not the shim's
}  // namespace tessera::vgpu

namespace tessera::vgpu::compute {
namespace {

constexpr uint32_t kBoardMagic = 0x50444754;  // "TGDP"

unsigned long long wall_us() {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<unsigned long long>(now.tv_sec) * 1000000ull +
         static_cast<unsigned long long>(now.tv_nsec) / 1000ull;
}

}  // namespace

bool NvmlSource::open() {
  void* library = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!library) return false;
  DlsymFn lookup = real_dlsym();
  auto init = reinterpret_cast<InitFn>(lookup(library, "nvmlInit_v2"));
  handle_by_uuid_ = reinterpret_cast<HandleFn>(lookup(library, "nvmlDeviceGetHandleByUUID"));
  utilization_ = reinterpret_cast<UtilFn>(lookup(library, "nvmlDeviceGetProcessUtilization"));
  if (!init || !handle_by_uuid_ || !utilization_) return false;
  return init() == NVML_SUCCESS;
}

void NvmlSource::reset() {
  for (auto& last : last_seen_us_) last = 0;
}

bool NvmlSource::measure(int device, int64_t, Busy* out) {
  if (!handles_[device]) {
    const char* uuid = limits_->devices[device].uuid;
    if (!uuid[0] || handle_by_uuid_(uuid, &handles_[device]) != NVML_SUCCESS) {
      handles_[device] = nullptr;
      return false;
    }
  }
  const unsigned long long since = last_seen_us_[device];
  const unsigned long long now_us = wall_us();
  if (since == 0) {
    last_seen_us_[device] = now_us;  // priming: the first window starts now
    return false;
  }
  unsigned int count = kMaxSamples;
  const nvmlReturn_t result = utilization_(handles_[device], samples_, &count, since);
  *out = Busy{};
  if (result == NVML_ERROR_NOT_FOUND) {
    last_seen_us_[device] = now_us;  // nobody ran in the window
    return true;
  }
  if (result != NVML_SUCCESS) return false;
  // The share's pids: the usage page's live slots (same pid namespace as NVML on one machine).
  uint32_t high = usage_->slot_high_water.load(std::memory_order_acquire);
  if (high > share::kMaxSlots) high = share::kMaxSlots;
  unsigned long long newest = since;
  for (unsigned int i = 0; i < count && i < kMaxSamples; ++i) {
    const nvmlProcessUtilizationSample_t& sample = samples_[i];
    if (sample.timeStamp <= since) continue;
    const unsigned long long window_us = sample.timeStamp - since;
    const int64_t busy_ns = static_cast<int64_t>(sample.smUtil) * static_cast<int64_t>(window_us) *
                            10;  // percent of window, in ns
    if (sample.timeStamp > newest) newest = sample.timeStamp;
    bool ours = false;
    for (uint32_t s = 0; s < high && !ours; ++s) {
      share::ProcessSlot& slot = usage_->slots[s];
      if (slot.owner.load(std::memory_order_relaxed) != 0 &&
          slot.pid.load(std::memory_order_relaxed) == sample.pid) {
        ours = true;
        slot.gpu_busy_ns.fetch_add(static_cast<uint64_t>(busy_ns), std::memory_order_relaxed);
      }
    }
    (ours ? out->share_ns : out->others_ns) += busy_ns;
  }
  last_seen_us_[device] = newest > since ? newest : now_us;
  return true;
}

FileBoard::Page* FileBoard::page(int device) {
  if (pages_[device] || failed_[device]) return pages_[device];
  const char* uuid = limits_->devices[device].uuid;
  char path[320];
  std::snprintf(path, sizeof path, "%s/tessera-device-%s", dir_, uuid);
  int fd = ::open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    // Created fully initialised under a temporary name, then linked into place.
    char temporary[352];
    std::snprintf(temporary, sizeof temporary, "%s.%d.tmp", path, static_cast<int>(getpid()));
    const int created = ::open(temporary, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (created >= 0) {
      Page initial{};
      initial.magic = kBoardMagic;
      initial.version = 1;
      fchmod(created, 0666);  // every share on the machine writes it (see docs/compute.md)
      if (write(created, &initial, sizeof initial) == static_cast<ssize_t>(sizeof initial)) {
        link(temporary, path);
      }
      close(created);
      unlink(temporary);
    }
    fd = ::open(path, O_RDWR | O_CLOEXEC);
  }
  if (fd < 0) {
    failed_[device] = true;
    TESSERA_WARN("cannot open the priority board %s: priorities are not applied on device %d", path,
                 device);
    return nullptr;
  }
  void* memory = mmap(nullptr, sizeof(Page), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  auto* mapped = memory == MAP_FAILED ? nullptr : static_cast<Page*>(memory);
  if (!mapped || mapped->magic != kBoardMagic || mapped->version != 1) {
    failed_[device] = true;
    if (mapped) munmap(mapped, sizeof(Page));
    TESSERA_WARN("%s is not a priority board: priorities are not applied on device %d", path,
                 device);
    return nullptr;
  }
  return pages_[device] = mapped;
}

void FileBoard::announce(int device, uint32_t priority, int64_t until_ns) {
  Page* board = page(device);
  if (!board) return;
  std::atomic<uint64_t>& slot = board->active_until_ns[priority_rank(priority)];
  uint64_t current = slot.load(std::memory_order_relaxed);
  while (current < static_cast<uint64_t>(until_ns) &&
         !slot.compare_exchange_weak(current, static_cast<uint64_t>(until_ns),
                                     std::memory_order_acq_rel)) {
  }
}

bool FileBoard::higher_active(int device, uint32_t priority, int64_t now_ns) {
  Page* board = page(device);
  if (!board) return false;
  for (int rank = priority_rank(priority) + 1; rank < 3; ++rank) {
    if (board->active_until_ns[rank].load(std::memory_order_acquire) >
        static_cast<uint64_t>(now_ns)) {
      return true;
    }
  }
  return false;
}

}  // namespace tessera::vgpu::compute
