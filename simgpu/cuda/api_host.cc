// Page-locked host memory registration and pointer attributes. With unified addressing (every
// 64-bit CUDA process) a page-locked host pointer is also its device pointer. Host memory is not
// device memory: registering it charges nothing, as on a real GPU.
#include <cstring>

#include "driver.h"

using namespace simgpu::driver;

#undef cuMemHostRegister
#undef cuMemHostGetDevicePointer

namespace {

struct HostRange {
  uintptr_t base = 0;
  size_t size = 0;
  unsigned flags = 0;
  Context* context = nullptr;
};

// The page-locked range holding `pointer` (cuMemHostAlloc'd or registered), if any.
bool find_host_range(Driver& driver, const void* pointer, HostRange& out) {
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  auto region = driver.host_regions.upper_bound(address);
  if (region != driver.host_regions.begin()) {
    --region;
    if (address < region->first + region->second.size) {
      out = {region->first, region->second.size, region->second.flags, region->second.context};
      return true;
    }
  }
  auto allocation = driver.host_allocations.upper_bound(const_cast<void*>(pointer));
  if (allocation != driver.host_allocations.begin()) {
    --allocation;
    const auto base = reinterpret_cast<uintptr_t>(allocation->first);
    if (address < base + allocation->second) {
      out = {base, allocation->second, driver.host_allocation_flags[allocation->first],
             driver.host_allocation_contexts[allocation->first]};
      return true;
    }
  }
  return false;
}

constexpr unsigned kRegisterFlags = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                                    CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY;

template <typename T>
void put(void* data, T value) {
  std::memcpy(data, &value, sizeof value);
}

// What one attribute reads for a pointer; CUDA_ERROR_INVALID_VALUE where the pointer is not CUDA
// memory (cuPointerGetAttributes then writes the attribute's empty value instead).
CUresult pointer_attribute(Driver& driver, CUpointer_attribute attribute, CUdeviceptr ptr,
                           void* data) {
  CUdeviceptr base = 0;
  Allocation* allocation = find_allocation(driver, ptr, 1, &base);
  HostRange host;
  const bool is_host = !allocation && find_host_range(driver, reinterpret_cast<void*>(ptr), host);
  // A VMM mapping (cuMemMap) is device memory too.
  const Mapping* mapping = nullptr;
  CUdeviceptr mapping_base = 0;
  if (!allocation && !is_host) {
    auto found = driver.mappings.upper_bound(ptr);
    if (found != driver.mappings.begin()) {
      --found;
      if (ptr < found->first + found->second.size) {
        mapping = &found->second;
        mapping_base = found->first;
      }
    }
  }
  if (!allocation && !is_host && !mapping) return CUDA_ERROR_INVALID_VALUE;
  // A VMM pointer's range is the reservation it lies in (cuMemAddressReserve); its mapping is
  // what MAPPING_BASE_ADDR / MAPPING_SIZE report.
  CUdeviceptr range_base = allocation ? base : is_host ? host.base : mapping_base;
  size_t range_size = allocation ? allocation->size : is_host ? host.size : mapping->size;
  if (mapping) {
    auto reservation = driver.reservations.upper_bound(ptr);
    if (reservation != driver.reservations.begin()) {
      --reservation;
      if (ptr < reservation->first + reservation->second) {
        range_base = reservation->first;
        range_size = reservation->second;
      }
    }
  }
  const int device = allocation ? allocation->device
                     : mapping  ? mapping->physical ? mapping->physical->device : 0
                                : (host.context ? host.context->device : 0);
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      put(data, reinterpret_cast<CUcontext>(allocation ? allocation->context
                                            : is_host  ? host.context
                                                       : current_context()));
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      put(data, static_cast<unsigned>(is_host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE));
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      put(data, ptr);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (!is_host && !(allocation && allocation->kind == AllocationKind::kManaged)) {
        return CUDA_ERROR_INVALID_VALUE;  // device memory has no host address
      }
      put(data, reinterpret_cast<void*>(ptr));
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
      put(data, 0u);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
      put(data, static_cast<unsigned long long>(range_base));  // unique within the process
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
      put(data, allocation && allocation->kind == AllocationKind::kManaged ? 1u : 0u);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      put(data, driver.ordinal_of_device(device));
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
      put(data, allocation && (allocation->kind == AllocationKind::kDevice ||
                               allocation->kind == AllocationKind::kPitch)
                    ? 1u
                    : 0u);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      put(data, range_base);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
      put(data, mapping ? mapping_base : range_base);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      put(data, range_size);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
      put(data, mapping ? mapping->size : range_size);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPED:
      put(data, 1u);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
      put(data, static_cast<unsigned long long>(mapping ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
                                                        : CU_MEM_HANDLE_TYPE_NONE));
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
      put(data, is_host ? 0u : 1u);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
      put(data, static_cast<unsigned>(CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE));
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
      put(data, reinterpret_cast<CUmemoryPool>(allocation ? allocation->pool : nullptr));
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_NOT_SUPPORTED;  // P2P tokens: nv-p2p.h is a kernel interface
  }
}

// The value cuPointerGetAttributes writes for memory CUDA does not know.
void empty_attribute(CUpointer_attribute attribute, void* data) {
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
      put(data, static_cast<void*>(nullptr));
      break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      put(data, CUdeviceptr{0});
      break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
      put(data, 0ull);
      break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
      put(data, size_t{0});
      break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      put(data, -2);  // what the driver writes for a pointer on no device
      break;
    default:
      put(data, 0u);
      break;
  }
}

}  // namespace

SIMGPU_EXPORT CUresult cuMemHostRegister_v2(void* pointer, size_t bytes, unsigned int flags) {
  if (!pointer || bytes == 0 || (flags & ~kRegisterFlags)) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Context* context = nullptr;
  if (CUresult r = require_context(driver, context); r != CUDA_SUCCESS) return r;
  const auto base = reinterpret_cast<uintptr_t>(pointer);
  // No overlap with a registered range or page-locked allocation.
  auto next = driver.host_regions.lower_bound(base);
  if (next != driver.host_regions.end() && next->first < base + bytes) {
    return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  }
  HostRange existing;
  if (find_host_range(driver, pointer, existing)) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  driver.host_regions[base] = {bytes, flags, context};
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuMemHostRegister(void* pointer, size_t bytes, unsigned int flags) {
  return cuMemHostRegister_v2(pointer, bytes, flags);
}

SIMGPU_EXPORT CUresult cuMemHostUnregister(void* pointer) {
  if (!pointer) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  auto region = driver.host_regions.find(reinterpret_cast<uintptr_t>(pointer));
  if (region == driver.host_regions.end()) return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  driver.host_regions.erase(region);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* device_pointer, void* pointer,
                                                    unsigned int flags) {
  if (!device_pointer || !pointer || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Context* context = nullptr;
  if (CUresult r = require_context(driver, context); r != CUDA_SUCCESS) return r;
  HostRange range;
  if (!find_host_range(driver, pointer, range)) return CUDA_ERROR_INVALID_VALUE;
  *device_pointer = reinterpret_cast<CUdeviceptr>(pointer);  // unified addressing
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuMemHostGetDevicePointer(CUdeviceptr* device_pointer, void* pointer,
                                                 unsigned int flags) {
  return cuMemHostGetDevicePointer_v2(device_pointer, pointer, flags);
}

SIMGPU_EXPORT CUresult cuMemHostGetFlags(unsigned int* flags, void* pointer) {
  if (!flags || !pointer) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Context* context = nullptr;
  if (CUresult r = require_context(driver, context); r != CUDA_SUCCESS) return r;
  HostRange range;
  if (!find_host_range(driver, pointer, range)) return CUDA_ERROR_INVALID_VALUE;
  // Every page-locked range is mapped into the device's address space with unified addressing.
  *flags = range.flags | CU_MEMHOSTALLOC_DEVICEMAP;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute,
                                             CUdeviceptr ptr) {
  if (!data) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  return pointer_attribute(driver, attribute, ptr, data);
}

SIMGPU_EXPORT CUresult cuPointerGetAttributes(unsigned int count, CUpointer_attribute* attributes,
                                              void** data, CUdeviceptr ptr) {
  if (count == 0 || !attributes || !data) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  for (unsigned i = 0; i < count; ++i) {
    if (!data[i]) return CUDA_ERROR_INVALID_VALUE;
    const CUresult r = pointer_attribute(driver, attributes[i], ptr, data[i]);
    if (r == CUDA_ERROR_INVALID_VALUE) {
      empty_attribute(attributes[i], data[i]);  // not CUDA memory: empty values, success
    } else if (r != CUDA_SUCCESS) {
      return r;
    }
  }
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuPointerSetAttribute(const void* value, CUpointer_attribute attribute,
                                             CUdeviceptr ptr) {
  if (!value || attribute != CU_POINTER_ATTRIBUTE_SYNC_MEMOPS) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  unsigned ignored = 0;
  return pointer_attribute(driver, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, ptr, &ignored);
}
