// Modules and functions. Images are PTX text: kernel names come from its `.entry` directives and
// each kernel's wave time from SIMGPU_KERNEL_US.
#include <fstream>
#include <sstream>
#include <string_view>

#include "driver.h"

using namespace simgpu::driver;

namespace {

std::vector<std::string> ptx_entry_names(std::string_view ptx) {
  std::vector<std::string> names;
  size_t pos = 0;
  while ((pos = ptx.find(".entry", pos)) != std::string_view::npos) {
    pos += 6;
    if (pos < ptx.size() && ptx[pos] != ' ' && ptx[pos] != '\t') continue;
    while (pos < ptx.size() && (ptx[pos] == ' ' || ptx[pos] == '\t')) ++pos;
    size_t end = pos;
    while (end < ptx.size() && ptx[end] != '(' && ptx[end] != ' ' && ptx[end] != '\n' &&
           ptx[end] != '\t' && ptx[end] != '\r') {
      ++end;
    }
    if (end > pos) names.emplace_back(ptx.substr(pos, end - pos));
    pos = end;
  }
  return names;
}

CUresult load_ptx(CUmodule* out, std::string_view image) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Context* context = nullptr;
  if (CUresult r = require_context(driver, context); r != CUDA_SUCCESS) return r;
  if (image.find(".version") == std::string_view::npos) return CUDA_ERROR_INVALID_IMAGE;
  const std::vector<std::string> names = ptx_entry_names(image);
  if (names.empty()) return CUDA_ERROR_INVALID_PTX;
  auto* module = new Module();
  module->context = context;
  const simgpu::SimConfig& config = driver.sim->config();
  for (const std::string& name : names) {
    auto function = std::make_unique<Function>();
    function->name = name;
    auto timed = config.kernel_wave_ns.find(name);
    function->wave_ns =
        timed != config.kernel_wave_ns.end() ? timed->second : config.default_wave_ns;
    function->module = module;
    driver.functions.insert(function.get());
    module->functions.push_back(std::move(function));
  }
  driver.modules.insert(module);
  *out = reinterpret_cast<CUmodule>(module);
  return CUDA_SUCCESS;
}

std::string_view image_text(const void* image) {
  return image ? std::string_view(static_cast<const char*>(image)) : std::string_view();
}

Function* valid_function(Driver& driver, CUfunction handle) {
  auto* function = reinterpret_cast<Function*>(handle);
  return driver.functions.count(function) ? function : nullptr;
}

}  // namespace

SIMGPU_EXPORT CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  if (!image) return CUDA_ERROR_INVALID_VALUE;
  return load_ptx(module, image_text(image));
}

SIMGPU_EXPORT CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int count,
                                          CUjit_option* options, void** values) {
  (void)count, (void)options, (void)values;  // JIT options do not change the simulation
  if (!image) return CUDA_ERROR_INVALID_VALUE;
  return load_ptx(module, image_text(image));
}

SIMGPU_EXPORT CUresult cuModuleLoad(CUmodule* module, const char* path) {
  if (!path) return CUDA_ERROR_INVALID_VALUE;
  std::ifstream file(path, std::ios::binary);
  if (!file) return CUDA_ERROR_FILE_NOT_FOUND;
  std::stringstream contents;
  contents << file.rdbuf();
  return load_ptx(module, contents.str());
}

SIMGPU_EXPORT CUresult cuModuleUnload(CUmodule handle) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  auto* module = reinterpret_cast<Module*>(handle);
  if (!driver.modules.count(module)) return CUDA_ERROR_INVALID_HANDLE;
  for (auto& function : module->functions) driver.functions.erase(function.get());
  driver.modules.erase(module);
  delete module;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuModuleGetFunction(CUfunction* out, CUmodule handle, const char* name) {
  if (!out || !name) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  auto* module = reinterpret_cast<Module*>(handle);
  if (!driver.modules.count(module)) return CUDA_ERROR_INVALID_HANDLE;
  for (auto& function : module->functions) {
    if (function->name == name) {
      *out = reinterpret_cast<CUfunction>(function.get());
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_NOT_FOUND;
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
