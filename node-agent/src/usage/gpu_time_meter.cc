#include "usage/gpu_time_meter.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstring>

#include "tessera/log.h"
#include "tessera/nvml.h"
#include "tessera/pending_spans.h"
#include "tessera/share_folder/folder_file.h"
#include "tessera/share_folder/snapshot.h"
#include "tessera/share_region.h"
#include "usage/share_processes.h"

namespace tessera::agent {
namespace {

uint64_t monotonic_ns() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<uint64_t>(now.tv_sec) * 1000000000ull + static_cast<uint64_t>(now.tv_nsec);
}

uint32_t clamp_percent(uint32_t percent) {
  return std::min(percent, 100u);
}

// How much more than its request a claim may use, within the GPU.
uint32_t headroom(const CoresClaim& claim) {
  const uint32_t request = clamp_percent(claim.request);
  return clamp_percent(share::effective_cores_limit(request, claim.limit)) - request;
}

}  // namespace

uint32_t spare_part(const CoresClaim& own, const std::vector<CoresClaim>& others) {
  const uint32_t own_headroom = headroom(own);
  if (own_headroom == 0) return 0;
  uint64_t reserved = clamp_percent(own.request);
  for (const CoresClaim& other : others) reserved += clamp_percent(other.request);
  if (reserved >= 100) return 0;
  // Water-filling: sorted by headroom, each share takes the smaller of its headroom and an equal
  // part of what is left.
  std::vector<uint32_t> headrooms{own_headroom};
  for (const CoresClaim& other : others)
    if (const uint32_t h = headroom(other); h > 0) headrooms.push_back(h);
  std::sort(headrooms.begin(), headrooms.end());
  uint64_t left = 100 - reserved;
  for (size_t i = 0; i < headrooms.size(); ++i) {
    const uint64_t level = left / (headrooms.size() - i);
    if (headrooms[i] > level) return static_cast<uint32_t>(std::min<uint64_t>(own_headroom, level));
    left -= headrooms[i];
  }
  return own_headroom;  // every share wanting more is held by its limit
}

// ---- GpuTimeMeter ------------------------------------------------------------------------------

struct GpuTimeMeter::Nvml {
  nvml::Session session;
};

// One share folder with a valid limits page. The limits page is the agent's own file (0444, owned
// by root): mapped read-write. The usage page is the tenants' and is only ever read with pread
// into a private buffer (a tenant can truncate a mapped file under us: SIGBUS).
struct GpuTimeMeter::Share {
  std::string dir;
  dev_t device = 0;
  ino_t inode = 0;
  share::LimitsPage* limits = nullptr;
  std::vector<uint64_t> owners;  // live slot owner words of the last read, sorted
  // GPU uuid -> until when the share counts as active there (it used the GPU within the hold).
  std::map<std::string, Clock::time_point> active_until;
  bool seen = false;  // found by the current rescan

  // The shims' timed slots, for the share's devices NVML cannot measure (read_timed_slots): per
  // slot the generation and the highest gpu_busy_ns taken so far (empty: not primed), when they
  // were read, and the growth that read found per limits-page device.
  struct SlotMark {
    uint64_t generation = 0;
    uint64_t busy_ns = 0;
  };
  std::vector<SlotMark> slot_marks;
  uint64_t slots_read_ns = 0;
  std::array<uint64_t, share::kMaxDevices> timed_ns{};
  // Per timed device (uuid), per record of the share's pending file: whose it was and how many
  // spans it had written at the last look (share::take_spans' `seen`).
  struct SeenRecord {
    uint64_t process = 0;
    uint64_t written = 0;
  };
  std::map<std::string, std::array<SeenRecord, share::kPendingRecords>> seen_records;

  bool measured_by_agent() const {
    return limits->measure_source.load(std::memory_order_acquire) == share::kMeasureAgent;
  }
  uint32_t device_count() const {
    return std::min(limits->device_count.load(std::memory_order_acquire), share::kMaxDevices);
  }
  // Rank of the share's priority: low 0 < normal 1 < high 2 (as the shim ranks them).
  int priority_rank() const {
    const uint32_t priority = limits->priority.load(std::memory_order_acquire);
    return priority == share::kPriorityHigh ? 2 : priority == share::kPriorityLow ? 0 : 1;
  }
  bool active_on(const std::string& uuid, Clock::time_point now) const {
    const auto it = active_until.find(uuid);
    return it != active_until.end() && it->second > now;
  }
  bool owns(uint64_t owner) const {
    return std::binary_search(owners.begin(), owners.end(), owner);
  }

  ~Share() {
    if (limits) munmap(limits, sizeof(share::LimitsPage));
  }
};

struct GpuTimeMeter::Gpu {
  std::string uuid;
  nvmlDevice_t handle = nullptr;
  unsigned long long last_seen_us = 0;  // 0: not primed
  bool named = false;                   // named by an agent-measured share in the current rescan
  // NVML answered NOT_SUPPORTED for its per-process utilisation (a MIG instance, or a GPU in MIG
  // mode): the shares' shims time their launches there, and the meter reads their slots.
  bool timed_by_shims = false;
  int64_t split_to_ns = 0;  // the end of the last window the equal split charged (0: none yet)
};

GpuTimeMeter::GpuTimeMeter(GpuTimeMeterOptions options, Clock& clock)
    : options_(std::move(options)), clock_(clock) {
  if (options_.period.count() <= 0) options_.period = std::chrono::milliseconds(20);
  if (options_.pid_refresh.count() <= 0) options_.pid_refresh = std::chrono::milliseconds(500);
  if (options_.priority_hold.count() <= 0) options_.priority_hold = std::chrono::milliseconds(100);
}

GpuTimeMeter::~GpuTimeMeter() {
  stop();
}

Status GpuTimeMeter::load_nvml() {
  if (nvml_) return Status::ok();
  using nvml::EntryPoint;
  Result<nvml::Session> session = nvml::Session::open(
      options_.nvml_library,
      {EntryPoint::nvmlDeviceGetHandleByUUID, EntryPoint::nvmlDeviceGetProcessUtilization});
  if (!session.is_ok()) return unavailable(session.status().message());  // NVML missing: no meter
  nvml_ = std::make_unique<Nvml>(Nvml{std::move(session).value()});
  return Status::ok();
}

Status GpuTimeMeter::start() {
  if (loop_) return failed_precondition("the gpu-time meter is already running");
  {
    MutexLock lock(mutex_);
    TESSERA_RETURN_IF_ERROR(load_nvml());
  }
  last_loop_problem_.clear();
  // A pass that overruns the period skips the missed ones: no burst of catch-up passes.
  TESSERA_ASSIGN_OR_RETURN(
      loop_,
      PeriodicLoop::start(
          clock_, options_.period, [this] { loop_pass(); }, PeriodicLoop::FirstTick::kAtOnce),
      with_context("cannot start the gpu-time meter"));
  return Status::ok();
}

void GpuTimeMeter::stop() {
  loop_.reset();
}

void GpuTimeMeter::loop_pass() {
  std::string problem;
  {
    MutexLock lock(mutex_);
    problem = join_problems(pass());
  }
  if (problem != last_loop_problem_) {  // one line per change, not one per period
    if (problem.empty()) {
      log::info("GPU-time meter measuring again");
    } else {
      log::warn("GPU-time meter cannot measure", {{"error", problem}});
    }
    last_loop_problem_ = problem;
  }
}

uint64_t GpuTimeMeter::loop_passes() const {
  return loop_ ? loop_->ticks() : 0;
}

bool GpuTimeMeter::wait_for_loop_passes(uint64_t count, std::chrono::milliseconds timeout) const {
  return loop_ && loop_->wait_for_ticks(count, timeout);
}

Status GpuTimeMeter::sample_once() {
  MutexLock lock(mutex_);
  TESSERA_RETURN_IF_ERROR(load_nvml());
  if (const Problems problems = pass(); !problems.empty())
    return unavailable(join_problems(problems));
  return Status::ok();
}

GpuTimeMeterStats GpuTimeMeter::stats() const {
  MutexLock lock(mutex_);
  return stats_;
}

std::optional<uint64_t> GpuTimeMeter::owner_of(int host_pid) {
  const auto it = owner_cache_.find(host_pid);
  if (it != owner_cache_.end()) return it->second;
  const std::optional<uint64_t> owner = process_owner(options_.proc_root, host_pid);
  owner_cache_.emplace(host_pid, owner);
  return owner;
}

void GpuTimeMeter::read_owners(Share& share) {
  share.owners = share_folder::read_usage_page(share.dir + "/usage").live_owners();
}

void GpuTimeMeter::rescan(Problems& problems) {
  auto note = [&problems](std::string problem) {
    problems.push_back(failed_precondition(std::move(problem)));
  };
  for (auto& share : shares_) share->seen = false;
  if (DIR* folder = opendir(options_.shares_dir.c_str())) {
    while (const dirent* entry = readdir(folder)) {
      if (entry->d_name[0] == '.') continue;  // ".", "..", and temporary names
      const std::string dir = options_.shares_dir + "/" + entry->d_name;
      Result<UniqueFd> opened =
          share_folder::open_folder_file(dir + "/limits", O_RDWR, sizeof(share::LimitsPage));
      if (!opened.is_ok()) {
        // No limits page yet (a share being created) is normal; anything else is reported.
        if (opened.status().code() != StatusCode::kNotFound) note(dir + "/limits cannot be opened");
        continue;
      }
      const UniqueFd fd = std::move(opened).value();
      struct stat info {};
      fstat(fd.get(), &info);
      auto it = std::find_if(shares_.begin(), shares_.end(),
                             [&dir](const auto& share) { return share->dir == dir; });
      if (it != shares_.end() && ((*it)->device != info.st_dev || (*it)->inode != info.st_ino)) {
        shares_.erase(it);  // replaced (a new file renamed into place): map the new one
        it = shares_.end();
      }
      if (it == shares_.end()) {
        void* memory = mmap(nullptr, sizeof(share::LimitsPage), PROT_READ | PROT_WRITE, MAP_SHARED,
                            fd.get(), 0);
        if (memory == MAP_FAILED) {
          note("cannot map " + dir + "/limits: " + std::strerror(errno));
          continue;
        }
        auto share = std::make_unique<Share>();
        share->dir = dir;
        share->device = info.st_dev;
        share->inode = info.st_ino;
        share->limits = static_cast<share::LimitsPage*>(memory);
        shares_.push_back(std::move(share));
        it = shares_.end() - 1;
      }
      if (!share::valid_limits_page(*(*it)->limits)) {
        note(dir + "/limits is not a valid limits page");
        shares_.erase(it);
        continue;
      }
      (*it)->seen = true;
    }
    closedir(folder);
  } else {
    problems.push_back(
        internal_error("cannot read " + options_.shares_dir + ": " + std::strerror(errno)));
  }
  std::erase_if(shares_, [](const auto& share) { return !share->seen; });

  // The GPUs to query: every one an agent-measured share names, by UUID.
  for (auto& gpu : gpus_) gpu->named = false;
  size_t agent_shares = 0;
  for (auto& share : shares_) {
    if (!share->measured_by_agent()) continue;
    ++agent_shares;
    read_owners(*share);
    for (uint32_t d = 0; d < share->device_count(); ++d) {
      const char* uuid = share->limits->devices[d].uuid;
      const std::string name(uuid, strnlen(uuid, share::kUuidBytes));
      if (name.empty() || name.size() >= share::kUuidBytes) continue;
      auto gpu = std::find_if(gpus_.begin(), gpus_.end(),
                              [&name](const auto& g) { return g->uuid == name; });
      if (gpu == gpus_.end()) {
        gpus_.push_back(std::make_unique<Gpu>());
        gpus_.back()->uuid = name;
        gpu = gpus_.end() - 1;
      }
      (*gpu)->named = true;
    }
  }
  std::erase_if(gpus_, [](const auto& gpu) { return !gpu->named; });
  owner_cache_.clear();  // pids may have been reused since
  strangers_.clear();
  stats_.shares = shares_.size();
  stats_.agent_shares = agent_shares;
  stats_.gpus = gpus_.size();
}

Problems GpuTimeMeter::pass() {
  Problems problems;
  ++stats_.passes;
  const Clock::time_point now = clock_.now();
  if (now >= next_rescan_) {
    rescan_problems_.clear();
    rescan(rescan_problems_);
    next_rescan_ = now + options_.pid_refresh;
  }
  problems = rescan_problems_;  // repeated until the next rescan: the log line stays the same
  bool reread = false;          // the usage pages were re-read in this pass

  for (auto& gpu : gpus_) {
    const bool fresh = gpu->handle == nullptr;  // resolving primes its first window
    if (!resolve(*gpu, problems)) continue;
    if (!gpu->timed_by_shims && !fresh) measure_by_nvml(*gpu, now, reread, problems);
  }
  // The devices NVML cannot measure: each share on one of them has its slots read once. None on
  // a node without MIG: nothing to compare per share.
  const bool any_timed = std::any_of(gpus_.begin(), gpus_.end(), [](const auto& gpu) {
    return gpu->timed_by_shims && gpu->handle;
  });
  const uint64_t now_ns = monotonic_ns();
  for (auto& share : shares_) {
    if (!share->measured_by_agent()) continue;
    if (!any_timed) {
      share->slot_marks.clear();  // primed again if one of its devices becomes timed
      continue;
    }
    uint64_t timed = 0;
    for (uint32_t d = 0; d < share->device_count(); ++d) {
      const char* uuid = share->limits->devices[d].uuid;
      const std::string_view name(uuid, strnlen(uuid, share::kUuidBytes));
      for (const auto& gpu : gpus_)
        if (gpu->timed_by_shims && gpu->handle && gpu->uuid == name) timed |= 1ull << d;
    }
    if (timed == 0) {
      share->slot_marks.clear();  // primed again if one of its devices becomes timed
      continue;
    }
    read_timed_slots(*share, timed, now_ns);
  }
  for (auto& gpu : gpus_)
    if (gpu->timed_by_shims && gpu->handle) measure_by_slots(*gpu, now, problems);
  stats_.timed_gpus = static_cast<size_t>(std::count_if(
      gpus_.begin(), gpus_.end(), [](const auto& gpu) { return gpu->timed_by_shims; }));
  publish_classes(now);
  if (!problems.empty()) stats_.last_error = join_problems(problems);
  return problems;
}

bool GpuTimeMeter::resolve(Gpu& gpu, Problems& problems) {
  if (gpu.handle) return true;
  Result<nvmlDevice_t> found = nvml_->session.device_by_uuid(gpu.uuid);
  if (!found.is_ok()) {
    problems.push_back(found.status().with_context("no GPU " + gpu.uuid));
    return false;
  }
  gpu.handle = *found;
  // Asked once per handle. kFailedPrecondition is NVML_ERROR_NOT_SUPPORTED here (the entry point
  // is required when the session opens): a MIG instance, or a GPU in MIG mode (mig-facts.md §2.4).
  const unsigned long long now_us = nvml::wall_clock_us();
  Result<std::vector<nvmlProcessUtilizationSample_t>> probe =
      nvml_->session.process_utilization(gpu.handle, now_us);
  gpu.timed_by_shims = !probe.is_ok() && probe.status().code() == StatusCode::kFailedPrecondition;
  if (gpu.timed_by_shims)
    log::info("GPU-time meter: NVML cannot measure this device, reading its shims' timed launches",
              {{"uuid", gpu.uuid}});
  gpu.last_seen_us = now_us;  // priming: the first window starts now
  return true;
}

void GpuTimeMeter::measure_by_nvml(Gpu& gpu, Clock::time_point now, bool& reread,
                                   Problems& problems) {
  auto note = [&problems](Status problem) { problems.push_back(std::move(problem)); };
  // The window (last_seen, now], exactly as libvgpu's NvmlSource queries it.
  const unsigned long long since = gpu.last_seen_us;
  const unsigned long long now_us = nvml::wall_clock_us();
  if (since == 0) {
    gpu.last_seen_us = now_us;  // priming: the first window starts now
    return;
  }
  // None (NVML_ERROR_NOT_FOUND): nobody ran in the window, publish zeros (the shim sees a
  // fresh window).
  Result<std::vector<nvmlProcessUtilizationSample_t>> samples =
      nvml_->session.process_utilization(gpu.handle, since);
  if (!samples.is_ok()) {
    ++stats_.nvml_errors;
    note(samples.status().with_context("per-process utilisation of " + gpu.uuid));
    return;
  }
  ++stats_.windows;

  // Each sample: its GPU time in the window and the owner word of its host process.
  struct Busy {
    uint64_t ns;
    std::optional<uint64_t> owner;
  };
  std::vector<Busy> busy;
  busy.reserve(samples->size());
  uint64_t total_ns = 0;
  unsigned long long newest = since;
  for (const nvmlProcessUtilizationSample_t& sample : *samples) {
    if (sample.timeStamp <= since) continue;
    const unsigned long long window_us = sample.timeStamp - since;
    const uint64_t ns = static_cast<uint64_t>(std::min(sample.smUtil, 100u)) * window_us * 10;
    if (sample.timeStamp > newest) newest = sample.timeStamp;
    busy.push_back({ns, owner_of(static_cast<int>(sample.pid))});
    total_ns += ns;
  }
  gpu.last_seen_us = newest > since ? newest : now_us;

  // A process in no share we know: maybe one that joined a share since the last read. Re-read
  // the usage pages (at most once per pass); a process still in none is remembered until the
  // next rescan, so that processes outside every share cost no re-read each pass.
  auto in_a_share = [this](uint64_t owner) TESSERA_REQUIRES(mutex_) {
    return std::any_of(shares_.begin(), shares_.end(), [owner](const auto& share) {
      return share->measured_by_agent() && share->owns(owner);
    });
  };
  for (const Busy& b : busy) {
    if (!b.owner || strangers_.count(*b.owner) || in_a_share(*b.owner)) continue;
    if (!reread) {
      ++stats_.usage_rereads;
      for (auto& share : shares_)
        if (share->measured_by_agent()) read_owners(*share);
      reread = true;
      if (in_a_share(*b.owner)) continue;
    }
    strangers_.insert(*b.owner);
  }

  // Publish to every agent-measured share with this GPU. A process whose owner word is in
  // several shares' pages (only a forged slot can do that) is charged to each of them: forging
  // costs the forger, it cannot move a share's time elsewhere.
  const uint64_t stamp = monotonic_ns();
  uint64_t attributed_ns = 0;
  for (const Busy& b : busy)
    if (b.owner && in_a_share(*b.owner)) attributed_ns += b.ns;
  stats_.unattributed_ns += total_ns - attributed_ns;
  for (auto& share : shares_) {
    if (!share->measured_by_agent()) continue;
    for (uint32_t d = 0; d < share->device_count(); ++d) {
      const char* uuid = share->limits->devices[d].uuid;
      if (strnlen(uuid, share::kUuidBytes) != gpu.uuid.size() ||
          std::memcmp(uuid, gpu.uuid.data(), gpu.uuid.size()) != 0)
        continue;
      uint64_t share_ns = 0;
      for (const Busy& b : busy)
        if (b.owner && share->owns(*b.owner)) share_ns += b.ns;
      share::LimitsPage::Measured& m = share->limits->measured[d];
      // Cumulative, continued from what the page holds: an agent restart does not send the
      // counters backwards (the shim would re-prime, losing a window).
      m.share_busy_ns.fetch_add(share_ns, std::memory_order_relaxed);
      m.others_busy_ns.fetch_add(total_ns - share_ns, std::memory_order_relaxed);
      m.sampled_at_ns.store(stamp, std::memory_order_release);  // last: readers see the sums
      ++stats_.publications;
      if (share_ns > 0) share->active_until[gpu.uuid] = now + options_.priority_hold;
    }
  }
}

// Why the slots of a container-writable page may steer the other shares: each share's figure
// comes from its own page only, so no share can raise or lower another's; per slot it only grows
// (a figure that goes down is not counted, and the slot counts on from its highest), so no share
// claims negative time; and a share's growth in a window is cut to the window's wall time. What a
// share gains by a forged figure is what really running kernels for that time would give it: it
// counts as active, so it reserves its own request (guaranteed to it anyway) in the others' spare
// parts and, if its priority is higher, makes lower shares yield; its own spare part depends on
// the others' activity, not on its own figure. Hiding its time only costs itself: the others are
// then given its request, and its own shim's quota is measured from the same slots (a tenant who
// stops its own shim's accounting is the out-of-band checks' business).
void GpuTimeMeter::read_timed_slots(Share& share, uint64_t timed, uint64_t now_ns) {
  share.timed_ns.fill(0);
  const share_folder::UsagePageCopy page = share_folder::read_usage_page(share.dir + "/usage");
  if (!page.usable()) {
    share.slot_marks.clear();  // a bad page counts nothing; the next good read primes again
    return;
  }
  const bool primed = !share.slot_marks.empty();
  const uint64_t window_ns =
      primed && now_ns > share.slots_read_ns ? now_ns - share.slots_read_ns : 0;
  if (!primed) share.slot_marks.assign(share::kMaxSlots, Share::SlotMark{});
  share.slots_read_ns = now_ns;
  for (const share_folder::SlotCopy* slot : page.counted_slots()) {
    Share::SlotMark& mark = share.slot_marks[slot->index];
    uint64_t grown = 0;
    if (slot->generation != mark.generation) {
      grown = slot->gpu_busy_ns;  // claimed again: its figure starts from 0 at the claim
      mark = {slot->generation, slot->gpu_busy_ns};
    } else if (slot->gpu_busy_ns > mark.busy_ns) {
      grown = slot->gpu_busy_ns - mark.busy_ns;
      mark.busy_ns = slot->gpu_busy_ns;
    } else if (slot->gpu_busy_ns < mark.busy_ns) {
      ++stats_.slot_figures_refused;  // went down: nothing counted, the highest stays the mark
    }
    if (!primed || grown == 0) continue;
    // As the shim's OwnSource: a process whose contexts are on one timed device of the share
    // launched there only; otherwise each timed device is charged all of it.
    const uint32_t contexts = slot->contexts;
    const uint32_t count = share::contexts_count(contexts);
    const uint32_t on = share::contexts_device(contexts);
    const bool one_device = count > 0 && count != share::kContextsUnmeasurable &&
                            on < share::kMaxDevices && ((timed >> on) & 1u) != 0;
    for (uint32_t d = 0; d < share::kMaxDevices; ++d)
      if (((timed >> d) & 1u) != 0 && (!one_device || d == on))
        share.timed_ns[d] = share_folder::saturating_add(share.timed_ns[d], grown);
  }
  for (uint64_t& ns : share.timed_ns)
    if (ns > window_ns) {
      ++stats_.slot_figures_refused;
      ns = window_ns;
    }
}

// Why a share's pending file may steer the split: a forged span or record (up to every record of
// its file pending all the time) makes the forger look pending more, so the forger is charged more
// and the shares pending beside it less. At worst the others are charged so little that their
// gates stay open and the instance time-slices among them as it would with no quota: no share is
// given less than an equal turn of the device, and the forger pays with its own time. Hiding its
// spans only costs the forger its place in the split (the others are then charged their whole
// pending time meanwhile), as hiding its slot figures does.
void GpuTimeMeter::measure_by_slots(Gpu& gpu, Clock::time_point now, Problems& problems) {
  ++stats_.timed_windows;
  // The agent-measured shares on this device, with the device's index in their pages.
  struct OnDevice {
    Share* share;
    uint32_t device;
    bool split = false;  // its pending file was taken: charged its part of the split
    int first = 0;       // its processes' numbers in the split: [first, first + count)
    int count = 0;
    int64_t late_ns = 0;  // its spans published after their window: charged in whole
  };
  std::vector<OnDevice> on;
  for (auto& share : shares_) {
    if (!share->measured_by_agent()) continue;
    for (uint32_t d = 0; d < share->device_count(); ++d) {
      const char* uuid = share->limits->devices[d].uuid;
      if (std::string_view(uuid, strnlen(uuid, share::kUuidBytes)) == gpu.uuid)
        on.push_back({share.get(), d});
    }
  }
  // A share with no compute setting here times its launches only when asked: while a limited share
  // is beside it, so that the split sees its turns too (else the limited share would be charged
  // them). The shim looks again when the generation moves.
  auto limited = [](const OnDevice& o) {
    return share::device_limited(*o.share->limits, o.device);
  };
  const size_t limited_count = static_cast<size_t>(std::count_if(on.begin(), on.end(), limited));
  for (const OnDevice& o : on) {
    const bool ask = !limited(o) && limited_count > 0;
    const uint64_t bit = 1ull << o.device;
    std::atomic<uint64_t>& mask = o.share->limits->time_launches_mask;
    const uint64_t before = ask ? mask.fetch_or(bit, std::memory_order_acq_rel)
                                : mask.fetch_and(~bit, std::memory_order_acq_rel);
    if (((before & bit) != 0) != ask) {
      o.share->limits->generation.fetch_add(1, std::memory_order_acq_rel);
      ++stats_.time_launches_changes;
    }
  }
  // The split's window: (the last one's end, now - lag]. The first look only marks where the
  // records stand.
  const int64_t to = static_cast<int64_t>(monotonic_ns()) - share::kPendingLag;
  const int64_t from = gpu.split_to_ns;
  const bool window = from > 0 && to > from;
  if (!pending_page_) pending_page_ = std::make_unique<share::PendingPage>();
  spans_.clear();
  int processes = 0;
  for (OnDevice& o : on) {
    Share& share = *o.share;
    const share_folder::PendingPageRead read =
        share_folder::read_pending_page(share.dir, gpu.uuid, *pending_page_);
    if (!read.usable() || pending_page_->overflowed != 0) {
      // No file (none of its processes timed a launch here, or an older shim), or one that cannot
      // be taken for all of its processes' time: what its launches spanned, as before.
      if (read.problem != share_folder::UsageProblem::kMissing) {
        ++stats_.pending_refused;
        problems.push_back(failed_precondition(
            read.usable() ? "pending file of share " + share.dir + " on " + gpu.uuid +
                                " is full (more processes than records): its spans are not all "
                                "there, it is charged what its launches spanned"
                          : read.message));
      }
      share.seen_records.erase(gpu.uuid);
      continue;
    }
    o.split = true;
    o.first = processes;
    auto& seen = share.seen_records[gpu.uuid];
    for (int r = 0; r < share::kPendingRecords; ++r) {
      const share::PendingRecord& record = pending_page_->records[r];
      // A record first seen now (or taken by another process): its spans so far are not late.
      const uint64_t since = seen[r].process == record.process ? seen[r].written : record.written;
      seen[r] = {record.process, record.written};
      if (record.process == 0 || !window) continue;
      const size_t at = spans_.size();
      spans_.resize(at + share::kPendingSpans);
      const int taken = share::take_spans(record, since, from, to, processes, spans_.data() + at,
                                          share::kPendingSpans, &o.late_ns);
      spans_.resize(at + static_cast<size_t>(taken));
      ++processes;
    }
    o.count = processes - o.first;
  }
  std::vector<int64_t> parts(static_cast<size_t>(processes), 0);
  if (window && processes > 0) {
    edges_.resize(2 * spans_.size());
    std::vector<int> depth(static_cast<size_t>(processes));
    std::vector<int64_t> mark(static_cast<size_t>(processes));
    share::equal_parts(spans_.data(), static_cast<int>(spans_.size()), from, to, processes,
                       edges_.data(), depth.data(), mark.data(), parts.data());
    ++stats_.split_windows;
  }
  if (to > from) gpu.split_to_ns = to;

  // Each share's figure: its part of the split (its late spans in whole, up to
  // share::kPendingLateCap), or its slot growth; "others" is the sum of the other shares' figures.
  auto figure_of = [&](const OnDevice& o) -> uint64_t {
    if (!o.split) return o.share->slot_marks.empty() ? 0 : o.share->timed_ns[o.device];
    int64_t part = std::clamp<int64_t>(o.late_ns, 0, share::kPendingLateCap);
    for (int p = o.first; p < o.first + o.count; ++p) part += parts[static_cast<size_t>(p)];
    return static_cast<uint64_t>(part);
  };
  uint64_t total_ns = 0;
  for (const OnDevice& o : on) total_ns = share_folder::saturating_add(total_ns, figure_of(o));
  const uint64_t stamp = monotonic_ns();
  for (const OnDevice& o : on) {
    Share& share = *o.share;
    const uint64_t share_ns = figure_of(o);
    share::LimitsPage::Measured& m = share.limits->measured[o.device];
    // Cumulative, as on a measured GPU. Where the split bit is set the shim charges these sums;
    // elsewhere its OwnSource reads its own slots and these are for the reports.
    m.share_busy_ns.fetch_add(share_ns, std::memory_order_relaxed);
    m.others_busy_ns.fetch_add(total_ns > share_ns ? total_ns - share_ns : 0,
                               std::memory_order_relaxed);
    m.sampled_at_ns.store(stamp, std::memory_order_release);
    const uint64_t bit = 1ull << o.device;
    if (o.split)
      share.limits->split_mask.fetch_or(bit, std::memory_order_acq_rel);
    else
      share.limits->split_mask.fetch_and(~bit, std::memory_order_acq_rel);
    ++stats_.publications;
    // Active: it used the device, or its processes were pending there (charged in a later window).
    if (share_ns > 0 || (!share.slot_marks.empty() && share.timed_ns[o.device] > 0))
      share.active_until[gpu.uuid] = now + options_.priority_hold;
  }
}

// Every agent-measured share's yield_mask (bit d set while another agent-measured share of higher
// priority is active on the share's device d) and spare_percent (its part of the spare time among
// the agent-measured shares of its priority active there: each reserves its request). Activity
// decays after the hold even when a GPU stops answering, so a lost GPU never keeps a share closed
// or its request reserved.
void GpuTimeMeter::publish_classes(Clock::time_point now) {
  // A share's claim on the GPU named `uuid` (none when it does not name it).
  auto claim_on = [](const Share& share, const std::string& uuid) -> std::optional<CoresClaim> {
    for (uint32_t d = 0; d < share.device_count(); ++d) {
      const share::DeviceLimits& device = share.limits->devices[d];
      if (strnlen(device.uuid, share::kUuidBytes) == uuid.size() &&
          std::memcmp(device.uuid, uuid.data(), uuid.size()) == 0)
        return CoresClaim{device.cores_request.load(std::memory_order_acquire),
                          device.cores_limit.load(std::memory_order_acquire)};
    }
    return std::nullopt;
  };
  std::vector<CoresClaim> others;
  for (auto& share : shares_) {
    if (!share->measured_by_agent()) continue;
    const int rank = share->priority_rank();
    uint64_t mask = 0;
    for (uint32_t d = 0; d < share->device_count(); ++d) {
      const char* uuid = share->limits->devices[d].uuid;
      const std::string name(uuid, strnlen(uuid, share::kUuidBytes));
      if (name.empty()) continue;
      bool higher_busy = false;
      others.clear();
      for (const auto& other : shares_) {
        if (other.get() == share.get() || !other->measured_by_agent() ||
            !other->active_on(name, now))
          continue;
        const int other_rank = other->priority_rank();
        if (other_rank > rank) higher_busy = true;
        if (other_rank != rank) continue;  // a lower one yields to this share: it reserves nothing
        if (const std::optional<CoresClaim> claim = claim_on(*other, name))
          others.push_back(*claim);
      }
      if (higher_busy) mask |= 1ull << d;
      const CoresClaim own{share->limits->devices[d].cores_request.load(std::memory_order_acquire),
                           share->limits->devices[d].cores_limit.load(std::memory_order_acquire)};
      const uint32_t spare = spare_part(own, others);
      if (share->limits->requests[d].spare_percent.exchange(spare, std::memory_order_acq_rel) !=
          spare)
        ++stats_.spare_changes;
    }
    if (share->limits->yield_mask.exchange(mask, std::memory_order_acq_rel) != mask)
      ++stats_.yield_changes;
  }
}

}  // namespace tessera::agent
