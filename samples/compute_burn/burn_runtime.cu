// Kernels of the runtime-API compute-burn sample, compiled by nvcc (SASS and PTX in a fat binary
// the runtime registers at start-up). C++ kernels, so their names are mangled
// (_Z8burn_fmaPfj); the simulator times a kernel by the identifier in its name, burn_fma as for
// the driver-API sample's extern "C" kernel.
#include <cuda_runtime.h>

#include "burn.cuh"
#include "burn_runtime.h"

// One block of work per block; the grid is many waves deep.
__global__ void burn_fma(float* out, unsigned iterations) {
  const unsigned index = blockIdx.x * blockDim.x + threadIdx.x;
  out[index] = burn(iterations, index);
}

// The cooperative form: one co-resident wave, each block doing `rounds` blocks of work.
__global__ void burn_fma_coop(float* out, unsigned iterations, unsigned rounds) {
  for (unsigned round = 0; round < rounds; ++round) {
    const unsigned index = (round * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x;
    out[index] = burn(iterations, index);
  }
}

namespace tessera::samples {

const void* burn_fma_function() {
  return reinterpret_cast<const void*>(&burn_fma);
}

const void* burn_fma_coop_function() {
  return reinterpret_cast<const void*>(&burn_fma_coop);
}

cudaError_t launch_burn_chevron(const BurnLaunch& launch) {
  burn_fma<<<launch.grid, launch.threads, 0, launch.stream>>>(launch.out, launch.iterations);
  return cudaGetLastError();
}

cudaError_t launch_burn_ex(const BurnLaunch& launch) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(launch.grid);
  config.blockDim = dim3(launch.threads);
  config.stream = launch.stream;
  return cudaLaunchKernelEx(&config, burn_fma, launch.out, launch.iterations);
}

cudaError_t launch_burn_cooperative(const BurnLaunch& launch) {
  float* out = launch.out;
  unsigned iterations = launch.iterations;
  unsigned rounds = launch.rounds;
  void* args[] = {&out, &iterations, &rounds};
  return cudaLaunchCooperativeKernel(burn_fma_coop, dim3(launch.grid), dim3(launch.threads), args,
                                     0, launch.stream);
}

}  // namespace tessera::samples
