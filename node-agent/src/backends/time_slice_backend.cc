#include "backends/time_slice_backend.h"

#include <filesystem>
#include <fstream>
#include <set>

#include "backends/command_runner.h"
#include "files/atomic_file.h"

namespace tessera::agent {
namespace fs = std::filesystem;

int TimeSliceBackend::policy_value(vgpu_config::TimeSlice slice) {
  switch (slice) {
    case vgpu_config::TimeSlice::kShort:
      return 1;
    case vgpu_config::TimeSlice::kMedium:
      return 2;
    case vgpu_config::TimeSlice::kLong:
      return 3;
    case vgpu_config::TimeSlice::kDefault:
      break;
  }
  return 0;
}

Status TimeSliceBackend::set(const std::string& uuid, vgpu_config::TimeSlice slice) {
  // Time slicing needs the Default compute mode (an exclusive mode admits one process only).
  const Command mode({options_.nvidia_smi, "-i", uuid, "-c", "DEFAULT"}, {}, "", options_.timeout);
  TESSERA_RETURN_IF_ERROR(run_checked(mode).with_context("time slice on " + uuid));
  const Command policy({options_.nvidia_smi, "compute-policy", "-i", uuid, "--set-timeslice",
                        std::to_string(policy_value(slice))},
                       {}, "", options_.timeout);
  return run_checked(policy).with_context("time slice on " + uuid);
}

Status TimeSliceBackend::apply(const std::string& uuid, vgpu_config::TimeSlice slice) {
  std::error_code ec;
  fs::create_directories(options_.root, ec);
  if (ec) return internal_error("cannot create " + options_.root + ": " + ec.message());
  TESSERA_RETURN_IF_ERROR(set(uuid, slice));
  return write_file_atomically(options_.root + "/" + uuid, std::string(to_string(slice)) + "\n");
}

Status TimeSliceBackend::restore(const std::string& uuid) {
  TESSERA_RETURN_IF_ERROR(set(uuid, vgpu_config::TimeSlice::kDefault));
  std::error_code ec;
  fs::remove(options_.root + "/" + uuid, ec);
  if (ec)
    return internal_error("cannot remove " + options_.root + "/" + uuid + ": " + ec.message());
  return Status::ok();
}

std::optional<vgpu_config::TimeSlice> TimeSliceBackend::recorded(const std::string& uuid) const {
  std::ifstream in(options_.root + "/" + uuid);
  std::string word;
  if (!(in >> word)) return std::nullopt;
  for (vgpu_config::TimeSlice slice :
       {vgpu_config::TimeSlice::kDefault, vgpu_config::TimeSlice::kShort,
        vgpu_config::TimeSlice::kMedium, vgpu_config::TimeSlice::kLong})
    if (word == to_string(slice)) return slice;
  return std::nullopt;
}

std::vector<std::string> TimeSliceBackend::recorded_uuids() const {
  std::vector<std::string> uuids;
  std::error_code ec;
  for (const auto& item : fs::directory_iterator(options_.root, ec)) {
    const std::string name = item.path().filename().string();
    if (name.rfind("GPU-", 0) == 0 && name.find('.') == std::string::npos) uuids.push_back(name);
  }
  return uuids;
}

Status TimeSliceBackend::prepare(const ShareSpec& share, const HolderLookup& holder) {
  // One interval per GPU: a second claim on the GPU may not ask for another.
  if (const ShareSpec* other = holder(); other && other->time_slice() != share.time_slice())
    return failed_precondition(std::string("sharing.timeSlice ") + to_string(share.time_slice()) +
                               " conflicts with claim " + other->claim_uid + ", which set " +
                               to_string(other->time_slice()) + " on " + share.device);
  return apply(share.uuid, share.time_slice());
}

Status TimeSliceBackend::unprepare(const ShareSpec& share, const HolderLookup& holder) {
  // Another prepared claim on the GPU still wants the interval (it asked for the same one).
  if (holder()) return Status::ok();
  return restore(share.uuid);
}

std::vector<DriftItem> TimeSliceBackend::reconcile(const std::string& claim_uid,
                                                   const ShareSpec& share) {
  const vgpu_config::TimeSlice wanted = share.time_slice();
  const auto applied = recorded(share.uuid);
  if (applied == wanted) return {};
  const Status repair = apply(share.uuid, wanted);
  return {{share.uuid,
           std::string("time slice ") + (applied ? to_string(*applied) : "not applied") +
               ", claim " + claim_uid + " wants " + to_string(wanted),
           repair.is_ok() ? "applied" : "", repair.message()}};
}

std::vector<DriftItem> TimeSliceBackend::remove_orphans(const std::vector<ShareSpec>& named,
                                                        const ReserveOrphan& reserve) {
  std::set<std::string> time_sliced;
  for (const auto& share : named)
    if (share.strategy() == vgpu_config::SharingStrategy::kTimeSlicing)
      time_sliced.insert(share.uuid);
  std::vector<DriftItem> found;
  for (const auto& uuid : recorded_uuids()) {
    if (time_sliced.count(uuid)) continue;
    // Under the GPU's lock and a reservation of it: a claim naming the GPU since the pass began
    // keeps its interval, and one naming it from now on applies after this restore.
    ClaimLocks::Guard gpu = gpu_locks_.lock(uuid);
    const OrphanReservation reserved = reserve(uuid);
    if (!reserved || !recorded(uuid)) continue;
    found.push_back({uuid, "time slice set for a claim that is gone", "restored to Default",
                     restore(uuid).message()});
  }
  return found;
}

}  // namespace tessera::agent
