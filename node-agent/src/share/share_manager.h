// The share lifecycle behind the kubelet plugin: prepare = GET the claim, compute its shares (the
// pure step, model/share_spec.h), then write, in this order, the checkpoint entry (PrepareStarted),
// each share folder (usage page, limits page), the claim's CDI spec, and the checkpoint entry
// (PrepareCompleted). unprepare undoes it from the checkpoint alone. Every step is idempotent, so
// a crash between any two converges on the next prepare or unprepare, and start() removes share
// folders and CDI specs that no checkpoint entry names.
//
// Locking. Prepares and unprepares of different claims run at the same time; nothing one claim
// does on the host (an MPS daemon start or stop, nvidia-smi, share folder and CDI writes, fsync)
// is done under a lock another claim's call needs, with one exception that the GPU forces: two
// TimeSlicing shares of one GPU set one interval, so their checks and nvidia-smi calls take turns.
// The locks, outermost first (a thread never waits for an earlier one while holding a later one):
//  1. reconcile_mutex_: one reconcile pass at a time (start() and the agent's loop).
//  2. claim_locks_, per claim UID: held through a whole prepare or unprepare, so one claim is
//     changed by one call at a time (whoever calls: the DRA services also hold their own). Only
//     the holder changes the claim's checkpoint entry; reconcile repairs a claim only while
//     holding its lock, taken with try_lock (a claim being changed is left to the next pass).
//  3. ShareBackend::lock_gpu, per GPU UUID, for a backend whose setting is the GPU's (the
//     time-slice backend's): held around that backend's prepare, unprepare and reconcile of a
//     share on the GPU and the update of holders_, and by its remove_orphans; so two claims
//     asking different intervals on one GPU never both succeed, and a restore never undoes a
//     newer apply.
//  4. save_mutex_: writes of checkpoint.json, one at a time, each of the newest in-memory
//     checkpoint: a save never writes an older snapshot over one already written, and a save
//     finding its change already written (by another claim's save) is done.
//  5. checkpoint_mutex_: the in-memory checkpoint_, version_, holders_ and removing_; held for
//     reads and read-modify-writes only, never across I/O.
// Cross-claim rules that follow:
//  - A claim's entry (naming its folders, CDI spec and what its backends keep: orphan_name) is in
//    the in-memory checkpoint before any of its files is written, and leaves it only after they
//    are removed. Orphan removal (reconcile's for folders and specs, the backends' through
//    ReserveOrphan) reserves a name in removing_ (under checkpoint_mutex_, only when no entry
//    names it) before deleting it; a prepare whose entry names a reserved name waits until the
//    deletion is done. So a PrepareStarted claim is never an orphan, whatever its step.
//  - A claim holds a GPU-wide setting from a successful backend prepare until its unprepare
//    (holders_, rebuilt at start() from PrepareCompleted entries): the HolderLookup answers from
//    it, and the time-slice interval is restored to Default when the last holder leaves.
//  - A save writes every claim's in-memory changes, so one claim's change may be durable before
//    its own save returns. Each change is made in memory only once it may be durable (an entry
//    before its files, PrepareCompleted after them, the removal after they are gone), so any
//    checkpoint.json a crash leaves is one a retry converges from. A failed save undoes its
//    change in memory before any other save can take it along.
//  - Temporaries a crash left (write_file_atomically's, the usage page's) are removed by name:
//    only those whose pid is not this process's, so a write in flight is never disturbed.
//  - devices_ has its own lock: prepare takes a copy before computing the shares, so set_devices
//    changes only what later prepares are checked against (prepared shares live on from the
//    checkpoint).
//
// Two agents. During a rolling update (DaemonSet maxSurge) an old and a new agent run side by side
// on the state folder, and kubelet may send any claim's call to either. Two file locks
// (files/file_lock.h; flock, so a crashed holder releases by dying) make that safe:
//  2b. the claim's lock file, <root>/claims/<uid>.lock: held from just after claim_locks_ for the
//      same span (so across the API GET: only calls for the same claim wait, as they must), so a
//      claim is changed by one call on the whole node. Taking it reads the claim's entry from
//      disk (below), so a prepare the other agent completed is answered, not redone; a successful
//      unprepare removes the file.
//  4b. the state lock, <root>/state.lock: held only for checkpoint.json's read-modify-write
//      (inside save_mutex_), for reading entries when a claim lock is taken and a reconcile pass
//      starts, and through orphan removal (its decisions come from the checkpoint on disk, and no
//      agent writes an entry, so no file of one, while it runs; the backends' remove_orphans
//      take their GPU locks (3.) under it, which cannot deadlock: no thread waits for save_mutex_
//      or the state lock while holding a GPU lock). Never across the API GET, a backend call of
//      a claim, or a share folder's or CDI spec's write.
// Under the state lock, checkpoint.json is read again when it changed since this process last
// read or wrote it (device, inode, size, mtime, ctime); its entries replace the in-memory ones of
// every claim this process does not hold (held_claims_: their entries are only this process's to
// change, and memory is newer), and holders_ of those claims are rebuilt from it. So every save
// writes the other agent's entries as it left them, reconcile repairs and keeps what the other
// agent prepared, and temporaries of a live writer are never taken for a dead one's.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "backends/quota_backend.h"
#include "files/file_lock.h"
#include "mig/mig_instances.h"
#include "model/claim_locks.h"
#include "model/claim_preparer.h"
#include "model/share_spec.h"
#include "share/cdi.h"
#include "share/checkpoint.h"
#include "share/driver_edits.h"
#include "share/partition_hook.h"
#include "share/reconcile.h"
#include "tessera/kube/kube_client.h"
#include "tessera/share_folder/limits_writer.h"
#include "tessera/status.h"
#include "tessera/thread_annotations.h"

namespace tessera::agent {

class MpsBackend;
class TimeSliceBackend;

struct ShareManagerOptions {
  std::string root = "/var/lib/tessera";  // checkpoint.json and shares/
  std::string cdi_dir = "/var/run/cdi";
  std::string node_name;  // the pool name
  std::string driver = vgpu_config::kDriverName;
  // The --tenant-* flags: every share's config is held to them at prepare (compute_share_specs).
  vgpu_config::TenantBounds tenant_bounds;
  // Checked before each prepare (share/shim_library.h): a claim is never handed out unenforced.
  std::string shim_path = "/usr/local/tessera/lib/libvgpu.so";
  // kLdSoPreload: <root>/ld.so.preload (naming the shim) is mounted at /etc/ld.so.preload.
  ShimLoading shim_loading = ShimLoading::kLdSoPreload;
  // How the driver gets into the containers (discover_container_driver, once at start). A default
  // value has no driver: every prepare then fails saying so.
  ContainerDriver container_driver;
  std::string container_shares_dir = "/var/run/tessera/shares";
  std::string container_mps_dir = "/var/run/tessera/mps";
  // Where the driver holds partitions (docs/driver-partitions.md): the CDI specs carry the hook for
  // the shares on these GPUs, and unprepare zeroes the soft limit of the cgroups the hook recorded
  // that still exist (clear_partition; null: the records are only removed).
  std::optional<PartitionHookConfig> partition_hook;
  std::function<Status(const PartitionRecord&)> clear_partition;
  // Backends for shares that ask for them (not owned; the manager calls them as ShareBackends).
  // Null: such a claim gets an error saying the strategy is not enabled on this node.
  MpsBackend* mps = nullptr;
  TimeSliceBackend* time_slice = nullptr;
  // Dynamic MIG (--mig-strategy=dynamic): creates a dynamic MIG device's instance at its first
  // share's prepare and destroys it at its last share's unprepare. Null: a claim on a dynamic MIG
  // device gets an error saying dynamic MIG is not enabled on this node.
  MigInstances* mig_instances = nullptr;
  // Where the MIG capability files and /proc/devices are read (a simulated root in tests).
  std::string proc_root = "/proc";
  // Who measures a share's GPU time (LimitsPage::measure_source): kMeasureAgent when the agent's
  // GpuTimeMeter runs (containers: the shim cannot see its host pids in NVML).
  uint32_t measure_source = share::kMeasureNvml;
  // The wall clock a prepare is stamped with (the checkpoint's preparedUnixMs, the shares' age):
  // milliseconds since the epoch. Tests inject a fixed time.
  std::function<int64_t()> wall_clock_unix_ms = [] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  // Tests only: called after each durable step with its 1-based number (a crash test calls
  // _exit there). Steps count across prepare and unprepare calls of this manager.
  std::function<void(int step)> after_step;
};

// The limits a share's folder holds for it (what write_share_folder writes and reconcile
// expects). A folder's shares have one config, so its first share's priority is the page's.
share_folder::DeviceLimit share_limits(const ShareSpec& share);
uint32_t share_priority(const ShareSpec& share);

class ShareManager final : public ClaimPreparer {
 public:
  ShareManager(ShareManagerOptions options, kube::KubeClient& kube,
               std::vector<NodeDevice> devices);

  // Loads the checkpoint (a missing one is empty) and reconciles (the report goes to `report`
  // when given). Call once before use.
  Status start(ReconcileReport* report = nullptr)
      TESSERA_EXCLUDES(reconcile_mutex_, save_mutex_, checkpoint_mutex_);
  // Makes the host match the checkpoint (share folders and limits, CDI specs, MPS daemons,
  // time-slice settings) and removes what no entry names; says what differed (reconcile.cc).
  // Safe beside prepares and unprepares: a claim one of them holds is checked by the next pass.
  ReconcileReport reconcile() TESSERA_EXCLUDES(reconcile_mutex_, save_mutex_, checkpoint_mutex_);
  // Dynamic MIG instances no checkpoint share uses (a claim unprepared while the agent was down,
  // a prepare that crashed before its entry) destroyed: start() and the reconcile loop call it.
  // One line per change.
  std::vector<std::string> reconcile_mig() TESSERA_EXCLUDES(checkpoint_mutex_);

  // Thread-safe; calls for different claims run concurrently (see Locking above). A refused
  // claim is one warn line naming it and why (kubelet's retries of the same refusal are counted
  // within the log's repeat window, not written again).
  PrepareResult prepare(const ClaimRef& claim) override
      TESSERA_EXCLUDES(save_mutex_, checkpoint_mutex_);
  Status unprepare(const ClaimRef& claim) override TESSERA_EXCLUDES(save_mutex_, checkpoint_mutex_);

  // The pods a claim is reserved for change after prepare: kubelet calls NodePrepareResources
  // only for the first pod of a shared claim on the node. This re-reads the prepared claim
  // `claim_uid` (GET by the checkpoint's namespace and name) and, when status.reservedFor's pods
  // differ from the entry's, saves the entry with the new pods (atomically, as every checkpoint
  // write) under the claim's locks, taken with try_lock: a claim being prepared or unprepared (by
  // either agent) is kFailedPrecondition at once, to be asked again later. Answers the entry's pods
  // after the call: unchanged when the claim was deleted (404) or replaced (another UID), which
  // kubelet's unprepare follows. An API, parse or save error is returned, the old pods kept, and
  // said in one warn line; kNotFound when no entry has the UID. kLatest reads what the API server
  // has now (the checks' question about one pod); kCache (?resourceVersion=0) lets it answer from
  // its watch cache, which is what a periodic pass over every claim should cost it.
  enum class PodsRead { kLatest, kCache };
  Result<std::vector<PodRef>> refresh_claim_pods(const std::string& claim_uid,
                                                 PodsRead read = PodsRead::kLatest)
      TESSERA_EXCLUDES(save_mutex_, checkpoint_mutex_);
  // refresh_claim_pods(kCache) of every PrepareCompleted claim (the reconcile loop's, one GET per
  // claim per pass; the first kUnavailable ends the pass: the API server is down); how many
  // entries changed.
  size_t refresh_all_claim_pods() TESSERA_EXCLUDES(save_mutex_, checkpoint_mutex_);

  // The GPUs claims are checked against; the device monitor replaces them when the node's GPUs
  // change (prepared shares keep working from the checkpoint).
  std::vector<NodeDevice> devices() const TESSERA_EXCLUDES(devices_mutex_);
  void set_devices(std::vector<NodeDevice> devices) TESSERA_EXCLUDES(devices_mutex_);

  Checkpoint checkpoint() const TESSERA_EXCLUDES(checkpoint_mutex_);
  std::string share_dir(const ShareSpec& share) const;  // its folder (shared when grouped)
  std::string cdi_spec_path(const std::string& claim_uid) const;
  std::string preload_file_path() const;  // <root>/ld.so.preload

 private:
  // This call's hold of a claim across agents (2b above): while it lives the claim's lock file is
  // held and its entry in memory is this process's to change.
  class ClaimHold {
   public:
    ClaimHold(ShareManager& manager, std::string uid, FileLock lock);
    ClaimHold(ClaimHold&& other) noexcept;
    ClaimHold(const ClaimHold&) = delete;
    ClaimHold& operator=(const ClaimHold&) = delete;
    ClaimHold& operator=(ClaimHold&&) = delete;
    ~ClaimHold();
    // The claim is gone from the checkpoint: its lock file goes too when the hold ends.
    void remove_lock_file() { remove_lock_file_ = true; }

   private:
    ShareManager* manager_;
    std::string uid_;
    std::optional<FileLock> lock_;
    bool remove_lock_file_ = false;
  };
  // Takes the claim's lock file (waiting, or nullopt at once when `wait` is false and another
  // call of either agent holds it), then reads its entry from disk under the state lock.
  Result<std::optional<ClaimHold>> hold_claim(const std::string& uid, bool wait)
      TESSERA_EXCLUDES(checkpoint_mutex_);
  Result<FileLock> lock_state();
  // Under lock_state(): what another agent wrote to checkpoint.json since this process read or
  // wrote it replaces the in-memory entries (and holders_) of the claims this process does not
  // hold. kInternal naming the file when it cannot be read or parsed.
  Status refresh_checkpoint() TESSERA_EXCLUDES(checkpoint_mutex_);
  std::string checkpoint_path() const { return options_.root + "/checkpoint.json"; }
  // Changes the in-memory checkpoint (under checkpoint_mutex_); returns its new version.
  uint64_t update_checkpoint(const std::function<void(Checkpoint&)>& change)
      TESSERA_EXCLUDES(checkpoint_mutex_);
  // Makes `version` of the checkpoint durable: writes the newest in-memory checkpoint unless a
  // save of `version` or later is already written. When the write fails, `undo` runs on the
  // in-memory checkpoint before any other save can snapshot it.
  Status save_checkpoint(uint64_t version, const std::function<void(Checkpoint&)>& undo = {})
      TESSERA_EXCLUDES(save_mutex_, checkpoint_mutex_);
  // Writes one share folder: the usage page and the limits page of all its shares. `unused`: no
  // process of the share can be in the folder (a claim not prepared yet), so the usage page's
  // temporaries of a dead writer go too (a tenant's shim names its own the same way).
  Status write_share_folder(const std::vector<ShareSpec>& members, bool unused = false)
      TESSERA_EXCLUDES(save_mutex_, checkpoint_mutex_);
  Status write_cdi_spec(const std::string& claim_uid, const std::vector<ShareSpec>& shares)
      TESSERA_EXCLUDES(save_mutex_, checkpoint_mutex_);
  std::string expected_cdi_spec(const std::vector<ShareSpec>& shares) const;
  // The backend of the share's strategy, or null when it is not enabled on this node.
  ShareBackend* backend_for(vgpu_config::SharingStrategy strategy);
  // A share of another claim whose backend prepare of the GPU of `share` with its strategy
  // succeeded (it holds a GPU-wide setting such as the time-slice interval): holders_.
  std::optional<ShareSpec> held_elsewhere(const std::string& claim_uid,
                                          const ShareSpec& share) const
      TESSERA_EXCLUDES(checkpoint_mutex_);
  void add_holder(const std::string& claim_uid, const ShareSpec& share)
      TESSERA_EXCLUDES(checkpoint_mutex_);
  void remove_holder(const std::string& claim_uid, const ShareSpec& share)
      TESSERA_EXCLUDES(checkpoint_mutex_);
  void reconcile_entry(const std::string& claim_uid, const ClaimEntry& entry,
                       ReconcileReport& report) TESSERA_REQUIRES(reconcile_mutex_)
      TESSERA_EXCLUDES(save_mutex_, checkpoint_mutex_);
  void remove_orphans(ReconcileReport& report) TESSERA_REQUIRES(reconcile_mutex_)
      TESSERA_EXCLUDES(save_mutex_, checkpoint_mutex_);
  // The names an entry owns on the host, which orphan removal leaves alone: "shares/<folder>",
  // "cdi/<spec file>", and "<strategy>/<orphan_name>" for what a backend keeps per share.
  void add_owned_names(const std::string& claim_uid, const ClaimEntry& entry,
                       std::set<std::string>& names);
  // True when no entry owns `name` and no other removal has it: the caller then removes it and
  // calls release_orphan. A prepare that names it meanwhile waits for the release.
  bool reserve_orphan(const std::string& name) TESSERA_EXCLUDES(checkpoint_mutex_);
  void release_orphan(const std::string& name) TESSERA_EXCLUDES(checkpoint_mutex_);
  // reserve_orphan for a backend's remove_orphans (names prefixed with its strategy).
  ReserveOrphan orphan_reserver(vgpu_config::SharingStrategy strategy);
  std::string live_processes(const std::string& folder) const;
  // The claim's MIG shares made ready: a dynamic device's instance acquired (created or adopted),
  // every MIG share's instance IDs, MIG UUID and capability nodes filled in. On error what this
  // call acquired is released again.
  Status prepare_mig(std::vector<ShareSpec>& shares);
  // The share names of the checkpoint's dynamic MIG shares (users MigInstances keeps).
  std::set<std::string> mig_users() const TESSERA_EXCLUDES(checkpoint_mutex_);
  void step();
  // prepare without its log line.
  PrepareResult prepare_claim(const ClaimRef& claim)
      TESSERA_EXCLUDES(save_mutex_, checkpoint_mutex_);
  // The claim's answer: each share with its CDI device ids (cdi_device_ids).
  PrepareResult result_of(const ClaimEntry& entry) const;

  ShareManagerOptions options_;
  QuotaBackend quota_;
  kube::KubeClient& kube_;
  // devices_ only: prepare reads them before any other lock.
  mutable Mutex devices_mutex_;
  std::vector<NodeDevice> devices_ TESSERA_GUARDED_BY(devices_mutex_);

  // The lock levels above that are in-process mutexes carry their order (1. < 4. < 5.) and what
  // they guard, which clang checks (docs/node-agent.md, "Concurrency"). 2., 3. (keyed by claim
  // UID and GPU UUID) and the file locks 2b. and 4b. are not capabilities the analysis can name.
  Mutex reconcile_mutex_;                                       // 1.
  ClaimLocks claim_locks_;                                      // 2. per claim UID
  Mutex save_mutex_ TESSERA_ACQUIRED_AFTER(reconcile_mutex_);   // 4. (3.: backends')
  uint64_t saved_version_ TESSERA_GUARDED_BY(save_mutex_) = 0;  // what checkpoint.json holds
  mutable Mutex checkpoint_mutex_ TESSERA_ACQUIRED_AFTER(save_mutex_);  // 5.
  std::condition_variable orphan_released_;
  Checkpoint checkpoint_ TESSERA_GUARDED_BY(checkpoint_mutex_);
  uint64_t version_ TESSERA_GUARDED_BY(checkpoint_mutex_) = 0;  // bumped by every change
  // (strategy, GPU UUID) -> claim UID -> its share there, from its successful backend prepare.
  std::map<std::pair<vgpu_config::SharingStrategy, std::string>, std::map<std::string, ShareSpec>>
      holders_ TESSERA_GUARDED_BY(checkpoint_mutex_);
  // Names reserve_orphan handed out.
  std::set<std::string> removing_ TESSERA_GUARDED_BY(checkpoint_mutex_);
  // Claims a ClaimHold of this process has.
  std::set<std::string> held_claims_ TESSERA_GUARDED_BY(checkpoint_mutex_);
  // checkpoint.json as this process last read or wrote it (nullopt: absent); changed only under
  // the state lock.
  struct FileSignature {
    uint64_t device = 0, inode = 0, size = 0;
    int64_t mtime_ns = 0, ctime_ns = 0;
    bool operator==(const FileSignature&) const = default;
  };
  std::optional<FileSignature> disk_signature_ TESSERA_GUARDED_BY(checkpoint_mutex_);
  static std::optional<FileSignature> signature_of(const std::string& path);
  std::atomic<int> steps_{0};
};

}  // namespace tessera::agent
