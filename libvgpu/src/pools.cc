// Stream-ordered allocation (cuMemAllocAsync, cuMemAllocFromPoolAsync) and its pools. A pool's
// reserved memory (CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) is what it takes from the device; the shim
// keeps each live pool charged for what the driver says it reserves, plus the growth its
// allocations in flight may cause. A pool gives memory back to the device when the driver trims it:
// at a stream, event or context synchronisation (down to its release threshold, 0 by default) and
// at cuMemPoolTrimTo. The shim settles every tracked pool after each synchronisation it sees, in
// cuMemGetInfo and before refusing a reservation, and a pool's own operations settle that pool.
#include "pools.h"

#include <cuda.h>
#include <sched.h>

#include <atomic>

#include "accounting.h"
#include "hooks.h"
#include "log.h"
#include "state.h"

using namespace tessera::vgpu;

// Live pools the shim tracks (each has a kPool record): the synchronisation hooks and
// cuMemGetInfo settle pools only while this is not 0 (one relaxed load otherwise).
constinit std::atomic<uint32_t> tessera::vgpu::g_live_pools{0};

namespace {

// Held while pool records are read and changed and a pool's charge is settled (its attribute
// queries and the share's reservation included), never across an allocation's own driver call:
// an allocation claims its share of the pool under the lock, calls the driver without it, then
// settles under it again.
constinit SpinLock g_pool_lock{LockRank::kPools};
// Whether this thread holds g_pool_lock (a refusal inside its reservation settles the other
// pools without taking the lock again), and the pool it is reserving for (left to its caller).
__thread bool t_holds_pool_lock __attribute__((tls_model("initial-exec"))) = false;
__thread CUmemoryPool t_reserving_for __attribute__((tls_model("initial-exec"))) = nullptr;

class TESSERA_SCOPED_CAPABILITY PoolLock {
 public:
  PoolLock() TESSERA_ACQUIRE(g_pool_lock) {
    g_pool_lock.lock();
    t_holds_pool_lock = true;
  }
  ~PoolLock() TESSERA_RELEASE() {
    t_holds_pool_lock = false;
    g_pool_lock.unlock();
  }
  PoolLock(const PoolLock&) = delete;
  PoolLock& operator=(const PoolLock&) = delete;
};

// The live pools' handles, for settling them all without a scan of the handle table (which holds
// every allocation of the process). Under g_pool_lock. A process with more live pools than this
// settles the others through a scan of the table, only before a refusal.
constexpr uint32_t kListedPools = 64;
constinit CUmemoryPool g_listed[kListedPools] TESSERA_GUARDED_BY(g_pool_lock) = {};
constinit uint32_t g_listed_count TESSERA_GUARDED_BY(g_pool_lock) = 0;
constinit uint32_t g_unlisted TESSERA_GUARDED_BY(g_pool_lock) = 0;

void list_pool(CUmemoryPool pool) TESSERA_REQUIRES(g_pool_lock) {
  if (g_listed_count < kListedPools) {
    g_listed[g_listed_count++] = pool;
  } else {
    ++g_unlisted;
  }
  g_live_pools.fetch_add(1, std::memory_order_relaxed);
}

void unlist_pool(CUmemoryPool pool) TESSERA_REQUIRES(g_pool_lock) {
  bool found = false;
  for (uint32_t i = 0; i < g_listed_count; ++i) {
    if (g_listed[i] == pool) {
      g_listed[i] = g_listed[--g_listed_count];
      found = true;
      break;
    }
  }
  if (!found && g_unlisted > 0) --g_unlisted;
  g_live_pools.fetch_sub(1, std::memory_order_relaxed);
}

void settle_idle_pools();

bool pool_attribute(CUmemoryPool pool, CUmemPool_attribute attribute, uint64_t* value) {
  auto get = real_cuMemPoolGetAttribute();
  cuuint64_t v = 0;
  if (!get || get(pool, attribute, &v) != CUDA_SUCCESS) return false;
  *value = v;
  return true;
}

// A live pool's record: bytes = what the share is charged for it, context = the bytes its
// allocations in flight asked for (claimed: between their reservation and their settlement).
struct LivePool {
  Record record;
  uint64_t& charged() { return record.bytes; }
  uint64_t& claimed() { return record.context; }
};

// What the pool may hold once its allocations in flight are done: what it reserves now, or what
// it uses plus what is claimed (an allocation already made by the driver but not yet settled is
// counted in both: more, never less). False if the driver cannot be asked.
bool pool_need(CUmemoryPool pool, uint64_t claimed, uint64_t* need) {
  uint64_t reserved = 0;
  if (!pool_attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved)) return false;
  uint64_t used = 0;
  if (claimed > 0 && !pool_attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used)) return false;
  *need = used + claimed > reserved ? used + claimed : reserved;
  return true;
}

// Settles a live pool's charge with what the driver holds for it. Without allocations in flight
// the charge becomes the pool's reserved size (growth the shim did not see is charged, beyond the
// limit if it must be: the driver holds it); with some, only a surplus is released (each of them
// settles its own growth when it returns). Call with g_pool_lock held.
void settle_live(LivePool& live) TESSERA_REQUIRES(g_pool_lock) {
  auto* pool = reinterpret_cast<CUmemoryPool>(live.record.handle);
  uint64_t need = 0;
  if (!pool_need(pool, live.claimed(), &need)) return;
  const GpuIndex index = live.record.gpu();
  if (need < live.charged()) {
    release_bytes(index, live.charged() - need);
  } else if (need > live.charged()) {
    if (live.claimed() > 0) return;
    charge_bytes(index, need - live.charged());
  }
  live.charged() = need;
}

void store(const LivePool& live) TESSERA_REQUIRES(g_pool_lock) {
  track(HandleKind::kPool, live.record.handle, live.record.gpu(), live.record.bytes,
        live.record.context);
  set_before_refusal(settle_idle_pools);  // a pool is tracked: it may give memory back
}

// Finds a live pool's record, or starts one charged nothing (listed as live). Call with
// g_pool_lock held.
LivePool find_or_start(CUmemoryPool pool, GpuIndex index) TESSERA_REQUIRES(g_pool_lock) {
  LivePool live;
  if (!shim().tracker.find(HandleKind::kPool, reinterpret_cast<uint64_t>(pool), &live.record)) {
    live.record = Record{};
    live.record.handle = reinterpret_cast<uint64_t>(pool);
    live.record.kind = HandleKind::kPool;
    live.record.device = static_cast<int16_t>(index.value);
    list_pool(pool);
  }
  return live;
}

void settle_listed(CUmemoryPool pool) TESSERA_REQUIRES(g_pool_lock) {
  if (pool == t_reserving_for) return;  // its allocation settles it
  LivePool live;
  if (!shim().tracker.find(HandleKind::kPool, reinterpret_cast<uint64_t>(pool), &live.record) ||
      live.record.aux != 0) {
    return;
  }
  settle_live(live);
  store(live);
}

// Settles every live pool. Call with g_pool_lock held. `scan`: also the pools beyond the list,
// through a scan of the handle table.
void settle_all(bool scan) TESSERA_REQUIRES(g_pool_lock) {
  for (uint32_t i = 0; i < g_listed_count; ++i) settle_listed(g_listed[i]);
  if (!scan || g_unlisted == 0) return;
  Record pools[64];
  const size_t count = shim().tracker.collect(HandleKind::kPool, pools, 64);
  for (size_t i = 0; i < count; ++i) {
    auto* handle = reinterpret_cast<CUmemoryPool>(pools[i].handle);
    bool listed = false;
    for (uint32_t j = 0; j < g_listed_count && !listed; ++j) listed = g_listed[j] == handle;
    if (!listed) settle_listed(handle);
  }
}

// Registered with the share (set_before_refusal) once a pool is tracked: before a reservation
// fails, pools the driver trimmed give their memory back here. A pool allocation of this thread
// holds the lock already while it reserves: the other pools are settled under it.
void settle_idle_pools() {
  if (t_holds_pool_lock) {
    g_pool_lock.assert_held();
    settle_all(/*scan=*/true);
    return;
  }
  PoolLock lock;
  settle_all(/*scan=*/true);
}

// Reserves what the pool may grow by for an allocation of `estimate` bytes and claims them.
// False (nothing claimed) if the share has no room. Call with g_pool_lock held.
bool claim(LivePool& live, uint64_t estimate) TESSERA_REQUIRES(g_pool_lock) {
  auto* pool = reinterpret_cast<CUmemoryPool>(live.record.handle);
  uint64_t need = 0;
  // If the driver cannot be asked, the pool is assumed to have nothing idle.
  if (!pool_need(pool, live.claimed() + estimate, &need)) need = live.charged() + estimate;
  const GpuIndex index = live.record.gpu();
  if (need < live.charged()) {
    release_bytes(index, live.charged() - need);
  } else if (need > live.charged()) {
    t_reserving_for = pool;
    const bool reserved = reserve_bytes(index, need - live.charged());
    t_reserving_for = nullptr;
    if (!reserved) return false;
  }
  live.charged() = need;
  live.claimed() += estimate;
  return true;
}

// After the driver call: the claim ends and the pool is settled. False if the pool grew beyond
// what was reserved and the share cannot cover it (the growth is charged all the same: the driver
// holds it; the caller undoes the allocation). Call with g_pool_lock held.
bool settle_claim(LivePool& live, uint64_t estimate) TESSERA_REQUIRES(g_pool_lock) {
  live.claimed() -= estimate < live.claimed() ? estimate : live.claimed();
  auto* pool = reinterpret_cast<CUmemoryPool>(live.record.handle);
  uint64_t need = 0;
  if (!pool_need(pool, live.claimed(), &need)) return true;  // the estimate stays charged
  const GpuIndex index = live.record.gpu();
  bool covered = true;
  if (need < live.charged()) {
    release_bytes(index, live.charged() - need);
  } else if (need > live.charged()) {
    t_reserving_for = pool;
    covered = reserve_bytes(index, need - live.charged());
    t_reserving_for = nullptr;
    if (!covered) charge_bytes(index, need - live.charged());
  }
  live.charged() = need;
  return covered;
}

template <typename Call, typename FreeCall>
CUresult allocate_from_pool(CUdeviceptr* dptr, size_t bytes, CUmemoryPool explicit_pool, Call call,
                            FreeCall free_call) {
  CudaOrdinal ordinal;
  CUcontext context = nullptr;
  const GpuIndex index = dptr && bytes ? current_device(&ordinal, &context) : kPassThrough;
  if (index == kPassThrough) return call();
  if (index == kBlocked) return CUDA_ERROR_OUT_OF_MEMORY;
  CUmemoryPool pool = explicit_pool;
  auto get_pool = real_cuDeviceGetMemPool();
  if (!pool && (!get_pool || get_pool(&pool, ordinal.value) != CUDA_SUCCESS)) {
    // Without the pool its growth cannot be accounted: refuse rather than let it escape.
    TESSERA_ERROR("cannot find the memory pool of device %d; stream-ordered allocation refused",
                  ordinal.value);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  uint64_t estimate = 0;
  if (!charged_size(bytes, &estimate)) return CUDA_ERROR_OUT_OF_MEMORY;
  estimate = (estimate + (2ull << 20) - 1) / (2ull << 20) * (2ull << 20);
  const uint64_t handle = reinterpret_cast<uint64_t>(pool);
  GpuIndex pool_index = index;
  {
    PoolLock lock;
    LivePool live = find_or_start(pool, index);
    pool_index = live.record.gpu();
    const bool claimed = claim(live, estimate);
    store(live);
    if (!claimed) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  CUresult result = call();
  bool covered = true;
  {
    PoolLock lock;
    LivePool live;
    if (shim().tracker.find(HandleKind::kPool, handle, &live.record) && live.record.aux == 0) {
      covered = settle_claim(live, estimate);
      store(live);
    }
    // Else the program destroyed the pool during its own allocation: the claim's reservation
    // went with the pool's record (cuMemPoolDestroy), charged until its allocations are freed.
    if (result == CUDA_SUCCESS && covered) {
      track(HandleKind::kPoolPointer, *dptr, pool_index, estimate,
            reinterpret_cast<uint64_t>(context), handle);
    }
  }
  if (!covered) {
    // The pool grew beyond the estimate and the share cannot cover it: undo the allocation.
    if (result == CUDA_SUCCESS) {
      free_call(*dptr);
      result = CUDA_ERROR_OUT_OF_MEMORY;
    }
    auto trim = real_cuMemPoolTrimTo();
    if (trim) trim(pool, 0);
    PoolLock lock;
    settle_listed(pool);
  }
  return result;
}

void settle_known_pool(CUmemoryPool pool) {
  PoolLock lock;
  settle_listed(pool);
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

// In a forked child: another thread of the parent may have held the lock at fork time. The child
// has one thread: the pool records are reset without the lock.
void reset_after_fork() TESSERA_NO_THREAD_SAFETY_ANALYSIS {
  g_pool_lock.reset_after_fork();
  t_holds_pool_lock = false;
  t_reserving_for = nullptr;
  // The handle table is emptied in the child: no pool is tracked there.
  g_listed_count = 0;
  g_unlisted = 0;
  g_live_pools.store(0, std::memory_order_relaxed);
}

__attribute__((constructor)) void register_fork_reset() {
  on_fork_child(reset_after_fork);
}

}  // namespace

void tessera::vgpu::settle_tracked_pools_slow() {
  PoolLock lock;
  settle_all(/*scan=*/false);
}

// A pool allocation was freed (by the program, or with its context). A live pool keeps what it
// reserved: settle against it. A destroyed pool's memory goes back as its allocations are freed.
void tessera::vgpu::pool_pointer_freed(const Record& record) {
  PoolLock lock;
  Record pool;
  if (!shim().tracker.find(HandleKind::kPool, record.aux, &pool)) return;
  if (pool.aux == 0) {
    settle_listed(reinterpret_cast<CUmemoryPool>(record.aux));
    return;
  }
  const uint64_t returned = record.bytes < pool.bytes ? record.bytes : pool.bytes;
  release_bytes(pool.gpu(), returned);
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
  PoolLock lock;
  const uint64_t handle = reinterpret_cast<uint64_t>(pool);
  Record known;
  if (!shim().tracker.find(HandleKind::kPool, handle, &known)) return real(pool);
  uint64_t used = known.bytes;
  pool_attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used);
  const CUresult result = real(pool);
  if (result != CUDA_SUCCESS) return result;
  shim().tracker.take(HandleKind::kPool, handle, &known);
  unlist_pool(pool);
  // The idle memory goes back now; what outstanding allocations use stays charged until they
  // are freed (the driver releases the pool's memory then).
  const uint64_t outstanding = used < known.bytes ? used : known.bytes;
  release_bytes(known.gpu(), known.bytes - outstanding);
  if (outstanding > 0) {
    const uint64_t id = (1ull << 63) | g_next_destroyed_pool.fetch_add(1);
    shim().tracker.retag_aux(HandleKind::kPoolPointer, handle, id);
    track(HandleKind::kPool, id, known.gpu(), outstanding, 0, /*destroyed=*/1);
  }
  return result;
}

// Synchronisations: the driver trims every pool of the device to its release threshold (0 by
// default) when one returns, so the tracked pools are settled after it. Nothing more than a
// relaxed load while no pool is tracked.
#define TESSERA_SYNCHRONIZE(symbol, params, args) \
  CUresult symbol params {                        \
    count_call(kHook_##symbol);                   \
    auto real = real_##symbol();                  \
    if (!real) return CUDA_ERROR_NOT_INITIALIZED; \
    const CUresult result = real args;            \
    settle_tracked_pools();                       \
    return result;                                \
  }
TESSERA_SYNCHRONIZE(cuStreamSynchronize, (CUstream stream), (stream))
TESSERA_SYNCHRONIZE(cuStreamSynchronize_ptsz, (CUstream stream), (stream))
TESSERA_SYNCHRONIZE(cuEventSynchronize, (CUevent event), (event))
TESSERA_SYNCHRONIZE(cuCtxSynchronize, (), ())
TESSERA_SYNCHRONIZE(cuCtxSynchronize_v2, (CUcontext context), (context))
