// The agent's own figures: prepare and unprepare calls by result and their durations, counted by
// InstrumentedPreparer, a ClaimPreparer that wraps the share manager's (so the plugin's calls are
// counted without the share manager knowing of metrics). They live across scrapes, so they are
// prometheus-cpp's instruments (Counter, Histogram) in a prometheus::Registry of their own, their
// names and help from the metric table; a scrape collects the registry (prometheus::Collectable).
#pragma once

#include <memory>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "clock/clock.h"
#include "metrics/metric_table.h"
#include "model/claim_preparer.h"

namespace tessera::agent {

// Safe from any thread (prometheus-cpp's counters are atomic, its histograms take a lock of their
// own for an observation).
class RequestMetrics final : public prometheus::Collectable {
 public:
  RequestMetrics();

  void count_prepare(bool ok, Clock::duration elapsed);
  void count_unprepare(bool ok, Clock::duration elapsed);

  // The request counters and durations, every series from the start (0 until counted).
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Counter& prepare_ok_;
  prometheus::Counter& prepare_error_;
  prometheus::Counter& unprepare_ok_;
  prometheus::Counter& unprepare_error_;
  prometheus::Histogram& prepare_durations_;
  prometheus::Histogram& unprepare_durations_;
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
