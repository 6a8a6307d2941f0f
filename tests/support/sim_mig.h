// MIG on the simulated GPU for tests that are not the simulator's own: instances made the way an
// admin makes them on a real node (simgpu-ctl, through the simulated NVML, as
// `nvidia-smi mig -cgi <profile> -C`).
#pragma once

#include <cstdio>
#include <string>

namespace simgpu::testing {

// A GPU instance and its compute instance of `profile` on GPU 0, made by `simgpu_ctl mig create`:
// its MIG UUID, or "" (a failure).
inline std::string create_mig_instance(const std::string& simgpu_ctl, const std::string& profile) {
  const std::string command = simgpu_ctl + " mig create 0 " + profile;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return "";
  std::string out;
  char buffer[256];
  while (std::fgets(buffer, sizeof buffer, pipe)) out += buffer;
  if (pclose(pipe) != 0) return "";
  const size_t at = out.find("\"MIG-");
  if (at == std::string::npos) return "";
  return out.substr(at + 1, out.find('"', at + 1) - at - 1);
}

}  // namespace simgpu::testing
