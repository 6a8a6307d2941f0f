// The node-side half of a sharing strategy (SharingStrategy, model/vgpu_config.h): what a share
// of that strategy needs on the node beyond its share folder, which the share manager writes for
// every share. The share manager holds one backend per strategy and calls it for each share of
// that strategy from prepare, unprepare and reconcile, so it knows no strategy's details.
#pragma once

#include <functional>
#include <string>
#include <vector>

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
using HolderLookup = std::function<const ShareSpec*()>;

class ShareBackend {
 public:
  virtual ~ShareBackend() = default;

  virtual SharingStrategy strategy() const = 0;
  // False when the strategy needs nothing on the node beyond the share folder: its calls are no
  // durable steps of prepare and unprepare.
  virtual bool changes_node() const { return true; }

  // Sets `share` up on the node. Idempotent (kubelet retries, a crash redoes it).
  virtual Status prepare(const ShareSpec& share, const HolderLookup& holder) = 0;
  // Undoes prepare; a GPU-wide setting that `holder` still holds stays.
  virtual Status unprepare(const ShareSpec& share, const HolderLookup& holder) = 0;
  // Checks what prepare set up for `share` of a prepared claim and repairs what differs.
  virtual std::vector<DriftItem> reconcile(const std::string& claim_uid,
                                           const ShareSpec& share) = 0;
  // Removes what the backend keeps on the node for a share that is not in `named` (every share
  // of every checkpoint entry).
  virtual std::vector<DriftItem> remove_orphans(const std::vector<ShareSpec>& named) = 0;
};

}  // namespace tessera::agent
