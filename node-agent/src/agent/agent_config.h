// The node agent's settings: one command-line flag per field, each with one environment variable
// of the same name (--node-name <-> NODE_NAME), so the Helm chart can set either.
#pragma once

#include <string>

#include "tessera/status.h"
#include "tessera/vgpu_config/vgpu_config.h"

namespace CLI {
class App;
}

namespace tessera::agent {

struct AgentConfig {
  std::string node_name;                       // --node-name / NODE_NAME
  std::string state_dir = "/var/lib/tessera";  // --state-dir / STATE_DIR
  std::string kubelet_registry_dir = "/var/lib/kubelet/plugins_registry";  // KUBELET_REGISTRY_DIR
  std::string kubelet_plugins_dir = "/var/lib/kubelet/plugins";            // KUBELET_PLUGINS_DIR
  std::string cdi_dir = "/var/run/cdi";                                    // --cdi-dir / CDI_DIR
  std::string kubeconfig;  // --kubeconfig / KUBECONFIG; empty: in-cluster service account
  std::string mps_control = "nvidia-cuda-mps-control";  // --mps-control / MPS_CONTROL
  // --mps-daemon-cgroup / MPS_DAEMON_CGROUP: a cgroup v2 folder (absolute path) outside the
  // agent's container for the MPS daemons, each in <folder>/<share>; empty: the agent's cgroup.
  std::string mps_daemon_cgroup;
  std::string nvidia_smi = "nvidia-smi";                        // --nvidia-smi / NVIDIA_SMI
  std::string shim_path = "/usr/local/tessera/lib/libvgpu.so";  // --shim-path / SHIM_PATH
  std::string shim_loading = "ld.so.preload";  // --shim-loading / SHIM_LOADING: or "LD_PRELOAD"
  // The driver in containers: --driver-mode / DRIVER_MODE (auto, toolkit, driver-root), the
  // toolkit's CDI spec folders (--toolkit-spec-dirs / TOOLKIT_SPEC_DIRS, comma-separated) and
  // the driver root (--driver-root / DRIVER_ROOT; /run/nvidia/driver under the GPU Operator).
  std::string driver_mode = "auto";
  std::string toolkit_spec_dirs = "/etc/cdi,/var/run/cdi";
  std::string driver_root = "/";
  // --gpus / GPUS: the GPUs this agent publishes, comma-separated NVML indices or UUIDs (as
  // NVIDIA_VISIBLE_DEVICES names them); empty: all. The rest are left to another allocator
  // (docs/coexistence.md).
  std::string gpus;
  unsigned reconcile_interval_s = 60;     // --reconcile-interval / RECONCILE_INTERVAL; 0 = at start
  unsigned device_poll_interval_s = 30;   // --device-poll-interval / DEVICE_POLL_INTERVAL
  std::string metrics_address = ":9464";  // --metrics-address / METRICS_ADDRESS; empty: none
  // The out-of-band checks (enforcement/checker.h): seconds between passes (--check-interval /
  // CHECK_INTERVAL, 0: off), how long a share may be over its memory limit (--memory-grace) or
  // its cores burst (--cores-grace) before it is a finding, and what a share without its own
  // VgpuConfig `enforcement` gets (--enforcement-default: report or kill).
  double check_interval_s = 1;
  double memory_grace_s = 0;
  double cores_grace_s = 5;
  std::string enforcement_default = "report";
  // Bounds on every share of this node, whatever its class and claim say (docs/resource-model.md,
  // "Who sets what"); empty: none. --tenant-min-enforcement (report|kill), --tenant-max-priority
  // (high|normal|low), --tenant-max-compute-limit (percent 1..100), --tenant-max-memory-limit
  // (a quantity, "16Gi"); environment TENANT_MIN_ENFORCEMENT and so on.
  std::string tenant_min_enforcement;
  std::string tenant_max_priority;
  std::string tenant_max_compute_limit;
  std::string tenant_max_memory_limit;
  // --process-watch / PROCESS_WATCH: the eBPF process watcher. auto: load it, else run on the
  // periodic checks alone; on: the agent does not start without it; off: never loaded.
  std::string process_watch = "auto";
  // --driver-partitions / DRIVER_PARTITIONS: the driver's per-cgroup memory partitions (R615,
  // cgroup v2; docs/driver-partitions.md). auto: detected per GPU at start, applied by the CDI hook
  // where found; off: the shim alone holds memory.
  std::string driver_partitions = "auto";
  // MIG (docs/node-agent.md, "MIG"): --mig-strategy / MIG_STRATEGY none|static|dynamic;
  // --allow-mig-mode-change / ALLOW_MIG_MODE_CHANGE (dynamic: MIG mode turned on at a prepare
  // that needs it, never while processes run); --resource-slice-shape / RESOURCE_SLICE_SHAPE
  // auto|combined|split (where dynamic MIG's counter sets go; auto: from the API server's
  // version); --proc-root / PROC_ROOT (where the MIG capability files and /proc/devices are read).
  std::string mig_strategy = "none";
  bool allow_mig_mode_change = false;
  std::string resource_slice_shape = "auto";
  std::string proc_root = "/proc";
  // --cdi-hook-path / CDI_HOOK_PATH: tessera-cdi-hook on the host; "" = beside the shim.
  std::string cdi_hook_path;
  // --pod-uid / POD_UID: the agent pod's metadata.uid (downward API). Given, the kubelet sockets
  // carry it and a second agent (the new pod of a rolling update) may run beside this one on the
  // state folder; empty: the fixed socket names, one agent per state folder.
  std::string pod_uid;
  // Logs: --log-format / LOG_FORMAT (text or json: one object per line), -v (debug), -vv (trace).
  std::string log_format = "text";
  int verbosity = 0;
  // The local API (docs/node-agent.md, "Local API"): --api-socket / API_SOCKET (empty:
  // <state-dir>/api.sock; "off": none), --api-socket-mode / API_SOCKET_MODE (octal),
  // --api-socket-group / API_SOCKET_GROUP (empty: root's).
  std::string api_socket;
  std::string api_socket_mode = "0600";
  std::string api_socket_group;
  // Not a flag and not for production: TESSERA_TEST_KILL_AT, read from the environment once by
  // main. A crash point for tests (docs/node-agent.md, "Test hook"): the process kills itself with
  // SIGKILL right after NVML created a dynamic MIG GPU instance (after-gpu-instance) or compute
  // instance (after-compute-instance), before its record names it. Empty: never.
  std::string test_kill_at;
};

// Ok when `uid` can be a pod's metadata.uid (a UUID: 8-4-4-4-12 hexadecimal digits), else
// kInvalidArgument naming it.
Status pod_uid_error(const std::string& uid);

// Ok when `name` can be a Kubernetes Node's name (a DNS subdomain), else kInvalidArgument saying
// why not (naming it).
Status node_name_error(const std::string& name);

// The --tenant-* flags as bounds, or kInvalidArgument naming the flag and its value.
Result<vgpu_config::TenantBounds> tenant_bounds(const AgentConfig& config);

// Registers the flags above on `app`, writing into `config` (whose values are the defaults).
// A flag given on the command line wins over its environment variable.
void add_agent_flags(CLI::App& app, AgentConfig& config);

}  // namespace tessera::agent
