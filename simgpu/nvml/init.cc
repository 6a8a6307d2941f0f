// Initialisation, error strings and system queries of the simulated libnvidia-ml.so.1.
#include <cstring>
#include <mutex>

#include "nvml_internal.h"

namespace simgpu::nvml {
namespace {

std::mutex g_init_mutex;
int g_init_count = 0;  // guarded by g_init_mutex; NVML's init is reference counted

nvmlDevice_st g_handles[kMaxDevices] = {{0, -1, -1}, {1, -1, -1}, {2, -1, -1}, {3, -1, -1},
                                        {4, -1, -1}, {5, -1, -1}, {6, -1, -1}, {7, -1, -1}};
static_assert(sizeof g_handles / sizeof g_handles[0] == kMaxDevices);

// Handles of MIG devices, GPU instances and compute instances, by (GPU, GI ID, CI ID).
struct InstanceHandles {
  nvmlDevice_st mig[kMaxDevices][kGpuInstanceIds][kMaxComputeInstances];
  nvmlGpuInstance_st gpu[kMaxDevices][kGpuInstanceIds];
  nvmlComputeInstance_st compute[kMaxDevices][kGpuInstanceIds][kMaxComputeInstances];
  InstanceHandles() {
    for (int d = 0; d < kMaxDevices; ++d) {
      for (int g = 0; g < kGpuInstanceIds; ++g) {
        gpu[d][g] = {d, g};
        for (int c = 0; c < kMaxComputeInstances; ++c) {
          mig[d][g][c] = {d, g, c};
          compute[d][g][c] = {d, g, c};
        }
      }
    }
  }
};
InstanceHandles g_instance_handles;

// Whether `pointer` is one of `count` consecutive handles from `first`: pointers from callers are
// compared, never read, until they are known to be ours.
template <typename T>
bool one_of(const T* first, size_t count, const void* pointer) {
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  const auto base = reinterpret_cast<uintptr_t>(first);
  return address >= base && address < base + count * sizeof(T) && (address - base) % sizeof(T) == 0;
}

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

nvmlDevice_t mig_handle_for(int index, uint32_t gpu_instance_id, uint32_t compute_instance_id) {
  return &g_instance_handles.mig[index][gpu_instance_id][compute_instance_id];
}

nvmlGpuInstance_t gpu_instance_handle(int index, uint32_t gpu_instance_id) {
  return &g_instance_handles.gpu[index][gpu_instance_id];
}

nvmlComputeInstance_t compute_instance_handle(int index, uint32_t gpu_instance_id,
                                              uint32_t compute_instance_id) {
  return &g_instance_handles.compute[index][gpu_instance_id][compute_instance_id];
}

bool Device::mig_enabled() const {
  return sim->mig_state(index).mode != 0;
}

nvmlReturn_t resolve(nvmlDevice_t handle, Device& out) {
  Simulator* sim = initialised_simulator();
  if (sim == nullptr) return NVML_ERROR_UNINITIALIZED;
  // Compare addresses only: a foreign pointer must not be dereferenced.
  for (int i = 0; i < sim->device_count(); ++i) {
    if (handle == &g_handles[i]) {
      out = Device{sim, i, false, MigView{}};
      return NVML_SUCCESS;
    }
  }
  if (!one_of(&g_instance_handles.mig[0][0][0],
              size_t{kMaxDevices} * kGpuInstanceIds * kMaxComputeInstances, handle)) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  const nvmlDevice_st& mig = *handle;  // one of ours: safe to read
  if (mig.index >= sim->device_count()) return NVML_ERROR_INVALID_ARGUMENT;
  const MigModel* model = sim->mig_model(mig.index);
  const MigState state = sim->mig_state(mig.index);
  if (model == nullptr || state.mode == 0) return NVML_ERROR_INVALID_ARGUMENT;
  for (const MigGpuInstance& instance : state.gpu_instances) {
    if (instance.in_use == 0 || instance.id != static_cast<uint32_t>(mig.gpu_instance_id)) continue;
    for (const MigComputeInstance& compute : instance.compute) {
      if (compute.in_use == 0 || compute.id != static_cast<uint32_t>(mig.compute_instance_id))
        continue;
      out = Device{sim, mig.index, true,
                   MigView{instance, compute, &model->profiles[instance.profile_index]}};
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_INVALID_ARGUMENT;  // its instance was destroyed
}

nvmlReturn_t resolve_gpu(nvmlDevice_t handle, Device& out) {
  if (nvmlReturn_t result = resolve(handle, out); result != NVML_SUCCESS) return result;
  return out.is_mig ? NVML_ERROR_NOT_SUPPORTED : NVML_SUCCESS;
}

std::string mig_device_name(const Device& device) {
  const MigView& mig = device.mig;
  std::string profile = mig.profile->name;
  if (mig.compute_instance.size != mig.profile->compute_slices)
    profile = std::to_string(mig.compute_instance.size) + "c." + profile;
  return std::string(device.config().name) + " MIG " + profile;
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
