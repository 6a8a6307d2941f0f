// What libvgpu adds to the hot calls, measured against the simulated driver in one run: the
// program re-executes itself three times (no shim; shim without limits; shim with a limit and a
// share region) with Google Benchmark, then prints each benchmark's time and the time the shim
// added. Not a test gate: figures depend on the machine.
//
//   vgpu_bench [--benchmark_min_time=...]      (needs VGPU_BENCH_SHIM and VGPU_BENCH_SIMLIB,
//                                                set by the build)
//
// VGPU_BENCH_ITERATIONS=N runs every benchmark exactly N times instead (a fixed amount of work,
// for a profiler).
#include <benchmark/benchmark.h>
#include <cuda.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "bench_support.h"

namespace {

CUcontext g_context = nullptr;
CUfunction g_kernel = nullptr;

bool set_up() {
  return g_context || tessera::bench::load_empty_kernel(&g_context, &g_kernel);
}

void BM_MemAllocFree(benchmark::State& state) {
  if (!set_up()) state.SkipWithError("no CUDA context");
  for (auto _ : state) {
    CUdeviceptr pointer = 0;
    if (cuMemAlloc_v2(&pointer, 1 << 20) != CUDA_SUCCESS) state.SkipWithError("alloc failed");
    cuMemFree_v2(pointer);
  }
}

void BM_LaunchKernel(benchmark::State& state) {
  if (!set_up()) state.SkipWithError("no CUDA context");
  int64_t launched = 0;
  for (auto _ : state) {
    cuLaunchKernel(g_kernel, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
    if (++launched % 256 == 0) {
      state.PauseTiming();
      cuCtxSynchronize();  // keep the simulated push buffer from filling
      state.ResumeTiming();
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const char* iterations = std::getenv("VGPU_BENCH_ITERATIONS");
  const long fixed = iterations ? std::atol(iterations) : 0;
  using Function = void (*)(benchmark::State&);
  const std::pair<const char*, Function> benchmarks[] = {{"BM_MemAllocFree", BM_MemAllocFree},
                                                         {"BM_LaunchKernel", BM_LaunchKernel}};
  for (const auto& [name, function] : benchmarks) {
    auto* benchmark = benchmark::RegisterBenchmark(name, function);
    if (fixed > 0) benchmark->Iterations(fixed);
  }
  return tessera::bench::bench_main(argc, argv, "default=1", "TESSERA_MEMORY_LIMIT", "8Gi",
                                    "limit");
}
