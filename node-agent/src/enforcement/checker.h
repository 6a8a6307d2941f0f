// The out-of-band checks: the layer that catches a tenant who does not cooperate with the shim.
// Every --check-interval (1 s) the checker judges one observation of the node (observe/: NVML's
// answer, per GPU, of which processes hold memory and how busy each was; the share folders' pages;
// every host process), returning a Judgment beside it; maps each host process to its share through
// its cgroup (the pod UID kubelet puts in the path, against the pods the claim was reserved for)
// and through the usage page's owner words; and finds:
//  - over_memory_limit: the share's processes hold more than its limit as NVML sees it (past
//    --memory-grace): the offenders are those holding more than their slot says (no shim, a
//    second driver copy, a zeroed slot);
//  - unshimmed_process: a process of the share's pod uses the share's GPU but has no slot in the
//    usage page of any of the pod's shares there;
//  - usage_disagrees: a slot says a figure NVML's figure for its process contradicts by more than
//    the margin (repaired: NVML's figure is written into the slot);
//  - corrupt_usage_page: the page is not a regular file, is short, has a header no shim writes, a
//    high-water mark below a slot in use, bytes in a free slot, or a slot of a live process of
//    another pod (repaired: see UsagePageRepair); or its compute area's cumulative counters
//    (busy_ns, others_busy_ns, closed_ns per device) went back, or the gate's closed time grew
//    by more than the time between two passes (repaired: the counters put back to the last sound
//    reading, the limited gates closed with no credit for the meter to reopen; see ComputeRepair);
//  - over_cores_limit: the share used more of the GPU than max(quota, burst) (+ a margin) for
//    longer than --cores-grace;
//  - unaccounted_process: a process on a GPU of the node that no share of it has. A share's
//    process is one of its pods, in its page, or in its page at an earlier pass (while the page
//    is wiped or unreadable its processes stay the share's: that is corrupt_usage_page). An MPS
//    share's control daemon and the MPS server it spawned (its child) are that share's
//    infrastructure (mps_server_memory()), not unaccounted.
// Slots of dead (or never living) owners are cleared without a finding: SIGKILL leaves them.
// A pod the checkpoint does not name may be the claim's all the same (kubelet prepares a shared
// claim for its first pod only): before a slot or process of such a pod counts as another pod's,
// the claim's pods are asked for afresh (CheckerOptions::claim_pods, at most once per claim per
// claim_pods_interval); until an answer given after the pod was first seen leaves it out, its
// slots are neither cleared nor reported.
// Each finding is handed to the FindingHandler once per episode (again when the condition cleared
// and came back). The pages are read with the one reader (tessera/share_folder/snapshot.h: pread
// copies, never a mapping) and repaired through tessera/share_folder/usage_repair.h.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "clock/clock.h"
#include "clock/periodic_loop.h"
#include "model/finding.h"
#include "model/share_spec.h"
#include "observe/node_observation.h"
#include "observe/observer.h"
#include "share/checkpoint.h"
#include "tessera/share_folder/snapshot.h"
#include "tessera/status.h"
#include "tessera/thread_annotations.h"
#include "usage/gpu_processes.h"

namespace tessera::share_folder {
struct UsagePageRepair;
}  // namespace tessera::share_folder

namespace tessera::agent {

// An MPS control daemon the agent started for a share (MpsBackend), as the checks see it.
struct MpsDaemon {
  std::string share;  // CheckedShare::name
  std::string uuid;   // the GPU it serves (CUDA_VISIBLE_DEVICES)
  int pid = 0;        // the daemon, checked by the backend (its pipe folder in its environment)
};

struct CheckerOptions {
  std::chrono::milliseconds interval{1000};     // --check-interval
  std::chrono::milliseconds memory_grace{0};    // --memory-grace: NVML over the limit this long
  std::chrono::milliseconds cores_grace{5000};  // --cores-grace: over the burst this long
  // NVML's figure for a process may exceed what its slot says by the context's cost the shim
  // did not charge exactly; beyond this it is a lie (or no shim).
  uint64_t memory_margin = 256ull << 20;
  uint32_t cores_margin = 10;       // percent points over max(quota, burst)
  std::string proc_root = "/proc";  // the host's (hostPID)
  bool repair = true;               // repair usage pages (off: report only)
  // The pods claim `claim_uid` is reserved for now, asked of the API server (the share manager's
  // refresh_claim_pods, which also saves them), for a pod its shares' pods do not name. An error:
  // no answer yet (asked again after the interval). Null: such a pod is another pod at once.
  std::function<Result<std::vector<PodRef>>(const std::string& claim_uid)> claim_pods;
  std::chrono::milliseconds claim_pods_interval{5000};  // per claim, on the checker's clock
  // The UUIDs of every GPU of the node: a process on one that belongs to no share of it is an
  // unaccounted_process finding (never killed). Null: only the GPUs the shares name are looked at.
  std::function<std::vector<std::string>()> node_gpus;
  // The MPS shares' running control daemons: a process NVML lists that is one, or whose parent is
  // one (the MPS server the daemon spawned for the share's clients), on that daemon's GPU is
  // infrastructure of that share. Null: no MPS shares.
  std::function<std::vector<MpsDaemon>()> mps_daemons;
  // Reclaim: how often the usage pages' headers (28 bytes each, pread) are read for a new reclaim
  // request, which then runs a pass at once instead of at the next interval; at most one such pass
  // per reclaim_pass_gap, so a tenant rewriting its request cannot make the passes run
  // back-to-back. 0: a request waits for the next pass (up to `interval`).
  std::chrono::milliseconds reclaim_watch{100};
  std::chrono::milliseconds reclaim_pass_gap{250};
  // After each pass of the loop (check_once): the observation it judged and the judgment (the
  // agent puts both on its ObservationBoard). Null: kept only for unaccounted_memory().
  std::function<void(std::shared_ptr<const NodeObservation>, std::shared_ptr<const Judgment>)>
      judged;
};

struct CheckerStats {
  uint64_t passes = 0;
  uint64_t findings = 0;
  uint64_t repairs = 0;            // usage pages repaired
  uint64_t slots_cleared = 0;      // of dead, unknown or foreign owners
  uint64_t figures_set = 0;        // slot figures set from NVML
  uint64_t process_reads = 0;      // processes read in full (new pids)
  uint64_t claim_pods_asked = 0;   // claim_pods calls
  uint64_t reclaim_requests = 0;   // reclaim requests read (each published request once)
  uint64_t reclaim_evictions = 0;  // processes chosen for eviction (reclaim_eviction findings)
  std::string last_reclaim;        // why the last request read led to what it did
  std::string last_problem;        // "" = none
};

class OutOfBandChecker {
 public:
  // Each pass judges the observation `observe` hands it (the agent's Observer: one read of the node
  // per pass for the checks and everything that reports). `handler` outlives the checker; `clock`
  // paces the loop and times the graces.
  OutOfBandChecker(CheckerOptions options,
                   std::function<std::shared_ptr<const NodeObservation>()> observe,
                   FindingHandler& handler, Clock& clock = real_clock());
  // The checks on their own (tests, the benchmark): an Observer of their own over `shares` (the
  // prepared shares), `gpus` (outlives the checker), options.proc_root and options.node_gpus.
  OutOfBandChecker(CheckerOptions options, std::function<std::vector<CheckedShare>()> shares,
                   GpuProcessSource& gpus, FindingHandler& handler, Clock& clock = real_clock());
  ~OutOfBandChecker();
  OutOfBandChecker(const OutOfBandChecker&) = delete;
  OutOfBandChecker& operator=(const OutOfBandChecker&) = delete;

  // A pass at once, then one every interval on a PeriodicLoop (and the reclaim watch beside it,
  // CheckerOptions::reclaim_watch).
  Status start();
  void stop();

  // One pass: an observation, judged; the findings it handed to the handler (for tests and the
  // benchmark).
  std::vector<Finding> check_once() TESSERA_EXCLUDES(mutex_, last_mutex_);
  // The checks of one observation: every finding handed to the handler (after the judgment is
  // recorded, so the handler's proof, belongs(), sees the shares it was judged on), and returned
  // with the figures the reports show.
  Judgment judge(const NodeObservation& observation) TESSERA_EXCLUDES(mutex_, last_mutex_);

  // True when host process `pid` with `start_time` is a process of share `share` now, checked
  // afresh (not from the pass's cache): its owner word is in the share's usage page, or its
  // cgroup names a pod the share's claim was reserved for, or (the page wiped since) an earlier
  // pass read that owner word in the page. The handler's proof before a kill.
  bool belongs(int pid, uint64_t start_time, const std::string& share)
      TESSERA_EXCLUDES(mutex_, last_mutex_);

  // Per GPU the last pass read: the device memory of processes that belong to no share of it
  // (tessera_gpu_unaccounted_memory_bytes). A GPU NVML did not answer for is absent.
  std::map<std::string, uint64_t> unaccounted_memory() const TESSERA_EXCLUDES(last_mutex_);
  // Per GPU the last pass read: the device memory of the MPS shares' daemons and servers there (in
  // no share's page and no unaccounted figure: each MPS share's limit binds its clients; the
  // server's own context is the price of MPS). A GPU without any is absent.
  std::map<std::string, uint64_t> mps_server_memory() const TESSERA_EXCLUDES(last_mutex_);
  // The last judgment (null before the first pass).
  std::shared_ptr<const Judgment> last_judgment() const TESSERA_EXCLUDES(last_mutex_);

  CheckerStats stats() const TESSERA_EXCLUDES(mutex_);
  uint64_t loop_passes() const;
  bool wait_for_loop_passes(uint64_t count,
                            std::chrono::milliseconds timeout = std::chrono::seconds(10)) const;

 private:
  struct Episode {
    Clock::time_point since;
    bool reported = false;
    bool seen = false;
  };
  using EpisodeKey = std::tuple<FindingKind, std::string, int>;  // kind, share, pid

  // Whether pod `pod_uid` is one claim `claim_uid` is reserved for: named by its shares in
  // `shares`, or by claim_pods' answer (then written into `shares`); kUndecided until an answer
  // got in the pass that first saw the pod, or a later one, has come.
  enum class PodVerdict { kClaims, kOther, kUndecided };
  PodVerdict pod_verdict(std::vector<CheckedShare>& shares, const std::string& claim_uid,
                         const std::string& pod_uid, Clock::time_point now)
      TESSERA_REQUIRES(mutex_);
  // kClaims, and `pod_uid` no longer an unknown pod of claim `claim_uid`.
  PodVerdict known_pod(const std::string& claim_uid, const std::string& pod_uid)
      TESSERA_REQUIRES(mutex_);
  // True once the condition `key` has held for `grace` and was not reported in this episode.
  bool due(const EpisodeKey& key, Clock::time_point now, Clock::duration grace)
      TESSERA_REQUIRES(mutex_);

  Judgment pass(const NodeObservation& observation)
      TESSERA_REQUIRES(mutex_);  // the steps below, in this order
  // The steps of a pass (checker.cc). Pass holds what the pass read and decided; ShareCheck one
  // share on its GPU.
  struct Pass;
  struct ShareCheck;
  // What judge_slots found in one page.
  struct SlotVerdicts {
    uint32_t sound_high = 0;  // one past the last slot a live process of the share holds
    uint32_t foreign = 0;     // slots of live processes of other pods (cleared)
    uint32_t stale = 0;       // free slots holding bytes (cleared)
    bool below_mark = false;  // a slot in use at or above the high-water mark
  };
  // Starts the pass: its clock reading, the prepared shares, a fresh view of the processes.
  void begin_pass(Pass& pass) TESSERA_REQUIRES(mutex_);
  // One share on its GPU: its processes, then each kind of lie and overuse.
  void check_share(Pass& pass, const CheckedShare& share) TESSERA_REQUIRES(mutex_);
  void find_members(Pass& pass, ShareCheck& check) TESSERA_REQUIRES(mutex_);
  // unshimmed_process and usage_disagrees (with the slot's repair).
  void find_slot_lies(Pass& pass, const ShareCheck& check) TESSERA_REQUIRES(mutex_);
  void find_over_memory(Pass& pass, const ShareCheck& check) TESSERA_REQUIRES(mutex_);
  void find_over_cores(Pass& pass, const ShareCheck& check) TESSERA_REQUIRES(mutex_);
  // unaccounted_process: each GPU's processes that no share of it has (after every share's
  // members are known), and the per-GPU sums unaccounted_memory() answers.
  void find_unaccounted(Pass& pass) TESSERA_REQUIRES(mutex_);
  // corrupt_usage_page: each folder's page, its shape and its slots, and what to repair.
  void check_pages(Pass& pass) TESSERA_REQUIRES(mutex_);
  void check_page(Pass& pass, const std::string& path, const std::map<uint64_t, int>& gpu_owners)
      TESSERA_REQUIRES(mutex_);
  // page_members_ after the pass (its GPU processes' owner words -> host pids).
  void remember_members(Pass& pass, const std::map<uint64_t, int>& gpu_owners)
      TESSERA_REQUIRES(mutex_);
  SlotVerdicts judge_slots(Pass& pass, const std::string& path,
                           const std::map<uint64_t, int>& gpu_owners,
                           share_folder::UsagePageRepair& repair) TESSERA_REQUIRES(mutex_);
  // pod_verdict for a slot's pod against every claim of a folder's shares.
  PodVerdict folder_pod_verdict(Pass& pass, const std::string& path, const std::string& pod_uid)
      TESSERA_REQUIRES(mutex_);
  void apply_repairs(Pass& pass) TESSERA_REQUIRES(mutex_);
  // Reclaim (reclaim.h): each share's reclaim request in its usage page, judged on the agent's
  // figures; the victims as reclaim_eviction findings.
  void reclaim(Pass& pass) TESSERA_REQUIRES(mutex_);
  // A share's reclaim request not acted on: why, in the stats and (once per request, at most once
  // per share per 10 s) in the log.
  void decline_reclaim(const Pass& pass, const CheckedShare& share, uint64_t bytes, bool fresh,
                       const std::string& why) TESSERA_REQUIRES(mutex_);
  // Ends the pass: forgets conditions no longer seen, counts, logs what could not be checked.
  void end_pass(Pass& pass) TESSERA_REQUIRES(mutex_);

  CheckerOptions options_;
  // The checks' own observer (the second constructor) and the prepared shares it lists.
  std::function<std::vector<CheckedShare>()> own_shares_;
  std::unique_ptr<Observer> own_observer_;
  std::function<std::shared_ptr<const NodeObservation>()> observe_;
  FindingHandler& handler_;
  Clock& clock_;
  mutable Mutex mutex_;  // one pass at a time; guards the pass's state below
  std::map<EpisodeKey, Episode> episodes_ TESSERA_GUARDED_BY(mutex_);
  // Per claim UID: the asks of claim_pods, and the pods its shares did not name when seen.
  struct PodsQuestion {
    std::optional<Clock::time_point> asked;   // the last ask, answered or not
    uint64_t answered_pass = 0;               // the pass of the last answer (0: none)
    std::map<std::string, uint64_t> unknown;  // pod UID -> the pass that first saw it
  };
  std::map<std::string, PodsQuestion> pods_questions_ TESSERA_GUARDED_BY(mutex_);
  // Per usage page: its compute area's counters at the last pass that read it whole, and when.
  struct ComputeSeen {
    Clock::time_point at;
    std::array<share_folder::ComputeDeviceCopy, share::kMaxDevices> devices;
  };
  std::map<std::string, ComputeSeen> compute_seen_ TESSERA_GUARDED_BY(mutex_);
  // Per usage page: the owner words of processes on a GPU that a pass read in it, with their
  // slots then, kept while the process is on a GPU (so a wiped page does not make them nobody's).
  std::map<std::string, std::map<uint64_t, std::vector<share_folder::SlotCopy>>> page_members_
      TESSERA_GUARDED_BY(mutex_);
  // Processes chosen for eviction, by pid: not chosen again, and their bytes counted as coming
  // back, while NVML still lists them (dropped after kEvictionPending, should the kill not land).
  struct Eviction {
    uint64_t start_time;
    std::string uuid;
    uint64_t bytes;
    Clock::time_point at;
  };
  std::map<int, Eviction> evictions_ TESSERA_GUARDED_BY(mutex_);
  // Per share: the last reclaim request read (its owner and start), so each is counted and logged
  // once.
  std::map<std::string, std::pair<uint64_t, uint64_t>> reclaim_seen_ TESSERA_GUARDED_BY(mutex_);
  // Per share: the last decline said.
  std::map<std::string, Clock::time_point> declines_logged_ TESSERA_GUARDED_BY(mutex_);
  CheckerStats stats_ TESSERA_GUARDED_BY(mutex_);
  // The last judgment and the shares it judged: a scrape or a kill's proof never waits for a pass.
  mutable Mutex last_mutex_ TESSERA_ACQUIRED_AFTER(mutex_);
  std::shared_ptr<const Judgment> last_ TESSERA_GUARDED_BY(last_mutex_);
  std::vector<CheckedShare> last_shares_ TESSERA_GUARDED_BY(last_mutex_);
  std::unique_ptr<PeriodicLoop> loop_;  // its passes use everything above
  // The reclaim watch (its own thread): the last request seen per folder, and whether a pass it
  // asked for waits for reclaim_pass_gap.
  void watch_reclaim() TESSERA_EXCLUDES(last_mutex_);
  std::map<std::string, std::pair<uint64_t, uint64_t>> watched_;
  std::optional<Clock::time_point> watch_triggered_;
  bool watch_pending_ = false;
  std::unique_ptr<PeriodicLoop> watch_;  // last: stopped first, it asks loop_ for passes
};

}  // namespace tessera::agent
