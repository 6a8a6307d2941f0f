#include "server/webhook_server.h"

#include <thread>

#include "core/claim_validation.h"
#include "tessera/flags/listen_address.h"
#include "tessera/json_access.h"

namespace tessera::webhook {
namespace {

// kube-apiserver's own limit on a request is 3 MiB; a review carries the object and some more.
constexpr size_t kMaxBodyBytes = 4 * 1024 * 1024;

// `review` is an answer of ours (review_response): a response with a boolean "allowed".
Outcome outcome_of(const nlohmann::json& review) {
  const nlohmann::json* response = json_member(review, "response");
  const nlohmann::json* allowed = response ? json_member(*response, "allowed") : nullptr;
  if (!allowed || *allowed != true) return Outcome::kDenied;
  return response->contains("patch") ? Outcome::kPatched : Outcome::kAllowed;
}

void bad_request(httplib::Response& response, const std::string& message) {
  response.status = 400;
  response.set_content(message + "\n", "text/plain");
}

}  // namespace

WebhookServer::WebhookServer(const WebhookOptions& options, kube::KubeClient& api,
                             SteadyClock clock)
    : options_(options),
      certificates_(options.tls_cert_file, options.tls_private_key_file,
                    options.certificate_check_interval, clock),
      lookup_(api, options.device_classes, options.cache_ttl, clock),
      classes_(api, options.cache_ttl, clock),
      writer_(api, options.cache_ttl, clock) {
  config_.policy = options.policy;
  config_.share_root = options.share_root;
  config_.extended_resource_name = options.extended_resource_name;
}

WebhookServer::~WebhookServer() {
  stop();
}

Status WebhookServer::start() {
  TESSERA_ASSIGN_OR_RETURN(flags::ListenAddress listen,
                           flags::parse_listen_address(options_.listen, "--listen"));
  TESSERA_RETURN_IF_ERROR(certificates_.load());
  server_ = std::make_unique<httplib::SSLServer>([this](SSL_CTX& ctx) {
    certificates_.install(ctx);
    return true;
  });
  if (!server_->is_valid()) return internal_error("cannot make the TLS context");
  const int threads = options_.threads;
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server_->set_payload_max_length(kMaxBodyBytes);
  server_->set_read_timeout(std::chrono::seconds(10));
  server_->set_write_timeout(std::chrono::seconds(10));
  // kube-apiserver keeps connections open; a TLS handshake per few requests would cost more
  // than the review itself.
  server_->set_keep_alive_max_count(100000);
  server_->set_keep_alive_timeout(5);
  // Headers and body go out in separate writes: without TCP_NODELAY the second waits for the
  // client's delayed ACK (40 ms on Linux).
  server_->set_tcp_nodelay(true);
  server_->Post("/mutate", [this](const httplib::Request& req, httplib::Response& res) {
    handle_mutate(req, res, /*hami=*/false);
  });
  server_->Post("/mutate/hami", [this](const httplib::Request& req, httplib::Response& res) {
    handle_mutate(req, res, /*hami=*/true);
  });
  server_->Post("/validate", [this](const httplib::Request& req, httplib::Response& res) {
    handle_validate(req, res);
  });
  server_->Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  server_->Get("/readyz", [this](const httplib::Request&, httplib::Response& res) {
    const bool ready = ready_ && !stopping_;
    res.status = ready ? 200 : 503;
    res.set_content(ready ? "ok\n" : "shutting down\n", "text/plain");
  });
  server_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.render(scrape_counts()), "text/plain; version=0.0.4");
  });
  server_->set_exception_handler(
      [](const httplib::Request& req, httplib::Response& res, std::exception_ptr error) {
        std::string what = "unknown error";
        try {
          std::rethrow_exception(error);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        log::error("request failed", {{"method", req.method}, {"path", req.path}, {"error", what}});
        res.status = 500;
        res.set_content("internal error\n", "text/plain");
      });
  if (listen.port == 0) {
    port_ = server_->bind_to_any_port(listen.host);
  } else {
    port_ = server_->bind_to_port(listen.host, listen.port) ? listen.port : -1;
  }
  if (port_ <= 0) return unavailable("cannot listen on " + options_.listen);
  ready_ = true;
  log::info("serving HTTPS", {{"host", listen.host},
                              {"port", port_},
                              {"certificate_serial", certificates_.current()->serial_hex}});
  return Status::ok();
}

void WebhookServer::serve() {
  if (!server_) return;
  serve_entered_ = true;
  if (!stopping_) server_->listen_after_bind();
  serve_returned_ = true;
}

void WebhookServer::shutdown() {
  stopping_ = true;
  log::info("shutting down: not ready; closing the listener after the delay",
            {{"delay_ms", options_.shutdown_delay.count()}});
  std::this_thread::sleep_for(options_.shutdown_delay);
  stop();
}

void WebhookServer::stop() {
  stopping_ = true;
  if (!server_) return;
  // httplib's stop() acts only on a running listener: a stop that comes between serve() and the
  // listener running waits for it (a few microseconds), or it would be lost.
  while (serve_entered_ && !serve_returned_ && !server_->is_running()) std::this_thread::yield();
  server_->stop();
}

void WebhookServer::handle_mutate(const httplib::Request& request, httplib::Response& response,
                                  bool hami) {
  const auto started = std::chrono::steady_clock::now();
  MutateConfig config = config_;
  config.hami_names = hami;
  Result<MutateResult> result = mutate(request.body, config, lookup_);
  Outcome outcome = Outcome::kInvalid;
  if (!result.is_ok()) {
    bad_request(response, result.status().message());
  } else {
    outcome = outcome_of(result->review);
    if (!result->dry_run && outcome == Outcome::kPatched) {
      for (const auto& claim_template : result->templates) {
        if (Status s = writer_.ensure(claim_template); !s.is_ok()) {
          log::warn("pod refused: cannot create its ResourceClaimTemplate",
                    {{"namespace", result->namespace_name}, {"error", s.message()}});
          refuse(result->review, 500, "InternalError",
                 "tessera-webhook could not create the ResourceClaimTemplate the GPU request "
                 "needs: " +
                     s.message());
          outcome = Outcome::kFailed;
          break;
        }
      }
    }
    response.set_content(
        result->review.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
        "application/json");
  }
  metrics_.record(Endpoint::kMutate, outcome, std::chrono::steady_clock::now() - started);
}

void WebhookServer::handle_validate(const httplib::Request& request, httplib::Response& response) {
  const auto started = std::chrono::steady_clock::now();
  Result<nlohmann::json> review = validate(request.body, &classes_);
  Outcome outcome = Outcome::kInvalid;
  if (!review.is_ok()) {
    bad_request(response, review.status().message());
  } else {
    outcome = outcome_of(*review);
    response.set_content(review->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                         "application/json");
  }
  metrics_.record(Endpoint::kValidate, outcome, std::chrono::steady_clock::now() - started);
}

ScrapeCounts WebhookServer::scrape_counts() const {
  ScrapeCounts counts;
  const TemplateWriter::Counts templates = writer_.counts();
  counts.templates_created = templates.created;
  counts.templates_existed = templates.existed;
  counts.templates_cached = templates.cached;
  counts.templates_failed = templates.failed;
  counts.certificate_reloads = certificates_.reloads();
  counts.certificate_reload_failures = certificates_.reload_failures();
  counts.claim_lookup_api_calls = lookup_.api_calls();
  counts.ready = ready_ && !stopping_;
  return counts;
}

}  // namespace tessera::webhook
