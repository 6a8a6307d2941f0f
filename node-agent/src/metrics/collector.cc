#include "metrics/collector.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>

#include "metrics/exposition.h"
#include "share/share_manager.h"
#include "tessera/log.h"
#include "tessera/qos_class.h"
#include "tessera/share_folder/snapshot.h"

namespace tessera::agent {

namespace {

constexpr double kNsPerSecond = 1e9;
constexpr double kPercent = 100;

// A MIG instance's GPU or compute instance id as a label: "" while a dynamic instance is not made.
std::string id_label(const std::optional<unsigned>& id) {
  return id ? std::to_string(*id) : "";
}

void write_shares(const MetricsSources& sources, const NodeObservation& node,
                  std::map<std::string, uint64_t>& shares, ScrapeFamilies& out) {
  const Checkpoint& checkpoint = node.checkpoint;
  const std::vector<NodeDevice>& devices = node.devices;
  const PartitionViews partitions = sources.partitions ? sources.partitions() : PartitionViews{};
  for (const auto& [claim_uid, entry] : checkpoint) {
    // A claim still being prepared may have no folder yet; its series appear when it completes.
    if (entry.state != ClaimState::kPrepareCompleted) continue;
    for (const ShareSpec& share : entry.shares) {
      ++shares[share.uuid];
      // The pass read each prepared share's folder once (a claim's shares of several GPUs
      // share one).
      const share_folder::ShareFolderSnapshot* folder =
          node.folder(node.shares_dir + "/" + share.folder_name());
      // The pod the claim was reserved for at prepare (status.reservedFor, in the checkpoint);
      // several (a shared claim): comma-separated; none known (an old checkpoint): empty.
      std::string pod;
      for (const PodRef& reserved : entry.pods) pod += (pod.empty() ? "" : ",") + reserved.name;
      const std::string labels[] = {entry.namespace_name, entry.name,       share.name(), pod,
                                    share.uuid,           sources.node_name};
      const share_folder::DeviceLimit limit = share_limits(share);
      double memory_limit = static_cast<double>(limit.memory_limit);
      if (limit.memory_limit == share::kUnlimited) {
        memory_limit = std::numeric_limits<double>::infinity();
        for (const NodeDevice& device : devices)
          if (device.uuid == share.uuid && device.memory_bytes > 0)
            memory_limit = static_cast<double>(device.memory_bytes);
      }
      out.add(MetricId::kShareMemoryLimitBytes, labels, memory_limit);
      out.add(MetricId::kShareMemoryRequestBytes, labels,
              limit.memory_request == share::kUnlimited
                  ? memory_limit
                  : static_cast<double>(std::min(limit.memory_request, limit.memory_limit)));
      // The limits page keeps whole percents; the metrics are ratios (0..1), as Prometheus's.
      out.add(MetricId::kShareCoresRequestRatio, labels, limit.cores_request / kPercent);
      out.add(MetricId::kShareCoresLimitRatio, labels,
              share::effective_cores_limit(limit.cores_request, limit.cores_limit) / kPercent);
      const std::string qos_labels[] = {
          labels[0],
          labels[1],
          labels[2],
          labels[3],
          labels[4],
          labels[5],
          std::string(qos_class_name(device_qos_class(limit.memory_request, limit.memory_limit,
                                                      limit.cores_request, limit.cores_limit)))};
      out.add(MetricId::kShareQosClass, qos_labels, uint64_t{1});
      const auto view = partitions.find({share.name(), share.uuid});
      const bool driver = view != partitions.end() && view->second.driver;
      out.add(MetricId::kShareMemoryDriverHeld, labels, uint64_t{driver ? 1u : 0u});
      if (driver) out.add(MetricId::kShareDriverMemoryUsedBytes, labels, view->second.driver_used);
      // A page that cannot be read whole (a tenant may truncate or replace it) leaves the usage
      // series out: 0 would read as "nothing used". Zero until a process has written the page.
      const bool readable = folder && folder->readable();
      out.add(MetricId::kShareUsageReadable, labels, uint64_t{readable ? 1u : 0u});
      if (!readable) continue;
      const share_folder::ShareFolderSnapshot& usage = *folder;
      const int index = usage.limits.device_index(share.uuid);
      const uint64_t memory =
          index >= 0 ? usage.usage.memory_bytes(static_cast<uint32_t>(index)) : 0;
      const uint64_t busy_ns = index >= 0 ? usage.gpu_busy_ns(static_cast<uint32_t>(index)) : 0;
      out.add(MetricId::kShareMemoryUsedBytes, labels, memory);
      out.add(MetricId::kShareGpuTimeSecondsTotal, labels,
              static_cast<double>(busy_ns) / kNsPerSecond);
      out.add(MetricId::kShareThrottledSecondsTotal, labels,
              static_cast<double>(usage.usage.throttled_ns()) / kNsPerSecond);
      out.add(MetricId::kShareLaunchesTotal, labels, usage.usage.launches());
      out.add(MetricId::kShareAllocationsDeniedTotal, labels, usage.usage.allocations_denied());
      out.add(MetricId::kShareProcesses, labels, uint64_t{usage.usage.processes()});
    }
  }
}

void write_gpus(const MetricsSources& sources, const NodeObservation& node,
                const Judgment* judgment, const std::map<std::string, uint64_t>& shares,
                ScrapeFamilies& out) {
  const DeviceHealthSnapshot& health = node.health;
  const std::map<std::string, uint64_t> unaccounted =
      judgment ? judgment->unaccounted_memory : std::map<std::string, uint64_t>{};
  const std::map<std::string, uint64_t> evictions =
      sources.reclaim_evictions ? sources.reclaim_evictions() : std::map<std::string, uint64_t>{};
  for (const NodeDevice& device : node.devices) {
    const std::string labels[] = {device.uuid, device.name, sources.node_name};
    if (device.mig) {
      const std::string mig_labels[] = {device.uuid,
                                        device.name,
                                        sources.node_name,
                                        device.mig->parent_uuid,
                                        device.mig->profile,
                                        id_label(device.mig->gi_id),
                                        id_label(device.mig->ci_id)};
      out.add(MetricId::kMigInstanceInfo, mig_labels, uint64_t{1});
    }
    if (const ObservedGpu* gpu = node.gpu(device.uuid); gpu && gpu->figures) {
      out.add(MetricId::kGpuMemoryUsedBytes, labels, gpu->figures->memory_used_bytes);
      out.add(MetricId::kGpuMemoryTotalBytes, labels, gpu->figures->memory_total_bytes);
      if (gpu->figures->utilization_percent)
        out.add(MetricId::kGpuUtilizationRatio, labels,
                *gpu->figures->utilization_percent / kPercent);
    }
    bool healthy = false;
    for (const DeviceHealthReport& report : health.devices)
      if (report.pool_name == sources.node_name && report.device_name == device.name)
        healthy = report.state == DeviceHealthState::kHealthy;
    out.add(MetricId::kGpuHealthy, labels, uint64_t{healthy ? 1u : 0u});
    const auto count = shares.find(device.uuid);
    out.add(MetricId::kGpuShares, labels, count == shares.end() ? uint64_t{0} : count->second);
    if (const auto bytes = unaccounted.find(device.uuid); bytes != unaccounted.end())
      out.add(MetricId::kGpuUnaccountedMemoryBytes, labels, bytes->second);
    const auto evicted = evictions.find(device.uuid);
    out.add(MetricId::kReclaimEvictionsTotal, labels,
            evicted == evictions.end() ? uint64_t{0} : evicted->second);
    bool partitioned = false;
    if (sources.partition_capability)
      if (const auto support = sources.partition_capability->gpus.find(device.uuid);
          support != sources.partition_capability->gpus.end())
        partitioned = support->second.supported;
    out.add(MetricId::kGpuDriverPartitions, labels, uint64_t{partitioned ? 1u : 0u});
  }
}

}  // namespace

std::vector<prometheus::MetricFamily> MetricsCollector::Collect() const {
  const MetricsSources& sources = sources_;
  ScrapeFamilies out;
  const ObservedNode observed = sources.observed ? sources.observed() : ObservedNode{};
  const NodeObservation empty;
  const NodeObservation& node = observed.observation ? *observed.observation : empty;
  std::map<std::string, uint64_t> shares;  // prepared shares per GPU UUID
  write_shares(sources, node, shares, out);
  write_gpus(sources, node, observed.judgment.get(), shares, out);
  if (sources.withheld)
    for (const WithheldGpu& gpu : sources.withheld()) {
      const std::string labels[] = {gpu.uuid, gpu.device, sources.node_name, gpu.reason};
      out.add(MetricId::kGpuWithheld, labels, uint64_t{1});
    }
  if (sources.requests)
    if (const Status merged = out.merge(sources.requests->Collect()); !merged.is_ok())
      log::error("request metrics left out of the scrape", {{"error", merged.message()}});
  const std::string build[] = {sources.version, sources.revision};
  out.add(MetricId::kBuildInfo, build, uint64_t{1});
  // Every kind from the start, 0 until its first finding (a rate() then sees the first one).
  for (const FindingKind kind : kAllFindingKinds) {
    const std::string labels[] = {std::string(finding_kind_name(kind)), sources.node_name};
    out.add(MetricId::kFindingsTotal, labels,
            sources.findings ? sources.findings(kind) : uint64_t{0});
  }
  out.add(MetricId::kKubeEventsDroppedTotal, {},
          sources.kube_events_dropped ? sources.kube_events_dropped() : uint64_t{0});
  return out.take();
}

std::string collect_metrics(const MetricsSources& sources) {
  return serialize(MetricsCollector(sources).Collect());
}

}  // namespace tessera::agent
