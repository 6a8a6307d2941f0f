#include "metrics/exposition.h"

#include <sstream>

#include <prometheus/text_serializer.h>

namespace tessera::agent {

namespace {

prometheus::MetricType family_type(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return prometheus::MetricType::Counter;
    case MetricType::kGauge:
      return prometheus::MetricType::Gauge;
    case MetricType::kHistogram:
      return prometheus::MetricType::Histogram;
  }
  return prometheus::MetricType::Untyped;
}

}  // namespace

ScrapeFamilies::ScrapeFamilies() {
  for (const MetricInfo& metric : kMetricTable) {
    prometheus::MetricFamily& family = families_[static_cast<size_t>(metric.id)];
    family.name = metric.name;
    family.help = metric.help;
    family.type = family_type(metric.type);
  }
}

void ScrapeFamilies::add(MetricId id, std::span<const std::string> label_values, double value) {
  prometheus::MetricFamily& family = families_[static_cast<size_t>(id)];
  prometheus::ClientMetric& series = family.metric.emplace_back();
  const std::span<const std::string_view> names = label_names(metric_info(id).labels);
  series.label.resize(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    series.label[i].name = names[i];
    if (i < label_values.size()) series.label[i].value = label_values[i];
  }
  if (family.type == prometheus::MetricType::Counter)
    series.counter.value = value;
  else
    series.gauge.value = value;
}

Status ScrapeFamilies::merge(std::vector<prometheus::MetricFamily> families) {
  for (prometheus::MetricFamily& gathered : families) {
    prometheus::MetricFamily* family = nullptr;
    for (prometheus::MetricFamily& declared : families_)
      if (declared.name == gathered.name) family = &declared;
    if (family == nullptr)
      return internal_error("metric family " + gathered.name +
                            " is not in the metric table (metric_table.h)");
    if (family->type != gathered.type)
      return internal_error("metric family " + gathered.name +
                            " has another type than the metric table gives it");
    // The series' labels in the table's order; a label the table does not give the metric, or
    // one missing, is an error as an undeclared metric is.
    const std::span<const std::string_view> names =
        label_names(metric_info(static_cast<MetricId>(family - families_.data())).labels);
    for (prometheus::ClientMetric& series : gathered.metric) {
      if (series.label.size() != names.size())
        return internal_error("a series of " + gathered.name +
                              " has other labels than the metric table gives it");
      std::vector<prometheus::ClientMetric::Label> ordered(names.size());
      for (prometheus::ClientMetric::Label& label : series.label) {
        size_t i = 0;
        while (i < names.size() && names[i] != label.name) ++i;
        if (i == names.size())
          return internal_error("a series of " + gathered.name + " has the label " + label.name +
                                ", which the metric table does not give it");
        ordered[i] = std::move(label);
      }
      series.label = std::move(ordered);
      family->metric.push_back(std::move(series));
    }
  }
  return Status::ok();
}

std::vector<prometheus::MetricFamily> ScrapeFamilies::take() {
  return {std::make_move_iterator(families_.begin()), std::make_move_iterator(families_.end())};
}

std::string serialize(const std::vector<prometheus::MetricFamily>& families) {
  // About 80 bytes a series: one buffer from the start rather than a doubling string.
  size_t series = 0;
  for (const prometheus::MetricFamily& family : families) series += family.metric.size();
  std::string buffer;
  buffer.reserve(4096 + series * 160);
  std::ostringstream out(std::move(buffer));
  prometheus::TextSerializer().Serialize(out, families);
  return std::move(out).str();
}

}  // namespace tessera::agent
