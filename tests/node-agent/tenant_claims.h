// A KubeClient that answers GET resourceclaims for claims of namespace "tenants" by name (404 for
// any other path): for tests that prepare through ShareManager without an API server.
#pragma once

#include <map>
#include <string>

#include "tessera/kube/kube_client.h"

namespace tessera::agent::testing {

class TenantClaims : public kube::KubeClient {
 public:
  Result<kube::ApiResponse> request(const std::string&, const std::string& path,
                                    const std::string&) override {
    for (const auto& [name, body] : bodies)
      if (path == kube::resource_claim_path("tenants", name)) return kube::ApiResponse{200, body};
    return not_found("HTTP 404: not found");
  }
  std::map<std::string, std::string> bodies;  // claim name -> its JSON
};

}  // namespace tessera::agent::testing
