#include "server/metrics.h"

#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

namespace tessera::webhook {
namespace {

constexpr const char* kEndpointNames[] = {"mutate", "validate"};
constexpr const char* kOutcomeNames[] = {"allowed", "patched", "denied", "failed", "invalid"};

// A family of this scrape: `values` are (result label or "" for none, value).
prometheus::MetricFamily scraped(const char* name, const char* help, prometheus::MetricType type,
                                 std::initializer_list<std::pair<const char*, double>> values) {
  prometheus::MetricFamily family{name, help, type, {}};
  for (const auto& [result, value] : values) {
    prometheus::ClientMetric& series = family.metric.emplace_back();
    if (*result != '\0') series.label.push_back({"result", result});
    if (type == prometheus::MetricType::Counter)
      series.counter.value = value;
    else
      series.gauge.value = value;
  }
  return family;
}

double count(size_t value) {
  return static_cast<double>(value);
}

}  // namespace

Metrics::Metrics() : registry_(std::make_shared<prometheus::Registry>()) {
  auto& requests = prometheus::BuildCounter()
                       .Name("tessera_webhook_requests_total")
                       .Help("Admission reviews answered, by endpoint and result.")
                       .Register(*registry_);
  auto& durations = prometheus::BuildHistogram()
                        .Name("tessera_webhook_request_duration_seconds")
                        .Help("Time from request body to answer.")
                        .Register(*registry_);
  const prometheus::Histogram::BucketBoundaries buckets(kBucketsSeconds.begin(),
                                                        kBucketsSeconds.end());
  for (size_t e = 0; e < kEndpoints; ++e) {
    for (size_t o = 0; o < kOutcomes; ++o)
      requests_[e][o] =
          &requests.Add({{"endpoint", kEndpointNames[e]}, {"result", kOutcomeNames[o]}});
    durations_[e] = &durations.Add({{"endpoint", kEndpointNames[e]}}, buckets);
  }
}

void Metrics::record(Endpoint endpoint, Outcome outcome, std::chrono::nanoseconds duration) {
  const auto e = static_cast<size_t>(endpoint);
  requests_[e][static_cast<size_t>(outcome)]->Increment();
  durations_[e]->Observe(std::chrono::duration<double>(duration).count());
}

uint64_t Metrics::requests(Endpoint endpoint, Outcome outcome) const {
  return static_cast<uint64_t>(
      requests_[static_cast<size_t>(endpoint)][static_cast<size_t>(outcome)]->Value());
}

std::string Metrics::render(const ScrapeCounts& counts) const {
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  using prometheus::MetricType;
  families.push_back(scraped("tessera_webhook_claim_templates_total",
                             "ResourceClaimTemplates ensured, by result.", MetricType::Counter,
                             {{"created", count(counts.templates_created)},
                              {"existed", count(counts.templates_existed)},
                              {"cached", count(counts.templates_cached)},
                              {"error", count(counts.templates_failed)}}));
  families.push_back(scraped("tessera_webhook_certificate_reloads_total",
                             "Serving certificate reloads, by result.", MetricType::Counter,
                             {{"ok", count(counts.certificate_reloads)},
                              {"error", count(counts.certificate_reload_failures)}}));
  families.push_back(scraped("tessera_webhook_claim_lookups_total",
                             "Claim lookups that went to the API server.", MetricType::Counter,
                             {{"", count(counts.claim_lookup_api_calls)}}));
  families.push_back(scraped("tessera_webhook_ready",
                             "Whether the webhook answers admission reviews.", MetricType::Gauge,
                             {{"", counts.ready ? 1.0 : 0.0}}));
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace tessera::webhook
