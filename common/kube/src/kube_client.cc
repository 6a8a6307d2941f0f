#include "tessera/kube/kube_client.h"

namespace tessera::kube {

StatusCode code_for_http_status(long http_status) {
  if (http_status == 0 || http_status == 429 || (http_status >= 500 && http_status < 600))
    return StatusCode::kUnavailable;
  if (http_status == 404) return StatusCode::kNotFound;
  if (http_status == 409) return StatusCode::kAlreadyExists;
  if (http_status == 400 || http_status == 422) return StatusCode::kInvalidArgument;
  if (http_status >= 400 && http_status < 500) return StatusCode::kFailedPrecondition;
  return StatusCode::kInternal;
}

std::string resource_claims_path(const std::string& namespace_name) {
  if (namespace_name.empty()) return "/apis/resource.k8s.io/v1/resourceclaims";
  return "/apis/resource.k8s.io/v1/namespaces/" + url_escape(namespace_name) + "/resourceclaims";
}

std::string resource_claim_path(const std::string& namespace_name, const std::string& name) {
  return "/apis/resource.k8s.io/v1/namespaces/" + url_escape(namespace_name) + "/resourceclaims/" +
         url_escape(name);
}

std::string node_path(const std::string& name) {
  return "/api/v1/nodes/" + url_escape(name);
}

std::string resource_slice_path(const std::string& name) {
  return std::string(kResourceSlicesPath) + "/" + url_escape(name);
}

std::string field_selector(const std::vector<std::pair<std::string, std::string>>& terms) {
  std::string selector;
  for (const auto& [field, value] : terms) {
    if (!selector.empty()) selector += ',';
    selector += field + '=';
    for (char c : value) {  // fields.EscapeValue
      if (c == '\\' || c == ',' || c == '=') selector += '\\';
      selector += c;
    }
  }
  return url_escape(selector);
}

}  // namespace tessera::kube
