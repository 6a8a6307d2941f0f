// The node's inventory as the share lifecycle sees it: one entry per GPU the agent publishes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "model/mig_device.h"

namespace tessera::agent {

// A device of this node as the agent publishes it (devices/ builds the list from NVML): a whole
// GPU, or a MIG instance (`mig` set).
struct NodeDevice {
  std::string name;  // "gpu-<minor>", or a MIG instance's "gpu-<minor>-mig-..."
  std::string uuid;  // "GPU-...", or a MIG instance's "MIG-..."
  unsigned minor = 0;
  uint64_t memory_bytes = 0;
  // NVML's product name ("NVIDIA H200"): the local API's Gpu.name, as the CLI's local mode shows
  // it (`tessera top`).
  std::string product_name{};
  // Set for a MIG device (name gpu-<minor>-mig-..., uuid its MIG UUID, "" for a dynamic one until
  // prepare creates it; minor and product_name the GPU's, memory_bytes the instance's).
  std::optional<MigDeviceRef> mig{};
};

}  // namespace tessera::agent
