#include "kube/kube_client.h"

namespace tessera::agent {

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

}  // namespace tessera::agent
