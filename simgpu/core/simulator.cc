#include "simulator.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "cgroup.h"
#include "process_id.h"

namespace simgpu {
namespace {

constexpr uint64_t kReclaimPeriodNs = 200'000'000;  // how stale memory of dead processes may get

void init_state(SharedState* state, const SimConfig& config) {
  std::memset(static_cast<void*>(state), 0, sizeof(SharedState));
  pthread_mutexattr_t attributes;
  pthread_mutexattr_init(&attributes);
  pthread_mutexattr_setpshared(&attributes, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attributes, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(&state->lock, &attributes);
  pthread_mutexattr_destroy(&attributes);

  state->device_count = static_cast<uint32_t>(config.devices.size());
  for (size_t i = 0; i < config.devices.size(); ++i) {
    const DeviceSpec& spec = config.devices[i];
    DeviceConfig& device = state->devices[i];
    std::snprintf(device.name, sizeof device.name, "%s", spec.name.c_str());
    std::snprintf(device.uuid, sizeof device.uuid, "%s", device_uuid(static_cast<int>(i)).c_str());
    std::snprintf(device.pci_bus_id, sizeof device.pci_bus_id, "%s",
                  device_pci_bus_id(static_cast<int>(i)).c_str());
    device.total_memory = spec.memory_bytes;
    device.sm_count = spec.sms;
    device.cc_major = spec.cc_major;
    device.cc_minor = spec.cc_minor;
    device.minor_number = static_cast<uint32_t>(i);
    device.compute_mode = spec.compute_mode;
    device.mig_capable = spec.mig != MigSetting::kNone ? 1 : 0;
    DeviceState& device_state = state->device_state[i];
    for (Timeline& timeline : device_state.timelines) timeline.running_slot = -1;
    device_state.healthy = 1;
    device_state.mig.mode = spec.mig == MigSetting::kOn ? 1 : 0;
    device_state.mig.pending_mode = device_state.mig.mode;
  }
  std::snprintf(state->proc_root, sizeof state->proc_root, "%s", config.proc_root.c_str());
  for (int index : config.unhealthy_devices) {
    state->device_state[index].healthy = 0;
    state->device_state[index].xid_events = 1;
  }
  state->engine.timeslice_ns = config.timeslice_ns;
  state->engine.switch_cost_ns = config.switch_cost_ns;
  state->engine.context_overhead = config.context_overhead;
  std::snprintf(state->driver_version, sizeof state->driver_version, "%s",
                config.driver_version.c_str());
  state->size = sizeof(SharedState);
  state->version = kStateVersion;
  // Written last: a reader that sees the magic sees everything above.
  __atomic_store_n(&state->magic, kStateMagic, __ATOMIC_RELEASE);
}

SharedState* map_existing(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return nullptr;
  struct stat info {};
  if (::fstat(fd, &info) != 0 || static_cast<size_t>(info.st_size) < sizeof(SharedState)) {
    ::close(fd);
    std::fprintf(stderr,
                 "simgpu: state file %s has the wrong size (another simulator build?); remove it "
                 "or set SIMGPU_STATE to a new path\n",
                 path.c_str());
    return nullptr;
  }
  void* memory = ::mmap(nullptr, sizeof(SharedState), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (memory == MAP_FAILED) return nullptr;
  auto* state = static_cast<SharedState*>(memory);
  if (__atomic_load_n(&state->magic, __ATOMIC_ACQUIRE) != kStateMagic ||
      state->version != kStateVersion || state->size != sizeof(SharedState)) {
    std::fprintf(stderr,
                 "simgpu: state file %s was written by an incompatible simulator; remove it or "
                 "set SIMGPU_STATE to a new path\n",
                 path.c_str());
    ::munmap(memory, sizeof(SharedState));
    return nullptr;
  }
  return state;
}

// Creates the state under a temporary name and links it into place, so no process ever maps a
// half-initialised file; when another process wins the race, its file is used.
SharedState* open_or_create_state(const SimConfig& config) {
  if (SharedState* state = map_existing(config.state_path)) return state;
  if (errno != ENOENT && ::access(config.state_path.c_str(), F_OK) == 0) return nullptr;

  const std::string temp_path = config.state_path + ".tmp." + std::to_string(current_pid());
  const int fd = ::open(temp_path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    std::fprintf(stderr, "simgpu: cannot create state file %s: %s\n", temp_path.c_str(),
                 std::strerror(errno));
    return nullptr;
  }
  if (::ftruncate(fd, sizeof(SharedState)) != 0) {
    std::fprintf(stderr, "simgpu: cannot size state file %s: %s\n", temp_path.c_str(),
                 std::strerror(errno));
    ::close(fd);
    ::unlink(temp_path.c_str());
    return nullptr;
  }
  void* memory = ::mmap(nullptr, sizeof(SharedState), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (memory == MAP_FAILED) {
    ::unlink(temp_path.c_str());
    return nullptr;
  }
  init_state(static_cast<SharedState*>(memory), config);
  write_mig_proc_files(static_cast<SharedState*>(memory)->proc_root);
  const bool linked = ::link(temp_path.c_str(), config.state_path.c_str()) == 0;
  ::unlink(temp_path.c_str());
  if (linked) return static_cast<SharedState*>(memory);
  ::munmap(memory, sizeof(SharedState));
  return map_existing(config.state_path);
}

std::mutex g_instance_mutex;
std::atomic<Simulator*> g_instance{nullptr};
std::atomic<int> g_instance_pid{0};

void release_slot_at_exit();

}  // namespace

uint64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

Simulator::Simulator(SharedState* state, SimConfig config, int slot)
    : state_(state), config_(std::move(config)), slot_(slot) {}

Simulator* Simulator::get() {
  const int pid = current_pid();
  Simulator* instance = g_instance.load(std::memory_order_acquire);
  if (instance && g_instance_pid.load(std::memory_order_relaxed) == pid) return instance;

  std::lock_guard<std::mutex> guard(g_instance_mutex);
  instance = g_instance.load(std::memory_order_acquire);
  if (instance && g_instance_pid.load(std::memory_order_relaxed) == pid) return instance;
  // First use in this process, or first use in a forked child: the child needs a slot of its own
  // (its parent's memory and contexts are not inherited, as with a real driver).
  SimConfig config = load_config();
  SharedState* state = open_or_create_state(config);
  if (!state) return nullptr;
  auto* created = new Simulator(state, std::move(config), -1);
  {
    LockGuard lock(*created);
    const uint64_t now = now_ns();
    created->reclaim_locked(now);
    for (int i = 0; i < kMaxProcesses; ++i) {
      ProcessSlot& slot = state->processes[i];
      if (slot.pid != 0) continue;
      std::memset(static_cast<void*>(&slot), 0, sizeof slot);
      slot.pid = pid;
      slot.start_time = process_start_time(pid);
      created->slot_ = i;
      break;
    }
  }
  if (created->slot_ < 0) {
    std::fprintf(stderr, "simgpu: all %d process slots of %s are in use\n", kMaxProcesses,
                 created->config_.state_path.c_str());
    delete created;
    return nullptr;
  }
  const bool first_in_process = g_instance.load() == nullptr;
  // A parent's instance (after fork) is left allocated: other threads of the parent may not exist
  // here, but pointers to it may.
  g_instance_pid.store(pid, std::memory_order_relaxed);
  g_instance.store(created, std::memory_order_release);
  if (first_in_process) std::atexit(release_slot_at_exit);
  return created;
}

namespace {

void release_slot_at_exit() {
  Simulator* sim = g_instance.load();
  if (!sim || g_instance_pid.load() != current_pid()) return;
  Simulator::LockGuard lock(*sim);
  sim->release_own_slot_locked();
}

}  // namespace

Simulator::LockGuard::LockGuard(Simulator& sim) : sim_(sim) {
  const int result = pthread_mutex_lock(&sim_.state_->lock);
  if (result == EOWNERDEAD) {
    // The previous holder died inside a critical section. Per-device totals are the only derived
    // values; rebuild them from the per-process slots, which are updated last.
    pthread_mutex_consistent(&sim_.state_->lock);
    SharedState* state = sim_.state_;
    for (uint32_t d = 0; d < state->device_count; ++d) {
      uint64_t used = 0;
      for (const ProcessSlot& slot : state->processes) {
        if (slot.pid != 0) used += slot.used_memory[d];
      }
      state->device_state[d].used_memory = used;
      for (int g = 0; g < kMaxGpuInstances; ++g) {
        uint64_t instance_used = 0;
        for (const ProcessSlot& slot : state->processes) {
          if (slot.pid != 0 &&
              sim_.bound_gpu_instance_locked(slot.mig[d], static_cast<int>(d)) == g)
            instance_used += slot.used_memory[d];
        }
        state->device_state[d].mig.gpu_instances[g].used_memory = instance_used;
      }
    }
    uint32_t limits = 0;
    for (const MemoryLimit& limit : state->memory_limits) limits += limit.in_use != 0 ? 1 : 0;
    state->memory_limit_count = limits;
  }
}

Simulator::LockGuard::~LockGuard() {
  pthread_mutex_unlock(&sim_.state_->lock);
}

int Simulator::reclaim_locked(uint64_t now) {
  state_->last_reclaim_ns = now;
  int reclaimed = 0;
  for (int i = 0; i < kMaxProcesses; ++i) {
    ProcessSlot& slot = state_->processes[i];
    if (slot.pid == 0 || i == slot_) continue;
    if (process_alive(slot.pid, slot.start_time)) continue;
    release_slot_locked(i);
    ++reclaimed;
  }
  return reclaimed;
}

void Simulator::release_slot_locked(int index) {
  ProcessSlot& slot = state_->processes[index];
  for (uint32_t d = 0; d < state_->device_count; ++d) {
    DeviceState& device = state_->device_state[d];
    device.used_memory -= std::min(device.used_memory, slot.used_memory[d]);
    const int instance = bound_gpu_instance_locked(slot.mig[d], static_cast<int>(d));
    if (instance >= 0) {
      uint64_t& used = device.mig.gpu_instances[instance].used_memory;
      used -= std::min(used, slot.used_memory[d]);
    }
    for (Timeline& timeline : device.timelines) {
      if (timeline.running_slot == index) timeline.running_slot = -1;
    }
  }
  slot.pid = 0;
}

void Simulator::release_own_slot_locked() {
  release_slot_locked(slot_);
}

int Simulator::reclaim_dead_processes() {
  LockGuard lock(*this);
  return reclaim_locked(now_ns());
}

AllocResult Simulator::reserve(int device, uint64_t bytes) {
  LockGuard lock(*this);
  if (state_->fail_alloc_countdown > 0 && --state_->fail_alloc_countdown == 0) {
    return AllocResult::kInjectedFailure;
  }
  if (config_.fail_alloc_at > 0 && --config_.fail_alloc_at == 0) {
    return AllocResult::kInjectedFailure;
  }
  DeviceState& state = state_->device_state[device];
  const uint64_t total = state_->devices[device].total_memory;
  const uint64_t now = now_ns();
  if (now - state_->last_reclaim_ns > kReclaimPeriodNs) reclaim_locked(now);
  if (bytes > total - std::min(total, state.used_memory)) {
    reclaim_locked(now);
    if (bytes > total - std::min(total, state.used_memory)) return AllocResult::kOutOfMemory;
  }
  // The R615 driver's wall: every allocation path, context creation included, ends here. Only a
  // machine with limits pays for reading cgroups (a /proc read per governed process).
  if (state_->memory_limit_count > 0) {
    const std::optional<std::string> own = read_process_cgroup(0);
    if (bytes > partition_headroom_locked(device, own)) {
      reclaim_locked(now);
      if (bytes > partition_headroom_locked(device, own)) return AllocResult::kOutOfMemory;
    }
  }
  // A MIG device's memory is its GPU instance's, shared by the instance's compute instances.
  ProcessSlot& own = state_->processes[slot_];
  int instance = -1;
  if (own.mig[device].serial != 0) {
    instance = bound_gpu_instance_locked(own.mig[device], device);
    if (instance < 0) return AllocResult::kOutOfMemory;  // its MIG device was destroyed
    const MigGpuInstance& gpu_instance = state_->device_state[device].mig.gpu_instances[instance];
    if (bytes >
        gpu_instance.memory_bytes - std::min(gpu_instance.memory_bytes, gpu_instance.used_memory)) {
      return AllocResult::kOutOfMemory;
    }
  }
  state.used_memory += bytes;
  own.used_memory[device] += bytes;
  if (instance >= 0) state_->device_state[device].mig.gpu_instances[instance].used_memory += bytes;
  return AllocResult::kOk;
}

void Simulator::release(int device, uint64_t bytes) {
  LockGuard lock(*this);
  ProcessSlot& slot = state_->processes[slot_];
  const uint64_t held = std::min(bytes, slot.used_memory[device]);
  slot.used_memory[device] -= held;
  DeviceState& state = state_->device_state[device];
  state.used_memory -= std::min(state.used_memory, held);
  if (const int instance = bound_gpu_instance_locked(slot.mig[device], device); instance >= 0) {
    uint64_t& used = state.mig.gpu_instances[instance].used_memory;
    used -= std::min(used, held);
  }
}

uint64_t Simulator::used_memory(int device) {
  LockGuard lock(*this);
  const uint64_t now = now_ns();
  if (now - state_->last_reclaim_ns > kReclaimPeriodNs) reclaim_locked(now);
  return state_->device_state[device].used_memory;
}

uint64_t Simulator::used_memory_seen(int device) {
  LockGuard lock(*this);
  const int instance = bound_gpu_instance_locked(state_->processes[slot_].mig[device], device);
  if (instance < 0) return state_->device_state[device].used_memory;
  return state_->device_state[device].mig.gpu_instances[instance].used_memory;
}

std::vector<ProcessMemory> Simulator::process_memory(int device) {
  LockGuard lock(*this);
  reclaim_locked(now_ns());
  std::vector<ProcessMemory> result;
  const MigState& mig = state_->device_state[device].mig;
  for (const ProcessSlot& slot : state_->processes) {
    if (slot.pid == 0) continue;
    if (slot.used_memory[device] == 0 && slot.context_count[device] == 0) continue;
    ProcessMemory process{slot.pid, slot.used_memory[device]};
    if (const int instance = bound_gpu_instance_locked(slot.mig[device], device); instance >= 0) {
      const MigGpuInstance& gpu_instance = mig.gpu_instances[instance];
      process.gpu_instance_id = gpu_instance.id;
      process.compute_instance_id = gpu_instance.compute[slot.mig[device].compute_instance].id;
      process.mig_serial = slot.mig[device].serial;
    }
    result.push_back(process);
  }
  return result;
}

int Simulator::governing_limit_locked(int device, std::string_view cgroup) const {
  int best = -1;
  size_t best_length = 0;
  for (int i = 0; i < kMaxMemoryLimits; ++i) {
    const MemoryLimit& limit = state_->memory_limits[i];
    if (limit.in_use == 0 || limit.device != static_cast<uint32_t>(device)) continue;
    const std::string_view path(limit.cgroup);
    if (!is_same_or_ancestor(path, cgroup)) continue;
    if (best < 0 || path.size() > best_length) {
      best = i;
      best_length = path.size();
    }
  }
  return best;
}

uint64_t Simulator::partition_used_locked(int device, int limit,
                                          const std::optional<std::string>& own) {
  uint64_t used = 0;
  for (int i = 0; i < kMaxProcesses; ++i) {
    const ProcessSlot& slot = state_->processes[i];
    if (slot.pid == 0 || slot.used_memory[device] == 0) continue;
    std::optional<std::string> cgroup;
    if (i == slot_) {
      cgroup = own ? own : read_process_cgroup(0);
    } else if (process_alive(slot.pid, slot.start_time)) {
      cgroup = read_process_cgroup(slot.pid);
    }
    if (cgroup && governing_limit_locked(device, *cgroup) == limit)
      used += slot.used_memory[device];
  }
  return used;
}

MemoryPartition Simulator::partition_locked(int limit, const std::optional<std::string>& own) {
  const MemoryLimit& entry = state_->memory_limits[limit];
  const int device = static_cast<int>(entry.device);
  return {device, entry.cgroup, entry.soft_limit, entry.hard_limit,
          partition_used_locked(device, limit, own)};
}

uint64_t Simulator::partition_headroom_locked(int device, const std::optional<std::string>& own) {
  if (!own) return UINT64_MAX;
  const int limit = governing_limit_locked(device, *own);
  if (limit < 0) return UINT64_MAX;
  const uint64_t hard = state_->memory_limits[limit].hard_limit;
  return hard - std::min(hard, partition_used_locked(device, limit, own));
}

LimitResult Simulator::set_memory_limit(int device, const std::string& cgroup, uint64_t soft_limit,
                                        uint64_t hard_limit) {
  LockGuard lock(*this);
  const uint64_t total = state_->devices[device].total_memory;
  const bool clear = soft_limit == 0 && hard_limit == UINT64_MAX;
  MemoryLimit* existing = nullptr;
  MemoryLimit* free_entry = nullptr;
  for (MemoryLimit& limit : state_->memory_limits) {
    if (limit.in_use == 0) {
      if (free_entry == nullptr) free_entry = &limit;
    } else if (limit.device == static_cast<uint32_t>(device) && cgroup == limit.cgroup) {
      existing = &limit;
    }
  }
  if (clear) {
    if (existing != nullptr) {
      existing->in_use = 0;
      --state_->memory_limit_count;
    }
    return LimitResult::kOk;
  }
  MemoryLimit* target = existing != nullptr ? existing : free_entry;
  if (target == nullptr) return LimitResult::kTableFull;
  if (existing == nullptr) {
    std::memset(static_cast<void*>(target), 0, sizeof *target);
    target->device = static_cast<uint32_t>(device);
    std::snprintf(target->cgroup, sizeof target->cgroup, "%s", cgroup.c_str());
    ++state_->memory_limit_count;
  }
  // "max" is the device's capacity.
  target->soft_limit = std::min(soft_limit, total);
  target->hard_limit = std::min(hard_limit, total);
  // Written last: a locker that died before this left the entry free.
  target->in_use = 1;
  return LimitResult::kOk;
}

std::optional<MemoryPartition> Simulator::memory_limit(int device, const std::string& cgroup) {
  LockGuard lock(*this);
  const int limit = governing_limit_locked(device, cgroup);
  if (limit < 0 || cgroup != state_->memory_limits[limit].cgroup) return std::nullopt;
  return partition_locked(limit, std::nullopt);
}

std::optional<MemoryPartition> Simulator::governing_limit(int device, const std::string& cgroup) {
  LockGuard lock(*this);
  const int limit = governing_limit_locked(device, cgroup);
  if (limit < 0) return std::nullopt;
  return partition_locked(limit, std::nullopt);
}

std::optional<MemoryPartition> Simulator::own_partition(int device) {
  LockGuard lock(*this);
  if (state_->memory_limit_count == 0) return std::nullopt;
  const std::optional<std::string> own = read_process_cgroup(0);
  if (!own) return std::nullopt;
  const int limit = governing_limit_locked(device, *own);
  if (limit < 0) return std::nullopt;
  return partition_locked(limit, own);
}

std::vector<MemoryPartition> Simulator::memory_partitions() {
  LockGuard lock(*this);
  std::vector<MemoryPartition> result;
  for (int i = 0; i < kMaxMemoryLimits; ++i) {
    if (state_->memory_limits[i].in_use != 0) result.push_back(partition_locked(i, std::nullopt));
  }
  return result;
}

bool Simulator::context_created(int device) {
  LockGuard lock(*this);
  ProcessSlot& slot = state_->processes[slot_];
  if (slot.mig[device].serial != 0 && bound_gpu_instance_locked(slot.mig[device], device) < 0)
    return false;
  ++slot.context_count[device];
  return true;
}

void Simulator::context_destroyed(int device) {
  LockGuard lock(*this);
  uint32_t& count = state_->processes[slot_].context_count[device];
  if (count > 0) --count;
}

namespace {

void record_segment(EngineSlot& engine, uint64_t start, uint64_t end, uint64_t work_start) {
  if (engine.segment_count > 0) {
    RunSegment& last = engine.segments[(engine.segment_count - 1) % kSegmentRing];
    if (last.end_ns == start && last.work_start_ns + (last.end_ns - last.start_ns) == work_start) {
      last.end_ns = end;
      return;
    }
  }
  engine.segments[engine.segment_count % kSegmentRing] = {start, end, work_start};
  ++engine.segment_count;
}

bool has_pending(const ProcessSlot& slot, int device, int timeline) {
  const int own = slot.mig[device].serial != 0 ? slot.mig[device].timeline : 0;
  return slot.pid != 0 && own == timeline &&
         slot.engine[device].submitted_ns > slot.engine[device].done_ns;
}

}  // namespace

// Runs every timeline of the device: the whole GPU's and, with MIG, one per MIG device, each with
// SMs of its own (a kernel on one instance takes no time from another).
void Simulator::advance_locked(int device, uint64_t now) {
  const int timelines = state_->device_state[device].mig.mode != 0 ? kTimelines : 1;
  for (int timeline = 0; timeline < timelines; ++timeline)
    advance_timeline_locked(device, timeline, now);
  // Timelines of MIG devices that mode no longer has have nothing pending: keep their clocks.
  for (int timeline = timelines; timeline < kTimelines; ++timeline)
    state_->device_state[device].timelines[timeline].last_update_ns = now;
}

// Runs one timeline from its last update to `now`: one context at a time; contexts with pending
// work take turns in time slices (round robin over process slots), and a switch between two
// contexts costs `switch_cost_ns` of device time that nobody's work advances in.
void Simulator::advance_timeline_locked(int device, int timeline, uint64_t now) {
  Timeline& dev = state_->device_state[device].timelines[timeline];
  const EngineConfig& engine = state_->engine;
  uint64_t t = dev.last_update_ns;
  if (t == 0 || t > now) t = now;
  while (t < now) {
    int running = dev.running_slot;
    const bool running_pending =
        running >= 0 && has_pending(state_->processes[running], device, timeline);
    if (!running_pending || dev.slice_left_ns <= 0) {
      int next = -1;
      for (int step = 1; step <= kMaxProcesses; ++step) {
        const int candidate = ((running < 0 ? -1 : running) + step + kMaxProcesses) % kMaxProcesses;
        if (has_pending(state_->processes[candidate], device, timeline)) {
          next = candidate;
          break;
        }
      }
      if (next < 0) {
        dev.running_slot = -1;  // idle: nothing pending anywhere
        dev.switch_left_ns = 0;
        t = now;
        break;
      }
      // Switching between two contexts that both want the device costs time; resuming the same
      // one, or starting from idle, does not.
      dev.switch_left_ns =
          (running >= 0 && running_pending && next != running) ? engine.switch_cost_ns : 0;
      dev.running_slot = next;
      dev.slice_left_ns = static_cast<int64_t>(engine.timeslice_ns);
      running = next;
    }
    if (dev.switch_left_ns > 0) {
      const uint64_t step = std::min<uint64_t>(now - t, static_cast<uint64_t>(dev.switch_left_ns));
      dev.switch_left_ns -= static_cast<int64_t>(step);
      t += step;
      continue;
    }
    EngineSlot& slot = state_->processes[running].engine[device];
    const uint64_t pending = slot.submitted_ns - slot.done_ns;
    const uint64_t run = std::min({now - t, static_cast<uint64_t>(dev.slice_left_ns), pending});
    record_segment(slot, t, t + run, slot.done_ns);
    slot.done_ns += run;
    slot.busy_total_ns += run;
    dev.slice_left_ns -= static_cast<int64_t>(run);
    t += run;
  }
  dev.last_update_ns = now;
}

uint64_t Simulator::submit(int device, uint64_t work_ns) {
  LockGuard lock(*this);
  advance_locked(device, now_ns());
  EngineSlot& slot = state_->processes[slot_].engine[device];
  slot.submitted_ns += work_ns;
  return slot.submitted_ns;
}

uint64_t Simulator::done(int device) {
  LockGuard lock(*this);
  advance_locked(device, now_ns());
  return state_->processes[slot_].engine[device].done_ns;
}

uint64_t Simulator::completion_time(int device, uint64_t mark) {
  LockGuard lock(*this);
  advance_locked(device, now_ns());
  const EngineSlot& slot = state_->processes[slot_].engine[device];
  if (slot.done_ns < mark) return 0;
  const uint32_t count = slot.segment_count;
  const uint32_t oldest = count > kSegmentRing ? count - kSegmentRing : 0;
  for (uint32_t i = count; i > oldest; --i) {
    const RunSegment& segment = slot.segments[(i - 1) % kSegmentRing];
    const uint64_t work_end = segment.work_start_ns + (segment.end_ns - segment.start_ns);
    if (segment.work_start_ns < mark && mark <= work_end) {
      return segment.start_ns + (mark - segment.work_start_ns);
    }
    if (work_end < mark) break;
  }
  // Older than the history kept: the best known bound is the oldest segment's start.
  return count > 0 ? slot.segments[oldest % kSegmentRing].start_ns : 1;
}

void Simulator::wait_for(int device, uint64_t mark) {
  for (;;) {
    const uint64_t finished = done(device);
    if (finished >= mark) return;
    // Sleep no longer than the work left could take if it had the device to itself; with other
    // contexts competing we simply look again.
    const uint64_t sleep_ns = std::clamp<uint64_t>(mark - finished, 20'000, 1'000'000);
    timespec ts{0, static_cast<long>(sleep_ns)};
    nanosleep(&ts, nullptr);
  }
}

std::vector<ProcessBusy> Simulator::process_busy(int device, uint64_t since_ns) {
  LockGuard lock(*this);
  const uint64_t now = now_ns();
  advance_locked(device, now);
  std::vector<ProcessBusy> result;
  for (const ProcessSlot& process : state_->processes) {
    if (process.pid == 0) continue;
    const EngineSlot& slot = process.engine[device];
    uint64_t busy = 0;
    const uint32_t count = slot.segment_count;
    const uint32_t oldest = count > kSegmentRing ? count - kSegmentRing : 0;
    for (uint32_t i = count; i > oldest; --i) {
      const RunSegment& segment = slot.segments[(i - 1) % kSegmentRing];
      if (segment.end_ns <= since_ns) break;
      busy += std::min(segment.end_ns, now) - std::max(segment.start_ns, since_ns);
    }
    if (busy > 0 || process.context_count[device] > 0) result.push_back({process.pid, busy});
  }
  return result;
}

uint64_t Simulator::device_busy(int device, uint64_t since_ns) {
  uint64_t total = 0;
  for (const ProcessBusy& busy : process_busy(device, since_ns)) total += busy.busy_ns;
  return total;
}

bool Simulator::healthy(int device) {
  LockGuard lock(*this);
  return state_->device_state[device].healthy != 0;
}

uint64_t Simulator::fault_events(int device) {
  LockGuard lock(*this);
  return state_->device_state[device].xid_events;
}

void Simulator::set_healthy(int device, bool healthy) {
  LockGuard lock(*this);
  DeviceState& state = state_->device_state[device];
  if (state.healthy && !healthy) ++state.xid_events;
  state.healthy = healthy ? 1 : 0;
}

void Simulator::set_fail_alloc_countdown(int64_t n) {
  LockGuard lock(*this);
  state_->fail_alloc_countdown = n;
}

}  // namespace simgpu
