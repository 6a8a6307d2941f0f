#include "share_plan.h"

#include <cstring>
#include <utility>

// libvgpu's parser: the CLI accepts exactly what the shim accepts.
#include "tessera/vgpu/options.h"

namespace tessera::cli {
namespace {

// Applies the entries of a per-GPU list through `apply`; an error for a GPU this machine does not
// have.
template <typename Apply>
Status apply_entries(const std::vector<GpuInfo>& gpus, const vgpu::MemoryLimitSpec& spec,
                     const char* option, std::vector<share_folder::DeviceLimit>& limits,
                     Apply apply) {
  for (int i = 0; i < spec.count; ++i) {
    const vgpu::LimitEntry& entry = spec.entries[i];
    share_folder::DeviceLimit* target = nullptr;
    for (size_t g = 0; g < gpus.size(); ++g) {
      const bool match = entry.ordinal >= 0 ? gpus[g].index == static_cast<unsigned>(entry.ordinal)
                                            : gpus[g].uuid == entry.uuid;
      if (match) target = &limits[g];
    }
    if (!target) {
      return invalid_argument(
          std::string(option) + " names GPU " +
          (entry.ordinal >= 0 ? std::to_string(entry.ordinal) : std::string(entry.uuid)) +
          ", which this machine does not have (" + std::to_string(gpus.size()) + " GPUs)");
    }
    apply(*target, entry.bytes);
  }
  return Status::ok();
}

// One percent list into one field of every GPU's limits.
Status plan_percent(const std::vector<GpuInfo>& gpus, const char* option, std::string_view text,
                    uint32_t share_folder::DeviceLimit::*field,
                    std::vector<share_folder::DeviceLimit>& limits) {
  if (text.empty()) return Status::ok();
  vgpu::MemoryLimitSpec spec;
  if (!vgpu::parse_percent_list(text, &spec)) {
    return invalid_argument(std::string(option) + " '" + std::string(text) +
                            "' is not a percent (1..100) or a list of <index>=<percent> / "
                            "GPU-<uuid>=<percent>");
  }
  if (spec.has_all) {
    for (share_folder::DeviceLimit& limit : limits) limit.*field = static_cast<uint32_t>(spec.all);
  }
  return apply_entries(gpus, spec, option, limits,
                       [field](share_folder::DeviceLimit& limit, uint64_t percent) {
                         limit.*field = static_cast<uint32_t>(percent);
                       });
}

}  // namespace

Result<std::vector<share_folder::DeviceLimit>> plan_share(const std::vector<GpuInfo>& gpus,
                                                          std::string_view memory_spec,
                                                          std::string_view cores_spec,
                                                          std::string_view burst_spec) {
  Result<std::vector<share_folder::DeviceLimit>> planned = plan_share(gpus, memory_spec);
  if (!planned.is_ok()) return planned.status();
  std::vector<share_folder::DeviceLimit>& limits = *planned;
  TESSERA_RETURN_IF_ERROR(
      plan_percent(gpus, "--cores", cores_spec, &share_folder::DeviceLimit::cores_limit, limits));
  TESSERA_RETURN_IF_ERROR(plan_percent(gpus, "--cores-burst", burst_spec,
                                       &share_folder::DeviceLimit::cores_burst, limits));
  for (const share_folder::DeviceLimit& limit : limits) {
    if (limit.cores_burst != 0 && limit.cores_burst < limit.cores_limit) {
      return invalid_argument("--cores-burst " + std::to_string(limit.cores_burst) + " of " +
                              limit.uuid + " is below its cores limit " +
                              std::to_string(limit.cores_limit));
    }
  }
  return planned;
}

Result<std::vector<share_folder::DeviceLimit>> plan_share(const std::vector<GpuInfo>& gpus,
                                                          std::string_view memory_spec) {
  vgpu::MemoryLimitSpec spec;
  if (!memory_spec.empty() && !vgpu::parse_memory_limit(memory_spec, false, &spec)) {
    return invalid_argument("--memory '" + std::string(memory_spec) +
                            "' is not a size (8Gi, 8G, 8192Mi, bytes) or a list of "
                            "<index>=<size> / GPU-<uuid>=<size>");
  }
  std::vector<share_folder::DeviceLimit> limits;
  for (const GpuInfo& gpu : gpus) {
    limits.push_back({gpu.uuid, spec.has_all ? spec.all : share::kUnlimited, 100});
  }
  TESSERA_RETURN_IF_ERROR(apply_entries(
      gpus, spec, "--memory", limits,
      [](share_folder::DeviceLimit& limit, uint64_t bytes) { limit.memory_limit = bytes; }));
  return limits;
}

}  // namespace tessera::cli
