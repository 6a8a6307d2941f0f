#include "agent_config.h"

#include <CLI/CLI.hpp>

namespace tessera::agent {

void add_agent_flags(CLI::App& app, AgentConfig& config) {
  app.add_option("--node-name", config.node_name, "Name of this Kubernetes node")
      ->envname("NODE_NAME")
      ->required();
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
}

}  // namespace tessera::agent
