// Makes N rounds of the driver's hot calls on the simulated libcuda and exits: the program that
// SimProcess.DriverCallsMakeNoSystemCallsPerCall runs under strace to count system calls.
//
//   simgpu_call_probe N      (SIMGPU_STATE etc. from the environment; exit 0 when every call
//                             succeeded)
#include <cuda.h>

#include <cstdio>
#include <cstdlib>

namespace {

constexpr char kEmptyKernelPtx[] =
    ".version 8.0\n.target sm_90\n.address_size 64\n"
    ".visible .entry empty_kernel()\n{\n  ret;\n}\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s rounds\n", argv[0]);
    return 2;
  }
  const int rounds = std::atoi(argv[1]);
  CUdevice device = 0;
  CUcontext context = nullptr;
  CUmodule module = nullptr;
  CUfunction kernel = nullptr;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&device, 0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&context, device) != CUDA_SUCCESS ||
      cuCtxSetCurrent(context) != CUDA_SUCCESS ||
      cuModuleLoadData(&module, kEmptyKernelPtx) != CUDA_SUCCESS ||
      cuModuleGetFunction(&kernel, module, "empty_kernel") != CUDA_SUCCESS) {
    return 1;
  }
  // The caller sets kernels of 1 ns (SIMGPU_KERNEL_US=default=0.001), so a full push buffer
  // (1,024 launches) has run by the time it fills and no launch waits: waiting sleeps, a system
  // call a real driver makes too.
  for (int round = 0; round < rounds; ++round) {
    CUdevice current_device = -1;
    CUcontext current = nullptr;
    CUdeviceptr pointer = 0;
    if (cuCtxGetDevice(&current_device) != CUDA_SUCCESS || current_device != device) return 3;
    if (cuCtxGetCurrent(&current) != CUDA_SUCCESS || current != context) return 4;
    if (cuMemAlloc_v2(&pointer, 1 << 20) != CUDA_SUCCESS) return 5;
    if (cuMemFree_v2(pointer) != CUDA_SUCCESS) return 6;
    if (cuLaunchKernel(kernel, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr) != CUDA_SUCCESS) {
      return 7;
    }
  }
  return 0;
}
