// The GPUs of a simulated node as the agent sees them, listed in a child process: the simulated
// NVML reads its configuration (SIMGPU_STATE, SIMGPU_DEVICES) once per process.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "devices/resource_slices.h"
#include "model/node_device.h"
#include "tessera/gpu_info.h"

namespace tessera::agent::testing {

// The devices of a simulated node with `devices` (SIMGPU_DEVICES); empty when listing failed.
inline std::vector<NodeDevice> simulated_devices(const std::string& state,
                                                 const std::string& devices) {
  int fds[2];
  if (pipe(fds) != 0) return {};
  const pid_t child = fork();
  if (child == 0) {
    close(fds[0]);
    setenv("SIMGPU_STATE", state.c_str(), 1);
    setenv("SIMGPU_DEVICES", devices.c_str(), 1);
    std::string text;
    if (const Result<std::vector<GpuInfo>> listed = list_gpus(); listed.is_ok()) {
      const std::vector<GpuInfo>& gpus = *listed;
      nlohmann::json list = nlohmann::json::array();
      for (const auto& device : node_devices(gpus))
        list.push_back({device.name, device.uuid, device.minor, device.memory_bytes});
      text = list.dump();
    }
    (void)!write(fds[1], text.data(), text.size());
    _exit(0);
  }
  close(fds[1]);
  std::string text;
  char buffer[4096];
  ssize_t n;
  while ((n = read(fds[0], buffer, sizeof buffer)) > 0) text.append(buffer, static_cast<size_t>(n));
  close(fds[0]);
  waitpid(child, nullptr, 0);
  std::vector<NodeDevice> result;
  const nlohmann::json list = nlohmann::json::parse(text, nullptr, false);
  if (!list.is_array()) return result;
  for (const auto& d : list) result.push_back({d[0], d[1], d[2], d[3]});
  return result;
}

}  // namespace tessera::agent::testing
