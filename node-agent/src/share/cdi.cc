#include "share/cdi.h"

#include <nlohmann/json.hpp>

#include "mig/mig_caps.h"
#include "tessera/json_access.h"

namespace tessera::agent {

namespace {

using nlohmann::json;

json mount_json(const CdiMount& mount) {
  return {{"hostPath", mount.host_path},
          {"containerPath", mount.container_path},
          {"options", mount.options}};
}

json node_json(const CdiDeviceNode& node) {
  json out = {{"path", node.path}};
  if (!node.host_path.empty()) out["hostPath"] = node.host_path;
  return out;
}

bool non_empty_member(const json& object, const char* key) {
  if (!object.is_object()) return false;
  const auto it = object.find(key);
  return it != object.end() && !it->is_null() && !it->empty();
}

// Every containerEdits of the spec: the spec's own, then each device's.
std::vector<const json*> all_edits(const json& spec) {
  std::vector<const json*> edits;
  if (spec.contains("containerEdits")) edits.push_back(&spec["containerEdits"]);
  if (spec.contains("devices") && spec["devices"].is_array())
    for (const auto& device : spec["devices"])
      if (device.is_object() && device.contains("containerEdits"))
        edits.push_back(&device["containerEdits"]);
  return edits;
}

bool requires_v110(const json& spec) {
  for (const json* edits : all_edits(spec)) {
    if (non_empty_member(*edits, "netDevices")) return true;
    if (edits->is_object() && edits->contains("intelRdt")) {
      const json& rdt = (*edits)["intelRdt"];
      const json* monitoring = json_member(rdt, "enableMonitoring");
      if (non_empty_member(rdt, "schemata") || (monitoring && *monitoring == true)) return true;
    }
  }
  return false;
}

bool requires_v070(const json& spec) {
  for (const json* edits : all_edits(spec))
    if ((edits->is_object() && edits->contains("intelRdt") && !(*edits)["intelRdt"].is_null()) ||
        non_empty_member(*edits, "additionalGids"))
      return true;
  return false;
}

bool requires_v060(const json& spec) {
  if (non_empty_member(spec, "annotations")) return true;
  if (spec.contains("devices") && spec["devices"].is_array())
    for (const auto& device : spec["devices"])
      if (non_empty_member(device, "annotations")) return true;
  const std::string kind = json_string(spec, "kind");
  const size_t slash = kind.find('/');
  return slash != std::string::npos && kind.find('.', slash + 1) != std::string::npos;
}

bool requires_v050(const json& spec) {
  if (spec.contains("devices") && spec["devices"].is_array())
    for (const auto& device : spec["devices"]) {
      const std::string name =
          device.is_object() && device.contains("name") && device["name"].is_string()
              ? device["name"].get<std::string>()
              : "";
      if (!name.empty() && name[0] >= '0' && name[0] <= '9') return true;
    }
  for (const json* edits : all_edits(spec))
    if (edits->is_object() && edits->contains("deviceNodes") && (*edits)["deviceNodes"].is_array())
      for (const auto& node : (*edits)["deviceNodes"])
        if (non_empty_member(node, "hostPath")) return true;
  return false;
}

bool requires_v040(const json& spec) {
  for (const json* edits : all_edits(spec))
    if (edits->is_object() && edits->contains("mounts") && (*edits)["mounts"].is_array())
      for (const auto& mount : (*edits)["mounts"])
        if (non_empty_member(mount, "type")) return true;
  return false;
}

}  // namespace

std::optional<ShimLoading> parse_shim_loading(const std::string& text) {
  if (text == "ld.so.preload") return ShimLoading::kLdSoPreload;
  if (text == "LD_PRELOAD") return ShimLoading::kLdPreloadEnv;
  return std::nullopt;
}

const char* to_string(ShimLoading loading) {
  return loading == ShimLoading::kLdPreloadEnv ? "LD_PRELOAD" : "ld.so.preload";
}

std::string preload_file_contents(const std::string& shim_path) {
  return shim_path + "\n";
}

std::string minimum_cdi_version(const json& spec) {
  if (requires_v110(spec)) return "1.1.0";
  if (requires_v070(spec)) return "0.7.0";
  if (requires_v060(spec)) return "0.6.0";
  if (requires_v050(spec)) return "0.5.0";
  if (requires_v040(spec)) return "0.4.0";
  return "0.3.0";
}

Result<std::vector<std::string>> cdi_device_ids(const ShareSpec& share,
                                                const ContainerDriver& driver) {
  std::vector<std::string> ids = {cdi_device_id(share)};
  if (driver.uses_toolkit()) {
    TESSERA_ASSIGN_OR_RETURN(
        std::string toolkit,
        // A MIG share: the toolkit's device of its parent GPU (the caps
        // nodes come from our own spec).
        toolkit_device_id(driver, share.mig ? share.mig->parent_uuid : share.uuid, share.minor),
        with_context("share " + share.name()));
    ids.push_back(toolkit);
  } else if (!driver.uses_driver_root()) {
    return failed_precondition(
        "share " + share.name() +
        ": no NVIDIA driver for containers was found at start "
        "(neither the NVIDIA Container Toolkit's CDI spec nor a driver root)");
  }
  return ids;
}

std::string cdi_spec_file_name(const std::string& claim_uid) {
  return kCdiSpecFilePrefix + claim_uid + ".json";
}

std::string cdi_device_id(const ShareSpec& share) {
  return std::string(kCdiKind) + "=" + share.name();
}

std::string build_cdi_spec(const std::vector<ShareSpec>& shares, const CdiPaths& paths,
                           const ContainerDriver& driver) {
  json devices = json::array();
  for (const auto& share : shares) {
    const std::string host_dir = paths.host_shares_dir + "/" + share.folder_name();
    const std::string container_dir = paths.container_shares_dir + "/" + share.folder_name();
    // A container given several shares sees one TESSERA_SHARE_DIR (the last device's): libvgpu
    // finds every share under container_shares_dir by itself (docs/libvgpu.md, "Several
    // shares"), so nothing may depend on this value being the container's only share.
    json env = json::array({"TESSERA_SHARE_DIR=" + container_dir});
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
                                {"options", {"bind", "ro", "nosuid", "nodev", "noexec"}}}});
    if (share.strategy() == vgpu_config::SharingStrategy::kMps) {
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
    // A MIG device: CUDA sees the instance only (its MIG UUID), through its GPU and compute
    // instances' capability nodes, which the runtime creates from major and minor (they need not
    // exist on the host; mig-facts.md §2.6, §5.3).
    if (share.mig) env.push_back("CUDA_VISIBLE_DEVICES=" + share.uuid);
    json device_edits = {{"env", env}, {"mounts", mounts}};
    json device_nodes = json::array();
    // The GPU's own node, from where the driver root keeps its nodes (the toolkit's device
    // brings it otherwise).
    if (driver.uses_driver_root()) {
      const std::string node = "nvidia" + std::to_string(share.minor);
      device_nodes.push_back(node_json(
          {"/dev/" + node, driver.host_dev_dir == "/dev" ? "" : driver.host_dev_dir + "/" + node}));
    }
    if (share.mig && share.mig->caps)
      for (const unsigned minor : {share.mig->caps->gi_minor, share.mig->caps->ci_minor})
        device_nodes.push_back({{"path", caps_node_path(minor)},
                                {"type", "c"},
                                {"major", share.mig->caps->major},
                                {"minor", minor},
                                {"permissions", "r"}});
    if (!device_nodes.empty()) device_edits["deviceNodes"] = device_nodes;
    // The driver's wall on the container's own cgroup: a createRuntime hook runs in the runtime
    // namespace once the container's process is in its cgroup, before the user's program starts
    // (runtime-spec config.md#createruntime-hooks). Per device: a container given several shares
    // gets one hook per GPU, each with that share's limits.
    // Not for a MIG share: the driver's memory limits take no MIG handle (mig-facts.md §2.4).
    if (paths.partition_hook && !share.mig && paths.partition_hook->gpus.count(share.uuid))
      if (const std::optional<PartitionRecord> partition = share_partition(share)) {
        std::vector<std::string> args = {kCdiHookName};
        for (std::string& arg :
             hook_arguments(*partition, paths.partition_hook->record_dir + "/" + share.claim_uid))
          args.push_back(std::move(arg));
        device_edits["hooks"] = json::array({{{"hookName", "createRuntime"},
                                              {"path", paths.partition_hook->path},
                                              {"args", args}}});
      }
    devices.push_back({{"name", share.name()}, {"containerEdits", device_edits}});
  }

  // Edits every container of the claim needs once, whichever of its devices it gets: the shim,
  // how it is loaded, and the driver when the agent brings it.
  json mounts = json::array(
      {mount_json({paths.shim_path, paths.shim_path, {"bind", "ro", "nosuid", "nodev"}})});
  json env = json::array();
  if (paths.shim_loading == ShimLoading::kLdSoPreload)
    mounts.push_back(mount_json({paths.host_preload_file,
                                 kContainerPreloadFile,
                                 {"bind", "ro", "nosuid", "nodev", "noexec"}}));
  else
    env.push_back("LD_PRELOAD=" + paths.shim_path);
  json nodes = json::array();
  if (driver.uses_driver_root()) {
    for (const auto& node : driver.device_nodes) nodes.push_back(node_json(node));
    for (const auto& mount : driver.mounts) mounts.push_back(mount_json(mount));
  }
  json common = {{"mounts", mounts}};
  if (!env.empty()) common["env"] = env;
  if (!nodes.empty()) common["deviceNodes"] = nodes;

  json spec = {{"kind", kCdiKind}, {"containerEdits", common}, {"devices", devices}};
  spec["cdiVersion"] = minimum_cdi_version(spec);
  return spec.dump(2) + "\n";
}

}  // namespace tessera::agent
