// Contexts: each one the program creates, and each device's primary context while the program
// retains it, is charged the context cost (state.h context_charge: inside a share what the agent
// measured, else the default; without a share TESSERA_CONTEXT_OVERHEAD), kept current for the live
// contexts when that cost changes; destroying a context gives back its charge and everything it
// owned (the driver frees that with the context).
#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "accounting.h"
#include "hooks.h"
#include "pools.h"
#include "state.h"

using namespace tessera::vgpu;

namespace {

constexpr size_t kDrainBatch = 64;

// Primary contexts retained through the shim, per CUDA ordinal (under g_context_lock).
constinit SpinLock g_context_lock{LockRank::kContexts};
int g_primary_refcount[kMaxOrdinals] TESSERA_GUARDED_BY(g_context_lock) = {};
uint64_t g_primary_context[kMaxOrdinals] TESSERA_GUARDED_BY(g_context_lock) = {};
GpuIndex g_primary_index[kMaxOrdinals] TESSERA_GUARDED_BY(g_context_lock) = {};

// Gives back everything a destroyed context owned (the driver frees it with the context).
void drain_context(uint64_t context) {
  Record records[kDrainBatch];
  size_t taken = 0;
  do {
    taken = shim().tracker.take_context(context, records, kDrainBatch);
    for (size_t i = 0; i < taken; ++i) {
      if (records[i].kind == HandleKind::kContext) {
        release_context(records[i].gpu());  // its charge, at what it is now
      } else if (records[i].kind == HandleKind::kPoolPointer) {
        pool_pointer_freed(records[i]);  // charged through its pool
      } else {
        release_bytes(records[i].gpu(), records[i].bytes);
      }
    }
  } while (taken == kDrainBatch);
}

}  // namespace

// Refuses a process given two MPS shares (state.cc says why on stderr): one MPS client talks to
// one control daemon, so it could not be held to both shares' limits.
CUresult cuInit(unsigned int flags) {
  count_call(kHook_cuInit);
  auto real = real_cuInit();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (shares_refused()) return CUDA_ERROR_MPS_CONNECTION_FAILED;
  return real(flags);
}

namespace {

template <typename Call>
CUresult create_context(CUcontext* context, CUdevice device, Call call) {
  const GpuIndex index = context ? device_for_ordinal(CudaOrdinal{device}) : kPassThrough;
  if (index == kPassThrough) return call();
  if (index == kBlocked || !charge_context(index)) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult result = call();
  if (result != CUDA_SUCCESS) {
    release_context(index);
    return result;
  }
  contexts_changed();  // the handle may be a destroyed context's, on another device
  const uint64_t handle = reinterpret_cast<uint64_t>(*context);
  // The record holds no bytes: the context's charge is the ledger's (release_context).
  track(HandleKind::kContext, handle, index, 0, handle);
  return result;
}

void primary_released(CUdevice device) TESSERA_REQUIRES(g_context_lock) {
  if (device < 0 || device >= kMaxOrdinals || g_primary_refcount[device] == 0) return;
  if (--g_primary_refcount[device] > 0) return;
  release_context(g_primary_index[device]);
  drain_context(g_primary_context[device]);
}

// In a forked child: the parent's retains are not this process's, and another thread of the
// parent may have held the lock at fork time. The child has one thread: no lock is needed.
void reset_after_fork() TESSERA_NO_THREAD_SAFETY_ANALYSIS {
  for (int i = 0; i < kMaxOrdinals; ++i) g_primary_refcount[i] = 0;
  g_context_lock.reset_after_fork();
}

__attribute__((constructor)) void register_fork_reset() {
  on_fork_child(reset_after_fork);
}

}  // namespace

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
  if (result == CUDA_SUCCESS) contexts_changed();
  if (result == CUDA_SUCCESS && enforcing()) drain_context(reinterpret_cast<uint64_t>(context));
  return result;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext* context, CUdevice device) {
  count_call(kHook_cuDevicePrimaryCtxRetain);
  auto real = real_cuDevicePrimaryCtxRetain();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  const GpuIndex index = context ? device_for_ordinal(CudaOrdinal{device}) : kPassThrough;
  if (index == kPassThrough || device < 0 || device >= kMaxOrdinals) return real(context, device);
  SpinGuard guard(g_context_lock);
  const bool first = g_primary_refcount[device] == 0;
  if (first && (index == kBlocked || !charge_context(index))) return CUDA_ERROR_OUT_OF_MEMORY;
  if (!first) update_context_charge(index);  // a retain is a context creation for the cost
  const CUresult result = real(context, device);
  if (result != CUDA_SUCCESS) {
    if (first) release_context(index);
    return result;
  }
  if (first) {
    g_primary_context[device] = reinterpret_cast<uint64_t>(*context);
    g_primary_index[device] = index;
    contexts_changed();
  }
  ++g_primary_refcount[device];
  return result;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device) {
  count_call(kHook_cuDevicePrimaryCtxRelease_v2);
  auto real = real_cuDevicePrimaryCtxRelease_v2();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (!enforcing()) return real(device);
  SpinGuard guard(g_context_lock);
  const CUresult result = real(device);
  if (result == CUDA_SUCCESS) contexts_changed();
  if (result == CUDA_SUCCESS) primary_released(device);
  return result;
}

CUresult cuDevicePrimaryCtxReset_v2(CUdevice device) {
  count_call(kHook_cuDevicePrimaryCtxReset_v2);
  auto real = real_cuDevicePrimaryCtxReset_v2();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (!enforcing()) return real(device);
  SpinGuard guard(g_context_lock);
  const CUresult result = real(device);
  if (result == CUDA_SUCCESS) contexts_changed();
  if (result == CUDA_SUCCESS && device >= 0 && device < kMaxOrdinals &&
      g_primary_refcount[device] > 0) {
    g_primary_refcount[device] = 1;
    primary_released(device);
  }
  return result;
}
