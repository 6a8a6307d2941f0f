// MigDriver over NVML (tessera/nvml.h's MIG calls; mig-facts.md §2.3), one session per call
// sequence. The profiles are read by index (NVML_GPU_INSTANCE_PROFILE_*, kMigProfileIndices) with
// their possible placements; the instances by profile ID with their first compute instance and its
// MIG device's UUID. A library without the MIG entry points (a driver before R470) or a GPU whose
// NVML says Not Supported is a GPU without MIG (inspect: capable = false).
#pragma once

#include <string>
#include <vector>

#include "mig/mig_driver.h"
#include "tessera/nvml.h"

namespace tessera::agent {

class NvmlMigDriver final : public MigDriver {
 public:
  explicit NvmlMigDriver(std::string library = nvml::kDefaultLibrary)
      : library_(std::move(library)) {}
  Result<MigGpu> inspect(const GpuInfo& gpu) override;
  Status set_mig_mode(const std::string& parent_uuid, bool enabled) override;
  Result<std::vector<unsigned>> compute_pids(const std::string& parent_uuid) override;
  Result<unsigned> create_gpu_instance(const std::string& parent_uuid, unsigned profile_id,
                                       const MigPlacement& placement) override;
  Result<CreatedComputeInstance> create_compute_instance(const std::string& parent_uuid,
                                                         unsigned gi_id) override;
  Status destroy_compute_instance(const std::string& parent_uuid, unsigned gi_id,
                                  unsigned ci_id) override;
  Status destroy_gpu_instance(const std::string& parent_uuid, unsigned gi_id) override;

 private:
  std::string library_;
};

}  // namespace tessera::agent
