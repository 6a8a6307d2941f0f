// simgpu-ctl: inspect and steer the simulated GPU from outside the programs using it.
//   simgpu-ctl status                      driver, devices, memory, processes and memory
//                                          partitions (R615 per-cgroup limits), as JSON
//   simgpu-ctl health <device> healthy|unhealthy
//   simgpu-ctl fail-alloc <n>              the n-th allocation from now on (any process) fails
// The state file is chosen by SIMGPU_STATE, as for the simulated libraries.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "core/simulator.h"

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
  CLI11_PARSE(app, argc, argv);

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
