// The metric table (naming rules, help and type everywhere, the doc's copy), the exposition
// through prometheus-cpp (escaping, values, grouping, histograms, families merged from a registry).
// The share-folder reader's tests are in tests/common/share_folder/.
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
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
    // prometheus-cpp 1.0.1 writes HELP unescaped: nothing in it may need escaping.
    EXPECT_EQ(metric.help.find('\\'), std::string_view::npos);
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
    // Ratios 0..1, never percents (Prometheus's base units).
    EXPECT_EQ(metric.name.find("percent"), std::string_view::npos);
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

// prometheus-cpp's TextSerializer (1.0.1) escapes label values but writes HELP as it is: the
// table's help must need no escaping (checked in EveryMetricFollowsTheNamingRules) and label
// values with quotes, backslashes and newlines come out escaped.
TEST(Exposition, EscapesLabelValuesAndWritesValuesPrometheusReads) {
  ScrapeFamilies out;
  const std::string gpu[] = {"GPU-\"1\"", "back\\slash", "new\nline"};
  out.add(MetricId::kGpuShares, gpu, 2);
  const std::string other[] = {"GPU-2", "tab\tand ünïcode", "n"};
  out.add(MetricId::kGpuMemoryTotalBytes, other, 8589934592.0);
  out.add(MetricId::kGpuMemoryUsedBytes, other, 0.25);
  out.add(MetricId::kGpuUnaccountedMemoryBytes, other, 1.5e-9);
  out.add(MetricId::kGpuDriverPartitions, other, std::numeric_limits<double>::infinity());
  out.add(MetricId::kGpuHealthy, other, -3);
  const std::string text = serialize(out.take());
  EXPECT_NE(text.find("tessera_gpu_shares{uuid=\"GPU-\\\"1\\\"\",device=\"back\\\\slash\","
                      "node=\"new\\nline\"} 2\n"),
            std::string::npos)
      << text;
  const std::string labels = "{uuid=\"GPU-2\",device=\"tab\tand ünïcode\",node=\"n\"} ";
  EXPECT_NE(text.find("tessera_gpu_memory_total_bytes" + labels + "8589934592\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("tessera_gpu_memory_used_bytes" + labels + "0.25\n"), std::string::npos);
  EXPECT_NE(text.find("tessera_gpu_unaccounted_memory_bytes" + labels + "1.5e-09\n"),
            std::string::npos);
  EXPECT_NE(text.find("tessera_gpu_driver_partitions" + labels + "+Inf\n"), std::string::npos);
  EXPECT_NE(text.find("tessera_gpu_healthy" + labels + "-3\n"), std::string::npos);
}

TEST(Exposition, GroupsSamplesByMetricInTableOrderWithHelpAndType) {
  ScrapeFamilies out;
  const std::string gpu[] = {"GPU-1", "gpu-0", "node \"a\""};
  const std::string build[] = {"0.1.0", "0123456789ab"};
  out.add(MetricId::kBuildInfo, build, 1);
  out.add(MetricId::kGpuShares, gpu, 2);
  const std::string share_a[] = {"ns", "c", "s-a", "", "GPU-1", "n"};
  const std::string share_b[] = {"ns", "c", "s-b", "", "GPU-1", "n"};
  out.add(MetricId::kShareMemoryUsedBytes, share_a, static_cast<double>(uint64_t{1} << 40));
  out.add(MetricId::kShareGpuTimeSecondsTotal, share_a, 1.25);
  out.add(MetricId::kShareMemoryUsedBytes, share_b, 0);
  const std::string text = serialize(out.take());
  // Every metric of the table has its HELP and TYPE, in table order, also without series.
  size_t at = 0;
  for (const MetricInfo& metric : kMetricTable) {
    const std::string help =
        "# HELP " + std::string(metric.name) + " " + std::string(metric.help) + "\n";
    const std::string type =
        "# TYPE " + std::string(metric.name) + " " + std::string(type_name(metric.type)) + "\n";
    const size_t help_at = text.find(help, at);
    ASSERT_NE(help_at, std::string::npos) << metric.name;
    ASSERT_EQ(text.find(type, help_at), help_at + help.size()) << metric.name;
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
  EXPECT_NE(text.find("tessera_build_info{version=\"0.1.0\",revision=\"0123456789ab\"} 1\n"),
            std::string::npos);
  EXPECT_EQ(text.back(), '\n');
}

TEST(Exposition, HistogramsHaveCumulativeBucketsSumAndCount) {
  RequestMetrics requests;
  requests.count_prepare(true, std::chrono::milliseconds(3));     // le 0.005
  requests.count_prepare(true, std::chrono::milliseconds(40));    // le 0.05
  requests.count_prepare(false, std::chrono::seconds(60));        // only +Inf
  requests.count_unprepare(true, -std::chrono::milliseconds(1));  // a clock stepped back: 0
  ScrapeFamilies out;
  ASSERT_EQ(out.merge(requests.Collect()).message(), "");
  const std::string text = serialize(out.take());
  EXPECT_NE(text.find("tessera_prepare_requests_total{result=\"ok\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("tessera_prepare_requests_total{result=\"error\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("tessera_unprepare_requests_total{result=\"error\"} 0\n"), std::string::npos);
  EXPECT_NE(text.find("tessera_prepare_duration_seconds_bucket{le=\"0.0025\"} 0\n"
                      "tessera_prepare_duration_seconds_bucket{le=\"0.005\"} 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("tessera_prepare_duration_seconds_bucket{le=\"0.05\"} 2\n"),
            std::string::npos);
  EXPECT_NE(text.find("tessera_prepare_duration_seconds_bucket{le=\"10\"} 2\n"
                      "tessera_prepare_duration_seconds_bucket{le=\"+Inf\"} 3\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\ntessera_prepare_duration_seconds_sum 60.043\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("\ntessera_prepare_duration_seconds_count 3\n"), std::string::npos);
  EXPECT_NE(text.find("\ntessera_unprepare_duration_seconds_count 1\n"), std::string::npos);
  EXPECT_NE(text.find("\ntessera_unprepare_duration_seconds_sum 0\n"), std::string::npos);
  // Each family once, where the table puts it.
  EXPECT_EQ(text.find("# TYPE tessera_prepare_requests_total"),
            text.rfind("# TYPE tessera_prepare_requests_total"));
  EXPECT_LT(text.find("# TYPE tessera_prepare_requests_total"),
            text.find("# TYPE tessera_prepare_duration_seconds"));
}

// A family gathered elsewhere must be one the table declares, with its type and labels.
TEST(Exposition, MergeRefusesFamiliesTheTableDoesNotDeclare) {
  prometheus::MetricFamily unknown{
      "tessera_not_declared_total", "x", prometheus::MetricType::Counter, {{}}};
  EXPECT_EQ(ScrapeFamilies().merge({unknown}).code(), StatusCode::kInternal);
  prometheus::MetricFamily retyped{std::string(metric_info(MetricId::kGpuShares).name),
                                   "x",
                                   prometheus::MetricType::Counter,
                                   {{}}};
  EXPECT_EQ(ScrapeFamilies().merge({retyped}).code(), StatusCode::kInternal);
  prometheus::MetricFamily relabelled{
      std::string(metric_info(MetricId::kPrepareRequestsTotal).name),
      "x",
      prometheus::MetricType::Counter,
      {{}}};
  relabelled.metric[0].label = {{"outcome", "ok"}};
  const Status wrong_label = ScrapeFamilies().merge({relabelled});
  EXPECT_EQ(wrong_label.code(), StatusCode::kInternal);
  EXPECT_NE(wrong_label.message().find("outcome"), std::string::npos) << wrong_label.message();
  relabelled.metric[0].label = {{"result", "ok"}, {"node", "n"}};
  EXPECT_EQ(ScrapeFamilies().merge({relabelled}).code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace tessera::agent
