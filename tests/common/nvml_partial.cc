// A libnvidia-ml stand-in for tessera/nvml.h's tests: only a few entry points (no
// nvmlDeviceGetHandleByUUID, no events), nvmlDeviceGetCount_v2 answers Not Supported, and the
// process lists of two made-up devices exercise the NVML_ERROR_INSUFFICIENT_SIZE protocol:
// device 1 has kListedProcesses processes, device 2's list grows by more than it is asked for on
// every call; nvmlDeviceGetProcessUtilization has no samples (NVML_ERROR_NOT_FOUND). Its MIG
// entry points are an older driver's: profile info only in the v2 layout (v3 is refused as
// INVALID_ARGUMENT, as is profile index 1 and up), GPU instance 7 does not exist, every creation
// finds the slices taken, and a mode change cannot activate while processes run.
#include <atomic>
#include <cstdint>

#include "tessera/nvml_abi.h"

namespace {

constexpr unsigned kListedProcesses = 100;
std::atomic<int> g_initialised{0};

}  // namespace

extern "C" {

TESSERA_NVML_EXPORT nvmlReturn_t nvmlInit_v2(void) {
  ++g_initialised;
  return NVML_SUCCESS;
}

TESSERA_NVML_EXPORT nvmlReturn_t nvmlShutdown(void) {
  if (g_initialised.load() == 0) return NVML_ERROR_UNINITIALIZED;
  --g_initialised;
  return NVML_SUCCESS;
}

TESSERA_NVML_EXPORT const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    case NVML_ERROR_INSUFFICIENT_SIZE:
      return "Insufficient Size";
    case NVML_ERROR_INVALID_ARGUMENT:
      return "Invalid Argument";
    case NVML_ERROR_NOT_FOUND:
      return "Not Found";
    case NVML_ERROR_IN_USE:
      return "In use by another client";
    case NVML_ERROR_INSUFFICIENT_RESOURCES:
      return "Insufficient Resources";
    default:
      return "Unknown Error";
  }
}

TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* /*deviceCount*/) {
  return NVML_ERROR_NOT_SUPPORTED;
}

TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                                         unsigned int* infoCount,
                                                                         nvmlProcessInfo_t* infos) {
  const unsigned found =
      reinterpret_cast<std::uintptr_t>(device) == 1 ? kListedProcesses : *infoCount + 100;
  if (*infoCount < found) {
    *infoCount = found;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (unsigned i = 0; i < found; ++i) infos[i] = {1000 + i, 1ull << 20, 0xFFFFFFFF, 0xFFFFFFFF};
  *infoCount = found;
  return NVML_SUCCESS;
}

TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(
    nvmlDevice_t /*device*/, nvmlProcessUtilizationSample_t* /*utilization*/,
    unsigned int* /*processSamplesCount*/, unsigned long long /*lastSeenTimeStamp*/) {
  return NVML_ERROR_NOT_FOUND;
}

TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(
    nvmlDevice_t /*device*/, unsigned int profile, nvmlGpuInstanceProfileInfo_v2_t* info) {
  if (profile != NVML_GPU_INSTANCE_PROFILE_1_SLICE ||
      info->version != nvmlGpuInstanceProfileInfo_v2)
    return NVML_ERROR_INVALID_ARGUMENT;
  *info = {};
  info->version = nvmlGpuInstanceProfileInfo_v2;
  info->id = 19;
  info->isP2pSupported = 1;
  info->sliceCount = 1;
  info->instanceCount = 7;
  info->multiprocessorCount = 14;
  info->memorySizeMB = 4864;
  const char name[] = "MIG 1g.5gb";
  for (unsigned i = 0; i < sizeof name; ++i) info->name[i] = name[i];
  return NVML_SUCCESS;
}

TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t /*device*/,
                                                              unsigned int /*id*/,
                                                              nvmlGpuInstance_t* /*gpuInstance*/) {
  return NVML_ERROR_NOT_FOUND;
}

TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(
    nvmlDevice_t /*device*/, unsigned int /*profileId*/,
    const nvmlGpuInstancePlacement_t* /*placement*/, nvmlGpuInstance_t* /*gpuInstance*/) {
  return NVML_ERROR_INSUFFICIENT_RESOURCES;
}

TESSERA_NVML_EXPORT nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t /*device*/,
                                                      unsigned int /*mode*/,
                                                      nvmlReturn_t* activationStatus) {
  *activationStatus = NVML_ERROR_IN_USE;
  return NVML_SUCCESS;
}

}  // extern "C"
