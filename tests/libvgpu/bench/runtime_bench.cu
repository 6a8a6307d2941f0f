// What libvgpu adds to the CUDA runtime's hot calls (cudaLaunchKernel through <<<>>>, a 1 MiB
// cudaMalloc + cudaFree pair), measured against the simulated driver in one run as vgpu_bench does
// for the driver API: no shim, the shim without limits, the shim with an 8 GiB limit. Built by nvcc
// against the static runtime, as a tenant's program is. Not a test gate: figures depend on the
// machine.
//
//   vgpu_runtime_bench [--benchmark_min_time=...]
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include "bench_support.h"

namespace {

__global__ void empty_kernel() {}

bool set_up() {
  static const bool ready = cudaFree(nullptr) == cudaSuccess;  // creates the primary context
  return ready;
}

void BM_CudaMallocFree(benchmark::State& state) {
  if (!set_up()) state.SkipWithError("no CUDA context");
  for (auto _ : state) {
    void* pointer = nullptr;
    if (cudaMalloc(&pointer, 1 << 20) != cudaSuccess) state.SkipWithError("cudaMalloc failed");
    cudaFree(pointer);
  }
}
BENCHMARK(BM_CudaMallocFree);

void BM_CudaLaunchKernel(benchmark::State& state) {
  if (!set_up()) state.SkipWithError("no CUDA context");
  int64_t launched = 0;
  for (auto _ : state) {
    empty_kernel<<<1, 1>>>();
    if (++launched % 256 == 0) {
      state.PauseTiming();
      cudaDeviceSynchronize();  // keep the simulated push buffer from filling
      state.ResumeTiming();
    }
  }
  if (cudaGetLastError() != cudaSuccess) state.SkipWithError("launch failed");
}
BENCHMARK(BM_CudaLaunchKernel);

}  // namespace

int main(int argc, char** argv) {
  return tessera::bench::bench_main(argc, argv, "default=1", "TESSERA_MEMORY_LIMIT", "8Gi",
                                    "limit");
}
