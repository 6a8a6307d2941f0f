// The node's inventory as the share lifecycle sees it: one entry per GPU the agent publishes.
#pragma once

#include <cstdint>
#include <string>

namespace tessera::agent {

// A GPU of this node as the agent publishes it (devices/ builds the list from NVML).
struct NodeDevice {
  std::string name;  // "gpu-<minor>"
  std::string uuid;  // "GPU-..."
  unsigned minor = 0;
  uint64_t memory_bytes = 0;
  // NVML's product name ("NVIDIA H200"): the local API's Gpu.name, as the CLI's local mode shows
  // it (`tessera top`).
  std::string product_name{};
};

}  // namespace tessera::agent
