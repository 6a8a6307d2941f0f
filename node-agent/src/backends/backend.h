// The node-side half of a sharing strategy (SharingStrategy, model/vgpu_config.h): what a share
// of that strategy needs on the node beyond its share folder, which the share manager writes for
// every share. The share manager holds one backend per strategy and calls it for each share of
// that strategy from prepare, unprepare and reconcile, so it knows no strategy's details.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/claim_locks.h"
#include "model/share_spec.h"
#include "tessera/status.h"

namespace tessera::agent {

// One difference between what should be on the node (the checkpoint) and what is, with what was
// done about it.
struct DriftItem {
  std::string subject;  // "share <name>", "claim <uid>", "GPU-..."
  std::string problem;  // "share folder missing"
  std::string action;   // "restored"; "" when the repair failed
  std::string error;    // why the repair failed
  bool repaired() const { return error.empty(); }
};

// A share of another prepared claim on the same GPU with the same strategy, or null. A backend
// whose setting is the GPU's (one time-slice interval per GPU) asks; the others never pay for it.
// The share manager answers from its record of the claims whose prepare of the GPU succeeded,
// which it changes only under the backend's lock_gpu, so the answer holds for the whole call.
using HolderLookup = std::function<const ShareSpec*()>;

// Held while a backend removes what it keeps for a share no checkpoint entry names (an orphan): a
// prepare whose claim names the same thing meanwhile waits for the release, so a removal never
// undoes what a concurrent prepare sets up (an MPS daemon it just started). Empty when refused.
class OrphanReservation {
 public:
  OrphanReservation() = default;
  explicit OrphanReservation(std::function<void()> release) : release_(std::move(release)) {}
  OrphanReservation(OrphanReservation&& other) noexcept
      : release_(std::exchange(other.release_, nullptr)) {}
  OrphanReservation(const OrphanReservation&) = delete;
  OrphanReservation& operator=(const OrphanReservation&) = delete;
  OrphanReservation& operator=(OrphanReservation&&) = delete;
  ~OrphanReservation() {
    if (release_) release_();
  }
  explicit operator bool() const { return static_cast<bool>(release_); }

 private:
  std::function<void()> release_;
};

// Asked by remove_orphans just before it removes a candidate, with the candidate's orphan_name:
// a held reservation when no checkpoint entry (of any state) names it, else an empty one (keep it).
using ReserveOrphan = std::function<OrphanReservation(const std::string& name)>;

class ShareBackend {
 public:
  virtual ~ShareBackend() = default;

  virtual vgpu_config::SharingStrategy strategy() const = 0;
  // False when the strategy needs nothing on the node beyond the share folder: its calls are no
  // durable steps of prepare and unprepare.
  virtual bool changes_node() const { return true; }
  // The name under which remove_orphans finds what prepare sets up for `share` (the MPS share
  // folder's, the GPU's UUID for a GPU-wide setting); "" when it keeps nothing per share.
  virtual std::string orphan_name(const ShareSpec& share) const {
    (void)share;
    return "";
  }
  // For a backend whose setting is the GPU's: the lock of GPU `uuid` that the caller holds across
  // prepare, unprepare and reconcile of a share on it and across its record of the GPU's holders
  // (HolderLookup), so that check, apply and record are one step per GPU. nullopt (the default)
  // when the shares of one GPU are independent.
  virtual std::optional<ClaimLocks::Guard> lock_gpu(const std::string& uuid) {
    (void)uuid;
    return std::nullopt;
  }

  // Sets `share` up on the node. Idempotent (kubelet retries, a crash redoes it).
  virtual Status prepare(const ShareSpec& share, const HolderLookup& holder) = 0;
  // Undoes prepare; a GPU-wide setting that `holder` still holds stays.
  virtual Status unprepare(const ShareSpec& share, const HolderLookup& holder) = 0;
  // Checks what prepare set up for `share` of a prepared claim and repairs what differs.
  virtual std::vector<DriftItem> reconcile(const std::string& claim_uid,
                                           const ShareSpec& share) = 0;
  // Removes what the backend keeps on the node for a share that is not in `named` (every share
  // of every checkpoint entry when the pass began), each only once `reserve` granted its name
  // (an entry may have named it since). Safe beside prepares and unprepares.
  virtual std::vector<DriftItem> remove_orphans(const std::vector<ShareSpec>& named,
                                                const ReserveOrphan& reserve) = 0;
};

}  // namespace tessera::agent
