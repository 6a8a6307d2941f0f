// The node agent's view of the Kubernetes API: one request method (HttpKubeClient implements it
// over HTTPS with libcurl; tests substitute an in-memory fake) plus the typed operations built on
// it. Errors are values: a request answers a 2xx response or a Status.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "tessera/status.h"

namespace tessera::kube {

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
  // `path` starts with "/"; `body` is JSON for POST/PUT, and for PATCH a JSON Patch (an array) or
  // a JSON merge patch (an object). Retries are the implementation's concern.
  // A 2xx answer, or the error: "GET /path: HTTP 404: <the API's message>" (code by
  // code_for_http_status) or the transport error (kUnavailable).
  virtual Result<ApiResponse> request(const std::string& method, const std::string& path,
                                      const std::string& body = "") = 0;
};

// Paths and queries: every value placed in one is escaped, so a name cannot change the request.
// One path segment or query value, percent-encoded by libcurl (curl_easy_escape: all but
// A-Z a-z 0-9 - . _ ~).
std::string url_escape(const std::string& text);
// A fieldSelector query value from (field, value) terms: each value escaped as the API server's
// fields.EscapeValue does (a backslash before each backslash, comma and equals sign), then the
// selector percent-encoded.
std::string field_selector(const std::vector<std::pair<std::string, std::string>>& terms);
std::string resource_claim_path(const std::string& namespace_name, const std::string& name);
// The ResourceClaim collection of a namespace; of every namespace when `namespace_name` is empty.
std::string resource_claims_path(const std::string& namespace_name);
std::string node_path(const std::string& name);  // /api/v1/nodes/<name>
inline constexpr char kResourceSlicesPath[] = "/apis/resource.k8s.io/v1/resourceslices";
std::string resource_slice_path(const std::string& name);  // kResourceSlicesPath/<name>

}  // namespace tessera::kube
