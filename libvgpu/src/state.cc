#include "state.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstring>

#include "compute/gate.h"
#include "hooks.h"
#include "log.h"
#include "os/system_calls.h"
#include "tessera/file_io.h"
#include "tessera/unique_fd.h"

namespace tessera::vgpu {

constinit Shim g_shim;

namespace {

const char* environment(const char* name) {
  return os::environment_variable(name);
}

constinit std::atomic<BeforeRefusal> g_before_refusal{nullptr};

constinit SpinLock g_ledger_lock{LockRank::kLedger};  // the contexts of every Gpu

// The child has one thread: its state is reset without the locks.
void after_fork_in_child() TESSERA_NO_THREAD_SAFETY_ANALYSIS {
  for (Region& region : g_shim.regions) region.forget_slot_after_fork();
  // The parent's contexts are not the child's.
  g_ledger_lock.reset_after_fork();
  for (Gpu& gpu : g_shim.gpus) {
    gpu.contexts.store(0, std::memory_order_relaxed);
    gpu.charge_per_context.store(0, std::memory_order_relaxed);
  }
  g_shim.tracker.reset_after_fork();
  contexts_changed();  // the parent's contexts are not the child's
  call_counts_after_fork();
  compute::reset_after_fork();
}

__attribute__((constructor)) void on_load() {
  on_fork_child(after_fork_in_child);
}

// No destructor gives the slot back at exit: the driver frees the process's memory only after
// the destructors have run, and until then the share must keep counting it. The slot is cleared
// by the next reclaim once the process is gone.

// ---- finding the shares (docs/libvgpu.md, "Finding the shares") -------------------------------

// The folder every share of the container is mounted under (node-agent/src/share/cdi.cc). A
// build-time constant: nothing a tenant sets at run time moves it.
#ifndef TESSERA_VGPU_SHARE_ROOT
#define TESSERA_VGPU_SHARE_ROOT "/var/run/tessera/shares"
#endif
constexpr char kShareRoot[] = TESSERA_VGPU_SHARE_ROOT;
constexpr int kMaxFolders = 32;  // sub-folders of the root looked at

struct FileKey {
  dev_t device = 0;
  ino_t inode = 0;
};

// Opens <dir>/limits as the region will map it (regular file, never a symlink or FIFO, full size).
int open_limits(const char* dir) {
  char path[320];
  if (std::snprintf(path, sizeof path, "%s/limits", dir) >= static_cast<int>(sizeof path)) {
    return -1;
  }
  tessera::UniqueFd fd;
  if (tessera::open_file(path, O_RDONLY, tessera::FileSource::kUntrusted, fd,
                         sizeof(share::LimitsPage)) != 0) {
    return -1;
  }
  return fd.release();
}

// A tenant (root in its container, without CAP_SYS_ADMIN) can create any folder and file in its
// own root file system but cannot make a read-only mount: a limits file on one was put there by
// the container runtime from the CDI spec.
bool on_read_only_mount(int fd) {
  return os::on_read_only_mount(fd);
}

FileKey key_of(int fd) {
  struct stat status {};
  if (os::stat_fd(fd, &status) != 0) return {};
  return {status.st_dev, status.st_ino};
}

// The sub-folder names of the share root, sorted (the stable order reservations follow).
int list_share_folders(char (*names)[256], int capacity) {
  const int root = os::open(kShareRoot, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) return 0;
  int count = 0;
  alignas(8) char buffer[4096];
  while (true) {
    const long got = os::read_dir_entries(root, buffer, sizeof buffer);
    if (got <= 0) break;
    for (long offset = 0; offset < got;) {
      struct Entry {
        uint64_t inode;
        int64_t next;
        unsigned short length;
        unsigned char type;
        char name[1];
      };
      const auto* entry = reinterpret_cast<const Entry*>(buffer + offset);
      offset += entry->length;
      if (entry->name[0] == '.') continue;  // ".", "..", and temporaries
      if (entry->type != DT_DIR && entry->type != DT_UNKNOWN) continue;
      struct stat status {};
      if (os::stat_at(root, entry->name, &status) != 0 || !S_ISDIR(status.st_mode)) {
        continue;
      }
      if (count == capacity) {
        TESSERA_WARN("more than %d folders under %s: %s and later ones are not looked at", capacity,
                     kShareRoot, entry->name);
        continue;
      }
      std::snprintf(names[count++], 256, "%s", entry->name);
    }
  }
  os::close(root);
  for (int i = 1; i < count; ++i) {  // insertion sort: a handful of names
    for (int j = i; j > 0 && std::strcmp(names[j - 1], names[j]) > 0; --j) {
      char swap[256];
      std::memcpy(swap, names[j], sizeof swap);
      std::memcpy(names[j], names[j - 1], sizeof swap);
      std::memcpy(names[j - 1], swap, sizeof swap);
    }
  }
  return count;
}

// Picks the share folders of this process: every sub-folder of the share root whose limits file
// is on a read-only mount, then each TESSERA_SHARE_DIR entry (a ':'-separated list) not among
// them; once the root gave any share, an entry must pass the same read-only check.
void select_shares(Shim& s) {
  FileKey keys[kMaxShares];
  auto known = [&](const FileKey& key) {
    for (int i = 0; i < s.candidate_count; ++i) {
      if (keys[i].device == key.device && keys[i].inode == key.inode) return true;
    }
    return false;
  };
  auto add = [&](const char* dir, int fd) {
    if (s.candidate_count == kMaxShares) {
      TESSERA_ERROR("more than %d shares: %s is not used (the GPUs only it holds are blocked)",
                    kMaxShares, dir);
      if (fd >= 0) os::close(fd);
      return;
    }
    ShareCandidate& candidate = s.candidates[s.candidate_count];
    std::snprintf(candidate.dir, sizeof candidate.dir, "%s", dir);
    candidate.limits_fd = fd;
    keys[s.candidate_count] = fd >= 0 ? key_of(fd) : FileKey{};
    ++s.candidate_count;
  };

  char names[kMaxFolders][256];
  const int folders = list_share_folders(names, kMaxFolders);
  for (int i = 0; i < folders; ++i) {
    char dir[256];
    if (std::snprintf(dir, sizeof dir, "%s/%s", kShareRoot, names[i]) >=
        static_cast<int>(sizeof dir))
      continue;
    const int fd = open_limits(dir);
    if (fd < 0) {
      TESSERA_WARN("%s has no readable limits page: ignored (it raises no limit)", dir);
      continue;
    }
    if (!on_read_only_mount(fd)) {
      TESSERA_WARN(
          "%s/limits is not on a read-only mount, so the node agent did not put it there: ignored "
          "(it raises no limit)",
          dir);
      os::close(fd);
      continue;
    }
    if (known(key_of(fd))) {
      os::close(fd);
      continue;
    }
    add(dir, fd);
  }
  const bool discovered = s.candidate_count > 0;

  const char* list = s.options.share_dir;
  while (*list) {
    const char* end = std::strchr(list, ':');
    const size_t length = end ? static_cast<size_t>(end - list) : std::strlen(list);
    char dir[256];
    if (length > 0 && length < sizeof dir) {
      std::memcpy(dir, list, length);
      dir[length] = '\0';
      const int fd = open_limits(dir);
      if (fd >= 0 && known(key_of(fd))) {
        os::close(fd);  // the same share, found under the root as well
      } else if (discovered && (fd < 0 || !on_read_only_mount(fd))) {
        TESSERA_WARN(
            "TESSERA_SHARE_DIR names %s, whose limits page is not on a read-only mount, while the "
            "shares under %s are: ignored (it raises no limit)",
            dir, kShareRoot);
        if (fd >= 0) os::close(fd);
      } else {
        add(dir, fd);  // fd -1: the share fails closed when it opens
      }
    } else if (length > 0 && discovered) {
      TESSERA_WARN("a TESSERA_SHARE_DIR entry is longer than %zu bytes: ignored", sizeof dir - 1);
    } else if (length > 0) {
      add("/", -1);  // a path too long to be opened: fails closed
    }
    if (!end) break;
    list = end + 1;
  }
}

// ---- the process's GPUs -------------------------------------------------------------------------

GpuIndex find_gpu(const char* uuid) {
  const int count = g_shim.gpu_count.load(std::memory_order_acquire);
  for (int i = 0; i < count; ++i) {
    if (share::same_device_uuid(g_shim.gpus[i].uuid, uuid)) return GpuIndex{i};
  }
  return GpuIndex{};
}

// The GPU's index, adding it when an open share holds it; not a GPU (is_gpu() false) when none
// does.
GpuIndex gpu_for_uuid(const char* uuid) {
  GpuIndex index = find_gpu(uuid);
  if (index.is_gpu()) return index;
  bool held = false;
  for (int r = 0; r < g_shim.region_count && !held; ++r) {
    held = g_shim.regions[r].find_device(uuid).found();
  }
  if (!held) return GpuIndex{};
  SpinGuard guard(g_shim.gpu_lock);
  index = find_gpu(uuid);
  if (index.is_gpu()) return index;
  const int count = g_shim.gpu_count.load(std::memory_order_relaxed);
  if (count == kMaxGpus) {
    TESSERA_ERROR("more than %d GPUs in the shares: %s is blocked", kMaxGpus, uuid);
    return GpuIndex{};
  }
  std::snprintf(g_shim.gpus[count].uuid, share::kUuidBytes, "%s", uuid);
  g_shim.gpu_count.store(count + 1, std::memory_order_release);
  return GpuIndex{count};
}

bool open_regions() {
  Shim& s = g_shim;
  if (s.uses_shares()) {
    bool ok = true;
    int mps = 0;
    for (int i = 0; i < s.candidate_count; ++i) {
      ShareCandidate& candidate = s.candidates[i];
      if (ok) {
        ok = s.regions[i].open_share(candidate.dir, candidate.limits_fd);
        if (ok && s.regions[i].is_mps()) ++mps;
      }
      if (candidate.limits_fd >= 0) os::close(candidate.limits_fd);
      candidate.limits_fd = -1;
    }
    if (!ok) return false;  // which GPUs the broken share holds is unknown: all are blocked
    if (mps > 1) {
      s.mps_conflict = true;
      TESSERA_ERROR(
          "this process was given %d MPS shares; one CUDA process can be a client of one MPS "
          "control daemon only (CUDA_MPS_PIPE_DIRECTORY is one path), so their limits cannot be "
          "honoured together: cuInit fails and every device is blocked. Give the container one "
          "MPS share (beside any number of time-sliced ones)",
          mps);
      return false;
    }
    s.region_count = s.candidate_count;
    return true;
  }
  auto get_count = real_cuDeviceGetCount();
  auto get_device = real_cuDeviceGet();
  auto get_uuid = real_cuDeviceGetUuid_v2();
  if (!get_count || !get_device || !get_uuid) return false;
  int count = 0;
  if (get_count(&count) != CUDA_SUCCESS) return false;
  DeviceId devices[share::kMaxDevices] = {};
  int listed = 0;
  for (int ordinal = 0; ordinal < count && listed < static_cast<int>(share::kMaxDevices);
       ++ordinal) {
    CUdevice device = 0;
    CUuuid uuid{};
    if (get_device(&device, ordinal) != CUDA_SUCCESS || get_uuid(&uuid, device) != CUDA_SUCCESS) {
      return false;
    }
    devices[listed].ordinal = CudaOrdinal{ordinal};
    format_uuid(uuid, devices[listed].uuid, sizeof devices[listed].uuid, is_mig_device(device));
    ++listed;
  }
  // An environment limit naming a device this process does not see blocks every device.
  VisibleDevice visible[share::kMaxDevices];
  for (int i = 0; i < listed; ++i) visible[i] = {devices[i].ordinal.value, devices[i].uuid};
  const int known_messages = s.options.message_count;
  check_visible_devices(&s.options, visible, listed);
  for (int i = known_messages; i < s.options.message_count; ++i) {
    write_line(LogLevel::kError, s.options.messages[i]);
  }
  if (!s.regions[0].open_standalone(s.options, devices, listed)) return false;
  s.region_count = 1;
  return true;
}

// 2 once the region is open, 3 if it failed (fail closed), 0 if CUDA is not ready to enumerate.
int ensure_region(bool may_enumerate_cuda) {
  Shim& s = g_shim;
  int state = s.region_state.load(std::memory_order_acquire);
  while (state == 0 || state == 1) {
    if (state == 0) {
      if (!s.uses_shares() && !may_enumerate_cuda) return 0;
      if (s.region_state.compare_exchange_strong(state, 1, std::memory_order_acq_rel)) {
        const bool ok = open_regions();
        if (ok) {
          for (int r = 0; r < s.region_count; ++r) {
            const share::LimitsPage* page = s.regions[r].limits_page();
            for (int i = 0; i < static_cast<int>(share::kMaxDevices); ++i) {
              const char* uuid = page->devices[i].uuid;
              if (!uuid[0]) continue;
              gpu_for_uuid(uuid);
              TESSERA_INFO("share %s device %d %s: memory limit %llu bytes",
                           s.regions[r].dir()[0] ? s.regions[r].dir() : "(standalone)", i, uuid,
                           static_cast<unsigned long long>(s.regions[r].limit(LimitsIndex{i})));
            }
          }
        }
        const int next = ok ? 2 : (s.uses_shares() ? 3 : 0);
        s.region_state.store(next, std::memory_order_release);
        return next;
      }
      continue;
    }
    os::yield();
    state = s.region_state.load(std::memory_order_acquire);
  }
  return state;
}

}  // namespace

void ensure_initialized() {
  int state = g_shim.init_state.load(std::memory_order_acquire);
  if (__builtin_expect(state == 2, 1)) return;
  if (state == 0 && g_shim.init_state.compare_exchange_strong(state, 1)) {
    read_options(environment, &g_shim.options, os::environment_entries());
    set_log_level(g_shim.options.log_level);
    select_shares(g_shim);
    // Inside a share the limits page sets every limit and charge: the environment's accounting
    // variables are ignored (one line each) and their problems are moot.
    const bool in_share = g_shim.uses_shares();
    for (int i = 0; i < g_shim.options.message_count; ++i) {
      if (in_share && g_shim.options.standalone_only[i]) continue;
      write_line(LogLevel::kError, g_shim.options.messages[i]);
    }
    for (int i = 0; in_share && i < g_shim.options.share_message_count; ++i) {
      write_line(LogLevel::kError, g_shim.options.share_messages[i]);
    }
    g_shim.enforcing =
        g_shim.uses_shares() || g_shim.options.any_limit() || g_shim.options.any_compute();
    if (log_enabled(LogLevel::kDebug)) print_options(2, &g_shim.options);
    g_shim.init_state.store(2, std::memory_order_release);
    return;
  }
  while (g_shim.init_state.load(std::memory_order_acquire) != 2) os::yield();
}

bool is_mig_device(CUdevice device) {
  // CUDA names a MIG device "<parent> MIG <profile>" (mig-facts.md section 3); its UUID is then
  // the MIG UUID, which NVML and the agent write as "MIG-<uuid>".
  auto get_name = real_cuDeviceGetName();
  char name[256] = {};
  if (!get_name || get_name(name, sizeof name - 1, device) != CUDA_SUCCESS) return false;
  return std::strstr(name, " MIG ") != nullptr;
}

void format_uuid(const CUuuid& uuid, char* out, size_t capacity, bool mig) {
  const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  std::snprintf(out, capacity,
                "%s-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                mig ? "MIG" : "GPU", b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9],
                b[10], b[11], b[12], b[13], b[14], b[15]);
}

uint64_t shares_generation() {
  uint64_t sum = 0;
  for (int r = 0; r < g_shim.region_count; ++r) sum += g_shim.regions[r].generation();
  return sum & kGenerationMask;
}

LimitsIndex share_device_slow(GpuIndex index, int region) {
  Gpu& gpu = g_shim.gpus[index.value];
  const Region& share = g_shim.regions[region];
  const uint64_t generation = share.generation() & kGenerationMask;
  const LimitsIndex found = share.find_device(gpu.uuid);
  gpu.index_cache[region].store(generation << 8 | static_cast<uint64_t>(found.value + 2),
                                std::memory_order_release);
  return found;
}

GpuIndex device_for_ordinal(CudaOrdinal cuda_ordinal) {
  const int ordinal = cuda_ordinal.value;
  if (!enforcing()) return kPassThrough;
  const int region = ensure_region(true);
  if (region == 0) return kPassThrough;  // CUDA not initialised: the driver call fails anyway
  if (region == 3) return kBlocked;
  compute::maybe_start();  // the shares' compute meters, once one has a compute setting
  if (ordinal < 0 || ordinal >= kMaxOrdinals) return kBlocked;
  const uint64_t generation = shares_generation();
  const uint64_t cached = g_shim.ordinal_cache[ordinal].load(std::memory_order_acquire);
  if (cached != 0 && (cached >> 8) == generation) {
    return GpuIndex{static_cast<int>(cached & 0xff) - 2};
  }
  auto get_uuid = real_cuDeviceGetUuid_v2();
  CUuuid uuid{};
  if (!get_uuid || get_uuid(&uuid, ordinal) != CUDA_SUCCESS) return kPassThrough;
  char text[share::kUuidBytes];
  format_uuid(uuid, text, sizeof text, is_mig_device(ordinal));
  GpuIndex index = gpu_for_uuid(text);
  if (!index.is_gpu()) {
    TESSERA_WARN("device %d (%s) is not part of the share: allocations on it fail", ordinal, text);
    index = kBlocked;
  }
  g_shim.ordinal_cache[ordinal].store(generation << 8 | static_cast<uint64_t>(index.value + 2),
                                      std::memory_order_release);
  return index;
}

GpuIndex device_for_uuid(const char* uuid) {
  if (!enforcing()) return kPassThrough;
  const int region = ensure_region(false);
  if (region == 0) return kPassThrough;
  if (region == 3) return kBlocked;
  const GpuIndex index = gpu_for_uuid(uuid);
  if (index.is_gpu()) return index;
  return g_shim.uses_shares() ? kBlocked : kPassThrough;
}

bool shares_refused() {
  ensure_initialized();
  if (!g_shim.uses_shares()) return false;
  ensure_region(false);
  return g_shim.mps_conflict;
}

namespace {

constinit std::atomic<uint64_t> g_context_epoch{1};

// What this thread last learnt in current_device (initial-exec TLS: no __tls_get_addr).
struct DeviceMemo {
  CUcontext context;
  uint64_t generation;  // shares_generation() when it was learnt
  uint64_t epoch;       // g_context_epoch then (0: nothing learnt)
  CudaOrdinal ordinal;
  GpuIndex index;
};
__thread DeviceMemo t_device __attribute__((tls_model("initial-exec"))) = {};

[[gnu::noinline]] GpuIndex learn_current_device(CUcontext current, CudaOrdinal* ordinal) {
  // Read before the driver is asked: a change while it answers leaves the memo stale, not wrong.
  const uint64_t epoch = g_context_epoch.load(std::memory_order_acquire);
  const uint64_t generation = shares_generation();
  auto get_device = real_cuCtxGetDevice();
  if (!get_device) return kPassThrough;
  CUdevice device = 0;
  if (get_device(&device) != CUDA_SUCCESS) return kPassThrough;
  if (ordinal) *ordinal = CudaOrdinal{device};
  const GpuIndex index = device_for_ordinal(CudaOrdinal{device});
  // Only an answer from open (or failed) shares is final; before they open it is pass-through.
  const int state = g_shim.region_state.load(std::memory_order_acquire);
  if ((state == 2 || state == 3) && generation == shares_generation()) {
    t_device = {current, generation, epoch, CudaOrdinal{device}, index};
  }
  return index;
}

}  // namespace

void contexts_changed() {
  g_context_epoch.fetch_add(1, std::memory_order_acq_rel);
}

GpuIndex current_device(CudaOrdinal* ordinal, CUcontext* context) {
  if (!enforcing()) return kPassThrough;
  auto get_current = real_cuCtxGetCurrent();
  if (!get_current) return kPassThrough;
  CUcontext current = nullptr;
  if (get_current(&current) != CUDA_SUCCESS || !current) return kPassThrough;
  if (context) *context = current;
  const DeviceMemo& memo = t_device;
  if (__builtin_expect(memo.context == current &&
                           memo.epoch == g_context_epoch.load(std::memory_order_acquire) &&
                           memo.generation == shares_generation(),
                       1)) {
    if (ordinal) *ordinal = memo.ordinal;
    return memo.index;
  }
  return learn_current_device(current, ordinal);
}

namespace {

// The shares holding GPU `index`, in their stable order: share numbers and limits-page indices.
int holders(GpuIndex index, int* regions, LimitsIndex* devices) {
  int count = 0;
  for (int r = 0; r < g_shim.region_count; ++r) {
    const LimitsIndex device = share_device(index, r);
    if (!device.found()) continue;
    regions[count] = r;
    devices[count] = device;
    ++count;
  }
  return count;
}

uint64_t room_in(const Region& region, LimitsIndex device) {
  const uint64_t limit = region.limit(device);
  if (limit == share::kUnlimited) return share::kUnlimited;
  const uint64_t used = region.usage(device);
  return limit > used ? limit - used : 0;
}

bool try_reserve(GpuIndex index, uint64_t bytes) {
  int regions[kMaxShares];
  LimitsIndex devices[kMaxShares];
  const int count = holders(index, regions, devices);
  if (count == 0) return false;
  if (count == 1) return g_shim.regions[regions[0]].reserve(devices[0], bytes);
  // The first share that seems to have room (a cheap look, so a full share does not pay for a
  // refused reservation on every allocation), then each in turn for real.
  for (int i = 0; i < count; ++i) {
    Region& region = g_shim.regions[regions[i]];
    if (room_in(region, devices[i]) >= bytes && region.reserve(devices[i], bytes)) return true;
  }
  for (int i = 0; i < count; ++i) {
    if (g_shim.regions[regions[i]].reserve(devices[i], bytes)) return true;
  }
  // No single share has room: split over the shares' headroom, all or nothing.
  uint64_t taken[kMaxShares] = {};
  uint64_t remaining = bytes;
  for (int i = 0; i < count && remaining > 0; ++i) {
    Region& region = g_shim.regions[regions[i]];
    const uint64_t room = room_in(region, devices[i]);
    const uint64_t take = room < remaining ? room : remaining;
    if (take > 0 && region.reserve(devices[i], take)) {
      taken[i] = take;
      remaining -= take;
    }
  }
  if (remaining == 0) return true;
  for (int i = 0; i < count; ++i) {
    if (taken[i] > 0) g_shim.regions[regions[i]].release(devices[i], taken[i]);
  }
  return false;
}

}  // namespace

namespace {

// What the stream-ordered pools can give back before a reservation is refused. The callback
// takes the pools' lock (unless this thread holds it already), which ranks below the ledger's
// (spin_lock.h): never called with g_ledger_lock held.
void settle_before_refusal() TESSERA_EXCLUDES(g_ledger_lock) {
  if (BeforeRefusal settle = g_before_refusal.load(std::memory_order_acquire)) settle();
}

// A refused reservation's traces.
void note_refusal(GpuIndex index, uint64_t bytes) {
  TESSERA_DEBUG("reservation of %llu bytes on device %d refused (limit %llu, in use %llu)",
                static_cast<unsigned long long>(bytes), index.value,
                static_cast<unsigned long long>(device_limit(index)),
                static_cast<unsigned long long>(device_usage(index)));
  // For the agent's metrics (tessera_share_allocations_denied_total): in the process's slot of
  // every share that holds the GPU (none of them had room).
  int regions[kMaxShares];
  LimitsIndex devices[kMaxShares];
  const int count = holders(index, regions, devices);
  for (int i = 0; i < count; ++i) {
    if (share::ProcessSlot* slot = g_shim.regions[regions[i]].own_slot())
      slot->allocations_denied.fetch_add(1, std::memory_order_relaxed);
  }
}

// After a first attempt failed: what the stream-ordered pools can give back, a second attempt,
// then the refusal's traces.
[[gnu::noinline]] bool reserve_after_refusal(GpuIndex index, uint64_t bytes)
    TESSERA_EXCLUDES(g_ledger_lock) {
  settle_before_refusal();
  if (try_reserve(index, bytes)) return true;
  note_refusal(index, bytes);
  return false;
}

bool reserve_at_current_cost(GpuIndex index, uint64_t bytes) TESSERA_EXCLUDES(g_ledger_lock) {
  if (!index.is_gpu()) return false;
  if (try_reserve(index, bytes)) return true;
  return reserve_after_refusal(index, bytes);
}

// Tells each share holding a GPU of this process what contexts the process is charged for there
// (ProcessSlot::contexts), for the agent's measurement. Under g_ledger_lock.
void publish_contexts() TESSERA_REQUIRES(g_ledger_lock) {
  const int gpus = g_shim.gpu_count.load(std::memory_order_acquire);
  for (int r = 0; r < g_shim.region_count; ++r) {
    if (!g_shim.uses_shares()) break;  // a private region has no agent
    uint32_t word = 0;
    bool several = false;
    for (int g = 0; g < gpus; ++g) {
      const uint32_t count = g_shim.gpus[g].contexts.load(std::memory_order_relaxed);
      const LimitsIndex device = count == 0 ? kNotInShare : share_device(GpuIndex{g}, r);
      if (!device.found()) continue;
      several = several || word != 0;
      word =
          share::pack_contexts(static_cast<uint32_t>(device.value), count,
                               g_shim.gpus[g].charge_per_context.load(std::memory_order_relaxed));
    }
    if (several) word = share::kContextsUnmeasurable << 4;
    // A share this process never reserved on has no slot to tell (and needs none).
    share::ProcessSlot* slot =
        word != 0 ? g_shim.regions[r].own_slot() : g_shim.regions[r].claimed_slot();
    if (slot) slot->contexts.store(word, std::memory_order_seq_cst);
  }
}

// update_context_charge under g_ledger_lock.
void update_context_charge_locked(GpuIndex index) TESSERA_REQUIRES(g_ledger_lock) {
  Gpu& gpu = g_shim.gpus[index.value];
  const uint64_t target = context_charge(index);
  const uint64_t applied = gpu.charge_per_context.load(std::memory_order_relaxed);
  const uint32_t count = gpu.contexts.load(std::memory_order_relaxed);
  if (target == applied) return;
  if (count == 0) {
    gpu.charge_per_context.store(target, std::memory_order_relaxed);
    return;
  }
  // The slot's bytes and its contexts word change in the order that keeps the agent's estimate
  // (NVML's figure minus the allocations the slot implies) from overshooting in between: a rise
  // adds the bytes first, a fall announces the lower charge first.
  if (target > applied) {
    TESSERA_INFO(
        "the context cost on device %d rose from %llu to %llu bytes: %u live contexts "
        "charged the difference",
        index.value, static_cast<unsigned long long>(applied),
        static_cast<unsigned long long>(target), count);
    charge_bytes(index, (target - applied) * count);
    gpu.charge_per_context.store(target, std::memory_order_relaxed);
    publish_contexts();
  } else {
    gpu.charge_per_context.store(target, std::memory_order_relaxed);
    publish_contexts();
    release_bytes(index, (applied - target) * count);
  }
}

bool valid_gpu(GpuIndex index) {
  return index.is_gpu() && index.value < g_shim.gpu_count.load(std::memory_order_acquire);
}

}  // namespace

bool reserve_bytes(GpuIndex index, uint64_t bytes) {
  // A process with one share (the usual case): no list of holders, and the context ledger only
  // looked at, unless its charge has to change. Dead processes' slots are reclaimed only when a
  // reservation is refused (Region::reserve): no clock is read under the limit.
  if (g_shim.region_count == 1 && valid_gpu(index)) {
    Region& region = g_shim.regions[0];
    const LimitsIndex device = share_device(index, 0);
    const Gpu& gpu = g_shim.gpus[index.value];
    if (device.found() &&
        (gpu.contexts.load(std::memory_order_relaxed) == 0 ||
         region.context_charge(device) == gpu.charge_per_context.load(std::memory_order_relaxed))) {
      if (region.reserve(device, bytes)) return true;
      return reserve_after_refusal(index, bytes);
    }
  }
  update_context_charge(index);
  return reserve_at_current_cost(index, bytes);
}

uint64_t context_charge(GpuIndex index) {
  if (!g_shim.uses_shares()) return g_shim.options.context_overhead;
  if (g_shim.region_count == 1) {
    const LimitsIndex device = share_device(index, 0);
    return !device.found() ? kDefaultContextCharge : g_shim.regions[0].context_charge(device);
  }
  uint64_t charge = 0;
  for (int r = 0; r < g_shim.region_count; ++r) {
    const LimitsIndex device = share_device(index, r);
    if (!device.found()) continue;
    const uint64_t cost = g_shim.regions[r].context_charge(device);
    if (cost > charge) charge = cost;
  }
  return charge == 0 ? kDefaultContextCharge : charge;
}

void update_context_charge(GpuIndex index) {
  if (!valid_gpu(index)) return;
  Gpu& gpu = g_shim.gpus[index.value];
  if (gpu.contexts.load(std::memory_order_relaxed) == 0) return;
  if (context_charge(index) == gpu.charge_per_context.load(std::memory_order_relaxed)) return;
  SpinGuard guard(g_ledger_lock);
  update_context_charge_locked(index);
}

bool charge_context(GpuIndex index) {
  if (!valid_gpu(index)) return false;
  Gpu& gpu = g_shim.gpus[index.value];
  // Under the ledger: the live contexts at the current cost, and so the new one. A refusal
  // releases the ledger while the pools give memory back (their lock ranks below it), then tries
  // once more at the cost of then.
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (attempt == 1) settle_before_refusal();
    SpinGuard guard(g_ledger_lock);
    update_context_charge_locked(index);
    const uint64_t charge = gpu.charge_per_context.load(std::memory_order_relaxed);
    if (try_reserve(index, charge)) {
      gpu.contexts.fetch_add(1, std::memory_order_relaxed);
      publish_contexts();
      return true;
    }
    if (attempt == 1) note_refusal(index, charge);
  }
  return false;
}

void release_context(GpuIndex index) {
  if (!valid_gpu(index)) return;
  Gpu& gpu = g_shim.gpus[index.value];
  SpinGuard guard(g_ledger_lock);
  if (gpu.contexts.load(std::memory_order_relaxed) == 0) return;
  gpu.contexts.fetch_sub(1, std::memory_order_relaxed);
  publish_contexts();
  release_bytes(index, gpu.charge_per_context.load(std::memory_order_relaxed));
}

void release_bytes(GpuIndex index, uint64_t bytes) {
  if (!index.is_gpu()) return;
  if (g_shim.region_count == 1) {
    const LimitsIndex device = share_device(index, 0);
    if (device.found()) g_shim.regions[0].release(device, bytes);
    return;
  }
  // Last share first: the shares earlier in the order stay as full as they were.
  for (int r = g_shim.region_count - 1; r >= 0 && bytes > 0; --r) {
    const LimitsIndex device = share_device(index, r);
    if (device.found()) bytes -= g_shim.regions[r].release(device, bytes);
  }
}

void charge_bytes(GpuIndex index, uint64_t bytes) {
  int regions[kMaxShares];
  LimitsIndex devices[kMaxShares];
  const int count = !index.is_gpu() ? 0 : holders(index, regions, devices);
  if (count == 0) return;
  for (int i = 0; i < count && bytes > 0; ++i) {
    Region& region = g_shim.regions[regions[i]];
    const uint64_t room = room_in(region, devices[i]);
    const uint64_t take = room < bytes ? room : bytes;
    if (take > 0) region.charge(devices[i], take);
    bytes -= take;
  }
  if (bytes > 0) g_shim.regions[regions[0]].charge(devices[0], bytes);
}

uint64_t device_limit(GpuIndex index) {
  uint64_t sum = 0;
  for (int r = 0; r < g_shim.region_count; ++r) {
    const LimitsIndex device = share_device(index, r);
    if (!device.found()) continue;
    const uint64_t limit = g_shim.regions[r].limit(device);
    if (limit == share::kUnlimited || sum + limit < sum) return share::kUnlimited;
    sum += limit;
  }
  return sum;
}

uint64_t device_usage(GpuIndex index) {
  uint64_t sum = 0;
  for (int r = 0; r < g_shim.region_count; ++r) {
    const LimitsIndex device = share_device(index, r);
    if (!device.found()) continue;
    const uint64_t used = g_shim.regions[r].usage(device);
    sum = sum + used < sum ? ~0ull : sum + used;
  }
  return sum;
}

void maybe_reclaim() {
  for (int r = 0; r < g_shim.region_count; ++r) g_shim.regions[r].maybe_reclaim();
}

namespace {

int64_t monotonic_now_ns() {
  return os::monotonic_ns();
}

// What share `region` is guaranteed on its limits-page device `device`: its memory request, the
// whole limit when the request is kUnlimited, never above the limit.
uint64_t guaranteed(const Region& region, LimitsIndex device) {
  const uint64_t limit = region.limit(device);
  const uint64_t request =
      region.limits_page()->requests[device.value].memory_request.load(std::memory_order_acquire);
  return request < limit ? request : limit;
}

}  // namespace

ReclaimWait::ReclaimWait(GpuIndex index, uint64_t bytes) {
  if (!g_shim.uses_shares() || g_shim.options.reclaim_wait_ms == 0 || !valid_gpu(index)) return;
  // The first share holding the GPU that is within its request with this allocation (its usage
  // counts the bytes: they are reserved).
  for (int r = 0; r < g_shim.region_count; ++r) {
    Region& region = g_shim.regions[r];
    const LimitsIndex device = share_device(index, r);
    if (!device.found() || !region.usage_page() || !region.claimed_slot()) continue;
    if (region.usage(device) > guaranteed(region, device)) continue;
    page_ = region.usage_page();
    owner_ = region.owner();
    device_ = device;
    break;
  }
  if (!page_ || owner_ == 0) {
    page_ = nullptr;
    return;
  }
  bytes_ = bytes;
  started_ns_ = monotonic_now_ns();
  deadline_ns_ = started_ns_ + static_cast<int64_t>(g_shim.options.reclaim_wait_ms) * 1000000;
  publish();
  TESSERA_INFO(
      "the driver refused %llu bytes on device %d within the share's memory request: "
      "asking the agent to reclaim borrowed memory (waiting up to %u ms)",
      static_cast<unsigned long long>(bytes), index.value, g_shim.options.reclaim_wait_ms);
}

void ReclaimWait::publish() {
  // The owner first and the bytes last: a reader that sees the bytes sees whose they are (or a
  // newer request's owner, which is the share's too).
  page_->reclaim_owner.store(owner_, std::memory_order_seq_cst);
  page_->reclaim_device.store(static_cast<uint32_t>(device_.value), std::memory_order_seq_cst);
  page_->reclaim_at_ns.store(static_cast<uint64_t>(started_ns_), std::memory_order_seq_cst);
  page_->reclaim_bytes.store(bytes_, std::memory_order_seq_cst);
}

bool ReclaimWait::again() {
  if (!page_) return false;
  const int64_t now = monotonic_now_ns();
  if (now >= deadline_ns_) {
    TESSERA_INFO("no memory came back within %u ms: CUDA_ERROR_OUT_OF_MEMORY",
                 g_shim.options.reclaim_wait_ms);
    return false;
  }
  const int64_t left = deadline_ns_ - now;
  const int64_t sleep_ns = left < kReclaimRetryNs ? left : kReclaimRetryNs;
  os::sleep_ns(sleep_ns);
  // Another process of the share that stopped waiting withdrew the request: ask again.
  if (page_->reclaim_bytes.load(std::memory_order_acquire) == 0) publish();
  return true;
}

ReclaimWait::~ReclaimWait() {
  if (!page_) return;
  // Withdrawn only while it is still this process's (another process's later request stays).
  if (page_->reclaim_owner.load(std::memory_order_acquire) == owner_)
    page_->reclaim_bytes.store(0, std::memory_order_seq_cst);
}

void set_before_refusal(BeforeRefusal callback) {
  g_before_refusal.store(callback, std::memory_order_release);
}

void on_fork_child(void (*reset)()) {
  os::on_fork_child(reset);
}

}  // namespace tessera::vgpu
