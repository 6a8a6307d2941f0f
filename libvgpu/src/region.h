// The process's view of its share (tessera/share_region.h): opening it (share directory or a
// private standalone region), per-device limits and usage, and reservations against the limit.
//
// Reservation: add the bytes to this process's own slot, then sum all slots; if the sum exceeds
// the limit, take them back and fail. Every slot update is one atomic operation on the process's
// own slot, so the share never exceeds a limit (the last adder in the sequentially consistent
// order sees every other add), and a process killed at any point leaves nothing that a reclaim
// (clear its slot) cannot undo exactly. Racing allocators close to the limit may both back off;
// reserve() retries while it sees the total move.
#pragma once

#include <atomic>
#include <cstdint>

#include "index_spaces.h"
#include "spin_lock.h"
#include "tessera/share_region.h"
#include "tessera/vgpu/options.h"

namespace tessera::vgpu {

// The charge per context inside a share while the agent has not measured it (LimitsPage::Measured
// ::context_overhead 0): the table's TESSERA_CONTEXT_OVERHEAD default.
inline constexpr uint64_t kDefaultContextCharge = 500ull << 20;

struct DeviceId {
  CudaOrdinal ordinal;
  char uuid[share::kUuidBytes];
};

class Region {
 public:
  // Maps <dir>/limits read-only and <dir>/usage read-write (creating usage if missing, through
  // share::open_or_create_usage_page). False if the share cannot be used (missing or invalid
  // limits, unusable usage file).
  bool open_share_dir(const char* dir);
  // The same over a limits file the caller opened (and checked) already: `limits_fd` is mapped,
  // never the path again, so what was checked is what is used. The fd stays the caller's.
  bool open_share(const char* dir, int limits_fd);
  // A private region whose limits come from the environment options: anonymous MAP_SHARED memory
  // of this process. The shim opens it lazily, when a call first needs a device's limit
  // (typically the first allocation), so only children forked after that share it, and each takes
  // its own slot (forget_slot_after_fork); a child forked earlier, or any process started by exec,
  // opens a region of its own.
  bool open_standalone(const Options& options, const DeviceId* devices, int count);
  bool is_open() const { return limits_ != nullptr; }

  // Limits-page index of the device with this UUID, or -1.
  LimitsIndex find_device(const char* uuid) const;
  uint64_t generation() const { return limits_->generation.load(std::memory_order_acquire); }
  uint64_t limit(LimitsIndex index) const;
  // What the share holds on device `index`: the sum over its slots, plus what their contexts are
  // under-charged at the current context cost (a slot states its contexts and their charge in
  // ProcessSlot::contexts; its process charges a rise at its next reservation only).
  uint64_t usage(LimitsIndex index) const;
  // The charge per context on device `index` that the limits page sets: the agent's measured cost
  // (rounded up to whole MiB), or kDefaultContextCharge when it has not measured one.
  uint64_t context_charge(LimitsIndex index) const;
  uint64_t own_usage(LimitsIndex index) const;

  // Reserves `bytes` on device `index` for this process; false if that would exceed the limit
  // (or no slot is free, or the index is invalid).
  bool reserve(LimitsIndex index, uint64_t bytes);
  // Adds bytes without a limit check (for memory the driver already handed out).
  void charge(LimitsIndex index, uint64_t bytes);
  // Takes back up to `bytes` from this process's slot; returns how many it took (never more than
  // the slot holds on that device).
  uint64_t release(LimitsIndex index, uint64_t bytes);

  // Clears the slots of dead processes of this pid namespace; returns how many.
  int reclaim_dead();
  // reclaim_dead() at most once per second, for the memory queries (cuMemGetInfo, NVML), which
  // should not show a dead process's bytes as used. Not on the allocation path: a reservation
  // reclaims only when it is refused (reserve), so a dead slot never costs a live process memory
  // and an allocation under the limit reads no clock.
  void maybe_reclaim();

  // In a forked child: the parent's slot is not ours.
  void forget_slot_after_fork();
  // Gives the slot back (for a process that knows it holds no device memory any more; the shim
  // leaves its slot to be reclaimed once it is gone).
  void release_slot();

  // This process's slot (claimed on first use; null when none is free), its owner word, and
  // whether the process an owner word names is still alive (for the compute meter's election).
  share::ProcessSlot* own_slot() { return slot(); }
  // The slot if this process claimed one already (never claims).
  share::ProcessSlot* claimed_slot() const { return slot_.load(std::memory_order_acquire); }
  uint64_t owner() const { return owner_.load(std::memory_order_relaxed); }
  bool owner_alive(uint64_t owner) const;

  const share::LimitsPage* limits_page() const { return limits_; }
  // The share's directory ("" for a standalone region) and whether the agent marked it as an MPS
  // share (<dir>/mps, share::kMpsMarkerFile).
  const char* dir() const { return dir_; }
  bool is_mps() const { return mps_; }
  share::UsagePage* usage_page() const { return usage_; }

 private:
  share::ProcessSlot* slot();
  share::ProcessSlot* claim_slot();

  const share::LimitsPage* limits_ = nullptr;
  share::UsagePage* usage_ = nullptr;
  std::atomic<share::ProcessSlot*> slot_{nullptr};
  SpinLock claim_lock_{LockRank::kSlotClaim};
  std::atomic<uint64_t> owner_{0};
  uint64_t pid_namespace_ = 0;
  char dir_[256] = {};
  bool mps_ = false;
  std::atomic<int64_t> last_reclaim_ns_{0};
};

// /proc helpers over share::read_process_start_time / read_pid_namespace (exposed for tests).
// read_process_start_time is false for a process that does not exist or is a zombie.
bool read_process_start_time(int pid, uint64_t* start_time);
uint64_t read_pid_namespace();

}  // namespace tessera::vgpu
