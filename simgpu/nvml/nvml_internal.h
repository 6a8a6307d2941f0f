// Shared by the source files of the simulated libnvidia-ml.so.1: initialisation state, device
// handles, and the checks every device query starts with.
#pragma once

#include <cstdint>

#include "core/simulator.h"
#include "tessera/nvml_abi.h"

// A device handle is the address of one of these; the library owns one per possible device, so
// handles stay valid (and comparable) for the life of the process, as NVML's do.
struct nvmlDevice_st {
  int index;
};

namespace simgpu::nvml {

// The process's simulator when NVML is initialised in this process, else nullptr.
Simulator* initialised_simulator();

nvmlDevice_t handle_for(int index);

// A device handle checked against the simulator: what every device query starts from.
struct Device {
  Simulator* sim = nullptr;
  int index = -1;
  const DeviceConfig& config() const { return sim->device(index); }
};

// NVML_ERROR_UNINITIALIZED before init, NVML_ERROR_INVALID_ARGUMENT for a handle that is not one of
// ours, else NVML_SUCCESS with `out` filled.
nvmlReturn_t resolve(nvmlDevice_t handle, Device& out);

// Copies `value` with its terminator, or returns NVML_ERROR_INSUFFICIENT_SIZE when it does not fit.
nvmlReturn_t copy_string(const char* value, char* out, unsigned int length);

}  // namespace simgpu::nvml
