// Graphs, enough for cuGraphLaunch: kernel nodes (added or captured from a stream), memory
// allocation nodes (charged at the first launch, held until the executable graph is destroyed),
// instantiation and launch. A launch queues the sum of its kernels' times as one unit of work.
#include <algorithm>

#include "driver.h"

using namespace simgpu::driver;

namespace {

Graph* valid_graph(Driver& driver, CUgraph handle) {
  auto* graph = reinterpret_cast<Graph*>(handle);
  return driver.graphs.count(graph) ? graph : nullptr;
}

CUgraphNode new_node(Graph& graph) {
  graph.nodes.push_back(std::make_unique<int>(0));
  return reinterpret_cast<CUgraphNode>(graph.nodes.back().get());
}

CUresult graph_launch(CUgraphExec handle, CUstream stream_handle) {
  Driver& driver = Driver::get();
  std::unique_lock<std::mutex> lock(driver.mutex);
  Context* context = nullptr;
  if (CUresult r = require_context(driver, context); r != CUDA_SUCCESS) return r;
  auto* exec = reinterpret_cast<GraphExec*>(handle);
  if (!driver.graph_execs.count(exec)) return CUDA_ERROR_INVALID_HANDLE;
  Stream* stream = resolve_stream(driver, stream_handle);
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  if (!exec->memory_charged && exec->memory_bytes > 0) {
    if (CUresult r = to_result(driver.sim->reserve(exec->graph.device, exec->memory_bytes));
        r != CUDA_SUCCESS) {
      return r;
    }
    exec->memory_charged = true;
  }
  uint64_t total = 0;
  for (const KernelLaunch& kernel : exec->graph.kernels) {
    if (!driver.functions.count(kernel.function)) return CUDA_ERROR_INVALID_HANDLE;
    total += kernel_duration_ns(driver, *kernel.function, kernel.grid, kernel.block,
                                kernel.shared_bytes);
  }
  if (total > 0) enqueue_work(driver, *stream, total, lock);
  return CUDA_SUCCESS;
}

CUresult begin_capture(CUstream handle, CUstreamCaptureMode mode) {
  (void)mode;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  if (handle == nullptr || handle == CU_STREAM_LEGACY) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  Stream* stream = resolve_stream(driver, handle);
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  if (stream->capture) return CUDA_ERROR_ILLEGAL_STATE;
  auto* graph = new Graph();
  graph->device = stream->context->device;
  driver.graphs.insert(graph);
  stream->capture = graph;
  return CUDA_SUCCESS;
}

CUresult end_capture(CUstream handle, CUgraph* out) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  Stream* stream = resolve_stream(driver, handle);
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  if (!stream->capture) return CUDA_ERROR_ILLEGAL_STATE;
  *out = reinterpret_cast<CUgraph>(stream->capture);
  stream->capture = nullptr;
  return CUDA_SUCCESS;
}

CUresult is_capturing(CUstream handle, CUstreamCaptureStatus* status) {
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  Stream* stream = resolve_stream(driver, handle);
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  *status = stream->capture ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}

}  // namespace

SIMGPU_EXPORT CUresult cuGraphCreate(CUgraph* out, unsigned int flags) {
  if (!out || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Context* context = nullptr;
  if (CUresult r = require_context(driver, context); r != CUDA_SUCCESS) return r;
  auto* graph = new Graph();
  graph->device = context->device;
  driver.graphs.insert(graph);
  *out = reinterpret_cast<CUgraph>(graph);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuGraphDestroy(CUgraph handle) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  Graph* graph = valid_graph(driver, handle);
  if (!graph) return CUDA_ERROR_INVALID_VALUE;
  driver.graphs.erase(graph);
  delete graph;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuGraphAddKernelNode_v2(CUgraphNode* node, CUgraph handle,
                                               const CUgraphNode* dependencies, size_t count,
                                               const CUDA_KERNEL_NODE_PARAMS* params) {
  (void)dependencies;  // nodes run in insertion order, which respects any valid dependency order
  if (!node || !params || (count > 0 && !dependencies)) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  Graph* graph = valid_graph(driver, handle);
  if (!graph) return CUDA_ERROR_INVALID_VALUE;
  auto* function = reinterpret_cast<Function*>(params->func);
  if (!driver.functions.count(function)) return CUDA_ERROR_INVALID_VALUE;
  KernelLaunch kernel;
  kernel.function = function;
  kernel.grid[0] = params->gridDimX, kernel.grid[1] = params->gridDimY,
  kernel.grid[2] = params->gridDimZ;
  kernel.block[0] = params->blockDimX, kernel.block[1] = params->blockDimY,
  kernel.block[2] = params->blockDimZ;
  kernel.shared_bytes = params->sharedMemBytes;
  const uint64_t threads = uint64_t{kernel.block[0]} * kernel.block[1] * kernel.block[2];
  if (threads == 0 || threads > kMaxThreadsPerBlock || kernel.grid[0] == 0 || kernel.grid[1] == 0 ||
      kernel.grid[2] == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  graph->kernels.push_back(kernel);
  *node = new_node(*graph);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode* node, CUgraph handle,
                                              const CUgraphNode* dependencies, size_t count,
                                              CUDA_MEM_ALLOC_NODE_PARAMS* params) {
  (void)dependencies;
  if (!node || !params || (count > 0 && !dependencies)) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  Graph* graph = valid_graph(driver, handle);
  if (!graph || params->bytesize == 0 ||
      params->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
      !driver.valid_ordinal(params->poolProps.location.id)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  params->dptr = driver.take_address_range(params->bytesize, kPageBytes);
  graph->mem_alloc_bytes.push_back(round_up(params->bytesize, kPageBytes));
  graph->mem_alloc_ptrs.push_back(params->dptr);
  *node = new_node(*graph);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuGraphAddMemFreeNode(CUgraphNode* node, CUgraph handle,
                                             const CUgraphNode* dependencies, size_t count,
                                             CUdeviceptr ptr) {
  (void)dependencies;
  if (!node || (count > 0 && !dependencies)) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  Graph* graph = valid_graph(driver, handle);
  if (!graph) return CUDA_ERROR_INVALID_VALUE;
  if (std::find(graph->mem_alloc_ptrs.begin(), graph->mem_alloc_ptrs.end(), ptr) ==
      graph->mem_alloc_ptrs.end()) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *node = new_node(*graph);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec* out, CUgraph handle,
                                                   unsigned long long flags) {
  (void)flags;
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  Graph* graph = valid_graph(driver, handle);
  if (!graph) return CUDA_ERROR_INVALID_VALUE;
  auto* exec = new GraphExec();
  exec->graph.kernels = graph->kernels;
  exec->graph.mem_alloc_bytes = graph->mem_alloc_bytes;
  exec->graph.mem_alloc_ptrs = graph->mem_alloc_ptrs;
  exec->graph.device = graph->device;
  for (uint64_t bytes : graph->mem_alloc_bytes) exec->memory_bytes += bytes;
  driver.graph_execs.insert(exec);
  *out = reinterpret_cast<CUgraphExec>(exec);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec* out, CUgraph graph,
                                                    CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  const CUresult r = cuGraphInstantiateWithFlags(out, graph, params ? params->flags : 0);
  if (params)
    params->result_out =
        r == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
  return r;
}
SIMGPU_EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec* out, CUgraph graph,
                                                         CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  return cuGraphInstantiateWithParams(out, graph, params);
}

SIMGPU_EXPORT CUresult cuGraphExecDestroy(CUgraphExec handle) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  auto* exec = reinterpret_cast<GraphExec*>(handle);
  if (!driver.graph_execs.count(exec)) return CUDA_ERROR_INVALID_VALUE;
  if (exec->memory_charged) driver.sim->release(exec->graph.device, exec->memory_bytes);
  driver.graph_execs.erase(exec);
  delete exec;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream) {
  return graph_launch(exec, stream);
}
SIMGPU_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream stream) {
  return graph_launch(exec, stream);
}
SIMGPU_EXPORT CUresult cuGraphUpload(CUgraphExec exec, CUstream stream) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (!driver.graph_execs.count(reinterpret_cast<GraphExec*>(exec)))
    return CUDA_ERROR_INVALID_VALUE;
  return resolve_stream(driver, stream) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
SIMGPU_EXPORT CUresult cuGraphUpload_ptsz(CUgraphExec exec, CUstream stream) {
  return cuGraphUpload(exec, stream);
}
SIMGPU_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice ordinal) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  return driver.valid_ordinal(ordinal) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

SIMGPU_EXPORT CUresult cuStreamBeginCapture_v2(CUstream stream, CUstreamCaptureMode mode) {
  return begin_capture(stream, mode);
}
SIMGPU_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream stream, CUstreamCaptureMode mode) {
  return begin_capture(stream, mode);
}
SIMGPU_EXPORT CUresult cuStreamEndCapture(CUstream stream, CUgraph* graph) {
  return end_capture(stream, graph);
}
SIMGPU_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream stream, CUgraph* graph) {
  return end_capture(stream, graph);
}
SIMGPU_EXPORT CUresult cuStreamIsCapturing(CUstream stream, CUstreamCaptureStatus* status) {
  return is_capturing(stream, status);
}
SIMGPU_EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream stream, CUstreamCaptureStatus* status) {
  return is_capturing(stream, status);
}
