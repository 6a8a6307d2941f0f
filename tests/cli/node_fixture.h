// Nodes for the view tests: GPUs and shares built in a line each.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/node/v1/node_api.pb.h"
#include "views/node_source.h"

namespace tessera::cli::testing {

constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kMiB = 1ull << 20;
constexpr int64_t kSampledAt = 1'700'000'000'000;  // 2023-11-14T22:13:20Z

inline node::v1::Gpu& add_gpu(node::v1::ListSharesResponse& node, const std::string& uuid,
                              uint64_t used, uint64_t total, uint32_t utilization) {
  node::v1::Gpu& gpu = *node.add_gpus();
  gpu.set_uuid(uuid);
  gpu.set_name("NVIDIA H200");
  gpu.set_index(static_cast<uint32_t>(node.gpus_size() - 1));
  gpu.set_memory_used_bytes(used);
  gpu.set_memory_total_bytes(total);
  gpu.set_utilization_percent(utilization);
  gpu.set_healthy(true);
  return gpu;
}

// A MIG instance of `gpu` (which is then in MIG mode), published as device
// "gpu-<index>-mig-gi<gi>" with UUID "MIG-<gi>-<gpu's uuid>".
inline node::v1::MigInstance& add_mig_instance(node::v1::Gpu& gpu, uint32_t gi,
                                               const std::string& profile, uint64_t used,
                                               uint64_t total) {
  gpu.set_mig_enabled(true);
  node::v1::MigInstance& instance = *gpu.add_mig_instances();
  instance.set_device("gpu-" + std::to_string(gpu.index()) + "-mig-gi" + std::to_string(gi));
  instance.set_uuid("MIG-" + std::to_string(gi) + "-" + gpu.uuid().substr(4));
  instance.set_profile(profile);
  instance.set_gpu_instance_id(gi);
  instance.set_memory_used_bytes(used);
  instance.set_memory_total_bytes(total);
  instance.set_healthy(true);
  return instance;
}

// A share with one device on `uuid`: `used` of `limit` bytes (0: unlimited), cores quota
// `cores`, `gpu_seconds` and `throttled_seconds` so far, and one process per command.
inline node::v1::Share& add_share(node::v1::ListSharesResponse& node, const std::string& name,
                                  const std::string& uuid, uint64_t used, uint64_t limit,
                                  uint32_t cores, double gpu_seconds = 0,
                                  double throttled_seconds = 0,
                                  const std::vector<std::string>& commands = {}) {
  node::v1::Share& share = *node.add_shares();
  share.set_name(name);
  share.set_source("tessera-run");
  share.set_folder("/run/user/1000/tessera/shares/" + name);
  share.set_priority("normal");
  share.set_prepared_unix_ms(kSampledAt - 90'000);
  node::v1::ShareDevice& device = *share.add_devices();
  device.set_gpu_uuid(uuid);
  device.set_memory_unlimited(limit == 0);
  device.set_memory_limit_bytes(limit);
  device.set_memory_used_bytes(used);
  device.set_cores_request_percent(cores);
  device.set_gpu_seconds(gpu_seconds);
  device.set_throttled_seconds(throttled_seconds);
  int pid = 1000;
  for (const std::string& command : commands) {
    node::v1::Process& process = *share.add_processes();
    process.set_pid(++pid);
    process.set_host_pid(pid);
    process.set_command(command);
    process.add_memory_bytes(used / commands.size());
  }
  for (node::v1::Gpu& gpu : *node.mutable_gpus()) {
    if (gpu.uuid() == uuid) gpu.set_shares(gpu.shares() + 1);
    // A share inside a MIG instance: on the instance's device and UUID, counted by both.
    for (node::v1::MigInstance& instance : *gpu.mutable_mig_instances())
      if (instance.uuid() == uuid) {
        device.set_device(instance.device());
        instance.set_shares(instance.shares() + 1);
        gpu.set_shares(gpu.shares() + 1);
      }
  }
  return share;
}

inline Snapshot snapshot_of(node::v1::ListSharesResponse node, int64_t sampled_at = kSampledAt) {
  Snapshot snapshot;
  node.set_node("gpu-node-1");
  node.set_sampled_unix_ms(sampled_at);
  snapshot.node = std::move(node);
  snapshot.source = "local";
  return snapshot;
}

}  // namespace tessera::cli::testing
