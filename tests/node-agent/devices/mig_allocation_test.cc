// Dynamic MIG end to end short of the GPU: the slices the agent publishes for a MIG-capable H200
// (split shape, as kube-apiserver stores them), claims allocated by kube-scheduler's allocator
// (tests/support/allocator, 1.36.2 with partitionable devices), prepared and unprepared through
// the kubelet plugin's real gRPC (PluginServer, KubeletSimulator) by the ShareManager with
// MigInstances over the NVML double (tests/node-agent/mig/fake_mig_driver.h): a claim for a whole
// 3g instance and two claims for shares inside the other 3g instance are allocated and prepared at
// their placements (MIG mode turned on by the first prepare), unprepare destroys what prepare
// created, and a claim overlapping them is refused by the allocator for the memory slices it
// lacks.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "../mig/fake_mig_driver.h"
#include "allocator/allocator.h"
#include "apiserver/claim_fixture.h"
#include "apiserver/write_back.h"
#include "devices/resource_slices.h"
#include "plugin/plugin_server.h"
#include "plugin/test_support.h"
#include "share/fake_driver.h"
#include "share/share_manager.h"
#include "share/share_test_support.h"

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::FakeKube;
using testing::FakeMigDriver;
using testing::h200;
using testing::KubeletSimulator;
namespace allocator = ::tessera::testing::allocator;
namespace apiserver = ::tessera::testing::apiserver;
namespace dra1 = testing::dra1;

constexpr char kNode[] = "node-a";

class MigAllocationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::temp_directory_path() / ("agent-mig-allocation-" + std::to_string(getpid()));
    fs::remove_all(base_);
    // The simulated proc root: every GPU instance's capability files and nvidia-caps' major.
    for (unsigned gi = 1; gi <= 14; ++gi) {
      const fs::path dir =
          base_ / "proc/driver/nvidia/capabilities/gpu0/mig" / ("gi" + std::to_string(gi));
      fs::create_directories(dir / "ci0");
      std::ofstream(dir / "access") << "DeviceFileMinor: " << 3 + 9 * gi << "\n";
      std::ofstream(dir / "ci0/access") << "DeviceFileMinor: " << 4 + 9 * gi << "\n";
    }
    std::ofstream(base_ / "proc/devices") << "Character devices:\n195 nvidia\n236 nvidia-caps\n";
    driver_.gpus[gpu_.uuid].enabled = false;  // the first prepare turns MIG mode on

    // What the agent publishes, as the API server stores it.
    mig_.strategy = MigStrategy::kDynamic;
    mig_.shape = SliceShape::kSplit;
    Result<MigGpu> state = driver_.inspect(gpu_);
    ASSERT_TRUE(state.is_ok());
    mig_.gpus = {*state};
    SliceIdentity identity{"vgpu.tessera.dev", kNode, "3d7c0b8e-node-uid"};
    for (const json& slice : build_resource_slices({gpu_}, identity, 1, {}, &mig_)) {
      apiserver::ServerFields fields;
      fields.uid = "slice-uid";
      fields.resource_version = "3";
      Result<json> stored = apiserver::write_back(slice, nullptr, fields);
      ASSERT_TRUE(stored.is_ok()) << stored.status().message();
      input_.slices.push_back(*stored);
    }
    input_.device_classes = {
        {{"metadata", {{"name", "vgpu.tessera.dev"}}},
         {"spec",
          {{"selectors",
            {{{"cel", {{"expression", "device.driver == \"vgpu.tessera.dev\""}}}}}}}}}};
    input_.node_name = kNode;

    ShareManagerOptions options;
    options.root = (base_ / "state").string();
    options.cdi_dir = (base_ / "cdi").string();
    options.node_name = kNode;
    options.shim_path = testing::write_fake_shim(base_ / "node/shim/libvgpu.so");
    options.container_driver = testing::fake_container_driver(base_ / "node/driver");
    options.proc_root = (base_ / "proc").string();
    MigInstancesOptions instances;
    instances.root = options.root;
    instances.allow_mode_change = true;
    instances_ = std::make_unique<MigInstances>(instances, driver_, std::vector<GpuInfo>{gpu_});
    options.mig_instances = instances_.get();
    shares_ = std::make_unique<ShareManager>(options, kube_, node_devices({gpu_}, &mig_));
    ASSERT_EQ(shares_->start().message(), "");
    PluginServerOptions plugin;
    plugin.registry_dir = base_ / "plugins_registry";
    plugin.plugins_dir = base_ / "plugins";
    plugin.log = [](std::string_view) {};
    server_ = std::make_unique<PluginServer>(plugin, *shares_);
    ASSERT_EQ(server_->start().message(), "");
    kubelet_ = std::make_unique<KubeletSimulator>(server_->registration_socket());
    kubelet_->connect();
  }
  void TearDown() override {
    kubelet_.reset();
    server_.reset();
    shares_.reset();
    fs::remove_all(base_);
  }

  // A claim of one request for a MIG device of `profile_memory` (the profile's memory: 3g.71gb
  // and 4g.71gb share theirs, 1g.18gb and its +me twin theirs), asking `capacity`, allocated by
  // the scheduler's allocator beside the claims allocated before; stored where the plugin reads
  // it (KubeletSimulator asks for claim-<uid> in ns-<uid>). By type and memory: a profile
  // selector would also need `type == "mig" &&` before it (a whole GPU has no profile attribute;
  // CEL's && absorbs that missing key's error only beside a false).
  Result<json> allocate(const std::string& uid, const std::string& profile_memory, json capacity) {
    json exactly = {{"deviceClassName", "vgpu.tessera.dev"},
                    {"allocationMode", "ExactCount"},
                    {"count", 1},
                    {"selectors",
                     {{{"cel",
                        {{"expression",
                          "device.attributes[\"vgpu.tessera.dev\"].type == \"mig\" && "
                          "device.capacity[\"vgpu.tessera.dev\"].memory.compareTo(quantity(\"" +
                              profile_memory + "\")) == 0"}}}}}}};
    if (!capacity.empty()) exactly["capacity"] = {{"requests", capacity}};
    json claim = {
        {"apiVersion", "resource.k8s.io/v1"},
        {"kind", "ResourceClaim"},
        {"metadata",
         {{"name", "claim-" + uid},
          {"namespace", "ns-" + uid},
          {"uid", uid},
          {"resourceVersion", "7"}}},
        {"spec", {{"devices", {{"requests", {{{"name", "gpu"}, {"exactly", exactly}}}}}}}}};
    input_.share_id = [uid] { return "share-" + uid.substr(0, 8); };
    TESSERA_ASSIGN_OR_RETURN(json allocated, allocator::allocated(input_, claim));
    allocated["status"]["reservedFor"] = {
        {{"resource", "pods"}, {"name", "pod-" + uid}, {"uid", "pod-uid-" + uid}}};
    input_.allocated_claims.push_back(allocated);
    kube_.objects[kube::resource_claim_path("ns-" + uid, "claim-" + uid)] = allocated.dump();
    return allocated;
  }
  static std::string device_of(const json& claim) {
    return claim["status"]["allocation"]["devices"]["results"][0]["device"];
  }
  const MigInstance* instance_at(unsigned start) {
    for (const auto& instance : driver_.gpus[gpu_.uuid].instances)
      if (instance.placement.start == start) return &instance;
    return nullptr;
  }

  fs::path base_;
  GpuInfo gpu_ = h200(0);
  FakeMigDriver driver_;
  MigPublication mig_;
  allocator::AllocatorInput input_;
  FakeKube kube_;
  std::unique_ptr<MigInstances> instances_;
  std::unique_ptr<ShareManager> shares_;
  std::unique_ptr<PluginServer> server_;
  std::unique_ptr<KubeletSimulator> kubelet_;
};

TEST_F(MigAllocationTest, InstancesAtTheAllocatedPlacementsAndNoneOverlapping) {
  const std::string whole = "c1000000-0000-4000-8000-000000000001";
  const std::string first = "c2000000-0000-4000-8000-000000000002";
  const std::string second = "c3000000-0000-4000-8000-000000000003";
  Result<json> whole_claim = allocate(whole, "71168Mi", {{"cores", "100"}});
  ASSERT_TRUE(whole_claim.is_ok()) << whole_claim.status().message();
  Result<json> first_claim = allocate(first, "71168Mi", {{"memory", "20Gi"}, {"cores", "30"}});
  ASSERT_TRUE(first_claim.is_ok()) << first_claim.status().message();
  Result<json> second_claim = allocate(second, "71168Mi", {{"memory", "20Gi"}, {"cores", "30"}});
  ASSERT_TRUE(second_claim.is_ok()) << second_claim.status().message();
  // The whole instance took one 3g placement; both shares the other.
  EXPECT_EQ(device_of(*whole_claim), "gpu-0-mig-3g71gb-0");
  EXPECT_EQ(device_of(*first_claim), "gpu-0-mig-3g71gb-4");
  EXPECT_EQ(device_of(*second_claim), "gpu-0-mig-3g71gb-4");

  // Overlapping claims are the scheduler's to refuse: the GPU's counters (its memory slices, its
  // memory) are taken.
  // 4g.71gb (and 3g.71gb), 1g.18gb (and +me), 7g.141gb: every placement overlaps.
  for (const char* profile : {"71168Mi", "16384Mi", "143104Mi"}) {
    Result<json> refused =
        allocate("c9000000-0000-4000-8000-000000000009", profile, json::object());
    ASSERT_FALSE(refused.is_ok()) << profile << " got " << device_of(*refused);
    EXPECT_NE(refused.status().message().find("of counter set gpu-0-counters"), std::string::npos)
        << refused.status().message();
  }
  // The whole GPU too (type gpu: it consumes every counter).
  {
    json claim = {
        {"apiVersion", "resource.k8s.io/v1"},
        {"kind", "ResourceClaim"},
        {"metadata", {{"name", "whole-gpu"}, {"namespace", "ns"}, {"uid", "u-gpu"}}},
        {"spec",
         {{"devices",
           {{"requests",
             {{{"name", "gpu"},
               {"exactly",
                {{"deviceClassName", "vgpu.tessera.dev"},
                 {"allocationMode", "ExactCount"},
                 {"count", 1},
                 {"selectors",
                  {{{"cel",
                     {{"expression",
                       "device.attributes[\"vgpu.tessera.dev\"].type == \"gpu\""}}}}}}}}}}}}}}}};
    Result<json> refused = allocator::allocated(input_, claim);
    ASSERT_FALSE(refused.is_ok());
  }

  // Kubelet prepares the three claims through the plugin's gRPC.
  dra1::NodePrepareResourcesResponse prepared;
  ASSERT_TRUE(kubelet_->prepare_v1({whole, first, second}, &prepared).ok());
  for (const std::string& uid : {whole, first, second}) {
    const auto& answer = prepared.claims().at(uid);
    ASSERT_EQ(answer.error(), "") << uid;
    ASSERT_EQ(answer.devices_size(), 1);
    EXPECT_EQ(answer.devices(0).pool_name(), kNode);
    EXPECT_EQ(answer.devices(0).share_id(), "share-" + uid.substr(0, 8));
  }
  EXPECT_TRUE(driver_.gpus[gpu_.uuid].enabled);
  EXPECT_EQ(driver_.mode_changes, 1);
  ASSERT_EQ(driver_.gpus[gpu_.uuid].instances.size(), 2u);
  ASSERT_NE(instance_at(0), nullptr);
  ASSERT_NE(instance_at(4), nullptr);
  EXPECT_EQ(instance_at(0)->placement.size, 4u);
  EXPECT_EQ(instance_at(4)->profile_id, 9u);
  EXPECT_EQ(driver_.creations, 2);
  const json spec = json::parse(testing::read(shares_->cdi_spec_path(first)));
  const json env = spec["devices"][0]["containerEdits"]["env"];
  EXPECT_NE(std::find(env.begin(), env.end(), "CUDA_VISIBLE_DEVICES=" + instance_at(4)->uuid),
            env.end())
      << env.dump();

  // Unprepare: the shared instance goes with its last share, and nothing is left.
  dra1::NodeUnprepareResourcesResponse unprepared;
  ASSERT_TRUE(kubelet_->unprepare_v1({first}, &unprepared).ok());
  EXPECT_EQ(unprepared.claims().at(first).error(), "");
  EXPECT_NE(instance_at(4), nullptr);
  ASSERT_TRUE(kubelet_->unprepare_v1({whole, second}, &unprepared).ok());
  for (const std::string& uid : {whole, second}) EXPECT_EQ(unprepared.claims().at(uid).error(), "");
  EXPECT_TRUE(driver_.gpus[gpu_.uuid].instances.empty());
  EXPECT_EQ(driver_.destructions, 2);
  EXPECT_TRUE(instances_->records().empty());
}

}  // namespace
}  // namespace tessera::agent
