// The driver's partitions of the shares' containers, checked every --check-interval
// (docs/driver-partitions.md): for each partition the CDI hook recorded (share/partition_hook.h)
// of a prepared share on a GPU with the capability, the driver's limits on that container cgroup
// are read (read_partition). A missing or different partition is a partition_drift finding and is
// set again (apply_partitions: all or nothing, read back). A record whose cgroup is gone (the
// container ended; the runtime removed it) is dropped. Per share and GPU the pass keeps the
// driver's currentUsed (the sum over its containers' cgroups) beside the shim's count (the usage
// page's sum), and a difference of more than one context's cost (the measured one from the
// limits page, else the shim's default charge) is a layers_disagree finding. Each finding is
// handed to the FindingHandler once per episode. Kept apart from checker.cc: it reads no NVML
// process list, only the driver's per-cgroup figures.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "model/finding.h"
#include "model/partition_view.h"
#include "share/checkpoint.h"
#include "tessera/nvml.h"

namespace tessera::agent {

struct PartitionCheckOptions {
  std::string record_dir;                        // <state>/partitions
  std::string shares_dir;                        // <state>/shares
  std::set<std::string> gpus;                    // the GPUs with the capability
  uint64_t default_context_cost = 500ull << 20;  // kShimDefaultContextCharge
  bool repair = true;
};

struct PartitionCheckStats {
  uint64_t passes = 0;
  uint64_t findings = 0;
  uint64_t repairs = 0;
  uint64_t records_dropped = 0;
};

class PartitionCheck {
 public:
  // `session` and `handler` outlive the check.
  PartitionCheck(PartitionCheckOptions options, std::function<Checkpoint()> checkpoint,
                 const nvml::Session& session, FindingHandler& handler);

  // One pass; the findings it handed on.
  std::vector<Finding> check_once();
  // By (share name, GPU UUID), from the last pass.
  PartitionViews views() const;
  PartitionCheckStats stats() const;

 private:
  PartitionCheckOptions options_;
  std::function<Checkpoint()> checkpoint_;
  const nvml::Session& session_;
  FindingHandler& handler_;
  mutable std::mutex mutex_;
  PartitionViews views_;
  PartitionCheckStats stats_;
  std::set<std::string> episodes_;  // kind|share|gpu|cgroup reported and not cleared since
};

}  // namespace tessera::agent
