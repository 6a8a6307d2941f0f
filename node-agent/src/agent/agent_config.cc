#include "agent/agent_config.h"

#include <CLI/CLI.hpp>

#include "api/node_api_server.h"
#include "devices/coexistence.h"
#include "metrics/metrics_server.h"
#include "tessera/flags/listen_address.h"
#include "tessera/flags/log_flags.h"
#include "tessera/log.h"
#include "tessera/vgpu_config/vgpu_config.h"

namespace tessera::agent {

namespace {

// RFC 1123 subdomain as kube-apiserver checks Node names (IsDNS1123Subdomain): dot-separated
// labels of [a-z0-9-], each starting and ending with [a-z0-9], 253 characters at most.
bool is_dns1123_subdomain(const std::string& name) {
  if (name.empty() || name.size() > 253) return false;
  auto alphanumeric = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  size_t label_start = 0;
  for (size_t i = 0; i <= name.size(); ++i) {
    if (i == name.size() || name[i] == '.') {
      if (i == label_start || !alphanumeric(name[label_start]) || !alphanumeric(name[i - 1]))
        return false;
      label_start = i + 1;
    } else if (!alphanumeric(name[i]) && name[i] != '-') {
      return false;
    }
  }
  return true;
}

}  // namespace

Status node_name_error(const std::string& name) {
  // The name also goes into API paths, field selectors and the ResourceSlices' pool and names.
  if (is_dns1123_subdomain(name)) return Status::ok();
  return invalid_argument(
      "\"" + name +
      "\" is not a Kubernetes node name: it must be a DNS subdomain (at most 253 characters: "
      "lowercase letters, digits, '-' and '.', starting and ending with a letter or digit)");
}

Status pod_uid_error(const std::string& uid) {
  // The API server generates UIDs as RFC 4122 UUIDs; it also goes into socket file names.
  bool uuid = uid.size() == 36;
  for (size_t i = 0; uuid && i < uid.size(); ++i) {
    const char c = uid[i];
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    uuid = dash ? c == '-'
                : (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
  }
  if (uuid) return Status::ok();
  return invalid_argument("\"" + uid +
                          "\" is not a pod UID: it must be the pod's metadata.uid, a UUID of "
                          "8-4-4-4-12 hexadecimal digits (set it from the downward API)");
}

Result<vgpu_config::TenantBounds> tenant_bounds(const AgentConfig& config) {
  vgpu_config::TenantBounds bounds;
  if (!config.tenant_min_enforcement.empty()) {
    TESSERA_ASSIGN_OR_RETURN(
        vgpu_config::EnforcementPolicy policy,
        vgpu_config::decode_enforcement_policy(nlohmann::json(config.tenant_min_enforcement),
                                               "--tenant-min-enforcement"));
    bounds.min_enforcement = policy;
  }
  if (!config.tenant_max_priority.empty()) {
    TESSERA_ASSIGN_OR_RETURN(
        vgpu_config::Priority priority,
        vgpu_config::decode_priority(config.tenant_max_priority, "--tenant-max-priority"));
    bounds.max_priority = priority;
  }
  if (!config.tenant_max_compute_limit.empty()) {
    TESSERA_ASSIGN_OR_RETURN(uint32_t percent,
                             vgpu_config::decode_cores_limit(config.tenant_max_compute_limit,
                                                             "--tenant-max-compute-limit"));
    bounds.max_cores_limit = percent;
  }
  if (!config.tenant_max_memory_limit.empty()) {
    TESSERA_ASSIGN_OR_RETURN(uint64_t bytes,
                             vgpu_config::decode_memory_limit(config.tenant_max_memory_limit,
                                                              "--tenant-max-memory-limit"));
    bounds.max_memory_limit = bytes;
  }
  return bounds;
}

void add_agent_flags(CLI::App& app, AgentConfig& config) {
  app.add_option("--node-name", config.node_name, "Name of this Kubernetes node")
      ->envname("NODE_NAME")
      ->required()
      // CLI11 validators answer "" or the error text.
      ->check(
          CLI::Validator([](const std::string& name) { return node_name_error(name).message(); },
                         "DNS subdomain", "node name"));
  app.add_option("--state-dir", config.state_dir, "Agent state: checkpoint and share folders")
      ->envname("STATE_DIR")
      ->capture_default_str();
  app.add_option("--kubelet-registry-dir", config.kubelet_registry_dir,
                 "Kubelet's plugin registration folder (the -reg.sock goes here)")
      ->envname("KUBELET_REGISTRY_DIR")
      ->capture_default_str();
  app.add_option("--kubelet-plugins-dir", config.kubelet_plugins_dir,
                 "Kubelet's plugins folder (the DRA socket goes in <dir>/vgpu.tessera.dev/)")
      ->envname("KUBELET_PLUGINS_DIR")
      ->capture_default_str();
  app.add_option("--cdi-dir", config.cdi_dir, "Folder for the per-claim CDI specs")
      ->envname("CDI_DIR")
      ->capture_default_str();
  app.add_option("--kubeconfig", config.kubeconfig,
                 "Kubeconfig file; empty: the in-cluster service account")
      ->envname("KUBECONFIG");
  app.add_option("--mps-control", config.mps_control,
                 "nvidia-cuda-mps-control for MPS shares (a path, or a name looked up in PATH)")
      ->envname("MPS_CONTROL")
      ->capture_default_str();
  app.add_option("--mps-daemon-cgroup", config.mps_daemon_cgroup,
                 "cgroup v2 folder outside the agent's container for the MPS daemons, each in "
                 "<folder>/<share>, so they outlive the agent (empty: the agent's own cgroup)")
      ->envname("MPS_DAEMON_CGROUP")
      ->check(CLI::Validator(
          [](const std::string& path) -> std::string {
            if (path.empty() || path.front() == '/') return "";
            return "--mps-daemon-cgroup must be an absolute path, not \"" + path + "\"";
          },
          "absolute path", "cgroup folder"));
  app.add_option("--nvidia-smi", config.nvidia_smi,
                 "nvidia-smi for TimeSlicing claims (a path, or a name looked up in PATH)")
      ->envname("NVIDIA_SMI")
      ->capture_default_str();
  app.add_option("--shim-path", config.shim_path,
                 "libvgpu.so: the same path on the host and in containers (checked at prepare)")
      ->envname("SHIM_PATH")
      ->capture_default_str();
  app.add_option("--shim-loading", config.shim_loading,
                 "How containers load the shim: ld.so.preload (a file mounted at "
                 "/etc/ld.so.preload) or LD_PRELOAD (replaces the image's LD_PRELOAD)")
      ->envname("SHIM_LOADING")
      ->check(CLI::IsMember({"ld.so.preload", "LD_PRELOAD"}))
      ->capture_default_str();
  app.add_option("--driver-mode", config.driver_mode,
                 "The NVIDIA driver in containers: toolkit (the NVIDIA Container Toolkit's CDI "
                 "device), driver-root (mounted from --driver-root), auto (toolkit if found)")
      ->envname("DRIVER_MODE")
      ->check(CLI::IsMember({"auto", "toolkit", "driver-root"}))
      ->capture_default_str();
  app.add_option("--toolkit-spec-dirs", config.toolkit_spec_dirs,
                 "Comma-separated folders of the NVIDIA Container Toolkit's CDI specs")
      ->envname("TOOLKIT_SPEC_DIRS")
      ->capture_default_str();
  app.add_option("--driver-root", config.driver_root,
                 "Where the driver's files are (/run/nvidia/driver under the GPU Operator)")
      ->envname("DRIVER_ROOT")
      ->capture_default_str();
  app.add_option("--gpus", config.gpus,
                 "The GPUs this agent publishes: comma-separated NVML indices or UUIDs (GPU-...); "
                 "empty: all. Leave the others to NVIDIA's device plugin (docs/coexistence.md)")
      ->envname("GPUS")
      ->check(CLI::Validator(
          [](const std::string& gpus) { return GpuSelection::parse(gpus).status().message(); },
          "INDEX|UUID,...", "GPU list"));
  app.add_option("--reconcile-interval", config.reconcile_interval_s,
                 "Seconds between checks that the host matches the checkpoint (0: at start only)")
      ->envname("RECONCILE_INTERVAL")
      ->check(CLI::Range(0u, 86400u))
      ->capture_default_str();
  app.add_option("--pod-uid", config.pod_uid,
                 "This agent pod's UID (metadata.uid): per-pod kubelet socket names, so the old "
                 "and the new pod of a rolling update run side by side")
      ->envname("POD_UID")
      ->check(CLI::Validator([](const std::string& uid) { return pod_uid_error(uid).message(); },
                             "UUID", "pod UID"));
  app.add_option("--device-poll-interval", config.device_poll_interval_s,
                 "Seconds between GPU inventory checks (ResourceSlices are republished on change)")
      ->envname("DEVICE_POLL_INTERVAL")
      ->check(CLI::Range(1u, 3600u))
      ->capture_default_str();
  app.add_option("--driver-partitions", config.driver_partitions,
                 "The driver's per-cgroup memory partitions (R615, cgroup v2): auto (detected per "
                 "GPU at start, set on each container's cgroup by the CDI hook), off")
      ->envname("DRIVER_PARTITIONS")
      ->check(CLI::IsMember({"auto", "off"}))
      ->capture_default_str();
  app.add_option("--mig-strategy", config.mig_strategy,
                 "MIG: none (every GPU whole), static (a GPU in MIG mode as its existing "
                 "instances), dynamic (MIG-capable GPUs whole and as every profile and placement, "
                 "the instance created at prepare)")
      ->envname("MIG_STRATEGY")
      ->check(CLI::IsMember({"none", "static", "dynamic"}))
      ->capture_default_str();
  app.add_flag("--allow-mig-mode-change", config.allow_mig_mode_change,
               "Dynamic MIG: turn a GPU's MIG mode on at a prepare that needs it (refused while "
               "processes run on the GPU)")
      ->envname("ALLOW_MIG_MODE_CHANGE");
  app.add_option("--resource-slice-shape", config.resource_slice_shape,
                 "Where dynamic MIG's counter sets are published: auto (from the API server's "
                 "version), combined (with the devices: Kubernetes 1.34), split (slices of their "
                 "own: 1.35 and later)")
      ->envname("RESOURCE_SLICE_SHAPE")
      ->check(CLI::IsMember({"auto", "combined", "split"}))
      ->capture_default_str();
  app.add_option("--proc-root", config.proc_root,
                 "Where the MIG capability files (driver/nvidia/capabilities) and devices are read")
      ->envname("PROC_ROOT")
      ->capture_default_str();
  app.add_option("--cdi-hook-path", config.cdi_hook_path,
                 "tessera-cdi-hook on the host (default: beside --shim-path)")
      ->envname("CDI_HOOK_PATH");
  app.add_option("--process-watch", config.process_watch,
                 "The eBPF process watcher (slots of exited processes reclaimed at once, unshimmed "
                 "GPU opens reported): auto (where BPF loads), on (required), off")
      ->envname("PROCESS_WATCH")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  flags::add_log_flags(app, config.log_format, config.verbosity, "LOG_FORMAT");
  app.add_option("--check-interval", config.check_interval_s,
                 "Seconds between out-of-band checks of the shares' processes (0: off)")
      ->envname("CHECK_INTERVAL")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  app.add_option("--memory-grace", config.memory_grace_s,
                 "Seconds a share may be over its memory limit (as NVML sees it) before a finding")
      ->envname("MEMORY_GRACE")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  app.add_option("--cores-grace", config.cores_grace_s,
                 "Seconds a share may be over its cores burst before a finding")
      ->envname("CORES_GRACE")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  app.add_option("--enforcement-default", config.enforcement_default,
                 "What a finding in a share without its own VgpuConfig enforcement does: report, "
                 "or kill (SIGKILL of the offending process)")
      ->envname("ENFORCEMENT_DEFAULT")
      ->check(CLI::Validator(
          [](const std::string& value) {
            return vgpu_config::decode_enforcement_policy(nlohmann::json(value),
                                                          "--enforcement-default")
                .status()
                .message();
          },
          "report|kill", "enforcement policy"))
      ->capture_default_str();
  // The --tenant-* bounds, each checked by tenant_bounds()'s own decoder.
  const auto bound_check = [](std::string AgentConfig::*field) {
    return CLI::Validator(
        [field](const std::string& value) {
          AgentConfig probe;
          probe.*field = value;
          return tenant_bounds(probe).status().message();
        },
        "BOUND", "tenant bound");
  };
  app.add_option("--tenant-min-enforcement", config.tenant_min_enforcement,
                 "The weakest enforcement any share of this node gets: kill overrides a class's or "
                 "claim's report (and --enforcement-default)")
      ->envname("TENANT_MIN_ENFORCEMENT")
      ->check(bound_check(&AgentConfig::tenant_min_enforcement));
  app.add_option("--tenant-max-priority", config.tenant_max_priority,
                 "The highest compute.priority any share of this node gets (high|normal|low); "
                 "a higher one is lowered to it at prepare")
      ->envname("TENANT_MAX_PRIORITY")
      ->check(bound_check(&AgentConfig::tenant_max_priority));
  app.add_option("--tenant-max-compute-limit", config.tenant_max_compute_limit,
                 "The largest compute.limit (percent 1..100) a share gets above its cores request; "
                 "a higher one is lowered to it at prepare")
      ->envname("TENANT_MAX_COMPUTE_LIMIT")
      ->check(bound_check(&AgentConfig::tenant_max_compute_limit));
  app.add_option("--tenant-max-memory-limit", config.tenant_max_memory_limit,
                 "The largest memory.limit (a quantity, 16Gi) a share gets above its memory "
                 "request; a higher one is lowered to it at prepare")
      ->envname("TENANT_MAX_MEMORY_LIMIT")
      ->check(bound_check(&AgentConfig::tenant_max_memory_limit));
  app.add_option(
         "--metrics-address", config.metrics_address,
         "host:port (or :port) of the Prometheus /metrics and /healthz endpoint; empty: none")
      ->envname("METRICS_ADDRESS")
      ->check(flags::listen_address_check("--metrics-address", /*allow_empty=*/true))
      ->capture_default_str();
  app.add_option("--api-socket", config.api_socket,
                 "Unix socket of the local API for tools on the node (tessera events, shares, "
                 "top); empty: <state-dir>/api.sock; off: none")
      ->envname("API_SOCKET");
  app.add_option("--api-socket-mode", config.api_socket_mode,
                 "Octal mode of the local API socket (0600: root only; 0660 with "
                 "--api-socket-group)")
      ->envname("API_SOCKET_MODE")
      ->check(CLI::Validator(
          [](const std::string& mode) { return parse_socket_mode(mode).status().message(); },
          "MODE", "socket mode"))
      ->capture_default_str();
  app.add_option("--api-socket-group", config.api_socket_group,
                 "Group of the local API socket (its members connect when the mode allows)")
      ->envname("API_SOCKET_GROUP");
}

}  // namespace tessera::agent
