// The local API against a simulated node: the share manager prepares claims "alpha" (8Gi, 30 %) and
// "beta" (4Gi, 70 %) of one simulated GPU, the device monitor watches the simulated NVML, and the
// API server lists the node over its socket and streams what happens: both claims prepared, a
// memory-fill under the shim refused past alpha's limit (its usage checked against the simulator's
// own figures), an XID injected with simgpu-ctl, and alpha unprepared; the refusal is also a
// Kubernetes Event on alpha's pod in kube-apiserver's stand-in.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "api/event_log.h"
#include "api/node_api_server.h"
#include "api/node_snapshot.h"
#include "api/pod_events.h"
#include "apiserver/claim_fixture.h"
#include "apiserver/fake_api_server.h"
#include "backends/command_runner.h"
#include "devices/device_health.h"
#include "devices/device_monitor.h"
#include "devices/resource_slices.h"
#include "observe/observer.h"
#include "share/fake_driver.h"
#include "share/share_manager.h"
#include "tenant_claims.h"
#include "tessera/gpu_info.h"
#include "tessera/kube/event_recorder.h"
#include "tessera/kube/http_kube_client.h"
#include "tessera/node/v1/node_api.grpc.pb.h"
#include "usage/gpu_processes.h"

#ifndef MEMORY_FILL
#define MEMORY_FILL ""
#endif

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;
namespace v1 = tessera::node::v1;
using nlohmann::json;
using std::chrono::milliseconds;

constexpr uint64_t kGiB = 1ull << 30;
constexpr int64_t kPreparedAt = 1764604800123;  // the share manager's wall clock
constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kPage = 4096;
constexpr uint64_t kContextOverhead = 500 * kMiB;  // the simulator's default per context
constexpr const char* kDevices = "name=NVIDIA H200,memory=16Gi,sms=132,cc=9.0";

// memory-fill under the shim in a share folder. Built before fork: the child of a multi-threaded
// process must not allocate.
class Child {
 public:
  Child(const fs::path& base, const std::string& share_dir, std::vector<std::string> args) {
    env_ = {std::string("LD_LIBRARY_PATH=") + SIMGPU_LIB_DIR,
            "SIMGPU_STATE=" + (base / "simgpu.state").string(),
            std::string("SIMGPU_DEVICES=") + kDevices,
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
    const std::string out = (base / "child.out").string();
    pid_ = fork();
    if (pid_ == 0) {
      const int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) dup2(fd, 1);
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
  }
  ~Child() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0 && waitpid(pid_, nullptr, WNOHANG) == 0; }

 private:
  std::vector<std::string> args_, env_;
  pid_t pid_ = -1;
};

// Every event of one WatchEvents stream (include_recent), read on a thread of its own.
class Watcher {
 public:
  explicit Watcher(const fs::path& socket)
      : stub_(v1::NodeApi::NewStub(
            grpc::CreateChannel("unix://" + socket.native(), grpc::InsecureChannelCredentials()))) {
    v1::WatchEventsRequest request;
    request.set_include_recent(true);
    reader_ = stub_->WatchEvents(&context_, request);
    thread_ = std::thread([this] {
      v1::Event event;
      while (reader_->Read(&event)) {
        std::lock_guard lock(mutex_);
        events_.push_back(event);
        changed_.notify_all();
      }
    });
  }
  ~Watcher() {
    context_.TryCancel();
    thread_.join();
    reader_->Finish().ok();
  }
  // The first event of `kind` for `share` ("" = any), waiting up to 10 s for it.
  std::optional<v1::Event> wait_for(v1::Event::Kind kind, const std::string& share = "") {
    std::unique_lock lock(mutex_);
    std::optional<v1::Event> found;
    changed_.wait_for(lock, std::chrono::seconds(10), [&] {
      for (const v1::Event& event : events_)
        if (event.kind() == kind && (share.empty() || event.share() == share)) found = event;
      return found.has_value();
    });
    return found;
  }
  std::vector<v1::Event> events() {
    std::lock_guard lock(mutex_);
    return events_;
  }

 private:
  std::unique_ptr<v1::NodeApi::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<v1::Event>> reader_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<v1::Event> events_;
  std::thread thread_;
};

class NodeApiOnASimulatedNode : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::temp_directory_path() / ("agent-api-e2e-" + std::to_string(getpid()));
    fs::remove_all(base_);
    fs::create_directories(base_);
    setenv("SIMGPU_STATE", (base_ / "simgpu.state").c_str(), 1);
    setenv("SIMGPU_DEVICES", kDevices, 1);
    const Result<std::vector<GpuInfo>> listed = list_gpus();
    ASSERT_EQ(listed.status().message(), "");
    devices_ = node_devices(*listed);
    ASSERT_EQ(devices_.size(), 1u);
    device_ = devices_[0].name;
    uuid_ = devices_[0].uuid;
    kube_.bodies["alpha"] =
        testing::make_claim("alpha", "alpha-uid", {{"gpu", device_, "a", "8Gi", "30"}}).dump();
    kube_.bodies["beta"] =
        testing::make_claim("beta", "beta-uid", {{"gpu", device_, "b", "4Gi", "70"}}).dump();
    ShareManagerOptions options;
    options.root = (base_ / "state").string();
    options.cdi_dir = (base_ / "cdi").string();
    options.node_name = "node-a";
    options.shim_path = LIBVGPU_SO;
    options.container_driver = testing::fake_container_driver(base_ / "driver");
    options.wall_clock_unix_ms = [] { return kPreparedAt; };
    manager_ = std::make_unique<ShareManager>(options, kube_, devices_);
    ASSERT_EQ(manager_->start().message(), "");

    DeviceMonitorOptions monitoring;
    monitoring.pool = "node-a";
    monitoring.poll_interval = milliseconds(20);
    monitor_ = std::make_unique<DeviceMonitor>(
        monitoring, health_, [](const std::vector<GpuInfo>&) { return Status::ok(); },
        monitor_clock_);
    ASSERT_EQ(monitor_->start().message(), "");

    NodeApiServerOptions serving;
    serving.socket = base_ / "state" / "api.sock";
    // The node observed afresh for each snapshot (the agent's loop observes once per pass), with
    // the agent's one NVML session.
    Result<std::unique_ptr<GpuProcessSource>> nvml = nvml_process_source();
    ASSERT_EQ(nvml.status().message(), "");
    gpu_processes_ = std::move(nvml).value();
    ObserverOptions observing;
    observing.shares_dir = (base_ / "state" / "shares").string();
    observing.checkpoint = [this] { return manager_->checkpoint(); };
    observing.devices = [this] { return manager_->devices(); };
    observing.health = [this] { return health_.snapshot(); };
    observer_ = std::make_unique<Observer>(observing, gpu_processes_.get());
    serving.snapshot = [this](std::int64_t unix_ms) {
      NodeSnapshotSources sources;
      sources.node_name = "node-a";
      ObservedNode observed{observer_->observe(), nullptr};
      auto stamped = std::make_shared<NodeObservation>(*observed.observation);
      stamped->unix_ms = unix_ms;  // the server's clock, which the test moves
      observed.observation = std::move(stamped);
      return node_snapshot(observed, sources);
    };
    server_ = std::make_unique<NodeApiServer>(serving, events_, clock_);
    ASSERT_EQ(server_->start().message(), "");
    stub_ = v1::NodeApi::NewStub(grpc::CreateChannel("unix://" + serving.socket.native(),
                                                     grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    server_.reset();
    monitor_.reset();
    manager_.reset();
    fs::remove_all(base_);
  }

  v1::ListSharesResponse list() {
    grpc::ClientContext context;
    v1::ListSharesResponse response;
    EXPECT_TRUE(stub_->ListShares(&context, {}, &response).ok());
    return response;
  }
  const v1::Share* share_of(const v1::ListSharesResponse& node, const std::string& claim) {
    for (const v1::Share& share : node.shares())
      if (share.claim() == claim) return &share;
    return nullptr;
  }
  std::string share_name(const std::string& claim, const std::string& share_id) {
    return claim + "-uid-" + device_ + "-" + share_id;
  }
  // One monitor turn (the XID it collects reaches the board).
  void monitor_turn() {
    const std::uint64_t done = monitor_->turns();
    monitor_clock_.advance(milliseconds(20));
    ASSERT_TRUE(monitor_->wait_for_turns(done + 1));
  }

  fs::path base_;
  std::vector<NodeDevice> devices_;
  std::string device_, uuid_;
  testing::TenantClaims kube_;
  std::unique_ptr<ShareManager> manager_;
  DeviceHealthBoard health_;
  SimulatedClock monitor_clock_;
  std::unique_ptr<DeviceMonitor> monitor_;
  std::unique_ptr<GpuProcessSource> gpu_processes_;
  std::unique_ptr<Observer> observer_;
  SimulatedClock clock_;
  EventLog events_{clock_};
  std::unique_ptr<NodeApiServer> server_;
  std::unique_ptr<v1::NodeApi::Stub> stub_;
};

TEST_F(NodeApiOnASimulatedNode, TwoClaimsListedWithTheirLimitsThenHealthAndUnprepare) {
  Watcher watcher(server_->socket());
  ASSERT_EQ(manager_->prepare({"tenants", "alpha-uid", "alpha"}).status().message(), "");
  ASSERT_EQ(manager_->prepare({"tenants", "beta-uid", "beta"}).status().message(), "");
  server_->poll_once();
  const auto alpha_prepared = watcher.wait_for(v1::Event::PREPARED, share_name("alpha", "a"));
  const auto beta_prepared = watcher.wait_for(v1::Event::PREPARED, share_name("beta", "b"));
  ASSERT_TRUE(alpha_prepared && beta_prepared);
  EXPECT_EQ(alpha_prepared->claim(), "alpha");
  EXPECT_EQ(alpha_prepared->namespace_(), "tenants");
  EXPECT_EQ(alpha_prepared->gpu_uuid(), uuid_);
  EXPECT_EQ(alpha_prepared->sequence() + 1, beta_prepared->sequence());

  const v1::ListSharesResponse node = list();
  EXPECT_EQ(node.node(), "node-a");
  ASSERT_EQ(node.gpus_size(), 1);
  EXPECT_EQ(node.gpus(0).uuid(), uuid_);
  EXPECT_EQ(node.gpus(0).name(), "NVIDIA H200");  // NVML's product name, as the CLI's local mode
  EXPECT_EQ(node.gpus(0).memory_total_bytes(), 16 * kGiB);
  EXPECT_EQ(node.gpus(0).shares(), 2u);
  EXPECT_TRUE(node.gpus(0).healthy());
  EXPECT_EQ(node.gpus(0).health_reason(), "");
  ASSERT_EQ(node.shares_size(), 2);
  for (const auto& [claim, memory, cores] :
       {std::tuple{"alpha", 8 * kGiB, 30u}, std::tuple{"beta", 4 * kGiB, 70u}}) {
    SCOPED_TRACE(claim);
    const v1::Share* share = share_of(node, claim);
    ASSERT_NE(share, nullptr);
    EXPECT_EQ(share->namespace_(), "tenants");
    EXPECT_EQ(share->claim_uid(), std::string(claim) + "-uid");
    EXPECT_EQ(share->backend(), "quota");
    EXPECT_EQ(share->priority(), "normal");
    EXPECT_EQ(share->source(), "agent");
    EXPECT_EQ(share->policy(), "report");  // no VgpuConfig enforcement: the agent default
    EXPECT_EQ(share->prepared_unix_ms(), kPreparedAt);
    EXPECT_TRUE(fs::is_directory(share->folder()));
    ASSERT_EQ(share->devices_size(), 1);
    EXPECT_EQ(share->devices(0).gpu_uuid(), uuid_);
    EXPECT_FALSE(share->devices(0).memory_unlimited());
    EXPECT_EQ(share->devices(0).memory_limit_bytes(), memory);
    EXPECT_EQ(share->devices(0).cores_request_percent(), cores);
    EXPECT_EQ(share->devices(0).memory_used_bytes(), 0u);
    EXPECT_EQ(share->processes_size(), 0);
  }
  {
    grpc::ClientContext context;
    v1::GetShareRequest request;
    request.set_share("tenants/beta");
    v1::Share beta;
    ASSERT_TRUE(stub_->GetShare(&context, request, &beta).ok());
    EXPECT_EQ(beta.name(), share_name("beta", "b"));
    EXPECT_EQ(beta.devices(0).memory_limit_bytes(), 4 * kGiB);
  }

  // An XID from the simulated driver: the monitor marks the GPU, the next pass says so.
  const Result<CommandResult> injected =
      run_command(Command({SIMGPU_CTL, "health", "0", "unhealthy"}));
  ASSERT_TRUE(injected.is_ok() && injected->ok());
  v1::Gpu gpu;
  for (int turn = 0; turn < 50; ++turn) {
    monitor_turn();
    gpu = list().gpus(0);
    if (!gpu.healthy()) break;
  }
  EXPECT_FALSE(gpu.healthy());
  EXPECT_EQ(gpu.health_reason(), "xid-79: XID 79: GPU has fallen off the bus");
  server_->poll_once();
  const auto changed = watcher.wait_for(v1::Event::HEALTH_CHANGED);
  ASSERT_TRUE(changed);
  EXPECT_EQ(changed->gpu_uuid(), uuid_);
  EXPECT_EQ(changed->fields().at("healthy"), "false");
  EXPECT_EQ(changed->fields().at("reason"), "xid-79: XID 79: GPU has fallen off the bus");

  ASSERT_EQ(manager_->unprepare({"tenants", "alpha-uid", "alpha"}).message(), "");
  server_->poll_once();
  const auto unprepared = watcher.wait_for(v1::Event::UNPREPARED, share_name("alpha", "a"));
  ASSERT_TRUE(unprepared);
  EXPECT_EQ(unprepared->claim(), "alpha");
  EXPECT_EQ(list().shares_size(), 1);
  grpc::ClientContext context;
  v1::GetShareRequest request;
  request.set_share("tenants/alpha");
  v1::Share gone;
  EXPECT_EQ(stub_->GetShare(&context, request, &gone).error_code(), grpc::StatusCode::NOT_FOUND);

  // Sequences without gaps, in the order things happened.
  const std::vector<v1::Event> events = watcher.events();
  for (size_t i = 1; i < events.size(); ++i)
    EXPECT_EQ(events[i].sequence(), events[i - 1].sequence() + 1);
}

TEST_F(NodeApiOnASimulatedNode, AnAllocationPastTheLimitIsDeniedAndTheUsageIsTheSimulators) {
  if (std::string(MEMORY_FILL).empty()) GTEST_SKIP() << "built without samples";
  Watcher watcher(server_->socket());
  ASSERT_EQ(manager_->prepare({"tenants", "alpha-uid", "alpha"}).status().message(), "");
  server_->poll_once();
  const std::string alpha = share_name("alpha", "a");
  ASSERT_TRUE(watcher.wait_for(v1::Event::PREPARED, alpha));

  // 256Mi chunks until the first refusal, which ends the fill (--no-fine); the memory is held.
  Child fill(base_, (base_ / "state" / "shares" / alpha).string(),
             {MEMORY_FILL, "--chunk", "256Mi", "--no-fine", "--hold-seconds", "8"});
  std::optional<v1::Event> denied;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!denied && std::chrono::steady_clock::now() < deadline) {
    clock_.advance(std::chrono::milliseconds(100));
    server_->poll_once();
    for (const v1::Event& event : watcher.events())
      if (event.kind() == v1::Event::ALLOCATION_DENIED) denied = event;
    std::this_thread::sleep_for(milliseconds(20));
  }
  ASSERT_TRUE(denied) << "no ALLOCATION_DENIED event";
  EXPECT_EQ(denied->share(), alpha);
  EXPECT_EQ(denied->claim(), "alpha");
  EXPECT_EQ(denied->fields().at("denied"), "1");
  ASSERT_TRUE(fill.running());

  const Result<CommandResult> simulator = run_command(Command({SIMGPU_CTL, "status"}));
  ASSERT_TRUE(simulator.is_ok() && simulator->ok());
  const json status = json::parse(simulator->output);
  uint64_t fill_bytes = 0;
  for (const json& process : status["devices"][0]["processes"])
    if (process["pid"] == fill.pid()) fill_bytes = process["memory_bytes"];
  const v1::ListSharesResponse node = list();
  const v1::Share* share = share_of(node, "alpha");
  ASSERT_NE(share, nullptr);
  std::printf("FIGURE share alpha: local API %llu B, simulator %llu B; GPU used %llu B\n",
              static_cast<unsigned long long>(share->devices(0).memory_used_bytes()),
              static_cast<unsigned long long>(fill_bytes),
              static_cast<unsigned long long>(node.gpus(0).memory_used_bytes()));
  // 500Mi of context and 30 chunks: the 31st would pass the 8Gi limit.
  EXPECT_EQ(share->devices(0).memory_used_bytes(), kContextOverhead + 30 * 256 * kMiB);
  EXPECT_NEAR(static_cast<double>(share->devices(0).memory_used_bytes()),
              static_cast<double>(fill_bytes), kPage);
  EXPECT_EQ(node.gpus(0).memory_used_bytes(),
            status["devices"][0]["memory_used_bytes"].get<uint64_t>());
  EXPECT_EQ(share->allocations_denied(), 1u);
  EXPECT_EQ(share->devices(0).allocations_denied(), 1u);
  ASSERT_EQ(share->processes_size(), 1);
  const v1::Process& process = share->processes(0);
  EXPECT_EQ(process.host_pid(), fill.pid());
  EXPECT_EQ(process.pid(), fill.pid());  // one pid namespace here
  EXPECT_EQ(process.command(), "memory-fill");
  ASSERT_EQ(process.memory_bytes_size(), 1);
  EXPECT_EQ(process.memory_bytes(0), share->devices(0).memory_used_bytes());
  // A pass with nothing new denied says nothing more.
  const size_t before = watcher.events().size();
  server_->poll_once();
  server_->poll_once();
  std::this_thread::sleep_for(milliseconds(100));
  for (size_t i = before; i < watcher.events().size(); ++i)
    EXPECT_NE(watcher.events()[i].kind(), v1::Event::ALLOCATION_DENIED);
}

TEST_F(NodeApiOnASimulatedNode, AShimRefusalIsAnEventOnTheClaimsPod) {
  if (std::string(MEMORY_FILL).empty()) GTEST_SKIP() << "built without samples";
  testing::FakeApiServer apiserver;
  kube::HttpKubeClient client(apiserver.connection());
  kube::EventRecorderOptions recording;
  recording.component = kEventComponent;
  recording.host = "node-a";
  const kube::WallTime wall_at_start(std::chrono::seconds(1796562000));
  const Clock::time_point clock_at_start = clock_.now();
  recording.now = [&] {
    return wall_at_start + std::chrono::duration_cast<std::chrono::system_clock::duration>(
                               clock_.now() - clock_at_start);
  };
  kube::EventRecorder recorder(client, recording);
  PodEvents pod_events(recorder, [this](const std::string& share) {
    return share_event_objects(manager_->checkpoint(), share);
  });
  events_.set_observer([&](const v1::Event& event) { pod_events.observe(event); });

  ASSERT_EQ(manager_->prepare({"tenants", "alpha-uid", "alpha"}).status().message(), "");
  server_->poll_once();
  const std::string alpha = share_name("alpha", "a");
  const std::vector<kube::ObjectReference> objects =
      share_event_objects(manager_->checkpoint(), alpha);
  ASSERT_EQ(objects.size(), 1u);
  Child fill(base_, (base_ / "state" / "shares" / alpha).string(),
             {MEMORY_FILL, "--chunk", "256Mi", "--no-fine", "--hold-seconds", "8"});
  std::vector<json> stored;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (stored.empty() && std::chrono::steady_clock::now() < deadline) {
    clock_.advance(std::chrono::milliseconds(100));
    server_->poll_once();
    recorder.flush();
    stored = apiserver.stored_events("tenants");
    std::this_thread::sleep_for(milliseconds(20));
  }
  events_.set_observer(nullptr);
  ASSERT_EQ(stored.size(), 1u) << "no Event in the stand-in";
  const json& event = stored[0];
  EXPECT_EQ(event["involvedObject"], objects[0].to_json());
  EXPECT_EQ(event["reason"], "GpuMemoryRefused");
  EXPECT_EQ(event["type"], "Warning");
  EXPECT_EQ(event["count"], 1);
  EXPECT_EQ(event["message"], "GPU memory allocation refused: it would take the share " + alpha +
                                  " on GPU " + uuid_ + " past its memory limit");
  EXPECT_EQ(event["source"]["host"], "node-a");
  EXPECT_FALSE(event["metadata"].value("uid", "").empty());  // the server's
  EXPECT_EQ(recorder.failed(), 0u);
  std::printf("FIGURE event on %s %s/%s: %s\n", objects[0].kind.c_str(),
              objects[0].namespace_name.c_str(), objects[0].name.c_str(),
              event["message"].get<std::string>().c_str());
}

}  // namespace
}  // namespace tessera::agent
