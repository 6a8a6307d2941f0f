// The node agent's view of the Kubernetes API: one request method (HttpKubeClient implements it
// over HTTPS with libcurl; tests substitute an in-memory fake) plus the typed operations built on
// it. Errors are values: an empty `error` means a 2xx answer.
#pragma once

#include <string>
#include <utility>
#include <vector>

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

// Paths and queries: every value placed in one is escaped, so a name cannot change the request.
// One path segment or query value, percent-encoded by libcurl (curl_easy_escape: all but
// A-Z a-z 0-9 - . _ ~).
std::string url_escape(const std::string& text);
// A fieldSelector query value from (field, value) terms: each value escaped as the API server's
// fields.EscapeValue does (a backslash before each backslash, comma and equals sign), then the
// selector percent-encoded.
std::string field_selector(const std::vector<std::pair<std::string, std::string>>& terms);
std::string resource_claim_path(const std::string& namespace_name, const std::string& name);
std::string node_path(const std::string& name);  // /api/v1/nodes/<name>
inline constexpr char kResourceSlicesPath[] = "/apis/resource.k8s.io/v1/resourceslices";
std::string resource_slice_path(const std::string& name);  // kResourceSlicesPath/<name>

}  // namespace tessera::agent
