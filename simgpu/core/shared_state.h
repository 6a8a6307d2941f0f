// The simulated GPU's cross-process state: one file mapped by every process that loads the
// simulated libcuda.so.1 or libnvidia-ml.so.1. Device memory is one pool for all processes, and
// the execution engine's timeline lives here, so processes see each other the way they do on a
// real GPU. The file is created atomically (built under a temporary name, then linked into place),
// guarded by one process-shared *robust* mutex (a holder killed by SIGKILL cannot wedge the
// others), and each process owns one slot identified by pid + start time.
#pragma once

#include <pthread.h>

#include <cstddef>
#include <cstdint>

namespace simgpu {

inline constexpr uint32_t kStateMagic = 0x5347'5055;  // "SGPU"
inline constexpr uint32_t kStateVersion = 3;          // 3: MIG
inline constexpr int kMaxDevices = 8;
inline constexpr int kMaxProcesses = 128;
// Per (process, device) history of when that context ran: enough for event timing and for
// NVML's utilisation windows (about two seconds of 2 ms time slices between two processes).
inline constexpr int kSegmentRing = 1024;

struct DeviceConfig {
  char name[96];
  char uuid[48];        // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", stable per index
  char pci_bus_id[32];  // "00000000:19:00.0"
  uint64_t total_memory;
  uint32_t sm_count;
  uint32_t cc_major;
  uint32_t cc_minor;
  uint32_t minor_number;  // /dev/nvidia<minor>
  uint32_t compute_mode;  // nvmlComputeMode_t, as SIMGPU_DEVICES' mode= set it
  uint32_t mig_capable;   // SIMGPU_DEVICES' mig=capable|on: the name has a MIG profile table
  uint32_t pad;
};

// Multi-Instance GPU (simgpu/nvml/mig.cc). A GPU holds at most one GPU instance (GI) per compute
// slice and a GI at most 8 compute instances (CI, IDs 0..7). Each CI is one MIG device with its
// own UUID (new at every creation), index under its parent (0..6, with holes), serial (never
// reused on this machine: what a process's binding names) and execution timeline.
inline constexpr int kMaxGpuInstances = 7;
inline constexpr int kMaxComputeInstances = 8;
inline constexpr int kMaxMigDevices = 7;
inline constexpr int kTimelines = 1 + kMaxMigDevices;  // the whole GPU, then one per MIG device

struct MigComputeInstance {
  uint32_t in_use;
  uint32_t id;          // CI ID within the GI
  uint32_t profile_id;  // NVML_COMPUTE_INSTANCE_PROFILE_* (index = ID)
  uint32_t start;       // placement in the GI's compute slices
  uint32_t size;
  uint32_t multiprocessors;
  uint32_t mig_index;  // MIG device index under the parent
  uint32_t pad;
  uint64_t serial;
  char uuid[48];  // "MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
};

struct MigGpuInstance {
  uint32_t in_use;
  uint32_t id;             // GI ID within the GPU
  uint32_t profile_index;  // into the model's profile table (NVML_GPU_INSTANCE_PROFILE_*)
  uint32_t start;          // placement, memory slices
  uint32_t size;
  uint32_t pad;
  uint64_t memory_bytes;  // the profile's memory: the pool its CIs share
  uint64_t used_memory;   // what processes bound to its CIs hold
  MigComputeInstance compute[kMaxComputeInstances];
};

struct MigState {
  uint32_t mode;          // NVML_DEVICE_MIG_DISABLE / _ENABLE
  uint32_t pending_mode;  // differs from `mode` only on Ampere after a refused activation
  MigGpuInstance gpu_instances[kMaxGpuInstances];
};

// Which MIG device a process's contexts on one GPU run on (one per GPU per process): serial 0 is
// the whole GPU.
struct MigBinding {
  uint64_t serial;
  int32_t gpu_instance;      // slot in MigState::gpu_instances
  int32_t compute_instance;  // slot in MigGpuInstance::compute
  int32_t timeline;          // into DeviceState::timelines
  uint32_t pad;
};

// One stretch of time during which a context ran on the device: wall time [start, end) and the
// context's cumulative work counter over that stretch [work_start, work_start + (end - start)).
struct RunSegment {
  uint64_t start_ns;
  uint64_t end_ns;
  uint64_t work_start_ns;
};

// A process's context(s) on one device, as the engine sees them. Work is measured in simulated
// nanoseconds of device time: `submitted_ns` grows at each launch, `done_ns` as the device runs it.
struct EngineSlot {
  uint64_t submitted_ns;
  uint64_t done_ns;
  uint64_t busy_total_ns;
  uint32_t segment_count;  // total ever written; ring index = count % kSegmentRing
  uint32_t pad;
  RunSegment segments[kSegmentRing];
};

struct ProcessSlot {
  int32_t pid;  // 0: free
  uint32_t pad;
  uint64_t start_time;  // /proc/<pid>/stat field 22, so pid reuse cannot inherit a slot
  uint64_t used_memory[kMaxDevices];  // device memory this process holds, context overhead included
  uint32_t context_count[kMaxDevices];
  MigBinding mig[kMaxDevices];
  EngineSlot engine[kMaxDevices];
};

// One execution timeline: the whole GPU's, or one MIG device's (its own SMs, so its kernels take
// no time from another instance's).
struct Timeline {
  uint64_t last_update_ns;  // engine simulated up to here
  int64_t slice_left_ns;
  int64_t switch_left_ns;  // device time still spent switching to `running_slot`
  int32_t running_slot;    // process slot whose context holds it, -1 idle
  uint32_t pad;
};

struct DeviceState {
  uint64_t used_memory;  // sum over live processes
  uint32_t healthy;      // 1 healthy, 0 marked unhealthy by fault injection
  uint32_t pad;
  uint64_t xid_events;  // count of injected faults, for NVML health signals
  Timeline timelines[kTimelines];
  MigState mig;
};

struct EngineConfig {
  uint64_t timeslice_ns;      // SIMGPU_TIMESLICE_US
  uint64_t switch_cost_ns;    // SIMGPU_SWITCH_US: device time lost per context switch
  uint64_t context_overhead;  // SIMGPU_CONTEXT_OVERHEAD: bytes of device memory per context
};

// An allocation or event a process exported with cuIpcGetMemHandle / cuIpcGetEventHandle
// (simgpu/cuda/api_ipc.cc): what another process's cuIpcOpen* checks a handle against. Written by
// the exporter; cleared when it frees the allocation or destroys the event. An entry whose
// exporter died (pid + start time no longer live) is stale and may be taken again.
inline constexpr int kMaxIpcExports = 512;
struct IpcExport {
  uint64_t nonce;  // random, 0: free
  int32_t pid;
  int32_t slot;  // the exporter's ProcessSlot
  uint64_t start_time;
  uint64_t base;  // the exporter's address (memory) or event handle (identity only)
  uint64_t size;
  uint32_t device;
  uint32_t kind;  // 1 memory, 2 event
};

// A per-cgroup device-memory limit of the simulated R615 driver (nvmlDeviceSetMemoryLimits_v1, the
// misc backend): a flat table, one entry per (device, cgroup) that has a limit of its own. A
// process is governed by the entry of its nearest limited ancestor cgroup (its own included);
// limits do not nest. Usage is not stored: it is what the governed processes' slots hold.
inline constexpr int kMaxMemoryLimits = 64;
inline constexpr int kDriverVersionBytes = 32;
inline constexpr int kCgroupPathBytes = 512;
inline constexpr int kProcRootBytes = 256;
struct MemoryLimit {
  uint32_t in_use;  // 0: free entry
  uint32_t device;
  uint64_t soft_limit;            // bytes, at most the device's memory
  uint64_t hard_limit;            // bytes, at most the device's memory
  char cgroup[kCgroupPathBytes];  // relative to the cgroup v2 root: "/a/b" (never "/")
};

struct SharedState {
  uint32_t magic;
  uint32_t version;
  uint64_t size;  // sizeof(SharedState) of the writer; a mismatch means another build
  pthread_mutex_t lock;
  uint32_t device_count;
  uint32_t pad;
  EngineConfig engine;
  int64_t fail_alloc_countdown;  // >0: the allocation that brings it to 0 fails (all processes)
  uint64_t last_reclaim_ns;
  DeviceConfig devices[kMaxDevices];
  DeviceState device_state[kMaxDevices];
  ProcessSlot processes[kMaxProcesses];
  IpcExport ipc_exports[kMaxIpcExports];
  // SIMGPU_DRIVER_VERSION as NVML reports it ("580.159.04", "615.40.01"), fixed at creation.
  char driver_version[kDriverVersionBytes];
  uint32_t memory_limit_count;  // entries of memory_limits in use: 0 skips all cgroup work
  uint32_t pad2;
  MemoryLimit memory_limits[kMaxMemoryLimits];
  uint64_t last_mig_serial;  // the last MigComputeInstance::serial handed out
  // SIMGPU_PROC_ROOT when the state was created: where MIG capability files are kept ("" none).
  char proc_root[kProcRootBytes];
};

static_assert(offsetof(SharedState, magic) == 0);
static_assert(offsetof(SharedState, version) == 4);
static_assert(offsetof(SharedState, size) == 8);
static_assert(sizeof(RunSegment) == 24);

}  // namespace simgpu
