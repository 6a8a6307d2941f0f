#include "share/share_manager.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "backends/mps_backend.h"
#include "backends/time_slice_backend.h"
#include "files/atomic_file.h"
#include "mig/mig_caps.h"
#include "model/claim_pods.h"
#include "share/shim_library.h"
#include "tessera/log.h"
#include "tessera/share_contract.h"
#include "tessera/share_folder/limits_writer.h"
#include "tessera/share_folder/snapshot.h"
#include "tessera/share_region.h"
#include "usage/share_processes.h"

namespace tessera::agent {
namespace fs = std::filesystem;

namespace {

// Creates <dir>/usage (initialised) unless it exists, as the shim does (share::create_usage_page:
// mode kUsagePageMode, complete under a temporary name before it is linked into place, never
// through a tenant's symlink).
Status create_usage_page(const std::string& dir) {
  if (const int error = share::create_usage_page(dir.c_str()); error != 0)
    return internal_error("cannot create " + dir + "/usage: " + std::strerror(error));
  return Status::ok();
}

// Whether `name` is a temporary page a share's process left in its folder (share_contract.cc
// create_temporary:
// ".usage.<pid>.<n>.tmp", ".pending.<pid>.<n>.tmp") from a process that is not this one.
bool stale_page_temporary(const std::string& name) {
  static const std::string suffix = ".tmp";
  for (const std::string prefix : {".usage.", ".pending."}) {
    if (name.size() <= prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const std::string middle =
        name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());  // "<pid>.<n>"
    const size_t dot = middle.find('.');
    if (dot == 0 || dot == std::string::npos || dot > 9 || dot + 1 == middle.size() ||
        middle.find_first_not_of("0123456789.") != std::string::npos ||
        middle.find('.', dot + 1) != std::string::npos)
      return false;
    return std::stoi(middle.substr(0, dot)) != static_cast<int>(getpid());
  }
  return false;
}

}  // namespace

ShareManager::ShareManager(ShareManagerOptions options, kube::KubeClient& kube,
                           std::vector<NodeDevice> devices)
    : options_(std::move(options)), kube_(kube), devices_(std::move(devices)) {}

std::string ShareManager::share_dir(const ShareSpec& share) const {
  return options_.root + "/shares/" + share.folder_name();
}

std::string ShareManager::cdi_spec_path(const std::string& claim_uid) const {
  return options_.cdi_dir + "/" + cdi_spec_file_name(claim_uid);
}

std::string ShareManager::preload_file_path() const {
  return options_.root + "/ld.so.preload";
}

std::vector<NodeDevice> ShareManager::devices() const {
  MutexLock lock(devices_mutex_);
  return devices_;
}

void ShareManager::set_devices(std::vector<NodeDevice> devices) {
  MutexLock lock(devices_mutex_);
  devices_ = std::move(devices);
}

Checkpoint ShareManager::checkpoint() const {
  MutexLock lock(checkpoint_mutex_);
  return checkpoint_;
}

void ShareManager::step() {
  const int step = steps_.fetch_add(1) + 1;
  if (options_.after_step) options_.after_step(step);
}

Status ShareManager::start(ReconcileReport* report) {
  std::error_code ec;
  fs::create_directories(options_.root + "/shares", ec);
  if (ec) return internal_error("cannot create " + options_.root + "/shares: " + ec.message());
  fs::create_directories(options_.cdi_dir, ec);
  if (ec) return internal_error("cannot create " + options_.cdi_dir + ": " + ec.message());
  fs::create_directories(options_.root + "/claims", ec);
  if (ec) return internal_error("cannot create " + options_.root + "/claims: " + ec.message());
  remove_stale_temporaries(options_.root, "ld.so.preload");  // a crash while writing it
  if (options_.shim_loading == ShimLoading::kLdSoPreload &&
      read_file(preload_file_path()) != preload_file_contents(options_.shim_path))
    TESSERA_RETURN_IF_ERROR(
        write_file_atomically(preload_file_path(), preload_file_contents(options_.shim_path)));
  {
    // The other agent of a rolling update may be writing it: read under the state lock.
    // Completed entries hold their settings (holders_, rebuilt by the refresh); a PrepareStarted
    // one redoes its prepare when retried.
    TESSERA_ASSIGN_OR_RETURN(FileLock state, lock_state());
    TESSERA_RETURN_IF_ERROR(refresh_checkpoint());
    MutexLock save(save_mutex_);
    MutexLock lock(checkpoint_mutex_);
    ++version_;
    saved_version_ = version_;  // what was just read is what the file holds
  }
  ReconcileReport found = reconcile();
  reconcile_mig();
  if (report) *report = std::move(found);
  return Status::ok();
}

std::vector<std::string> ShareManager::reconcile_mig() {
  if (!options_.mig_instances) return {};
  std::vector<std::string> lines =
      options_.mig_instances->reconcile([this] { return mig_users(); });
  for (const auto& line : lines) log::info("MIG reconcile", {{"change", line}});
  return lines;
}

ShareManager::ClaimHold::ClaimHold(ShareManager& manager, std::string uid, FileLock lock)
    : manager_(&manager), uid_(std::move(uid)), lock_(std::move(lock)) {}

ShareManager::ClaimHold::ClaimHold(ClaimHold&& other) noexcept
    : manager_(other.manager_),
      uid_(std::move(other.uid_)),
      lock_(std::move(other.lock_)),
      remove_lock_file_(other.remove_lock_file_) {
  other.manager_ = nullptr;
}

ShareManager::ClaimHold::~ClaimHold() {
  if (!manager_) return;
  {
    // From here the entry on disk is the claim's truth again (every change of this call was saved
    // or undone), which the next refresh brings into memory.
    MutexLock lock(manager_->checkpoint_mutex_);
    manager_->held_claims_.erase(uid_);
  }
  if (remove_lock_file_) lock_->remove_and_release();
}

Result<FileLock> ShareManager::lock_state() {
  return FileLock::acquire(options_.root + "/state.lock");
}

Result<std::optional<ShareManager::ClaimHold>> ShareManager::hold_claim(const std::string& uid,
                                                                        bool wait) {
  const std::string path = options_.root + "/claims/" + uid + ".lock";
  std::optional<FileLock> claim_file;
  if (wait) {
    TESSERA_ASSIGN_OR_RETURN(FileLock locked, FileLock::acquire(path));
    claim_file = std::move(locked);
  } else {
    TESSERA_ASSIGN_OR_RETURN(std::optional<FileLock> locked, FileLock::try_acquire(path));
    if (!locked) return std::optional<ClaimHold>();
    claim_file = std::move(*locked);
  }
  // Not held yet, so the refresh takes its entry from disk: what the other agent did with it last.
  TESSERA_ASSIGN_OR_RETURN(FileLock state, lock_state());
  TESSERA_RETURN_IF_ERROR(refresh_checkpoint());
  {
    MutexLock lock(checkpoint_mutex_);
    held_claims_.insert(uid);
  }
  return std::optional<ClaimHold>(ClaimHold(*this, uid, std::move(*claim_file)));
}

std::optional<ShareManager::FileSignature> ShareManager::signature_of(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return std::nullopt;
  FileSignature signature;
  signature.device = static_cast<uint64_t>(info.st_dev);
  signature.inode = static_cast<uint64_t>(info.st_ino);
  signature.size = static_cast<uint64_t>(info.st_size);
  signature.mtime_ns =
      static_cast<int64_t>(info.st_mtim.tv_sec) * 1000000000 + info.st_mtim.tv_nsec;
  signature.ctime_ns =
      static_cast<int64_t>(info.st_ctim.tv_sec) * 1000000000 + info.st_ctim.tv_nsec;
  return signature;
}

Status ShareManager::refresh_checkpoint() {
  // Every write replaces the file (a new inode, renamed into place), so an unchanged signature
  // means nobody wrote since: the common case of one agent costs a stat.
  const std::optional<FileSignature> now = signature_of(checkpoint_path());
  {
    MutexLock lock(checkpoint_mutex_);
    if (now == disk_signature_) return Status::ok();
  }
  Checkpoint disk;
  if (now) {
    const std::optional<std::string> text = read_file(checkpoint_path());
    if (!text) return internal_error("cannot read " + checkpoint_path());
    TESSERA_ASSIGN_OR_RETURN(Checkpoint parsed, checkpoint_from_json(*text),
                             with_context(checkpoint_path()));
    disk = std::move(parsed);
  }
  MutexLock lock(checkpoint_mutex_);
  for (const std::string& uid : held_claims_) {
    if (const auto it = checkpoint_.find(uid); it != checkpoint_.end()) {
      disk[uid] = it->second;
    } else {
      disk.erase(uid);
    }
  }
  // The claims the other agent changed: their GPU-wide settings are held as its entries say
  // (completed ones hold theirs, as at start()). An entry both agree on keeps what this process
  // knows, such as a half-prepared claim's successful backend prepare.
  std::set<std::string> changed;
  for (const auto& [uid, entry] : checkpoint_)
    if (const auto it = disk.find(uid); it == disk.end() || it->second != entry)
      changed.insert(uid);
  for (const auto& [uid, entry] : disk)
    if (checkpoint_.count(uid) == 0) changed.insert(uid);
  for (auto gpu = holders_.begin(); gpu != holders_.end();) {
    std::erase_if(gpu->second,
                  [&](const auto& holder) { return changed.count(holder.first) != 0; });
    gpu = gpu->second.empty() ? holders_.erase(gpu) : std::next(gpu);
  }
  for (const std::string& uid : changed)
    if (const auto it = disk.find(uid);
        it != disk.end() && it->second.state == ClaimState::kPrepareCompleted)
      for (const auto& share : it->second.shares)
        holders_[{share.strategy(), share.uuid}][uid] = share;
  checkpoint_ = std::move(disk);
  disk_signature_ = now;
  return Status::ok();
}

uint64_t ShareManager::update_checkpoint(const std::function<void(Checkpoint&)>& change) {
  MutexLock lock(checkpoint_mutex_);
  change(checkpoint_);
  return ++version_;
}

Status ShareManager::save_checkpoint(uint64_t version,
                                     const std::function<void(Checkpoint&)>& undo) {
  MutexLock save(save_mutex_);
  if (saved_version_ >= version) return Status::ok();  // a later save wrote it along
  auto undone = [&](Status failed) {
    if (undo) {
      MutexLock lock(checkpoint_mutex_);
      undo(checkpoint_);
      ++version_;
    }
    return failed;
  };
  // The read-modify-write of the file the other agent writes too: its entries as it left them.
  Result<FileLock> state = lock_state();
  if (!state.is_ok()) return undone(state.status());
  if (Status fresh = refresh_checkpoint(); !fresh.is_ok()) return undone(fresh);
  Checkpoint snapshot;
  uint64_t snapshot_version = 0;
  {
    MutexLock lock(checkpoint_mutex_);
    snapshot = checkpoint_;
    snapshot_version = version_;
  }
  if (Status written = write_file_atomically(checkpoint_path(), checkpoint_to_json(snapshot), 0600);
      !written.is_ok())
    return undone(written);
  {
    MutexLock lock(checkpoint_mutex_);
    disk_signature_ = signature_of(checkpoint_path());
  }
  saved_version_ = snapshot_version;
  return Status::ok();
}

share_folder::DeviceLimit share_limits(const ShareSpec& share) {
  share_folder::DeviceLimit limit;
  limit.uuid = share.uuid;
  const vgpu_config::ShareLimits limits = share.limits();
  limit.memory_limit = limits.memory_limit;
  limit.memory_request = limits.memory_request;
  // Under MPS the daemon's active-thread percentage limits compute; the shim limiting GPU time
  // as well would compound the two (30% of the threads for 30% of the time).
  const bool mps = share.strategy() == vgpu_config::SharingStrategy::kMps;
  limit.cores_request = mps ? 100 : limits.cores_request;
  limit.cores_limit = mps ? 100 : limits.cores_limit;
  return limit;
}

uint32_t share_priority(const ShareSpec& share) {
  switch (share.config.priority.value_or(vgpu_config::Priority::kNormal)) {
    case vgpu_config::Priority::kHigh:
      return share::kPriorityHigh;
    case vgpu_config::Priority::kLow:
      return share::kPriorityLow;
    case vgpu_config::Priority::kNormal:
      break;
  }
  return share::kPriorityNormal;
}

namespace {

// <dir>/mps (share::kMpsMarkerFile): tells libvgpu the share is served by an MPS daemon, so a
// process given two of them is refused. The folder is the tenants' to write: never through a
// symlink they left there (removed, then created afresh).
Status write_mps_marker(const std::string& dir) {
  const std::string path = dir + "/" + share::kMpsMarkerFile;
  for (int attempt = 0; attempt < 2; ++attempt) {
    const int fd =
        open(path.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd >= 0) {
      close(fd);
      return Status::ok();
    }
    if (attempt == 0) unlink(path.c_str());
  }
  return internal_error("cannot create " + path + ": " + std::strerror(errno));
}

}  // namespace

Status ShareManager::write_share_folder(const std::vector<ShareSpec>& members, bool unused) {
  const std::string dir = share_dir(members.front());
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    return internal_error("cannot create " + dir + ": " + std::strerror(errno));
  // An agent that died inside write_limits left its temporary, named by its pid, which no later
  // write reuses: gone before this one (only the agent writes the limits, and only the call
  // holding the claim's lock). The usage page's likewise, while no tenant can be creating one.
  remove_stale_temporaries(dir, "limits");
  if (unused) {
    std::error_code ec;
    for (const auto& item : fs::directory_iterator(dir, ec))
      if (stale_page_temporary(item.path().filename().string())) unlink(item.path().c_str());
  }
  TESSERA_RETURN_IF_ERROR(create_usage_page(dir));
  std::vector<share_folder::DeviceLimit> limits;
  for (const auto& share : members) limits.push_back(share_limits(share));
  // share_folder::write_limits is shared with the CLI.
  TESSERA_RETURN_IF_ERROR(share_folder::write_limits(
      dir, limits, {share_priority(members.front()), options_.measure_source}));
  if (members.front().strategy() == vgpu_config::SharingStrategy::kMps)
    return write_mps_marker(dir);
  return Status::ok();
}

std::string ShareManager::expected_cdi_spec(const std::vector<ShareSpec>& shares) const {
  CdiPaths paths{options_.root + "/shares",  options_.container_shares_dir,
                 options_.shim_path,         options_.mps ? options_.mps->root() : "",
                 options_.container_mps_dir, options_.shim_loading,
                 preload_file_path(),        options_.partition_hook};
  return build_cdi_spec(shares, paths, options_.container_driver);
}

Status ShareManager::write_cdi_spec(const std::string& claim_uid,
                                    const std::vector<ShareSpec>& shares) {
  return write_file_atomically(cdi_spec_path(claim_uid), expected_cdi_spec(shares));
}

ShareBackend* ShareManager::backend_for(vgpu_config::SharingStrategy strategy) {
  switch (strategy) {
    case vgpu_config::SharingStrategy::kQuota:
      return &quota_;
    case vgpu_config::SharingStrategy::kMps:
      return options_.mps;
    case vgpu_config::SharingStrategy::kTimeSlicing:
      return options_.time_slice;
  }
  return nullptr;
}

std::optional<ShareSpec> ShareManager::held_elsewhere(const std::string& claim_uid,
                                                      const ShareSpec& share) const {
  // Only claims whose backend prepare succeeded hold their setting: one a conflict left
  // half-prepared never set it.
  MutexLock lock(checkpoint_mutex_);
  const auto gpu = holders_.find({share.strategy(), share.uuid});
  if (gpu == holders_.end()) return std::nullopt;
  for (const auto& [uid, other] : gpu->second)
    if (uid != claim_uid) return other;
  return std::nullopt;
}

void ShareManager::add_holder(const std::string& claim_uid, const ShareSpec& share) {
  MutexLock lock(checkpoint_mutex_);
  holders_[{share.strategy(), share.uuid}][claim_uid] = share;
}

void ShareManager::remove_holder(const std::string& claim_uid, const ShareSpec& share) {
  MutexLock lock(checkpoint_mutex_);
  if (const auto it = holders_.find({share.strategy(), share.uuid}); it != holders_.end()) {
    it->second.erase(claim_uid);
    if (it->second.empty()) holders_.erase(it);
  }
}

void ShareManager::add_owned_names(const std::string& claim_uid, const ClaimEntry& entry,
                                   std::set<std::string>& names) {
  names.insert("cdi/" + cdi_spec_file_name(claim_uid));
  for (const auto& share : entry.shares) {
    names.insert("shares/" + share.folder_name());
    if (ShareBackend* backend = backend_for(share.strategy()))
      if (std::string name = backend->orphan_name(share); !name.empty())
        names.insert(std::string(to_string(share.strategy())) + "/" + name);
  }
}

bool ShareManager::reserve_orphan(const std::string& name) {
  MutexLock lock(checkpoint_mutex_);
  if (removing_.count(name) != 0) return false;
  for (const auto& [uid, entry] : checkpoint_) {
    std::set<std::string> names;
    add_owned_names(uid, entry, names);
    if (names.count(name) != 0) return false;
  }
  removing_.insert(name);
  return true;
}

void ShareManager::release_orphan(const std::string& name) {
  {
    MutexLock lock(checkpoint_mutex_);
    removing_.erase(name);
  }
  orphan_released_.notify_all();
}

ReserveOrphan ShareManager::orphan_reserver(vgpu_config::SharingStrategy strategy) {
  return [this, strategy](const std::string& name) {
    std::string key = std::string(to_string(strategy)) + "/" + name;
    if (!reserve_orphan(key)) return OrphanReservation();
    return OrphanReservation([this, key] { release_orphan(key); });
  };
}

PrepareResult ShareManager::result_of(const ClaimEntry& entry) const {
  std::vector<PreparedDevice> devices;
  for (const auto& share : entry.shares) {
    TESSERA_ASSIGN_OR_RETURN(std::vector<std::string> ids,
                             cdi_device_ids(share, options_.container_driver));
    devices.push_back(
        {share.request_names, share.pool, share.device, std::move(ids), share.share_id});
  }
  return devices;
}

PrepareResult ShareManager::prepare(const ClaimRef& claim) {
  PrepareResult result = prepare_claim(claim);
  // Kubelet shows the error on the pod only; the node's log says which claim was refused and why.
  if (!result.is_ok())
    log::warn("claim refused: prepare failed", {{"claim", claim.namespace_name + "/" + claim.name},
                                                {"claim_uid", claim.uid},
                                                {"code", status_code_name(result.status().code())},
                                                {"error", result.status().message()}});
  return result;
}

PrepareResult ShareManager::prepare_claim(const ClaimRef& claim) {
  try {
    if (!safe_name_component(claim.uid))
      return invalid_argument("claim UID " + claim.uid + " is not a safe name");
    // Kubelet's retry of a call still running waits here, then answers from the checkpoint; so
    // does one sent to the other agent of a rolling update (the claim's lock file).
    ClaimLocks::Guard claim_lock = claim_locks_.lock(claim.uid);
    Result<std::optional<ClaimHold>> hold = hold_claim(claim.uid, /*wait=*/true);
    if (!hold.is_ok()) return hold.status();
    {
      MutexLock lock(checkpoint_mutex_);
      const auto it = checkpoint_.find(claim.uid);
      if (it != checkpoint_.end() && it->second.state == ClaimState::kPrepareCompleted)
        return result_of(it->second);
    }
    // Never an unenforced share: the shim must be loadable, and (ld.so.preload) named by the file
    // the spec mounts.
    TESSERA_RETURN_IF_ERROR(check_shim_library(options_.shim_path));
    if (options_.shim_loading == ShimLoading::kLdSoPreload &&
        read_file(preload_file_path()) != preload_file_contents(options_.shim_path))
      TESSERA_RETURN_IF_ERROR(
          write_file_atomically(preload_file_path(), preload_file_contents(options_.shim_path)));
    const Result<kube::ApiResponse> answer =
        kube_.request("GET", kube::resource_claim_path(claim.namespace_name, claim.name));
    if (!answer.is_ok())
      return answer.status().with_context("cannot get ResourceClaim " + claim.namespace_name + "/" +
                                          claim.name);
    ShareSpecInput input{answer->body,       claim.uid, options_.driver,
                         options_.node_name, devices(), options_.tenant_bounds};
    std::vector<std::string> clamped;
    Result<std::vector<ShareSpec>> computed = compute_share_specs(input, &clamped);
    if (!computed.is_ok())
      return computed.status().with_context("ResourceClaim " + claim.namespace_name + "/" +
                                            claim.name);
    // A config past the admin's bounds (the webhook bypassed, or a node flag it cannot know).
    for (const std::string& line : clamped)
      log::warn("claim config held to its bounds",
                {{"claim", claim.namespace_name + "/" + claim.name},
                 {"claim_uid", claim.uid},
                 {"change", line}});
    std::vector<ShareSpec>& shares = *computed;
    for (const auto& share : shares)
      if (share.mig && share.strategy() == vgpu_config::SharingStrategy::kTimeSlicing)
        return invalid_argument("share " + share.name() + ": sharing.strategy TimeSlicing does " +
                                "not apply to MIG device " + share.device +
                                " (the driver's time-slice interval is not settable there)");
    // The driver for every share (the toolkit's device for its GPU), before anything is written.
    for (const auto& share : shares)
      TESSERA_RETURN_IF_ERROR(cdi_device_ids(share, options_.container_driver).status());

    // A PrepareStarted entry left by a crash: the allocation of a claim UID never changes, so the
    // same shares are recomputed and every write below is redone in place. The entry names the
    // claim's files before they exist; a removal of a stray file of the same name finishes first.
    Result<ClaimPods> reserved = parse_claim_pods(answer->body);
    if (!reserved.is_ok())
      return reserved.status().with_context("ResourceClaim " + claim.namespace_name + "/" +
                                            claim.name);
    const ClaimEntry started{claim.namespace_name, claim.name, ClaimState::kPrepareStarted, shares,
                             std::move(reserved)->pods};
    std::set<std::string> names;
    add_owned_names(claim.uid, started, names);
    uint64_t version = 0;
    {
      MutexLock lock(checkpoint_mutex_);
      checkpoint_[claim.uid] = started;
      version = ++version_;
      for (auto name = names.begin(); name != names.end();) {
        if (removing_.count(*name) == 0) {
          ++name;
          continue;
        }
        checkpoint_mutex_.wait(orphan_released_);  // its removal is in flight: look again after
        name = names.begin();
      }
    }
    TESSERA_RETURN_IF_ERROR(save_checkpoint(version));
    step();
    // MIG: the instances before anything names their UUIDs (the limits page, the CDI spec); the
    // entry then records what was created, so unprepare and a restart know it.
    if (std::any_of(shares.begin(), shares.end(), [](const ShareSpec& s) { return s.mig; })) {
      TESSERA_RETURN_IF_ERROR(prepare_mig(shares));
      version = update_checkpoint(
          [&claim, &shares](Checkpoint& checkpoint) { checkpoint[claim.uid].shares = shares; });
      TESSERA_RETURN_IF_ERROR(save_checkpoint(version));
      step();
    }
    for (const auto& members : shares_by_folder(shares)) {
      TESSERA_RETURN_IF_ERROR(write_share_folder(members, /*unused=*/true)
                                  .with_context("share " + members.front().folder_name()));
      step();
    }
    for (const auto& share : shares) {
      ShareBackend* backend = backend_for(share.strategy());
      if (!backend)
        return failed_precondition("share " + share.name() + ": sharing.strategy " +
                                   to_string(share.strategy()) + " is not enabled on node " +
                                   options_.node_name);
      // For a GPU-wide setting the check (HolderLookup), the apply and the record of this claim
      // as a holder are one step for the GPU: a racing claim waits, then sees this one.
      const std::optional<ClaimLocks::Guard> gpu = backend->lock_gpu(share.uuid);
      std::optional<ShareSpec> holder;
      const Status started_share = backend->prepare(share, [&]() -> const ShareSpec* {
        holder = held_elsewhere(claim.uid, share);
        return holder ? &*holder : nullptr;
      });
      TESSERA_RETURN_IF_ERROR(started_share.with_context("share " + share.name()));
      add_holder(claim.uid, share);
      if (backend->changes_node()) step();
    }
    TESSERA_RETURN_IF_ERROR(write_cdi_spec(claim.uid, shares));
    step();
    // Completed now: the time the share's age counts from.
    const int64_t prepared_unix_ms = options_.wall_clock_unix_ms();
    auto set_state = [&claim](ClaimState state, std::optional<int64_t> prepared_at) {
      return [&claim, state, prepared_at](Checkpoint& checkpoint) {
        checkpoint[claim.uid].state = state;
        checkpoint[claim.uid].prepared_unix_ms = prepared_at;
      };
    };
    version = update_checkpoint(set_state(ClaimState::kPrepareCompleted, prepared_unix_ms));
    TESSERA_RETURN_IF_ERROR(
        save_checkpoint(version, set_state(ClaimState::kPrepareStarted, std::nullopt)));
    step();
    ClaimEntry completed = started;
    completed.shares = shares;
    completed.state = ClaimState::kPrepareCompleted;
    completed.prepared_unix_ms = prepared_unix_ms;
    return result_of(completed);
  } catch (const std::exception& e) {
    return internal_error(std::string("prepare failed: ") + e.what());
  }
}

Result<std::vector<PodRef>> ShareManager::refresh_claim_pods(const std::string& claim_uid,
                                                             PodsRead read) {
  // The old pods stay, and the agent's log says why (once per failed read).
  auto kept = [&claim_uid](const Status& failed) -> Status {
    log::warn("cannot read the claim's pods again: keeping the checkpoint's",
              {{"claim_uid", claim_uid}, {"error", failed.message()}});
    return failed;
  };
  try {
    const std::optional<ClaimLocks::Guard> claim_lock = claim_locks_.try_lock(claim_uid);
    if (!claim_lock)
      return failed_precondition("claim " + claim_uid + " is being prepared or unprepared: later");
    Result<std::optional<ClaimHold>> hold = hold_claim(claim_uid, /*wait=*/false);
    if (!hold.is_ok()) return kept(hold.status());
    if (!*hold)
      return failed_precondition("claim " + claim_uid +
                                 " is being changed by the other agent: later");
    ClaimEntry entry;
    {
      MutexLock lock(checkpoint_mutex_);
      const auto it = checkpoint_.find(claim_uid);
      if (it == checkpoint_.end())
        return not_found("claim " + claim_uid + " is not prepared on this node");
      entry = it->second;
    }
    const std::string subject = entry.namespace_name + "/" + entry.name;
    std::string path = kube::resource_claim_path(entry.namespace_name, entry.name);
    if (read == PodsRead::kCache) path += "?resourceVersion=0";
    const Result<kube::ApiResponse> answer = kube_.request("GET", path);
    if (!answer.is_ok()) {
      // Deleted: its pods are gone, and kubelet's unprepare follows. Nothing to learn.
      if (answer.status().code() == StatusCode::kNotFound) return entry.pods;
      return kept(answer.status().with_context("cannot get ResourceClaim " + subject));
    }
    Result<ClaimPods> parsed = parse_claim_pods(answer->body);
    if (!parsed.is_ok()) return kept(parsed.status().with_context("ResourceClaim " + subject));
    // Replaced (deleted and created again under the name): the new claim's pods are not this
    // entry's, and kubelet unprepares the old one.
    if (parsed->uid != claim_uid || parsed->pods == entry.pods) return entry.pods;
    const std::vector<PodRef> before = entry.pods;
    const std::vector<PodRef> now = parsed->pods;
    const uint64_t version = update_checkpoint(
        [&claim_uid, &now](Checkpoint& checkpoint) { checkpoint[claim_uid].pods = now; });
    if (Status saved = save_checkpoint(
            version,
            [&claim_uid, &before](Checkpoint& checkpoint) { checkpoint[claim_uid].pods = before; });
        !saved.is_ok())
      return kept(saved);
    std::string names;
    for (const PodRef& pod : now) names += (names.empty() ? "" : ",") + pod.name;
    log::info("the claim's pods changed",
              {{"claim", subject}, {"claim_uid", claim_uid}, {"pods", names}});
    return now;
  } catch (const std::exception& e) {
    return kept(internal_error(std::string("refreshing the claim's pods failed: ") + e.what()));
  }
}

size_t ShareManager::refresh_all_claim_pods() {
  std::vector<std::pair<std::string, std::vector<PodRef>>> completed;
  {
    MutexLock lock(checkpoint_mutex_);
    for (const auto& [uid, entry] : checkpoint_)
      if (entry.state == ClaimState::kPrepareCompleted) completed.emplace_back(uid, entry.pods);
  }
  size_t changed = 0;
  for (const auto& [uid, pods] : completed) {
    Result<std::vector<PodRef>> now = refresh_claim_pods(uid, PodsRead::kCache);
    // The API server is down (its retries spent): the rest wait for the next pass rather than
    // each spending the client's retries too, which would hold up the loop for minutes.
    if (!now.is_ok() && now.status().code() == StatusCode::kUnavailable) break;
    if (now.is_ok() && *now != pods) ++changed;
  }
  return changed;
}

std::string ShareManager::live_processes(const std::string& folder) const {
  // The usage page is tenant-written: read through the one reader (a copy, never mapped).
  const std::vector<uint64_t> owners =
      share_folder::read_usage_page(folder + "/usage").live_owners();
  if (owners.empty()) return "";
  const std::map<uint64_t, int> live = live_process_owners();
  std::string found;
  for (const uint64_t owner : owners)
    if (const auto it = live.find(owner); it != live.end()) {
      if (!found.empty()) found += ',';
      found += std::to_string(it->second);
    }
  return found;
}

std::set<std::string> ShareManager::mig_users() const {
  std::set<std::string> users;
  MutexLock lock(checkpoint_mutex_);
  for (const auto& [uid, entry] : checkpoint_)
    for (const auto& share : entry.shares)
      if (share.mig && share.mig->kind == MigKind::kDynamic) users.insert(share.name());
  return users;
}

Status ShareManager::prepare_mig(std::vector<ShareSpec>& shares) {
  std::vector<const ShareSpec*> acquired;
  auto release_acquired = [&](Status failed) {
    for (const ShareSpec* share : acquired)
      if (Status undone = options_.mig_instances->release(*share->mig, share->name());
          !undone.is_ok())
        return failed.with_context("(releasing " + share->device + " failed: " + undone.message() +
                                   ")");
    return failed;
  };
  for (auto& share : shares) {
    if (!share.mig) continue;
    if (share.mig->kind == MigKind::kDynamic) {
      if (!options_.mig_instances)
        return release_acquired(
            failed_precondition("share " + share.name() + ": device " + share.device +
                                " is a dynamic MIG device and dynamic MIG is not enabled on node " +
                                options_.node_name));
      Result<AcquiredMig> got =
          options_.mig_instances->acquire(*share.mig, share.minor, share.name());
      if (!got.is_ok()) return release_acquired(got.status().with_context("share " + share.name()));
      share.mig = got->device;
      share.uuid = got->uuid;
      acquired.push_back(&share);
    }
    if (!share.mig->gi_id || !share.mig->ci_id)
      return release_acquired(internal_error("share " + share.name() + ": MIG device " +
                                             share.device + " has no instance IDs"));
    Result<MigCapsNodes> caps =
        read_mig_caps(options_.proc_root, share.minor, *share.mig->gi_id, *share.mig->ci_id);
    if (!caps.is_ok()) return release_acquired(caps.status().with_context("share " + share.name()));
    share.mig->caps = *caps;
  }
  return Status::ok();
}

Status ShareManager::unprepare(const ClaimRef& claim) {
  try {
    if (!safe_name_component(claim.uid)) return Status::ok();  // no entry can name it
    ClaimLocks::Guard claim_lock = claim_locks_.lock(claim.uid);
    Result<std::optional<ClaimHold>> hold = hold_claim(claim.uid, /*wait=*/true);
    if (!hold.is_ok()) return hold.status();
    // A copy: only this call changes the entry while it holds the claim's locks.
    ClaimEntry entry;
    {
      MutexLock lock(checkpoint_mutex_);
      const auto it = checkpoint_.find(claim.uid);
      if (it == checkpoint_.end()) {
        (*hold)->remove_lock_file();
        return Status::ok();  // never prepared on this node, or already unprepared
      }
      entry = it->second;
    }
    const auto folders = shares_by_folder(entry.shares);
    std::string busy;
    for (const auto& members : folders)
      if (auto pids = live_processes(share_dir(members.front())); !pids.empty())
        busy += (busy.empty() ? "" : "; ") + members.front().folder_name() + " (host pids " + pids +
                ")";
    if (!busy.empty())
      return failed_precondition("claim " + claim.uid + " still has running processes in share " +
                                 busy + ": kept until they exit");
    // First demote the entry: a crash from here on leaves a PrepareStarted entry, which a later
    // prepare redoes in full instead of answering from a checkpoint whose files are half gone.
    if (entry.state == ClaimState::kPrepareCompleted) {
      auto set_state = [&claim](ClaimState state) {
        return [&claim, state](Checkpoint& checkpoint) { checkpoint[claim.uid].state = state; };
      };
      const uint64_t version = update_checkpoint(set_state(ClaimState::kPrepareStarted));
      TESSERA_RETURN_IF_ERROR(save_checkpoint(version, set_state(ClaimState::kPrepareCompleted)));
      step();
    }
    // A crash while the spec was written left its temporary (named by the dead agent's pid).
    remove_stale_temporaries(options_.cdi_dir, cdi_spec_file_name(claim.uid));
    std::error_code ec;
    fs::remove(cdi_spec_path(claim.uid), ec);
    if (ec)
      return internal_error("cannot remove " + cdi_spec_path(claim.uid) + ": " + ec.message());
    step();
    for (const auto& share : entry.shares) {
      // A backend disabled since prepare has nothing to stop; its step still counts.
      ShareBackend* backend = backend_for(share.strategy());
      if (backend) {
        const std::optional<ClaimLocks::Guard> gpu = backend->lock_gpu(share.uuid);
        std::optional<ShareSpec> holder;
        const Status stopped = backend->unprepare(share, [&]() -> const ShareSpec* {
          holder = held_elsewhere(claim.uid, share);
          return holder ? &*holder : nullptr;
        });
        TESSERA_RETURN_IF_ERROR(stopped.with_context("share " + share.name()));
        remove_holder(claim.uid, share);  // still under the GPU's lock
      } else {
        remove_holder(claim.uid, share);
      }
      if (!backend || backend->changes_node()) step();
    }
    // The dynamic MIG instances of the claim's shares: the last share of one destroys it.
    for (const auto& share : entry.shares) {
      if (!share.mig || share.mig->kind != MigKind::kDynamic) continue;
      if (!options_.mig_instances)
        return failed_precondition("share " + share.name() + " is on dynamic MIG device " +
                                   share.device + " but dynamic MIG is not enabled on node " +
                                   options_.node_name + " any more: its instance is kept");
      TESSERA_RETURN_IF_ERROR(options_.mig_instances->release(*share.mig, share.name())
                                  .with_context("share " + share.name()));
      step();
    }
    // The driver's partitions the hook recorded: their soft limits zeroed on the cgroups that are
    // still there (usually none: runc removes a container's cgroup before its poststop hooks run,
    // and kubelet unprepares after the containers are gone; see docs/driver-partitions.md).
    if (options_.partition_hook) {
      const std::string records = options_.partition_hook->record_dir + "/" + claim.uid;
      for (const PartitionRecord& record : read_partition_records(records))
        if (options_.clear_partition && fs::is_directory(record.cgroup, ec))
          TESSERA_RETURN_IF_ERROR(options_.clear_partition(record).with_context(
              "share " + record.share + ": zeroing the driver's partition"));
      fs::remove_all(records, ec);
      if (ec) return internal_error("cannot remove " + records + ": " + ec.message());
    }
    for (const auto& members : folders) {
      const std::string dir = share_dir(members.front());
      fs::remove_all(dir, ec);
      if (ec) return internal_error("cannot remove " + dir + ": " + ec.message());
      step();
    }
    entry.state = ClaimState::kPrepareStarted;  // what the checkpoint holds by now
    const uint64_t version =
        update_checkpoint([&claim](Checkpoint& checkpoint) { checkpoint.erase(claim.uid); });
    TESSERA_RETURN_IF_ERROR(save_checkpoint(
        version, [&claim, &entry](Checkpoint& checkpoint) { checkpoint[claim.uid] = entry; }));
    (*hold)->remove_lock_file();
    step();
    return Status::ok();
  } catch (const std::exception& e) {
    return internal_error(std::string("unprepare failed: ") + e.what());
  }
}

}  // namespace tessera::agent
