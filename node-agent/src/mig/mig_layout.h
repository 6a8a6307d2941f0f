// A MigDriver that counts what goes through it (docs/node-agent.md, "MIG"): every call that can
// change a GPU's MIG layout (mode, instances made or destroyed) bumps `layout_changes`, and every
// inspect (one NVML session and a walk of the GPU's profiles and instances) bumps `inspections`.
// The agent wraps its NVML driver in it, so the MIG view the device monitor asks for at every turn
// is read again only after something changed the layout, not at each turn.
#pragma once

#include <atomic>
#include <cstdint>

#include "mig/mig_driver.h"

namespace tessera::agent {

class LayoutTrackingMigDriver final : public MigDriver {
 public:
  // `inner` outlives this driver.
  explicit LayoutTrackingMigDriver(MigDriver& inner) : inner_(inner) {}

  // Bumped as each call that can change the layout returns (a failed one too: it may have done
  // part of it).
  uint64_t layout_changes() const { return layout_changes_.load(std::memory_order_acquire); }
  uint64_t inspections() const { return inspections_.load(std::memory_order_acquire); }
  // Something outside the driver changed the layout (the GPUs themselves: a device event).
  void note_layout_change() { layout_changes_.fetch_add(1, std::memory_order_acq_rel); }

  Result<MigGpu> inspect(const GpuInfo& gpu) override;
  Status set_mig_mode(const std::string& parent_uuid, bool enabled) override;
  Result<std::vector<unsigned>> compute_pids(const std::string& parent_uuid) override;
  Result<unsigned> create_gpu_instance(const std::string& parent_uuid, unsigned profile_id,
                                       const MigPlacement& placement) override;
  Result<CreatedComputeInstance> create_compute_instance(const std::string& parent_uuid,
                                                         unsigned gi_id) override;
  Status destroy_compute_instance(const std::string& parent_uuid, unsigned gi_id,
                                  unsigned ci_id) override;
  Status destroy_gpu_instance(const std::string& parent_uuid, unsigned gi_id) override;

 private:
  MigDriver& inner_;
  std::atomic<uint64_t> layout_changes_{0};
  std::atomic<uint64_t> inspections_{0};
};

}  // namespace tessera::agent
