// A MigDriver double that answers as NVML does (mig-facts.md §2.3, §6): an H200 141GB's profiles
// and placements (§1.3, [I-H200]; placements as H100's, §1.2), driver-assigned GI IDs (the lowest
// free) and CI IDs, INSUFFICIENT_RESOURCES (kAlreadyExists, as tessera/nvml.h maps it) for an
// occupied placement, NOT_SUPPORTED (kFailedPrecondition) while MIG mode is off, IN_USE for a GPU
// instance with a compute instance, and a fresh MIG UUID at every creation. Tests use it where the
// simulated GPU cannot stop between two calls (a fault injected before one).
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "mig/mig_driver.h"

namespace tessera::agent::testing {

inline std::vector<MigProfile> h200_profiles() {
  constexpr uint64_t kMiB = 1ull << 20;
  auto starts = [](std::vector<unsigned> list, unsigned size) {
    std::vector<MigPlacement> placements;
    for (unsigned start : list) placements.push_back({start, size});
    return placements;
  };
  return {
      {0x0, 19, "1g.18gb", 1, 7, 16, 16384 * kMiB, starts({0, 1, 2, 3, 4, 5, 6}, 1)},
      {0x7, 20, "1g.18gb+me", 1, 1, 16, 16384 * kMiB, starts({0, 1, 2, 3, 4, 5, 6}, 1)},
      {0x9, 15, "1g.35gb", 1, 4, 26, 33024 * kMiB, starts({0, 2, 4, 6}, 2)},
      {0x1, 14, "2g.35gb", 2, 3, 32, 33024 * kMiB, starts({0, 2, 4}, 2)},
      {0x2, 9, "3g.71gb", 3, 2, 60, 71168 * kMiB, starts({0, 4}, 4)},
      {0x3, 5, "4g.71gb", 4, 1, 64, 71168 * kMiB, starts({0}, 4)},
      {0x4, 0, "7g.141gb", 7, 1, 132, 143104 * kMiB, starts({0}, 8)},
  };
}

inline GpuInfo h200(unsigned minor = 0,
                    std::string uuid = "GPU-0d0f6a2e-1c3b-4e5f-8a7b-9c0d1e2f3a4b") {
  GpuInfo gpu;
  gpu.index = minor;
  gpu.minor = minor;
  gpu.uuid = std::move(uuid);
  gpu.product_name = "NVIDIA H200";
  gpu.architecture = "Hopper";
  gpu.brand = "Nvidia";
  gpu.cc_major = 9;
  gpu.driver_version = "580.159.04";
  gpu.pci_bus_id = "0000:3b:00.0";
  gpu.memory_bytes = 143771ull << 20;
  return gpu;
}

class FakeMigDriver final : public MigDriver {
 public:
  struct Gpu {
    bool capable = true;
    bool enabled = false;
    std::vector<unsigned> pids;
    std::vector<MigInstance> instances;
  };
  std::map<std::string, Gpu> gpus;  // by parent UUID
  int creations = 0, destructions = 0, mode_changes = 0;
  // A fault before the named call ("create_gpu_instance", "create_compute_instance", ...): its
  // Status is returned instead, once.
  std::map<std::string, Status> fail_next;
  // Called after a call changed the GPU, with its name: a crash test throws there (the agent stops
  // between the driver's change and its own next step).
  std::function<void(const std::string& call)> after_change;

  Result<MigGpu> inspect(const GpuInfo& gpu) override {
    MigGpu state;
    state.uuid = gpu.uuid;
    state.minor = gpu.minor;
    state.memory_bytes = gpu.memory_bytes;
    const auto it = gpus.find(gpu.uuid);
    if (it == gpus.end() || !it->second.capable) return state;
    state.capable = true;
    state.enabled = state.pending_enabled = it->second.enabled;
    state.profiles = h200_profiles();
    if (it->second.enabled) state.instances = it->second.instances;
    return state;
  }
  Status set_mig_mode(const std::string& parent_uuid, bool enabled) override {
    TESSERA_RETURN_IF_ERROR(fault("set_mig_mode"));
    Gpu& gpu = gpus.at(parent_uuid);
    if (!gpu.pids.empty())
      return unavailable("nvmlDeviceSetMigMode: activation: In use by another client");
    gpu.enabled = enabled;
    ++mode_changes;
    return Status::ok();
  }
  Result<std::vector<unsigned>> compute_pids(const std::string& parent_uuid) override {
    return gpus.at(parent_uuid).pids;
  }
  Result<unsigned> create_gpu_instance(const std::string& parent_uuid, unsigned profile_id,
                                       const MigPlacement& placement) override {
    TESSERA_RETURN_IF_ERROR(fault("create_gpu_instance"));
    Gpu& gpu = gpus.at(parent_uuid);
    if (!gpu.enabled)
      return failed_precondition("nvmlDeviceCreateGpuInstanceWithPlacement: Not Supported");
    const MigProfile* profile = nullptr;
    for (const auto& candidate : profiles_)
      if (candidate.id == profile_id) profile = &candidate;
    if (!profile)
      return failed_precondition("nvmlDeviceCreateGpuInstanceWithPlacement: Not Supported");
    for (const auto& instance : gpu.instances)
      if (instance.placement.overlaps(placement))
        return already_exists("nvmlDeviceCreateGpuInstanceWithPlacement: Insufficient Resources");
    unsigned id = 1;
    while (std::any_of(gpu.instances.begin(), gpu.instances.end(),
                       [&](const MigInstance& i) { return i.gi_id == id; }))
      ++id;
    MigInstance instance;
    instance.gi_id = id;
    instance.profile_id = profile_id;
    instance.placement = placement;
    instance.memory_bytes = profile->memory_bytes;
    gpu.instances.push_back(instance);
    ++creations;
    if (after_change) after_change("create_gpu_instance");
    return id;
  }
  Result<CreatedComputeInstance> create_compute_instance(const std::string& parent_uuid,
                                                         unsigned gi_id) override {
    TESSERA_RETURN_IF_ERROR(fault("create_compute_instance"));
    MigInstance* instance = find(parent_uuid, gi_id);
    if (!instance) return not_found("nvmlDeviceGetGpuInstanceById: Not Found");
    if (instance->ci_id)
      return already_exists("nvmlGpuInstanceCreateComputeInstance: Insufficient Resources");
    instance->ci_id = 0;
    instance->uuid = "MIG-" + std::to_string(++uuids_) + "a1b2c3d-0000-5000-8000-00000000000" +
                     std::to_string(gi_id);
    for (const auto& profile : profiles_)
      if (profile.id == instance->profile_id) instance->multiprocessors = profile.multiprocessors;
    const CreatedComputeInstance created{0, instance->uuid};
    if (after_change) after_change("create_compute_instance");
    return created;
  }
  Status destroy_compute_instance(const std::string& parent_uuid, unsigned gi_id,
                                  unsigned ci_id) override {
    TESSERA_RETURN_IF_ERROR(fault("destroy_compute_instance"));
    MigInstance* instance = find(parent_uuid, gi_id);
    if (!instance || instance->ci_id != ci_id)
      return not_found("nvmlGpuInstanceGetComputeInstanceById: Not Found");
    instance->ci_id.reset();
    instance->uuid.clear();
    return Status::ok();
  }
  Status destroy_gpu_instance(const std::string& parent_uuid, unsigned gi_id) override {
    TESSERA_RETURN_IF_ERROR(fault("destroy_gpu_instance"));
    Gpu& gpu = gpus.at(parent_uuid);
    for (auto it = gpu.instances.begin(); it != gpu.instances.end(); ++it)
      if (it->gi_id == gi_id) {
        if (it->ci_id) return unavailable("nvmlGpuInstanceDestroy: In use by another client");
        gpu.instances.erase(it);
        ++destructions;
        return Status::ok();
      }
    return not_found("nvmlDeviceGetGpuInstanceById: Not Found");
  }

 private:
  Status fault(const std::string& call) {
    const auto it = fail_next.find(call);
    if (it == fail_next.end()) return Status::ok();
    Status failed = it->second;
    fail_next.erase(it);
    return failed;
  }
  MigInstance* find(const std::string& parent_uuid, unsigned gi_id) {
    for (auto& instance : gpus.at(parent_uuid).instances)
      if (instance.gi_id == gi_id) return &instance;
    return nullptr;
  }
  std::vector<MigProfile> profiles_ = h200_profiles();
  int uuids_ = 0;
};

}  // namespace tessera::agent::testing
