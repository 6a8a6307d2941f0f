// Modules and functions. An image is PTX text, a CUDA ELF (cubin) or a fat binary (bare or in the
// runtime's wrapper): kernel names come from PTX `.entry` directives and ELF entry-point symbols,
// each kernel's wave time from SIMGPU_KERNEL_US. A fat binary whose kernels cannot all be read (a
// compressed entry) lends a function to any name asked of it.
#include <elf.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>

#include "driver.h"
#include "fatbin.h"

using namespace simgpu::driver;

namespace simgpu::driver {

using SimDeviceConfigView = const simgpu::DeviceConfig*;

Function* add_function(Driver& driver, Module& module, const std::string& name) {
  auto function = std::make_unique<Function>();
  function->name = name;
  const SimConfig& config = driver.sim->config();
  auto timed = config.kernel_wave_ns.find(name);
  if (timed == config.kernel_wave_ns.end())
    timed = config.kernel_wave_ns.find(kernel_base_name(name));
  function->wave_ns = timed != config.kernel_wave_ns.end() ? timed->second : config.default_wave_ns;
  function->module = &module;
  Function* raw = function.get();
  driver.functions.insert(raw);
  module.functions.push_back(std::move(function));
  return raw;
}

Function* find_function(Driver& driver, Module& module, const char* name) {
  for (auto& function : module.functions) {
    if (function->name == name) return function.get();
  }
  return module.open_names ? add_function(driver, module, name) : nullptr;
}

CUresult read_image(const void* image, size_t size_hint, ImageKernels& out) {
  if (!image) return CUDA_ERROR_INVALID_VALUE;
  uint32_t magic = 0;
  std::memcpy(&magic, image, sizeof magic);
  if (magic == kFatbinWrapperMagic) {
    struct Wrapper {
      uint32_t magic;
      uint32_t version;
      const void* data;
      const void* extra;
    } wrapper;
    std::memcpy(&wrapper, image, sizeof wrapper);
    return read_image(wrapper.data, 0, out);
  }
  if (magic == kFatbinMagic) {
    // The images for the architecture of the device in use (the current context's, else the
    // first visible device's).
    Driver& driver = Driver::get();
    const Context* context = current_context();
    const int device = context                          ? context->device
                       : driver.visible_devices.empty() ? 0
                                                        : driver.visible_devices.front();
    const SimDeviceConfigView config = driver.sim ? &driver.device_config(device) : nullptr;
    const unsigned sm = config ? config->cc_major * 10 + config->cc_minor : 90;
    std::optional<FatbinContents> contents = read_fatbin(image, sm);
    if (!contents) return CUDA_ERROR_INVALID_IMAGE;
    out.names = std::move(contents->kernels);
    for (ImageGlobal& global : contents->globals)
      out.globals.emplace_back(global.name, global.size);
    out.open = contents->unreadable_entries;
    return CUDA_SUCCESS;
  }
  if (std::memcmp(image, ELFMAG, SELFMAG) == 0) {
    // A bare cubin: its size is in its own headers (section headers come last in nvcc's output).
    const auto* bytes = static_cast<const uint8_t*>(image);
    Elf64_Ehdr header;
    std::memcpy(&header, bytes, sizeof header);
    const size_t size =
        size_hint ? size_hint : header.e_shoff + header.e_shnum * sizeof(Elf64_Shdr);
    std::optional<ElfSymbols> symbols = elf_symbols(bytes, size);
    if (!symbols) return CUDA_ERROR_INVALID_IMAGE;
    out.names = std::move(symbols->kernels);
    for (ImageGlobal& global : symbols->globals) out.globals.emplace_back(global.name, global.size);
    out.open = false;
    return CUDA_SUCCESS;
  }
  const std::string_view text(static_cast<const char*>(image));
  if (text.find(".version") == std::string_view::npos) return CUDA_ERROR_INVALID_IMAGE;
  out.names = ptx_entry_names(text);
  out.open = false;
  if (out.names.empty()) return CUDA_ERROR_INVALID_PTX;
  return CUDA_SUCCESS;
}

CUresult read_image_file(const char* path, std::string& out) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return CUDA_ERROR_FILE_NOT_FOUND;
  std::stringstream contents;
  contents << file.rdbuf();
  out = contents.str();
  return CUDA_SUCCESS;
}

Module* create_module(Driver& driver, Context* context, const ImageKernels& kernels) {
  auto* module = new Module();
  module->context = context;
  module->open_names = kernels.open;
  for (const std::string& name : kernels.names) add_function(driver, *module, name);
  // Variables get device addresses of their own; their bytes are part of the module's image, which
  // the simulator does not charge (the context overhead stands for a context's fixed costs).
  for (const auto& [name, size] : kernels.globals) {
    const CUdeviceptr address = driver.take_address_range(size, 256);
    Allocation& allocation = driver.allocations[address];
    allocation.size = size;
    allocation.device = context->device;
    allocation.kind = AllocationKind::kModule;
    allocation.context = context;
    module->globals[name] = {address, size};
  }
  driver.modules.insert(module);
  return module;
}

void destroy_module(Driver& driver, Module* module) {
  for (const auto& [name, global] : module->globals) driver.allocations.erase(global.first);
  for (auto& function : module->functions) driver.functions.erase(function.get());
  driver.modules.erase(module);
  delete module;
}

}  // namespace simgpu::driver

namespace {

CUresult load_module(CUmodule* out, const void* image, size_t size_hint = 0) {
  if (!out || !image) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Context* context = nullptr;
  if (CUresult r = require_context(driver, context); r != CUDA_SUCCESS) return r;
  ImageKernels kernels;
  if (CUresult r = read_image(image, size_hint, kernels); r != CUDA_SUCCESS) return r;
  *out = reinterpret_cast<CUmodule>(create_module(driver, context, kernels));
  return CUDA_SUCCESS;
}

// A CUfunction, or a CUkernel where a CUfunction goes (resolve_function).
Function* valid_function(Driver& driver, CUfunction handle) {
  return resolve_function(driver, handle);
}

}  // namespace

SIMGPU_EXPORT CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  return load_module(module, image);
}

SIMGPU_EXPORT CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int count,
                                          CUjit_option* options, void** values) {
  (void)count, (void)options, (void)values;  // JIT options do not change the simulation
  return load_module(module, image);
}

SIMGPU_EXPORT CUresult cuModuleLoadFatBinary(CUmodule* module, const void* image) {
  return load_module(module, image);
}

SIMGPU_EXPORT CUresult cuModuleLoad(CUmodule* module, const char* path) {
  if (!path) return CUDA_ERROR_INVALID_VALUE;
  std::string image;
  if (CUresult r = read_image_file(path, image); r != CUDA_SUCCESS) return r;
  return load_module(module, image.c_str(), image.size());
}

SIMGPU_EXPORT CUresult cuModuleUnload(CUmodule handle) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  auto* module = reinterpret_cast<Module*>(handle);
  if (!driver.modules.count(module) || module->library) return CUDA_ERROR_INVALID_HANDLE;
  destroy_module(driver, module);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuModuleGetFunction(CUfunction* out, CUmodule handle, const char* name) {
  if (!out || !name) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  auto* module = reinterpret_cast<Module*>(handle);
  if (!driver.modules.count(module)) return CUDA_ERROR_INVALID_HANDLE;
  Function* function = find_function(driver, *module, name);
  if (!function) return CUDA_ERROR_NOT_FOUND;
  *out = reinterpret_cast<CUfunction>(function);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuModuleGetGlobal_v2(CUdeviceptr* address, size_t* bytes, CUmodule handle,
                                            const char* name) {
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  auto* module = reinterpret_cast<Module*>(handle);
  if (!driver.modules.count(module)) return CUDA_ERROR_INVALID_HANDLE;
  auto global = module->globals.find(name);
  if (global == module->globals.end()) return CUDA_ERROR_NOT_FOUND;
  if (address) *address = global->second.first;
  if (bytes) *bytes = global->second.second;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode* mode) {
  if (!mode) return CUDA_ERROR_INVALID_VALUE;
  // As the driver reads CUDA_MODULE_LOADING: lazy unless it says EAGER (the default of 12.2+).
  const char* setting = std::getenv("CUDA_MODULE_LOADING");
  *mode = setting && std::string_view(setting) == "EAGER" ? CU_MODULE_EAGER_LOADING
                                                          : CU_MODULE_LAZY_LOADING;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuFuncGetAttribute(int* value, CUfunction_attribute attribute,
                                          CUfunction handle) {
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Function* function = valid_function(driver, handle);
  if (!function) return CUDA_ERROR_INVALID_HANDLE;
  switch (attribute) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *value = kMaxThreadsPerBlock;
      break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS:
      *value = 32;
      break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION:
      *value = 90;
      break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      *value = function->max_dynamic_shared;
      break;
    default:
      *value = 0;
      break;
  }
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuFuncSetAttribute(CUfunction handle, CUfunction_attribute attribute,
                                          int value) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Function* function = valid_function(driver, handle);
  if (!function) return CUDA_ERROR_INVALID_HANDLE;
  if (attribute == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
    if (value < 0 || value > static_cast<int>(kSharedMemPerBlockOptin))
      return CUDA_ERROR_INVALID_VALUE;
    function->max_dynamic_shared = value;
  }
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuFuncGetName(const char** name, CUfunction handle) {
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Function* function = valid_function(driver, handle);
  if (!function) return CUDA_ERROR_INVALID_HANDLE;
  *name = function->name.c_str();
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, CUfunction handle,
                                                                   int block_size,
                                                                   size_t dynamic_shared) {
  if (!blocks || block_size <= 0 || block_size > static_cast<int>(kMaxThreadsPerBlock)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (!valid_function(driver, handle)) return CUDA_ERROR_INVALID_HANDLE;
  *blocks = static_cast<int>(resident_blocks_per_sm(static_cast<unsigned>(block_size),
                                                    static_cast<unsigned>(dynamic_shared)));
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
    int* blocks, CUfunction handle, int block_size, size_t dynamic_shared, unsigned int flags) {
  (void)flags;
  return cuOccupancyMaxActiveBlocksPerMultiprocessor(blocks, handle, block_size, dynamic_shared);
}

// Cache and shared-memory bank preferences: accepted and kept nowhere, as the simulator has one
// L1/shared split (a real driver treats them as hints too).
SIMGPU_EXPORT CUresult cuFuncSetCacheConfig(CUfunction handle, CUfunc_cache config) {
  if (config > CU_FUNC_CACHE_PREFER_EQUAL) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  return valid_function(driver, handle) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

SIMGPU_EXPORT CUresult cuFuncSetSharedMemConfig(CUfunction handle, CUsharedconfig config) {
  if (config > CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  return valid_function(driver, handle) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

SIMGPU_EXPORT CUresult cuFuncGetModule(CUmodule* module, CUfunction handle) {
  if (!module) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Function* function = valid_function(driver, handle);
  if (!function) return CUDA_ERROR_INVALID_HANDLE;
  *module = reinterpret_cast<CUmodule>(function->module);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuFuncGetParamInfo(CUfunction handle, size_t, size_t*, size_t*) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (!valid_function(driver, handle)) return CUDA_ERROR_INVALID_HANDLE;
  return CUDA_ERROR_NOT_SUPPORTED;  // parameter layouts are not read from images
}

SIMGPU_EXPORT CUresult cuFuncIsLoaded(CUfunctionLoadingState* state, CUfunction handle) {
  if (!state) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (!valid_function(driver, handle)) return CUDA_ERROR_INVALID_HANDLE;
  *state = CU_FUNCTION_LOADING_STATE_LOADED;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuFuncLoad(CUfunction handle) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  return valid_function(driver, handle) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

// The dynamic shared memory each of `blocks` resident blocks of `block_size` threads can have on
// one SM: the SM's shared memory split between them, less what the driver reserves per block.
SIMGPU_EXPORT CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t* bytes, CUfunction handle,
                                                               int blocks, int block_size) {
  if (!bytes || blocks <= 0 || block_size <= 0 ||
      block_size > static_cast<int>(kMaxThreadsPerBlock)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (!valid_function(driver, handle)) return CUDA_ERROR_INVALID_HANDLE;
  const uint64_t threads =
      uint64_t{static_cast<unsigned>(blocks)} * static_cast<unsigned>(block_size);
  if (threads > kMaxThreadsPerSm || static_cast<unsigned>(blocks) > kMaxBlocksPerSm) {
    *bytes = 0;
    return CUDA_SUCCESS;
  }
  const uint64_t per_block = kSharedMemPerSm / static_cast<unsigned>(blocks);
  *bytes = per_block > 1024 ? std::min<uint64_t>(per_block - 1024, kSharedMemPerBlockOptin) : 0;
  return CUDA_SUCCESS;
}

namespace {

// The cluster size a launch configuration asks for (CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION), 1 if
// none; 0 for an invalid configuration.
unsigned cluster_blocks(const CUlaunchConfig& config) {
  for (unsigned i = 0; i < config.numAttrs; ++i) {
    if (!config.attrs) return 0;
    if (config.attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
      const auto& dim = config.attrs[i].value.clusterDim;
      return dim.x * dim.y * dim.z;
    }
  }
  return 1;
}

// Hopper's portable cluster limit (16 with the non-portable opt-in, not modelled).
constexpr unsigned kMaxClusterBlocks = 8;

}  // namespace

SIMGPU_EXPORT CUresult cuOccupancyMaxPotentialClusterSize(int* size, CUfunction handle,
                                                          const CUlaunchConfig* config) {
  if (!size || !config) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (!valid_function(driver, handle)) return CUDA_ERROR_INVALID_HANDLE;
  *size = static_cast<int>(kMaxClusterBlocks);
  return CUDA_SUCCESS;
}

// Clusters that fit on the device at once: its SMs times the blocks resident per SM, in whole
// clusters.
SIMGPU_EXPORT CUresult cuOccupancyMaxActiveClusters(int* clusters, CUfunction handle,
                                                    const CUlaunchConfig* config) {
  if (!clusters || !config) return CUDA_ERROR_INVALID_VALUE;
  const unsigned size = cluster_blocks(*config);
  const unsigned threads = config->blockDimX * config->blockDimY * config->blockDimZ;
  if (size == 0 || size > kMaxClusterBlocks || threads == 0 || threads > kMaxThreadsPerBlock) {
    return CUDA_ERROR_INVALID_CLUSTER_SIZE;
  }
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Function* function = valid_function(driver, handle);
  if (!function) return CUDA_ERROR_INVALID_HANDLE;
  const uint64_t resident =
      uint64_t{driver.device_config(function->module->context->device).sm_count} *
      resident_blocks_per_sm(threads, config->sharedMemBytes);
  *clusters = static_cast<int>(resident / size);
  return CUDA_SUCCESS;
}
