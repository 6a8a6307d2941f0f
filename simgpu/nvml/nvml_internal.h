// Shared by the source files of the simulated libnvidia-ml.so.1: initialisation state, device
// handles, and the checks every device query starts with.
#pragma once

#include <cstdint>
#include <string>

#include "simulator.h"
#include "tessera/nvml_abi.h"

// A device handle is the address of one of these; the library owns one per possible device and
// one per possible MIG device (GPU, GI ID, CI ID), so handles stay valid (and comparable) for the
// life of the process, as NVML's do. A MIG handle whose instance is gone no longer resolves.
struct nvmlDevice_st {
  int index;
  int gpu_instance_id;      // -1 for a whole GPU
  int compute_instance_id;  // -1 for a whole GPU
};

struct nvmlGpuInstance_st {
  int device;
  int id;
};

struct nvmlComputeInstance_st {
  int device;
  int gpu_instance_id;
  int id;
};

namespace simgpu::nvml {

inline constexpr int kGpuInstanceIds = 15;  // GI IDs 0..14

// The process's simulator when NVML is initialised in this process, else nullptr.
Simulator* initialised_simulator();

nvmlDevice_t handle_for(int index);
nvmlDevice_t mig_handle_for(int index, uint32_t gpu_instance_id, uint32_t compute_instance_id);
nvmlGpuInstance_t gpu_instance_handle(int index, uint32_t gpu_instance_id);
nvmlComputeInstance_t compute_instance_handle(int index, uint32_t gpu_instance_id,
                                              uint32_t compute_instance_id);

// A MIG device as a handle resolved it: copies of its instances taken under the lock.
struct MigView {
  MigGpuInstance gpu_instance{};
  MigComputeInstance compute_instance{};
  const MigGpuInstanceProfile* profile = nullptr;
};

// A device handle checked against the simulator: what every device query starts from.
struct Device {
  Simulator* sim = nullptr;
  int index = -1;  // the GPU (a MIG device's parent)
  bool is_mig = false;
  MigView mig;  // when is_mig
  const DeviceConfig& config() const { return sim->device(index); }
  // MIG mode is on for the GPU (or the parent of a MIG device).
  bool mig_enabled() const;
};

// NVML_ERROR_UNINITIALIZED before init, NVML_ERROR_INVALID_ARGUMENT for a handle that is not one of
// ours (or a MIG handle whose compute instance is gone), else NVML_SUCCESS with `out` filled.
nvmlReturn_t resolve(nvmlDevice_t handle, Device& out);
// As resolve, and NVML_ERROR_NOT_SUPPORTED for a MIG device handle: calls of whole GPUs only.
nvmlReturn_t resolve_gpu(nvmlDevice_t handle, Device& out);

// A MIG device's name as NVML and CUDA give it: "<parent> MIG <profile>" ("... MIG 1c.3g.40gb"
// for a compute instance smaller than its GPU instance).
std::string mig_device_name(const Device& device);

// Copies `value` with its terminator, or returns NVML_ERROR_INSUFFICIENT_SIZE when it does not fit.
nvmlReturn_t copy_string(const char* value, char* out, unsigned int length);

}  // namespace simgpu::nvml
