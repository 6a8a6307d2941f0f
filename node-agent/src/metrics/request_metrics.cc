#include "metrics/request_metrics.h"

#include <algorithm>
#include <chrono>
#include <string>

namespace tessera::agent {

namespace {

// The registry merges a second registration of a name into the first (InsertBehavior::Merge):
// a counter's two series share one family.
template <typename Builder>
auto& family(prometheus::Registry& registry, Builder builder, MetricId id) {
  const MetricInfo& metric = metric_info(id);
  return builder.Name(std::string(metric.name)).Help(std::string(metric.help)).Register(registry);
}

prometheus::Counter& result_counter(prometheus::Family<prometheus::Counter>& family,
                                    const char* result) {
  return family.Add({{std::string(label_names(LabelSet::kResult)[0]), result}});
}

const prometheus::Histogram::BucketBoundaries& duration_buckets() {
  static const prometheus::Histogram::BucketBoundaries buckets(kRequestDurationBuckets.begin(),
                                                               kRequestDurationBuckets.end());
  return buckets;
}

double seconds(Clock::duration elapsed) {
  return std::chrono::duration<double>(std::max(elapsed, Clock::duration::zero())).count();
}

}  // namespace

RequestMetrics::RequestMetrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      prepare_ok_(result_counter(
          family(*registry_, prometheus::BuildCounter(), MetricId::kPrepareRequestsTotal), "ok")),
      prepare_error_(result_counter(
          family(*registry_, prometheus::BuildCounter(), MetricId::kPrepareRequestsTotal),
          "error")),
      unprepare_ok_(result_counter(
          family(*registry_, prometheus::BuildCounter(), MetricId::kUnprepareRequestsTotal), "ok")),
      unprepare_error_(result_counter(
          family(*registry_, prometheus::BuildCounter(), MetricId::kUnprepareRequestsTotal),
          "error")),
      prepare_durations_(
          family(*registry_, prometheus::BuildHistogram(), MetricId::kPrepareDurationSeconds)
              .Add({}, duration_buckets())),
      unprepare_durations_(
          family(*registry_, prometheus::BuildHistogram(), MetricId::kUnprepareDurationSeconds)
              .Add({}, duration_buckets())) {}

void RequestMetrics::count_prepare(bool ok, Clock::duration elapsed) {
  prepare_durations_.Observe(seconds(elapsed));
  (ok ? prepare_ok_ : prepare_error_).Increment();
}

void RequestMetrics::count_unprepare(bool ok, Clock::duration elapsed) {
  unprepare_durations_.Observe(seconds(elapsed));
  (ok ? unprepare_ok_ : unprepare_error_).Increment();
}

std::vector<prometheus::MetricFamily> RequestMetrics::Collect() const {
  return registry_->Collect();
}

PrepareResult InstrumentedPreparer::prepare(const ClaimRef& claim) {
  const Clock::time_point started = clock_.now();
  PrepareResult result = inner_.prepare(claim);
  metrics_.count_prepare(result.is_ok(), clock_.now() - started);
  return result;
}

Status InstrumentedPreparer::unprepare(const ClaimRef& claim) {
  const Clock::time_point started = clock_.now();
  Status status = inner_.unprepare(claim);
  metrics_.count_unprepare(status.is_ok(), clock_.now() - started);
  return status;
}

}  // namespace tessera::agent
