#include "api/node_snapshot.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "share/share_manager.h"
#include "tessera/qos_class.h"
#include "tessera/share_folder/share_view.h"

namespace tessera::agent {

namespace v1 = tessera::node::v1;

namespace {

const char* backend_name(vgpu_config::SharingStrategy strategy) {
  switch (strategy) {
    case vgpu_config::SharingStrategy::kQuota:
      return "quota";
    case vgpu_config::SharingStrategy::kMps:
      return "mps";
    case vgpu_config::SharingStrategy::kTimeSlicing:
      return "time-slicing";
  }
  return "quota";
}

void add_share(const NodeSnapshotSources& sources, const NodeObservation& node,
               const ClaimEntry& entry, const std::string& claim_uid,
               const std::vector<ShareSpec>& folder_shares, v1::ListSharesResponse& out) {
  const ShareSpec& first = folder_shares.front();
  const PartitionViews partitions = sources.partitions ? sources.partitions() : PartitionViews{};
  v1::Share& share = *out.add_shares();
  share.set_name(first.folder_name());
  share.set_namespace_(entry.namespace_name);
  share.set_claim(entry.name);
  share.set_claim_uid(claim_uid);
  share.set_backend(backend_name(first.strategy()));
  share.set_priority(to_string(first.config.priority.value_or(vgpu_config::Priority::kNormal)));
  // The pods the claim is reserved for (the checkpoint's, kept current by the reconcile loop),
  // "<namespace>/<name>" (as kubectl names them).
  std::string pods;
  for (const PodRef& pod : entry.pods)
    pods += (pods.empty() ? "" : ",") + entry.namespace_name + "/" + pod.name;
  share.set_pod(pods);
  share.set_policy(std::string(vgpu_config::enforcement_policy_name(
      first.config.enforcement.value_or(sources.default_policy))));
  share.set_source("agent");
  share.set_folder(node.shares_dir + "/" + first.folder_name());
  // Absent in entries of older checkpoints: left 0, which views show as unknown.
  if (entry.prepared_unix_ms) share.set_prepared_unix_ms(*entry.prepared_unix_ms);

  QosClass share_class = QosClass::kGuaranteed;
  for (const ShareSpec& spec : folder_shares) {
    v1::ShareDevice& device = *share.add_devices();
    device.set_gpu_uuid(spec.uuid);
    device.set_device(spec.device);
    const share_folder::DeviceLimit limit = share_limits(spec);
    device.set_memory_unlimited(limit.memory_limit == share::kUnlimited);
    if (limit.memory_limit != share::kUnlimited) device.set_memory_limit_bytes(limit.memory_limit);
    if (limit.memory_limit != share::kUnlimited)
      device.set_memory_request_bytes(std::min(limit.memory_request, limit.memory_limit));
    device.set_cores_request_percent(limit.cores_request);
    device.set_cores_limit_percent(
        share::effective_cores_limit(limit.cores_request, limit.cores_limit));
    const QosClass qos = device_qos_class(limit.memory_request, limit.memory_limit,
                                          limit.cores_request, limit.cores_limit);
    device.set_qos_class(std::string(qos_class_name(qos)));
    const auto view = partitions.find({spec.name(), spec.uuid});
    const bool driver = view != partitions.end() && view->second.driver;
    device.set_memory_layer(memory_layer_name(driver));
    if (driver) device.set_driver_memory_used_bytes(view->second.driver_used);
    share_class = lower_qos_class(share_class, qos);
  }
  if (!folder_shares.empty()) share.set_qos_class(std::string(qos_class_name(share_class)));

  // A folder that cannot be read whole says so (read_error): its figures are unknown, not 0, and
  // are left out rather than taken from what part of it could be read.
  share_folder::ShareViewOptions view;
  view.counters = share_folder::ShareViewOptions::Counters::kShare;
  view.host_process = [&](const share_folder::SlotCopy& slot) {
    const auto host = node.owners.find(slot.owner);  // the pass's walk of /proc
    share_folder::HostProcess process;
    process.pid = host == node.owners.end() ? 0 : host->second;
    process.command = share_folder::process_command(node.proc_root, process.pid);
    return std::optional(process);
  };
  // Every prepared share's folder is in the observation; one that is not reads as missing.
  share_folder::ShareFolderSnapshot missing;
  missing.folder = share.folder();
  missing.usage.problem = share_folder::UsageProblem::kMissing;
  const share_folder::ShareFolderSnapshot* read = node.folder(share.folder());
  share_folder::fill_share_from_folder(read ? *read : missing, view, share);
}

struct DeviceHealthView {
  bool healthy = false;
  std::string reason;  // empty when healthy
};

// A device's health as the local API shows it: "health not known yet" before its first report,
// "xid-<n>: <message>" for an XID.
DeviceHealthView device_health_view(const DeviceHealthSnapshot& health, const std::string& pool,
                                    const std::string& device) {
  DeviceHealthView view{false, "health not known yet"};
  for (const DeviceHealthReport& report : health.devices) {
    if (report.pool_name != pool || report.device_name != device) continue;
    view.healthy = report.state == DeviceHealthState::kHealthy;
    if (view.healthy) {
      view.reason.clear();
      continue;
    }
    view.reason = report.xid != 0 ? "xid-" + std::to_string(report.xid) : "";
    if (!report.message.empty()) view.reason += (view.reason.empty() ? "" : ": ") + report.message;
    if (view.reason.empty()) view.reason = "unhealthy";
  }
  return view;
}

}  // namespace

v1::ListSharesResponse node_snapshot(const ObservedNode& observed,
                                     const NodeSnapshotSources& sources) {
  const NodeObservation empty;
  const NodeObservation& node = observed.observation ? *observed.observation : empty;
  v1::ListSharesResponse out;
  out.set_node(sources.node_name);
  out.set_sampled_unix_ms(node.unix_ms);

  // Shares per device (by name) and per physical GPU (by UUID): a share inside a MIG instance
  // counts for the instance and for its GPU.
  std::map<std::string, uint32_t> shares_per_device;
  std::map<std::string, uint32_t> shares_per_gpu;
  for (const auto& [claim_uid, entry] : node.checkpoint) {
    // A claim still being prepared may have no folder yet; it is listed once it completes.
    if (entry.state != ClaimState::kPrepareCompleted) continue;
    for (const ShareSpec& spec : entry.shares) {
      ++shares_per_device[spec.device];
      const auto device = std::find_if(node.devices.begin(), node.devices.end(),
                                       [&](const NodeDevice& d) { return d.name == spec.device; });
      ++shares_per_gpu[device != node.devices.end() && device->mig ? device->mig->parent_uuid
                                                                   : spec.uuid];
    }
    for (const std::vector<ShareSpec>& folder : shares_by_folder(entry.shares))
      add_share(sources, node, entry, claim_uid, folder, out);
  }

  const DeviceHealthSnapshot& health = node.health;
  const std::map<std::string, uint64_t> unaccounted =
      observed.judgment ? observed.judgment->unaccounted_memory : std::map<std::string, uint64_t>{};
  uint32_t index = 0;
  // The physical GPUs in the order their first device is listed: a whole GPU's device, or (in
  // static MIG, where the GPU itself is not published) its first MIG instance's.
  std::map<std::string, v1::Gpu*> gpu_of;
  std::set<std::string> published_whole;  // GPUs with a device of their own
  for (const NodeDevice& device : node.devices)
    if (!device.mig) published_whole.insert(device.uuid);
  for (const NodeDevice& device : node.devices) {
    const std::string gpu_uuid = device.mig ? device.mig->parent_uuid : device.uuid;
    v1::Gpu*& gpu = gpu_of[gpu_uuid];
    if (gpu == nullptr) {
      gpu = out.add_gpus();
      gpu->set_uuid(gpu_uuid);
      gpu->set_name(device.product_name);  // as the CLI's local mode names it (NVML's)
      gpu->set_index(index++);
      if (!device.mig) gpu->set_memory_total_bytes(device.memory_bytes);
      if (const ObservedGpu* observed_gpu = node.gpu(gpu_uuid);
          observed_gpu && observed_gpu->figures) {
        const GpuFigures& figures = *observed_gpu->figures;
        gpu->set_memory_used_bytes(figures.memory_used_bytes);
        if (figures.memory_total_bytes > 0) gpu->set_memory_total_bytes(figures.memory_total_bytes);
        gpu->set_utilization_percent(figures.utilization_percent.value_or(0));
      }
      // A GPU without a device of its own is as healthy as its instances (set below).
      gpu->set_healthy(device.mig.has_value());
      gpu->set_health_reason(device.mig ? "" : "health not known yet");
      const auto count = shares_per_gpu.find(gpu_uuid);
      gpu->set_shares(count == shares_per_gpu.end() ? 0 : count->second);
      if (const auto bytes = unaccounted.find(gpu_uuid); bytes != unaccounted.end())
        gpu->set_unaccounted_memory_bytes(bytes->second);
      if (sources.partition_capability) {
        const auto support = sources.partition_capability->gpus.find(gpu_uuid);
        if (support != sources.partition_capability->gpus.end()) {
          gpu->set_driver_partitions(support->second.supported);
          gpu->set_driver_partitions_reason(support->second.reason);
        }
      }
    }
    const DeviceHealthView state = device_health_view(health, sources.node_name, device.name);
    if (!device.mig) {
      gpu->set_healthy(state.healthy);
      gpu->set_health_reason(state.reason);
      continue;
    }
    gpu->set_mig_enabled(true);
    v1::MigInstance& instance = *gpu->add_mig_instances();
    instance.set_device(device.name);
    instance.set_uuid(device.uuid);
    instance.set_profile(device.mig->profile);
    instance.set_gpu_instance_id(device.mig->gi_id.value_or(0));
    instance.set_compute_instance_id(device.mig->ci_id.value_or(0));
    instance.set_placement_start(device.mig->placement.start);
    instance.set_placement_size(device.mig->placement.size);
    instance.set_memory_total_bytes(device.memory_bytes);
    instance.set_multiprocessors(device.mig->multiprocessors);
    // NVML answers memory for a MIG instance's handle (not utilisation: mig-facts.md §2.4).
    if (const ObservedGpu* instance_seen = device.uuid.empty() ? nullptr : node.gpu(device.uuid);
        instance_seen && instance_seen->figures)
      instance.set_memory_used_bytes(instance_seen->figures->memory_used_bytes);
    instance.set_healthy(state.healthy);
    instance.set_health_reason(state.reason);
    const auto count = shares_per_device.find(device.name);
    instance.set_shares(count == shares_per_device.end() ? 0 : count->second);
    // A GPU published only through its instances (static MIG) is as healthy as they are, and
    // says which one is not; one with a device of its own keeps that device's health.
    if (!state.healthy && !published_whole.count(gpu_uuid)) {
      gpu->set_healthy(false);
      gpu->set_health_reason((gpu->health_reason().empty() ? "" : gpu->health_reason() + "; ") +
                             "MIG instance " + device.name + ": " + state.reason);
    }
  }
  return out;
}

void fill_cores_used(const v1::ListSharesResponse& previous, v1::ListSharesResponse& current) {
  const double seconds =
      static_cast<double>(current.sampled_unix_ms() - previous.sampled_unix_ms()) / 1000.0;
  if (seconds <= 0) return;
  std::map<std::pair<std::string, std::string>, double> before;  // (share, GPU) -> GPU seconds
  for (const v1::Share& share : previous.shares())
    for (const v1::ShareDevice& device : share.devices())
      before[{share.name(), device.gpu_uuid()}] = device.gpu_seconds();
  std::set<std::string> unread_before;  // no figures to take a rate from
  for (const v1::Share& share : previous.shares())
    if (!share.read_error().empty()) unread_before.insert(share.name());
  for (v1::Share& share : *current.mutable_shares()) {
    if (!share.read_error().empty() || unread_before.count(share.name())) continue;
    for (v1::ShareDevice& device : *share.mutable_devices()) {
      const auto was = before.find({share.name(), device.gpu_uuid()});
      if (was == before.end() || device.gpu_seconds() < was->second) continue;
      device.set_cores_used_percent(100.0 * (device.gpu_seconds() - was->second) / seconds);
    }
  }
}

const v1::Share* find_share(const v1::ListSharesResponse& snapshot, const std::string& key) {
  for (const v1::Share& share : snapshot.shares())
    if (share.name() == key) return &share;
  const size_t slash = key.find('/');
  if (slash == std::string::npos) return nullptr;
  for (const v1::Share& share : snapshot.shares())
    if (share.namespace_() == key.substr(0, slash) && share.claim() == key.substr(slash + 1))
      return &share;
  return nullptr;
}

}  // namespace tessera::agent
