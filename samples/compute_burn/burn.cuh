// The work of the compute-burn kernels, shared by the driver-API sample's PTX (burn_kernels.cu)
// and the runtime-API sample's kernels (burn_runtime.cu).
#pragma once

__device__ inline float burn(unsigned iterations, unsigned seed) {
  // Four independent chains keep every FP32 pipe busy; no fast-math, so none can be folded.
  float a = seed * 1e-7f;
  float b = a + 0.25f;
  float c = a + 0.5f;
  float d = a + 0.75f;
  const float scale = 0.999999f;
  const float offset = 1e-6f;
#pragma unroll 16
  for (unsigned i = 0; i < iterations; ++i) {
    a = fmaf(a, scale, offset);
    b = fmaf(b, scale, offset);
    c = fmaf(c, scale, offset);
    d = fmaf(d, scale, offset);
  }
  return a + b + c + d;
}
