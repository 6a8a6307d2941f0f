// The TimeSlicing backend: a whole-GPU claim chooses the driver's time-slice interval for the
// processes that share its GPU, through
//   nvidia-smi -i <uuid> -c DEFAULT
//   nvidia-smi compute-policy -i <uuid> --set-timeslice <0..3>   (Default, Short, Medium, Long)
// and unprepare sets it back to Default. nvidia-smi has no query for the interval, so the backend
// records what it applied under <root>/<uuid>; reconcile re-applies a missing or different record.
// The calls for one GPU take turns (lock_gpu, held by the share manager around each call and its
// record of holders, and by remove_orphans): two claims asking different intervals of one GPU
// never both succeed, and a restore never undoes a newer apply. Other GPUs never wait.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "model/claim_locks.h"
#include "tessera/vgpu_config/vgpu_config.h"

namespace tessera::agent {

struct TimeSliceOptions {
  std::string nvidia_smi = "nvidia-smi";  // a path, or looked up in PATH
  std::string root = "/var/lib/tessera/timeslice";
  std::chrono::milliseconds timeout{20000};
};

class TimeSliceBackend final : public ShareBackend {
 public:
  explicit TimeSliceBackend(TimeSliceOptions options) : options_(std::move(options)) {}

  // ShareBackend: the interval is the GPU's, so a share may not ask for another one than the
  // holder (another prepared claim's TimeSlicing share of the GPU), and unprepare leaves it while
  // a holder remains; reconcile re-applies a missing or different record; orphans are records of
  // GPUs no TimeSlicing share names (set back to Default).
  vgpu_config::SharingStrategy strategy() const override {
    return vgpu_config::SharingStrategy::kTimeSlicing;
  }
  std::string orphan_name(const ShareSpec& share) const override { return share.uuid; }
  std::optional<ClaimLocks::Guard> lock_gpu(const std::string& uuid) override {
    return gpu_locks_.lock(uuid);
  }
  Status prepare(const ShareSpec& share, const HolderLookup& holder) override;
  Status unprepare(const ShareSpec& share, const HolderLookup& holder) override;
  std::vector<DriftItem> reconcile(const std::string& claim_uid, const ShareSpec& share) override;
  std::vector<DriftItem> remove_orphans(const std::vector<ShareSpec>& named,
                                        const ReserveOrphan& reserve) override;

  // kFailedPrecondition when nvidia-smi cannot run, kInternal when it or the record fails.
  Status apply(const std::string& uuid, vgpu_config::TimeSlice slice);
  Status restore(const std::string& uuid);
  // What apply() last set on `uuid` (none after restore, or never applied).
  std::optional<vgpu_config::TimeSlice> recorded(const std::string& uuid) const;
  std::vector<std::string> recorded_uuids() const;

  static int policy_value(vgpu_config::TimeSlice slice);  // the --set-timeslice argument

 private:
  Status set(const std::string& uuid, vgpu_config::TimeSlice slice);
  TimeSliceOptions options_;
  ClaimLocks gpu_locks_;  // per GPU UUID
};

}  // namespace tessera::agent
