#include "mig/nvml_mig_driver.h"

#include <algorithm>

namespace tessera::agent {
namespace {

// NVML_COMPUTE_INSTANCE_PROFILE_* indices: 1_SLICE .. 7_SLICE_NVL (mig-facts.md §2.1).
constexpr unsigned kComputeProfileIndexCount = 0x9;

Result<nvml::Session> open_session(const std::string& library) {
  return nvml::Session::open(library, nvml::kMigEntryPoints);
}

// The compute instance profile that takes the whole GPU instance (the default one): the supported
// profile with the most slices.
Result<nvmlComputeInstanceProfileInfo_v3_t> full_compute_profile(const nvml::Session& session,
                                                                 nvmlGpuInstance_t instance) {
  std::optional<nvmlComputeInstanceProfileInfo_v3_t> best;
  for (unsigned index = 0; index < kComputeProfileIndexCount; ++index) {
    Result<nvmlComputeInstanceProfileInfo_v3_t> info =
        session.compute_instance_profile_info(instance, index);
    if (!info.is_ok()) {
      if (info.status().code() == StatusCode::kInvalidArgument) break;        // past the last
      if (info.status().code() == StatusCode::kFailedPrecondition) continue;  // not here
      return info.status();
    }
    if (!best || info->sliceCount > best->sliceCount) best = *info;
  }
  if (!best) return failed_precondition("the GPU instance has no compute instance profile");
  return *best;
}

}  // namespace

Result<MigGpu> NvmlMigDriver::inspect(const GpuInfo& gpu) {
  MigGpu state;
  state.uuid = gpu.uuid;
  state.minor = gpu.minor;
  state.memory_bytes = gpu.memory_bytes;
  TESSERA_ASSIGN_OR_RETURN(const nvml::Session session, nvml::Session::open(library_));
  // A driver older than MIG (R470) has not its entry points: no MIG on any of its GPUs.
  if (!session.library().require(nvml::kMigEntryPoints).is_ok()) return state;
  TESSERA_ASSIGN_OR_RETURN(const nvmlDevice_t device, session.device_by_uuid(gpu.uuid));
  Result<nvml::MigMode> mode = session.mig_mode(device);
  if (!mode.is_ok()) {
    // NOT_SUPPORTED: a GPU without MIG.
    if (mode.status().code() == StatusCode::kFailedPrecondition) return state;
    return mode.status();
  }
  state.capable = true;
  state.enabled = mode->current == NVML_DEVICE_MIG_ENABLE;
  state.pending_enabled = mode->pending == NVML_DEVICE_MIG_ENABLE;
  for (const unsigned index : kMigProfileIndices) {
    Result<nvmlGpuInstanceProfileInfo_v3_t> info = session.gpu_instance_profile_info(device, index);
    if (!info.is_ok()) {
      if (info.status().code() == StatusCode::kInvalidArgument) break;
      if (info.status().code() == StatusCode::kFailedPrecondition) continue;
      return info.status();
    }
    MigProfile profile;
    profile.index = index;
    profile.id = info->id;
    profile.compute_slices = info->sliceCount;
    profile.instance_count = info->instanceCount;
    profile.multiprocessors = info->multiprocessorCount;
    profile.memory_bytes = static_cast<uint64_t>(info->memorySizeMB) << 20;  // MiB
    profile.name =
        mig_profile_name(index, info->sliceCount, profile.memory_bytes, gpu.memory_bytes);
    TESSERA_ASSIGN_OR_RETURN(const std::vector<nvmlGpuInstancePlacement_t> placements,
                             session.gpu_instance_possible_placements(device, info->id));
    for (const auto& placement : placements)
      profile.placements.push_back({placement.start, placement.size});
    state.profiles.push_back(std::move(profile));
  }
  if (!state.enabled) return state;
  for (const MigProfile& profile : state.profiles) {
    TESSERA_ASSIGN_OR_RETURN(const std::vector<nvmlGpuInstance_t> instances,
                             session.gpu_instances(device, profile.id));
    for (const nvmlGpuInstance_t handle : instances) {
      TESSERA_ASSIGN_OR_RETURN(const nvmlGpuInstanceInfo_t info, session.gpu_instance_info(handle));
      MigInstance instance;
      instance.gi_id = info.id;
      instance.profile_id = info.profileId;
      instance.placement = {info.placement.start, info.placement.size};
      instance.memory_bytes = profile.memory_bytes;
      // Its compute instances: the first one found is its MIG device.
      for (unsigned index = 0; index < kComputeProfileIndexCount && !instance.ci_id; ++index) {
        Result<nvmlComputeInstanceProfileInfo_v3_t> ci_profile =
            session.compute_instance_profile_info(handle, index);
        if (!ci_profile.is_ok()) {
          if (ci_profile.status().code() == StatusCode::kInvalidArgument) break;
          if (ci_profile.status().code() == StatusCode::kFailedPrecondition) continue;
          return ci_profile.status();
        }
        TESSERA_ASSIGN_OR_RETURN(const std::vector<nvmlComputeInstance_t> computes,
                                 session.compute_instances(handle, ci_profile->id));
        if (computes.empty()) continue;
        TESSERA_ASSIGN_OR_RETURN(const nvmlComputeInstanceInfo_t ci,
                                 session.compute_instance_info(computes.front()));
        TESSERA_ASSIGN_OR_RETURN(instance.uuid, session.uuid(ci.device));
        instance.ci_id = ci.id;
        instance.multiprocessors = ci_profile->multiprocessorCount;
      }
      state.instances.push_back(instance);
    }
  }
  std::sort(state.instances.begin(), state.instances.end(),
            [](const MigInstance& a, const MigInstance& b) { return a.gi_id < b.gi_id; });
  return state;
}

Status NvmlMigDriver::set_mig_mode(const std::string& parent_uuid, bool enabled) {
  TESSERA_ASSIGN_OR_RETURN(const nvml::Session session, open_session(library_));
  TESSERA_ASSIGN_OR_RETURN(const nvmlDevice_t device, session.device_by_uuid(parent_uuid));
  return session.set_mig_mode(device, enabled ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE);
}

Result<std::vector<unsigned>> NvmlMigDriver::compute_pids(const std::string& parent_uuid) {
  TESSERA_ASSIGN_OR_RETURN(const nvml::Session session, open_session(library_));
  TESSERA_ASSIGN_OR_RETURN(const nvmlDevice_t device, session.device_by_uuid(parent_uuid));
  TESSERA_ASSIGN_OR_RETURN(const std::vector<nvmlProcessInfo_t> processes,
                           session.compute_processes(device));
  std::vector<unsigned> pids;
  for (const auto& process : processes) pids.push_back(process.pid);
  return pids;
}

Result<unsigned> NvmlMigDriver::create_gpu_instance(const std::string& parent_uuid,
                                                    unsigned profile_id,
                                                    const MigPlacement& placement) {
  TESSERA_ASSIGN_OR_RETURN(const nvml::Session session, open_session(library_));
  TESSERA_ASSIGN_OR_RETURN(const nvmlDevice_t device, session.device_by_uuid(parent_uuid));
  nvmlGpuInstancePlacement_t at{};
  at.start = placement.start;
  at.size = placement.size;
  TESSERA_ASSIGN_OR_RETURN(const nvmlGpuInstance_t instance,
                           session.create_gpu_instance_with_placement(device, profile_id, at));
  TESSERA_ASSIGN_OR_RETURN(const nvmlGpuInstanceInfo_t info, session.gpu_instance_info(instance));
  return info.id;
}

Result<CreatedComputeInstance> NvmlMigDriver::create_compute_instance(
    const std::string& parent_uuid, unsigned gi_id) {
  TESSERA_ASSIGN_OR_RETURN(const nvml::Session session, open_session(library_));
  TESSERA_ASSIGN_OR_RETURN(const nvmlDevice_t device, session.device_by_uuid(parent_uuid));
  TESSERA_ASSIGN_OR_RETURN(const nvmlGpuInstance_t instance,
                           session.gpu_instance_by_id(device, gi_id));
  TESSERA_ASSIGN_OR_RETURN(const nvmlComputeInstanceProfileInfo_v3_t profile,
                           full_compute_profile(session, instance));
  TESSERA_ASSIGN_OR_RETURN(const nvmlComputeInstance_t compute,
                           session.create_compute_instance(instance, profile.id));
  TESSERA_ASSIGN_OR_RETURN(const nvmlComputeInstanceInfo_t info,
                           session.compute_instance_info(compute));
  // The UUID from the compute instance's own MIG device handle (walking MIG indices is slow under
  // load, as NVIDIA's DRA driver measured).
  TESSERA_ASSIGN_OR_RETURN(std::string uuid, session.uuid(info.device));
  return CreatedComputeInstance{info.id, std::move(uuid)};
}

Status NvmlMigDriver::destroy_compute_instance(const std::string& parent_uuid, unsigned gi_id,
                                               unsigned ci_id) {
  TESSERA_ASSIGN_OR_RETURN(const nvml::Session session, open_session(library_));
  TESSERA_ASSIGN_OR_RETURN(const nvmlDevice_t device, session.device_by_uuid(parent_uuid));
  TESSERA_ASSIGN_OR_RETURN(const nvmlGpuInstance_t instance,
                           session.gpu_instance_by_id(device, gi_id));
  TESSERA_ASSIGN_OR_RETURN(const nvmlComputeInstance_t compute,
                           session.compute_instance_by_id(instance, ci_id));
  return session.destroy_compute_instance(compute);
}

Status NvmlMigDriver::destroy_gpu_instance(const std::string& parent_uuid, unsigned gi_id) {
  TESSERA_ASSIGN_OR_RETURN(const nvml::Session session, open_session(library_));
  TESSERA_ASSIGN_OR_RETURN(const nvmlDevice_t device, session.device_by_uuid(parent_uuid));
  TESSERA_ASSIGN_OR_RETURN(const nvmlGpuInstance_t instance,
                           session.gpu_instance_by_id(device, gi_id));
  return session.destroy_gpu_instance(instance);
}

}  // namespace tessera::agent
