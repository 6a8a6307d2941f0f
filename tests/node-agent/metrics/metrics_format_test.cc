// The metric table (naming rules, help and type everywhere, the doc's copy), the exposition
// format (escaping, values, grouping, histograms). The share-folder reader's tests are in
// tests/common/share_folder/.
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#include "metrics/exposition.h"
#include "metrics/metric_table.h"
#include "metrics/request_metrics.h"

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

// [a-z_][a-z0-9_]*: Prometheus allows capitals (and ':' in metric names); snake_case here. (No
// <regex>: GCC 12 warns falsely inside it under ASan.)
bool snake_case(std::string_view name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}

TEST(MetricTable, EveryMetricFollowsTheNamingRules) {
  std::set<std::string_view> names;
  for (const MetricInfo& metric : kMetricTable) {
    SCOPED_TRACE(std::string(metric.name));
    EXPECT_TRUE(names.insert(metric.name).second) << "declared twice";
    EXPECT_TRUE(snake_case(metric.name));
    EXPECT_EQ(metric.name.substr(0, 8), "tessera_");
    EXPECT_FALSE(metric.help.empty());
    EXPECT_EQ(metric.help.find('\n'), std::string_view::npos);
    EXPECT_NE(type_name(metric.type), "untyped");
    // Counters end in _total (time in _seconds_total); nothing else does.
    EXPECT_EQ(metric.type == MetricType::kCounter, ends_with(metric.name, "_total"));
    if (metric.name.find("seconds") != std::string_view::npos) {
      EXPECT_TRUE(metric.type == MetricType::kHistogram ? ends_with(metric.name, "_seconds")
                                                        : ends_with(metric.name, "_seconds_total"));
    }
    // Base units only; memory in bytes.
    std::stringstream words{std::string(metric.name)};
    for (std::string word; std::getline(words, word, '_');)
      for (const char* unit : {"ms", "ns", "us", "millis", "milliseconds", "microseconds",
                               "nanoseconds", "kib", "mib", "gib", "kb", "mb", "gb"})
        EXPECT_NE(word, unit);
    if (metric.name.find("memory") != std::string_view::npos) {
      EXPECT_TRUE(ends_with(metric.name, "_bytes"));
    }
    std::set<std::string_view> labels;
    for (std::string_view label : label_names(metric.labels)) {
      EXPECT_TRUE(snake_case(label)) << label;
      EXPECT_NE(label.substr(0, 2), "__") << label;  // reserved for Prometheus
      EXPECT_NE(label, "le");                        // the histogram's own
      EXPECT_TRUE(labels.insert(label).second) << label;
    }
  }
  EXPECT_EQ(names.size(), kMetricCount);
}

TEST(MetricTable, ShareAndGpuSeriesCarryTheirIdentity) {
  const auto share = label_names(LabelSet::kShare);
  EXPECT_EQ(std::vector<std::string_view>(share.begin(), share.end()),
            (std::vector<std::string_view>{"namespace", "claim", "share", "pod", "uuid", "node"}));
  const auto gpu = label_names(LabelSet::kGpu);
  EXPECT_EQ(std::vector<std::string_view>(gpu.begin(), gpu.end()),
            (std::vector<std::string_view>{"uuid", "device", "node"}));
}

// docs/node-agent.md carries the table between two markers; it must be the generated one.
TEST(MetricTable, TheDocListsEveryMetric) {
  std::ifstream file(NODE_AGENT_DOC);
  ASSERT_TRUE(file) << NODE_AGENT_DOC;
  std::stringstream text;
  text << file.rdbuf();
  const std::string doc = text.str();
  const std::string begin = "<!-- metrics-table begin -->\n";
  const std::string end = "<!-- metrics-table end -->";
  const size_t from = doc.find(begin);
  const size_t to = doc.find(end);
  ASSERT_NE(from, std::string::npos) << "no " << begin << " in " << NODE_AGENT_DOC;
  ASSERT_NE(to, std::string::npos) << "no " << end << " in " << NODE_AGENT_DOC;
  ASSERT_LT(from, to);
  const std::string listed = doc.substr(from + begin.size(), to - from - begin.size());
  EXPECT_EQ(listed, metrics_markdown_table())
      << "docs/node-agent.md's metrics table differs from node-agent/src/metrics/metric_table.h; "
         "put this between the markers:\n"
      << metrics_markdown_table();
}

TEST(Exposition, EscapesLabelValuesAndHelp) {
  EXPECT_EQ(escape_label_value("plain"), "plain");
  EXPECT_EQ(escape_label_value("a\"b"), "a\\\"b");
  EXPECT_EQ(escape_label_value("a\\b"), "a\\\\b");
  EXPECT_EQ(escape_label_value("a\nb"), "a\\nb");
  EXPECT_EQ(escape_label_value("\\\"\n"), "\\\\\\\"\\n");
  EXPECT_EQ(escape_label_value("tab\tand ünïcode"), "tab\tand ünïcode");  // as they are
  EXPECT_EQ(escape_help("say \"x\"\\\n"), "say \"x\"\\\\\\n");            // quotes stay in HELP
}

TEST(Exposition, FormatsValues) {
  EXPECT_EQ(format_value(0), "0");
  EXPECT_EQ(format_value(8589934592.0), "8589934592");
  EXPECT_EQ(format_value(-3), "-3");
  EXPECT_EQ(format_value(0.25), "0.25");
  EXPECT_EQ(format_value(0.001), "0.001");
  EXPECT_EQ(format_value(1.5e-9), "1.5e-09");
  EXPECT_EQ(format_value(1e300), "1e+300");
  EXPECT_EQ(format_value(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(format_value(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(format_value(std::nan("")), "NaN");
}

TEST(Exposition, GroupsSamplesByMetricInTableOrderWithHelpAndType) {
  Exposition out;
  const std::string gpu[] = {"GPU-1", "gpu-0", "node \"a\""};
  const std::string build[] = {"0.1.0"};
  out.add(MetricId::kBuildInfo, build, uint64_t{1});
  out.add(MetricId::kGpuShares, gpu, uint64_t{2});
  const std::string share_a[] = {"ns", "c", "s-a", "", "GPU-1", "n"};
  const std::string share_b[] = {"ns", "c", "s-b", "", "GPU-1", "n"};
  out.add(MetricId::kShareMemoryUsedBytes, share_a, uint64_t{1} << 40);
  out.add(MetricId::kShareGpuTimeSecondsTotal, share_a, 1.25);
  out.add(MetricId::kShareMemoryUsedBytes, share_b, uint64_t{0});
  const std::string text = out.text();
  // Every metric of the table has its HELP and TYPE, in table order.
  size_t at = 0;
  for (const MetricInfo& metric : kMetricTable) {
    const std::string help = "# HELP " + std::string(metric.name) + " ";
    const std::string type =
        "# TYPE " + std::string(metric.name) + " " + std::string(type_name(metric.type)) + "\n";
    const size_t help_at = text.find(help, at);
    ASSERT_NE(help_at, std::string::npos) << metric.name;
    ASSERT_EQ(text.find(type, help_at), text.find('\n', help_at) + 1) << metric.name;
    at = help_at + 1;
  }
  const std::string used =
      "# TYPE tessera_share_memory_used_bytes gauge\n"
      "tessera_share_memory_used_bytes{namespace=\"ns\",claim=\"c\",share=\"s-a\",pod=\"\","
      "uuid=\"GPU-1\",node=\"n\"} 1099511627776\n"
      "tessera_share_memory_used_bytes{namespace=\"ns\",claim=\"c\",share=\"s-b\",pod=\"\","
      "uuid=\"GPU-1\",node=\"n\"} 0\n"
      "# HELP tessera_share_memory_limit_bytes ";
  EXPECT_NE(text.find(used), std::string::npos) << text;
  EXPECT_NE(text.find("tessera_share_gpu_time_seconds_total{namespace=\"ns\",claim=\"c\",share="
                      "\"s-a\",pod=\"\",uuid=\"GPU-1\",node=\"n\"} 1.25\n"),
            std::string::npos);
  EXPECT_NE(text.find("tessera_gpu_shares{uuid=\"GPU-1\",device=\"gpu-0\",node=\"node \\\"a\\\"\"} "
                      "2\n"),
            std::string::npos);
  EXPECT_NE(text.find("tessera_build_info{version=\"0.1.0\"} 1\n"), std::string::npos);
  EXPECT_EQ(text.back(), '\n');
}

TEST(Exposition, HistogramsHaveCumulativeBucketsSumAndCount) {
  RequestMetrics requests;
  requests.prepare_durations.observe(std::chrono::milliseconds(3));   // le 0.005
  requests.prepare_durations.observe(std::chrono::milliseconds(40));  // le 0.05
  requests.prepare_durations.observe(std::chrono::seconds(60));       // only +Inf
  requests.prepare_ok = 2;
  requests.prepare_error = 1;
  Exposition out;
  requests.write(out);
  const std::string text = out.text();
  EXPECT_NE(text.find("tessera_prepare_requests_total{result=\"ok\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("tessera_prepare_requests_total{result=\"error\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("tessera_prepare_duration_seconds_bucket{le=\"0.0025\"} 0\n"
                      "tessera_prepare_duration_seconds_bucket{le=\"0.005\"} 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("tessera_prepare_duration_seconds_bucket{le=\"0.05\"} 2\n"),
            std::string::npos);
  EXPECT_NE(text.find("tessera_prepare_duration_seconds_bucket{le=\"10\"} 2\n"
                      "tessera_prepare_duration_seconds_bucket{le=\"+Inf\"} 3\n"
                      "tessera_prepare_duration_seconds_sum 60.04"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\ntessera_prepare_duration_seconds_count 3\n"), std::string::npos);
  EXPECT_NE(text.find("tessera_unprepare_duration_seconds_count 0\n"), std::string::npos);
}

}  // namespace
}  // namespace tessera::agent
