// Virtual memory management: cuMemCreate charges the exact size of the physical allocation on its
// device; cuMemRelease gives it back (mapping it is free).
#include <cuda.h>

#include "accounting.h"
#include "hooks.h"
#include "state.h"

using namespace tessera::vgpu;

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                     const CUmemAllocationProp* prop, unsigned long long flags) {
  count_call(kHook_cuMemCreate);
  auto real = real_cuMemCreate();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  const bool on_device =
      handle && prop && size && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE;
  const GpuIndex index =
      on_device ? device_for_ordinal(CudaOrdinal{prop->location.id}) : kPassThrough;
  if (index == kPassThrough) return real(handle, size, prop, flags);
  if (index == kBlocked || !reserve_bytes(index, size)) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult result =
      call_reclaiming(index, size, [&] { return real(handle, size, prop, flags); });
  if (result != CUDA_SUCCESS) {
    release_bytes(index, size);
    return result;
  }
  track(HandleKind::kVmmHandle, *handle, index, size, 0);
  return result;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  count_call(kHook_cuMemRelease);
  auto real = real_cuMemRelease();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  return free_tracked(HandleKind::kVmmHandle, handle, [&] { return real(handle); });
}
