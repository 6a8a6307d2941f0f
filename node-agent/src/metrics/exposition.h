// The Prometheus text exposition format, version 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/): samples are added by MetricId
// in any order and written grouped by metric, in table order, each metric with its HELP and TYPE
// lines (also when it has no series). Escaping: HELP text escapes backslash and newline; label
// values escape backslash, double quote and newline.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "metrics/metric_table.h"

namespace tessera::agent {

inline constexpr std::string_view kExpositionContentType =
    "text/plain; version=0.0.4; charset=utf-8";

std::string escape_label_value(std::string_view value);
std::string escape_help(std::string_view help);
// A sample value: integers exactly, others in the shortest form that reads back the same, and
// "+Inf", "-Inf", "NaN".
std::string format_value(double value);

// A histogram's figures: counts[i] = observations <= bounds[i] (cumulative), count = all of them.
struct HistogramSnapshot {
  std::span<const double> bounds;
  std::vector<uint64_t> cumulative_counts;  // one per bound
  uint64_t count = 0;
  double sum = 0;
};

class Exposition {
 public:
  // `label_values` in the order of the metric's label names (metric_table.h); a value the metric
  // has no name for is dropped, a missing one is written empty.
  void add(MetricId id, std::span<const std::string> label_values, double value);
  void add(MetricId id, std::span<const std::string> label_values, uint64_t value);
  void add_histogram(MetricId id, std::span<const std::string> label_values,
                     const HistogramSnapshot& histogram);

  // The whole exposition.
  std::string text() const;

 private:
  void append_series(std::string& out, std::string_view name, MetricId id,
                     std::span<const std::string> label_values, std::string_view extra_label = {},
                     std::string_view extra_value = {});

  std::array<std::string, kMetricCount> bodies_;  // each metric's sample lines
};

}  // namespace tessera::agent
