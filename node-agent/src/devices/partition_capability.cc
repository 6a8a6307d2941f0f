#include "devices/partition_capability.h"

#include <unistd.h>

#include "tessera/cgroup/cgroup_v2.h"
#include "tessera/cgroup/driver_partition.h"

namespace tessera::agent {

bool PartitionCapability::any() const {
  for (const auto& [uuid, support] : gpus)
    if (support.supported) return true;
  return false;
}

std::vector<std::string> PartitionCapability::supported() const {
  std::vector<std::string> out;
  for (const auto& [uuid, support] : gpus)
    if (support.supported) out.push_back(uuid);
  return out;
}

PartitionCapability no_partition_capability(const std::vector<std::string>& uuids,
                                            const std::string& reason) {
  PartitionCapability capability;
  for (const std::string& uuid : uuids) capability.gpus[uuid] = {false, reason};
  return capability;
}

PartitionCapability detect_partition_capability(const nvml::Session& session,
                                                const std::vector<std::string>& uuids,
                                                const PartitionProbeOptions& options) {
  Result<std::string> version = session.driver_version();
  if (Status supported = cgroup::driver_partitions_supported(session); !supported.is_ok()) {
    PartitionCapability capability = no_partition_capability(uuids, supported.message());
    if (version.is_ok()) capability.driver_version = *version;
    return capability;
  }
  Result<std::vector<cgroup::Mount>> mounts = cgroup::cgroup2_mounts(options.mountinfo);
  std::string why_not;
  if (!mounts.is_ok())
    why_not = mounts.status().message();
  else if (mounts->empty())
    why_not = "no cgroup v2 hierarchy is mounted (" + options.mountinfo + ")";
  Result<std::string> parent = why_not.empty()
                                   ? cgroup::own_cgroup_directory(*mounts, options.proc_root)
                                   : Result<std::string>(not_found(why_not));
  Result<cgroup::OwnedCgroup> probe =
      parent.is_ok() ? cgroup::OwnedCgroup::create(
                           *parent, "tessera-partition-probe-" + std::to_string(getpid()))
                     : Result<cgroup::OwnedCgroup>(parent.status());
  if (!probe.is_ok()) {
    PartitionCapability capability = no_partition_capability(
        uuids, why_not.empty() ? "the probe cgroup: " + probe.status().message() : why_not);
    capability.driver_version = *version;
    return capability;
  }
  PartitionCapability capability;
  capability.driver_version = *version;
  capability.probe_cgroup = probe->directory();
  for (const std::string& uuid : uuids) {
    // One GPU at a time: each has its own verdict (a MIG handle is refused by the driver).
    const Status applied = cgroup::apply_partitions(
        session, probe->directory(), {{uuid, options.probe_soft, options.probe_hard}});
    if (!applied.is_ok()) {
      capability.gpus[uuid] = {false, "probe: " + applied.message()};
      continue;
    }
    const Status cleared = cgroup::clear_partitions(session, probe->directory(), {uuid});
    capability.gpus[uuid] = cleared.is_ok()
                                ? GpuPartitionSupport{true, ""}
                                : GpuPartitionSupport{false, "probe: " + cleared.message()};
  }
  if (Status removed = probe->remove(); !removed.is_ok())
    for (auto& [uuid, support] : capability.gpus)
      if (support.supported) support = {false, "probe: " + removed.message()};
  return capability;
}

}  // namespace tessera::agent
