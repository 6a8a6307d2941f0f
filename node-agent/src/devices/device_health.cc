#include "devices/device_health.h"

#include <algorithm>

namespace tessera::agent {

void DeviceHealthBoard::set(const DeviceHealthReport& report) {
  {
    std::lock_guard lock(mutex_);
    auto it = std::find_if(devices_.begin(), devices_.end(), [&](const DeviceHealthReport& d) {
      return d.pool_name == report.pool_name && d.device_name == report.device_name;
    });
    if (it == devices_.end()) {
      devices_.push_back(report);
    } else {
      *it = report;
    }
    ++generation_;
  }
  changed_.notify_all();
}

void DeviceHealthBoard::remove(const std::string& pool_name, const std::string& device_name) {
  {
    std::lock_guard lock(mutex_);
    auto removed = std::erase_if(devices_, [&](const DeviceHealthReport& d) {
      return d.pool_name == pool_name && d.device_name == device_name;
    });
    if (removed == 0) return;
    ++generation_;
  }
  changed_.notify_all();
}

std::vector<NodeDevice> devices_hit_by(const std::vector<NodeDevice>& devices,
                                       const std::string& gpu_uuid, unsigned gpu_instance_id) {
  std::vector<NodeDevice> hit;
  for (const NodeDevice& device : devices) {
    const bool on_gpu = device.mig ? device.mig->parent_uuid == gpu_uuid : device.uuid == gpu_uuid;
    if (!on_gpu) continue;
    if (gpu_instance_id != kNoGpuInstance && !(device.mig && device.mig->gi_id == gpu_instance_id))
      continue;
    hit.push_back(device);
  }
  return hit;
}

std::vector<NodeDevice> physical_gpus(const std::vector<NodeDevice>& devices) {
  std::vector<NodeDevice> gpus;
  for (const NodeDevice& device : devices) {
    const std::string uuid = device.mig ? device.mig->parent_uuid : device.uuid;
    if (std::any_of(gpus.begin(), gpus.end(), [&](const NodeDevice& g) { return g.uuid == uuid; }))
      continue;
    if (!device.mig) {
      gpus.push_back(device);
      continue;
    }
    // A whole-GPU device listed later stands for it; else the GPU is named after its minor.
    const auto whole = std::find_if(devices.begin(), devices.end(),
                                    [&](const NodeDevice& d) { return !d.mig && d.uuid == uuid; });
    if (whole != devices.end()) {
      gpus.push_back(*whole);
      continue;
    }
    NodeDevice gpu;
    gpu.name = "gpu-" + std::to_string(device.minor);
    gpu.uuid = uuid;
    gpu.minor = device.minor;
    gpu.product_name = device.product_name;
    gpus.push_back(gpu);
  }
  return gpus;
}

DeviceHealthSnapshot DeviceHealthBoard::snapshot() const {
  std::lock_guard lock(mutex_);
  return DeviceHealthSnapshot{generation_, devices_};
}

bool DeviceHealthBoard::wait_for_change(std::uint64_t seen,
                                        std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mutex_);
  return changed_.wait_for(lock, timeout, [&] { return generation_ != seen; });
}

}  // namespace tessera::agent
