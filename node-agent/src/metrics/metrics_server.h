// The agent's HTTP endpoint for Prometheus (cpp-httplib, plain HTTP: the data is the node's own
// figures, and the chart's ServiceMonitor scrapes the pod): GET /metrics answers collect_metrics()
// in the text exposition format 0.0.4, GET /healthz answers 200 "ok" while `healthy` says ok (else
// 503 and why), anything else 404.
//
// Not prometheus-cpp-pull's Exposer (civetweb): /healthz must answer on the same port (the chart's
// probes), a busy port must come back as a Status rather than an exception from a constructor,
// tests bind port 0 and read the port back, and the webhook serves the same way; cpp-httplib does
// all that already, so only the text it answers comes from prometheus-cpp (TextSerializer).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "tessera/status.h"

namespace httplib {
class Server;
}

namespace tessera::agent {

struct MetricsServerOptions {
  std::string address = ":9464";
  std::function<std::string()> metrics;  // the exposition text of one scrape
  std::function<Status()> healthy;       // ok: /healthz answers 200
  int threads = 2;                       // scrapes served at once
};

class MetricsServer {
 public:
  explicit MetricsServer(MetricsServerOptions options);
  ~MetricsServer();  // stops
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Binds and starts serving on a thread of its own. Ok, or kInvalidArgument for a bad address,
  // kUnavailable when it cannot listen there (the port taken).
  Status start();
  void stop();                        // idempotent
  int port() const { return port_; }  // the bound port (after start)

 private:
  MetricsServerOptions options_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::atomic<bool> listening_done_{false};  // the serving thread's listen returned
  int port_ = 0;
};

}  // namespace tessera::agent
