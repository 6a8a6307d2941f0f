#include "observe/observer.h"

#include <chrono>
#include <set>

namespace tessera::agent {
namespace {

// A MIG device's UUID: "MIG-<uuid>" (R470+) or "MIG-GPU-<uuid>/<gi>/<ci>" (R450), mig-facts.md
// §2.5.
bool is_mig_uuid(const std::string& uuid) {
  return uuid.rfind("MIG-", 0) == 0;
}

}  // namespace

Observer::Observer(ObserverOptions options, GpuProcessSource* gpus, Clock& clock)
    : options_(std::move(options)), gpus_(gpus), clock_(clock), processes_(options_.proc_root) {}

Checkpoint Observer::checkpoint() const {
  return options_.checkpoint ? options_.checkpoint() : Checkpoint{};
}

std::shared_ptr<const NodeObservation> Observer::observe(const Checkpoint* checkpoint) {
  auto observation = std::make_shared<NodeObservation>();
  NodeObservation& node = *observation;
  MutexLock lock(mutex_);
  node.at = clock_.now();
  node.unix_ms = options_.unix_ms ? options_.unix_ms()
                                  : std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count();
  node.shares_dir = options_.shares_dir;
  node.proc_root = options_.proc_root;
  node.checkpoint = checkpoint ? *checkpoint : this->checkpoint();
  node.shares =
      options_.shares ? options_.shares() : checked_shares(node.checkpoint, options_.shares_dir);
  if (options_.devices) node.devices = options_.devices();
  if (options_.health) node.health = options_.health();
  // Each folder once (a claim's shares of several GPUs share one).
  for (const CheckedShare& share : node.shares)
    if (!node.folders.count(share.folder))
      node.folders.emplace(share.folder, share_folder::read_share_folder(share.folder));
  observe_gpus(node);
  // A process new on a GPU is read in full again: its pod is its cgroup's now, not the one it had
  // when a walk first saw it (a container's process may be moved into its pod's cgroup after it
  // started); the checks map it by that pod.
  std::set<int> on_gpus;
  for (const auto& [uuid, gpu] : node.gpus)
    for (const GpuProcessMemory& process : gpu.memory) on_gpus.insert(process.pid);
  for (const int pid : on_gpus)
    if (!on_gpus_.count(pid)) processes_.forget(pid);
  on_gpus_ = std::move(on_gpus);
  // After NVML answered: a process it listed is in the walk unless it exited since.
  processes_.begin_pass();
  node.processes = processes_.walk();
  node.owners = processes_.live_owners();
  processes_.end_pass();
  node.process_reads = processes_.full_reads();
  return observation;
}

void Observer::observe_gpus(NodeObservation& node) {
  if (!gpus_) return;
  std::vector<std::string> uuids;  // the shares' GPUs first, then the node's others
  std::set<std::string> seen;
  // A share of a dynamic MIG instance not yet made (a half-done prepare) has no UUID: nothing to
  // ask NVML about.
  for (const CheckedShare& share : node.shares)
    if (!share.uuid.empty() && seen.insert(share.uuid).second) uuids.push_back(share.uuid);
  for (const NodeDevice& device : node.devices) {
    // A dynamic MIG instance not yet made has no UUID; its GPU is observed as a GPU.
    if (!device.uuid.empty() && seen.insert(device.uuid).second) uuids.push_back(device.uuid);
    if (device.mig && seen.insert(device.mig->parent_uuid).second)
      uuids.push_back(device.mig->parent_uuid);
  }
  for (const std::string& uuid : uuids) {
    ObservedGpu& gpu = node.gpus[uuid];
    Result<std::vector<GpuProcessMemory>> memory = gpus_->memory(uuid);
    if (!memory.is_ok()) {
      node.problems.push_back(memory.status());
      continue;
    }
    gpu.memory = std::move(memory).value();
    gpu.listed = true;
    // A GPU in MIG mode lists every instance's processes on its own handle: each is judged on its
    // instance's list (a MIG UUID's: per instance memory and processes), with its instance's
    // shares, not as a stranger on the GPU.
    if (!is_mig_uuid(uuid)) {
      const size_t before = gpu.memory.size();
      std::erase_if(gpu.memory,
                    [](const GpuProcessMemory& process) { return process.gpu_instance_id; });
      gpu.in_mig_instances = before - gpu.memory.size();
    }
    if (Result<std::vector<GpuProcessBusy>> busy = gpus_->busy(uuid); busy.is_ok()) {
      gpu.busy_listed = true;
      for (const GpuProcessBusy& b : *busy) gpu.busy[b.pid] += b.sm_percent;
    } else if (busy.status().code() != StatusCode::kFailedPrecondition) {
      node.problems.push_back(busy.status());  // NOT_SUPPORTED (MIG) is no problem: none listed
    }
    gpu.free_bytes = gpus_->free_memory(uuid);
    if (Result<GpuFigures> figures = gpus_->figures(uuid); figures.is_ok()) gpu.figures = *figures;
  }
}

}  // namespace tessera::agent
