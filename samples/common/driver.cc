#include "driver.h"

#include <dlfcn.h>

#include <string>

namespace tessera::samples {

std::string_view resolve_name(Resolve resolve) {
  return resolve == Resolve::kProcAddress ? "proc-address" : "dlsym";
}

Driver Driver::load(Resolve resolve) {
  Driver driver;
  driver.resolve_ = resolve;
  driver.library_ = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (driver.library_ == nullptr) {
    throw std::runtime_error(std::string("cannot load libcuda.so.1: ") + dlerror());
  }
  if (resolve == Resolve::kProcAddress) {
    // As cudart does: one dlsym for the resolver, then ask the resolver for itself, so a shim
    // that hands out its own resolver stays in the path for every later lookup.
    auto* first = reinterpret_cast<PFN_cuGetProcAddress_v12000>(
        dlsym(driver.library_, "cuGetProcAddress_v2"));
    if (first == nullptr) throw std::runtime_error("libcuda.so.1 has no cuGetProcAddress_v2");
    driver.get_proc_address_ = first;
    void* again = driver.lookup("cuGetProcAddress_v2", "cuGetProcAddress", 12000,
                                CU_GET_PROC_ADDRESS_DEFAULT);
    if (again != nullptr) {
      driver.get_proc_address_ = reinterpret_cast<PFN_cuGetProcAddress_v12000>(again);
    }
  }

#define TESSERA_RESOLVE_ENTRY(symbol, base, version)                         \
  driver.api_.symbol.fn = reinterpret_cast<decltype(driver.api_.symbol.fn)>( \
      driver.lookup(#symbol, #base, version, CU_GET_PROC_ADDRESS_DEFAULT));
#define TESSERA_RESOLVE_PTSZ_ENTRY(symbol, base, version)                    \
  driver.api_.symbol.fn = reinterpret_cast<decltype(driver.api_.symbol.fn)>( \
      driver.lookup(#symbol, #base, version, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM));
  TESSERA_DRIVER_ENTRY_POINTS(TESSERA_RESOLVE_ENTRY)
  TESSERA_DRIVER_PER_THREAD_ENTRY_POINTS(TESSERA_RESOLVE_PTSZ_ENTRY)
#undef TESSERA_RESOLVE_ENTRY
#undef TESSERA_RESOLVE_PTSZ_ENTRY

  CU_CHECK(driver, driver.api_.cuInit(0));
  CU_CHECK(driver, driver.api_.cuDriverGetVersion(&driver.version_));
  return driver;
}

void* Driver::lookup(const char* symbol, const char* base, int version, cuuint64_t flags) {
  void* fn = nullptr;
  if (resolve_ == Resolve::kDlsym) {
    fn = dlsym(library_, symbol);
  } else {
    CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (get_proc_address_(base, &fn, version, flags, &found) != CUDA_SUCCESS ||
        found != CU_GET_PROC_ADDRESS_SUCCESS) {
      fn = nullptr;
    }
  }
  if (fn == nullptr) missing_.emplace_back(symbol);
  return fn;
}

std::string Driver::error_name(CUresult result) const {
  const char* name = nullptr;
  if (api_.cuGetErrorName(result, &name) == CUDA_SUCCESS && name != nullptr) return name;
  return "CUresult " + std::to_string(static_cast<int>(result));
}

void Driver::check(CUresult result, std::string_view call) const {
  if (result == CUDA_SUCCESS) return;
  std::string message = std::string(call) + " failed: " + error_name(result);
  if (result == CUDA_ERROR_NOT_FOUND && !missing_.empty()) {
    message += " (entry points the driver did not provide through ";
    message += resolve_name(resolve_);
    message += ":";
    for (const std::string& symbol : missing_) message += " " + symbol;
    message += ")";
  }
  throw CudaError(result, message);
}

PrimaryContext::PrimaryContext(const Driver& driver, int ordinal) : driver_(driver) {
  const DriverApi& cu = driver.api();
  info_.ordinal = ordinal;
  int count = 0;
  CU_CHECK(driver, cu.cuDeviceGetCount(&count));
  if (ordinal < 0 || ordinal >= count) {
    throw std::runtime_error("device " + std::to_string(ordinal) + " does not exist (" +
                             std::to_string(count) + " device(s))");
  }
  CU_CHECK(driver, cu.cuDeviceGet(&info_.device, ordinal));
  char name[256] = {};
  CU_CHECK(driver, cu.cuDeviceGetName(name, sizeof(name), info_.device));
  info_.name = name;
  CU_CHECK(driver, cu.cuDeviceGetAttribute(&info_.sm_count,
                                           CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, info_.device));
  size_t total = 0;
  CU_CHECK(driver, cu.cuDeviceTotalMem_v2(&total, info_.device));
  info_.total_memory = total;
  CU_CHECK(driver, cu.cuDevicePrimaryCtxRetain(&context_, info_.device));
  CU_CHECK(driver, cu.cuCtxSetCurrent(context_));
}

PrimaryContext::~PrimaryContext() {
  // Errors here cannot be reported usefully (the result line is already out); the process exits.
  driver_.api().cuCtxSetCurrent(nullptr);
  driver_.api().cuDevicePrimaryCtxRelease_v2(info_.device);
}

}  // namespace tessera::samples
