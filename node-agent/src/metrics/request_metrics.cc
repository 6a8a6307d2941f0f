#include "metrics/request_metrics.h"

#include <chrono>
#include <string>

namespace tessera::agent {

void DurationHistogram::observe(Clock::duration elapsed) {
  const double seconds = std::chrono::duration<double>(elapsed).count();
  for (size_t i = 0; i < kRequestDurationBuckets.size(); ++i) {
    if (seconds <= kRequestDurationBuckets[i]) {
      buckets_[i].fetch_add(1, std::memory_order_relaxed);
      break;
    }
  }
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count();
  sum_ns_.fetch_add(ns > 0 ? static_cast<uint64_t>(ns) : 0, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
}

HistogramSnapshot DurationHistogram::snapshot() const {
  HistogramSnapshot out;
  out.bounds = kRequestDurationBuckets;
  // Relaxed reads may catch an observation in its bucket but not yet in the count: the count is
  // raised to the buckets' total so that +Inf is never below a bucket.
  uint64_t running = 0;
  for (const auto& bucket : buckets_) {
    running += bucket.load(std::memory_order_relaxed);
    out.cumulative_counts.push_back(running);
  }
  out.count = count_.load(std::memory_order_relaxed);
  if (out.count < running) out.count = running;
  out.sum = static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) * 1e-9;
  return out;
}

void RequestMetrics::write(Exposition& out) const {
  const std::string ok[] = {"ok"};
  const std::string error[] = {"error"};
  out.add(MetricId::kPrepareRequestsTotal, ok, prepare_ok.load(std::memory_order_relaxed));
  out.add(MetricId::kPrepareRequestsTotal, error, prepare_error.load(std::memory_order_relaxed));
  out.add(MetricId::kUnprepareRequestsTotal, ok, unprepare_ok.load(std::memory_order_relaxed));
  out.add(MetricId::kUnprepareRequestsTotal, error,
          unprepare_error.load(std::memory_order_relaxed));
  out.add_histogram(MetricId::kPrepareDurationSeconds, {}, prepare_durations.snapshot());
  out.add_histogram(MetricId::kUnprepareDurationSeconds, {}, unprepare_durations.snapshot());
}

PrepareResult InstrumentedPreparer::prepare(const ClaimRef& claim) {
  const Clock::time_point started = clock_.now();
  PrepareResult result = inner_.prepare(claim);
  metrics_.prepare_durations.observe(clock_.now() - started);
  (result.is_ok() ? metrics_.prepare_ok : metrics_.prepare_error)
      .fetch_add(1, std::memory_order_relaxed);
  return result;
}

Status InstrumentedPreparer::unprepare(const ClaimRef& claim) {
  const Clock::time_point started = clock_.now();
  Status status = inner_.unprepare(claim);
  metrics_.unprepare_durations.observe(clock_.now() - started);
  (status.is_ok() ? metrics_.unprepare_ok : metrics_.unprepare_error)
      .fetch_add(1, std::memory_order_relaxed);
  return status;
}

}  // namespace tessera::agent
