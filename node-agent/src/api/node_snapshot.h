// The node as the local API lists it (ListSharesResponse): the published GPUs with NVML's figures
// and the health board's state, and every prepared share folder with its limits, the usage its
// processes wrote, and those processes mapped to host pids. Built as a /metrics scrape is
// (metrics/collector.h): a copy of the checkpoint, then the share folders read with the one reader
// and builder (tessera/share_folder/share_view.h, shared with the CLI's local mode) without any
// lock of the agent's, so listing never delays a prepare.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "devices/device_health.h"
#include "devices/partition_capability.h"
#include "enforcement/partition_check.h"
#include "metrics/gpu_stats.h"
#include "model/finding.h"
#include "model/node_device.h"
#include "share/checkpoint.h"
#include "tessera/node/v1/node_api.pb.h"

namespace tessera::agent {

struct NodeSnapshotSources {
  std::string node_name;
  std::string shares_dir;                  // "<state>/shares"
  std::function<Checkpoint()> checkpoint;  // the prepared claims (ShareManager::checkpoint)
  std::function<std::vector<NodeDevice>()> devices;  // the published GPUs
  std::function<DeviceHealthSnapshot()> health;      // null: every GPU's health unknown
  NvmlGpuStats* gpu_stats = nullptr;                 // null: no NVML figures
  std::string proc_root = "/proc";                   // host pids and commands of the processes
  // The enforcement policy of a share whose VgpuConfig names none (--enforcement-default).
  EnforcementPolicy default_policy = EnforcementPolicy::kReport;
  // Per GPU UUID, the memory of processes of no share (OutOfBandChecker::unaccounted_memory);
  // null or a GPU absent: Gpu.unaccounted_memory_bytes left unset (not known).
  std::function<std::map<std::string, uint64_t>()> unaccounted;
  // The driver's partitions: the capability per GPU (null: none anywhere) and the partition
  // check's figures per share and GPU (null: no check runs).
  const PartitionCapability* partition_capability = nullptr;
  std::function<PartitionViews()> partitions;
};

// One snapshot, stamped `unix_ms`. Shares are listed by folder (a claim's Quota shares of several
// GPUs share one folder: one Share with a device each), in checkpoint order; a claim still being
// prepared is not listed.
tessera::node::v1::ListSharesResponse read_node_snapshot(const NodeSnapshotSources& sources,
                                                         std::int64_t unix_ms);

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
