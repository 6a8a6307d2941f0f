// Device health as the DRA health service reports it to kubelet: a provider interface (what the
// service reads), and DeviceHealthBoard, the provider that health producers (NVML XID / health
// events, a lost device) write to.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "model/node_device.h"

namespace tessera::agent {

// NVML's GPU-instance id of an event that no MIG instance can be blamed for (nvmlEventData_t:
// the whole GPU, or a GPU not in MIG mode).
inline constexpr unsigned kNoGpuInstance = 0xFFFFFFFF;

// The published devices an NVML event on GPU `gpu_uuid` makes Unhealthy: with a GPU-instance id,
// only the MIG instance's device (none when no published instance has that id: an instance made
// outside the agent); without one, every device of the GPU (the whole GPU's and each instance's).
// mig-facts.md §2: events on a MIG-enabled GPU carry the GI and CI ids of the instance.
std::vector<NodeDevice> devices_hit_by(const std::vector<NodeDevice>& devices,
                                       const std::string& gpu_uuid, unsigned gpu_instance_id);

// The physical GPUs behind `devices`, each once in order (NVML events are registered on them,
// never on a MIG instance's handle): a whole GPU's device, or for a GPU published only through
// its instances (static MIG), a NodeDevice with its UUID and the name "gpu-<minor>".
std::vector<NodeDevice> physical_gpus(const std::vector<NodeDevice>& devices);

enum class DeviceHealthState { kUnknown, kHealthy, kUnhealthy };

struct DeviceHealthReport {
  std::string pool_name;
  std::string device_name;
  DeviceHealthState state = DeviceHealthState::kUnknown;
  std::int64_t last_updated_unix_s = 0;           // when this state was last checked
  std::int64_t health_check_timeout_seconds = 0;  // 0: kubelet's default
  // Why the device is in this state, for people (kubelet's `message`, the Pod status):
  // "XID 79: GPU has fallen off the bus". Empty for a Healthy device.
  std::string message;
  // The XID that made the device Unhealthy; 0 when none did (another cause, or Healthy).
  unsigned long long xid = 0;
};

struct DeviceHealthSnapshot {
  std::uint64_t generation = 0;  // changes whenever any report changes
  std::vector<DeviceHealthReport> devices;
};

class DeviceHealthProvider {
 public:
  virtual ~DeviceHealthProvider() = default;
  // The full list of devices with their current health.
  virtual DeviceHealthSnapshot snapshot() const = 0;
  // Blocks until the generation differs from `seen` (true) or `timeout` passes (false).
  virtual bool wait_for_change(std::uint64_t seen, std::chrono::milliseconds timeout) const = 0;
};

// Thread-safe. Devices are keyed by (pool, device); the list keeps the order of first appearance.
class DeviceHealthBoard final : public DeviceHealthProvider {
 public:
  // Adds the device or updates its state and time.
  void set(const DeviceHealthReport& report);
  // Drops devices no longer published.
  void remove(const std::string& pool_name, const std::string& device_name);

  DeviceHealthSnapshot snapshot() const override;
  bool wait_for_change(std::uint64_t seen, std::chrono::milliseconds timeout) const override;

 private:
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::uint64_t generation_ = 1;
  std::vector<DeviceHealthReport> devices_;
};

}  // namespace tessera::agent
