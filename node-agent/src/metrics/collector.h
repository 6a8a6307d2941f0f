// One scrape: the node as the last pass observed it (observe/node_observation.h: the checkpoint's
// copy, each share folder's pages, NVML's figures per GPU, the health board) and the checks'
// judgment of it, turned into the exposition. A scrape reads nothing of the node itself: it shows
// what the check and the local API show, at the same moment (ObservationBoard::current takes a new
// observation only when the claims changed or the last one is stale).
//
// Its series are built then, as a prometheus::Collectable that returns fresh families
// (MetricsCollector): a share unprepared since the last scrape has no series left behind, as a
// prometheus::Family of Gauges set on change would keep until removed by hand.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <prometheus/collectable.h>

#include "devices/coexistence.h"
#include "devices/partition_capability.h"
#include "metrics/request_metrics.h"
#include "model/finding.h"
#include "model/partition_view.h"
#include "observe/node_observation.h"
#include "tessera/version.h"

namespace tessera::agent {

struct MetricsSources {
  std::string node_name;
  // The node as one pass observed it, and the checks' judgment (null: no check ran: no series of
  // theirs, never a 0 that means "not known"). Null: an empty node.
  std::function<ObservedNode()> observed;
  const RequestMetrics* requests = nullptr;  // null: no request figures
  // tessera_build_info's labels: the build's (tessera/version.h) unless a test sets others.
  std::string version{kVersion};
  std::string revision{kGitCommit};  // the git commit; "" when the build did not know it
  // The findings of a kind so far (the finding policy's counters); null: every kind 0.
  std::function<uint64_t(FindingKind)> findings;
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
