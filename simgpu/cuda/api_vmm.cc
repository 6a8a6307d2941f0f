// Virtual memory management (cuMemCreate & co) and CUDA arrays.
// Physical memory is charged at cuMemCreate and returned once it is both released and unmapped.
#include <algorithm>

#include "driver.h"
#include "tessera/cuda_abi/cuda_abi.h"

using namespace simgpu::driver;

namespace {

bool valid_properties(Driver& driver, const CUmemAllocationProp* prop) {
  return prop && prop->type == CU_MEM_ALLOCATION_TYPE_PINNED &&
         prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
         driver.valid_ordinal(prop->location.id);
}

void maybe_free_physical(Driver& driver, PhysicalAllocation* physical) {
  if (physical->released && physical->mappings == 0) {
    driver.sim->release(physical->device, physical->size);
    driver.physical.erase(physical);
    delete physical;
  }
}

CUresult create_array(CUarray* out, const CUDA_ARRAY3D_DESCRIPTOR& descriptor) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Context* context = nullptr;
  if (CUresult r = require_context(driver, context); r != CUDA_SUCCESS) return r;
  const uint64_t element = tessera::cuda_abi::array_format_bytes(descriptor.Format);
  const unsigned channels = descriptor.NumChannels;
  if (element == 0 || (channels != 1 && channels != 2 && channels != 4) || descriptor.Width == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (descriptor.Depth > 0 && descriptor.Height == 0) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t bytes = uint64_t{descriptor.Width} * std::max<uint64_t>(descriptor.Height, 1) *
                         std::max<uint64_t>(descriptor.Depth, 1) * element * channels;
  const uint64_t charged = charged_bytes(bytes);
  if (CUresult r = to_result(driver.sim->reserve(context->device, charged)); r != CUDA_SUCCESS) {
    return r;
  }
  auto* array = new ArrayObject();
  array->descriptor = descriptor;
  array->charged = charged;
  array->device = context->device;
  array->context = context;
  driver.arrays.insert(array);
  *out = reinterpret_cast<CUarray>(array);
  return CUDA_SUCCESS;
}

}  // namespace

SIMGPU_EXPORT CUresult cuMemGetAllocationGranularity(size_t* granularity,
                                                     const CUmemAllocationProp* prop,
                                                     CUmemAllocationGranularity_flags option) {
  if (!granularity) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  if (!valid_properties(driver, prop)) return CUDA_ERROR_INVALID_VALUE;
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
      option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *granularity = kVmmGranularity;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                   const CUmemAllocationProp* prop, unsigned long long flags) {
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  if (!valid_properties(driver, prop) || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (size == 0 || size % kVmmGranularity != 0) return CUDA_ERROR_INVALID_VALUE;
  const int device = driver.device_of_ordinal(prop->location.id);
  if (CUresult r = to_result(driver.sim->reserve(device, size)); r != CUDA_SUCCESS) return r;
  auto* physical = new PhysicalAllocation();
  physical->size = size;
  physical->device = device;
  driver.physical.insert(physical);
  *handle = reinterpret_cast<CUmemGenericAllocationHandle>(physical);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  auto* physical = reinterpret_cast<PhysicalAllocation*>(handle);
  if (!driver.physical.count(physical) || physical->released) return CUDA_ERROR_INVALID_VALUE;
  physical->released = --physical->handles == 0;
  maybe_free_physical(driver, physical);
  return CUDA_SUCCESS;
}

// A new handle to the physical memory mapped at any address of a mapping; released with
// cuMemRelease like the one cuMemCreate gave.
SIMGPU_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle,
                                                   void* address) {
  if (!handle || !address) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  const auto ptr = reinterpret_cast<CUdeviceptr>(address);
  auto mapping = driver.mappings.upper_bound(ptr);
  if (mapping == driver.mappings.begin()) return CUDA_ERROR_INVALID_VALUE;
  --mapping;
  if (ptr >= mapping->first + mapping->second.size) return CUDA_ERROR_INVALID_VALUE;
  PhysicalAllocation* physical = mapping->second.physical;
  ++physical->handles;
  physical->released = false;
  *handle = reinterpret_cast<CUmemGenericAllocationHandle>(physical);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment,
                                           CUdeviceptr address, unsigned long long flags) {
  (void)address;  // a hint the driver may ignore
  if (!ptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  if (size == 0 || size % kVmmGranularity != 0) return CUDA_ERROR_INVALID_VALUE;
  if (alignment != 0 && (alignment & (alignment - 1)) != 0) return CUDA_ERROR_INVALID_VALUE;
  const CUdeviceptr base =
      driver.take_address_range(size, std::max<size_t>(alignment, kVmmGranularity));
  driver.reservations[base] = size;
  *ptr = base;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  auto it = driver.reservations.find(ptr);
  if (it == driver.reservations.end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
  for (const auto& [base, mapping] : driver.mappings) {
    if (base >= ptr && base < ptr + size) return CUDA_ERROR_INVALID_VALUE;  // still mapped
  }
  driver.reservations.erase(it);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                                CUmemGenericAllocationHandle handle, unsigned long long flags) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  auto* physical = reinterpret_cast<PhysicalAllocation*>(handle);
  if (!driver.physical.count(physical) || physical->released || flags != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (size == 0 || size % kVmmGranularity != 0 || offset % kVmmGranularity != 0 ||
      offset + size > physical->size) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto reservation = driver.reservations.upper_bound(ptr);
  if (reservation == driver.reservations.begin()) return CUDA_ERROR_INVALID_VALUE;
  --reservation;
  if (ptr + size > reservation->first + reservation->second) return CUDA_ERROR_INVALID_VALUE;
  for (const auto& [base, mapping] : driver.mappings) {
    if (ptr < base + mapping.size && base < ptr + size) return CUDA_ERROR_INVALID_VALUE;
  }
  driver.mappings[ptr] = Mapping{size, physical, false};
  ++physical->mappings;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  bool any = false;
  for (auto it = driver.mappings.begin(); it != driver.mappings.end();) {
    if (it->first >= ptr && it->first + it->second.size <= ptr + size) {
      PhysicalAllocation* physical = it->second.physical;
      it = driver.mappings.erase(it);
      --physical->mappings;
      maybe_free_physical(driver, physical);
      any = true;
    } else {
      ++it;
    }
  }
  return any ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIMGPU_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                                      size_t count) {
  if (!desc || count == 0) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  for (size_t i = 0; i < count; ++i) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        !driver.valid_ordinal(desc[i].location.id)) {
      return CUDA_ERROR_INVALID_DEVICE;
    }
  }
  bool any = false;
  for (auto& [base, mapping] : driver.mappings) {
    if (base >= ptr && base + mapping.size <= ptr + size) {
      mapping.access_set = true;
      any = true;
    }
  }
  return any ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIMGPU_EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                              CUmemGenericAllocationHandle handle) {
  if (!prop) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  auto* physical = reinterpret_cast<PhysicalAllocation*>(handle);
  if (!driver.physical.count(physical)) return CUDA_ERROR_INVALID_VALUE;
  *prop = CUmemAllocationProp{};
  prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop->location.id = driver.ordinal_of_device(physical->device);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuArrayCreate_v2(CUarray* out, const CUDA_ARRAY_DESCRIPTOR* descriptor) {
  if (!descriptor) return CUDA_ERROR_INVALID_VALUE;
  CUDA_ARRAY3D_DESCRIPTOR full{};
  full.Width = descriptor->Width;
  full.Height = descriptor->Height;
  full.Format = descriptor->Format;
  full.NumChannels = descriptor->NumChannels;
  return create_array(out, full);
}

SIMGPU_EXPORT CUresult cuArray3DCreate_v2(CUarray* out, const CUDA_ARRAY3D_DESCRIPTOR* descriptor) {
  if (!descriptor) return CUDA_ERROR_INVALID_VALUE;
  return create_array(out, *descriptor);
}

SIMGPU_EXPORT CUresult cuArrayDestroy(CUarray handle) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  auto* array = reinterpret_cast<ArrayObject*>(handle);
  if (!driver.arrays.count(array)) return CUDA_ERROR_INVALID_HANDLE;
  driver.sim->release(array->device, array->charged);
  driver.arrays.erase(array);
  delete array;
  return CUDA_SUCCESS;
}
