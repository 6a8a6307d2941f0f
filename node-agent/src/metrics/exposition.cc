#include "metrics/exposition.h"

#include <charconv>
#include <cmath>

namespace tessera::agent {

std::string escape_label_value(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string escape_help(std::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string format_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buffer[64];
  // Whole numbers below 2^53 are exact as doubles: written without exponent or fraction.
  if (value == std::floor(value) && std::fabs(value) < 9007199254740992.0) {
    const auto [end, error] =
        std::to_chars(buffer, buffer + sizeof buffer, static_cast<long long>(value));
    return error == std::errc() ? std::string(buffer, end) : std::string("NaN");
  }
  const auto [end, error] = std::to_chars(buffer, buffer + sizeof buffer, value);
  return error == std::errc() ? std::string(buffer, end) : std::string("NaN");
}

void Exposition::append_series(std::string& out, std::string_view name, MetricId id,
                               std::span<const std::string> label_values,
                               std::string_view extra_label, std::string_view extra_value) {
  out += name;
  const std::span<const std::string_view> names = label_names(metric_info(id).labels);
  if (!names.empty() || !extra_label.empty()) {
    out += '{';
    bool first = true;
    for (size_t i = 0; i < names.size(); ++i) {
      if (!first) out += ',';
      first = false;
      out += names[i];
      out += "=\"";
      if (i < label_values.size()) out += escape_label_value(label_values[i]);
      out += '"';
    }
    if (!extra_label.empty()) {
      if (!first) out += ',';
      out += extra_label;
      out += "=\"";
      out += extra_value;
      out += '"';
    }
    out += '}';
  }
  out += ' ';
}

void Exposition::add(MetricId id, std::span<const std::string> label_values, double value) {
  std::string& out = bodies_[static_cast<size_t>(id)];
  append_series(out, metric_info(id).name, id, label_values);
  out += format_value(value);
  out += '\n';
}

void Exposition::add(MetricId id, std::span<const std::string> label_values, uint64_t value) {
  std::string& out = bodies_[static_cast<size_t>(id)];
  append_series(out, metric_info(id).name, id, label_values);
  out += std::to_string(value);
  out += '\n';
}

void Exposition::add_histogram(MetricId id, std::span<const std::string> label_values,
                               const HistogramSnapshot& histogram) {
  std::string& out = bodies_[static_cast<size_t>(id)];
  const std::string name(metric_info(id).name);
  const std::string bucket = name + "_bucket";
  for (size_t i = 0; i < histogram.bounds.size(); ++i) {
    append_series(out, bucket, id, label_values, "le", format_value(histogram.bounds[i]));
    out += std::to_string(i < histogram.cumulative_counts.size() ? histogram.cumulative_counts[i]
                                                                 : histogram.count);
    out += '\n';
  }
  append_series(out, bucket, id, label_values, "le", "+Inf");
  out += std::to_string(histogram.count) + '\n';
  append_series(out, name + "_sum", id, label_values);
  out += format_value(histogram.sum) + '\n';
  append_series(out, name + "_count", id, label_values);
  out += std::to_string(histogram.count) + '\n';
}

std::string Exposition::text() const {
  std::string out;
  size_t size = 0;
  for (const std::string& body : bodies_) size += body.size() + 256;
  out.reserve(size);
  for (const MetricInfo& metric : kMetricTable) {
    out += "# HELP ";
    out += metric.name;
    out += ' ';
    out += escape_help(metric.help);
    out += "\n# TYPE ";
    out += metric.name;
    out += ' ';
    out += type_name(metric.type);
    out += '\n';
    out += bodies_[static_cast<size_t>(metric.id)];
  }
  return out;
}

}  // namespace tessera::agent
