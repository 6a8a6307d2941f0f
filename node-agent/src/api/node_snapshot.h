// The node as the local API lists it (ListSharesResponse): the published GPUs with NVML's figures
// and the health board's state, and every prepared share folder with its limits, the usage its
// processes wrote, and those processes mapped to host pids. A function of one observation of the
// node (observe/node_observation.h) and the checks' judgment of it, as a /metrics scrape is: the
// folders are filled by the one builder (tessera/share_folder/share_view.h, shared with the CLI's
// local mode) from the pages the pass read, host pids come from its walk of /proc, so listing reads
// nothing of the node but the commands of the processes it names.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "devices/partition_capability.h"
#include "model/finding.h"
#include "model/partition_view.h"
#include "observe/node_observation.h"
#include "tessera/node/v1/node_api.pb.h"

namespace tessera::agent {

struct NodeSnapshotSources {
  std::string node_name;
  // The enforcement policy of a share whose VgpuConfig names none (--enforcement-default).
  vgpu_config::EnforcementPolicy default_policy = vgpu_config::EnforcementPolicy::kReport;
  // The driver's partitions: the capability per GPU (null: none anywhere) and the partition
  // check's figures per share and GPU (null: no check runs).
  const PartitionCapability* partition_capability = nullptr;
  std::function<PartitionViews()> partitions;
};

// The snapshot of `observed`, stamped with its observation's wall time. Shares are listed by
// folder (a claim's Quota shares of several GPUs share one folder: one Share with a device each),
// in checkpoint order; a claim still being prepared is not listed. Gpu.unaccounted_memory_bytes
// is the judgment's (left unset without one: not known).
tessera::node::v1::ListSharesResponse node_snapshot(const ObservedNode& observed,
                                                    const NodeSnapshotSources& sources);

// Each device's cores_used_percent in `current`: its GPU time since `previous` (the same share and
// GPU) over the wall time between the two snapshots, in percent of the GPU. Left 0 where
// `previous` lacks the share, either snapshot could not read it (read_error) or the time did not
// move.
void fill_cores_used(const tessera::node::v1::ListSharesResponse& previous,
                     tessera::node::v1::ListSharesResponse& current);

// The share named `key` in `snapshot`: by share (folder) name, or "<namespace>/<claim>" (the first
// of that claim). Null when none.
const tessera::node::v1::Share* find_share(const tessera::node::v1::ListSharesResponse& snapshot,
                                           const std::string& key);

}  // namespace tessera::agent
