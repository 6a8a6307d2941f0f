// The entry table generated from hooks.def (hooks.h): each entry's name and wrapper, and the real
// entry points, resolved from the driver libraries on first use.
#include "hooks.h"

#include <unistd.h>

#include <cstdlib>

#include "glibc_compat.h"

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
    [[maybe_unused]] ssize_t ignored = write(2, kMessage, sizeof kMessage - 1);
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
