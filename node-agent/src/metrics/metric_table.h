// Every metric the node agent exports, declared once: name, type, help and label names. The
// prometheus-cpp families (exposition.h, and the registry of request_metrics.h) take their names,
// help and labels from here;
// the tests check the naming rules on this table and docs/node-agent.md's Metrics section against
// it (metrics_markdown_table), so the code, the endpoint and the doc cannot disagree.
#pragma once

#include <array>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace tessera::agent {

enum class MetricType { kCounter, kGauge, kHistogram };

// Which labels a metric's series carry, in this order.
enum class LabelSet {
  kNone,
  kShare,     // namespace, claim, share, pod, uuid, node
  kShareQos,  // the share's labels, then class (qos_class.h: guaranteed, burstable, best-effort)
  kGpu,       // uuid, device, node
  kResult,    // result: "ok" or "error"
  kBuild,     // version, revision (the git commit)
  kFinding,   // kind (model/finding.h finding_kind_name), node
  kWithheld,  // uuid, device, node, reason (devices/coexistence.h: device-plugin, other-dra-driver,
              // compute-mode)
  kMigInstance,  // uuid, device, node (as kGpu), then parent_uuid, profile, gpu_instance,
                 // compute_instance
};

// The order of kMetricTable below (checked at compile time).
enum class MetricId : size_t {
  kShareMemoryUsedBytes,
  kShareMemoryLimitBytes,
  kShareMemoryRequestBytes,
  kShareCoresRequestRatio,
  kShareCoresLimitRatio,
  kShareGpuTimeSecondsTotal,
  kShareThrottledSecondsTotal,
  kShareLaunchesTotal,
  kShareAllocationsDeniedTotal,
  kShareProcesses,
  kShareUsageReadable,
  kShareQosClass,
  kShareMemoryDriverHeld,
  kShareDriverMemoryUsedBytes,
  kGpuMemoryUsedBytes,
  kGpuMemoryTotalBytes,
  kGpuUtilizationRatio,
  kGpuHealthy,
  kGpuShares,
  kGpuUnaccountedMemoryBytes,
  kGpuDriverPartitions,
  kGpuWithheld,
  kMigInstanceInfo,
  kPrepareRequestsTotal,
  kPrepareDurationSeconds,
  kUnprepareRequestsTotal,
  kUnprepareDurationSeconds,
  kBuildInfo,
  kFindingsTotal,
  kReclaimEvictionsTotal,
  kKubeEventsDroppedTotal,
  kCount,
};
inline constexpr size_t kMetricCount = static_cast<size_t>(MetricId::kCount);

struct MetricInfo {
  MetricId id;
  std::string_view name;
  MetricType type;
  LabelSet labels;
  std::string_view help;
};

inline constexpr std::array<MetricInfo, kMetricCount> kMetricTable = {{
    {MetricId::kShareMemoryUsedBytes, "tessera_share_memory_used_bytes", MetricType::kGauge,
     LabelSet::kShare,
     "Device memory the share's processes hold on the GPU (the sum over the usage page's process "
     "slots, as the shim enforces it)"},
    {MetricId::kShareMemoryLimitBytes, "tessera_share_memory_limit_bytes", MetricType::kGauge,
     LabelSet::kShare,
     "Memory limit of the share on the GPU: its wall (the GPU's memory when the claim sets none)"},
    {MetricId::kShareMemoryRequestBytes, "tessera_share_memory_request_bytes", MetricType::kGauge,
     LabelSet::kShare,
     "Memory request of the share on the GPU: what it is guaranteed; above it, up to the limit, "
     "it borrows"},
    {MetricId::kShareCoresRequestRatio, "tessera_share_cores_request_ratio", MetricType::kGauge,
     LabelSet::kShare,
     "Cores request of the share: the part of the GPU's time it is guaranteed, 0 to 1 (0 = "
     "best-effort)"},
    {MetricId::kShareCoresLimitRatio, "tessera_share_cores_limit_ratio", MetricType::kGauge,
     LabelSet::kShare,
     "Cores limit of the share: the part of the GPU's time it may reach while others leave it "
     "idle, 0 to 1 (the request when it may not burst)"},
    {MetricId::kShareGpuTimeSecondsTotal, "tessera_share_gpu_time_seconds_total",
     MetricType::kCounter, LabelSet::kShare,
     "GPU time the share's processes held the GPU, as its compute meter measured it (the agent's "
     "or the shim's)"},
    {MetricId::kShareThrottledSecondsTotal, "tessera_share_throttled_seconds_total",
     MetricType::kCounter, LabelSet::kShare,
     "Wall time the share's launching threads waited at a closed compute gate (summed over its "
     "processes)"},
    {MetricId::kShareLaunchesTotal, "tessera_share_launches_total", MetricType::kCounter,
     LabelSet::kShare, "Kernel and graph launches of the share's processes"},
    {MetricId::kShareAllocationsDeniedTotal, "tessera_share_allocations_denied_total",
     MetricType::kCounter, LabelSet::kShare,
     "Device memory allocations the shim refused because they would exceed the share's limit"},
    {MetricId::kShareProcesses, "tessera_share_processes", MetricType::kGauge, LabelSet::kShare,
     "Processes holding a slot in the share's usage page (a killed process counts until its slot "
     "is reclaimed)"},
    {MetricId::kShareUsageReadable, "tessera_share_usage_readable", MetricType::kGauge,
     LabelSet::kShare,
     "1 when the share's usage page was read whole (or no process has written it yet), 0 when it "
     "could not be: its usage series are then left out, never reported as 0"},
    {MetricId::kShareQosClass, "tessera_share_qos_class", MetricType::kGauge, LabelSet::kShareQos,
     "1 for the share's quality-of-service class (guaranteed, burstable or best-effort), from its "
     "requests and limits"},
    {MetricId::kShareMemoryDriverHeld, "tessera_share_driver_partition", MetricType::kGauge,
     LabelSet::kShare,
     "1 when the driver's partition holds the share's memory on each container's cgroup beside "
     "the shim (layer both), 0 when the shim alone does (docs/driver-partitions.md)"},
    {MetricId::kShareDriverMemoryUsedBytes, "tessera_share_driver_memory_used_bytes",
     MetricType::kGauge, LabelSet::kShare,
     "Device memory the driver counts for the share's container cgroups (currentUsed, contexts "
     "included) at the last partition check; only where the driver holds the share"},
    {MetricId::kGpuMemoryUsedBytes, "tessera_gpu_memory_used_bytes", MetricType::kGauge,
     LabelSet::kGpu, "Device memory in use on the GPU (NVML), all processes"},
    {MetricId::kGpuMemoryTotalBytes, "tessera_gpu_memory_total_bytes", MetricType::kGauge,
     LabelSet::kGpu, "Device memory of the GPU (NVML)"},
    {MetricId::kGpuUtilizationRatio, "tessera_gpu_utilization_ratio", MetricType::kGauge,
     LabelSet::kGpu,
     "Part of the last sample period during which a kernel ran on the GPU, 0 to 1 (NVML's whole "
     "percents); no series for a GPU in MIG mode or a MIG instance, where NVML has none"},
    {MetricId::kGpuHealthy, "tessera_gpu_healthy", MetricType::kGauge, LabelSet::kGpu,
     "1 when the GPU is reported Healthy to kubelet, 0 when Unhealthy or not yet known"},
    {MetricId::kGpuShares, "tessera_gpu_shares", MetricType::kGauge, LabelSet::kGpu,
     "Prepared shares of the GPU"},
    {MetricId::kGpuUnaccountedMemoryBytes, "tessera_gpu_unaccounted_memory_bytes",
     MetricType::kGauge, LabelSet::kGpu,
     "Device memory held on the GPU by processes of no share of it (a pod without a claim, a host "
     "process), as NVML shows it at the last out-of-band check: it comes out of what the shares "
     "were promised"},
    {MetricId::kGpuDriverPartitions, "tessera_gpu_driver_partitions", MetricType::kGauge,
     LabelSet::kGpu,
     "1 when the driver holds per-cgroup memory partitions on the GPU (R615, cgroup v2, the "
     "agent's probe at start), 0 when shares there are held by the shim alone"},
    {MetricId::kGpuWithheld, "tessera_gpu_withheld", MetricType::kGauge, LabelSet::kWithheld,
     "1 for a GPU this agent does not publish because another allocator hands it out (reason: "
     "device-plugin, other-dra-driver, or compute-mode set outside Tessera; "
     "docs/coexistence.md); no series once it is published"},
    {MetricId::kMigInstanceInfo, "tessera_mig_instance_info", MetricType::kGauge,
     LabelSet::kMigInstance,
     "1 for each MIG instance the agent publishes as a device; its tessera_gpu_* series carry the "
     "same uuid and device (the instance's), and these labels join them to the GPU they sit on "
     "(parent_uuid), the profile and NVML's GPU and compute instance ids (empty while a "
     "dynamic instance is not created)"},
    {MetricId::kPrepareRequestsTotal, "tessera_prepare_requests_total", MetricType::kCounter,
     LabelSet::kResult, "NodePrepareResources claims handled, by result"},
    {MetricId::kPrepareDurationSeconds, "tessera_prepare_duration_seconds", MetricType::kHistogram,
     LabelSet::kNone, "Time to prepare one claim"},
    {MetricId::kUnprepareRequestsTotal, "tessera_unprepare_requests_total", MetricType::kCounter,
     LabelSet::kResult, "NodeUnprepareResources claims handled, by result"},
    {MetricId::kUnprepareDurationSeconds, "tessera_unprepare_duration_seconds",
     MetricType::kHistogram, LabelSet::kNone, "Time to unprepare one claim"},
    {MetricId::kBuildInfo, "tessera_build_info", MetricType::kGauge, LabelSet::kBuild,
     "Always 1; the labels name the agent's build: version (CMake's project version) and "
     "revision (the git commit at configure time, empty when not known)"},
    {MetricId::kFindingsTotal, "tessera_findings_total", MetricType::kCounter, LabelSet::kFinding,
     "Findings of the out-of-band checks (and the process watcher) since the agent started, by "
     "kind: a share over its memory limit or cores limit, an unshimmed process, a corrupt or "
     "lying usage page, a process of no share on a GPU (unaccounted, never killed), a driver "
     "partition missing or changed (repaired), the driver's and the shim's counts apart, a "
     "borrower evicted under reclaim"},
    {MetricId::kReclaimEvictionsTotal, "tessera_reclaim_evictions_total", MetricType::kCounter,
     LabelSet::kGpu,
     "Processes of shares above their memory request killed on the GPU so that a share within its "
     "request could get memory (reclaim), since the agent started"},
    {MetricId::kKubeEventsDroppedTotal, "tessera_kube_events_dropped_total", MetricType::kCounter,
     LabelSet::kNone,
     "Kubernetes Events on pods (kills, evictions, refusals) not written since the agent started: "
     "the recorder's queue was full, or the API server refused them or could not be reached"},
}};

constexpr bool table_in_id_order() {
  for (size_t i = 0; i < kMetricCount; ++i)
    if (static_cast<size_t>(kMetricTable[i].id) != i) return false;
  return true;
}
static_assert(table_in_id_order(), "kMetricTable must list the metrics in MetricId order");

const MetricInfo& metric_info(MetricId id);
std::span<const std::string_view> label_names(LabelSet labels);
std::string_view type_name(MetricType type);  // "counter", "gauge", "histogram"

// The durations' bucket bounds (seconds): prepare and unprepare take milliseconds when only files
// are written and seconds when an MPS daemon starts or the API server is slow.
inline constexpr std::array<double, 12> kRequestDurationBuckets = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10};

// The table as the Markdown table docs/node-agent.md carries (name, type, labels, help).
std::string metrics_markdown_table();

}  // namespace tessera::agent
