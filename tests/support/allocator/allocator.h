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
// Partitionable devices (KEP-4815, shared counters), pinned to Kubernetes 1.36.2: the published
// mirror kubernetes/dynamic-resource-allocation at v0.36.2
// (b0162be5933a67898f582c979419d0b7dd9c75ee), which carries the fix "DRA: account for shared
// devices when rebuilding counters" (3caec458c1b4131a5b13b45ebd3edc353066e68d):
//   structured/internal/incubating/pools_incubating.go: GatherPools (a slice holding
//     sharedCounters is relevant for every node; the pool's slices sorted by name), buildPool
//     (slices with sharedCounters hold the pool's counter sets, the others its devices; the
//     devices of the pool's slices for other nodes are kept, since they consume its counters),
//     validateDeviceNames, getAndValidateCounterSets, validateDeviceCounterConsumption (a
//     duplicate device or counter set name, a reference to an unknown counter set or counter:
//     the whole pool is invalid; with no solution the allocation reports "invalid resource pools
//     were encountered" and, here, the pool and the reason upstream only logs);
//   structured/internal/incubating/allocator_incubating.go: allocateDevice (in use, then
//     counters, then taints, then capacity; skipCounterCheck: a device with
//     allowMultipleAllocations whose capacity is already in use, committed or in this call,
//     consumes its counters once, on its first share), checkAvailableCounters (per pool, once
//     per call: the counter sets less the consumesCounters of every allocated device of the
//     pool, each device once however many claims share it; this call's devices accumulate
//     consumption; every counter of every set of the pool is compared), deviceCapacityInUse,
//     deallocateCountersForDevice and the rollback (on backtracking a device of its own gives
//     its counters back, a share does not; a share's capacity entry goes when none is left);
//     validateDeviceRequest ("All" over an invalid pool is an error);
//   structured/internal/allocatedstate.go: IsDeviceAllocated (allocated for itself, or any
//     committed share of it, or committed consumed capacity: the 1.36.2 rule, so committed
//     shares count in a later call);
//   and kubernetes/kubernetes pkg/scheduler/framework/plugins/dynamicresources/
//   allocateddevices.go (030880a5dc5449403c6d1f0aa146a7dc21d6c6dc) foreachAllocatedDevice: how
//   allocated_claims become that state (admin-access results skipped; a result with a shareID
//   is a share, its consumedCapacity committed capacity; any other the device's alone).
// Kept as upstream has them: the counter caches are keyed by pool name alone (two drivers' pools
// of one name share them); a device refused for an untolerated taint keeps the counters it was
// just given for the rest of the call (allocateDevice returns before taking them back); a
// backtracked first share keeps its counters for the rest of the call.
// Counter values are whole numbers here (a fractional one is refused with an error, not
// rounded). The 1.34 shape (sharedCounters beside devices in one slice) is what 1.36.2 makes of
// it: the slice counts as a counter slice and its devices are never offered (the API server
// stand-in refuses such a slice, as kube-apiserver 1.35+ does).
// With DRAConsumableCapacity, DRAPrioritizedList, DRADeviceTaints and DRAPartitionableDevices on
// (Kubernetes 1.36's defaults; the gates are not switchable here). Not ported (nothing of ours
// uses them): constraints (matchAttribute, distinctAttribute), admin access (requests; committed
// admin-access results are skipped), binding conditions, per-device node selection
// (perDeviceNodeSelection and a device slice's nodeSelector are refused with an error; a counter
// slice's node selection is not looked at, as upstream), fractional capacity ranges, KEP-5963
// compatibility groups and the 1.37 partitionTypeAttribute.
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
  // ResourceSlices as the API server lists them: device slices and the slices that hold only
  // sharedCounters (every node's; the pool decides which count), all of them, not only this
  // node's.
  std::vector<nlohmann::json> slices;
  std::vector<nlohmann::json> device_classes;  // DeviceClasses
  std::string node_name;                       // the node the pod is being scheduled to
  // Claims already allocated (their status.allocation counts: devices in use, capacity consumed,
  // counters consumed by every device they hold, once per device however many share it).
  std::vector<nlohmann::json> allocated_claims;
  // The shareID of each new share; empty: a random version 4 UUID, as the scheduler makes.
  std::function<std::string()> share_id;
};

// The status.allocation for `claim`. A refusal is kFailedPrecondition ("cannot allocate all
// claims", as the scheduler reports it, then which request found no device, and the last device
// refused for counters with the counter it lacks: "device <driver>/<pool>/<device> needs counter
// <c> of counter set <s>, of which <n> is left and <m> would be consumed"; or, when a pool is
// invalid, "invalid resource pools were encountered: resource pool <driver>/<pool>: <reason>");
// a claim or slice the allocator cannot work with (unknown class, unsupported selector, "All"
// over an incomplete or invalid pool, a counter that is no whole number) is kInvalidArgument
// naming it.
Result<nlohmann::json> allocate(const AllocatorInput& input, const nlohmann::json& claim);

// `claim` with status.allocation set by allocate(), or the refusal.
Result<nlohmann::json> allocated(const AllocatorInput& input, const nlohmann::json& claim);

// What each counter set of the node's pools has left once the devices of `allocated_claims`
// have taken theirs, each device once (checkAvailableCounters' first step):
// {"<driver>/<pool>": {"<counter set>": {"<counter>": <int>}}}; pools without counter sets are
// left out. Negative: more consumed than the set holds. An incomplete or invalid pool is
// kFailedPrecondition naming it and why.
Result<nlohmann::json> counters_left(const AllocatorInput& input);

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
