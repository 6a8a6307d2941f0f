#include "tessera/gpu_info.h"

#include <cctype>

#include "tessera/nvml.h"

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

// GPU `index` as NVML describes it (all but the driver version).
Result<GpuInfo> describe_gpu(const nvml::Session& session, unsigned index) {
  GpuInfo gpu;
  gpu.index = index;
  Result<nvmlDevice_t> device = session.device_by_index(index);
  if (!device.is_ok()) return device.status();
  Result<std::string> uuid = session.uuid(*device);
  if (!uuid.is_ok()) return uuid.status();
  Result<std::string> name = session.name(*device);
  if (!name.is_ok()) return name.status();
  Result<nvmlMemory_t> memory = session.memory(*device);
  if (!memory.is_ok()) return memory.status();
  Result<unsigned> minor = session.minor_number(*device);
  if (!minor.is_ok()) return minor.status();
  Result<nvmlPciInfo_t> pci = session.pci_info(*device);
  if (!pci.is_ok()) return pci.status();
  Result<nvmlBrandType_t> brand = session.brand(*device);
  if (!brand.is_ok()) return brand.status();
  Result<nvmlDeviceArchitecture_t> architecture = session.architecture(*device);
  if (!architecture.is_ok()) return architecture.status();
  Result<nvml::ComputeCapability> capability = session.compute_capability(*device);
  if (!capability.is_ok()) return capability.status();
  gpu.uuid = *uuid;
  gpu.product_name = *name;
  gpu.memory_bytes = memory->total;
  gpu.minor = *minor;
  gpu.pci_bus_id = normalise_bus_id(pci->busId);
  gpu.brand = brand_name(*brand);
  gpu.architecture = architecture_name(*architecture);
  gpu.cc_major = capability->major;
  gpu.cc_minor = capability->minor;
  return gpu;
}

}  // namespace

Result<std::vector<GpuInfo>> list_gpus() {
  using nvml::EntryPoint;
  // Every entry point up front: a driver too old fails before NVML starts.
  Result<nvml::Session> opened = nvml::Session::open(
      nvml::kDefaultLibrary,
      {EntryPoint::nvmlSystemGetDriverVersion, EntryPoint::nvmlDeviceGetCount_v2,
       EntryPoint::nvmlDeviceGetHandleByIndex_v2, EntryPoint::nvmlDeviceGetUUID,
       EntryPoint::nvmlDeviceGetName, EntryPoint::nvmlDeviceGetMemoryInfo,
       EntryPoint::nvmlDeviceGetMinorNumber, EntryPoint::nvmlDeviceGetPciInfo_v3,
       EntryPoint::nvmlDeviceGetBrand, EntryPoint::nvmlDeviceGetArchitecture,
       EntryPoint::nvmlDeviceGetCudaComputeCapability});
  if (!opened.is_ok()) return opened.status();
  const nvml::Session& session = *opened;
  Result<std::string> version = session.driver_version();
  if (!version.is_ok()) return version.status();
  Result<unsigned> count = session.device_count();
  if (!count.is_ok()) return count.status();
  std::vector<GpuInfo> gpus;
  for (unsigned i = 0; i < *count; ++i) {
    Result<GpuInfo> gpu = describe_gpu(session, i);
    if (!gpu.is_ok()) return gpu.status();
    gpu->driver_version = *version;
    gpus.push_back(std::move(gpu).value());
  }
  return gpus;
}

}  // namespace tessera
