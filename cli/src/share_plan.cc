#include "share_plan.h"

#include <cstring>

#include "options.h"  // libvgpu's parser: the CLI accepts exactly what the shim accepts

namespace tessera::cli {

bool plan_share(const std::vector<Gpu>& gpus, std::string_view memory_spec,
                std::vector<share::DeviceLimit>& limits, std::string& error) {
  vgpu::MemoryLimitSpec spec;
  if (!memory_spec.empty() && !vgpu::parse_memory_limit(memory_spec, false, &spec)) {
    error = "--memory '" + std::string(memory_spec) +
            "' is not a size (8Gi, 8G, 8192Mi, bytes) or a list of <index>=<size> / "
            "GPU-<uuid>=<size>";
    return false;
  }
  limits.clear();
  for (const Gpu& gpu : gpus) {
    limits.push_back({gpu.uuid, spec.has_all ? spec.all : share::kUnlimited, 100});
  }
  for (int i = 0; i < spec.count; ++i) {
    const vgpu::LimitEntry& entry = spec.entries[i];
    share::DeviceLimit* target = nullptr;
    for (size_t g = 0; g < gpus.size(); ++g) {
      const bool match = entry.ordinal >= 0 ? gpus[g].index == static_cast<unsigned>(entry.ordinal)
                                            : gpus[g].uuid == entry.uuid;
      if (match) target = &limits[g];
    }
    if (!target) {
      error = "--memory names GPU " +
              (entry.ordinal >= 0 ? std::to_string(entry.ordinal) : std::string(entry.uuid)) +
              ", which this machine does not have (" + std::to_string(gpus.size()) + " GPUs)";
      return false;
    }
    target->memory_limit = entry.bytes;
  }
  return true;
}

}  // namespace tessera::cli
