#include "share/cdi.h"

#include <nlohmann/json.hpp>

namespace tessera::agent {

std::string cdi_spec_file_name(const std::string& claim_uid) {
  return kCdiSpecFilePrefix + claim_uid + ".json";
}

std::string cdi_device_id(const ShareSpec& share) {
  return std::string(kCdiKind) + "=" + share.name();
}

std::string build_cdi_spec(const std::vector<ShareSpec>& shares, const CdiPaths& paths) {
  using nlohmann::json;
  json devices = json::array();
  for (const auto& share : shares) {
    const std::string host_dir = paths.host_shares_dir + "/" + share.folder_name();
    const std::string container_dir = paths.container_shares_dir + "/" + share.folder_name();
    // A container given several shares sees one TESSERA_SHARE_DIR (the last device's): libvgpu
    // finds every share under container_shares_dir by itself (docs/libvgpu.md, "Several
    // shares"), so nothing may depend on this value being the container's only share.
    json env = json::array({"TESSERA_SHARE_DIR=" + container_dir, "LD_PRELOAD=" + paths.shim_path});
    // For people and tools in the container only: with TESSERA_SHARE_DIR set the shim reads the
    // limits page and ignores limits in the environment, so these names are not the shim's own.
    // Every share of a folder sets the same values (a container given several of them sees one
    // value, whichever device's edits come last): one entry per GPU of the folder.
    std::string memory, cores, gpus;
    for (const auto& member : shares) {
      if (member.folder_name() != share.folder_name()) continue;
      const bool first = gpus.empty();
      const std::string prefix = first ? "" : ",";
      const bool grouped = !share.folder.empty();
      const std::string key = grouped ? member.uuid + "=" : "";
      memory +=
          prefix + key + (member.memory_bytes ? std::to_string(*member.memory_bytes) : "none");
      cores += prefix + key + (member.cores ? std::to_string(*member.cores) : "none");
      gpus += prefix + member.uuid;
    }
    env.push_back("TESSERA_SHARE_MEMORY_LIMIT=" + memory);
    env.push_back("TESSERA_SHARE_CORES_LIMIT=" + cores);
    env.push_back("TESSERA_SHARE_GPU=" + gpus);
    // The folder read-write (the shim's processes write the usage page there), then the limits
    // page mounted over its own path read-only: a tenant can never raise its own limits.
    json mounts = json::array({{{"hostPath", host_dir},
                                {"containerPath", container_dir},
                                {"options", {"rbind", "rw", "nosuid", "nodev", "noexec"}}},
                               {{"hostPath", host_dir + "/limits"},
                                {"containerPath", container_dir + "/limits"},
                                {"options", {"bind", "ro", "nosuid", "nodev", "noexec"}}},
                               {{"hostPath", paths.shim_path},
                                {"containerPath", paths.shim_path},
                                {"options", {"bind", "ro", "nosuid", "nodev"}}}});
    if (share.strategy() == SharingStrategy::kMps) {
      // The share's own MPS control daemon: its pipe folder, and the /dev/shm it shares with the
      // daemon (and with no other share).
      const std::string host_mps = paths.host_mps_dir + "/" + share.name();
      const std::string container_pipe = paths.container_mps_dir + "/" + share.name() + "/pipe";
      env.push_back("CUDA_MPS_PIPE_DIRECTORY=" + container_pipe);
      mounts.push_back({{"hostPath", host_mps + "/pipe"},
                        {"containerPath", container_pipe},
                        {"options", {"rbind", "rw", "nosuid", "nodev", "noexec"}}});
      mounts.push_back({{"hostPath", host_mps + "/shm"},
                        {"containerPath", "/dev/shm"},
                        {"options", {"rbind", "rw", "nosuid", "nodev", "noexec"}}});
    }
    json nodes = json::array({{{"path", "/dev/nvidia" + std::to_string(share.minor)}},
                              {{"path", "/dev/nvidiactl"}},
                              {{"path", "/dev/nvidia-uvm"}}});
    devices.push_back(
        {{"name", share.name()},
         {"containerEdits", {{"env", env}, {"mounts", mounts}, {"deviceNodes", nodes}}}});
  }
  return json{{"cdiVersion", kCdiVersion}, {"kind", kCdiKind}, {"devices", devices}}.dump(2) + "\n";
}

}  // namespace tessera::agent
