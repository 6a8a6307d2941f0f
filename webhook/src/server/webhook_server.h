// The thin HTTPS server around the pure core: cpp-httplib over OpenSSL (TLS 1.2+, the certificate
// reloaded per handshake), routes
//   POST /mutate        Pods (tessera.dev/ names)
//   POST /mutate/hami   Pods in namespaces that opted in to HAMi's nvidia.com/ names (the webhook
//                       configuration selects them by namespace label: docs/webhook.md)
//   POST /validate      ResourceClaims and ResourceClaimTemplates
//   GET  /healthz /readyz /metrics
// and the side effect mutation needs: the ResourceClaimTemplates a patch refers to are created
// before the answer, never on dryRun (the webhook declares sideEffects: NoneOnDryRun).
#pragma once

#include <httplib.h>

#include <atomic>
#include <memory>
#include <string>

#include "kube/api_claim_lookup.h"
#include "kube/api_device_class_lookup.h"
#include "kube/template_writer.h"
#include "server/certificate_reloader.h"
#include "server/metrics.h"
#include "server/options.h"
#include "tessera/kube/kube_client.h"

namespace tessera::webhook {

class WebhookServer {
 public:
  WebhookServer(const WebhookOptions& options, kube::KubeClient& api, SteadyClock clock);
  ~WebhookServer();

  // Loads the certificate and binds the listener. The bound port (for --listen host:0) after.
  Status start();
  int port() const { return port_; }
  // Serves until stop(); in-flight requests finish before it returns.
  void serve();
  // readyz turns 503 (the endpoints drop the pod), then after `shutdown_delay` the listener closes.
  void shutdown();
  void stop();

  const Metrics& metrics() const { return metrics_; }
  const CertificateReloader& certificates() const { return certificates_; }
  // With --tls-secret-name the pair is handed to it (serving_certificate.h) before start().
  CertificateReloader& certificates() { return certificates_; }
  const TemplateWriter& templates() const { return writer_; }

 private:
  void handle_mutate(const httplib::Request& request, httplib::Response& response, bool hami);
  void handle_validate(const httplib::Request& request, httplib::Response& response);
  ScrapeCounts scrape_counts() const;

  const WebhookOptions options_;
  MutateConfig config_;
  CertificateReloader certificates_;
  ApiClaimLookup lookup_;
  ApiDeviceClassLookup classes_;  // /validate: the bounds of the claims' classes
  TemplateWriter writer_;
  Metrics metrics_;
  std::unique_ptr<httplib::SSLServer> server_;
  std::atomic<bool> ready_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> serve_entered_{false};
  std::atomic<bool> serve_returned_{false};
  int port_ = 0;
};

}  // namespace tessera::webhook
