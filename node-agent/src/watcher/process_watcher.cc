#include "watcher/process_watcher.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>

#include "tessera/log.h"
#include "tessera/share_contract.h"
#include "tessera/share_region.h"

namespace tessera::agent {
namespace {

constexpr uint32_t kNvidiaMajor = 195;

std::string comm_of(const tessera_watch_event& event) {
  return std::string(event.comm, strnlen(event.comm, sizeof(event.comm)));
}

}  // namespace

std::vector<WatchedShare> StaticShareResolver::shares() const {
  MutexLock lock(mutex_);
  return shares_;
}

std::optional<WatchedShare> StaticShareResolver::share_of(int /*host_pid*/, uint64_t cgroup_id,
                                                          uint64_t watched_cgroup_id) const {
  MutexLock lock(mutex_);
  for (const WatchedShare& share : shares_) {
    for (const uint64_t id : share.cgroup_ids) {
      if (id != 0 && (id == watched_cgroup_id || id == cgroup_id)) return share;
    }
  }
  return std::nullopt;
}

void StaticShareResolver::set_shares(std::vector<WatchedShare> shares) {
  MutexLock lock(mutex_);
  shares_ = std::move(shares);
}

std::vector<uint32_t> nvidia_device_majors(const std::string& proc_devices) {
  std::vector<uint32_t> majors{kNvidiaMajor};
  std::istringstream lines(proc_devices);
  std::string line;
  bool character_devices = false;
  while (std::getline(lines, line)) {
    if (line.rfind("Character devices:", 0) == 0) {
      character_devices = true;
      continue;
    }
    if (line.rfind("Block devices:", 0) == 0) character_devices = false;
    if (!character_devices) continue;
    std::istringstream fields(line);
    uint32_t major = 0;
    std::string name;
    if (!(fields >> major >> name)) continue;
    if (name.rfind("nvidia", 0) == 0 && major != 0) majors.push_back(major);
  }
  std::sort(majors.begin(), majors.end());
  majors.erase(std::unique(majors.begin(), majors.end()), majors.end());
  return majors;
}

bool maps_show_shim(const std::string& maps) {
  std::istringstream lines(maps);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t slash = line.rfind('/');
    if (slash == std::string::npos) continue;
    if (line.compare(slash + 1, 10, "libvgpu.so") == 0) return true;
  }
  return false;
}

uint64_t event_start_ticks(const tessera_watch_event& event) {
  // /proc/<pid>/stat field 22 is the start in clock ticks (USER_HZ), truncated.
  static const long ticks_per_second = sysconf(_SC_CLK_TCK);
  const uint64_t ns_per_tick =
      1'000'000'000ull / static_cast<uint64_t>(ticks_per_second > 0 ? ticks_per_second : 100);
  return event.start_boottime_ns / ns_per_tick;
}

uint64_t event_owner(const tessera_watch_event& event) {
  return share::make_owner(event.namespace_tgid, event.pid_namespace, event_start_ticks(event));
}

ProcessWatcher::ProcessWatcher(const ShareResolver& resolver, FindingHandler& findings,
                               Clock& clock, KernelFilter* filter, Options options)
    : resolver_(resolver),
      findings_(findings),
      clock_(clock),
      filter_(filter),
      options_(std::move(options)),
      reclaimer_owner_(options_.reclaimer_owner) {
  if (reclaimer_owner_ == 0) {
    share::ProcessIdentity self;
    if (share::read_process_identity(options_.proc_root, share::kSelfPid, self) == 0) {
      reclaimer_owner_ = self.owner();
    } else {
      reclaimer_owner_ = share::make_owner(static_cast<uint32_t>(getpid()), 0, 0);
    }
  }
}

Status ProcessWatcher::refresh_shares() {
  std::vector<WatchedShare> shares = resolver_.shares();
  std::set<uint64_t> cgroups;
  bool unknown_cgroup = false;
  for (const WatchedShare& share : shares) {
    if (share.report_all_exits) unknown_cgroup = true;
    for (const uint64_t id : share.cgroup_ids)
      if (id != 0) cgroups.insert(id);
  }
  {
    MutexLock lock(mutex_);
    // Keep the mappings of shares still there (same page path), drop the others.
    for (auto it = mappings_.begin(); it != mappings_.end();) {
      const auto kept = std::find_if(shares.begin(), shares.end(), [&](const WatchedShare& s) {
        return s.id == it->first && s.usage_path == it->second.path();
      });
      it = kept == shares.end() ? mappings_.erase(it) : std::next(it);
    }
    shares_ = std::move(shares);
  }
  if (!filter_) return Status::ok();
  TESSERA_RETURN_IF_ERROR(filter_->set_watched_cgroups(cgroups));
  return filter_->set_report_all_exits(unknown_cgroup);
}

void ProcessWatcher::handle(const tessera_watch_event& event) {
  if (event.kind == TESSERA_WATCH_EXIT) {
    handle_exit(event);
  } else if (event.kind == TESSERA_WATCH_DEVICE_OPEN) {
    handle_device_open(event);
  }
}

ProcessWatcherCounters ProcessWatcher::counters() const {
  MutexLock lock(mutex_);
  return counters_;
}

share_folder::UsagePageMapping* ProcessWatcher::mapping_for(const WatchedShare& share) {
  auto found = mappings_.find(share.id);
  if (found != mappings_.end()) return &found->second;
  Result<share_folder::UsagePageMapping> opened =
      share_folder::UsagePageMapping::open(share.usage_path);
  if (!opened.is_ok()) return nullptr;  // no page yet (no process ran), or not a usage page
  return &mappings_.emplace(share.id, std::move(opened).value()).first->second;
}

void ProcessWatcher::handle_exit(const tessera_watch_event& event) {
  const uint64_t owner = event_owner(event);
  MutexLock lock(mutex_);
  ++counters_.exits;
  reported_.erase({event.host_tgid, event.start_boottime_ns});
  int cleared = 0;
  for (const WatchedShare& share : shares_) {
    share_folder::UsagePageMapping* mapping = mapping_for(share);
    if (!mapping) continue;
    Result<int> result = mapping->reclaim_owner(owner, reclaimer_owner_);
    if (!result.is_ok()) {
      log::warn("process watcher cannot use a usage page",
                {{"share", share.id}, {"error", result.status().message()}});
      mappings_.erase(share.id);  // remapped on the next exit, if the page is usable again
      continue;
    }
    if (*result > 0) {
      cleared += *result;
      log::info("process watcher reclaimed the slot of an exited process",
                {{"share", share.id}, {"pid", event.host_tgid}, {"comm", comm_of(event)}});
    }
  }
  if (cleared > 0) {
    counters_.slots_reclaimed += static_cast<uint64_t>(cleared);
    const auto now_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(clock_.now().time_since_epoch());
    const auto seen_ns = std::chrono::nanoseconds(event.timestamp_ns);
    counters_.last_reclaim_latency =
        now_ns > seen_ns ? now_ns - seen_ns : std::chrono::nanoseconds(0);
  }
}

void ProcessWatcher::handle_device_open(const tessera_watch_event& event) {
  {
    MutexLock lock(mutex_);
    ++counters_.device_opens;
    if (reported_.count({event.host_tgid, event.start_boottime_ns})) return;
  }
  const std::optional<WatchedShare> share = resolver_.share_of(
      static_cast<int>(event.host_tgid), event.cgroup_id, event.watched_cgroup_id);
  if (!share) return;
  // The process is alive (it is in an open call or just returned from one); if it is gone by
  // now, there is nothing left to act on.
  std::ifstream maps_file(options_.proc_root + "/" + std::to_string(event.host_tgid) + "/maps");
  if (!maps_file) return;
  std::ostringstream maps;
  maps << maps_file.rdbuf();
  if (maps_show_shim(maps.str())) return;

  Finding finding;
  finding.kind = FindingKind::kUnshimmedProcess;
  finding.host_pid = static_cast<int>(event.host_tgid);
  finding.host_pid_start_time = event_start_ticks(event);  // the kill policy re-checks it
  finding.share = share->id;
  finding.claim_namespace = share->claim_namespace;
  finding.claim_name = share->claim_name;
  finding.claim_uid = share->claim_uid;
  finding.pod = share->pod;
  finding.detail = "process " + std::to_string(event.host_tgid) + " (" + comm_of(event) +
                   ") opened the nvidia device " + std::to_string(event.device_major) + ":" +
                   std::to_string(event.device_minor) + " without libvgpu.so mapped";
  {
    MutexLock lock(mutex_);
    reported_.insert({event.host_tgid, event.start_boottime_ns});
    ++counters_.unshimmed_findings;
  }
  log::warn("process watcher saw an unshimmed device open",
            {{"share", share->id}, {"pid", event.host_tgid}, {"detail", finding.detail}});
  findings_.handle(finding);
}

}  // namespace tessera::agent
