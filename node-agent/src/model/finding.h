// What the out-of-band checks and the process watcher report about a share's processes, and what
// the agent does about it. Pure values: the checks (enforcement/), the eBPF watcher (watcher/),
// the metrics and the local API all speak these types.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "tessera/vgpu_config/vgpu_config.h"  // EnforcementPolicy: what the agent does with a finding

namespace tessera::agent {

enum class FindingKind : uint8_t {
  kOverMemoryLimit,   // the share holds more device memory (as NVML sees it) than its limit
  kUnshimmedProcess,  // a process uses the share's GPU but is not in its usage page
  kCorruptUsagePage,  // the usage page's header or slots are not what any shim writes
  kUsageDisagrees,    // a slot claims a figure NVML contradicts (beyond the context overhead)
  kOverCoresLimit,    // the share used more GPU time than its burst for longer than the grace
  // A process holds memory on a GPU and belongs to no share of it (a pod without a claim, a host
  // process): never killed, it is not a tenant's; its memory comes out of what shares were
  // promised.
  kUnaccountedProcess,
  // Reclaim (docs/node-agent.md): a process of a share above its memory request, evicted because a
  // share within its request cannot get memory on the GPU. Not a tenant's fault: the bytes were
  // lent. Killed whatever the enforcement policy (the lending's terms, not a punishment).
  kReclaimEviction,
  // The driver's partition on a share container's cgroup is missing or differs from the share's
  // request and limit (repaired: set again; docs/driver-partitions.md).
  kPartitionDrift,
  // The driver's currentUsed for a share's cgroups and the shim's count (the usage page's sum)
  // differ by more than a context's cost.
  kLayersDisagree,
};
inline constexpr FindingKind kAllFindingKinds[] = {
    FindingKind::kOverMemoryLimit, FindingKind::kUnshimmedProcess, FindingKind::kCorruptUsagePage,
    FindingKind::kUsageDisagrees,  FindingKind::kOverCoresLimit,   FindingKind::kUnaccountedProcess,
    FindingKind::kReclaimEviction, FindingKind::kPartitionDrift,   FindingKind::kLayersDisagree};

// The `kind` label of tessera_findings_total and the word in log lines and events.
constexpr std::string_view finding_kind_name(FindingKind kind) {
  switch (kind) {
    case FindingKind::kOverMemoryLimit:
      return "over_memory_limit";
    case FindingKind::kUnshimmedProcess:
      return "unshimmed_process";
    case FindingKind::kCorruptUsagePage:
      return "corrupt_usage_page";
    case FindingKind::kUsageDisagrees:
      return "usage_disagrees";
    case FindingKind::kOverCoresLimit:
      return "over_cores_limit";
    case FindingKind::kUnaccountedProcess:
      return "unaccounted_process";
    case FindingKind::kReclaimEviction:
      return "reclaim_eviction";
    case FindingKind::kPartitionDrift:
      return "partition_drift";
    case FindingKind::kLayersDisagree:
      return "layers_disagree";
  }
  return "unknown";
}

struct Finding {
  FindingKind kind = FindingKind::kOverMemoryLimit;
  int host_pid = 0;  // the offending process on the host; 0 = the share as a whole
  // /proc/<host_pid>/stat field 22 when the finding was made (0 = unknown): a kill is sent only
  // to a process with this start time, never to a later process that reused the pid.
  uint64_t host_pid_start_time = 0;
  std::string share;  // share folder name (ShareSpec id)
  std::string claim_namespace;
  std::string claim_name;
  std::string claim_uid;
  std::string pod;      // namespace/name where known, else empty
  std::string pod_uid;  // the pod its cgroup names, where the share's pods do not say (unaccounted)
  uint64_t bytes = 0;   // device memory NVML says the process holds (unaccounted_process)
  std::string gpu_uuid;       // empty when the finding is not about one GPU
  std::string detail;         // one human sentence: the figures that made it a finding
  std::string reclaimed_for;  // reclaim_eviction: the share (folder name) that asked for memory
};

// Where findings go: the agent's policy (log, count, kill), the local API's event stream.
class FindingHandler {
 public:
  virtual ~FindingHandler() = default;
  virtual void handle(const Finding& finding) = 0;
};

}  // namespace tessera::agent
