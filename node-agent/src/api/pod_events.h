// Kubernetes Events on the pods of a share (what `kubectl describe pod` shows) for what the agent
// did to it: each event of the local event log that is a kill, a reclaim eviction or an
// allocation the shim refused becomes a core/v1 Event about each pod its claim is reserved for
// (the claim itself when no pod is known), recorded through kube::EventRecorder (queued, never
// waiting on the API server; counted and rate limited as client-go does).
//
// Reasons (docs/node-agent.md, "Events"):
//   GpuQuotaKill      Warning  a process killed under the share's policy `kill` (over its memory
//                              or compute limit, or using the GPU without the shim)
//   GpuEvicted        Warning  a process killed by reclaim: its share held memory above its
//                              request that a share within its request needed
//   GpuReclaim        Normal   on the pods of the share that asked for memory within its
//                              request: a borrower's process was evicted for it
//   GpuMemoryRefused  Warning  the shim refused allocations that would pass the share's memory
//                              limit (one per agent pass that saw new refusals: identical, so
//                              the Event's count grows)
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "share/checkpoint.h"
#include "tessera/kube/event_recorder.h"
#include "tessera/node/v1/node_api.pb.h"

namespace tessera::agent {

inline constexpr char kEventComponent[] = "tessera-node-agent";
inline constexpr char kReasonQuotaKill[] = "GpuQuotaKill";
inline constexpr char kReasonEvicted[] = "GpuEvicted";
inline constexpr char kReasonMemoryRefused[] = "GpuMemoryRefused";
inline constexpr char kReasonReclaim[] = "GpuReclaim";

// The Kubernetes Event a local event is, without its object; nullopt for events that are none of
// the above (a finding only reported, a prepare, a health change, ...).
struct PodEventText {
  std::string type;
  std::string reason;
  std::string message;
};
std::optional<PodEventText> pod_event_text(const tessera::node::v1::Event& event);
// The GpuReclaim Event of an eviction (about the pods of fields["reclaimed_for"], the share that
// asked); nullopt for any other event.
std::optional<PodEventText> reclaim_event_text(const tessera::node::v1::Event& event);

// The objects the Events about `share` (a share's name or its folder's) are recorded on: the
// pods of its claim in `checkpoint` (Pod, v1, the claim's namespace, name and uid), or the claim
// itself (ResourceClaim, resource.k8s.io/v1) when it has none; empty when no claim of the
// checkpoint holds the share.
std::vector<kube::ObjectReference> share_event_objects(const Checkpoint& checkpoint,
                                                       const std::string& share);

class PodEvents {
 public:
  // `objects` resolves a share as share_event_objects does (the agent: over its checkpoint).
  PodEvents(kube::EventRecorder& recorder,
            std::function<std::vector<kube::ObjectReference>(const std::string& share)> objects)
      : recorder_(recorder), objects_(std::move(objects)) {}
  // For EventLog::set_observer: queues the Events of `event`, if it is one of the above.
  void observe(const tessera::node::v1::Event& event);

 private:
  kube::EventRecorder& recorder_;
  std::function<std::vector<kube::ObjectReference>(const std::string& share)> objects_;
};

}  // namespace tessera::agent
