#include "tessera/gpu_info.h"

#include <cctype>

#include "tessera/nvml_abi.h"
#include "tessera/nvml_library.h"

namespace tessera {
namespace {

const char* architecture_name(nvmlDeviceArchitecture_t arch) {
  switch (arch) {
    case NVML_DEVICE_ARCH_KEPLER:
      return "Kepler";
    case NVML_DEVICE_ARCH_MAXWELL:
      return "Maxwell";
    case NVML_DEVICE_ARCH_PASCAL:
      return "Pascal";
    case NVML_DEVICE_ARCH_VOLTA:
      return "Volta";
    case NVML_DEVICE_ARCH_TURING:
      return "Turing";
    case NVML_DEVICE_ARCH_AMPERE:
      return "Ampere";
    case NVML_DEVICE_ARCH_ADA:
      return "Ada";
    case NVML_DEVICE_ARCH_HOPPER:
      return "Hopper";
    case NVML_DEVICE_ARCH_BLACKWELL:
      return "Blackwell";
    case NVML_DEVICE_ARCH_T23X:
      return "Orin";
    default:
      return "Unknown";
  }
}

const char* brand_name(nvmlBrandType_t brand) {
  switch (brand) {
    case NVML_BRAND_QUADRO:
      return "Quadro";
    case NVML_BRAND_TESLA:
      return "Tesla";
    case NVML_BRAND_NVS:
      return "NVS";
    case NVML_BRAND_GEFORCE:
      return "GeForce";
    case NVML_BRAND_TITAN:
      return "Titan";
    case NVML_BRAND_NVIDIA_RTX:
      return "NvidiaRTX";
    case NVML_BRAND_NVIDIA:
      return "Nvidia";
    case NVML_BRAND_GEFORCE_RTX:
      return "GeForceRTX";
    case NVML_BRAND_QUADRO_RTX:
      return "QuadroRTX";
    default:
      return "Unknown";
  }
}

// "00000000:3B:00.0" -> "0000:3b:00.0" (the form resource.kubernetes.io/pciBusID takes).
std::string normalise_bus_id(const char* bus_id) {
  std::string text = bus_id;
  if (text.size() == 16 && text.compare(0, 4, "0000") == 0) text = text.substr(4);
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

}  // namespace

Result<std::vector<GpuInfo>> list_gpus() {
  std::vector<GpuInfo> gpus;
  NvmlLibrary library;
  TESSERA_RETURN_IF_ERROR(library.open());
  std::string error;
  auto resolve = [&library, &error](const char* symbol, auto& out) {
    if (!library.resolve(symbol, out)) error = std::string("libnvidia-ml.so.1 has no ") + symbol;
    return error.empty();
  };
  decltype(&nvmlInit_v2) init = nullptr;
  decltype(&nvmlShutdown) shutdown = nullptr;
  decltype(&nvmlErrorString) error_string = nullptr;
  decltype(&nvmlSystemGetDriverVersion) driver_version = nullptr;
  decltype(&nvmlDeviceGetCount_v2) count = nullptr;
  decltype(&nvmlDeviceGetHandleByIndex_v2) handle = nullptr;
  decltype(&nvmlDeviceGetUUID) uuid = nullptr;
  decltype(&nvmlDeviceGetName) name = nullptr;
  decltype(&nvmlDeviceGetMemoryInfo) memory = nullptr;
  decltype(&nvmlDeviceGetMinorNumber) minor = nullptr;
  decltype(&nvmlDeviceGetPciInfo_v3) pci = nullptr;
  decltype(&nvmlDeviceGetBrand) brand = nullptr;
  decltype(&nvmlDeviceGetArchitecture) architecture = nullptr;
  decltype(&nvmlDeviceGetCudaComputeCapability) capability = nullptr;
  if (!resolve("nvmlInit_v2", init) || !resolve("nvmlShutdown", shutdown) ||
      !resolve("nvmlErrorString", error_string) ||
      !resolve("nvmlSystemGetDriverVersion", driver_version) ||
      !resolve("nvmlDeviceGetCount_v2", count) ||
      !resolve("nvmlDeviceGetHandleByIndex_v2", handle) || !resolve("nvmlDeviceGetUUID", uuid) ||
      !resolve("nvmlDeviceGetName", name) || !resolve("nvmlDeviceGetMemoryInfo", memory) ||
      !resolve("nvmlDeviceGetMinorNumber", minor) || !resolve("nvmlDeviceGetPciInfo_v3", pci) ||
      !resolve("nvmlDeviceGetBrand", brand) ||
      !resolve("nvmlDeviceGetArchitecture", architecture) ||
      !resolve("nvmlDeviceGetCudaComputeCapability", capability)) {
    return failed_precondition(error);
  }
  auto check = [&](const char* call, nvmlReturn_t result) {
    if (result != NVML_SUCCESS && error.empty())
      error = std::string(call) + " failed: " + error_string(result);
    return result == NVML_SUCCESS;
  };
  if (!check("nvmlInit_v2", init())) return unavailable(error);
  char version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = {};
  unsigned n = 0;
  if (check("nvmlSystemGetDriverVersion", driver_version(version, sizeof version)) &&
      check("nvmlDeviceGetCount_v2", count(&n))) {
    for (unsigned i = 0; i < n && error.empty(); ++i) {
      GpuInfo gpu;
      gpu.index = i;
      gpu.driver_version = version;
      nvmlDevice_t device = nullptr;
      char uuid_text[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
      char name_text[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
      nvmlMemory_t mem{};
      nvmlPciInfo_t pci_info{};
      nvmlBrandType_t brand_type{};
      nvmlDeviceArchitecture_t arch{};
      if (check("nvmlDeviceGetHandleByIndex_v2", handle(i, &device)) &&
          check("nvmlDeviceGetUUID", uuid(device, uuid_text, sizeof uuid_text)) &&
          check("nvmlDeviceGetName", name(device, name_text, sizeof name_text)) &&
          check("nvmlDeviceGetMemoryInfo", memory(device, &mem)) &&
          check("nvmlDeviceGetMinorNumber", minor(device, &gpu.minor)) &&
          check("nvmlDeviceGetPciInfo_v3", pci(device, &pci_info)) &&
          check("nvmlDeviceGetBrand", brand(device, &brand_type)) &&
          check("nvmlDeviceGetArchitecture", architecture(device, &arch)) &&
          check("nvmlDeviceGetCudaComputeCapability",
                capability(device, &gpu.cc_major, &gpu.cc_minor))) {
        gpu.uuid = uuid_text;
        gpu.product_name = name_text;
        gpu.memory_bytes = mem.total;
        gpu.pci_bus_id = normalise_bus_id(pci_info.busId);
        gpu.architecture = architecture_name(arch);
        gpu.brand = brand_name(brand_type);
        gpus.push_back(gpu);
      }
    }
  }
  shutdown();
  if (!error.empty()) return unavailable(error);
  return gpus;
}

}  // namespace tessera
