// MigInstances: dynamic MIG instances created at a placement, shared by several shares, destroyed
// by the last, and left consistent by a crash at any step (the driver double stops where NVML
// cannot be stopped); bad input refused with nothing created.
//
// On the NVML double because the simulated GPU cannot do it: a profile or placement MigInstances
// is handed that the GPU's NVML then does not list (the agent only publishes what NVML lists, so
// through the agent such a device is refused earlier as unknown:
// agent.NodeAgentTest.BadMigClaimsAreRefusedThroughTheKubeletPluginWithNothingHalfCreated), an NVML
// call failing between two steps (AFailedStepUndoesWhatTheCallCreated), a destroy NVML refuses
// (ReleaseOfAnInstanceInUseKeepsItsRecord), and a crash after every durable step rather than only
// after NVML's two creations (ACrashAtAnyStepThenAReconcileLeavesNothing). The process-kill
// versions on the simulated GPU: agent.NodeAgentTest.AnAgentKilled*.
#include "mig/mig_instances.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <gtest/gtest.h>

#include "fake_mig_driver.h"
#include "files/atomic_file.h"
#include "mig/mig_caps.h"

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;
using testing::FakeMigDriver;
using testing::h200;

struct Crash : std::runtime_error {
  Crash() : std::runtime_error("crash") {}
};

class MigInstancesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("tessera-mig-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
    driver_.gpus[gpu_.uuid].enabled = true;
  }
  void TearDown() override { fs::remove_all(root_); }

  MigInstances instances(bool allow_mode_change = false, std::function<void(int)> after_step = {}) {
    MigInstancesOptions options;
    options.root = root_.string();
    options.allow_mode_change = allow_mode_change;
    options.after_step = std::move(after_step);
    return MigInstances(options, driver_, {gpu_});
  }
  MigDeviceRef device(const std::string& profile, unsigned id, unsigned start, unsigned size) {
    MigDeviceRef ref;
    ref.kind = MigKind::kDynamic;
    ref.parent_uuid = gpu_.uuid;
    ref.profile = profile;
    ref.profile_id = id;
    ref.placement = {start, size};
    return ref;
  }
  std::vector<MigInstance>& on_gpu() { return driver_.gpus[gpu_.uuid].instances; }
  size_t record_files() {
    size_t count = 0;
    std::error_code ec;
    for (const auto& item : fs::directory_iterator(root_ / "mig", ec))
      count += item.path().extension() == ".json";
    return count;
  }

  fs::path root_;
  GpuInfo gpu_ = h200();
  FakeMigDriver driver_;
};

TEST(MigProfileName, AsNvidiaComputesIt) {
  constexpr uint64_t kMiB = 1ull << 20;
  const uint64_t h200_memory = 143771 * kMiB, h100 = 81559 * kMiB, a100 = 40960 * kMiB;
  EXPECT_EQ(mig_profile_name(0x0, 1, 16384 * kMiB, h200_memory), "1g.18gb");
  EXPECT_EQ(mig_profile_name(0x7, 1, 16384 * kMiB, h200_memory), "1g.18gb+me");
  EXPECT_EQ(mig_profile_name(0x9, 1, 33024 * kMiB, h200_memory), "1g.35gb");
  EXPECT_EQ(mig_profile_name(0x1, 2, 33024 * kMiB, h200_memory), "2g.35gb");
  EXPECT_EQ(mig_profile_name(0x2, 3, 71168 * kMiB, h200_memory), "3g.71gb");
  EXPECT_EQ(mig_profile_name(0x4, 7, 143104 * kMiB, h200_memory), "7g.141gb");
  EXPECT_EQ(mig_profile_name(0x0, 1, 9984 * kMiB, h100), "1g.10gb");
  EXPECT_EQ(mig_profile_name(0x2, 3, 40448 * kMiB, h100), "3g.40gb");
  EXPECT_EQ(mig_profile_name(0x4, 7, 81152 * kMiB, h100), "7g.80gb");
  EXPECT_EQ(mig_profile_name(0x0, 1, 4864 * kMiB, a100), "1g.5gb");
  EXPECT_EQ(mig_profile_name(0x4, 7, 40192 * kMiB, a100), "7g.40gb");
}

TEST(MigDeviceNames, AsTheContractSpellsThem) {
  EXPECT_EQ(static_mig_device_name(3, 7), "gpu-3-mig-gi7");
  EXPECT_EQ(dynamic_mig_device_name(0, "3g.71gb", 4), "gpu-0-mig-3g71gb-4");
  EXPECT_EQ(dynamic_mig_device_name(1, "1g.18gb+me", 6), "gpu-1-mig-1g18gb-me-6");
}

TEST_F(MigInstancesTest, CreatesAtThePlacementAndTheLastReleaseDestroys) {
  MigInstances mig = instances();
  const MigDeviceRef three_g = device("3g.71gb", 9, 4, 4);
  Result<AcquiredMig> first = mig.acquire(three_g, 0, "claim-a-gpu-0-mig-3g71gb-4-s1");
  ASSERT_TRUE(first.is_ok()) << first.status().message();
  ASSERT_EQ(on_gpu().size(), 1u);
  EXPECT_EQ(on_gpu()[0].placement, (MigPlacement{4, 4}));
  EXPECT_EQ(on_gpu()[0].profile_id, 9u);
  EXPECT_EQ(first->uuid, on_gpu()[0].uuid);
  EXPECT_EQ(first->device.gi_id, on_gpu()[0].gi_id);
  EXPECT_EQ(first->device.ci_id, 0u);
  // A second share adopts it.
  Result<AcquiredMig> second = mig.acquire(three_g, 0, "claim-b-gpu-0-mig-3g71gb-4-s2");
  ASSERT_TRUE(second.is_ok()) << second.status().message();
  EXPECT_EQ(second->uuid, first->uuid);
  EXPECT_EQ(driver_.creations, 1);
  ASSERT_EQ(mig.records().size(), 1u);
  EXPECT_EQ(mig.records()[0].users.size(), 2u);
  EXPECT_EQ(mig.records()[0].step, MigStep::kReady);
  // The first share's release keeps it, the last one's destroys it and its record.
  ASSERT_TRUE(mig.release(three_g, "claim-a-gpu-0-mig-3g71gb-4-s1").is_ok());
  EXPECT_EQ(on_gpu().size(), 1u);
  ASSERT_TRUE(mig.release(three_g, "claim-b-gpu-0-mig-3g71gb-4-s2").is_ok());
  EXPECT_TRUE(on_gpu().empty());
  EXPECT_EQ(record_files(), 0u);
  // Released twice: nothing to do.
  EXPECT_TRUE(mig.release(three_g, "claim-b-gpu-0-mig-3g71gb-4-s2").is_ok());
}

TEST_F(MigInstancesTest, BadInputIsRefusedWithNothingCreated) {
  MigInstances mig = instances();
  Result<AcquiredMig> unknown = mig.acquire(device("5g.99gb", 77, 0, 4), 0, "u");
  ASSERT_FALSE(unknown.is_ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("MIG profile 5g.99gb (ID 77)"), std::string::npos)
      << unknown.status().message();
  Result<AcquiredMig> off = mig.acquire(device("3g.71gb", 9, 2, 4), 0, "u");
  ASSERT_FALSE(off.is_ok());
  EXPECT_EQ(off.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(off.status().message().find("placement 2:4 is not one of profile 3g.71gb's"),
            std::string::npos)
      << off.status().message();
  Result<AcquiredMig> beyond = mig.acquire(device("1g.18gb", 19, 7, 1), 0, "u");
  ASSERT_FALSE(beyond.is_ok());
  EXPECT_EQ(beyond.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(on_gpu().empty());
  EXPECT_EQ(record_files(), 0u);
  EXPECT_EQ(driver_.creations, 0);
}

TEST_F(MigInstancesTest, ModeChangeOnlyWhenAllowedAndNeverWhileProcessesRun) {
  driver_.gpus[gpu_.uuid].enabled = false;
  const MigDeviceRef one_g = device("1g.18gb", 19, 3, 1);
  {
    MigInstances mig = instances(/*allow_mode_change=*/false);
    Result<AcquiredMig> refused = mig.acquire(one_g, 0, "u");
    ASSERT_FALSE(refused.is_ok());
    EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(refused.status().message().find("--allow-mig-mode-change"), std::string::npos)
        << refused.status().message();
  }
  driver_.gpus[gpu_.uuid].pids = {4242, 4343};
  MigInstances mig = instances(/*allow_mode_change=*/true);
  Result<AcquiredMig> busy = mig.acquire(one_g, 0, "u");
  ASSERT_FALSE(busy.is_ok());
  EXPECT_EQ(busy.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(busy.status().message().find("while processes run on it (pids 4242,4343)"),
            std::string::npos)
      << busy.status().message();
  EXPECT_FALSE(driver_.gpus[gpu_.uuid].enabled);
  EXPECT_EQ(driver_.mode_changes, 0);
  EXPECT_EQ(record_files(), 0u);
  driver_.gpus[gpu_.uuid].pids.clear();
  Result<AcquiredMig> created = mig.acquire(one_g, 0, "u");
  ASSERT_TRUE(created.is_ok()) << created.status().message();
  EXPECT_TRUE(driver_.gpus[gpu_.uuid].enabled);
  EXPECT_EQ(on_gpu().size(), 1u);
}

TEST_F(MigInstancesTest, AnInstanceTesseraDidNotCreateIsNeverTouched) {
  MigInstance foreign;
  foreign.gi_id = 2;
  foreign.profile_id = 9;
  foreign.placement = {0, 4};
  foreign.ci_id = 0;
  foreign.uuid = "MIG-f0f0f0f0-0000-5000-8000-000000000002";
  on_gpu().push_back(foreign);
  MigInstances mig = instances();
  Result<AcquiredMig> overlapping = mig.acquire(device("1g.18gb", 19, 1, 1), 0, "u");
  ASSERT_FALSE(overlapping.is_ok());
  EXPECT_EQ(overlapping.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(overlapping.status().message().find("overlaps GPU instance 2 at 0:4"),
            std::string::npos)
      << overlapping.status().message();
  // Beside it is fine; reconcile with no live share destroys ours, never the foreign one.
  ASSERT_TRUE(mig.acquire(device("3g.71gb", 9, 4, 4), 0, "u").is_ok());
  EXPECT_EQ(on_gpu().size(), 2u);
  const auto lines = mig.reconcile([] { return std::set<std::string>{}; });
  ASSERT_EQ(lines.size(), 1u);
  ASSERT_EQ(on_gpu().size(), 1u);
  EXPECT_EQ(on_gpu()[0].gi_id, 2u);
  EXPECT_EQ(on_gpu()[0].uuid, foreign.uuid);
}

TEST_F(MigInstancesTest, AFailedStepUndoesWhatTheCallCreated) {
  MigInstances mig = instances();
  driver_.fail_next["create_compute_instance"] =
      already_exists("nvmlGpuInstanceCreateComputeInstance: Insufficient Resources");
  Result<AcquiredMig> failed = mig.acquire(device("2g.35gb", 14, 2, 2), 0, "u");
  ASSERT_FALSE(failed.is_ok());
  EXPECT_NE(failed.status().message().find("creating the compute instance of MIG 2g.35gb"),
            std::string::npos)
      << failed.status().message();
  EXPECT_EQ(driver_.creations, 1);
  EXPECT_TRUE(on_gpu().empty());
  EXPECT_EQ(record_files(), 0u);
}

// The agent dies right after NVML created the GPU instance, before its ID is recorded: the next
// agent's acquire adopts that instance (no second one), and a reconcile with no live share
// destroys it; an instance that existed before is left alone.
TEST_F(MigInstancesTest, ACrashBetweenCreateAndRecordLeaksNothing) {
  MigInstance foreign;
  foreign.gi_id = 1;
  foreign.profile_id = 19;
  foreign.placement = {0, 1};
  foreign.ci_id = 0;
  foreign.uuid = "MIG-f0f0f0f0-0000-5000-8000-000000000001";
  on_gpu().push_back(foreign);
  const MigDeviceRef three_g = device("3g.71gb", 9, 4, 4);
  driver_.after_change = [](const std::string& call) {
    if (call == "create_gpu_instance") throw Crash();
  };
  {
    MigInstances mig = instances();
    EXPECT_THROW((void)mig.acquire(three_g, 0, "share-1"), Crash);
  }
  driver_.after_change = {};
  ASSERT_EQ(on_gpu().size(), 2u);  // created, not recorded
  ASSERT_EQ(record_files(), 1u);
  {
    MigInstances restarted = instances();
    Result<AcquiredMig> adopted = restarted.acquire(three_g, 0, "share-1");
    ASSERT_TRUE(adopted.is_ok()) << adopted.status().message();
    EXPECT_EQ(driver_.creations, 1);  // the GPU instance of before, now with its CI
    EXPECT_EQ(on_gpu().size(), 2u);
  }
  // And the other way: the claim went away while the agent was down.
  driver_.after_change = [](const std::string& call) {
    if (call == "create_compute_instance") throw Crash();
  };
  {
    MigInstances mig = instances();
    EXPECT_THROW((void)mig.acquire(device("2g.35gb", 14, 2, 2), 0, "share-2"), Crash);
  }
  driver_.after_change = {};
  ASSERT_EQ(on_gpu().size(), 3u);
  MigInstances restarted = instances();
  const auto lines = restarted.reconcile([] { return std::set<std::string>{"share-1"}; });
  ASSERT_EQ(lines.size(), 1u) << (lines.empty() ? "" : lines[0]);
  EXPECT_NE(lines[0].find("MIG 2g.35gb at placement 2:2"), std::string::npos) << lines[0];
  ASSERT_EQ(on_gpu().size(), 2u);
  for (const auto& instance : on_gpu()) EXPECT_NE(instance.placement.start, 2u);
  ASSERT_EQ(restarted.records().size(), 1u);
  EXPECT_EQ(restarted.records()[0].users, std::set<std::string>{"share-1"});
}

// A crash at each durable step of acquire, then a restart whose share is gone: nothing is left.
TEST_F(MigInstancesTest, ACrashAtAnyStepThenAReconcileLeavesNothing) {
  for (int crash_at = 1; crash_at <= 3; ++crash_at) {
    {
      MigInstances mig = instances(false, [crash_at](int step) {
        if (step == crash_at) throw Crash();
      });
      EXPECT_THROW((void)mig.acquire(device("4g.71gb", 5, 0, 4), 0, "share"), Crash) << crash_at;
    }
    MigInstances restarted = instances();
    restarted.reconcile([] { return std::set<std::string>{}; });
    EXPECT_TRUE(on_gpu().empty()) << "crash at step " << crash_at;
    EXPECT_EQ(record_files(), 0u) << "crash at step " << crash_at;
  }
}

TEST_F(MigInstancesTest, ReleaseOfAnInstanceInUseKeepsItsRecord) {
  MigInstances mig = instances();
  const MigDeviceRef one_g = device("1g.35gb", 15, 6, 2);
  ASSERT_TRUE(mig.acquire(one_g, 0, "u").is_ok());
  driver_.fail_next["destroy_gpu_instance"] =
      unavailable("nvmlGpuInstanceDestroy: In use by another client");
  const Status busy = mig.release(one_g, "u");
  ASSERT_FALSE(busy.is_ok());
  EXPECT_NE(busy.message().find("In use by another client"), std::string::npos);
  ASSERT_EQ(mig.records().size(), 1u);
  EXPECT_EQ(mig.records()[0].step, MigStep::kDestroying);
  // The next reconcile finishes it.
  mig.reconcile([] { return std::set<std::string>{}; });
  EXPECT_TRUE(on_gpu().empty());
  EXPECT_EQ(record_files(), 0u);
}

TEST(MigRecord, RoundTripsAndNamesABadField) {
  MigRecord record;
  record.parent_uuid = "GPU-1";
  record.parent_minor = 2;
  record.profile_id = 9;
  record.profile = "3g.71gb";
  record.placement = {4, 4};
  record.step = MigStep::kCreatingComputeInstance;
  record.preexisting_gi_ids = {1, 3};
  record.gi_id = 5;
  record.users = {"a", "b"};
  Result<MigRecord> back = mig_record_from_json(mig_record_to_json(record), "r.json");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(*back, record);
  Result<MigRecord> bad = mig_record_from_json(
      R"({"parentUUID":"GPU-1","parentMinor":0,"profileID":9,"profile":"3g.71gb",)"
      R"("placement":{"start":4,"size":4},"step":"Half","preexistingGpuInstances":[],"users":[]})",
      "r.json");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("r.json: step"), std::string::npos)
      << bad.status().message();
}

TEST(MigCaps, MinorsFromTheCapabilityFilesAndTheMajorFromProcDevices) {
  const fs::path proc =
      fs::temp_directory_path() / ("tessera-mig-caps-" + std::to_string(getpid()));
  fs::remove_all(proc);
  fs::create_directories(proc / "driver/nvidia/capabilities/gpu0/mig/gi1/ci0");
  std::ofstream(proc / "driver/nvidia/capabilities/gpu0/mig/gi1/access")
      << "DeviceFileMinor: 12\nDeviceFileMode: 256\nDeviceFileModify: 1\n";
  std::ofstream(proc / "driver/nvidia/capabilities/gpu0/mig/gi1/ci0/access")
      << "DeviceFileMinor: 13\nDeviceFileMode: 256\nDeviceFileModify: 1\n";
  std::ofstream(proc / "devices") << "Character devices:\n  1 mem\n195 nvidia\n235 nvidia-caps\n"
                                     "\nBlock devices:\n  8 sd\n";
  Result<MigCapsNodes> caps = read_mig_caps(proc.string(), 0, 1, 0);
  ASSERT_TRUE(caps.is_ok()) << caps.status().message();
  EXPECT_EQ(*caps, (MigCapsNodes{235, 12, 13}));
  EXPECT_EQ(caps_node_path(12), "/dev/nvidia-caps/nvidia-cap12");
  Result<MigCapsNodes> missing = read_mig_caps(proc.string(), 0, 2, 0);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("gpu0/mig/gi2/access"), std::string::npos);
  EXPECT_FALSE(parse_caps_minor("DeviceFileMinor: x1\n", "f").is_ok());
  EXPECT_FALSE(parse_caps_major("Character devices:\n195 nvidia\n", "d").is_ok());
  fs::remove_all(proc);
}

}  // namespace
}  // namespace tessera::agent
