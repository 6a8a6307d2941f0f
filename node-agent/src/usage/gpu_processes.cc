#include "usage/gpu_processes.h"

#include <algorithm>
#include <map>

#include "tessera/nvml.h"

namespace tessera::agent {
namespace {

class NvmlProcessSource final : public GpuProcessSource {
 public:
  explicit NvmlProcessSource(nvml::Session session) : session_(std::move(session)) {}

  Result<std::vector<GpuProcessMemory>> memory(const std::string& uuid) override {
    TESSERA_ASSIGN_OR_RETURN(nvmlDevice_t device, handle(uuid));
    Result<std::vector<nvmlProcessInfo_t>> infos = session_.compute_processes(device);
    if (!infos.is_ok())
      return unavailable(infos.status().with_context("running processes of " + uuid).message());
    std::vector<GpuProcessMemory> out;
    for (const nvmlProcessInfo_t& info : *infos) {
      // NVML_VALUE_NOT_AVAILABLE (no figure for this process, e.g. no permission): no data,
      // never an "all of the GPU" figure.
      if (info.usedGpuMemory == static_cast<unsigned long long>(NVML_VALUE_NOT_AVAILABLE)) continue;
      GpuProcessMemory process{static_cast<int>(info.pid), info.usedGpuMemory};
      // 0xFFFFFFFF when MIG is off (nvml.h, nvmlProcessInfo_t).
      if (info.gpuInstanceId != 0xFFFFFFFFu) process.gpu_instance_id = info.gpuInstanceId;
      out.push_back(process);
    }
    return out;
  }

  Result<uint64_t> free_memory(const std::string& uuid) override {
    TESSERA_ASSIGN_OR_RETURN(nvmlDevice_t device, handle(uuid));
    Result<nvmlMemory_t> memory = session_.memory(device);
    if (!memory.is_ok())
      return unavailable(memory.status().with_context("memory of " + uuid).message());
    return static_cast<uint64_t>(memory->free);
  }

  Result<GpuFigures> figures(const std::string& uuid) override {
    TESSERA_ASSIGN_OR_RETURN(nvmlDevice_t device, handle(uuid));
    Result<nvmlMemory_t> memory = session_.memory(device);
    if (!memory.is_ok())
      return unavailable(memory.status().with_context("memory of " + uuid).message());
    Result<nvmlUtilization_t> rates = session_.utilization(device);
    // Not Supported (kFailedPrecondition): a GPU in MIG mode, or a MIG instance; memory stands.
    if (!rates.is_ok() && rates.status().code() != StatusCode::kFailedPrecondition)
      return unavailable(rates.status().with_context("utilisation of " + uuid).message());
    GpuFigures figures{memory->used, memory->total, std::nullopt};
    if (rates.is_ok()) figures.utilization_percent = rates->gpu;
    return figures;
  }

  Result<std::vector<GpuProcessBusy>> busy(const std::string& uuid) override {
    TESSERA_ASSIGN_OR_RETURN(nvmlDevice_t device, handle(uuid));
    unsigned long long& since = last_seen_us_[uuid];
    const unsigned long long now = nvml::wall_clock_us();
    std::vector<GpuProcessBusy> out;
    if (since == 0) {
      since = now;
      return out;
    }
    Result<std::vector<nvmlProcessUtilizationSample_t>> samples =
        session_.process_utilization(device, since);
    if (!samples.is_ok()) {
      // NOT_SUPPORTED (a MIG device, a GPU in MIG mode) stays kFailedPrecondition: no fault.
      Status why = samples.status().with_context("process utilisation of " + uuid);
      if (why.code() == StatusCode::kFailedPrecondition) return why;
      return unavailable(why.message());
    }
    unsigned long long newest = since;
    for (const nvmlProcessUtilizationSample_t& sample : *samples) {
      if (sample.timeStamp <= since) continue;
      newest = std::max(newest, sample.timeStamp);
      out.push_back({static_cast<int>(sample.pid), std::min(sample.smUtil, 100u)});
    }
    since = newest > since ? newest : now;  // none newer (or none at all): the window ends now
    return out;
  }

 private:
  Result<nvmlDevice_t> handle(const std::string& uuid) {
    // A share whose dynamic MIG instance is not made yet has no UUID: no device to ask (and no
    // "no GPU" to report).
    if (uuid.empty()) return failed_precondition("no device UUID yet");
    const auto it = handles_.find(uuid);
    if (it != handles_.end()) return it->second;
    Result<nvmlDevice_t> device = session_.device_by_uuid(uuid);
    if (!device.is_ok())
      return unavailable(device.status().with_context("no GPU " + uuid).message());
    handles_[uuid] = *device;
    return device;
  }

  nvml::Session session_;
  std::map<std::string, nvmlDevice_t> handles_;
  std::map<std::string, unsigned long long> last_seen_us_;
};

}  // namespace

Result<std::unique_ptr<GpuProcessSource>> nvml_process_source(const std::string& library) {
  using nvml::EntryPoint;
  Result<nvml::Session> session = nvml::Session::open(
      library,
      {EntryPoint::nvmlDeviceGetHandleByUUID, EntryPoint::nvmlDeviceGetComputeRunningProcesses_v3,
       EntryPoint::nvmlDeviceGetProcessUtilization, EntryPoint::nvmlDeviceGetMemoryInfo,
       EntryPoint::nvmlDeviceGetUtilizationRates});
  if (!session.is_ok()) return unavailable(session.status().message());
  return std::unique_ptr<GpuProcessSource>(
      std::make_unique<NvmlProcessSource>(std::move(session).value()));
}

}  // namespace tessera::agent
