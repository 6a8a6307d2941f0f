#include "usage/context_overhead.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <set>
#include <utility>

#include "tessera/log.h"
#include "tessera/share_region.h"
#include "usage/share_processes.h"

namespace tessera::agent {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

uint64_t round_up_mib(uint64_t bytes) {
  return (bytes + kMiB - 1) / kMiB * kMiB;
}

// A share folder as one measurement reads it: its limits page (the agent's own file, mapped
// read-write to publish) and a private copy of its usage page (the tenants' file: read with pread,
// never mapped, so a truncated file cannot fault).
struct ShareView {
  std::string dir;
  share::LimitsPage* limits = nullptr;
  std::vector<unsigned char> usage;  // sizeof(UsagePage) bytes; slots past `slots` are zero
  uint32_t slots = 0;                // slots read whole

  ShareView() = default;
  ShareView(ShareView&& other) noexcept
      : dir(std::move(other.dir)),
        limits(std::exchange(other.limits, nullptr)),
        usage(std::move(other.usage)),
        slots(other.slots) {}
  ShareView(const ShareView&) = delete;
  ShareView& operator=(const ShareView&) = delete;
  ShareView& operator=(ShareView&&) = delete;
  ~ShareView() {
    if (limits) munmap(limits, sizeof(share::LimitsPage));
  }

  const share::UsagePage& page() const {
    return *reinterpret_cast<const share::UsagePage*>(usage.data());
  }
  uint32_t device_count() const {
    return std::min(limits->device_count.load(std::memory_order_acquire), share::kMaxDevices);
  }
  std::string uuid(uint32_t device) const {
    const char* text = limits->devices[device].uuid;
    return std::string(text, strnlen(text, share::kUuidBytes));
  }
  // The live slot that `owner` holds, or null.
  const share::ProcessSlot* slot_of(uint64_t owner) const {
    for (uint32_t i = 0; i < slots; ++i) {
      if (page().slots[i].owner.load(std::memory_order_relaxed) == owner) return &page().slots[i];
    }
    return nullptr;
  }
};

// Opens <dir>: its limits page mapped read-write, its usage page copied. nullopt with `problem`
// set when the folder is no usable share (no limits page yet is no problem).
std::optional<ShareView> open_share(const std::string& dir, std::string& problem) {
  Result<UniqueFd> limits = open_regular(dir + "/limits", O_RDWR, sizeof(share::LimitsPage));
  if (!limits.is_ok()) {
    if (limits.status().code() != StatusCode::kNotFound) problem = dir + "/limits cannot be opened";
    return std::nullopt;
  }
  void* memory = mmap(nullptr, sizeof(share::LimitsPage), PROT_READ | PROT_WRITE, MAP_SHARED,
                      limits->get(), 0);
  if (memory == MAP_FAILED) {
    problem = "cannot map " + dir + "/limits: " + std::strerror(errno);
    return std::nullopt;
  }
  ShareView view;
  view.dir = dir;
  view.limits = static_cast<share::LimitsPage*>(memory);
  if (!share::valid_limits_page(*view.limits)) {
    problem = dir + "/limits is not a valid limits page";
    return std::nullopt;
  }
  view.usage.assign(sizeof(share::UsagePage), 0);
  constexpr size_t kHeader = offsetof(share::UsagePage, slots);
  Result<UniqueFd> usage = open_regular(dir + "/usage", O_RDONLY, kHeader);
  if (!usage.is_ok()) return view;  // no process yet: nothing to measure, nothing wrong
  if (pread(usage->get(), view.usage.data(), kHeader, 0) != static_cast<ssize_t>(kHeader) ||
      !share::valid_usage_page(view.page())) {
    view.usage.assign(sizeof(share::UsagePage), 0);
    return view;
  }
  uint32_t high = view.page().slot_high_water.load(std::memory_order_relaxed);
  if (high > share::kMaxSlots) high = share::kMaxSlots;
  const ssize_t got =
      pread(usage->get(), view.usage.data() + kHeader, high * sizeof(share::ProcessSlot), kHeader);
  view.slots = got > 0 ? std::min<uint32_t>(high, static_cast<uint32_t>(static_cast<size_t>(got) /
                                                                        sizeof(share::ProcessSlot)))
                       : 0;
  return view;
}

}  // namespace

std::optional<uint64_t> context_cost_of(const ContextSample& sample) {
  const uint32_t word = sample.contexts_word;
  const uint32_t count = share::contexts_count(word);
  if (count == 0 || count == share::kContextsUnmeasurable) return std::nullopt;
  if (share::contexts_device(word) != sample.device) return std::nullopt;
  const uint64_t charge = share::contexts_charge(word);  // < 16 TiB: count x charge cannot wrap
  const uint64_t context_bytes = charge * count;
  if (sample.slot_bytes < context_bytes) return std::nullopt;  // does not add up
  const uint64_t allocations = sample.slot_bytes - context_bytes;
  if (sample.nvml_used_bytes < allocations) return std::nullopt;  // reserved ahead of the driver
  const uint64_t per_context = (sample.nvml_used_bytes - allocations + count - 1) / count;
  return round_up_mib(std::clamp(per_context, kMinContextCost, kMaxContextCost));
}

void ContextCostWindow::add_pass(const std::vector<uint64_t>& costs) {
  if (costs.empty()) return;
  passes_.push_back(*std::max_element(costs.begin(), costs.end()));
  while (passes_.size() > kContextCostPasses) passes_.pop_front();
}

uint64_t ContextCostWindow::published() const {
  if (passes_.empty()) return 0;
  return round_up_mib(std::clamp(*std::max_element(passes_.begin(), passes_.end()), kMinContextCost,
                                 kMaxContextCost));
}

// ---- ContextOverheadMeter ------------------------------------------------------------------

ContextOverheadMeter::ContextOverheadMeter(ContextOverheadOptions options)
    : options_(std::move(options)) {
  if (options_.period.count() <= 0) options_.period = std::chrono::milliseconds(1000);
}

ContextOverheadMeter::~ContextOverheadMeter() = default;

uint64_t ContextOverheadMeter::published(const std::string& share_dir, uint32_t device) const {
  const auto it = windows_.find(share_dir + "#" + std::to_string(device));
  return it == windows_.end() ? 0 : it->second.published();
}

std::string ContextOverheadMeter::maybe_measure(Clock::time_point now) {
  if (last_ && now - *last_ < options_.period) return last_problems_;
  last_ = now;
  last_problems_ = measure();
  return last_problems_;
}

std::string ContextOverheadMeter::measure() {
  std::string problems;
  auto note = [&problems](const std::string& problem) {
    if (!problem.empty()) problems += (problems.empty() ? "" : "; ") + problem;
  };
  if (!nvml_) {
    Result<std::unique_ptr<GpuProcessSource>> nvml = nvml_process_source(options_.nvml_library);
    if (!nvml.is_ok()) return nvml.status().message();
    nvml_ = std::move(nvml).value();
  }
  ++stats_.passes;

  std::vector<ShareView> shares;
  if (DIR* folder = opendir(options_.shares_dir.c_str())) {
    while (const dirent* entry = readdir(folder)) {
      if (entry->d_name[0] == '.') continue;  // ".", "..", and temporary names
      // A folder that is no usable share is skipped here; the GPU-time meter's rescan reports it.
      std::string problem;
      if (auto view = open_share(options_.shares_dir + "/" + entry->d_name, problem)) {
        shares.push_back(std::move(*view));
      }
    }
    closedir(folder);
  } else {
    return "cannot read " + options_.shares_dir + ": " + std::strerror(errno);
  }

  // Which (owner, GPU) pairs appear in more than one share: not measured (see the header).
  std::map<std::pair<uint64_t, std::string>, int> holders;
  for (const ShareView& view : shares) {
    std::set<std::string> gpus;
    for (uint32_t d = 0; d < view.device_count(); ++d) gpus.insert(view.uuid(d));
    for (uint32_t i = 0; i < view.slots; ++i) {
      const uint64_t owner = view.page().slots[i].owner.load(std::memory_order_relaxed);
      if (owner == 0 || (owner & share::kOwnerReclaiming) != 0) continue;
      for (const std::string& uuid : gpus) ++holders[{owner, uuid}];
    }
  }

  std::map<std::string, std::optional<std::map<int, uint64_t>>> used_on;  // per GPU, this pass
  std::map<int, std::optional<uint64_t>> owners;                          // host pid -> owner
  std::set<std::string> live;
  for (ShareView& view : shares) {
    for (uint32_t d = 0; d < view.device_count(); ++d) {
      const std::string uuid = view.uuid(d);
      if (uuid.empty() || uuid.size() >= share::kUuidBytes) continue;
      const std::string key = view.dir + "#" + std::to_string(d);
      live.insert(key);
      if (view.slots == 0) continue;
      auto found = used_on.find(uuid);
      if (found == used_on.end()) {
        std::optional<std::map<int, uint64_t>> used;
        if (Result<std::vector<GpuProcessMemory>> listed = nvml_->memory(uuid); listed.is_ok()) {
          used.emplace();
          for (const GpuProcessMemory& process : *listed)
            (*used)[process.pid] += process.used_bytes;
        } else {
          note(listed.status().message());
        }
        found = used_on.emplace(uuid, std::move(used)).first;
      }
      if (!found->second) continue;
      std::vector<uint64_t> costs;
      for (const auto& [pid, used] : *found->second) {
        auto owner = owners.find(pid);
        if (owner == owners.end())
          owner = owners.emplace(pid, process_owner(options_.proc_root, pid)).first;
        if (!owner->second || holders[{*owner->second, uuid}] != 1) continue;
        const share::ProcessSlot* slot = view.slot_of(*owner->second);
        if (!slot) continue;  // not a process of this share
        ContextSample sample;
        sample.nvml_used_bytes = used;
        sample.slot_bytes = slot->bytes[d].load(std::memory_order_relaxed);
        sample.contexts_word = slot->contexts.load(std::memory_order_relaxed);
        sample.device = d;
        if (const std::optional<uint64_t> cost = context_cost_of(sample)) {
          costs.push_back(*cost);
          ++stats_.samples;
        }
      }
      ContextCostWindow& window = windows_[key];
      window.add_pass(costs);
      const uint64_t figure = window.published();
      if (figure == 0) continue;
      std::atomic<uint64_t>& field = view.limits->measured[d].context_overhead;
      const uint64_t before = field.load(std::memory_order_acquire);
      if (before == figure) continue;
      field.store(figure, std::memory_order_release);
      ++stats_.publications;
      if (before == 0 || figure > before + (before >> 3) || figure + (before >> 3) < before) {
        log::info("measured context cost", {{"share", view.dir},
                                            {"device", d},
                                            {"uuid", uuid},
                                            {"mib_per_context", figure >> 20},
                                            {"was_mib", before >> 20}});
      }
    }
  }
  std::erase_if(windows_, [&live](const auto& entry) { return !live.count(entry.first); });
  return problems;
}

}  // namespace tessera::agent
