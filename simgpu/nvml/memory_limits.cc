// Per-cgroup device-memory limits of the simulated R615 driver (nvmlDeviceSetMemoryLimits_v1,
// nvmlDeviceGetMemoryLimits_v1), the misc backend: a flat table in the shared state, a process
// governed by its nearest limited ancestor cgroup. The wall itself is in Simulator::reserve, which
// every allocation path of the simulated libcuda.so.1 goes through.
//
// On a driver before R615 (SIMGPU_DRIVER_VERSION unset or older) both answer
// NVML_ERROR_FUNCTION_NOT_FOUND: a real libnvidia-ml of that age has no such symbol, and a binding
// that looks it up gets that code; one library cannot export a symbol per configuration.
#include <unistd.h>

#include <cstdint>

#include "cgroup.h"
#include "nvml_internal.h"

namespace simgpu::nvml {
namespace {

// The cgroup `name_space` names, or the NVML error for why it names none.
nvmlReturn_t cgroup_of(const char* name_space, std::string& out) {
  const CgroupLookup lookup = lookup_cgroup_directory(name_space);
  if (!lookup.cgroup) {
    // No cgroup v2 hierarchy at all: the feature needs one (the toolkit's hook fails on v1).
    return lookup.error == CgroupLookupError::kNoHierarchy ? NVML_ERROR_NOT_SUPPORTED
                                                           : NVML_ERROR_INVALID_ARGUMENT;
  }
  // The root cgroup holds every process of the machine; the driver takes limits on others only.
  if (*lookup.cgroup == "/") return NVML_ERROR_INVALID_ARGUMENT;
  if (lookup.cgroup->size() >= static_cast<size_t>(kCgroupPathBytes)) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  out = *lookup.cgroup;
  return NVML_SUCCESS;
}

// What both entry points check first: the device, and that this driver has the feature. MIG
// device handles are refused with NOT_SUPPORTED ("MIG handles are not supported" [NVML-MEMLIM]).
nvmlReturn_t resolve_partitionable(nvmlDevice_t handle, Device& out) {
  if (nvmlReturn_t result = resolve(handle, out); result != NVML_SUCCESS) return result;
  if (!out.sim->has_memory_partitions()) return NVML_ERROR_FUNCTION_NOT_FOUND;
  if (out.is_mig) return NVML_ERROR_NOT_SUPPORTED;
  return NVML_SUCCESS;
}

}  // namespace
}  // namespace simgpu::nvml

extern "C" {

nvmlReturn_t nvmlDeviceSetMemoryLimits_v1(nvmlDevice_t device, nvmlSetMemoryLimits_v1_t* limits) {
  using namespace simgpu::nvml;
  Device dev;
  if (nvmlReturn_t result = resolve_partitionable(device, dev); result != NVML_SUCCESS) {
    return result;
  }
  if (limits == nullptr || limits->nameSpace == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const bool clear = limits->softLimit == 0 && limits->hardLimit == UINT64_MAX;
  if (!clear && (limits->hardLimit == 0 || limits->softLimit > limits->hardLimit)) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (geteuid() != 0) return NVML_ERROR_NO_PERMISSION;
  std::string cgroup;
  if (nvmlReturn_t result = cgroup_of(limits->nameSpace, cgroup); result != NVML_SUCCESS) {
    return result;
  }
  if (dev.sim->set_memory_limit(dev.index, cgroup, limits->softLimit, limits->hardLimit) !=
      simgpu::LimitResult::kOk) {
    return NVML_ERROR_INSUFFICIENT_RESOURCES;
  }
  return NVML_SUCCESS;
}

// NVML_ERROR_NOT_FOUND: the cgroup has no limit of its own but an ancestor has one;
// NVML_ERROR_NOT_SUPPORTED: neither it nor any ancestor has one (what an R615 prototype observed
// on the misc backend).
nvmlReturn_t nvmlDeviceGetMemoryLimits_v1(nvmlDevice_t device, nvmlGetMemoryLimits_v1_t* limits) {
  using namespace simgpu::nvml;
  Device dev;
  if (nvmlReturn_t result = resolve_partitionable(device, dev); result != NVML_SUCCESS) {
    return result;
  }
  if (limits == nullptr || limits->nameSpace == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  std::string cgroup;
  if (nvmlReturn_t result = cgroup_of(limits->nameSpace, cgroup); result != NVML_SUCCESS) {
    return result;
  }
  dev.sim->reclaim_dead_processes();
  if (const auto own = dev.sim->memory_limit(dev.index, cgroup)) {
    limits->softLimit = own->soft_limit;
    limits->hardLimit = own->hard_limit;
    limits->currentUsed = own->used;
    return NVML_SUCCESS;
  }
  return dev.sim->governing_limit(dev.index, cgroup) ? NVML_ERROR_NOT_FOUND
                                                     : NVML_ERROR_NOT_SUPPORTED;
}

}  // extern "C"
