// NVML's memory view of a limited device: total = the limit, used = what the share holds, free =
// the rest (never more than the device really has free, never below zero).
#include "hooks.h"
#include "pools.h"
#include "state.h"

using namespace tessera::vgpu;

namespace {

// Applies the share's view; false when the device is not limited (leave NVML's figures).
bool limited_view(nvmlDevice_t device, unsigned long long* total, unsigned long long* free,
                  unsigned long long* used) {
  if (!enforcing()) return false;
  auto get_uuid = real_nvmlDeviceGetUUID();
  char uuid[96] = {};
  if (!get_uuid || get_uuid(device, uuid, sizeof uuid) != NVML_SUCCESS) return false;
  const GpuIndex index = device_for_uuid(uuid);
  if (index == kPassThrough) return false;
  const uint64_t limit = index == kBlocked ? 0 : device_limit(index);
  if (limit == tessera::share::kUnlimited) return false;
  const uint64_t physical_free = *free;
  const uint64_t view_total = limit < *total ? limit : *total;
  maybe_reclaim();
  settle_tracked_pools();  // what the driver trimmed from the pools is free
  const uint64_t share_used = index == kBlocked ? 0 : device_usage(index);
  const uint64_t headroom = view_total > share_used ? view_total - share_used : 0;
  *total = view_total;
  *free = headroom < physical_free ? headroom : physical_free;
  *used = view_total - *free;
  return true;
}

}  // namespace

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  count_call(kHook_nvmlDeviceGetMemoryInfo);
  auto real = real_nvmlDeviceGetMemoryInfo();
  if (!real) return NVML_ERROR_UNINITIALIZED;
  const nvmlReturn_t result = real(device, memory);
  if (result != NVML_SUCCESS || !memory) return result;
  limited_view(device, &memory->total, &memory->free, &memory->used);
  return result;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
  count_call(kHook_nvmlDeviceGetMemoryInfo_v2);
  auto real = real_nvmlDeviceGetMemoryInfo_v2();
  if (!real) return NVML_ERROR_UNINITIALIZED;
  const nvmlReturn_t result = real(device, memory);
  if (result != NVML_SUCCESS || !memory) return result;
  if (limited_view(device, &memory->total, &memory->free, &memory->used)) {
    memory->reserved = 0;  // the share's view has no driver reserve of its own: it is in `used`
  }
  return result;
}
