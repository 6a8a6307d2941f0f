// What other allocators and views need from the stream-ordered pools (pools.cc): a device pointer
// may come from a pool (cuMemFree and cuMemFreeAsync accept both kinds), a destroyed context frees
// its pool allocations, and the memory views settle the pools the driver may have trimmed.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>

#include "accounting.h"
#include "state.h"

namespace tessera::vgpu {

// Live stream-ordered pools the shim tracks; 0 while there are none.
extern std::atomic<uint32_t> g_live_pools;

void settle_tracked_pools_slow();

// Settles every tracked pool with what the driver holds for it (after a synchronisation, in the
// memory views): the driver may have trimmed them. One relaxed load while no pool is tracked.
inline void settle_tracked_pools() {
  if (__builtin_expect(g_live_pools.load(std::memory_order_relaxed) != 0, 0)) {
    settle_tracked_pools_slow();
  }
}

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
    release_bytes(record.gpu(), record.bytes);
  }
  return result;
}

}  // namespace tessera::vgpu
