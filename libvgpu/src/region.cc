#include "region.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstring>

#include "log.h"
#include "os/system_calls.h"
#include "tessera/file_io.h"
#include "tessera/share_contract.h"
#include "tessera/unique_fd.h"

namespace tessera::vgpu {
namespace {

using share::LimitsPage;
using share::ProcessSlot;
using share::UsagePage;
using tessera::FileSource;
using tessera::open_file;
using tessera::UniqueFd;

constexpr int kReserveAttempts = 8;

int64_t monotonic_ns() {
  return os::monotonic_coarse_ns();
}

// Maps the limits page read-only from an opened limits file.
const LimitsPage* map_limits_page(int fd) {
  if (fd < 0) return nullptr;
  return static_cast<const LimitsPage*>(os::map_file_read_only(fd, sizeof(LimitsPage)));
}

// A regular file (never a symlink, FIFO or device).
bool is_regular_file(const char* path) {
  struct stat status {};
  return os::stat_at(AT_FDCWD, path, &status) == 0 && S_ISREG(status.st_mode);
}

}  // namespace

bool read_process_start_time(int pid, uint64_t* start_time) {
  return share::read_process_start_time("/proc", pid, *start_time) == 0;
}

uint64_t read_pid_namespace() {
  uint64_t pid_namespace = 0;
  return share::read_pid_namespace("/proc", share::kSelfPid, pid_namespace) == 0 ? pid_namespace
                                                                                 : 0;
}

bool Region::open_share_dir(const char* dir) {
  char limits_path[320];
  std::snprintf(limits_path, sizeof limits_path, "%s/limits", dir);
  // A regular file (never a symlink or FIFO) of the full size.
  UniqueFd fd;
  if (open_file(limits_path, O_RDONLY, FileSource::kUntrusted, fd, sizeof(LimitsPage)) != 0) {
    fd.reset();
  }
  return open_share(dir, fd.get());
}

bool Region::open_share(const char* dir, int limits_fd) {
  char limits_path[320];
  char usage_path[320];
  char marker_path[320];
  std::snprintf(limits_path, sizeof limits_path, "%s/limits", dir);
  std::snprintf(usage_path, sizeof usage_path, "%s/usage", dir);
  std::snprintf(marker_path, sizeof marker_path, "%s/%s", dir, share::kMpsMarkerFile);
  const LimitsPage* limits = map_limits_page(limits_fd);
  if (!limits || !share::valid_limits_page(*limits)) {
    TESSERA_ERROR(
        "%s is missing or not a valid limits page (version %u expected); every device is "
        "limited to 0 bytes: allocations fail with CUDA_ERROR_OUT_OF_MEMORY",
        limits_path, share::kLimitsVersion);
    if (limits) os::unmap(limits, sizeof(LimitsPage));
    return false;
  }
  UsagePage* usage = nullptr;
  if (const int error = share::open_or_create_usage_page(dir, usage); error != 0) {
    TESSERA_ERROR(
        "%s cannot be opened read-write or is not a valid usage page (errno %d); every device is "
        "limited to 0 bytes: allocations fail with CUDA_ERROR_OUT_OF_MEMORY",
        usage_path, error);
    os::unmap(limits, sizeof(LimitsPage));
    return false;
  }
  pid_namespace_ = read_pid_namespace();
  std::snprintf(dir_, sizeof dir_, "%s", dir);
  mps_ = is_regular_file(marker_path);
  limits_ = limits;
  usage_ = usage;
  return true;
}

bool Region::open_standalone(const Options& options, const DeviceId* devices, int count) {
  const size_t size = sizeof(LimitsPage) + sizeof(UsagePage);
  void* memory = os::map_shared_anonymous(size);
  if (!memory) return false;
  auto* limits = static_cast<LimitsPage*>(memory);
  auto* usage = reinterpret_cast<UsagePage*>(static_cast<char*>(memory) + sizeof(LimitsPage));
  share::init_limits_page(*limits);
  share::init_usage_page(*usage);
  if (count > static_cast<int>(share::kMaxDevices)) count = share::kMaxDevices;
  for (int i = 0; i < count; ++i) {
    share::DeviceLimits& device = limits->devices[i];
    std::memcpy(device.uuid, devices[i].uuid, share::kUuidBytes);
    device.uuid[share::kUuidBytes - 1] = '\0';
    device.memory_limit.store(memory_limit_for(options, devices[i].ordinal.value, devices[i].uuid),
                              std::memory_order_relaxed);
    device.cores_request.store(cores_limit_for(options, devices[i].ordinal.value, devices[i].uuid),
                               std::memory_order_relaxed);
    device.cores_limit.store(cores_burst_for(options, devices[i].ordinal.value, devices[i].uuid),
                             std::memory_order_relaxed);
    limits->requests[i].memory_request.store(share::kUnlimited, std::memory_order_relaxed);
    limits->requests[i].spare_percent.store(share::kSpareUnknown, std::memory_order_relaxed);
  }
  limits->priority.store(options.priority, std::memory_order_relaxed);
  limits->device_count.store(static_cast<uint32_t>(count), std::memory_order_release);
  limits->generation.fetch_add(1, std::memory_order_release);
  pid_namespace_ = read_pid_namespace();
  limits_ = limits;
  usage_ = usage;
  return true;
}

LimitsIndex Region::find_device(const char* uuid) const {
  if (!limits_ || !uuid) return kNotInShare;
  uint32_t count = limits_->device_count.load(std::memory_order_acquire);
  if (count > share::kMaxDevices) count = share::kMaxDevices;
  for (uint32_t i = 0; i < count; ++i) {
    if (share::same_device_uuid(limits_->devices[i].uuid, uuid)) {
      return LimitsIndex{static_cast<int>(i)};
    }
  }
  return kNotInShare;
}

uint64_t Region::limit(LimitsIndex device) const {
  const int index = device.value;
  if (!limits_ || index < 0 || index >= static_cast<int>(share::kMaxDevices)) return 0;
  return limits_->devices[index].memory_limit.load(std::memory_order_acquire);
}

uint64_t Region::context_charge(LimitsIndex device) const {
  const int index = device.value;
  if (!limits_ || index < 0 || index >= static_cast<int>(share::kMaxDevices)) {
    return kDefaultContextCharge;
  }
  const uint64_t measured =
      limits_->measured[index].context_overhead.load(std::memory_order_acquire);
  if (measured == 0) return kDefaultContextCharge;
  // Whole MiB (what ProcessSlot::contexts can state), rounded up: never under-charged.
  if (measured > ~0ull - share::kContextChargeUnit) return ~0ull;
  return (measured + share::kContextChargeUnit - 1) / share::kContextChargeUnit *
         share::kContextChargeUnit;
}

uint64_t Region::usage(LimitsIndex device) const {
  const int index = device.value;
  if (!usage_ || index < 0 || index >= static_cast<int>(share::kMaxDevices)) return 0;
  // share::share_usage, plus what the slots' contexts are under-charged at the current cost: a
  // process brings its own contexts to a higher cost only at its next reservation, and until then
  // the others must not hand out that memory (it is in use).
  const uint64_t target = context_charge(device);
  uint32_t high = usage_->slot_high_water.load(std::memory_order_acquire);
  if (high > share::kMaxSlots) high = share::kMaxSlots;
  uint64_t sum = 0;
  auto add = [&sum](uint64_t bytes) { sum = sum + bytes < sum ? ~0ull : sum + bytes; };
  for (uint32_t i = 0; i < high; ++i) {
    const ProcessSlot& slot = usage_->slots[i];
    add(slot.bytes[index].load(std::memory_order_seq_cst));
    const uint32_t contexts = slot.contexts.load(std::memory_order_relaxed);
    const uint32_t count = share::contexts_count(contexts);
    if (count == 0 || count == share::kContextsUnmeasurable ||
        share::contexts_device(contexts) != static_cast<uint32_t>(index)) {
      continue;
    }
    const uint64_t charged = share::contexts_charge(contexts);
    if (target > charged) add((target - charged) * count);
  }
  return sum;
}

uint64_t Region::own_usage(LimitsIndex device) const {
  const int index = device.value;
  ProcessSlot* mine = slot_.load(std::memory_order_acquire);
  if (!mine || index < 0 || index >= static_cast<int>(share::kMaxDevices)) return 0;
  return mine->bytes[index].load(std::memory_order_relaxed);
}

ProcessSlot* Region::slot() {
  ProcessSlot* mine = slot_.load(std::memory_order_acquire);
  return mine ? mine : claim_slot();
}

ProcessSlot* Region::claim_slot() {
  if (!usage_) return nullptr;
  // One claimer per process; others wait for it (a process-local flag: it dies with the process).
  claim_lock_.lock();
  ProcessSlot* mine = slot_.load(std::memory_order_acquire);
  if (!mine) {
    // The owner word as the agent computes it for this process (share::read_process_identity);
    // without a readable /proc, the pid and namespace known here and no start time.
    share::ProcessIdentity identity;
    if (share::read_process_identity("/proc", share::kSelfPid, identity) != 0) {
      identity.pid = static_cast<uint32_t>(os::process_id());
      identity.pid_namespace = pid_namespace_;
      identity.start_time = 0;
    }
    const uint32_t pid = identity.pid;
    const uint64_t start_time = identity.start_time;
    const uint64_t owner = identity.owner();
    owner_.store(owner, std::memory_order_relaxed);
    for (int attempt = 0; attempt < 2 && !mine; ++attempt) {
      for (uint32_t i = 0; i < share::kMaxSlots; ++i) {
        ProcessSlot& candidate = usage_->slots[i];
        uint64_t expected = 0;
        if (candidate.owner.load(std::memory_order_relaxed) != 0 ||
            !candidate.owner.compare_exchange_strong(expected, owner, std::memory_order_seq_cst)) {
          continue;
        }
        // Raise the high-water mark before any byte is added to the slot, so every reader that
        // could miss the slot also precedes its first reservation.
        uint32_t high = usage_->slot_high_water.load(std::memory_order_seq_cst);
        while (high < i + 1 && !usage_->slot_high_water.compare_exchange_weak(
                                   high, i + 1, std::memory_order_seq_cst)) {
        }
        for (auto& bytes : candidate.bytes) bytes.store(0, std::memory_order_seq_cst);
        candidate.launches.store(0, std::memory_order_relaxed);
        candidate.throttled_ns.store(0, std::memory_order_relaxed);
        candidate.gpu_busy_ns.store(0, std::memory_order_relaxed);
        candidate.allocations_denied.store(0, std::memory_order_relaxed);
        candidate.contexts.store(0, std::memory_order_relaxed);
        candidate.pid.store(pid, std::memory_order_relaxed);
        candidate.start_time.store(start_time, std::memory_order_relaxed);
        candidate.generation.fetch_add(1, std::memory_order_release);
        mine = &candidate;
        break;
      }
      if (!mine && attempt == 0) reclaim_dead();
    }
    if (!mine) {
      TESSERA_ERROR("all %u process slots of the share are taken; allocations fail",
                    share::kMaxSlots);
    }
    slot_.store(mine, std::memory_order_release);
  }
  claim_lock_.unlock();
  return mine;
}

bool Region::reserve(LimitsIndex device, uint64_t bytes) {
  const int index = device.value;
  if (!usage_ || index < 0 || index >= static_cast<int>(share::kMaxDevices)) return false;
  ProcessSlot* mine = slot();
  if (!mine) return false;
  const uint64_t cap = limit(device);
  if (cap == share::kUnlimited) {
    mine->bytes[index].fetch_add(bytes, std::memory_order_seq_cst);
    return true;
  }
  if (bytes > cap) return false;
  bool reclaimed = false;
  for (int attempt = 0; attempt < kReserveAttempts; ++attempt) {
    mine->bytes[index].fetch_add(bytes, std::memory_order_seq_cst);
    const uint64_t total = usage(device);
    if (total <= cap) return true;
    mine->bytes[index].fetch_sub(bytes, std::memory_order_seq_cst);
    if (!reclaimed) {
      reclaimed = true;
      if (reclaim_dead() > 0) continue;
    }
    // Did the total without us move while we looked? If not, nobody else is in flight and the
    // failure is genuine; if it did, a racing reservation may have backed off: try again.
    const uint64_t others = usage(device);
    if (others == total - bytes) return false;
    os::yield();
  }
  return false;
}

void Region::charge(LimitsIndex device, uint64_t bytes) {
  const int index = device.value;
  if (!usage_ || index < 0 || index >= static_cast<int>(share::kMaxDevices)) return;
  if (ProcessSlot* mine = slot()) mine->bytes[index].fetch_add(bytes, std::memory_order_seq_cst);
}

uint64_t Region::release(LimitsIndex device, uint64_t bytes) {
  const int index = device.value;
  if (index < 0 || index >= static_cast<int>(share::kMaxDevices)) return 0;
  ProcessSlot* mine = slot_.load(std::memory_order_acquire);
  if (!mine) return 0;
  uint64_t held = mine->bytes[index].load(std::memory_order_relaxed);
  uint64_t next = 0;
  do {
    next = held > bytes ? held - bytes : 0;  // never wraps, even after a bookkeeping error
  } while (!mine->bytes[index].compare_exchange_weak(held, next, std::memory_order_seq_cst));
  return held - next;
}

bool Region::owner_alive(uint64_t owner) const {
  const uint32_t pid = share::owner_pid(owner);
  uint64_t start_time = 0;
  if (!read_process_start_time(static_cast<int>(pid), &start_time)) return false;
  return share::make_owner(pid, pid_namespace_, start_time) == owner;
}

int Region::reclaim_dead() {
  if (!usage_) return 0;
  const uint64_t mine = owner_.load(std::memory_order_relaxed);
  const uint64_t my_namespace =
      share::owner_namespace_hash(share::make_owner(1, pid_namespace_, 0));
  uint32_t high = usage_->slot_high_water.load(std::memory_order_acquire);
  if (high > share::kMaxSlots) high = share::kMaxSlots;
  int reclaimed = 0;
  for (uint32_t i = 0; i < high; ++i) {
    ProcessSlot& candidate = usage_->slots[i];
    uint64_t owner = candidate.owner.load(std::memory_order_acquire);
    const uint64_t base = owner & ~share::kOwnerReclaiming;
    if (owner == 0 || base == mine) continue;
    // A process of another pid namespace cannot be checked from here: never touch its slot.
    if (share::owner_namespace_hash(base) != my_namespace) continue;
    if (owner_alive(base)) continue;
    if (share::reclaim_slot(candidate, owner, mine)) ++reclaimed;
  }
  if (reclaimed > 0) TESSERA_INFO("reclaimed the slots of %d dead processes", reclaimed);
  return reclaimed;
}

void Region::maybe_reclaim() {
  const int64_t now = monotonic_ns();
  int64_t last = last_reclaim_ns_.load(std::memory_order_relaxed);
  if (now - last < 1000000000) return;
  if (!last_reclaim_ns_.compare_exchange_strong(last, now, std::memory_order_relaxed)) return;
  reclaim_dead();
}

void Region::forget_slot_after_fork() {
  slot_.store(nullptr, std::memory_order_relaxed);
  claim_lock_.reset_after_fork();
  owner_.store(0, std::memory_order_relaxed);
}

void Region::release_slot() {
  ProcessSlot* mine = slot_.exchange(nullptr, std::memory_order_acq_rel);
  if (!mine) return;
  for (auto& bytes : mine->bytes) bytes.store(0, std::memory_order_seq_cst);
  mine->contexts.store(0, std::memory_order_relaxed);
  mine->pid.store(0, std::memory_order_relaxed);
  mine->owner.store(0, std::memory_order_seq_cst);
}

}  // namespace tessera::vgpu
