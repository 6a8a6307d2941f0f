// KubeClient over HTTPS with libcurl: TLS always verified against the cluster CA, bearer token or
// client certificate, retries with exponential backoff on 429, 5xx and connection errors.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "tessera/kube/kube_client.h"

namespace tessera::kube {

struct KubeConnection {
  std::string server;      // "https://host:port"
  std::string ca_pem;      // the CA bundle (PEM); required: TLS is never unverified
  std::string token;       // bearer token, or:
  std::string token_file;  // re-read at every request (projected tokens rotate)
  std::string client_cert_pem;
  std::string client_key_pem;
};

// In-cluster: KUBERNETES_SERVICE_HOST/PORT, the service account's token and CA under
// `service_account_dir` (default /var/run/secrets/kubernetes.io/serviceaccount).
// kFailedPrecondition outside a cluster, kNotFound when a file of the service account is missing.
Result<KubeConnection> in_cluster_connection(
    const std::string& service_account_dir = "/var/run/secrets/kubernetes.io/serviceaccount");
// A kubeconfig file (YAML): the current context's cluster (server, certificate-authority-data or
// certificate-authority) and user (token, tokenFile, client-certificate[-data], client-key[-data]).
// kInvalidArgument naming the file when it cannot be read or says something unsupported.
Result<KubeConnection> kubeconfig_connection(const std::string& path);

struct RetryPolicy {
  int attempts = 5;  // total tries
  std::chrono::milliseconds initial_backoff{200};
  std::chrono::milliseconds max_backoff{5000};
  std::chrono::seconds timeout{30};  // per try
};

class HttpKubeClient final : public KubeClient {
 public:
  HttpKubeClient(KubeConnection connection, RetryPolicy retry = {});
  ~HttpKubeClient() override;
  Result<ApiResponse> request(const std::string& method, const std::string& path,
                              const std::string& body = "") override;
  int tries() const { return tries_; }  // every HTTP try so far (for tests)

 private:
  Result<ApiResponse> once(const std::string& method, const std::string& path,
                           const std::string& body);
  KubeConnection connection_;
  RetryPolicy retry_;
  std::mutex mutex_;  // one curl handle, reused (keep-alive), one request at a time
  void* curl_ = nullptr;
  int tries_ = 0;
};

}  // namespace tessera::kube
