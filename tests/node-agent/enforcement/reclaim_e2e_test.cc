// Reclaim on the simulated GPU (docs/node-agent.md, "Reclaim"), the scenario: a 12 GiB GPU
// (a simulator of its own: this program's only one, so it is an executable of its own), share B
// (request 2 GiB, limit 8 GiB) holds 8 GiB as two processes under the shim, the older 2 GiB within
// its request and the newer 6 GiB borrowed; share A (request 6 GiB) then asks for 5.5 GiB on top
// of its 500 MiB context. The agent's checker runs its 1 s passes on the real clock with NVML
// through the simulator and the agent's finding policy (report: reclaim kills whatever the
// policy). A gets its memory after B's newer process is evicted, within the shim's bound, and B's
// older process keeps its 2 GiB. Then an allocation nobody can reclaim for fails with
// CUDA_ERROR_OUT_OF_MEMORY at the bound. The waits are printed; the only time asserted is the
// shim's own bound (a call that outwaits it fails), and the liveness of the test.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string_view>
#include <thread>

#include <gtest/gtest.h>

#include "api/event_log.h"
#include "apiserver/claim_fixture.h"
#include "devices/resource_slices.h"
#include "enforcement/checker.h"
#include "enforcement/enforcement_handler.h"
#include "enforcement/fake_node.h"
#include "enforcement/tenant_process.h"
#include "metrics/collector.h"
#include "share/fake_driver.h"
#include "share/share_manager.h"
#include "tenant_claims.h"
#include "tessera/gpu_info.h"
#include "tessera/share_contract.h"
#include "tessera/share_region.h"

extern char** environ;

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Steady = std::chrono::steady_clock;

constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kMiB = 1ull << 20;
constexpr char kDevices[] = "name=NVIDIA L40S,memory=12Gi,sms=142,cc=8.9";
// TESSERA_RECLAIM_WAIT_MS's default (libvgpu/include/tessera/vgpu/options.h).
constexpr double kBoundMs = 5000;
constexpr std::chrono::seconds kLiveness{60};

// Findings as they come, forwarded to the agent's policy.
class Recorder final : public FindingHandler {
 public:
  explicit Recorder(FindingHandler& policy) : policy_(policy) {}
  void handle(const Finding& finding) override {
    {
      std::lock_guard lock(mutex_);
      seen_.push_back(finding);
    }
    policy_.handle(finding);
  }
  std::vector<Finding> of(FindingKind kind) {
    std::lock_guard lock(mutex_);
    std::vector<Finding> out;
    for (const Finding& f : seen_)
      if (f.kind == kind) out.push_back(f);
    return out;
  }

 private:
  FindingHandler& policy_;
  std::mutex mutex_;
  std::vector<Finding> seen_;
};

// A tenant process (tenant_process.h).
using Tenant = ::tessera::agent::testing::TenantProcess;

// "held <bytes> slowest <ms>" -> bytes and ms.
std::pair<uint64_t, double> parse_held(const std::string& line) {
  unsigned long long bytes = 0;
  double ms = -1;
  if (std::sscanf(line.c_str(), "held %llu slowest %lf", &bytes, &ms) != 2) return {0, -1};
  return {bytes, ms};
}

class Reclaim : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = testing::fresh_folder(
        "reclaim-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    // One simulator for the program (the simulated NVML reads the state file's name once).
    static const std::string state = [] {
      const fs::path path =
          fs::temp_directory_path() / ("reclaim-simgpu-" + std::to_string(getpid()) + ".state");
      fs::remove(path);  // a file an earlier process of this pid left (another layout)
      return path.string();
    }();
    state_ = state;
    setenv("SIMGPU_STATE", state_.c_str(), 1);
    setenv("SIMGPU_DEVICES", kDevices, 1);
    Result<std::vector<GpuInfo>> gpus = list_gpus();
    ASSERT_EQ(gpus.status().message(), "");
    ASSERT_EQ(gpus->size(), 1u);
    uuid_ = (*gpus)[0].uuid;
    devices_ = node_devices(*gpus);
    const std::string device = "gpu-" + std::to_string((*gpus)[0].minor);
    auto config = [](json extra) {
      json parameters = {{"apiVersion", "vgpu.tessera.dev/v1alpha1"}, {"kind", "VgpuConfig"}};
      parameters.update(extra);
      return json::array({testing::opaque_config("FromClaim", parameters)});
    };
    // A: request 6 GiB (its limit). B: request 2 GiB, limit 8 GiB.
    json a = testing::make_claim("share-a", "uid-a", {{"gpu", device, "s", "6Gi", ""}},
                                 config(json::object()));
    json b = testing::make_claim("share-b", "uid-b", {{"gpu", device, "s", "2Gi", ""}},
                                 config({{"memory", {{"limit", "8Gi"}}}}));
    a["status"]["reservedFor"][0]["uid"] = "pod-uid-a";
    b["status"]["reservedFor"][0]["uid"] = "pod-uid-b";
    kube_.bodies["share-a"] = a.dump();
    kube_.bodies["share-b"] = b.dump();
    ShareManagerOptions options;
    options.root = (base_ / "state").string();
    options.cdi_dir = (base_ / "cdi").string();
    options.node_name = "node-a";
    options.shim_path = LIBVGPU_SO;
    options.container_driver = testing::fake_container_driver(base_ / "driver");
    manager_ = std::make_unique<ShareManager>(options, kube_, devices_);
    ASSERT_EQ(manager_->start().message(), "");
    ASSERT_EQ(manager_->prepare({"tenants", "uid-a", "share-a"}).status().message(), "");
    ASSERT_EQ(manager_->prepare({"tenants", "uid-b", "share-b"}).status().message(), "");
    const std::string shares_dir = (base_ / "state" / "shares").string();
    for (const auto& [uid, entry] : manager_->checkpoint())
      (uid == "uid-a" ? dir_a_ : dir_b_) = shares_dir + "/" + entry.shares[0].folder_name();

    // The agent's checks as NodeAgent wires them; its default policy is report.
    EnforcementHandlerOptions handling;
    handling.belongs = [this](int pid, uint64_t start, const std::string& share) {
      return checker_ && checker_->belongs(pid, start, share);
    };
    handling.then = &event_findings_;
    policy_ = std::make_unique<EnforcementHandler>(handling);
    recorder_ = std::make_unique<Recorder>(*policy_);
    Result<std::unique_ptr<GpuProcessSource>> nvml = nvml_process_source();
    ASSERT_EQ(nvml.status().message(), "");
    nvml_ = std::move(nvml).value();
    CheckerOptions checking;
    checking.node_gpus = [this] { return std::vector<std::string>{uuid_}; };
    checker_ = std::make_unique<OutOfBandChecker>(
        checking, [this, shares_dir] { return checked_shares(manager_->checkpoint(), shares_dir); },
        *nvml_, *recorder_);
    ASSERT_EQ(checker_->start().message(), "");
  }
  void TearDown() override {
    checker_.reset();
    if (!base_.empty()) fs::remove_all(base_);
  }

  // hostile-tenant in `share_dir` (empty: no share, no shim) allocating `bytes` in `chunk`s, with
  // `extra` in its environment. Built before the fork: the checker's thread runs meanwhile, so
  // the child only reads, dup2s and execs.
  void start(Tenant& tenant, const std::string& share_dir, uint64_t bytes, uint64_t chunk,
             const std::vector<std::string>& extra = {}) {
    std::vector<std::string> overrides{std::string("LD_LIBRARY_PATH=") + SIMGPU_LIB_DIR,
                                       "ASAN_OPTIONS=verify_asan_link_order=0"};
    if (!share_dir.empty()) {
      overrides.push_back("TESSERA_SHARE_DIR=" + share_dir);
      overrides.push_back(std::string("LD_PRELOAD=") + LIBVGPU_SO);
    }
    overrides.insert(overrides.end(), extra.begin(), extra.end());
    std::vector<std::string> environment;
    for (char** entry = environ; *entry; ++entry) {
      const std::string_view text(*entry);
      const std::string_view name = text.substr(0, text.find('=') + 1);
      const bool replaced = std::any_of(overrides.begin(), overrides.end(), [&](const auto& o) {
        return name == std::string_view(o).substr(0, o.find('=') + 1);
      });
      if (!replaced && name != "TESSERA_SHARE_DIR=" && name != "LD_PRELOAD=")
        environment.emplace_back(text);
    }
    environment.insert(environment.end(), overrides.begin(), overrides.end());
    std::vector<char*> envp;
    for (std::string& entry : environment) envp.push_back(entry.data());
    envp.push_back(nullptr);
    std::vector<std::string> args{
        HOSTILE_TENANT, "--attack",           "none", "--bytes", std::to_string(bytes),
        "--chunk",      std::to_string(chunk)};
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    int out[2];
    ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
    tenant.pid = fork();
    if (tenant.pid == 0) {
      dup2(out[1], 1);
      execve(HOSTILE_TENANT, argv.data(), envp.data());
      _exit(91);
    }
    ASSERT_GT(tenant.pid, 0);
    close(out[1]);
    tenant.out = out[0];
  }
  // B's two processes: the older holds 2 GiB (its context and 1.5 GiB), the newer 6 GiB.
  void fill_b(Tenant& older, Tenant& newer) {
    start(older, dir_b_, 1536 * kMiB, 256 * kMiB);
    ASSERT_EQ(parse_held(older.line(kLiveness)).first, 1536 * kMiB);
    // Start times are in clock ticks: the newer one starts at least a tick later.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    start(newer, dir_b_, 5632 * kMiB, 256 * kMiB);
    ASSERT_EQ(parse_held(newer.line(kLiveness)).first, 5632 * kMiB);
  }

  // Writes a reclaim request into `share_dir`'s usage page as if process `pid` waited for
  // `bytes` (what a tenant can write whether or not it waits).
  void forge_request(const std::string& share_dir, pid_t pid, uint64_t bytes) {
    share::ProcessIdentity identity;
    ASSERT_EQ(share::read_process_identity("/proc", pid, identity), 0);
    share::UsagePage* page = nullptr;
    ASSERT_EQ(share::map_usage_page((share_dir + "/usage").c_str(), true, page), 0);
    page->reclaim_owner.store(identity.owner());
    page->reclaim_device.store(0);
    page->reclaim_at_ns.store(++forged_);
    page->reclaim_bytes.store(bytes);
    share::unmap_usage_page(page);
  }
  // Two whole passes after now: a request written before is judged by then.
  void two_passes() {
    const uint64_t now = checker_->loop_passes();
    ASSERT_TRUE(checker_->wait_for_loop_passes(now + 2, std::chrono::seconds(30)));
  }

  uint64_t forged_ = 0;
  fs::path base_;
  std::string state_, uuid_, dir_a_, dir_b_;
  std::vector<NodeDevice> devices_;
  SimulatedClock events_clock_;
  EventLog events_{events_clock_};
  EventFindingHandler event_findings_{events_};
  testing::TenantClaims kube_;
  std::unique_ptr<ShareManager> manager_;
  std::unique_ptr<EnforcementHandler> policy_;
  std::unique_ptr<Recorder> recorder_;
  std::unique_ptr<GpuProcessSource> nvml_;
  std::unique_ptr<OutOfBandChecker> checker_;  // last: its passes use everything above
};

TEST_F(Reclaim, AShareWithinItsRequestGetsItsMemoryAfterTheNewestBorrowerIsEvicted) {
  Tenant b_older, b_newer, a;
  fill_b(b_older, b_newer);
  if (HasFatalFailure()) return;
  // What B's older process holds before (NVML): its context and 1.5 GiB.
  auto held_by = [this](pid_t pid) -> uint64_t {
    Result<std::vector<GpuProcessMemory>> processes = nvml_->memory(uuid_);
    if (!processes.is_ok()) return 0;
    for (const GpuProcessMemory& process : *processes)
      if (process.pid == pid) return process.used_bytes;
    return 0;
  };
  const uint64_t older_before = held_by(b_older.pid);
  ASSERT_GE(older_before, 1536 * kMiB);
  // A asks for its request in one allocation: 5.5 GiB on top of its context, with about 3.5 GiB
  // free on the GPU.
  const auto asked = Steady::now();
  start(a, dir_a_, 5632 * kMiB, 5632 * kMiB);
  const std::string line = a.line(kLiveness);
  const double total_s = std::chrono::duration<double>(Steady::now() - asked).count();
  const auto [held, waited_ms] = parse_held(line);
  ASSERT_EQ(held, 5632 * kMiB) << "A said: " << line;
  ASSERT_TRUE(b_newer.killed_within(std::chrono::seconds(30))) << "B's newer process lives";
  std::printf(
      "reclaim: A's 5632 MiB allocation waited %.1f ms (bound %.0f ms); A held its "
      "request %.3f s after it started\n",
      waited_ms, kBoundMs, total_s);
  // Within the bound: a call that outwaited it would have failed (held 0).
  EXPECT_LE(waited_ms, kBoundMs + 1000);
  // B keeps its older process and what it holds within its request.
  EXPECT_TRUE(b_older.alive());
  EXPECT_EQ(held_by(b_older.pid), older_before);
  // One eviction: the finding (its log line), the event, the metric.
  const std::vector<Finding> evicted = recorder_->of(FindingKind::kReclaimEviction);
  ASSERT_EQ(evicted.size(), 1u);
  // A's reservation in flight was not taken for a lie.
  EXPECT_TRUE(recorder_->of(FindingKind::kUsageDisagrees).empty());
  EventLog::Cursor reading = events_.cursor(/*include_recent=*/true);
  const std::vector<tessera::node::v1::Event> events =
      events_.read(reading, std::chrono::milliseconds(0), 1024);
  const auto event =
      std::find_if(events.begin(), events.end(), [](const tessera::node::v1::Event& e) {
        return e.fields().count("finding") && e.fields().at("finding") == "reclaim_eviction";
      });
  ASSERT_NE(event, events.end()) << "no reclaim_eviction event";
  EXPECT_EQ(event->kind(), tessera::node::v1::Event::FINDING);
  EXPECT_EQ(event->host_pid(), evicted[0].host_pid);
  EXPECT_NE(event->message().find("reclaim: killed (SIGKILL)"), std::string::npos)
      << event->message();
  EXPECT_EQ(policy_->reclaim_evictions()[uuid_], 1u);
  ObserverOptions observing;
  observing.devices = [this] { return devices_; };
  Observer observer(observing, nullptr);
  MetricsSources sources;
  sources.node_name = "node-a";
  sources.observed = [&] { return ObservedNode{observer.observe(), nullptr}; };
  sources.reclaim_evictions = [this] { return policy_->reclaim_evictions(); };
  const std::string scrape = collect_metrics(sources);
  EXPECT_NE(scrape.find("tessera_reclaim_evictions_total{uuid=\"" + uuid_ + "\",device=\"" +
                        devices_[0].name + "\",node=\"node-a\"} 1"),
            std::string::npos)
      << scrape;
}

TEST_F(Reclaim, AForgedRequestEvictsNobody) {
  Tenant b_older, b_newer, a;
  fill_b(b_older, b_newer);
  if (HasFatalFailure()) return;
  // B, above its request (8 GiB of 2), asks in its own page for 1 GiB it could never be owed.
  forge_request(dir_b_, b_newer.pid, kGiB);
  two_passes();
  if (HasFatalFailure()) return;
  EXPECT_NE(checker_->stats().last_reclaim.find("the share is not within its request"),
            std::string::npos)
      << checker_->stats().last_reclaim;
  forge_request(dir_b_, b_newer.pid, 0);  // withdrawn
  // A, within its request with about 1 GiB held, asks for 2 GiB the GPU has free (about 3 GiB).
  start(a, dir_a_, 512 * kMiB, 512 * kMiB);
  ASSERT_EQ(parse_held(a.line(kLiveness)).first, 512 * kMiB);
  forge_request(dir_a_, a.pid, 2 * kGiB);
  two_passes();
  if (HasFatalFailure()) return;
  EXPECT_NE(checker_->stats().last_reclaim.find("free, the request asks for"), std::string::npos)
      << checker_->stats().last_reclaim;
  // A names B's process as the one waiting: no process of A's, nobody.
  forge_request(dir_a_, b_newer.pid, 5 * kGiB);
  two_passes();
  if (HasFatalFailure()) return;
  EXPECT_NE(checker_->stats().last_reclaim.find("names no process of the share"), std::string::npos)
      << checker_->stats().last_reclaim;
  EXPECT_TRUE(recorder_->of(FindingKind::kReclaimEviction).empty());
  EXPECT_TRUE(b_older.alive());
  EXPECT_TRUE(b_newer.alive());
  EXPECT_GE(checker_->stats().reclaim_requests, 3u);
}

TEST_F(Reclaim, AnAllocationNobodyCanGiveBackForFailsAtTheBound) {
  // 8 GiB held by a host process outside every share (no borrower to evict), and B within its
  // request. A waits its bound (1 s here), then gets CUDA_ERROR_OUT_OF_MEMORY; nobody is evicted.
  Tenant outside, b, a;
  start(outside, "", 8 * kGiB, 256 * kMiB);
  ASSERT_EQ(parse_held(outside.line(kLiveness)).first, 8 * kGiB);
  start(b, dir_b_, 1536 * kMiB, 256 * kMiB);
  ASSERT_EQ(parse_held(b.line(kLiveness)).first, 1536 * kMiB);
  // A's context (500 MiB) fits in the 2 GiB left; its 2 GiB allocation does not.
  start(a, dir_a_, 2 * kGiB, 2 * kGiB, {"TESSERA_RECLAIM_WAIT_MS=1000"});
  const std::string line = a.line(kLiveness);
  const auto [held, waited_ms] = parse_held(line);
  EXPECT_EQ(held, 0u) << "A said: " << line;
  std::printf("reclaim: nothing to reclaim, A's allocation failed after %.1f ms (bound 1000 ms)\n",
              waited_ms);
  EXPECT_GE(waited_ms, 1000);  // it waited its bound (the clock only moves forward)
  EXPECT_TRUE(recorder_->of(FindingKind::kReclaimEviction).empty());
  EXPECT_TRUE(b.alive());
  EXPECT_TRUE(outside.alive());
  EXPECT_GE(checker_->stats().reclaim_requests, 1u);
}

}  // namespace
}  // namespace tessera::agent
