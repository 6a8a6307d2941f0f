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

#include "config/vgpu_config.h"

namespace tessera::agent {

struct TimeSliceOptions {
  std::string nvidia_smi = "nvidia-smi";  // a path, or looked up in PATH
  std::string root = "/var/lib/tessera/timeslice";
  std::chrono::milliseconds timeout{20000};
};

class TimeSliceBackend {
 public:
  explicit TimeSliceBackend(TimeSliceOptions options) : options_(std::move(options)) {}

  std::string apply(const std::string& uuid, TimeSlice slice);
  std::string restore(const std::string& uuid);
  // What apply() last set on `uuid` (none after restore, or never applied).
  std::optional<TimeSlice> recorded(const std::string& uuid) const;
  std::vector<std::string> recorded_uuids() const;

  static int policy_value(TimeSlice slice);  // the --set-timeslice argument

 private:
  std::string set(const std::string& uuid, TimeSlice slice);
  TimeSliceOptions options_;
};

}  // namespace tessera::agent
