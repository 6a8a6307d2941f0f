// The share region: the contract between the node agent and libvgpu (one definition, included by
// both). A share is a directory with two files:
//
//   limits  written by the agent, mapped read-only by every process of the share. Per device (by
//           UUID): the share's requests (what it is guaranteed) and limits (what it may reach),
//           for memory and for cores (docs/resource-model.md). Each field is an independent atomic
//           word, so a reader never needs a lock or a retry loop; `generation` is bumped by the
//           agent after any change so readers know to re-resolve UUIDs.
//   usage   written by the share's processes. One slot per process, claimed by CAS on `owner`
//           (pid, pid namespace and start time packed in one word). Each slot holds the bytes that
//           process has reserved per device (device index = index in the limits page). The share's
//           usage of a device is the sum over slots: a process changes only its own slot, with one
//           atomic operation per reservation, so a process killed at any instruction leaves a
//           consistent page, and reclaiming it is "clear its slot". No lock exists that a killed
//           process could leave held.
//
// Beside them, on devices NVML cannot measure (MIG), `pending-<uuid>`: when the share's processes'
// launches were pending there, for the agent's split (tessera/pending_spans.h, `split_mask`).
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
// Each page has its version. Limits: 2 compute (cores, burst, priority, meter); 3 requests and
// limits (cores_request, cores_limit, memory_request). Usage: 2 compute (its reclaim request
// since, in bytes that were reserved 0: no bump).
inline constexpr uint32_t kLimitsVersion = 3;
inline constexpr uint32_t kUsageVersion = 2;
inline constexpr uint32_t kMaxDevices = 16;
inline constexpr uint32_t kMaxSlots = 512;
inline constexpr uint32_t kUuidBytes = 48;  // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" + NUL
inline constexpr uint64_t kUnlimited = ~0ull;

// The cores a share may reach on a device: its limit, never below its request (a page that leaves
// the limit 0 or under the request does not burst).
inline constexpr uint32_t effective_cores_limit(uint32_t request, uint32_t limit) {
  return limit > request ? limit : request;
}
// A share whose request is 0 and whose limit is not: it runs only in time others leave idle.
inline constexpr bool best_effort_cores(uint32_t request, uint32_t limit) {
  return request == 0 && limit > 0;
}

static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<uint64_t>) == 8);

// ---- limits (agent writes, shim reads) ---------------------------------------------------------

struct DeviceLimits {
  char uuid[kUuidBytes];               // NUL-terminated; empty = unused entry
  std::atomic<uint64_t> memory_limit;  // bytes; the wall (kUnlimited = none); memory_request in
                                       // LimitsPage::requests is what is guaranteed below it
  // Percent of the GPU's time the share is guaranteed, 0..100 (0 = best-effort: only time the
  // shares within their requests leave idle; 100 = the whole GPU, nothing limited).
  std::atomic<uint32_t> cores_request;
  // Percent the share may reach, 0..100. Below cores_request (0 included) it means cores_request:
  // the share does not burst. Request and limit both 0: no GPU time at all (what a limit that
  // failed closed leaves).
  std::atomic<uint32_t> cores_limit;
};
static_assert(sizeof(DeviceLimits) == 64);
static_assert(offsetof(DeviceLimits, memory_limit) == 48);
static_assert(offsetof(DeviceLimits, cores_request) == 56);
static_assert(offsetof(DeviceLimits, cores_limit) == 60);

struct LimitsPage {
  uint32_t magic;        // kLimitsMagic
  uint32_t version;      // kLimitsVersion
  uint32_t struct_size;  // sizeof(LimitsPage)
  std::atomic<uint32_t> device_count;
  std::atomic<uint64_t> generation;  // bumped by the writer after every change
  std::atomic<uint32_t> priority;    // kPriorityNormal / kPriorityHigh / kPriorityLow
  // kMeasureNvml: the shim's meter reads NVML per-process utilisation for the share's pids (one
  // pid namespace with NVML: a single machine). kMeasureAgent: the node agent, which can map
  // container pids to host pids, publishes the share's GPU time in `measured` below instead.
  std::atomic<uint32_t> measure_source;
  // Priority is owned by whoever measures every share of a device (the agent, when
  // measure_source == kMeasureAgent): bit d set = a share of higher priority is busy on device d,
  // so this share's gate yields it. No file written by one share is read by another.
  std::atomic<uint64_t> yield_mask;
  // Written by the agent when measure_source == kMeasureAgent: bit d set = `measured[d]` is the
  // share's equal part of the time the processes of every share on device d (a device NVML cannot
  // measure: a MIG instance) were pending there, split from their pending files
  // (tessera/pending_spans.h); the shim charges that instead of what its own launches spanned.
  // Was reserved (always 0) before, so no version bump: an older agent leaves the shim on its
  // spans.
  std::atomic<uint64_t> split_mask;
  // Written by the agent when measure_source == kMeasureAgent: bit d set = time the launches on
  // device d (a MIG instance) and publish when they were pending, though this share has no compute
  // setting there: a limited share is beside it on the device, and the split can give that share
  // its part only if every process pending there says so. The agent bumps `generation` when it
  // changes. Was reserved (always 0) before, so no version bump.
  std::atomic<uint64_t> time_launches_mask;
  uint8_t reserved0[8];
  DeviceLimits devices[kMaxDevices];
  // Written by the agent when measure_source == kMeasureAgent (cumulative, monotonic clock).
  struct Measured {
    std::atomic<uint64_t> sampled_at_ns;   // CLOCK_MONOTONIC of the last update (0 = none yet)
    std::atomic<uint64_t> share_busy_ns;   // GPU time the share's processes held the device
    std::atomic<uint64_t> others_busy_ns;  // GPU time every other process held it
    // Device memory one CUDA context costs on this GPU, as the agent measured it (NVML's figure
    // for a process minus what its slot reserved). 0 = not measured yet: the shim charges its
    // built-in default. Inside a share this, never the environment, sets the charge.
    std::atomic<uint64_t> context_overhead;
  } measured[kMaxDevices];
  // What the share is guaranteed per device (since version 3). Bytes above memory_request and up
  // to memory_limit are borrowed: the agent may evict a borrowing process when a share within its
  // request needs the memory (docs/resource-model.md, Reclaim).
  struct Requests {
    std::atomic<uint64_t> memory_request;  // bytes; kUnlimited = the whole limit is guaranteed
    // Written by the agent when measure_source == kMeasureAgent: percent of the device's time this
    // share may use above its cores request now (what the active shares' requests leave, split
    // among those that want more); kSpareUnknown until the agent has measured the device.
    std::atomic<uint32_t> spare_percent;
    uint8_t reserved[20];
  } requests[kMaxDevices];
};
inline constexpr uint32_t kPriorityNormal = 0;
inline constexpr uint32_t kPriorityHigh = 1;
inline constexpr uint32_t kPriorityLow = 2;
inline constexpr uint32_t kMeasureNvml = 0;
inline constexpr uint32_t kMeasureAgent = 1;
// Whether the share limits its GPU time on limits-page device `device`: a cores request below 100
// or a priority (the shim meters it; the agent's split asks the others on the device to say when
// they were pending).
inline bool device_limited(const LimitsPage& page, uint32_t device) {
  return page.priority.load(std::memory_order_acquire) != kPriorityNormal ||
         page.devices[device].cores_request.load(std::memory_order_acquire) < 100;
}
static_assert(offsetof(LimitsPage, device_count) == 12);
static_assert(offsetof(LimitsPage, generation) == 16);
static_assert(offsetof(LimitsPage, priority) == 24);
static_assert(offsetof(LimitsPage, measure_source) == 28);
static_assert(offsetof(LimitsPage, yield_mask) == 32);
static_assert(offsetof(LimitsPage, split_mask) == 40);
static_assert(offsetof(LimitsPage, time_launches_mask) == 48);
static_assert(offsetof(LimitsPage, devices) == 64);
static_assert(offsetof(LimitsPage, measured) == 64 + 64 * kMaxDevices);
static_assert(offsetof(LimitsPage, requests) == 64 + 96 * kMaxDevices);
static_assert(offsetof(LimitsPage::Requests, spare_percent) == 8);
inline constexpr uint32_t kSpareUnknown = ~0u;
static_assert(sizeof(LimitsPage) == 64 + 64 * kMaxDevices + 32 * kMaxDevices + 32 * kMaxDevices);
static_assert(offsetof(LimitsPage::Measured, context_overhead) == 24);

// ---- usage (the share's processes write, the agent reads as untrusted input) -------------------

// owner word: 0 = free; else pid (bits 0-21) | pid-namespace hash (22-41) | start-time hash
// (42-62); bit 63 (kOwnerReclaiming) set while another process clears the slot of a dead owner.
struct ProcessSlot {
  std::atomic<uint64_t> owner;
  std::atomic<uint64_t> generation;  // bumped on every claim, so readers can see reuse
  std::atomic<uint64_t> start_time;  // /proc/<pid>/stat field 22 (clock ticks since boot)
  std::atomic<uint32_t> pid;         // the pid in the owner's namespace, for readers
  // The CUDA contexts this process is charged for in the share, for the agent's measurement of
  // the context cost (pack_contexts below). Was reserved (always 0) before, so no version bump: a
  // shim that does not say leaves 0, "no contexts", and the agent does not measure it.
  std::atomic<uint32_t> contexts;
  std::atomic<uint64_t> bytes[kMaxDevices];  // reserved by this process, per limits-page device
  std::atomic<uint64_t> launches;            // kernel and graph launches (published by the process)
  std::atomic<uint64_t> throttled_ns;  // wall time its launching threads waited at a closed gate
  std::atomic<uint64_t> gpu_busy_ns;   // GPU time measured for this pid (written by the meter)
  // Reservations the shim refused (over the limit). Was reserved (always 0) before, so no version
  // bump: a shim that does not count leaves it 0.
  std::atomic<uint64_t> allocations_denied;
};
static_assert(sizeof(ProcessSlot) == 192);
static_assert(offsetof(ProcessSlot, contexts) == 28);
static_assert(offsetof(ProcessSlot, bytes) == 32);
static_assert(offsetof(ProcessSlot, launches) == 160);
static_assert(offsetof(ProcessSlot, throttled_ns) == 168);
static_assert(offsetof(ProcessSlot, gpu_busy_ns) == 176);
static_assert(offsetof(ProcessSlot, allocations_denied) == 184);

// ProcessSlot::contexts: bits 0-3 the limits-page device of the process's contexts, bits 4-7 how
// many (0 = none; kContextsUnmeasurable = on several devices of the share, 15 or more, or a charge
// that is no whole MiB), bits 8-31 what the slot charges per context, in MiB. The slot's bytes on
// that device are then count x charge for the contexts plus what the process allocated.
inline constexpr uint32_t kContextsUnmeasurable = 15;
inline constexpr uint64_t kContextChargeUnit = 1ull << 20;
inline constexpr uint32_t pack_contexts(uint32_t device, uint32_t count, uint64_t charge_bytes) {
  if (count == 0) return 0;
  if (device >= kMaxDevices || count >= kContextsUnmeasurable ||
      charge_bytes % kContextChargeUnit != 0 || charge_bytes / kContextChargeUnit > 0xffffff)
    return kContextsUnmeasurable << 4;
  return static_cast<uint32_t>(charge_bytes / kContextChargeUnit) << 8 | count << 4 | device;
}
inline constexpr uint32_t contexts_device(uint32_t word) {
  return word & 0xf;
}
inline constexpr uint32_t contexts_count(uint32_t word) {
  return (word >> 4) & 0xf;
}
inline constexpr uint64_t contexts_charge(uint32_t word) {
  return static_cast<uint64_t>(word >> 8) * kContextChargeUnit;
}
static_assert(contexts_count(pack_contexts(3, 2, 520 * kContextChargeUnit)) == 2);
static_assert(contexts_device(pack_contexts(3, 2, 520 * kContextChargeUnit)) == 3);
static_assert(contexts_charge(pack_contexts(3, 2, 520 * kContextChargeUnit)) ==
              520 * kContextChargeUnit);
static_assert(contexts_count(pack_contexts(0, 1, 1000)) == kContextsUnmeasurable);

// Compute state of the share (docs/compute.md). Written by the share's meter (one leader process,
// elected by CAS on meter_owner and kept by meter_heartbeat_ns) and read by every launch.
struct ComputeDevice {
  std::atomic<int64_t> tokens_ns;        // the bucket: GPU time the share may still use
  std::atomic<uint64_t> reopen_at_ns;    // CLOCK_MONOTONIC when a closed gate is expected to open
  std::atomic<uint64_t> busy_ns;         // the share's measured GPU time, cumulative
  std::atomic<uint64_t> others_busy_ns;  // other processes' GPU time seen meanwhile, cumulative
  std::atomic<uint64_t> closed_ns;       // wall time the gate was closed, cumulative
  std::atomic<uint32_t> rate_percent;    // the refill rate in force (request, limit, idle or 0)
  std::atomic<uint32_t> flags;           // kComputeOthersActive | kComputeYielding
  std::atomic<uint64_t> others_seen_ns;  // when other processes were last seen busy
  std::atomic<uint64_t> last_tick_ns;    // the meter's last update of this device
};
static_assert(sizeof(ComputeDevice) == 64);
inline constexpr uint32_t kComputeOthersActive = 1;
inline constexpr uint32_t kComputeYielding = 2;

struct ComputeArea {
  // The launch fast path reads this one word: bit d set = device d's gate is closed.
  alignas(64) std::atomic<uint64_t> closed_mask;
  uint8_t pad0[56];
  std::atomic<uint64_t> meter_owner;         // owner word (as slots) of the leader; 0 = none
  std::atomic<uint64_t> meter_heartbeat_ns;  // CLOCK_MONOTONIC, refreshed every meter period
  std::atomic<uint64_t> meter_terms;         // bumped by every take-over
  uint8_t pad1[40];
  ComputeDevice devices[kMaxDevices];
};
static_assert(offsetof(ComputeArea, meter_owner) == 64);
static_assert(sizeof(ComputeArea) == 128 + 64 * kMaxDevices);

struct UsagePage {
  uint32_t magic;                         // kUsageMagic
  uint32_t version;                       // kUsageVersion
  uint32_t struct_size;                   // sizeof(UsagePage)
  uint32_t max_slots;                     // kMaxSlots
  std::atomic<uint32_t> slot_high_water;  // slots [0, high water) have ever been claimed
  // The reclaim request (docs/node-agent.md, "Reclaim"): a process of the share whose allocation
  // the driver refused although the share is within its memory request on that device publishes
  // it here while it waits, and withdraws it (reclaim_bytes 0, while reclaim_owner is still its
  // own) when it stops waiting. The agent reads it as untrusted input: it only says "look at this
  // GPU now"; whether anyone is evicted follows from the agent's own figures. These bytes were
  // reserved (always 0) before, so no version bump: an older shim never asks, an older agent never
  // looks.
  std::atomic<uint32_t> reclaim_device;  // the limits-page device of the refused allocation
  std::atomic<uint64_t> reclaim_bytes;   // what it asked for; 0 = no request
  std::atomic<uint64_t> reclaim_owner;   // owner word (make_owner) of the waiting process
  std::atomic<uint64_t> reclaim_at_ns;   // CLOCK_MONOTONIC when it began to wait
  uint8_t reserved0[16];
  ProcessSlot slots[kMaxSlots];
  ComputeArea compute;
};
static_assert(offsetof(UsagePage, slot_high_water) == 16);
static_assert(offsetof(UsagePage, reclaim_device) == 20);
static_assert(offsetof(UsagePage, reclaim_bytes) == 24);
static_assert(offsetof(UsagePage, reclaim_owner) == 32);
static_assert(offsetof(UsagePage, reclaim_at_ns) == 40);
static_assert(offsetof(UsagePage, reserved0) == 48);
static_assert(offsetof(UsagePage, slots) == 64);
static_assert(offsetof(UsagePage, compute) == 64 + 192 * kMaxSlots);
static_assert(sizeof(UsagePage) == 64 + 192 * kMaxSlots + 128 + 64 * kMaxDevices);

// ---- helpers shared by both sides
// ----------------------------------------------------------------

// Whether two device UUIDs (DeviceLimits::uuid, NVML's, the shim's rendering of cuDeviceGetUuid)
// name the same device: equal, or "GPU-<x>" and "MIG-<x>" with the same <x>. CUDA hands out a
// MIG device's UUID as 16 bytes like a GPU's (mig-facts.md section 3), so the prefix a reader
// prints them with can be the wrong one; the 16 bytes of a MIG device are never a GPU's.
inline constexpr bool same_device_uuid(const char* a, const char* b) {
  // Equal up to the terminator, looking at no more than `limit` characters.
  auto equal = [](const char* x, const char* y, uint32_t limit) {
    uint32_t i = 0;
    for (; i < limit && x[i] && x[i] == y[i]; ++i) {
    }
    return i == limit || x[i] == y[i];
  };
  auto prefixed = [](const char* u) {
    return (u[0] == 'G' && u[1] == 'P' && u[2] == 'U' && u[3] == '-') ||
           (u[0] == 'M' && u[1] == 'I' && u[2] == 'G' && u[3] == '-');
  };
  if (a == nullptr || b == nullptr) return false;
  if (equal(a, b, kUuidBytes)) return true;
  return prefixed(a) && prefixed(b) && a[4] != '\0' && equal(a + 4, b + 4, kUuidBytes - 4);
}
static_assert(same_device_uuid("MIG-1234", "GPU-1234") &&
              !same_device_uuid("MIG-1234", "GPU-1235"));
static_assert(!same_device_uuid("MIG-", "GPU-") && same_device_uuid("GPU-1", "GPU-1"));

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

// Clears `slot` if its owner word still reads `dead_owner` (a process known to be gone, or a dead
// reclaimer's marked word): the word is first set to `reclaimer | kOwnerReclaiming` (an owner word
// of the live process doing this, so no other reclaimer takes the slot meanwhile), then the bytes
// are zeroed and the slot freed. True when this call cleared it. `expected_owner` 0 takes a free
// slot that still holds bytes (the agent's repair of a scribbled page); the CAS from 0 keeps a
// process from claiming it meanwhile.
inline bool clear_slot(ProcessSlot& slot, uint64_t expected_owner, uint64_t reclaimer) {
  uint64_t expected = expected_owner;
  if (!slot.owner.compare_exchange_strong(expected, reclaimer | kOwnerReclaiming,
                                          std::memory_order_seq_cst)) {
    return false;
  }
  for (auto& bytes : slot.bytes) bytes.store(0, std::memory_order_seq_cst);
  slot.contexts.store(0, std::memory_order_relaxed);
  slot.pid.store(0, std::memory_order_relaxed);
  slot.owner.store(0, std::memory_order_seq_cst);
  return true;
}

// clear_slot of a slot whose owner `dead_owner` (never 0) is gone: the shim's reclaim of dead
// owners and the agent's process watcher.
inline bool reclaim_slot(ProcessSlot& slot, uint64_t dead_owner, uint64_t reclaimer) {
  return dead_owner != 0 && clear_slot(slot, dead_owner, reclaimer);
}

// Initialises a zero-filled limits page (the writer then fills devices and bumps generation).
inline void init_limits_page(LimitsPage& page) {
  page.magic = kLimitsMagic;
  page.version = kLimitsVersion;
  page.struct_size = sizeof(LimitsPage);
  page.device_count.store(0, std::memory_order_relaxed);
  page.generation.store(1, std::memory_order_release);
}

inline void init_usage_page(UsagePage& page) {
  page.magic = kUsageMagic;
  page.version = kUsageVersion;
  page.struct_size = sizeof(UsagePage);
  page.max_slots = kMaxSlots;
  page.slot_high_water.store(0, std::memory_order_release);
}

inline bool valid_limits_page(const LimitsPage& page) {
  return page.magic == kLimitsMagic && page.version == kLimitsVersion &&
         page.struct_size == sizeof(LimitsPage) &&
         page.device_count.load(std::memory_order_acquire) <= kMaxDevices;
}

inline bool valid_usage_page(const UsagePage& page) {
  return page.magic == kUsageMagic && page.version == kUsageVersion &&
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
