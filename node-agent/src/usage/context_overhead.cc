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
#include "tessera/share_folder/fault_guard.h"
#include "tessera/share_folder/folder_file.h"
#include "tessera/share_folder/snapshot.h"
#include "tessera/share_region.h"

namespace tessera::agent {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

uint64_t round_up_mib(uint64_t bytes) {
  return (bytes + kMiB - 1) / kMiB * kMiB;
}

// A share folder as one measurement sees it: copies of both pages (the pass's), and its limits
// page mapped read-write to publish (the agent's own file, in a folder a tenant can write to:
// stores go through the SIGBUS guard).
struct ShareView {
  const ContextCostInputs::Folder* read = nullptr;
  share::LimitsPage* limits = nullptr;

  ShareView() = default;
  ShareView(ShareView&& other) noexcept
      : read(other.read), limits(std::exchange(other.limits, nullptr)) {}
  ShareView(const ShareView&) = delete;
  ShareView& operator=(const ShareView&) = delete;
  ShareView& operator=(ShareView&&) = delete;
  ~ShareView() {
    if (limits) munmap(limits, sizeof(share::LimitsPage));
  }

  const std::string& dir() const { return read->dir; }
  const share_folder::UsagePageCopy& usage() const { return read->usage; }
  uint32_t device_count() const { return static_cast<uint32_t>(read->limits.devices.size()); }
  const std::string& uuid(uint32_t device) const { return read->limits.devices[device].uuid; }
  // The live slot that `owner` holds, or null.
  const share_folder::SlotCopy* slot_of(uint64_t owner) const {
    for (const share_folder::SlotCopy* slot : usage().owned_slots())
      if (slot->owner == owner) return slot;
    return nullptr;
  }
};

// `folder` with its limits page mapped read-write. The view, or why the folder is no usable share
// (none without a limits page yet: no problem, nothing to measure).
Result<std::optional<ShareView>> open_share(const ContextCostInputs::Folder& folder) {
  ShareView view;
  view.read = &folder;
  if (folder.limits.problem == share_folder::LimitsProblem::kMissing)
    return std::optional<ShareView>();
  if (!folder.limits.valid()) return failed_precondition(folder.limits.message);
  Result<UniqueFd> limits =
      share_folder::open_folder_file(folder.dir + "/limits", O_RDWR, sizeof(share::LimitsPage));
  if (!limits.is_ok()) {
    if (limits.status().code() == StatusCode::kNotFound) return std::optional<ShareView>();
    return limits.status().with_context(folder.dir + "/limits cannot be opened");
  }
  void* memory = mmap(nullptr, sizeof(share::LimitsPage), PROT_READ | PROT_WRITE, MAP_SHARED,
                      limits->get(), 0);
  if (memory == MAP_FAILED)
    return internal_error("cannot map " + folder.dir + "/limits: " + std::strerror(errno));
  view.limits = static_cast<share::LimitsPage*>(memory);
  return std::optional<ShareView>(std::move(view));
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

uint64_t context_cost_cap(uint64_t margin) {
  const uint64_t cap =
      margin > kMaxContextCost ? kMaxContextCost : kShimDefaultContextCharge + margin;
  return round_up_mib(std::clamp(cap, kMinContextCost, kMaxContextCost));
}

bool slot_agrees(uint64_t slot_bytes, uint64_t nvml_used_bytes, uint64_t margin) {
  const uint64_t difference =
      slot_bytes > nvml_used_bytes ? slot_bytes - nvml_used_bytes : nvml_used_bytes - slot_bytes;
  return difference <= margin;
}

void ContextCostWindow::add_pass(const std::map<uint64_t, uint64_t>& costs,
                                 const std::set<uint64_t>& present) {
  std::erase_if(processes_, [&](const auto& process) {
    return !costs.count(process.first) && !present.count(process.first);
  });
  for (const auto& [owner, cost] : costs) {
    std::deque<uint64_t>& samples = processes_[owner];
    samples.push_back(cost);
    while (samples.size() > kContextCostPasses) samples.pop_front();
  }
}

void ContextCostWindow::forget(uint64_t owner) {
  processes_.erase(owner);
}

uint64_t ContextCostWindow::published(uint64_t cap) const {
  uint64_t most = 0;
  for (const auto& [owner, samples] : processes_)
    for (const uint64_t cost : samples) most = std::max(most, cost);
  if (most == 0) return 0;
  return round_up_mib(std::clamp(most, kMinContextCost, std::max(cap, kMinContextCost)));
}

// ---- ContextOverheadMeter ------------------------------------------------------------------

ContextOverheadMeter::ContextOverheadMeter(ContextOverheadOptions options)
    : options_(std::move(options)) {}

ContextOverheadMeter::~ContextOverheadMeter() = default;

uint64_t ContextOverheadMeter::published(const std::string& share_dir, uint32_t device) const {
  const auto it = windows_.find(share_dir + "#" + std::to_string(device));
  return it == windows_.end() ? 0 : it->second.published(context_cost_cap(options_.memory_margin));
}

Problems ContextOverheadMeter::measure(const ContextCostInputs& inputs) {
  Problems problems = inputs.problems;
  ++stats_.passes;

  std::vector<ShareView> shares;
  for (const ContextCostInputs::Folder& folder : inputs.folders) {
    // A folder that is no usable share is skipped here; the checks report it.
    Result<std::optional<ShareView>> view = open_share(folder);
    if (view.is_ok() && view->has_value()) shares.push_back(std::move(**view));
  }

  // Which (owner, GPU) pairs appear in more than one share: not measured (see the header).
  std::map<std::pair<uint64_t, std::string>, int> holders;
  for (const ShareView& view : shares) {
    std::set<std::string> gpus;
    for (uint32_t d = 0; d < view.device_count(); ++d) gpus.insert(view.uuid(d));
    for (const share_folder::SlotCopy* slot : view.usage().owned_slots())
      for (const std::string& uuid : gpus) ++holders[{slot->owner, uuid}];
  }

  std::map<std::string, std::optional<std::map<int, uint64_t>>> used_on;  // per GPU, this pass
  std::set<std::string> live;
  std::set<uint64_t> on_gpus;  // owner words NVML showed on a GPU this pass
  bool every_gpu_listed = true;
  const uint64_t cap = context_cost_cap(options_.memory_margin);
  for (ShareView& view : shares) {
    for (uint32_t d = 0; d < view.device_count(); ++d) {
      const std::string uuid = view.uuid(d);
      if (uuid.empty() || uuid.size() >= share::kUuidBytes) continue;
      const std::string key = view.dir() + "#" + std::to_string(d);
      live.insert(key);
      ContextCostWindow& window = windows_[key];
      std::map<uint64_t, uint64_t> costs;
      std::set<uint64_t> present;
      if (!view.usage().owned_slots().empty()) {
        auto found = used_on.find(uuid);
        if (found == used_on.end()) {
          std::optional<std::map<int, uint64_t>> used;
          if (const auto listed = inputs.processes.find(uuid); listed != inputs.processes.end()) {
            used.emplace();
            for (const GpuProcessMemory& process : listed->second)
              (*used)[process.pid] += process.used_bytes;
          } else {
            every_gpu_listed = false;  // the inputs' problems say why
          }
          found = used_on.emplace(uuid, std::move(used)).first;
        }
        if (!found->second) continue;  // NVML cannot say: the figure stays as it is
        for (const auto& [pid, used] : *found->second) {
          const auto found_owner = inputs.owners.find(pid);
          if (found_owner == inputs.owners.end()) continue;  // gone, or no owner word
          const uint64_t owner = found_owner->second;
          on_gpus.insert(owner);
          const share_folder::SlotCopy* slot = view.slot_of(owner);
          if (!slot) continue;  // not a process of this share
          present.insert(owner);
          if (holders[{owner, uuid}] != 1) continue;
          if (distrusted_.count(owner)) continue;
          uint64_t slot_bytes = 0;  // all its slots on this device, as the checker adds them
          for (const share_folder::SlotCopy* mine : view.usage().owned_slots())
            if (mine->owner == slot->owner) slot_bytes += mine->bytes[d];
          if (used > slot_bytes + options_.memory_margin) {
            // It holds more than its slot says (the over_memory_limit liar's rule): what it said
            // before may have been as false, so none of it counts, nor does it again.
            distrusted_.insert(owner);
            window.forget(owner);
            ++stats_.disagreed;
            log::info("context cost: not measuring a process that holds more than its slot says",
                      {{"share", view.dir()},
                       {"device", d},
                       {"pid", pid},
                       {"slot_mib", slot_bytes >> 20},
                       {"nvml_mib", used >> 20}});
            continue;
          }
          // More in the slot than NVML sees: a reservation ahead of the driver (or a lie that
          // could only lower the figure): no sample this pass.
          if (!slot_agrees(slot_bytes, used, options_.memory_margin)) continue;
          ContextSample sample;
          sample.nvml_used_bytes = used;
          sample.slot_bytes = slot_bytes;
          sample.contexts_word = slot->contexts;
          sample.device = d;
          if (const std::optional<uint64_t> cost = context_cost_of(sample)) {
            costs[owner] = *cost;
            ++stats_.samples;
          }
        }
      }
      window.add_pass(costs, present);
      const uint64_t figure = window.published(cap);
      std::atomic<uint64_t>& field = view.limits->measured[d].context_overhead;
      uint64_t before = 0;
      const bool whole =
          share_folder::run_fault_guarded(view.limits, sizeof(share::LimitsPage), [&] {
            before = field.load(std::memory_order_acquire);
            if (before != figure) field.store(figure, std::memory_order_release);
          });
      if (!whole) {
        problems.push_back(
            failed_precondition(view.dir() + "/limits was truncated under its mapping"));
        continue;
      }
      if (before == figure) continue;
      ++stats_.publications;
      if (before == 0 || figure == 0 || figure > before + (before >> 3) ||
          figure + (before >> 3) < before) {
        log::info("measured context cost", {{"share", view.dir()},
                                            {"device", d},
                                            {"uuid", uuid},
                                            {"mib_per_context", figure >> 20},
                                            {"was_mib", before >> 20}});
      }
    }
  }
  // A distrusted process is forgotten once it has left every GPU (its pid's next owner differs).
  if (every_gpu_listed)
    std::erase_if(distrusted_, [&on_gpus](uint64_t owner) { return !on_gpus.count(owner); });
  std::erase_if(windows_, [&live](const auto& entry) { return !live.count(entry.first); });
  return problems;
}

}  // namespace tessera::agent
