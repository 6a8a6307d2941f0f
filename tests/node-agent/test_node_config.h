// A whole node agent's configuration on a test node: a kubeconfig for the stand-in API server, the
// node's folders under one base folder, kubelet's folders in a short one, the doubles of the MPS
// control daemon and nvidia-smi, a fake driver root and shim. What the tests that run a NodeAgent
// share; each then sets what it tests (metrics, the local API, the checks, the process watcher).
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include "agent/agent_config.h"
#include "apiserver/fake_api_server.h"
#include "backend_doubles.h"
#include "share/fake_driver.h"

namespace tessera::agent::testing {

// Writes <base>/ca.crt (the server's CA) and <base>/kubeconfig: context "test", cluster "fake" at
// the server's URL trusting that CA, user "agent" with the server's token. Returns its path.
inline std::string write_kubeconfig(const FakeApiServer& api, const std::filesystem::path& base) {
  std::ofstream(base / "ca.crt") << api.ca_pem();
  std::ofstream(base / "kubeconfig")
      << "apiVersion: v1\nkind: Config\ncurrent-context: test\ncontexts:\n- name: test\n"
         "  context: {cluster: fake, user: agent}\nclusters:\n- name: fake\n  cluster:\n"
         "    server: "
      << api.url() << "\n    certificate-authority: " << (base / "ca.crt").string()
      << "\nusers:\n- name: agent\n  user:\n    token: " << api.token() << "\n";
  return (base / "kubeconfig").string();
}

// The agent of node "node-a", its state, CDI specs, driver root and shim under `base`, kubelet's
// registry and plugin folders under `sockets` (unix socket paths are limited to 107 bytes: a short
// folder in /tmp), no toolkit spec unless a test writes one, its loops every second.
inline AgentConfig test_node_config(const FakeApiServer& api, const std::filesystem::path& base,
                                    const std::filesystem::path& sockets) {
  AgentConfig config;
  config.node_name = "node-a";
  config.state_dir = (base / "state").string();
  config.cdi_dir = (base / "cdi").string();
  config.kubelet_registry_dir = (sockets / "registry").string();
  config.kubelet_plugins_dir = (sockets / "plugins").string();
  config.kubeconfig = write_kubeconfig(api, base);
  config.mps_control = RecordingDoubles::mps_control();
  config.nvidia_smi = RecordingDoubles::nvidia_smi();
  config.shim_path = write_fake_shim(base / "shim/libvgpu.so");
  std::filesystem::remove_all(base / "driver");
  make_fake_driver_root(base / "driver");
  config.driver_root = (base / "driver").string();
  config.toolkit_spec_dirs = (base / "toolkit").string();
  config.reconcile_interval_s = 1;
  config.device_poll_interval_s = 1;
  return config;
}

}  // namespace tessera::agent::testing
