// Stream-ordered allocation: memory pools (default and created) and cuMemAllocAsync/FreeAsync.
// A pool reserves device memory as it grows and keeps what is freed; at synchronisation it returns
// whatever exceeds its release threshold (default 0), as the real driver does.
#include <algorithm>

#include "driver.h"

using namespace simgpu::driver;

namespace {

MemPool* valid_pool(Driver& driver, CUmemoryPool handle) {
  auto* pool = reinterpret_cast<MemPool*>(handle);
  return driver.pools.count(pool) ? pool : nullptr;
}

CUresult allocate_from_pool(CUdeviceptr* dptr, size_t bytes, MemPool* pool_or_null,
                            CUmemoryPool pool_handle, CUstream stream_handle) {
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Context* context = nullptr;
  if (CUresult r = require_context(driver, context); r != CUDA_SUCCESS) return r;
  Stream* stream = resolve_stream(driver, stream_handle);
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  MemPool* pool = pool_or_null;
  if (pool_handle) {
    pool = valid_pool(driver, pool_handle);
    if (!pool) return CUDA_ERROR_INVALID_VALUE;
  }
  if (!pool) {
    const int ordinal = driver.ordinal_of_device(stream->context->device);
    pool = driver.current_pools[static_cast<size_t>(ordinal)];
  }
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (stream->capture) {
    // Captured: a memory allocation node of the graph, at a virtual address; the memory is taken
    // from the graph pool when the instantiated graph is launched.
    *dptr = add_graph_alloc_node(driver, *stream->capture, bytes)->alloc.dptr;
    return CUDA_SUCCESS;
  }
  const uint64_t needed = round_up(bytes, kPageBytes);
  if (CUresult r = pool_take(driver, *pool, needed); r != CUDA_SUCCESS) return r;
  const CUdeviceptr base = driver.take_address_range(bytes, kPageBytes);
  Allocation allocation;
  allocation.size = bytes;
  allocation.charged = needed;
  allocation.device = pool->device;
  allocation.kind = AllocationKind::kPool;
  allocation.pool = pool;
  allocation.context = context;
  driver.allocations.emplace(base, allocation);
  *dptr = base;
  return CUDA_SUCCESS;
}

CUresult free_async(CUdeviceptr ptr, CUstream stream_handle) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Context* context = nullptr;
  if (CUresult r = require_context(driver, context); r != CUDA_SUCCESS) return r;
  Stream* stream = resolve_stream(driver, stream_handle);
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  if (stream->capture) {
    // Captured: a free node, only of an allocation made by the same graph in this model.
    return add_graph_free_node(driver, *stream->capture, ptr) ? CUDA_SUCCESS
                                                              : CUDA_ERROR_INVALID_VALUE;
  }
  auto it = driver.allocations.find(ptr);
  if (it == driver.allocations.end() || it->second.kind == AllocationKind::kGraph) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Allocation& allocation = it->second;
  if (allocation.pool) {
    allocation.pool->used -= std::min(allocation.pool->used, allocation.charged);
  } else if (allocation.kind == AllocationKind::kManaged) {
    return CUDA_ERROR_INVALID_VALUE;
  } else {
    driver.sim->release(allocation.device, allocation.charged);
  }
  driver.allocations.erase(it);
  return CUDA_SUCCESS;
}

}  // namespace

SIMGPU_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytes, CUstream stream) {
  return allocate_from_pool(dptr, bytes, nullptr, nullptr, stream);
}
SIMGPU_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUstream stream) {
  return allocate_from_pool(dptr, bytes, nullptr, nullptr, stream);
}
SIMGPU_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool,
                                               CUstream stream) {
  if (!pool) return CUDA_ERROR_INVALID_VALUE;
  return allocate_from_pool(dptr, bytes, nullptr, pool, stream);
}
SIMGPU_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytes,
                                                    CUmemoryPool pool, CUstream stream) {
  if (!pool) return CUDA_ERROR_INVALID_VALUE;
  return allocate_from_pool(dptr, bytes, nullptr, pool, stream);
}
SIMGPU_EXPORT CUresult cuMemFreeAsync(CUdeviceptr ptr, CUstream stream) {
  return free_async(ptr, stream);
}
SIMGPU_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr ptr, CUstream stream) {
  return free_async(ptr, stream);
}

SIMGPU_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* out, CUdevice ordinal) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  if (!driver.valid_ordinal(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *out = reinterpret_cast<CUmemoryPool>(driver.default_pools[static_cast<size_t>(ordinal)].get());
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool* out, CUdevice ordinal) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  if (!driver.valid_ordinal(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *out = reinterpret_cast<CUmemoryPool>(driver.current_pools[static_cast<size_t>(ordinal)]);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuDeviceSetMemPool(CUdevice ordinal, CUmemoryPool handle) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  if (!driver.valid_ordinal(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  MemPool* pool = valid_pool(driver, handle);
  if (!pool || pool->device != driver.device_of_ordinal(ordinal)) return CUDA_ERROR_INVALID_VALUE;
  driver.current_pools[static_cast<size_t>(ordinal)] = pool;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuMemPoolCreate(CUmemoryPool* out, const CUmemPoolProps* props) {
  if (!out || !props) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  if (props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
      props->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
      !driver.valid_ordinal(props->location.id)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto* pool = new MemPool();
  pool->device = driver.device_of_ordinal(props->location.id);
  driver.pools.insert(pool);
  *out = reinterpret_cast<CUmemoryPool>(pool);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool handle) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  MemPool* pool = valid_pool(driver, handle);
  if (!pool || pool->is_default) return CUDA_ERROR_INVALID_VALUE;
  // Outstanding allocations keep working until freed; the pool's idle memory goes back now.
  for (auto& [ptr, allocation] : driver.allocations) {
    if (allocation.pool == pool) {
      allocation.pool = nullptr;  // freed later as plain device memory
    }
  }
  driver.sim->release(pool->device, pool->reserved - pool->used);
  for (MemPool*& current : driver.current_pools) {
    if (current == pool) {
      current =
          driver.default_pools[static_cast<size_t>(driver.ordinal_of_device(pool->device))].get();
    }
  }
  driver.pools.erase(pool);
  delete pool;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool handle, size_t keep) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  MemPool* pool = valid_pool(driver, handle);
  if (!pool) return CUDA_ERROR_INVALID_VALUE;
  pool_trim(driver, *pool, keep);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool handle, CUmemPool_attribute attribute,
                                             void* value) {
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  MemPool* pool = valid_pool(driver, handle);
  if (!pool) return CUDA_ERROR_INVALID_VALUE;
  switch (attribute) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      pool->release_threshold = *static_cast<cuuint64_t*>(value);
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      // Only resetting (to 0) is allowed; the high mark restarts at the current value.
      if (*static_cast<cuuint64_t*>(value) != 0) return CUDA_ERROR_INVALID_VALUE;
      if (attribute == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH) {
        pool->reserved_high = pool->reserved;
      } else {
        pool->used_high = pool->used;
      }
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

SIMGPU_EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool handle, CUmemPool_attribute attribute,
                                             void* value) {
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  MemPool* pool = valid_pool(driver, handle);
  if (!pool) return CUDA_ERROR_INVALID_VALUE;
  auto* out64 = static_cast<cuuint64_t*>(value);
  switch (attribute) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      *out64 = pool->release_threshold;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
      *out64 = pool->reserved;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
      *out64 = pool->reserved_high;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
      *out64 = pool->used;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      *out64 = pool->used_high;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      *static_cast<int*>(value) = 1;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}
