// Initialisation, devices, error strings and entry-point lookup.
#include <dlfcn.h>

#include <cstdio>
#include <cstring>

#include "config.h"
#include "driver.h"
#include "tessera/cuda_abi.h"

using namespace simgpu::driver;

namespace {

CUresult device_index(Driver& driver, CUdevice ordinal, int& device) {
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  if (!driver.valid_ordinal(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  device = driver.device_of_ordinal(ordinal);
  return CUDA_SUCCESS;
}

// "GPU-5e1a0000-7e55-..." -> 16 bytes.
void uuid_bytes(const char* text, CUuuid* out) {
  std::memset(out, 0, sizeof *out);
  int byte = 0;
  for (const char* p = text + 4; *p && byte < 16; ++p) {
    if (*p == '-') continue;
    auto nibble = [](char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; };
    if (!p[1]) break;
    out->bytes[byte++] = static_cast<char>(nibble(p[0]) << 4 | nibble(p[1]));
    ++p;
  }
}

// This library's own handle, so cuGetProcAddress hands out the simulator's functions even when
// an LD_PRELOAD library exports the same names.
void* own_handle() {
  static void* handle = [] {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&own_handle), &info) == 0 || !info.dli_fname) {
      return static_cast<void*>(nullptr);
    }
    return dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  }();
  return handle;
}

CUresult proc_address(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                      CUdriverProcAddressQueryResult* status) {
  if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  if (!symbol || !pfn || cuda_version <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (flags > (CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *pfn = nullptr;
  const tessera::ProcResolution resolution =
      tessera::resolve_proc_symbol(symbol, cuda_version, flags);
  if (status) *status = resolution.status;
  if (resolution.status != CU_GET_PROC_ADDRESS_SUCCESS) {
    if (trace_enabled()) {
      std::fprintf(stderr, "simgpu: no entry point %s at version %d (flags %llu)\n", symbol,
                   cuda_version, static_cast<unsigned long long>(flags));
    }
    return CUDA_ERROR_NOT_FOUND;
  }
  void* handle = own_handle();
  void* function = handle ? dlsym(handle, resolution.symbol) : nullptr;
  if (!function) {
    // A real driver entry point that the simulator does not implement.
    if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (trace_enabled()) {
      std::fprintf(stderr, "simgpu: entry point %s (%s) not simulated\n", symbol,
                   resolution.symbol);
    }
    return CUDA_ERROR_NOT_FOUND;
  }
  *pfn = function;
  return CUDA_SUCCESS;
}

}  // namespace

namespace simgpu::driver {
CUresult get_proc_address(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                          CUdriverProcAddressQueryResult* status) {
  return proc_address(symbol, pfn, cuda_version, flags, status);
}
}  // namespace simgpu::driver

SIMGPU_EXPORT CUresult cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  return driver.initialize();
}

SIMGPU_EXPORT CUresult cuDriverGetVersion(int* version) {
  if (!version) return CUDA_ERROR_INVALID_VALUE;
  *version = driver_version();
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuDeviceGetCount(int* count) {
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  *count = static_cast<int>(driver.visible_devices.size());
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  if (!driver.valid_ordinal(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuDeviceGetName(char* name, int length, CUdevice ordinal) {
  if (!name || length <= 0) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  int device = 0;
  if (CUresult r = device_index(driver, ordinal, device); r != CUDA_SUCCESS) return r;
  std::snprintf(name, static_cast<size_t>(length), "%s", driver.device_config(device).name);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice ordinal) {
  if (!uuid) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  int device = 0;
  if (CUresult r = device_index(driver, ordinal, device); r != CUDA_SUCCESS) return r;
  uuid_bytes(driver.device_config(device).uuid, uuid);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice ordinal) {
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  int device = 0;
  if (CUresult r = device_index(driver, ordinal, device); r != CUDA_SUCCESS) return r;
  *bytes = driver.device_config(device).total_memory;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuDeviceComputeCapability(int* major, int* minor, CUdevice ordinal) {
  if (!major || !minor) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  int device = 0;
  if (CUresult r = device_index(driver, ordinal, device); r != CUDA_SUCCESS) return r;
  *major = static_cast<int>(driver.device_config(device).cc_major);
  *minor = static_cast<int>(driver.device_config(device).cc_minor);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attribute,
                                            CUdevice ordinal) {
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  int device = 0;
  if (CUresult r = device_index(driver, ordinal, device); r != CUDA_SUCCESS) return r;
  const simgpu::DeviceConfig& config = driver.device_config(device);
  unsigned bus = 0;
  std::sscanf(config.pci_bus_id, "%*x:%x", &bus);
  switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      *value = static_cast<int>(config.sm_count);
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
      *value = static_cast<int>(config.cc_major);
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
      *value = static_cast<int>(config.cc_minor);
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *value = kMaxThreadsPerBlock;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
      *value = 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:
      *value = 64;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
      *value = 2147483647;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
      *value = 65535;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
      *value = 49152;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
      *value = kSharedMemPerBlockOptin;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
      *value = kSharedMemPerSm;
      break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
      *value = 32;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
      *value = kMaxThreadsPerSm;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR:
      *value = kMaxBlocksPerSm;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK:
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR:
      *value = 65536;
      break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
      *value = 1980000;
      break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE:
      *value = 2619000;
      break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH:
      *value = 6144;
      break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE:
      *value = kL2CacheBytes;
      break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT:
      *value = 32;
      break;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID:
      *value = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
      *value = static_cast<int>(bus);
      break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:
      *value = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED:
      *value = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS:
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED:
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED:
      *value = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE:
      *value = CU_COMPUTEMODE_DEFAULT;
      break;
    case CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID:
    case CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID:  // as NVML answers pciSubSystemId
      *value = static_cast<int>(simgpu::pci_device_id(config) << 16 | simgpu::kNvidiaPciVendorId);
      break;
    case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK:
      *value = 1024;  // what resident_blocks_per_sm reserves per block
      break;
    // What an H100/H200 reports (deviceQuery); libraries size their choices by these, and a zero
    // where hardware never has one (an alignment, a limit) makes them refuse the device.
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY:
      *value = 65536;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH:
      *value = 2147483647;
      break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT:
    case CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT:
      *value = 512;
      break;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP:
    case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM:
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_MULTI_DEVICE_LAUNCH:
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES:
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST:
    case CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH:
    case CU_DEVICE_ATTRIBUTE_DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR:
    case CU_DEVICE_ATTRIBUTE_TENSOR_MAP_ACCESS_SUPPORTED:
      *value = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO:
      *value = 2;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE:
      *value = kMaxPersistingL2Bytes;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE:
      *value = 134213632;
      break;
    case CU_DEVICE_ATTRIBUTE_MEM_SYNC_DOMAIN_COUNT:
      *value = 4;
      break;
    case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES:
      *value = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
      break;
    case CU_DEVICE_ATTRIBUTE_NUMA_ID:
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID:
      *value = -1;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH:
      *value = 131072;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT:
      *value = 131072;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH:
      *value = 16384;
      break;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT:
      *value = 4;
      break;
    case CU_DEVICE_ATTRIBUTE_TCC_DRIVER:
    case CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT:
      *value = 0;
      break;
    default:
      *value = 0;
      break;
  }
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuDeviceGetPCIBusId(char* bus_id, int length, CUdevice ordinal) {
  if (!bus_id || length <= 0) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  int device = 0;
  if (CUresult r = device_index(driver, ordinal, device); r != CUDA_SUCCESS) return r;
  std::snprintf(bus_id, static_cast<size_t>(length), "%s", driver.device_config(device).pci_bus_id);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuDeviceGetByPCIBusId(CUdevice* ordinal, const char* bus_id) {
  if (!ordinal || !bus_id) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  for (size_t i = 0; i < driver.visible_devices.size(); ++i) {
    if (strcasecmp(driver.device_config(driver.visible_devices[i]).pci_bus_id, bus_id) == 0) {
      *ordinal = static_cast<CUdevice>(i);
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_DEVICE;
}

SIMGPU_EXPORT CUresult cuGetErrorString(CUresult error, const char** text) {
  if (!text) return CUDA_ERROR_INVALID_VALUE;
  *text = tessera::cu_result_string(error);
  return *text ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIMGPU_EXPORT CUresult cuGetErrorName(CUresult error, const char** text) {
  if (!text) return CUDA_ERROR_INVALID_VALUE;
  *text = tessera::cu_result_name(error);
  return *text ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIMGPU_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cuda_version,
                                           cuuint64_t flags,
                                           CUdriverProcAddressQueryResult* status) {
  return proc_address(symbol, pfn, cuda_version, flags, status);
}
