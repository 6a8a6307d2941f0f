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
  // Graph memory, module variables and another process's memory opened by IPC (closed with
  // cuIpcCloseMemHandle) are not cuMemFree's to free.
  if (allocation.kind == AllocationKind::kGraph || allocation.kind == AllocationKind::kModule ||
      allocation.kind == AllocationKind::kIpc) {
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

}  // namespace

namespace simgpu::driver {

// Copies touch device memory only as ranges to validate: the simulator models capacity and time,
// not contents. Managed memory is real host memory and is copied for real.
CUresult check_device_range(Driver& driver, CUdeviceptr ptr, size_t bytes) {
  if (bytes == 0) return CUDA_SUCCESS;
  // Memory another process freed after this one opened it by IPC is gone here too.
  sweep_revoked_ipc_mappings(driver);
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

// cuMemcpy and cuMemcpyAsync take unified addresses: with unified addressing a pointer outside
// every device allocation and mapping is host memory (page-locked or not), as the real driver
// treats it.
bool is_device_address(Driver& driver, CUdeviceptr ptr) {
  if (find_allocation(driver, ptr, 1, nullptr)) return true;
  auto mapping = driver.mappings.upper_bound(ptr);
  if (mapping == driver.mappings.begin()) return false;
  --mapping;
  return ptr < mapping->first + mapping->second.size;
}

}  // namespace simgpu::driver

namespace {

CUresult copy(CUdeviceptr dst, const void* src_host, CUdeviceptr src, void* dst_host, size_t bytes);

CUresult copy_unified(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  if (!dst || !src) return CUDA_ERROR_INVALID_VALUE;
  bool dst_device = false, src_device = false;
  {
    Driver& driver = Driver::get();
    std::lock_guard<std::mutex> lock(driver.mutex);
    dst_device = is_device_address(driver, dst);
    src_device = is_device_address(driver, src);
  }
  return copy(dst_device ? dst : 0, src_device ? nullptr : reinterpret_cast<const void*>(src),
              src_device ? src : 0, dst_device ? nullptr : reinterpret_cast<void*>(dst), bytes);
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
  const uint64_t total = driver.device_config(context->device).total_memory;
  // On a MIG device: what its GPU instance's processes hold.
  const uint64_t used = driver.sim->used_memory_seen(context->device);
  *total_bytes = total;
  *free_bytes = total - std::min(total, used);
  // Inside an R615 memory partition: the hard limit and the headroom under it.
  if (const auto partition = driver.sim->own_partition(context->device)) {
    const uint64_t hard = partition->hard_limit;
    *total_bytes = hard;
    *free_bytes = std::min<uint64_t>(*free_bytes, hard - std::min(hard, partition->used));
  }
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr ptr) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Context* context = nullptr;
  if (CUresult r = require_context(driver, context); r != CUDA_SUCCESS) return r;
  CUdeviceptr found = 0;
  if (Allocation* allocation = find_allocation(driver, ptr, 1, &found)) {
    if (base) *base = found;
    if (size) *size = allocation->size;
    return CUDA_SUCCESS;
  }
  // A VMM mapping (cuMemMap): its own range.
  auto mapping = driver.mappings.upper_bound(ptr);
  if (mapping == driver.mappings.begin()) return CUDA_ERROR_NOT_FOUND;
  --mapping;
  if (ptr >= mapping->first + mapping->second.size) return CUDA_ERROR_NOT_FOUND;
  if (base) *base = mapping->first;
  if (size) *size = mapping->second.size;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuMemHostAlloc(void** pointer, size_t bytes, unsigned int flags) {
  if (!pointer || (flags & ~(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                             CU_MEMHOSTALLOC_WRITECOMBINED))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Context* context = nullptr;
  if (CUresult r = require_context(driver, context); r != CUDA_SUCCESS) return r;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  void* memory = std::aligned_alloc(4096, round_up(bytes, 4096));
  if (!memory) return CUDA_ERROR_OUT_OF_MEMORY;
  driver.host_allocations[memory] = bytes;
  driver.host_allocation_flags[memory] = flags;
  driver.host_allocation_contexts[memory] = context;
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
  driver.host_allocation_flags.erase(pointer);
  driver.host_allocation_contexts.erase(pointer);
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
  return copy_unified(dst, src, bytes);
}
SIMGPU_EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t bytes,
                                            CUstream) {
  return copy(dst, src, 0, nullptr, bytes);
}
SIMGPU_EXPORT CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t bytes, CUstream) {
  return copy(0, nullptr, src, dst, bytes);
}
SIMGPU_EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream) {
  return copy_unified(dst, src, bytes);
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

// The per-thread-default-stream forms (nvcc --default-stream per-thread, and the runtime's
// per-thread entry points): the simulator's copies are synchronous, so they do the same.
SIMGPU_EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes,
                                            CUstream) {
  return copy(dst, nullptr, src, nullptr, bytes);
}
SIMGPU_EXPORT CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void* src, size_t bytes) {
  return copy(dst, src, 0, nullptr, bytes);
}
SIMGPU_EXPORT CUresult cuMemcpyDtoH_v2_ptds(void* dst, CUdeviceptr src, size_t bytes) {
  return copy(0, nullptr, src, dst, bytes);
}
SIMGPU_EXPORT CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  return copy(dst, nullptr, src, nullptr, bytes);
}
SIMGPU_EXPORT CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  return copy_unified(dst, src, bytes);
}
SIMGPU_EXPORT CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void* src, size_t bytes,
                                                 CUstream) {
  return copy(dst, src, 0, nullptr, bytes);
}
SIMGPU_EXPORT CUresult cuMemcpyDtoHAsync_v2_ptsz(void* dst, CUdeviceptr src, size_t bytes,
                                                 CUstream) {
  return copy(0, nullptr, src, dst, bytes);
}
SIMGPU_EXPORT CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t bytes,
                                                 CUstream) {
  return copy(dst, nullptr, src, nullptr, bytes);
}
SIMGPU_EXPORT CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t bytes,
                                          CUstream) {
  return copy_unified(dst, src, bytes);
}
SIMGPU_EXPORT CUresult cuMemsetD8_v2_ptds(CUdeviceptr dst, unsigned char value, size_t count) {
  return set_memory(dst, value, 1, count);
}
SIMGPU_EXPORT CUresult cuMemsetD32_v2_ptds(CUdeviceptr dst, unsigned int value, size_t count) {
  return set_memory(dst, value, 4, count);
}
SIMGPU_EXPORT CUresult cuMemsetD8Async_ptsz(CUdeviceptr dst, unsigned char value, size_t count,
                                            CUstream) {
  return set_memory(dst, value, 1, count);
}
SIMGPU_EXPORT CUresult cuMemsetD32Async_ptsz(CUdeviceptr dst, unsigned int value, size_t count,
                                             CUstream) {
  return set_memory(dst, value, 4, count);
}

namespace {

// Bytes per element of a tensor map's data type (the packed 4- and 6-bit types are stored in
// 16-element groups of 8 or 16 bytes: counted here as one byte per element for the box check).
int tensor_element_bytes(CUtensorMapDataType type) {
  switch (type) {
    case CU_TENSOR_MAP_DATA_TYPE_UINT8:
    case CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B:
    case CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B:
    case CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B:
      return 1;
    case CU_TENSOR_MAP_DATA_TYPE_UINT16:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT16:
    case CU_TENSOR_MAP_DATA_TYPE_BFLOAT16:
      return 2;
    case CU_TENSOR_MAP_DATA_TYPE_UINT32:
    case CU_TENSOR_MAP_DATA_TYPE_INT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ:
      return 4;
    case CU_TENSOR_MAP_DATA_TYPE_UINT64:
    case CU_TENSOR_MAP_DATA_TYPE_INT64:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT64:
      return 8;
  }
  return 0;
}

}  // namespace

// A TMA descriptor (cuBLASLt resolves it at load). Checked as the CUDA documentation lists the
// requirements; the 128 opaque bytes record the arguments (no kernel reads them here).
SIMGPU_EXPORT CUresult cuTensorMapEncodeTiled(
    CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank, void* address,
    const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
    const cuuint32_t* element_strides, CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
    CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob) {
  if (!map || reinterpret_cast<uintptr_t>(map) % 64 != 0) return CUDA_ERROR_INVALID_VALUE;
  const int element = tensor_element_bytes(type);
  if (element == 0) return CUDA_ERROR_INVALID_VALUE;
  const bool interleaved = interleave != CU_TENSOR_MAP_INTERLEAVE_NONE;
  if (interleave > CU_TENSOR_MAP_INTERLEAVE_32B || swizzle > CU_TENSOR_MAP_SWIZZLE_128B_ATOM_64B ||
      l2 > CU_TENSOR_MAP_L2_PROMOTION_L2_256B ||
      oob > CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (rank < (interleaved ? 3u : 1u) || rank > 5) return CUDA_ERROR_INVALID_VALUE;
  const uintptr_t align = interleave == CU_TENSOR_MAP_INTERLEAVE_32B ? 32 : 16;
  if (!address || reinterpret_cast<uintptr_t>(address) % align != 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (!dims || !box || !element_strides || (rank > 1 && !strides)) return CUDA_ERROR_INVALID_VALUE;
  for (cuuint32_t i = 0; i < rank; ++i) {
    if (dims[i] == 0 || dims[i] > (1ull << 32)) return CUDA_ERROR_INVALID_VALUE;
    if (box[i] == 0 || box[i] > 256) return CUDA_ERROR_INVALID_VALUE;
    if (element_strides[i] == 0 || element_strides[i] > 8) return CUDA_ERROR_INVALID_VALUE;
  }
  for (cuuint32_t i = 0; i + 1 < rank; ++i) {
    if (strides[i] % align != 0 || strides[i] >= (1ull << 40)) return CUDA_ERROR_INVALID_VALUE;
  }
  if (!interleaved && (uint64_t{box[0]} * static_cast<uint64_t>(element)) % 16 != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // Built in a local and copied in: callers align the map to 64 bytes as the driver asks, while
  // cuda.h's type declares 128, so it is never accessed as a CUtensorMap.
  uint64_t words[CU_TENSOR_MAP_NUM_QWORDS] = {};
  words[0] = reinterpret_cast<uintptr_t>(address);
  words[1] = uint64_t{rank} | uint64_t{static_cast<unsigned>(type)} << 8 |
             uint64_t{static_cast<unsigned>(interleave)} << 16 |
             uint64_t{static_cast<unsigned>(swizzle)} << 24 |
             uint64_t{static_cast<unsigned>(l2)} << 32 | uint64_t{static_cast<unsigned>(oob)} << 40;
  for (cuuint32_t i = 0; i < rank; ++i) {
    words[2 + i] = dims[i];
    words[7 + i] = uint64_t{box[i]} | uint64_t{element_strides[i]} << 32;
  }
  for (cuuint32_t i = 0; i + 1 < rank; ++i) words[12 + i] = strides[i];
  std::memcpy(static_cast<void*>(map), words, sizeof words);
  return CUDA_SUCCESS;
}
