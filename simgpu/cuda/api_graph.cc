// Graphs, enough for cuGraphLaunch: kernel nodes (added or captured from a stream), memory
// allocation and free nodes (added, or captured from cuMemAllocAsync / cuMemFreeAsync), node
// queries, instantiation, upload and launch. A launch queues the sum of its kernels' times as one
// unit of work. Graph allocations come from the device's graph memory pool (graph_pools): an
// executable graph maps them from the pool at its first launch or upload (the pool grows from the
// device by what it lacks, or the call fails with CUDA_ERROR_OUT_OF_MEMORY), they go back to the
// pool, still reserved, when it is destroyed, and cuDeviceGraphMemTrim returns what the pool holds
// unused to the device.
#include <algorithm>
#include <cstring>
#include <utility>

#include "driver.h"

using namespace simgpu::driver;

namespace {

Graph* valid_graph(Driver& driver, CUgraph handle) {
  auto* graph = reinterpret_cast<Graph*>(handle);
  return driver.graphs.count(graph) ? graph : nullptr;
}

GraphNode* new_node(Driver& driver, Graph& graph, CUgraphNodeType type) {
  graph.nodes.push_back(std::make_unique<GraphNode>());
  GraphNode* node = graph.nodes.back().get();
  node->type = type;
  driver.graph_nodes.insert(node);
  return node;
}

GraphNode* valid_node(Driver& driver, CUgraphNode handle) {
  auto* node = reinterpret_cast<GraphNode*>(handle);
  return driver.graph_nodes.count(node) ? node : nullptr;
}

// Maps an executable graph's allocations from its device's graph pool (first launch or upload).
CUresult map_graph_memory(Driver& driver, GraphExec& exec) {
  if (exec.memory_charged || exec.memory_bytes == 0) return CUDA_SUCCESS;
  MemPool& pool = driver.graph_pools[exec.graph.device];
  if (CUresult r = pool_take(driver, pool, exec.memory_bytes); r != CUDA_SUCCESS) return r;
  exec.memory_charged = true;
  return CUDA_SUCCESS;
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
  uint64_t total = 0;
  for (const KernelLaunch& kernel : exec->graph.kernels) {
    if (!driver.functions.count(kernel.function)) return CUDA_ERROR_INVALID_HANDLE;
    total += kernel_duration_ns(driver, *kernel.function, kernel.grid, kernel.block,
                                kernel.shared_bytes);
  }
  if (CUresult r = map_graph_memory(driver, *exec); r != CUDA_SUCCESS) return r;
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
  static uint64_t next_capture_id = 0;
  stream->capture_id = ++next_capture_id;
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

// The capture under way on a stream: the simulator records captured work in order, not as a
// dependency graph, so the set of nodes the next captured item will depend on is reported empty.
CUresult capture_info(CUstream handle, CUstreamCaptureStatus* status, cuuint64_t* id,
                      CUgraph* graph, const CUgraphNode** dependencies,
                      const CUgraphEdgeData** edges, size_t* count) {
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  Stream* stream = resolve_stream(driver, handle);
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  const bool active = stream->capture != nullptr;
  *status = active ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  if (!active) return CUDA_SUCCESS;  // the other outputs are left as they were, as documented
  if (id) *id = stream->capture_id;
  if (graph) *graph = reinterpret_cast<CUgraph>(stream->capture);
  if (dependencies) *dependencies = nullptr;
  if (edges) *edges = nullptr;
  if (count) *count = 0;
  return CUDA_SUCCESS;
}

CUresult upload(CUgraphExec handle, CUstream stream) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  auto* exec = reinterpret_cast<GraphExec*>(handle);
  if (!driver.graph_execs.count(exec)) return CUDA_ERROR_INVALID_VALUE;
  if (!resolve_stream(driver, stream)) return CUDA_ERROR_INVALID_HANDLE;
  return map_graph_memory(driver, *exec);
}

MemPool* graph_pool_of(Driver& driver, CUdevice ordinal) {
  if (!driver.valid_ordinal(ordinal)) return nullptr;
  return &driver.graph_pools[driver.device_of_ordinal(ordinal)];
}

}  // namespace

GraphNode* simgpu::driver::add_graph_alloc_node(Driver& driver, Graph& graph, uint64_t bytes) {
  GraphNode* node = new_node(driver, graph, CU_GRAPH_NODE_TYPE_MEM_ALLOC);
  node->alloc.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  node->alloc.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  node->alloc.poolProps.location.id = driver.ordinal_of_device(graph.device);
  node->alloc.bytesize = bytes;
  node->alloc.dptr = driver.take_address_range(bytes, kPageBytes);
  return node;
}

GraphNode* simgpu::driver::add_graph_free_node(Driver& driver, Graph& graph, CUdeviceptr ptr) {
  const bool allocated_here =
      std::any_of(graph.nodes.begin(), graph.nodes.end(), [ptr](const auto& node) {
        return node->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && node->alloc.dptr == ptr;
      });
  if (!allocated_here) return nullptr;
  GraphNode* node = new_node(driver, graph, CU_GRAPH_NODE_TYPE_MEM_FREE);
  node->freed = ptr;
  return node;
}

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
  for (const auto& node : graph->nodes) driver.graph_nodes.erase(node.get());
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
  Function* function = resolve_function(driver, params->func);
  if (!function) return CUDA_ERROR_INVALID_VALUE;
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
  GraphNode* added = new_node(driver, *graph, CU_GRAPH_NODE_TYPE_KERNEL);
  added->kernel = static_cast<int>(graph->kernels.size()) - 1;
  *node = reinterpret_cast<CUgraphNode>(added);
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
      !driver.valid_ordinal(params->poolProps.location.id) ||
      driver.device_of_ordinal(params->poolProps.location.id) != graph->device) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  GraphNode* added = add_graph_alloc_node(driver, *graph, params->bytesize);
  params->dptr = added->alloc.dptr;
  *node = reinterpret_cast<CUgraphNode>(added);
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
  GraphNode* added = graph ? add_graph_free_node(driver, *graph, ptr) : nullptr;
  if (!added) return CUDA_ERROR_INVALID_VALUE;
  *node = reinterpret_cast<CUgraphNode>(added);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuGraphGetNodes(CUgraph handle, CUgraphNode* nodes, size_t* count) {
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  Graph* graph = valid_graph(driver, handle);
  if (!graph) return CUDA_ERROR_INVALID_VALUE;
  if (nodes) {
    for (size_t i = 0; i < *count; ++i) {
      nodes[i] =
          i < graph->nodes.size() ? reinterpret_cast<CUgraphNode>(graph->nodes[i].get()) : nullptr;
    }
  }
  *count = graph->nodes.size();
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuGraphNodeGetType(CUgraphNode handle, CUgraphNodeType* type) {
  if (!type) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  GraphNode* node = valid_node(driver, handle);
  if (!node) return CUDA_ERROR_INVALID_VALUE;
  *type = node->type;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuGraphMemAllocNodeGetParams(CUgraphNode handle,
                                                    CUDA_MEM_ALLOC_NODE_PARAMS* params) {
  if (!params) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  GraphNode* node = valid_node(driver, handle);
  if (!node || node->type != CU_GRAPH_NODE_TYPE_MEM_ALLOC) return CUDA_ERROR_INVALID_VALUE;
  *params = node->alloc;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuGraphMemFreeNodeGetParams(CUgraphNode handle, CUdeviceptr* ptr) {
  if (!ptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  GraphNode* node = valid_node(driver, handle);
  if (!node || node->type != CU_GRAPH_NODE_TYPE_MEM_FREE) return CUDA_ERROR_INVALID_VALUE;
  *ptr = node->freed;
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
  exec->graph.device = graph->device;
  for (const auto& node : graph->nodes) {
    exec->source_nodes.insert(node.get());
    if (node->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
      exec->memory_bytes += round_up(node->alloc.bytesize, kPageBytes);
    }
  }
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
  if (exec->memory_charged) {
    // Back to the graph pool, still reserved, for reuse (cuDeviceGraphMemTrim returns it).
    MemPool& pool = driver.graph_pools[exec->graph.device];
    pool.used -= std::min(pool.used, exec->memory_bytes);
  }
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
  return upload(exec, stream);
}
SIMGPU_EXPORT CUresult cuGraphUpload_ptsz(CUgraphExec exec, CUstream stream) {
  return upload(exec, stream);
}
SIMGPU_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice ordinal) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  MemPool* pool = graph_pool_of(driver, ordinal);
  if (!pool) return CUDA_ERROR_INVALID_DEVICE;
  pool_trim(driver, *pool, 0);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuDeviceGetGraphMemAttribute(CUdevice ordinal,
                                                    CUgraphMem_attribute attribute, void* value) {
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  MemPool* pool = graph_pool_of(driver, ordinal);
  if (!pool) return CUDA_ERROR_INVALID_DEVICE;
  auto* out = static_cast<cuuint64_t*>(value);
  switch (attribute) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT:
      *out = pool->used;
      return CUDA_SUCCESS;
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH:
      *out = pool->used_high;
      return CUDA_SUCCESS;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT:
      *out = pool->reserved;
      return CUDA_SUCCESS;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH:
      *out = pool->reserved_high;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

SIMGPU_EXPORT CUresult cuDeviceSetGraphMemAttribute(CUdevice ordinal,
                                                    CUgraphMem_attribute attribute, void* value) {
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  MemPool* pool = graph_pool_of(driver, ordinal);
  if (!pool) return CUDA_ERROR_INVALID_DEVICE;
  // Only the high marks can be set, and only reset (to 0); they restart at the current value.
  if (*static_cast<cuuint64_t*>(value) != 0) return CUDA_ERROR_INVALID_VALUE;
  switch (attribute) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH:
      pool->used_high = pool->used;
      return CUDA_SUCCESS;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH:
      pool->reserved_high = pool->reserved;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
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

// cuda.h maps cuStreamGetCaptureInfo to its newest ABI; the simulator exports every one.
#undef cuStreamGetCaptureInfo
// cuStreamGetCaptureInfo: the 10.1 form (status and id), the 11.3 form (_v2: graph and
// dependencies) and the 12.3 form (_v3: edge data too), each with its per-thread-stream twin.
SIMGPU_EXPORT CUresult cuStreamGetCaptureInfo(CUstream stream, CUstreamCaptureStatus* status,
                                              cuuint64_t* id) {
  return capture_info(stream, status, id, nullptr, nullptr, nullptr, nullptr);
}
SIMGPU_EXPORT CUresult cuStreamGetCaptureInfo_ptsz(CUstream stream, CUstreamCaptureStatus* status,
                                                   cuuint64_t* id) {
  return capture_info(stream, status, id, nullptr, nullptr, nullptr, nullptr);
}
SIMGPU_EXPORT CUresult cuStreamGetCaptureInfo_v2(CUstream stream, CUstreamCaptureStatus* status,
                                                 cuuint64_t* id, CUgraph* graph,
                                                 const CUgraphNode** dependencies, size_t* count) {
  return capture_info(stream, status, id, graph, dependencies, nullptr, count);
}
SIMGPU_EXPORT CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream stream,
                                                      CUstreamCaptureStatus* status, cuuint64_t* id,
                                                      CUgraph* graph,
                                                      const CUgraphNode** dependencies,
                                                      size_t* count) {
  return capture_info(stream, status, id, graph, dependencies, nullptr, count);
}
SIMGPU_EXPORT CUresult cuStreamGetCaptureInfo_v3(CUstream stream, CUstreamCaptureStatus* status,
                                                 cuuint64_t* id, CUgraph* graph,
                                                 const CUgraphNode** dependencies,
                                                 const CUgraphEdgeData** edges, size_t* count) {
  return capture_info(stream, status, id, graph, dependencies, edges, count);
}
SIMGPU_EXPORT CUresult cuStreamGetCaptureInfo_v3_ptsz(
    CUstream stream, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,
    const CUgraphNode** dependencies, const CUgraphEdgeData** edges, size_t* count) {
  return capture_info(stream, status, id, graph, dependencies, edges, count);
}

// The calling thread's capture mode, which decides which unsafe calls a capture in progress
// refuses (the simulator records captures in order and refuses none, but keeps the mode as the
// driver does: a library sets its own and restores the caller's).
SIMGPU_EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  if (!mode) return CUDA_ERROR_INVALID_VALUE;
  // Read as an integer: a caller's out-of-range value must be refused, not loaded as the enum.
  int asked = 0;
  std::memcpy(&asked, mode, sizeof asked);
  if (asked < CU_STREAM_CAPTURE_MODE_GLOBAL || asked > CU_STREAM_CAPTURE_MODE_RELAXED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  thread_local CUstreamCaptureMode thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  const CUstreamCaptureMode previous = thread_mode;
  thread_mode = static_cast<CUstreamCaptureMode>(asked);
  *mode = previous;
  return CUDA_SUCCESS;
}

namespace {

// The graph holding a node (each node belongs to one graph), or nullptr.
Graph* graph_of(Driver& driver, const GraphNode* node) {
  for (Graph* graph : driver.graphs) {
    for (const auto& owned : graph->nodes) {
      if (owned.get() == node) return graph;
    }
  }
  return nullptr;
}

CUresult kernel_node_params(CUgraphNode handle, CUDA_KERNEL_NODE_PARAMS* params) {
  if (!params) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  GraphNode* node = valid_node(driver, handle);
  Graph* graph = node ? graph_of(driver, node) : nullptr;
  if (!graph || node->type != CU_GRAPH_NODE_TYPE_KERNEL || node->kernel < 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const KernelLaunch& kernel = graph->kernels[static_cast<size_t>(node->kernel)];
  *params = CUDA_KERNEL_NODE_PARAMS{};
  params->func = reinterpret_cast<CUfunction>(kernel.function);
  params->gridDimX = kernel.grid[0], params->gridDimY = kernel.grid[1],
  params->gridDimZ = kernel.grid[2];
  params->blockDimX = kernel.block[0], params->blockDimY = kernel.block[1],
  params->blockDimZ = kernel.block[2];
  params->sharedMemBytes = kernel.shared_bytes;
  return CUDA_SUCCESS;  // kernel arguments are not kept: kernels do not run
}

// A new shape (and function) for one kernel node of an executable graph.
CUresult set_exec_kernel_node(CUgraphExec exec_handle, CUgraphNode handle, CUfunction func,
                              const unsigned grid[3], const unsigned block[3], unsigned shared) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  auto* exec = reinterpret_cast<GraphExec*>(exec_handle);
  GraphNode* node = valid_node(driver, handle);
  // The node must be one of the graph the executable graph was instantiated from.
  if (!driver.graph_execs.count(exec) || !node || !exec->source_nodes.count(node) ||
      node->type != CU_GRAPH_NODE_TYPE_KERNEL || node->kernel < 0 ||
      static_cast<size_t>(node->kernel) >= exec->graph.kernels.size()) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Function* function = resolve_function(driver, func);
  const uint64_t threads = uint64_t{block[0]} * block[1] * block[2];
  if (!function || threads == 0 || threads > kMaxThreadsPerBlock || !grid[0] || !grid[1] ||
      !grid[2]) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  KernelLaunch& kernel = exec->graph.kernels[static_cast<size_t>(node->kernel)];
  kernel.function = function;
  std::copy(grid, grid + 3, kernel.grid);
  std::copy(block, block + 3, kernel.block);
  kernel.shared_bytes = shared;
  return CUDA_SUCCESS;
}

}  // namespace

#undef cuGraphKernelNodeGetParams
#undef cuGraphExecKernelNodeSetParams

SIMGPU_EXPORT CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode node,
                                                     CUDA_KERNEL_NODE_PARAMS* params) {
  return kernel_node_params(node, params);
}

// The CUDA 10-11 ABI: the same struct without its last two fields.
SIMGPU_EXPORT CUresult cuGraphKernelNodeGetParams(CUgraphNode node,
                                                  CUDA_KERNEL_NODE_PARAMS_v1* params) {
  if (!params) return CUDA_ERROR_INVALID_VALUE;
  CUDA_KERNEL_NODE_PARAMS full{};
  if (CUresult r = kernel_node_params(node, &full); r != CUDA_SUCCESS) return r;
  std::memcpy(params, &full, sizeof *params);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec exec, CUgraphNode node,
                                                         const CUDA_KERNEL_NODE_PARAMS* params) {
  if (!params) return CUDA_ERROR_INVALID_VALUE;
  const unsigned grid[3] = {params->gridDimX, params->gridDimY, params->gridDimZ};
  const unsigned block[3] = {params->blockDimX, params->blockDimY, params->blockDimZ};
  CUfunction func = params->func ? params->func : reinterpret_cast<CUfunction>(params->kern);
  return set_exec_kernel_node(exec, node, func, grid, block, params->sharedMemBytes);
}

SIMGPU_EXPORT CUresult cuGraphExecKernelNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                                      const CUDA_KERNEL_NODE_PARAMS_v1* params) {
  if (!params) return CUDA_ERROR_INVALID_VALUE;
  const unsigned grid[3] = {params->gridDimX, params->gridDimY, params->gridDimZ};
  const unsigned block[3] = {params->blockDimX, params->blockDimY, params->blockDimZ};
  return set_exec_kernel_node(exec, node, params->func, grid, block, params->sharedMemBytes);
}
