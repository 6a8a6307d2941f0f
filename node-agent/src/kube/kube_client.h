// The node agent's view of the Kubernetes API: one request method (HttpKubeClient implements it
// over HTTPS with libcurl; tests substitute an in-memory fake) plus the typed operations built on
// it. Errors are values: a request answers a 2xx response or a Status.
#pragma once

#include <string>

#include "tessera/status.h"

namespace tessera::agent {

struct ApiResponse {
  long status = 0;   // HTTP status (2xx)
  std::string body;  // the answer's body
};

// The Status of an answer that is not 2xx, by what the caller can do: 404 kNotFound, 409
// kAlreadyExists, 429 and 5xx kUnavailable (retry later), 400 and 422 kInvalidArgument (the
// request is wrong), any other 4xx kFailedPrecondition (401/403: credentials or RBAC; 410: a
// resourceVersion gone); anything else kInternal. No answer at all (http_status 0) is kUnavailable.
StatusCode code_for_http_status(long http_status);

class KubeClient {
 public:
  virtual ~KubeClient() = default;
  // `path` starts with "/"; `body` is JSON for POST/PUT. Retries are the implementation's concern.
  // A 2xx answer, or the error: "GET /path: HTTP 404: <the API's message>" (code by
  // code_for_http_status) or the transport error (kUnavailable).
  virtual Result<ApiResponse> request(const std::string& method, const std::string& path,
                                      const std::string& body = "") = 0;
};

std::string resource_claim_path(const std::string& namespace_name, const std::string& name);
inline constexpr char kResourceSlicesPath[] = "/apis/resource.k8s.io/v1/resourceslices";

}  // namespace tessera::agent
