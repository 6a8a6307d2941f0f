// ShareManager::reconcile(): desired state from the checkpoint, actual state from the host.
#include "share/reconcile.h"

#include <cmath>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>

#include "files/atomic_file.h"
#include "share/share_manager.h"
#include "tessera/share_folder/snapshot.h"
#include "tessera/share_region.h"

namespace tessera::agent {
namespace fs = std::filesystem;

size_t ReconcileReport::failures() const {
  size_t count = 0;
  for (const auto& item : items) count += item.repaired() ? 0 : 1;
  return count;
}

std::string ReconcileReport::to_text() const {
  std::string text;
  for (const auto& item : items)
    text += item.subject + ": " + item.problem + ": " +
            (item.repaired() ? item.action : "repair failed: " + item.error) + "\n";
  return text;
}

namespace {

// "" when <dir>/limits holds exactly `expected` (in order), `priority` and `measure_source`, else
// what differs.
std::string limits_difference(const std::string& dir,
                              const std::vector<share_folder::DeviceLimit>& expected,
                              uint32_t priority, uint32_t measure_source) {
  const share_folder::LimitsPageCopy page = share_folder::read_limits_page(dir + "/limits");
  switch (page.problem) {
    case share_folder::LimitsProblem::kNone:
      break;
    case share_folder::LimitsProblem::kMissing:
      return "limits page missing";
    case share_folder::LimitsProblem::kTruncated:
      return "limits page truncated";
    case share_folder::LimitsProblem::kBadHeader:
      return "limits page invalid";
    case share_folder::LimitsProblem::kSymlink:
    case share_folder::LimitsProblem::kNotRegular:
    case share_folder::LimitsProblem::kCannotRead:
      return "limits page unreadable: " + page.message;
  }
  std::string difference;
  auto field = [&](const char* name, uint64_t actual, uint64_t wanted) {
    if (difference.empty() && actual != wanted)
      difference = std::string("limits page ") + name + " is " + std::to_string(actual) +
                   ", expected " + std::to_string(wanted);
  };
  if (page.devices.size() != expected.size()) {
    return "limits page lists " + std::to_string(page.devices.size()) + " GPUs, expected " +
           std::to_string(expected.size());
  }
  for (size_t d = 0; d < expected.size() && difference.empty(); ++d) {
    const share_folder::LimitsDevice& device = page.devices[d];
    if (device.uuid != expected[d].uuid) return "limits page names another GPU";
    field("memory_limit", device.memory_limit, expected[d].memory_limit);
    field("memory_request", device.memory_request, expected[d].memory_request);
    field("cores_request", device.cores_request, expected[d].cores_request);
    field("cores_limit", device.cores_limit, expected[d].cores_limit);
  }
  field("priority", page.priority, priority);
  field("measure_source", page.measure_source, measure_source);
  return difference;
}

}  // namespace

void ShareManager::reconcile_entry(const std::string& claim_uid, const ClaimEntry& entry,
                                   ReconcileReport& report) {
  auto record = [&report](const std::string& subject, const std::string& problem,
                          const std::string& action, const Status& done) {
    report.items.push_back({subject, problem, done.is_ok() ? action : "", done.message()});
  };
  for (const auto& members : shares_by_folder(entry.shares)) {
    const std::string dir = share_dir(members.front());
    std::vector<share_folder::DeviceLimit> expected;
    for (const auto& share : members) expected.push_back(share_limits(share));
    std::string problem;
    if (!fs::exists(dir)) {
      problem = "share folder missing";
    } else if (!fs::exists(dir + "/usage")) {
      problem = "usage page missing";
    } else {
      problem = limits_difference(dir, expected, share_priority(members.front()),
                                  options_.measure_source);
    }
    if (!problem.empty())
      record("share " + members.front().folder_name(), problem, "rewritten from the checkpoint",
             write_share_folder(members));
  }
  for (const auto& share : entry.shares)
    if (ShareBackend* backend = backend_for(share.strategy())) {
      // A GPU-wide setting: after or before another claim's apply, never in the middle of it.
      const std::optional<ClaimLocks::Guard> gpu = backend->lock_gpu(share.uuid);
      for (auto& item : backend->reconcile(claim_uid, share))
        report.items.push_back(std::move(item));
    }
  const auto spec = read_file(cdi_spec_path(claim_uid));
  const std::string expected = expected_cdi_spec(entry.shares);
  if (!spec || *spec != expected)
    record("claim " + claim_uid, spec ? "CDI spec differs" : "CDI spec missing",
           "rewritten from the checkpoint", write_cdi_spec(claim_uid, entry.shares));
}

void ShareManager::remove_orphans(ReconcileReport& report) {
  // Everything a checkpoint entry (of any state) names; the rest was left by a claim whose entry
  // is gone (a lost checkpoint, a crash during an earlier version's unprepare) or put there by
  // hand. Entries still being prepared name their files before writing them, so are never here;
  // a candidate is reserved (reserve_orphan) before it is removed, so a prepare that names it
  // meanwhile waits instead of losing what it writes.
  // Decided from checkpoint.json under the state lock, held to the end: the other agent of a
  // rolling update writes a claim's entry (under it) before any file of the claim, so what it
  // prepares is either named here or not on the host yet.
  Result<FileLock> state = lock_state();
  if (!state.is_ok()) {
    report.items.push_back({"node", "orphan removal skipped", "", state.status().message()});
    return;
  }
  if (Status fresh = refresh_checkpoint(); !fresh.is_ok()) {
    report.items.push_back({"node", "orphan removal skipped", "", fresh.message()});
    return;
  }
  std::set<std::string> owned;
  std::vector<ShareSpec> named;  // what the backends keep for a share not in it is theirs to remove
  {
    MutexLock lock(checkpoint_mutex_);
    for (const auto& [uid, entry] : checkpoint_) {
      add_owned_names(uid, entry, owned);
      named.insert(named.end(), entry.shares.begin(), entry.shares.end());
    }
  }
  auto remove_unowned = [&](const std::string& name, const std::function<DriftItem()>& remove) {
    if (owned.count(name) != 0 || !reserve_orphan(name)) return;
    report.items.push_back(remove());
    release_orphan(name);
  };
  std::error_code ec;
  for (const auto& item : fs::directory_iterator(options_.root + "/shares", ec)) {
    const std::string name = item.path().filename().string();
    remove_unowned("shares/" + name, [&] {
      std::error_code remove_error;
      fs::remove_all(item.path(), remove_error);
      return DriftItem{"share " + name, "share folder no claim names", "removed",
                       remove_error ? remove_error.message() : ""};
    });
  }
  const std::string prefix = kCdiSpecFilePrefix;
  for (const auto& item : fs::directory_iterator(options_.cdi_dir, ec)) {
    const std::string name = item.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    remove_unowned("cdi/" + name, [&] {
      std::error_code remove_error;
      fs::remove(item.path(), remove_error);
      return DriftItem{name, "CDI spec no claim names", "removed",
                       remove_error ? remove_error.message() : ""};
    });
  }
  // Lock files of claims no entry names (an agent died between an unprepare's save and the file's
  // removal); one a call holds is in use.
  std::set<std::string> entries;
  {
    MutexLock lock(checkpoint_mutex_);
    for (const auto& [uid, entry] : checkpoint_) entries.insert(uid + ".lock");
  }
  for (const auto& item : fs::directory_iterator(options_.root + "/claims", ec)) {
    const std::string name = item.path().filename().string();
    if (entries.count(name) != 0) continue;
    Result<std::optional<FileLock>> unused = FileLock::try_acquire(item.path().string());
    if (unused.is_ok() && *unused) (*unused)->remove_and_release();
  }
  for (const vgpu_config::SharingStrategy strategy :
       {vgpu_config::SharingStrategy::kQuota, vgpu_config::SharingStrategy::kMps,
        vgpu_config::SharingStrategy::kTimeSlicing})
    if (ShareBackend* backend = backend_for(strategy))
      for (auto& item : backend->remove_orphans(named, orphan_reserver(strategy)))
        report.items.push_back(std::move(item));
  // Temporaries of checkpoint and CDI writes a crash left (named by the dead agent's pid); those of
  // this process's writes in flight are kept.
  remove_stale_temporaries(options_.root, "checkpoint.json");
  remove_stale_temporaries(options_.cdi_dir, prefix);
}

ReconcileReport ShareManager::reconcile() {
  ReconcileReport report;
  MutexLock pass(reconcile_mutex_);
  try {
    std::vector<std::string> completed;
    {
      // The claims either agent completed, from disk.
      Result<FileLock> state = lock_state();
      if (!state.is_ok()) {
        report.items.push_back({"node", "reconcile stopped", "", state.status().message()});
        return report;
      }
      if (Status fresh = refresh_checkpoint(); !fresh.is_ok()) {
        report.items.push_back({"node", "reconcile stopped", "", fresh.message()});
        return report;
      }
      MutexLock lock(checkpoint_mutex_);
      for (const auto& [uid, entry] : checkpoint_)
        if (entry.state == ClaimState::kPrepareCompleted) completed.push_back(uid);
    }
    for (const auto& uid : completed) {
      // A claim a prepare or unprepare (of this agent, or of the other one) holds is changing:
      // the next pass checks it. Holding it reads its entry from disk: an unprepare the other
      // agent finished meanwhile leaves nothing to repair.
      const std::optional<ClaimLocks::Guard> claim_lock = claim_locks_.try_lock(uid);
      if (!claim_lock) continue;
      Result<std::optional<ClaimHold>> hold = hold_claim(uid, /*wait=*/false);
      if (!hold.is_ok()) {
        report.items.push_back({"claim " + uid, "not checked", "", hold.status().message()});
        continue;
      }
      if (!*hold) continue;
      std::optional<ClaimEntry> entry;
      {
        MutexLock lock(checkpoint_mutex_);
        if (const auto it = checkpoint_.find(uid);
            it != checkpoint_.end() && it->second.state == ClaimState::kPrepareCompleted)
          entry = it->second;
      }
      if (entry) reconcile_entry(uid, *entry, report);
    }
    remove_orphans(report);
  } catch (const std::exception& e) {
    report.items.push_back({"node", "reconcile stopped", "", e.what()});
  }
  return report;
}

}  // namespace tessera::agent
