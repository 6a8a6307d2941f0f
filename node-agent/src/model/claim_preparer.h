// The seam between the kubelet-facing gRPC services (plugin/) and the share lifecycle (share/),
// kept below both so neither includes the other: the DRA services turn each claim of a kubelet
// batch into one call here and answer per claim, so a bad claim never fails the batch.
#pragma once

#include <string>
#include <vector>

#include "tessera/status.h"

namespace tessera::agent {

struct ClaimRef {
  std::string namespace_name;
  std::string uid;
  std::string name;
};

struct PreparedDevice {
  std::vector<std::string> request_names;
  std::string pool_name;
  std::string device_name;
  std::vector<std::string> cdi_device_ids;
  std::string share_id;  // empty when the allocation has none (v1beta1 never sends it)
};

// The claim's prepared devices, or why this claim failed (the plugin turns the Status into the
// claim's error in the kubelet response).
using PrepareResult = Result<std::vector<PreparedDevice>>;

class ClaimPreparer {
 public:
  virtual ~ClaimPreparer() = default;
  // Idempotent: kubelet retries. Must not throw.
  virtual PrepareResult prepare(const ClaimRef& claim) = 0;
  // Works from the agent's own checkpoint (the claim may be gone).
  virtual Status unprepare(const ClaimRef& claim) = 0;
};

}  // namespace tessera::agent
