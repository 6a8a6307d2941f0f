// The webhook's Prometheus metrics, all declared here, rendered in the text exposition format
// (version 0.0.4). Lock-free counters: the request path only increments atomics.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

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

class Metrics {
 public:
  static constexpr std::array<double, 12> kBucketsSeconds = {
      0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};

  void record(Endpoint endpoint, Outcome outcome, std::chrono::nanoseconds duration);
  uint64_t requests(Endpoint endpoint, Outcome outcome) const;
  std::string render(const ScrapeCounts& counts) const;

 private:
  static constexpr size_t kEndpoints = static_cast<size_t>(Endpoint::kCount);
  static constexpr size_t kOutcomes = static_cast<size_t>(Outcome::kCount);
  std::array<std::array<std::atomic<uint64_t>, kOutcomes>, kEndpoints> requests_{};
  // Per endpoint: one count per bucket (not cumulative; summed when rendered), +Inf, the sum.
  std::array<std::array<std::atomic<uint64_t>, kBucketsSeconds.size() + 1>, kEndpoints> buckets_{};
  std::array<std::atomic<uint64_t>, kEndpoints> duration_sum_ns_{};
};

}  // namespace tessera::webhook
