// The share's GPU time from NVML per-process utilisation (nvmlDeviceGetProcessUtilization): every
// sample since the previous look, summed over the pids in the share's usage slots ("share") and
// over every other pid ("others"). Needs the share's processes to be in NVML's pid namespace (one
// machine, `tessera run`); inside Kubernetes the node agent publishes the figures instead
// (LimitsPage::measure_source, AgentSource).
#pragma once

#include "compute/meter.h"
#include "tessera/nvml_abi.h"

namespace tessera::vgpu::compute {

class NvmlSource final : public BusySource {
 public:
  NvmlSource(const share::LimitsPage* limits, share::UsagePage* usage)
      : limits_(limits), usage_(usage) {}
  // Loads libnvidia-ml.so.1 and initialises it; false when NVML is not usable.
  bool open();
  bool measure(int device, int64_t now_ns, Busy* out) override;
  void reset() override;

 private:
  using InitFn = nvmlReturn_t (*)();
  using HandleFn = nvmlReturn_t (*)(const char*, nvmlDevice_t*);
  using UtilFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlProcessUtilizationSample_t*, unsigned int*,
                                  unsigned long long);
  const share::LimitsPage* limits_;
  share::UsagePage* usage_;
  HandleFn handle_by_uuid_ = nullptr;
  UtilFn utilization_ = nullptr;
  nvmlDevice_t handles_[share::kMaxDevices] = {};
  unsigned long long last_seen_us_[share::kMaxDevices] = {};
  static constexpr unsigned kMaxSamples = 256;
  nvmlProcessUtilizationSample_t samples_[kMaxSamples] = {};
};

}  // namespace tessera::vgpu::compute
