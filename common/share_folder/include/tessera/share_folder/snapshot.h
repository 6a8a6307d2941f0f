// One reader of a share folder's two pages (tessera/share_region.h), for everything outside the
// shim: the agent's metrics, checks, meters, watcher and local API, and the CLI's local mode. The
// folder is writable from the share's containers, so both pages are untrusted input here: opened
// never through a symlink and never blocking on a FIFO (tessera::open_file, kUntrusted), read with
// pread into private buffers and copied out as plain values. A page is never mapped for reading: a
// tenant can truncate the file under a mapping, and a read past its end is a SIGBUS.
//
// What a page cannot be is a typed problem (LimitsProblem, UsageProblem) with a message naming the
// path; every derived figure (sums, owners, GPU time) is a method here, so every reader computes
// it the same way.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/pending_spans.h"
#include "tessera/share_region.h"

namespace tessera::share_folder {

// What is wrong with a limits page. kNone: read whole, valid header and device count.
enum class LimitsProblem {
  kNone,
  kMissing,     // no file at the name (a share being created, or no share here)
  kSymlink,     // a symlink at the name (never followed)
  kNotRegular,  // a FIFO, a folder, a device, ...
  kCannotRead,  // open or read failed (permissions, I/O): the message has the errno's text
  kTruncated,   // shorter than a limits page
  kBadHeader,   // magic, version, struct_size or device_count are not the agent's
};

// What is wrong with a usage page. kNone: read whole with a valid header. kMissing is no fault:
// the share's first process creates the page.
enum class UsageProblem {
  kNone,
  kMissing,
  kSymlink,
  kNotRegular,
  kCannotRead,
  kTruncated,  // shorter than a usage page (the shim creates it whole: someone cut it)
  kBadHeader,  // magic, version, struct_size or max_slots are not the shim's
};

std::string_view limits_problem_name(LimitsProblem problem);
std::string_view usage_problem_name(UsageProblem problem);

// One device of a limits page, copied.
struct LimitsDevice {
  std::string uuid;
  uint64_t memory_limit = share::kUnlimited;
  uint64_t memory_request = share::kUnlimited;  // kUnlimited: the whole limit is guaranteed
  uint32_t cores_request = 100;
  uint32_t cores_limit = 0;
  // LimitsPage::Measured: written by the agent's meters.
  uint64_t sampled_at_ns = 0;
  uint64_t share_busy_ns = 0;
  uint64_t others_busy_ns = 0;
  uint64_t context_overhead = 0;  // bytes per context; 0 = not measured
};

struct LimitsPageCopy {
  std::string path;
  LimitsProblem problem = LimitsProblem::kMissing;
  std::string message;  // what is wrong, naming the path; empty for kNone
  uint64_t generation = 0;
  uint32_t priority = share::kPriorityNormal;
  uint32_t measure_source = share::kMeasureNvml;
  uint64_t yield_mask = 0;
  std::vector<LimitsDevice> devices;  // device_count entries (the header bounds it by kMaxDevices)

  bool valid() const { return problem == LimitsProblem::kNone; }
  bool agent_measures() const { return measure_source == share::kMeasureAgent; }
  // Index of `uuid` among the devices, or -1.
  int device_index(const std::string& uuid) const;
};

// One slot of a usage page, copied (as the share's processes wrote it: untrusted).
struct SlotCopy {
  uint32_t index = 0;
  uint64_t owner = 0;  // as read, kOwnerReclaiming included
  uint64_t generation = 0;
  uint64_t start_time = 0;
  uint32_t pid = 0;  // in the process's own pid namespace
  uint32_t contexts = 0;
  std::array<uint64_t, share::kMaxDevices> bytes{};
  uint64_t launches = 0;
  uint64_t throttled_ns = 0;
  uint64_t gpu_busy_ns = 0;
  uint64_t allocations_denied = 0;

  // Owned by a process (not free, not being reclaimed by another process of the share).
  bool live() const { return owner != 0 && (owner & share::kOwnerReclaiming) == 0; }
  bool holds_bytes() const;
};

// One device of the compute area, copied.
struct ComputeDeviceCopy {
  uint64_t busy_ns = 0;
  uint64_t others_busy_ns = 0;
  uint64_t closed_ns = 0;
  int64_t tokens_ns = 0;  // the gate's bucket (negative: the share owes GPU time)
  bool closed = false;    // its bit in closed_mask
};

struct UsagePageCopy {
  std::string path;
  UsageProblem problem = UsageProblem::kMissing;
  std::string message;        // what is wrong, naming the path; empty for kNone and kMissing
  uint64_t file_size = 0;     // of a regular file
  bool header_valid = false;  // the header was read whole and is the shim's
  uint32_t high_water = 0;    // slot_high_water as read (not bounded)
  uint32_t slots_read = 0;    // whole slots read (a truncated page has fewer than kMaxSlots)
  // Every slot read whole, above the high-water mark too, that holds anything (an owner, bytes or
  // counters), by index. Empty unless the header was read (valid or not: the checks look at a
  // scribbled page's slots too).
  std::vector<SlotCopy> slots;
  std::array<ComputeDeviceCopy, share::kMaxDevices> compute{};  // zero unless read whole
  // The header's reclaim request as read (UsagePage::reclaim_*; untrusted: any values), zero when
  // the header was not read.
  struct ReclaimRequest {
    uint32_t device = 0;
    uint64_t bytes = 0;  // 0 = none
    uint64_t owner = 0;
    uint64_t at_ns = 0;
  } reclaim;

  // No fault: read whole and valid, or absent (nothing used yet; every figure 0).
  bool usable() const {
    return problem == UsageProblem::kNone || problem == UsageProblem::kMissing;
  }
  // slot_high_water bounded by kMaxSlots and by the slots read.
  uint32_t bounded_high_water() const;
  // The slots every figure counts: below the bounded high-water mark (as share::share_usage).
  // Counters stay in a slot after its process is gone, so free slots count too.
  std::vector<const SlotCopy*> counted_slots() const;
  // The counted slots that a process owns (SlotCopy::live).
  std::vector<const SlotCopy*> owned_slots() const;
  // Owner words of owned_slots(), sorted and unique. Empty without a valid header.
  std::vector<uint64_t> live_owners() const;
  bool owns(uint64_t owner) const;

  // Sums over the counted slots, saturating (never wrapping).
  uint64_t memory_bytes(uint32_t device) const;
  uint64_t launches() const;
  uint64_t throttled_ns() const;
  uint64_t allocations_denied() const;
  uint32_t processes() const { return static_cast<uint32_t>(owned_slots().size()); }
};

struct ShareFolderSnapshot {
  std::string folder;
  LimitsPageCopy limits;
  UsagePageCopy usage;

  // Both pages usable: the figures below are the share's (a missing usage page reads as 0).
  bool readable() const { return limits.valid() && usage.usable(); }
  // The first problem of the folder, for a read_error ("" when readable()).
  std::string problem_message() const;
  // GPU time of limits-page device `device`: the agent's measured[] when it measures the share
  // (kMeasureAgent), else the usage page's compute area (the shim's meter).
  uint64_t gpu_busy_ns(uint32_t device) const;
};

// What reading a share's pending file (<folder>/pending-<uuid>, tessera/pending_spans.h) found: the
// share's processes write it (untrusted). kMissing: none of its processes timed a launch there.
struct PendingPageRead {
  UsageProblem problem = UsageProblem::kMissing;
  std::string message;  // what is wrong, naming the path; empty for kNone and kMissing
  bool usable() const { return problem == UsageProblem::kNone; }
};

LimitsPageCopy read_limits_page(const std::string& path);
UsagePageCopy read_usage_page(const std::string& path);
// The pending file of device `uuid` of the share at `folder`, read whole into `out` (a buffer the
// caller keeps: the agent reads one every pass). `out` is meaningful only when usable().
PendingPageRead read_pending_page(const std::string& folder, std::string_view uuid,
                                  share::PendingPage& out);
// <folder>/pending-<uuid>.
std::string pending_page_path(const std::string& folder, std::string_view uuid);
// <folder>/limits and <folder>/usage.
ShareFolderSnapshot read_share_folder(const std::string& folder);

uint64_t saturating_add(uint64_t a, uint64_t b);

}  // namespace tessera::share_folder
