// simgpu-ctl: inspect and steer the simulated GPU from outside the programs using it.
//   simgpu-ctl status                      driver, devices, memory, processes and memory
//                                          partitions (R615 per-cgroup limits), as JSON
//   simgpu-ctl health <device> healthy|unhealthy
//   simgpu-ctl fail-alloc <n>              the n-th allocation from now on (any process) fails
//   simgpu-ctl mig mode <gpu> on|off       MIG mode (like nvidia-smi -mig 1|0)
//   simgpu-ctl mig profiles <gpu>          GPU-instance profiles and placements (-lgip, -lgipp)
//   simgpu-ctl mig create <gpu> <profile> [--placement <start>] [--ci <profile index>]
//                                          a GPU instance and one compute instance in it (the
//                                          whole GI unless --ci), like -cgi <profile> -C;
//                                          <profile>: a name ("3g.71gb") or a profile ID
//   simgpu-ctl mig destroy <gpu> <gi> [<ci>]   one compute instance, or the GI and all its CIs
//   simgpu-ctl mig list [<gpu>]            MIG mode, instances and MIG devices as JSON
// The MIG commands go through the simulated libnvidia-ml.so.1 (the NVML calls nvidia-smi mig
// makes); the others read and write the state directly. The state file is chosen by
// SIMGPU_STATE, as for the simulated libraries.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "simulator.h"
#include "tessera/nvml.h"

namespace {

using tessera::Result;
using tessera::Status;
namespace nvml = tessera::nvml;

int fail(const Status& status) {
  std::fprintf(stderr, "simgpu-ctl: %s\n", status.message().c_str());
  return 1;
}

// Every GPU-instance profile the GPU has, by index (NOT_SUPPORTED: not on this GPU).
Result<std::vector<nvmlGpuInstanceProfileInfo_v3_t>> gpu_profiles(const nvml::Session& session,
                                                                  nvmlDevice_t gpu) {
  std::vector<nvmlGpuInstanceProfileInfo_v3_t> profiles;
  for (unsigned index = 0; index < NVML_GPU_INSTANCE_PROFILE_COUNT; ++index) {
    Result<nvmlGpuInstanceProfileInfo_v3_t> info = session.gpu_instance_profile_info(gpu, index);
    if (info.is_ok()) {
      profiles.push_back(*info);
    } else if (info.status().code() != tessera::StatusCode::kFailedPrecondition) {
      return info.status();
    }
  }
  if (profiles.empty()) return tessera::failed_precondition("this GPU has no MIG profiles");
  return profiles;
}

// "3g.71gb" (or "MIG 3g.71gb") or a profile ID ("9").
Result<nvmlGpuInstanceProfileInfo_v3_t> find_profile(const nvml::Session& session, nvmlDevice_t gpu,
                                                     const std::string& text) {
  TESSERA_ASSIGN_OR_RETURN(auto profiles, gpu_profiles(session, gpu));
  for (const auto& profile : profiles) {
    if (text == profile.name || "MIG " + text == profile.name || text == std::to_string(profile.id))
      return profile;
  }
  std::string known;
  for (const auto& profile : profiles)
    known += (known.empty() ? "" : ", ") + std::string(profile.name + 4) + " (" +
             std::to_string(profile.id) + ")";
  return tessera::invalid_argument("profile '" + text + "' is not one of " + known);
}

Result<nlohmann::json> list_gpu(const nvml::Session& session, unsigned index) {
  TESSERA_ASSIGN_OR_RETURN(nvmlDevice_t gpu, session.device_by_index(index));
  nlohmann::json out{{"index", index}};
  TESSERA_ASSIGN_OR_RETURN(out["uuid"], session.uuid(gpu));
  Result<nvml::MigMode> mode = session.mig_mode(gpu);
  if (!mode.is_ok()) {
    out["mig"] = "unsupported";
    return out;
  }
  out["mig"] = mode->current == NVML_DEVICE_MIG_ENABLE ? "on" : "off";
  out["mig_pending"] = mode->pending == NVML_DEVICE_MIG_ENABLE ? "on" : "off";
  nlohmann::json instances = nlohmann::json::array();
  if (mode->current == NVML_DEVICE_MIG_ENABLE) {
    TESSERA_ASSIGN_OR_RETURN(auto profiles, gpu_profiles(session, gpu));
    for (const auto& profile : profiles) {
      TESSERA_ASSIGN_OR_RETURN(auto gpu_instances, session.gpu_instances(gpu, profile.id));
      for (nvmlGpuInstance_t gpu_instance : gpu_instances) {
        TESSERA_ASSIGN_OR_RETURN(nvmlGpuInstanceInfo_t info,
                                 session.gpu_instance_info(gpu_instance));
        nlohmann::json computes = nlohmann::json::array();
        for (unsigned ci = 0; ci < NVML_COMPUTE_INSTANCE_PROFILE_COUNT; ++ci) {
          Result<std::vector<nvmlComputeInstance_t>> list =
              session.compute_instances(gpu_instance, ci);
          if (!list.is_ok()) continue;  // a CI profile this GI does not have
          for (nvmlComputeInstance_t compute : *list) {
            TESSERA_ASSIGN_OR_RETURN(nvmlComputeInstanceInfo_t ci_info,
                                     session.compute_instance_info(compute));
            nlohmann::json entry{{"id", ci_info.id}, {"profile_id", ci_info.profileId}};
            TESSERA_ASSIGN_OR_RETURN(entry["uuid"], session.uuid(ci_info.device));
            TESSERA_ASSIGN_OR_RETURN(entry["name"], session.name(ci_info.device));
            TESSERA_ASSIGN_OR_RETURN(nvmlMemory_t memory, session.memory(ci_info.device));
            entry["memory_total_bytes"] = memory.total;
            entry["memory_used_bytes"] = memory.used;
            computes.push_back(entry);
          }
        }
        instances.push_back(
            {{"id", info.id},
             {"profile", std::string(profile.name + 4)},
             {"profile_id", info.profileId},
             {"placement", {{"start", info.placement.start}, {"size", info.placement.size}}},
             {"compute_instances", computes}});
      }
    }
  }
  out["gpu_instances"] = instances;
  return out;
}

int run_mig(const std::string& action, unsigned gpu_index, const std::string& argument,
            const std::string& second, std::optional<unsigned> placement,
            std::optional<unsigned> compute_profile) {
  Result<nvml::Session> session = nvml::Session::open(SIMGPU_NVML_LIBRARY);
  if (!session.is_ok()) return fail(session.status());
  if (action == "list" && argument.empty() && gpu_index == ~0u) {
    Result<unsigned> count = session->device_count();
    if (!count.is_ok()) return fail(count.status());
    nlohmann::json out = nlohmann::json::array();
    for (unsigned i = 0; i < *count; ++i) {
      Result<nlohmann::json> gpu = list_gpu(*session, i);
      if (!gpu.is_ok()) return fail(gpu.status());
      out.push_back(*gpu);
    }
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  Result<nvmlDevice_t> gpu = session->device_by_index(gpu_index);
  if (!gpu.is_ok()) return fail(gpu.status());
  if (action == "list") {
    Result<nlohmann::json> out = list_gpu(*session, gpu_index);
    if (!out.is_ok()) return fail(out.status());
    std::cout << out->dump(2) << "\n";
    return 0;
  }
  if (action == "mode") {
    const Status status = session->set_mig_mode(
        *gpu, argument == "on" ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE);
    return status.is_ok() ? 0 : fail(status);
  }
  if (action == "profiles") {
    Result<std::vector<nvmlGpuInstanceProfileInfo_v3_t>> profiles = gpu_profiles(*session, *gpu);
    if (!profiles.is_ok()) return fail(profiles.status());
    nlohmann::json out = nlohmann::json::array();
    for (const auto& profile : *profiles) {
      Result<std::vector<nvmlGpuInstancePlacement_t>> placements =
          session->gpu_instance_possible_placements(*gpu, profile.id);
      if (!placements.is_ok()) return fail(placements.status());
      nlohmann::json starts = nlohmann::json::array();
      for (const auto& each : *placements) starts.push_back(each.start);
      out.push_back({{"name", std::string(profile.name + 4)},
                     {"id", profile.id},
                     {"instances", profile.instanceCount},
                     {"memory_mib", profile.memorySizeMB},
                     {"multiprocessors", profile.multiprocessorCount},
                     {"slices", profile.sliceCount},
                     {"placement_size", placements->empty() ? 0u : placements->front().size},
                     {"placement_starts", starts}});
    }
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  if (action == "create") {
    Result<nvmlGpuInstanceProfileInfo_v3_t> profile = find_profile(*session, *gpu, argument);
    if (!profile.is_ok()) return fail(profile.status());
    // A placement's size is the profile's: NVML's placement list says it.
    Result<std::vector<nvmlGpuInstancePlacement_t>> placements =
        session->gpu_instance_possible_placements(*gpu, profile->id);
    if (!placements.is_ok()) return fail(placements.status());
    const unsigned size = placements->empty() ? 0 : placements->front().size;
    Result<nvmlGpuInstance_t> gpu_instance =
        placement ? session->create_gpu_instance_with_placement(
                        *gpu, profile->id, nvmlGpuInstancePlacement_t{*placement, size})
                  : session->create_gpu_instance(*gpu, profile->id);
    if (!gpu_instance.is_ok()) return fail(gpu_instance.status());
    // The compute instance: the given CI profile, or the one as large as the GPU instance.
    unsigned ci_profile = compute_profile.value_or(0);
    if (!compute_profile) {
      for (unsigned index = 0; index < NVML_COMPUTE_INSTANCE_PROFILE_COUNT; ++index) {
        Result<nvmlComputeInstanceProfileInfo_v3_t> info =
            session->compute_instance_profile_info(*gpu_instance, index);
        if (info.is_ok() && info->sliceCount == profile->sliceCount) ci_profile = info->id;
      }
    }
    Result<nvmlComputeInstance_t> compute =
        session->create_compute_instance(*gpu_instance, ci_profile);
    if (!compute.is_ok()) {
      (void)session->destroy_gpu_instance(*gpu_instance);  // nothing half-done
      return fail(compute.status());
    }
    Result<nvmlGpuInstanceInfo_t> gi_info = session->gpu_instance_info(*gpu_instance);
    Result<nvmlComputeInstanceInfo_t> ci_info = session->compute_instance_info(*compute);
    if (!gi_info.is_ok()) return fail(gi_info.status());
    if (!ci_info.is_ok()) return fail(ci_info.status());
    Result<std::string> uuid = session->uuid(ci_info->device);
    Result<std::string> name = session->name(ci_info->device);
    if (!uuid.is_ok()) return fail(uuid.status());
    if (!name.is_ok()) return fail(name.status());
    nlohmann::json out{
        {"gpu_instance", gi_info->id},
        {"compute_instance", ci_info->id},
        {"placement", {{"start", gi_info->placement.start}, {"size", gi_info->placement.size}}},
        {"uuid", *uuid},
        {"name", *name}};
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  // destroy <gi> [<ci>]
  const unsigned gi_id = static_cast<unsigned>(std::stoul(argument));
  Result<nvmlGpuInstance_t> gpu_instance = session->gpu_instance_by_id(*gpu, gi_id);
  if (!gpu_instance.is_ok()) return fail(gpu_instance.status());
  if (!second.empty()) {
    Result<nvmlComputeInstance_t> compute =
        session->compute_instance_by_id(*gpu_instance, static_cast<unsigned>(std::stoul(second)));
    if (!compute.is_ok()) return fail(compute.status());
    const Status status = session->destroy_compute_instance(*compute);
    return status.is_ok() ? 0 : fail(status);
  }
  for (unsigned ci = 0; ci < NVML_COMPUTE_INSTANCE_PROFILE_COUNT; ++ci) {
    Result<std::vector<nvmlComputeInstance_t>> list = session->compute_instances(*gpu_instance, ci);
    if (!list.is_ok()) continue;
    for (nvmlComputeInstance_t compute : *list) {
      if (const Status status = session->destroy_compute_instance(compute); !status.is_ok())
        return fail(status);
    }
  }
  const Status status = session->destroy_gpu_instance(*gpu_instance);
  return status.is_ok() ? 0 : fail(status);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Inspect and steer the simulated GPU (state file: $SIMGPU_STATE)"};
  app.require_subcommand(1);
  auto* status = app.add_subcommand("status", "Print devices, memory and processes as JSON");
  int device = 0;
  std::string health;
  auto* health_cmd = app.add_subcommand("health", "Mark a device healthy or unhealthy");
  health_cmd->add_option("device", device, "Device index")->required();
  health_cmd->add_option("state", health, "healthy or unhealthy")
      ->required()
      ->check(CLI::IsMember({"healthy", "unhealthy"}));
  int64_t countdown = 0;
  auto* fail_cmd = app.add_subcommand("fail-alloc", "Make the n-th allocation from now on fail");
  fail_cmd->add_option("n", countdown, "Which allocation fails (1 = the next)")
      ->required()
      ->check(CLI::PositiveNumber);
  auto* mig_cmd = app.add_subcommand("mig", "MIG mode and instances, through NVML");
  mig_cmd->require_subcommand(1);
  unsigned mig_gpu = ~0u;
  std::string mig_argument;
  std::string mig_second;
  std::optional<unsigned> placement;
  std::optional<unsigned> compute_profile;
  auto* mig_mode = mig_cmd->add_subcommand("mode", "Turn MIG mode on or off");
  mig_mode->add_option("gpu", mig_gpu, "GPU index")->required();
  mig_mode->add_option("mode", mig_argument, "on or off")
      ->required()
      ->check(CLI::IsMember({"on", "off"}));
  auto* mig_profiles = mig_cmd->add_subcommand("profiles", "GPU-instance profiles and placements");
  mig_profiles->add_option("gpu", mig_gpu, "GPU index")->required();
  auto* mig_create = mig_cmd->add_subcommand("create", "A GPU instance and a compute instance");
  mig_create->add_option("gpu", mig_gpu, "GPU index")->required();
  mig_create->add_option("profile", mig_argument, "Profile name (3g.71gb) or ID (9)")->required();
  mig_create->add_option("--placement", placement, "First memory slice (default: NVML chooses)");
  mig_create->add_option("--ci", compute_profile,
                         "Compute-instance profile index (default: the whole GPU instance)");
  auto* mig_destroy = mig_cmd->add_subcommand("destroy", "A compute instance, or a GPU instance");
  mig_destroy->add_option("gpu", mig_gpu, "GPU index")->required();
  mig_destroy->add_option("gi", mig_argument, "GPU instance ID")
      ->required()
      ->check(CLI::NonNegativeNumber);
  mig_destroy->add_option("ci", mig_second, "Compute instance ID (default: all, then the GI)")
      ->check(CLI::NonNegativeNumber);
  auto* mig_list = mig_cmd->add_subcommand("list", "MIG mode, instances and MIG devices (JSON)");
  mig_list->add_option("gpu", mig_gpu, "GPU index (default: all)");
  CLI11_PARSE(app, argc, argv);

  if (*mig_cmd) {
    for (auto* sub : {mig_mode, mig_profiles, mig_create, mig_destroy, mig_list}) {
      if (*sub)
        return run_mig(sub->get_name(), mig_gpu, mig_argument, mig_second, placement,
                       compute_profile);
    }
  }

  simgpu::Simulator* sim = simgpu::Simulator::get();
  if (!sim) return 1;
  if (*health_cmd || *fail_cmd) {
    if (*health_cmd) {
      if (device < 0 || device >= sim->device_count()) {
        std::fprintf(stderr, "simgpu-ctl: device %d does not exist (the simulator has %d)\n",
                     device, sim->device_count());
        return 2;
      }
      sim->set_healthy(device, health == "healthy");
    } else {
      sim->set_fail_alloc_countdown(countdown);
    }
    return 0;
  }
  (void)status;
  nlohmann::json out;
  out["state"] = sim->config().state_path;
  out["driver_version"] = sim->driver_version();
  out["cuda_driver_version"] = sim->cuda_driver_version();
  out["memory_partitions_supported"] = sim->has_memory_partitions();
  nlohmann::json partitions = nlohmann::json::array();
  for (const simgpu::MemoryPartition& partition : sim->memory_partitions()) {
    partitions.push_back({{"device", partition.device},
                          {"cgroup", partition.cgroup},
                          {"soft_limit_bytes", partition.soft_limit},
                          {"hard_limit_bytes", partition.hard_limit},
                          {"used_bytes", partition.used}});
  }
  out["memory_partitions"] = partitions;
  for (int d = 0; d < sim->device_count(); ++d) {
    const simgpu::DeviceConfig& config = sim->device(d);
    nlohmann::json processes = nlohmann::json::array();
    for (const auto& process : sim->process_memory(d)) {
      if (process.pid == getpid()) continue;
      processes.push_back({{"pid", process.pid}, {"memory_bytes", process.bytes}});
    }
    out["devices"].push_back({{"index", d},
                              {"name", config.name},
                              {"uuid", config.uuid},
                              {"memory_total_bytes", config.total_memory},
                              {"memory_used_bytes", sim->used_memory(d)},
                              {"sms", config.sm_count},
                              {"healthy", sim->healthy(d)},
                              {"processes", processes}});
  }
  std::cout << out.dump(2) << "\n";
  return 0;
}
