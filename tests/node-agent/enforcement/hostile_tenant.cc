// hostile-tenant: a process of a share that does not cooperate, for the out-of-band checks' end-to-
// end tests. It allocates device memory through the driver (the shim, when preloaded, enforces
// the share's limit on it), then attacks as --attack says, allocates up to --bytes in all, prints
// one line "held <bytes> slowest <ms>" (the longest single allocation call, in milliseconds: a
// call the shim holds while the agent reclaims) and sleeps until it is killed. --chunk sets the
// size of each allocation (default 256 MiB).
//   zero-slot         zeroes its own slot's byte counts in the usage page, allocates on
//   reset-high-water  sets the page's slot_high_water to 0, allocates on
//   none              nothing (run without the shim: an unshimmed process)
//   second-driver     allocates through a second copy of libcuda.so.1 loaded by path (--copy)
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tessera/share_contract.h"
#include "tessera/share_region.h"

namespace share = tessera::share;

namespace {

using CUresult = int;
using CUdevice = int;
using CUcontext = void*;
using CUdeviceptr = unsigned long long;

struct Driver {
  CUresult (*init)(unsigned) = nullptr;
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*retain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*set_current)(CUcontext) = nullptr;
  CUresult (*alloc)(CUdeviceptr*, size_t) = nullptr;

  bool load(const char* path) {
    void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      std::fprintf(stderr, "cannot load %s: %s\n", path, dlerror());
      return false;
    }
    init = reinterpret_cast<decltype(init)>(dlsym(handle, "cuInit"));
    device_get = reinterpret_cast<decltype(device_get)>(dlsym(handle, "cuDeviceGet"));
    retain = reinterpret_cast<decltype(retain)>(dlsym(handle, "cuDevicePrimaryCtxRetain"));
    set_current = reinterpret_cast<decltype(set_current)>(dlsym(handle, "cuCtxSetCurrent"));
    alloc = reinterpret_cast<decltype(alloc)>(dlsym(handle, "cuMemAlloc_v2"));
    if (!init || !device_get || !retain || !set_current || !alloc) return false;
    CUdevice device = 0;
    CUcontext context = nullptr;
    return init(0) == 0 && device_get(&device, 0) == 0 && retain(&context, device) == 0 &&
           set_current(context) == 0;
  }
};

uint64_t g_chunk = 256ull << 20;
double g_slowest_ms = 0;

double now_ms() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<double>(now.tv_sec) * 1e3 + static_cast<double>(now.tv_nsec) / 1e6;
}

// Allocates chunks until `total` bytes are held by this process (as it counts them) or the driver
// refuses.
uint64_t allocate(const Driver& driver, uint64_t held, uint64_t total) {
  while (g_chunk > 0 && held + g_chunk <= total) {
    CUdeviceptr pointer = 0;
    const double start = now_ms();
    const CUresult result = driver.alloc(&pointer, g_chunk);
    if (now_ms() - start > g_slowest_ms) g_slowest_ms = now_ms() - start;
    if (result != 0) break;
    held += g_chunk;
  }
  return held;
}

share::UsagePage* own_page() {
  const char* dir = std::getenv("TESSERA_SHARE_DIR");
  if (!dir) return nullptr;
  share::UsagePage* page = nullptr;
  if (share::map_usage_page((std::string(dir) + "/usage").c_str(), true, page) != 0) return nullptr;
  return page;
}

}  // namespace

int main(int argc, char** argv) {
  std::string attack = "none", copy;
  uint64_t bytes = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--attack") attack = argv[i + 1];
    if (flag == "--bytes") bytes = std::strtoull(argv[i + 1], nullptr, 10);
    if (flag == "--copy") copy = argv[i + 1];
    if (flag == "--chunk") g_chunk = std::strtoull(argv[i + 1], nullptr, 10);
  }
  Driver driver;
  if (!driver.load("libcuda.so.1")) return 2;
  uint64_t held = allocate(driver, 0, bytes);  // stops at the share's limit under the shim
  if (attack == "zero-slot" || attack == "reset-high-water") {
    share::UsagePage* page = own_page();
    if (!page) return 3;
    share::ProcessIdentity me;
    share::read_process_identity("/proc", share::kSelfPid, me);
    for (uint32_t i = 0; i < share::kMaxSlots; ++i) {
      if (attack == "zero-slot" && page->slots[i].owner.load() == me.owner())
        for (auto& b : page->slots[i].bytes) b.store(0);
    }
    if (attack == "reset-high-water") page->slot_high_water.store(0);
    held = allocate(driver, held, bytes);
  } else if (attack == "second-driver") {
    Driver second;
    if (!second.load(copy.c_str())) return 4;
    held = allocate(second, held, bytes);
  }
  std::printf("held %llu slowest %.1f\n", static_cast<unsigned long long>(held), g_slowest_ms);
  std::fflush(stdout);
  for (;;) pause();
}
