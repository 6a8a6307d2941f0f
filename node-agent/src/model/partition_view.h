// Which layer holds a share's memory on one GPU (docs/driver-partitions.md), as the partition
// check (enforcement/partition_check.h) finds it and /metrics and the local API show it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

namespace tessera::agent {

// Which layer holds a share's memory on one GPU, and what each counts.
struct SharePartitionView {
  bool driver = false;       // the GPU has the capability and the share a memory limit
  uint64_t driver_used = 0;  // currentUsed summed over the share's live container cgroups
  uint64_t shim_used = 0;    // the usage page's sum for the GPU
  uint32_t cgroups = 0;      // container cgroups holding a partition now
};
// By (share name, GPU UUID).
using PartitionViews = std::map<std::pair<std::string, std::string>, SharePartitionView>;

// "both" where the driver holds the share's memory beside the shim, else "shim".
inline const char* memory_layer_name(bool driver) {
  return driver ? "both" : "shim";
}

}  // namespace tessera::agent
