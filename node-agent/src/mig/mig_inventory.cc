#include "mig/mig_inventory.h"

#include <cmath>

namespace tessera::agent {

const MigProfile* MigGpu::profile_by_id(unsigned id) const {
  for (const auto& profile : profiles)
    if (profile.id == id) return &profile;
  return nullptr;
}

const MigProfile* MigGpu::profile_by_name(const std::string& name) const {
  for (const auto& profile : profiles)
    if (profile.name == name) return &profile;
  return nullptr;
}

std::string mig_profile_name(unsigned profile_index, unsigned compute_slices,
                             uint64_t instance_memory_bytes, uint64_t gpu_memory_bytes) {
  constexpr uint64_t kGiB = 1ull << 30;
  uint64_t eighths = 8;
  if (gpu_memory_bytes > 0)
    eighths = (instance_memory_bytes * 8 + gpu_memory_bytes - 1) / gpu_memory_bytes;  // ceil
  if (eighths == 0) eighths = 1;
  const uint64_t gpu_gib = (gpu_memory_bytes + kGiB - 1) / kGiB;
  const auto gb = static_cast<uint64_t>(std::llround(static_cast<double>(gpu_gib * eighths) / 8.0));
  std::string name = std::to_string(compute_slices) + "g." + std::to_string(gb) + "gb";
  if (profile_index == kMigProfileIndexRev1) name += "+me";
  return name;
}

}  // namespace tessera::agent
