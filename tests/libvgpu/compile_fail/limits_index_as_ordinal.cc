// Must NOT compile (ctest libvgpu.index_spaces_compile_fail): a limits-page index passed where a
// CUDA ordinal is meant. With -DTESSERA_FIXTURE_CONTROL the same call takes a CudaOrdinal and
// compiles, so the failure is the index spaces' and nothing else's.
#include "state.h"

tessera::vgpu::GpuIndex misuse() {
#ifdef TESSERA_FIXTURE_CONTROL
  return tessera::vgpu::device_for_ordinal(tessera::vgpu::CudaOrdinal{0});
#else
  return tessera::vgpu::device_for_ordinal(tessera::vgpu::LimitsIndex{0});
#endif
}
