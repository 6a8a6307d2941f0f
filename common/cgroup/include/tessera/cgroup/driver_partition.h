// The NVIDIA driver's per-cgroup device-memory partitions (R615 with CUDA 13.4;
// docs/driver-partitions.md): a soft limit (the guarantee: the share's memory request) and a hard
// limit (the wall: its memory limit) on a cgroup v2 directory, per GPU. Every byte the cgroup's
// processes hold counts, contexts included, shim or no shim: the wall a tenant cannot reach.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/nvml.h"
#include "tessera/status.h"

namespace tessera::cgroup {

// The first driver branch with partitions.
inline constexpr int kPartitionDriverBranch = 615;

struct PartitionLimits {
  std::string uuid;   // the GPU, "GPU-..."
  uint64_t soft = 0;  // bytes guaranteed (the memory request)
  uint64_t hard = 0;  // bytes at most (the memory limit)
};

// Ok when this driver can hold partitions: a driver branch of 615 or newer whose library has both
// entry points. Else kFailedPrecondition saying why ("driver 580.159.04 is older than R615").
// MIG devices are refused by the driver itself (apply_partitions reports it).
Status driver_partitions_supported(const nvml::Session& session);

// Sets every GPU's limits on `directory`, then reads each back: all or nothing. On a failure the
// GPUs already set are cleared again, and the error names the GPU, the directory and the call.
Status apply_partitions(const nvml::Session& session, const std::string& directory,
                        const std::vector<PartitionLimits>& limits);

// Clears the partitions of `uuids` on `directory` (soft 0, hard ULLONG_MAX: the soft limit is
// zeroed before the cgroup goes, as the dmem backend needs). Every GPU is tried; the first error
// is returned.
Status clear_partitions(const nvml::Session& session, const std::string& directory,
                        const std::vector<std::string>& uuids);

// What the driver holds for `directory` on one GPU now, or kNotFound when the cgroup has no limit
// of its own there.
Result<nvml::MemoryLimits> read_partition(const nvml::Session& session,
                                          const std::string& directory, const std::string& uuid);

}  // namespace tessera::cgroup
