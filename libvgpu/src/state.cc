#include "state.h"

#include <sched.h>

#include <cstdio>
#include <cstdlib>

#include "compute/gate.h"
#include "hooks.h"
#include "log.h"

extern "C" int __register_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void),
                                 void* dso_handle);
extern "C" void* __dso_handle;

namespace tessera::vgpu {
namespace {

constinit Shim g_shim;

const char* environment(const char* name) {
  return std::getenv(name);
}

constinit std::atomic<BeforeRefusal> g_before_refusal{nullptr};

void after_fork_in_child() {
  g_shim.region.forget_slot_after_fork();
  g_shim.tracker.reset_after_fork();
  compute::reset_after_fork();
}

__attribute__((constructor)) void on_load() {
  on_fork_child(after_fork_in_child);
}

// No destructor gives the slot back at exit: the driver frees the process's memory only after
// the destructors have run, and until then the share must keep counting it. The slot is cleared
// by the next reclaim once the process is gone.

bool open_region() {
  Shim& s = g_shim;
  if (s.options.share_dir[0]) return s.region.open_share_dir(s.options.share_dir);
  auto get_count = real_cuDeviceGetCount();
  auto get_device = real_cuDeviceGet();
  auto get_uuid = real_cuDeviceGetUuid_v2();
  if (!get_count || !get_device || !get_uuid) return false;
  int count = 0;
  if (get_count(&count) != CUDA_SUCCESS) return false;
  DeviceId devices[share::kMaxDevices] = {};
  int listed = 0;
  for (int ordinal = 0; ordinal < count && listed < static_cast<int>(share::kMaxDevices);
       ++ordinal) {
    CUdevice device = 0;
    CUuuid uuid{};
    if (get_device(&device, ordinal) != CUDA_SUCCESS || get_uuid(&uuid, device) != CUDA_SUCCESS) {
      return false;
    }
    devices[listed].ordinal = ordinal;
    format_uuid(uuid, devices[listed].uuid, sizeof devices[listed].uuid);
    ++listed;
  }
  return s.region.open_standalone(s.options, devices, listed);
}

// 2 once the region is open, 3 if it failed (fail closed), 0 if CUDA is not ready to enumerate.
int ensure_region(bool may_enumerate_cuda) {
  Shim& s = g_shim;
  int state = s.region_state.load(std::memory_order_acquire);
  while (state == 0 || state == 1) {
    if (state == 0) {
      if (!s.options.share_dir[0] && !may_enumerate_cuda) return 0;
      if (s.region_state.compare_exchange_strong(state, 1, std::memory_order_acq_rel)) {
        bool ok = open_region();
        int next = ok ? 2 : (s.options.share_dir[0] ? 3 : 0);
        s.region_state.store(next, std::memory_order_release);
        if (next == 2 && log_enabled(LogLevel::kInfo)) {
          for (int i = 0; i < static_cast<int>(share::kMaxDevices); ++i) {
            const char* uuid = s.region.limits_page()->devices[i].uuid;
            if (!uuid[0]) continue;
            TESSERA_INFO("share device %d %s: memory limit %llu bytes", i, uuid,
                         static_cast<unsigned long long>(s.region.limit(i)));
          }
        }
        return next;
      }
      continue;
    }
    sched_yield();
    state = s.region_state.load(std::memory_order_acquire);
  }
  return state;
}

}  // namespace

Shim& shim() {
  return g_shim;
}

void ensure_initialized() {
  int state = g_shim.init_state.load(std::memory_order_acquire);
  if (__builtin_expect(state == 2, 1)) return;
  if (state == 0 && g_shim.init_state.compare_exchange_strong(state, 1)) {
    read_options(environment, &g_shim.options);
    set_log_level(g_shim.options.log_level);
    for (int i = 0; i < g_shim.options.message_count; ++i) {
      log_message(LogLevel::kError, "%s", g_shim.options.messages[i]);
    }
    g_shim.enforcing = g_shim.options.share_dir[0] != '\0' || g_shim.options.any_limit() ||
                       g_shim.options.any_compute();
    if (log_enabled(LogLevel::kDebug)) print_options(2, &g_shim.options);
    g_shim.init_state.store(2, std::memory_order_release);
    return;
  }
  while (g_shim.init_state.load(std::memory_order_acquire) != 2) sched_yield();
}

void format_uuid(const CUuuid& uuid, char* out, size_t capacity) {
  const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  std::snprintf(out, capacity,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
}

int device_for_ordinal(CUdevice ordinal) {
  if (!enforcing()) return kPassThrough;
  const int region = ensure_region(true);
  if (region == 0) return kPassThrough;  // CUDA not initialised: the driver call fails anyway
  if (region == 3) return kBlocked;
  compute::maybe_start();  // the share's compute meter, once it has a compute setting
  if (ordinal < 0 || ordinal >= kMaxOrdinals) return kBlocked;
  const uint64_t generation = g_shim.region.generation() & 0x00ffffffffffffffull;
  const uint64_t cached = g_shim.ordinal_cache[ordinal].load(std::memory_order_acquire);
  if (cached != 0 && (cached >> 8) == generation) return static_cast<int>(cached & 0xff) - 2;
  auto get_uuid = real_cuDeviceGetUuid_v2();
  CUuuid uuid{};
  if (!get_uuid || get_uuid(&uuid, ordinal) != CUDA_SUCCESS) return kPassThrough;
  char text[share::kUuidBytes];
  format_uuid(uuid, text, sizeof text);
  int index = g_shim.region.find_device(text);
  if (index < 0) {
    TESSERA_WARN("device %d (%s) is not part of the share: allocations on it fail", ordinal, text);
    index = kBlocked;
  }
  g_shim.ordinal_cache[ordinal].store(generation << 8 | static_cast<uint64_t>(index + 2),
                                      std::memory_order_release);
  return index;
}

int device_for_uuid(const char* uuid) {
  if (!enforcing()) return kPassThrough;
  const int region = ensure_region(false);
  if (region == 0) return kPassThrough;
  if (region == 3) return kBlocked;
  const int index = g_shim.region.find_device(uuid);
  if (index >= 0) return index;
  return g_shim.options.share_dir[0] ? kBlocked : kPassThrough;
}

int current_device(CUdevice* ordinal, CUcontext* context) {
  if (!enforcing()) return kPassThrough;
  auto get_device = real_cuCtxGetDevice();
  auto get_current = real_cuCtxGetCurrent();
  if (!get_device || !get_current) return kPassThrough;
  CUdevice device = 0;
  if (get_device(&device) != CUDA_SUCCESS) return kPassThrough;
  CUcontext current = nullptr;
  if (get_current(&current) != CUDA_SUCCESS) return kPassThrough;
  if (ordinal) *ordinal = device;
  if (context) *context = current;
  return device_for_ordinal(device);
}

bool reserve_bytes(int index, uint64_t bytes) {
  g_shim.region.maybe_reclaim();
  if (g_shim.region.reserve(index, bytes)) return true;
  if (BeforeRefusal settle = g_before_refusal.load(std::memory_order_acquire)) settle();
  if (g_shim.region.reserve(index, bytes)) return true;
  TESSERA_DEBUG("reservation of %llu bytes on share device %d refused (limit %llu, in use %llu)",
                static_cast<unsigned long long>(bytes), index,
                static_cast<unsigned long long>(g_shim.region.limit(index)),
                static_cast<unsigned long long>(g_shim.region.usage(index)));
  // For the agent's metrics (tessera_share_allocations_denied_total).
  if (share::ProcessSlot* slot = g_shim.region.own_slot())
    slot->allocations_denied.fetch_add(1, std::memory_order_relaxed);
  return false;
}

void set_before_refusal(BeforeRefusal callback) {
  g_before_refusal.store(callback, std::memory_order_release);
}

void on_fork_child(void (*reset)()) {
  __register_atfork(nullptr, nullptr, reset, &__dso_handle);
}

void release_bytes(int index, uint64_t bytes) {
  g_shim.region.release(index, bytes);
}

bool charged_size(uint64_t requested, uint64_t* charged) {
  const uint64_t align = requested >= (1ull << 20) ? (2ull << 20) : 512;
  if (requested > ~0ull - align) return false;
  *charged = (requested + align - 1) / align * align;
  return true;
}

SpinGuard::SpinGuard(std::atomic<bool>& flag) : flag_(flag) {
  while (flag_.exchange(true, std::memory_order_acquire)) sched_yield();
}
SpinGuard::~SpinGuard() {
  flag_.store(false, std::memory_order_release);
}

}  // namespace tessera::vgpu
