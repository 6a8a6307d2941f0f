#include "kube/kube_client.h"

namespace tessera::agent {

StatusCode code_for_http_status(long http_status) {
  if (http_status == 0 || http_status == 429 || (http_status >= 500 && http_status < 600))
    return StatusCode::kUnavailable;
  if (http_status == 404) return StatusCode::kNotFound;
  if (http_status == 409) return StatusCode::kAlreadyExists;
  if (http_status == 400 || http_status == 422) return StatusCode::kInvalidArgument;
  if (http_status >= 400 && http_status < 500) return StatusCode::kFailedPrecondition;
  return StatusCode::kInternal;
}

std::string resource_claim_path(const std::string& namespace_name, const std::string& name) {
  return "/apis/resource.k8s.io/v1/namespaces/" + namespace_name + "/resourceclaims/" + name;
}

}  // namespace tessera::agent
