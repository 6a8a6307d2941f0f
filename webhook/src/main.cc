// tessera-webhook: flags -> options, a Kubernetes client (kubeconfig or in-cluster), the server;
// SIGTERM and SIGINT are taken by a thread of their own (sigwait), which starts the graceful
// shutdown: in-flight requests finish, then the process exits 0.
#include <pthread.h>

#include <csignal>
#include <iostream>
#include <thread>

#include "server/options.h"
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
  if (Status started = server.start(); !started.is_ok()) {
    log::error(started.message());
    return 1;
  }
  std::thread waiter([&] {
    int signal = 0;
    sigwait(&signals, &signal);
    log::info("stopping", {{"signal", signal}});
    server.shutdown();
  });
  server.serve();
  waiter.join();
  log::info("stopped");
  return 0;
}
