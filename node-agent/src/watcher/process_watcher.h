// What the agent does with the process watcher's kernel events (process_watch_events.h), apart
// from BPF so it is tested without it: an exit of a process that owns a slot in a watched share's
// usage page clears that slot at once; an open of an nvidia device by a process of a share that
// has not mapped the shim is a Finding (kUnshimmedProcess) for the FindingHandler.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "clock/clock.h"
#include "model/finding.h"
#include "tessera/share_folder/usage_repair.h"
#include "tessera/status.h"
#include "tessera/thread_annotations.h"
#include "watcher/process_watch_events.h"

namespace tessera::agent {

// A prepared share as the watcher needs it.
struct WatchedShare {
  std::string id;          // share folder name (ShareSpec id)
  std::string usage_path;  // <share folder>/usage
  std::string claim_namespace, claim_name, claim_uid, pod;
  // v2 cgroup ids (the inode of the cgroup's folder in the unified hierarchy) of the share's
  // pods or containers: the kernel reports exits below them (and those of any process that opened
  // an nvidia device, wherever it runs).
  std::vector<uint64_t> cgroup_ids;
  // A process of the share is in no known v2 cgroup (a cgroup v1-only container, the root
  // cgroup): the kernel then reports every exit on the node.
  bool report_all_exits = false;
};

// "Which share is this process in", implemented by the agent (from its prepared shares).
class ShareResolver {
 public:
  virtual ~ShareResolver() = default;
  // Every share whose slots exits reclaim and whose cgroups the kernel watches.
  virtual std::vector<WatchedShare> shares() const = 0;
  // The share of process `host_pid` (host numbering) whose v2 cgroup is `cgroup_id`, below the
  // watched cgroup `watched_cgroup_id` (0 = in none); nullopt when it is in no share.
  virtual std::optional<WatchedShare> share_of(int host_pid, uint64_t cgroup_id,
                                               uint64_t watched_cgroup_id) const = 0;
};

// A fixed list of shares, a process matched by its watched cgroup: what the tests use, and what
// an agent that knows its shares' cgroups can hand over as is.
class StaticShareResolver final : public ShareResolver {
 public:
  explicit StaticShareResolver(std::vector<WatchedShare> shares) : shares_(std::move(shares)) {}
  std::vector<WatchedShare> shares() const override TESSERA_EXCLUDES(mutex_);
  std::optional<WatchedShare> share_of(int host_pid, uint64_t cgroup_id,
                                       uint64_t watched_cgroup_id) const override
      TESSERA_EXCLUDES(mutex_);
  void set_shares(std::vector<WatchedShare> shares) TESSERA_EXCLUDES(mutex_);

 private:
  mutable Mutex mutex_;
  std::vector<WatchedShare> shares_ TESSERA_GUARDED_BY(mutex_);
};

// The kernel side's filter (the BPF maps), behind an interface so the logic is tested without it.
class KernelFilter {
 public:
  virtual ~KernelFilter() = default;
  virtual Status set_watched_cgroups(const std::set<uint64_t>& cgroup_ids) = 0;
  virtual Status set_report_all_exits(bool report_all) = 0;
};

// The character device majors of the nvidia driver: 195 (/dev/nvidia<N>, nvidiactl,
// nvidia-modeset) and the dynamic ones /proc/devices lists for nvidia-uvm, nvidia-caps and
// other "nvidia*" drivers. `proc_devices` is the text of /proc/devices.
std::vector<uint32_t> nvidia_device_majors(const std::string& proc_devices);

// Whether the /proc/<pid>/maps text maps the shim (a file named libvgpu.so*).
bool maps_show_shim(const std::string& maps);

// The owner word (share::make_owner) of the process an event names, as the shim packed it from
// /proc: the event carries what /proc showed, so this works after /proc/<pid> is gone.
uint64_t event_owner(const tessera_watch_event& event);
// The process's start as /proc/<pid>/stat field 22 gives it (clock ticks since boot).
uint64_t event_start_ticks(const tessera_watch_event& event);

struct ProcessWatcherCounters {
  uint64_t exits = 0;               // exit events handled
  uint64_t slots_reclaimed = 0;     // slots cleared by those exits
  uint64_t device_opens = 0;        // device-open events handled
  uint64_t unshimmed_findings = 0;  // findings reported
  // Kernel event -> slot cleared, by the agent's clock, for the last exit that cleared a slot.
  std::optional<std::chrono::nanoseconds> last_reclaim_latency;
};

class ProcessWatcher {
 public:
  struct Options {
    std::string proc_root = "/proc";
    // The owner word this process marks a slot with while it clears it (its own identity);
    // 0 = read from <proc_root>/self.
    uint64_t reclaimer_owner = 0;
  };
  // `resolver`, `findings`, `clock` (whose now() must be CLOCK_MONOTONIC, as the kernel's event
  // timestamps, for the latency figure) and `filter` (may be null) outlive the watcher.
  ProcessWatcher(const ShareResolver& resolver, FindingHandler& findings, Clock& clock,
                 KernelFilter* filter, Options options);
  ProcessWatcher(const ShareResolver& resolver, FindingHandler& findings, Clock& clock,
                 KernelFilter* filter)
      : ProcessWatcher(resolver, findings, clock, filter, Options()) {}

  // Re-reads the resolver's shares: the kernel filter's cgroups, the usage pages kept mapped. The
  // agent calls it whenever its shares change (and periodically: cgroups appear with pods).
  // The resolver is asked before the watcher's lock is taken (and in handle(), after it is
  // released): the two locks never nest.
  Status refresh_shares() TESSERA_EXCLUDES(mutex_);

  // One kernel event (called on the poll thread).
  void handle(const tessera_watch_event& event) TESSERA_EXCLUDES(mutex_);

  ProcessWatcherCounters counters() const TESSERA_EXCLUDES(mutex_);

 private:
  void handle_exit(const tessera_watch_event& event) TESSERA_EXCLUDES(mutex_);
  void handle_device_open(const tessera_watch_event& event) TESSERA_EXCLUDES(mutex_);
  // The mapping of the share's page, opened on first use; null when it cannot be mapped.
  share_folder::UsagePageMapping* mapping_for(const WatchedShare& share) TESSERA_REQUIRES(mutex_);

  const ShareResolver& resolver_;
  FindingHandler& findings_;
  Clock& clock_;
  KernelFilter* filter_;
  Options options_;
  uint64_t reclaimer_owner_ = 0;

  mutable Mutex mutex_;  // handle() and refresh_shares() race
  std::vector<WatchedShare> shares_ TESSERA_GUARDED_BY(mutex_);
  // Share id -> its page.
  std::map<std::string, share_folder::UsagePageMapping> mappings_ TESSERA_GUARDED_BY(mutex_);
  // Processes already reported (host tgid, start): one finding per process, not per device.
  std::set<std::pair<uint32_t, uint64_t>> reported_ TESSERA_GUARDED_BY(mutex_);
  ProcessWatcherCounters counters_ TESSERA_GUARDED_BY(mutex_);
};

}  // namespace tessera::agent
