// Linear device memory, managed and host memory, memory info, copies and sets.
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "driver.h"

using namespace simgpu::driver;

namespace simgpu::driver {

CUresult require_context(Driver& driver, Context*& context) {
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  context = current_context();
  if (!context || !driver.contexts.count(context)) return CUDA_ERROR_INVALID_CONTEXT;
  return CUDA_SUCCESS;
}

CUresult allocate_device_memory(Driver& driver, Context* context, uint64_t size, uint64_t charged,
                                AllocationKind kind, CUdeviceptr* out) {
  if (CUresult r = to_result(driver.sim->reserve(context->device, charged)); r != CUDA_SUCCESS) {
    return r;
  }
  const CUdeviceptr base = driver.take_address_range(size, kPageBytes);
  Allocation allocation;
  allocation.size = size;
  allocation.charged = charged;
  allocation.device = context->device;
  allocation.kind = kind;
  allocation.context = context;
  driver.allocations.emplace(base, allocation);
  *out = base;
  return CUDA_SUCCESS;
}

Allocation* find_allocation(Driver& driver, CUdeviceptr ptr, uint64_t size, CUdeviceptr* base) {
  auto it = driver.allocations.upper_bound(ptr);
  if (it == driver.allocations.begin()) return nullptr;
  --it;
  if (ptr + size > it->first + it->second.size || ptr + size < ptr) return nullptr;
  if (base) *base = it->first;
  return &it->second;
}

}  // namespace simgpu::driver

namespace {

CUresult free_allocation(Driver& driver, CUdeviceptr ptr) {
  auto it = driver.allocations.find(ptr);
  if (it == driver.allocations.end()) return CUDA_ERROR_INVALID_VALUE;
  Allocation& allocation = it->second;
  if (allocation.kind == AllocationKind::kGraph || allocation.kind == AllocationKind::kModule) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (allocation.pool) {
    allocation.pool->used -= std::min(allocation.pool->used, allocation.charged);
  } else if (allocation.charged) {
    driver.sim->release(allocation.device, allocation.charged);
  }
  if (allocation.host_backing) munmap(allocation.host_backing, allocation.size);
  driver.allocations.erase(it);
  return CUDA_SUCCESS;
}

// Copies touch device memory only as ranges to validate: the simulator models capacity and time,
// not contents. Managed memory is real host memory and is copied for real.
CUresult check_device_range(Driver& driver, CUdeviceptr ptr, size_t bytes) {
  if (bytes == 0) return CUDA_SUCCESS;
  if (find_allocation(driver, ptr, bytes, nullptr)) return CUDA_SUCCESS;
  for (const auto& [base, mapping] : driver.mappings) {
    if (ptr >= base && ptr + bytes <= base + mapping.size) return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

void* host_view(Driver& driver, CUdeviceptr ptr, size_t bytes) {
  CUdeviceptr base = 0;
  Allocation* allocation = find_allocation(driver, ptr, bytes, &base);
  if (!allocation || !allocation->host_backing) return nullptr;
  return static_cast<char*>(allocation->host_backing) + (ptr - base);
}

CUresult copy(CUdeviceptr dst, const void* src_host, CUdeviceptr src, void* dst_host,
              size_t bytes) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Context* context = nullptr;
  if (CUresult r = require_context(driver, context); r != CUDA_SUCCESS) return r;
  if (dst && check_device_range(driver, dst, bytes) != CUDA_SUCCESS)
    return CUDA_ERROR_INVALID_VALUE;
  if (src && check_device_range(driver, src, bytes) != CUDA_SUCCESS)
    return CUDA_ERROR_INVALID_VALUE;
  if ((dst == 0 && !dst_host) || (src == 0 && !src_host)) return CUDA_ERROR_INVALID_VALUE;
  void* dst_view = dst ? host_view(driver, dst, bytes) : dst_host;
  const void* src_view = src ? host_view(driver, src, bytes) : src_host;
  if (dst_view && src_view) {
    std::memmove(dst_view, src_view, bytes);
  } else if (dst_view) {
    std::memset(dst_view, 0, bytes);  // device memory reads as zeros
  }
  return CUDA_SUCCESS;
}

CUresult set_memory(CUdeviceptr dst, unsigned value, size_t element_size, size_t count) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Context* context = nullptr;
  if (CUresult r = require_context(driver, context); r != CUDA_SUCCESS) return r;
  const size_t bytes = element_size * count;
  if (check_device_range(driver, dst, bytes) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_VALUE;
  if (void* view = host_view(driver, dst, bytes)) {
    auto* out = static_cast<unsigned char*>(view);
    for (size_t i = 0; i < count; ++i) std::memcpy(out + i * element_size, &value, element_size);
  }
  return CUDA_SUCCESS;
}

}  // namespace

SIMGPU_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Context* context = nullptr;
  if (CUresult r = require_context(driver, context); r != CUDA_SUCCESS) return r;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  return allocate_device_memory(driver, context, bytes, charged_bytes(bytes),
                                AllocationKind::kDevice, dptr);
}

SIMGPU_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width_bytes,
                                          size_t height, unsigned int element_size) {
  if (!dptr || !pitch) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Context* context = nullptr;
  if (CUresult r = require_context(driver, context); r != CUDA_SUCCESS) return r;
  if (width_bytes == 0 || height == 0) return CUDA_ERROR_INVALID_VALUE;
  if (element_size != 4 && element_size != 8 && element_size != 16) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t row = round_up(width_bytes, kPitchAlign);
  if (height > UINT64_MAX / row) return CUDA_ERROR_OUT_OF_MEMORY;
  const uint64_t bytes = row * height;
  CUresult r = allocate_device_memory(driver, context, bytes, charged_bytes(bytes),
                                      AllocationKind::kPitch, dptr);
  if (r == CUDA_SUCCESS) *pitch = row;
  return r;
}

SIMGPU_EXPORT CUresult cuMemFree_v2(CUdeviceptr ptr) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Context* context = nullptr;
  if (CUresult r = require_context(driver, context); r != CUDA_SUCCESS) return r;
  if (ptr == 0) return CUDA_SUCCESS;
  return free_allocation(driver, ptr);
}

// Managed memory is host memory that the device can reach: like the real driver on an H200 it
// is not bounded by device memory and does not move cuMemGetInfo.
SIMGPU_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytes, unsigned int flags) {
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Context* context = nullptr;
  if (CUresult r = require_context(driver, context); r != CUDA_SUCCESS) return r;
  if (bytes == 0 || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (memory == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUdeviceptr base = reinterpret_cast<CUdeviceptr>(memory);
  Allocation allocation;
  allocation.size = bytes;
  allocation.charged = 0;
  allocation.device = context->device;
  allocation.kind = AllocationKind::kManaged;
  allocation.host_backing = memory;
  allocation.context = context;
  driver.allocations.emplace(base, allocation);
  *dptr = base;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Context* context = nullptr;
  if (CUresult r = require_context(driver, context); r != CUDA_SUCCESS) return r;
  if (!free_bytes || !total_bytes) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t total = driver.sim->device(context->device).total_memory;
  const uint64_t used = driver.sim->used_memory(context->device);
  *total_bytes = total;
  *free_bytes = total - std::min(total, used);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr ptr) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Context* context = nullptr;
  if (CUresult r = require_context(driver, context); r != CUDA_SUCCESS) return r;
  CUdeviceptr found = 0;
  Allocation* allocation = find_allocation(driver, ptr, 1, &found);
  if (!allocation) return CUDA_ERROR_NOT_FOUND;
  if (base) *base = found;
  if (size) *size = allocation->size;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuMemHostAlloc(void** pointer, size_t bytes, unsigned int flags) {
  (void)flags;
  if (!pointer) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Context* context = nullptr;
  if (CUresult r = require_context(driver, context); r != CUDA_SUCCESS) return r;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  void* memory = std::aligned_alloc(4096, round_up(bytes, 4096));
  if (!memory) return CUDA_ERROR_OUT_OF_MEMORY;
  driver.host_allocations[memory] = bytes;
  *pointer = memory;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuMemAllocHost_v2(void** pointer, size_t bytes) {
  return cuMemHostAlloc(pointer, bytes, 0);
}

SIMGPU_EXPORT CUresult cuMemFreeHost(void* pointer) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Context* context = nullptr;
  if (CUresult r = require_context(driver, context); r != CUDA_SUCCESS) return r;
  auto it = driver.host_allocations.find(pointer);
  if (it == driver.host_allocations.end()) return CUDA_ERROR_INVALID_VALUE;
  std::free(pointer);
  driver.host_allocations.erase(it);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t bytes) {
  return copy(dst, src, 0, nullptr, bytes);
}
SIMGPU_EXPORT CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t bytes) {
  return copy(0, nullptr, src, dst, bytes);
}
SIMGPU_EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  return copy(dst, nullptr, src, nullptr, bytes);
}
SIMGPU_EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  return copy(dst, nullptr, src, nullptr, bytes);
}
SIMGPU_EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t bytes,
                                            CUstream) {
  return copy(dst, src, 0, nullptr, bytes);
}
SIMGPU_EXPORT CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t bytes, CUstream) {
  return copy(0, nullptr, src, dst, bytes);
}
SIMGPU_EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream) {
  return copy(dst, nullptr, src, nullptr, bytes);
}
SIMGPU_EXPORT CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t count) {
  return set_memory(dst, value, 1, count);
}
SIMGPU_EXPORT CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned int value, size_t count) {
  return set_memory(dst, value, 4, count);
}
SIMGPU_EXPORT CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t count,
                                       CUstream) {
  return set_memory(dst, value, 1, count);
}
SIMGPU_EXPORT CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int value, size_t count,
                                        CUstream) {
  return set_memory(dst, value, 4, count);
}
