// Device enumeration and identity: what the simulator's device table says, in NVML's terms.
#include <cstdio>
#include <cstring>
#include <string_view>

#include "nvml_internal.h"

namespace simgpu::nvml {
namespace {

struct PciAddress {
  unsigned int domain = 0;
  unsigned int bus = 0;
  unsigned int device = 0;
  unsigned int function = 0;
};

// Accepts "domain:bus:device.function" (any domain width, as nvmlDeviceGetHandleByPciBusId does)
// and "bus:device.function".
bool parse_pci_address(const char* text, PciAddress& out) {
  PciAddress address;
  int consumed = 0;
  if (std::sscanf(text, "%x:%x:%x.%x%n", &address.domain, &address.bus, &address.device,
                  &address.function, &consumed) == 4 &&
      text[consumed] == '\0') {
    out = address;
    return true;
  }
  address = PciAddress{};
  if (std::sscanf(text, "%x:%x.%x%n", &address.bus, &address.device, &address.function,
                  &consumed) == 3 &&
      text[consumed] == '\0') {
    out = address;
    return true;
  }
  return false;
}

bool same_address(const PciAddress& a, const PciAddress& b) {
  return a.domain == b.domain && a.bus == b.bus && a.device == b.device && a.function == b.function;
}

bool name_contains(const DeviceConfig& config, std::string_view part) {
  return std::string_view(config.name).find(part) != std::string_view::npos;
}

nvmlDeviceArchitecture_t architecture(const DeviceConfig& config) {
  const unsigned int cc = config.cc_major * 10 + config.cc_minor;
  if (cc >= 100) return NVML_DEVICE_ARCH_BLACKWELL;  // 10.x and 12.x
  if (cc >= 90) return NVML_DEVICE_ARCH_HOPPER;
  if (cc == 89) return NVML_DEVICE_ARCH_ADA;
  if (cc == 87) return NVML_DEVICE_ARCH_T23X;
  if (cc >= 80) return NVML_DEVICE_ARCH_AMPERE;
  if (cc == 75) return NVML_DEVICE_ARCH_TURING;
  if (cc >= 70) return NVML_DEVICE_ARCH_VOLTA;
  if (cc >= 60) return NVML_DEVICE_ARCH_PASCAL;
  if (cc >= 50) return NVML_DEVICE_ARCH_MAXWELL;
  if (cc >= 30) return NVML_DEVICE_ARCH_KEPLER;
  return NVML_DEVICE_ARCH_UNKNOWN;
}

// FP32 cores per SM by compute capability (CUDA programming guide, "Arithmetic Instructions").
unsigned int cores_per_sm(const DeviceConfig& config) {
  const unsigned int cc = config.cc_major * 10 + config.cc_minor;
  if (cc == 60 || cc == 70 || cc == 72 || cc == 75 || cc == 80) return 64;
  if (cc >= 30 && cc < 50) return 192;
  return 128;  // Maxwell, Pascal 6.1/6.2, Ampere 8.6/8.7, Ada, Hopper, Blackwell
}

nvmlBrandType_t brand(const DeviceConfig& config) {
  if (name_contains(config, "GeForce RTX")) return NVML_BRAND_GEFORCE_RTX;
  if (name_contains(config, "GeForce")) return NVML_BRAND_GEFORCE;
  if (name_contains(config, "TITAN")) return NVML_BRAND_TITAN;
  if (name_contains(config, "Quadro")) return NVML_BRAND_QUADRO;
  if (name_contains(config, "Tesla")) return NVML_BRAND_TESLA;
  if (name_contains(config, "RTX")) return NVML_BRAND_NVIDIA_RTX;
  return NVML_BRAND_NVIDIA;  // what A100, H100 and H200 report
}

nvmlReturn_t handle_by_index(unsigned int index, nvmlDevice_t* device) {
  Simulator* sim = initialised_simulator();
  if (sim == nullptr) return NVML_ERROR_UNINITIALIZED;
  if (device == nullptr || index >= static_cast<unsigned int>(sim->device_count())) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  *device = handle_for(static_cast<int>(index));
  return NVML_SUCCESS;
}

nvmlReturn_t handle_by_pci_bus_id(const char* pci_bus_id, nvmlDevice_t* device) {
  Simulator* sim = initialised_simulator();
  if (sim == nullptr) return NVML_ERROR_UNINITIALIZED;
  PciAddress wanted;
  if (pci_bus_id == nullptr || device == nullptr || !parse_pci_address(pci_bus_id, wanted)) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  for (int i = 0; i < sim->device_count(); ++i) {
    PciAddress address;
    if (parse_pci_address(sim->device(i).pci_bus_id, address) && same_address(address, wanted)) {
      *device = handle_for(i);
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

}  // namespace
}  // namespace simgpu::nvml

using simgpu::nvml::Device;
using simgpu::nvml::mig_device_name;
using simgpu::nvml::resolve;

extern "C" {

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* deviceCount) {
  simgpu::Simulator* sim = simgpu::nvml::initialised_simulator();
  if (sim == nullptr) return NVML_ERROR_UNINITIALIZED;
  if (deviceCount == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *deviceCount = static_cast<unsigned int>(sim->device_count());
  return NVML_SUCCESS;
}

// v1 counted only the devices the caller may use; here that is every device.
nvmlReturn_t nvmlDeviceGetCount(unsigned int* deviceCount) {
  return nvmlDeviceGetCount_v2(deviceCount);
}

// Works for an unhealthy device too: that is how health checkers find out which one it is.
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  return simgpu::nvml::handle_by_index(index, device);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t* device) {
  return simgpu::nvml::handle_by_index(index, device);
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
  simgpu::Simulator* sim = simgpu::nvml::initialised_simulator();
  if (sim == nullptr) return NVML_ERROR_UNINITIALIZED;
  if (uuid == nullptr || device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  for (int i = 0; i < sim->device_count(); ++i) {
    if (std::strcmp(sim->device(i).uuid, uuid) == 0) {
      *device = simgpu::nvml::handle_for(i);
      return NVML_SUCCESS;
    }
  }
  // A MIG device's UUID gives its MIG device handle.
  if (const auto mig = sim->find_mig_device(uuid)) {
    const simgpu::MigGpuInstance& instance =
        sim->mig_state(mig->device).gpu_instances[mig->gpu_instance];
    *device = simgpu::nvml::mig_handle_for(mig->device, instance.id,
                                           instance.compute[mig->compute_instance].id);
    return NVML_SUCCESS;
  }
  return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* pciBusId, nvmlDevice_t* device) {
  return simgpu::nvml::handle_by_pci_bus_id(pciBusId, device);
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char* pciBusId, nvmlDevice_t* device) {
  return simgpu::nvml::handle_by_pci_bus_id(pciBusId, device);
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index) {
  Device dev;
  if (nvmlReturn_t result = resolve(device, dev); result != NVML_SUCCESS) return result;
  if (index == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  // A MIG device's index is the one nvmlDeviceGetMigDeviceHandleByIndex takes.
  *index = dev.is_mig ? dev.mig.compute_instance.mig_index : static_cast<unsigned int>(dev.index);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
  Device dev;
  if (nvmlReturn_t result = resolve(device, dev); result != NVML_SUCCESS) return result;
  if (name == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (dev.is_mig) return simgpu::nvml::copy_string(mig_device_name(dev).c_str(), name, length);
  return simgpu::nvml::copy_string(dev.config().name, name, length);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  Device dev;
  if (nvmlReturn_t result = resolve(device, dev); result != NVML_SUCCESS) return result;
  if (uuid == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (dev.is_mig) return simgpu::nvml::copy_string(dev.mig.compute_instance.uuid, uuid, length);
  return simgpu::nvml::copy_string(dev.config().uuid, uuid, length);
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int* minorNumber) {
  Device dev;
  if (nvmlReturn_t result = resolve(device, dev); result != NVML_SUCCESS) return result;
  if (minorNumber == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *minorNumber = dev.config().minor_number;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  Device dev;
  if (nvmlReturn_t result = resolve(device, dev); result != NVML_SUCCESS) return result;
  if (pci == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  simgpu::nvml::PciAddress address;
  if (!simgpu::nvml::parse_pci_address(dev.config().pci_bus_id, address)) {
    return NVML_ERROR_UNKNOWN;
  }
  std::memset(pci, 0, sizeof *pci);
  pci->domain = address.domain;
  pci->bus = address.bus;
  pci->device = address.device;
  std::snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT,
                address.domain & 0xFFFF, address.bus, address.device);
  std::snprintf(pci->busId, sizeof pci->busId, NVML_DEVICE_PCI_BUS_ID_FMT, address.domain,
                address.bus, address.device);
  pci->pciDeviceId = (simgpu::pci_device_id(dev.config()) << 16) | simgpu::kNvidiaPciVendorId;
  // Board vendors are not modelled: the subsystem repeats the device id, as on NVIDIA's own boards.
  pci->pciSubSystemId = pci->pciDeviceId;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t* type) {
  Device dev;
  if (nvmlReturn_t result = resolve(device, dev); result != NVML_SUCCESS) return result;
  if (type == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *type = simgpu::nvml::brand(dev.config());
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t* mode) {
  Device dev;
  if (nvmlReturn_t result = resolve(device, dev); result != NVML_SUCCESS) return result;
  if (mode == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  // "If MIG is enabled on a GPU, device must be MIG device handle" (nvml.h).
  if (!dev.is_mig && dev.mig_enabled()) return NVML_ERROR_NOT_SUPPORTED;
  *mode = static_cast<nvmlComputeMode_t>(dev.config().compute_mode);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t* arch) {
  Device dev;
  if (nvmlReturn_t result = resolve(device, dev); result != NVML_SUCCESS) return result;
  if (arch == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *arch = simgpu::nvml::architecture(dev.config());
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int* major, int* minor) {
  Device dev;
  if (nvmlReturn_t result = resolve(device, dev); result != NVML_SUCCESS) return result;
  if (major == nullptr || minor == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *major = static_cast<int>(dev.config().cc_major);
  *minor = static_cast<int>(dev.config().cc_minor);
  return NVML_SUCCESS;
}

// The simulated GPUs of one machine reach each other (as NVSwitch-connected H200s do), over
// PCIe as well as NVLink; atomics too. Between a device and itself every capability holds.
nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2,
                                    nvmlGpuP2PCapsIndex_t index, nvmlGpuP2PStatus_t* status) {
  Device first, second;
  if (nvmlReturn_t result = resolve(device1, first); result != NVML_SUCCESS) return result;
  if (nvmlReturn_t result = resolve(device2, second); result != NVML_SUCCESS) return result;
  if (status == nullptr || index < NVML_P2P_CAPS_INDEX_READ ||
      index >= NVML_P2P_CAPS_INDEX_UNKNOWN) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  *status = NVML_P2P_STATUS_OK;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNumGpuCores(nvmlDevice_t device, unsigned int* numCores) {
  Device dev;
  if (nvmlReturn_t result = resolve(device, dev); result != NVML_SUCCESS) return result;
  if (numCores == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (dev.is_mig || dev.mig_enabled()) return NVML_ERROR_NOT_SUPPORTED;  // per nvml.h
  *numCores = dev.config().sm_count * simgpu::nvml::cores_per_sm(dev.config());
  return NVML_SUCCESS;
}

}  // extern "C"
