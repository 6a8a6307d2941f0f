#include "metrics/metrics_server.h"

#include <httplib.h>

#include "metrics/exposition.h"
#include "tessera/flags/listen_address.h"

namespace tessera::agent {

MetricsServer::MetricsServer(MetricsServerOptions options) : options_(std::move(options)) {}

MetricsServer::~MetricsServer() {
  stop();
}

Status MetricsServer::start() {
  if (server_) return failed_precondition("the metrics server is already running");
  TESSERA_ASSIGN_OR_RETURN(flags::ListenAddress listen,
                           flags::parse_listen_address(options_.address, "--metrics-address"));
  auto server = std::make_unique<httplib::Server>();
  const int threads = options_.threads > 0 ? options_.threads : 1;
  server->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server->Get("/metrics", [this](const httplib::Request&, httplib::Response& response) {
    response.set_content(options_.metrics ? options_.metrics() : std::string(),
                         std::string(kExpositionContentType));
  });
  server->Get("/healthz", [this](const httplib::Request&, httplib::Response& response) {
    const Status healthy = options_.healthy ? options_.healthy() : Status::ok();
    response.status = healthy.is_ok() ? 200 : 503;
    response.set_content(healthy.is_ok() ? "ok\n" : healthy.message() + "\n", "text/plain");
  });
  port_ = listen.port == 0 ? server->bind_to_any_port(listen.host)
                           : (server->bind_to_port(listen.host, listen.port) ? listen.port : -1);
  if (port_ <= 0)
    return unavailable("cannot listen on " + options_.address + " for metrics (port taken?)");
  server_ = std::move(server);
  listening_done_ = false;
  thread_ = std::thread([this, server = server_.get()] {
    server->listen_after_bind();
    listening_done_ = true;
  });
  // httplib's stop() acts only on a running listener: wait for it, so a stop right after start is
  // not lost (a few microseconds).
  while (!server_->is_running() && !listening_done_) std::this_thread::yield();
  return Status::ok();
}

void MetricsServer::stop() {
  if (!server_) return;
  server_->stop();
  if (thread_.joinable()) thread_.join();
  server_.reset();
}

}  // namespace tessera::agent
