// Stream-ordered allocation (cuMemAllocAsync, cuMemAllocFromPoolAsync) and its pools. A pool's
// reserved memory (CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) is what it takes from the device; the shim
// keeps each pool's last observed reserved size charged and settles the difference at every pool
// operation it sees (so a trim at synchronisation is picked up at the pool's next operation).
#include "pools.h"

#include <cuda.h>

#include <atomic>

#include "accounting.h"
#include "hooks.h"
#include "log.h"
#include "state.h"

using namespace tessera::vgpu;

namespace {

// Held while a pool's charge is settled (never across an allocation's own driver call).
constinit std::atomic<bool> g_pool_lock{false};

void settle_idle_pools();

bool pool_attribute(CUmemoryPool pool, CUmemPool_attribute attribute, uint64_t* value) {
  auto get = real_cuMemPoolGetAttribute();
  cuuint64_t v = 0;
  if (!get || get(pool, attribute, &v) != CUDA_SUCCESS) return false;
  *value = v;
  return true;
}

// Charges or releases the difference between the pool's reserved memory and what was accounted;
// returns the reserved size now accounted. Call with g_pool_lock held.
uint64_t settle_pool(CUmemoryPool pool, int index, uint64_t accounted) {
  uint64_t reserved = accounted;
  if (!pool_attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved)) return accounted;
  if (reserved > accounted) {
    charge_bytes(index, reserved - accounted);
  } else if (reserved < accounted) {
    release_bytes(index, accounted - reserved);
  }
  return reserved;
}

void remember_pool(CUmemoryPool pool, int index, uint64_t accounted) {
  track(HandleKind::kPool, reinterpret_cast<uint64_t>(pool), index, accounted, 0);
  set_before_refusal(settle_idle_pools);  // a pool is tracked: it may give memory back
}

template <typename Call, typename FreeCall>
CUresult allocate_from_pool(CUdeviceptr* dptr, size_t bytes, CUmemoryPool explicit_pool, Call call,
                            FreeCall free_call) {
  CUdevice ordinal = 0;
  CUcontext context = nullptr;
  const int index = dptr && bytes ? current_device(&ordinal, &context) : kPassThrough;
  if (index == kPassThrough) return call();
  if (index == kBlocked) return CUDA_ERROR_OUT_OF_MEMORY;
  CUmemoryPool pool = explicit_pool;
  auto get_pool = real_cuDeviceGetMemPool();
  if (!pool && (!get_pool || get_pool(&pool, ordinal) != CUDA_SUCCESS)) {
    // Without the pool its growth cannot be accounted: refuse rather than let it escape.
    TESSERA_ERROR("cannot find the memory pool of device %d; stream-ordered allocation refused",
                  static_cast<int>(ordinal));
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  SpinGuard guard(g_pool_lock);
  Record known;
  const bool seen =
      shim().tracker.find(HandleKind::kPool, reinterpret_cast<uint64_t>(pool), &known);
  const int pool_index = seen ? known.device : index;
  const uint64_t accounted = settle_pool(pool, pool_index, seen ? known.bytes : 0);
  remember_pool(pool, pool_index, accounted);
  uint64_t used = accounted;
  pool_attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used);
  const uint64_t idle = accounted > used ? accounted - used : 0;
  uint64_t estimate = 0;
  if (!charged_size(bytes, &estimate)) return CUDA_ERROR_OUT_OF_MEMORY;
  estimate = (estimate + (2ull << 20) - 1) / (2ull << 20) * (2ull << 20);
  const uint64_t growth = estimate > idle ? estimate - idle : 0;
  if (growth > 0 && !reserve_bytes(pool_index, growth)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult result = call();
  // The reservation covered the expected growth; settle against what the pool really took (if
  // the pool cannot be asked, the estimate stays charged).
  const uint64_t covered = accounted + growth;
  uint64_t reserved = covered;
  pool_attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved);
  if (reserved <= covered) {
    release_bytes(pool_index, covered - reserved);
  } else if (!reserve_bytes(pool_index, reserved - covered)) {
    // The pool grew beyond the estimate and the share cannot cover it: undo the allocation.
    charge_bytes(pool_index, reserved - covered);
    if (result == CUDA_SUCCESS) {
      free_call(*dptr);
      result = CUDA_ERROR_OUT_OF_MEMORY;
    }
    auto trim = real_cuMemPoolTrimTo();
    if (trim) trim(pool, 0);
    reserved = settle_pool(pool, pool_index, reserved);
  }
  remember_pool(pool, pool_index, reserved);
  if (result == CUDA_SUCCESS) {
    track(HandleKind::kPoolPointer, *dptr, pool_index, estimate,
          reinterpret_cast<uint64_t>(context), reinterpret_cast<uint64_t>(pool));
  }
  return result;
}

void settle_known_pool(CUmemoryPool pool) {
  SpinGuard guard(g_pool_lock);
  Record known;
  if (!shim().tracker.find(HandleKind::kPool, reinterpret_cast<uint64_t>(pool), &known)) return;
  remember_pool(pool, known.device, settle_pool(pool, known.device, known.bytes));
}

// Registered with the share (set_before_refusal) once a pool is tracked: before a reservation
// fails, pools trimmed at synchronisation give their memory back here. Skipped when the pool lock
// is taken (the caller may be a pool operation of this thread, which settles its own pool
// anyway).
void settle_idle_pools() {
  Shim& s = shim();
  if (g_pool_lock.exchange(true, std::memory_order_acquire)) return;
  Record pools[64];
  const size_t count = s.tracker.collect(HandleKind::kPool, pools, 64);
  for (size_t i = 0; i < count; ++i) {
    if (pools[i].aux != 0) continue;  // destroyed: settles as its allocations are freed
    auto* handle = reinterpret_cast<CUmemoryPool>(pools[i].handle);
    remember_pool(handle, pools[i].device, settle_pool(handle, pools[i].device, pools[i].bytes));
  }
  g_pool_lock.store(false, std::memory_order_release);
}

// Destroyed pools are re-keyed under ids no pool handle can have, so a new pool the driver
// places at the same address starts clean.
std::atomic<uint64_t> g_next_destroyed_pool{1};

// An allocation on a capturing stream takes no memory: it becomes a memory allocation node of the
// captured graph, charged through the graph memory pool when the graph is launched (graph.cc).
bool capturing(Fn_cuStreamIsCapturing is_capturing, CUstream stream) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  return is_capturing && is_capturing(stream, &status) == CUDA_SUCCESS &&
         status != CU_STREAM_CAPTURE_STATUS_NONE;
}

// In a forked child: another thread of the parent may have held the lock at fork time.
void reset_after_fork() {
  g_pool_lock.store(false, std::memory_order_relaxed);
}

__attribute__((constructor)) void register_fork_reset() {
  on_fork_child(reset_after_fork);
}

}  // namespace

// A pool allocation was freed (by the program, or with its context). A live pool keeps what it
// reserved: settle against it. A destroyed pool's memory goes back as its allocations are freed.
void tessera::vgpu::pool_pointer_freed(const Record& record) {
  SpinGuard guard(g_pool_lock);
  Record pool;
  if (!shim().tracker.find(HandleKind::kPool, record.aux, &pool)) return;
  if (pool.aux == 0) {
    auto* handle = reinterpret_cast<CUmemoryPool>(record.aux);
    remember_pool(handle, pool.device, settle_pool(handle, pool.device, pool.bytes));
    return;
  }
  const uint64_t returned = record.bytes < pool.bytes ? record.bytes : pool.bytes;
  release_bytes(pool.device, returned);
  pool.bytes -= returned;
  if (pool.bytes == 0) {
    shim().tracker.take(HandleKind::kPool, record.aux, &pool);
  } else {
    shim().tracker.insert(pool);
  }
}

#define TESSERA_ALLOC_ASYNC(symbol, is_capturing)                                        \
  CUresult symbol(CUdeviceptr* dptr, size_t bytes, CUstream stream) {                    \
    count_call(kHook_##symbol);                                                          \
    auto real = real_##symbol();                                                         \
    if (!real) return CUDA_ERROR_NOT_INITIALIZED;                                        \
    if (dptr && bytes && enforcing() && capturing(real_##is_capturing(), stream)) {      \
      return real(dptr, bytes, stream);                                                  \
    }                                                                                    \
    auto free_real = real_cuMemFreeAsync();                                              \
    return allocate_from_pool(                                                           \
        dptr, bytes, nullptr, [&] { return real(dptr, bytes, stream); },                 \
        [&](CUdeviceptr p) { return free_real ? free_real(p, stream) : CUDA_SUCCESS; }); \
  }
TESSERA_ALLOC_ASYNC(cuMemAllocAsync, cuStreamIsCapturing)
TESSERA_ALLOC_ASYNC(cuMemAllocAsync_ptsz, cuStreamIsCapturing_ptsz)

#define TESSERA_ALLOC_FROM_POOL(symbol, is_capturing)                                    \
  CUresult symbol(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool, CUstream stream) { \
    count_call(kHook_##symbol);                                                          \
    auto real = real_##symbol();                                                         \
    if (!real) return CUDA_ERROR_NOT_INITIALIZED;                                        \
    if (!pool) return real(dptr, bytes, pool, stream);                                   \
    if (dptr && bytes && enforcing() && capturing(real_##is_capturing(), stream)) {      \
      return real(dptr, bytes, pool, stream);                                            \
    }                                                                                    \
    auto free_real = real_cuMemFreeAsync();                                              \
    return allocate_from_pool(                                                           \
        dptr, bytes, pool, [&] { return real(dptr, bytes, pool, stream); },              \
        [&](CUdeviceptr p) { return free_real ? free_real(p, stream) : CUDA_SUCCESS; }); \
  }
TESSERA_ALLOC_FROM_POOL(cuMemAllocFromPoolAsync, cuStreamIsCapturing)
TESSERA_ALLOC_FROM_POOL(cuMemAllocFromPoolAsync_ptsz, cuStreamIsCapturing_ptsz)

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) {
  count_call(kHook_cuMemFreeAsync);
  auto real = real_cuMemFreeAsync();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  return free_pointer(dptr, [&] { return real(dptr, stream); });
}

CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream) {
  count_call(kHook_cuMemFreeAsync_ptsz);
  auto real = real_cuMemFreeAsync_ptsz();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  return free_pointer(dptr, [&] { return real(dptr, stream); });
}

CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
  count_call(kHook_cuMemPoolTrimTo);
  auto real = real_cuMemPoolTrimTo();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  const CUresult result = real(pool, keep);
  if (result == CUDA_SUCCESS && enforcing()) settle_known_pool(pool);
  return result;
}

CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  count_call(kHook_cuMemPoolDestroy);
  auto real = real_cuMemPoolDestroy();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (!pool || !enforcing()) return real(pool);
  SpinGuard guard(g_pool_lock);
  const uint64_t handle = reinterpret_cast<uint64_t>(pool);
  Record known;
  if (!shim().tracker.find(HandleKind::kPool, handle, &known)) return real(pool);
  uint64_t used = known.bytes;
  pool_attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used);
  const CUresult result = real(pool);
  if (result != CUDA_SUCCESS) return result;
  shim().tracker.take(HandleKind::kPool, handle, &known);
  // The idle memory goes back now; what outstanding allocations use stays charged until they
  // are freed (the driver releases the pool's memory then).
  const uint64_t outstanding = used < known.bytes ? used : known.bytes;
  release_bytes(known.device, known.bytes - outstanding);
  if (outstanding > 0) {
    const uint64_t id = (1ull << 63) | g_next_destroyed_pool.fetch_add(1);
    shim().tracker.retag_aux(HandleKind::kPoolPointer, handle, id);
    track(HandleKind::kPool, id, known.device, outstanding, 0, /*destroyed=*/1);
  }
  return result;
}
