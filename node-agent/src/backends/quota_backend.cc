#include "backends/quota_backend.h"

namespace tessera::agent {

// The limits page is the share manager's (it is in every share's folder, whatever the strategy).
Status QuotaBackend::prepare(const ShareSpec&, const HolderLookup&) {
  return Status::ok();
}

Status QuotaBackend::unprepare(const ShareSpec&, const HolderLookup&) {
  return Status::ok();
}

std::vector<DriftItem> QuotaBackend::reconcile(const std::string&, const ShareSpec&) {
  return {};
}

std::vector<DriftItem> QuotaBackend::remove_orphans(const std::vector<ShareSpec>&,
                                                    const ReserveOrphan&) {
  return {};
}

}  // namespace tessera::agent
