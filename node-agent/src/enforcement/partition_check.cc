#include "enforcement/partition_check.h"

#include <sys/stat.h>
#include <unistd.h>

#include "share/partition_hook.h"
#include "tessera/cgroup/driver_partition.h"
#include "tessera/share_folder/snapshot.h"

namespace tessera::agent {
namespace {

std::string mib(uint64_t bytes) {
  return std::to_string(bytes >> 20) + " MiB";
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

PartitionCheck::PartitionCheck(PartitionCheckOptions options,
                               std::function<Checkpoint()> checkpoint, const nvml::Session& session,
                               FindingHandler& handler)
    : options_(std::move(options)),
      checkpoint_(std::move(checkpoint)),
      session_(session),
      handler_(handler) {}

std::vector<Finding> PartitionCheck::check_once() {
  std::lock_guard lock(mutex_);
  std::vector<Finding> found;
  std::set<std::string> seen;  // episodes whose condition holds in this pass
  PartitionViews views;
  auto report = [&](Finding finding, const std::string& cgroup) {
    const std::string key = std::string(finding_kind_name(finding.kind)) + "|" + finding.share +
                            "|" + finding.gpu_uuid + "|" + cgroup;
    seen.insert(key);
    if (!episodes_.insert(key).second) return;
    ++stats_.findings;
    handler_.handle(finding);
    found.push_back(std::move(finding));
  };
  for (const auto& [claim_uid, entry] : checkpoint_()) {
    if (entry.state != ClaimState::kPrepareCompleted) continue;
    const std::string claim_dir = options_.record_dir + "/" + claim_uid;
    const std::vector<PartitionRecord> records = read_partition_records(claim_dir);
    for (const ShareSpec& share : entry.shares) {
      const std::optional<PartitionRecord> wanted = share_partition(share);
      if (!wanted || !options_.gpus.count(share.uuid)) continue;
      SharePartitionView& view = views[{share.name(), share.uuid}];
      view.driver = true;
      Finding base;
      base.share = share.name();
      base.claim_namespace = entry.namespace_name;
      base.claim_name = entry.name;
      base.claim_uid = claim_uid;
      base.gpu_uuid = share.uuid;
      for (const PartitionRecord& record : records) {
        if (record.share != share.name() || record.gpu != share.uuid) continue;
        if (!is_directory(record.cgroup)) {
          // The container ended and the runtime removed its cgroup: nothing left to hold.
          unlink(partition_record_path(claim_dir, record).c_str());
          ++stats_.records_dropped;
          continue;
        }
        Result<nvml::MemoryLimits> read =
            cgroup::read_partition(session_, record.cgroup, share.uuid);
        std::string drift;
        if (!read.is_ok())
          drift = "no partition (" + read.status().message() + ")";
        else if (read->soft_limit != wanted->soft || read->hard_limit != wanted->hard)
          drift = "soft " + mib(read->soft_limit) + ", hard " + mib(read->hard_limit);
        if (drift.empty()) {
          ++view.cgroups;
          view.driver_used += read->current_used;
          continue;
        }
        Finding finding = base;
        finding.kind = FindingKind::kPartitionDrift;
        finding.detail = "container " + record.container_id + " (cgroup " + record.cgroup +
                         "): the driver holds " + drift + " where the share has soft " +
                         mib(wanted->soft) + ", hard " + mib(wanted->hard);
        if (options_.repair) {
          const Status applied = cgroup::apply_partitions(
              session_, record.cgroup, {{share.uuid, wanted->soft, wanted->hard}});
          finding.detail += applied.is_ok() ? "; set again" : "; cannot set: " + applied.message();
          if (applied.is_ok()) {
            ++stats_.repairs;
            ++view.cgroups;
            if (Result<nvml::MemoryLimits> again =
                    cgroup::read_partition(session_, record.cgroup, share.uuid);
                again.is_ok())
              view.driver_used += again->current_used;
          }
        }
        report(std::move(finding), record.cgroup);
      }
      // The shim's count beside the driver's.
      const share_folder::ShareFolderSnapshot folder =
          share_folder::read_share_folder(options_.shares_dir + "/" + share.folder_name());
      const int index = folder.limits.device_index(share.uuid);
      if (!folder.readable() || index < 0) continue;
      view.shim_used = folder.usage.memory_bytes(static_cast<uint32_t>(index));
      const uint64_t measured = folder.limits.devices[static_cast<size_t>(index)].context_overhead;
      const uint64_t context = measured ? measured : options_.default_context_cost;
      const uint64_t gap = view.driver_used > view.shim_used ? view.driver_used - view.shim_used
                                                             : view.shim_used - view.driver_used;
      if (view.cgroups > 0 && gap > context) {
        Finding finding = base;
        finding.kind = FindingKind::kLayersDisagree;
        finding.bytes = view.driver_used;
        finding.detail = "the driver counts " + mib(view.driver_used) + " for the share's " +
                         std::to_string(view.cgroups) + " container cgroup(s), the shim " +
                         mib(view.shim_used) + ": more than a context (" + mib(context) + ") apart";
        report(std::move(finding), "");
      }
    }
  }
  for (auto it = episodes_.begin(); it != episodes_.end();)
    it = seen.count(*it) ? std::next(it) : episodes_.erase(it);
  views_ = std::move(views);
  ++stats_.passes;
  return found;
}

PartitionViews PartitionCheck::views() const {
  std::lock_guard lock(mutex_);
  return views_;
}

PartitionCheckStats PartitionCheck::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace tessera::agent
