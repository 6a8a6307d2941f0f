#include "tessera/share_folder/usage_repair.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <utility>

#include "tessera/file_io.h"
#include "tessera/share_contract.h"
#include "tessera/share_folder/fault_guard.h"
#include "tessera/share_folder/folder_file.h"
#include "tessera/unique_fd.h"

namespace tessera::share_folder {
namespace {

constexpr size_t kPageBytes = sizeof(share::UsagePage);
constexpr size_t kHeaderBytes = offsetof(share::UsagePage, slots);

void reclaim_slots(share::UsagePage& page, uint64_t owner, uint64_t reclaimer, int& cleared,
                   bool& valid) {
  if (!share::valid_usage_page(page)) {
    valid = false;
    return;
  }
  uint32_t high = page.slot_high_water.load(std::memory_order_acquire);
  if (high > share::kMaxSlots) high = share::kMaxSlots;
  for (uint32_t i = 0; i < high; ++i) {
    share::ProcessSlot& slot = page.slots[i];
    if (slot.owner.load(std::memory_order_acquire) != owner) continue;
    if (share::reclaim_slot(slot, owner, reclaimer)) ++cleared;
  }
}

void apply_slots(share::UsagePage& page, const SlotRepair& repair, RepairOutcome& outcome) {
  for (const SlotRepair::Clear& clear : repair.clears) {
    if (clear.index >= share::kMaxSlots) continue;
    // The shim's protocol (share::clear_slot), also for a free slot that holds bytes (owner 0); a
    // slot whose owner changed meanwhile is left alone.
    if (!share::clear_slot(page.slots[clear.index], clear.owner, clear.owner)) {
      ++outcome.skipped;
      continue;
    }
    ++outcome.cleared;
  }
  for (const SlotRepair::SetBytes& set : repair.sets) {
    if (set.index >= share::kMaxSlots || set.device >= share::kMaxDevices) continue;
    share::ProcessSlot& slot = page.slots[set.index];
    uint64_t expected = set.expected;
    if (slot.owner.load(std::memory_order_seq_cst) != set.owner ||
        !slot.bytes[set.device].compare_exchange_strong(expected, set.value,
                                                        std::memory_order_seq_cst)) {
      ++outcome.skipped;
      continue;
    }
    ++outcome.set;
  }
  if (repair.high_water) {
    // Raised to the sound value, or lowered from one no shim writes (above kMaxSlots).
    const uint32_t sound = *repair.high_water;
    uint32_t high = page.slot_high_water.load(std::memory_order_seq_cst);
    while ((high < sound || high > share::kMaxSlots) &&
           !page.slot_high_water.compare_exchange_weak(high, sound, std::memory_order_seq_cst)) {
    }
  }
}

std::atomic<uint64_t>& counter_of(share::ComputeDevice& device, ComputeRepair::Counter counter) {
  switch (counter) {
    case ComputeRepair::Counter::kBusy:
      return device.busy_ns;
    case ComputeRepair::Counter::kOthersBusy:
      return device.others_busy_ns;
    case ComputeRepair::Counter::kClosed:
      break;
  }
  return device.closed_ns;
}

void apply_compute(share::ComputeArea& area, const ComputeRepair& repair, RepairOutcome& outcome) {
  for (const ComputeRepair::SetCounter& set : repair.counters) {
    if (set.device >= share::kMaxDevices) continue;
    uint64_t expected = set.expected;
    if (!counter_of(area.devices[set.device], set.counter)
             .compare_exchange_strong(expected, set.value, std::memory_order_seq_cst)) {
      ++outcome.skipped;  // the meter added to it since the read: judged again next pass
      continue;
    }
    ++outcome.counters_set;
  }
  for (uint32_t d = 0; d < share::kMaxDevices; ++d) {
    const uint64_t bit = 1ull << d;
    if ((repair.close_gates & bit) == 0) continue;
    // The bucket first, then the gate: a launch that sees the gate closed finds no credit. Only
    // ever lowered (a meter that debited meanwhile keeps its debt).
    const int64_t most = std::min<int64_t>(repair.tokens_ns[d], 0);
    std::atomic<int64_t>& tokens = area.devices[d].tokens_ns;
    int64_t held = tokens.load(std::memory_order_seq_cst);
    while (held > most && !tokens.compare_exchange_weak(held, most, std::memory_order_seq_cst)) {
    }
    area.closed_mask.fetch_or(bit, std::memory_order_seq_cst);
    ++outcome.gates_closed;
  }
}

}  // namespace

std::string_view compute_counter_name(ComputeRepair::Counter counter) {
  switch (counter) {
    case ComputeRepair::Counter::kBusy:
      return "busy_ns";
    case ComputeRepair::Counter::kOthersBusy:
      return "others_busy_ns";
    case ComputeRepair::Counter::kClosed:
      return "closed_ns";
  }
  return "unknown";
}

Result<UsagePageMapping> UsagePageMapping::open(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(UniqueFd opened, open_folder_file(path, O_RDWR, kPageBytes));
  const UniqueFd fd = std::move(opened);
  // The header through pread first: a file that is no usage page is never mapped.
  auto header = std::make_unique<share::UsagePage>();
  if (::pread(fd.get(), header.get(), kHeaderBytes, 0) != static_cast<ssize_t>(kHeaderBytes) ||
      !share::valid_usage_page(*header)) {
    return failed_precondition(path + " is not a usage page (bad header)");
  }
  void* mapped = ::mmap(nullptr, kPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (mapped == MAP_FAILED)
    return internal_error("cannot map " + path + ": " + std::strerror(errno));
  return UsagePageMapping(path, static_cast<share::UsagePage*>(mapped));
}

UsagePageMapping::UsagePageMapping(UsagePageMapping&& other) noexcept
    : path_(std::move(other.path_)), page_(std::exchange(other.page_, nullptr)) {}

UsagePageMapping& UsagePageMapping::operator=(UsagePageMapping&& other) noexcept {
  if (this != &other) {
    if (page_) ::munmap(page_, kPageBytes);
    path_ = std::move(other.path_);
    page_ = std::exchange(other.page_, nullptr);
  }
  return *this;
}

UsagePageMapping::~UsagePageMapping() {
  if (page_) ::munmap(page_, kPageBytes);
}

Result<int> UsagePageMapping::reclaim_owner(uint64_t owner, uint64_t reclaimer) {
  if (!page_) return failed_precondition("no usage page mapped");
  share::UsagePage& page = *page_;
  int cleared = 0;
  bool valid = true;
  const bool completed = run_fault_guarded(
      page_, kPageBytes, [&] { reclaim_slots(page, owner, reclaimer, cleared, valid); });
  if (!completed) return failed_precondition(path_ + " was truncated under its mapping");
  if (!valid) return failed_precondition(path_ + " no longer has a valid usage page header");
  return cleared;
}

Result<RepairOutcome> UsagePageMapping::apply(const SlotRepair& repair) {
  if (!page_) return failed_precondition("no usage page mapped");
  share::UsagePage& page = *page_;
  RepairOutcome outcome;
  if (!run_fault_guarded(page_, kPageBytes, [&] { apply_slots(page, repair, outcome); }))
    return failed_precondition(path_ + " was truncated during the repair");
  return outcome;
}

Result<RepairOutcome> UsagePageMapping::apply(const ComputeRepair& repair) {
  if (!page_) return failed_precondition("no usage page mapped");
  share::ComputeArea& area = page_->compute;
  RepairOutcome outcome;
  if (!run_fault_guarded(page_, kPageBytes, [&] { apply_compute(area, repair, outcome); }))
    return failed_precondition(path_ + " was truncated during the repair");
  return outcome;
}

Result<RepairOutcome> repair_usage_page(const std::string& folder, const UsagePageRepair& repair) {
  const std::string path = folder + "/usage";
  if (repair.recreate) {
    // Whatever a tenant put at the name goes (never followed: remove() takes a symlink itself),
    // and a fresh page is created the shim's way (link of an initialised file).
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
    if (ec) return internal_error("cannot remove " + path + ": " + ec.message());
    if (const int error = share::create_usage_page(folder.c_str()); error != 0)
      return internal_error("cannot create " + path + ": " + std::strerror(error));
    // The new page has none of the old one's slots; its gates are closed as the old one's were.
    if (repair.compute.empty()) return RepairOutcome{};
    TESSERA_ASSIGN_OR_RETURN(UsagePageMapping mapping, UsagePageMapping::open(path));
    return mapping.apply(repair.compute);
  }
  {
    Result<UniqueFd> opened = open_folder_file(path, O_RDWR, 0);
    if (!opened.is_ok()) {
      if (opened.status().code() == StatusCode::kFailedPrecondition)
        return failed_precondition(path + " is no longer a regular file");
      return internal_error(opened.status().message());
    }
    const UniqueFd fd = std::move(opened).value();
    struct stat info {};
    if (::fstat(fd.get(), &info) != 0)
      return internal_error("cannot stat " + path + ": " + std::strerror(errno));
    if (static_cast<size_t>(info.st_size) < kPageBytes) {
      if (!repair.extend) return failed_precondition(path + " was truncated meanwhile");
      if (::ftruncate(fd.get(), static_cast<off_t>(kPageBytes)) != 0)
        return internal_error("cannot extend " + path + ": " + std::strerror(errno));
    }
    if (repair.rewrite_header || repair.extend) {
      // magic, version, struct_size, max_slots: the 16 bytes before slot_high_water.
      const uint32_t header[] = {share::kUsageMagic, share::kUsageVersion,
                                 static_cast<uint32_t>(kPageBytes), share::kMaxSlots};
      static_assert(sizeof(header) == offsetof(share::UsagePage, slot_high_water));
      if (::pwrite(fd.get(), header, sizeof(header), 0) != static_cast<ssize_t>(sizeof(header)))
        return internal_error("cannot write the header of " + path + ": " + std::strerror(errno));
    }
  }
  if (repair.clears.empty() && repair.sets.empty() && !repair.high_water && repair.compute.empty())
    return RepairOutcome{};
  TESSERA_ASSIGN_OR_RETURN(UsagePageMapping mapping, UsagePageMapping::open(path));
  Result<RepairOutcome> slots = mapping.apply(static_cast<const SlotRepair&>(repair));
  if (!slots.is_ok() || repair.compute.empty()) return slots;
  TESSERA_ASSIGN_OR_RETURN(RepairOutcome compute, mapping.apply(repair.compute));
  RepairOutcome outcome = *slots;
  outcome.skipped += compute.skipped;
  outcome.counters_set = compute.counters_set;
  outcome.gates_closed = compute.gates_closed;
  return outcome;
}

}  // namespace tessera::share_folder
