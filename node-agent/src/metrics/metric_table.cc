#include "metrics/metric_table.h"

namespace tessera::agent {

const MetricInfo& metric_info(MetricId id) {
  return kMetricTable[static_cast<size_t>(id)];
}

std::span<const std::string_view> label_names(LabelSet labels) {
  static constexpr std::string_view kShareLabels[] = {"namespace", "claim", "share",
                                                      "pod",       "uuid",  "node"};
  static constexpr std::string_view kShareQosLabels[] = {"namespace", "claim", "share", "pod",
                                                         "uuid",      "node",  "class"};
  static constexpr std::string_view kGpuLabels[] = {"uuid", "device", "node"};
  static constexpr std::string_view kResultLabels[] = {"result"};
  static constexpr std::string_view kBuildLabels[] = {"version", "revision"};
  static constexpr std::string_view kFindingLabels[] = {"kind", "node"};
  static constexpr std::string_view kWithheldLabels[] = {"uuid", "device", "node", "reason"};
  static constexpr std::string_view kMigInstanceLabels[] = {
      "uuid", "device", "node", "parent_uuid", "profile", "gpu_instance", "compute_instance"};
  switch (labels) {
    case LabelSet::kNone:
      return {};
    case LabelSet::kShare:
      return kShareLabels;
    case LabelSet::kShareQos:
      return kShareQosLabels;
    case LabelSet::kGpu:
      return kGpuLabels;
    case LabelSet::kResult:
      return kResultLabels;
    case LabelSet::kBuild:
      return kBuildLabels;
    case LabelSet::kFinding:
      return kFindingLabels;
    case LabelSet::kWithheld:
      return kWithheldLabels;
    case LabelSet::kMigInstance:
      return kMigInstanceLabels;
  }
  return {};
}

std::string_view type_name(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

std::string metrics_markdown_table() {
  std::string text = "| metric | type | labels | meaning |\n| --- | --- | --- | --- |\n";
  for (const MetricInfo& metric : kMetricTable) {
    std::string labels;
    for (std::string_view label : label_names(metric.labels)) {
      if (!labels.empty()) labels += ", ";
      labels += label;
    }
    text += "| `" + std::string(metric.name) + "` | " + std::string(type_name(metric.type)) +
            " | " + (labels.empty() ? "-" : labels) + " | " + std::string(metric.help) + " |\n";
  }
  return text;
}

}  // namespace tessera::agent
