#include "metrics/gpu_stats.h"

#include <chrono>

#include "tessera/nvml_abi.h"
#include "tessera/nvml_library.h"

namespace tessera::agent {

struct NvmlGpuStats::Nvml {
  decltype(&nvmlInit_v2) init = nullptr;
  decltype(&nvmlShutdown) shutdown = nullptr;
  decltype(&nvmlErrorString) error_string = nullptr;
  decltype(&nvmlDeviceGetHandleByUUID) handle_by_uuid = nullptr;
  decltype(&nvmlDeviceGetMemoryInfo) memory_info = nullptr;
  decltype(&nvmlDeviceGetUtilizationRates) utilization = nullptr;
  bool initialised = false;
  std::chrono::steady_clock::time_point failed_at{};
};

NvmlGpuStats::NvmlGpuStats(std::string library) : library_(std::move(library)) {}

NvmlGpuStats::~NvmlGpuStats() {
  if (nvml_ && nvml_->initialised) nvml_->shutdown();
}

Status NvmlGpuStats::load() {
  if (nvml_ && nvml_->initialised) return Status::ok();
  // The time of a failure, to retry later (a driver installed meanwhile), not on every scrape.
  const auto now = std::chrono::steady_clock::now();
  if (nvml_ && now - nvml_->failed_at < std::chrono::minutes(1)) return unavailable(load_error_);
  nvml_ = std::make_unique<Nvml>();
  auto fail = [&](std::string why) {
    nvml_->failed_at = now;
    load_error_ = std::move(why);
    return unavailable(load_error_);
  };
  NvmlLibrary library;
  if (Status opened = library.open(library_); !opened.is_ok()) return fail(opened.message());
  library.resolve("nvmlInit_v2", nvml_->init);
  library.resolve("nvmlShutdown", nvml_->shutdown);
  library.resolve("nvmlErrorString", nvml_->error_string);
  library.resolve("nvmlDeviceGetHandleByUUID", nvml_->handle_by_uuid);
  library.resolve("nvmlDeviceGetMemoryInfo", nvml_->memory_info);
  library.resolve("nvmlDeviceGetUtilizationRates", nvml_->utilization);
  if (!nvml_->init || !nvml_->shutdown || !nvml_->error_string || !nvml_->handle_by_uuid ||
      !nvml_->memory_info || !nvml_->utilization)
    return fail(
        library_ +
        " lacks one of nvmlInit_v2, nvmlShutdown, nvmlErrorString, "
        "nvmlDeviceGetHandleByUUID, nvmlDeviceGetMemoryInfo, nvmlDeviceGetUtilizationRates");
  if (const nvmlReturn_t result = nvml_->init(); result != NVML_SUCCESS)
    return fail(std::string("nvmlInit_v2 failed: ") + nvml_->error_string(result));
  nvml_->initialised = true;
  return Status::ok();
}

Result<GpuFigures> NvmlGpuStats::read(const std::string& uuid) {
  std::lock_guard lock(mutex_);
  TESSERA_RETURN_IF_ERROR(load());
  nvmlDevice_t device = nullptr;
  if (const nvmlReturn_t result = nvml_->handle_by_uuid(uuid.c_str(), &device);
      result != NVML_SUCCESS)
    return unavailable("nvmlDeviceGetHandleByUUID(" + uuid + "): " + nvml_->error_string(result));
  nvmlMemory_t memory{};
  if (const nvmlReturn_t result = nvml_->memory_info(device, &memory); result != NVML_SUCCESS)
    return unavailable("nvmlDeviceGetMemoryInfo(" + uuid + "): " + nvml_->error_string(result));
  nvmlUtilization_t utilization{};
  if (const nvmlReturn_t result = nvml_->utilization(device, &utilization); result != NVML_SUCCESS)
    return unavailable("nvmlDeviceGetUtilizationRates(" + uuid +
                       "): " + nvml_->error_string(result));
  return GpuFigures{memory.used, memory.total, utilization.gpu};
}

}  // namespace tessera::agent
