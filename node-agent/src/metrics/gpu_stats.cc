#include "metrics/gpu_stats.h"

#include <chrono>

#include "tessera/nvml.h"

namespace tessera::agent {

struct NvmlGpuStats::Nvml {
  std::optional<nvml::Session> session;  // empty until a load succeeds
  std::chrono::steady_clock::time_point failed_at{};
};

NvmlGpuStats::NvmlGpuStats(std::string library) : library_(std::move(library)) {}

NvmlGpuStats::~NvmlGpuStats() = default;  // the session shuts NVML down

Status NvmlGpuStats::load() {
  if (nvml_ && nvml_->session) return Status::ok();
  // The time of a failure, to retry later (a driver installed meanwhile), not on every scrape.
  const auto now = std::chrono::steady_clock::now();
  if (nvml_ && now - nvml_->failed_at < std::chrono::minutes(1)) return unavailable(load_error_);
  nvml_ = std::make_unique<Nvml>();
  using nvml::EntryPoint;
  Result<nvml::Session> opened = nvml::Session::open(
      library_, {EntryPoint::nvmlDeviceGetHandleByUUID, EntryPoint::nvmlDeviceGetMemoryInfo,
                 EntryPoint::nvmlDeviceGetUtilizationRates});
  if (!opened.is_ok()) {
    nvml_->failed_at = now;
    load_error_ = opened.status().message();
    return unavailable(load_error_);
  }
  nvml_->session = std::move(opened).value();
  return Status::ok();
}

Result<GpuFigures> NvmlGpuStats::read(const std::string& uuid) {
  std::lock_guard lock(mutex_);
  TESSERA_RETURN_IF_ERROR(load());
  const nvml::Session& session = *nvml_->session;
  Result<nvmlDevice_t> device = session.device_by_uuid(uuid);
  if (!device.is_ok()) return unavailable(device.status().with_context(uuid).message());
  Result<nvmlMemory_t> memory = session.memory(*device);
  if (!memory.is_ok()) return unavailable(memory.status().with_context(uuid).message());
  Result<nvmlUtilization_t> utilization = session.utilization(*device);
  // Not Supported (kFailedPrecondition): a GPU in MIG mode, or a MIG instance; memory stands.
  if (!utilization.is_ok() && utilization.status().code() != StatusCode::kFailedPrecondition)
    return unavailable(utilization.status().with_context(uuid).message());
  GpuFigures figures{memory->used, memory->total, std::nullopt};
  if (utilization.is_ok()) figures.utilization_percent = utilization->gpu;
  return figures;
}

}  // namespace tessera::agent
