// Reaches the CUDA driver the way real programs do. Nothing is linked at build time: the samples
// dlopen("libcuda.so.1"), so LD_LIBRARY_PATH decides whether the real driver or the simulated one
// answers. Entry points come either through cuGetProcAddress_v2 (what cudart does for every
// call) or through plain dlsym of the versioned symbol (what PyTorch's lazy driver stubs do), so
// shim tests can exercise both paths with the same binary.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "resolve.h"

namespace tessera::samples {

// One driver entry point. One the driver did not provide stays null and answers
// CUDA_ERROR_NOT_FOUND, so a sample reports which call it could not make instead of crashing.
template <typename Fn>
struct EntryPoint;

template <typename... Args>
struct EntryPoint<CUresult (*)(Args...)> {
  CUresult (*fn)(Args...) = nullptr;

  CUresult operator()(Args... args) const {
    return fn != nullptr ? fn(args...) : CUDA_ERROR_NOT_FOUND;
  }
};

// Every entry point the samples use: the symbol (which fixes the ABI), the base name and the CUDA
// version at which that ABI appeared, which is how cuGetProcAddress is asked for it.
#define TESSERA_DRIVER_ENTRY_POINTS(X)                                                        \
  X(cuInit, cuInit, 2000)                                                                     \
  X(cuDriverGetVersion, cuDriverGetVersion, 2020)                                             \
  X(cuGetErrorName, cuGetErrorName, 6000)                                                     \
  X(cuDeviceGet, cuDeviceGet, 2000)                                                           \
  X(cuDeviceGetCount, cuDeviceGetCount, 2000)                                                 \
  X(cuDeviceGetName, cuDeviceGetName, 2000)                                                   \
  X(cuDeviceGetAttribute, cuDeviceGetAttribute, 2000)                                         \
  X(cuDeviceTotalMem_v2, cuDeviceTotalMem, 3020)                                              \
  X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, 7000)                                 \
  X(cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxRelease, 11000)                           \
  X(cuCtxSetCurrent, cuCtxSetCurrent, 4000)                                                   \
  X(cuCtxSynchronize, cuCtxSynchronize, 2000)                                                 \
  X(cuMemGetInfo_v2, cuMemGetInfo, 3020)                                                      \
  X(cuMemAlloc_v2, cuMemAlloc, 3020)                                                          \
  X(cuMemFree_v2, cuMemFree, 3020)                                                            \
  X(cuMemAllocPitch_v2, cuMemAllocPitch, 3020)                                                \
  X(cuMemAllocManaged, cuMemAllocManaged, 6000)                                               \
  X(cuMemAllocAsync, cuMemAllocAsync, 11020)                                                  \
  X(cuMemFreeAsync, cuMemFreeAsync, 11020)                                                    \
  X(cuDeviceGetDefaultMemPool, cuDeviceGetDefaultMemPool, 11020)                              \
  X(cuMemPoolSetAttribute, cuMemPoolSetAttribute, 11020)                                      \
  X(cuMemPoolCreate, cuMemPoolCreate, 11020)                                                  \
  X(cuMemPoolDestroy, cuMemPoolDestroy, 11020)                                                \
  X(cuMemPoolTrimTo, cuMemPoolTrimTo, 11020)                                                  \
  X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, 11020)                                  \
  X(cuMemGetAllocationGranularity, cuMemGetAllocationGranularity, 10020)                      \
  X(cuMemCreate, cuMemCreate, 10020)                                                          \
  X(cuMemRelease, cuMemRelease, 10020)                                                        \
  X(cuMemAddressReserve, cuMemAddressReserve, 10020)                                          \
  X(cuMemAddressFree, cuMemAddressFree, 10020)                                                \
  X(cuMemMap, cuMemMap, 10020)                                                                \
  X(cuMemUnmap, cuMemUnmap, 10020)                                                            \
  X(cuMemSetAccess, cuMemSetAccess, 10020)                                                    \
  X(cuArray3DCreate_v2, cuArray3DCreate, 3020)                                                \
  X(cuArrayDestroy, cuArrayDestroy, 2000)                                                     \
  X(cuStreamCreate, cuStreamCreate, 2000)                                                     \
  X(cuStreamDestroy_v2, cuStreamDestroy, 4000)                                                \
  X(cuStreamSynchronize, cuStreamSynchronize, 2000)                                           \
  X(cuModuleLoadData, cuModuleLoadData, 2000)                                                 \
  X(cuModuleGetFunction, cuModuleGetFunction, 2000)                                           \
  X(cuModuleUnload, cuModuleUnload, 2000)                                                     \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor, cuOccupancyMaxActiveBlocksPerMultiprocessor, \
    6050)                                                                                     \
  X(cuLaunchKernel, cuLaunchKernel, 4000)                                                     \
  X(cuLaunchKernelEx, cuLaunchKernelEx, 11060)                                                \
  X(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel, 9000)                               \
  X(cuEventCreate, cuEventCreate, 2000)                                                       \
  X(cuEventRecord, cuEventRecord, 2000)                                                       \
  X(cuEventSynchronize, cuEventSynchronize, 2000)                                             \
  X(cuEventElapsedTime_v2, cuEventElapsedTime, 12080)                                         \
  X(cuEventDestroy_v2, cuEventDestroy, 4000)                                                  \
  X(cuGraphCreate, cuGraphCreate, 10000)                                                      \
  X(cuGraphAddKernelNode_v2, cuGraphAddKernelNode, 12000)                                     \
  X(cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags, 11040)                          \
  X(cuGraphLaunch, cuGraphLaunch, 10000)                                                      \
  X(cuGraphExecDestroy, cuGraphExecDestroy, 10000)                                            \
  X(cuGraphDestroy, cuGraphDestroy, 10000)

// Entry points whose implicit stream 0 is the calling thread's own default stream (nvcc
// --default-stream per-thread): asked for with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM.
#define TESSERA_DRIVER_PER_THREAD_ENTRY_POINTS(X) \
  X(cuLaunchKernel_ptsz, cuLaunchKernel, 7000)    \
  X(cuEventRecord_ptsz, cuEventRecord, 7000)

struct DriverApi {
#define TESSERA_DECLARE_ENTRY(symbol, base, version) EntryPoint<PFN_##base##_v##version> symbol;
#define TESSERA_DECLARE_PTSZ_ENTRY(symbol, base, version) \
  EntryPoint<PFN_##base##_v##version##_ptsz> symbol;
  TESSERA_DRIVER_ENTRY_POINTS(TESSERA_DECLARE_ENTRY)
  TESSERA_DRIVER_PER_THREAD_ENTRY_POINTS(TESSERA_DECLARE_PTSZ_ENTRY)
#undef TESSERA_DECLARE_ENTRY
#undef TESSERA_DECLARE_PTSZ_ENTRY
};

// A failed driver call: the message names the call and the CUresult (e.g. CUDA_ERROR_...).
class CudaError : public std::runtime_error {
 public:
  CudaError(CUresult result, const std::string& message)
      : std::runtime_error(message), result_(result) {}
  CUresult result() const { return result_; }

 private:
  CUresult result_;
};

// The loaded driver, initialised (cuInit done). Lives for the whole program: the library is never
// unloaded, since the driver's own threads may still run at exit.
class Driver {
 public:
  // Throws std::runtime_error when libcuda.so.1 or its resolver cannot be found.
  static Driver load(Resolve resolve);

  const DriverApi& api() const { return api_; }
  Resolve resolve() const { return resolve_; }
  int version() const { return version_; }

  // "CUDA_ERROR_OUT_OF_MEMORY", or the number when the driver does not know the code.
  std::string error_name(CUresult result) const;
  // Throws CudaError naming `call` unless `result` is CUDA_SUCCESS.
  void check(CUresult result, std::string_view call) const;

 private:
  Driver() = default;
  void* lookup(const char* symbol, const char* base, int version, cuuint64_t flags);

  void* library_ = nullptr;
  PFN_cuGetProcAddress_v12000 get_proc_address_ = nullptr;
  Resolve resolve_ = Resolve::kProcAddress;
  int version_ = 0;
  DriverApi api_;
  std::vector<std::string> missing_;  // entry points the driver did not provide
};

// Checks a driver call, naming it in the error: CU_CHECK(driver, cu.cuMemAlloc_v2(&ptr, size)).
#define CU_CHECK(driver, call) (driver).check((call), #call)

// What the samples report about the device they ran on.
struct DeviceInfo {
  int ordinal = 0;
  CUdevice device = 0;
  std::string name;
  int sm_count = 0;
  uint64_t total_memory = 0;
};

// The device's primary context (what cudart uses), retained and made current for this thread
// while the object lives.
class PrimaryContext {
 public:
  PrimaryContext(const Driver& driver, int ordinal);
  ~PrimaryContext();
  PrimaryContext(const PrimaryContext&) = delete;
  PrimaryContext& operator=(const PrimaryContext&) = delete;

  const DeviceInfo& device() const { return info_; }
  CUcontext context() const { return context_; }

 private:
  const Driver& driver_;
  DeviceInfo info_;
  CUcontext context_ = nullptr;
};

}  // namespace tessera::samples
