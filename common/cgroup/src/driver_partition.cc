#include "tessera/cgroup/driver_partition.h"

#include <cstdlib>

namespace tessera::cgroup {
namespace {

// "615.40.01" -> 615; 0 when the text does not start with a number.
int driver_branch(const std::string& version) {
  return std::atoi(version.c_str());
}

std::string mib(uint64_t bytes) {
  return std::to_string(bytes >> 20) + " MiB";
}

}  // namespace

Status driver_partitions_supported(const nvml::Session& session) {
  TESSERA_ASSIGN_OR_RETURN(std::string version, session.driver_version());
  if (driver_branch(version) < kPartitionDriverBranch)
    return failed_precondition("driver " + version + " is older than R" +
                               std::to_string(kPartitionDriverBranch) +
                               ": it has no per-cgroup memory limits");
  return session.library().require(nvml::kMemoryLimitEntryPoints);
}

Result<nvml::MemoryLimits> read_partition(const nvml::Session& session,
                                          const std::string& directory, const std::string& uuid) {
  TESSERA_ASSIGN_OR_RETURN(nvmlDevice_t device, session.device_by_uuid(uuid));
  return session.memory_limits(device, directory);
}

Status apply_partitions(const nvml::Session& session, const std::string& directory,
                        const std::vector<PartitionLimits>& limits) {
  std::vector<std::string> set;
  auto undo = [&](const Status& failed) {
    (void)clear_partitions(session, directory, set);
    return failed;
  };
  for (const PartitionLimits& limit : limits) {
    const std::string where = "GPU " + limit.uuid + ", cgroup " + directory;
    if (limit.soft > limit.hard)
      return undo(invalid_argument(where + ": soft limit " + mib(limit.soft) +
                                   " is above the hard limit " + mib(limit.hard)));
    Result<nvmlDevice_t> device = session.device_by_uuid(limit.uuid);
    if (!device.is_ok()) return undo(device.status().with_context(where));
    if (Status applied = session.set_memory_limits(*device, directory, limit.soft, limit.hard);
        !applied.is_ok())
      return undo(applied.with_context(where));
    set.push_back(limit.uuid);
    // The driver's own read-back: a partition that reads otherwise was not applied.
    Result<nvml::MemoryLimits> read = session.memory_limits(*device, directory);
    if (!read.is_ok()) return undo(read.status().with_context(where));
    if (read->soft_limit != limit.soft || read->hard_limit != limit.hard)
      return undo(internal_error(where + ": the driver reads back soft " + mib(read->soft_limit) +
                                 ", hard " + mib(read->hard_limit) + " after setting soft " +
                                 mib(limit.soft) + ", hard " + mib(limit.hard)));
  }
  return Status::ok();
}

Status clear_partitions(const nvml::Session& session, const std::string& directory,
                        const std::vector<std::string>& uuids) {
  Status first = Status::ok();
  for (const std::string& uuid : uuids) {
    Result<nvmlDevice_t> device = session.device_by_uuid(uuid);
    Status cleared =
        device.is_ok() ? session.clear_memory_limits(*device, directory) : device.status();
    if (!cleared.is_ok() && first.is_ok())
      first = cleared.with_context("GPU " + uuid + ", cgroup " + directory);
  }
  return first;
}

}  // namespace tessera::cgroup
