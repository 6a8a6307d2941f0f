// The unsuffixed pre-3.2 entry points that cuGetProcAddress hands out for old versions (e.g.
// "cuCtxCreate" at 2000). Where the old ABI carries 32-bit device pointers the simulator's 64-bit
// addresses cannot be expressed, so allocation through those answers CUDA_ERROR_NOT_SUPPORTED.
#include <algorithm>
#include <climits>

#include "driver.h"

#undef cuCtxCreate
#undef cuCtxDestroy
#undef cuCtxPushCurrent
#undef cuCtxPopCurrent
#undef cuStreamDestroy
#undef cuEventDestroy
#undef cuDevicePrimaryCtxRelease
#undef cuDevicePrimaryCtxReset
#undef cuDevicePrimaryCtxSetFlags
#undef cuMemGetInfo
#undef cuMemAlloc
#undef cuMemAllocPitch
#undef cuMemFree
#undef cuDeviceTotalMem
#undef cuMemAllocHost
#undef cuGetProcAddress
#undef cuStreamBeginCapture
#undef cuGraphInstantiate
#undef cuEventElapsedTime
#undef cuDeviceGetUuid

// Older ABIs that cuda.h no longer declares (defined in api_context.cc / api_graph.cc).
extern "C" CUresult cuCtxCreate_v2(CUcontext* out, unsigned int flags, CUdevice device);
extern "C" CUresult cuStreamBeginCapture_v2(CUstream stream, CUstreamCaptureMode mode);

SIMGPU_EXPORT CUresult cuCtxCreate(CUcontext* out, unsigned int flags, CUdevice device) {
  return cuCtxCreate_v2(out, flags, device);
}
SIMGPU_EXPORT CUresult cuCtxDestroy(CUcontext context) {
  return cuCtxDestroy_v2(context);
}
SIMGPU_EXPORT CUresult cuCtxPushCurrent(CUcontext context) {
  return cuCtxPushCurrent_v2(context);
}
SIMGPU_EXPORT CUresult cuCtxPopCurrent(CUcontext* context) {
  return cuCtxPopCurrent_v2(context);
}
SIMGPU_EXPORT CUresult cuStreamDestroy(CUstream stream) {
  return cuStreamDestroy_v2(stream);
}
SIMGPU_EXPORT CUresult cuEventDestroy(CUevent event) {
  return cuEventDestroy_v2(event);
}
SIMGPU_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice device) {
  return cuDevicePrimaryCtxRelease_v2(device);
}
SIMGPU_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice device) {
  return cuDevicePrimaryCtxReset_v2(device);
}
SIMGPU_EXPORT CUresult cuDevicePrimaryCtxSetFlags(CUdevice device, unsigned int flags) {
  return cuDevicePrimaryCtxSetFlags_v2(device, flags);
}
SIMGPU_EXPORT CUresult cuMemGetInfo(unsigned int* free_bytes, unsigned int* total_bytes) {
  if (!free_bytes || !total_bytes) return CUDA_ERROR_INVALID_VALUE;
  size_t free64 = 0, total64 = 0;
  const CUresult r = cuMemGetInfo_v2(&free64, &total64);
  if (r != CUDA_SUCCESS) return r;
  *free_bytes = static_cast<unsigned>(std::min<size_t>(free64, UINT_MAX));
  *total_bytes = static_cast<unsigned>(std::min<size_t>(total64, UINT_MAX));
  return CUDA_SUCCESS;
}
SIMGPU_EXPORT CUresult cuDeviceTotalMem(unsigned int* bytes, CUdevice device) {
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  size_t total = 0;
  const CUresult r = cuDeviceTotalMem_v2(&total, device);
  if (r == CUDA_SUCCESS) *bytes = static_cast<unsigned>(std::min<size_t>(total, UINT_MAX));
  return r;
}
SIMGPU_EXPORT CUresult cuMemAlloc(unsigned int* dptr, unsigned int bytes) {
  (void)dptr, (void)bytes;
  return CUDA_ERROR_NOT_SUPPORTED;
}
SIMGPU_EXPORT CUresult cuMemAllocPitch(unsigned int* dptr, unsigned int* pitch, unsigned int width,
                                       unsigned int height, unsigned int element_size) {
  (void)dptr, (void)pitch, (void)width, (void)height, (void)element_size;
  return CUDA_ERROR_NOT_SUPPORTED;
}
SIMGPU_EXPORT CUresult cuMemFree(unsigned int dptr) {
  (void)dptr;
  return CUDA_ERROR_NOT_SUPPORTED;
}
SIMGPU_EXPORT CUresult cuMemAllocHost(void** pointer, unsigned int bytes) {
  return cuMemAllocHost_v2(pointer, bytes);
}
SIMGPU_EXPORT CUresult cuStreamBeginCapture(CUstream stream) {
  return cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
}
SIMGPU_EXPORT CUresult cuStreamBeginCapture_ptsz(CUstream stream) {
  return cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
}
SIMGPU_EXPORT CUresult cuGraphInstantiate(CUgraphExec* exec, CUgraph graph, CUgraphNode* error_node,
                                          char* log, size_t log_size) {
  if (error_node) *error_node = nullptr;
  if (log && log_size) log[0] = '\0';
  return cuGraphInstantiateWithFlags(exec, graph, 0);
}
SIMGPU_EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec* exec, CUgraph graph,
                                             CUgraphNode* error_node, char* log, size_t log_size) {
  return cuGraphInstantiate(exec, graph, error_node, log, log_size);
}
SIMGPU_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cuda_version,
                                        cuuint64_t flags) {
  return simgpu::driver::get_proc_address(symbol, pfn, cuda_version, flags, nullptr);
}
SIMGPU_EXPORT CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice device) {
  return cuDeviceGetUuid_v2(uuid, device);
}
SIMGPU_EXPORT CUresult cuEventElapsedTime(float* milliseconds, CUevent start, CUevent end) {
  return cuEventElapsedTime_v2(milliseconds, start, end);
}
