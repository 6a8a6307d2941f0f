// What the shim benchmarks share. They compare one program with and without libvgpu in the same
// run: the parent re-executes itself as children that differ only in LD_PRELOAD and one limit
// variable, and each child prints "benchmark-name nanoseconds" lines, which the parent collects.
// Each child launches an empty kernel on the primary context of device 0.
#pragma once

#include <cuda.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

namespace tessera::bench {

inline constexpr char kChildVariable[] = "VGPU_BENCH_CHILD";

inline constexpr char kEmptyKernelPtx[] =
    ".version 8.0\n.target sm_90\n.address_size 64\n"
    ".visible .entry empty_kernel()\n{\n  ret;\n}\n";

// Makes device 0's primary context current and loads the empty kernel; false if CUDA failed.
inline bool load_empty_kernel(CUcontext* context, CUfunction* kernel) {
  CUdevice device = 0;
  CUmodule module = nullptr;
  return cuInit(0) == CUDA_SUCCESS && cuDeviceGet(&device, 0) == CUDA_SUCCESS &&
         cuDevicePrimaryCtxRetain(context, device) == CUDA_SUCCESS &&
         cuCtxSetCurrent(*context) == CUDA_SUCCESS &&
         cuModuleLoadData(&module, kEmptyKernelPtx) == CUDA_SUCCESS &&
         cuModuleGetFunction(kernel, module, "empty_kernel") == CUDA_SUCCESS;
}

inline bool is_bench_child() {
  return std::getenv(kChildVariable) != nullptr;
}

// Runs this program again with LD_PRELOAD=`preload` (unset when null) and `limit_variable`=
// `limit_value` (unset when the value is null); returns the child's lines as name -> ns.
inline std::map<std::string, double> run_bench_child(char** argv, const char* preload,
                                                     const char* limit_variable,
                                                     const char* limit_value) {
  int fds[2];
  if (pipe(fds) != 0) std::abort();
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    setenv(kChildVariable, "1", 1);
    if (preload) {
      setenv("LD_PRELOAD", preload, 1);
    } else {
      unsetenv("LD_PRELOAD");
    }
    if (limit_value) {
      setenv(limit_variable, limit_value, 1);
    } else {
      unsetenv(limit_variable);
    }
    execv("/proc/self/exe", argv);
    _exit(127);
  }
  close(fds[1]);
  std::map<std::string, double> results;
  FILE* input = fdopen(fds[0], "r");
  char name[256];
  double ns = 0;
  while (std::fscanf(input, "%255s %lf", name, &ns) == 2) results[name] = ns;
  std::fclose(input);
  waitpid(pid, nullptr, 0);
  return results;
}

}  // namespace tessera::bench
