#include "share/share_manager.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "backends/mps_backend.h"
#include "backends/time_slice_backend.h"
#include "tessera/share_files.h"
#include "tessera/share_region.h"
#include "usage/share_processes.h"

namespace tessera::agent {
namespace fs = std::filesystem;

namespace {

// Creates <dir>/usage (initialised) unless it exists; mode 0666 so a container of any uid can map
// it read-write (the folder is mounted only into the claim's containers, and the agent reads the
// page as untrusted input).
std::string create_usage_page(const std::string& dir) {
  const std::string path = dir + "/usage";
  if (access(path.c_str(), F_OK) == 0) return "";
  // The folder is writable from the share's containers: whatever a tenant left at the temporary
  // name (a symlink to a host file) is removed, never opened, and the file is created exclusively.
  const std::string temporary = dir + "/.usage.agent.tmp";
  unlink(temporary.c_str());
  const int fd = open(temporary.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd < 0) return "cannot create " + temporary + ": " + std::strerror(errno);
  std::string error;
  if (ftruncate(fd, sizeof(share::UsagePage)) != 0 || fchmod(fd, 0666) != 0) {
    error = "cannot size " + temporary + ": " + std::strerror(errno);
  } else {
    void* memory =
        mmap(nullptr, sizeof(share::UsagePage), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (memory == MAP_FAILED) {
      error = "cannot map " + temporary + ": " + std::strerror(errno);
    } else {
      share::init_usage_page(*static_cast<share::UsagePage*>(memory));
      munmap(memory, sizeof(share::UsagePage));
      if (fsync(fd) != 0) error = "cannot sync " + temporary + ": " + std::strerror(errno);
    }
  }
  close(fd);
  // link(2), like the shim: never replaces a page a process of the share created meanwhile.
  if (error.empty() && link(temporary.c_str(), path.c_str()) != 0 && errno != EEXIST)
    error = "cannot create " + path + ": " + std::strerror(errno);
  unlink(temporary.c_str());
  return error;
}

}  // namespace

ShareManager::ShareManager(ShareManagerOptions options, KubeClient& kube,
                           std::vector<NodeDevice> devices)
    : options_(std::move(options)), kube_(kube), devices_(std::move(devices)) {}

std::string ShareManager::share_dir(const ShareSpec& share) const {
  return options_.root + "/shares/" + share.folder_name();
}

std::string ShareManager::cdi_spec_path(const std::string& claim_uid) const {
  return options_.cdi_dir + "/" + cdi_spec_file_name(claim_uid);
}

std::vector<NodeDevice> ShareManager::devices() const {
  std::lock_guard lock(devices_mutex_);
  return devices_;
}

void ShareManager::set_devices(std::vector<NodeDevice> devices) {
  std::lock_guard lock(devices_mutex_);
  devices_ = std::move(devices);
}

Checkpoint ShareManager::checkpoint() const {
  std::lock_guard lock(mutex_);
  return checkpoint_;
}

void ShareManager::step() {
  ++steps_;
  if (options_.after_step) options_.after_step(steps_);
}

std::string ShareManager::start(ReconcileReport* report) {
  {
    std::lock_guard lock(mutex_);
    std::error_code ec;
    fs::create_directories(options_.root + "/shares", ec);
    if (ec) return "cannot create " + options_.root + "/shares: " + ec.message();
    fs::create_directories(options_.cdi_dir, ec);
    if (ec) return "cannot create " + options_.cdi_dir + ": " + ec.message();
    if (const auto text = read_file(options_.root + "/checkpoint.json")) {
      if (auto e = checkpoint_from_json(*text, checkpoint_); !e.empty())
        return options_.root + "/checkpoint.json: " + e;
    }
  }
  ReconcileReport found = reconcile();
  if (report) *report = std::move(found);
  return "";
}

std::string ShareManager::save_checkpoint() {
  return write_file_atomically(options_.root + "/checkpoint.json", checkpoint_to_json(checkpoint_),
                               0600);
}

share::DeviceLimit share_limits(const ShareSpec& share) {
  share::DeviceLimit limit;
  limit.uuid = share.uuid;
  limit.memory_limit = share.memory_bytes.value_or(share::kUnlimited);
  // Under MPS the daemon's active-thread percentage limits compute; the shim limiting GPU time
  // as well would compound the two (30% of the threads for 30% of the time).
  limit.cores_limit = share.strategy() == SharingStrategy::kMps ? 100 : share.cores.value_or(100);
  limit.cores_burst = share.config.burst.value_or(0);
  return limit;
}

uint32_t share_priority(const ShareSpec& share) {
  switch (share.config.priority.value_or(Priority::kNormal)) {
    case Priority::kHigh:
      return share::kPriorityHigh;
    case Priority::kLow:
      return share::kPriorityLow;
    case Priority::kNormal:
      break;
  }
  return share::kPriorityNormal;
}

std::string ShareManager::write_share_folder(const std::vector<ShareSpec>& members) {
  const std::string dir = share_dir(members.front());
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    return "cannot create " + dir + ": " + std::strerror(errno);
  if (auto e = create_usage_page(dir); !e.empty()) return e;
  std::vector<share::DeviceLimit> limits;
  for (const auto& share : members) limits.push_back(share_limits(share));
  return share::write_limits(dir, limits, share_priority(members.front()), options_.measure_source);
}

std::string ShareManager::expected_cdi_spec(const std::vector<ShareSpec>& shares) const {
  CdiPaths paths{options_.root + "/shares", options_.container_shares_dir, options_.shim_path,
                 options_.mps ? options_.mps->root() : "", options_.container_mps_dir};
  return build_cdi_spec(shares, paths);
}

std::string ShareManager::write_cdi_spec(const std::string& claim_uid,
                                         const std::vector<ShareSpec>& shares) {
  return write_file_atomically(cdi_spec_path(claim_uid), expected_cdi_spec(shares));
}

ShareBackend* ShareManager::backend_for(SharingStrategy strategy) {
  switch (strategy) {
    case SharingStrategy::kQuota:
      return &quota_;
    case SharingStrategy::kMps:
      return options_.mps;
    case SharingStrategy::kTimeSlicing:
      return options_.time_slice;
  }
  return nullptr;
}

const ShareSpec* ShareManager::held_elsewhere(const std::string& claim_uid,
                                              const ShareSpec& share) const {
  // Only completed entries hold their setting: one a conflict left half-prepared never set it.
  for (const auto& [uid, entry] : checkpoint_) {
    if (uid == claim_uid || entry.state != ClaimState::kPrepareCompleted) continue;
    for (const auto& other : entry.shares)
      if (other.uuid == share.uuid && other.strategy() == share.strategy()) return &other;
  }
  return nullptr;
}

PrepareResult ShareManager::result_of(const ClaimEntry& entry) {
  std::vector<PreparedDevice> devices;
  for (const auto& share : entry.shares)
    devices.push_back(
        {share.request_names, share.pool, share.device, {cdi_device_id(share)}, share.share_id});
  return devices;
}

PrepareResult ShareManager::prepare(const ClaimRef& claim) {
  try {
    {
      std::lock_guard lock(mutex_);
      const auto it = checkpoint_.find(claim.uid);
      if (it != checkpoint_.end() && it->second.state == ClaimState::kPrepareCompleted)
        return result_of(it->second);
    }
    const Result<ApiResponse> answer =
        kube_.request("GET", resource_claim_path(claim.namespace_name, claim.name));
    if (!answer.is_ok())
      return answer.status().with_context("cannot get ResourceClaim " + claim.namespace_name + "/" +
                                          claim.name);
    ShareSpecInput input{answer->body, claim.uid, options_.driver, options_.node_name, devices()};
    Result<std::vector<ShareSpec>> computed = compute_share_specs(input);
    if (!computed.is_ok())
      return computed.status().with_context("ResourceClaim " + claim.namespace_name + "/" +
                                            claim.name);
    const std::vector<ShareSpec>& shares = *computed;

    std::lock_guard lock(mutex_);
    auto& entry = checkpoint_[claim.uid];
    if (entry.state == ClaimState::kPrepareCompleted && !entry.shares.empty())
      return result_of(entry);  // another call finished it meanwhile
    // A PrepareStarted entry left by a crash: the allocation of a claim UID never changes, so the
    // same shares are recomputed and every write below is redone in place.
    entry = {claim.namespace_name, claim.name, ClaimState::kPrepareStarted, shares};
    if (auto e = save_checkpoint(); !e.empty()) return internal_error(e);
    step();
    for (const auto& members : shares_by_folder(shares)) {
      if (auto e = write_share_folder(members); !e.empty())
        return internal_error("share " + members.front().folder_name() + ": " + e);
      step();
    }
    for (const auto& share : shares) {
      ShareBackend* backend = backend_for(share.strategy());
      if (!backend)
        return failed_precondition("share " + share.name() + ": sharing.strategy " +
                                   to_string(share.strategy()) + " is not enabled on node " +
                                   options_.node_name);
      const Status started =
          backend->prepare(share, [&] { return held_elsewhere(claim.uid, share); });
      TESSERA_RETURN_IF_ERROR(started.with_context("share " + share.name()));
      if (backend->changes_node()) step();
    }
    if (auto e = write_cdi_spec(claim.uid, shares); !e.empty()) return internal_error(e);
    step();
    entry.state = ClaimState::kPrepareCompleted;
    if (auto e = save_checkpoint(); !e.empty()) {
      entry.state = ClaimState::kPrepareStarted;
      return internal_error(e);
    }
    step();
    return result_of(entry);
  } catch (const std::exception& e) {
    return internal_error(std::string("prepare failed: ") + e.what());
  }
}

std::string ShareManager::live_processes(const std::string& folder) const {
  // The usage page is tenant-written: read through the meter's safe reader (never mapped).
  const std::vector<uint64_t> owners = usage_page_owners(folder + "/usage");
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

Status ShareManager::unprepare(const ClaimRef& claim) {
  try {
    std::lock_guard lock(mutex_);
    const auto it = checkpoint_.find(claim.uid);
    if (it == checkpoint_.end()) return Status::ok();  // never prepared here, or already unprepared
    const auto folders = shares_by_folder(it->second.shares);
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
    if (it->second.state == ClaimState::kPrepareCompleted) {
      it->second.state = ClaimState::kPrepareStarted;
      if (auto e = save_checkpoint(); !e.empty()) {
        it->second.state = ClaimState::kPrepareCompleted;
        return internal_error(e);
      }
      step();
    }
    std::error_code ec;
    fs::remove(cdi_spec_path(claim.uid), ec);
    if (ec)
      return internal_error("cannot remove " + cdi_spec_path(claim.uid) + ": " + ec.message());
    step();
    for (const auto& share : it->second.shares) {
      // A backend disabled since prepare has nothing to stop; its step still counts.
      ShareBackend* backend = backend_for(share.strategy());
      if (backend) {
        const Status stopped =
            backend->unprepare(share, [&] { return held_elsewhere(claim.uid, share); });
        TESSERA_RETURN_IF_ERROR(stopped.with_context("share " + share.name()));
      }
      if (!backend || backend->changes_node()) step();
    }
    for (const auto& members : folders) {
      const std::string dir = share_dir(members.front());
      fs::remove_all(dir, ec);
      if (ec) return internal_error("cannot remove " + dir + ": " + ec.message());
      step();
    }
    const ClaimEntry removed = it->second;
    checkpoint_.erase(it);
    if (auto e = save_checkpoint(); !e.empty()) {
      checkpoint_[claim.uid] = removed;
      return internal_error(e);
    }
    step();
    return Status::ok();
  } catch (const std::exception& e) {
    return internal_error(std::string("unprepare failed: ") + e.what());
  }
}

}  // namespace tessera::agent
