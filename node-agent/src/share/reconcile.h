// What ShareManager::reconcile() found: one item per difference between the checkpoint (what
// should be on the host) and the host (share folders and limits pages, CDI specs, MPS daemons,
// time-slice settings), with what was done about it.
#pragma once

#include <string>
#include <vector>

#include "backends/backend.h"  // DriftItem: what the backends report too

namespace tessera::agent {

struct ReconcileReport {
  std::vector<DriftItem> items;
  bool clean() const { return items.empty(); }
  size_t failures() const;
  // One line per item: "share X: share folder missing: restored" / "...: repair failed: why".
  std::string to_text() const;
};

}  // namespace tessera::agent
