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
  // A MIG device (list_mig_devices): its parent GPU's UUID; `index` is the parent's. Empty for a
  // whole GPU.
  std::string parent_uuid;
  bool operator==(const GpuInfo&) const = default;
};

// The node's GPUs, or the error (names the library or the NVML call, "nvmlDeviceGetUUID: GPU is
// lost"): kUnavailable when NVML cannot be loaded or a call fails (the driver may be starting),
// kFailedPrecondition when the library lacks an entry point or NVML says Not Supported (a driver
// or GPU too old).
Result<std::vector<GpuInfo>> list_gpus();

// The MIG devices (one per compute instance) of the node's GPUs whose MIG mode is on, each with
// its MIG UUID ("MIG-..."), name, memory and its parent's UUID and index: what CUDA shows as
// devices on a MIG GPU (mig-facts.md section 3). Empty where no GPU has MIG on, or the library
// lacks the MIG entry points.
Result<std::vector<GpuInfo>> list_mig_devices();

}  // namespace tessera
