// The pure step of prepare: what a ResourceClaim means on this node. Deterministic, no I/O:
// (claim JSON as GET /apis/resource.k8s.io/v1/namespaces/<ns>/resourceclaims/<name> returns it,
// the UID kubelet asked for, the driver name, the node's devices) -> one ShareSpec per allocation
// result of this driver. Shares are keyed by (claim UID, pool, device, shareID), never by device
// name alone: two shares of one device in one claim stay distinct.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/node_device.h"
#include "tessera/vgpu_config/driver_name.h"
#include "tessera/vgpu_config/vgpu_config.h"

namespace tessera::agent {

struct ShareSpec {
  std::string claim_uid;
  std::string pool;
  std::string device;
  std::string share_id;  // "" when the allocation has none (consumable capacity off)
  std::vector<std::string> request_names;
  std::string uuid;
  unsigned minor = 0;
  // From consumedCapacity. Absent capacity = no limit of that kind: the allocation then holds
  // the whole device (DRAConsumableCapacity off, or a capacity the device does not publish).
  std::optional<uint64_t> memory_bytes;
  std::optional<uint32_t> cores;  // percent 0..100
  // A share of a MIG device: its instance (the node device's, then the IDs prepare created for a
  // dynamic one); uuid is then the MIG UUID and minor the parent's.
  std::optional<MigDeviceRef> mig;
  vgpu_config::VgpuConfig config;  // class configs, then claim configs, merged in API order
  // The consumed capacities are the share's requests; the config may raise its limits above them
  // (docs/resource-model.md). Both, resolved: compute_share_specs checked them against the GPU.
  vgpu_config::ShareLimits limits() const;
  // The share folder this share's limits live in, when it is shared with other shares of the
  // claim (the first one's name); "" = its own folder, name(). See compute_share_specs.
  std::string folder;

  // "<claimUID>-<device>-<shareID>" ("<claimUID>-<device>" without a shareID): the CDI device
  // name, and the share folder's name unless `folder` says otherwise.
  std::string name() const;
  std::string folder_name() const { return folder.empty() ? name() : folder; }
  // The merged config's sharing, defaults applied (Quota; the Default interval).
  vgpu_config::SharingStrategy strategy() const {
    return config.strategy.value_or(vgpu_config::SharingStrategy::kQuota);
  }
  vgpu_config::TimeSlice time_slice() const {
    return config.time_slice.value_or(vgpu_config::TimeSlice::kDefault);
  }
  bool operator==(const ShareSpec&) const = default;
};

struct ShareSpecInput {
  std::string claim_json;
  std::string expected_uid;
  std::string driver = vgpu_config::kDriverName;
  std::string pool;  // this node's pool name (the node name)
  std::vector<NodeDevice> devices;
  // The agent's --tenant-* flags: bounds on every share of this node, tightened by each class's
  // (docs/resource-model.md, "Who sets what").
  vgpu_config::TenantBounds node_bounds;
};

// A pod the claim is reserved for (status.reservedFor[] entries with resource "pods"; the pods
// are in the claim's namespace). The out-of-band checks map a process to its share through the
// pod UID in its cgroup path.
struct PodRef {
  std::string name;
  std::string uid;
  bool operator==(const PodRef&) const = default;
};

// The claim's shares in results order, or an error naming what is wrong: kFailedPrecondition when
// the claim is not (or no longer) the one kubelet asked for or is not allocated yet, kNotFound for
// a device this node does not have, kInvalidArgument for everything else the claim says wrongly.
//
// Share folders: a container is pointed at one folder (TESSERA_SHARE_DIR), so when it is given
// several shares of a claim (a request for two GPUs) they must all be in that folder. Quota
// shares of a claim with the same config on distinct GPUs are therefore grouped into one folder
// whose limits page lists each GPU with its own limits (the page holds up to 16); shares of one
// GPU (two tenants' shares of a device in one claim) and MPS / TimeSlicing shares keep their own.
//
// Bounds: each share's merged config is held to the bounds of its class configs and
// `input.node_bounds` (clamp_to_bounds: a field past its bound gets the bound, even where the
// webhook was bypassed). `clamped`, when given, gets one line per field changed, with the result's
// path, for the agent's log.
Result<std::vector<ShareSpec>> compute_share_specs(const ShareSpecInput& input,
                                                   std::vector<std::string>* clamped = nullptr);

// The claim's shares by share folder, in order of first appearance (each folder's shares in
// results order).
std::vector<std::vector<ShareSpec>> shares_by_folder(const std::vector<ShareSpec>& shares);

// True for strings safe as one path component and in a CDI device name: [A-Za-z0-9._-], not
// starting with '.', 1..253 bytes.
bool safe_name_component(const std::string& text);

}  // namespace tessera::agent
