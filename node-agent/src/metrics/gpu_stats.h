// Per-GPU figures from NVML for a scrape: memory used and total, utilisation. NVML (real or
// simulated) is loaded with dlopen on first use and initialised once; a GPU NVML cannot answer
// for (lost, or no NVML here) has no figures, and the scrape goes on without them.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "tessera/status.h"
#include "usage/gpu_processes.h"  // GpuFigures

namespace tessera::agent {

class NvmlGpuStats {
 public:
  explicit NvmlGpuStats(std::string library = "libnvidia-ml.so.1");
  ~NvmlGpuStats();  // shuts NVML down when it was initialised
  NvmlGpuStats(const NvmlGpuStats&) = delete;
  NvmlGpuStats& operator=(const NvmlGpuStats&) = delete;

  // The GPU's figures, or why not (kUnavailable: NVML missing or the GPU not answering).
  // Thread-safe: NVML calls are made one at a time.
  Result<GpuFigures> read(const std::string& uuid);

 private:
  struct Nvml;
  Status load();  // under mutex_

  std::string library_;
  std::mutex mutex_;
  std::unique_ptr<Nvml> nvml_;
  std::string load_error_;  // a failed load is not retried on every scrape: once a minute at most
};

}  // namespace tessera::agent
