#include "usage/gpu_processes.h"

#include <time.h>

#include <algorithm>
#include <map>

#include "tessera/nvml_abi.h"
#include "tessera/nvml_library.h"

namespace tessera::agent {
namespace {

unsigned long long wall_us() {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<unsigned long long>(now.tv_sec) * 1000000ull +
         static_cast<unsigned long long>(now.tv_nsec) / 1000ull;
}

class NvmlProcessSource final : public GpuProcessSource {
 public:
  Status load(const std::string& path) {
    NvmlLibrary library;
    TESSERA_RETURN_IF_ERROR(library.open(path));
    library.resolve("nvmlInit_v2", init_);
    library.resolve("nvmlShutdown", shutdown_);
    library.resolve("nvmlErrorString", error_string_);
    library.resolve("nvmlDeviceGetHandleByUUID", handle_by_uuid_);
    library.resolve("nvmlDeviceGetComputeRunningProcesses_v3", processes_);
    library.resolve("nvmlDeviceGetProcessUtilization", utilization_);
    if (!init_ || !shutdown_ || !error_string_ || !handle_by_uuid_ || !processes_ || !utilization_)
      return unavailable(path + " lacks an NVML entry point the out-of-band checks need");
    if (const nvmlReturn_t result = init_(); result != NVML_SUCCESS)
      return unavailable(std::string("nvmlInit_v2 failed: ") + error_string_(result));
    initialised_ = true;
    return Status::ok();
  }
  ~NvmlProcessSource() override {
    if (initialised_) shutdown_();
  }

  Result<std::vector<GpuProcessMemory>> memory(const std::string& uuid) override {
    Result<nvmlDevice_t> device = handle(uuid);
    if (!device.is_ok()) return device.status();
    std::vector<nvmlProcessInfo_t> infos(64);
    for (int attempt = 0; attempt < 4; ++attempt) {
      unsigned count = static_cast<unsigned>(infos.size());
      const nvmlReturn_t result = processes_(*device, &count, infos.data());
      if (result == NVML_ERROR_INSUFFICIENT_SIZE && count < 65536) {
        infos.resize(count + count / 2 + 1);
        continue;
      }
      if (result != NVML_SUCCESS)
        return unavailable("running processes of " + uuid + ": " + error_string_(result));
      std::vector<GpuProcessMemory> out;
      for (unsigned i = 0; i < count && i < infos.size(); ++i) {
        // NVML_VALUE_NOT_AVAILABLE (no figure for this process, e.g. no permission): no data,
        // never an "all of the GPU" figure.
        if (infos[i].usedGpuMemory == static_cast<unsigned long long>(NVML_VALUE_NOT_AVAILABLE))
          continue;
        out.push_back({static_cast<int>(infos[i].pid), infos[i].usedGpuMemory});
      }
      return out;
    }
    return unavailable("running processes of " + uuid + ": the list kept growing");
  }

  Result<std::vector<GpuProcessBusy>> busy(const std::string& uuid) override {
    Result<nvmlDevice_t> device = handle(uuid);
    if (!device.is_ok()) return device.status();
    unsigned long long& since = last_seen_us_[uuid];
    const unsigned long long now = wall_us();
    std::vector<GpuProcessBusy> out;
    if (since == 0) {
      since = now;
      return out;
    }
    std::vector<nvmlProcessUtilizationSample_t> samples(64);
    unsigned count = static_cast<unsigned>(samples.size());
    nvmlReturn_t result = utilization_(*device, samples.data(), &count, since);
    if (result == NVML_ERROR_INSUFFICIENT_SIZE && count < 65536) {
      samples.resize(count + count / 2 + 1);
      count = static_cast<unsigned>(samples.size());
      result = utilization_(*device, samples.data(), &count, since);
    }
    if (result == NVML_ERROR_NOT_FOUND) {
      since = now;
      return out;
    }
    if (result != NVML_SUCCESS)
      return unavailable("process utilisation of " + uuid + ": " + error_string_(result));
    unsigned long long newest = since;
    for (unsigned i = 0; i < count && i < samples.size(); ++i) {
      if (samples[i].timeStamp <= since) continue;
      newest = std::max(newest, samples[i].timeStamp);
      out.push_back({static_cast<int>(samples[i].pid), std::min(samples[i].smUtil, 100u)});
    }
    since = newest > since ? newest : now;
    return out;
  }

 private:
  Result<nvmlDevice_t> handle(const std::string& uuid) {
    const auto it = handles_.find(uuid);
    if (it != handles_.end()) return it->second;
    nvmlDevice_t device = nullptr;
    if (const nvmlReturn_t result = handle_by_uuid_(uuid.c_str(), &device); result != NVML_SUCCESS)
      return unavailable("no GPU " + uuid + ": " + error_string_(result));
    handles_[uuid] = device;
    return device;
  }

  decltype(&nvmlInit_v2) init_ = nullptr;
  decltype(&nvmlShutdown) shutdown_ = nullptr;
  decltype(&nvmlErrorString) error_string_ = nullptr;
  decltype(&nvmlDeviceGetHandleByUUID) handle_by_uuid_ = nullptr;
  decltype(&nvmlDeviceGetComputeRunningProcesses_v3) processes_ = nullptr;
  decltype(&nvmlDeviceGetProcessUtilization) utilization_ = nullptr;
  bool initialised_ = false;
  std::map<std::string, nvmlDevice_t> handles_;
  std::map<std::string, unsigned long long> last_seen_us_;
};

}  // namespace

Result<std::unique_ptr<GpuProcessSource>> nvml_process_source(const std::string& library) {
  auto source = std::make_unique<NvmlProcessSource>();
  TESSERA_RETURN_IF_ERROR(source->load(library));
  return std::unique_ptr<GpuProcessSource>(std::move(source));
}

}  // namespace tessera::agent
