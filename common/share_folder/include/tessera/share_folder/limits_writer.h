// Writing a share's limits page (tessera/share_region.h): the one writer, for whoever creates
// shares (the node agent for Kubernetes claims, `tessera run` on one machine). The shim only
// reads the page, through its own mapping.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tessera/share_region.h"
#include "tessera/status.h"

namespace tessera::share_folder {

struct DeviceLimit {
  std::string uuid;  // "GPU-..." as NVML and cuDeviceGetUuid name the device
  // The wall.
  uint64_t memory_limit = share::kUnlimited;
  // Percent of the GPU's time guaranteed; 0 = best-effort.
  uint32_t cores_request = 100;
  // Percent it may reach; at most the request: it does not burst.
  uint32_t cores_limit = 0;
  // What is guaranteed, at most memory_limit; kUnlimited: all of memory_limit. Last, so that
  // {uuid, memory, cores} initialisers of the fields before it keep their meaning.
  uint64_t memory_request = share::kUnlimited;
};

struct LimitsOptions {
  // Not an aggregate, so `{priority}` alone keeps the source's default without a warning.
  LimitsOptions(uint32_t priority_value = share::kPriorityNormal,  // NOLINT: implicit, as {...}
                std::optional<uint32_t> measure_source_value = std::nullopt)
      : priority(priority_value), measure_source(measure_source_value) {}

  uint32_t priority;  // kPriorityNormal / kPriorityHigh / kPriorityLow
  // Who measures the share's GPU time (LimitsPage::measure_source): kMeasureNvml (the shim
  // itself, one pid namespace with NVML) or kMeasureAgent (the node agent's GpuTimeMeter publishes
  // measured[]: inside containers). None: a new page gets kMeasureNvml, an existing page keeps its
  // source. A shim picks its source when its meter starts, so a change reaches processes that
  // start afterwards.
  std::optional<uint32_t> measure_source;
};

// Writes <dir>/limits (creating <dir> 0755 when missing). A new file is written with
// tessera::write_file_atomically (mode 0444: processes of the share map it read-only). An existing
// valid limits page is updated in place, field by field, and its generation bumped, so running
// processes see the change through their mapping; its devices cannot change. kInvalidArgument for
// a bad device, priority or source (naming the value), kFailedPrecondition for a change of
// devices, kInternal for I/O (naming the path).
Status write_limits(const std::string& dir, const std::vector<DeviceLimit>& devices,
                    const LimitsOptions& options = {});

}  // namespace tessera::share_folder
