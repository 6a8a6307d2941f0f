// The agent's writes to a share's usage page: reclaiming the slots of a process that exited (the
// process watcher) and repairing a page the out-of-band checks found scribbled (the checker). The
// page is tenant-writable (mode 0666: any process of the share may truncate it), so slots are
// written with atomics (compare-and-swap against what a read saw, so a live process's own update
// is never lost) through a writable mapping whose every access runs under the SIGBUS guard
// (fault_guard.h): a truncate racing the write makes it fail, never crash the agent.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/share_region.h"
#include "tessera/status.h"

namespace tessera::share_folder {

// Slot writes of a repair, each conditional on what the read saw.
struct SlotRepair {
  struct Clear {  // a slot whose owner is dead or no process of the share
    uint32_t index;
    uint64_t owner;  // cleared only while the slot still holds this owner (0: a free slot)
  };
  std::vector<Clear> clears;
  struct SetBytes {  // a slot whose figure NVML contradicts: NVML's figure written
    uint32_t index;
    uint64_t owner;
    uint32_t device;
    uint64_t expected;  // written only while the slot still holds this figure
    uint64_t value;
  };
  std::vector<SetBytes> sets;
  std::optional<uint32_t>
      high_water;  // slot_high_water raised to this, or lowered from > kMaxSlots
};

// Writes of a repair to the compute area (share::ComputeArea). Its cumulative counters are
// metrics the shim's meter only adds to; its gate (closed_mask, tokens_ns) decides launches. A
// repair never opens a gate nor gives a bucket credit: it puts back counters a tenant wound back or
// ran ahead of time, and closes the gates of a page whose compute area was lost, so a tenant
// cannot reopen its gate or wipe its debt by corrupting (or truncating) its page; the meter
// reopens a gate at its next tick once the share has earned GPU time.
struct ComputeRepair {
  enum class Counter : uint8_t { kBusy, kOthersBusy, kClosed };
  struct SetCounter {  // a counter that went back or outran time: its last sound value
    uint32_t device;
    Counter counter;
    uint64_t expected;  // written only while the counter still holds this figure
    uint64_t value;
  };
  std::vector<SetCounter> counters;
  // Devices whose gate is closed (closed_mask bits set) with a bucket of at most `tokens_ns` (the
  // debt the last sound reading showed, never credit): a compute area lost to a truncate or a
  // replaced page, of devices whose limits page limits their cores.
  uint64_t close_gates = 0;
  std::array<int64_t, share::kMaxDevices> tokens_ns{};  // per device of close_gates, each <= 0

  bool empty() const { return counters.empty() && close_gates == 0; }
};

std::string_view compute_counter_name(ComputeRepair::Counter counter);

struct RepairOutcome {
  uint32_t cleared = 0;       // slots cleared
  uint32_t set = 0;           // byte figures written
  uint32_t skipped = 0;       // changed by their process since the read: left to the next pass
  uint32_t counters_set = 0;  // compute counters put back
  uint32_t gates_closed = 0;  // compute gates closed
};

// A usage page mapped writable (MAP_SHARED): only a regular file, never through a symlink, at
// least sizeof(UsagePage) bytes with a valid header (read with pread first, so a file that is no
// usage page is never mapped).
class UsagePageMapping {
 public:
  static Result<UsagePageMapping> open(const std::string& path);

  UsagePageMapping(UsagePageMapping&& other) noexcept;
  UsagePageMapping& operator=(UsagePageMapping&& other) noexcept;
  UsagePageMapping(const UsagePageMapping&) = delete;
  UsagePageMapping& operator=(const UsagePageMapping&) = delete;
  ~UsagePageMapping();

  // Clears every slot below the high-water mark whose owner word is `owner` (share::reclaim_slot,
  // marked with `reclaimer` meanwhile). The number of slots cleared, or kFailedPrecondition when
  // the page stopped being a valid page or the file was truncated under the mapping.
  Result<int> reclaim_owner(uint64_t owner, uint64_t reclaimer);
  // Applies `repair` (share::clear_slot for the clears, also of a free slot that holds bytes; a
  // compare-and-swap for the sets). kFailedPrecondition when the file was truncated meanwhile.
  Result<RepairOutcome> apply(const SlotRepair& repair);
  // Applies `repair` to the compute area (compare-and-swap for the counters; closing a gate and
  // lowering its bucket only). kFailedPrecondition when the file was truncated meanwhile.
  Result<RepairOutcome> apply(const ComputeRepair& repair);

  const std::string& path() const { return path_; }

 private:
  UsagePageMapping(std::string path, share::UsagePage* page)
      : path_(std::move(path)), page_(page) {}

  std::string path_;
  share::UsagePage* page_ = nullptr;
};

// A repair of <folder>/usage: its shape first (pwrite and ftruncate, never through a symlink),
// then its slots through a UsagePageMapping.
struct UsagePageRepair : SlotRepair {
  bool recreate = false;        // not a regular file: removed and created anew (an empty page)
  bool extend = false;          // short: extended to a page (the lost slots read as free)
  bool rewrite_header = false;  // magic, version, struct_size, max_slots written
  ComputeRepair compute;        // applied after the shape (to the new page after a recreate)

  bool empty() const {
    return !recreate && !extend && !rewrite_header && !high_water && clears.empty() &&
           sets.empty() && compute.empty();
  }
};

// Applies `repair` to <folder>/usage. kFailedPrecondition when the page changed shape meanwhile
// (truncated during the repair: nothing the mapping would have touched is trusted), kInternal for
// I/O errors.
Result<RepairOutcome> repair_usage_page(const std::string& folder, const UsagePageRepair& repair);

}  // namespace tessera::share_folder
