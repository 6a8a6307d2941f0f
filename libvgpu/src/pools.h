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
  // One lookup for both kinds: a pool allocation first, as before.
  if (!shim().tracker.take_either(HandleKind::kPoolPointer, HandleKind::kDevicePointer, dptr,
                                  &record)) {
    return free_call();
  }
  const CUresult result = free_call();
  if (result != CUDA_SUCCESS) {
    shim().tracker.insert(record);  // still allocated
    return result;
  }
  if (record.kind == HandleKind::kPoolPointer) {
    pool_pointer_freed(record);
  } else {
    release_bytes(record.device, record.bytes);
  }
  return result;
}

}  // namespace tessera::vgpu
