// Process-wide access to the simulated GPU: opens (or creates) the shared state on first use and
// offers the few operations both simulated libraries need. Every function that reads or writes
// shared state takes the robust lock itself; none may be called with the lock already held.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config.h"
#include "mig_profiles.h"
#include "shared_state.h"

namespace simgpu {

// Monotonic wall clock shared by all processes on the host.
uint64_t now_ns();

// What NVML reports as gpuInstanceId / computeInstanceId of a process not on a MIG device.
inline constexpr uint32_t kNoMigInstance = 0xFFFFFFFF;

struct ProcessMemory {
  int32_t pid;
  uint64_t bytes;
  uint32_t gpu_instance_id = kNoMigInstance;  // the MIG device it runs on, if any
  uint32_t compute_instance_id = kNoMigInstance;
  uint64_t mig_serial = 0;  // MigComputeInstance::serial, 0 for the whole GPU
};

// Outcomes of MIG management, which NVML maps to its codes (simgpu/nvml/mig.cc).
enum class MigError {
  kOk,
  kNotSupported,           // not MIG-capable, MIG mode off, or a profile the GPU lacks
  kInvalidArgument,        // a mode or placement that cannot be
  kInsufficientResources,  // the slices are taken, or the profile's instances used up
  kInUse,                  // processes (or compute instances) are on it
  kNotFound,               // no instance of that ID
};

// A MIG device (one compute instance) by its slots in the shared state.
struct MigDeviceRef {
  int device = -1;
  int gpu_instance = -1;      // slot in MigState::gpu_instances
  int compute_instance = -1;  // slot in MigGpuInstance::compute
};

struct ProcessBusy {
  int32_t pid;
  uint64_t busy_ns;  // device time this process's contexts ran inside the window
};

enum class AllocResult { kOk, kOutOfMemory, kInjectedFailure };

// A per-cgroup device-memory limit of the simulated R615 driver and what its cgroup holds.
struct MemoryPartition {
  int device = 0;
  std::string cgroup;  // relative to the cgroup v2 root ("/a/b")
  uint64_t soft_limit = 0;
  uint64_t hard_limit = 0;
  uint64_t used = 0;  // bytes the processes it governs hold on the device, contexts included
};

enum class LimitResult { kOk, kTableFull };

// Writes SIMGPU_PROC_ROOT's fixed files (when set): `devices` with an nvidia-caps major, and the
// mig/config and mig/monitor capabilities. Done once, when the state file is created.
void write_mig_proc_files(const char* root);

class Simulator {
 public:
  // The process's simulator, opened on first call. Returns nullptr (and logs once to stderr) when
  // the state file cannot be opened or was written by an incompatible build.
  static Simulator* get();

  int device_count() const { return static_cast<int>(state_->device_count); }
  const DeviceConfig& device(int index) const { return state_->devices[index]; }
  const EngineConfig& engine_config() const { return state_->engine; }
  const SimConfig& config() const { return config_; }
  int slot() const { return slot_; }

  // The driver this simulated machine has (SIMGPU_DRIVER_VERSION when the state was created).
  const char* driver_version() const { return state_->driver_version; }
  int cuda_driver_version() const {
    return cuda_version_of_branch(driver_branch(driver_version()));
  }
  // R615 and later: nvmlDeviceSetMemoryLimits_v1 / nvmlDeviceGetMemoryLimits_v1 work.
  bool has_memory_partitions() const {
    return driver_branch(driver_version()) >= kMemoryPartitionsBranch;
  }

  // Memory partitions (the misc backend). `cgroup` is relative to the cgroup v2 root. Setting soft
  // 0 and hard UINT64_MAX clears the cgroup's limit; limits above the device's memory are held to
  // it. kTableFull when kMaxMemoryLimits cgroups already have one.
  LimitResult set_memory_limit(int device, const std::string& cgroup, uint64_t soft_limit,
                               uint64_t hard_limit);
  // The cgroup's own limit and what it holds; nullopt when it has none of its own.
  std::optional<MemoryPartition> memory_limit(int device, const std::string& cgroup);
  // The limit that governs processes of `cgroup` (its own or its nearest limited ancestor's).
  std::optional<MemoryPartition> governing_limit(int device, const std::string& cgroup);
  // The partition that governs this process on `device`, if any (cuMemGetInfo, NVML inside it).
  std::optional<MemoryPartition> own_partition(int device);
  std::vector<MemoryPartition> memory_partitions();

  // Device memory, shared by all processes. `reserve` fails with kOutOfMemory when the pool is
  // exhausted (after reclaiming dead processes' memory) and honours fault injection.
  AllocResult reserve(int device, uint64_t bytes);
  void release(int device, uint64_t bytes);
  uint64_t used_memory(int device);
  // What this process sees used: its MIG device's GPU instance's use when it is bound to one, else
  // used_memory.
  uint64_t used_memory_seen(int device);
  std::vector<ProcessMemory> process_memory(int device);

  // Context bookkeeping (NVML lists processes that hold a context). context_created fails when
  // this process is bound to a MIG device of `device` that has been destroyed since.
  bool context_created(int device);
  void context_destroyed(int device);

  // Multi-Instance GPU (simulator_mig.cc). The model table of a MIG-capable device, else nullptr.
  const MigModel* mig_model(int device) const;
  MigState mig_state(int device);  // a copy, taken under the lock
  // Hopper+ switches at once; Ampere keeps the request pending when it cannot activate it.
  // kInUse while processes hold the GPU (or, to disable, while GPU instances exist).
  MigError set_mig_mode(int device, bool enable);
  // `start` null: the simulator chooses (the highest free placement). The GI ID is fixed by the
  // placement (whole 0, halves 1-2, quarters 3-6, eighths 7-14), as observed on A100/H100.
  MigError create_gpu_instance(int device, uint32_t profile_id, const uint32_t* start,
                               uint32_t& gpu_instance_id);
  MigError destroy_gpu_instance(int device, uint32_t gpu_instance_id);
  MigError create_compute_instance(int device, uint32_t gpu_instance_id, uint32_t profile_id,
                                   const uint32_t* start, uint32_t& compute_instance_id);
  MigError destroy_compute_instance(int device, uint32_t gpu_instance_id,
                                    uint32_t compute_instance_id);
  // The MIG device of a "MIG-..." UUID, on any GPU.
  std::optional<MigDeviceRef> find_mig_device(std::string_view uuid);
  // This process's contexts on `device` run on the MIG device of that serial from now on (the
  // CUDA_VISIBLE_DEVICES choice); false when it no longer exists.
  bool bind_mig_device(int device, uint64_t serial);

  // Execution engine. `submit` queues `work_ns` of device time for this process on `device` and
  // returns the work mark at which it completes. `done` says how far this process's work has run.
  uint64_t submit(int device, uint64_t work_ns);
  uint64_t done(int device);
  // Wall time at which this process's work counter reached `mark`, if it has (else 0).
  uint64_t completion_time(int device, uint64_t mark);
  // Blocks until this process's work on `device` reaches `mark` (wall-clock waiting).
  void wait_for(int device, uint64_t mark);

  // Utilisation over a window of wall time [since_ns, now].
  std::vector<ProcessBusy> process_busy(int device, uint64_t since_ns);
  uint64_t device_busy(int device, uint64_t since_ns);

  bool healthy(int device);
  uint64_t fault_events(int device);
  void set_healthy(int device, bool healthy);
  void set_fail_alloc_countdown(int64_t n);

  // Frees slots of processes that died (SIGKILL included) and returns their memory; also run
  // lazily by reserve(). Returns the number of slots reclaimed.
  int reclaim_dead_processes();

  // Frees this process's slot (at exit). Call with the lock held.
  void release_own_slot_locked();

  // Raw access for tools and tests (callers take the lock via LockGuard).
  SharedState* state() { return state_; }

  class LockGuard {
   public:
    explicit LockGuard(Simulator& sim);
    ~LockGuard();
    LockGuard(const LockGuard&) = delete;
    LockGuard& operator=(const LockGuard&) = delete;

   private:
    Simulator& sim_;
  };

 private:
  Simulator(SharedState* state, SimConfig config, int slot);
  void advance_locked(int device, uint64_t now);
  void advance_timeline_locked(int device, int timeline, uint64_t now);
  // Returns a slot's memory to its device (and MIG GPU instance) and lets go of the engine.
  void release_slot_locked(int slot);
  // The GPU instance slot a live binding names (its CI still there), else -1.
  int bound_gpu_instance_locked(const MigBinding& binding, int device) const;
  // Processes with a context or memory on the device, or on one GPU instance (-1: any).
  bool busy_locked(int device, int gpu_instance) const;
  void write_capability_files_locked(int device, const MigGpuInstance& instance, int compute) const;
  void remove_capability_file_locked(int device, uint32_t gpu_instance_id,
                                     const uint32_t* compute_instance_id) const;
  int reclaim_locked(uint64_t now);
  int governing_limit_locked(int device, std::string_view cgroup) const;
  uint64_t partition_used_locked(int device, int limit, const std::optional<std::string>& own);
  MemoryPartition partition_locked(int limit, const std::optional<std::string>& own);
  // What the partition governing this process (cgroup `own`) on `device` has left; UINT64_MAX
  // when none governs it.
  uint64_t partition_headroom_locked(int device, const std::optional<std::string>& own);

  SharedState* state_;
  SimConfig config_;
  int slot_;
};

}  // namespace simgpu
