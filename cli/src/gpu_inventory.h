// The GPUs of this machine as NVML lists them (index order = nvidia-smi's), loaded with dlopen so
// the CLI runs on machines without a driver and reports that clearly.
#pragma once

#include <string>
#include <vector>

namespace tessera::cli {

struct Gpu {
  unsigned index;
  std::string uuid;
  std::string name;
  unsigned long long memory_bytes;
};

// Lists the GPUs; on failure returns false and sets `error` (names the library or NVML call).
bool list_gpus(std::vector<Gpu>& gpus, std::string& error);

}  // namespace tessera::cli
