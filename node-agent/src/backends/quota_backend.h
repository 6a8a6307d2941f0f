// The Quota strategy (the default): libvgpu in the share's processes enforces the memory and
// compute limits of the share folder's limits page, which the share manager writes for every
// share. Nothing else on the node is set up, checked or removed for it.
#pragma once

#include "backends/backend.h"

namespace tessera::agent {

class QuotaBackend final : public ShareBackend {
 public:
  vgpu_config::SharingStrategy strategy() const override {
    return vgpu_config::SharingStrategy::kQuota;
  }
  bool changes_node() const override { return false; }
  Status prepare(const ShareSpec& share, const HolderLookup& holder) override;
  Status unprepare(const ShareSpec& share, const HolderLookup& holder) override;
  std::vector<DriftItem> reconcile(const std::string& claim_uid, const ShareSpec& share) override;
  std::vector<DriftItem> remove_orphans(const std::vector<ShareSpec>& named,
                                        const ReserveOrphan& reserve) override;
};

}  // namespace tessera::agent
