// The runtime-API compute-burn sample's kernels (burn_runtime.cu, compiled by nvcc into the
// binary as a fat binary the runtime registers) and the launches that need nvcc: the triple
// chevron and the C++ templates of cudaLaunchKernelEx and cudaLaunchCooperativeKernel.
#pragma once

#include <cuda_runtime_api.h>

namespace tessera::samples {

struct BurnLaunch {
  unsigned grid = 0;
  unsigned threads = 0;
  cudaStream_t stream = nullptr;
  float* out = nullptr;
  unsigned iterations = 0;
  unsigned rounds = 1;  // burn_fma_coop only
};

// The kernels as the runtime's function handles (for occupancy queries and attributes).
const void* burn_fma_function();
const void* burn_fma_coop_function();

// burn_fma<<<grid, threads, 0, stream>>>; returns cudaGetLastError().
cudaError_t launch_burn_chevron(const BurnLaunch& launch);
// burn_fma through cudaLaunchKernelEx.
cudaError_t launch_burn_ex(const BurnLaunch& launch);
// burn_fma_coop through cudaLaunchCooperativeKernel.
cudaError_t launch_burn_cooperative(const BurnLaunch& launch);

}  // namespace tessera::samples
