#include "kube/kube_client.h"

namespace tessera::agent {

std::string resource_claim_path(const std::string& namespace_name, const std::string& name) {
  return "/apis/resource.k8s.io/v1/namespaces/" + namespace_name + "/resourceclaims/" + name;
}

}  // namespace tessera::agent
