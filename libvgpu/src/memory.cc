// Memory accounting: every allocation reserves its charged size on the share BEFORE the driver is
// called and gives it back if the driver fails; frees give back exactly what was charged. Sizes
// follow the driver: 2 MiB pages from 1 MiB up, 512 B below; pitch = the pitch the driver chose x
// height; VMM (cuMemCreate) the exact size; arrays by element size x extent; each context
// TESSERA_CONTEXT_OVERHEAD. Handles the shim did not see go to the driver unchanged.
#include <cuda.h>

#include "hooks.h"
#include "log.h"
#include "state.h"

using namespace tessera::vgpu;

namespace {

constexpr size_t kDrainBatch = 64;

void track(HandleKind kind, uint64_t handle, int index, uint64_t bytes, uint64_t context,
           uint64_t aux = 0) {
  Record record;
  record.handle = handle;
  record.kind = kind;
  record.device = static_cast<int16_t>(index);
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
  release_bytes(record.device, record.bytes);
  return result;
}

void pool_pointer_freed(const Record& record);

// Gives back everything a destroyed context owned (the driver frees it with the context).
void drain_context(uint64_t context) {
  Record records[kDrainBatch];
  size_t taken = 0;
  do {
    taken = shim().tracker.take_context(context, records, kDrainBatch);
    for (size_t i = 0; i < taken; ++i) {
      if (records[i].kind == HandleKind::kPoolPointer) {
        pool_pointer_freed(records[i]);  // charged through its pool
      } else {
        release_bytes(records[i].device, records[i].bytes);
      }
    }
  } while (taken == kDrainBatch);
}

// The linear-allocation pattern: reserve `charge`, call, record or roll back.
template <typename Call>
CUresult allocate_linear(int index, uint64_t requested, CUcontext context, CUdeviceptr* dptr,
                         Call call) {
  uint64_t charge = 0;
  if (index == kBlocked || !charged_size(requested, &charge)) return CUDA_ERROR_OUT_OF_MEMORY;
  if (!reserve_bytes(index, charge)) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult result = call();
  if (result != CUDA_SUCCESS) {
    release_bytes(index, charge);
    return result;
  }
  track(HandleKind::kDevicePointer, *dptr, index, charge, reinterpret_cast<uint64_t>(context));
  return result;
}

uint64_t array_element_bytes(CUarray_format format) {
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
      return 4;
    default:
      return 16;  // formats the shim does not know: the widest element, so nothing escapes
  }
}

bool array_bytes(const CUDA_ARRAY3D_DESCRIPTOR& d, uint64_t* out) {
  const uint64_t factors[] = {d.Width, d.Height ? d.Height : 1, d.Depth ? d.Depth : 1,
                              array_element_bytes(d.Format), d.NumChannels ? d.NumChannels : 1};
  uint64_t bytes = 1;
  for (uint64_t factor : factors) {
    if (factor != 0 && bytes > ~0ull / factor) return false;
    bytes *= factor;
  }
  *out = bytes;
  return true;
}

template <typename Call>
CUresult create_array(CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR* descriptor, Call call) {
  CUcontext context = nullptr;
  const int index = array && descriptor ? current_device(nullptr, &context) : kPassThrough;
  if (index == kPassThrough) return call();
  uint64_t bytes = 0;
  uint64_t charge = 0;
  if (index == kBlocked || !array_bytes(*descriptor, &bytes) || !charged_size(bytes, &charge) ||
      !reserve_bytes(index, charge)) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const CUresult result = call();
  if (result != CUDA_SUCCESS) {
    release_bytes(index, charge);
    return result;
  }
  track(HandleKind::kArray, reinterpret_cast<uint64_t>(*array), index, charge,
        reinterpret_cast<uint64_t>(context));
  return result;
}

// ---- stream-ordered pools ----------------------------------------------------------------------
// A pool's reserved memory (CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) is what it takes from the
// device; the shim keeps each pool's last observed reserved size charged and settles the
// difference at every pool operation it sees (so a trim at synchronisation is picked up at the
// pool's next operation).

bool pool_attribute(CUmemoryPool pool, CUmemPool_attribute attribute, uint64_t* value) {
  auto get = real_cuMemPoolGetAttribute();
  cuuint64_t v = 0;
  if (!get || get(pool, attribute, &v) != CUDA_SUCCESS) return false;
  *value = v;
  return true;
}

// Charges or releases the difference between the pool's reserved memory and what was accounted;
// returns the reserved size now accounted. Call with pool_lock held.
uint64_t settle_pool(CUmemoryPool pool, int index, uint64_t accounted) {
  uint64_t reserved = accounted;
  if (!pool_attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved)) return accounted;
  if (reserved > accounted) {
    shim().region.charge(index, reserved - accounted);
  } else if (reserved < accounted) {
    release_bytes(index, accounted - reserved);
  }
  return reserved;
}

void remember_pool(CUmemoryPool pool, int index, uint64_t accounted) {
  track(HandleKind::kPool, reinterpret_cast<uint64_t>(pool), index, accounted, 0);
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
  SpinGuard guard(shim().pool_lock);
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
    shim().region.charge(pool_index, reserved - covered);
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
  SpinGuard guard(shim().pool_lock);
  Record known;
  if (!shim().tracker.find(HandleKind::kPool, reinterpret_cast<uint64_t>(pool), &known)) return;
  remember_pool(pool, known.device, settle_pool(pool, known.device, known.bytes));
}

// A pool allocation was freed (by the program, or with its context). A live pool keeps what it
// reserved: settle against it. A destroyed pool's memory goes back as its allocations are freed.
void pool_pointer_freed(const Record& record) {
  SpinGuard guard(shim().pool_lock);
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

// Frees a device pointer from any allocator (cuMemFree and cuMemFreeAsync accept both).
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

}  // namespace

// Before a reservation fails: pools trimmed at synchronisation give their memory back here. Skipped
// when the pool lock is taken (the caller may be a pool operation of this thread, which settles
// its own pool anyway).
void tessera::vgpu::settle_idle_pools() {
  Shim& s = shim();
  if (s.pool_lock.exchange(true, std::memory_order_acquire)) return;
  Record pools[64];
  const size_t count = s.tracker.collect(HandleKind::kPool, pools, 64);
  for (size_t i = 0; i < count; ++i) {
    if (pools[i].aux != 0) continue;  // destroyed: settles as its allocations are freed
    auto* handle = reinterpret_cast<CUmemoryPool>(pools[i].handle);
    remember_pool(handle, pools[i].device, settle_pool(handle, pools[i].device, pools[i].bytes));
  }
  s.pool_lock.store(false, std::memory_order_release);
}

namespace {

// Destroyed pools are re-keyed under ids no pool handle can have, so a new pool the driver
// places at the same address starts clean.
std::atomic<uint64_t> g_next_destroyed_pool{1};

// ---- contexts -----------------------------------------------------------------------------------

template <typename Call>
CUresult create_context(CUcontext* context, CUdevice device, Call call) {
  const int index = context ? device_for_ordinal(device) : kPassThrough;
  if (index == kPassThrough) return call();
  const uint64_t overhead = shim().options.context_overhead;
  if (index == kBlocked || !reserve_bytes(index, overhead)) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult result = call();
  if (result != CUDA_SUCCESS) {
    release_bytes(index, overhead);
    return result;
  }
  const uint64_t handle = reinterpret_cast<uint64_t>(*context);
  track(HandleKind::kContext, handle, index, overhead, handle);
  return result;
}

void primary_released(CUdevice device) {
  Shim& s = shim();
  if (device < 0 || device >= kMaxOrdinals || s.primary_refcount[device] == 0) return;
  if (--s.primary_refcount[device] > 0) return;
  release_bytes(s.primary_index[device], s.options.context_overhead);
  drain_context(s.primary_context[device]);
}

}  // namespace

// ---- linear memory ------------------------------------------------------------------------------

CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  count_call(kHook_cuMemAlloc_v2);
  auto real = real_cuMemAlloc_v2();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  CUcontext context = nullptr;
  const int index = dptr && bytes ? current_device(nullptr, &context) : kPassThrough;
  if (index == kPassThrough) return real(dptr, bytes);
  return allocate_linear(index, bytes, context, dptr, [&] { return real(dptr, bytes); });
}

CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytes, unsigned int flags) {
  count_call(kHook_cuMemAllocManaged);
  auto real = real_cuMemAllocManaged();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  CUcontext context = nullptr;
  const int index = dptr && bytes ? current_device(nullptr, &context) : kPassThrough;
  if (index == kPassThrough) return real(dptr, bytes, flags);
  // Managed memory counts like device memory: on an H200 the driver does not bound it, so it
  // would otherwise escape the quota entirely.
  return allocate_linear(index, bytes, context, dptr, [&] { return real(dptr, bytes, flags); });
}

CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                            unsigned int element) {
  count_call(kHook_cuMemAllocPitch_v2);
  auto real = real_cuMemAllocPitch_v2();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  CUcontext context = nullptr;
  const int index =
      dptr && pitch && width && height ? current_device(nullptr, &context) : kPassThrough;
  if (index == kPassThrough) return real(dptr, pitch, width, height, element);
  // Reserve for a 512-byte-aligned pitch, then settle against the pitch the driver chose.
  const uint64_t row = (uint64_t{width} + 511) / 512 * 512;
  uint64_t estimate = 0;
  if (index == kBlocked || row < width || height > ~0ull / row ||
      !charged_size(row * height, &estimate) || !reserve_bytes(index, estimate)) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const CUresult result = real(dptr, pitch, width, height, element);
  if (result != CUDA_SUCCESS) {
    release_bytes(index, estimate);
    return result;
  }
  uint64_t charge = estimate;
  if (*pitch != 0 && height <= ~0ull / *pitch && charged_size(uint64_t{*pitch} * height, &charge)) {
    if (charge < estimate) {
      release_bytes(index, estimate - charge);
    } else if (charge > estimate && !reserve_bytes(index, charge - estimate)) {
      release_bytes(index, estimate);
      auto free_memory = real_cuMemFree_v2();
      if (free_memory) free_memory(*dptr);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  track(HandleKind::kDevicePointer, *dptr, index, charge, reinterpret_cast<uint64_t>(context));
  return result;
}

CUresult cuMemFree_v2(CUdeviceptr dptr) {
  count_call(kHook_cuMemFree_v2);
  auto real = real_cuMemFree_v2();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (dptr == 0) return real(dptr);
  return free_pointer(dptr, [&] { return real(dptr); });
}

// ---- stream-ordered -----------------------------------------------------------------------------

// An allocation on a capturing stream takes no memory: it becomes a memory allocation node of the
// captured graph, charged through the graph memory pool when the graph is launched (graph.cc).
namespace {
bool capturing(Fn_cuStreamIsCapturing is_capturing, CUstream stream) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  return is_capturing && is_capturing(stream, &status) == CUDA_SUCCESS &&
         status != CU_STREAM_CAPTURE_STATUS_NONE;
}
}  // namespace

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
  SpinGuard guard(shim().pool_lock);
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

// ---- virtual memory management ------------------------------------------------------------------

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                     const CUmemAllocationProp* prop, unsigned long long flags) {
  count_call(kHook_cuMemCreate);
  auto real = real_cuMemCreate();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  const bool on_device =
      handle && prop && size && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE;
  const int index = on_device ? device_for_ordinal(prop->location.id) : kPassThrough;
  if (index == kPassThrough) return real(handle, size, prop, flags);
  if (index == kBlocked || !reserve_bytes(index, size)) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult result = real(handle, size, prop, flags);
  if (result != CUDA_SUCCESS) {
    release_bytes(index, size);
    return result;
  }
  track(HandleKind::kVmmHandle, *handle, index, size, 0);
  return result;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  count_call(kHook_cuMemRelease);
  auto real = real_cuMemRelease();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  return free_tracked(HandleKind::kVmmHandle, handle, [&] { return real(handle); });
}

// ---- arrays -------------------------------------------------------------------------------------

CUresult cuArrayCreate_v2(CUarray* array, const CUDA_ARRAY_DESCRIPTOR* descriptor) {
  count_call(kHook_cuArrayCreate_v2);
  auto real = real_cuArrayCreate_v2();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  CUDA_ARRAY3D_DESCRIPTOR as3d{};
  if (descriptor) {
    as3d.Width = descriptor->Width;
    as3d.Height = descriptor->Height;
    as3d.Format = descriptor->Format;
    as3d.NumChannels = descriptor->NumChannels;
  }
  return create_array(array, descriptor ? &as3d : nullptr, [&] { return real(array, descriptor); });
}

CUresult cuArray3DCreate_v2(CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR* descriptor) {
  count_call(kHook_cuArray3DCreate_v2);
  auto real = real_cuArray3DCreate_v2();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  return create_array(array, descriptor, [&] { return real(array, descriptor); });
}

CUresult cuArrayDestroy(CUarray array) {
  count_call(kHook_cuArrayDestroy);
  auto real = real_cuArrayDestroy();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  return free_tracked(HandleKind::kArray, reinterpret_cast<uint64_t>(array),
                      [&] { return real(array); });
}

// ---- contexts -----------------------------------------------------------------------------------

CUresult cuCtxCreate_v2(CUcontext* context, unsigned int flags, CUdevice device) {
  count_call(kHook_cuCtxCreate_v2);
  auto real = real_cuCtxCreate_v2();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  return create_context(context, device, [&] { return real(context, flags, device); });
}

CUresult cuCtxCreate_v3(CUcontext* context, CUexecAffinityParam* params, int count,
                        unsigned int flags, CUdevice device) {
  count_call(kHook_cuCtxCreate_v3);
  auto real = real_cuCtxCreate_v3();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  return create_context(context, device,
                        [&] { return real(context, params, count, flags, device); });
}

CUresult cuCtxCreate_v4(CUcontext* context, CUctxCreateParams* params, unsigned int flags,
                        CUdevice device) {
  count_call(kHook_cuCtxCreate_v4);
  auto real = real_cuCtxCreate_v4();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  return create_context(context, device, [&] { return real(context, params, flags, device); });
}

CUresult cuCtxDestroy_v2(CUcontext context) {
  count_call(kHook_cuCtxDestroy_v2);
  auto real = real_cuCtxDestroy_v2();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  const CUresult result = real(context);
  if (result == CUDA_SUCCESS && enforcing()) drain_context(reinterpret_cast<uint64_t>(context));
  return result;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext* context, CUdevice device) {
  count_call(kHook_cuDevicePrimaryCtxRetain);
  auto real = real_cuDevicePrimaryCtxRetain();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  const int index = context ? device_for_ordinal(device) : kPassThrough;
  if (index == kPassThrough || device < 0 || device >= kMaxOrdinals) return real(context, device);
  Shim& s = shim();
  SpinGuard guard(s.context_lock);
  const bool first = s.primary_refcount[device] == 0;
  const uint64_t overhead = s.options.context_overhead;
  if (first && (index == kBlocked || !reserve_bytes(index, overhead))) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const CUresult result = real(context, device);
  if (result != CUDA_SUCCESS) {
    if (first) release_bytes(index, overhead);
    return result;
  }
  if (first) {
    s.primary_context[device] = reinterpret_cast<uint64_t>(*context);
    s.primary_index[device] = index;
  }
  ++s.primary_refcount[device];
  return result;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device) {
  count_call(kHook_cuDevicePrimaryCtxRelease_v2);
  auto real = real_cuDevicePrimaryCtxRelease_v2();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (!enforcing()) return real(device);
  SpinGuard guard(shim().context_lock);
  const CUresult result = real(device);
  if (result == CUDA_SUCCESS) primary_released(device);
  return result;
}

CUresult cuDevicePrimaryCtxReset_v2(CUdevice device) {
  count_call(kHook_cuDevicePrimaryCtxReset_v2);
  auto real = real_cuDevicePrimaryCtxReset_v2();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (!enforcing()) return real(device);
  SpinGuard guard(shim().context_lock);
  const CUresult result = real(device);
  if (result == CUDA_SUCCESS && device >= 0 && device < kMaxOrdinals &&
      shim().primary_refcount[device] > 0) {
    shim().primary_refcount[device] = 1;
    primary_released(device);
  }
  return result;
}

// ---- virtual views ------------------------------------------------------------------------------

CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  count_call(kHook_cuMemGetInfo_v2);
  auto real = real_cuMemGetInfo_v2();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  const CUresult result = real(free_bytes, total_bytes);  // checks NULL and the context
  if (result != CUDA_SUCCESS) return result;
  const int index = current_device(nullptr, nullptr);
  if (index == kPassThrough) return result;
  const uint64_t limit = index == kBlocked ? 0 : shim().region.limit(index);
  if (limit == tessera::share::kUnlimited) return result;
  shim().region.maybe_reclaim();
  const uint64_t used = index == kBlocked ? 0 : shim().region.usage(index);
  const uint64_t headroom = limit > used ? limit - used : 0;
  if (limit < *total_bytes) *total_bytes = limit;
  if (headroom < *free_bytes) *free_bytes = headroom;
  return result;
}

CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice device) {
  count_call(kHook_cuDeviceTotalMem_v2);
  auto real = real_cuDeviceTotalMem_v2();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  const CUresult result = real(bytes, device);
  if (result != CUDA_SUCCESS) return result;
  const int index = device_for_ordinal(device);
  if (index == kPassThrough) return result;
  const uint64_t limit = index == kBlocked ? 0 : shim().region.limit(index);
  if (limit < *bytes) *bytes = limit;
  return result;
}
