// The webhook's Prometheus metrics, all declared here, through prometheus-cpp: the request path's
// counters and durations are its instruments (Counter, Histogram) in a prometheus::Registry; the
// figures kept elsewhere (templates, certificates, lookups, readiness) are read when scraped and
// added as families of that scrape. TextSerializer writes the text exposition format (0.0.4).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include <prometheus/counter.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace tessera::webhook {

enum class Endpoint { kMutate, kValidate, kCount };
enum class Outcome {
  kAllowed,  // allowed, no patch
  kPatched,  // allowed with a patch
  kDenied,   // refused (policy, invalid shorthand or config, v1beta1)
  kFailed,   // refused because a template could not be created
  kInvalid,  // HTTP 400: not an AdmissionReview
  kCount
};

// Counts outside the request path (templates, certificates, lookups), read when scraped.
struct ScrapeCounts {
  size_t templates_created = 0, templates_existed = 0, templates_cached = 0, templates_failed = 0;
  size_t certificate_reloads = 0, certificate_reload_failures = 0;
  size_t claim_lookup_api_calls = 0;
  bool ready = false;
};

// Safe from any thread: prometheus-cpp's counters are atomic; a histogram takes a lock of its own
// for each observation (one per endpoint, held for a few additions).
class Metrics {
 public:
  static constexpr std::array<double, 12> kBucketsSeconds = {
      0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};

  Metrics();
  void record(Endpoint endpoint, Outcome outcome, std::chrono::nanoseconds duration);
  uint64_t requests(Endpoint endpoint, Outcome outcome) const;
  std::string render(const ScrapeCounts& counts) const;

 private:
  static constexpr size_t kEndpoints = static_cast<size_t>(Endpoint::kCount);
  static constexpr size_t kOutcomes = static_cast<size_t>(Outcome::kCount);
  std::shared_ptr<prometheus::Registry> registry_;
  // Every endpoint and result from the start (0 until counted).
  std::array<std::array<prometheus::Counter*, kOutcomes>, kEndpoints> requests_{};
  std::array<prometheus::Histogram*, kEndpoints> durations_{};
};

}  // namespace tessera::webhook
