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

// What `tessera run` was asked for, each in the syntax of TESSERA_MEMORY_LIMIT / the percent list:
// one value for every GPU or <index>=<value> / GPU-<uuid>=<value>. Empty: not given.
struct ShareAsk {
  std::string_view memory;        // --memory: the request; GPUs not named are unlimited
  std::string_view memory_limit;  // --memory-limit: default the request
  std::string_view cores;         // --cores 0..100: the request; GPUs not named: 100
  std::string_view cores_limit;   // --cores-limit 1..100: default the request (100 for 0)
};

// The limits page entries of the share `tessera run` creates. Indices are NVML's (nvidia-smi's).
// Errors name the flag, the GPU and the value: a limit below its request or above the GPU, a GPU
// this machine does not have, a value that does not parse.
Result<std::vector<share_folder::DeviceLimit>> plan_share(const std::vector<GpuInfo>& gpus,
                                                          const ShareAsk& ask);

}  // namespace tessera::cli
