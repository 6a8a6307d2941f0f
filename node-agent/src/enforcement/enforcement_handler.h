// What the agent does with a finding (model/finding.h): one log line (kind, pid, share, claim, pod,
// GPU, detail), a count per kind (tessera_findings_total), and under the share's policy `kill` a
// SIGKILL of the offending process - only of a pid proven, just before the signal, to be that
// share's process with the start time the finding saw (so a reused pid, or a process of another
// share, is never signalled). The out-of-band checker and the eBPF watcher both hand their
// findings here. Thread-safe.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "model/finding.h"
#include "tessera/thread_annotations.h"

namespace tessera::agent {

// Findings counted per kind, from the agent's start (the metrics read them).
class FindingCounters {
 public:
  void add(FindingKind kind) { counts_[index(kind)].fetch_add(1, std::memory_order_relaxed); }
  uint64_t count(FindingKind kind) const {
    return counts_[index(kind)].load(std::memory_order_relaxed);
  }

 private:
  static size_t index(FindingKind kind) { return static_cast<size_t>(kind); }
  std::array<std::atomic<uint64_t>, std::size(kAllFindingKinds)> counts_{};
};

// Kinds whose offender is killed under `kill`: the share is over its limits or bypasses the
// shim. A lying or corrupt usage page is repaired and reported only (the repair restores the
// limit; the kill follows if the share then is over it).
constexpr bool kill_worthy(FindingKind kind) {
  return kind == FindingKind::kOverMemoryLimit || kind == FindingKind::kUnshimmedProcess ||
         kind == FindingKind::kOverCoresLimit;
}

// Kinds whose offender is killed whatever the policy: a reclaim eviction takes back memory a
// share borrowed (its bytes above its request), as the share's limit lent them.
constexpr bool killed_regardless(FindingKind kind) {
  return kind == FindingKind::kReclaimEviction;
}

struct EnforcementHandlerOptions {
  vgpu_config::EnforcementPolicy default_policy =
      vgpu_config::EnforcementPolicy::kReport;  // --enforcement-default
  // The share's own policy (its VgpuConfig `enforcement`), nullopt: the default.
  std::function<std::optional<vgpu_config::EnforcementPolicy>(const std::string& share)>
      share_policy;
  // True when host process `pid`, started at `start_time` (/proc/<pid>/stat field 22), is a
  // process of `share` now (the checker's mapping: the share's usage page or its pod's cgroup).
  // Without it nothing is killed.
  std::function<bool(int pid, uint64_t start_time, const std::string& share)> belongs;
  std::string proc_root = "/proc";
  // Where the log lines go (tests capture them); null: standard error.
  std::function<void(const std::string&)> log;
  // Tests: replaces the signal (pidfd_send_signal, or kill where pidfds are missing).
  std::function<int(int pid)> send_kill;
  // Handed every finding once the policy acted, its detail ending in what it did ("; policy
  // kill: killed (SIGKILL)"): the local API's event stream. Null: none.
  FindingHandler* then = nullptr;
};

class EnforcementHandler final : public FindingHandler {
 public:
  explicit EnforcementHandler(EnforcementHandlerOptions options);

  // `finding.host_pid_start_time` must be set for a kill (0: report only).
  void handle(const Finding& finding) override;

  const FindingCounters& counters() const { return counters_; }
  uint64_t kills() const { return kills_.load(std::memory_order_relaxed); }
  // Processes killed under reclaim_eviction, per GPU UUID, since the start
  // (tessera_reclaim_evictions_total).
  std::map<std::string, uint64_t> reclaim_evictions() const TESSERA_EXCLUDES(kill_mutex_);
  vgpu_config::EnforcementPolicy policy_of(const std::string& share) const;
  // What a share whose VgpuConfig names no policy gets (--enforcement-default).
  vgpu_config::EnforcementPolicy default_policy() const { return options_.default_policy; }

 private:
  // Kills `pid` if it is still the process the finding saw and `share`'s; what was done.
  std::string kill_offender(const Finding& finding) TESSERA_EXCLUDES(kill_mutex_);

  EnforcementHandlerOptions options_;
  FindingCounters counters_;
  std::atomic<uint64_t> kills_{0};
  mutable Mutex kill_mutex_;  // one proof-and-signal at a time
  std::map<std::string, uint64_t> evictions_
      TESSERA_GUARDED_BY(kill_mutex_);  // reclaim_evictions()
  // The processes this handler killed (pid, start time, the finding's kind), the latest last: a
  // later finding about one says so instead of failing the proof of a process that is gone.
  struct Killed {
    int pid;
    uint64_t start_time;
    FindingKind kind;
  };
  std::deque<Killed> killed_ TESSERA_GUARDED_BY(kill_mutex_);
};

}  // namespace tessera::agent
