// Contexts: created contexts and the per-device primary context, and the per-thread stack.
#include <algorithm>

#include "driver.h"

using namespace simgpu::driver;

namespace simgpu::driver {

CUresult activate_context(Driver& driver, Context* context) {
  const uint64_t overhead = driver.sim->engine_config().context_overhead;
  if (CUresult r = to_result(driver.sim->reserve(context->device, overhead)); r != CUDA_SUCCESS) {
    return r;
  }
  if (!driver.sim->context_created(context->device)) {
    // The MIG device this process was given has been destroyed since cuInit.
    driver.sim->release(context->device, overhead);
    return CUDA_ERROR_DEVICE_UNAVAILABLE;
  }
  context->id = ++driver.last_context_id;
  driver.contexts.insert(context);
  return CUDA_SUCCESS;
}

void destroy_context_objects(Driver& driver, Context* context) {
  for (auto it = driver.allocations.begin(); it != driver.allocations.end();) {
    if (it->second.context == context) {
      if (it->second.pool) {
        it->second.pool->used -= std::min(it->second.pool->used, it->second.charged);
      } else if (it->second.charged) {
        driver.sim->release(it->second.device, it->second.charged);
      }
      it = driver.allocations.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = driver.arrays.begin(); it != driver.arrays.end();) {
    if ((*it)->context == context) {
      driver.sim->release((*it)->device, (*it)->charged);
      delete *it;
      it = driver.arrays.erase(it);
    } else {
      ++it;
    }
  }
  std::erase_if(driver.streams, [&](Stream* s) {
    if (s->context != context) return false;
    delete s;
    return true;
  });
  std::erase_if(driver.events, [&](Event* e) {
    if (e->context != context) return false;
    delete e;
    return true;
  });
  std::erase_if(driver.modules, [&](Module* m) {
    if (m->context != context) return false;
    if (m->library) m->library->modules.erase(context);
    for (auto& f : m->functions) driver.functions.erase(f.get());
    delete m;
    return true;
  });
  context->local_storage.clear();
  driver.sim->release(context->device, driver.sim->engine_config().context_overhead);
  driver.sim->context_destroyed(context->device);
  driver.contexts.erase(context);
  // Remove it from this thread's stack; other threads find it invalid on their next call.
  auto& stack = context_stack();
  std::erase(stack, context);
}

void run_local_storage_callbacks(Driver& driver, Context* context,
                                 std::unique_lock<std::mutex>& lock) {
  // Callbacks may store new entries (or the runtime free what it kept): repeat until none is left.
  while (!context->local_storage.empty()) {
    std::map<void*, LocalStorageEntry> entries;
    entries.swap(context->local_storage);
    lock.unlock();
    for (const auto& [key, entry] : entries) {
      if (entry.destroyed) entry.destroyed(reinterpret_cast<CUcontext>(context), key, entry.value);
    }
    lock.lock();
    if (!driver.contexts.count(context)) return;  // destroyed by another thread meanwhile
  }
}

}  // namespace simgpu::driver

namespace {

CUresult create_context(CUcontext* out, unsigned flags, CUdevice ordinal) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  if (!driver.valid_ordinal(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  auto context = std::make_unique<Context>();
  context->device = driver.device_of_ordinal(ordinal);
  context->flags = flags;
  context->default_stream.context = context.get();
  if (CUresult r = activate_context(driver, context.get()); r != CUDA_SUCCESS) return r;
  Context* raw = context.release();
  context_stack().push_back(raw);
  *out = reinterpret_cast<CUcontext>(raw);
  return CUDA_SUCCESS;
}

Context* valid_context(Driver& driver, CUcontext handle) {
  auto* context = reinterpret_cast<Context*>(handle);
  return driver.contexts.count(context) ? context : nullptr;
}

// A context a thread may make current. The runtime gets a device's primary context from its
// export table without retaining it and makes it current when it first needs it: that is when a
// primary context not yet active becomes active (its overhead charged), held for the runtime.
CUresult context_to_make_current(Driver& driver, CUcontext handle, Context*& out) {
  out = valid_context(driver, handle);
  if (out) return CUDA_SUCCESS;
  for (const auto& primary : driver.primary_contexts) {
    if (primary.get() != reinterpret_cast<Context*>(handle)) continue;
    if (CUresult r = activate_context(driver, primary.get()); r != CUDA_SUCCESS) return r;
    primary->active = true;
    primary->primary_refcount = 1;
    out = primary.get();
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_CONTEXT;
}

}  // namespace

SIMGPU_EXPORT CUresult cuCtxCreate_v2(CUcontext* out, unsigned int flags, CUdevice ordinal) {
  return create_context(out, flags, ordinal);
}

SIMGPU_EXPORT CUresult cuCtxCreate_v3(CUcontext* out, CUexecAffinityParam* params, int count,
                                      unsigned int flags, CUdevice ordinal) {
  if (count < 0 || (count > 0 && !params)) return CUDA_ERROR_INVALID_VALUE;
  return create_context(out, flags, ordinal);
}

SIMGPU_EXPORT CUresult cuCtxCreate_v4(CUcontext* out, CUctxCreateParams* params, unsigned int flags,
                                      CUdevice ordinal) {
  (void)params;  // execution affinity and CIG parameters have no effect on the simulator
  return create_context(out, flags, ordinal);
}

SIMGPU_EXPORT CUresult cuCtxDestroy_v2(CUcontext handle) {
  Driver& driver = Driver::get();
  std::unique_lock<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  Context* context = valid_context(driver, handle);
  if (!context || context->primary) return CUDA_ERROR_INVALID_CONTEXT;
  synchronize_to(driver, context->device, context->default_stream.last_mark, lock);
  run_local_storage_callbacks(driver, context, lock);
  if (!valid_context(driver, handle)) return CUDA_ERROR_INVALID_CONTEXT;
  destroy_context_objects(driver, context);
  delete context;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuCtxGetCurrent(CUcontext* out) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  // No mutex: the answer is this thread's own stack, as in a real driver (a thread-local read).
  Driver& driver = Driver::get();
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  *out = reinterpret_cast<CUcontext>(current_context());
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuCtxSetCurrent(CUcontext handle) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  auto& stack = context_stack();
  if (!handle) {
    if (!stack.empty()) stack.pop_back();
    return CUDA_SUCCESS;
  }
  Context* context = nullptr;
  if (CUresult r = context_to_make_current(driver, handle, context); r != CUDA_SUCCESS) return r;
  if (stack.empty()) {
    stack.push_back(context);
  } else {
    stack.back() = context;
  }
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext handle) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  Context* context = nullptr;
  if (CUresult r = context_to_make_current(driver, handle, context); r != CUDA_SUCCESS) return r;
  context_stack().push_back(context);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext* out) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  auto& stack = context_stack();
  if (stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (out) *out = reinterpret_cast<CUcontext>(stack.back());
  stack.pop_back();
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuCtxGetDevice(CUdevice* out) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Context* context = nullptr;
  if (CUresult r = require_context(driver, context); r != CUDA_SUCCESS) return r;
  *out = driver.ordinal_of_device(context->device);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuCtxGetId(CUcontext handle, unsigned long long* id) {
  if (!id) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  Context* context = handle ? valid_context(driver, handle) : current_context();
  if (!context || !driver.contexts.count(context)) return CUDA_ERROR_INVALID_CONTEXT;
  *id = context->id;
  return CUDA_SUCCESS;
}

// CUDA 13's forms take the context (NULL: the current one).
SIMGPU_EXPORT CUresult cuCtxGetDevice_v2(CUdevice* out, CUcontext handle) {
  if (!handle) return cuCtxGetDevice(out);
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  Context* context = valid_context(driver, handle);
  if (!context) return CUDA_ERROR_INVALID_CONTEXT;
  *out = driver.ordinal_of_device(context->device);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuCtxGetApiVersion(CUcontext handle, unsigned int* version) {
  if (!version) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  if (handle && !valid_context(driver, handle)) return CUDA_ERROR_INVALID_CONTEXT;
  if (!handle && !current_context()) return CUDA_ERROR_INVALID_CONTEXT;
  *version = 3020;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuCtxGetFlags(unsigned int* flags) {
  if (!flags) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  Context* context = current_context();
  if (!context || !driver.contexts.count(context)) return CUDA_ERROR_INVALID_CONTEXT;
  *flags = context->flags;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuCtxSynchronize() {
  Driver& driver = Driver::get();
  std::unique_lock<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  Context* context = current_context();
  if (!context || !driver.contexts.count(context)) return CUDA_ERROR_INVALID_CONTEXT;
  synchronize_to(driver, context->device, context->default_stream.last_mark, lock);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuCtxSynchronize_v2(CUcontext handle) {
  if (!handle) return cuCtxSynchronize();
  Driver& driver = Driver::get();
  std::unique_lock<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  Context* context = valid_context(driver, handle);
  if (!context) return CUDA_ERROR_INVALID_CONTEXT;
  synchronize_to(driver, context->device, context->default_stream.last_mark, lock);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuCtxGetStreamPriorityRange(int* least, int* greatest) {
  if (least) *least = 0;
  if (greatest) *greatest = -5;
  return CUDA_SUCCESS;
}

// Limits belong to the current context. CU_LIMIT_SHMEM_SIZE exists only on CIG contexts, which
// the simulator never makes; CIG_ENABLED can be read, never set.
SIMGPU_EXPORT CUresult cuCtxGetLimit(size_t* value, CUlimit limit) {
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  if (limit < 0 || limit >= CU_LIMIT_MAX || limit == CU_LIMIT_SHMEM_SIZE) {
    return CUDA_ERROR_UNSUPPORTED_LIMIT;
  }
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Context* context = nullptr;
  if (CUresult r = require_context(driver, context); r != CUDA_SUCCESS) return r;
  *value = context->limits[limit];
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuCtxSetLimit(CUlimit limit, size_t value) {
  if (limit < 0 || limit >= CU_LIMIT_MAX || limit == CU_LIMIT_SHMEM_SIZE) {
    return CUDA_ERROR_UNSUPPORTED_LIMIT;
  }
  if (limit == CU_LIMIT_CIG_ENABLED) return CUDA_ERROR_INVALID_VALUE;
  if (limit == CU_LIMIT_MAX_L2_FETCH_GRANULARITY && value > 128) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Context* context = nullptr;
  if (CUresult r = require_context(driver, context); r != CUDA_SUCCESS) return r;
  if (limit == CU_LIMIT_PERSISTING_L2_CACHE_SIZE &&
      value > static_cast<size_t>(kMaxPersistingL2Bytes)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  context->limits[limit] = value;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* out, CUdevice ordinal) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  if (!driver.valid_ordinal(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  Context* primary = driver.primary_contexts[static_cast<size_t>(ordinal)].get();
  if (!primary->active) {
    if (CUresult r = activate_context(driver, primary); r != CUDA_SUCCESS) return r;
    primary->active = true;
  }
  ++primary->primary_refcount;
  *out = reinterpret_cast<CUcontext>(primary);
  return CUDA_SUCCESS;
}

namespace {

void deactivate_primary(Driver& driver, Context* primary) {
  destroy_context_objects(driver, primary);
  primary->active = false;
  primary->primary_refcount = 0;
  primary->default_stream.last_mark = 0;
}

}  // namespace

SIMGPU_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice ordinal) {
  Driver& driver = Driver::get();
  std::unique_lock<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  if (!driver.valid_ordinal(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  Context* primary = driver.primary_contexts[static_cast<size_t>(ordinal)].get();
  if (!primary->active || primary->primary_refcount == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (--primary->primary_refcount == 0) {
    synchronize_to(driver, primary->device, primary->default_stream.last_mark, lock);
    run_local_storage_callbacks(driver, primary, lock);
    // A callback may have retained it again.
    if (primary->primary_refcount == 0 && primary->active) deactivate_primary(driver, primary);
  }
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice ordinal) {
  Driver& driver = Driver::get();
  std::unique_lock<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  if (!driver.valid_ordinal(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  Context* primary = driver.primary_contexts[static_cast<size_t>(ordinal)].get();
  if (primary->active) {
    synchronize_to(driver, primary->device, primary->default_stream.last_mark, lock);
    run_local_storage_callbacks(driver, primary, lock);
    if (primary->active) deactivate_primary(driver, primary);
  }
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice ordinal, unsigned int* flags,
                                                  int* active) {
  if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  if (!driver.valid_ordinal(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  const Context* primary = driver.primary_contexts[static_cast<size_t>(ordinal)].get();
  *flags = primary->flags;
  *active = primary->active ? 1 : 0;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice ordinal, unsigned int flags) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  if (!driver.valid_ordinal(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  driver.primary_contexts[static_cast<size_t>(ordinal)]->flags = flags;
  return CUDA_SUCCESS;
}

// Cache and shared-memory bank preferences: recorded per context (Hopper ignores them, as the
// real driver does, but reports back what was set).
SIMGPU_EXPORT CUresult cuCtxGetCacheConfig(CUfunc_cache* config) {
  if (!config) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Context* context = nullptr;
  if (CUresult r = require_context(driver, context); r != CUDA_SUCCESS) return r;
  *config = context->cache_config;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuCtxSetCacheConfig(CUfunc_cache config) {
  if (config < CU_FUNC_CACHE_PREFER_NONE || config > CU_FUNC_CACHE_PREFER_EQUAL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Context* context = nullptr;
  if (CUresult r = require_context(driver, context); r != CUDA_SUCCESS) return r;
  context->cache_config = config;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuCtxGetSharedMemConfig(CUsharedconfig* config) {
  if (!config) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Context* context = nullptr;
  if (CUresult r = require_context(driver, context); r != CUDA_SUCCESS) return r;
  *config = context->shared_config;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuCtxSetSharedMemConfig(CUsharedconfig config) {
  if (config < CU_SHARED_MEM_CONFIG_DEFAULT_BANK_SIZE ||
      config > CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Context* context = nullptr;
  if (CUresult r = require_context(driver, context); r != CUDA_SUCCESS) return r;
  context->shared_config = config;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuCtxResetPersistingL2Cache() {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Context* context = nullptr;
  return require_context(driver, context);
}

// Peer access: every two distinct simulated devices are peers (an NVLink-connected node); a
// device is never its own peer.
SIMGPU_EXPORT CUresult cuDeviceCanAccessPeer(int* can_access, CUdevice ordinal, CUdevice peer) {
  if (!can_access) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  if (!driver.valid_ordinal(ordinal) || !driver.valid_ordinal(peer)) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  *can_access = ordinal != peer ? 1 : 0;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuDeviceGetP2PAttribute(int* value, CUdevice_P2PAttribute attribute,
                                               CUdevice source, CUdevice destination) {
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  if (!driver.valid_ordinal(source) || !driver.valid_ordinal(destination) ||
      source == destination) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  switch (attribute) {
    case CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK:
      *value = 0;
      return CUDA_SUCCESS;
    case CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED:
    case CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED:
    case CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED:
      *value = 1;
      return CUDA_SUCCESS;
    case CU_DEVICE_P2P_ATTRIBUTE_ONLY_PARTIAL_NATIVE_ATOMIC_SUPPORTED:
      *value = 0;
      return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

namespace {

Context* valid_peer_context(Driver& driver, CUcontext handle) {
  auto* context = reinterpret_cast<Context*>(handle);
  return driver.contexts.count(context) ? context : nullptr;
}

}  // namespace

SIMGPU_EXPORT CUresult cuCtxEnablePeerAccess(CUcontext peer_handle, unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Context* context = nullptr;
  if (CUresult r = require_context(driver, context); r != CUDA_SUCCESS) return r;
  Context* peer = valid_peer_context(driver, peer_handle);
  if (!peer) return CUDA_ERROR_INVALID_CONTEXT;
  if (peer->device == context->device) return CUDA_ERROR_INVALID_DEVICE;
  if (!context->peers.insert(peer).second) return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuCtxDisablePeerAccess(CUcontext peer_handle) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Context* context = nullptr;
  if (CUresult r = require_context(driver, context); r != CUDA_SUCCESS) return r;
  Context* peer = valid_peer_context(driver, peer_handle);
  if (!peer) return CUDA_ERROR_INVALID_CONTEXT;
  if (context->peers.erase(peer) == 0) return CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
  return CUDA_SUCCESS;
}
