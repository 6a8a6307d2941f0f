#include "mig/mig_layout.h"

namespace tessera::agent {

Result<MigGpu> LayoutTrackingMigDriver::inspect(const GpuInfo& gpu) {
  inspections_.fetch_add(1, std::memory_order_acq_rel);
  return inner_.inspect(gpu);
}

Status LayoutTrackingMigDriver::set_mig_mode(const std::string& parent_uuid, bool enabled) {
  Status status = inner_.set_mig_mode(parent_uuid, enabled);
  note_layout_change();
  return status;
}

Result<std::vector<unsigned>> LayoutTrackingMigDriver::compute_pids(
    const std::string& parent_uuid) {
  return inner_.compute_pids(parent_uuid);
}

Result<unsigned> LayoutTrackingMigDriver::create_gpu_instance(const std::string& parent_uuid,
                                                              unsigned profile_id,
                                                              const MigPlacement& placement) {
  Result<unsigned> created = inner_.create_gpu_instance(parent_uuid, profile_id, placement);
  note_layout_change();
  return created;
}

Result<CreatedComputeInstance> LayoutTrackingMigDriver::create_compute_instance(
    const std::string& parent_uuid, unsigned gi_id) {
  Result<CreatedComputeInstance> created = inner_.create_compute_instance(parent_uuid, gi_id);
  note_layout_change();
  return created;
}

Status LayoutTrackingMigDriver::destroy_compute_instance(const std::string& parent_uuid,
                                                         unsigned gi_id, unsigned ci_id) {
  Status status = inner_.destroy_compute_instance(parent_uuid, gi_id, ci_id);
  note_layout_change();
  return status;
}

Status LayoutTrackingMigDriver::destroy_gpu_instance(const std::string& parent_uuid,
                                                     unsigned gi_id) {
  Status status = inner_.destroy_gpu_instance(parent_uuid, gi_id);
  note_layout_change();
  return status;
}

}  // namespace tessera::agent
