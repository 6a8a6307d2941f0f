// The node's ResourceSlices (resource.k8s.io/v1): one device "gpu-<minor>" per GPU with its NVML
// attributes and the consumable capacities `memory` (bytes) and `cores` (100 = the whole GPU's
// time), allowMultipleAllocations: true. An Unhealthy device carries the device taint
// vgpu.tessera.dev/unhealthy (effect NoSchedule, value "xid-<n>" when an XID made it so), which
// keeps the scheduler from allocating it until it is Healthy again. Pool = the node name; at most
// 128 devices per slice, 64 while any device of the node is tainted (kube-apiserver's lower limit
// for slices with taints). build_* is pure; SlicePublisher makes the API match
// (create/update/delete), bumping pool.generation whenever the devices (or their taints) change.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "devices/device_health.h"
#include "devices/mig_slices.h"
#include "model/node_device.h"
#include "tessera/gpu_info.h"
#include "tessera/kube/kube_client.h"
#include "tessera/status.h"
#include "tessera/vgpu_config/driver_name.h"

namespace tessera::agent {

inline constexpr size_t kMaxDevicesPerSlice = 128;
// kube-apiserver's ResourceSliceMaxDevicesWithTaintsOrConsumesCounters: once one device of a slice
// has a taint, the slice may hold no more than this many devices.
inline constexpr size_t kMaxDevicesPerSliceWithTaints = 64;
inline constexpr char kUnhealthyTaintKey[] = "vgpu.tessera.dev/unhealthy";
inline constexpr char kUnhealthyTaintEffect[] = "NoSchedule";
// Memory's request policy: requests round up to whole MiB (the step), at least 256Mi (the min);
// the published total is the GPU's memory in whole MiB, so that the total, the default and the
// max are all on the step grid kube-apiserver requires (docs/node-agent.md, "ResourceSlices").
inline constexpr uint64_t kMemoryStep = 1ull << 20;
inline constexpr uint64_t kMemoryMin = 256ull << 20;

struct SliceIdentity {
  std::string driver = vgpu_config::kDriverName;
  std::string node_name;
  std::string node_uid;  // for ownerReferences (GET /api/v1/nodes/<name>)
};

// The taints of a device with this health: one for an Unhealthy device ({key, effect, and value
// "xid-<n>" when the report names an XID}; no timeAdded: the API server sets it), none otherwise.
nlohmann::json device_taints(const DeviceHealthReport& health);
// One device entry of a slice's spec.devices; `health` null or Healthy: no taints.
nlohmann::json build_device(const GpuInfo& gpu, const DeviceHealthReport* health = nullptr);
// A planned device (devices/mig_slices.h) of `gpu`: the whole GPU as build_device, a MIG device
// with its attributes and capacities; with its consumesCounters when it consumes `counters`.
nlohmann::json build_planned_device(const GpuInfo& gpu, const PlannedDevice& planned,
                                    const CounterSetPlan* counters,
                                    const DeviceHealthReport* health = nullptr);
// Full ResourceSlice objects (without resourceVersion), named "<node>-<driver>-<i>". `health`:
// the devices' reports (matched by device name; a MIG device without one has its parent's; a
// device without one is untainted). `mig`: the MIG strategy and state (null: none); dynamic MIG
// adds the counter sets, in the slice shape it names (devices/mig_slices.h).
std::vector<nlohmann::json> build_resource_slices(
    const std::vector<GpuInfo>& gpus, const SliceIdentity& identity, int64_t generation,
    const std::vector<DeviceHealthReport>& health = {}, const MigPublication* mig = nullptr);
// The devices share_spec.h checks allocations against (memory = the published memory), MIG
// devices included.
std::vector<NodeDevice> node_devices(const std::vector<GpuInfo>& gpus,
                                     const MigPublication* mig = nullptr);
// The memory a GPU is published with: its total rounded down to a whole MiB (the same on every
// GPU we know of, whose NVML totals are whole MiB).
uint64_t published_memory_bytes(const GpuInfo& gpu);
// "580.159.04" -> "580.159.4"; "9.0" -> "9.0.0" (semver: three numbers, no leading zeros).
std::string to_semver(const std::string& version);

class SlicePublisher {
 public:
  SlicePublisher(kube::KubeClient& kube, SliceIdentity identity)
      : kube_(kube), identity_(identity) {}
  // Makes the API's slices of this node and driver match `gpus` and their `health` (taints). Reads
  // the Node's UID once. A taint already published keeps the timeAdded the API server gave it.
  // Ok, or the first error (naming the request): the API's code, or kInternal for an answer
  // that is not the object asked for.
  Status publish(const std::vector<GpuInfo>& gpus,
                 const std::vector<DeviceHealthReport>& health = {},
                 const MigPublication* mig = nullptr);
  int64_t generation() const { return generation_; }
  int writes() const { return writes_; }  // creates + updates + deletes of the last publish()
  // The API server stored the slices without the taints it was sent (its DRADeviceTaints gate is
  // off: the default before Kubernetes 1.36). Those taints are then left out of later publishes
  // until the health changes (one try per change), so the pool does not churn.
  bool taints_dropped() const { return !dropped_taints_.is_null(); }

 private:
  kube::KubeClient& kube_;
  SliceIdentity identity_;
  int64_t generation_ = 0;
  int writes_ = 0;
  nlohmann::json dropped_taints_;  // device name -> taints the API server dropped; null: none
};

}  // namespace tessera::agent
