// Process-local half of the simulated libcuda: the driver objects a program holds handles to
// (contexts, streams, events, modules, allocations, pools, graphs). Shared, cross-process state
// (device memory, the execution engine) lives in simgpu::Simulator.
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "simulator.h"

#define SIMGPU_EXPORT extern "C" __attribute__((visibility("default")))

namespace simgpu::driver {

// What cuDriverGetVersion reports: 13000, or 13040 (CUDA 13.4) when the simulated machine's
// driver is R615 or later (SIMGPU_DRIVER_VERSION); 13000 when the state cannot be opened.
int driver_version();
// What the simulator charges for memory, in one place (docs/simulator.md explains the choices):
// allocations of 1 MiB or more take whole 2 MiB pages, smaller ones are rounded to 512 bytes.
inline constexpr uint64_t kPageBytes = 2ull << 20;
inline constexpr uint64_t kSmallAllocAlign = 512;
inline constexpr uint64_t kPitchAlign = 512;
inline constexpr uint64_t kVmmGranularity = 2ull << 20;
inline constexpr int kMaxPendingLaunches = 1024;  // the push buffer: deeper queues block
inline constexpr uint32_t kMaxThreadsPerBlock = 1024;
inline constexpr int kL2CacheBytes = 50 << 20;  // an H100's and an H200's L2
// The most of L2 a context may set aside for persisting accesses (three quarters, as on Hopper).
inline constexpr int kMaxPersistingL2Bytes = kL2CacheBytes / 4 * 3;
inline constexpr uint32_t kMaxThreadsPerSm = 2048;
inline constexpr uint32_t kMaxBlocksPerSm = 32;
inline constexpr uint32_t kSharedMemPerSm = 233472;  // 228 KiB, Hopper
inline constexpr uint32_t kSharedMemPerBlockOptin = 232448;

inline uint64_t round_up(uint64_t value, uint64_t align) {
  return (value + align - 1) / align * align;
}
uint64_t charged_bytes(uint64_t requested);

struct Context;
struct MemPool;
struct IpcExportRecord;  // api_ipc.cc

struct Stream {
  Context* context = nullptr;
  unsigned flags = 0;
  int priority = 0;
  uint64_t last_mark = 0;           // engine work mark of the last item queued on this stream
  struct Graph* capture = nullptr;  // non-null while capturing
  uint64_t capture_id = 0;          // of the capture under way (cuStreamGetCaptureInfo)
  uint64_t id = 0;                  // cuStreamGetId: unique in the process, 0 never used
};

// Context-local storage (the runtime's export table c693336e): a value per key, and the callback
// the runtime gave to be told when the context goes.
struct LocalStorageEntry {
  void* value = nullptr;
  void (*destroyed)(CUcontext, void*, void*) = nullptr;
};

// The values cuCtxGetLimit answers on a fresh context: a real driver's defaults for every limit
// it reports on a context that is not a CIG (graphics-interop) one.
constexpr std::array<size_t, CU_LIMIT_MAX> default_context_limits() {
  std::array<size_t, CU_LIMIT_MAX> limits{};
  limits[CU_LIMIT_STACK_SIZE] = 1024;
  limits[CU_LIMIT_PRINTF_FIFO_SIZE] = 1 << 20;
  limits[CU_LIMIT_MALLOC_HEAP_SIZE] = 8 << 20;
  limits[CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH] = 2;
  limits[CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT] = 2048;
  limits[CU_LIMIT_MAX_L2_FETCH_GRANULARITY] = 64;
  limits[CU_LIMIT_PERSISTING_L2_CACHE_SIZE] = 0;
  limits[CU_LIMIT_CIG_ENABLED] = 0;  // cuBLASLt asks: 0 is an ordinary context
  limits[CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED] = 0;
  return limits;
}

struct Context {
  int device = 0;   // index into the shared state's devices
  uint64_t id = 0;  // cuCtxGetId: unique in the process, new each time a context is made active
  unsigned flags = 0;
  bool primary = false;
  int primary_refcount = 0;  // primary only
  bool active = false;       // primary only: retained at least once and not reset
  Stream default_stream;     // the legacy / per-thread default streams share the timeline
  std::map<void*, LocalStorageEntry> local_storage;
  CUfunc_cache cache_config = CU_FUNC_CACHE_PREFER_NONE;
  CUsharedconfig shared_config = CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE;
  std::unordered_set<Context*> peers;  // contexts whose memory this one may access
  // cuCtxSetLimit's values, starting at a driver's defaults (api_context.cc).
  std::array<size_t, CU_LIMIT_MAX> limits = default_context_limits();
};

struct Event {
  Context* context = nullptr;
  unsigned flags = 0;
  bool recorded = false;
  uint64_t mark = 0;
  uint64_t record_ns = 0;
  uint64_t completed_ns = 0;  // cached once known
  // Set once cuIpcGetEventHandle exported it.
  std::shared_ptr<IpcExportRecord> ipc_export;
};

struct Function {
  std::string name;
  uint64_t wave_ns = 0;
  int max_dynamic_shared = 48 * 1024;
  CUfunc_cache cache_config = CU_FUNC_CACHE_PREFER_NONE;
  struct Module* module = nullptr;
};

struct Library;

struct Module {
  Context* context = nullptr;
  std::vector<std::unique_ptr<Function>> functions;
  bool open_names = false;     // kernels unreadable in the image: any name gets a function
  Library* library = nullptr;  // loaded for a library in one context, owned by it
  std::map<std::string, std::pair<CUdeviceptr, uint64_t>> globals;  // placed at load
};

// The kernels an image holds (see fatbin.h).
struct ImageKernels {
  std::vector<std::string> names;
  std::vector<std::pair<std::string, uint64_t>> globals;  // variable name, size
  bool open = false;
};

struct Kernel {  // CUkernel: one kernel of a library, in no context
  Library* library = nullptr;
  std::string name;
};

struct Library {  // CUlibrary (cuLibraryLoadData): context-independent, loaded per context on use
  ImageKernels kernels;
  std::vector<std::unique_ptr<Kernel>> kernel_handles;
  std::map<Context*, Module*> modules;
};

// kModule: a module's variable, placed at load and gone with the module (never cuMemFree'd).
// kIpc: another process's allocation opened with cuIpcOpenMemHandle (charged to the exporter).
enum class AllocationKind { kDevice, kPitch, kManaged, kPool, kGraph, kModule, kIpc };

// An allocation or event this process exported (api_ipc.cc): held by the Allocation or Event, so
// that however it goes (cuMemFree, cuEventDestroy, its context destroyed) the destructor clears
// the shared-state entry and handles to it stop opening.
struct IpcExportRecord {
  int entry = -1;  // index into SharedState::ipc_exports
  uint64_t nonce = 0;
  unsigned char handle[64] = {};  // the CUipcMemHandle / CUipcEventHandle given out
  IpcExportRecord() = default;
  IpcExportRecord(const IpcExportRecord&) = delete;
  IpcExportRecord& operator=(const IpcExportRecord&) = delete;
  ~IpcExportRecord();
};

struct Allocation {
  uint64_t size = 0;     // bytes the caller asked for (the addressable range)
  uint64_t charged = 0;  // bytes taken from the device pool
  int device = 0;
  AllocationKind kind = AllocationKind::kDevice;
  MemPool* pool = nullptr;
  void* host_backing = nullptr;  // managed memory is host-accessible
  Context* context = nullptr;    // freed with its context
  // Set once cuIpcGetMemHandle exported it.
  std::shared_ptr<IpcExportRecord> ipc_export;
};

struct MemPool {
  int device = 0;
  bool is_default = false;
  uint64_t reserved = 0;  // taken from the device
  uint64_t used = 0;      // handed out to live allocations
  uint64_t reserved_high = 0;
  uint64_t used_high = 0;
  uint64_t release_threshold = 0;
};

struct PhysicalAllocation {  // cuMemCreate
  uint64_t size = 0;
  int device = 0;
  int mappings = 0;
  int handles = 1;        // cuMemCreate's, plus one per cuMemRetainAllocationHandle
  bool released = false;  // every handle released
};

struct Mapping {
  uint64_t size = 0;
  PhysicalAllocation* physical = nullptr;
  bool access_set = false;
};

struct ArrayObject {
  CUDA_ARRAY3D_DESCRIPTOR descriptor{};
  uint64_t charged = 0;
  int device = 0;
  Context* context = nullptr;
};

struct KernelLaunch {
  Function* function = nullptr;
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned shared_bytes = 0;
};

struct GraphNode {
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  CUDA_MEM_ALLOC_NODE_PARAMS alloc{};  // CU_GRAPH_NODE_TYPE_MEM_ALLOC (dptr filled in)
  CUdeviceptr freed = 0;               // CU_GRAPH_NODE_TYPE_MEM_FREE
  int kernel = -1;                     // CU_GRAPH_NODE_TYPE_KERNEL: its index in Graph::kernels
};

struct Graph {
  std::vector<KernelLaunch> kernels;
  std::vector<std::unique_ptr<GraphNode>> nodes;  // node handles, in insertion order
  int device = 0;
};

struct GraphExec {
  Graph graph;  // kernels and device (node handles stay with the graph)
  std::unordered_set<const GraphNode*> source_nodes;  // the nodes of the graph it was made from
  bool memory_charged = false;  // its allocations are mapped from the device's graph pool
  uint64_t memory_bytes = 0;
};

// All process-local driver state behind one mutex: handles are validated against these sets, so
// a stale or forged handle gets an error code, never a crash.
class Driver {
 public:
  static Driver& get();
  // cuInit: opens the simulator and applies CUDA_VISIBLE_DEVICES. Call with `mutex` held.
  CUresult initialize();

  std::mutex mutex;
  std::atomic<bool> initialized{false};  // set last by initialize(); read without the mutex
  int initialized_pid = 0;  // a forked child cannot use its parent's driver, as with real CUDA
  Simulator* sim = nullptr;
  std::vector<int> visible_devices;  // ordinal -> shared-state device index (CUDA_VISIBLE_DEVICES)
  // What this process sees of each shared-state device: the GPU's configuration, or, for a GPU
  // whose MIG device CUDA_VISIBLE_DEVICES chose, that MIG device's name, UUID, memory and SMs.
  DeviceConfig device_views[kMaxDevices] = {};
  const DeviceConfig& device_config(int device) const { return device_views[device]; }

  std::vector<std::unique_ptr<Context>> primary_contexts;  // one per visible ordinal
  std::unordered_set<Context*> contexts;
  uint64_t last_context_id = 0;  // cuCtxGetId: each activated context gets the next
  std::unordered_set<Stream*> streams;
  std::unordered_set<Event*> events;
  std::unordered_set<Module*> modules;
  std::unordered_set<Function*> functions;
  std::unordered_set<Library*> libraries;
  std::unordered_set<Kernel*> kernels;
  std::unordered_set<ArrayObject*> arrays;
  std::unordered_set<Graph*> graphs;
  std::unordered_set<GraphExec*> graph_execs;
  std::unordered_set<GraphNode*> graph_nodes;
  // The per-device graph memory pool of this process (cuDeviceGetGraphMemAttribute), by
  // shared-state device index: reserved when an executable graph that allocates is first launched
  // or uploaded, kept for reuse when that graph is destroyed, returned by cuDeviceGraphMemTrim.
  // Not in `pools`: it has no handle and is not trimmed at synchronisation.
  MemPool graph_pools[kMaxDevices];
  std::unordered_set<PhysicalAllocation*> physical;
  std::vector<std::unique_ptr<MemPool>> default_pools;  // per visible ordinal
  std::vector<MemPool*> current_pools;                  // per visible ordinal
  std::unordered_set<MemPool*> pools;
  std::map<CUdeviceptr, Allocation> allocations;  // by base address
  std::map<CUdeviceptr, Mapping> mappings;        // VMM mappings by address
  std::map<CUdeviceptr, uint64_t> reservations;   // VMM address ranges
  std::map<void*, size_t> host_allocations;
  // Page-locked host memory: cuMemHostAlloc's flags, and ranges registered with cuMemHostRegister
  // (api_host.cc). Host memory is never device memory: nothing here is charged.
  std::map<void*, unsigned> host_allocation_flags;
  std::map<void*, Context*> host_allocation_contexts;  // the context each was allocated in
  struct HostRegion {
    size_t size = 0;
    unsigned flags = 0;
    Context* context = nullptr;
  };
  std::map<uintptr_t, HostRegion> host_regions;  // by base address

  uint64_t next_address = 0x7f00'0000'0000ull;
  std::deque<uint64_t> pending_marks[kMaxDevices];  // launch queue depth per device

  // Reserves `size` bytes of device address space (never reused within a process).
  CUdeviceptr take_address_range(uint64_t size, uint64_t alignment);
  int device_of_ordinal(CUdevice ordinal) const { return visible_devices[ordinal]; }
  int ordinal_of_device(int device) const;
  bool valid_ordinal(CUdevice ordinal) const {
    return ordinal >= 0 && ordinal < static_cast<int>(visible_devices.size());
  }
};

// SIMGPU_TRACE=1: the driver prints to stderr what a program asked of it and did not get
// (entry points it lacks, export tables), for finding what a new runtime or library needs.
bool trace_enabled();

// cuGetProcAddress for both ABIs (status may be null).
CUresult get_proc_address(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                          CUdriverProcAddressQueryResult* status);

// One CUDA device: a whole GPU (mig_serial 0) or a MIG device of it.
struct VisibleDevice {
  int device = -1;
  uint64_t mig_serial = 0;
  MigDeviceRef mig;  // slots of the MIG device, when mig_serial != 0
};

// CUDA_VISIBLE_DEVICES as a driver of R570 or later reads it (see driver.cc).
std::vector<VisibleDevice> parse_visible_devices(Simulator& sim);

// Frees everything a context owns (allocations, arrays, streams, events, modules) and returns its
// memory and overhead to the device. Call with the driver mutex held.
void destroy_context_objects(Driver& driver, Context* context);
// Charges the per-context overhead and registers a new or re-activated context.
CUresult activate_context(Driver& driver, Context* context);

// Thread's current context stack (top = current).
std::vector<Context*>& context_stack();
Context* current_context();

// Resolves a stream handle (0, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD or a created stream) to a
// Stream, for the current context. Returns nullptr for invalid handles or no context.
Stream* resolve_stream(Driver& driver, CUstream handle);
// cuStreamGetId's answer: given on first asking, unique in the process, never 0. Caller holds the
// driver mutex.
uint64_t stream_id(Stream& stream);

// Common preconditions: initialised and (optionally) a current context.
CUresult check_initialized(const Driver& driver);
// Initialised and a valid current context; sets `context`.
CUresult require_context(Driver& driver, Context*& context);
// Reserves device memory and records a new allocation at a fresh address.
CUresult allocate_device_memory(Driver& driver, Context* context, uint64_t size, uint64_t charged,
                                AllocationKind kind, CUdeviceptr* out);
// Device memory checks for copies and stream memory operations (api_memory.cc; call with the
// driver mutex held): a range inside one allocation or VMM mapping; the host-visible bytes of a
// managed allocation (nullptr for device memory, whose contents are not modelled); whether an
// address is device memory at all (with unified addressing, anything else is host memory).
CUresult check_device_range(Driver& driver, CUdeviceptr ptr, size_t bytes);
void* host_view(Driver& driver, CUdeviceptr ptr, size_t bytes);
bool is_device_address(Driver& driver, CUdeviceptr ptr);
// Finds the allocation containing [ptr, ptr + size), or nullptr.
Allocation* find_allocation(Driver& driver, CUdeviceptr ptr, uint64_t size, CUdeviceptr* base);

// Graph memory nodes, added directly or by stream capture of cuMemAllocAsync / cuMemFreeAsync: an
// allocation node (its virtual address in alloc.dptr; no memory is taken until the graph is
// launched) or a free node of one of the graph's allocations (nullptr if `ptr` is not one). Call
// with the driver mutex held.
GraphNode* add_graph_alloc_node(Driver& driver, Graph& graph, uint64_t bytes);
GraphNode* add_graph_free_node(Driver& driver, Graph& graph, CUdeviceptr ptr);

// Modules (api_module.cc; call with the driver mutex held). read_image accepts PTX, a cubin, a
// fat binary or the runtime's fat-binary wrapper; `size_hint` is the image size where known.
CUresult read_image(const void* image, size_t size_hint, ImageKernels& out);
// An image file's bytes (cuModuleLoad, cuLibraryLoadFromFile, cuLinkAddFile):
// CUDA_ERROR_FILE_NOT_FOUND when it cannot be opened.
CUresult read_image_file(const char* path, std::string& out);
Module* create_module(Driver& driver, Context* context, const ImageKernels& kernels);
void destroy_module(Driver& driver, Module* module);
Function* add_function(Driver& driver, Module& module, const std::string& name);
// The module's function of that name (made on demand in an open module), or nullptr.
Function* find_function(Driver& driver, Module& module, const char* name);
// A CUfunction, or a CUkernel passed where a CUfunction goes (as CUDA 12+ allows): the function
// it names in the current context (its library loaded there on first use). nullptr if neither.
Function* resolve_function(Driver& driver, CUfunction handle);

// Runs the context-local storage callbacks of a context that is about to go (the mutex released
// while they run: they call back into the driver), then forgets them.
void run_local_storage_callbacks(Driver& driver, Context* context,
                                 std::unique_lock<std::mutex>& lock);

// Maps a simulator reservation result to the CUresult a real driver returns.
CUresult to_result(AllocResult result);

// Pool accounting (call with the driver mutex held). pool_take hands out `bytes` from the pool,
// growing its reservation from the device by what it lacks (or failing with what the device
// answered); pool_trim returns to the device what the pool reserves beyond max(used, keep).
CUresult pool_take(Driver& driver, MemPool& pool, uint64_t bytes);
void pool_trim(Driver& driver, MemPool& pool, uint64_t keep);

// Engine helpers (call with the driver mutex held).
uint64_t kernel_duration_ns(const Driver& driver, const Function& function, const unsigned grid[3],
                            const unsigned block[3], unsigned shared_bytes);
unsigned resident_blocks_per_sm(unsigned threads_per_block, unsigned shared_bytes);
// Queues `work_ns` on the stream's device; blocks while the launch queue is full.
void enqueue_work(Driver& driver, Stream& stream, uint64_t work_ns,
                  std::unique_lock<std::mutex>& lock);
// Waits (mutex released) until the device has run this process's work up to `mark`, then returns
// pool memory above each pool's release threshold, as the real driver does at synchronisation.
void synchronize_to(Driver& driver, int device, uint64_t mark, std::unique_lock<std::mutex>& lock);
void trim_pools_at_sync(Driver& driver, int device);

// IPC mappings this process opened (api_ipc.cc; call with the driver mutex held): drops those
// whose exporter freed the allocation or exited, so that the addresses stop resolving. Run at
// every cuIpc* call; the copy and memset paths may call it too.
void sweep_revoked_ipc_mappings(Driver& driver);

}  // namespace simgpu::driver
