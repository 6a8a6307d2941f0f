// The share's GPU time from NVML per-process utilisation (nvmlDeviceGetProcessUtilization): every
// sample since the previous look, summed over the pids in the share's usage slots ("share") and
// over every other pid ("others"). Needs the share's processes to be in NVML's pid namespace (one
// machine, `tessera run`); inside Kubernetes the node agent publishes the figures instead
// (LimitsPage::measure_source, AgentSource).
#pragma once

#include <atomic>

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
  // True when NVML answers NVML_ERROR_NOT_SUPPORTED for the device's per-process utilisation (every
  // MIG device): the share's launches there are timed by the shim (timed_launch.h). Asks NVML
  // once per device; false when NVML or the device cannot be reached (nothing is known).
  bool utilization_unsupported(int device);
  // While the share times launches itself, ProcessSlot::gpu_busy_ns holds that time: the pids'
  // NVML figures are then not added to it.
  void set_timed_mask(const std::atomic<uint64_t>* timed_mask) { timed_mask_ = timed_mask; }

 private:
  using InitFn = nvmlReturn_t (*)();
  using HandleFn = nvmlReturn_t (*)(const char*, nvmlDevice_t*);
  using UtilFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlProcessUtilizationSample_t*, unsigned int*,
                                  unsigned long long);
  const share::LimitsPage* limits_;
  share::UsagePage* usage_;
  HandleFn handle_by_uuid_ = nullptr;
  UtilFn utilization_ = nullptr;
  bool handle(int device);
  const std::atomic<uint64_t>* timed_mask_ = nullptr;
  nvmlDevice_t handles_[share::kMaxDevices] = {};
  // Per device: 0 not asked yet, 1 supported (or unknown), 2 NVML_ERROR_NOT_SUPPORTED.
  uint8_t support_[share::kMaxDevices] = {};
  unsigned long long last_seen_us_[share::kMaxDevices] = {};
  static constexpr unsigned kMaxSamples = 256;
  nvmlProcessUtilizationSample_t samples_[kMaxSamples] = {};
};

}  // namespace tessera::vgpu::compute
