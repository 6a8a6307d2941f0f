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
  TESSERA_ASSIGN_OR_RETURN(nvmlDevice_t device, session.device_by_index(index));
  TESSERA_ASSIGN_OR_RETURN(std::string uuid, session.uuid(device));
  TESSERA_ASSIGN_OR_RETURN(std::string name, session.name(device));
  TESSERA_ASSIGN_OR_RETURN(nvmlMemory_t memory, session.memory(device));
  TESSERA_ASSIGN_OR_RETURN(unsigned minor, session.minor_number(device));
  TESSERA_ASSIGN_OR_RETURN(nvmlPciInfo_t pci, session.pci_info(device));
  TESSERA_ASSIGN_OR_RETURN(nvmlBrandType_t brand, session.brand(device));
  TESSERA_ASSIGN_OR_RETURN(nvmlDeviceArchitecture_t architecture, session.architecture(device));
  TESSERA_ASSIGN_OR_RETURN(nvml::ComputeCapability capability, session.compute_capability(device));
  gpu.uuid = uuid;
  gpu.product_name = name;
  gpu.memory_bytes = memory.total;
  gpu.minor = minor;
  gpu.pci_bus_id = normalise_bus_id(pci.busId);
  gpu.brand = brand_name(brand);
  gpu.architecture = architecture_name(architecture);
  gpu.cc_major = capability.major;
  gpu.cc_minor = capability.minor;
  return gpu;
}

}  // namespace

Result<std::vector<GpuInfo>> list_gpus() {
  using nvml::EntryPoint;
  // Every entry point up front: a driver too old fails before NVML starts.
  TESSERA_ASSIGN_OR_RETURN(
      nvml::Session opened,
      nvml::Session::open(
          nvml::kDefaultLibrary,
          {EntryPoint::nvmlSystemGetDriverVersion, EntryPoint::nvmlDeviceGetCount_v2,
           EntryPoint::nvmlDeviceGetHandleByIndex_v2, EntryPoint::nvmlDeviceGetUUID,
           EntryPoint::nvmlDeviceGetName, EntryPoint::nvmlDeviceGetMemoryInfo,
           EntryPoint::nvmlDeviceGetMinorNumber, EntryPoint::nvmlDeviceGetPciInfo_v3,
           EntryPoint::nvmlDeviceGetBrand, EntryPoint::nvmlDeviceGetArchitecture,
           EntryPoint::nvmlDeviceGetCudaComputeCapability}));
  const nvml::Session& session = opened;
  TESSERA_ASSIGN_OR_RETURN(std::string version, session.driver_version());
  TESSERA_ASSIGN_OR_RETURN(unsigned count, session.device_count());
  std::vector<GpuInfo> gpus;
  for (unsigned i = 0; i < count; ++i) {
    TESSERA_ASSIGN_OR_RETURN(GpuInfo gpu, describe_gpu(session, i));
    gpu.driver_version = version;
    gpus.push_back(std::move(gpu));
  }
  return gpus;
}

Result<std::vector<GpuInfo>> list_mig_devices() {
  TESSERA_ASSIGN_OR_RETURN(const nvml::Session session, nvml::Session::open());
  std::vector<GpuInfo> devices;
  if (!session.library().require(nvml::kMigEntryPoints).is_ok()) return devices;
  TESSERA_ASSIGN_OR_RETURN(unsigned count, session.device_count());
  for (unsigned i = 0; i < count; ++i) {
    TESSERA_ASSIGN_OR_RETURN(nvmlDevice_t parent, session.device_by_index(i));
    Result<nvml::MigMode> mode = session.mig_mode(parent);
    if (!mode.is_ok() || mode->current != NVML_DEVICE_MIG_ENABLE) continue;  // no MIG, or off
    TESSERA_ASSIGN_OR_RETURN(std::string parent_uuid, session.uuid(parent));
    TESSERA_ASSIGN_OR_RETURN(std::vector<nvmlDevice_t> migs, session.mig_devices(parent));
    for (nvmlDevice_t mig : migs) {
      GpuInfo device;
      device.index = i;
      device.parent_uuid = parent_uuid;
      TESSERA_ASSIGN_OR_RETURN(device.uuid, session.uuid(mig));
      TESSERA_ASSIGN_OR_RETURN(device.product_name, session.name(mig));
      TESSERA_ASSIGN_OR_RETURN(nvmlMemory_t memory, session.memory(mig));
      device.memory_bytes = memory.total;
      devices.push_back(std::move(device));
    }
  }
  return devices;
}

}  // namespace tessera
