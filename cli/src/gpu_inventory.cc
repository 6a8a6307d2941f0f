#include "gpu_inventory.h"

#include <dlfcn.h>

#include "tessera/nvml_abi.h"

namespace tessera::cli {
namespace {

struct Nvml {
  decltype(&nvmlInit_v2) init = nullptr;
  decltype(&nvmlShutdown) shutdown = nullptr;
  decltype(&nvmlErrorString) error_string = nullptr;
  decltype(&nvmlDeviceGetCount_v2) count = nullptr;
  decltype(&nvmlDeviceGetHandleByIndex_v2) handle = nullptr;
  decltype(&nvmlDeviceGetUUID) uuid = nullptr;
  decltype(&nvmlDeviceGetName) name = nullptr;
  decltype(&nvmlDeviceGetMemoryInfo) memory = nullptr;
};

template <typename T>
bool resolve(void* library, const char* symbol, T& out, std::string& error) {
  out = reinterpret_cast<T>(dlsym(library, symbol));
  if (!out) error = std::string("libnvidia-ml.so.1 has no ") + symbol;
  return out != nullptr;
}

}  // namespace

bool list_gpus(std::vector<Gpu>& gpus, std::string& error) {
  void* library = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    error = "cannot load libnvidia-ml.so.1 (is the NVIDIA driver installed?): ";
    error += dlerror();
    return false;
  }
  Nvml nvml;
  if (!resolve(library, "nvmlInit_v2", nvml.init, error) ||
      !resolve(library, "nvmlShutdown", nvml.shutdown, error) ||
      !resolve(library, "nvmlErrorString", nvml.error_string, error) ||
      !resolve(library, "nvmlDeviceGetCount_v2", nvml.count, error) ||
      !resolve(library, "nvmlDeviceGetHandleByIndex_v2", nvml.handle, error) ||
      !resolve(library, "nvmlDeviceGetUUID", nvml.uuid, error) ||
      !resolve(library, "nvmlDeviceGetName", nvml.name, error) ||
      !resolve(library, "nvmlDeviceGetMemoryInfo", nvml.memory, error)) {
    return false;
  }
  auto failed = [&](const char* call, nvmlReturn_t result) {
    error = std::string(call) + " failed: " + nvml.error_string(result);
    return false;
  };
  if (nvmlReturn_t r = nvml.init(); r != NVML_SUCCESS) return failed("nvmlInit_v2", r);
  unsigned count = 0;
  bool ok = true;
  if (nvmlReturn_t r = nvml.count(&count); r != NVML_SUCCESS)
    ok = failed("nvmlDeviceGetCount_v2", r);
  for (unsigned i = 0; ok && i < count; ++i) {
    nvmlDevice_t device = nullptr;
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
    nvmlMemory_t memory{};
    nvmlReturn_t result = nvml.handle(i, &device);
    const char* call = "nvmlDeviceGetHandleByIndex_v2";
    if (result == NVML_SUCCESS) {
      result = nvml.uuid(device, uuid, sizeof uuid);
      call = "nvmlDeviceGetUUID";
    }
    if (result == NVML_SUCCESS) {
      result = nvml.name(device, name, sizeof name);
      call = "nvmlDeviceGetName";
    }
    if (result == NVML_SUCCESS) {
      result = nvml.memory(device, &memory);
      call = "nvmlDeviceGetMemoryInfo";
    }
    if (result != NVML_SUCCESS) {
      ok = failed(call, result);
    } else {
      gpus.push_back({i, uuid, name, memory.total});
    }
  }
  nvml.shutdown();
  return ok;
}

}  // namespace tessera::cli
