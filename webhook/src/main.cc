// tessera-webhook: flags -> options, a Kubernetes client (kubeconfig or in-cluster), the server;
// SIGTERM and SIGINT are taken by a thread of their own (sigwait), which starts the graceful
// shutdown: in-flight requests finish, then the process exits 0.
#include <pthread.h>

#include <condition_variable>
#include <csignal>
#include <iostream>
#include <mutex>
#include <thread>

#include "server/options.h"
#include "server/serving_certificate.h"
#include "server/webhook_server.h"
#include "tessera/kube/http_kube_client.h"
#include "tessera/log.h"

int main(int argc, char** argv) {
  using namespace tessera;
  const webhook::ParsedOptions parsed = webhook::parse_options(argc, argv);
  if (parsed.exit_code) {
    (*parsed.exit_code == 0 ? std::cout : std::cerr) << parsed.message << '\n';
    return *parsed.exit_code;
  }
  const webhook::WebhookOptions& options = parsed.options;
  {
    log::Options logging;
    logging.logger = "tessera-webhook";
    logging.level = log::verbose(log::Level::kInfo, options.verbosity);
    logging.format = options.log_format;
    log::configure(std::move(logging));
  }

  const Result<tessera::kube::KubeConnection> connection =
      options.kubeconfig.empty() ? tessera::kube::in_cluster_connection()
                                 : tessera::kube::kubeconfig_connection(options.kubeconfig);
  if (!connection.is_ok()) {
    log::error("no Kubernetes API", {{"error", connection.status().message()}});
    return 1;
  }
  // A webhook call has a deadline (10 s by default): two quick tries, not the agent's five.
  tessera::kube::RetryPolicy retry;
  retry.attempts = 2;
  retry.initial_backoff = std::chrono::milliseconds(100);
  retry.timeout = std::chrono::seconds(4);
  tessera::kube::HttpKubeClient api(*connection, retry);

  // Blocked before any thread starts, so every thread inherits the mask and only sigwait sees
  // the signals.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  webhook::WebhookServer server(options, api, [] { return std::chrono::steady_clock::now(); });
  // --tls-secret-name: the certificate is the webhook's own; it is there before the listener is.
  std::unique_ptr<webhook::ServingCertificate> own_certificate;
  if (!options.tls_secret_name.empty()) {
    webhook::ServingCertificateSettings settings;
    settings.secret_namespace = options.tls_secret_namespace;
    settings.secret_name = options.tls_secret_name;
    settings.service_name = options.service_name;
    settings.mutating_configuration = options.mutating_webhook_configuration;
    settings.validating_configuration = options.validating_webhook_configuration;
    settings.validity = std::chrono::hours(24) * options.certificate_validity_days;
    own_certificate = std::make_unique<webhook::ServingCertificate>(
        api, settings, server.certificates(), [] { return std::chrono::system_clock::now(); });
    if (Status ready = own_certificate->reconcile(); !ready.is_ok()) {
      log::error("serving certificate", {{"error", ready.message()}});
      // Without a pair there is nothing to serve; a caBundle not yet set is retried below.
      if (!server.certificates().current()) return 1;
    }
  }
  if (Status started = server.start(); !started.is_ok()) {
    log::error(started.message());
    return 1;
  }
  std::mutex stop_mutex;
  std::condition_variable stop_signal;
  bool stopping = false;
  std::thread renewer;
  if (own_certificate) {
    renewer = std::thread([&] {
      std::unique_lock lock(stop_mutex);
      while (!stop_signal.wait_for(lock, options.tls_secret_check_interval,
                                   [&] { return stopping; })) {
        lock.unlock();
        if (Status round = own_certificate->reconcile(); !round.is_ok())
          log::error("serving certificate", {{"error", round.message()}});
        lock.lock();
      }
    });
  }
  std::thread waiter([&] {
    int signal = 0;
    sigwait(&signals, &signal);
    log::info("stopping", {{"signal", signal}});
    {
      std::lock_guard lock(stop_mutex);
      stopping = true;
    }
    stop_signal.notify_all();
    server.shutdown();
  });
  server.serve();
  waiter.join();
  if (renewer.joinable()) renewer.join();
  log::info("stopped");
  return 0;
}
