// The per-process figures of a GPU from host NVML: memory (nvmlDeviceGetComputeRunningProcesses_v3)
// and SM utilisation (nvmlDeviceGetProcessUtilization), and the GPU's own figures, behind an
// interface so tests and the benchmarks give their own. The agent's one session of it is the
// observer's (observe/observer.h), for the checks, the context-cost meter and the reports.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/status.h"

namespace tessera::agent {

struct GpuProcessMemory {
  int pid = 0;  // host pid
  uint64_t used_bytes = 0;
  // The MIG GPU instance it runs in (nvmlProcessInfo_t.gpuInstanceId), on a GPU in MIG mode; none
  // otherwise. A GPU's own handle in MIG mode lists every instance's processes (mig-facts.md
  // §2.4): the observer judges those on their instance's list.
  std::optional<unsigned> gpu_instance_id{};
};
struct GpuProcessBusy {
  int pid = 0;
  unsigned sm_percent = 0;  // of the window since the previous query of this GPU
};

// A GPU's own figures (nvmlDeviceGetMemoryInfo, nvmlDeviceGetUtilizationRates): what /metrics and
// the local API show per GPU.
struct GpuFigures {
  uint64_t memory_used_bytes = 0;
  uint64_t memory_total_bytes = 0;
  // None where NVML has no utilisation: a GPU in MIG mode and its instances (mig-facts.md §2.4).
  std::optional<unsigned> utilization_percent;
};

// The per-process figures of a GPU (NVML on a node; a fake in tests and the benchmark).
class GpuProcessSource {
 public:
  virtual ~GpuProcessSource() = default;
  virtual Result<std::vector<GpuProcessMemory>> memory(const std::string& uuid) = 0;
  // Per-process SM utilisation over the window since the previous call for `uuid` (the first
  // call only opens the window: empty). kFailedPrecondition where the device has none (NVML's
  // NOT_SUPPORTED: a MIG instance or a GPU in MIG mode), which is no fault.
  virtual Result<std::vector<GpuProcessBusy>> busy(const std::string& uuid) = 0;
  // The GPU's free memory (nvmlDeviceGetMemoryInfo), for reclaim; a source that cannot tell says
  // kUnavailable (and the checks then reclaim nothing).
  virtual Result<uint64_t> free_memory(const std::string& uuid) {
    return unavailable("no free-memory figure for " + uuid);
  }
  // The GPU's memory and utilisation; a source that cannot tell says kUnavailable (no figures).
  virtual Result<GpuFigures> figures(const std::string& uuid) {
    return unavailable("no figures for " + uuid);
  }
};

// nvmlDeviceGetComputeRunningProcesses_v3, nvmlDeviceGetProcessUtilization, nvmlDeviceGetMemoryInfo
// and nvmlDeviceGetUtilizationRates through one session of `library`;
// kUnavailable when NVML cannot be loaded or started.
Result<std::unique_ptr<GpuProcessSource>> nvml_process_source(
    const std::string& library = "libnvidia-ml.so.1");

}  // namespace tessera::agent
