#include "compute/nvml_source.h"

#include <dlfcn.h>

#include <cstring>

#include "glibc_compat.h"
#include "log.h"
#include "os/system_calls.h"

namespace tessera::vgpu {
using DlsymFn = void* (*)(void*, const char*);
DlsymFn real_dlsym();  // interpose.cc: the real dlsym, not the shim's
}  // namespace tessera::vgpu

namespace tessera::vgpu::compute {
namespace {

unsigned long long wall_us() {
  return static_cast<unsigned long long>(os::realtime_ns()) / 1000ull;
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

bool NvmlSource::handle(int device) {
  if (handles_[device]) return true;
  if (!handle_by_uuid_) return false;
  const char* uuid = limits_->devices[device].uuid;
  if (!uuid[0]) return false;
  if (handle_by_uuid_(uuid, &handles_[device]) == NVML_SUCCESS) return true;
  // The same 16 bytes under the other prefix (share::same_device_uuid): a MIG device that the
  // limits page names "GPU-..." is "MIG-..." to NVML.
  char other[share::kUuidBytes] = {};
  for (uint32_t i = 0; i + 1 < share::kUuidBytes && uuid[i]; ++i) other[i] = uuid[i];
  if (std::strncmp(other, "GPU-", 4) == 0) {
    std::memcpy(other, "MIG-", 4);
  } else if (std::strncmp(other, "MIG-", 4) == 0) {
    std::memcpy(other, "GPU-", 4);
  } else {
    handles_[device] = nullptr;
    return false;
  }
  if (handle_by_uuid_(other, &handles_[device]) == NVML_SUCCESS) return true;
  handles_[device] = nullptr;
  return false;
}

bool NvmlSource::utilization_unsupported(int device) {
  if (support_[device] == 0) {
    if (!utilization_ || !handle(device)) return false;  // asked again next time
    unsigned int count = kMaxSamples;
    const nvmlReturn_t result = utilization_(handles_[device], samples_, &count, wall_us());
    support_[device] = result == NVML_ERROR_NOT_SUPPORTED ? 2 : 1;
  }
  return support_[device] == 2;
}

bool NvmlSource::measure(int device, int64_t, Busy* out) {
  if (!handle(device)) return false;
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
  if (result == NVML_ERROR_NOT_SUPPORTED) support_[device] = 2;
  if (result != NVML_SUCCESS) return false;
  const bool attribute =
      timed_mask_ == nullptr || timed_mask_->load(std::memory_order_relaxed) == 0;
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
        if (attribute)
          slot.gpu_busy_ns.fetch_add(static_cast<uint64_t>(busy_ns), std::memory_order_relaxed);
      }
    }
    (ours ? out->share_ns : out->others_ns) += busy_ns;
  }
  last_seen_us_[device] = newest > since ? newest : now_us;
  return true;
}

}  // namespace tessera::vgpu::compute
