// The node agent's view of the Kubernetes API: one request method (HttpKubeClient implements it
// over HTTPS with libcurl; tests substitute an in-memory fake) plus the typed operations built on
// it. Errors are values: an empty `error` means a 2xx answer.
#pragma once

#include <string>

namespace tessera::agent {

struct ApiResponse {
  long status = 0;   // HTTP status; 0 when no answer came (connection error)
  std::string body;  // the answer's body (also on errors: the API's Status object)
  std::string
      error;  // "" on 2xx; else "GET /path: HTTP 404: <the API's message>" or the transport error
  bool ok() const { return error.empty(); }
};

class KubeClient {
 public:
  virtual ~KubeClient() = default;
  // `path` starts with "/"; `body` is JSON for POST/PUT. Retries are the implementation's concern.
  virtual ApiResponse request(const std::string& method, const std::string& path,
                              const std::string& body = "") = 0;
};

std::string resource_claim_path(const std::string& namespace_name, const std::string& name);
inline constexpr char kResourceSlicesPath[] = "/apis/resource.k8s.io/v1/resourceslices";

}  // namespace tessera::agent
