#include "driver_wall.h"

#include <unistd.h>

#include <algorithm>

#include "tessera/cgroup/driver_partition.h"
#include "tessera/quantity.h"

namespace tessera::cli {
namespace {

std::string joined(const std::vector<std::string>& uuids) {
  std::string text;
  for (const std::string& uuid : uuids) text += (text.empty() ? "" : ", ") + uuid;
  return text;
}

// The devices of `limits` that are MIG instances ("MIG-...") or GPUs in MIG mode.
Result<std::vector<std::string>> mig_devices(const nvml::Session& session,
                                             const std::vector<cgroup::PartitionLimits>& limits) {
  std::vector<std::string> found;
  for (const cgroup::PartitionLimits& limit : limits) {
    if (limit.uuid.starts_with("MIG-")) {
      found.push_back(limit.uuid);
      continue;
    }
    TESSERA_ASSIGN_OR_RETURN(nvmlDevice_t device, session.device_by_uuid(limit.uuid),
                             with_context("the driver's memory wall"));
    const Result<nvml::MigMode> mode = session.mig_mode(device);
    // NOT_SUPPORTED: a GPU without MIG, which the partitions take.
    if (!mode.is_ok() && mode.status().code() != StatusCode::kFailedPrecondition)
      return mode.status().with_context("the driver's memory wall: MIG mode of " + limit.uuid);
    if (mode.is_ok() && mode->current == NVML_DEVICE_MIG_ENABLE) found.push_back(limit.uuid);
  }
  return found;
}

}  // namespace

Result<DriverWall> DriverWall::prepare(const std::vector<share_folder::DeviceLimit>& limits,
                                       const std::string& mountinfo) {
  DriverWall wall;
  for (const share_folder::DeviceLimit& limit : limits) {
    if (limit.memory_limit == share::kUnlimited) continue;
    const uint64_t soft = limit.memory_request == share::kUnlimited
                              ? limit.memory_limit
                              : std::min(limit.memory_request, limit.memory_limit);
    wall.limits_.push_back({limit.uuid, soft, limit.memory_limit});
  }
  if (wall.limits_.empty()) {
    wall.why_not_ = "no GPU has a memory limit";
    return wall;
  }
  if (geteuid() != 0) {
    wall.why_not_ = "not run as root (only root may set the driver's memory limits)";
    return wall;
  }
  Result<nvml::Session> session = nvml::Session::open();
  if (!session.is_ok()) {
    wall.why_not_ = session.status().message();
    return wall;
  }
  if (Status supported = cgroup::driver_partitions_supported(*session); !supported.is_ok()) {
    wall.why_not_ = supported.message();
    return wall;
  }
  // The partitions are for non-MIG devices only: the driver refuses a MIG handle
  // (driver-memory-partitions.md), and a GPU in MIG mode holds no memory outside its instances.
  // Their memory stays the shim's alone, and the wall says so.
  TESSERA_ASSIGN_OR_RETURN(wall.shim_only_, mig_devices(*session, wall.limits_));
  std::erase_if(wall.limits_, [&](const cgroup::PartitionLimits& limit) {
    return std::ranges::find(wall.shim_only_, limit.uuid) != wall.shim_only_.end();
  });
  if (wall.limits_.empty()) {
    wall.why_not_ =
        "the driver's partitions do not support MIG devices (" + joined(wall.shim_only_) + ")";
    return wall;
  }
  TESSERA_ASSIGN_OR_RETURN(std::vector<cgroup::Mount> mounts, cgroup::cgroup2_mounts(mountinfo));
  if (mounts.empty()) {
    wall.why_not_ = "no cgroup v2 hierarchy is mounted (" + mountinfo + ")";
    return wall;
  }
  // From here this machine has a wall to offer: a failure is an error, never a silent shim-only
  // run.
  TESSERA_ASSIGN_OR_RETURN(std::string parent, cgroup::own_cgroup_directory(mounts),
                           with_context("the driver's memory wall"));
  TESSERA_ASSIGN_OR_RETURN(
      cgroup::OwnedCgroup created,
      cgroup::OwnedCgroup::create(parent, "tessera-run-" + std::to_string(getpid())),
      with_context("the driver's memory wall"));
  wall.cgroup_ = std::move(created);
  if (Status applied = cgroup::apply_partitions(*session, wall.cgroup_->directory(), wall.limits_);
      !applied.is_ok())
    return applied.with_context("the driver's memory wall");  // the cgroup goes with `wall`
  wall.session_ = std::move(session).value();
  return wall;
}

DriverWall::DriverWall(DriverWall&& other) noexcept
    : why_not_(std::move(other.why_not_)),
      shim_only_(std::move(other.shim_only_)),
      session_(std::move(other.session_)),
      cgroup_(std::move(other.cgroup_)),
      limits_(std::move(other.limits_)) {
  other.session_.reset();
  other.cgroup_.reset();
}

DriverWall& DriverWall::operator=(DriverWall&& other) noexcept {
  if (this != &other) {
    (void)release();
    why_not_ = std::move(other.why_not_);
    shim_only_ = std::move(other.shim_only_);
    session_ = std::move(other.session_);
    cgroup_ = std::move(other.cgroup_);
    limits_ = std::move(other.limits_);
    other.session_.reset();
    other.cgroup_.reset();
  }
  return *this;
}

std::string DriverWall::describe() const {
  if (!active()) return "memory held by the shim only (" + why_not_ + ")";
  std::string text = "memory held by the driver's partition on " + directory() + " (";
  for (size_t i = 0; i < limits_.size(); ++i) {
    if (i) text += ", ";
    text += limits_[i].uuid + ": soft " + byte_quantity_text(limits_[i].soft) + ", hard " +
            byte_quantity_text(limits_[i].hard);
  }
  text += ") and by the shim";
  if (!shim_only_.empty())
    text += "; memory of " + joined(shim_only_) +
            " held by the shim only (the driver's partitions do not support MIG devices)";
  return text;
}

Status DriverWall::add(pid_t pid) const {
  if (!cgroup_) return Status::ok();
  return cgroup_->add(pid);
}

Status DriverWall::release() {
  Status first = Status::ok();
  if (cgroup_ && session_) {
    std::vector<std::string> uuids;
    for (const cgroup::PartitionLimits& limit : limits_) uuids.push_back(limit.uuid);
    first = cgroup::clear_partitions(*session_, cgroup_->directory(), uuids);
  }
  if (cgroup_) {
    const Status removed = cgroup_->remove();
    if (first.is_ok()) first = removed;
    if (removed.is_ok()) cgroup_.reset();
  }
  return first;
}

}  // namespace tessera::cli
