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

#include "config/vgpu_config.h"

namespace tessera::agent {

// A GPU of this node as the agent publishes it (devices/ builds the list from NVML).
struct NodeDevice {
  std::string name;  // "gpu-<minor>"
  std::string uuid;  // "GPU-..."
  unsigned minor = 0;
  uint64_t memory_bytes = 0;
};

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
  VgpuConfig config;              // class configs, then claim configs, merged in API order

  // "<claimUID>-<device>-<shareID>" ("<claimUID>-<device>" without a shareID): the share
  // folder's name and the CDI device name.
  std::string name() const;
  bool operator==(const ShareSpec&) const = default;
};

struct ShareSpecInput {
  std::string claim_json;
  std::string expected_uid;
  std::string driver = kVgpuDriverName;
  std::string pool;  // this node's pool name (the node name)
  std::vector<NodeDevice> devices;
};

// Returns "" and fills `out` (in results order), or an error naming what is wrong.
std::string compute_share_specs(const ShareSpecInput& input, std::vector<ShareSpec>& out);

// True for strings safe as one path component and in a CDI device name: [A-Za-z0-9._-], not
// starting with '.', 1..253 bytes.
bool safe_name_component(const std::string& text);

}  // namespace tessera::agent
