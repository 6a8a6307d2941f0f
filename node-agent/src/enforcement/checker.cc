#include "enforcement/checker.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <set>
#include <string_view>

#include "enforcement/reclaim.h"
#include "tessera/file_io.h"
#include "tessera/log.h"
#include "tessera/share_folder/snapshot.h"
#include "tessera/share_folder/usage_repair.h"
#include "tessera/share_region.h"
#include "tessera/unique_fd.h"
#include "usage/problems.h"

namespace tessera::agent {
namespace {

std::string mib(uint64_t bytes) {
  return std::to_string(bytes >> 20) + " MiB";
}

uint64_t base_owner(uint64_t owner) {
  return owner & ~share::kOwnerReclaiming;
}

// The counter `counter` of a device copy.
uint64_t& counter_in(share_folder::ComputeDeviceCopy& device,
                     share_folder::ComputeRepair::Counter counter) {
  switch (counter) {
    case share_folder::ComputeRepair::Counter::kBusy:
      return device.busy_ns;
    case share_folder::ComputeRepair::Counter::kOthersBusy:
      return device.others_busy_ns;
    case share_folder::ComputeRepair::Counter::kClosed:
      break;
  }
  return device.closed_ns;
}

// What is impossible between two whole readings of a compute area `elapsed` apart: a cumulative
// counter the shim only adds to went back, or the gate's closed time grew by more than the time
// that passed (+ `slack`: the shim writes at its own period). GPU time may outrun the wall clock
// (processes of an MPS share run side by side), so only its going back is a lie. "" when none.
// Each lying counter also goes into `repair`: back to its value `before` (the last sound reading).
std::string compute_lies(
    const std::array<share_folder::ComputeDeviceCopy, share::kMaxDevices>& before,
    const std::array<share_folder::ComputeDeviceCopy, share::kMaxDevices>& now,
    std::chrono::nanoseconds elapsed, std::chrono::nanoseconds slack,
    share_folder::ComputeRepair& repair) {
  using Counter = share_folder::ComputeRepair::Counter;
  const uint64_t most = static_cast<uint64_t>(std::max<int64_t>(0, (elapsed + slack).count()));
  std::string lies;
  for (size_t d = 0; d < now.size(); ++d) {
    const std::pair<Counter, std::pair<uint64_t, uint64_t>> counters[] = {
        {Counter::kBusy, {before[d].busy_ns, now[d].busy_ns}},
        {Counter::kOthersBusy, {before[d].others_busy_ns, now[d].others_busy_ns}},
        {Counter::kClosed, {before[d].closed_ns, now[d].closed_ns}}};
    for (const auto& [counter, values] : counters) {
      const auto [was, is] = values;
      const std::string_view name = share_folder::compute_counter_name(counter);
      std::string lie;
      if (is < was) {
        lie = "went back from " + std::to_string(was) + " to " + std::to_string(is);
      } else if (counter == Counter::kClosed && is - was > most) {
        lie = "grew by " + std::to_string(is - was) + " in " + std::to_string(elapsed.count()) +
              " ns";
      }
      if (lie.empty()) continue;
      lies += std::string(lies.empty() ? "" : "; ") + "compute area device " + std::to_string(d) +
              " " + std::string(name) + " " + lie;
      repair.counters.push_back({static_cast<uint32_t>(d), counter, is, was});
    }
  }
  return lies;
}

}  // namespace

// ---- OutOfBandChecker ---------------------------------------------------------------------------

OutOfBandChecker::OutOfBandChecker(CheckerOptions options,
                                   std::function<std::shared_ptr<const NodeObservation>()> observe,
                                   FindingHandler& handler, Clock& clock)
    : options_(std::move(options)), observe_(std::move(observe)), handler_(handler), clock_(clock) {
  if (options_.interval.count() <= 0) options_.interval = std::chrono::milliseconds(1000);
}

OutOfBandChecker::OutOfBandChecker(CheckerOptions options,
                                   std::function<std::vector<CheckedShare>()> shares,
                                   GpuProcessSource& gpus, FindingHandler& handler, Clock& clock)
    : OutOfBandChecker(std::move(options), nullptr, handler, clock) {
  own_shares_ = std::move(shares);
  ObserverOptions observing;
  observing.proc_root = options_.proc_root;
  observing.shares = own_shares_;
  if (options_.node_gpus)
    observing.devices = [node_gpus = options_.node_gpus] {
      std::vector<NodeDevice> devices;
      for (const std::string& uuid : node_gpus()) devices.push_back({"", uuid, 0, 0});
      return devices;
    };
  own_observer_ = std::make_unique<Observer>(std::move(observing), &gpus, clock_);
  observe_ = [this] { return own_observer_->observe(); };
}

OutOfBandChecker::~OutOfBandChecker() {
  stop();
}

Status OutOfBandChecker::start() {
  if (loop_) return failed_precondition("the out-of-band checks are already running");
  TESSERA_ASSIGN_OR_RETURN(
      loop_,
      PeriodicLoop::start(
          clock_, options_.interval, [this] { check_once(); }, PeriodicLoop::FirstTick::kAtOnce),
      with_context("cannot start the out-of-band checks"));
  if (options_.reclaim_watch.count() > 0) {
    auto watch = PeriodicLoop::start(clock_, options_.reclaim_watch, [this] { watch_reclaim(); });
    if (!watch.is_ok()) {
      loop_.reset();
      return watch.status().with_context("cannot start the reclaim watch");
    }
    watch_ = std::move(watch).value();
  }
  return Status::ok();
}

void OutOfBandChecker::stop() {
  watch_.reset();
  loop_.reset();
}

// Reads each share folder's reclaim request (the usage page's header bytes 20-47, pread, never
// through a symlink or a FIFO) and asks the pass loop for a pass at once when one is new.
void OutOfBandChecker::watch_reclaim() {
  std::set<std::string> folders;
  {
    MutexLock lock(last_mutex_);
    for (const CheckedShare& share : last_shares_) folders.insert(share.folder);
  }
  std::erase_if(watched_, [&](const auto& seen) { return folders.count(seen.first) == 0; });
  constexpr size_t kFrom = offsetof(share::UsagePage, reclaim_device);
  constexpr size_t kBytes = offsetof(share::UsagePage, reserved0) - kFrom;
  for (const std::string& folder : folders) {
    UniqueFd fd;
    if (open_file((folder + "/usage").c_str(), O_RDONLY | O_NONBLOCK, FileSource::kUntrusted, fd) !=
        0)
      continue;
    unsigned char header[kBytes];
    if (::pread(fd.get(), header, kBytes, kFrom) != static_cast<ssize_t>(kBytes)) continue;
    uint64_t bytes = 0, owner = 0, at = 0;
    std::memcpy(&bytes, header + offsetof(share::UsagePage, reclaim_bytes) - kFrom, 8);
    std::memcpy(&owner, header + offsetof(share::UsagePage, reclaim_owner) - kFrom, 8);
    std::memcpy(&at, header + offsetof(share::UsagePage, reclaim_at_ns) - kFrom, 8);
    if (bytes == 0) {
      watched_.erase(folder);
      continue;
    }
    auto [seen, fresh] = watched_.try_emplace(folder, owner, at);
    if (!fresh && seen->second == std::pair{owner, at}) continue;
    seen->second = {owner, at};
    watch_pending_ = true;
  }
  const Clock::time_point now = clock_.now();
  if (!watch_pending_ || !loop_ ||
      (watch_triggered_ && now - *watch_triggered_ < options_.reclaim_pass_gap))
    return;
  watch_pending_ = false;
  watch_triggered_ = now;
  loop_->tick_now();
}

uint64_t OutOfBandChecker::loop_passes() const {
  return loop_ ? loop_->ticks() : 0;
}

bool OutOfBandChecker::wait_for_loop_passes(uint64_t count,
                                            std::chrono::milliseconds timeout) const {
  return loop_ && loop_->wait_for_ticks(count, timeout);
}

CheckerStats OutOfBandChecker::stats() const {
  MutexLock lock(mutex_);
  return stats_;
}

bool OutOfBandChecker::due(const EpisodeKey& key, Clock::time_point now, Clock::duration grace) {
  auto [it, fresh] = episodes_.try_emplace(key, Episode{now, false, true});
  Episode& episode = it->second;
  episode.seen = true;
  if (episode.reported || now - episode.since < grace) return false;
  episode.reported = true;
  return true;
}

std::vector<Finding> OutOfBandChecker::check_once() {
  std::shared_ptr<const NodeObservation> observation = observe_();
  auto judgment = std::make_shared<const Judgment>(judge(*observation));
  if (options_.judged) options_.judged(std::move(observation), judgment);
  return judgment->findings;
}

Judgment OutOfBandChecker::judge(const NodeObservation& observation) {
  Judgment judgment;
  {
    MutexLock lock(mutex_);
    judgment = pass(observation);
  }
  {
    MutexLock lock(last_mutex_);
    last_ = std::make_shared<const Judgment>(judgment);
    last_shares_ = observation.shares;
  }
  // Outside the lock: the handler's proof before a kill calls belongs(), which takes it.
  for (const Finding& finding : judgment.findings) handler_.handle(finding);
  return judgment;
}

std::shared_ptr<const Judgment> OutOfBandChecker::last_judgment() const {
  MutexLock lock(last_mutex_);
  return last_;
}

bool OutOfBandChecker::belongs(int pid, uint64_t start_time, const std::string& share_name) {
  // The prepared shares now (the checks' own list), or as the last pass judged them.
  std::vector<CheckedShare> shares;
  if (own_shares_) {
    shares = own_shares_();
  } else {
    MutexLock lock(last_mutex_);
    shares = last_shares_;
  }
  const auto share = std::find_if(shares.begin(), shares.end(),
                                  [&](const CheckedShare& s) { return s.name == share_name; });
  if (share == shares.end()) return false;
  // Read afresh, not through the pass's cache.
  ProcessMap fresh(options_.proc_root);
  fresh.begin_pass();
  const ProcessFacts* facts = fresh.lookup(pid);
  if (!facts || facts->start_time != start_time) return false;
  if (facts->pod_uid)
    for (const PodRef& pod : share->pods)
      if (pod.uid == *facts->pod_uid) return true;
  if (!facts->owner) return false;
  if (share_folder::read_usage_page(share->folder + "/usage").owns(*facts->owner)) return true;
  // Its page wiped since a pass read its owner word there (the start time is in the word).
  MutexLock lock(mutex_);
  const auto known = page_members_.find(share->folder);
  return known != page_members_.end() && known->second.count(*facts->owner) != 0;
}

// A pod the claim has is not unknown any more: should a stale read drop it from the checkpoint
// later, an answer about it is asked for afresh, not taken from before.
OutOfBandChecker::PodVerdict OutOfBandChecker::known_pod(const std::string& claim_uid,
                                                         const std::string& pod_uid) {
  if (const auto it = pods_questions_.find(claim_uid); it != pods_questions_.end())
    it->second.unknown.erase(pod_uid);
  return PodVerdict::kClaims;
}

OutOfBandChecker::PodVerdict OutOfBandChecker::pod_verdict(std::vector<CheckedShare>& shares,
                                                           const std::string& claim_uid,
                                                           const std::string& pod_uid,
                                                           Clock::time_point now) {
  auto named = [&] {
    for (const CheckedShare& share : shares)
      if (share.claim_uid == claim_uid)
        for (const PodRef& pod : share.pods)
          if (pod.uid == pod_uid) return true;
    return false;
  };
  if (named()) return known_pod(claim_uid, pod_uid);
  if (!options_.claim_pods) return PodVerdict::kOther;
  PodsQuestion& question = pods_questions_[claim_uid];
  const uint64_t first_seen = question.unknown.try_emplace(pod_uid, stats_.passes).first->second;
  // An answer got in the pass that first saw the pod or later (after what the pass read) left it
  // out: final, as a pod is reserved before it runs, so a process of it cannot predate that.
  if (question.answered_pass >= first_seen) return PodVerdict::kOther;
  if (question.asked && now - *question.asked < options_.claim_pods_interval)
    return PodVerdict::kUndecided;
  question.asked = now;
  ++stats_.claim_pods_asked;
  Result<std::vector<PodRef>> pods = options_.claim_pods(claim_uid);
  if (!pods.is_ok()) return PodVerdict::kUndecided;  // asked again after the interval
  question.answered_pass = stats_.passes;
  for (CheckedShare& share : shares)
    if (share.claim_uid == claim_uid) share.pods = *pods;
  return named() ? known_pod(claim_uid, pod_uid) : PodVerdict::kOther;
}

// ---- One pass, in steps -------------------------------------------------------------------------

namespace {

Finding make_finding(FindingKind kind, const CheckedShare& share, int pid, uint64_t start_time,
                     std::string detail) {
  Finding f;
  f.kind = kind;
  f.host_pid = pid;
  f.host_pid_start_time = start_time;
  f.share = share.name;
  f.claim_namespace = share.claim_namespace;
  f.claim_name = share.claim_name;
  f.claim_uid = share.claim_uid;
  std::string pods;
  for (const PodRef& pod : share.pods) pods += (pods.empty() ? "" : ",") + pod.name;
  f.pod = pods.empty() ? "" : share.claim_namespace + "/" + pods;
  f.gpu_uuid = share.uuid;
  f.detail = std::move(detail);
  return f;
}

// A folder's pages as one pass reads them (a claim's shares of several GPUs share one folder).
struct CheckedFolder {
  share_folder::UsagePageCopy page;
  // Every slot of a page read whole (above the high-water mark too) that holds an owner or
  // bytes; none of a page that is no regular file or is truncated.
  std::vector<share_folder::SlotCopy> slots;
  std::vector<std::string> uuids;  // the limits page's devices (none without a valid page)
  uint64_t limited = 0;            // bit d: the limits page limits device d's cores (< 100 %)
  std::set<uint64_t> owners;       // live-looking slot owner words
  std::vector<const CheckedShare*> shares;
};

// A GPU's processes as NVML answered for them in this pass.
struct CheckedGpu {
  std::vector<GpuProcessMemory> memory;
  std::map<int, unsigned> busy;  // pid -> SM percent
  bool ok = false;
};

// The process's slots in a folder on device `d`: their summed figure and the first one's index.
struct SlotFigure {
  uint64_t bytes = 0;
  std::optional<uint32_t> first;
};

SlotFigure slot_figure(const CheckedFolder& folder, uint64_t owner, int d) {
  SlotFigure figure;
  for (const share_folder::SlotCopy& slot : folder.slots) {
    if (slot.owner != owner) continue;
    if (!figure.first) figure.first = slot.index;
    if (d >= 0) figure.bytes += slot.bytes[d];
  }
  return figure;
}

// A process NVML sees on a share's GPU that belongs to the share (its page or its pod).
struct Member {
  int pid;
  uint64_t owner;
  uint64_t start_time;
  uint64_t used;  // NVML's figure
  bool in_page;
  SlotFigure slot;          // its slots now (in_page), or when a pass last read them (remembered)
  bool remembered = false;  // not in the page now, in it at an earlier pass (a wiped page)
};

SlotFigure remembered_figure(const std::vector<share_folder::SlotCopy>& slots, int d) {
  SlotFigure figure;
  for (const share_folder::SlotCopy& slot : slots) {
    if (!figure.first) figure.first = slot.index;
    if (d >= 0) figure.bytes += slot.bytes[d];
  }
  return figure;
}

// Each folder's pages as the observation read them.
std::map<std::string, CheckedFolder> read_folders(const std::vector<CheckedShare>& shares,
                                                  const NodeObservation& node) {
  std::map<std::string, CheckedFolder> folders;
  for (const CheckedShare& share : shares) {
    auto [it, fresh] = folders.try_emplace(share.folder);
    CheckedFolder& folder = it->second;
    if (fresh) {
      // Every prepared share's folder is in the observation; one that is not reads as missing.
      share_folder::ShareFolderSnapshot missing;
      missing.usage.problem = share_folder::UsageProblem::kMissing;
      const share_folder::ShareFolderSnapshot* observed = node.folder(share.folder);
      const share_folder::ShareFolderSnapshot& read = observed ? *observed : missing;
      folder.page = read.usage;
      if (read.limits.valid())
        for (const share_folder::LimitsDevice& device : read.limits.devices) {
          if (device.cores_request < 100 && folder.uuids.size() < share::kMaxDevices)
            folder.limited |= 1ull << folder.uuids.size();
          folder.uuids.push_back(device.uuid);
        }
      const bool whole = folder.page.problem == share_folder::UsageProblem::kNone ||
                         folder.page.problem == share_folder::UsageProblem::kBadHeader;
      if (!whole) folder.page.high_water = 0;  // not read: nothing to judge it by
      for (const share_folder::SlotCopy& slot : folder.page.slots)
        if (whole && (slot.owner != 0 || slot.holds_bytes())) folder.slots.push_back(slot);
      for (const share_folder::SlotCopy& slot : folder.slots)
        if (slot.live()) folder.owners.insert(slot.owner);
    }
    folder.shares.push_back(&share);
  }
  return folders;
}

// Each GPU's processes as NVML answered in the observation (one it did not answer for is not ok).
std::map<std::string, CheckedGpu> read_gpus(const NodeObservation& node) {
  std::map<std::string, CheckedGpu> gpus;
  for (const auto& [uuid, observed] : node.gpus) {
    CheckedGpu& gpu = gpus[uuid];
    gpu.ok = observed.listed;
    gpu.memory = observed.memory;
    if (observed.busy_listed) gpu.busy = observed.busy;
  }
  return gpus;
}

}  // namespace

// What one pass reads once and what it decides (the steps below fill it in order).
struct OutOfBandChecker::Pass {
  const NodeObservation& node;  // what the pass judges
  Clock::time_point now;
  // Not const: a claim's pods asked for afresh (pod_verdict) replace its shares' here.
  std::vector<CheckedShare> shares;
  std::map<std::string, CheckedFolder> folders;                  // by folder path
  std::map<std::string, CheckedGpu> gpus;                        // by UUID
  std::map<std::string, share_folder::UsagePageRepair> repairs;  // by folder path
  std::vector<Finding> findings;
  Problems problems;  // what could not be checked (NVML, a repair that failed)
  std::map<std::string, std::set<int>> members;  // by UUID: the pids some share of it has
  // By share name: its processes on its GPU and its limits-page device (for reclaim).
  std::map<std::string, std::pair<std::vector<Member>, int>> share_members;
  // Per GPU: the memory of processes of no share, and of the MPS shares' daemons and servers.
  std::map<std::string, uint64_t> unaccounted, mps_servers;
};

// One share on its GPU: its folder, its page's device index and its processes.
struct OutOfBandChecker::ShareCheck {
  const CheckedShare& share;
  const CheckedGpu& gpu;
  CheckedFolder& folder;
  int device = -1;  // the share's GPU in the limits page; -1 when the page does not name it
  std::vector<Member> members;
};

Judgment OutOfBandChecker::pass(const NodeObservation& observation) {
  Pass pass{observation, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}};
  begin_pass(pass);
  pass.folders = read_folders(pass.shares, observation);
  pass.gpus = read_gpus(observation);
  for (const CheckedShare& share : pass.shares) check_share(pass, share);
  find_unaccounted(pass);
  reclaim(pass);
  check_pages(pass);
  if (options_.repair) apply_repairs(pass);
  end_pass(pass);
  Judgment judgment;
  judgment.findings = std::move(pass.findings);
  judgment.unaccounted_memory = std::move(pass.unaccounted);
  judgment.mps_server_memory = std::move(pass.mps_servers);
  return judgment;
}

void OutOfBandChecker::begin_pass(Pass& pass) {
  ++stats_.passes;
  pass.now = pass.node.at;
  for (auto& [key, episode] : episodes_) episode.seen = false;
  pass.shares = pass.node.shares;
  // What could not be observed (NVML's answers) could not be checked.
  pass.problems = pass.node.problems;
  std::erase_if(pods_questions_, [&pass](const auto& question) {
    return std::none_of(pass.shares.begin(), pass.shares.end(), [&](const CheckedShare& share) {
      return share.claim_uid == question.first;
    });
  });
}

void OutOfBandChecker::check_share(Pass& pass, const CheckedShare& share) {
  const CheckedGpu& gpu = pass.gpus[share.uuid];
  if (!gpu.ok) return;
  CheckedFolder& folder = pass.folders[share.folder];
  const auto index = std::find(folder.uuids.begin(), folder.uuids.end(), share.uuid);
  ShareCheck check{
      share,
      gpu,
      folder,
      index == folder.uuids.end() ? -1 : static_cast<int>(index - folder.uuids.begin()),
      {}};
  find_members(pass, check);
  for (const Member& member : check.members) pass.members[share.uuid].insert(member.pid);
  pass.share_members[share.name] = {check.members, check.device};
  find_slot_lies(pass, check);
  find_over_memory(pass, check);
  find_over_cores(pass, check);
}

// The processes NVML sees on the share's GPU that are the share's: in its page, or of its pod (and
// in no page of another of the pod's shares there).
void OutOfBandChecker::find_members(Pass& pass, ShareCheck& check) {
  const CheckedShare& share = check.share;
  std::vector<Member>& members = check.members;
  for (const GpuProcessMemory& process : check.gpu.memory) {
    const ProcessFacts* facts = pass.node.process(process.pid);
    if (!facts) continue;
    const bool in_page = facts->owner && check.folder.owners.count(*facts->owner) != 0;
    // In the page when a pass last read it, and no longer (the page wiped, cut or replaced): still
    // the share's, with the slots it had then; the page itself is corrupt_usage_page.
    const std::vector<share_folder::SlotCopy>* remembered = nullptr;
    if (!in_page && facts->owner)
      if (const auto known = page_members_.find(share.folder); known != page_members_.end())
        if (const auto slots = known->second.find(*facts->owner); slots != known->second.end())
          remembered = &slots->second;
    bool in_pod = false;
    if (facts->pod_uid)
      for (const PodRef& pod : share.pods) in_pod = in_pod || pod.uid == *facts->pod_uid;
    if (!in_page && !remembered && !in_pod && facts->pod_uid) {
      // A pod no share of this GPU names, of a process in no page of them: maybe a pod that
      // joined a shared claim after its prepare (the page side asks for a process in a page).
      bool anyones = false;
      for (const CheckedShare& other : pass.shares) {
        if (other.uuid != share.uuid) continue;
        for (const PodRef& pod : other.pods) anyones = anyones || pod.uid == *facts->pod_uid;
        anyones =
            anyones || (facts->owner && pass.folders[other.folder].owners.count(*facts->owner));
      }
      in_pod = !anyones && pod_verdict(pass.shares, share.claim_uid, *facts->pod_uid, pass.now) ==
                               PodVerdict::kClaims;
    }
    if (!in_page && !remembered && !in_pod) continue;
    if (!in_page && facts->pod_uid) {
      // The pod's process: in the page of another of the pod's shares of this GPU, it is
      // that share's.
      bool elsewhere = false;
      for (const CheckedShare& other : pass.shares) {
        if (&other == &share || other.uuid != share.uuid || !facts->owner) continue;
        bool same_pod = false;
        for (const PodRef& pod : other.pods) same_pod = same_pod || pod.uid == *facts->pod_uid;
        if (same_pod && pass.folders[other.folder].owners.count(*facts->owner) != 0)
          elsewhere = true;
      }
      if (elsewhere) continue;
    }
    Member member{
        process.pid, facts->owner.value_or(0), facts->start_time, process.used_bytes, in_page, {}};
    if (in_page) member.slot = slot_figure(check.folder, *facts->owner, check.device);
    if (remembered) {
      member.slot = remembered_figure(*remembered, check.device);
      member.remembered = true;
    }
    members.push_back(member);
  }
}

void OutOfBandChecker::find_slot_lies(Pass& pass, const ShareCheck& check) {
  const CheckedShare& share = check.share;
  const int d = check.device;
  for (const Member& m : check.members) {
    if (m.remembered) continue;  // no slot to judge now: the page is the finding
    if (!m.in_page) {
      if (due({FindingKind::kUnshimmedProcess, share.name, m.pid}, pass.now,
              Clock::duration::zero()))
        pass.findings.push_back(
            make_finding(FindingKind::kUnshimmedProcess, share, m.pid, m.start_time,
                         "a process of the share's pod holds " + mib(m.used) +
                             " on its GPU and has no slot in the share's usage page "
                             "(no shim, or the shim bypassed)"));
      continue;
    }
    // A process waiting for reclaim (the page's request is its own, on this device) has reserved
    // the bytes it asks for and the driver has not given them yet: its slot may say that much
    // more than NVML. (A slot above NVML only ever holds its own share back.)
    const share_folder::UsagePageCopy::ReclaimRequest& waiting = check.folder.page.reclaim;
    const uint64_t in_flight = waiting.bytes != 0 && waiting.owner == m.owner && d >= 0 &&
                                       waiting.device == static_cast<uint32_t>(d)
                                   ? waiting.bytes
                                   : 0;
    const uint64_t difference =
        m.used > m.slot.bytes ? m.used - m.slot.bytes
                              : m.slot.bytes - m.used - std::min(m.slot.bytes - m.used, in_flight);
    if (difference <= options_.memory_margin || !m.slot.first || d < 0) continue;
    // Repaired below, so seeing it again is a new lie (one episode per sighting); unrepaired
    // (report only), one per episode.
    const EpisodeKey lie{FindingKind::kUsageDisagrees, share.name, m.pid};
    if (options_.repair) episodes_.erase(lie);
    if (due(lie, pass.now, Clock::duration::zero()))
      pass.findings.push_back(
          make_finding(FindingKind::kUsageDisagrees, share, m.pid, m.start_time,
                       "its slot says " + mib(m.slot.bytes) + ", NVML says " + mib(m.used) +
                           (options_.repair ? ": NVML's figure written into the slot" : "")));
    if (options_.repair) {
      // NVML's figure into the process's first slot (its others keep theirs): the shim's later
      // frees subtract from a true figure (they never go below 0), and its next reservation is
      // checked against what the process really holds.
      const share_folder::SlotCopy* first = nullptr;
      uint64_t others = 0;
      for (const share_folder::SlotCopy& slot : check.folder.slots) {
        if (slot.owner != m.owner) continue;
        if (!first) {
          first = &slot;
        } else {
          others += slot.bytes[d];
        }
      }
      if (first)
        pass.repairs[share.folder].sets.push_back({first->index, first->owner,
                                                   static_cast<uint32_t>(d), first->bytes[d],
                                                   m.used > others ? m.used - others : 0});
    }
  }
}

void OutOfBandChecker::find_over_memory(Pass& pass, const ShareCheck& check) {
  const CheckedShare& share = check.share;
  const std::vector<Member>& members = check.members;
  uint64_t total = 0;
  for (const Member& m : members) total += m.used;
  if (!share.memory_limit || total <= *share.memory_limit + options_.memory_margin) return;
  if (!due({FindingKind::kOverMemoryLimit, share.name, 0}, pass.now, options_.memory_grace)) return;
  auto liar = [&](const Member& m) { return m.used > m.slot.bytes + options_.memory_margin; };
  bool any = false;
  for (const Member& m : members) {
    if (!liar(m)) continue;
    any = true;
    pass.findings.push_back(make_finding(FindingKind::kOverMemoryLimit, share, m.pid, m.start_time,
                                         "the share holds " + mib(total) + " (NVML) of its " +
                                             mib(*share.memory_limit) + "; this process holds " +
                                             mib(m.used) + ", its slot says " + mib(m.slot.bytes)));
  }
  // Nobody's slot lies, yet the share is over: the page was got round another way (its
  // high-water mark reset, slots hidden from the sum). The share's biggest holder is the
  // offender: whoever it is, it is this share's process.
  const auto biggest =
      std::max_element(members.begin(), members.end(),
                       [](const Member& a, const Member& b) { return a.used < b.used; });
  if (!any && biggest != members.end())
    pass.findings.push_back(make_finding(
        FindingKind::kOverMemoryLimit, share, biggest->pid, biggest->start_time,
        "the share holds " + mib(total) + " (NVML) of its " + mib(*share.memory_limit) +
            "; no slot lies, this process holds the most (" + mib(biggest->used) + ")"));
}

void OutOfBandChecker::find_over_cores(Pass& pass, const ShareCheck& check) {
  const CheckedShare& share = check.share;
  if (!share.cores || check.gpu.busy.empty()) return;
  const uint32_t allowed = std::max(*share.cores, share.cores_limit.value_or(0));
  if (allowed >= 100) return;
  unsigned used = 0;
  const Member* busiest = nullptr;
  unsigned busiest_percent = 0;
  for (const Member& m : check.members) {
    const auto it = check.gpu.busy.find(m.pid);
    if (it == check.gpu.busy.end()) continue;
    used += it->second;
    if (!busiest || it->second > busiest_percent) {
      busiest = &m;
      busiest_percent = it->second;
    }
  }
  if (used > allowed + options_.cores_margin &&
      due({FindingKind::kOverCoresLimit, share.name, 0}, pass.now, options_.cores_grace))
    pass.findings.push_back(make_finding(
        FindingKind::kOverCoresLimit, share, busiest ? busiest->pid : 0,
        busiest ? busiest->start_time : 0,
        "the share used " + std::to_string(used) + " % of the GPU, over its " +
            std::to_string(allowed) + " % (its cores limit) for longer than " +
            std::to_string(
                std::chrono::duration_cast<std::chrono::milliseconds>(options_.cores_grace)
                    .count()) +
            " ms"));
}

void OutOfBandChecker::find_unaccounted(Pass& pass) {
  // GPUs no share names are in the observation too (read_gpus): their processes are judged here.
  // The MPS shares' daemons by pid, with their GPU: they and the servers they spawned are those
  // shares' infrastructure.
  std::map<int, std::string> daemons;
  if (options_.mps_daemons)
    for (const MpsDaemon& daemon : options_.mps_daemons())
      if (daemon.pid > 0) daemons[daemon.pid] = daemon.uuid;
  auto mps_infrastructure = [&](int pid, const std::string& uuid) {
    if (daemons.empty()) return false;
    if (const auto it = daemons.find(pid); it != daemons.end()) return it->second == uuid;
    const std::optional<int> parent = parent_pid(pass.node.proc_root, pid);
    const auto it = parent ? daemons.find(*parent) : daemons.end();
    return it != daemons.end() && it->second == uuid;
  };
  std::map<std::string, uint64_t> unaccounted, mps_servers;
  for (const auto& [uuid, gpu] : pass.gpus) {
    if (!gpu.ok) continue;
    uint64_t& sum = unaccounted[uuid];
    const std::set<int>& members = pass.members[uuid];
    for (const GpuProcessMemory& process : gpu.memory) {
      if (members.count(process.pid) != 0) continue;
      const ProcessFacts* facts = pass.node.process(process.pid);
      if (!facts) continue;  // gone since NVML answered
      if (mps_infrastructure(process.pid, uuid)) {
        mps_servers[uuid] += process.used_bytes;
        continue;
      }
      // A pod that may have joined a shared claim of this GPU since its prepare: not judged until
      // the claim's pods say (pod_verdict asks at most once per claim per interval).
      bool undecided = false;
      std::string pod_name;
      if (facts->pod_uid)
        for (const CheckedShare& share : pass.shares) {
          if (share.uuid != uuid) continue;
          if (pod_verdict(pass.shares, share.claim_uid, *facts->pod_uid, pass.now) ==
              PodVerdict::kUndecided)
            undecided = true;
        }
      if (undecided) continue;
      if (facts->pod_uid)  // its name, where another GPU's share knows the pod
        for (const CheckedShare& share : pass.shares)
          for (const PodRef& pod : share.pods)
            if (pod.uid == *facts->pod_uid) pod_name = share.claim_namespace + "/" + pod.name;
      sum += process.used_bytes;
      if (!due({FindingKind::kUnaccountedProcess, uuid, process.pid}, pass.now,
               Clock::duration::zero()))
        continue;
      Finding finding;
      finding.kind = FindingKind::kUnaccountedProcess;
      finding.host_pid = process.pid;
      finding.host_pid_start_time = facts->start_time;
      finding.pod = pod_name;
      finding.pod_uid = facts->pod_uid.value_or("");
      finding.gpu_uuid = uuid;
      finding.bytes = process.used_bytes;
      finding.detail = "holds " + mib(process.used_bytes) + " on the GPU and belongs to no share " +
                       "of it (" +
                       (facts->pod_uid ? "pod " + *facts->pod_uid + ", no claim of this GPU"
                                       : std::string("no pod: a host process")) +
                       "): the shares of this GPU were promised that memory";
      pass.findings.push_back(std::move(finding));
    }
  }
  pass.unaccounted = std::move(unaccounted);
  pass.mps_servers = std::move(mps_servers);
}

std::map<std::string, uint64_t> OutOfBandChecker::unaccounted_memory() const {
  MutexLock lock(last_mutex_);
  return last_ ? last_->unaccounted_memory : std::map<std::string, uint64_t>{};
}

std::map<std::string, uint64_t> OutOfBandChecker::mps_server_memory() const {
  MutexLock lock(last_mutex_);
  return last_ ? last_->mps_server_memory : std::map<std::string, uint64_t>{};
}

void OutOfBandChecker::check_pages(Pass& pass) {
  // The owner word -> host pid of every GPU process seen: the slots' owners are looked up here
  // first, the host's processes only for the others.
  std::map<uint64_t, int> gpu_owners;
  for (const auto& [uuid, gpu] : pass.gpus)
    for (const GpuProcessMemory& process : gpu.memory)
      if (const ProcessFacts* facts = pass.node.process(process.pid); facts && facts->owner)
        gpu_owners[*facts->owner] = process.pid;
  for (const auto& [path, folder] : pass.folders) check_page(pass, path, gpu_owners);
  std::erase_if(compute_seen_,
                [&pass](const auto& seen) { return !pass.folders.count(seen.first); });
  remember_members(pass, gpu_owners);
}

// Each page's processes on a GPU as this pass leaves them: its slots that stay (not cleared), and
// those remembered from before whose owner word is nowhere in the page now (wiped, cut, replaced)
// while their process is still on a GPU. A slot the pass clears is forgotten with it.
void OutOfBandChecker::remember_members(Pass& pass, const std::map<uint64_t, int>& gpu_owners) {
  std::map<std::string, std::map<uint64_t, std::vector<share_folder::SlotCopy>>> kept;
  for (const auto& [path, folder] : pass.folders) {
    std::set<uint32_t> cleared;
    if (const auto repair = pass.repairs.find(path); repair != pass.repairs.end())
      for (const share_folder::SlotRepair::Clear& clear : repair->second.clears)
        cleared.insert(clear.index);
    std::set<uint64_t> in_page;
    auto& members = kept[path];
    for (const share_folder::SlotCopy& slot : folder.slots) {
      in_page.insert(base_owner(slot.owner));
      if (slot.live() && cleared.count(slot.index) == 0 && gpu_owners.count(slot.owner) != 0)
        members[slot.owner].push_back(slot);
    }
    if (const auto before = page_members_.find(path); before != page_members_.end())
      for (auto& [owner, slots] : before->second)
        if (in_page.count(owner) == 0 && gpu_owners.count(owner) != 0)
          members.emplace(owner, std::move(slots));
    if (members.empty()) kept.erase(path);
  }
  page_members_ = std::move(kept);
}

// The page's shape, header, high-water mark, and the slots no live process of the share owns.
void OutOfBandChecker::check_page(Pass& pass, const std::string& path,
                                  const std::map<uint64_t, int>& gpu_owners) {
  const CheckedFolder& folder = pass.folders.at(path);
  const CheckedShare& share = *folder.shares.front();
  share_folder::UsagePageRepair& repair = pass.repairs[path];
  std::string corrupt;
  auto add = [&corrupt](const std::string& what) {
    corrupt += (corrupt.empty() ? "" : "; ") + what;
  };
  switch (folder.page.problem) {
    case share_folder::UsageProblem::kMissing:
    case share_folder::UsageProblem::kNone:
      break;
    case share_folder::UsageProblem::kSymlink:
    case share_folder::UsageProblem::kNotRegular:
    case share_folder::UsageProblem::kCannotRead:
      add(folder.page.message);
      repair.recreate = true;
      break;
    case share_folder::UsageProblem::kTruncated:
      add(folder.page.message);
      repair.extend = true;
      break;
    case share_folder::UsageProblem::kBadHeader:
      add(folder.page.message);
      repair.rewrite_header = true;
      break;
  }
  const SlotVerdicts verdicts = judge_slots(pass, path, gpu_owners, repair);
  if (verdicts.stale > 0) add(std::to_string(verdicts.stale) + " free slots hold bytes");
  if (verdicts.foreign > 0)
    add(std::to_string(verdicts.foreign) + " slots name live processes of other pods");
  const bool mark_wrong = verdicts.below_mark || folder.page.high_water > share::kMaxSlots;
  if (mark_wrong)
    add("slot_high_water is " + std::to_string(folder.page.high_water) + ", slots up to " +
        std::to_string(verdicts.sound_high) + " are in use");
  if (folder.page.problem != share_folder::UsageProblem::kMissing &&
      (mark_wrong || !repair.clears.empty() || repair.extend || repair.rewrite_header))
    repair.high_water = verdicts.sound_high;
  // The compute area against its last whole reading: each pass compares with the one before, so
  // one scribble is one sighting. Lying counters go back to that reading, and the reference is
  // what the repair writes. A page about to be reshaped has lost its compute area (a cut page, a
  // replaced one) or holds garbage there (its header too): the reference is kept for its counters.
  // Either way the gates of its limited devices close with no credit (at most the debt last
  // read): a tenant cannot reopen its gate or wipe its debt by scribbling; the meter reopens it
  // at its next tick once the share has earned GPU time.
  std::string compute;
  const auto seen = compute_seen_.find(path);
  // The bucket a closed gate keeps: no credit, and at most the debt last read.
  std::array<int64_t, share::kMaxDevices> debt{};
  if (seen != compute_seen_.end())
    for (uint32_t d = 0; d < share::kMaxDevices; ++d)
      debt[d] = std::min<int64_t>(seen->second.devices[d].tokens_ns, 0);
  const bool reshaped = repair.recreate || repair.extend || repair.rewrite_header;
  if (folder.page.problem == share_folder::UsageProblem::kNone && !reshaped) {
    std::array<share_folder::ComputeDeviceCopy, share::kMaxDevices> sound = folder.page.compute;
    if (seen != compute_seen_.end()) {
      compute = compute_lies(seen->second.devices, folder.page.compute, pass.now - seen->second.at,
                             options_.interval, repair.compute);
      for (const share_folder::ComputeRepair::SetCounter& set : repair.compute.counters)
        counter_in(sound[set.device], set.counter) = set.value;
    }
    if (!compute.empty())
      for (uint32_t d = 0; d < share::kMaxDevices; ++d)
        debt[d] = std::min(debt[d], folder.page.compute[d].tokens_ns);
    compute_seen_[path] = {pass.now, sound};
  } else if (reshaped && seen != compute_seen_.end()) {
    // Its counters (0 in a recreated or extended page, garbage under a bad header) go back to the
    // last sound reading, which stays the reference.
    for (uint32_t d = 0; d < share::kMaxDevices; ++d)
      for (const auto counter : {share_folder::ComputeRepair::Counter::kBusy,
                                 share_folder::ComputeRepair::Counter::kOthersBusy,
                                 share_folder::ComputeRepair::Counter::kClosed}) {
        share_folder::ComputeDeviceCopy is = folder.page.compute[d];
        share_folder::ComputeDeviceCopy was = seen->second.devices[d];
        if (counter_in(is, counter) != counter_in(was, counter))
          repair.compute.counters.push_back(
              {d, counter, counter_in(is, counter), counter_in(was, counter)});
      }
    seen->second.at = pass.now;
  } else {
    compute_seen_.erase(path);  // not read whole, nothing known: a fresh reference next time
  }
  if (reshaped || !compute.empty()) {
    repair.compute.close_gates = folder.limited;
    repair.compute.tokens_ns = debt;
  }
  std::string detail = corrupt.empty() ? "" : corrupt + (options_.repair ? ": repaired" : "");
  if (!compute.empty())
    detail += (detail.empty() ? "" : "; ") + compute +
              (options_.repair ? ": repaired (counters put back, limited gates closed)" : "");
  const EpisodeKey scribbled{FindingKind::kCorruptUsagePage, share.name, 0};
  if (options_.repair || !compute.empty()) episodes_.erase(scribbled);  // each sighting is new
  if (!detail.empty() && due(scribbled, pass.now, Clock::duration::zero()))
    pass.findings.push_back(make_finding(FindingKind::kCorruptUsagePage, share, 0, 0, detail));
}

// Each slot of the folder's page: kept, or cleared (into `repair`) when it holds bytes while free,
// names no live process, or names a live process of another pod.
OutOfBandChecker::SlotVerdicts OutOfBandChecker::judge_slots(
    Pass& pass, const std::string& path, const std::map<uint64_t, int>& gpu_owners,
    share_folder::UsagePageRepair& repair) {
  const CheckedFolder& folder = pass.folders.at(path);
  SlotVerdicts verdicts;
  std::set<std::string> pods;  // of every share in the folder
  for (const CheckedShare* s : folder.shares)
    for (const PodRef& pod : s->pods) pods.insert(pod.uid);
  for (const share_folder::SlotCopy& slot : folder.slots) {
    const uint64_t owner = base_owner(slot.owner);
    bool clear = false;
    if (slot.owner == 0) {
      // A free slot counts in the share's sum (every slot below the mark does): bytes there
      // block the share. No shim leaves them (it zeroes a slot's bytes before freeing it, and
      // claims a slot by its owner word first), so they are a tenant's.
      clear = true;
      ++verdicts.stale;
    } else {
      // The GPU's processes were looked up already; the host's are scanned only for others.
      auto known = gpu_owners.find(owner);
      std::optional<int> pid;
      if (known != gpu_owners.end()) {
        pid = known->second;
      } else if (const auto& live = pass.node.owners; live.count(owner) != 0) {
        pid = live.at(owner);
      }
      if (!pid) {
        clear = true;  // dead, or an owner word no process has
      } else if (!pods.empty()) {
        const ProcessFacts* facts = pass.node.process(*pid);
        if (facts && facts->pod_uid && pods.count(*facts->pod_uid) == 0) {
          // Another pod's, unless the folder's claim was reserved for it since it was
          // prepared. Undecided (no answer yet): left as it is, neither cleared nor reported.
          const PodVerdict verdict = folder_pod_verdict(pass, path, *facts->pod_uid);
          if (verdict == PodVerdict::kClaims) pods.insert(*facts->pod_uid);
          if (verdict == PodVerdict::kOther) {
            clear = true;  // a live process of another pod: a forged owner word
            ++verdicts.foreign;
          }
        }
      }
    }
    if (clear) {
      repair.clears.push_back({slot.index, slot.owner});
      continue;
    }
    if (slot.owner != 0) {
      verdicts.sound_high = std::max(verdicts.sound_high, slot.index + 1);
      if (slot.holds_bytes() && slot.index >= folder.page.high_water) verdicts.below_mark = true;
    }
  }
  return verdicts;
}

// Whether pod `pod_uid` is one that a claim of the folder's shares is reserved for: kClaims as
// soon as one claim says so, kUndecided while one has no answer yet, kOther otherwise.
OutOfBandChecker::PodVerdict OutOfBandChecker::folder_pod_verdict(Pass& pass,
                                                                  const std::string& path,
                                                                  const std::string& pod_uid) {
  const CheckedFolder& folder = pass.folders.at(path);
  PodVerdict verdict = PodVerdict::kOther;
  std::set<std::string> claims;
  for (const CheckedShare* s : folder.shares) claims.insert(s->claim_uid);
  for (const std::string& claim : claims) {
    const PodVerdict of_claim = pod_verdict(pass.shares, claim, pod_uid, pass.now);
    if (of_claim == PodVerdict::kClaims) return of_claim;
    if (of_claim == PodVerdict::kUndecided) verdict = of_claim;
  }
  return verdict;
}

void OutOfBandChecker::apply_repairs(Pass& pass) {
  for (const auto& [path, repair] : pass.repairs) {
    if (repair.empty()) continue;
    Result<share_folder::RepairOutcome> outcome = share_folder::repair_usage_page(path, repair);
    if (!outcome.is_ok()) {
      pass.problems.push_back(outcome.status());
      continue;
    }
    ++stats_.repairs;
    stats_.slots_cleared += outcome->cleared;
    stats_.figures_set += outcome->set;
  }
}

void OutOfBandChecker::end_pass(Pass& pass) {
  std::erase_if(episodes_, [](const auto& item) { return !item.second.seen; });
  stats_.process_reads = pass.node.process_reads;
  stats_.findings += pass.findings.size();
  // One log line per change of what could not be checked, not one per pass.
  const std::string problems = join_problems(pass.problems);
  if (problems != stats_.last_problem) {
    if (problems.empty()) {
      log::info("out-of-band checks running again");
    } else {
      log::warn("out-of-band checks cannot check", {{"problems", problems}});
    }
    stats_.last_problem = problems;
  }
}

// ---- Reclaim ----------------------------------------------------------------------------------

namespace {

// How long a process chosen for eviction keeps its bytes counted as coming back while NVML still
// lists it (the kill may have failed its proof): then it may be chosen again.
constexpr std::chrono::seconds kEvictionPending{10};
constexpr std::chrono::seconds kDeclineLogGap{10};

}  // namespace

// A request not acted on is said once, and at most once per share per kDeclineLogGap: a tenant
// rewriting its request cannot fill the log.
void OutOfBandChecker::decline_reclaim(const Pass& pass, const CheckedShare& share, uint64_t bytes,
                                       bool fresh, const std::string& why) {
  stats_.last_reclaim = share.name + ": " + why;
  if (!fresh) return;
  const auto logged = declines_logged_.find(share.name);
  if (logged != declines_logged_.end() && pass.now - logged->second < kDeclineLogGap) return;
  declines_logged_[share.name] = pass.now;
  log::info("reclaim request not acted on",
            {{"share", share.name}, {"gpu", share.uuid}, {"bytes", bytes}, {"reason", why}});
}

void OutOfBandChecker::reclaim(Pass& pass) {
  // Evictions done: the process left its GPU (NVML no longer lists it, or a new process has the
  // pid), or the kill did not land in time.
  std::erase_if(evictions_, [&](const auto& item) {
    const auto& [pid, eviction] = item;
    if (pass.now - eviction.at > kEvictionPending) return true;
    const auto gpu = pass.gpus.find(eviction.uuid);
    if (gpu == pass.gpus.end() || !gpu->second.ok) return false;  // not known now: kept
    const bool listed =
        std::any_of(gpu->second.memory.begin(), gpu->second.memory.end(),
                    [pid = pid](const GpuProcessMemory& process) { return process.pid == pid; });
    const ProcessFacts* facts = pass.node.process(pid);
    return !listed || !facts || facts->start_time != eviction.start_time;
  });
  std::set<std::string> asking;
  for (const CheckedShare& share : pass.shares) {
    const auto folder = pass.folders.find(share.folder);
    const auto members = pass.share_members.find(share.name);
    if (folder == pass.folders.end() || members == pass.share_members.end()) continue;
    const share_folder::UsagePageCopy::ReclaimRequest& request = folder->second.page.reclaim;
    const int device = members->second.second;
    if (request.bytes == 0 || !folder->second.page.header_valid || device < 0 ||
        request.device != static_cast<uint32_t>(device))
      continue;
    asking.insert(share.name);
    // Each request is counted and its outcome logged once (the shim keeps it up while it waits).
    const std::pair<uint64_t, uint64_t> key{request.owner, request.at_ns};
    const bool fresh = reclaim_seen_[share.name] != key;
    reclaim_seen_[share.name] = key;
    if (fresh) ++stats_.reclaim_requests;
    // The request's owner must be a live process of the share on the GPU, in its page now.
    const std::vector<Member>& own = members->second.first;
    if (std::none_of(own.begin(), own.end(),
                     [&](const Member& m) { return m.in_page && m.owner == request.owner; })) {
      decline_reclaim(pass, share, request.bytes, fresh,
                      "its owner word names no process of the share on the GPU");
      continue;
    }
    const ObservedGpu* observed = pass.node.gpu(share.uuid);
    const Result<uint64_t> free_bytes =
        observed ? observed->free_bytes : unavailable("no free-memory figure for " + share.uuid);
    if (!free_bytes.is_ok()) {
      pass.problems.push_back(free_bytes.status());
      decline_reclaim(pass, share, request.bytes, fresh,
                      "the GPU's free memory is not known: " + free_bytes.status().message());
      continue;
    }
    // The GPU's shares by the agent's figures (NVML), the processes chosen before left out and
    // their bytes counted as coming back.
    uint64_t coming_back = 0;
    for (const auto& [pid, eviction] : evictions_)
      if (eviction.uuid == share.uuid) coming_back += eviction.bytes;
    std::vector<ReclaimShare> shares;
    for (const CheckedShare& other : pass.shares) {
      if (other.uuid != share.uuid) continue;
      const auto found = pass.share_members.find(other.name);
      if (found == pass.share_members.end()) continue;
      ReclaimShare figures;
      figures.name = other.name;
      figures.request =
          other.memory_request.value_or(other.memory_limit.value_or(share::kUnlimited));
      for (const Member& m : found->second.first) {
        if (evictions_.count(m.pid) != 0) continue;
        figures.used += m.used;
        figures.processes.push_back({m.pid, m.start_time, m.used});
      }
      shares.push_back(std::move(figures));
    }
    const ReclaimPlan plan = plan_reclaim({share.name, request.bytes}, *free_bytes + coming_back,
                                          shares, options_.memory_margin);
    if (plan.victims.empty()) {
      decline_reclaim(pass, share, request.bytes, fresh, plan.reason);
      continue;
    }
    stats_.last_reclaim = share.name + ": " + plan.reason;
    const auto requester = std::find_if(
        shares.begin(), shares.end(), [&](const ReclaimShare& s) { return s.name == share.name; });
    for (const ReclaimVictim& victim : plan.victims) {
      const auto owner =
          std::find_if(pass.shares.begin(), pass.shares.end(),
                       [&](const CheckedShare& s) { return s.name == victim.share; });
      const auto figures = std::find_if(shares.begin(), shares.end(), [&](const ReclaimShare& s) {
        return s.name == victim.share;
      });
      evictions_[victim.process.pid] = {victim.process.start_time, share.uuid, victim.process.used,
                                        pass.now};
      ++stats_.reclaim_evictions;
      pass.findings.push_back(make_finding(
          FindingKind::kReclaimEviction, *owner, victim.process.pid, victim.process.start_time,
          "share " + share.name + " (claim " + share.claim_namespace + "/" + share.claim_name +
              ") is within its memory request (holds " + mib(requester->used) + " of " +
              mib(requester->request) + ") and asked for " + mib(request.bytes) + "; " +
              plan.reason + "; this process's share holds " + mib(figures->used) +
              ", above its request of " + mib(figures->request) + ", and this process " +
              mib(victim.process.used)));
      pass.findings.back().reclaimed_for = share.name;
    }
  }
  std::erase_if(reclaim_seen_, [&](const auto& seen) { return asking.count(seen.first) == 0; });
  std::erase_if(declines_logged_,
                [&](const auto& logged) { return pass.now - logged.second >= kDeclineLogGap; });
}

}  // namespace tessera::agent
