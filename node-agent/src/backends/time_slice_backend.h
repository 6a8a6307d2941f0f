// The TimeSlicing backend: a whole-GPU claim chooses the driver's time-slice interval for the
// processes that share its GPU, through
//   nvidia-smi -i <uuid> -c DEFAULT
//   nvidia-smi compute-policy -i <uuid> --set-timeslice <0..3>   (Default, Short, Medium, Long)
// and unprepare sets it back to Default. nvidia-smi has no query for the interval, so the backend
// records what it applied under <root>/<uuid>; reconcile re-applies a missing or different record.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "model/vgpu_config.h"

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
  SharingStrategy strategy() const override { return SharingStrategy::kTimeSlicing; }
  Status prepare(const ShareSpec& share, const HolderLookup& holder) override;
  Status unprepare(const ShareSpec& share, const HolderLookup& holder) override;
  std::vector<DriftItem> reconcile(const std::string& claim_uid, const ShareSpec& share) override;
  std::vector<DriftItem> remove_orphans(const std::vector<ShareSpec>& named) override;

  // kFailedPrecondition when nvidia-smi cannot run, kInternal when it or the record fails.
  Status apply(const std::string& uuid, TimeSlice slice);
  Status restore(const std::string& uuid);
  // What apply() last set on `uuid` (none after restore, or never applied).
  std::optional<TimeSlice> recorded(const std::string& uuid) const;
  std::vector<std::string> recorded_uuids() const;

  static int policy_value(TimeSlice slice);  // the --set-timeslice argument

 private:
  Status set(const std::string& uuid, TimeSlice slice);
  TimeSliceOptions options_;
};

}  // namespace tessera::agent
