// Memory, running processes and utilisation, read from the shared state, so every process's
// allocations and work show up here the way other tenants show up in a real GPU's NVML.
#include <time.h>

#include <algorithm>
#include <vector>

#include "nvml_internal.h"

namespace simgpu::nvml {
namespace {

constexpr uint64_t kNsPerUs = 1'000;
constexpr uint64_t kNsPerSecond = 1'000'000'000;
// nvmlDeviceGetUtilizationRates reports over the last sample period; real parts use 1/6 s to 1 s.
constexpr uint64_t kDeviceSamplePeriodNs = kNsPerSecond;
// How far back the driver's per-process sample buffer reaches (lastSeenTimeStamp 0, or older):
// within what the simulator's per-context run history (kSegmentRing) keeps.
constexpr uint64_t kProcessSampleHistoryNs = 2 * kNsPerSecond;

// NVML timestamps are CPU wall-clock microseconds; the simulator's timeline is CLOCK_MONOTONIC.
uint64_t wall_clock_us() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000 + static_cast<uint64_t>(ts.tv_nsec) / 1'000;
}

unsigned int percent(uint64_t part, uint64_t whole) {
  if (whole == 0) return 0;
  const uint64_t rounded = (part * 100 + whole / 2) / whole;
  return static_cast<unsigned int>(std::min<uint64_t>(rounded, 100));
}

// Memory and utilisation of a GPU that fell off the bus cannot be read, as with a real one.
nvmlReturn_t resolve_reachable(nvmlDevice_t handle, Device& out) {
  if (nvmlReturn_t result = resolve(handle, out); result != NVML_SUCCESS) return result;
  return out.sim->healthy(out.index) ? NVML_SUCCESS : NVML_ERROR_GPU_IS_LOST;
}

struct MemoryFigures {
  uint64_t total;
  uint64_t used;
  uint64_t free;
};

MemoryFigures memory_figures(const Device& dev) {
  // A killed process's memory is free at once on a real GPU; reclaim before reading.
  dev.sim->reclaim_dead_processes();
  if (dev.is_mig) {
    // The GPU instance's memory, shared by its compute instances (read again after the reclaim).
    for (const MigGpuInstance& instance : dev.sim->mig_state(dev.index).gpu_instances) {
      if (instance.in_use == 0 || instance.id != dev.mig.gpu_instance.id) continue;
      const uint64_t used = std::min(instance.used_memory, instance.memory_bytes);
      return {instance.memory_bytes, used, instance.memory_bytes - used};
    }
  }
  const uint64_t total = dev.config().total_memory;
  const uint64_t used = std::min(dev.sim->used_memory(dev.index), total);
  return {total, used, total - used};
}

// The documented protocol of nvmlDeviceGetComputeRunningProcesses*: *infoCount is the capacity of
// `infos` on the way in and the number of processes on the way out; a count query passes 0 (and
// may pass infos == NULL); a buffer too small gets NVML_ERROR_INSUFFICIENT_SIZE.
template <typename Info>
nvmlReturn_t running_processes(nvmlDevice_t device, unsigned int* info_count, Info* infos,
                               void (*fill)(Info&, const ProcessMemory&)) {
  Device dev;
  if (nvmlReturn_t result = resolve_reachable(device, dev); result != NVML_SUCCESS) return result;
  if (info_count == nullptr || (infos == nullptr && *info_count != 0)) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  std::vector<ProcessMemory> processes = dev.sim->process_memory(dev.index);
  // A MIG handle lists the processes on its compute instance; the parent lists all of them.
  if (dev.is_mig) {
    std::erase_if(processes, [&](const ProcessMemory& process) {
      return process.mig_serial != dev.mig.compute_instance.serial;
    });
  }
  const auto found = static_cast<unsigned int>(processes.size());
  if (*info_count < found) {
    *info_count = found;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (unsigned int i = 0; i < found; ++i) fill(infos[i], processes[i]);
  *info_count = found;
  return NVML_SUCCESS;
}

void fill_v1(nvmlProcessInfo_v1_t& info, const ProcessMemory& process) {
  info.pid = static_cast<unsigned int>(process.pid);
  info.usedGpuMemory = process.bytes;
}

void fill_v2(nvmlProcessInfo_v2_t& info, const ProcessMemory& process) {
  info.pid = static_cast<unsigned int>(process.pid);
  info.usedGpuMemory = process.bytes;
  info.gpuInstanceId = process.gpu_instance_id;
  info.computeInstanceId = process.compute_instance_id;
}

}  // namespace
}  // namespace simgpu::nvml

using simgpu::MigGpuInstance;
using simgpu::nvml::Device;

extern "C" {

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  Device dev;
  if (nvmlReturn_t result = simgpu::nvml::resolve_reachable(device, dev); result != NVML_SUCCESS) {
    return result;
  }
  if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const simgpu::nvml::MemoryFigures figures = simgpu::nvml::memory_figures(dev);
  memory->total = figures.total;
  memory->used = figures.used;
  memory->free = figures.free;
  return NVML_SUCCESS;
}

// The simulator sets no memory aside for driver or firmware, so `reserved` is 0 and `used` is what
// processes hold (their context overhead included). Called by a process inside a memory partition
// (R615), it reports the partition: total is the hard limit, used what the partition's processes
// hold, free the headroom under the limit (no more than the device has free).
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
  Device dev;
  if (nvmlReturn_t result = simgpu::nvml::resolve_reachable(device, dev); result != NVML_SUCCESS) {
    return result;
  }
  if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  simgpu::nvml::MemoryFigures figures = simgpu::nvml::memory_figures(dev);
  if (const auto partition = dev.sim->own_partition(dev.index)) {
    const uint64_t used = std::min(partition->used, partition->hard_limit);
    figures = {partition->hard_limit, used, std::min(figures.free, partition->hard_limit - used)};
  }
  memory->total = figures.total;
  memory->reserved = 0;
  memory->used = figures.used;
  memory->free = figures.free;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* infoCount,
                                                     nvmlProcessInfo_t* infos) {
  return simgpu::nvml::running_processes(device, infoCount, infos, simgpu::nvml::fill_v2);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int* infoCount,
                                                     nvmlProcessInfo_v2_t* infos) {
  return simgpu::nvml::running_processes(device, infoCount, infos, simgpu::nvml::fill_v2);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int* infoCount,
                                                  nvmlProcessInfo_v1_t* infos) {
  return simgpu::nvml::running_processes(device, infoCount, infos, simgpu::nvml::fill_v1);
}

// One sample per process that ran on the device since lastSeenTimeStamp (NVML_ERROR_NOT_FOUND when
// none did); smUtil is the share of that window the process's contexts held the device. The
// sample's timeStamp is the time of this query, to be passed back as the next lastSeenTimeStamp.
// The simulator does not model memory bandwidth or the video engines: memUtil, encUtil and decUtil
// are 0.
nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                             nvmlProcessUtilizationSample_t* utilization,
                                             unsigned int* processSamplesCount,
                                             unsigned long long lastSeenTimeStamp) {
  using namespace simgpu::nvml;
  Device dev;
  if (nvmlReturn_t result = resolve_reachable(device, dev); result != NVML_SUCCESS) return result;
  if (processSamplesCount == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (dev.is_mig || dev.mig_enabled()) return NVML_ERROR_NOT_SUPPORTED;  // per nvml.h

  const uint64_t now_us = wall_clock_us();
  const uint64_t monotonic_now_ns = simgpu::now_ns();
  const uint64_t history_us = std::min(kProcessSampleHistoryNs, monotonic_now_ns) / kNsPerUs;
  const uint64_t window_start_us = std::max<uint64_t>(lastSeenTimeStamp, now_us - history_us);
  if (window_start_us >= now_us) {
    *processSamplesCount = 0;
    return NVML_ERROR_NOT_FOUND;
  }
  const uint64_t window_ns = (now_us - window_start_us) * kNsPerUs;

  std::vector<simgpu::ProcessBusy> samples =
      dev.sim->process_busy(dev.index, monotonic_now_ns - window_ns);
  std::erase_if(samples, [](const simgpu::ProcessBusy& busy) { return busy.busy_ns == 0; });
  const auto found = static_cast<unsigned int>(samples.size());
  if (found == 0) {
    *processSamplesCount = 0;
    return NVML_ERROR_NOT_FOUND;
  }
  if (utilization == nullptr || *processSamplesCount < found) {
    *processSamplesCount = found;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (unsigned int i = 0; i < found; ++i) {
    utilization[i] = nvmlProcessUtilizationSample_t{};
    utilization[i].pid = static_cast<unsigned int>(samples[i].pid);
    utilization[i].timeStamp = now_us;
    utilization[i].smUtil = percent(samples[i].busy_ns, window_ns);
  }
  *processSamplesCount = found;
  return NVML_SUCCESS;
}

// gpu: share of the last sample period during which any context ran. memory: not modelled, 0.
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization) {
  using namespace simgpu::nvml;
  Device dev;
  if (nvmlReturn_t result = resolve_reachable(device, dev); result != NVML_SUCCESS) return result;
  if (utilization == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (dev.is_mig || dev.mig_enabled()) return NVML_ERROR_NOT_SUPPORTED;  // per nvml.h
  const uint64_t monotonic_now_ns = simgpu::now_ns();
  const uint64_t period_ns = std::min(kDeviceSamplePeriodNs, monotonic_now_ns);
  const uint64_t busy_ns = dev.sim->device_busy(dev.index, monotonic_now_ns - period_ns);
  utilization->gpu = percent(busy_ns, period_ns);
  utilization->memory = 0;
  return NVML_SUCCESS;
}

}  // extern "C"
