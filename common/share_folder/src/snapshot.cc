#include "tessera/share_folder/snapshot.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>

#include "tessera/file_io.h"
#include "tessera/unique_fd.h"

namespace tessera::share_folder {
namespace {

constexpr size_t kUsageHeader = offsetof(share::UsagePage, slots);

// Reads [offset, offset + size) of `fd` into `out`; the bytes got (short at the end of the file).
size_t read_at(int fd, void* out, size_t size, size_t offset) {
  auto* bytes = static_cast<unsigned char*>(out);
  size_t done = 0;
  while (done < size) {
    const ssize_t got = ::pread(fd, bytes + done, size - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    done += static_cast<size_t>(got);
  }
  return done;
}

// What is wrong first, then the path: a line cut to a terminal's width keeps the reason.
std::string about(const char* what, const std::string& problem, const std::string& path) {
  return std::string(what) + " " + problem + ": " + path;
}

// The open of a page file as untrusted input. The problem is one of the open's (kNone: `fd` holds
// a regular file), `size` its length.
struct Opened {
  UniqueFd fd;
  int error = 0;  // 0, or the errno of the open
  uint64_t size = 0;
};

Opened open_page(const std::string& path) {
  Opened opened;
  opened.error = open_file(path.c_str(), O_RDONLY, FileSource::kUntrusted, opened.fd);
  if (opened.error == 0) {
    struct stat info {};
    if (::fstat(opened.fd.get(), &info) == 0) opened.size = static_cast<uint64_t>(info.st_size);
  }
  return opened;
}

// The open's errno as a page problem: 0 none, ENOENT/ENOTDIR missing, ELOOP a symlink (O_NOFOLLOW),
// EINVAL not a regular file (open_file's refusal), anything else unreadable.
template <typename Problem>
Problem open_problem(int error) {
  if (error == 0) return Problem::kNone;
  if (error == ENOENT || error == ENOTDIR) return Problem::kMissing;
  if (error == ELOOP) return Problem::kSymlink;
  if (error == EINVAL) return Problem::kNotRegular;
  return Problem::kCannotRead;
}

template <typename Problem>
std::string open_message(Problem problem, int error, const char* what, const std::string& path) {
  switch (problem) {
    case Problem::kMissing:
      return std::string("no ") + what + ": " + path;
    case Problem::kSymlink:
      return about(what, "is a symlink", path);
    case Problem::kNotRegular:
      return about(what, "is not a regular file", path);
    default:
      return std::string("cannot open the ") + what + " (" + std::strerror(error) + "): " + path;
  }
}

std::string truncated(const char* what, size_t got, size_t size, const std::string& path) {
  return about(what,
               "is truncated (" + std::to_string(got) + " of " + std::to_string(size) + " bytes)",
               path);
}

SlotCopy copy_slot(const share::ProcessSlot& slot, uint32_t index) {
  SlotCopy copy;
  copy.index = index;
  copy.owner = slot.owner.load(std::memory_order_relaxed);
  copy.generation = slot.generation.load(std::memory_order_relaxed);
  copy.start_time = slot.start_time.load(std::memory_order_relaxed);
  copy.pid = slot.pid.load(std::memory_order_relaxed);
  copy.contexts = slot.contexts.load(std::memory_order_relaxed);
  for (uint32_t d = 0; d < share::kMaxDevices; ++d)
    copy.bytes[d] = slot.bytes[d].load(std::memory_order_relaxed);
  copy.launches = slot.launches.load(std::memory_order_relaxed);
  copy.throttled_ns = slot.throttled_ns.load(std::memory_order_relaxed);
  copy.gpu_busy_ns = slot.gpu_busy_ns.load(std::memory_order_relaxed);
  copy.allocations_denied = slot.allocations_denied.load(std::memory_order_relaxed);
  return copy;
}

bool holds_anything(const SlotCopy& slot) {
  return slot.owner != 0 || slot.holds_bytes() || slot.launches != 0 || slot.throttled_ns != 0 ||
         slot.gpu_busy_ns != 0 || slot.allocations_denied != 0 || slot.contexts != 0 ||
         slot.pid != 0 || slot.start_time != 0 || slot.generation != 0;
}

}  // namespace

std::string_view limits_problem_name(LimitsProblem problem) {
  switch (problem) {
    case LimitsProblem::kNone:
      return "none";
    case LimitsProblem::kMissing:
      return "missing";
    case LimitsProblem::kSymlink:
      return "symlink";
    case LimitsProblem::kNotRegular:
      return "not a regular file";
    case LimitsProblem::kCannotRead:
      return "cannot read";
    case LimitsProblem::kTruncated:
      return "truncated";
    case LimitsProblem::kBadHeader:
      return "bad header";
  }
  return "unknown";
}

std::string_view usage_problem_name(UsageProblem problem) {
  switch (problem) {
    case UsageProblem::kNone:
      return "none";
    case UsageProblem::kMissing:
      return "missing";
    case UsageProblem::kSymlink:
      return "symlink";
    case UsageProblem::kNotRegular:
      return "not a regular file";
    case UsageProblem::kCannotRead:
      return "cannot read";
    case UsageProblem::kTruncated:
      return "truncated";
    case UsageProblem::kBadHeader:
      return "bad header";
  }
  return "unknown";
}

uint64_t saturating_add(uint64_t a, uint64_t b) {
  return a + b < a ? ~0ull : a + b;
}

int LimitsPageCopy::device_index(const std::string& uuid) const {
  for (size_t i = 0; i < devices.size(); ++i)
    if (devices[i].uuid == uuid) return static_cast<int>(i);
  return -1;
}

bool SlotCopy::holds_bytes() const {
  return std::any_of(bytes.begin(), bytes.end(), [](uint64_t b) { return b != 0; });
}

uint32_t UsagePageCopy::bounded_high_water() const {
  return std::min({high_water, share::kMaxSlots, slots_read});
}

std::vector<const SlotCopy*> UsagePageCopy::counted_slots() const {
  std::vector<const SlotCopy*> counted;
  if (!header_valid) return counted;
  const uint32_t high = bounded_high_water();
  for (const SlotCopy& slot : slots)
    if (slot.index < high) counted.push_back(&slot);
  return counted;
}

std::vector<const SlotCopy*> UsagePageCopy::owned_slots() const {
  std::vector<const SlotCopy*> owned = counted_slots();
  std::erase_if(owned, [](const SlotCopy* slot) { return !slot->live(); });
  return owned;
}

std::vector<uint64_t> UsagePageCopy::live_owners() const {
  std::vector<uint64_t> owners;
  for (const SlotCopy* slot : owned_slots()) owners.push_back(slot->owner);
  std::sort(owners.begin(), owners.end());
  owners.erase(std::unique(owners.begin(), owners.end()), owners.end());
  return owners;
}

bool UsagePageCopy::owns(uint64_t owner) const {
  const std::vector<uint64_t> owners = live_owners();
  return std::binary_search(owners.begin(), owners.end(), owner);
}

uint64_t UsagePageCopy::memory_bytes(uint32_t device) const {
  if (device >= share::kMaxDevices) return 0;
  uint64_t sum = 0;
  for (const SlotCopy* slot : counted_slots()) sum = saturating_add(sum, slot->bytes[device]);
  return sum;
}

uint64_t UsagePageCopy::launches() const {
  uint64_t sum = 0;
  for (const SlotCopy* slot : counted_slots()) sum = saturating_add(sum, slot->launches);
  return sum;
}

uint64_t UsagePageCopy::throttled_ns() const {
  uint64_t sum = 0;
  for (const SlotCopy* slot : counted_slots()) sum = saturating_add(sum, slot->throttled_ns);
  return sum;
}

uint64_t UsagePageCopy::allocations_denied() const {
  uint64_t sum = 0;
  for (const SlotCopy* slot : counted_slots()) sum = saturating_add(sum, slot->allocations_denied);
  return sum;
}

std::string ShareFolderSnapshot::problem_message() const {
  if (!limits.valid()) return limits.message;
  if (!usage.usable()) return usage.message;
  return "";
}

uint64_t ShareFolderSnapshot::gpu_busy_ns(uint32_t device) const {
  if (limits.agent_measures())
    return device < limits.devices.size() ? limits.devices[device].share_busy_ns : 0;
  return device < share::kMaxDevices ? usage.compute[device].busy_ns : 0;
}

LimitsPageCopy read_limits_page(const std::string& path) {
  constexpr const char* kWhat = "limits page";
  LimitsPageCopy copy;
  copy.path = path;
  Opened opened = open_page(path);
  copy.problem = open_problem<LimitsProblem>(opened.error);
  if (copy.problem != LimitsProblem::kNone) {
    copy.message = open_message(copy.problem, opened.error, kWhat, path);
    return copy;
  }
  // Private, aligned storage: the layout's atomics are read as plain words here.
  auto page = std::make_unique<share::LimitsPage>();
  const size_t got = read_at(opened.fd.get(), page.get(), sizeof(share::LimitsPage), 0);
  if (got < sizeof(share::LimitsPage)) {
    copy.problem = LimitsProblem::kTruncated;
    copy.message = truncated(kWhat, got, sizeof(share::LimitsPage), path);
    return copy;
  }
  if (!share::valid_limits_page(*page)) {
    copy.problem = LimitsProblem::kBadHeader;
    copy.message =
        about(kWhat,
              "is not valid (magic " + std::to_string(page->magic) + ", version " +
                  std::to_string(page->version) + ", struct_size " +
                  std::to_string(page->struct_size) + ", device_count " +
                  std::to_string(page->device_count.load(std::memory_order_relaxed)) + ")",
              path);
    return copy;
  }
  copy.problem = LimitsProblem::kNone;
  copy.generation = page->generation.load(std::memory_order_relaxed);
  copy.priority = page->priority.load(std::memory_order_relaxed);
  copy.measure_source = page->measure_source.load(std::memory_order_relaxed);
  copy.yield_mask = page->yield_mask.load(std::memory_order_relaxed);
  const uint32_t count = page->device_count.load(std::memory_order_relaxed);
  for (uint32_t d = 0; d < count; ++d) {
    const share::DeviceLimits& entry = page->devices[d];
    const share::LimitsPage::Measured& measured = page->measured[d];
    LimitsDevice device;
    device.uuid.assign(entry.uuid, strnlen(entry.uuid, share::kUuidBytes));
    device.memory_limit = entry.memory_limit.load(std::memory_order_relaxed);
    device.cores_request = entry.cores_request.load(std::memory_order_relaxed);
    device.cores_limit = entry.cores_limit.load(std::memory_order_relaxed);
    device.memory_request = page->requests[d].memory_request.load(std::memory_order_relaxed);
    device.sampled_at_ns = measured.sampled_at_ns.load(std::memory_order_relaxed);
    device.share_busy_ns = measured.share_busy_ns.load(std::memory_order_relaxed);
    device.others_busy_ns = measured.others_busy_ns.load(std::memory_order_relaxed);
    device.context_overhead = measured.context_overhead.load(std::memory_order_relaxed);
    copy.devices.push_back(std::move(device));
  }
  return copy;
}

UsagePageCopy read_usage_page(const std::string& path) {
  constexpr const char* kWhat = "usage page";
  UsagePageCopy copy;
  copy.path = path;
  Opened opened = open_page(path);
  copy.problem = open_problem<UsageProblem>(opened.error);
  if (copy.problem != UsageProblem::kNone) {
    if (copy.problem != UsageProblem::kMissing)
      copy.message = open_message(copy.problem, opened.error, kWhat, path);
    return copy;
  }
  copy.file_size = opened.size;
  auto page = std::make_unique<share::UsagePage>();
  const size_t got = read_at(opened.fd.get(), page.get(), sizeof(share::UsagePage), 0);
  if (got >= kUsageHeader) {
    copy.header_valid = share::valid_usage_page(*page);
    copy.high_water = page->slot_high_water.load(std::memory_order_relaxed);
    copy.reclaim.device = page->reclaim_device.load(std::memory_order_relaxed);
    copy.reclaim.bytes = page->reclaim_bytes.load(std::memory_order_relaxed);
    copy.reclaim.owner = page->reclaim_owner.load(std::memory_order_relaxed);
    copy.reclaim.at_ns = page->reclaim_at_ns.load(std::memory_order_relaxed);
    copy.slots_read = static_cast<uint32_t>(
        std::min<size_t>((got - kUsageHeader) / sizeof(share::ProcessSlot), share::kMaxSlots));
    for (uint32_t i = 0; i < copy.slots_read; ++i) {
      SlotCopy slot = copy_slot(page->slots[i], i);
      if (holds_anything(slot)) copy.slots.push_back(slot);
    }
  }
  if (got < sizeof(share::UsagePage)) {
    copy.problem = UsageProblem::kTruncated;
    copy.message = truncated(kWhat, got, sizeof(share::UsagePage), path);
    return copy;
  }
  for (uint32_t d = 0; d < share::kMaxDevices; ++d) {
    const share::ComputeDevice& device = page->compute.devices[d];
    copy.compute[d].busy_ns = device.busy_ns.load(std::memory_order_relaxed);
    copy.compute[d].others_busy_ns = device.others_busy_ns.load(std::memory_order_relaxed);
    copy.compute[d].closed_ns = device.closed_ns.load(std::memory_order_relaxed);
    copy.compute[d].tokens_ns = device.tokens_ns.load(std::memory_order_relaxed);
    copy.compute[d].closed =
        (page->compute.closed_mask.load(std::memory_order_relaxed) >> d & 1) != 0;
  }
  if (!copy.header_valid) {
    copy.problem = UsageProblem::kBadHeader;
    copy.message = about(kWhat,
                         "is not valid (magic " + std::to_string(page->magic) + ", version " +
                             std::to_string(page->version) + ", struct_size " +
                             std::to_string(page->struct_size) + ", max_slots " +
                             std::to_string(page->max_slots) + ")",
                         path);
    return copy;
  }
  copy.problem = UsageProblem::kNone;
  return copy;
}

std::string pending_page_path(const std::string& folder, std::string_view uuid) {
  return folder + "/" + share::kPendingFilePrefix + std::string(uuid);
}

PendingPageRead read_pending_page(const std::string& folder, std::string_view uuid,
                                  share::PendingPage& out) {
  constexpr const char* kWhat = "pending file";
  PendingPageRead read;
  const std::string path = pending_page_path(folder, uuid);
  if (uuid.empty() || uuid.find('/') != std::string_view::npos) {
    read.problem = UsageProblem::kCannotRead;
    read.message = about(kWhat, "has no usable device name", path);
    return read;
  }
  Opened opened = open_page(path);
  read.problem = open_problem<UsageProblem>(opened.error);
  if (read.problem != UsageProblem::kNone) {
    if (read.problem != UsageProblem::kMissing)
      read.message = open_message(read.problem, opened.error, kWhat, path);
    return read;
  }
  const size_t got = read_at(opened.fd.get(), &out, sizeof out, 0);
  if (got < sizeof out) {
    read.problem = UsageProblem::kTruncated;
    read.message = truncated(kWhat, got, sizeof out, path);
  } else if (!share::valid_pending_page(out)) {
    read.problem = UsageProblem::kBadHeader;
    read.message = about(kWhat,
                         "is not valid (magic " + std::to_string(out.magic) + ", version " +
                             std::to_string(out.version) + ")",
                         path);
  }
  return read;
}

ShareFolderSnapshot read_share_folder(const std::string& folder) {
  ShareFolderSnapshot snapshot;
  snapshot.folder = folder;
  snapshot.limits = read_limits_page(folder + "/limits");
  snapshot.usage = read_usage_page(folder + "/usage");
  return snapshot;
}

}  // namespace tessera::share_folder
