// Initialisation, error strings and system queries of the simulated libnvidia-ml.so.1.
#include <cstring>
#include <mutex>

#include "nvml_internal.h"

namespace simgpu::nvml {
namespace {

std::mutex g_init_mutex;
int g_init_count = 0;  // guarded by g_init_mutex; NVML's init is reference counted

nvmlDevice_st g_handles[kMaxDevices] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}};
static_assert(sizeof g_handles / sizeof g_handles[0] == kMaxDevices);

nvmlReturn_t init() {
  std::lock_guard<std::mutex> lock(g_init_mutex);
  // Opening the state is what "loading the driver" means here; Simulator::get() has already
  // said why on stderr when it fails.
  if (Simulator::get() == nullptr) return NVML_ERROR_DRIVER_NOT_LOADED;
  ++g_init_count;
  return NVML_SUCCESS;
}

nvmlReturn_t shutdown() {
  std::lock_guard<std::mutex> lock(g_init_mutex);
  if (g_init_count == 0) return NVML_ERROR_UNINITIALIZED;
  --g_init_count;
  return NVML_SUCCESS;
}

}  // namespace

Simulator* initialised_simulator() {
  {
    std::lock_guard<std::mutex> lock(g_init_mutex);
    if (g_init_count == 0) return nullptr;
  }
  // Per process: after fork() the child gets a simulator slot of its own, as with a real driver.
  return Simulator::get();
}

nvmlDevice_t handle_for(int index) {
  return &g_handles[index];
}

nvmlReturn_t resolve(nvmlDevice_t handle, Device& out) {
  Simulator* sim = initialised_simulator();
  if (sim == nullptr) return NVML_ERROR_UNINITIALIZED;
  // Compare addresses only: a foreign pointer must not be dereferenced.
  for (int i = 0; i < sim->device_count(); ++i) {
    if (handle == &g_handles[i]) {
      out = Device{sim, i};
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_INVALID_ARGUMENT;
}

nvmlReturn_t copy_string(const char* value, char* out, unsigned int length) {
  const size_t needed = std::strlen(value) + 1;
  if (length < needed) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(out, value, needed);
  return NVML_SUCCESS;
}

}  // namespace simgpu::nvml

using simgpu::nvml::initialised_simulator;

extern "C" {

nvmlReturn_t nvmlInit_v2(void) {
  return simgpu::nvml::init();
}

nvmlReturn_t nvmlInit(void) {
  return simgpu::nvml::init();
}

// Both flags only relax what the real library requires of the GPUs; the simulator always has its
// devices, so they change nothing here.
nvmlReturn_t nvmlInitWithFlags(unsigned int /*flags*/) {
  return simgpu::nvml::init();
}

nvmlReturn_t nvmlShutdown(void) {
  return simgpu::nvml::shutdown();
}

const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case NVML_SUCCESS:
      return "Success";
    case NVML_ERROR_UNINITIALIZED:
      return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
      return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    case NVML_ERROR_NO_PERMISSION:
      return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED:
      return "Already Initialized";
    case NVML_ERROR_NOT_FOUND:
      return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE:
      return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER:
      return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT:
      return "Timeout";
    case NVML_ERROR_IRQ_ISSUE:
      return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND:
      return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND:
      return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM:
      return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST:
      return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED:
      return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM:
      return "The operating system has blocked the request";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
      return "RM has detected an NVML/RM version mismatch";
    case NVML_ERROR_IN_USE:
      return "In use by another client";
    case NVML_ERROR_MEMORY:
      return "Insufficient Memory";
    case NVML_ERROR_NO_DATA:
      return "No data";
    case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED:
      return "The requested vgpu operation is not available on target device, because ECC is "
             "enabled";
    case NVML_ERROR_INSUFFICIENT_RESOURCES:
      return "Ran out of critical resources, other than memory";
    case NVML_ERROR_FREQ_NOT_SUPPORTED:
      return "The requested frequency is not supported";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
      return "The provided version is invalid/unsupported";
    case NVML_ERROR_DEPRECATED:
      return "The requested functionality has been deprecated";
    case NVML_ERROR_NOT_READY:
      return "The system is not ready for the request";
    case NVML_ERROR_GPU_NOT_FOUND:
      return "No GPUs were found";
    case NVML_ERROR_INVALID_STATE:
      return "Resource not in correct state to perform requested operation";
    case NVML_ERROR_RESET_TYPE_NOT_SUPPORTED:
      return "Reset not supported for given device/parameters";
    case NVML_ERROR_UNKNOWN:
      break;
  }
  return "Unknown Error";
}

// SIMGPU_DRIVER_VERSION of the simulated machine ("580.159.04" unless set).
nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  simgpu::Simulator* sim = initialised_simulator();
  if (sim == nullptr) return NVML_ERROR_UNINITIALIZED;
  if (version == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return simgpu::nvml::copy_string(sim->driver_version(), version, length);
}

// Documented to work without nvmlInit (it asks libcuda, not the GPUs): 13000, or 13040 on R615+.
nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* cudaDriverVersion) {
  if (cudaDriverVersion == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  simgpu::Simulator* sim = simgpu::Simulator::get();
  if (sim == nullptr) return NVML_ERROR_LIBRARY_NOT_FOUND;
  *cudaDriverVersion = sim->cuda_driver_version();
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* cudaDriverVersion) {
  return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

}  // extern "C"
