#include "driver.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "process_id.h"

namespace simgpu::driver {
namespace {

// The MIG devices of a MIG-enabled GPU, lowest MIG index first.
std::vector<VisibleDevice> mig_devices_of(Simulator& sim, int device) {
  std::vector<std::pair<uint32_t, VisibleDevice>> found;
  const MigState state = sim.mig_state(device);
  for (int g = 0; g < kMaxGpuInstances; ++g) {
    if (state.gpu_instances[g].in_use == 0) continue;
    for (int c = 0; c < kMaxComputeInstances; ++c) {
      const MigComputeInstance& compute = state.gpu_instances[g].compute[c];
      if (compute.in_use == 0) continue;
      found.push_back({compute.mig_index, VisibleDevice{device, compute.serial, {device, g, c}}});
    }
  }
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<VisibleDevice> result;
  for (const auto& each : found) result.push_back(each.second);
  return result;
}

}  // namespace

// CUDA_VISIBLE_DEVICES as the real driver reads it: a comma-separated list of indices, GPU UUID
// prefixes and MIG UUIDs ("MIG-<uuid>", mixed with GPUs as R570+ allows [G-NAMES]); the list ends
// at the first entry that names no device (or one already listed). A GPU with MIG mode on is no
// CUDA device itself: unset, its MIG devices are enumerated instead; named by index or UUID, it
// adds nothing. Simplification: a process uses at most one MIG device per GPU (the first listed,
// or with the variable unset the lowest MIG index), where R570+ allows one per GPU instance.
std::vector<VisibleDevice> parse_visible_devices(Simulator& sim) {
  std::vector<VisibleDevice> visible;
  const int count = sim.device_count();
  auto has_gpu = [&](int device) {
    return std::any_of(visible.begin(), visible.end(),
                       [&](const VisibleDevice& each) { return each.device == device; });
  };
  auto add_gpu = [&](int device) {
    if (sim.mig_state(device).mode == 0) {
      visible.push_back({device, 0, {}});
    } else if (const auto migs = mig_devices_of(sim, device); !migs.empty()) {
      visible.push_back(migs.front());
    }
  };
  const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
  if (!env) {
    for (int i = 0; i < count; ++i) add_gpu(i);
    return visible;
  }
  std::string_view rest(env);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    std::string_view entry = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    while (!entry.empty() && entry.front() == ' ') entry.remove_prefix(1);
    int found = -1;
    if (!entry.empty() &&
        std::all_of(entry.begin(), entry.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      const long index = std::strtol(std::string(entry).c_str(), nullptr, 10);
      if (index >= 0 && index < count) found = static_cast<int>(index);
    } else if (entry.size() >= 5 && entry.substr(0, 4) == "GPU-") {
      for (int i = 0; i < count; ++i) {
        if (std::string_view(sim.device(i).uuid).substr(0, entry.size()) == entry) {
          found = i;
          break;
        }
      }
    } else if (entry.size() > 4 && entry.substr(0, 4) == "MIG-") {
      const auto mig = sim.find_mig_device(entry);
      if (!mig) break;
      if (has_gpu(mig->device)) continue;  // one MIG device per GPU (see above)
      const MigState state = sim.mig_state(mig->device);
      visible.push_back(
          {mig->device,
           state.gpu_instances[mig->gpu_instance].compute[mig->compute_instance].serial, *mig});
      continue;
    }
    if (found < 0 || has_gpu(found)) break;
    // A MIG-enabled GPU named as a whole is no CUDA device.
    if (sim.mig_state(found).mode == 0) visible.push_back({found, 0, {}});
  }
  return visible;
}

// The process's view of a device it sees as a MIG device: "<parent> MIG <profile>", the MIG UUID,
// the GPU instance's memory and the compute instance's SMs.
DeviceConfig mig_device_view(Simulator& sim, const VisibleDevice& visible) {
  DeviceConfig view = sim.device(visible.device);
  const MigState state = sim.mig_state(visible.device);
  const MigGpuInstance& instance = state.gpu_instances[visible.mig.gpu_instance];
  const MigComputeInstance& compute = instance.compute[visible.mig.compute_instance];
  const MigModel* model = sim.mig_model(visible.device);
  std::string profile = model->profiles[instance.profile_index].name;
  if (compute.size != model->profiles[instance.profile_index].compute_slices)
    profile = std::to_string(compute.size) + "c." + profile;
  std::snprintf(view.name, sizeof view.name, "%s MIG %s", sim.device(visible.device).name,
                profile.c_str());
  std::snprintf(view.uuid, sizeof view.uuid, "%s", compute.uuid);
  view.total_memory = instance.memory_bytes;
  view.sm_count = compute.multiprocessors;
  return view;
}

CUresult Driver::initialize() {
  if (initialized.load(std::memory_order_relaxed)) {
    return initialized_pid == current_pid() ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
  }
  sim = Simulator::get();
  if (!sim) return CUDA_ERROR_NO_DEVICE;
  for (int d = 0; d < sim->device_count(); ++d) device_views[d] = sim->device(d);
  for (const VisibleDevice& visible : parse_visible_devices(*sim)) {
    // Bound now: this process's memory and work on that GPU belong to the MIG device from here.
    if (visible.mig_serial != 0) {
      if (!sim->bind_mig_device(visible.device, visible.mig_serial)) continue;  // just destroyed
      device_views[visible.device] = mig_device_view(*sim, visible);
    }
    visible_devices.push_back(visible.device);
  }
  if (visible_devices.empty()) return CUDA_ERROR_NO_DEVICE;
  for (size_t ordinal = 0; ordinal < visible_devices.size(); ++ordinal) {
    auto primary = std::make_unique<Context>();
    primary->device = visible_devices[ordinal];
    primary->primary = true;
    primary->default_stream.context = primary.get();
    primary_contexts.push_back(std::move(primary));
    auto pool = std::make_unique<MemPool>();
    pool->device = visible_devices[ordinal];
    pool->is_default = true;
    pools.insert(pool.get());
    current_pools.push_back(pool.get());
    default_pools.push_back(std::move(pool));
    graph_pools[visible_devices[ordinal]].device = visible_devices[ordinal];
  }
  initialized_pid = current_pid();
  initialized.store(true, std::memory_order_release);  // publishes everything above
  return CUDA_SUCCESS;
}

bool trace_enabled() {
  static const bool trace = [] {
    const char* value = std::getenv("SIMGPU_TRACE");
    return value && *value && std::strcmp(value, "0") != 0;
  }();
  return trace;
}

uint64_t charged_bytes(uint64_t requested) {
  return requested >= (1ull << 20) ? round_up(requested, kPageBytes)
                                   : round_up(requested, kSmallAllocAlign);
}

int driver_version() {
  // The machine's driver (fixed when its state was created), read without cuInit as the real
  // cuDriverGetVersion answers before it.
  const Simulator* sim = Simulator::get();
  return sim != nullptr ? sim->cuda_driver_version() : kCudaVersionBeforePartitions;
}

Driver& Driver::get() {
  static Driver* driver = new Driver();  // never destroyed: atexit order must not matter
  return *driver;
}

CUdeviceptr Driver::take_address_range(uint64_t size, uint64_t alignment) {
  next_address = round_up(next_address, std::max<uint64_t>(alignment, 256));
  const CUdeviceptr base = next_address;
  next_address += std::max<uint64_t>(round_up(size, 256), 256);
  return base;
}

int Driver::ordinal_of_device(int device) const {
  for (size_t i = 0; i < visible_devices.size(); ++i) {
    if (visible_devices[i] == device) return static_cast<int>(i);
  }
  return -1;
}

std::vector<Context*>& context_stack() {
  thread_local std::vector<Context*> stack;
  return stack;
}

Context* current_context() {
  auto& stack = context_stack();
  return stack.empty() ? nullptr : stack.back();
}

CUresult check_initialized(const Driver& driver) {
  // Lock-free (cuCtxGetCurrent calls it without the mutex): `initialized` is stored last, with
  // release, by initialize().
  return driver.initialized.load(std::memory_order_acquire) &&
                 driver.initialized_pid == current_pid()
             ? CUDA_SUCCESS
             : CUDA_ERROR_NOT_INITIALIZED;
}

Stream* resolve_stream(Driver& driver, CUstream handle) {
  if (handle == nullptr || handle == CU_STREAM_LEGACY || handle == CU_STREAM_PER_THREAD) {
    Context* context = current_context();
    if (!context || !driver.contexts.count(context)) return nullptr;
    return &context->default_stream;
  }
  auto* stream = reinterpret_cast<Stream*>(handle);
  return driver.streams.count(stream) ? stream : nullptr;
}

uint64_t stream_id(Stream& stream) {
  static uint64_t last_id = 0;  // under the driver mutex, as every caller is
  if (stream.id == 0) stream.id = ++last_id;
  return stream.id;
}

CUresult to_result(AllocResult result) {
  switch (result) {
    case AllocResult::kOk:
      return CUDA_SUCCESS;
    case AllocResult::kOutOfMemory:
    case AllocResult::kInjectedFailure:
      return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return CUDA_ERROR_UNKNOWN;
}

unsigned resident_blocks_per_sm(unsigned threads_per_block, unsigned shared_bytes) {
  unsigned by_threads = kMaxThreadsPerSm / std::max(threads_per_block, 1u);
  // Each resident block also reserves 1 KiB of shared memory for the system.
  unsigned by_shared = kSharedMemPerSm / (shared_bytes + 1024);
  return std::max(1u, std::min({kMaxBlocksPerSm, by_threads, by_shared}));
}

uint64_t kernel_duration_ns(const Driver& driver, const Function& function, const unsigned grid[3],
                            const unsigned block[3], unsigned shared_bytes) {
  const uint64_t blocks = uint64_t{grid[0]} * grid[1] * grid[2];
  const unsigned threads = block[0] * block[1] * block[2];
  const int device = function.module->context->device;
  const uint64_t per_wave = uint64_t{driver.device_config(device).sm_count} *
                            resident_blocks_per_sm(threads, shared_bytes);
  const uint64_t waves = (blocks + per_wave - 1) / per_wave;
  return waves * function.wave_ns;
}

void enqueue_work(Driver& driver, Stream& stream, uint64_t work_ns,
                  std::unique_lock<std::mutex>& lock) {
  const int device = stream.context->device;
  auto& pending = driver.pending_marks[device];
  if (pending.size() >= static_cast<size_t>(kMaxPendingLaunches)) {
    const uint64_t finished = driver.sim->done(device);
    while (!pending.empty() && pending.front() <= finished) pending.pop_front();
    if (pending.size() >= static_cast<size_t>(kMaxPendingLaunches)) {
      // The queue is full: like the real driver, the launching thread blocks until the oldest
      // queued launch has run.
      const uint64_t oldest = pending[pending.size() - kMaxPendingLaunches];
      lock.unlock();
      driver.sim->wait_for(device, oldest);
      lock.lock();
      const uint64_t now_done = driver.sim->done(device);
      while (!pending.empty() && pending.front() <= now_done) pending.pop_front();
    }
  }
  const uint64_t mark = driver.sim->submit(device, work_ns);
  pending.push_back(mark);
  stream.last_mark = mark;
  stream.context->default_stream.last_mark =
      std::max(stream.context->default_stream.last_mark, mark);
}

CUresult pool_take(Driver& driver, MemPool& pool, uint64_t bytes) {
  const uint64_t idle = pool.reserved - pool.used;
  if (idle < bytes) {
    const uint64_t grow = bytes - idle;
    if (CUresult r = to_result(driver.sim->reserve(pool.device, grow)); r != CUDA_SUCCESS) {
      return r;
    }
    pool.reserved += grow;
  }
  pool.used += bytes;
  pool.reserved_high = std::max(pool.reserved_high, pool.reserved);
  pool.used_high = std::max(pool.used_high, pool.used);
  return CUDA_SUCCESS;
}

void pool_trim(Driver& driver, MemPool& pool, uint64_t keep) {
  const uint64_t target = std::max(pool.used, keep);
  if (pool.reserved > target) {
    driver.sim->release(pool.device, pool.reserved - target);
    pool.reserved = target;
  }
}

void trim_pools_at_sync(Driver& driver, int device) {
  for (MemPool* pool : driver.pools) {
    if (pool->device == device) pool_trim(driver, *pool, pool->release_threshold);
  }
}

void synchronize_to(Driver& driver, int device, uint64_t mark, std::unique_lock<std::mutex>& lock) {
  lock.unlock();
  driver.sim->wait_for(device, mark);
  lock.lock();
  trim_pools_at_sync(driver, device);
}

}  // namespace simgpu::driver
