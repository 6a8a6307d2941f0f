// What changed between two snapshots of a node (ListSharesResponse), as local-API events: shares
// prepared and unprepared, allocations the shim denied and launch time spent throttled since the
// last snapshot, GPUs whose health changed. Pure (no I/O, no clock): the agent's API server runs it
// on each pass, and the `tessera events` command on the local `tessera run` shares without an
// agent, so both report the same events. Links only the node API protos.
#pragma once

#include <vector>

#include "tessera/node/v1/node_api.pb.h"

namespace tessera::node_events {

// The events from `before` to `after`, each stamped with after.sampled_unix_ms and no sequence
// (the event log numbers them). Order: health changes (by GPU order in `after`), unprepared shares
// (by order in `before`), then for each share of `after` in order: prepared, allocations denied,
// throttled. Per share and pass one ALLOCATION_DENIED with the count's increase (fields "denied",
// "total") and one THROTTLED with the throttled time's increase (fields "throttled_seconds",
// "total_seconds"); a counter that went down (a slot reused by a new process) counts from 0. A
// share newly in `after` gets only PREPARED: its counters so far are its start, not a change. A
// share with a read_error in either snapshot gets no counter events: its counters are unknown.
std::vector<tessera::node::v1::Event> snapshot_events(
    const tessera::node::v1::ListSharesResponse& before,
    const tessera::node::v1::ListSharesResponse& after);

// The event's share fields (share, namespace, claim, pod) taken from `share`.
void describe_share(const tessera::node::v1::Share& share, tessera::node::v1::Event& event);

// "prepared", "allocation_denied", ...: the kind as one lower-case word (text output, logs).
const char* event_kind_name(tessera::node::v1::Event::Kind kind);

}  // namespace tessera::node_events
