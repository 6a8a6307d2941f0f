// The share region: the contract between the node agent and libvgpu (one definition, included by
// both). A share is a directory with two files:
//
//   limits  written by the agent, mapped read-only by every process of the share. Per device (by
//           UUID): memory limit and cores limit. Each field is an independent atomic word, so a
//           reader never needs a lock or a retry loop; `generation` is bumped by the agent after
//           any change so readers know to re-resolve UUIDs.
//   usage   written by the share's processes. One slot per process, claimed by CAS on `owner`
//           (pid, pid namespace and start time packed in one word). Each slot holds the bytes that
//           process has reserved per device (device index = index in the limits page). The share's
//           usage of a device is the sum over slots: a process changes only its own slot, with one
//           atomic operation per reservation, so a process killed at any instruction leaves a
//           consistent page, and reclaiming it is "clear its slot". No lock exists that a killed
//           process could leave held.
//
// Layout rules: fixed-width types only, explicit padding, static_asserts on every offset a reader
// in another language or version relies on. Bump the version on any layout change.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace tessera::share {

inline constexpr uint32_t kLimitsMagic = 0x4d494c54;  // "TLIM" little-endian
inline constexpr uint32_t kUsageMagic = 0x47535554;   // "TUSG" little-endian
inline constexpr uint32_t kVersion = 1;
inline constexpr uint32_t kMaxDevices = 16;
inline constexpr uint32_t kMaxSlots = 512;
inline constexpr uint32_t kUuidBytes = 48;  // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" + NUL
inline constexpr uint64_t kUnlimited = ~0ull;

static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<uint64_t>) == 8);

// ---- limits (agent writes, shim reads) ---------------------------------------------------------

struct DeviceLimits {
  char uuid[kUuidBytes];               // NUL-terminated; empty = unused entry
  std::atomic<uint64_t> memory_limit;  // bytes; kUnlimited = no limit
  std::atomic<uint32_t> cores_limit;   // percent of SMs, 0..100 (100 = no limit)
  uint32_t reserved0;
};
static_assert(sizeof(DeviceLimits) == 64);
static_assert(offsetof(DeviceLimits, memory_limit) == 48);
static_assert(offsetof(DeviceLimits, cores_limit) == 56);

struct LimitsPage {
  uint32_t magic;        // kLimitsMagic
  uint32_t version;      // kVersion
  uint32_t struct_size;  // sizeof(LimitsPage)
  std::atomic<uint32_t> device_count;
  std::atomic<uint64_t> generation;  // bumped by the writer after every change
  uint8_t reserved0[40];
  DeviceLimits devices[kMaxDevices];
};
static_assert(offsetof(LimitsPage, device_count) == 12);
static_assert(offsetof(LimitsPage, generation) == 16);
static_assert(offsetof(LimitsPage, devices) == 64);
static_assert(sizeof(LimitsPage) == 64 + 64 * kMaxDevices);

// ---- usage (the share's processes write, the agent reads as untrusted input) -------------------

// owner word: 0 = free; else pid (bits 0-21) | pid-namespace hash (22-41) | start-time hash
// (42-62); bit 63 (kOwnerReclaiming) set while another process clears the slot of a dead owner.
struct ProcessSlot {
  std::atomic<uint64_t> owner;
  std::atomic<uint64_t> generation;  // bumped on every claim, so readers can see reuse
  std::atomic<uint64_t> start_time;  // /proc/<pid>/stat field 22 (clock ticks since boot)
  std::atomic<uint32_t> pid;         // the pid in the owner's namespace, for readers
  uint32_t reserved0;
  std::atomic<uint64_t> bytes[kMaxDevices];  // reserved by this process, per limits-page device
  uint8_t reserved1[32];
};
static_assert(sizeof(ProcessSlot) == 192);
static_assert(offsetof(ProcessSlot, bytes) == 32);

struct UsagePage {
  uint32_t magic;                         // kUsageMagic
  uint32_t version;                       // kVersion
  uint32_t struct_size;                   // sizeof(UsagePage)
  uint32_t max_slots;                     // kMaxSlots
  std::atomic<uint32_t> slot_high_water;  // slots [0, high water) have ever been claimed
  uint8_t reserved0[44];
  ProcessSlot slots[kMaxSlots];
};
static_assert(offsetof(UsagePage, slot_high_water) == 16);
static_assert(offsetof(UsagePage, slots) == 64);
static_assert(sizeof(UsagePage) == 64 + 192 * kMaxSlots);

// ---- helpers shared by both sides
// ----------------------------------------------------------------

inline constexpr uint64_t make_owner(uint32_t pid, uint64_t pid_namespace, uint64_t start_time) {
  const uint64_t ns = (pid_namespace ^ (pid_namespace >> 20) ^ (pid_namespace >> 40)) & 0xfffff;
  const uint64_t start = (start_time ^ (start_time >> 21) ^ (start_time >> 42)) & 0x1fffff;
  return (start << 42) | (ns << 22) | (pid & 0x3fffff);
}
inline constexpr uint64_t kOwnerReclaiming = 1ull << 63;
inline constexpr uint32_t owner_pid(uint64_t owner) {
  return owner & 0x3fffff;
}
inline constexpr uint64_t owner_namespace_hash(uint64_t owner) {
  return (owner >> 22) & 0xfffff;
}
static_assert(owner_pid(make_owner(4194303, 7, 9)) == 4194303);
static_assert(make_owner(1, 0, 0) != 0);
static_assert((make_owner(4194303, ~0ull, ~0ull) & kOwnerReclaiming) == 0);

// Initialises a zero-filled limits page (the writer then fills devices and bumps generation).
inline void init_limits_page(LimitsPage& page) {
  page.magic = kLimitsMagic;
  page.version = kVersion;
  page.struct_size = sizeof(LimitsPage);
  page.device_count.store(0, std::memory_order_relaxed);
  page.generation.store(1, std::memory_order_release);
}

inline void init_usage_page(UsagePage& page) {
  page.magic = kUsageMagic;
  page.version = kVersion;
  page.struct_size = sizeof(UsagePage);
  page.max_slots = kMaxSlots;
  page.slot_high_water.store(0, std::memory_order_release);
}

inline bool valid_limits_page(const LimitsPage& page) {
  return page.magic == kLimitsMagic && page.version == kVersion &&
         page.struct_size == sizeof(LimitsPage) &&
         page.device_count.load(std::memory_order_acquire) <= kMaxDevices;
}

inline bool valid_usage_page(const UsagePage& page) {
  return page.magic == kUsageMagic && page.version == kVersion &&
         page.struct_size == sizeof(UsagePage) && page.max_slots == kMaxSlots;
}

// Bytes the share holds on limits-page device `device`: the sum over slots. Saturates instead of
// wrapping (the page is untrusted input for the agent).
inline uint64_t share_usage(const UsagePage& page, uint32_t device) {
  uint32_t high = page.slot_high_water.load(std::memory_order_acquire);
  if (high > kMaxSlots) high = kMaxSlots;
  uint64_t sum = 0;
  for (uint32_t i = 0; i < high; ++i) {
    const uint64_t bytes = page.slots[i].bytes[device].load(std::memory_order_seq_cst);
    sum = sum + bytes < sum ? ~0ull : sum + bytes;
  }
  return sum;
}

}  // namespace tessera::share
