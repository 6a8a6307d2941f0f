#include "backends/time_slice_backend.h"

#include <filesystem>
#include <fstream>

#include "backends/command_runner.h"
#include "share/checkpoint.h"

namespace tessera::agent {
namespace fs = std::filesystem;

int TimeSliceBackend::policy_value(TimeSlice slice) {
  switch (slice) {
    case TimeSlice::kShort:
      return 1;
    case TimeSlice::kMedium:
      return 2;
    case TimeSlice::kLong:
      return 3;
    case TimeSlice::kDefault:
      break;
  }
  return 0;
}

std::string TimeSliceBackend::set(const std::string& uuid, TimeSlice slice) {
  // Time slicing needs the Default compute mode (an exclusive mode admits one process only).
  const Command mode({options_.nvidia_smi, "-i", uuid, "-c", "DEFAULT"}, {}, "", options_.timeout);
  if (const CommandResult result = run_command(mode); !result.ok())
    return "time slice on " + uuid + ": " + failure(mode, result);
  const Command policy({options_.nvidia_smi, "compute-policy", "-i", uuid, "--set-timeslice",
                        std::to_string(policy_value(slice))},
                       {}, "", options_.timeout);
  if (const CommandResult result = run_command(policy); !result.ok())
    return "time slice on " + uuid + ": " + failure(policy, result);
  return "";
}

std::string TimeSliceBackend::apply(const std::string& uuid, TimeSlice slice) {
  std::error_code ec;
  fs::create_directories(options_.root, ec);
  if (ec) return "cannot create " + options_.root + ": " + ec.message();
  if (auto e = set(uuid, slice); !e.empty()) return e;
  return write_file_atomically(options_.root + "/" + uuid, std::string(to_string(slice)) + "\n");
}

std::string TimeSliceBackend::restore(const std::string& uuid) {
  if (auto e = set(uuid, TimeSlice::kDefault); !e.empty()) return e;
  std::error_code ec;
  fs::remove(options_.root + "/" + uuid, ec);
  if (ec) return "cannot remove " + options_.root + "/" + uuid + ": " + ec.message();
  return "";
}

std::optional<TimeSlice> TimeSliceBackend::recorded(const std::string& uuid) const {
  std::ifstream in(options_.root + "/" + uuid);
  std::string word;
  if (!(in >> word)) return std::nullopt;
  for (TimeSlice slice :
       {TimeSlice::kDefault, TimeSlice::kShort, TimeSlice::kMedium, TimeSlice::kLong})
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

}  // namespace tessera::agent
