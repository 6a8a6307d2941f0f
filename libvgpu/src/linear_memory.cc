// Linear device memory: cuMemAlloc, cuMemAllocPitch and cuMemAllocManaged, charged as the driver
// rounds them (accounting.h), and cuMemFree for every kind of device pointer.
#include <cuda.h>

#include "accounting.h"
#include "hooks.h"
#include "pools.h"
#include "state.h"

using namespace tessera::vgpu;

namespace {

// The linear-allocation pattern: reserve `charge`, call, record or roll back.
template <typename Call>
CUresult allocate_linear(GpuIndex index, uint64_t requested, CUcontext context, CUdeviceptr* dptr,
                         Call call) {
  uint64_t charge = 0;
  if (index == kBlocked || !charged_size(requested, &charge)) return CUDA_ERROR_OUT_OF_MEMORY;
  if (!reserve_bytes(index, charge)) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult result = call_reclaiming(index, charge, call);
  if (result != CUDA_SUCCESS) {
    release_bytes(index, charge);
    return result;
  }
  track(HandleKind::kDevicePointer, *dptr, index, charge, reinterpret_cast<uint64_t>(context));
  return result;
}

}  // namespace

CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  count_call(kHook_cuMemAlloc_v2);
  auto real = real_cuMemAlloc_v2();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  CUcontext context = nullptr;
  const GpuIndex index = dptr && bytes ? current_device(nullptr, &context) : kPassThrough;
  if (index == kPassThrough) return real(dptr, bytes);
  return allocate_linear(index, bytes, context, dptr, [&] { return real(dptr, bytes); });
}

CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytes, unsigned int flags) {
  count_call(kHook_cuMemAllocManaged);
  auto real = real_cuMemAllocManaged();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  CUcontext context = nullptr;
  const GpuIndex index = dptr && bytes ? current_device(nullptr, &context) : kPassThrough;
  if (index == kPassThrough) return real(dptr, bytes, flags);
  // Managed memory counts like device memory: on an H200 the driver does not bound it, so it
  // would otherwise escape the quota entirely.
  return allocate_linear(index, bytes, context, dptr, [&] { return real(dptr, bytes, flags); });
}

CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                            unsigned int element) {
  count_call(kHook_cuMemAllocPitch_v2);
  auto real = real_cuMemAllocPitch_v2();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  CUcontext context = nullptr;
  const GpuIndex index =
      dptr && pitch && width && height ? current_device(nullptr, &context) : kPassThrough;
  if (index == kPassThrough) return real(dptr, pitch, width, height, element);
  // Reserve for a 512-byte-aligned pitch, then settle against the pitch the driver chose.
  const uint64_t row = (uint64_t{width} + 511) / 512 * 512;
  uint64_t estimate = 0;
  if (index == kBlocked || row < width || height > ~0ull / row ||
      !charged_size(row * height, &estimate) || !reserve_bytes(index, estimate)) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const CUresult result =
      call_reclaiming(index, estimate, [&] { return real(dptr, pitch, width, height, element); });
  if (result != CUDA_SUCCESS) {
    release_bytes(index, estimate);
    return result;
  }
  uint64_t charge = estimate;
  if (*pitch != 0 && height <= ~0ull / *pitch && charged_size(uint64_t{*pitch} * height, &charge)) {
    if (charge < estimate) {
      release_bytes(index, estimate - charge);
    } else if (charge > estimate && !reserve_bytes(index, charge - estimate)) {
      release_bytes(index, estimate);
      auto free_memory = real_cuMemFree_v2();
      if (free_memory) free_memory(*dptr);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  track(HandleKind::kDevicePointer, *dptr, index, charge, reinterpret_cast<uint64_t>(context));
  return result;
}

CUresult cuMemFree_v2(CUdeviceptr dptr) {
  count_call(kHook_cuMemFree_v2);
  auto real = real_cuMemFree_v2();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (dptr == 0) return real(dptr);
  return free_pointer(dptr, [&] { return real(dptr); });
}
