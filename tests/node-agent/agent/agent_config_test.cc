// tessera-node-agent's flags: one environment variable per flag, flags win, defaults as documented.
#include <stdlib.h>

#include <array>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <CLI/CLI.hpp>

#include "agent/agent_config.h"

namespace tessera::agent {
namespace {

const char* const kEnvNames[] = {"NODE_NAME",
                                 "STATE_DIR",
                                 "KUBELET_REGISTRY_DIR",
                                 "KUBELET_PLUGINS_DIR",
                                 "CDI_DIR",
                                 "KUBECONFIG",
                                 "MPS_CONTROL",
                                 "MPS_DAEMON_CGROUP",
                                 "NVIDIA_SMI",
                                 "RECONCILE_INTERVAL",
                                 "DEVICE_POLL_INTERVAL",
                                 "SHIM_PATH",
                                 "SHIM_LOADING",
                                 "DRIVER_MODE",
                                 "TOOLKIT_SPEC_DIRS",
                                 "DRIVER_ROOT",
                                 "POD_UID",
                                 "CHECK_INTERVAL",
                                 "MEMORY_GRACE",
                                 "CORES_GRACE",
                                 "ENFORCEMENT_DEFAULT",
                                 "PROCESS_WATCH",
                                 "TENANT_MIN_ENFORCEMENT",
                                 "TENANT_MAX_PRIORITY",
                                 "TENANT_MAX_COMPUTE_LIMIT",
                                 "TENANT_MAX_MEMORY_LIMIT",
                                 "MIG_STRATEGY",
                                 "ALLOW_MIG_MODE_CHANGE",
                                 "RESOURCE_SLICE_SHAPE",
                                 "PROC_ROOT"};

class AgentConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : kEnvNames) unsetenv(name);
  }
  void TearDown() override { SetUp(); }

  // Parses `args` (after the program name) into a fresh config.
  AgentConfig parse(std::vector<std::string> args) {
    AgentConfig config;
    CLI::App app;
    add_agent_flags(app, config);
    args.insert(args.begin(), "tessera-node-agent");
    std::vector<const char*> argv;
    for (const std::string& arg : args) argv.push_back(arg.c_str());
    app.parse(static_cast<int>(argv.size()), argv.data());
    return config;
  }
};

TEST_F(AgentConfigTest, Defaults) {
  AgentConfig c = parse({"--node-name", "n1"});
  EXPECT_EQ(c.node_name, "n1");
  EXPECT_EQ(c.state_dir, "/var/lib/tessera");
  EXPECT_EQ(c.kubelet_registry_dir, "/var/lib/kubelet/plugins_registry");
  EXPECT_EQ(c.kubelet_plugins_dir, "/var/lib/kubelet/plugins");
  EXPECT_EQ(c.cdi_dir, "/var/run/cdi");
  EXPECT_EQ(c.kubeconfig, "");
  EXPECT_EQ(c.mps_control, "nvidia-cuda-mps-control");
  EXPECT_EQ(c.mps_daemon_cgroup, "");
  EXPECT_EQ(c.nvidia_smi, "nvidia-smi");
  EXPECT_EQ(c.reconcile_interval_s, 60u);
  EXPECT_EQ(c.device_poll_interval_s, 30u);
  EXPECT_EQ(c.shim_path, "/usr/local/tessera/lib/libvgpu.so");
  EXPECT_EQ(c.shim_loading, "ld.so.preload");
  EXPECT_EQ(c.driver_mode, "auto");
  EXPECT_EQ(c.toolkit_spec_dirs, "/etc/cdi,/var/run/cdi");
  EXPECT_EQ(c.driver_root, "/");
  EXPECT_EQ(c.process_watch, "auto");
}

TEST_F(AgentConfigTest, ProcessWatchTakesAutoOnOffFromFlagOrEnvironment) {
  EXPECT_EQ(parse({"--node-name", "n", "--process-watch", "off"}).process_watch, "off");
  setenv("PROCESS_WATCH", "on", 1);
  EXPECT_EQ(parse({"--node-name", "n"}).process_watch, "on");
  EXPECT_THROW(parse({"--node-name", "n", "--process-watch", "yes"}), CLI::ValidationError);
}

TEST_F(AgentConfigTest, MpsDaemonCgroupMustBeAnAbsolutePath) {
  try {
    parse({"--node-name", "n", "--mps-daemon-cgroup", "tessera-mps"});
    ADD_FAILURE() << "a relative cgroup folder was accepted";
  } catch (const CLI::ValidationError& error) {
    EXPECT_NE(std::string(error.what())
                  .find("--mps-daemon-cgroup must be an absolute path, not \"tessera-mps\""),
              std::string::npos)
        << error.what();
  }
}

TEST_F(AgentConfigTest, NodeNameIsRequired) {
  EXPECT_THROW(parse({}), CLI::RequiredError);
}

TEST_F(AgentConfigTest, EveryFlagHasItsEnvironmentVariable) {
  setenv("NODE_NAME", "env-node", 1);
  setenv("STATE_DIR", "/s", 1);
  setenv("KUBELET_REGISTRY_DIR", "/r", 1);
  setenv("KUBELET_PLUGINS_DIR", "/p", 1);
  setenv("CDI_DIR", "/c", 1);
  setenv("KUBECONFIG", "/k", 1);
  setenv("MPS_CONTROL", "/m", 1);
  setenv("MPS_DAEMON_CGROUP", "/host/sys/fs/cgroup/tessera-mps", 1);
  setenv("NVIDIA_SMI", "/n", 1);
  setenv("RECONCILE_INTERVAL", "5", 1);
  setenv("DEVICE_POLL_INTERVAL", "7", 1);
  setenv("SHIM_PATH", "/opt/libvgpu.so", 1);
  setenv("SHIM_LOADING", "LD_PRELOAD", 1);
  setenv("DRIVER_MODE", "driver-root", 1);
  setenv("TOOLKIT_SPEC_DIRS", "/t1,/t2", 1);
  setenv("DRIVER_ROOT", "/run/nvidia/driver", 1);
  AgentConfig c = parse({});
  EXPECT_EQ(c.shim_path, "/opt/libvgpu.so");
  EXPECT_EQ(c.shim_loading, "LD_PRELOAD");
  EXPECT_EQ(c.driver_mode, "driver-root");
  EXPECT_EQ(c.toolkit_spec_dirs, "/t1,/t2");
  EXPECT_EQ(c.driver_root, "/run/nvidia/driver");
  EXPECT_EQ(c.mps_control, "/m");
  EXPECT_EQ(c.mps_daemon_cgroup, "/host/sys/fs/cgroup/tessera-mps");
  EXPECT_EQ(c.nvidia_smi, "/n");
  EXPECT_EQ(c.reconcile_interval_s, 5u);
  EXPECT_EQ(c.device_poll_interval_s, 7u);
  EXPECT_EQ(c.node_name, "env-node");
  EXPECT_EQ(c.state_dir, "/s");
  EXPECT_EQ(c.kubelet_registry_dir, "/r");
  EXPECT_EQ(c.kubelet_plugins_dir, "/p");
  EXPECT_EQ(c.cdi_dir, "/c");
  EXPECT_EQ(c.kubeconfig, "/k");
}

TEST_F(AgentConfigTest, FlagsWinOverEnvironment) {
  setenv("STATE_DIR", "/from-env", 1);
  AgentConfig c =
      parse({"--node-name", "n", "--state-dir", "/from-flag", "--kubelet-registry-dir", "/r",
             "--kubelet-plugins-dir", "/p", "--cdi-dir", "/c", "--kubeconfig", "/k"});
  EXPECT_EQ(c.state_dir, "/from-flag");
  EXPECT_EQ(c.kubelet_registry_dir, "/r");
  EXPECT_EQ(c.kubelet_plugins_dir, "/p");
  EXPECT_EQ(c.cdi_dir, "/c");
  EXPECT_EQ(c.kubeconfig, "/k");
}

TEST_F(AgentConfigTest, ShimLoadingAndDriverModeTakeOnlyTheirValues) {
  EXPECT_EQ(parse({"--node-name", "n", "--driver-mode", "toolkit", "--shim-loading", "LD_PRELOAD",
                   "--driver-root", "/run/nvidia/driver", "--shim-path", "/s.so"})
                .driver_mode,
            "toolkit");
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"--shim-loading", "ld_preload"},
        std::vector<std::string>{"--driver-mode", "nvidia"}}) {
    std::vector<std::string> args = {"--node-name", "n"};
    args.insert(args.end(), bad.begin(), bad.end());
    try {
      parse(args);
      FAIL() << "accepted " << bad[0] << " " << bad[1];
    } catch (const CLI::ValidationError& e) {
      EXPECT_NE(std::string(e.what()).find(bad[1]), std::string::npos) << e.what();
    }
  }
}

// MIG (docs/node-agent.md, "MIG"): none by default, no mode changes, the slice shape from the API
// server; each flag with its environment variable and only its values.
TEST_F(AgentConfigTest, MigFlagsTakeTheirValuesFromFlagOrEnvironment) {
  const AgentConfig defaults = parse({"--node-name", "n"});
  EXPECT_EQ(defaults.mig_strategy, "none");
  EXPECT_FALSE(defaults.allow_mig_mode_change);
  EXPECT_EQ(defaults.resource_slice_shape, "auto");
  EXPECT_EQ(defaults.proc_root, "/proc");
  const AgentConfig flags =
      parse({"--node-name", "n", "--mig-strategy", "dynamic", "--allow-mig-mode-change",
             "--resource-slice-shape", "split", "--proc-root", "/host/proc"});
  EXPECT_EQ(flags.mig_strategy, "dynamic");
  EXPECT_TRUE(flags.allow_mig_mode_change);
  EXPECT_EQ(flags.resource_slice_shape, "split");
  EXPECT_EQ(flags.proc_root, "/host/proc");
  setenv("MIG_STRATEGY", "static", 1);
  setenv("ALLOW_MIG_MODE_CHANGE", "true", 1);
  setenv("RESOURCE_SLICE_SHAPE", "combined", 1);
  setenv("PROC_ROOT", "/p", 1);
  const AgentConfig env = parse({"--node-name", "n"});
  EXPECT_EQ(env.mig_strategy, "static");
  EXPECT_TRUE(env.allow_mig_mode_change);
  EXPECT_EQ(env.resource_slice_shape, "combined");
  EXPECT_EQ(env.proc_root, "/p");
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"--mig-strategy", "mixed"},
        std::vector<std::string>{"--resource-slice-shape", "v1beta1"}}) {
    std::vector<std::string> args = {"--node-name", "n"};
    args.insert(args.end(), bad.begin(), bad.end());
    try {
      parse(args);
      FAIL() << "accepted " << bad[0] << " " << bad[1];
    } catch (const CLI::ValidationError& e) {
      EXPECT_NE(std::string(e.what()).find(bad[1]), std::string::npos) << e.what();
    }
  }
}

TEST_F(AgentConfigTest, BadIntervalsNameTheFlagAndValue) {
  try {
    parse({"--node-name", "n", "--device-poll-interval", "0"});
    FAIL() << "accepted a zero poll interval";
  } catch (const CLI::ValidationError& e) {
    EXPECT_NE(std::string(e.what()).find("--device-poll-interval"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("0"), std::string::npos) << e.what();
  }
  setenv("RECONCILE_INTERVAL", "soon", 1);
  try {
    parse({"--node-name", "n"});
    FAIL() << "accepted RECONCILE_INTERVAL=soon";
  } catch (const CLI::ParseError& e) {
    EXPECT_NE(std::string(e.what()).find("soon"), std::string::npos) << e.what();
  }
}

TEST_F(AgentConfigTest, OutOfBandCheckFlagsAndTheEnforcementDefault) {
  const AgentConfig defaults = parse({"--node-name", "n"});
  EXPECT_EQ(defaults.check_interval_s, 1.0);
  EXPECT_EQ(defaults.memory_grace_s, 0.0);
  EXPECT_EQ(defaults.cores_grace_s, 5.0);
  EXPECT_EQ(defaults.enforcement_default, "report");
  setenv("ENFORCEMENT_DEFAULT", "kill", 1);
  const AgentConfig set = parse({"--node-name", "n", "--check-interval", "0.25", "--memory-grace",
                                 "1.5", "--cores-grace", "10"});
  EXPECT_EQ(set.check_interval_s, 0.25);
  EXPECT_EQ(set.memory_grace_s, 1.5);
  EXPECT_EQ(set.cores_grace_s, 10.0);
  EXPECT_EQ(set.enforcement_default, "kill");
  try {
    parse({"--node-name", "n", "--enforcement-default", "stop"});
    FAIL() << "accepted --enforcement-default stop";
  } catch (const CLI::ValidationError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "--enforcement-default: invalid value \"stop\" (one of report|kill)"),
              std::string::npos)
        << e.what();
  }
}

// The node's bounds on every share (docs/resource-model.md, "Who sets what"): none by default,
// each from its flag or its environment variable, a bad value refused naming the flag.
TEST_F(AgentConfigTest, TenantBoundFlags) {
  const AgentConfig defaults = parse({"--node-name", "n"});
  EXPECT_EQ(*tenant_bounds(defaults), vgpu_config::TenantBounds{});
  setenv("TENANT_MAX_MEMORY_LIMIT", "16Gi", 1);
  const AgentConfig set =
      parse({"--node-name", "n", "--tenant-min-enforcement", "kill", "--tenant-max-priority",
             "normal", "--tenant-max-compute-limit", "60"});
  const Result<vgpu_config::TenantBounds> bounds = tenant_bounds(set);
  ASSERT_TRUE(bounds.is_ok()) << bounds.status().message();
  EXPECT_EQ(bounds->min_enforcement, vgpu_config::EnforcementPolicy::kKill);
  EXPECT_EQ(bounds->max_priority, vgpu_config::Priority::kNormal);
  EXPECT_EQ(bounds->max_cores_limit, 60u);
  EXPECT_EQ(bounds->max_memory_limit, 16ull << 30);
  for (const auto& [flag, value, message] : std::vector<std::array<std::string, 3>>{
           {"--tenant-min-enforcement", "weak",
            "--tenant-min-enforcement: invalid value \"weak\" (one of report|kill)"},
           {"--tenant-max-priority", "urgent",
            "--tenant-max-priority: invalid value \"urgent\" (one of high|normal|low)"},
           {"--tenant-max-compute-limit", "101",
            "--tenant-max-compute-limit: invalid value \"101\" (an integer percent 1..100)"},
           {"--tenant-max-memory-limit", "0",
            "--tenant-max-memory-limit: invalid value \"0\" (a positive byte quantity such as "
            "\"8Gi\")"}}) {
    try {
      parse({"--node-name", "n", flag, value});
      ADD_FAILURE() << "accepted " << flag << " " << value;
    } catch (const CLI::ValidationError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
}

TEST_F(AgentConfigTest, NodeNameMustBeADnsSubdomain) {
  EXPECT_EQ(parse({"--node-name", "gpu-node-7.zone-a"}).node_name, "gpu-node-7.zone-a");
  EXPECT_TRUE(node_name_error(std::string(253, 'n')).is_ok());
  EXPECT_TRUE(node_name_error("7").is_ok());
  EXPECT_TRUE(node_name_error("a-b.c-d.e").is_ok());
  EXPECT_EQ(node_name_error("Node_7").code(), StatusCode::kInvalidArgument);
  for (const std::string& bad :
       std::vector<std::string>{"Node_7", "node/7", "node 7", "-node", "node.", ".node", "node..a",
                                "node-", "", "n?x=1", std::string(254, 'n')}) {
    try {
      parse({"--node-name", bad});
      FAIL() << "accepted --node-name " << bad;
    } catch (const CLI::ValidationError& e) {
      EXPECT_EQ(std::string(e.what()),
                "--node-name: \"" + bad +
                    "\" is not a Kubernetes node name: it must be a DNS subdomain (at most 253 "
                    "characters: lowercase letters, digits, '-' and '.', starting and ending with "
                    "a letter or digit)");
    }
  }
  setenv("NODE_NAME", "Node_7", 1);
  EXPECT_THROW(parse({}), CLI::ValidationError);
}

TEST_F(AgentConfigTest, MetricsAddressFlagAndEnvironment) {
  unsetenv("METRICS_ADDRESS");
  EXPECT_EQ(parse({"--node-name", "n"}).metrics_address, ":9464");
  EXPECT_EQ(parse({"--node-name", "n", "--metrics-address", "127.0.0.1:9000"}).metrics_address,
            "127.0.0.1:9000");
  EXPECT_EQ(parse({"--node-name", "n", "--metrics-address", ""}).metrics_address, "");  // off
  setenv("METRICS_ADDRESS", "[::]:9100", 1);
  EXPECT_EQ(parse({"--node-name", "n"}).metrics_address, "[::]:9100");
  setenv("METRICS_ADDRESS", "9100", 1);  // no colon: not an address
  try {
    parse({"--node-name", "n"});
    FAIL() << "accepted METRICS_ADDRESS=9100";
  } catch (const CLI::ValidationError& e) {
    EXPECT_NE(std::string(e.what()).find("9100"), std::string::npos) << e.what();
  }
  unsetenv("METRICS_ADDRESS");
}

// The pod UID names the kubelet sockets (rolling updates): absent by default, from --pod-uid or
// POD_UID (the flag wins), and only a UUID, as metadata.uid is.
TEST_F(AgentConfigTest, PodUidComesFromTheFlagOrPodUidAndMustBeAUuid) {
  EXPECT_EQ(parse({"--node-name", "n"}).pod_uid, "");
  const std::string uid = "3f2c6d1e-8b4a-4c1d-9e7f-0a1b2c3d4e5f";
  EXPECT_EQ(parse({"--node-name", "n", "--pod-uid", uid}).pod_uid, uid);
  setenv("POD_UID", "0f6b3f0e-7c59-4d0e-9b4e-2f7a5d1c9e01", 1);
  EXPECT_EQ(parse({"--node-name", "n"}).pod_uid, "0f6b3f0e-7c59-4d0e-9b4e-2f7a5d1c9e01");
  EXPECT_EQ(parse({"--node-name", "n", "--pod-uid", uid}).pod_uid, uid);
  EXPECT_TRUE(pod_uid_error("3F2C6D1E-8B4A-4C1D-9E7F-0A1B2C3D4E5F").is_ok());
  for (const std::string& bad : std::vector<std::string>{
           "pod-1", "3f2c6d1e8b4a4c1d9e7f0a1b2c3d4e5f", "3f2c6d1e-8b4a-4c1d-9e7f-0a1b2c3d4e5",
           "3f2c6d1e-8b4a-4c1d-9e7f-0a1b2c3d4e5fa", "3f2c6d1e-8b4a-4c1d-9e7f_0a1b2c3d4e5f",
           "../../../../tmp/x-8b4a-4c1d-9e7f-0a1b", "3f2c6d1e-8b4a-4c1d-9e7f-0a1b2c3d4e5g"}) {
    EXPECT_EQ(pod_uid_error(bad).code(), StatusCode::kInvalidArgument) << bad;
    try {
      parse({"--node-name", "n", "--pod-uid", bad});
      FAIL() << "accepted --pod-uid " << bad;
    } catch (const CLI::ValidationError& e) {
      EXPECT_EQ(std::string(e.what()),
                "--pod-uid: \"" + bad +
                    "\" is not a pod UID: it must be the pod's metadata.uid, a UUID of 8-4-4-4-12 "
                    "hexadecimal digits (set it from the downward API)");
    }
  }
  setenv("POD_UID", "not-a-uid", 1);
  EXPECT_THROW(parse({"--node-name", "n"}), CLI::ValidationError);
}

}  // namespace
}  // namespace tessera::agent
