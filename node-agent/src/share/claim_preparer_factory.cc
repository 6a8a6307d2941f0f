// make_claim_preparer (plugin/claim_preparer_factory.h): the Kubernetes client, the node's GPUs
// from NVML, the node's ResourceSlices published once, and the share manager over the state dir.
#include "plugin/claim_preparer_factory.h"

#include <iostream>

#include "devices/resource_slices.h"
#include "kube/http_kube_client.h"
#include "share/share_manager.h"
#include "tessera/gpu_info.h"

namespace tessera::agent {
namespace {

class NodeClaimPreparer final : public ClaimPreparer {
 public:
  NodeClaimPreparer(std::unique_ptr<HttpKubeClient> kube, ShareManagerOptions options,
                    std::vector<NodeDevice> devices)
      : kube_(std::move(kube)), manager_(std::move(options), *kube_, std::move(devices)) {}
  std::string start() { return manager_.start(); }
  PrepareResult prepare(const ClaimRef& claim) override { return manager_.prepare(claim); }
  std::string unprepare(const ClaimRef& claim) override { return manager_.unprepare(claim); }

 private:
  std::unique_ptr<HttpKubeClient> kube_;
  ShareManager manager_;
};

}  // namespace

std::unique_ptr<ClaimPreparer> make_claim_preparer(const AgentConfig& config) {
  if (config.node_name.empty()) {
    std::cerr << "tessera-node-agent: --node-name (NODE_NAME) is required\n";
    return nullptr;
  }
  KubeConnection connection;
  const std::string error = config.kubeconfig.empty()
                                ? in_cluster_connection(connection)
                                : kubeconfig_connection(config.kubeconfig, connection);
  if (!error.empty()) {
    std::cerr << "tessera-node-agent: " << error << '\n';
    return nullptr;
  }
  std::vector<GpuInfo> gpus;
  if (auto e = list_gpus(gpus); !e.empty()) {
    std::cerr << "tessera-node-agent: " << e << '\n';
    return nullptr;
  }
  auto kube = std::make_unique<HttpKubeClient>(connection);
  SlicePublisher publisher(*kube, {kVgpuDriverName, config.node_name, ""});
  if (auto e = publisher.publish(gpus); !e.empty()) {
    std::cerr << "tessera-node-agent: cannot publish ResourceSlices: " << e << '\n';
    return nullptr;
  }
  ShareManagerOptions options;
  options.root = config.state_dir;
  options.cdi_dir = config.cdi_dir;
  options.node_name = config.node_name;
  auto preparer = std::make_unique<NodeClaimPreparer>(std::move(kube), options, node_devices(gpus));
  if (auto e = preparer->start(); !e.empty()) {
    std::cerr << "tessera-node-agent: " << e << '\n';
    return nullptr;
  }
  return preparer;
}

}  // namespace tessera::agent
