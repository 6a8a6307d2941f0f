// The GPUs of this node as NVML describes them (tessera/nvml.h: libnvidia-ml.so.1, real or
// simulated, loaded with dlopen) so a program starts and says why on a machine without a driver.
// Used by the node agent (the fields a ResourceSlice publishes) and by `tessera run` (UUIDs for the
// limits page).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/status.h"

namespace tessera {

struct GpuInfo {
  unsigned index = 0;
  unsigned minor = 0;
  std::string uuid;
  std::string product_name;
  std::string architecture;  // "Hopper", ...
  std::string brand;         // "Nvidia", "Tesla", ...
  int cc_major = 0, cc_minor = 0;
  std::string driver_version;  // "580.159.04"
  std::string pci_bus_id;      // "0000:3b:00.0" (lower case, 4-digit domain)
  uint64_t memory_bytes = 0;
  bool operator==(const GpuInfo&) const = default;
};

// The node's GPUs, or the error (names the library or the NVML call, "nvmlDeviceGetUUID: GPU is
// lost"): kUnavailable when NVML cannot be loaded or a call fails (the driver may be starting),
// kFailedPrecondition when the library lacks an entry point or NVML says Not Supported (a driver
// or GPU too old).
Result<std::vector<GpuInfo>> list_gpus();

}  // namespace tessera
