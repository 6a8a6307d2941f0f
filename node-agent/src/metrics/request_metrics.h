// The agent's own figures: prepare and unprepare calls by result and their durations, counted by
// InstrumentedPreparer, a ClaimPreparer that wraps the share manager's (so the plugin's calls are
// counted without the share manager knowing of metrics).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

#include "clock/clock.h"
#include "metrics/exposition.h"
#include "metrics/metric_table.h"
#include "model/claim_preparer.h"

namespace tessera::agent {

// A histogram over kRequestDurationBuckets; lock-free, safe from any thread.
class DurationHistogram {
 public:
  void observe(Clock::duration elapsed);
  HistogramSnapshot snapshot() const;

 private:
  std::array<std::atomic<uint64_t>, kRequestDurationBuckets.size()> buckets_{};  // not cumulative
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_ns_{0};
};

struct RequestMetrics {
  std::atomic<uint64_t> prepare_ok{0}, prepare_error{0};
  std::atomic<uint64_t> unprepare_ok{0}, unprepare_error{0};
  DurationHistogram prepare_durations, unprepare_durations;

  // Adds the request counters and durations to `out`.
  void write(Exposition& out) const;
};

class InstrumentedPreparer final : public ClaimPreparer {
 public:
  // `inner`, `metrics` and `clock` outlive this preparer.
  InstrumentedPreparer(ClaimPreparer& inner, RequestMetrics& metrics, Clock& clock)
      : inner_(inner), metrics_(metrics), clock_(clock) {}

  PrepareResult prepare(const ClaimRef& claim) override;
  Status unprepare(const ClaimRef& claim) override;

 private:
  ClaimPreparer& inner_;
  RequestMetrics& metrics_;
  Clock& clock_;
};

}  // namespace tessera::agent
