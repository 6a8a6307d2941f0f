// Memory accounting, shared by every allocator of the shim (linear_memory.cc, pools.cc, vmm.cc,
// arrays.cc, contexts.cc, graph.cc): every allocation reserves its charged size on the share
// BEFORE the driver is called and gives it back if the driver fails; frees give back exactly what
// was charged. Sizes follow the driver: 2 MiB pages from 1 MiB up, 512 B below; pitch = the pitch
// the driver chose x height; VMM (cuMemCreate) the exact size; arrays by element size x extent;
// each context TESSERA_CONTEXT_OVERHEAD. Handles the shim did not see go to the driver unchanged.
// Inline: these are on the allocation path.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "log.h"
#include "state.h"

namespace tessera::vgpu {

// The driver call of an allocation whose `bytes` are reserved on GPU `index`: when the driver
// refuses with CUDA_ERROR_OUT_OF_MEMORY and the share is owed the memory (within its request:
// ReclaimWait), the call is tried again while the agent reclaims borrowed memory, up to
// TESSERA_RECLAIM_WAIT_MS. The path that succeeds at once is one call and one compare.
template <typename Call>
CUresult call_reclaiming(GpuIndex index, uint64_t bytes, Call call) {
  CUresult result = call();
  if (__builtin_expect(result != CUDA_ERROR_OUT_OF_MEMORY, 1)) return result;
  return [&]() __attribute__((noinline)) {
    ReclaimWait wait(index, bytes);
    while (result == CUDA_ERROR_OUT_OF_MEMORY && wait.again()) result = call();
    return result;
  }
  ();
}

// Records a handle and the bytes charged for it.
inline void track(HandleKind kind, uint64_t handle, GpuIndex index, uint64_t bytes,
                  uint64_t context, uint64_t aux = 0) {
  Record record;
  record.handle = handle;
  record.kind = kind;
  record.device = static_cast<int16_t>(index.value);
  record.bytes = bytes;
  record.context = context;
  record.aux = aux;
  if (!shim().tracker.insert(record)) {
    // The bytes stay charged (safe) until the process exits.
    TESSERA_ERROR("out of host memory for the allocation table; %llu bytes stay charged",
                  static_cast<unsigned long long>(bytes));
  }
}

// Frees a tracked handle through `free_call`; untracked handles go to the driver unchanged.
template <typename FreeCall>
CUresult free_tracked(HandleKind kind, uint64_t handle, FreeCall free_call) {
  Record record;
  if (!shim().tracker.take(kind, handle, &record)) return free_call();
  const CUresult result = free_call();
  if (result != CUDA_SUCCESS) {
    shim().tracker.insert(record);  // still allocated
    return result;
  }
  release_bytes(record.gpu(), record.bytes);
  return result;
}

}  // namespace tessera::vgpu
