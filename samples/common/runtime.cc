#include "runtime.h"

namespace tessera::samples {

std::string runtime_error_name(cudaError_t error) {
  const char* name = cudaGetErrorName(error);
  if (name != nullptr) return name;
  return "cudaError_t " + std::to_string(static_cast<int>(error));
}

void runtime_check(cudaError_t error, std::string_view call) {
  if (error == cudaSuccess) return;
  throw RuntimeError(error, std::string(call) + " failed: " + runtime_error_name(error));
}

RuntimeDevice open_runtime_device(int ordinal) {
  RuntimeDevice device;
  device.ordinal = ordinal;
  int count = 0;
  CUDART_CHECK(cudaGetDeviceCount(&count));
  if (ordinal < 0 || ordinal >= count) {
    throw std::runtime_error("device " + std::to_string(ordinal) + " does not exist (" +
                             std::to_string(count) + " device(s))");
  }
  CUDART_CHECK(cudaSetDevice(ordinal));
  CUDART_CHECK(cudaFree(nullptr));
  cudaDeviceProp props = {};
  CUDART_CHECK(cudaGetDeviceProperties(&props, ordinal));
  device.name = props.name;
  device.sm_count = props.multiProcessorCount;
  device.total_memory = props.totalGlobalMem;
  CUDART_CHECK(cudaDriverGetVersion(&device.driver_version));
  CUDART_CHECK(cudaRuntimeGetVersion(&device.runtime_version));
  return device;
}

Json runtime_report_header(std::string_view sample, const RuntimeDevice& device,
                           std::string_view default_stream) {
  Json report;
  report["sample"] = sample;
  report["device"] = device.name;
  report["device_index"] = device.ordinal;
  report["driver_version"] = device.driver_version;
  report["runtime_version"] = device.runtime_version;
  report["default_stream"] = default_stream;
  return report;
}

}  // namespace tessera::samples
