// The Prometheus text: counters by endpoint and result, a cumulative histogram.
#include "server/metrics.h"

#include <gtest/gtest.h>

namespace tessera::webhook {
namespace {

bool has_line(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

TEST(Metrics, CountsAndACumulativeHistogram) {
  Metrics metrics;
  metrics.record(Endpoint::kMutate, Outcome::kPatched, std::chrono::microseconds(300));
  metrics.record(Endpoint::kMutate, Outcome::kPatched, std::chrono::microseconds(1500));
  metrics.record(Endpoint::kMutate, Outcome::kDenied, std::chrono::seconds(5));
  metrics.record(Endpoint::kValidate, Outcome::kAllowed, std::chrono::microseconds(100));
  ScrapeCounts counts;
  counts.templates_created = 3;
  counts.ready = true;
  const std::string text = metrics.render(counts);
  EXPECT_TRUE(has_line(text, "# TYPE tessera_webhook_requests_total counter"));
  EXPECT_TRUE(
      has_line(text, R"(tessera_webhook_requests_total{endpoint="mutate",result="patched"} 2)"));
  EXPECT_TRUE(
      has_line(text, R"(tessera_webhook_requests_total{endpoint="mutate",result="denied"} 1)"));
  EXPECT_TRUE(
      has_line(text, R"(tessera_webhook_requests_total{endpoint="validate",result="allowed"} 1)"));
  EXPECT_TRUE(
      has_line(text, R"(tessera_webhook_requests_total{endpoint="validate",result="invalid"} 0)"));
  EXPECT_TRUE(has_line(
      text, R"(tessera_webhook_request_duration_seconds_bucket{endpoint="mutate",le="0.0005"} 1)"));
  EXPECT_TRUE(has_line(
      text, R"(tessera_webhook_request_duration_seconds_bucket{endpoint="mutate",le="0.002"} 2)"));
  EXPECT_TRUE(has_line(
      text, R"(tessera_webhook_request_duration_seconds_bucket{endpoint="mutate",le="2.5"} 2)"));
  EXPECT_TRUE(has_line(
      text, R"(tessera_webhook_request_duration_seconds_bucket{endpoint="mutate",le="+Inf"} 3)"));
  EXPECT_TRUE(
      has_line(text, R"(tessera_webhook_request_duration_seconds_count{endpoint="mutate"} 3)"));
  EXPECT_TRUE(
      has_line(text, R"(tessera_webhook_request_duration_seconds_sum{endpoint="mutate"} 5.0018)"));
  EXPECT_TRUE(has_line(text, R"(tessera_webhook_claim_templates_total{result="created"} 3)"));
  EXPECT_TRUE(has_line(text, "tessera_webhook_ready 1"));
  EXPECT_EQ(metrics.requests(Endpoint::kMutate, Outcome::kPatched), 2u);
}

}  // namespace
}  // namespace tessera::webhook
