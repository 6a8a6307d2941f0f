// Writing a share's limits page (tessera/share_region.h) to disk: used by whoever creates shares,
// the node agent for Kubernetes claims and `tessera run` on one machine. The shim only reads it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/share_region.h"

namespace tessera::share {

struct DeviceLimit {
  std::string uuid;  // "GPU-..." as NVML and cuDeviceGetUuid name the device
  uint64_t memory_limit = kUnlimited;
  uint32_t cores_limit = 100;
  uint32_t cores_burst = 0;  // percent while the GPU has idle time; 0 = no bursting
};

// Writes <dir>/limits. A new file is written with tessera::write_file_atomically (mode 0444:
// processes of the share map it read-only). An existing valid limits page is updated in
// place, field by field, and its generation bumped, so running processes see the change through
// their mapping. Returns an empty string, or what went wrong (naming the path).
std::string write_limits(const std::string& dir, const std::vector<DeviceLimit>& devices);
// The same, with the share's priority (kPriorityNormal / kPriorityHigh / kPriorityLow).
std::string write_limits(const std::string& dir, const std::vector<DeviceLimit>& devices,
                         uint32_t priority);
// The same, with who measures the share's GPU time (LimitsPage::measure_source): kMeasureNvml (the
// shim itself, one pid namespace with NVML) or kMeasureAgent (the node agent's GpuTimeMeter
// publishes `measured[]`: inside containers). The overloads above write kMeasureNvml into a new
// page and leave an existing page's source as it is. A shim picks its source when its meter
// starts, so a change reaches processes that start afterwards.
std::string write_limits(const std::string& dir, const std::vector<DeviceLimit>& devices,
                         uint32_t priority, uint32_t measure_source);

}  // namespace tessera::share
