// NVML's Multi-Instance GPU API over the simulator's MIG state (simgpu/core/simulator_mig.cc):
// MIG mode, GPU-instance profiles (by index) and placements and instances (by profile ID),
// compute instances, and MIG device handles. Return codes as nvml.h documents them (NVIDIA/go-nvml
// gen/nvml/nvml.h @ 2f9e261f, the nvmlMultiInstanceGPU group). Every process of the simulated
// machine sees the same instances. Root is not modelled: every caller may manage MIG (tests run as
// root, as the node agent does).
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "nvml_internal.h"

namespace simgpu::nvml {
namespace {

nvmlReturn_t to_nvml(MigError error) {
  switch (error) {
    case MigError::kOk:
      return NVML_SUCCESS;
    case MigError::kNotSupported:
      return NVML_ERROR_NOT_SUPPORTED;
    case MigError::kInvalidArgument:
      return NVML_ERROR_INVALID_ARGUMENT;
    case MigError::kInsufficientResources:
      return NVML_ERROR_INSUFFICIENT_RESOURCES;
    case MigError::kInUse:
      return NVML_ERROR_IN_USE;
    case MigError::kNotFound:
      return NVML_ERROR_NOT_FOUND;
  }
  return NVML_ERROR_UNKNOWN;
}

// A whole, MIG-capable GPU: what the mode, profile and GPU-instance calls take.
nvmlReturn_t resolve_capable(nvmlDevice_t handle, Device& out, const MigModel*& model) {
  if (nvmlReturn_t result = resolve(handle, out); result != NVML_SUCCESS) return result;
  if (out.is_mig) return NVML_ERROR_INVALID_ARGUMENT;  // a MIG device has no instances of its own
  model = out.sim->mig_model(out.index);
  return model == nullptr ? NVML_ERROR_NOT_SUPPORTED : NVML_SUCCESS;
}

// A GPU instance handle of ours whose instance exists: its GPU and a copy of it.
struct GpuInstance {
  Simulator* sim = nullptr;
  int device = -1;
  const MigModel* model = nullptr;
  MigGpuInstance instance{};
  const MigGpuInstanceProfile* profile = nullptr;
};

template <typename Handle>
bool one_of_ours(Handle handle, const Handle first, size_t count) {
  const auto address = reinterpret_cast<uintptr_t>(handle);
  const auto base = reinterpret_cast<uintptr_t>(first);
  using Element = std::remove_pointer_t<Handle>;
  return address >= base && address < base + count * sizeof(Element) &&
         (address - base) % sizeof(Element) == 0;
}

// NVML_ERROR_INVALID_ARGUMENT for a foreign handle, NOT_SUPPORTED when MIG mode went off,
// NOT_FOUND when the instance was destroyed.
nvmlReturn_t resolve_gpu_instance(nvmlGpuInstance_t handle, GpuInstance& out) {
  Simulator* sim = initialised_simulator();
  if (sim == nullptr) return NVML_ERROR_UNINITIALIZED;
  if (!one_of_ours(handle, gpu_instance_handle(0, 0), kMaxDevices * kGpuInstanceIds))
    return NVML_ERROR_INVALID_ARGUMENT;
  if (handle->device >= sim->device_count()) return NVML_ERROR_INVALID_ARGUMENT;
  out.sim = sim;
  out.device = handle->device;
  out.model = sim->mig_model(handle->device);
  const MigState state = sim->mig_state(handle->device);
  if (out.model == nullptr || state.mode == 0) return NVML_ERROR_NOT_SUPPORTED;
  for (const MigGpuInstance& instance : state.gpu_instances) {
    if (instance.in_use != 0 && instance.id == static_cast<uint32_t>(handle->id)) {
      out.instance = instance;
      out.profile = &out.model->profiles[instance.profile_index];
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t resolve_compute_instance(nvmlComputeInstance_t handle, GpuInstance& gpu,
                                      MigComputeInstance& out) {
  Simulator* sim = initialised_simulator();
  if (sim == nullptr) return NVML_ERROR_UNINITIALIZED;
  if (!one_of_ours(handle, compute_instance_handle(0, 0, 0),
                   kMaxDevices * kGpuInstanceIds * kMaxComputeInstances))
    return NVML_ERROR_INVALID_ARGUMENT;
  if (nvmlReturn_t result = resolve_gpu_instance(
          gpu_instance_handle(handle->device, static_cast<uint32_t>(handle->gpu_instance_id)), gpu);
      result != NVML_SUCCESS) {
    return result;
  }
  for (const MigComputeInstance& compute : gpu.instance.compute) {
    if (compute.in_use != 0 && compute.id == static_cast<uint32_t>(handle->id)) {
      out = compute;
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

// The driver-supplied name of a profile (v2/v3 `name`): nvidia-smi prints "MIG 1g.10gb"; the
// exact string a driver returns was NOT VERIFIED (facts §7.5).
void profile_name(const char* name, char (&out)[NVML_DEVICE_NAME_V2_BUFFER_SIZE]) {
  std::snprintf(out, sizeof out, "MIG %s", name);
}

template <typename Info>
void fill_gpu_profile(const MigGpuInstanceProfile& profile, Info& info) {
  info.id = profile.id;
  info.sliceCount = profile.compute_slices;
  info.instanceCount = profile.instance_count;
  info.multiprocessorCount = profile.multiprocessors;
  info.copyEngineCount = profile.copy_engines;
  info.decoderCount = profile.decoders;
  info.encoderCount = profile.encoders;
  info.jpegCount = profile.jpeg_engines;
  info.ofaCount = profile.ofa_engines;
  info.memorySizeMB = profile.memory_mib;
}

const MigGpuInstanceProfile* profile_by_index(const MigModel& model, unsigned int index) {
  for (const MigGpuInstanceProfile& profile : model.profiles) {
    if (profile.index == index) return &profile;
  }
  return nullptr;
}

const MigGpuInstanceProfile* profile_by_id(const MigModel& model, unsigned int id) {
  for (const MigGpuInstanceProfile& profile : model.profiles) {
    if (profile.id == id) return &profile;
  }
  return nullptr;
}

// Writes the v2 or v3 layout the caller's `version` names.
nvmlReturn_t fill_versioned_gpu_profile(const MigGpuInstanceProfile& profile,
                                        nvmlGpuInstanceProfileInfo_v2_t* info) {
  if (info->version == nvmlGpuInstanceProfileInfo_v3) {
    auto* v3 = reinterpret_cast<nvmlGpuInstanceProfileInfo_v3_t*>(info);
    *v3 = nvmlGpuInstanceProfileInfo_v3_t{};
    v3->version = nvmlGpuInstanceProfileInfo_v3;
    fill_gpu_profile(profile, *v3);
    profile_name(profile.name, v3->name);
    v3->capabilities = 0;  // no P2P between MIG instances, no graphics on these parts
    return NVML_SUCCESS;
  }
  if (info->version != nvmlGpuInstanceProfileInfo_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  *info = nvmlGpuInstanceProfileInfo_v2_t{};
  info->version = nvmlGpuInstanceProfileInfo_v2;
  fill_gpu_profile(profile, *info);
  profile_name(profile.name, info->name);
  return NVML_SUCCESS;
}

const MigComputeInstanceProfile* compute_profile(uint32_t gpu_compute_slices, unsigned int index) {
  for (const MigComputeInstanceProfile& profile : mig_compute_instance_profiles()) {
    if (profile.gpu_compute_slices == gpu_compute_slices && profile.index == index) return &profile;
  }
  return nullptr;
}

template <typename Info>
void fill_compute_profile(const GpuInstance& gpu, const MigComputeInstanceProfile& profile,
                          Info& info) {
  info.id = profile.index;
  info.sliceCount = profile.compute_slices;
  info.instanceCount = profile.instance_count;
  info.multiprocessorCount =
      gpu.profile->multiprocessors * profile.compute_slices / gpu.profile->compute_slices;
  info.sharedCopyEngineCount = gpu.profile->copy_engines;
  info.sharedDecoderCount = gpu.profile->decoders;
  info.sharedEncoderCount = gpu.profile->encoders;
  info.sharedJpegCount = gpu.profile->jpeg_engines;
  info.sharedOfaCount = gpu.profile->ofa_engines;
}

nvmlReturn_t compute_profile_info(nvmlGpuInstance_t handle, unsigned int profile_index,
                                  unsigned int engine_profile, GpuInstance& gpu,
                                  const MigComputeInstanceProfile*& out) {
  if (nvmlReturn_t result = resolve_gpu_instance(handle, gpu); result != NVML_SUCCESS)
    return result;
  if (profile_index >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT ||
      engine_profile >= NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  out = compute_profile(gpu.profile->compute_slices, profile_index);
  return out == nullptr ? NVML_ERROR_NOT_SUPPORTED : NVML_SUCCESS;
}

nvmlReturn_t possible_placements(nvmlDevice_t device, unsigned int profile_id,
                                 nvmlGpuInstancePlacement_t* placements, unsigned int* count) {
  Device dev;
  const MigModel* model = nullptr;
  if (nvmlReturn_t result = resolve_capable(device, dev, model); result != NVML_SUCCESS)
    return result;
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const MigGpuInstanceProfile* profile = profile_by_id(*model, profile_id);
  if (profile == nullptr) return NVML_ERROR_NOT_SUPPORTED;
  // Every legal placement, whatever is occupied, with MIG mode on or off.
  if (placements != nullptr) {
    for (uint32_t p = 0; p < profile->placement_count; ++p)
      placements[p] = {profile->placement_starts[p], profile->memory_slices};
  }
  *count = profile->placement_count;
  return NVML_SUCCESS;
}

nvmlReturn_t create_gpu_instance(nvmlDevice_t device, unsigned int profile_id,
                                 const uint32_t* start, nvmlGpuInstance_t* gpu_instance) {
  Device dev;
  const MigModel* model = nullptr;
  if (nvmlReturn_t result = resolve_capable(device, dev, model); result != NVML_SUCCESS)
    return result;
  if (gpu_instance == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  uint32_t id = 0;
  const MigError error = dev.sim->create_gpu_instance(dev.index, profile_id, start, id);
  if (error != MigError::kOk) return to_nvml(error);
  *gpu_instance = gpu_instance_handle(dev.index, id);
  return NVML_SUCCESS;
}

nvmlReturn_t compute_instance_info(nvmlComputeInstance_t handle, nvmlComputeInstanceInfo_t* info,
                                   bool with_placement) {
  GpuInstance gpu;
  MigComputeInstance compute{};
  if (nvmlReturn_t result = resolve_compute_instance(handle, gpu, compute); result != NVML_SUCCESS)
    return result;
  if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  info->device = mig_handle_for(gpu.device, gpu.instance.id, compute.id);
  info->gpuInstance = gpu_instance_handle(gpu.device, gpu.instance.id);
  info->id = compute.id;
  info->profileId = compute.profile_id;
  // The unversioned call's callers were built with a struct that ends before `placement`.
  if (with_placement) info->placement = {compute.start, compute.size};
  return NVML_SUCCESS;
}

nvmlReturn_t attributes(nvmlDevice_t device, nvmlDeviceAttributes_t* attributes) {
  Device dev;
  if (nvmlReturn_t result = resolve(device, dev); result != NVML_SUCCESS) return result;
  if (!dev.is_mig) return NVML_ERROR_NOT_SUPPORTED;  // MIG device handles only
  if (attributes == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const MigGpuInstanceProfile& profile = *dev.mig.profile;
  *attributes = nvmlDeviceAttributes_t{};
  attributes->multiprocessorCount = dev.mig.compute_instance.multiprocessors;
  attributes->sharedCopyEngineCount = profile.copy_engines;
  attributes->sharedDecoderCount = profile.decoders;
  attributes->sharedEncoderCount = profile.encoders;
  attributes->sharedJpegCount = profile.jpeg_engines;
  attributes->sharedOfaCount = profile.ofa_engines;
  attributes->gpuInstanceSliceCount = profile.compute_slices;
  attributes->computeInstanceSliceCount = dev.mig.compute_instance.size;
  attributes->memorySizeMB = profile.memory_mib;
  return NVML_SUCCESS;
}

}  // namespace
}  // namespace simgpu::nvml

using namespace simgpu::nvml;
using simgpu::MigComputeInstance;
using simgpu::MigError;
using simgpu::MigGpuInstance;
using simgpu::MigModel;

extern "C" {

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int* currentMode,
                                  unsigned int* pendingMode) {
  Device dev;
  const MigModel* model = nullptr;
  if (nvmlReturn_t result = resolve_capable(device, dev, model); result != NVML_SUCCESS)
    return result;
  if (currentMode == nullptr || pendingMode == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const simgpu::MigState state = dev.sim->mig_state(dev.index);
  *currentMode = state.mode;
  *pendingMode = state.pending_mode;
  return NVML_SUCCESS;
}

// Hopper+: the mode changes at once when the GPU is idle. Ampere: the driver's reset is assumed to
// succeed when idle; when not, the request stays pending. Busy: activationStatus IN_USE.
nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode,
                                  nvmlReturn_t* activationStatus) {
  Device dev;
  const MigModel* model = nullptr;
  if (nvmlReturn_t result = resolve_capable(device, dev, model); result != NVML_SUCCESS)
    return result;
  if (activationStatus == nullptr ||
      (mode != NVML_DEVICE_MIG_ENABLE && mode != NVML_DEVICE_MIG_DISABLE)) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  *activationStatus = to_nvml(dev.sim->set_mig_mode(dev.index, mode == NVML_DEVICE_MIG_ENABLE));
  return NVML_SUCCESS;
}

// Profiles answer with MIG mode on or off (NVIDIA's DRA driver reads them on a Hopper with MIG
// off): NOT_SUPPORTED only for a GPU without MIG or a profile it lacks; INVALID_ARGUMENT past the
// last index, which ends an enumeration.
nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                 nvmlGpuInstanceProfileInfo_t* info) {
  Device dev;
  const MigModel* model = nullptr;
  if (nvmlReturn_t result = resolve_capable(device, dev, model); result != NVML_SUCCESS)
    return result;
  if (info == nullptr || profile >= NVML_GPU_INSTANCE_PROFILE_COUNT)
    return NVML_ERROR_INVALID_ARGUMENT;
  const simgpu::MigGpuInstanceProfile* found = profile_by_index(*model, profile);
  if (found == nullptr) return NVML_ERROR_NOT_SUPPORTED;
  *info = nvmlGpuInstanceProfileInfo_t{};
  fill_gpu_profile(*found, *info);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile,
                                                  nvmlGpuInstanceProfileInfo_v2_t* info) {
  Device dev;
  const MigModel* model = nullptr;
  if (nvmlReturn_t result = resolve_capable(device, dev, model); result != NVML_SUCCESS)
    return result;
  if (info == nullptr || profile >= NVML_GPU_INSTANCE_PROFILE_COUNT)
    return NVML_ERROR_INVALID_ARGUMENT;
  const simgpu::MigGpuInstanceProfile* found = profile_by_index(*model, profile);
  if (found == nullptr) return NVML_ERROR_NOT_SUPPORTED;
  return fill_versioned_gpu_profile(*found, info);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoByIdV(nvmlDevice_t device, unsigned int profileId,
                                                      nvmlGpuInstanceProfileInfo_v2_t* info) {
  Device dev;
  const MigModel* model = nullptr;
  if (nvmlReturn_t result = resolve_capable(device, dev, model); result != NVML_SUCCESS)
    return result;
  if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const simgpu::MigGpuInstanceProfile* found = profile_by_id(*model, profileId);
  if (found == nullptr) return NVML_ERROR_NOT_SUPPORTED;
  return fill_versioned_gpu_profile(*found, info);
}

nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t device,
                                                           unsigned int profileId,
                                                           nvmlGpuInstancePlacement_t* placements,
                                                           unsigned int* count) {
  return possible_placements(device, profileId, placements, count);
}

nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements(nvmlDevice_t device, unsigned int profileId,
                                                        nvmlGpuInstancePlacement_t* placements,
                                                        unsigned int* count) {
  return possible_placements(device, profileId, placements, count);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t device, unsigned int profileId,
                                                       unsigned int* count) {
  Device dev;
  const MigModel* model = nullptr;
  if (nvmlReturn_t result = resolve_capable(device, dev, model); result != NVML_SUCCESS)
    return result;
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const simgpu::MigGpuInstanceProfile* profile = profile_by_id(*model, profileId);
  const simgpu::MigState state = dev.sim->mig_state(dev.index);
  if (profile == nullptr || state.mode == 0) return NVML_ERROR_NOT_SUPPORTED;
  // How many more fit: free placements, no two overlapping, within the instance count and the
  // compute slices left.
  bool taken[simgpu::kMigMemorySlices] = {};
  uint32_t same = 0;
  uint32_t compute_used = 0;
  for (const MigGpuInstance& instance : state.gpu_instances) {
    if (instance.in_use == 0) continue;
    for (uint32_t s = instance.start; s < instance.start + instance.size; ++s) taken[s] = true;
    const simgpu::MigGpuInstanceProfile& other = model->profiles[instance.profile_index];
    same += other.id == profileId ? 1 : 0;
    compute_used += other.compute_slices;
  }
  unsigned int fits = 0;
  for (uint32_t p = 0; p < profile->placement_count; ++p) {
    const uint32_t start = profile->placement_starts[p];
    bool free = true;
    for (uint32_t s = start; s < start + profile->memory_slices; ++s) free &= !taken[s];
    if (!free) continue;
    for (uint32_t s = start; s < start + profile->memory_slices; ++s) taken[s] = true;
    ++fits;
  }
  const uint32_t by_count = profile->instance_count - std::min(profile->instance_count, same);
  const uint32_t by_compute =
      (simgpu::kMigComputeSlices - std::min<uint32_t>(simgpu::kMigComputeSlices, compute_used)) /
      profile->compute_slices;
  *count = std::min<uint32_t>({fits, by_count, by_compute});
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t device, unsigned int profileId,
                                         nvmlGpuInstance_t* gpuInstance) {
  return create_gpu_instance(device, profileId, nullptr, gpuInstance);
}

nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t device, unsigned int profileId,
                                                      const nvmlGpuInstancePlacement_t* placement,
                                                      nvmlGpuInstance_t* gpuInstance) {
  if (placement == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  Device dev;
  const MigModel* model = nullptr;
  if (nvmlReturn_t result = resolve_capable(device, dev, model); result != NVML_SUCCESS)
    return result;
  // The size must be the profile's; the start one of its placements (else INVALID_ARGUMENT).
  if (const simgpu::MigGpuInstanceProfile* profile = profile_by_id(*model, profileId);
      profile != nullptr && placement->size != profile->memory_slices) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  return create_gpu_instance(device, profileId, &placement->start, gpuInstance);
}

nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpuInstance) {
  GpuInstance gpu;
  if (nvmlReturn_t result = resolve_gpu_instance(gpuInstance, gpu); result != NVML_SUCCESS)
    return result;
  return to_nvml(gpu.sim->destroy_gpu_instance(gpu.device, gpu.instance.id));
}

nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profileId,
                                       nvmlGpuInstance_t* gpuInstances, unsigned int* count) {
  Device dev;
  const MigModel* model = nullptr;
  if (nvmlReturn_t result = resolve_capable(device, dev, model); result != NVML_SUCCESS)
    return result;
  if (gpuInstances == nullptr || count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const simgpu::MigState state = dev.sim->mig_state(dev.index);
  if (state.mode == 0) return NVML_ERROR_NOT_SUPPORTED;
  if (profile_by_id(*model, profileId) == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned int found = 0;
  for (const MigGpuInstance& instance : state.gpu_instances) {
    if (instance.in_use == 0 || model->profiles[instance.profile_index].id != profileId) continue;
    gpuInstances[found++] = gpu_instance_handle(dev.index, instance.id);
  }
  *count = found;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id,
                                          nvmlGpuInstance_t* gpuInstance) {
  Device dev;
  const MigModel* model = nullptr;
  if (nvmlReturn_t result = resolve_capable(device, dev, model); result != NVML_SUCCESS)
    return result;
  if (gpuInstance == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const simgpu::MigState state = dev.sim->mig_state(dev.index);
  if (state.mode == 0) return NVML_ERROR_NOT_SUPPORTED;
  for (const MigGpuInstance& instance : state.gpu_instances) {
    if (instance.in_use != 0 && instance.id == id) {
      *gpuInstance = gpu_instance_handle(dev.index, id);
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t* info) {
  GpuInstance gpu;
  if (nvmlReturn_t result = resolve_gpu_instance(gpuInstance, gpu); result != NVML_SUCCESS)
    return result;
  if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  info->device = handle_for(gpu.device);
  info->id = gpu.instance.id;
  info->profileId = gpu.profile->id;
  info->placement = {gpu.instance.start, gpu.instance.size};
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gpuInstance,
                                                          unsigned int profile,
                                                          unsigned int engProfile,
                                                          nvmlComputeInstanceProfileInfo_t* info) {
  GpuInstance gpu;
  const simgpu::MigComputeInstanceProfile* found = nullptr;
  if (nvmlReturn_t result = compute_profile_info(gpuInstance, profile, engProfile, gpu, found);
      result != NVML_SUCCESS) {
    return result;
  }
  if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *info = nvmlComputeInstanceProfileInfo_t{};
  fill_compute_profile(gpu, *found, *info);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(
    nvmlGpuInstance_t gpuInstance, unsigned int profile, unsigned int engProfile,
    nvmlComputeInstanceProfileInfo_v2_t* info) {
  GpuInstance gpu;
  const simgpu::MigComputeInstanceProfile* found = nullptr;
  if (nvmlReturn_t result = compute_profile_info(gpuInstance, profile, engProfile, gpu, found);
      result != NVML_SUCCESS) {
    return result;
  }
  if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
  const std::string profile_text =
      found->compute_slices == gpu.profile->compute_slices
          ? std::string(gpu.profile->name)
          : std::to_string(found->compute_slices) + "c." + gpu.profile->name;
  std::snprintf(name, sizeof name, "MIG %s", profile_text.c_str());
  if (info->version == nvmlComputeInstanceProfileInfo_v3) {
    auto* v3 = reinterpret_cast<nvmlComputeInstanceProfileInfo_v3_t*>(info);
    *v3 = nvmlComputeInstanceProfileInfo_v3_t{};
    v3->version = nvmlComputeInstanceProfileInfo_v3;
    fill_compute_profile(gpu, *found, *v3);
    std::memcpy(v3->name, name, sizeof name);
    return NVML_SUCCESS;
  }
  if (info->version != nvmlComputeInstanceProfileInfo_v2) {
    return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  }
  *info = nvmlComputeInstanceProfileInfo_v2_t{};
  info->version = nvmlComputeInstanceProfileInfo_v2;
  fill_compute_profile(gpu, *found, *info);
  std::memcpy(info->name, name, sizeof name);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceRemainingCapacity(nvmlGpuInstance_t gpuInstance,
                                                                unsigned int profileId,
                                                                unsigned int* count) {
  GpuInstance gpu;
  const simgpu::MigComputeInstanceProfile* profile = nullptr;
  if (nvmlReturn_t result = compute_profile_info(
          gpuInstance, profileId, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, gpu, profile);
      result != NVML_SUCCESS) {
    return result;
  }
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  bool taken[simgpu::kMigComputeSlices] = {};
  uint32_t same = 0;
  for (const MigComputeInstance& compute : gpu.instance.compute) {
    if (compute.in_use == 0) continue;
    for (uint32_t s = compute.start; s < compute.start + compute.size; ++s) taken[s] = true;
    same += compute.profile_id == profileId ? 1 : 0;
  }
  unsigned int fits = 0;
  for (uint32_t at = 0; at + profile->compute_slices <= gpu.profile->compute_slices; ++at) {
    bool free = true;
    for (uint32_t s = at; s < at + profile->compute_slices; ++s) free &= !taken[s];
    if (!free) continue;
    for (uint32_t s = at; s < at + profile->compute_slices; ++s) taken[s] = true;
    ++fits;
  }
  *count = std::min(fits, profile->instance_count - std::min(profile->instance_count, same));
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstancePossiblePlacements(
    nvmlGpuInstance_t gpuInstance, unsigned int profileId,
    nvmlComputeInstancePlacement_t* placements, unsigned int* count) {
  GpuInstance gpu;
  const simgpu::MigComputeInstanceProfile* profile = nullptr;
  if (nvmlReturn_t result = compute_profile_info(
          gpuInstance, profileId, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, gpu, profile);
      result != NVML_SUCCESS) {
    return result;
  }
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned int found = 0;
  for (uint32_t at = 0; at + profile->compute_slices <= gpu.profile->compute_slices; ++at) {
    if (placements != nullptr) placements[found] = {at, profile->compute_slices};
    ++found;
  }
  *count = found;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gpuInstance,
                                                  unsigned int profileId,
                                                  nvmlComputeInstance_t* computeInstance) {
  GpuInstance gpu;
  if (nvmlReturn_t result = resolve_gpu_instance(gpuInstance, gpu); result != NVML_SUCCESS)
    return result;
  if (computeInstance == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  uint32_t id = 0;
  const MigError error =
      gpu.sim->create_compute_instance(gpu.device, gpu.instance.id, profileId, nullptr, id);
  if (error != MigError::kOk) return to_nvml(error);
  *computeInstance = compute_instance_handle(gpu.device, gpu.instance.id, id);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceCreateComputeInstanceWithPlacement(
    nvmlGpuInstance_t gpuInstance, unsigned int profileId,
    const nvmlComputeInstancePlacement_t* placement, nvmlComputeInstance_t* computeInstance) {
  GpuInstance gpu;
  if (nvmlReturn_t result = resolve_gpu_instance(gpuInstance, gpu); result != NVML_SUCCESS)
    return result;
  if (computeInstance == nullptr || placement == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  uint32_t id = 0;
  const MigError error = gpu.sim->create_compute_instance(gpu.device, gpu.instance.id, profileId,
                                                          &placement->start, id);
  if (error != MigError::kOk) return to_nvml(error);
  *computeInstance = compute_instance_handle(gpu.device, gpu.instance.id, id);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t computeInstance) {
  GpuInstance gpu;
  MigComputeInstance compute{};
  if (nvmlReturn_t result = resolve_compute_instance(computeInstance, gpu, compute);
      result != NVML_SUCCESS) {
    return result;
  }
  return to_nvml(gpu.sim->destroy_compute_instance(gpu.device, gpu.instance.id, compute.id));
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpuInstance,
                                                unsigned int profileId,
                                                nvmlComputeInstance_t* computeInstances,
                                                unsigned int* count) {
  GpuInstance gpu;
  if (nvmlReturn_t result = resolve_gpu_instance(gpuInstance, gpu); result != NVML_SUCCESS)
    return result;
  if (computeInstances == nullptr || count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (compute_profile(gpu.profile->compute_slices, profileId) == nullptr)
    return NVML_ERROR_NOT_SUPPORTED;
  unsigned int found = 0;
  for (const MigComputeInstance& compute : gpu.instance.compute) {
    if (compute.in_use == 0 || compute.profile_id != profileId) continue;
    computeInstances[found++] = compute_instance_handle(gpu.device, gpu.instance.id, compute.id);
  }
  *count = found;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gpuInstance, unsigned int id,
                                                   nvmlComputeInstance_t* computeInstance) {
  GpuInstance gpu;
  if (nvmlReturn_t result = resolve_gpu_instance(gpuInstance, gpu); result != NVML_SUCCESS)
    return result;
  if (computeInstance == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  for (const MigComputeInstance& compute : gpu.instance.compute) {
    if (compute.in_use != 0 && compute.id == id) {
      *computeInstance = compute_instance_handle(gpu.device, gpu.instance.id, id);
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t computeInstance,
                                           nvmlComputeInstanceInfo_t* info) {
  return compute_instance_info(computeInstance, info, true);
}

nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t computeInstance,
                                        nvmlComputeInstanceInfo_t* info) {
  return compute_instance_info(computeInstance, info, false);
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int* isMigDevice) {
  Device dev;
  if (nvmlReturn_t result = resolve(device, dev); result != NVML_SUCCESS) return result;
  if (isMigDevice == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *isMigDevice = dev.is_mig ? 1 : 0;
  return NVML_SUCCESS;
}

// On a whole GPU: NOT_SUPPORTED (which of NOT_SUPPORTED and INVALID_ARGUMENT a driver answers was
// NOT VERIFIED, facts §7.7).
nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int* id) {
  Device dev;
  if (nvmlReturn_t result = resolve(device, dev); result != NVML_SUCCESS) return result;
  if (id == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (!dev.is_mig) return NVML_ERROR_NOT_SUPPORTED;
  *id = dev.mig.gpu_instance.id;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int* id) {
  Device dev;
  if (nvmlReturn_t result = resolve(device, dev); result != NVML_SUCCESS) return result;
  if (id == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (!dev.is_mig) return NVML_ERROR_NOT_SUPPORTED;
  *id = dev.mig.compute_instance.id;
  return NVML_SUCCESS;
}

// One MIG device per compute slice at most: 7 on these parts with MIG on (the value a driver
// reports was NOT VERIFIED, facts §7.6), 0 with MIG off or unsupported.
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int* count) {
  Device dev;
  if (nvmlReturn_t result = resolve(device, dev); result != NVML_SUCCESS) return result;
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (dev.is_mig) return NVML_ERROR_INVALID_ARGUMENT;
  const bool enabled = dev.sim->mig_model(dev.index) != nullptr && dev.mig_enabled();
  *count = enabled ? static_cast<unsigned int>(simgpu::kMaxMigDevices) : 0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                 nvmlDevice_t* migDevice) {
  Device dev;
  const MigModel* model = nullptr;
  if (nvmlReturn_t result = resolve_capable(device, dev, model); result != NVML_SUCCESS)
    return result;
  if (migDevice == nullptr || index >= static_cast<unsigned int>(simgpu::kMaxMigDevices))
    return NVML_ERROR_INVALID_ARGUMENT;
  const simgpu::MigState state = dev.sim->mig_state(dev.index);
  if (state.mode == 0) return NVML_ERROR_NOT_SUPPORTED;
  for (const MigGpuInstance& instance : state.gpu_instances) {
    if (instance.in_use == 0) continue;
    for (const MigComputeInstance& compute : instance.compute) {
      if (compute.in_use != 0 && compute.mig_index == index) {
        *migDevice = mig_handle_for(dev.index, instance.id, compute.id);
        return NVML_SUCCESS;
      }
    }
  }
  return NVML_ERROR_NOT_FOUND;  // a hole
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice,
                                                          nvmlDevice_t* device) {
  Device dev;
  if (nvmlReturn_t result = resolve(migDevice, dev); result != NVML_SUCCESS) return result;
  if (device == nullptr || !dev.is_mig) return NVML_ERROR_INVALID_ARGUMENT;
  *device = handle_for(dev.index);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t* attributes) {
  return simgpu::nvml::attributes(device, attributes);
}

nvmlReturn_t nvmlDeviceGetAttributes(nvmlDevice_t device, nvmlDeviceAttributes_t* attributes) {
  return simgpu::nvml::attributes(device, attributes);
}

}  // extern "C"
