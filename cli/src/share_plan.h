// What `tessera run --memory SPEC` (and --cores, --cores-burst) means for this machine's GPUs: the
// limits page entries of the share it creates. Pure (GPUs and text in, limits or an
// invalid-argument Status out), so it is unit-tested.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tessera/gpu_info.h"
#include "tessera/share_folder/limits_writer.h"
#include "tessera/status.h"

namespace tessera::cli {

// `memory_spec` has the syntax of TESSERA_MEMORY_LIMIT: one size for every GPU ("8Gi") or a list
// of <index>=<size> / GPU-<uuid>=<size>; GPUs not named are unlimited; empty means no limit.
// Indices are NVML's (nvidia-smi's). Errors name the item and what is wrong with it.
Result<std::vector<share_folder::DeviceLimit>> plan_share(const std::vector<GpuInfo>& gpus,
                                                          std::string_view memory_spec);

// With compute: `cores_spec` and `burst_spec` have the syntax of TESSERA_CORES_LIMIT (a percent
// 1..100 for every GPU, or <index>=<percent> / GPU-<uuid>=<percent>); GPUs not named are not
// limited (100) / do not burst (0). A burst below the GPU's cores limit is an error.
Result<std::vector<share_folder::DeviceLimit>> plan_share(const std::vector<GpuInfo>& gpus,
                                                          std::string_view memory_spec,
                                                          std::string_view cores_spec,
                                                          std::string_view burst_spec);

}  // namespace tessera::cli
