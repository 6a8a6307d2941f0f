// The agent's metrics as prometheus-cpp's data model (prometheus::MetricFamily, ClientMetric),
// written by its TextSerializer in the text exposition format 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/).
//
// ScrapeFamilies holds one family per metric of the table (metric_table.h gives its name, help
// and type): series are added by MetricId in any order, and families collected from a
// prometheus::Registry (the request counters) are merged in by name. The families come out in
// table order, every metric with its HELP and TYPE lines, also when it has no series (a Registry
// leaves an empty family out), and each series' labels in the table's order (a prometheus::Family
// keeps labels in a std::map, sorted by name).
#pragma once

#include <array>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <prometheus/metric_family.h>

#include "metrics/metric_table.h"
#include "tessera/status.h"

namespace tessera::agent {

inline constexpr std::string_view kExpositionContentType =
    "text/plain; version=0.0.4; charset=utf-8";

class ScrapeFamilies {
 public:
  ScrapeFamilies();

  // `label_values` in the order of the metric's label names (metric_table.h); a value the metric
  // has no name for is dropped, a missing one is written empty. The value goes where the metric's
  // type keeps it (a counter's or a gauge's; not for a histogram).
  void add(MetricId id, std::span<const std::string> label_values, double value);
  // Series of families gathered elsewhere (prometheus::Collectable::Collect), by name. A family the
  // table does not list, or listed with another type, is an error (kInternal): a metric must be
  // declared in the table.
  Status merge(std::vector<prometheus::MetricFamily> families);

  // The families in table order (leaves this object empty).
  std::vector<prometheus::MetricFamily> take();

 private:
  std::array<prometheus::MetricFamily, kMetricCount> families_;
};

// The text exposition of `families` (prometheus::TextSerializer).
std::string serialize(const std::vector<prometheus::MetricFamily>& families);

}  // namespace tessera::agent
