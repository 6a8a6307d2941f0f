// Graph memory: allocations made by graph memory nodes (cuGraphAddMemAllocNode, or cuMemAllocAsync
// captured on a stream) come from each device's graph memory pool, which takes physical memory
// from the device when an executable graph that allocates is launched or uploaded, keeps it for
// reuse, and returns it at cuDeviceGraphMemTrim (and, on some drivers, when executables are
// destroyed). The shim accounts it like a stream-ordered pool: each device's
// CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT stays charged to the share. Before the first launch or
// upload of an executable that allocates, the expected growth (its allocation nodes in 2 MiB pages
// minus what the graph pool holds idle) is reserved, or the call fails with
// CUDA_ERROR_OUT_OF_MEMORY without reaching the driver; afterwards the charge is settled against
// the reserved size the driver reports. cuGraphExecDestroy and cuDeviceGraphMemTrim settle too.
//
// Which executables allocate is learnt at instantiation, from the graph's nodes
// (cuGraphGetNodes / cuGraphNodeGetType / cuGraphMemAllocNodeGetParams), so added, captured and
// cloned allocation nodes are all seen. The launch hot path, for a process without such an
// executable, stays a counter increment, one load of the real entry point and one load of
// g_allocating_execs, then a jump.
#include <cuda.h>

#include <cstdlib>

#include "hooks.h"
#include "log.h"
#include "state.h"

// cuGraphLaunch was a COUNTED wrapper; the compute gate those wrappers pass (when the compute
// limits are in the tree) applies to it here too.
#if __has_include("compute/gate.h")
#include "compute/gate.h"
#define TESSERA_GRAPH_GATE()                   \
  ::tessera::vgpu::compute::TimedLaunch timed; \
  if (!::tessera::vgpu::compute::gate_launch(&timed)) return CUDA_ERROR_NOT_PERMITTED
#define TESSERA_GRAPH_TIMED(symbol, call)                                      \
  if (__builtin_expect(timed.slot != nullptr, 0)) {                            \
    return ::tessera::vgpu::compute::run_timed(                                \
        timed, stream, ::tessera::vgpu::compute::is_per_thread_entry(#symbol), \
        [&] { return call; });                                                 \
  }
#else
#define TESSERA_GRAPH_GATE() static_cast<void>(0)
#define TESSERA_GRAPH_TIMED(symbol, call) static_cast<void>(0)
#endif

using namespace tessera::vgpu;

namespace {

constexpr uint64_t kPage = 2ull << 20;
constexpr uint64_t kMapped = 1ull << 32;  // Record::aux: launched or uploaded since instantiation
constexpr uint64_t kOrdinalMask = 0xffffffffull;

// Executables with allocation nodes that this process holds (tracked as HandleKind::kGraphExec).
constinit std::atomic<long> g_allocating_execs{0};

// The devices' graph memory pools, per CUDA ordinal, under g_graph_lock: the reserved size last
// accounted (CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) and the share device it is charged to (valid
// once g_graph_seen).
constinit SpinLock g_graph_lock{LockRank::kGraph};
bool g_graph_seen[kMaxOrdinals] TESSERA_GUARDED_BY(g_graph_lock) = {};
GpuIndex g_graph_index[kMaxOrdinals] TESSERA_GUARDED_BY(g_graph_lock) = {};
uint64_t g_graph_accounted[kMaxOrdinals] TESSERA_GUARDED_BY(g_graph_lock) = {};

// In a forked child: no executable graph of the parent is this process's, and another thread of
// the parent may have held the lock at fork time. The child has one thread: no lock is needed.
void reset_after_fork() TESSERA_NO_THREAD_SAFETY_ANALYSIS {
  g_graph_lock.reset_after_fork();
  for (int i = 0; i < kMaxOrdinals; ++i) {
    g_graph_seen[i] = false;
    g_graph_accounted[i] = 0;
  }
  g_allocating_execs.store(0, std::memory_order_relaxed);
}

__attribute__((constructor)) void register_fork_reset() {
  on_fork_child(reset_after_fork);
}

uint64_t key(CUgraphExec exec) {
  return reinterpret_cast<uint64_t>(exec);
}

bool graph_attribute(CUdevice ordinal, CUgraphMem_attribute attribute, uint64_t* value) {
  auto get = real_cuDeviceGetGraphMemAttribute();
  cuuint64_t v = 0;
  if (!get || get(ordinal, attribute, &v) != CUDA_SUCCESS) return false;
  *value = v;
  return true;
}

// Charges or releases the difference between the ordinal's graph pool reserved size and what was
// accounted; returns the reserved size now accounted. Call with g_graph_lock held.
uint64_t settle_graph_pool(CUdevice ordinal, GpuIndex index) TESSERA_REQUIRES(g_graph_lock) {
  if (!g_graph_seen[ordinal]) {
    g_graph_seen[ordinal] = true;
    g_graph_index[ordinal] = index;
    g_graph_accounted[ordinal] = 0;
  }
  const uint64_t accounted = g_graph_accounted[ordinal];
  uint64_t reserved = accounted;
  if (!graph_attribute(ordinal, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &reserved))
    return accounted;
  if (reserved > accounted) {
    charge_bytes(g_graph_index[ordinal], reserved - accounted);
  } else if (reserved < accounted) {
    release_bytes(g_graph_index[ordinal], accounted - reserved);
  }
  g_graph_accounted[ordinal] = reserved;
  return reserved;
}

// The bytes a graph's allocation nodes take from the graph pool (each in 2 MiB pages) and the
// device they are on (the first node's). False if the graph cannot be inspected.
bool graph_footprint(CUgraph graph, uint64_t* bytes, CUdevice* ordinal) {
  auto get_nodes = real_cuGraphGetNodes();
  auto get_type = real_cuGraphNodeGetType();
  auto get_params = real_cuGraphMemAllocNodeGetParams();
  if (!get_nodes || !get_type || !get_params) return false;
  size_t count = 0;
  if (get_nodes(graph, nullptr, &count) != CUDA_SUCCESS) return false;
  *bytes = 0;
  if (count == 0) return true;
  auto* nodes = static_cast<CUgraphNode*>(std::malloc(count * sizeof(CUgraphNode)));
  if (!nodes) return false;
  size_t filled = count;
  bool ok = get_nodes(graph, nodes, &filled) == CUDA_SUCCESS;
  if (filled < count) count = filled;
  bool first = true;
  for (size_t i = 0; ok && i < count; ++i) {
    CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
    if (get_type(nodes[i], &type) != CUDA_SUCCESS) {
      ok = false;
      break;
    }
    if (type != CU_GRAPH_NODE_TYPE_MEM_ALLOC) continue;
    CUDA_MEM_ALLOC_NODE_PARAMS params{};
    if (get_params(nodes[i], &params) != CUDA_SUCCESS) {
      ok = false;
      break;
    }
    const uint64_t pages = (uint64_t{params.bytesize} + kPage - 1) / kPage * kPage;
    if (pages < params.bytesize || *bytes + pages < *bytes) {
      ok = false;
      break;
    }
    *bytes += pages;
    if (first) {
      *ordinal = params.poolProps.location.id;
      first = false;
    } else if (params.poolProps.location.id != *ordinal) {
      TESSERA_WARN("graph %p allocates on several devices; all of it is charged to device %d",
                   static_cast<void*>(graph), static_cast<int>(*ordinal));
    }
  }
  std::free(nodes);
  return ok;
}

// After a successful instantiation: remember the executable if its graph allocates.
void instantiated(CUgraphExec exec, CUgraph graph) {
  if (!enforcing()) return;
  uint64_t bytes = 0;
  CUdevice ordinal = 0;
  if (!graph_footprint(graph, &bytes, &ordinal)) {
    TESSERA_ERROR("cannot read the nodes of graph %p; its memory nodes are not counted",
                  static_cast<void*>(graph));
    return;
  }
  if (bytes == 0) return;
  GpuIndex index = kBlocked;
  if (ordinal >= 0 && ordinal < kMaxOrdinals) index = device_for_ordinal(CudaOrdinal{ordinal});
  if (index == kPassThrough) return;
  Record record;
  record.handle = key(exec);
  record.kind = HandleKind::kGraphExec;
  record.device = static_cast<int16_t>(index.value);
  record.bytes = bytes;
  record.aux = static_cast<uint64_t>(static_cast<uint32_t>(ordinal));
  Record stale;
  const bool reused = shim().tracker.find(HandleKind::kGraphExec, record.handle, &stale);
  if (!shim().tracker.insert(record)) {
    TESSERA_ERROR("out of host memory for the allocation table; graph %p is not counted",
                  static_cast<void*>(graph));
    return;
  }
  if (!reused) g_allocating_execs.fetch_add(1, std::memory_order_relaxed);
}

template <typename Call>
CUresult instantiate(CUgraphExec* exec, CUgraph graph, Call call) {
  const CUresult result = call();
  if (result == CUDA_SUCCESS && exec && *exec) instantiated(*exec, graph);
  return result;
}

using RunFn = CUresult (*)(CUgraphExec, CUstream);

// The slow path of launch and upload, taken only while the process holds an executable that
// allocates: its first launch or upload maps its allocations from the graph pool.
[[gnu::noinline, gnu::cold]] CUresult run_allocating(RunFn real, CUgraphExec exec,
                                                     CUstream stream) {
  Shim& s = shim();
  Record record;
  if (!s.tracker.find(HandleKind::kGraphExec, key(exec), &record) || (record.aux & kMapped)) {
    return real(exec, stream);
  }
  SpinGuard guard(g_graph_lock);
  if (!s.tracker.find(HandleKind::kGraphExec, key(exec), &record) || (record.aux & kMapped)) {
    return real(exec, stream);
  }
  const GpuIndex index = record.gpu();
  if (!index.is_gpu()) return CUDA_ERROR_OUT_OF_MEMORY;  // the device may not be used
  const auto ordinal = static_cast<CUdevice>(record.aux & kOrdinalMask);
  const uint64_t accounted = settle_graph_pool(ordinal, index);
  uint64_t used = accounted;
  graph_attribute(ordinal, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &used);
  const uint64_t idle = accounted > used ? accounted - used : 0;
  const uint64_t growth = record.bytes > idle ? record.bytes - idle : 0;
  if (growth > 0 && !reserve_bytes(index, growth)) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult result = real(exec, stream);
  // Settle against what the graph pool really holds now (if it cannot be asked, the estimate
  // stays charged).
  const uint64_t covered = accounted + growth;
  uint64_t reserved = covered;
  graph_attribute(ordinal, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &reserved);
  if (reserved <= covered) {
    release_bytes(index, covered - reserved);
  } else if (!reserve_bytes(index, reserved - covered)) {
    // The pool grew beyond the estimate and the launch cannot be undone: count what it holds.
    charge_bytes(index, reserved - covered);
    TESSERA_ERROR("graph memory grew %llu bytes beyond the estimate; the share is over its limit",
                  static_cast<unsigned long long>(reserved - covered));
  }
  g_graph_accounted[ordinal] = reserved;
  if (result == CUDA_SUCCESS) {
    record.aux |= kMapped;
    s.tracker.insert(record);
  }
  return result;
}

}  // namespace

// ---- launch and upload
// ---------------------------------------------------------------------------

#define TESSERA_GRAPH_RUN(symbol, gate, timing)                                         \
  CUresult symbol(CUgraphExec exec, CUstream stream) {                                  \
    count_call(kHook_##symbol);                                                         \
    gate;                                                                               \
    auto real = real_##symbol();                                                        \
    if (__builtin_expect(real == nullptr, 0)) return CUDA_ERROR_NOT_INITIALIZED;        \
    timing;                                                                             \
    if (__builtin_expect(g_allocating_execs.load(std::memory_order_relaxed) == 0, 1)) { \
      return real(exec, stream);                                                        \
    }                                                                                   \
    return run_allocating(real, exec, stream);                                          \
  }
// A timed launch (compute/timed_launch.h) times the whole call, allocating executables included.
#define TESSERA_GRAPH_LAUNCH_TIMED(symbol)                                            \
  TESSERA_GRAPH_TIMED(symbol, g_allocating_execs.load(std::memory_order_relaxed) == 0 \
                                  ? real(exec, stream)                                \
                                  : run_allocating(real, exec, stream))
TESSERA_GRAPH_RUN(cuGraphLaunch, TESSERA_GRAPH_GATE(), TESSERA_GRAPH_LAUNCH_TIMED(cuGraphLaunch))
TESSERA_GRAPH_RUN(cuGraphLaunch_ptsz, TESSERA_GRAPH_GATE(),
                  TESSERA_GRAPH_LAUNCH_TIMED(cuGraphLaunch_ptsz))
TESSERA_GRAPH_RUN(cuGraphUpload, static_cast<void>(0), static_cast<void>(0))
TESSERA_GRAPH_RUN(cuGraphUpload_ptsz, static_cast<void>(0), static_cast<void>(0))

// ---- instantiation
// -------------------------------------------------------------------------------

CUresult cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph, unsigned long long flags) {
  count_call(kHook_cuGraphInstantiateWithFlags);
  auto real = real_cuGraphInstantiateWithFlags();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  return instantiate(exec, graph, [&] { return real(exec, graph, flags); });
}

CUresult cuGraphInstantiateWithParams(CUgraphExec* exec, CUgraph graph,
                                      CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  count_call(kHook_cuGraphInstantiateWithParams);
  auto real = real_cuGraphInstantiateWithParams();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  return instantiate(exec, graph, [&] { return real(exec, graph, params); });
}

CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec* exec, CUgraph graph,
                                           CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  count_call(kHook_cuGraphInstantiateWithParams_ptsz);
  auto real = real_cuGraphInstantiateWithParams_ptsz();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  return instantiate(exec, graph, [&] { return real(exec, graph, params); });
}

CUresult cuGraphInstantiate(CUgraphExec* exec, CUgraph graph, CUgraphNode* error_node, char* log,
                            size_t size) {
  count_call(kHook_cuGraphInstantiate);
  auto real = real_cuGraphInstantiate();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  return instantiate(exec, graph, [&] { return real(exec, graph, error_node, log, size); });
}

CUresult cuGraphInstantiate_v2(CUgraphExec* exec, CUgraph graph, CUgraphNode* error_node, char* log,
                               size_t size) {
  count_call(kHook_cuGraphInstantiate_v2);
  auto real = real_cuGraphInstantiate_v2();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  return instantiate(exec, graph, [&] { return real(exec, graph, error_node, log, size); });
}

// ---- giving memory back
// --------------------------------------------------------------------------

CUresult cuGraphExecDestroy(CUgraphExec exec) {
  count_call(kHook_cuGraphExecDestroy);
  auto real = real_cuGraphExecDestroy();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  Record record;
  if (g_allocating_execs.load(std::memory_order_relaxed) == 0 ||
      !shim().tracker.take(HandleKind::kGraphExec, key(exec), &record)) {
    return real(exec);
  }
  const CUresult result = real(exec);
  if (result != CUDA_SUCCESS) {
    shim().tracker.insert(record);  // still there
    return result;
  }
  g_allocating_execs.fetch_sub(1, std::memory_order_relaxed);
  if ((record.aux & kMapped) && record.gpu().is_gpu()) {
    SpinGuard guard(g_graph_lock);
    settle_graph_pool(static_cast<CUdevice>(record.aux & kOrdinalMask), record.gpu());
  }
  return result;
}

CUresult cuDeviceGraphMemTrim(CUdevice device) {
  count_call(kHook_cuDeviceGraphMemTrim);
  auto real = real_cuDeviceGraphMemTrim();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  const CUresult result = real(device);
  if (result != CUDA_SUCCESS || device < 0 || device >= kMaxOrdinals || !enforcing()) {
    return result;
  }
  SpinGuard guard(g_graph_lock);
  if (g_graph_seen[device]) settle_graph_pool(device, g_graph_index[device]);
  return result;
}
