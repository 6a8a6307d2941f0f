// The context-independent loading API of CUDA 12+ (cuLibrary*, cuKernel*), which the runtime uses
// to load the kernels a program registers: a library holds an image's kernel names; each context
// that uses it gets a module of its own on first use, freed with the context or the library.
#include <cstring>

#include "driver.h"

using namespace simgpu::driver;

namespace {

Library* valid_library(Driver& driver, CUlibrary handle) {
  auto* library = reinterpret_cast<Library*>(handle);
  return driver.libraries.count(library) ? library : nullptr;
}

Kernel* valid_kernel(Driver& driver, CUkernel handle) {
  auto* kernel = reinterpret_cast<Kernel*>(handle);
  return driver.kernels.count(kernel) ? kernel : nullptr;
}

Kernel* kernel_of(Driver& driver, Library& library, const std::string& name) {
  for (auto& kernel : library.kernel_handles) {
    if (kernel->name == name) return kernel.get();
  }
  auto kernel = std::make_unique<Kernel>();
  kernel->library = &library;
  kernel->name = name;
  driver.kernels.insert(kernel.get());
  library.kernel_handles.push_back(std::move(kernel));
  return library.kernel_handles.back().get();
}

bool library_has_kernel(const Library& library, const char* name) {
  if (library.kernels.open) return true;
  for (const std::string& known : library.kernels.names) {
    if (known == name) return true;
  }
  return false;
}

// The library's module in the current context, loaded there on first use.
CUresult module_in_current_context(Driver& driver, Library& library, Module*& out) {
  Context* context = nullptr;
  if (CUresult r = require_context(driver, context); r != CUDA_SUCCESS) return r;
  auto found = library.modules.find(context);
  if (found != library.modules.end()) {
    out = found->second;
    return CUDA_SUCCESS;
  }
  Module* module = create_module(driver, context, library.kernels);
  module->library = &library;
  library.modules[context] = module;
  out = module;
  return CUDA_SUCCESS;
}

CUresult load_library(CUlibrary* out, const void* image, size_t size_hint) {
  if (!out || !image) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  auto library = std::make_unique<Library>();
  if (CUresult r = read_image(image, size_hint, library->kernels); r != CUDA_SUCCESS) return r;
  for (const std::string& name : library->kernels.names) kernel_of(driver, *library, name);
  Library* raw = library.release();
  driver.libraries.insert(raw);
  *out = reinterpret_cast<CUlibrary>(raw);
  return CUDA_SUCCESS;
}

}  // namespace

namespace simgpu::driver {

Function* resolve_function(Driver& driver, CUfunction handle) {
  auto* function = reinterpret_cast<Function*>(handle);
  if (driver.functions.count(function)) return function;
  Kernel* kernel = valid_kernel(driver, reinterpret_cast<CUkernel>(handle));
  if (!kernel) return nullptr;
  Module* module = nullptr;
  if (module_in_current_context(driver, *kernel->library, module) != CUDA_SUCCESS) return nullptr;
  return find_function(driver, *module, kernel->name.c_str());
}

}  // namespace simgpu::driver

SIMGPU_EXPORT CUresult cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option*,
                                         void**, unsigned int, CUlibraryOption*, void**,
                                         unsigned int) {
  return load_library(library, code, 0);
}

SIMGPU_EXPORT CUresult cuLibraryLoadFromFile(CUlibrary* library, const char* path, CUjit_option*,
                                             void**, unsigned int, CUlibraryOption*, void**,
                                             unsigned int) {
  if (!path) return CUDA_ERROR_INVALID_VALUE;
  std::string image;
  if (CUresult r = read_image_file(path, image); r != CUDA_SUCCESS) return r;
  return load_library(library, image.c_str(), image.size());
}

SIMGPU_EXPORT CUresult cuLibraryUnload(CUlibrary handle) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  Library* library = valid_library(driver, handle);
  if (!library) return CUDA_ERROR_INVALID_HANDLE;
  for (const auto& [context, module] : library->modules) destroy_module(driver, module);
  for (auto& kernel : library->kernel_handles) driver.kernels.erase(kernel.get());
  driver.libraries.erase(library);
  delete library;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuLibraryGetKernel(CUkernel* out, CUlibrary handle, const char* name) {
  if (!out || !name) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  Library* library = valid_library(driver, handle);
  if (!library) return CUDA_ERROR_INVALID_HANDLE;
  if (!library_has_kernel(*library, name)) return CUDA_ERROR_NOT_FOUND;
  *out = reinterpret_cast<CUkernel>(kernel_of(driver, *library, name));
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuLibraryGetKernelCount(unsigned int* count, CUlibrary handle) {
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  Library* library = valid_library(driver, handle);
  if (!library) return CUDA_ERROR_INVALID_HANDLE;
  *count = static_cast<unsigned>(library->kernels.names.size());
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuLibraryEnumerateKernels(CUkernel* kernels, unsigned int count,
                                                 CUlibrary handle) {
  if (!kernels) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  Library* library = valid_library(driver, handle);
  if (!library) return CUDA_ERROR_INVALID_HANDLE;
  const std::vector<std::string>& names = library->kernels.names;
  for (unsigned i = 0; i < count && i < names.size(); ++i) {
    kernels[i] = reinterpret_cast<CUkernel>(kernel_of(driver, *library, names[i]));
  }
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuLibraryGetModule(CUmodule* out, CUlibrary handle) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  Library* library = valid_library(driver, handle);
  if (!library) return CUDA_ERROR_INVALID_HANDLE;
  Module* module = nullptr;
  if (CUresult r = module_in_current_context(driver, *library, module); r != CUDA_SUCCESS) return r;
  *out = reinterpret_cast<CUmodule>(module);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuKernelGetFunction(CUfunction* out, CUkernel handle) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  if (!valid_kernel(driver, handle)) return CUDA_ERROR_INVALID_HANDLE;
  Function* function = resolve_function(driver, reinterpret_cast<CUfunction>(handle));
  if (!function) return current_context() ? CUDA_ERROR_NOT_FOUND : CUDA_ERROR_INVALID_CONTEXT;
  *out = reinterpret_cast<CUfunction>(function);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuKernelGetLibrary(CUlibrary* out, CUkernel handle) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  Kernel* kernel = valid_kernel(driver, handle);
  if (!kernel) return CUDA_ERROR_INVALID_HANDLE;
  *out = reinterpret_cast<CUlibrary>(kernel->library);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuKernelGetName(const char** name, CUkernel handle) {
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Kernel* kernel = valid_kernel(driver, handle);
  if (!kernel) return CUDA_ERROR_INVALID_HANDLE;
  *name = kernel->name.c_str();
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuLibraryGetGlobal(CUdeviceptr* address, size_t* bytes, CUlibrary handle,
                                          const char* name) {
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  Library* library = valid_library(driver, handle);
  if (!library) return CUDA_ERROR_INVALID_HANDLE;
  Module* module = nullptr;
  if (CUresult r = module_in_current_context(driver, *library, module); r != CUDA_SUCCESS) return r;
  auto global = module->globals.find(name);
  if (global == module->globals.end()) return CUDA_ERROR_NOT_FOUND;
  if (address) *address = global->second.first;
  if (bytes) *bytes = global->second.second;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuLibraryGetManaged(CUdeviceptr*, size_t*, CUlibrary handle, const char*) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  if (!valid_library(driver, handle)) return CUDA_ERROR_INVALID_HANDLE;
  return CUDA_ERROR_NOT_FOUND;  // __managed__ variables are not modelled
}

SIMGPU_EXPORT CUresult cuLibraryGetUnifiedFunction(void**, CUlibrary handle, const char*) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  if (!valid_library(driver, handle)) return CUDA_ERROR_INVALID_HANDLE;
  return CUDA_ERROR_NOT_FOUND;
}

// Kernel attributes are per device; the simulator keeps them per function, so a kernel's attribute
// reads and sets go to its function in the current context.
SIMGPU_EXPORT CUresult cuKernelGetAttribute(int* value, CUfunction_attribute attribute,
                                            CUkernel kernel, CUdevice) {
  CUfunction function = nullptr;
  if (CUresult r = cuKernelGetFunction(&function, kernel); r != CUDA_SUCCESS) return r;
  return cuFuncGetAttribute(value, attribute, function);
}

SIMGPU_EXPORT CUresult cuKernelSetAttribute(CUfunction_attribute attribute, int value,
                                            CUkernel kernel, CUdevice) {
  CUfunction function = nullptr;
  if (CUresult r = cuKernelGetFunction(&function, kernel); r != CUDA_SUCCESS) return r;
  return cuFuncSetAttribute(function, attribute, value);
}

SIMGPU_EXPORT CUresult cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache, CUdevice) {
  CUfunction function = nullptr;
  return cuKernelGetFunction(&function, kernel);
}

SIMGPU_EXPORT CUresult cuKernelGetParamInfo(CUkernel, size_t, size_t*, size_t*) {
  return CUDA_ERROR_NOT_SUPPORTED;  // parameter layouts are not read from images
}
