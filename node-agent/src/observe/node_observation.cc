#include "observe/node_observation.h"

#include <algorithm>

#include "share/share_manager.h"

namespace tessera::agent {

std::vector<CheckedShare> checked_shares(const Checkpoint& checkpoint,
                                         const std::string& shares_dir) {
  std::vector<CheckedShare> out;
  for (const auto& [uid, entry] : checkpoint) {
    if (entry.state != ClaimState::kPrepareCompleted) continue;
    for (const ShareSpec& spec : entry.shares) {
      CheckedShare share;
      share.name = spec.name();
      share.folder = shares_dir + "/" + spec.folder_name();
      share.uuid = spec.uuid;
      const vgpu_config::ShareLimits limits = spec.limits();
      if (limits.memory_limit != share::kUnlimited) share.memory_limit = limits.memory_limit;
      if (limits.memory_request != share::kUnlimited)
        share.memory_request = std::min(limits.memory_request, limits.memory_limit);
      share.cores = spec.cores;
      if (spec.cores) share.cores_limit = limits.cores_limit;
      share.claim_namespace = entry.namespace_name;
      share.claim_name = entry.name;
      share.claim_uid = uid;
      share.pods = entry.pods;
      out.push_back(std::move(share));
    }
  }
  return out;
}

ContextCostInputs context_cost_inputs(const NodeObservation& observation) {
  ContextCostInputs inputs;
  for (const auto& [path, folder] : observation.folders)
    inputs.folders.push_back({path, folder.limits, folder.usage});
  for (const auto& [uuid, gpu] : observation.gpus)
    if (gpu.listed) inputs.processes.emplace(uuid, gpu.memory);
  for (const auto& [pid, facts] : observation.processes)
    if (facts.owner) inputs.owners.emplace(pid, *facts.owner);
  inputs.problems = observation.problems;
  return inputs;
}

const ObservedGpu* NodeObservation::gpu(const std::string& uuid) const {
  const auto it = gpus.find(uuid);
  return it == gpus.end() ? nullptr : &it->second;
}

const ProcessFacts* NodeObservation::process(int host_pid) const {
  const auto it = processes.find(host_pid);
  return it == processes.end() ? nullptr : &it->second;
}

const share_folder::ShareFolderSnapshot* NodeObservation::folder(const std::string& path) const {
  const auto it = folders.find(path);
  return it == folders.end() ? nullptr : &it->second;
}

}  // namespace tessera::agent
