// What the runtime-API samples share: error checks on cudaError_t, the device they run on, and
// the report header. The samples link the CUDA runtime (cudart), which finds libcuda.so.1 at run
// time, so LD_LIBRARY_PATH decides whether the real driver or the simulated one answers.
// runtime.cc is compiled once for every runtime build (none of its calls has a _ptsz form);
// whether a binary was built with --default-stream per-thread (CUDA_API_PER_THREAD_DEFAULT_STREAM)
// is part of what it reports, so its main passes kBuiltDefaultStream on to the report header.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "report.h"

namespace tessera::samples {

// A failed runtime call: the message names the call and the error (e.g. cudaErrorInvalidValue).
class RuntimeError : public std::runtime_error {
 public:
  RuntimeError(cudaError_t error, const std::string& message)
      : std::runtime_error(message), error_(error) {}
  cudaError_t error() const { return error_; }

 private:
  cudaError_t error_;
};

// "cudaErrorMemoryAllocation", or the number when the runtime does not know the code.
std::string runtime_error_name(cudaError_t error);
// Throws RuntimeError naming `call` unless `error` is cudaSuccess.
void runtime_check(cudaError_t error, std::string_view call);

#define CUDART_CHECK(call) ::tessera::samples::runtime_check((call), #call)

// "per-thread" where the including file is built with --default-stream per-thread, else "legacy"
// (a constant of each file: internal linkage, so the two builds' values never meet).
#ifdef CUDA_API_PER_THREAD_DEFAULT_STREAM
constexpr std::string_view kBuiltDefaultStream = "per-thread";
#else
constexpr std::string_view kBuiltDefaultStream = "legacy";
#endif

struct RuntimeDevice {
  int ordinal = 0;
  std::string name;
  int sm_count = 0;
  uint64_t total_memory = 0;
  int driver_version = 0;
  int runtime_version = 0;
};

// Makes `ordinal` the current device and creates its primary context (cudaFree(nullptr)), so the
// context's memory is taken before the sample measures anything.
RuntimeDevice open_runtime_device(int ordinal);

// sample, device, device_index, driver_version, runtime_version, default_stream (the main's
// kBuiltDefaultStream).
Json runtime_report_header(std::string_view sample, const RuntimeDevice& device,
                           std::string_view default_stream);

}  // namespace tessera::samples
