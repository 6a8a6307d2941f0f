// A share's usage page as the out-of-band checks see it, and its repair. The page is written by
// the share's processes, so it is untrusted input: read with pread into a private buffer (never
// mapped for reading: a tenant can truncate it, and a read through a mapping past the end is a
// SIGBUS), never through a symlink, never blocking on a FIFO. A repair writes the header with
// pwrite and the slots with atomics (compare-and-swap against what the read saw, so a live
// process's own update is never lost) through a short-lived mapping taken only after fstat says
// the file is whole, with a SIGBUS guard on this thread: a truncate racing the repair makes it
// fail, never crash the agent.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tessera/share_region.h"
#include "tessera/status.h"

namespace tessera::agent {

struct SlotSnapshot {
  uint32_t index = 0;
  uint64_t owner = 0;  // as read, kOwnerReclaiming included
  std::array<uint64_t, share::kMaxDevices> bytes{};
};

enum class UsagePageState {
  kMissing,     // no page yet (no process of the share has started)
  kNotRegular,  // a symlink, FIFO, folder, ... where the page should be
  kShort,       // a regular file smaller than a page (truncated)
  kBadHeader,   // magic, version, struct_size or max_slots are not the shim's
  kValid,
};

struct UsagePageSnapshot {
  UsagePageState state = UsagePageState::kMissing;
  uint64_t size = 0;                // the file's size (regular files)
  uint32_t high_water = 0;          // slot_high_water as read (not clamped)
  std::vector<SlotSnapshot> slots;  // every slot (all kMaxSlots, not only below the high water)
                                    // whose owner or a byte count is not 0; empty unless the
                                    // header is readable (kValid or kBadHeader)
  std::string problem;              // what is wrong, for kNotRegular .. kBadHeader
};

// Reads <folder>/usage. Never fails: what it found is in `state`.
UsagePageSnapshot read_usage_page(const std::string& folder);

struct UsagePageRepair {
  bool recreate = false;               // not a regular file: removed and created anew (empty page)
  bool extend = false;                 // short: extended to a page (the lost slots read as free)
  bool rewrite_header = false;         // magic, version, struct_size, max_slots written
  std::optional<uint32_t> high_water;  // slot_high_water set to this
  struct Clear {                       // a slot whose owner is dead or no process of the share
    uint32_t index;
    uint64_t owner;  // cleared only while the slot still holds this owner
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

  bool empty() const {
    return !recreate && !extend && !rewrite_header && !high_water && clears.empty() && sets.empty();
  }
};

struct RepairOutcome {
  uint32_t cleared = 0;  // slots cleared
  uint32_t set = 0;      // byte figures written
  uint32_t skipped = 0;  // changed by their process since the read: left to the next pass
};

// Applies `repair` to <folder>/usage. kFailedPrecondition when the page changed shape meanwhile
// (truncated during the repair: nothing the mapping would have touched is trusted), kInternal for
// I/O errors.
Result<RepairOutcome> repair_usage_page(const std::string& folder, const UsagePageRepair& repair);

}  // namespace tessera::agent
