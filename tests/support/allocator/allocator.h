// kube-scheduler's structured DRA allocator, ported for the tests: given the published
// ResourceSlices, the DeviceClasses and a ResourceClaim (resource.k8s.io/v1), it returns the
// status.allocation the scheduler would write, or its refusal with a reason. The node agent's
// tests get their allocated claims from it (tests/support/apiserver/claim_fixture.h), so what the
// agent is handed is what the scheduler writes, not what we believe it writes.
//
// Ported from kubernetes/kubernetes, staging/src/k8s.io/dynamic-resource-allocation/structured/:
//   internal/incubating/allocator_incubating.go (commit 03ab440c41a8098613d2149f10b367c7f7ce32c8):
//     Allocate (results in request order, class configs once per class as FromClass, then the
//     claim's configs as FromClaim, `requests` cleared when a config covers every request, the
//     node selector), validateDeviceRequest (ExactCount / All; "All" over an incomplete pool is
//     an error), allocateOne (requests in order; firstAvailable subrequests tried in order, the
//     result named "<request>/<subrequest>"; devices tried pool by pool, slice by slice, in
//     order, with backtracking), isSelectable (class selectors, then the request's),
//     allocateDevice (a device without allowMultipleAllocations is used once; one with it may
//     take several requests of one claim and of other claims, each result gets a new shareID
//     and the consumedCapacity of every capacity of the device), taintPreventsAllocation
//     (NoSchedule and NoExecute taints must be tolerated), createNodeSelector;
//   internal/incubating/consumable_capacity.go (commit 0c8a1b073dc32ebfc32004fd7d77c8d7ba03df8c):
//     cmpRequestOverCapacity (the sum of what is allocated, what this run allocates and this
//     request, per capacity, at most the value), resolveCapacityName (a request's name with or
//     without the driver's domain), capacityNameForStatus (the device's spelling),
//     calculateConsumedQuantity (no request: requestPolicy.default, else the whole value),
//     roundUpRange (below min: min; else min + k*step rounded up, in the step's format),
//     roundUpValidValues, violatesPolicy (above max, off the step grid, not a valid value);
//   internal/allocatedstate.go (commit 355c2235074c96e340b77b8b670fffe8705bd2ca): GenerateShareID
//     (uuid.NewUUID(): a random RFC 4122 version 4 UUID), the capacity already consumed by
//     allocated claims.
// With DRAConsumableCapacity, DRAPrioritizedList and DRADeviceTaints on (Kubernetes 1.36's
// defaults). Not ported (nothing of ours uses them): constraints (matchAttribute,
// distinctAttribute), admin access, counters (partitionable devices), binding conditions,
// per-device node selection, fractional capacity ranges.
//
// CEL: the selectors our DeviceClasses, samples and fixtures use, evaluated as the scheduler's CEL
// environment would: `device.driver`, `device.allowMultipleAllocations`,
// `device.attributes["<domain>"].<name>` (string, int, bool; a string's `.startsWith("...")`),
// `device.capacity["<domain>"].<name>`
// with `.compareTo(quantity("<q>"))`, literals, `== != < <= > >=`, `&& || !` and parentheses. An
// expression outside that is refused with an error naming it, never taken as a match.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/status.h"

namespace tessera::testing::allocator {

struct AllocatorInput {
  std::vector<nlohmann::json> slices;          // ResourceSlices as the API server lists them
  std::vector<nlohmann::json> device_classes;  // DeviceClasses
  std::string node_name;                       // the node the pod is being scheduled to
  // Claims already allocated (their status.allocation counts: devices in use, capacity consumed).
  std::vector<nlohmann::json> allocated_claims;
  // The shareID of each new share; empty: a random version 4 UUID, as the scheduler makes.
  std::function<std::string()> share_id;
};

// The status.allocation for `claim`. A refusal is kFailedPrecondition ("cannot allocate all
// claims", as the scheduler reports it, then which request found no device); a claim or slice the
// allocator cannot work with (unknown class, unsupported selector, "All" over an incomplete pool)
// is kInvalidArgument naming it.
Result<nlohmann::json> allocate(const AllocatorInput& input, const nlohmann::json& claim);

// `claim` with status.allocation set by allocate(), or the refusal.
Result<nlohmann::json> allocated(const AllocatorInput& input, const nlohmann::json& claim);

// A random version 4 UUID (what the scheduler's uuid.NewUUID gives).
std::string random_share_id();

// One CEL selector against one device of `driver`: true/false, or kInvalidArgument naming the
// expression where it is outside the subset above.
Result<bool> device_matches(const std::string& expression, const std::string& driver,
                            const nlohmann::json& device);

// The capacity a request consumes from one device capacity ({value, requestPolicy}): `request`
// null = not requested. The quantity in the form the scheduler writes it (canonical, in the
// step's format when a validRange rounded it), or an error when it is not a quantity.
Result<std::string> consumed_quantity(const nlohmann::json* request,
                                      const nlohmann::json& capacity);

}  // namespace tessera::testing::allocator
