#include "region.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "log.h"

namespace tessera::vgpu {
namespace {

using share::LimitsPage;
using share::ProcessSlot;
using share::UsagePage;

constexpr int kReserveAttempts = 8;

int64_t monotonic_ns() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
  return static_cast<int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
}

// Reads a whole small file into `buffer` (NUL-terminated); returns the length or -1.
ssize_t read_small_file(const char* path, char* buffer, size_t capacity) {
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t length = 0;
  while (length + 1 < capacity) {
    const ssize_t n = read(fd, buffer + length, capacity - 1 - length);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    length += static_cast<size_t>(n);
  }
  close(fd);
  buffer[length] = '\0';
  return static_cast<ssize_t>(length);
}

off_t file_size(int fd) {
  const off_t size = lseek(fd, 0, SEEK_END);
  lseek(fd, 0, SEEK_SET);
  return size;
}

void* map_file(const char* path, int flags, int prot, size_t size) {
  const int fd = open(path, flags | O_CLOEXEC);
  if (fd < 0) return nullptr;
  void* page = nullptr;
  if (file_size(fd) >= static_cast<off_t>(size)) {
    page = mmap(nullptr, size, prot, MAP_SHARED, fd, 0);
    if (page == MAP_FAILED) page = nullptr;
  }
  close(fd);
  return page;
}

// Creates <dir>/usage if it does not exist: a fully initialised temporary file, then link(2),
// which (unlike rename) never replaces a usage file another process created meanwhile.
void create_usage_file(const char* dir, const char* usage_path) {
  char temporary[320];
  std::snprintf(temporary, sizeof temporary, "%s/.usage.%d.tmp", dir, static_cast<int>(getpid()));
  const int fd = open(temporary, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0660);
  if (fd < 0) return;
  bool ready = false;
  if (ftruncate(fd, sizeof(UsagePage)) == 0) {
    void* memory = mmap(nullptr, sizeof(UsagePage), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (memory != MAP_FAILED) {
      share::init_usage_page(*static_cast<UsagePage*>(memory));
      ready = msync(memory, sizeof(UsagePage), MS_SYNC) == 0;
      munmap(memory, sizeof(UsagePage));
    }
  }
  close(fd);
  if (ready && link(temporary, usage_path) != 0 && errno != EEXIST) {
    TESSERA_ERROR("cannot create %s (errno %d)", usage_path, errno);
  }
  unlink(temporary);
}

}  // namespace

bool read_process_start_time(int pid, uint64_t* start_time) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  char stat[1024];
  if (read_small_file(path, stat, sizeof stat) <= 0) return false;
  const char* p = std::strrchr(stat, ')');
  if (!p) return false;
  ++p;
  while (*p == ' ') ++p;
  // A zombie (killed, not yet reaped) holds no GPU memory any more: report it as gone.
  if (*p == 'Z' || *p == 'X' || *p == 'x') return false;
  // Fields after the command: 3 (state) ... 22 (starttime).
  for (int field = 3; field < 22; ++field) {
    while (*p == ' ') ++p;
    while (*p && *p != ' ') ++p;
    if (!*p) return false;
  }
  while (*p == ' ') ++p;
  uint64_t value = 0;
  bool digits = false;
  while (*p >= '0' && *p <= '9') {
    value = value * 10 + static_cast<uint64_t>(*p++ - '0');
    digits = true;
  }
  if (!digits) return false;
  *start_time = value;
  return true;
}

uint64_t read_pid_namespace() {
  char link_text[64] = {};
  const ssize_t n = readlink("/proc/self/ns/pid", link_text, sizeof link_text - 1);
  if (n <= 0) return 0;
  uint64_t value = 0;
  for (ssize_t i = 0; i < n; ++i) {
    if (link_text[i] >= '0' && link_text[i] <= '9') {
      value = value * 10 + static_cast<uint64_t>(link_text[i] - '0');
    }
  }
  return value;
}

bool Region::open_share_dir(const char* dir) {
  char limits_path[320];
  char usage_path[320];
  std::snprintf(limits_path, sizeof limits_path, "%s/limits", dir);
  std::snprintf(usage_path, sizeof usage_path, "%s/usage", dir);
  auto* limits = static_cast<const LimitsPage*>(
      map_file(limits_path, O_RDONLY, PROT_READ, sizeof(LimitsPage)));
  if (!limits || !share::valid_limits_page(*limits)) {
    TESSERA_ERROR(
        "%s is missing or not a valid limits page (version %u expected); every device is "
        "limited to 0 bytes: allocations fail with CUDA_ERROR_OUT_OF_MEMORY",
        limits_path, share::kVersion);
    if (limits) munmap(const_cast<LimitsPage*>(limits), sizeof(LimitsPage));
    return false;
  }
  auto* usage = static_cast<UsagePage*>(
      map_file(usage_path, O_RDWR, PROT_READ | PROT_WRITE, sizeof(UsagePage)));
  if (!usage && errno == ENOENT) {
    create_usage_file(dir, usage_path);
    usage = static_cast<UsagePage*>(
        map_file(usage_path, O_RDWR, PROT_READ | PROT_WRITE, sizeof(UsagePage)));
  }
  if (!usage || !share::valid_usage_page(*usage)) {
    TESSERA_ERROR(
        "%s cannot be opened read-write or is not a valid usage page; every device is limited "
        "to 0 bytes: allocations fail with CUDA_ERROR_OUT_OF_MEMORY",
        usage_path);
    if (usage) munmap(usage, sizeof(UsagePage));
    munmap(const_cast<LimitsPage*>(limits), sizeof(LimitsPage));
    return false;
  }
  pid_namespace_ = read_pid_namespace();
  limits_ = limits;
  usage_ = usage;
  return true;
}

bool Region::open_standalone(const Options& options, const DeviceId* devices, int count) {
  const size_t size = sizeof(LimitsPage) + sizeof(UsagePage);
  void* memory = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return false;
  auto* limits = static_cast<LimitsPage*>(memory);
  auto* usage = reinterpret_cast<UsagePage*>(static_cast<char*>(memory) + sizeof(LimitsPage));
  share::init_limits_page(*limits);
  share::init_usage_page(*usage);
  if (count > static_cast<int>(share::kMaxDevices)) count = share::kMaxDevices;
  for (int i = 0; i < count; ++i) {
    share::DeviceLimits& device = limits->devices[i];
    std::memcpy(device.uuid, devices[i].uuid, share::kUuidBytes);
    device.uuid[share::kUuidBytes - 1] = '\0';
    device.memory_limit.store(memory_limit_for(options, devices[i].ordinal, devices[i].uuid),
                              std::memory_order_relaxed);
    device.cores_limit.store(cores_limit_for(options, devices[i].ordinal, devices[i].uuid),
                             std::memory_order_relaxed);
    device.cores_burst.store(cores_burst_for(options, devices[i].ordinal, devices[i].uuid),
                             std::memory_order_relaxed);
  }
  limits->priority.store(options.priority, std::memory_order_relaxed);
  limits->device_count.store(static_cast<uint32_t>(count), std::memory_order_release);
  limits->generation.fetch_add(1, std::memory_order_release);
  pid_namespace_ = read_pid_namespace();
  limits_ = limits;
  usage_ = usage;
  return true;
}

int Region::find_device(const char* uuid) const {
  if (!limits_ || !uuid) return -1;
  uint32_t count = limits_->device_count.load(std::memory_order_acquire);
  if (count > share::kMaxDevices) count = share::kMaxDevices;
  for (uint32_t i = 0; i < count; ++i) {
    if (std::strncmp(limits_->devices[i].uuid, uuid, share::kUuidBytes) == 0) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

uint64_t Region::limit(int index) const {
  if (!limits_ || index < 0 || index >= static_cast<int>(share::kMaxDevices)) return 0;
  return limits_->devices[index].memory_limit.load(std::memory_order_acquire);
}

uint64_t Region::usage(int index) const {
  if (!usage_ || index < 0 || index >= static_cast<int>(share::kMaxDevices)) return 0;
  return share::share_usage(*usage_, static_cast<uint32_t>(index));
}

uint64_t Region::own_usage(int index) const {
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
  while (claiming_.exchange(true, std::memory_order_acquire)) sched_yield();
  ProcessSlot* mine = slot_.load(std::memory_order_acquire);
  if (!mine) {
    const int pid = static_cast<int>(getpid());
    uint64_t start_time = 0;
    read_process_start_time(pid, &start_time);
    const uint64_t owner =
        share::make_owner(static_cast<uint32_t>(pid), pid_namespace_, start_time);
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
        candidate.pid.store(static_cast<uint32_t>(pid), std::memory_order_relaxed);
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
  claiming_.store(false, std::memory_order_release);
  return mine;
}

bool Region::reserve(int index, uint64_t bytes) {
  if (!usage_ || index < 0 || index >= static_cast<int>(share::kMaxDevices)) return false;
  ProcessSlot* mine = slot();
  if (!mine) return false;
  const uint64_t cap = limit(index);
  if (cap == share::kUnlimited) {
    mine->bytes[index].fetch_add(bytes, std::memory_order_seq_cst);
    return true;
  }
  if (bytes > cap) return false;
  bool reclaimed = false;
  for (int attempt = 0; attempt < kReserveAttempts; ++attempt) {
    mine->bytes[index].fetch_add(bytes, std::memory_order_seq_cst);
    const uint64_t total = usage(index);
    if (total <= cap) return true;
    mine->bytes[index].fetch_sub(bytes, std::memory_order_seq_cst);
    if (!reclaimed) {
      reclaimed = true;
      if (reclaim_dead() > 0) continue;
    }
    // Did the total without us move while we looked? If not, nobody else is in flight and the
    // failure is genuine; if it did, a racing reservation may have backed off: try again.
    const uint64_t others = usage(index);
    if (others == total - bytes) return false;
    sched_yield();
  }
  return false;
}

void Region::charge(int index, uint64_t bytes) {
  if (!usage_ || index < 0 || index >= static_cast<int>(share::kMaxDevices)) return;
  if (ProcessSlot* mine = slot()) mine->bytes[index].fetch_add(bytes, std::memory_order_seq_cst);
}

void Region::release(int index, uint64_t bytes) {
  if (index < 0 || index >= static_cast<int>(share::kMaxDevices)) return;
  ProcessSlot* mine = slot_.load(std::memory_order_acquire);
  if (!mine) return;
  uint64_t held = mine->bytes[index].load(std::memory_order_relaxed);
  uint64_t next = 0;
  do {
    next = held > bytes ? held - bytes : 0;  // never wraps, even after a bookkeeping error
  } while (!mine->bytes[index].compare_exchange_weak(held, next, std::memory_order_seq_cst));
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
    if (!candidate.owner.compare_exchange_strong(owner, mine | share::kOwnerReclaiming,
                                                 std::memory_order_seq_cst)) {
      continue;
    }
    for (auto& bytes : candidate.bytes) bytes.store(0, std::memory_order_seq_cst);
    candidate.pid.store(0, std::memory_order_relaxed);
    candidate.owner.store(0, std::memory_order_seq_cst);
    ++reclaimed;
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
  claiming_.store(false, std::memory_order_relaxed);
  owner_.store(0, std::memory_order_relaxed);
}

void Region::release_slot() {
  ProcessSlot* mine = slot_.exchange(nullptr, std::memory_order_acq_rel);
  if (!mine) return;
  for (auto& bytes : mine->bytes) bytes.store(0, std::memory_order_seq_cst);
  mine->pid.store(0, std::memory_order_relaxed);
  mine->owner.store(0, std::memory_order_seq_cst);
}

}  // namespace tessera::vgpu
