// Kernels of the compute-burn sample, compiled to PTX at build time and embedded in the binary (a
// real driver JITs the PTX; the simulated one reads the .entry names). Throughput-bound on
// purpose: many waves of blocks, each thread running independent FMA chains, so a kernel's
// duration is proportional to the SM time it gets. A one-wave kernel with a dependent chain is
// latency-bound and would not slow down when a quota takes SMs away (cuda-facts.md).

#include "burn.cuh"

// One block of work per block; the grid is many waves deep.
extern "C" __global__ void burn_fma(float* out, unsigned iterations) {
  const unsigned index = blockIdx.x * blockDim.x + threadIdx.x;
  out[index] = burn(iterations, index);
}

// The cooperative form: the grid must be co-resident, so it is one wave and each block does
// `rounds` blocks of work. One kernel then does the same work as a burn_fma kernel of
// gridDim.x * rounds blocks. (A simulator that times kernels by name and grid size needs its own
// wave time for this name: `rounds` times that of burn_fma.)
extern "C" __global__ void burn_fma_coop(float* out, unsigned iterations, unsigned rounds) {
  for (unsigned round = 0; round < rounds; ++round) {
    const unsigned index = (round * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x;
    out[index] = burn(iterations, index);
  }
}
