// Multi-Instance GPU in the shared state: MIG mode, GPU instances (GI) at placements over the
// memory slices, compute instances (CI) over a GI's compute slices, each CI a MIG device with a
// fresh UUID, and the capability files NVIDIA's tools read to find a MIG device's device nodes.
// The profiles are data (mig_profiles.cc); the rules here are NVML's as the MIG facts (§2, §6)
// describe them.
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "process_id.h"
#include "simulator.h"

namespace simgpu {
namespace {

// The GI ID of a placement: one ID per node of the binary tree over the 8 memory slices (whole 0,
// halves 1-2, quarters 3-6, eighths 7-14). Reproduces what drivers were seen to assign (7 x 1g on
// an H100: IDs 7..13 at placements 0..6 [T-H100a]); real drivers promise no such relation.
uint32_t gpu_instance_id_of(uint32_t start, uint32_t size) {
  switch (size) {
    case 8:
      return 0;
    case 4:
      return 1 + start / 4;
    case 2:
      return 3 + start / 2;
    default:
      return 7 + start;
  }
}

bool overlaps(uint32_t start_a, uint32_t size_a, uint32_t start_b, uint32_t size_b) {
  return start_a < start_b + size_b && start_b < start_a + size_a;
}

const MigGpuInstanceProfile* profile_by_id(const MigModel& model, uint32_t id) {
  for (const MigGpuInstanceProfile& profile : model.profiles) {
    if (profile.id == id) return &profile;
  }
  return nullptr;
}

const MigComputeInstanceProfile* compute_profile(uint32_t gpu_compute_slices, uint32_t id) {
  for (const MigComputeInstanceProfile& profile : mig_compute_instance_profiles()) {
    if (profile.gpu_compute_slices == gpu_compute_slices && profile.index == id) return &profile;
  }
  return nullptr;
}

std::string random_mig_uuid() {
  static thread_local std::mt19937_64 generator{std::random_device{}()};
  const uint64_t high = generator();
  const uint64_t low = generator();
  char uuid[48];
  std::snprintf(uuid, sizeof uuid, "MIG-%08x-%04x-%04x-%04x-%012llx",
                static_cast<unsigned>(high >> 32), static_cast<unsigned>((high >> 16) & 0xFFFF),
                static_cast<unsigned>((high & 0x0FFF) | 0x4000),
                static_cast<unsigned>(((low >> 48) & 0x3FFF) | 0x8000),
                static_cast<unsigned long long>(low & 0xFFFFFFFFFFFFull));
  return uuid;
}

// /proc/driver/nvidia-caps/mig-minors's numbering [G-NODES]: gi access = 3 + 135 x gpu minor +
// 9 x GI, ci access = gi access + 1 + CI.
uint32_t gpu_instance_cap_minor(uint32_t gpu_minor, uint32_t gpu_instance_id) {
  return 3 + 135 * gpu_minor + 9 * gpu_instance_id;
}

// DeviceFileMode of an access file: world-readable (0444). NOT VERIFIED against a driver (facts
// §7.7); the config capability is root-only (0400 = 256), as [G-NODES] shows.
constexpr int kAccessFileMode = 0444;

std::filesystem::path gpu_instance_cap_dir(const char* root, uint32_t gpu_minor,
                                           uint32_t gpu_instance_id) {
  return std::filesystem::path(root) / "driver/nvidia/capabilities" /
         ("gpu" + std::to_string(gpu_minor)) / "mig" / ("gi" + std::to_string(gpu_instance_id));
}

void write_cap_file(const std::filesystem::path& path, uint32_t minor, int mode) {
  std::error_code error;
  std::filesystem::create_directories(path.parent_path(), error);
  std::ofstream out(path, std::ios::trunc);
  out << "DeviceFileMinor: " << minor << "\nDeviceFileMode: " << mode << "\nDeviceFileModify: 1\n";
  if (!out) std::fprintf(stderr, "simgpu: cannot write %s\n", path.c_str());
}

}  // namespace

// An arbitrary major: real ones are assigned at module load.
inline constexpr int kNvidiaCapsMajor = 237;

void write_mig_proc_files(const char* root) {
  if (root[0] == '\0') return;
  const std::filesystem::path base(root);
  std::error_code error;
  std::filesystem::create_directories(base, error);
  std::ofstream devices(base / "devices", std::ios::trunc);
  devices << "Character devices:\n  1 mem\n195 nvidia\n"
          << kNvidiaCapsMajor << " nvidia-caps\n\nBlock devices:\n";
  if (!devices) std::fprintf(stderr, "simgpu: cannot write %s/devices\n", root);
  const std::filesystem::path caps = base / "driver/nvidia/capabilities/mig";
  write_cap_file(caps / "config", 1, 0400);
  write_cap_file(caps / "monitor", 2, 0444);
}

const MigModel* Simulator::mig_model(int device) const {
  if (state_->devices[device].mig_capable == 0) return nullptr;
  return mig_model_for(state_->devices[device].name);
}

MigState Simulator::mig_state(int device) {
  LockGuard lock(*this);
  return state_->device_state[device].mig;
}

int Simulator::bound_gpu_instance_locked(const MigBinding& binding, int device) const {
  if (binding.serial == 0 || binding.gpu_instance < 0 || binding.gpu_instance >= kMaxGpuInstances ||
      binding.compute_instance < 0 || binding.compute_instance >= kMaxComputeInstances) {
    return -1;
  }
  const MigGpuInstance& instance =
      state_->device_state[device].mig.gpu_instances[binding.gpu_instance];
  const MigComputeInstance& compute = instance.compute[binding.compute_instance];
  if (instance.in_use == 0 || compute.in_use == 0 || compute.serial != binding.serial) return -1;
  return binding.gpu_instance;
}

bool Simulator::busy_locked(int device, int gpu_instance) const {
  for (const ProcessSlot& slot : state_->processes) {
    if (slot.pid == 0) continue;
    if (slot.context_count[device] == 0 && slot.used_memory[device] == 0) continue;
    if (!process_alive(slot.pid, slot.start_time)) continue;
    if (gpu_instance < 0 || bound_gpu_instance_locked(slot.mig[device], device) == gpu_instance)
      return true;
  }
  return false;
}

MigError Simulator::set_mig_mode(int device, bool enable) {
  LockGuard lock(*this);
  if (mig_model(device) == nullptr) return MigError::kNotSupported;
  MigState& mig = state_->device_state[device].mig;
  const uint32_t wanted = enable ? 1 : 0;
  if (mig.mode == wanted) {
    mig.pending_mode = wanted;
    return MigError::kOk;
  }
  bool has_instances = false;
  for (const MigGpuInstance& instance : mig.gpu_instances) has_instances |= instance.in_use != 0;
  if (busy_locked(device, -1) || has_instances) {
    // Ampere: the request waits for a GPU reset ("pending enable"); Hopper+ changes nothing.
    if (!mig_model(device)->reset_free_toggle) mig.pending_mode = wanted;
    return MigError::kInUse;
  }
  mig.mode = wanted;
  mig.pending_mode = wanted;
  return MigError::kOk;
}

MigError Simulator::create_gpu_instance(int device, uint32_t profile_id, const uint32_t* start,
                                        uint32_t& gpu_instance_id) {
  LockGuard lock(*this);
  const MigModel* model = mig_model(device);
  if (model == nullptr) return MigError::kNotSupported;
  MigState& mig = state_->device_state[device].mig;
  if (mig.mode == 0) return MigError::kNotSupported;
  const MigGpuInstanceProfile* profile = profile_by_id(*model, profile_id);
  if (profile == nullptr) return MigError::kInvalidArgument;

  if (start != nullptr) {
    bool legal = false;
    for (uint32_t p = 0; p < profile->placement_count; ++p)
      legal |= profile->placement_starts[p] == *start;
    if (!legal) return MigError::kInvalidArgument;
  }
  uint32_t same_profile = 0;
  uint32_t compute_used = 0;
  for (const MigGpuInstance& instance : mig.gpu_instances) {
    if (instance.in_use == 0) continue;
    const MigGpuInstanceProfile& other = model->profiles[instance.profile_index];
    same_profile += other.id == profile_id ? 1 : 0;
    compute_used += other.compute_slices;
  }
  if (same_profile >= profile->instance_count ||
      compute_used + profile->compute_slices > static_cast<uint32_t>(kMigComputeSlices)) {
    return MigError::kInsufficientResources;
  }
  auto free_at = [&](uint32_t at) {
    for (const MigGpuInstance& instance : mig.gpu_instances) {
      if (instance.in_use != 0 &&
          overlaps(at, profile->memory_slices, instance.start, instance.size))
        return false;
    }
    return true;
  };
  std::optional<uint32_t> chosen;
  if (start != nullptr) {
    if (free_at(*start)) chosen = *start;
  } else {
    for (uint32_t p = profile->placement_count; p-- > 0 && !chosen;) {
      if (free_at(profile->placement_starts[p])) chosen = profile->placement_starts[p];
    }
  }
  if (!chosen) return MigError::kInsufficientResources;

  MigGpuInstance* slot = nullptr;
  for (MigGpuInstance& instance : mig.gpu_instances) {
    if (instance.in_use == 0) {
      slot = &instance;
      break;
    }
  }
  if (slot == nullptr) return MigError::kInsufficientResources;
  std::memset(static_cast<void*>(slot), 0, sizeof *slot);
  slot->id = gpu_instance_id_of(*chosen, profile->memory_slices);
  slot->profile_index = static_cast<uint32_t>(profile - model->profiles.data());
  slot->start = *chosen;
  slot->size = profile->memory_slices;
  slot->memory_bytes = profile->memory_mib << 20;
  // The capability file before the instance is visible: on a real GPU the creation is one ioctl,
  // done by the kernel whatever becomes of its caller; here a caller killed in between leaves at
  // worst a file the next creation of that ID rewrites, never an instance without its file.
  write_capability_files_locked(device, *slot, -1);
  slot->in_use = 1;
  gpu_instance_id = slot->id;
  return MigError::kOk;
}

MigError Simulator::destroy_gpu_instance(int device, uint32_t gpu_instance_id) {
  LockGuard lock(*this);
  if (mig_model(device) == nullptr) return MigError::kNotSupported;
  MigState& mig = state_->device_state[device].mig;
  if (mig.mode == 0) return MigError::kNotSupported;
  for (int g = 0; g < kMaxGpuInstances; ++g) {
    MigGpuInstance& instance = mig.gpu_instances[g];
    if (instance.in_use == 0 || instance.id != gpu_instance_id) continue;
    bool has_compute = false;
    for (const MigComputeInstance& compute : instance.compute) has_compute |= compute.in_use != 0;
    if (has_compute || busy_locked(device, g)) return MigError::kInUse;
    instance.in_use = 0;
    remove_capability_file_locked(device, gpu_instance_id, nullptr);
    return MigError::kOk;
  }
  return MigError::kNotFound;
}

MigError Simulator::create_compute_instance(int device, uint32_t gpu_instance_id,
                                            uint32_t profile_id, const uint32_t* start,
                                            uint32_t& compute_instance_id) {
  LockGuard lock(*this);
  const MigModel* model = mig_model(device);
  if (model == nullptr) return MigError::kNotSupported;
  MigState& mig = state_->device_state[device].mig;
  if (mig.mode == 0) return MigError::kNotSupported;
  MigGpuInstance* instance = nullptr;
  for (MigGpuInstance& each : mig.gpu_instances) {
    if (each.in_use != 0 && each.id == gpu_instance_id) instance = &each;
  }
  if (instance == nullptr) return MigError::kNotFound;
  const MigGpuInstanceProfile& gpu_profile = model->profiles[instance->profile_index];
  const MigComputeInstanceProfile* profile =
      compute_profile(gpu_profile.compute_slices, profile_id);
  if (profile == nullptr) return MigError::kNotSupported;

  uint32_t same_profile = 0;
  for (const MigComputeInstance& compute : instance->compute)
    same_profile += compute.in_use != 0 && compute.profile_id == profile_id ? 1 : 0;
  if (same_profile >= profile->instance_count) return MigError::kInsufficientResources;
  // Placements: any run of the CI's size inside the GI's compute slices (how a driver places CIs
  // was NOT VERIFIED beyond -lcip's instance counts).
  auto free_at = [&](uint32_t at) {
    if (at + profile->compute_slices > gpu_profile.compute_slices) return false;
    for (const MigComputeInstance& compute : instance->compute) {
      if (compute.in_use != 0 && overlaps(at, profile->compute_slices, compute.start, compute.size))
        return false;
    }
    return true;
  };
  std::optional<uint32_t> chosen;
  if (start != nullptr) {
    if (*start + profile->compute_slices > gpu_profile.compute_slices)
      return MigError::kInvalidArgument;
    if (free_at(*start)) chosen = *start;
  } else {
    for (uint32_t at = 0; at < gpu_profile.compute_slices && !chosen; ++at) {
      if (free_at(at)) chosen = at;
    }
  }
  if (!chosen) return MigError::kInsufficientResources;

  // The lowest free CI ID and MIG device index.
  int slot = -1;
  for (int c = 0; c < kMaxComputeInstances && slot < 0; ++c) {
    if (instance->compute[c].in_use == 0) slot = c;
  }
  bool index_taken[kMaxMigDevices] = {};
  for (const MigGpuInstance& each : mig.gpu_instances) {
    if (each.in_use == 0) continue;
    for (const MigComputeInstance& compute : each.compute) {
      if (compute.in_use != 0 && compute.mig_index < static_cast<uint32_t>(kMaxMigDevices))
        index_taken[compute.mig_index] = true;
    }
  }
  int mig_index = -1;
  for (int i = 0; i < kMaxMigDevices && mig_index < 0; ++i) {
    if (!index_taken[i]) mig_index = i;
  }
  if (slot < 0 || mig_index < 0) return MigError::kInsufficientResources;
  bool id_taken[kMaxComputeInstances] = {};
  for (const MigComputeInstance& compute : instance->compute) {
    if (compute.in_use != 0 && compute.id < static_cast<uint32_t>(kMaxComputeInstances))
      id_taken[compute.id] = true;
  }
  uint32_t id = 0;
  while (id_taken[id]) ++id;

  MigComputeInstance& compute = instance->compute[slot];
  std::memset(static_cast<void*>(&compute), 0, sizeof compute);
  compute.id = id;
  compute.profile_id = profile_id;
  compute.start = *chosen;
  compute.size = profile->compute_slices;
  compute.multiprocessors =
      gpu_profile.multiprocessors * profile->compute_slices / gpu_profile.compute_slices;
  compute.mig_index = static_cast<uint32_t>(mig_index);
  compute.serial = ++state_->last_mig_serial;
  std::snprintf(compute.uuid, sizeof compute.uuid, "%s", random_mig_uuid().c_str());
  // Its timeline starts idle, clock now.
  Timeline& timeline = state_->device_state[device].timelines[1 + mig_index];
  timeline = Timeline{now_ns(), 0, 0, -1, 0};
  write_capability_files_locked(device, *instance, slot);  // before it is visible (as above)
  compute.in_use = 1;
  compute_instance_id = id;
  return MigError::kOk;
}

MigError Simulator::destroy_compute_instance(int device, uint32_t gpu_instance_id,
                                             uint32_t compute_instance_id) {
  LockGuard lock(*this);
  if (mig_model(device) == nullptr) return MigError::kNotSupported;
  MigState& mig = state_->device_state[device].mig;
  if (mig.mode == 0) return MigError::kNotSupported;
  for (MigGpuInstance& instance : mig.gpu_instances) {
    if (instance.in_use == 0 || instance.id != gpu_instance_id) continue;
    for (MigComputeInstance& compute : instance.compute) {
      if (compute.in_use == 0 || compute.id != compute_instance_id) continue;
      for (const ProcessSlot& slot : state_->processes) {
        if (slot.pid == 0 || slot.mig[device].serial != compute.serial) continue;
        if (slot.context_count[device] == 0 && slot.used_memory[device] == 0) continue;
        if (process_alive(slot.pid, slot.start_time)) return MigError::kInUse;
      }
      compute.in_use = 0;
      remove_capability_file_locked(device, gpu_instance_id, &compute_instance_id);
      return MigError::kOk;
    }
    return MigError::kNotFound;
  }
  return MigError::kNotFound;
}

std::optional<MigDeviceRef> Simulator::find_mig_device(std::string_view uuid) {
  LockGuard lock(*this);
  for (uint32_t d = 0; d < state_->device_count; ++d) {
    const MigState& mig = state_->device_state[d].mig;
    if (mig.mode == 0) continue;
    for (int g = 0; g < kMaxGpuInstances; ++g) {
      if (mig.gpu_instances[g].in_use == 0) continue;
      for (int c = 0; c < kMaxComputeInstances; ++c) {
        const MigComputeInstance& compute = mig.gpu_instances[g].compute[c];
        if (compute.in_use != 0 && uuid == compute.uuid)
          return MigDeviceRef{static_cast<int>(d), g, c};
      }
    }
  }
  return std::nullopt;
}

bool Simulator::bind_mig_device(int device, uint64_t serial) {
  LockGuard lock(*this);
  const MigState& mig = state_->device_state[device].mig;
  for (int g = 0; g < kMaxGpuInstances; ++g) {
    if (mig.gpu_instances[g].in_use == 0) continue;
    for (int c = 0; c < kMaxComputeInstances; ++c) {
      const MigComputeInstance& compute = mig.gpu_instances[g].compute[c];
      if (compute.in_use == 0 || compute.serial != serial) continue;
      ProcessSlot& slot = state_->processes[slot_];
      slot.mig[device] = MigBinding{serial, g, c, 1 + static_cast<int32_t>(compute.mig_index), 0};
      return true;
    }
  }
  return false;
}

void Simulator::write_capability_files_locked(int device, const MigGpuInstance& instance,
                                              int compute) const {
  if (state_->proc_root[0] == '\0') return;
  const uint32_t minor = state_->devices[device].minor_number;
  const std::filesystem::path dir = gpu_instance_cap_dir(state_->proc_root, minor, instance.id);
  const uint32_t gi_minor = gpu_instance_cap_minor(minor, instance.id);
  if (compute < 0) {
    write_cap_file(dir / "access", gi_minor, kAccessFileMode);
  } else {
    const uint32_t id = instance.compute[compute].id;
    write_cap_file(dir / ("ci" + std::to_string(id)) / "access", gi_minor + 1 + id,
                   kAccessFileMode);
  }
}

void Simulator::remove_capability_file_locked(int device, uint32_t gpu_instance_id,
                                              const uint32_t* compute_instance_id) const {
  if (state_->proc_root[0] == '\0') return;
  const std::filesystem::path dir = gpu_instance_cap_dir(
      state_->proc_root, state_->devices[device].minor_number, gpu_instance_id);
  std::error_code ignored;
  std::filesystem::remove_all(
      compute_instance_id ? dir / ("ci" + std::to_string(*compute_instance_id)) : dir, ignored);
}

}  // namespace simgpu
