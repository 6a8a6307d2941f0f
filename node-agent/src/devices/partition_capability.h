// Whether this node's driver can hold a share's memory (docs/driver-partitions.md), decided once
// at start, per GPU: a driver of R615 or newer whose NVML has nvmlDeviceSetMemoryLimits_v1 and
// nvmlDeviceGetMemoryLimits_v1, a cgroup v2 hierarchy in /proc/self/mountinfo, and a probe that
// works: a cgroup the agent creates under its own, a partition set on it, read back and cleared,
// the cgroup removed. A GPU where any step fails keeps the shim alone, with the reason (a MIG
// handle, a driver older than R615, no cgroup v2, not root).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tessera/nvml.h"

namespace tessera::agent {

struct GpuPartitionSupport {
  bool supported = false;
  std::string reason;  // why not ("" when supported)
};

struct PartitionCapability {
  std::string driver_version;                       // "" when NVML did not answer
  std::string probe_cgroup;                         // where the probe ran ("" when it did not)
  std::map<std::string, GpuPartitionSupport> gpus;  // by UUID
  bool any() const;
  // The GPUs with support.
  std::vector<std::string> supported() const;
};

struct PartitionProbeOptions {
  std::string mountinfo = "/proc/self/mountinfo";
  std::string proc_root = "/proc";
  uint64_t probe_soft = 1ull << 20;  // set on the probe cgroup and read back
  uint64_t probe_hard = 2ull << 20;
};

// The capability of each of `uuids` on `session`'s driver.
PartitionCapability detect_partition_capability(const nvml::Session& session,
                                                const std::vector<std::string>& uuids,
                                                const PartitionProbeOptions& options = {});

// Every GPU unsupported for `reason` (NVML would not open, partitions turned off by flag).
PartitionCapability no_partition_capability(const std::vector<std::string>& uuids,
                                            const std::string& reason);

}  // namespace tessera::agent
