// What other allocators need from the stream-ordered pools (pools.cc): a device pointer may come
// from a pool (cuMemFree and cuMemFreeAsync accept both kinds), and a destroyed context frees its
// pool allocations.
#pragma once

#include <cuda.h>

#include "accounting.h"
#include "state.h"

namespace tessera::vgpu {

// A pool allocation was freed (by the program, or with its context): settles its pool.
void pool_pointer_freed(const Record& record);

// Frees a device pointer from any allocator through `free_call`.
template <typename FreeCall>
CUresult free_pointer(CUdeviceptr dptr, FreeCall free_call) {
  Record record;
  if (!shim().tracker.take(HandleKind::kPoolPointer, dptr, &record)) {
    return free_tracked(HandleKind::kDevicePointer, dptr, free_call);
  }
  const CUresult result = free_call();
  if (result != CUDA_SUCCESS) {
    shim().tracker.insert(record);
    return result;
  }
  pool_pointer_freed(record);
  return result;
}

}  // namespace tessera::vgpu
