#include "server/metrics.h"

#include <sstream>

namespace tessera::webhook {
namespace {

constexpr const char* kEndpointNames[] = {"mutate", "validate"};
constexpr const char* kOutcomeNames[] = {"allowed", "patched", "denied", "failed", "invalid"};

}  // namespace

void Metrics::record(Endpoint endpoint, Outcome outcome, std::chrono::nanoseconds duration) {
  const auto e = static_cast<size_t>(endpoint);
  requests_[e][static_cast<size_t>(outcome)].fetch_add(1, std::memory_order_relaxed);
  const double seconds = std::chrono::duration<double>(duration).count();
  size_t bucket = 0;
  while (bucket < kBucketsSeconds.size() && seconds > kBucketsSeconds[bucket]) ++bucket;
  buckets_[e][bucket].fetch_add(1, std::memory_order_relaxed);
  duration_sum_ns_[e].fetch_add(static_cast<uint64_t>(duration.count()), std::memory_order_relaxed);
}

uint64_t Metrics::requests(Endpoint endpoint, Outcome outcome) const {
  return requests_[static_cast<size_t>(endpoint)][static_cast<size_t>(outcome)].load();
}

std::string Metrics::render(const ScrapeCounts& counts) const {
  std::ostringstream out;
  out << "# HELP tessera_webhook_requests_total Admission reviews answered, by endpoint and "
         "result.\n# TYPE tessera_webhook_requests_total counter\n";
  for (size_t e = 0; e < kEndpoints; ++e)
    for (size_t o = 0; o < kOutcomes; ++o)
      out << "tessera_webhook_requests_total{endpoint=\"" << kEndpointNames[e] << "\",result=\""
          << kOutcomeNames[o] << "\"} " << requests_[e][o].load() << '\n';
  out << "# HELP tessera_webhook_request_duration_seconds Time from request body to answer.\n"
         "# TYPE tessera_webhook_request_duration_seconds histogram\n";
  for (size_t e = 0; e < kEndpoints; ++e) {
    uint64_t cumulative = 0;
    for (size_t b = 0; b <= kBucketsSeconds.size(); ++b) {
      cumulative += buckets_[e][b].load();
      out << "tessera_webhook_request_duration_seconds_bucket{endpoint=\"" << kEndpointNames[e]
          << "\",le=\"";
      if (b < kBucketsSeconds.size())
        out << kBucketsSeconds[b];
      else
        out << "+Inf";
      out << "\"} " << cumulative << '\n';
    }
    out << "tessera_webhook_request_duration_seconds_sum{endpoint=\"" << kEndpointNames[e] << "\"} "
        << static_cast<double>(duration_sum_ns_[e].load()) / 1e9 << '\n';
    out << "tessera_webhook_request_duration_seconds_count{endpoint=\"" << kEndpointNames[e]
        << "\"} " << cumulative << '\n';
  }
  out << "# HELP tessera_webhook_claim_templates_total ResourceClaimTemplates ensured, by "
         "result.\n# TYPE tessera_webhook_claim_templates_total counter\n"
      << "tessera_webhook_claim_templates_total{result=\"created\"} " << counts.templates_created
      << "\ntessera_webhook_claim_templates_total{result=\"existed\"} " << counts.templates_existed
      << "\ntessera_webhook_claim_templates_total{result=\"cached\"} " << counts.templates_cached
      << "\ntessera_webhook_claim_templates_total{result=\"error\"} " << counts.templates_failed
      << '\n';
  out << "# HELP tessera_webhook_certificate_reloads_total Serving certificate reloads, by "
         "result.\n# TYPE tessera_webhook_certificate_reloads_total counter\n"
      << "tessera_webhook_certificate_reloads_total{result=\"ok\"} " << counts.certificate_reloads
      << "\ntessera_webhook_certificate_reloads_total{result=\"error\"} "
      << counts.certificate_reload_failures << '\n';
  out << "# HELP tessera_webhook_claim_lookups_total Claim lookups that went to the API server.\n"
         "# TYPE tessera_webhook_claim_lookups_total counter\n"
      << "tessera_webhook_claim_lookups_total " << counts.claim_lookup_api_calls << '\n';
  out << "# HELP tessera_webhook_ready Whether the webhook answers admission reviews.\n"
         "# TYPE tessera_webhook_ready gauge\n"
      << "tessera_webhook_ready " << (counts.ready ? 1 : 0) << '\n';
  return out.str();
}

}  // namespace tessera::webhook
