// The node's inventory as the share lifecycle sees it: one entry per GPU the agent publishes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "model/mig_device.h"

namespace tessera::agent {

// A GPU of this node as the agent publishes it (devices/ builds the list from NVML).
struct NodeDevice {
  std::string name;  // "gpu-<minor>", or a MIG device's name
  std::string uuid;  // "GPU-..."
  unsigned minor = 0;
  uint64_t memory_bytes = 0;
  // NVML's product name ("NVIDIA H200"): the local API's Gpu.name, as the CLI's local mode shows
  // it (`tessera top`).
  std::string product_name{};
  // A MIG device (docs/node-agent.md, "MIG"): name is gpu-<minor>-mig-..., uuid its MIG UUID
  // (static; "" for a dynamic one until prepare creates it), minor and product_name the parent's,
  // memory_bytes the instance's.
  std::optional<MigDeviceRef> mig{};
};

}  // namespace tessera::agent
