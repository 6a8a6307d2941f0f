// Coexistence with NVIDIA's other allocators (devices/coexistence.h): the rules on their own, then
// the whole agent against the stand-in API server: a device plugin on the Node, another DRA
// driver's slice naming a GPU's UUID, both going away, and --gpus splitting the node.
#include "devices/coexistence.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "agent/node_agent.h"
#include "apiserver/event_rules.h"
#include "apiserver/fake_api_server.h"
#include "backend_doubles.h"
#include "clock/clock.h"
#include "share/fake_driver.h"
#include "share/share_manager.h"
#include "tessera/kube/http_kube_client.h"
#include "test_node_config.h"

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::FakeApiServer;
using testing::RecordingDoubles;

// The simulated GPUs' UUIDs (simgpu/core/config.cc device_uuid).
constexpr char kGpu0[] = "GPU-5e1a0000-7e55-4e2a-9000-000000000000";
constexpr char kGpu1[] = "GPU-5e1a0000-7e55-4e2a-9000-000000000001";

GpuInfo gpu(unsigned index, const std::string& uuid) {
  GpuInfo info;
  info.index = info.minor = index;
  info.uuid = uuid;
  return info;
}

json node_with(const json& capacity) {
  return {{"metadata", {{"name", "node-a"}}},
          {"status", {{"capacity", capacity}, {"allocatable", capacity}}}};
}

// A slice as NVIDIA's DRA driver (k8s-dra-driver-gpu) publishes a GPU: device gpu-<minor>, the
// UUID in the bare attribute `uuid` (the driver's own domain).
json nvidia_dra_slice(const std::string& node, const std::string& device, const std::string& uuid) {
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceSlice"},
          {"metadata", {{"name", node + "-gpu.nvidia.com-abcde"}}},
          {"spec",
           {{"driver", "gpu.nvidia.com"},
            {"nodeName", node},
            {"pool", {{"name", node}, {"generation", 1}, {"resourceSliceCount", 1}}},
            {"devices",
             {{{"name", device},
               {"attributes",
                {{"uuid", {{"string", uuid}}},
                 {"productName", {{"string", "NVIDIA H200"}}},
                 {"type", {{"string", "gpu"}}}}},
               {"capacity", {{"memory", {{"value", "143771Mi"}}}}}}}}}}};
}

// What the stand-in API server answers the Event's create in namespace "default": "" (stored) or
// its refusal.
std::string apiserver_check(const json& event, const std::string& ns = "default") {
  json copy = event;
  const auto refused = testing::apiserver::check_event_write(copy, nullptr, ns);
  return refused ? refused->status.value("message", "?") : "";
}

TEST(GpuSelection, ParsesIndicesAndUuidsAndNamesABadEntry) {
  Result<GpuSelection> all = GpuSelection::parse("");
  ASSERT_TRUE(all.is_ok());
  EXPECT_TRUE(all->all());
  Result<GpuSelection> some = GpuSelection::parse("1, " + std::string(kGpu0));
  ASSERT_EQ(some.status().message(), "");
  EXPECT_FALSE(some->all());
  const std::vector<GpuInfo> gpus = {gpu(0, kGpu0), gpu(1, kGpu1), gpu(2, "GPU-other")};
  const std::vector<GpuInfo> selected = some->filter(gpus);
  ASSERT_EQ(selected.size(), 2u);
  EXPECT_EQ(selected[0].uuid, kGpu0);
  EXPECT_EQ(selected[1].uuid, kGpu1);
  EXPECT_EQ(GpuSelection::parse("7").value().unmatched(gpus), std::vector<std::string>{"7"});

  EXPECT_EQ(GpuSelection::parse("0,MIG-1234").status().message(),
            "--gpus \"0,MIG-1234\": \"MIG-1234\" is neither a GPU index (0, 1, ...) nor a GPU "
            "UUID (GPU-...)");
  EXPECT_EQ(GpuSelection::parse("0,,1").status().code(), StatusCode::kInvalidArgument);
}

TEST(FindWithheld, ADevicePluginOnTheNodeWithholdsEveryGpuUnlessGpusSplitsTheNode) {
  const std::vector<GpuInfo> gpus = {gpu(0, kGpu0), gpu(1, kGpu1)};
  const json plugin = node_with({{"cpu", "8"}, {"nvidia.com/gpu", "2"}});
  const std::vector<WithheldGpu> withheld =
      find_withheld(gpus, 2, false, plugin, json::array(), vgpu_config::kDriverName);
  ASSERT_EQ(withheld.size(), 2u);
  EXPECT_EQ(withheld[0].device, "gpu-0");
  EXPECT_EQ(withheld[0].uuid, kGpu0);
  EXPECT_EQ(withheld[0].reason, "device-plugin");
  EXPECT_EQ(withheld[0].detail,
            "the Node advertises nvidia.com/gpu=2 (NVIDIA's device plugin hands out this node's "
            "GPUs; split them with --gpus)");
  // No plugin, or one whose resource is 0 (kubelet's entry after the plugin is gone): nothing.
  EXPECT_TRUE(find_withheld(gpus, 2, false, node_with({{"cpu", "8"}}), json::array(),
                            vgpu_config::kDriverName)
                  .empty());
  EXPECT_TRUE(find_withheld(gpus, 2, false, node_with({{"nvidia.com/gpu", "0"}}), json::array(),
                            vgpu_config::kDriverName)
                  .empty());
  // A stopped plugin: allocatable 0, capacity kept a while; its GPUs may still be in use.
  const json stopping = {
      {"metadata", {{"name", "node-a"}}},
      {"status",
       {{"capacity", {{"nvidia.com/gpu", "2"}}}, {"allocatable", {{"nvidia.com/gpu", "0"}}}}}};
  EXPECT_EQ(find_withheld(gpus, 2, false, stopping, json::array(), vgpu_config::kDriverName).size(),
            2u);

  // --gpus 1 on a node of 3: the plugin may have the other 2, not 3.
  const std::vector<GpuInfo> managed = {gpu(1, kGpu1)};
  EXPECT_TRUE(find_withheld(managed, 3, true, node_with({{"nvidia.com/gpu", "2"}}), json::array(),
                            vgpu_config::kDriverName)
                  .empty());
  const std::vector<WithheldGpu> overlap = find_withheld(
      managed, 3, true, node_with({{"nvidia.com/gpu", "2"}, {"nvidia.com/mig-1g.10gb", "1"}}),
      json::array(), vgpu_config::kDriverName);
  ASSERT_EQ(overlap.size(), 1u);
  EXPECT_EQ(overlap[0].detail,
            "the Node advertises nvidia.com/gpu=2, nvidia.com/mig-1g.10gb=1 but --gpus leaves 2 "
            "of the node's 3 GPUs to the device plugin");
}

TEST(FindWithheld, AnotherDriversSliceNamingTheUuidWithholdsThatGpuOnly) {
  const std::vector<GpuInfo> gpus = {gpu(0, kGpu0), gpu(1, kGpu1)};
  json slices = json::array({nvidia_dra_slice("node-a", "gpu-0", kGpu0),
                             // Another node's, and our own: not another allocator of this GPU.
                             nvidia_dra_slice("node-b", "gpu-1", kGpu1)});
  json ours = nvidia_dra_slice("node-a", "gpu-1", kGpu1);
  ours["spec"]["driver"] = vgpu_config::kDriverName;
  slices.push_back(ours);
  // A MIG device names its GPU as parentUUID, here qualified.
  json mig = nvidia_dra_slice("node-a", "gpu-9-mig-0", "MIG-1");
  mig["spec"]["driver"] = "mig.example.com";
  mig["spec"]["devices"][0]["attributes"]["gpu.nvidia.com/parentUUID"] = {{"string", kGpu1}};
  const std::vector<WithheldGpu> withheld =
      find_withheld(gpus, 2, false, node_with({{"cpu", "8"}}), slices, vgpu_config::kDriverName);
  ASSERT_EQ(withheld.size(), 1u);
  EXPECT_EQ(withheld[0].uuid, kGpu0);
  EXPECT_EQ(withheld[0].reason, "other-dra-driver");
  EXPECT_EQ(withheld[0].detail,
            "ResourceSlice \"node-a-gpu.nvidia.com-abcde\" of driver gpu.nvidia.com lists it "
            "(device gpu-0)");
  slices.push_back(mig);
  const std::vector<WithheldGpu> both =
      find_withheld(gpus, 2, false, node_with({{"cpu", "8"}}), slices, vgpu_config::kDriverName);
  ASSERT_EQ(both.size(), 2u);
  EXPECT_EQ(both[1].uuid, kGpu1);
}

TEST(FindWithheld, AComputeModeSetOutsideTesseraWithholdsThatGpu) {
  const std::vector<GpuInfo> gpus = {gpu(0, kGpu0), gpu(1, kGpu1)};
  EXPECT_EQ(compute_mode_name(NVML_COMPUTEMODE_DEFAULT), "");
  EXPECT_EQ(compute_mode_name(NVML_COMPUTEMODE_EXCLUSIVE_PROCESS), "EXCLUSIVE_PROCESS");
  const std::vector<WithheldGpu> withheld = find_withheld(
      gpus, 2, false, node_with({{"cpu", "8"}}), json::array(), vgpu_config::kDriverName,
      {{kGpu1, compute_mode_name(NVML_COMPUTEMODE_PROHIBITED)}});
  ASSERT_EQ(withheld.size(), 1u);
  EXPECT_EQ(withheld[0].device, "gpu-1");
  EXPECT_EQ(withheld[0].reason, "compute-mode");
  EXPECT_EQ(withheld[0].detail,
            "its compute mode is PROHIBITED, set outside Tessera (shares need "
            "DEFAULT: nvidia-smi -i " +
                std::string(kGpu1) + " -c DEFAULT)");
}

TEST(NodeEventWriter, WritesAnEventKubeApiserverAcceptsAboutTheNode) {
  FakeApiServer api;
  kube::HttpKubeClient client(api.connection());
  NodeEventWriter writer(client, "node-a");
  json event = writer.build("Warning", kGpuWithheldReason, "why", 1'700'000'000'123'456'789);
  EXPECT_EQ(apiserver_check(event), "");
  EXPECT_EQ(event["metadata"]["name"], "node-a.17979cfe3d85cd15");
  // kube-apiserver's rules hold in the stand-in: a Node's Event outside "default" is refused.
  json elsewhere = event;
  elsewhere["metadata"]["namespace"] = "kube-system";
  EXPECT_EQ(apiserver_check(elsewhere, "kube-system"),
            "Event \"node-a.17979cfe3d85cd15\" is invalid: involvedObject.namespace: Invalid "
            "value: \"\": does not match event.namespace");
  EXPECT_EQ(apiserver_check(elsewhere, "default"),
            "the namespace of the provided object does not match the namespace sent on the "
            "request");
  EXPECT_EQ(event["firstTimestamp"], "2023-11-14T22:13:20Z");
  ASSERT_EQ(writer.post("Warning", kGpuWithheldReason, "why").message(), "");
  const std::vector<json> stored = api.stored_events();
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0]["metadata"]["namespace"], "default");
  EXPECT_EQ(stored[0]["involvedObject"],
            json({{"apiVersion", "v1"}, {"kind", "Node"}, {"name", "node-a"}, {"uid", "node-a"}}));
  EXPECT_EQ(stored[0]["reason"], "GpuWithheld");
}

// The agent on a node of two simulated GPUs, against the stand-in API server.
class CoexistingAgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = doubles_.dir() / "node";
    fs::create_directories(base_);
    setenv("SIMGPU_STATE", (base_ / "simgpu.state").c_str(), 1);
    setenv("SIMGPU_DEVICES",
           "name=NVIDIA H200,memory=143771Mi,sms=132,cc=9.0;"
           "name=NVIDIA H200,memory=143771Mi,sms=132,cc=9.0",
           1);
    sockets_ = fs::path("/tmp") / ("coex-" + std::to_string(getpid()));
    config_ = testing::test_node_config(api_, base_, sockets_);
    config_.metrics_address = "";
    config_.api_socket = "off";
    config_.check_interval_s = 0;
    config_.process_watch = "off";
    // As kubelet registers a node: capacity (allocatable defaults to it).
    api_.node_status = {{"capacity", {{"cpu", "16"}, {"memory", "128Gi"}, {"pods", "110"}}}};
  }
  void TearDown() override {
    fs::remove(base_ / "simgpu.state");
    fs::remove_all(sockets_);
  }

  // The devices the agent's slices publish, by name.
  std::vector<std::string> published() {
    std::vector<std::string> names;
    for (const auto& [name, slice] : api_.stored_slices())
      if (slice["spec"]["driver"] == vgpu_config::kDriverName)
        for (const json& device : slice["spec"].value("devices", json::array()))
          names.push_back(device["name"]);
    return names;
  }
  // The Events about the Node: "<type> <reason>: <message>".
  std::vector<std::string> node_events() {
    std::vector<std::string> lines;
    for (const json& event : api_.stored_events()) {
      EXPECT_EQ(event["involvedObject"]["kind"], "Node");
      EXPECT_EQ(event["involvedObject"]["name"], "node-a");
      lines.push_back(event["type"].get<std::string>() + " " + event["reason"].get<std::string>() +
                      ": " + event["message"].get<std::string>());
    }
    return lines;
  }
  // One reconcile pass (the loop republishes, checking the other allocators again).
  void reconcile(NodeAgent& agent, uint64_t& passes) {
    clock_.advance(std::chrono::seconds(config_.reconcile_interval_s));
    ASSERT_TRUE(agent.wait_for_reconcile_passes(++passes));
  }

  SimulatedClock clock_;
  RecordingDoubles doubles_;
  fs::path base_, sockets_;
  FakeApiServer api_;
  AgentConfig config_;
};

TEST_F(CoexistingAgentTest, ADevicePluginsGpusAreNotPublishedUntilThePluginIsGone) {
  api_.node_status["capacity"]["nvidia.com/gpu"] = "2";
  NodeAgent agent(config_, clock_);
  ASSERT_EQ(agent.start().message(), "");
  EXPECT_TRUE(published().empty());
  const std::string why =
      "the Node advertises nvidia.com/gpu=2 (NVIDIA's device plugin hands out this node's GPUs; "
      "split them with --gpus) (docs/coexistence.md)";
  EXPECT_EQ(node_events(),
            (std::vector<std::string>{"Warning GpuWithheld: GPU gpu-0 (" + std::string(kGpu0) +
                                          ") is not published for DRA claims: " + why,
                                      "Warning GpuWithheld: GPU gpu-1 (" + std::string(kGpu1) +
                                          ") is not published for DRA claims: " + why}));
  const std::string metrics = agent.scrape_metrics();
  EXPECT_NE(metrics.find("tessera_gpu_withheld{uuid=\"" + std::string(kGpu0) +
                         "\",device=\"gpu-0\",node=\"node-a\",reason=\"device-plugin\"} 1\n"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("reason=\"device-plugin\"} 1\n", metrics.find(kGpu1)), std::string::npos);

  // Every pass checks again; the same finding is not told twice.
  uint64_t passes = 0;
  reconcile(agent, passes);
  EXPECT_EQ(node_events().size(), 2u);
  EXPECT_TRUE(published().empty());

  // The plugin uninstalled: kubelet drops its resource; the next pass publishes both GPUs.
  api_.set_node_status({{"capacity", {{"cpu", "16"}, {"memory", "128Gi"}, {"pods", "110"}}}});
  reconcile(agent, passes);
  EXPECT_EQ(published(), (std::vector<std::string>{"gpu-0", "gpu-1"}));
  const std::vector<std::string> events = node_events();
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[2], "Normal GpuPublished: GPU gpu-0 (" + std::string(kGpu0) +
                           ") is published again: no other allocator hands it out");
  EXPECT_EQ(agent.scrape_metrics().find("tessera_gpu_withheld{"), std::string::npos);
  agent.stop();
}

TEST_F(CoexistingAgentTest, AGpuAnotherDraDriverPublishesIsWithheldAndComesBackWhenItsSliceGoes) {
  ASSERT_EQ(api_.add_slice(nvidia_dra_slice("node-a", "gpu-1", kGpu1)), "");
  NodeAgent agent(config_, clock_);
  ASSERT_EQ(agent.start().message(), "");
  EXPECT_EQ(published(), std::vector<std::string>{"gpu-0"});
  EXPECT_EQ(node_events(),
            std::vector<std::string>{
                "Warning GpuWithheld: GPU gpu-1 (" + std::string(kGpu1) +
                ") is not published for DRA claims: ResourceSlice "
                "\"node-a-gpu.nvidia.com-abcde\" of driver gpu.nvidia.com lists it (device gpu-1) "
                "(docs/coexistence.md)"});
  EXPECT_NE(agent.scrape_metrics().find("device=\"gpu-1\",node=\"node-a\",reason=\"other-dra-"
                                        "driver\"} 1\n"),
            std::string::npos);
  // The other driver's slice is left alone.
  EXPECT_EQ(api_.stored_slices().count("node-a-gpu.nvidia.com-abcde"), 1u);

  ASSERT_TRUE(api_.remove_slice("node-a-gpu.nvidia.com-abcde"));
  uint64_t passes = 0;
  reconcile(agent, passes);
  EXPECT_EQ(published(), (std::vector<std::string>{"gpu-0", "gpu-1"}));
  EXPECT_EQ(node_events().back(), "Normal GpuPublished: GPU gpu-1 (" + std::string(kGpu1) +
                                      ") is published again: no other allocator hands it out");
  agent.stop();
}

TEST_F(CoexistingAgentTest, AGpuInAnExclusiveComputeModeIsWithheld) {
  // GPU 1 put in EXCLUSIVE_PROCESS by someone else (nvidia-smi -c); the simulated NVML reports it.
  setenv("SIMGPU_DEVICES",
         "name=NVIDIA H200,memory=143771Mi,sms=132,cc=9.0;"
         "name=NVIDIA H200,memory=143771Mi,sms=132,cc=9.0,mode=exclusive_process",
         1);
  NodeAgent agent(config_, clock_);
  ASSERT_EQ(agent.start().message(), "");
  EXPECT_EQ(published(), std::vector<std::string>{"gpu-0"});
  EXPECT_EQ(node_events(),
            std::vector<std::string>{"Warning GpuWithheld: GPU gpu-1 (" + std::string(kGpu1) +
                                     ") is not published for DRA claims: its compute mode is "
                                     "EXCLUSIVE_PROCESS, set outside Tessera (shares need DEFAULT: "
                                     "nvidia-smi -i " +
                                     kGpu1 + " -c DEFAULT) (docs/coexistence.md)"});
  EXPECT_NE(
      agent.scrape_metrics().find("device=\"gpu-1\",node=\"node-a\",reason=\"compute-mode\"} 1"),
      std::string::npos);
  agent.stop();
}

TEST_F(CoexistingAgentTest, GpusSplitsTheNodeWithADevicePlugin) {
  // The recipe of docs/coexistence.md: the device plugin has GPU 0, Tessera GPU 1.
  api_.node_status["capacity"]["nvidia.com/gpu"] = "1";
  config_.gpus = kGpu1;
  NodeAgent agent(config_, clock_);
  ASSERT_EQ(agent.start().message(), "");
  EXPECT_EQ(published(), std::vector<std::string>{"gpu-1"});
  EXPECT_TRUE(node_events().empty());
  ASSERT_EQ(agent.shares().devices().size(), 1u);  // claims are checked against GPU 1 only
  // The plugin given both GPUs (its NVIDIA_VISIBLE_DEVICES changed): GPU 1 is withheld too.
  api_.set_node_status({{"capacity", {{"cpu", "16"}, {"nvidia.com/gpu", "2"}}}});
  uint64_t passes = 0;
  reconcile(agent, passes);
  EXPECT_TRUE(published().empty());
  ASSERT_EQ(agent.withheld_gpus().size(), 1u);
  EXPECT_EQ(agent.withheld_gpus()[0].detail,
            "the Node advertises nvidia.com/gpu=2 but --gpus leaves 1 of the node's 2 GPUs to the "
            "device plugin");
  agent.stop();
}

}  // namespace
}  // namespace tessera::agent
