// A scrape of a running two-share claim on the simulated GPU, checked against the simulator's own
// figures: the share manager prepares shares a (8Gi, 30 %) and b (4Gi, 70 %) of one GPU through the
// agent's InstrumentedPreparer; memory-fill fills share a to its limit under libvgpu and holds the
// memory while compute-burn runs in share b with the agent's GPU-time meter measuring it. Every
// metric is read from the real endpoint (HTTP on 127.0.0.1), the whole exposition is checked by
// promtool, and after unprepare the claim's series are gone.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <httplib.h>

#include "apiserver/claim_fixture.h"
#include "backends/command_runner.h"
#include "devices/device_health.h"
#include "devices/resource_slices.h"
#include "metrics/collector.h"
#include "metrics/exposition.h"
#include "metrics/metrics_server.h"
#include "metrics/request_metrics.h"
#include "observe/observer.h"
#include "share/fake_driver.h"
#include "share/share_manager.h"
#include "tessera/gpu_info.h"
#include "tessera/share_contract.h"
#include "tessera/share_folder/limits_writer.h"
#include "usage/gpu_processes.h"
#include "usage/gpu_time_meter.h"

// Without the samples (TESSERA_BUILD_SAMPLES off) the scrape of a running claim is skipped, saying
// so; the promtool check of a synthetic exposition runs in every build.
#ifndef MEMORY_FILL
#define MEMORY_FILL ""
#define COMPUTE_BURN ""
#define LIBVGPU_SO ""
#endif

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kPage = 4096;
constexpr uint64_t kContextOverhead = 500 * kMiB;  // the simulator's default per context
constexpr uint64_t kKernelUs = 50;  // SIMGPU_KERNEL_US for burn_fma (as agent.GpuTimeMeter*)
constexpr const char* kDevices = "name=NVIDIA H200,memory=16Gi,sms=132,cc=9.0";

class OneClaim : public kube::KubeClient {
 public:
  Result<kube::ApiResponse> request(const std::string&, const std::string& path,
                                    const std::string&) override {
    if (path != kube::resource_claim_path("tenants", "pair"))
      return not_found("HTTP 404: not found");
    return kube::ApiResponse{200, body};
  }
  std::string body;
};

// A sample program under the shim in a share folder, stdout to a file. Built before fork: the
// child of a multi-threaded process must not allocate.
class Child {
 public:
  Child(const fs::path& base, const std::string& share_dir, std::vector<std::string> args,
        const std::string& name) {
    out_ = (base / (name + ".json")).string();
    env_ = {std::string("LD_LIBRARY_PATH=") + SIMGPU_LIB_DIR,
            "SIMGPU_STATE=" + (base / "simgpu.state").string(),
            std::string("SIMGPU_DEVICES=") + kDevices,
            "SIMGPU_KERNEL_US=burn_fma=" + std::to_string(kKernelUs),
            "ASAN_OPTIONS=verify_asan_link_order=0",
            "PATH=/usr/bin:/bin",
            std::string("LD_PRELOAD=") + LIBVGPU_SO,
            "TESSERA_SHARE_DIR=" + share_dir};
    args_ = std::move(args);
    std::vector<char*> argv, envp;
    for (auto& a : args_) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : env_) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      const int fd = open(out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) dup2(fd, 1);
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
  }
  ~Child() {
    if (pid_ > 0 && !done_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  bool running() {
    if (done_) return false;
    if (waitpid(pid_, &status_, WNOHANG) == pid_) done_ = true;
    return !done_;
  }
  // The first line of its output as JSON; an empty object when it failed.
  json finish() {
    while (running()) std::this_thread::sleep_for(milliseconds(5));
    std::ifstream file(out_);
    std::string line;
    std::getline(file, line);
    if (!WIFEXITED(status_) || WEXITSTATUS(status_) != 0) return json::object();
    json report = json::parse(line, nullptr, false);
    return report.is_object() ? report : json::object();
  }

 private:
  std::vector<std::string> args_, env_;
  std::string out_;
  pid_t pid_ = -1;
  bool done_ = false;
  int status_ = 0;
};

// The exposition's samples: "name{labels}" -> value.
std::map<std::string, double> parse_samples(const std::string& text) {
  std::map<std::string, double> samples;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    samples[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return samples;
}

DeviceHealthReport health_report(const std::string& device, DeviceHealthState state) {
  DeviceHealthReport report;
  report.pool_name = "node-a";
  report.device_name = device;
  report.state = state;
  return report;
}

class MetricsEndToEnd : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::temp_directory_path() / ("agent-metrics-e2e-" + std::to_string(getpid()));
    fs::remove_all(base_);
    fs::create_directories(base_);
    setenv("SIMGPU_STATE", (base_ / "simgpu.state").c_str(), 1);
    setenv("SIMGPU_DEVICES", kDevices, 1);
  }
  void TearDown() override { fs::remove_all(base_); }

  std::string scrape() {
    httplib::Client client("127.0.0.1", server_->port());
    const auto response = client.Get("/metrics");
    if (!response || response->status != 200) return "";
    EXPECT_EQ(response->get_header_value("Content-Type"), kExpositionContentType);
    return response->body;
  }

  fs::path base_;
  std::unique_ptr<GpuProcessSource> gpu_processes_;
  std::unique_ptr<Observer> observer_;
  std::unique_ptr<MetricsServer> server_;  // last: its scrapes use the observer
};

std::string share_series(const std::string& name, const std::string& share,
                         const std::string& uuid) {
  // The pod the fixture's claim is reserved for (status.reservedFor).
  return name + "{namespace=\"tenants\",claim=\"pair\",share=\"" + share +
         "\",pod=\"pod-pair\",uuid=\"" + uuid + "\",node=\"node-a\"}";
}

// promtool check metrics on `text`: "" when it passes, else what it said. promtool must be
// installed (Debian's prometheus package, scripts/install-deps.sh): a missing one fails.
std::string promtool_problems(const fs::path& folder, const std::string& text) {
  std::ofstream(folder / "scrape.txt") << text;  // kept beside the test's output for a failure
  const Result<CommandResult> said =
      run_command(Command({"promtool", "check", "metrics"}, {}, text));
  if (said.is_ok() && said->ok()) return "";
  return "promtool check metrics (promtool must be installed: scripts/install-deps.sh):\n" +
         (said.is_ok() ? said->output : said.status().message());
}

TEST_F(MetricsEndToEnd, PromtoolAcceptsTheExposition) {
  // A share folder with a process slot, and labels that need escaping.
  const std::string shares = (base_ / "shares").string();
  ShareSpec spec;
  spec.claim_uid = "uid-1";
  spec.device = "gpu-0";
  spec.share_id = "s-1";
  spec.uuid = "GPU-1";
  spec.memory_bytes = 2 * kGiB;
  spec.cores = 25;
  fs::create_directories(shares + "/" + spec.name());
  ASSERT_EQ(share_folder::write_limits(shares + "/" + spec.name(), {share_limits(spec)}).message(),
            "");
  ASSERT_EQ(share::create_usage_page((shares + "/" + spec.name()).c_str()), 0);
  share::UsagePage* page = nullptr;
  ASSERT_EQ(share::map_usage_page((shares + "/" + spec.name() + "/usage").c_str(), true, page), 0);
  page->slot_high_water = 1;
  page->slots[0].owner = share::make_owner(7, 1, 1);
  page->slots[0].bytes[0] = kGiB;
  page->slots[0].launches = 12;
  page->slots[0].throttled_ns = 1'500'000'000;
  share::unmap_usage_page(page);
  Checkpoint checkpoint;
  checkpoint["uid-1"] = {
      "ns \"quoted\"", "back\\slash\nnewline", ClaimState::kPrepareCompleted, {spec}, {}};
  RequestMetrics requests;
  for (int i = 0; i < 3; ++i) requests.count_prepare(true, milliseconds(12));
  DeviceHealthBoard health;
  health.set(health_report("gpu-0", DeviceHealthState::kUnhealthy));
  // And a MIG instance of another GPU, healthy: its own gpu series and the info series that joins
  // them to its GPU.
  NodeDevice instance{"gpu-1-mig-gi3", "MIG-3", 1, 71168ull << 20, "NVIDIA H200"};
  instance.mig = MigDeviceRef{};
  instance.mig->parent_uuid = "GPU-2";
  instance.mig->profile = "3g.71gb";
  instance.mig->gi_id = 3;
  instance.mig->ci_id = 0;
  health.set(health_report("gpu-1-mig-gi3", DeviceHealthState::kHealthy));
  ObserverOptions observing;
  observing.shares_dir = shares;
  observing.checkpoint = [&] { return checkpoint; };
  observing.devices = [&] {
    return std::vector<NodeDevice>{{"gpu-0", "GPU-1", 0, 16 * kGiB}, instance};
  };
  observing.health = [&] { return health.snapshot(); };
  Observer observer(observing, nullptr);
  // The out-of-band checks' memory outside every share: GPU-1 read, GPU-9 not published here.
  auto judgment = std::make_shared<Judgment>();
  judgment->unaccounted_memory = {{"GPU-1", 2 * kGiB}, {"GPU-9", kGiB}};
  MetricsSources sources;
  sources.node_name = "node-a";
  sources.observed = [&] { return ObservedNode{observer.observe(), judgment}; };
  sources.requests = &requests;
  sources.version = "0.1.0";
  sources.revision = "0123456789ab";
  const std::string text = collect_metrics(sources);
  EXPECT_NE(text.find("namespace=\"ns \\\"quoted\\\"\",claim=\"back\\\\slash\\nnewline\""),
            std::string::npos)
      << text;
  EXPECT_EQ(promtool_problems(base_, text), "");
  const auto samples = parse_samples(text);
  const std::string series =
      "{namespace=\"ns \\\"quoted\\\"\",claim=\"back\\\\slash\\nnewline\",share=\"" + spec.name() +
      "\",pod=\"\",uuid=\"GPU-1\",node=\"node-a\"}";
  EXPECT_EQ(samples.at("tessera_share_memory_used_bytes" + series), 1.0 * kGiB);
  EXPECT_EQ(samples.at("tessera_share_launches_total" + series), 12);
  EXPECT_EQ(samples.at("tessera_share_throttled_seconds_total" + series), 1.5);
  EXPECT_EQ(samples.at("tessera_share_cores_request_ratio" + series), 0.25);
  EXPECT_EQ(samples.at("tessera_prepare_requests_total{result=\"ok\"}"), 3);
  EXPECT_EQ(samples.at("tessera_prepare_duration_seconds_count"), 3);
  EXPECT_EQ(samples.at("tessera_build_info{version=\"0.1.0\",revision=\"0123456789ab\"}"), 1);
  EXPECT_EQ(samples.at("tessera_gpu_healthy{uuid=\"GPU-1\",device=\"gpu-0\",node=\"node-a\"}"), 0);
  EXPECT_EQ(
      samples.at(
          "tessera_gpu_unaccounted_memory_bytes{uuid=\"GPU-1\",device=\"gpu-0\",node=\"node-a\"}"),
      2.0 * kGiB);
  EXPECT_EQ(text.find("GPU-9"), std::string::npos);  // only the published GPUs have series
  EXPECT_EQ(samples.at("tessera_mig_instance_info{uuid=\"MIG-3\",device=\"gpu-1-mig-gi3\","
                       "node=\"node-a\",parent_uuid=\"GPU-2\",profile=\"3g.71gb\","
                       "gpu_instance=\"3\",compute_instance=\"0\"}"),
            1);
  EXPECT_EQ(
      samples.at("tessera_gpu_healthy{uuid=\"MIG-3\",device=\"gpu-1-mig-gi3\",node=\"node-a\"}"),
      1);
  EXPECT_EQ(text.find("tessera_mig_instance_info{uuid=\"GPU-1\""), std::string::npos)
      << "a whole GPU has no MIG info series";
}

TEST_F(MetricsEndToEnd, EveryMetricOfARunningTwoShareClaim) {
  if (std::string(MEMORY_FILL).empty()) GTEST_SKIP() << "built without samples";
  const Result<std::vector<GpuInfo>> listed = list_gpus();
  ASSERT_EQ(listed.status().message(), "");
  ASSERT_EQ(listed->size(), 1u);
  const std::vector<NodeDevice> devices = node_devices(*listed);
  const std::string uuid = devices[0].uuid, device = devices[0].name;

  OneClaim kube;
  kube.body = testing::make_claim(
                  "pair", "metrics-claim-uid",
                  {{"a", device, "share-a", "8Gi", "30"}, {"b", device, "share-b", "4Gi", "70"}})
                  .dump();
  ShareManagerOptions options;
  options.root = (base_ / "state").string();
  options.cdi_dir = (base_ / "cdi").string();
  options.node_name = "node-a";
  options.shim_path = LIBVGPU_SO;
  options.container_driver = testing::fake_container_driver(base_ / "driver");
  options.measure_source = share::kMeasureAgent;  // as NodeAgent: the agent's meter below
  ShareManager manager(options, kube, devices);
  ASSERT_EQ(manager.start().message(), "");
  DeviceHealthBoard health;
  health.set(health_report(device, DeviceHealthState::kHealthy));
  RequestMetrics requests;
  SteadyClock clock;
  InstrumentedPreparer preparer(manager, requests, clock);
  // The agent's one NVML session, and its observer of the node (a scrape per observation here).
  Result<std::unique_ptr<GpuProcessSource>> nvml = nvml_process_source();
  ASSERT_EQ(nvml.status().message(), "");
  gpu_processes_ = std::move(nvml).value();
  ObserverOptions observing;
  observing.shares_dir = options.root + "/shares";
  observing.checkpoint = [&] { return manager.checkpoint(); };
  observing.devices = [&] { return manager.devices(); };
  observing.health = [&] { return health.snapshot(); };
  observer_ = std::make_unique<Observer>(observing, gpu_processes_.get());
  MetricsSources sources;
  sources.node_name = "node-a";
  sources.observed = [this] { return ObservedNode{observer_->observe(), nullptr}; };
  sources.requests = &requests;
  MetricsServerOptions serving;
  serving.address = "127.0.0.1:0";
  serving.metrics = [&] { return collect_metrics(sources); };
  server_ = std::make_unique<MetricsServer>(serving);
  ASSERT_EQ(server_->start().message(), "");

  const ClaimRef claim{"tenants", "metrics-claim-uid", "pair"};
  ASSERT_EQ(preparer.prepare(claim).status().message(), "");
  const std::string a = "metrics-claim-uid-" + device + "-share-a";
  const std::string b = "metrics-claim-uid-" + device + "-share-b";
  const std::string gpu = "{uuid=\"" + uuid + "\",device=\"" + device + "\",node=\"node-a\"}";

  // Prepared, nothing run yet: every share series is there, the usage ones 0.
  {
    auto samples = parse_samples(scrape());
    for (const std::string& share : {a, b}) {
      SCOPED_TRACE(share);
      for (const char* name :
           {"tessera_share_memory_used_bytes", "tessera_share_gpu_time_seconds_total",
            "tessera_share_throttled_seconds_total", "tessera_share_launches_total",
            "tessera_share_allocations_denied_total", "tessera_share_processes"}) {
        ASSERT_TRUE(samples.count(share_series(name, share, uuid))) << name;
        EXPECT_EQ(samples[share_series(name, share, uuid)], 0) << name;
      }
    }
    EXPECT_EQ(samples[share_series("tessera_share_usage_readable", a, uuid)], 1);
    EXPECT_EQ(samples[share_series("tessera_share_memory_limit_bytes", a, uuid)], 8.0 * kGiB);
    EXPECT_EQ(samples[share_series("tessera_share_memory_limit_bytes", b, uuid)], 4.0 * kGiB);
    EXPECT_EQ(samples[share_series("tessera_share_cores_request_ratio", a, uuid)], 0.3);
    EXPECT_EQ(samples[share_series("tessera_share_cores_request_ratio", b, uuid)], 0.7);
    EXPECT_EQ(samples[share_series("tessera_share_cores_limit_ratio", a, uuid)], 0.3);
    EXPECT_EQ(samples["tessera_gpu_shares" + gpu], 2);
    EXPECT_EQ(samples["tessera_prepare_requests_total{result=\"ok\"}"], 1);
    EXPECT_EQ(samples["tessera_prepare_requests_total{result=\"error\"}"], 0);
    EXPECT_EQ(samples["tessera_prepare_duration_seconds_count"], 1);
    // The build's own labels (tessera/version.h): CMake's project version and the commit.
    EXPECT_EQ(samples["tessera_build_info{version=\"" + std::string(kVersion) + "\",revision=\"" +
                      std::string(kGitCommit) + "\"}"],
              1);
  }

  // Share a: filled to its limit in 256Mi chunks, the first refusal ends the fill (--no-fine),
  // and the memory is held while the rest runs: 30 s, over ten times what the burn and the checks
  // below take (its report, checked at the end, comes once the hold is over).
  Child fill(base_, options.root + "/shares/" + a,
             {MEMORY_FILL, "--chunk", "256Mi", "--no-fine", "--hold-seconds", "30"}, "fill");
  const std::string a_memory = share_series("tessera_share_memory_used_bytes", a, uuid);
  std::map<std::string, double> samples;
  const auto deadline = steady_clock::now() + std::chrono::seconds(30);
  while (steady_clock::now() < deadline) {
    samples = parse_samples(scrape());
    // The refusal comes after the last chunk: then the fill holds what it got.
    if (samples[share_series("tessera_share_allocations_denied_total", a, uuid)] >= 1) break;
    std::this_thread::sleep_for(milliseconds(20));
  }
  ASSERT_TRUE(fill.running()) << fill.finish().dump();
  // 500Mi of context and 30 chunks: the 31st would pass the 8Gi limit.
  ASSERT_EQ(samples[a_memory], static_cast<double>(kContextOverhead + 30 * 256 * kMiB));

  // Share b: compute-burn, measured by the agent's meter (20 ms passes, as the agent runs it).
  GpuTimeMeterOptions metering;
  metering.shares_dir = options.root + "/shares";
  GpuTimeMeter meter(metering);
  ASSERT_EQ(meter.sample_once().message(), "");
  Child burn(base_, options.root + "/shares/" + b,
             {COMPUTE_BURN, "--seconds", "1.5", "--blocks-per-sm", "8", "--sync-every", "64",
              "--launch", "kernel"},
             "burn");
  auto next = steady_clock::now();
  uint64_t b_processes_seen = 0;
  while (burn.running()) {
    EXPECT_EQ(meter.sample_once().message(), "");
    if (b_processes_seen == 0) {
      auto during = parse_samples(scrape());
      b_processes_seen =
          static_cast<uint64_t>(during[share_series("tessera_share_processes", b, uuid)]);
    }
    next += milliseconds(20);
    std::this_thread::sleep_until(next);
  }
  for (int i = 0; i < 5; ++i) {  // the last windows after its exit
    std::this_thread::sleep_for(milliseconds(20));
    EXPECT_EQ(meter.sample_once().message(), "");
  }
  const json burned = burn.finish();
  ASSERT_FALSE(burned.empty());
  ASSERT_TRUE(fill.running()) << "memory-fill stopped holding before the checks";

  // The simulator's own figures now, and a scrape.
  const Result<CommandResult> simulator = run_command(Command({SIMGPU_CTL, "status"}));
  ASSERT_TRUE(simulator.is_ok() && simulator->ok()) << (simulator.is_ok() ? simulator->output : "");
  const json status = json::parse(simulator->output);
  const std::string text = scrape();
  samples = parse_samples(text);
  const json& sim_device = status["devices"][0];
  uint64_t fill_bytes = 0, burn_bytes = 0;
  for (const json& process : sim_device["processes"]) {
    if (process["pid"] == fill.pid()) fill_bytes = process["memory_bytes"];
    if (process["pid"] == burn.pid()) burn_bytes = process["memory_bytes"];
  }
  std::printf(
      "FIGURE share a: metric %.0f B, simulator %llu B; share b: metric %.0f B, simulator %llu B; "
      "GPU used: metric %.0f B, simulator %llu B\n",
      samples[a_memory], static_cast<unsigned long long>(fill_bytes),
      samples[share_series("tessera_share_memory_used_bytes", b, uuid)],
      static_cast<unsigned long long>(burn_bytes), samples["tessera_gpu_memory_used_bytes" + gpu],
      static_cast<unsigned long long>(sim_device["memory_used_bytes"].get<uint64_t>()));
  // Memory: the usage page against the simulator's per-process memory, within a page.
  EXPECT_NEAR(samples[a_memory], static_cast<double>(fill_bytes), kPage);
  EXPECT_EQ(samples[share_series("tessera_share_processes", a, uuid)], 1);
  EXPECT_EQ(samples[share_series("tessera_share_allocations_denied_total", a, uuid)], 1);
  EXPECT_EQ(samples[share_series("tessera_share_launches_total", a, uuid)], 0);
  // Per GPU: NVML's figures are the simulator's.
  EXPECT_EQ(samples["tessera_gpu_memory_used_bytes" + gpu],
            sim_device["memory_used_bytes"].get<double>());
  EXPECT_EQ(samples["tessera_gpu_memory_total_bytes" + gpu], 16.0 * kGiB);
  ASSERT_TRUE(samples.count("tessera_gpu_utilization_ratio" + gpu));
  EXPECT_GE(samples["tessera_gpu_utilization_ratio" + gpu], 0);
  EXPECT_LE(samples["tessera_gpu_utilization_ratio" + gpu], 1);
  EXPECT_EQ(samples["tessera_gpu_healthy" + gpu], 1);
  EXPECT_EQ(samples["tessera_gpu_shares" + gpu], 2);

  // GPU time: the agent's meter against kernels x kernel time, within the meter's bound
  // (agent.GpuTimeMeterAttribution.*: 5 %, NVML's whole percents of 20 ms windows and the first and
  // last window of a process).
  const double burn_seconds = burned.value("kernels", 0.0) * static_cast<double>(kKernelUs) * 1e-6;
  const double b_gpu = samples[share_series("tessera_share_gpu_time_seconds_total", b, uuid)];
  const double b_throttled =
      samples[share_series("tessera_share_throttled_seconds_total", b, uuid)];
  const double b_launches = samples[share_series("tessera_share_launches_total", b, uuid)];
  std::printf(
      "FIGURE share b: GPU time metric %.4f s, kernels x time %.4f s; throttled %.3f s; launches "
      "%.0f, compute-burn kernels %llu\n",
      b_gpu, burn_seconds, b_throttled, b_launches,
      static_cast<unsigned long long>(burned.value("kernels", uint64_t{0})));
  EXPECT_NEAR(b_gpu, burn_seconds, 0.05 * burn_seconds);
  // 70 % of a GPU that one saturating process would hold 100 %: its launches waited at the gate.
  EXPECT_GT(b_throttled, 0.05);
  EXPECT_LT(b_throttled, 1.5);
  EXPECT_GE(b_launches, burned.value("kernels", 0.0));
  EXPECT_EQ(b_processes_seen, 1u);
  EXPECT_EQ(samples[share_series("tessera_share_allocations_denied_total", b, uuid)], 0);

  // The whole exposition through promtool (Debian's prometheus package; scripts/install-deps.sh).
  EXPECT_EQ(promtool_problems(base_, text), "");

  const json filled = fill.finish();
  EXPECT_EQ(filled["bytes_obtained"], 30 * 256 * kMiB);
  EXPECT_EQ(filled["stop_reason"], "CUDA_ERROR_OUT_OF_MEMORY");

  // A usage page cut short (a tenant can write its share folder): that share's usage is unknown,
  // so its usage series are left out rather than read as 0; its limits and the other share stay.
  fs::resize_file(options.root + "/shares/" + b + "/usage", 100);
  samples = parse_samples(scrape());
  EXPECT_EQ(samples[share_series("tessera_share_usage_readable", b, uuid)], 0);
  EXPECT_EQ(samples[share_series("tessera_share_usage_readable", a, uuid)], 1);
  for (const char* name :
       {"tessera_share_memory_used_bytes", "tessera_share_gpu_time_seconds_total",
        "tessera_share_throttled_seconds_total", "tessera_share_launches_total",
        "tessera_share_allocations_denied_total", "tessera_share_processes"}) {
    EXPECT_EQ(samples.count(share_series(name, b, uuid)), 0u) << name;
    EXPECT_EQ(samples.count(share_series(name, a, uuid)), 1u) << name;
  }
  EXPECT_EQ(samples[share_series("tessera_share_memory_limit_bytes", b, uuid)], 4.0 * kGiB);

  // Unprepared: the claim's series are gone, the GPU's stay.
  ASSERT_EQ(preparer.unprepare(claim).message(), "");
  const std::string after = scrape();
  EXPECT_EQ(after.find("claim=\"pair\""), std::string::npos) << after;
  samples = parse_samples(after);
  EXPECT_EQ(samples["tessera_gpu_shares" + gpu], 0);
  EXPECT_EQ(samples["tessera_gpu_healthy" + gpu], 1);
  EXPECT_EQ(samples["tessera_unprepare_requests_total{result=\"ok\"}"], 1);
  EXPECT_EQ(samples["tessera_unprepare_duration_seconds_count"], 1);
  server_->stop();
}

TEST(MetricsServer, HealthzFollowsTheAgentAndBadAddressesAreRefused) {
  Status healthy = Status::ok();
  MetricsServerOptions serving;
  serving.address = "127.0.0.1:0";
  serving.metrics = [] { return std::string("# nothing\n"); };
  serving.healthy = [&healthy] { return healthy; };
  MetricsServer server(serving);
  ASSERT_EQ(server.start().message(), "");
  httplib::Client client("127.0.0.1", server.port());
  auto response = client.Get("/healthz");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->body, "ok\n");
  healthy = unavailable("the device monitor has not turned for 60 s");
  response = client.Get("/healthz");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 503);
  EXPECT_EQ(response->body, "the device monitor has not turned for 60 s\n");
  response = client.Get("/elsewhere");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 404);
  // An address that cannot be bound.
  MetricsServerOptions elsewhere = serving;
  elsewhere.address = "192.0.2.1:0";  // TEST-NET-1: no interface of this machine has it
  MetricsServer unbound(elsewhere);
  EXPECT_EQ(unbound.start().code(), StatusCode::kUnavailable);
  elsewhere.address = "9464";
  EXPECT_EQ(MetricsServer(elsewhere).start().code(), StatusCode::kInvalidArgument);
  server.stop();
  server.stop();  // idempotent
}

}  // namespace
}  // namespace tessera::agent
