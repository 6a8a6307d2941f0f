// The seam between Tessera and NVML's MIG calls (mig-facts.md §2.3): what the publication reads
// and what prepare and unprepare change. NvmlMigDriver (mig/nvml_mig_driver.h) is the product's;
// tests give their own where NVML cannot say what a test needs (a fault between two calls).
#pragma once

#include <string>
#include <vector>

#include "mig/mig_inventory.h"
#include "tessera/gpu_info.h"
#include "tessera/status.h"

namespace tessera::agent {

struct CreatedComputeInstance {
  unsigned ci_id = 0;
  std::string uuid;  // the MIG device's "MIG-..."
};

class MigDriver {
 public:
  virtual ~MigDriver() = default;
  // Capability, mode, profiles with placements, the instances that exist (`gpu` names the parent).
  // A GPU without MIG answers capable = false, not an error.
  virtual Result<MigGpu> inspect(const GpuInfo& gpu) = 0;
  // nvmlDeviceSetMigMode; an activation that does not take (IN_USE: processes; RESET_REQUIRED) is
  // an error naming it.
  virtual Status set_mig_mode(const std::string& parent_uuid, bool enabled) = 0;
  // The pids of the compute processes on the GPU (a MIG mode change needs none).
  virtual Result<std::vector<unsigned>> compute_pids(const std::string& parent_uuid) = 0;
  // nvmlDeviceCreateGpuInstanceWithPlacement: the new GPU instance's ID.
  virtual Result<unsigned> create_gpu_instance(const std::string& parent_uuid, unsigned profile_id,
                                               const MigPlacement& placement) = 0;
  // The default compute instance (all the GPU instance's SMs, shared engines).
  virtual Result<CreatedComputeInstance> create_compute_instance(const std::string& parent_uuid,
                                                                 unsigned gi_id) = 0;
  // kNotFound when it does not exist (any more).
  virtual Status destroy_compute_instance(const std::string& parent_uuid, unsigned gi_id,
                                          unsigned ci_id) = 0;
  virtual Status destroy_gpu_instance(const std::string& parent_uuid, unsigned gi_id) = 0;
};

}  // namespace tessera::agent
