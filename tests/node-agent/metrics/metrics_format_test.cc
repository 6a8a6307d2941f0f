// The metric table (naming rules, help and type everywhere, the doc's copy), the exposition
// format (escaping, values, grouping, histograms) and the share-folder reader on pages a tenant
// may have written anything into.
#include <fcntl.h>
#include <sys/mman.h>
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
#include "metrics/share_usage.h"
#include "tessera/share_contract.h"
#include "tessera/share_files.h"
#include "tessera/share_region.h"

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

// ---- the share folder reader ------------------------------------------------------------------

class ShareFolder : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("metrics-share-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    share::DeviceLimit a, b;
    a.uuid = "GPU-aaaa";
    a.memory_limit = 1ull << 30;
    b.uuid = "GPU-bbbb";
    ASSERT_EQ(share::write_limits(dir_.string(), {a, b}), "");
    ASSERT_EQ(share::create_usage_page(dir_.c_str()), 0);
    ASSERT_EQ(share::map_usage_page((dir_ / "usage").c_str(), true, page_), 0);
  }
  void TearDown() override {
    if (page_) share::unmap_usage_page(page_);
    fs::remove_all(dir_);
  }
  Result<ShareFolderUsage> read() { return read_share_folder(dir_.string(), buffers_); }

  fs::path dir_;
  share::UsagePage* page_ = nullptr;
  ShareReadBuffers buffers_;
};

TEST_F(ShareFolder, SumsSlotsPerDeviceAndCountsOwnedSlots) {
  page_->slot_high_water = 3;
  page_->slots[0].owner = share::make_owner(100, 1, 1);
  page_->slots[0].bytes[0] = 1000;
  page_->slots[0].bytes[1] = 7;
  page_->slots[0].launches = 10;
  page_->slots[0].throttled_ns = 500;
  page_->slots[0].allocations_denied = 2;
  // A reclaimed slot (owner gone): its counters stay, it is no process.
  page_->slots[1].launches = 5;
  page_->slots[1].throttled_ns = 100;
  page_->slots[2].owner = share::make_owner(101, 1, 1);
  page_->slots[2].bytes[0] = 24;
  page_->slots[3].owner = share::make_owner(102, 1, 1);  // above the high-water mark: unseen
  page_->slots[3].bytes[0] = 1ull << 40;
  page_->compute.devices[0].busy_ns = 3'000'000'000;
  const Result<ShareFolderUsage> usage = read();
  ASSERT_EQ(usage.status().message(), "");
  EXPECT_TRUE(usage->usage_valid);
  EXPECT_EQ(usage->uuids, (std::vector<std::string>{"GPU-aaaa", "GPU-bbbb"}));
  EXPECT_EQ(usage->device_index("GPU-bbbb"), 1);
  EXPECT_EQ(usage->device_index("GPU-cccc"), -1);
  EXPECT_EQ(usage->memory_bytes[0], 1024u);
  EXPECT_EQ(usage->memory_bytes[1], 7u);
  EXPECT_EQ(usage->launches, 15u);
  EXPECT_EQ(usage->throttled_ns, 600u);
  EXPECT_EQ(usage->allocations_denied, 2u);
  EXPECT_EQ(usage->processes, 2u);
  // The shim's meter measures (kMeasureNvml): GPU time from the usage page's compute area.
  EXPECT_EQ(usage->gpu_busy_ns[0], 3'000'000'000u);
}

TEST_F(ShareFolder, GarbageIsBoundedAndSaturates) {
  page_->slot_high_water = 0xffffffff;  // bounded by kMaxSlots
  page_->slots[0].bytes[0] = ~0ull - 1;
  page_->slots[1].bytes[0] = 10;  // would wrap
  page_->slots[share::kMaxSlots - 1].launches = 1;
  const Result<ShareFolderUsage> usage = read();
  ASSERT_EQ(usage.status().message(), "");
  EXPECT_EQ(usage->memory_bytes[0], ~0ull);
  EXPECT_EQ(usage->launches, 1u);
}

TEST_F(ShareFolder, NoUsablePageReadsAsZero) {
  share::unmap_usage_page(page_);
  page_ = nullptr;
  // Truncated: the header survives, the slots do not.
  ASSERT_EQ(truncate((dir_ / "usage").c_str(), 64), 0);
  Result<ShareFolderUsage> usage = read();
  ASSERT_EQ(usage.status().message(), "");
  EXPECT_EQ(usage->memory_bytes[0], 0u);
  EXPECT_EQ(usage->usage_error,
            (dir_ / "usage").string() + " is truncated (no whole compute area)");
  // A symlink in place of the page (to a file the agent could read): not followed.
  fs::remove(dir_ / "usage");
  std::ofstream(dir_ / "elsewhere") << std::string(sizeof(share::UsagePage), 'x');
  fs::create_symlink(dir_ / "elsewhere", dir_ / "usage");
  usage = read();
  ASSERT_EQ(usage.status().message(), "");
  EXPECT_FALSE(usage->usage_valid);
  EXPECT_EQ(usage->usage_error, (dir_ / "usage").string() + " is a symlink");
  // A FIFO: never blocks.
  fs::remove(dir_ / "usage");
  ASSERT_EQ(mkfifo((dir_ / "usage").c_str(), 0666), 0);
  usage = read();
  ASSERT_EQ(usage.status().message(), "");
  EXPECT_FALSE(usage->usage_valid);
  EXPECT_FALSE(usage->usage_error.empty());
  // Absent: nothing used yet, no error.
  fs::remove(dir_ / "usage");
  usage = read();
  ASSERT_EQ(usage.status().message(), "");
  EXPECT_EQ(usage->usage_error, "");
  // No limits page: no share here.
  fs::remove(dir_ / "limits");
  EXPECT_EQ(read().status().code(), StatusCode::kNotFound);
}

TEST_F(ShareFolder, AgentMeasuredGpuTimeComesFromTheLimitsPage) {
  share::DeviceLimit a, b;
  a.uuid = "GPU-aaaa";
  b.uuid = "GPU-bbbb";
  ASSERT_EQ(
      share::write_limits(dir_.string(), {a, b}, share::kPriorityNormal, share::kMeasureAgent), "");
  // The page is the agent's (mode 0444); written here as the meter does.
  fs::permissions(dir_ / "limits", fs::perms::owner_write, fs::perm_options::add);
  const int fd = open((dir_ / "limits").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  void* memory =
      mmap(nullptr, sizeof(share::LimitsPage), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  ASSERT_NE(memory, MAP_FAILED);
  static_cast<share::LimitsPage*>(memory)->measured[0].share_busy_ns = 42;
  munmap(memory, sizeof(share::LimitsPage));
  page_->compute.devices[0].busy_ns = 999;  // a tenant's figure: not used
  const Result<ShareFolderUsage> usage = read();
  ASSERT_EQ(usage.status().message(), "");
  EXPECT_EQ(usage->gpu_busy_ns[0], 42u);
}

}  // namespace
}  // namespace tessera::agent
