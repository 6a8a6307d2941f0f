// The MIG side of one GPU as NVML reports it (mig-facts.md §1, §2): whether it can do MIG, its
// mode, its GPU instance profiles with their placements, and the instances that exist. Pure values
// and the rules derived from them; mig/mig_driver.h reads them from NVML.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/mig_device.h"

namespace tessera::agent {

// NVML's GPU instance profile indices (NVML_GPU_INSTANCE_PROFILE_*) whose compute equals their
// GPU slices, the ones a dynamic MIG device is published for (mig-facts.md §5.2): 1_SLICE,
// 2_SLICE, 3_SLICE, 4_SLICE, 7_SLICE, 8_SLICE, 6_SLICE, 1_SLICE_REV1 (+me), 2_SLICE_REV1,
// 1_SLICE_REV2 (twice the memory).
inline constexpr unsigned kMigProfileIndices[] = {0x0, 0x1, 0x2, 0x3, 0x4, 0x5, 0x6, 0x7, 0x8, 0x9};
inline constexpr unsigned kMigProfileIndexRev1 = 0x7;  // "+me": with a media engine

struct MigProfile {
  unsigned index = 0;           // NVML_GPU_INSTANCE_PROFILE_* (what the profile-info call takes)
  unsigned id = 0;              // what placement and create calls take (19, 9, 0 on Hopper)
  std::string name;             // "3g.71gb" (mig_profile_name)
  unsigned compute_slices = 0;  // "3g"
  unsigned instance_count = 0;
  unsigned multiprocessors = 0;
  uint64_t memory_bytes = 0;  // NVML's memorySizeMB (MiB) in bytes
  std::vector<MigPlacement> placements;
  bool operator==(const MigProfile&) const = default;
};

// One GPU instance that exists, with its first compute instance (MIG devices are per compute
// instance; Tessera hands out a GPU instance with its one default compute instance).
struct MigInstance {
  unsigned gi_id = 0;
  unsigned profile_id = 0;
  MigPlacement placement;
  std::optional<unsigned> ci_id;  // none: a GPU instance without a compute instance (unusable)
  std::string uuid;               // "MIG-...", of that compute instance
  unsigned multiprocessors = 0;   // of that compute instance
  uint64_t memory_bytes = 0;      // the GPU instance's
  bool operator==(const MigInstance&) const = default;
};

struct MigGpu {
  std::string uuid;  // the parent's "GPU-..."
  unsigned minor = 0;
  bool capable = false;
  bool enabled = false;          // current mode
  bool pending_enabled = false;  // after the next reset (Ampere)
  uint64_t memory_bytes = 0;     // the whole GPU's
  std::vector<MigProfile> profiles;
  std::vector<MigInstance> instances;
  const MigProfile* profile_by_id(unsigned id) const;
  const MigProfile* profile_by_name(const std::string& name) const;
  bool operator==(const MigGpu&) const = default;
};

// The profile's name as NVIDIA's go-nvlib computes it (mig-facts.md §1.1): its memory as a fraction
// of the GPU's rounded up to eighths, times the GPU's memory in whole GiB rounded up, rounded to
// the nearest GB -> "<compute slices>g.<GB>gb", "+me" for 1_SLICE_REV1.
std::string mig_profile_name(unsigned profile_index, unsigned compute_slices,
                             uint64_t instance_memory_bytes, uint64_t gpu_memory_bytes);

}  // namespace tessera::agent
