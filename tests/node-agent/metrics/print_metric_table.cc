// Prints the agent's metric table (metric_table.h) one metric a line, tab-separated:
//   NAME <TAB> TYPE <TAB> LABELS
// LABELS comma-separated, "-" when none. Checks outside C++ (tests/charts/dashboard_check.py) read
// the table from here rather than parsing the header, so they see what the endpoint exports.
#include <cstdio>
#include <string>

#include "metrics/metric_table.h"

int main() {
  namespace agent = tessera::agent;
  for (const agent::MetricInfo& metric : agent::kMetricTable) {
    std::string labels;
    for (std::string_view label : agent::label_names(metric.labels)) {
      if (!labels.empty()) labels += ',';
      labels += label;
    }
    std::string line = std::string(metric.name) + '\t' +
                       std::string(agent::type_name(metric.type)) + '\t' +
                       (labels.empty() ? "-" : labels) + '\n';
    std::fputs(line.c_str(), stdout);
  }
  return std::fflush(stdout) == 0 ? 0 : 1;  // a closed pipe must not look like an empty table
}
