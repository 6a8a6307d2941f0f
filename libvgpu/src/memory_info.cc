// The share's view of device memory: cuMemGetInfo and cuDeviceTotalMem report the share's limit
// and headroom instead of the whole device.
#include <cuda.h>

#include "hooks.h"
#include "pools.h"
#include "state.h"

using namespace tessera::vgpu;

CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  count_call(kHook_cuMemGetInfo_v2);
  auto real = real_cuMemGetInfo_v2();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  const CUresult result = real(free_bytes, total_bytes);  // checks NULL and the context
  if (result != CUDA_SUCCESS) return result;
  const GpuIndex index = current_device(nullptr, nullptr);
  if (index == kPassThrough) return result;
  const uint64_t limit = index == kBlocked ? 0 : device_limit(index);
  if (limit == tessera::share::kUnlimited) return result;
  maybe_reclaim();
  settle_tracked_pools();  // what the driver trimmed from the pools is free
  const uint64_t used = index == kBlocked ? 0 : device_usage(index);
  const uint64_t headroom = limit > used ? limit - used : 0;
  if (limit < *total_bytes) *total_bytes = limit;
  if (headroom < *free_bytes) *free_bytes = headroom;
  return result;
}

CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice device) {
  count_call(kHook_cuDeviceTotalMem_v2);
  auto real = real_cuDeviceTotalMem_v2();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  const CUresult result = real(bytes, device);
  if (result != CUDA_SUCCESS) return result;
  const GpuIndex index = device_for_ordinal(CudaOrdinal{device});
  if (index == kPassThrough) return result;
  const uint64_t limit = index == kBlocked ? 0 : device_limit(index);
  if (limit < *bytes) *bytes = limit;
  return result;
}
