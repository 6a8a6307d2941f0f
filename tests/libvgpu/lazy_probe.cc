// lazy_probe: a program that does not link libcuda and loads it late, the way the CUDA runtime
// does: dlopen("libcuda.so.1"), one dlsym(handle, "cuGetProcAddress_v2"), every other entry point
// through that resolver. Run under LD_PRELOAD=libvgpu.so with a memory limit; prints one line per
// step and "lazy ok" when every step behaved.
#include <cuda.h>
#include <dlfcn.h>

#include <cstdio>

namespace {

using Resolver = CUresult (*)(const char*, void**, int, cuuint64_t,
                              CUdriverProcAddressQueryResult*);

template <typename Fn>
Fn resolve(Resolver resolver, const char* name, int version) {
  void* pointer = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  if (resolver(name, &pointer, version, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS) {
    return nullptr;
  }
  return reinterpret_cast<Fn>(pointer);
}

}  // namespace

int main() {
  int failures = 0;
  // Before the driver is loaded a global lookup finds the preloaded shim's exported wrapper
  // (which loads the driver on first call), never a stale pointer.
  void* early = dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  void* shim = dlopen("libvgpu.so", RTLD_NOW | RTLD_NOLOAD);
  if (!cuda || !shim) {
    std::printf("lazy missing libcuda=%p shim=%p\n", cuda, shim);
    return 1;
  }
  auto resolver = reinterpret_cast<Resolver>(dlsym(cuda, "cuGetProcAddress_v2"));
  if (!resolver || reinterpret_cast<void*>(resolver) != dlsym(shim, "cuGetProcAddress_v2")) {
    std::printf("resolver is not the shim's\n");
    return 1;
  }
  // cudart asks for the resolver itself through the resolver, at 11030 and 12000.
  if (resolve<void*>(resolver, "cuGetProcAddress", 12000) != dlsym(shim, "cuGetProcAddress_v2") ||
      resolve<void*>(resolver, "cuGetProcAddress", 11030) != dlsym(shim, "cuGetProcAddress")) {
    std::printf("cuGetProcAddress through the resolver escapes\n");
    ++failures;
  }
  auto init = resolve<CUresult (*)(unsigned)>(resolver, "cuInit", 2000);
  auto retain =
      resolve<CUresult (*)(CUcontext*, CUdevice)>(resolver, "cuDevicePrimaryCtxRetain", 7000);
  auto set_current = resolve<CUresult (*)(CUcontext)>(resolver, "cuCtxSetCurrent", 4000);
  auto alloc = resolve<CUresult (*)(CUdeviceptr*, size_t)>(resolver, "cuMemAlloc", 3020);
  auto info = resolve<CUresult (*)(size_t*, size_t*)>(resolver, "cuMemGetInfo", 3020);
  if (!init || !retain || !set_current || !alloc || !info) {
    std::printf("resolution failed\n");
    return 1;
  }
  if (early != dlsym(shim, "cuMemAlloc_v2")) {
    std::printf("the early lookup is not the shim's wrapper\n");
    ++failures;
  }
  if (reinterpret_cast<void*>(alloc) != dlsym(shim, "cuMemAlloc_v2")) {
    std::printf("cuMemAlloc@3020 is not the shim's cuMemAlloc_v2\n");
    ++failures;
  }
  CUcontext context = nullptr;
  if (init(0) != CUDA_SUCCESS || retain(&context, 0) != CUDA_SUCCESS ||
      set_current(context) != CUDA_SUCCESS) {
    std::printf("no context\n");
    return 1;
  }
  size_t free_bytes = 0;
  size_t total = 0;
  info(&free_bytes, &total);
  std::printf("lazy total %zu free %zu\n", total, free_bytes);
  CUdeviceptr pointer = 0;
  const CUresult fits = alloc(&pointer, free_bytes);
  const CUresult over = alloc(&pointer, 1);
  std::printf("lazy alloc %d %d\n", static_cast<int>(fits), static_cast<int>(over));
  if (fits != CUDA_SUCCESS || over != CUDA_ERROR_OUT_OF_MEMORY) ++failures;
  std::printf(failures == 0 ? "lazy ok\n" : "lazy failed\n");
  return failures == 0 ? 0 : 1;
}
