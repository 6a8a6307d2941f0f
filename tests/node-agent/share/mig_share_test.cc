// Shares on MIG devices through the share lifecycle (ShareManager with MigInstances over the NVML
// double of tests/node-agent/mig): a whole dynamic instance and two shares inside another are
// prepared at their placements, the CDI specs point the container at the MIG device through its
// capability nodes, the limits pages are keyed by the MIG UUID, unprepare destroys what prepare
// created (the last share of an instance), a crash between the instance and the CDI spec leaks
// nothing, bad input creates nothing, and a static instance is never created or destroyed.
// On the NVML double, which can stop the lifecycle between two NVML calls and put a stranger's
// instance over a placement the share manager was already given; the same paths through the real
// agent process and the simulated GPU: agent.NodeAgentTest.DynamicMig*, AnAgentKilled*,
// BadMigClaims*.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "../mig/fake_mig_driver.h"
#include "apiserver/claim_fixture.h"
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
using testing::read;
using testing::read_limits;
using testing::written_claim;

constexpr uint64_t kMiB = 1ull << 20;
constexpr unsigned kCapsMajor = 236;

// The capability minors as NVIDIA's driver numbers them (mig-facts.md §2.6).
unsigned gi_minor(unsigned gpu, unsigned gi) {
  return 3 + 135 * gpu + 9 * gi;
}

class MigShareTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::temp_directory_path() /
            ("agent-mig-share-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(base_);
    options_.root = (base_ / "state").string();
    options_.cdi_dir = (base_ / "cdi").string();
    options_.node_name = "node-a";
    options_.shim_path = testing::write_fake_shim(base_ / "node/shim/libvgpu.so");
    options_.container_driver = testing::fake_container_driver(base_ / "node/driver");
    options_.wall_clock_unix_ms = [] { return int64_t{1764604800123}; };
    // A simulated proc root: every GPU instance's capability files and nvidia-caps' major.
    options_.proc_root = (base_ / "proc").string();
    for (unsigned gi = 1; gi <= 14; ++gi) {
      const fs::path dir =
          base_ / "proc/driver/nvidia/capabilities/gpu0/mig" / ("gi" + std::to_string(gi));
      fs::create_directories(dir / "ci0");
      std::ofstream(dir / "access") << "DeviceFileMinor: " << gi_minor(0, gi)
                                    << "\nDeviceFileMode: 256\nDeviceFileModify: 1\n";
      std::ofstream(dir / "ci0/access") << "DeviceFileMinor: " << gi_minor(0, gi) + 1
                                        << "\nDeviceFileMode: 256\nDeviceFileModify: 1\n";
    }
    std::ofstream(base_ / "proc/devices") << "Character devices:\n195 nvidia\n"
                                          << kCapsMajor << " nvidia-caps\n";
    driver_.gpus[gpu_.uuid].enabled = true;
    for (const char* device : {"gpu-0-mig-3g71gb-0", "gpu-0-mig-3g71gb-4", "gpu-0-mig-2g35gb-2"})
      devices_.push_back(dynamic_device(device));
  }
  void TearDown() override { fs::remove_all(base_); }

  NodeDevice dynamic_device(const std::string& name) {
    for (const auto& profile : testing::h200_profiles())
      for (const auto& placement : profile.placements)
        if (dynamic_mig_device_name(0, profile.name, placement.start) == name) {
          MigDeviceRef ref;
          ref.kind = MigKind::kDynamic;
          ref.parent_uuid = gpu_.uuid;
          ref.profile_id = profile.id;
          ref.profile = profile.name;
          ref.placement = placement;
          ref.multiprocessors = profile.multiprocessors;
          return {name, "", 0, profile.memory_bytes, gpu_.product_name, ref};
        }
    ADD_FAILURE() << name;
    return {};
  }
  std::unique_ptr<MigInstances> instances(std::function<void(int)> after_step = {}) {
    MigInstancesOptions mig;
    mig.root = options_.root;
    mig.after_step = std::move(after_step);
    return std::make_unique<MigInstances>(mig, driver_, std::vector<GpuInfo>{gpu_});
  }
  std::unique_ptr<ShareManager> manager(MigInstances& mig, ShareManagerOptions options) {
    options.mig_instances = &mig;
    auto m = std::make_unique<ShareManager>(options, kube_, devices_);
    EXPECT_EQ(m->start().message(), "");
    return m;
  }
  ClaimRef add_claim(const std::string& name, const std::string& uid,
                     const std::vector<testing::FixtureShare>& shares) {
    kube_.objects[kube::resource_claim_path("tenants", name)] =
        written_claim(name, uid, shares).dump();
    return {"tenants", uid, name};
  }
  const MigInstance* instance_at(unsigned start) {
    for (const auto& instance : driver_.gpus[gpu_.uuid].instances)
      if (instance.placement.start == start) return &instance;
    return nullptr;
  }
  json cdi_spec(const ShareManager& m, const std::string& uid) {
    return json::parse(read(m.cdi_spec_path(uid)));
  }

  fs::path base_;
  GpuInfo gpu_ = h200(0);
  FakeMigDriver driver_;
  ShareManagerOptions options_;
  std::vector<NodeDevice> devices_;
  FakeKube kube_;
};

TEST_F(MigShareTest, AWholeInstanceAndTwoSharesInAnotherAreCreatedAndDestroyedByTheLast) {
  auto mig = instances();
  auto m = manager(*mig, options_);
  const ClaimRef whole = add_claim("whole", "11111111-0000-4000-8000-000000000001",
                                   {{"gpu", "gpu-0-mig-3g71gb-0", "w1", "", ""}});
  const ClaimRef first = add_claim("first", "11111111-0000-4000-8000-000000000002",
                                   {{"gpu", "gpu-0-mig-3g71gb-4", "s1", "20Gi", "30"}});
  const ClaimRef second = add_claim("second", "11111111-0000-4000-8000-000000000003",
                                    {{"gpu", "gpu-0-mig-3g71gb-4", "s2", "40Gi", "50"}});
  for (const ClaimRef& claim : {whole, first, second})
    ASSERT_EQ(m->prepare(claim).status().message(), "") << claim.name;
  ASSERT_EQ(driver_.gpus[gpu_.uuid].instances.size(), 2u);
  EXPECT_EQ(driver_.creations, 2);
  const MigInstance* at_zero = instance_at(0);
  const MigInstance* at_four = instance_at(4);
  ASSERT_TRUE(at_zero && at_four);
  EXPECT_EQ(at_zero->placement.size, 4u);
  EXPECT_EQ(at_four->profile_id, 9u);

  // The shares inside: limits keyed by the MIG UUID, memory within the instance.
  const auto limits =
      read_limits(options_.root + "/shares/" + first.uid + "-gpu-0-mig-3g71gb-4-s1/limits");
  EXPECT_EQ(limits.uuid, at_four->uuid);
  EXPECT_EQ(limits.memory, 20ull << 30);
  EXPECT_EQ(limits.cores, 30u);
  const auto whole_limits =
      read_limits(options_.root + "/shares/" + whole.uid + "-gpu-0-mig-3g71gb-0-w1/limits");
  EXPECT_EQ(whole_limits.uuid, at_zero->uuid);

  // The CDI spec: the MIG device by UUID, the parent's node and both capability nodes.
  const json spec = cdi_spec(*m, first.uid);
  const json& edits = spec["devices"][0]["containerEdits"];
  EXPECT_NE(
      std::find(edits["env"].begin(), edits["env"].end(), "CUDA_VISIBLE_DEVICES=" + at_four->uuid),
      edits["env"].end())
      << edits["env"].dump();
  std::vector<std::string> paths;
  for (const auto& node : edits["deviceNodes"]) {
    paths.push_back(node["path"]);
    if (node.contains("major")) {
      EXPECT_EQ(node["major"], kCapsMajor);
      EXPECT_EQ(node["type"], "c");
    }
  }
  const unsigned gi = at_four->gi_id;
  EXPECT_EQ(paths,
            (std::vector<std::string>{
                "/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap" + std::to_string(gi_minor(0, gi)),
                "/dev/nvidia-caps/nvidia-cap" + std::to_string(gi_minor(0, gi) + 1)}));
  // The checkpoint knows the instance.
  const ShareSpec recorded = m->checkpoint().at(first.uid).shares[0];
  ASSERT_TRUE(recorded.mig);
  EXPECT_EQ(recorded.mig->gi_id, gi);
  EXPECT_EQ(recorded.uuid, at_four->uuid);

  // Unprepare: the instance of two shares lives until the second goes.
  ASSERT_EQ(m->unprepare(first).message(), "");
  EXPECT_NE(instance_at(4), nullptr);
  ASSERT_EQ(m->unprepare(second).message(), "");
  EXPECT_EQ(instance_at(4), nullptr);
  ASSERT_EQ(m->unprepare(whole).message(), "");
  EXPECT_TRUE(driver_.gpus[gpu_.uuid].instances.empty());
  EXPECT_TRUE(mig->records().empty());
}

// The agent dies after the GPU instance exists and before the CDI spec is written, at each step
// between; restarted: the retried prepare adopts the instance (no second one) or the unprepare
// destroys it; a claim whose entry is gone has its instance destroyed at start.
TEST_F(MigShareTest, ACrashBetweenTheInstanceAndTheCdiSpecLeaksNothing) {
  const ClaimRef claim = add_claim("first", "22222222-0000-4000-8000-000000000001",
                                   {{"gpu", "gpu-0-mig-2g35gb-2", "s1", "8Gi", "20"}});
  struct Crash : std::runtime_error {
    Crash() : std::runtime_error("agent killed") {}
  };
  // MigInstances' steps: 1 record (creating GI), 2 record (GI created), 3 record (ready).
  for (int crash_at = 1; crash_at <= 3; ++crash_at)
    for (bool then_prepare : {true, false}) {
      SCOPED_TRACE("crash after MIG step " + std::to_string(crash_at) +
                   (then_prepare ? ", then prepare" : ", then unprepare"));
      {
        auto mig = instances([crash_at](int step) {
          if (step == crash_at) throw Crash();
        });
        auto m = manager(*mig, options_);
        const PrepareResult killed = m->prepare(claim);
        ASSERT_FALSE(killed.is_ok());
        EXPECT_NE(killed.status().message().find("agent killed"), std::string::npos);
      }
      EXPECT_FALSE(fs::exists(options_.cdi_dir + "/" + cdi_spec_file_name(claim.uid)));
      auto mig = instances();
      auto m = manager(*mig, options_);
      if (then_prepare) {
        ASSERT_EQ(m->prepare(claim).status().message(), "");
        ASSERT_EQ(driver_.gpus[gpu_.uuid].instances.size(), 1u);
        EXPECT_TRUE(fs::exists(m->cdi_spec_path(claim.uid)));
        EXPECT_EQ(m->checkpoint().at(claim.uid).state, ClaimState::kPrepareCompleted);
      }
      ASSERT_EQ(m->unprepare(claim).message(), "");
      EXPECT_TRUE(driver_.gpus[gpu_.uuid].instances.empty());
      EXPECT_TRUE(mig->records().empty());
      EXPECT_TRUE(m->checkpoint().empty());
    }
  // The claim unprepared (its entry gone) while the agent was down: start destroys the instance.
  {
    auto mig = instances([](int step) {
      if (step == 2) throw Crash();
    });
    auto m = manager(*mig, options_);
    ASSERT_FALSE(m->prepare(claim).is_ok());
  }
  ASSERT_EQ(driver_.gpus[gpu_.uuid].instances.size(), 1u);
  fs::remove(options_.root + "/checkpoint.json");
  auto mig = instances();
  auto m = manager(*mig, options_);
  EXPECT_TRUE(driver_.gpus[gpu_.uuid].instances.empty());
  EXPECT_TRUE(mig->records().empty());
}

TEST_F(MigShareTest, BadInputIsAClearErrorAndCreatesNothing) {
  auto mig = instances();
  auto m = manager(*mig, options_);
  // An instance Tessera did not create holds the placement.
  MigInstance foreign;
  foreign.gi_id = 9;
  foreign.profile_id = 19;
  foreign.placement = {2, 1};
  foreign.ci_id = 0;
  foreign.uuid = "MIG-f0f0f0f0-0000-5000-8000-000000000009";
  driver_.gpus[gpu_.uuid].instances.push_back(foreign);
  const ClaimRef taken = add_claim("taken", "33333333-0000-4000-8000-000000000001",
                                   {{"gpu", "gpu-0-mig-2g35gb-2", "s1", "8Gi", "20"}});
  const PrepareResult refused = m->prepare(taken);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find(
                "overlaps GPU instance 9 at 2:1, which Tessera did not create"),
            std::string::npos)
      << refused.status().message();
  // More memory than the instance has.
  const ClaimRef big = add_claim("big", "33333333-0000-4000-8000-000000000002",
                                 {{"gpu", "gpu-0-mig-3g71gb-4", "s1", "80Gi", "20"}});
  const PrepareResult too_big = m->prepare(big);
  ASSERT_FALSE(too_big.is_ok());
  EXPECT_NE(too_big.status().message().find("is more than MIG device gpu-0-mig-3g71gb-4 has"),
            std::string::npos)
      << too_big.status().message();
  // TimeSlicing has no interval on a MIG device.
  kube_.objects[kube::resource_claim_path("tenants", "sliced")] =
      written_claim("sliced", "33333333-0000-4000-8000-000000000003",
                    {{"gpu", "gpu-0-mig-3g71gb-4", "s1", "", ""}},  // the whole instance
                    json::array({testing::opaque_config(
                        "FromClaim", {{"apiVersion", "vgpu.tessera.dev/v1alpha1"},
                                      {"kind", "VgpuConfig"},
                                      {"sharing", {{"strategy", "TimeSlicing"}}}})}))
          .dump();
  const PrepareResult sliced =
      m->prepare({"tenants", "33333333-0000-4000-8000-000000000003", "sliced"});
  ASSERT_FALSE(sliced.is_ok());
  EXPECT_NE(sliced.status().message().find("TimeSlicing does not apply to MIG device"),
            std::string::npos)
      << sliced.status().message();
  // Nothing of ours was created; the foreign instance is untouched.
  EXPECT_EQ(driver_.creations, 0);
  ASSERT_EQ(driver_.gpus[gpu_.uuid].instances.size(), 1u);
  EXPECT_EQ(driver_.gpus[gpu_.uuid].instances[0].uuid, foreign.uuid);
  EXPECT_TRUE(mig->records().empty());
  for (const ClaimRef& claim : {taken, big}) ASSERT_EQ(m->unprepare(claim).message(), "");
  EXPECT_EQ(driver_.gpus[gpu_.uuid].instances.size(), 1u);
}

TEST_F(MigShareTest, AStaticInstanceIsUsedAsItIsAndNeverDestroyed) {
  MigInstance existing;
  existing.gi_id = 3;
  existing.profile_id = 9;
  existing.placement = {4, 4};
  existing.ci_id = 0;
  existing.uuid = "MIG-5a5a5a5a-0000-5000-8000-000000000003";
  driver_.gpus[gpu_.uuid].instances.push_back(existing);
  MigDeviceRef ref;
  ref.kind = MigKind::kStatic;
  ref.parent_uuid = gpu_.uuid;
  ref.profile_id = 9;
  ref.profile = "3g.71gb";
  ref.placement = {4, 4};
  ref.multiprocessors = 60;
  ref.gi_id = 3;
  ref.ci_id = 0;
  devices_.push_back({"gpu-0-mig-gi3", existing.uuid, 0, 71168 * kMiB, gpu_.product_name, ref});
  auto m = std::make_unique<ShareManager>(options_, kube_, devices_);  // no dynamic MIG here
  ASSERT_EQ(m->start().message(), "");
  const ClaimRef claim = add_claim("static", "44444444-0000-4000-8000-000000000001",
                                   {{"gpu", "gpu-0-mig-gi3", "s1", "8Gi", "20"}});
  ASSERT_EQ(m->prepare(claim).status().message(), "");
  const json spec = cdi_spec(*m, claim.uid);
  const json& nodes = spec["devices"][0]["containerEdits"]["deviceNodes"];
  ASSERT_EQ(nodes.size(), 3u);
  EXPECT_EQ(nodes[1]["path"], "/dev/nvidia-caps/nvidia-cap" + std::to_string(gi_minor(0, 3)));
  EXPECT_EQ(read_limits(options_.root + "/shares/" + claim.uid + "-gpu-0-mig-gi3-s1/limits").uuid,
            existing.uuid);
  ASSERT_EQ(m->unprepare(claim).message(), "");
  EXPECT_EQ(driver_.gpus[gpu_.uuid].instances.size(), 1u);
  EXPECT_EQ(driver_.creations + driver_.destructions, 0);
  // A dynamic device's claim on a node without dynamic MIG: refused, saying so.
  const ClaimRef dynamic = add_claim("dyn", "44444444-0000-4000-8000-000000000002",
                                     {{"gpu", "gpu-0-mig-3g71gb-0", "s1", "8Gi", "20"}});
  const PrepareResult refused = m->prepare(dynamic);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("dynamic MIG is not enabled on node node-a"),
            std::string::npos)
      << refused.status().message();
}

}  // namespace
}  // namespace tessera::agent
