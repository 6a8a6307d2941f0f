// The entry table generated from hooks.def (hooks.h): each entry's name and wrapper, and the real
// entry points, resolved from the driver libraries on first use.
#include "hooks.h"

#include <pthread.h>

#include <cstdlib>

#include "glibc_compat.h"
#include "os/system_calls.h"

namespace tessera::vgpu {

const EntryInfo kEntries[kEntryCount] = {
#define TESSERA_HOOK(lib, kind, symbol, ret, params, args) \
  {#symbol, TESSERA_LIBRARY_##lib, true, reinterpret_cast<void*>(&::symbol)},
#define TESSERA_REAL(lib, symbol, ret, params) {#symbol, TESSERA_LIBRARY_##lib, false, nullptr},
#define TESSERA_LIBRARY_CUDA Library::kCuda
#define TESSERA_LIBRARY_NVML Library::kNvml
#include "hooks.def"
};

constinit EntrySlot g_entries[kEntryCount];

__thread CallCounts* t_call_counts __attribute__((tls_model("initial-exec"))) = nullptr;

namespace {

constinit std::atomic<CallCounts*> g_call_counts{nullptr};  // every block, newest first
constinit std::atomic<int> g_counts_key_state{0};           // 0 none, 1 creating, 2 made, 3 failed
pthread_key_t g_counts_key;

// At thread exit (a pthread key's destructor: C++ thread_local destructors would need
// __cxa_thread_atexit_impl, GLIBC_2.18): the block goes back for the next thread. A wrapper called
// by a later destructor of the same thread takes one again (and the key gives it back again).
void give_back_counts(void* block) {
  auto* counts = static_cast<CallCounts*>(block);
  if (t_call_counts == counts) t_call_counts = nullptr;
  counts->owned.store(false, std::memory_order_release);
}

bool counts_key_ready() {
  int state = g_counts_key_state.load(std::memory_order_acquire);
  while (state != 2 && state != 3) {
    if (state == 0 && g_counts_key_state.compare_exchange_strong(state, 1)) {
      state = pthread_key_create(&g_counts_key, give_back_counts) == 0 ? 2 : 3;
      g_counts_key_state.store(state, std::memory_order_release);
      break;
    }
    state = g_counts_key_state.load(std::memory_order_acquire);
  }
  return state == 2;
}

CallCounts* take_counts() {
  // Without the key a block could never be given back: count in g_entries instead.
  if (!counts_key_ready()) return nullptr;
  for (CallCounts* counts = g_call_counts.load(std::memory_order_acquire); counts;
       counts = counts->next.load(std::memory_order_relaxed)) {
    bool owned = false;
    if (!counts->owned.load(std::memory_order_relaxed) &&
        counts->owned.compare_exchange_strong(owned, true, std::memory_order_acquire)) {
      return counts;
    }
  }
  void* memory = os::map_private_anonymous(sizeof(CallCounts));
  if (!memory) return nullptr;
  auto* counts = static_cast<CallCounts*>(memory);  // zero-filled: no calls yet
  counts->owned.store(true, std::memory_order_relaxed);
  CallCounts* head = g_call_counts.load(std::memory_order_relaxed);
  do {
    counts->next.store(head, std::memory_order_relaxed);
  } while (!g_call_counts.compare_exchange_weak(head, counts, std::memory_order_release,
                                                std::memory_order_relaxed));
  return counts;
}

}  // namespace

void count_first_call(HookId id) {
  CallCounts* counts = take_counts();
  if (counts && pthread_setspecific(g_counts_key, counts) != 0) {
    counts->owned.store(false, std::memory_order_release);
    counts = nullptr;
  }
  if (!counts) {
    g_entries[id].calls.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  t_call_counts = counts;
  count_in(counts, id);
}

uint64_t calls_of(HookId id) {
  uint64_t sum = g_entries[id].calls.load(std::memory_order_relaxed);
  for (CallCounts* counts = g_call_counts.load(std::memory_order_acquire); counts;
       counts = counts->next.load(std::memory_order_relaxed)) {
    sum += counts->calls[id].load(std::memory_order_relaxed);
  }
  return sum;
}

void call_counts_after_fork() {
  for (CallCounts* counts = g_call_counts.load(std::memory_order_relaxed); counts;
       counts = counts->next.load(std::memory_order_relaxed)) {
    if (counts != t_call_counts) counts->owned.store(false, std::memory_order_relaxed);
  }
}

namespace {

constexpr const char* kLibraryNames[] = {"libcuda.so.1", "libnvidia-ml.so.1"};
constinit std::atomic<void*> g_libraries[2] = {};

void* library_handle(Library library, bool load) {
  const int which = static_cast<int>(library);
  void* handle = g_libraries[which].load(std::memory_order_acquire);
  if (handle) return handle;
  handle = dlopen(kLibraryNames[which], RTLD_NOW | RTLD_NOLOAD);
  if (!handle && load) handle = dlopen(kLibraryNames[which], RTLD_NOW);
  if (handle) g_libraries[which].store(handle, std::memory_order_release);
  return handle;
}

}  // namespace

// Set before any pass-through; read by the dlsym trampoline.
extern "C" {
__attribute__((visibility("hidden"))) DlsymFn tessera_real_dlsym = nullptr;
}

DlsymFn real_dlsym() {
  DlsymFn found = __atomic_load_n(&tessera_real_dlsym, __ATOMIC_ACQUIRE);
  if (found) return found;
  // dlvsym itself is not intercepted, so this cannot recurse. GLIBC_2.34 is where glibc >= 2.34
  // defines dlsym; older ones only have GLIBC_2.2.5 (x86_64) / GLIBC_2.17 (aarch64).
  found = reinterpret_cast<DlsymFn>(dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34"));
#if defined(__x86_64__)
  if (!found) found = reinterpret_cast<DlsymFn>(dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5"));
#elif defined(__aarch64__)
  if (!found) found = reinterpret_cast<DlsymFn>(dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.17"));
#endif
  if (!found) {
    static constexpr char kMessage[] = "tessera: fatal: the real dlsym cannot be found\n";
    [[maybe_unused]] ssize_t ignored = os::write(2, kMessage, sizeof kMessage - 1);
    std::abort();
  }
  __atomic_store_n(&tessera_real_dlsym, found, __ATOMIC_RELEASE);
  return found;
}

void* loaded_library(Library library) {
  return library_handle(library, false);
}

void* resolve_real_slow(HookId id) {
  void* handle = library_handle(kEntries[id].library, true);
  if (!handle) return nullptr;
  void* pointer = real_dlsym()(handle, kEntries[id].name);
  if (pointer) g_entries[id].real.store(pointer, std::memory_order_release);
  return pointer;
}

int find_hook(const char* name) {
  if (!name) return -1;
  for (int i = 0; i < kEntryCount; ++i) {
    if (kEntries[i].hooked && same_name(kEntries[i].name, name)) return i;
  }
  return -1;
}

}  // namespace tessera::vgpu
