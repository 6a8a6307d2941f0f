#include "share_plan.h"

#include <cstring>
#include <utility>

// libvgpu's parser: the CLI accepts exactly what the shim accepts.
#include "tessera/vgpu/options.h"

namespace tessera::cli {
namespace {

// Applies the entries of a per-GPU list through `apply`; false (with `error`) for a GPU this
// machine does not have.
template <typename Apply>
bool apply_entries(const std::vector<GpuInfo>& gpus, const vgpu::MemoryLimitSpec& spec,
                   const char* option, std::vector<share::DeviceLimit>& limits, std::string& error,
                   Apply apply) {
  for (int i = 0; i < spec.count; ++i) {
    const vgpu::LimitEntry& entry = spec.entries[i];
    share::DeviceLimit* target = nullptr;
    for (size_t g = 0; g < gpus.size(); ++g) {
      const bool match = entry.ordinal >= 0 ? gpus[g].index == static_cast<unsigned>(entry.ordinal)
                                            : gpus[g].uuid == entry.uuid;
      if (match) target = &limits[g];
    }
    if (!target) {
      error = std::string(option) + " names GPU " +
              (entry.ordinal >= 0 ? std::to_string(entry.ordinal) : std::string(entry.uuid)) +
              ", which this machine does not have (" + std::to_string(gpus.size()) + " GPUs)";
      return false;
    }
    apply(*target, entry.bytes);
  }
  return true;
}

}  // namespace

bool plan_share(const std::vector<GpuInfo>& gpus, std::string_view memory_spec,
                std::string_view cores_spec, std::string_view burst_spec,
                std::vector<share::DeviceLimit>& limits, std::string& error) {
  if (!plan_share(gpus, memory_spec, limits, error)) return false;
  // One percent list into one field of every GPU's limits.
  const auto plan_percent = [&](const char* option, std::string_view text,
                                uint32_t share::DeviceLimit::*field) {
    if (text.empty()) return true;
    vgpu::MemoryLimitSpec spec;
    if (!vgpu::parse_percent_list(text, &spec)) {
      error = std::string(option) + " '" + std::string(text) +
              "' is not a percent (1..100) or a list of <index>=<percent> / "
              "GPU-<uuid>=<percent>";
      return false;
    }
    if (spec.has_all) {
      for (share::DeviceLimit& limit : limits) limit.*field = static_cast<uint32_t>(spec.all);
    }
    return apply_entries(gpus, spec, option, limits, error,
                         [field](share::DeviceLimit& limit, uint64_t percent) {
                           limit.*field = static_cast<uint32_t>(percent);
                         });
  };
  if (!plan_percent("--cores", cores_spec, &share::DeviceLimit::cores_limit) ||
      !plan_percent("--cores-burst", burst_spec, &share::DeviceLimit::cores_burst)) {
    return false;
  }
  for (const share::DeviceLimit& limit : limits) {
    if (limit.cores_burst != 0 && limit.cores_burst < limit.cores_limit) {
      error = "--cores-burst " + std::to_string(limit.cores_burst) + " of " + limit.uuid +
              " is below its cores limit " + std::to_string(limit.cores_limit);
      return false;
    }
  }
  return true;
}

bool plan_share(const std::vector<GpuInfo>& gpus, std::string_view memory_spec,
                std::vector<share::DeviceLimit>& limits, std::string& error) {
  vgpu::MemoryLimitSpec spec;
  if (!memory_spec.empty() && !vgpu::parse_memory_limit(memory_spec, false, &spec)) {
    error = "--memory '" + std::string(memory_spec) +
            "' is not a size (8Gi, 8G, 8192Mi, bytes) or a list of <index>=<size> / "
            "GPU-<uuid>=<size>";
    return false;
  }
  limits.clear();
  for (const GpuInfo& gpu : gpus) {
    limits.push_back({gpu.uuid, spec.has_all ? spec.all : share::kUnlimited, 100});
  }
  return apply_entries(
      gpus, spec, "--memory", limits, error,
      [](share::DeviceLimit& limit, uint64_t bytes) { limit.memory_limit = bytes; });
}

}  // namespace tessera::cli
