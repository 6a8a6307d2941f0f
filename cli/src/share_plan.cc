#include "share_plan.h"

#include <cstring>
#include <utility>

// libvgpu's parser: the CLI accepts exactly what the shim accepts.
#include "tessera/quantity.h"
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
      // An index names a whole GPU; a MIG device is named by its UUID.
      const bool match =
          entry.ordinal >= 0
              ? gpus[g].index == static_cast<unsigned>(entry.ordinal) && gpus[g].parent_uuid.empty()
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
                    uint32_t min, uint32_t share_folder::DeviceLimit::*field,
                    std::vector<share_folder::DeviceLimit>& limits) {
  if (text.empty()) return Status::ok();
  vgpu::MemoryLimitSpec spec;
  const bool parsed = min == 0 ? vgpu::parse_request_percent_list(text, &spec)
                               : vgpu::parse_percent_list(text, &spec);
  if (!parsed) {
    return invalid_argument(std::string(option) + " '" + std::string(text) +
                            "' is not a percent (" + std::to_string(min) +
                            "..100) or a list of <index>=<percent> / GPU-<uuid>=<percent>");
  }
  if (spec.has_all) {
    for (share_folder::DeviceLimit& limit : limits) limit.*field = static_cast<uint32_t>(spec.all);
  }
  return apply_entries(gpus, spec, option, limits,
                       [field](share_folder::DeviceLimit& limit, uint64_t percent) {
                         limit.*field = static_cast<uint32_t>(percent);
                       });
}

// One size list into one field of every GPU's limits.
Status plan_bytes(const std::vector<GpuInfo>& gpus, const char* option, std::string_view text,
                  uint64_t share_folder::DeviceLimit::*field,
                  std::vector<share_folder::DeviceLimit>& limits) {
  if (text.empty()) return Status::ok();
  vgpu::MemoryLimitSpec spec;
  if (!vgpu::parse_memory_limit(text, false, &spec)) {
    return invalid_argument(std::string(option) + " '" + std::string(text) +
                            "' is not a size (8Gi, 8G, 8192Mi, bytes) or a list of "
                            "<index>=<size> / GPU-<uuid>=<size>");
  }
  if (spec.has_all) {
    for (share_folder::DeviceLimit& limit : limits) limit.*field = spec.all;
  }
  return apply_entries(
      gpus, spec, option, limits,
      [field](share_folder::DeviceLimit& limit, uint64_t bytes) { limit.*field = bytes; });
}

}  // namespace

Result<std::vector<share_folder::DeviceLimit>> plan_share(const std::vector<GpuInfo>& gpus,
                                                          const ShareAsk& ask) {
  // Unset: no request (the whole GPU) and no limit of its own (the request).
  constexpr uint32_t kUnset = ~0u;
  std::vector<share_folder::DeviceLimit> limits;
  for (const GpuInfo& gpu : gpus) {
    share_folder::DeviceLimit limit;
    limit.uuid = gpu.uuid;
    limit.memory_limit = share::kUnlimited;
    limit.memory_request = share::kUnlimited;
    limit.cores_request = 100;
    limit.cores_limit = kUnset;
    limits.push_back(limit);
  }
  TESSERA_RETURN_IF_ERROR(
      plan_bytes(gpus, "--memory", ask.memory, &share_folder::DeviceLimit::memory_request, limits));
  TESSERA_RETURN_IF_ERROR(plan_bytes(gpus, "--memory-limit", ask.memory_limit,
                                     &share_folder::DeviceLimit::memory_limit, limits));
  TESSERA_RETURN_IF_ERROR(plan_percent(gpus, "--cores", ask.cores, 0,
                                       &share_folder::DeviceLimit::cores_request, limits));
  TESSERA_RETURN_IF_ERROR(plan_percent(gpus, "--cores-limit", ask.cores_limit, 1,
                                       &share_folder::DeviceLimit::cores_limit, limits));
  for (size_t g = 0; g < limits.size(); ++g) {
    share_folder::DeviceLimit& limit = limits[g];
    const std::string gpu = "GPU " + std::to_string(gpus[g].index) + " (" + limit.uuid + ")";
    // What was given is checked against the GPU first, so the error names the flag the user set.
    for (const auto& [flag, bytes] : {std::pair{"--memory", limit.memory_request},
                                      std::pair{"--memory-limit", limit.memory_limit}})
      if (bytes != share::kUnlimited && gpus[g].memory_bytes > 0 && bytes > gpus[g].memory_bytes)
        return invalid_argument(std::string(flag) + " " + byte_quantity_text(bytes) + " of " + gpu +
                                " is above the GPU's memory " +
                                byte_quantity_text(gpus[g].memory_bytes));
    // Memory: a request alone is also the limit; a limit alone guarantees all of it.
    if (limit.memory_limit == share::kUnlimited) {
      limit.memory_limit = limit.memory_request;
    } else if (limit.memory_request == share::kUnlimited) {
      limit.memory_request = limit.memory_limit;
    }
    if (limit.memory_limit < limit.memory_request)
      return invalid_argument("--memory-limit " + byte_quantity_text(limit.memory_limit) + " of " +
                              gpu + " is below its --memory request " +
                              byte_quantity_text(limit.memory_request));
    // Cores: the limit defaults to the request; best-effort (0) may reach the whole GPU.
    if (limit.cores_limit == kUnset) {
      limit.cores_limit = limit.cores_request == 0 ? 100 : limit.cores_request;
    } else if (ask.cores.empty()) {
      // A limit alone is also the request, as Kubernetes defaults a request to its limit.
      limit.cores_request = limit.cores_limit;
    }
    if (limit.cores_limit < limit.cores_request)
      return invalid_argument("--cores-limit " + std::to_string(limit.cores_limit) + " of " + gpu +
                              " is below its --cores request " +
                              std::to_string(limit.cores_request));
  }
  return limits;
}

}  // namespace tessera::cli
