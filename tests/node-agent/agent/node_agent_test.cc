// The whole node agent as kubelet and the API server see it: NodeAgent behind the real plugin
// sockets, a kubelet simulator (gRPC over the unix sockets, both DRA versions and the health
// stream), a local HTTPS API server, the simulated GPU's NVML, and recording doubles of the MPS
// control program and nvidia-smi.
#include "agent/node_agent.h"
#include "devices/device_monitor.h"
#include "devices/resource_slices.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>
#include <tuple>

#include <gtest/gtest.h>
#include <httplib.h>  // the metrics endpoint's client

#include "allocator/allocator.h"
#include "apiserver/claim_fixture.h"
#include "apiserver/fake_api_server.h"
#include "backend_doubles.h"
#include "backends/mps_backend.h"
#include "captured_log.h"
#include "clock/clock.h"
#include "enforcement/tenant_process.h"
#include "mig/nvml_mig_driver.h"
#include "plugin/plugin_server.h"
#include "plugin/test_support.h"
#include "share/checkpoint.h"
#include "share/fake_driver.h"
#include "share/share_manager.h"
#include "tessera/kube/http_kube_client.h"
#include "tessera/share_region.h"
#include "test_node_config.h"

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::FakeApiServer;
using testing::KubeletSimulator;
using testing::make_claim;
using testing::opaque_config;
using testing::RecordingDoubles;
namespace dra1 = testing::dra1;
namespace dra1b1 = testing::dra1b1;

// KubeletSimulator asks for claim "claim-<uid>" in namespace "ns-<uid>".
constexpr char kQuotaUid[] = "b1111111-0000-4000-8000-000000000001";
constexpr char kMpsUid[] = "b2222222-0000-4000-8000-000000000002";
constexpr char kReplacedUid[] = "b3333333-0000-4000-8000-000000000003";

extern "C" char** environ;

// A tessera-node-agent process as its DaemonSet pod runs it (this test's flags, its pod's UID),
// stopped with SIGTERM as kubelet stops a pod; its output goes to `log`.
class AgentProcess {
 public:
  AgentProcess(const AgentConfig& config, const std::string& pod_uid, const fs::path& log) {
    std::vector<std::string> args{NODE_AGENT,
                                  "--node-name",
                                  config.node_name,
                                  "--state-dir",
                                  config.state_dir,
                                  "--kubelet-registry-dir",
                                  config.kubelet_registry_dir,
                                  "--kubelet-plugins-dir",
                                  config.kubelet_plugins_dir,
                                  "--cdi-dir",
                                  config.cdi_dir,
                                  "--kubeconfig",
                                  config.kubeconfig,
                                  "--mps-control",
                                  config.mps_control,
                                  "--nvidia-smi",
                                  config.nvidia_smi,
                                  "--shim-path",
                                  config.shim_path,
                                  "--driver-root",
                                  config.driver_root,
                                  "--toolkit-spec-dirs",
                                  config.toolkit_spec_dirs,
                                  "--reconcile-interval",
                                  "1",
                                  "--device-poll-interval",
                                  "1",
                                  "--pod-uid",
                                  pod_uid,
                                  "--metrics-address",
                                  config.metrics_address};
    if (!config.mps_daemon_cgroup.empty())
      args.insert(args.end(), {"--mps-daemon-cgroup", config.mps_daemon_cgroup});
    if (config.mig_strategy != "none")
      args.insert(args.end(), {"--mig-strategy", config.mig_strategy, "--resource-slice-shape",
                               config.resource_slice_shape, "--proc-root", config.proc_root});
    if (config.allow_mig_mode_change) args.push_back("--allow-mig-mode-change");
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    // Its own process group, as a container's processes: kill_container() ends all of it.
    posix_spawnattr_t attributes;
    posix_spawnattr_init(&attributes);
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attributes, 0);
    const int spawned = posix_spawn(&pid_, NODE_AGENT, &actions, &attributes, argv.data(), environ);
    posix_spawnattr_destroy(&attributes);
    posix_spawn_file_actions_destroy(&actions);
    if (spawned != 0) pid_ = -1;
    EXPECT_EQ(spawned, 0) << std::strerror(spawned);
  }
  ~AgentProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  AgentProcess(const AgentProcess&) = delete;
  AgentProcess& operator=(const AgentProcess&) = delete;

  // SIGTERM, then its exit status (128 + the signal when one ended it).
  int stop() {
    if (pid_ <= 0) return -1;
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  bool running() const { return pid_ > 0 && waitpid(pid_, nullptr, WNOHANG) == 0; }
  // Waits up to 30 s for it to end by itself: its exit status (128 + the signal when one ended
  // it), or -1 while it still runs.
  int wait_exit() {
    for (int i = 0; pid_ > 0 && i < 1500; ++i) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }
  // SIGKILL to its whole process group (a liveness failure, an OOM kill): true when it ended so.
  bool kill_container() {
    if (pid_ <= 0 || kill(-pid_, SIGKILL) != 0) return false;
    int status = 0;
    const bool reaped = waitpid(pid_, &status, 0) == pid_;
    pid_ = -1;
    return reaped && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

// Whether `path` became a socket within 30 s (an agent registers once it has started).
bool wait_for_socket(const fs::path& path) {
  for (int i = 0; i < 1500; ++i) {
    if (fs::is_socket(path)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// Whether a server accepts connections on the unix socket `path` within 30 s (a socket file left
// by a killed agent refuses them).
bool wait_for_server(const fs::path& path) {
  for (int i = 0; i < 1500; ++i) {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path.c_str(), sizeof address.sun_path - 1);
    const bool accepted =
        fd >= 0 && connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0;
    if (fd >= 0) close(fd);
    if (accepted) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

size_t occurrences(const std::string& text, const std::string& what) {
  size_t count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++count;
  return count;
}

// GPU 0 of the simulated machine as `simgpu-ctl mig list 0` shows it through the simulated NVML
// (MIG mode, GPU instances with their placement and compute instances); null when it failed.
json simulated_mig() {
  const std::string command = std::string(SIMGPU_CTL) + " mig list 0";
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return nullptr;
  std::string out;
  char buffer[512];
  while (std::fgets(buffer, sizeof buffer, pipe)) out += buffer;
  if (pclose(pipe) != 0) return nullptr;
  return json::parse(out, nullptr, false);
}

// The dynamic MIG instances' intent records, <state>/mig/*.json, parsed (a torn one as null).
std::vector<json> intent_records(const std::string& state_dir) {
  std::vector<json> records;
  std::error_code ec;
  for (const auto& item : fs::directory_iterator(state_dir + "/mig", ec))
    if (item.path().extension() == ".json")
      records.push_back(json::parse(RecordingDoubles::read(item.path()), nullptr, false));
  return records;
}

class NodeAgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = doubles_.dir() / "node";
    fs::create_directories(base_);
    setenv("SIMGPU_STATE", (base_ / "simgpu.state").c_str(), 1);
    setenv("SIMGPU_DEVICES", "name=NVIDIA H200,memory=143771Mi,sms=132,cc=9.0", 1);
    sockets_ = fs::path("/tmp") / ("na-" + std::to_string(getpid()));
    config_ = testing::test_node_config(api_, base_, sockets_);
    config_.metrics_address = "127.0.0.1:0";  // any free port: tests run side by side

    add_claim(kQuotaUid, {{"a", "gpu-0", "s-a", "8Gi", "30"}, {"b", "gpu-0", "s-b", "4Gi", "70"}});
    add_claim(kMpsUid, {{"m", "gpu-0", "s-m", "2Gi", "20"}},
              json::array({opaque_config("FromClass", {{"apiVersion", "vgpu.tessera.dev/v1alpha1"},
                                                       {"kind", "VgpuConfig"},
                                                       {"sharing", {{"strategy", "MPS"}}}})}));
    // Deleted and created again under the same name: kubelet still asks for the old UID.
    api_.add_claim(std::string("ns-") + kReplacedUid, std::string("claim-") + kReplacedUid,
                   make_claim("claim-x", "c0000000-0000-4000-8000-00000000000c",
                              {{"a", "gpu-0", "s-a", "1Gi", "10"}})
                       .dump());
  }
  void TearDown() override {
    fs::remove(base_ / "simgpu.state");
    fs::remove_all(sockets_);
    unsetenv("SIMGPU_PROC_ROOT");
    unsetenv("TESSERA_TEST_KILL_AT");
  }

  // A simulated H200 with MIG (`mig` "capable": MIG mode off at start, or "on"), its capability
  // files under base_/proc, and the agent on it with dynamic MIG.
  void use_simulated_mig(const std::string& mig) {
    setenv("SIMGPU_DEVICES", ("name=NVIDIA H200,memory=143771Mi,sms=132,cc=9.0,mig=" + mig).c_str(),
           1);
    setenv("SIMGPU_PROC_ROOT", (base_ / "proc").c_str(), 1);
    config_.mig_strategy = "dynamic";
    config_.resource_slice_shape = "split";
    config_.proc_root = (base_ / "proc").string();
  }

  void add_claim(const std::string& uid, const std::vector<testing::FixtureShare>& shares,
                 const json& configs = json::array()) {
    api_.add_claim("ns-" + uid, "claim-" + uid,
                   make_claim("claim-" + uid, uid, shares, configs).dump());
  }

  // The kubelet folders of config_, for a PluginServer in front of the agent under test.
  PluginServerOptions plugin_options() const {
    PluginServerOptions options;
    options.driver_name = vgpu_config::kDriverName;
    options.registry_dir = config_.kubelet_registry_dir;
    options.plugins_dir = config_.kubelet_plugins_dir;
    return options;
  }

  // The agent's loops run on it: the reconcile loop's and the device monitor's intervals pass when
  // a test advances it. Outlives the agents (declared before them in each test).
  SimulatedClock clock_;
  RecordingDoubles doubles_;
  fs::path base_, sockets_;
  FakeApiServer api_;
  AgentConfig config_;
};

TEST_F(NodeAgentTest, KubeletPreparesAndUnpreparesThroughTheAgent) {
  NodeAgent agent(config_, clock_);
  ASSERT_EQ(agent.start().message(), "");
  PluginServer server(plugin_options(), agent.preparer(), &agent.health());
  ASSERT_EQ(server.start().message(), "");

  // The node's GPU was published before kubelet could ask for anything.
  const auto slices = api_.stored_slices();
  ASSERT_EQ(slices.size(), 1u);
  const json& slice = slices.begin()->second;
  EXPECT_EQ(slice["spec"]["pool"]["name"], "node-a");
  ASSERT_EQ(slice["spec"]["devices"].size(), 1u);
  EXPECT_EQ(slice["spec"]["devices"][0]["name"], "gpu-0");
  EXPECT_EQ(slice["spec"]["devices"][0]["capacity"]["memory"]["value"],
            "150754820096");  // 143771Mi

  KubeletSimulator kubelet(server.registration_socket());
  kubelet.connect();

  // v1: a batch with a two-share claim and a replaced one; each claim gets its own answer.
  dra1::NodePrepareResourcesResponse prepared;
  ASSERT_TRUE(kubelet.prepare_v1({kQuotaUid, kReplacedUid}, &prepared).ok());
  const auto& quota = prepared.claims().at(kQuotaUid);
  ASSERT_EQ(quota.error(), "");
  ASSERT_EQ(quota.devices_size(), 2);
  EXPECT_EQ(quota.devices(0).share_id(), "s-a");
  EXPECT_EQ(quota.devices(1).share_id(), "s-b");
  EXPECT_EQ(quota.devices(0).cdi_device_ids(0),
            std::string("k8s.vgpu.tessera.dev/claim=") + kQuotaUid + "-gpu-0-s-a");
  // The agent measures the shares' GPU time (the shim in a container cannot).
  const std::string limits_bytes =
      RecordingDoubles::read(config_.state_dir + "/shares/" + kQuotaUid + "-gpu-0-s-a/limits");
  ASSERT_EQ(limits_bytes.size(), sizeof(share::LimitsPage));
  share::LimitsPage page;
  std::memcpy(static_cast<void*>(&page), limits_bytes.data(), sizeof page);
  EXPECT_EQ(page.measure_source.load(), share::kMeasureAgent);
  EXPECT_NE(prepared.claims().at(kReplacedUid).error().find("claim was replaced"),
            std::string::npos)
      << prepared.claims().at(kReplacedUid).error();

  // v1beta1: an MPS share gets its daemon with the share's limit.
  dra1b1::NodePrepareResourcesResponse prepared_beta;
  ASSERT_TRUE(kubelet.prepare_v1beta1({kMpsUid}, &prepared_beta).ok());
  ASSERT_EQ(prepared_beta.claims().at(kMpsUid).error(), "");
  MpsOptions mps_options;
  mps_options.control = config_.mps_control;
  mps_options.root = config_.state_dir + "/mps";
  MpsBackend mps(mps_options);
  EXPECT_EQ(mps.inspect(std::string(kMpsUid) + "-gpu-0-s-m").active_thread_percentage, 20.0);

  // The reconcile loop repairs a share folder deleted by hand within its interval.
  const std::string share_a = config_.state_dir + "/shares/" + kQuotaUid + "-gpu-0-s-a";
  fs::remove_all(share_a);
  EXPECT_EQ(agent.reconcile_passes(), 0u);  // the interval has not passed yet
  clock_.advance(std::chrono::seconds(config_.reconcile_interval_s));
  ASSERT_TRUE(agent.wait_for_reconcile_passes(1));
  EXPECT_TRUE(fs::exists(share_a + "/limits"));

  // ...and the API side: slices deleted by someone else are published again.
  api_.delete_slices();
  clock_.advance(std::chrono::seconds(config_.reconcile_interval_s));
  ASSERT_TRUE(agent.wait_for_reconcile_passes(2));
  ASSERT_EQ(api_.stored_slices().size(), 1u);
  EXPECT_EQ(api_.stored_slices().begin()->second["spec"]["devices"][0]["name"], "gpu-0");

  // Health: the GPU is reported Healthy, and Unhealthy once the driver raises an XID for it.
  grpc::ClientContext watch;
  watch.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto stream = kubelet.health().NodeWatchResources(&watch, v1alpha1::NodeWatchResourcesRequest{});
  v1alpha1::NodeWatchResourcesResponse health;
  ASSERT_TRUE(stream->Read(&health));
  ASSERT_EQ(health.devices_size(), 1);
  EXPECT_EQ(health.devices(0).device().pool_name(), "node-a");
  EXPECT_EQ(health.devices(0).device().device_name(), "gpu-0");
  EXPECT_EQ(health.devices(0).health(), v1alpha1::HEALTHY);
  ASSERT_EQ(std::system((std::string(SIMGPU_CTL) + " health 0 unhealthy").c_str()), 0);
  clock_.advance(DeviceMonitorOptions{}.poll_interval);  // the monitor's turn that collects it
  bool unhealthy = false;
  while (!unhealthy && stream->Read(&health))
    unhealthy = health.devices_size() == 1 && health.devices(0).health() == v1alpha1::UNHEALTHY;
  EXPECT_TRUE(unhealthy);
  EXPECT_EQ(health.devices(0).message(), "XID 79: GPU has fallen off the bus");
  watch.TryCancel();
  // ...and the scheduler learns it too: the slice is republished (next generation) with the
  // device's taint, which the API server accepted and stamped.
  // Looked up by pointer: a const json's operator[] on a key the slice lacks (the taint before the
  // republish) is undefined behaviour, not null.
  const json::json_pointer taints_path("/spec/devices/0/taints");
  json taints;
  for (const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
       std::chrono::steady_clock::now() < deadline && !taints.is_array();
       std::this_thread::sleep_for(std::chrono::milliseconds(10))) {
    const auto stored = api_.stored_slices();
    if (stored.size() == 1 && stored.begin()->second.contains(taints_path))
      taints = stored.begin()->second.at(taints_path);
  }
  ASSERT_TRUE(taints.is_array()) << "the slice was not republished with a taint";
  ASSERT_EQ(taints.size(), 1u);
  EXPECT_EQ(taints[0]["key"], "vgpu.tessera.dev/unhealthy");
  EXPECT_EQ(taints[0]["value"], "xid-79");
  EXPECT_EQ(taints[0]["effect"], "NoSchedule");
  EXPECT_TRUE(taints[0]["timeAdded"].is_string());

  // Unprepare in both versions leaves nothing behind.
  dra1::NodeUnprepareResourcesResponse unprepared;
  ASSERT_TRUE(kubelet.unprepare_v1({kQuotaUid, kReplacedUid}, &unprepared).ok());
  EXPECT_EQ(unprepared.claims().at(kQuotaUid).error(), "");
  EXPECT_EQ(unprepared.claims().at(kReplacedUid).error(), "");
  dra1b1::NodeUnprepareResourcesResponse unprepared_beta;
  ASSERT_TRUE(kubelet.unprepare_v1beta1({kMpsUid}, &unprepared_beta).ok());
  EXPECT_EQ(unprepared_beta.claims().at(kMpsUid).error(), "");
  EXPECT_TRUE(fs::is_empty(config_.state_dir + "/shares"));
  EXPECT_TRUE(fs::is_empty(config_.cdi_dir));
  EXPECT_TRUE(mps.share_folders().empty());
  EXPECT_NE(doubles_.calls().find("  quit \n"), std::string::npos);

  server.stop();
  agent.stop();
}

// `tessera-node-agent --print-resource-slices`: the dry run admins (and the GPU checks) use.
// The webhook refuses this claim at apply time; created around it (or before the class got its
// bounds), kubelet's prepare through the agent gives the share the admin's bounds: the class's
// kill, its highest priority and largest compute limit, and the node's --tenant-max-memory-limit.
// --mig-strategy dynamic on a GPU without MIG (this simulated H200 is not MIG-capable): the GPU is
// published whole, with type "gpu", and no counter set; a strategy or shape the agent does not
// know stops the start naming the flag.
TEST_F(NodeAgentTest, DynamicMigOnAGpuWithoutMigPublishesItWhole) {
  config_.mig_strategy = "dynamic";
  config_.resource_slice_shape = "split";
  {
    NodeAgent agent(config_, clock_);
    ASSERT_EQ(agent.start().message(), "");
    const auto slices = api_.stored_slices();
    ASSERT_EQ(slices.size(), 1u);
    const json& spec = slices.begin()->second["spec"];
    EXPECT_FALSE(spec.contains("sharedCounters"));
    ASSERT_EQ(spec["devices"].size(), 1u);
    EXPECT_EQ(spec["devices"][0]["name"], "gpu-0");
    EXPECT_EQ(spec["devices"][0]["attributes"]["type"]["string"], "gpu");
    EXPECT_FALSE(spec["devices"][0].contains("consumesCounters"));
  }
  for (const auto& [strategy, shape, flag] :
       {std::tuple{"mixed", "split", "--mig-strategy \"mixed\""},
        std::tuple{"dynamic", "v1beta1", "--resource-slice-shape \"v1beta1\""}}) {
    AgentConfig bad = config_;
    bad.state_dir = (base_ / "state-bad").string();
    bad.mig_strategy = strategy;
    bad.resource_slice_shape = shape;
    NodeAgent agent(bad, clock_);
    const Status refused = agent.start();
    EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(refused.message().find(flag), std::string::npos) << refused.message();
  }
}

// The device monitor asks for the published devices at every turn; with --mig-strategy static the
// MIG view (an NVML session and a walk of each GPU's instances) is read at start and again only
// when the layout can have changed: here an XID event on the GPU (a device event), not the turns
// in between.
TEST_F(NodeAgentTest, TheMigViewIsReadAgainOnlyWhenTheLayoutCanHaveChanged) {
  setenv("SIMGPU_DEVICES", "name=NVIDIA H200,memory=143771Mi,sms=132,cc=9.0,mig=on", 1);
  ASSERT_EQ(std::system((std::string(SIMGPU_CTL) + " mig create 0 3g.71gb >/dev/null").c_str()), 0);
  config_.mig_strategy = "static";
  config_.reconcile_interval_s = 0;  // only the device monitor asks
  NodeAgent agent(config_, clock_);
  ASSERT_EQ(agent.start().message(), "");
  const uint64_t at_start = agent.mig_inspections();
  EXPECT_GT(at_start, 0u);
  for (uint64_t turn = 1; turn <= 5; ++turn) {  // inventory turns too (every second here)
    clock_.advance(std::chrono::seconds(1));
    ASSERT_TRUE(agent.wait_for_device_turns(turn));
  }
  EXPECT_EQ(agent.mig_inspections(), at_start) << "the turns read the MIG view again";
  ASSERT_EQ(std::system((std::string(SIMGPU_CTL) + " health 0 unhealthy").c_str()), 0);
  clock_.advance(std::chrono::seconds(1));
  ASSERT_TRUE(agent.wait_for_device_turns(6));
  EXPECT_GT(agent.mig_inspections(), at_start) << "a device event leaves the view as it was";
  const uint64_t after_event = agent.mig_inspections();
  clock_.advance(std::chrono::seconds(1));
  ASSERT_TRUE(agent.wait_for_device_turns(7));
  clock_.advance(std::chrono::seconds(1));
  ASSERT_TRUE(agent.wait_for_device_turns(8));
  EXPECT_EQ(agent.mig_inspections(), after_event);
}

// Dynamic MIG on a MIG-capable simulated H200 (MIG mode off at start), end to end: the agent
// publishes the GPU's devices and counter set, kube-scheduler's allocator (tests/support/allocator)
// allocates a claim for a whole 3g instance and two claims for shares inside the other 3g instance
// and refuses an overlapping one, kubelet prepares them through the plugin's gRPC (the agent turns
// MIG mode on and creates both instances at the allocated placements, the CDI specs carry the
// simulated capability nodes and the MIG UUID), and unprepare destroys what prepare created.
TEST_F(NodeAgentTest, DynamicMigOnTheSimulatedGpuThroughTheAllocatorAndTheKubeletPlugin) {
  setenv("SIMGPU_DEVICES", "name=NVIDIA H200,memory=143771Mi,sms=132,cc=9.0,mig=capable", 1);
  setenv("SIMGPU_PROC_ROOT", (base_ / "proc").c_str(), 1);
  config_.mig_strategy = "dynamic";
  config_.allow_mig_mode_change = true;
  config_.resource_slice_shape = "split";
  config_.proc_root = (base_ / "proc").string();
  NodeAgent agent(config_, clock_);
  ASSERT_EQ(agent.start().message(), "");
  PluginServer server(plugin_options(), agent.preparer(), &agent.health());
  ASSERT_EQ(server.start().message(), "");

  ::tessera::testing::allocator::AllocatorInput input;
  GpuInfo gpu;
  for (const auto& [name, slice] : api_.stored_slices()) {
    input.slices.push_back(slice);
    for (const json& device : slice["spec"].value("devices", json::array()))
      if (device["name"] == "gpu-0") gpu.uuid = device["attributes"]["uuid"]["string"];
  }
  ASSERT_EQ(input.slices.size(), 2u);  // the counter set's, the devices'
  ASSERT_FALSE(gpu.uuid.empty());
  gpu.memory_bytes = 143771ull << 20;
  // The chart's MIG class (charts/tessera/templates/deviceclasses.yaml).
  input.device_classes = {
      {{"metadata", {{"name", "mig.vgpu.tessera.dev"}}},
       {"spec",
        {{"selectors",
          {{{"cel",
             {{"expression",
               "device.driver == \"vgpu.tessera.dev\" && "
               "device.attributes[\"vgpu.tessera.dev\"].type == \"mig\""}}}}}}}}}};
  input.node_name = "node-a";
  // Through the MIG class, a MIG device of the profile's memory (71168Mi: the 3g and 4g instances).
  auto allocate = [&](const std::string& uid, const std::string& memory,
                      json capacity) -> Result<json> {
    json exactly = {
        {"deviceClassName", "mig.vgpu.tessera.dev"},
        {"allocationMode", "ExactCount"},
        {"count", 1},
        {"selectors",
         {{{"cel",
            {{"expression", "device.capacity[\"vgpu.tessera.dev\"].memory.compareTo(quantity(\"" +
                                memory + "\")) == 0"}}}}}}};
    if (!capacity.empty()) exactly["capacity"] = {{"requests", capacity}};
    json claim = {
        {"apiVersion", "resource.k8s.io/v1"},
        {"kind", "ResourceClaim"},
        {"metadata", {{"name", "claim-" + uid}, {"namespace", "ns-" + uid}, {"uid", uid}}},
        {"spec", {{"devices", {{"requests", {{{"name", "gpu"}, {"exactly", exactly}}}}}}}}};
    TESSERA_ASSIGN_OR_RETURN(json allocated,
                             ::tessera::testing::allocator::allocated(input, claim));
    allocated["status"]["reservedFor"] = {
        {{"resource", "pods"}, {"name", "pod-" + uid}, {"uid", "pod-uid-" + uid}}};
    input.allocated_claims.push_back(allocated);
    api_.add_claim("ns-" + uid, "claim-" + uid, allocated.dump());
    return allocated;
  };
  const std::string whole = "d1000000-0000-4000-8000-000000000001";
  const std::string first = "d2000000-0000-4000-8000-000000000002";
  const std::string second = "d3000000-0000-4000-8000-000000000003";
  std::map<std::string, std::string> devices;
  for (const auto& [uid, capacity] :
       {std::pair{whole, json{{"cores", "100"}}},
        std::pair{first, json{{"memory", "20Gi"}, {"cores", "30"}}},
        std::pair{second, json{{"memory", "20Gi"}, {"cores", "30"}}}}) {
    Result<json> allocated = allocate(uid, "71168Mi", capacity);
    ASSERT_TRUE(allocated.is_ok()) << allocated.status().message();
    devices[uid] = (*allocated)["status"]["allocation"]["devices"]["results"][0]["device"];
  }
  EXPECT_EQ(devices[whole], "gpu-0-mig-3g71gb-0");
  EXPECT_EQ(devices[first], "gpu-0-mig-3g71gb-4");
  EXPECT_EQ(devices[second], "gpu-0-mig-3g71gb-4");
  Result<json> overlapping = allocate("d9000000-0000-4000-8000-000000000009", "16384Mi", {});
  ASSERT_FALSE(overlapping.is_ok());
  EXPECT_NE(overlapping.status().message().find("of counter set gpu-0-counters"), std::string::npos)
      << overlapping.status().message();

  KubeletSimulator kubelet(server.registration_socket());
  kubelet.connect();
  dra1::NodePrepareResourcesResponse prepared;
  ASSERT_TRUE(kubelet.prepare_v1({whole, first, second}, &prepared).ok());
  for (const std::string& uid : {whole, first, second})
    EXPECT_EQ(prepared.claims().at(uid).error(), "") << uid;
  NvmlMigDriver nvml;
  Result<MigGpu> state = nvml.inspect(gpu);
  ASSERT_TRUE(state.is_ok()) << state.status().message();
  EXPECT_TRUE(state->enabled);
  ASSERT_EQ(state->instances.size(), 2u);
  for (const MigInstance& instance : state->instances) {
    EXPECT_EQ(instance.profile_id, 9u);
    EXPECT_TRUE(instance.ci_id.has_value());
    EXPECT_TRUE(instance.placement == (MigPlacement{0, 4}) ||
                instance.placement == (MigPlacement{4, 4}))
        << instance.placement.start;
  }
  const MigInstance& shared =
      state->instances[0].placement.start == 4 ? state->instances[0] : state->instances[1];
  const json spec = json::parse(
      RecordingDoubles::read(config_.cdi_dir + "/k8s.vgpu.tessera.dev-claim_" + first + ".json"));
  const json& edits = spec["devices"][0]["containerEdits"];
  EXPECT_NE(
      std::find(edits["env"].begin(), edits["env"].end(), "CUDA_VISIBLE_DEVICES=" + shared.uuid),
      edits["env"].end())
      << edits["env"].dump();
  std::vector<std::string> caps;
  for (const json& node : edits["deviceNodes"])
    if (node.contains("major")) caps.push_back(node["path"]);
  const unsigned gi_minor = 3 + 9 * shared.gi_id;  // NVIDIA's numbering, GPU minor 0
  EXPECT_EQ(caps,
            (std::vector<std::string>{
                "/dev/nvidia-caps/nvidia-cap" + std::to_string(gi_minor),
                "/dev/nvidia-caps/nvidia-cap" + std::to_string(gi_minor + 1 + *shared.ci_id)}));

  dra1::NodeUnprepareResourcesResponse unprepared;
  ASSERT_TRUE(kubelet.unprepare_v1({whole, first, second}, &unprepared).ok());
  for (const std::string& uid : {whole, first, second})
    EXPECT_EQ(unprepared.claims().at(uid).error(), "") << uid;
  state = nvml.inspect(gpu);
  ASSERT_TRUE(state.is_ok()) << state.status().message();
  EXPECT_TRUE(state->instances.empty());
  EXPECT_FALSE(fs::exists(config_.state_dir + "/mig") && !fs::is_empty(config_.state_dir + "/mig"));
  unsetenv("SIMGPU_PROC_ROOT");
}

// The agent process killed by SIGKILL while kubelet's prepare of a claim on a dynamic MIG device is
// in flight through the plugin's gRPC: right after NVML created the GPU instance, then (second
// round) right after it created the compute instance, each time before the intent record names
// it (TESSERA_TEST_KILL_AT). Between the kill and the restart the instance is there
// (`simgpu-ctl mig list`), its record says the step it was in, and no CDI spec or share folder
// was handed out. The same agent started again on the same state folder and simulated GPU keeps
// the instance while its claim is being prepared; kubelet's retried prepare adopts it (no second
// one) and completes, a second prepare answers the same, and unprepare leaves no instance, record,
// spec or folder. After the second kill kubelet gives up first (unprepare): the half-made instance
// goes at once, and a new prepare of the same claim creates it afresh.
TEST_F(NodeAgentTest, AnAgentKilledRightAfterNvmlCreatedItsMigInstanceLeaksNothingWhenRestarted) {
  use_simulated_mig("on");
  const std::string uid = "e1000000-0000-4000-8000-000000000001";
  api_.add_claim("ns-" + uid, "claim-" + uid,
                 testing::written_claim("claim-" + uid, uid,
                                        {{"gpu", "gpu-0-mig-2g35gb-2", "s1", "8Gi", "20"}})
                     .dump());
  const std::string pod = "0e0e0e0e-0000-4000-8000-00000000000e";
  const fs::path registration = fs::path(config_.kubelet_registry_dir) /
                                (std::string(vgpu_config::kDriverName) + "-" + pod + "-reg.sock");
  const std::string cdi_spec = config_.cdi_dir + "/" + cdi_spec_file_name(uid);
  const std::string share_folder = config_.state_dir + "/shares/" + uid + "-gpu-0-mig-2g35gb-2-s1";
  const fs::path killed_log = base_ / "killed-agent.log", restarted_log = base_ / "agent.log";
  auto logs = [&] {
    return "killed agent:\n" + RecordingDoubles::read(killed_log) + "restarted agent:\n" +
           RecordingDoubles::read(restarted_log);
  };
  auto instances = [] {
    const json gpu = simulated_mig();
    return gpu.is_object() ? gpu["gpu_instances"] : json();
  };
  auto checkpoint_state = [&] {
    const json saved =
        json::parse(RecordingDoubles::read(config_.state_dir + "/checkpoint.json"), nullptr, false);
    const json::json_pointer state("/claims/" + uid + "/state");
    return saved.is_object() && saved.contains(state) ? saved.at(state).get<std::string>() : "";
  };
  // The claim's CDI spec names the instance the simulated GPU has, by its MIG UUID.
  auto expect_spec_names = [&](const json& instance) {
    const json spec = json::parse(RecordingDoubles::read(cdi_spec), nullptr, false);
    ASSERT_TRUE(spec.is_object()) << cdi_spec;
    const json& env = spec["devices"][0]["containerEdits"]["env"];
    const std::string visible =
        "CUDA_VISIBLE_DEVICES=" + instance["compute_instances"][0]["uuid"].get<std::string>();
    EXPECT_NE(std::find(env.begin(), env.end(), visible), env.end()) << env.dump();
  };

  for (const auto& [kill_at, step, compute_instances] :
       {std::tuple{"after-gpu-instance", "CreatingGpuInstance", 0u},
        std::tuple{"after-compute-instance", "CreatingComputeInstance", 1u}}) {
    SCOPED_TRACE(kill_at);
    const bool retried = std::string(kill_at) == "after-gpu-instance";
    setenv("TESSERA_TEST_KILL_AT", kill_at, 1);
    {
      AgentProcess killed(config_, pod, killed_log);
      unsetenv("TESSERA_TEST_KILL_AT");  // the restarted agent runs without it
      ASSERT_TRUE(wait_for_server(registration)) << logs();
      KubeletSimulator kubelet(registration);
      kubelet.connect();
      dra1::NodePrepareResourcesResponse lost;
      const grpc::Status call = kubelet.prepare_v1({uid}, &lost);
      EXPECT_FALSE(call.ok()) << "the agent answered: " << lost.DebugString();
      EXPECT_EQ(killed.wait_exit(), 128 + SIGKILL) << logs();
    }
    // Killed: the instance NVML made is there, the record says where the prepare stopped, and
    // nothing was handed out.
    json made = instances();
    ASSERT_EQ(made.size(), 1u) << made.dump(2);
    EXPECT_EQ(made[0]["profile"], "2g.35gb");
    EXPECT_EQ(made[0]["placement"], (json{{"start", 2}, {"size", 2}}));
    EXPECT_EQ(made[0]["compute_instances"].size(), compute_instances) << made.dump(2);
    std::vector<json> records = intent_records(config_.state_dir);
    ASSERT_EQ(records.size(), 1u);
    EXPECT_EQ(records[0]["step"], step) << records[0].dump(2);
    EXPECT_EQ(records[0]["users"], json::array({uid + "-gpu-0-mig-2g35gb-2-s1"}));
    EXPECT_FALSE(fs::exists(cdi_spec));
    EXPECT_FALSE(fs::exists(share_folder));
    EXPECT_EQ(checkpoint_state(), "PrepareStarted");

    AgentProcess restarted(config_, pod, restarted_log);
    ASSERT_TRUE(wait_for_server(registration)) << logs();
    EXPECT_EQ(instances().size(), 1u) << "its claim is still being prepared: kept";
    KubeletSimulator kubelet(registration);
    kubelet.connect();
    if (!retried) {
      // Kubelet gave up on the pod: unprepare destroys the half-made instance.
      dra1::NodeUnprepareResourcesResponse unprepared;
      ASSERT_TRUE(kubelet.unprepare_v1({uid}, &unprepared).ok());
      EXPECT_EQ(unprepared.claims().at(uid).error(), "") << logs();
      EXPECT_EQ(instances(), json::array()) << logs();
      EXPECT_TRUE(intent_records(config_.state_dir).empty());
      EXPECT_EQ(checkpoint_state(), "");
    }
    dra1::NodePrepareResourcesResponse prepared;
    ASSERT_TRUE(kubelet.prepare_v1({uid}, &prepared).ok()) << logs();
    ASSERT_EQ(prepared.claims().at(uid).error(), "") << logs();
    const json now = instances();
    ASSERT_EQ(now.size(), 1u) << now.dump(2);
    ASSERT_EQ(now[0]["compute_instances"].size(), 1u) << now.dump(2);
    if (retried) {
      EXPECT_EQ(now[0]["id"], made[0]["id"]) << "adopted, not made again";
    }
    expect_spec_names(now[0]);
    EXPECT_TRUE(fs::exists(share_folder + "/limits"));
    EXPECT_EQ(checkpoint_state(), "PrepareCompleted");
    records = intent_records(config_.state_dir);
    ASSERT_EQ(records.size(), 1u);
    EXPECT_EQ(records[0]["step"], "Ready");
    // A second prepare of the same claim: the same answer, nothing new on the GPU.
    dra1::NodePrepareResourcesResponse again;
    ASSERT_TRUE(kubelet.prepare_v1({uid}, &again).ok());
    EXPECT_EQ(again.claims().at(uid).SerializeAsString(),
              prepared.claims().at(uid).SerializeAsString());
    EXPECT_EQ(instances(), now);

    dra1::NodeUnprepareResourcesResponse unprepared;
    ASSERT_TRUE(kubelet.unprepare_v1({uid}, &unprepared).ok());
    EXPECT_EQ(unprepared.claims().at(uid).error(), "") << logs();
    EXPECT_EQ(instances(), json::array());
    EXPECT_TRUE(intent_records(config_.state_dir).empty());
    EXPECT_TRUE(fs::is_empty(config_.cdi_dir));
    EXPECT_TRUE(fs::is_empty(config_.state_dir + "/shares"));
    EXPECT_EQ(restarted.stop(), 0) << logs();
  }
}

// The agent process killed from outside (SIGKILL to its container) at a moment its prepare has an
// intent record (<state>/mig/*.json), wherever the lifecycle then is: the restarted agent's
// answer to kubelet's retry is one instance at the allocated placement, with its compute instance,
// named by the CDI spec, and unprepare leaves nothing. Each round kills a little later and says in
// the test's output which step the record was in at the kill.
TEST_F(NodeAgentTest, AnAgentKilledWhileItsMigIntentIsRecordedLeaksNothingWhenRestarted) {
  use_simulated_mig("capable");
  config_.allow_mig_mode_change = true;
  const std::string uid = "e2000000-0000-4000-8000-000000000002";
  api_.add_claim("ns-" + uid, "claim-" + uid,
                 testing::written_claim("claim-" + uid, uid,
                                        {{"gpu", "gpu-0-mig-3g71gb-4", "s1", "8Gi", "20"}})
                     .dump());
  const std::string pod = "0f0f0f0f-0000-4000-8000-00000000000f";
  const fs::path registration = fs::path(config_.kubelet_registry_dir) /
                                (std::string(vgpu_config::kDriverName) + "-" + pod + "-reg.sock");
  const fs::path log = base_ / "agent.log";
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    {
      AgentProcess agent(config_, pod, log);
      ASSERT_TRUE(wait_for_server(registration)) << RecordingDoubles::read(log);
      std::thread prepare([&] {
        KubeletSimulator kubelet(registration);
        kubelet.connect();
        dra1::NodePrepareResourcesResponse response;
        (void)kubelet.prepare_v1({uid}, &response);  // answered, or cut off by the kill
      });
      std::vector<json> records;
      for (int i = 0; i < 30000 && records.empty(); ++i) {
        records = intent_records(config_.state_dir);
        if (records.empty()) std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      // Later rounds let the prepare run on a little before the kill (0, 2, then 8 ms).
      std::this_thread::sleep_for(std::chrono::milliseconds(2 * round * round));
      const bool killed = agent.kill_container();
      prepare.join();
      ASSERT_FALSE(records.empty()) << "no intent record appeared\n" << RecordingDoubles::read(log);
      ASSERT_TRUE(killed);
      records = intent_records(config_.state_dir);
      std::cout << "round " << round << ": killed with the record at step "
                << (records.size() == 1 && records[0].is_object() ? records[0].value("step", "?")
                                                                  : "(none)")
                << "; the GPU had " << simulated_mig()["gpu_instances"].size()
                << " GPU instance(s)\n";
    }
    AgentProcess restarted(config_, pod, log);
    ASSERT_TRUE(wait_for_server(registration)) << RecordingDoubles::read(log);
    KubeletSimulator kubelet(registration);
    kubelet.connect();
    dra1::NodePrepareResourcesResponse prepared;
    ASSERT_TRUE(kubelet.prepare_v1({uid}, &prepared).ok());
    ASSERT_EQ(prepared.claims().at(uid).error(), "") << RecordingDoubles::read(log);
    const json gpu = simulated_mig();
    EXPECT_EQ(gpu["mig"], "on");
    const json& made = gpu["gpu_instances"];
    ASSERT_EQ(made.size(), 1u) << gpu.dump(2);
    EXPECT_EQ(made[0]["placement"], (json{{"start", 4}, {"size", 4}}));
    ASSERT_EQ(made[0]["compute_instances"].size(), 1u) << gpu.dump(2);
    const json spec = json::parse(
        RecordingDoubles::read(config_.cdi_dir + "/" + cdi_spec_file_name(uid)), nullptr, false);
    ASSERT_TRUE(spec.is_object());
    const json& env = spec["devices"][0]["containerEdits"]["env"];
    EXPECT_NE(std::find(env.begin(), env.end(),
                        "CUDA_VISIBLE_DEVICES=" +
                            made[0]["compute_instances"][0]["uuid"].get<std::string>()),
              env.end())
        << env.dump();
    dra1::NodeUnprepareResourcesResponse unprepared;
    ASSERT_TRUE(kubelet.unprepare_v1({uid}, &unprepared).ok());
    EXPECT_EQ(unprepared.claims().at(uid).error(), "");
    EXPECT_EQ(simulated_mig()["gpu_instances"], json::array());
    EXPECT_TRUE(intent_records(config_.state_dir).empty());
    EXPECT_TRUE(fs::is_empty(config_.cdi_dir));
    EXPECT_TRUE(fs::is_empty(config_.state_dir + "/shares"));
    EXPECT_EQ(restarted.stop(), 0) << RecordingDoubles::read(log);
  }
}

// Bad claims on the simulated MIG GPU, through the kubelet plugin's gRPC into the agent: an
// allocation naming a profile the GPU does not have, one at a placement off the GPU (start 8 of 8
// memory slices), and a prepare that needs MIG mode turned on (--allow-mig-mode-change) while a
// process holds memory on the GPU. Each answer is the claim's error naming the field and the value
// (or the GPU and the pids in its way); nothing is left half-created: MIG mode and the GPU's
// instances as they were (`simgpu-ctl mig list`), no CDI spec, no share folder, no intent record.
// Once the process has gone the same claim is prepared (MIG mode turned on, its instance made).
// What the simulated GPU cannot be made to do (a published profile or placement NVML then denies,
// a failed NVML call mid-way) is tested against the NVML double: agent.MigInstances*, MigShare*.
TEST_F(NodeAgentTest, BadMigClaimsAreRefusedThroughTheKubeletPluginWithNothingHalfCreated) {
#ifndef HOSTILE_TENANT
  GTEST_SKIP() << "built without samples: no program to hold memory on the GPU";
#else
  use_simulated_mig("capable");
  config_.allow_mig_mode_change = true;
  const std::string unknown_profile = "e3000000-0000-4000-8000-000000000003";
  const std::string off_the_gpu = "e4000000-0000-4000-8000-000000000004";
  const std::string needs_mig_mode = "e5000000-0000-4000-8000-000000000005";
  for (const auto& [uid, device] : {std::pair{unknown_profile, "gpu-0-mig-5g99gb-0"},
                                    std::pair{off_the_gpu, "gpu-0-mig-1g18gb-8"},
                                    std::pair{needs_mig_mode, "gpu-0-mig-3g71gb-0"}})
    api_.add_claim(
        "ns-" + uid, "claim-" + uid,
        testing::written_claim("claim-" + uid, uid, {{"gpu", device, "s1", "8Gi", "20"}}).dump());
  NodeAgent agent(config_, clock_);
  ASSERT_EQ(agent.start().message(), "");
  PluginServer server(plugin_options(), agent.preparer(), &agent.health());
  ASSERT_EQ(server.start().message(), "");
  KubeletSimulator kubelet(server.registration_socket());
  kubelet.connect();
  const json before = simulated_mig();
  ASSERT_EQ(before["mig"], "off") << before.dump(2);
  auto expect_nothing_made = [&](const std::string& uid) {
    EXPECT_EQ(simulated_mig(), before);
    EXPECT_TRUE(intent_records(config_.state_dir).empty());
    EXPECT_FALSE(fs::exists(config_.cdi_dir + "/" + cdi_spec_file_name(uid)));
    EXPECT_TRUE(fs::is_empty(config_.state_dir + "/shares"));
  };

  for (const auto& [uid, device] : {std::pair{unknown_profile, "gpu-0-mig-5g99gb-0"},
                                    std::pair{off_the_gpu, "gpu-0-mig-1g18gb-8"}}) {
    SCOPED_TRACE(device);
    dra1::NodePrepareResourcesResponse prepared;
    ASSERT_TRUE(kubelet.prepare_v1({uid}, &prepared).ok());
    EXPECT_EQ(prepared.claims().at(uid).error(),
              "ResourceClaim ns-" + uid + "/claim-" + uid +
                  ": status.allocation.devices.results[0]: unknown device " + device +
                  " in pool node-a");
    EXPECT_EQ(prepared.claims().at(uid).devices_size(), 0);
    expect_nothing_made(uid);
    const json saved = json::parse(RecordingDoubles::read(config_.state_dir + "/checkpoint.json"),
                                   nullptr, false);  // none yet: no claim was ever prepared
    EXPECT_FALSE(saved.is_object() && saved.contains(json::json_pointer("/claims/" + uid)))
        << saved.dump(2);
  }

  // A process on the whole GPU (MIG mode off): the mode is not changed under it.
  int out[2];
  ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
  testing::TenantProcess holder;
  holder.out = out[0];
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  std::vector<std::string> args{HOSTILE_TENANT, "--attack", "none", "--bytes",
                                std::to_string(1ull << 30)};
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  ASSERT_EQ(posix_spawn(&holder.pid, HOSTILE_TENANT, &actions, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  ASSERT_EQ(holder.line(std::chrono::seconds(30)).rfind("held 1073741824", 0), 0u);
  const json holding = simulated_mig();
  dra1::NodePrepareResourcesResponse refused;
  ASSERT_TRUE(kubelet.prepare_v1({needs_mig_mode}, &refused).ok());
  const std::string error = refused.claims().at(needs_mig_mode).error();
  EXPECT_EQ(error, "share " + needs_mig_mode + "-gpu-0-mig-3g71gb-0-s1: MIG mode of GPU " +
                       before["uuid"].get<std::string>() +
                       " cannot be turned on while processes run on it (pids " +
                       std::to_string(holder.pid) + ")");
  EXPECT_EQ(refused.claims().at(needs_mig_mode).devices_size(), 0);
  EXPECT_EQ(simulated_mig(), holding);
  EXPECT_EQ(simulated_mig()["mig"], "off");
  expect_nothing_made(needs_mig_mode);
  kill(holder.pid, SIGKILL);
  waitpid(holder.pid, nullptr, 0);
  holder.pid = 0;

  // Nothing in the way any more: kubelet's retry prepares the claim, its unprepare undoes it.
  dra1::NodePrepareResourcesResponse prepared;
  ASSERT_TRUE(kubelet.prepare_v1({needs_mig_mode}, &prepared).ok());
  ASSERT_EQ(prepared.claims().at(needs_mig_mode).error(), "");
  const json after = simulated_mig();
  EXPECT_EQ(after["mig"], "on");
  ASSERT_EQ(after["gpu_instances"].size(), 1u) << after.dump(2);
  EXPECT_EQ(after["gpu_instances"][0]["placement"], (json{{"start", 0}, {"size", 4}}));
  dra1::NodeUnprepareResourcesResponse unprepared;
  ASSERT_TRUE(kubelet.unprepare_v1({needs_mig_mode}, &unprepared).ok());
  EXPECT_EQ(unprepared.claims().at(needs_mig_mode).error(), "");
  EXPECT_EQ(simulated_mig()["gpu_instances"], json::array());
  EXPECT_TRUE(intent_records(config_.state_dir).empty());
  EXPECT_TRUE(fs::is_empty(config_.cdi_dir));
  server.stop();
  agent.stop();
#endif
}

// A crash point the agent does not know stops its start, naming the variable and the value.
TEST_F(NodeAgentTest, AnUnknownTestKillPointStopsTheStart) {
  config_.test_kill_at = "after-cdi-spec";
  NodeAgent agent(config_, clock_);
  const Status refused = agent.start();
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.message(),
            "TESSERA_TEST_KILL_AT \"after-cdi-spec\": expected after-gpu-instance or "
            "after-compute-instance (a test hook; unset it outside tests)");
}

TEST_F(NodeAgentTest, AClaimPastTheAdminsBoundsIsHeldToThemAtPrepare) {
  constexpr char kBoundedUid[] = "b4444444-0000-4000-8000-000000000004";
  const json vgpu = {{"apiVersion", "vgpu.tessera.dev/v1alpha1"}, {"kind", "VgpuConfig"}};
  json admin = vgpu;
  admin["enforcement"] = "kill";
  admin["tenantBounds"] = {{"maxPriority", "normal"}, {"maxComputeLimit", 50}};
  json tenant = vgpu;
  tenant["enforcement"] = "report";
  tenant["compute"] = {{"priority", "high"}, {"limit", 90}};
  tenant["memory"] = {{"limit", "64Gi"}};
  add_claim(kBoundedUid, {{"g", "gpu-0", "s-g", "8Gi", "30"}},
            json::array({opaque_config("FromClass", admin), opaque_config("FromClaim", tenant)}));
  config_.tenant_max_memory_limit = "12Gi";
  testing::CapturedLog log;
  NodeAgent agent(config_, clock_);
  ASSERT_EQ(agent.start().message(), "");
  PluginServer server(plugin_options(), agent.preparer(), &agent.health());
  ASSERT_EQ(server.start().message(), "");
  KubeletSimulator kubelet(server.registration_socket());
  kubelet.connect();
  dra1::NodePrepareResourcesResponse prepared;
  ASSERT_TRUE(kubelet.prepare_v1({kBoundedUid}, &prepared).ok());
  ASSERT_EQ(prepared.claims().at(kBoundedUid).error(), "");

  const Result<Checkpoint> checkpoint =
      checkpoint_from_json(RecordingDoubles::read(config_.state_dir + "/checkpoint.json"));
  ASSERT_TRUE(checkpoint.is_ok()) << checkpoint.status().message();
  const ShareSpec& share = checkpoint->at(kBoundedUid).shares.at(0);
  EXPECT_EQ(share.config.enforcement, vgpu_config::EnforcementPolicy::kKill);
  EXPECT_EQ(share.config.priority, vgpu_config::Priority::kNormal);
  EXPECT_EQ(share.limits().cores_limit, 50u);
  EXPECT_EQ(share.limits().memory_limit, 12ull << 30);
  EXPECT_EQ(log.count("claim config held to its bounds"), 4u);
  EXPECT_EQ(log.count("enforcement report raised to the floor kill"), 1u);
  EXPECT_EQ(log.count("memory.limit 64Gi lowered to the largest memory limit 12Gi"), 1u);
}

TEST_F(NodeAgentTest, PrintsTheResourceSlicesItWouldPublish) {
  const std::string output_file = (base_ / "slices.json").string();
  const std::string command =
      std::string(NODE_AGENT) + " --print-resource-slices --node-name node-a > " + output_file;
  ASSERT_EQ(std::system(command.c_str()), 0);
  const json slice = json::parse(RecordingDoubles::read(output_file));
  EXPECT_EQ(slice["kind"], "ResourceSlice");
  EXPECT_EQ(slice["spec"]["pool"]["name"], "node-a");
  EXPECT_EQ(slice["spec"]["devices"][0]["name"], "gpu-0");
  EXPECT_EQ(slice["spec"]["devices"][0]["attributes"]["productName"]["string"], "NVIDIA H200");
  EXPECT_EQ(slice["spec"]["devices"][0]["capacity"]["cores"]["value"], "100");
}

TEST_F(NodeAgentTest, StartSaysWhyItCannotRun) {
  config_.kubeconfig = (base_ / "missing-kubeconfig").string();
  NodeAgent agent(config_);
  EXPECT_NE(agent.start().message().find("missing-kubeconfig"), std::string::npos);
}

// A shim that cannot be loaded fails every claim, with the reason, at kubelet's edge; nothing is
// written for it (a share handed out without its shim would run unenforced).
TEST_F(NodeAgentTest, KubeletGetsTheShimErrorAndNoShareIsHandedOut) {
  testing::write_text(base_ / "shim/libvgpu.so", "not a library\n");
  NodeAgent agent(config_, clock_);
  ASSERT_EQ(agent.start().message(), "");
  PluginServer server(plugin_options(), agent.preparer(), &agent.health());
  ASSERT_EQ(server.start().message(), "");
  KubeletSimulator kubelet(server.registration_socket());
  kubelet.connect();
  dra1::NodePrepareResourcesResponse prepared;
  ASSERT_TRUE(kubelet.prepare_v1({kQuotaUid}, &prepared).ok());
  const std::string error = prepared.claims().at(kQuotaUid).error();
  EXPECT_NE(error.find("shim " + config_.shim_path + " is not an ELF shared library"),
            std::string::npos)
      << error;
  EXPECT_EQ(prepared.claims().at(kQuotaUid).devices_size(), 0);
  EXPECT_TRUE(fs::is_empty(config_.state_dir + "/shares"));
  EXPECT_TRUE(fs::is_empty(config_.cdi_dir));
  server.stop();
  agent.stop();
}

// With the NVIDIA Container Toolkit's spec on the node, a claim's devices carry its GPU device
// beside ours (here a spec naming devices by index: the one whose node is the GPU's).
TEST_F(NodeAgentTest, TheToolkitsDeviceIsReturnedBesideOurs) {
  testing::write_text(base_ / "toolkit/nvidia.json",
                      R"({"cdiVersion":"0.5.0","kind":"nvidia.com/gpu","devices":[
                           {"name":"0","containerEdits":{"deviceNodes":[{"path":"/dev/nvidia0"}]}},
                           {"name":"all","containerEdits":{"deviceNodes":[{"path":"/dev/nvidia0"}]}}],
                         "containerEdits":{"deviceNodes":[{"path":"/dev/nvidiactl"}]}})");
  NodeAgent agent(config_, clock_);
  ASSERT_EQ(agent.start().message(), "");
  const PrepareResult result = agent.preparer().prepare(
      {std::string("ns-") + kQuotaUid, kQuotaUid, std::string("claim-") + kQuotaUid});
  ASSERT_EQ(result.status().message(), "");
  ASSERT_EQ(result->size(), 2u);
  EXPECT_EQ((*result)[0].cdi_device_ids,
            (std::vector<std::string>{
                std::string("k8s.vgpu.tessera.dev/claim=") + kQuotaUid + "-gpu-0-s-a",
                "nvidia.com/gpu=0"}));
  // Our spec then brings no driver files: the toolkit's device does.
  const json spec = json::parse(RecordingDoubles::read(agent.shares().cdi_spec_path(kQuotaUid)));
  EXPECT_EQ(spec["containerEdits"]["mounts"].size(), 2u) << spec.dump(2);  // shim, ld.so.preload
  EXPECT_FALSE(spec["devices"][0]["containerEdits"].contains("deviceNodes"));
  ASSERT_EQ(
      agent.preparer()
          .unprepare({std::string("ns-") + kQuotaUid, kQuotaUid, std::string("claim-") + kQuotaUid})
          .message(),
      "");
  agent.stop();
}

// Without a driver for containers the agent does not start (it would hand out shares whose
// containers cannot reach the GPU), and says where it looked.
TEST_F(NodeAgentTest, StartFailsWithoutADriverForContainers) {
  config_.driver_root = (base_ / "empty-root").string();
  fs::create_directories(config_.driver_root);
  NodeAgent agent(config_, clock_);
  const std::string message = agent.start().message();
  EXPECT_NE(message.find("driver root " + config_.driver_root + ": no libcuda.so.1"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find((base_ / "toolkit").string()), std::string::npos) << message;
}

// Two agents on one state folder would each take the other's shares for orphans: the second is
// refused (as a surge pod of a rolling update is, until the old pod has exited).
TEST_F(NodeAgentTest, OneAgentPerStateFolder) {
  NodeAgent first(config_);
  ASSERT_EQ(first.start().message(), "");
  NodeAgent second(config_);
  const Status refused = second.start();
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused.message(), "another tessera-node-agent (pid " + std::to_string(getpid()) +
                                   ") is using " + config_.state_dir + " (" + config_.state_dir +
                                   "/agent.lock is locked); one agent per state folder");
  first.stop();
}

// The Prometheus endpoint of a running agent: /healthz, and /metrics with the claims prepared
// through the agent's preparer (what the plugin calls), counted by result, their shares' series
// present while prepared. (Every metric's value against the simulator: agent.MetricsEndToEnd.*.)
TEST_F(NodeAgentTest, ServesMetricsAndHealth) {
  NodeAgent agent(config_, clock_);
  ASSERT_EQ(agent.start().message(), "");
  ASSERT_GT(agent.metrics_port(), 0);
  httplib::Client client("127.0.0.1", agent.metrics_port());
  auto health = client.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(agent.liveness().message(), "");

  const ClaimRef quota{std::string("ns-") + kQuotaUid, kQuotaUid,
                       std::string("claim-") + kQuotaUid};
  ASSERT_EQ(agent.preparer().prepare(quota).status().message(), "");
  const ClaimRef replaced{std::string("ns-") + kReplacedUid, kReplacedUid,
                          std::string("claim-") + kReplacedUid};
  EXPECT_FALSE(agent.preparer().prepare(replaced).is_ok());
  auto scraped = client.Get("/metrics");
  ASSERT_TRUE(scraped);
  ASSERT_EQ(scraped->status, 200);
  const std::string text = scraped->body;
  EXPECT_NE(text.find("tessera_prepare_requests_total{result=\"ok\"} 1\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("tessera_prepare_requests_total{result=\"error\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("tessera_prepare_duration_seconds_count 2\n"), std::string::npos);
  for (const char* share : {"-gpu-0-s-a", "-gpu-0-s-b"}) {
    const std::string series = "tessera_share_memory_limit_bytes{namespace=\"ns-" +
                               std::string(kQuotaUid) + "\",claim=\"claim-" + kQuotaUid +
                               "\",share=\"" + kQuotaUid + share + "\",pod=\"pod-claim-" +
                               kQuotaUid + "\",uuid=\"GPU-";
    EXPECT_NE(text.find(series), std::string::npos) << series << "\n" << text;
  }
  EXPECT_NE(text.find("tessera_gpu_shares{uuid=\"GPU-"), std::string::npos);
  EXPECT_NE(text.find(",device=\"gpu-0\",node=\"node-a\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("tessera_build_info{version=\""), std::string::npos);

  ASSERT_EQ(agent.preparer().unprepare(quota).message(), "");
  const std::string after = agent.scrape_metrics();
  EXPECT_EQ(after.find(kQuotaUid), std::string::npos) << after;
  EXPECT_NE(after.find("tessera_unprepare_requests_total{result=\"ok\"} 1\n"), std::string::npos);

  agent.stop();
  EXPECT_EQ(agent.liveness().code(), StatusCode::kUnavailable);
  EXPECT_FALSE(client.Get("/healthz"));  // the endpoint is closed
}

// Agents given a pod UID share the state folder (the old and the new pod of a rolling update);
// one without (fixed socket names) still has it alone, either way round.
TEST_F(NodeAgentTest, AgentsWithPodUidsShareTheStateFolderAnAgentWithoutOneDoesNot) {
  AgentConfig old_pod = config_, new_pod = config_;
  old_pod.pod_uid = "0a0a0a0a-0000-4000-8000-00000000000a";
  new_pod.pod_uid = "0b0b0b0b-0000-4000-8000-00000000000b";
  {
    NodeAgent first(old_pod);
    ASSERT_EQ(first.start().message(), "");
    NodeAgent second(new_pod);
    EXPECT_EQ(second.start().message(), "");
    NodeAgent fixed(config_);
    EXPECT_EQ(fixed.start().code(), StatusCode::kFailedPrecondition);
    second.stop();
    first.stop();
  }
  NodeAgent fixed(config_);
  ASSERT_EQ(fixed.start().message(), "");
  NodeAgent surge(new_pod);
  EXPECT_EQ(surge.start().code(), StatusCode::kFailedPrecondition);
  fixed.stop();
}

// The share and GPU series of a scrape, in order (what two agents of one node must agree on).
std::string node_series(const std::string& text) {
  std::string out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("tessera_share_", 0) == 0 || line.rfind("tessera_gpu_shares", 0) == 0)
      out += line + "\n";
  return out;
}

// During a rolling update Prometheus scrapes both agents: each shows the node's shares as
// checkpoint.json holds them at that scrape, with the same labels and values, although neither
// runs a reconcile pass (the simulated clock never moves) that would teach its memory what the
// other prepared.
TEST_F(NodeAgentTest, BothAgentsOfARollingUpdateShowWhatTheOtherPreparedAtTheNextScrape) {
  AgentConfig old_pod = config_, new_pod = config_;
  old_pod.pod_uid = "0a0a0a0a-0000-4000-8000-00000000000a";
  new_pod.pod_uid = "0b0b0b0b-0000-4000-8000-00000000000b";
  NodeAgent old_agent(old_pod, clock_);
  ASSERT_EQ(old_agent.start().message(), "");
  NodeAgent new_agent(new_pod, clock_);
  ASSERT_EQ(new_agent.start().message(), "");
  const ClaimRef quota{std::string("ns-") + kQuotaUid, kQuotaUid,
                       std::string("claim-") + kQuotaUid};
  ASSERT_EQ(new_agent.preparer().prepare(quota).status().message(), "");
  const std::string on_old = old_agent.scrape_metrics();
  for (const char* share : {"-gpu-0-s-a", "-gpu-0-s-b"}) {
    const std::string series = "tessera_share_memory_limit_bytes{namespace=\"ns-" +
                               std::string(kQuotaUid) + "\",claim=\"claim-" + kQuotaUid +
                               "\",share=\"" + kQuotaUid + share + "\"";
    EXPECT_NE(on_old.find(series), std::string::npos) << series << "\n" << on_old;
  }
  EXPECT_NE(on_old.find(",device=\"gpu-0\",node=\"node-a\"} 2\n"), std::string::npos);
  EXPECT_EQ(node_series(on_old), node_series(new_agent.scrape_metrics()));
  EXPECT_EQ(old_agent.reconcile_passes(), 0u);
  // And back: unprepared on the old agent, gone from the new one's next scrape.
  ASSERT_EQ(old_agent.preparer().unprepare(quota).message(), "");
  const std::string on_new = new_agent.scrape_metrics();
  EXPECT_EQ(on_new.find(kQuotaUid), std::string::npos) << on_new;
  EXPECT_EQ(node_series(on_new), node_series(old_agent.scrape_metrics()));
  new_agent.stop();
  old_agent.stop();
}

// A DaemonSet rolling update with maxSurge, with two real tessera-node-agent processes on one
// state folder and one kubelet plugins folder: the new pod registers beside the old one under its
// own socket names; kubelet's retries on it answer what the old one prepared (no second GET, no
// second MPS daemon); claims prepared on either are unprepared on the other; prepares through both
// at once (while both reconcile every second) all land in the checkpoint and stay; the old pod's
// SIGTERM removes only its own sockets, and the new one carries on alone until nothing is left.
TEST_F(NodeAgentTest, RollingUpdateHandsEveryClaimOverBetweenTwoAgentProcesses) {
  const std::string old_pod = "0a0a0a0a-0000-4000-8000-00000000000a";
  const std::string new_pod = "0b0b0b0b-0000-4000-8000-00000000000b";
  std::vector<std::string> quota_uids;  // more claims, for the two agents at once
  for (int i = 0; i < 9; ++i) {
    quota_uids.push_back("d000000" + std::to_string(i) + "-0000-4000-8000-00000000000d");
    add_claim(quota_uids.back(), {{"a", "gpu-0", "q-" + std::to_string(i), "1Gi", "5"}});
  }
  auto gets = [&](const std::string& uid) { return api_.claim_gets("ns-" + uid, "claim-" + uid); };
  const fs::path registry = config_.kubelet_registry_dir;
  const fs::path plugin_dir = fs::path(config_.kubelet_plugins_dir) / vgpu_config::kDriverName;
  auto registration = [&](const std::string& pod) {
    return registry / (std::string(vgpu_config::kDriverName) + "-" + pod + "-reg.sock");
  };
  auto dra = [&](const std::string& pod) { return plugin_dir / ("dra-" + pod + ".sock"); };
  const fs::path old_log = base_ / "old-agent.log", new_log = base_ / "new-agent.log";
  auto logs = [&] {
    return "old agent:\n" + RecordingDoubles::read(old_log) + "new agent:\n" +
           RecordingDoubles::read(new_log);
  };
  const std::string shares = config_.state_dir + "/shares/";

  AgentProcess old_agent(config_, old_pod, old_log);
  ASSERT_TRUE(wait_for_socket(registration(old_pod))) << logs();
  KubeletSimulator old_kubelet(registration(old_pod));
  old_kubelet.connect();
  dra1::NodePrepareResourcesResponse on_old;
  ASSERT_TRUE(old_kubelet.prepare_v1({kQuotaUid, kMpsUid}, &on_old).ok());
  for (const char* uid : {kQuotaUid, kMpsUid}) ASSERT_EQ(on_old.claims().at(uid).error(), "");
  EXPECT_EQ(occurrences(doubles_.calls(), "mps-control -d"), 1u);

  // The new pod starts beside it: both registered, each under its own names.
  AgentProcess new_agent(config_, new_pod, new_log);
  ASSERT_TRUE(wait_for_socket(registration(new_pod))) << logs();
  for (const std::string& pod : {old_pod, new_pod}) {
    EXPECT_TRUE(fs::is_socket(registration(pod))) << pod;
    EXPECT_TRUE(fs::is_socket(dra(pod))) << pod;
  }
  EXPECT_FALSE(fs::exists(registry / (std::string(vgpu_config::kDriverName) + "-reg.sock")));
  EXPECT_FALSE(fs::exists(plugin_dir / "dra.sock"));
  KubeletSimulator new_kubelet(registration(new_pod));
  pluginregistration::PluginInfo info;
  ASSERT_TRUE(new_kubelet.get_info(&info).ok());
  EXPECT_EQ(info.endpoint(), dra(new_pod).native());
  new_kubelet.connect();

  // Kubelet retries on the newest registration: the same answer, from the checkpoint.
  dra1::NodePrepareResourcesResponse on_new;
  ASSERT_TRUE(new_kubelet.prepare_v1({kQuotaUid, kMpsUid}, &on_new).ok());
  for (const char* uid : {kQuotaUid, kMpsUid}) {
    EXPECT_EQ(on_new.claims().at(uid).SerializeAsString(),
              on_old.claims().at(uid).SerializeAsString());
    EXPECT_EQ(gets(uid), 1) << uid;
  }
  EXPECT_EQ(occurrences(doubles_.calls(), "mps-control -d"), 1u);

  // Prepared on the old agent, unprepared on the new one; and the other way round.
  dra1::NodeUnprepareResourcesResponse unprepared;
  ASSERT_TRUE(new_kubelet.unprepare_v1({kMpsUid}, &unprepared).ok());
  EXPECT_EQ(unprepared.claims().at(kMpsUid).error(), "");
  EXPECT_FALSE(fs::exists(shares + kMpsUid + "-gpu-0-s-m"));
  EXPECT_EQ(occurrences(doubles_.calls(), "  quit"), 1u);
  dra1::NodePrepareResourcesResponse prepared;
  ASSERT_TRUE(new_kubelet.prepare_v1({quota_uids[0]}, &prepared).ok());
  ASSERT_EQ(prepared.claims().at(quota_uids[0]).error(), "");
  ASSERT_TRUE(old_kubelet.unprepare_v1({quota_uids[0]}, &unprepared).ok());
  EXPECT_EQ(unprepared.claims().at(quota_uids[0]).error(), "");
  EXPECT_FALSE(fs::exists(shares + quota_uids[0] + "-gpu-0-q-0"));

  // Both agents at once, each claim through one of them, while both reconcile every second.
  std::vector<std::string> errors(quota_uids.size());
  std::vector<std::thread> calls;
  for (size_t i = 1; i < quota_uids.size(); ++i)
    calls.emplace_back([&, i] {
      KubeletSimulator& kubelet = i % 2 ? old_kubelet : new_kubelet;
      dra1::NodePrepareResourcesResponse response;
      const grpc::Status status = kubelet.prepare_v1({quota_uids[i]}, &response);
      errors[i] =
          status.ok() ? response.claims().at(quota_uids[i]).error() : status.error_message();
    });
  for (auto& call : calls) call.join();
  for (size_t i = 1; i < quota_uids.size(); ++i) EXPECT_EQ(errors[i], "") << quota_uids[i];
  const std::string checkpoint = config_.state_dir + "/checkpoint.json";
  const json saved = json::parse(RecordingDoubles::read(checkpoint));
  ASSERT_EQ(saved["claims"].size(), quota_uids.size()) << saved.dump(2);  // + kQuotaUid
  for (const auto& [uid, entry] : saved["claims"].items())
    EXPECT_EQ(entry["state"], "PrepareCompleted") << uid;
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // reconcile passes of both
  EXPECT_EQ(json::parse(RecordingDoubles::read(checkpoint)), saved);
  for (size_t i = 1; i < quota_uids.size(); ++i) {
    EXPECT_TRUE(fs::exists(shares + quota_uids[i] + "-gpu-0-q-" + std::to_string(i) + "/limits"));
    EXPECT_TRUE(fs::exists(config_.cdi_dir + "/" + cdi_spec_file_name(quota_uids[i])));
  }
  EXPECT_TRUE(fs::exists(shares + kQuotaUid + "-gpu-0-s-a/limits"));

  // The old pod is stopped: only its sockets go; the new one serves on and unprepares the rest.
  EXPECT_EQ(old_agent.stop(), 0) << logs();
  EXPECT_FALSE(fs::exists(registration(old_pod)));
  EXPECT_FALSE(fs::exists(dra(old_pod)));
  EXPECT_TRUE(fs::is_socket(registration(new_pod)));
  EXPECT_TRUE(fs::is_socket(dra(new_pod)));
  std::vector<std::string> rest(quota_uids.begin() + 1, quota_uids.end());
  rest.push_back(kQuotaUid);
  ASSERT_TRUE(new_kubelet.unprepare_v1(rest, &unprepared).ok());
  for (const auto& uid : rest) EXPECT_EQ(unprepared.claims().at(uid).error(), "") << uid;
  EXPECT_EQ(json::parse(RecordingDoubles::read(checkpoint))["claims"], json::object());
  EXPECT_TRUE(fs::is_empty(config_.state_dir + "/shares"));
  EXPECT_TRUE(fs::is_empty(config_.cdi_dir));
  // Nothing was prepared twice: one GET per claim, one MPS daemon started and stopped.
  for (const auto& uid : quota_uids) EXPECT_EQ(gets(uid), 1) << uid;
  EXPECT_EQ(occurrences(doubles_.calls(), "mps-control -d"), 1u);
  EXPECT_EQ(occurrences(doubles_.calls(), "  quit"), 1u);
  EXPECT_TRUE(new_agent.running());
  EXPECT_EQ(new_agent.stop(), 0) << logs();
  EXPECT_FALSE(fs::exists(registration(new_pod)));
  EXPECT_FALSE(fs::exists(dra(new_pod)));
}

// Fields 3 (state), 4 (ppid), 5 (pgrp), 6 (session) of /proc/<pid>/stat; empty once it is gone.
std::vector<std::string> process_fields(int pid) {
  const std::string stat = RecordingDoubles::read("/proc/" + std::to_string(pid) + "/stat");
  std::vector<std::string> fields;
  if (const auto close = stat.rfind(')'); close != std::string::npos) {
    std::istringstream words(stat.substr(close + 1));
    for (std::string word; fields.size() < 4 && words >> word;) fields.push_back(word);
  }
  return fields;
}

// The agent's container is killed (SIGKILL to all of it) and started again while a client uses an
// MPS share: the share's daemon is in no process group or session of the agent's (and, where this
// machine has a writable cgroup v2, in <--mps-daemon-cgroup>/<share>), so it and its client keep
// running; the restarted agent adopts it (same pid, no second start) before it serves kubelet, and
// unprepare through it stops that daemon.
TEST_F(NodeAgentTest, TheMpsDaemonAndItsClientOutliveAKilledAgent) {
  const std::string pod = "0c0c0c0c-0000-4000-8000-00000000000c";
  const fs::path registration = fs::path(config_.kubelet_registry_dir) /
                                (std::string(vgpu_config::kDriverName) + "-" + pod + "-reg.sock");
  const fs::path first_log = base_ / "first-agent.log", second_log = base_ / "second-agent.log";
  auto logs = [&] {
    return "first agent:\n" + RecordingDoubles::read(first_log) + "second agent:\n" +
           RecordingDoubles::read(second_log);
  };
  const std::string share = std::string(kMpsUid) + "-gpu-0-s-m";
  config_.mps_daemon_cgroup =
      testing::writable_cgroup2("tessera-agent-test-" + std::to_string(getpid()));
  MpsOptions mps_options;
  mps_options.control = config_.mps_control;
  mps_options.root = config_.state_dir + "/mps";
  mps_options.daemon_cgroup = config_.mps_daemon_cgroup;
  MpsBackend mps(mps_options);
  pid_t client = -1;
  // Whatever happens below: no client or daemon outlives the test (they hold its output open).
  struct Cleanup {
    std::function<void()> run;
    ~Cleanup() { run(); }
  } cleanup{[&] {
    if (client > 0 && waitpid(client, nullptr, WNOHANG) == 0) {
      kill(client, SIGKILL);
      waitpid(client, nullptr, 0);
    }
    mps.stop(share).ignore();
    if (!config_.mps_daemon_cgroup.empty()) rmdir(config_.mps_daemon_cgroup.c_str());
  }};

  auto first = std::make_unique<AgentProcess>(config_, pod, first_log);
  ASSERT_TRUE(wait_for_server(registration)) << logs();
  {
    KubeletSimulator kubelet(registration);
    kubelet.connect();
    dra1::NodePrepareResourcesResponse prepared;
    ASSERT_TRUE(kubelet.prepare_v1({kMpsUid}, &prepared).ok());
    ASSERT_EQ(prepared.claims().at(kMpsUid).error(), "") << logs();
  }
  const int daemon = mps.daemon_pid(share);
  ASSERT_GT(daemon, 0);
  const auto agent_fields = process_fields(first->pid()), daemon_fields = process_fields(daemon);
  ASSERT_EQ(daemon_fields.size(), 4u);
  EXPECT_NE(daemon_fields[1], std::to_string(first->pid()));  // parent
  EXPECT_NE(daemon_fields[2], agent_fields[2]);               // process group
  EXPECT_NE(daemon_fields[3], agent_fields[3]);               // session
  if (!config_.mps_daemon_cgroup.empty()) {
    const std::string in = RecordingDoubles::read("/proc/" + std::to_string(daemon) + "/cgroup");
    EXPECT_NE(in.find(fs::path(config_.mps_daemon_cgroup).filename().string() + "/" + share + "\n"),
              std::string::npos)
        << in;
  }

  // A client in a tenant's pod: runs while the daemon it reached runs.
  const fs::path reached = base_ / "client-reached";
  std::string script = "d=$(cat \"" + mps.pipe_dir(share) + "/.control\"); echo $d >\"" +
                       reached.string() +
                       "\"; while kill -0 $d 2>/dev/null; do sleep 0.02; done; exit 3";
  char* client_argv[] = {const_cast<char*>("/bin/sh"), const_cast<char*>("-c"), script.data(),
                         nullptr};
  ASSERT_EQ(posix_spawn(&client, "/bin/sh", nullptr, nullptr, client_argv, environ), 0);
  while (RecordingDoubles::read(reached).empty() && waitpid(client, nullptr, WNOHANG) == 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(RecordingDoubles::read(reached), std::to_string(daemon) + "\n");

  ASSERT_TRUE(first->kill_container()) << logs();
  first.reset();
  const auto after_kill = process_fields(daemon);
  ASSERT_FALSE(after_kill.empty()) << "the daemon ended with the agent";
  EXPECT_NE(after_kill[0], "Z");
  ASSERT_EQ(waitpid(client, nullptr, WNOHANG), 0) << "the client ended with the agent";

  // Started again (same pod): it serves once its start-up reconcile is done.
  AgentProcess second(config_, pod, second_log);
  ASSERT_TRUE(wait_for_server(registration)) << logs();
  EXPECT_EQ(mps.daemon_pid(share), daemon);
  EXPECT_EQ(mps.inspect(share).active_thread_percentage, 20.0);
  EXPECT_EQ(occurrences(doubles_.calls(), "mps-control -d"), 1u) << doubles_.calls();
  EXPECT_EQ(waitpid(client, nullptr, WNOHANG), 0);

  {
    KubeletSimulator kubelet(registration);
    kubelet.connect();
    dra1::NodeUnprepareResourcesResponse unprepared;
    ASSERT_TRUE(kubelet.unprepare_v1({kMpsUid}, &unprepared).ok());
    EXPECT_EQ(unprepared.claims().at(kMpsUid).error(), "") << logs();
  }  // disconnected: the agent's SIGTERM does not wait out gRPC's shutdown grace
  int client_status = 0;
  ASSERT_EQ(waitpid(client, &client_status, 0), client);  // its daemon quit
  client = -1;
  EXPECT_EQ(WEXITSTATUS(client_status), 3);
  EXPECT_EQ(occurrences(doubles_.calls(), "  quit"), 1u);
  EXPECT_TRUE(mps.share_folders().empty());
  if (!config_.mps_daemon_cgroup.empty()) {
    EXPECT_FALSE(fs::exists(config_.mps_daemon_cgroup + "/" + share));
  }
  EXPECT_EQ(second.stop(), 0) << logs();
}

// The local API of a running agent, as `tessera events --follow -o json` (the CLI binary) sees it:
// the claim's two shares prepared, then unprepared, as the agent's loop diffs its snapshots.
TEST_F(NodeAgentTest, TesseraEventsFollowsTheAgentsLocalApi) {
  config_.api_socket = (sockets_ / "api.sock").string();  // the state folder's path is too long
  NodeAgent agent(config_, clock_);
  ASSERT_EQ(agent.start().message(), "");
  ASSERT_EQ(agent.api_socket(), config_.api_socket);
  struct stat st {};
  ASSERT_EQ(lstat(config_.api_socket.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  ASSERT_NE(agent.events(), nullptr);

  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  std::vector<std::string> args = {TESSERA_CLI, "events",   "--follow",        "-o",
                                   "json",      "--socket", config_.api_socket};
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_t cli = -1;
  ASSERT_EQ(posix_spawn(&cli, argv[0], &actions, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  std::string output;
  // Moves the agent's clock a second at a time (its API loop diffs once a second) until the CLI
  // printed `count` lines.
  const auto lines_until = [&](size_t count) {
    std::vector<json> lines;
    for (int i = 0; i < 100 && lines.size() < count; ++i) {
      clock_.advance(std::chrono::seconds(1));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      char chunk[4096];
      ssize_t n;
      while ((n = read(fds[0], chunk, sizeof chunk)) > 0) output.append(chunk, n);
      lines.clear();
      std::istringstream text(output);
      for (std::string line; std::getline(text, line);) lines.push_back(json::parse(line));
    }
    return lines;
  };
  const ClaimRef quota{std::string("ns-") + kQuotaUid, kQuotaUid,
                       std::string("claim-") + kQuotaUid};
  ASSERT_EQ(agent.preparer().prepare(quota).status().message(), "");
  std::vector<json> lines = lines_until(2);
  ASSERT_EQ(lines.size(), 2u) << output;
  for (const json& line : lines) {
    EXPECT_EQ(line["kind"], "PREPARED");
    EXPECT_EQ(line["claim"], std::string("claim-") + kQuotaUid);
    EXPECT_EQ(line["namespace"], std::string("ns-") + kQuotaUid);
  }
  EXPECT_EQ(lines[0]["share"], std::string(kQuotaUid) + "-gpu-0-s-a");
  EXPECT_EQ(lines[1]["share"], std::string(kQuotaUid) + "-gpu-0-s-b");
  ASSERT_EQ(agent.preparer().unprepare(quota).message(), "");
  lines = lines_until(4);
  ASSERT_EQ(lines.size(), 4u) << output;
  EXPECT_EQ(lines[2]["kind"], "UNPREPARED");
  EXPECT_EQ(lines[3]["kind"], "UNPREPARED");
  EXPECT_EQ(lines[3]["sequence"], 4);  // a number, as `tessera shares -o json` writes it

  kill(cli, SIGINT);
  int status = 0;
  ASSERT_EQ(waitpid(cli, &status, 0), cli);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  close(fds[0]);
  agent.stop();
  EXPECT_FALSE(fs::exists(fs::symlink_status(config_.api_socket)));
}

}  // namespace
}  // namespace tessera::agent

namespace tessera::agent {
namespace {

// A shared claim: kubelet prepares it for its first pod only. The reconcile loop reads every
// prepared claim again (from the API server's watch cache) and saves the pods that joined it.
TEST_F(NodeAgentTest, TheReconcileLoopLearnsThePodsThatJoinedASharedClaim) {
  NodeAgent agent(config_, clock_);
  ASSERT_EQ(agent.start().message(), "");
  const std::string ns = std::string("ns-") + kQuotaUid, name = std::string("claim-") + kQuotaUid;
  ASSERT_EQ(agent.preparer().prepare({ns, kQuotaUid, name}).status().message(), "");
  const std::string checkpoint = config_.state_dir + "/checkpoint.json";
  auto saved_pods = [&] {
    return json::parse(RecordingDoubles::read(checkpoint))["claims"][kQuotaUid]["pods"];
  };
  EXPECT_EQ(saved_pods(), json::parse(R"([{"name":"pod-claim-)" + std::string(kQuotaUid) +
                                      R"(","uid":"pod-uid-1"}])"));
  ASSERT_TRUE(api_.set_reserved_pods(
      ns, name, {{"pod-claim-" + std::string(kQuotaUid), "pod-uid-1"}, {"second", "pod-uid-2"}}));
  clock_.advance(std::chrono::seconds(config_.reconcile_interval_s));
  ASSERT_TRUE(agent.wait_for_reconcile_passes(1));
  EXPECT_EQ(saved_pods(),
            json::parse(R"([{"name":"pod-claim-)" + std::string(kQuotaUid) +
                        R"(","uid":"pod-uid-1"},{"name":"second","uid":"pod-uid-2"}])"));
  EXPECT_EQ(api_.claim_cache_gets(ns, name), 1);  // one read per claim per pass
  EXPECT_EQ(api_.claim_gets(ns, name), 1);        // the prepare's
  ASSERT_EQ(agent.preparer().unprepare({ns, kQuotaUid, name}).message(), "");
}

}  // namespace
}  // namespace tessera::agent
