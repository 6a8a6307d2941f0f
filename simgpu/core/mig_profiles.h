// MIG profile tables of the simulated GPUs: what NVML's profile queries answer and what instances
// may be made, per GPU model, chosen by the device's product name. The numbers are data
// (mig_profiles.cc), each table citing where its figures were read; the simulator's code never
// computes a profile's size.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>

namespace simgpu {

inline constexpr int kMigMemorySlices = 8;   // every model here divides memory in eighths
inline constexpr int kMigComputeSlices = 7;  // and SMs in sevenths

struct MigGpuInstanceProfile {
  uint32_t index;    // NVML_GPU_INSTANCE_PROFILE_* (what nvmlDeviceGetGpuInstanceProfileInfo takes)
  uint32_t id;       // the profile ID (what placement, create and list calls take)
  const char* name;  // "1g.18gb", as nvidia-smi mig -lgip prints it
  uint32_t instance_count;
  uint64_t memory_mib;
  uint32_t multiprocessors;
  uint32_t copy_engines;
  uint32_t decoders;
  uint32_t encoders;
  uint32_t jpeg_engines;
  uint32_t ofa_engines;
  uint32_t memory_slices;   // placement size
  uint32_t compute_slices;  // the "Ng" of the name
  uint32_t placement_count;
  std::array<uint8_t, kMigMemorySlices> placement_starts;  // first memory slice of each placement
};

// A compute-instance profile inside a GPU instance of `gpu_compute_slices` compute slices. Its
// index equals its ID (NVML_COMPUTE_INSTANCE_PROFILE_*).
struct MigComputeInstanceProfile {
  uint32_t gpu_compute_slices;
  uint32_t index;
  uint32_t compute_slices;
  uint32_t instance_count;
};

struct MigModel {
  const char* model;              // "H200 141GB"
  const char* source;             // where the numbers come from
  std::string_view name_part;     // a device whose name contains it...
  std::string_view name_part_2;   // ...and this (empty: anything)
  std::string_view name_exclude;  // ...and not this (empty: nothing)
  bool reset_free_toggle;         // Hopper+: mode changes need no GPU reset
  std::span<const MigGpuInstanceProfile> profiles;
};

// The model table for a device of that product name, or nullptr when MIG is not modelled for it.
const MigModel* mig_model_for(std::string_view device_name);
// Every model, for error messages ("A100 40GB, A100 80GB, H100 80GB, H200 141GB").
std::span<const MigModel> mig_models();
// The compute-instance profiles (same for every model here).
std::span<const MigComputeInstanceProfile> mig_compute_instance_profiles();

}  // namespace simgpu
