// One scrape: the agent's state turned into the exposition. The share list is a copy of the
// checkpoint (taken under the share manager's in-memory lock, which is held only for the copy), the
// pages are read afterwards without any lock, so a scrape never holds what a prepare needs; the
// cost is one limits-page and one usage-page read per share folder (linear in shares and their
// processes) and three NVML calls per GPU.
//
// The node's state is read anew on every scrape, so its series are built then, as a
// prometheus::Collectable that returns fresh families (MetricsCollector): a share unprepared since
// the last scrape has no series left behind, as a prometheus::Family of Gauges set on change would
// keep until removed by hand.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <prometheus/collectable.h>

#include "devices/coexistence.h"
#include "devices/device_health.h"
#include "devices/partition_capability.h"
#include "enforcement/enforcement_handler.h"
#include "enforcement/partition_check.h"
#include "metrics/gpu_stats.h"
#include "metrics/request_metrics.h"
#include "model/node_device.h"
#include "share/checkpoint.h"
#include "tessera/version.h"

namespace tessera::agent {

struct MetricsSources {
  std::string node_name;
  std::string shares_dir;                  // "<state>/shares"
  std::function<Checkpoint()> checkpoint;  // the prepared claims (ShareManager::checkpoint)
  std::function<std::vector<NodeDevice>()> devices;  // the published GPUs
  std::function<DeviceHealthSnapshot()> health;      // null: every GPU unknown
  NvmlGpuStats* gpu_stats = nullptr;                 // null: no NVML figures
  const RequestMetrics* requests = nullptr;          // null: no request figures
  // tessera_build_info's labels: the build's (tessera/version.h) unless a test sets others.
  std::string version{kVersion};
  std::string revision{kGitCommit};           // the git commit; "" when the build did not know it
  const FindingCounters* findings = nullptr;  // null: every kind 0
  // Per GPU UUID, the memory of processes of no share (OutOfBandChecker::unaccounted_memory);
  // null or a GPU absent (no check ran, NVML did not answer): no series, never a 0 that means
  // "not known".
  std::function<std::map<std::string, uint64_t>()> unaccounted;
  // Per GPU UUID, the processes killed under reclaim (EnforcementHandler::reclaim_evictions); a
  // GPU absent, or null: 0.
  std::function<std::map<std::string, uint64_t>()> reclaim_evictions;
  // Kubernetes Events not written (kube::EventRecorder: dropped + failed); null: 0.
  std::function<uint64_t()> kube_events_dropped;
  // The driver's partitions: the capability per GPU (null: none) and the partition check's
  // figures per share and GPU (null: no check runs).
  const PartitionCapability* partition_capability = nullptr;
  std::function<PartitionViews()> partitions;
  // The GPUs withheld for another allocator (NodeAgent::withheld_gpus); null: none.
  std::function<std::vector<WithheldGpu>()> withheld;
};

// The families of one scrape, every metric of the table in its order (exposition.h).
class MetricsCollector final : public prometheus::Collectable {
 public:
  // `sources` outlive the collector.
  explicit MetricsCollector(const MetricsSources& sources) : sources_(sources) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const MetricsSources& sources_;
};

// The exposition text of one scrape (MetricsCollector through prometheus::TextSerializer).
std::string collect_metrics(const MetricsSources& sources);

}  // namespace tessera::agent
