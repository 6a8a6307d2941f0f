// The MPS and TimeSlicing backends driven by the share manager, and reconcile(): drift between
// the checkpoint and the host is repaired and reported; crashes converge with backends too.
#include "share/reconcile.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <latch>
#include <thread>

#include <gtest/gtest.h>

#include "apiserver/claim_fixture.h"
#include "backend_doubles.h"
#include "backends/command_runner.h"
#include "backends/mps_backend.h"
#include "backends/time_slice_backend.h"
#include "share/fake_driver.h"
#include "share/share_manager.h"
#include "share/share_test_support.h"
#include "tessera/share_contract.h"

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::fake_container_driver;
using testing::FakeKube;
using testing::make_claim;
using testing::opaque_config;
using testing::read_limits;
using testing::RecordingDoubles;
using testing::snapshot;
using testing::write_fake_shim;

constexpr char kMpsUid[] = "a1111111-0000-4000-8000-000000000001";
constexpr char kWholeUid[] = "a2222222-0000-4000-8000-000000000002";
constexpr char kQuotaUid[] = "a3333333-0000-4000-8000-000000000003";
constexpr char kOtherWholeUid[] = "a4444444-0000-4000-8000-000000000004";
constexpr char kGpu0[] = "GPU-00000000-0000-0000-0000-000000000000";
constexpr char kGpu1[] = "GPU-11111111-1111-1111-1111-111111111111";

json vgpu_config_json(const json& sharing) {
  return {
      {"apiVersion", "vgpu.tessera.dev/v1alpha1"}, {"kind", "VgpuConfig"}, {"sharing", sharing}};
}

class ReconcileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = doubles_.dir() / "agent";
    options_.root = (base_ / "state").string();
    options_.cdi_dir = (base_ / "cdi").string();
    options_.node_name = "node-a";
    // A fixed wall clock: the checkpoint a prepare writes is the same in every run.
    options_.wall_clock_unix_ms = [] { return int64_t{1764604800123}; };
    // The node's shim and driver, beside the state (the crash tests start from an empty base_).
    options_.shim_path = write_fake_shim(doubles_.dir() / "node/shim/libvgpu.so");
    options_.container_driver = fake_container_driver(doubles_.dir() / "node/driver");
    MpsOptions mps;
    mps.control = RecordingDoubles::mps_control();
    mps.root = (doubles_.dir() / "mps").string();
    mps.private_dev_shm = testing::private_dev_shm_supported();
    mps.timeout = std::chrono::milliseconds(5000);
    mps_ = std::make_unique<MpsBackend>(mps);
    mps_options_ = mps;
    TimeSliceOptions slices;
    slices.nvidia_smi = RecordingDoubles::nvidia_smi();
    slices.root = (doubles_.dir() / "timeslice").string();
    time_slice_ = std::make_unique<TimeSliceBackend>(slices);
    time_slice_options_ = slices;
    options_.mps = mps_.get();
    options_.time_slice = time_slice_.get();
    devices_ = {{"gpu-0", kGpu0, 0, 150ull << 30}, {"gpu-1", kGpu1, 1, 150ull << 30}};

    add_claim("mps", kMpsUid,
              {{"a", "gpu-0", "s-a", "8Gi", "30"}, {"b", "gpu-0", "s-b", "4Gi", "70"}},
              json::array({opaque_config("FromClass", vgpu_config_json({{"strategy", "MPS"}}))}));
    add_claim("whole", kWholeUid, {{"gpu", "gpu-1", "", "", ""}},
              json::array({opaque_config("FromClaim", vgpu_config_json({{"strategy", "TimeSlicing"},
                                                                        {"timeSlice", "Long"}}))}));
    add_claim("quota", kQuotaUid, {{"gpu", "gpu-0", "s-c", "2Gi", "20"}});
    add_claim(
        "other-whole", kOtherWholeUid, {{"gpu", "gpu-1", "", "", ""}},
        json::array({opaque_config("FromClaim", vgpu_config_json({{"strategy", "TimeSlicing"},
                                                                  {"timeSlice", "Short"}}))}));
  }
  void TearDown() override {
    for (const auto& name : mps_->share_folders()) mps_->stop(name).ignore();
  }

  void add_claim(const std::string& name, const std::string& uid,
                 const std::vector<testing::FixtureShare>& shares,
                 const json& configs = json::array()) {
    kube_.objects[kube::resource_claim_path("tenants", name)] =
        make_claim(name, uid, shares, configs).dump();
  }
  std::unique_ptr<ShareManager> manager(ReconcileReport* report = nullptr) {
    auto m = std::make_unique<ShareManager>(options_, kube_, devices_);
    EXPECT_EQ(m->start(report).message(), "");
    return m;
  }
  static std::string share_name(const char* uid, const char* device, const char* share_id) {
    return std::string(uid) + "-" + device + "-" + share_id;
  }
  std::string share_dir(const std::string& name) const { return options_.root + "/shares/" + name; }

  RecordingDoubles doubles_;
  fs::path base_;
  ShareManagerOptions options_;
  std::unique_ptr<MpsBackend> mps_;
  std::unique_ptr<TimeSliceBackend> time_slice_;
  MpsOptions mps_options_;  // what they were made with (another agent's backends use the same)
  TimeSliceOptions time_slice_options_;
  std::vector<NodeDevice> devices_;
  FakeKube kube_;
  const ClaimRef mps_claim_{"tenants", kMpsUid, "mps"};
  const ClaimRef whole_claim_{"tenants", kWholeUid, "whole"};
  const ClaimRef quota_claim_{"tenants", kQuotaUid, "quota"};
  const ClaimRef other_whole_claim_{"tenants", kOtherWholeUid, "other-whole"};
  const std::string share_a_ = share_name(kMpsUid, "gpu-0", "s-a");
  const std::string share_b_ = share_name(kMpsUid, "gpu-0", "s-b");
  const std::string share_c_ = share_name(kQuotaUid, "gpu-0", "s-c");
};

TEST_F(ReconcileTest, MpsClaimGetsADaemonPerShareAndItsCdiEdits) {
  auto m = manager();
  const PrepareResult result = m->prepare(mps_claim_);
  ASSERT_EQ(result.status().message(), "");
  ASSERT_EQ(result->size(), 2u);

  EXPECT_EQ(mps_->inspect(share_a_).active_thread_percentage, 30.0);
  EXPECT_EQ(mps_->inspect(share_b_).active_thread_percentage, 70.0);
  // The shim keeps the exact memory limit; MPS alone limits compute.
  const auto limits = read_limits(share_dir(share_a_) + "/limits");
  EXPECT_EQ(limits.memory, 8ull << 30);
  EXPECT_EQ(limits.cores, 100u);
  // The marker libvgpu reads to refuse a process given two MPS shares.
  EXPECT_TRUE(fs::is_regular_file(share_dir(share_a_) + "/" + share::kMpsMarkerFile));

  const json spec = json::parse(RecordingDoubles::read(m->cdi_spec_path(kMpsUid)));
  const json& edits = spec["devices"][0]["containerEdits"];
  EXPECT_EQ(spec["devices"][0]["name"], share_a_);
  const std::string container_pipe = "/var/run/tessera/mps/" + share_a_ + "/pipe";
  EXPECT_NE(std::find(edits["env"].begin(), edits["env"].end(),
                      json("CUDA_MPS_PIPE_DIRECTORY=" + container_pipe)),
            edits["env"].end())
      << edits.dump(2);
  const json pipe_mount = {{"hostPath", mps_->pipe_dir(share_a_)},
                           {"containerPath", container_pipe},
                           {"options", {"rbind", "rw", "nosuid", "nodev", "noexec"}}};
  const json shm_mount = {{"hostPath", mps_->shm_dir(share_a_)},
                          {"containerPath", "/dev/shm"},
                          {"options", {"rbind", "rw", "nosuid", "nodev", "noexec"}}};
  EXPECT_NE(std::find(edits["mounts"].begin(), edits["mounts"].end(), pipe_mount),
            edits["mounts"].end())
      << edits.dump(2);
  EXPECT_NE(std::find(edits["mounts"].begin(), edits["mounts"].end(), shm_mount),
            edits["mounts"].end());

  ASSERT_EQ(m->unprepare(mps_claim_).message(), "");
  EXPECT_FALSE(mps_->inspect(share_a_).running);
  EXPECT_FALSE(mps_->inspect(share_b_).running);
  EXPECT_NE(doubles_.calls().find("  quit \n"), std::string::npos);
  EXPECT_TRUE(mps_->share_folders().empty());
  EXPECT_TRUE(fs::is_empty(options_.root + "/shares"));
}

TEST_F(ReconcileTest, TimeSlicingClaimSetsTheIntervalAndUnprepareRestoresIt) {
  auto m = manager();
  ASSERT_EQ(m->prepare(whole_claim_).status().message(), "");
  EXPECT_EQ(doubles_.gpu_setting(kGpu1, "timeslice"), "3");
  EXPECT_EQ(doubles_.gpu_setting(kGpu1, "compute-mode"), "DEFAULT");
  EXPECT_EQ(doubles_.gpu_setting(kGpu0, "timeslice"), "");  // the other GPU untouched

  // One interval per GPU: a second claim asking another one is refused with the reason.
  EXPECT_EQ(m->prepare(other_whole_claim_).status().message(),
            std::string("share ") + kOtherWholeUid +
                "-gpu-1: sharing.timeSlice Short conflicts "
                "with claim " +
                kWholeUid + ", which set Long on gpu-1");
  // Its half-prepared entry neither blocks nor keeps the interval: unpreparing the first claim
  // restores Default, and then the second one may set its own.
  ASSERT_EQ(m->unprepare(whole_claim_).message(), "");
  EXPECT_EQ(doubles_.gpu_setting(kGpu1, "timeslice"), "0");
  ASSERT_EQ(m->prepare(other_whole_claim_).status().message(), "");
  EXPECT_EQ(doubles_.gpu_setting(kGpu1, "timeslice"), "1");
  ASSERT_EQ(m->unprepare(other_whole_claim_).message(), "");
  EXPECT_EQ(doubles_.gpu_setting(kGpu1, "timeslice"), "0");
  EXPECT_FALSE(time_slice_->recorded(kGpu1).has_value());
}

TEST_F(ReconcileTest, BackendsNotEnabledAreAClearError) {
  options_.mps = nullptr;
  auto m = manager();
  EXPECT_EQ(m->prepare(mps_claim_).status().message(),
            "share " + share_a_ + ": sharing.strategy MPS is not enabled on node node-a");
}

TEST_F(ReconcileTest, DriftIsRepairedAndReported) {
  auto m = manager();
  for (const auto* claim : {&mps_claim_, &whole_claim_, &quota_claim_})
    ASSERT_EQ(m->prepare(*claim).status().message(), "");
  ASSERT_TRUE(m->reconcile().clean()) << m->reconcile().to_text();

  // Hands and accidents on the node:
  fs::remove_all(share_dir(share_c_));  // folder deleted
  ASSERT_EQ(
      share_folder::write_limits(share_dir(share_a_), {{kGpu0, 16ull << 30, 100, 0}}).message(),
      "");                                                   // edited
  fs::remove(m->cdi_spec_path(kQuotaUid));                   // spec deleted
  ASSERT_EQ(kill(mps_->inspect(share_b_).pid, SIGKILL), 0);  // daemon died
  Command raise({RecordingDoubles::mps_control()},
                {"CUDA_MPS_PIPE_DIRECTORY=" + mps_->pipe_dir(share_a_)},
                "set_default_active_thread_percentage 90\n");
  ASSERT_TRUE(run_checked(raise).is_ok());           // limit raised
  fs::remove(doubles_.dir() / "timeslice" / kGpu1);  // record lost
  for (int i = 0; i < 200 && mps_->inspect(share_b_).running; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));

  const ReconcileReport report = m->reconcile();
  EXPECT_EQ(report.failures(), 0u) << report.to_text();
  EXPECT_EQ(report.to_text(),
            "share " + share_a_ +
                ": limits page memory_limit is 17179869184, expected 8589934592: rewritten from "
                "the checkpoint\n"
                "share " +
                share_a_ +
                ": MPS active thread percentage is 90, expected 30: limits "
                "set again\n"
                "share " +
                share_b_ + ": MPS daemon not running: restarted\n" + kGpu1 +
                ": time slice not applied, claim " + kWholeUid +
                " wants Long: applied\n"
                "share " +
                share_c_ +
                ": share folder missing: rewritten from the checkpoint\n"
                "claim " +
                kQuotaUid + ": CDI spec missing: rewritten from the checkpoint\n");

  // The host is back to what the checkpoint says, and a second pass finds nothing.
  EXPECT_EQ(read_limits(share_dir(share_a_) + "/limits").memory, 8ull << 30);
  EXPECT_EQ(read_limits(share_dir(share_c_) + "/limits").memory, 2ull << 30);
  EXPECT_TRUE(fs::exists(share_dir(share_c_) + "/usage"));
  EXPECT_TRUE(fs::exists(m->cdi_spec_path(kQuotaUid)));
  EXPECT_EQ(mps_->inspect(share_a_).active_thread_percentage, 30.0);
  EXPECT_EQ(mps_->inspect(share_b_).active_thread_percentage, 70.0);
  EXPECT_EQ(time_slice_->recorded(kGpu1), vgpu_config::TimeSlice::kLong);
  const ReconcileReport again = m->reconcile();
  EXPECT_TRUE(again.clean()) << again.to_text();
}

TEST_F(ReconcileTest, WhatNoClaimNamesIsRemoved) {
  auto m = manager();
  ASSERT_EQ(m->prepare(quota_claim_).status().message(), "");
  EXPECT_FALSE(fs::exists(share_dir(share_c_) + "/" + share::kMpsMarkerFile));  // not an MPS share
  fs::create_directories(options_.root + "/shares/stray-gpu-0-x");
  std::ofstream(options_.cdi_dir + "/k8s.vgpu.tessera.dev-claim_stray.json") << "{}";
  std::ofstream(options_.cdi_dir + "/other-vendor.json") << "{}";
  ShareSpec stray;
  stray.claim_uid = "stray";
  stray.device = "gpu-0";
  stray.share_id = "y";
  stray.uuid = kGpu0;
  stray.cores = 10;
  ASSERT_EQ(mps_->start(stray).message(), "");
  ASSERT_EQ(time_slice_->apply(kGpu0, vgpu_config::TimeSlice::kMedium).message(), "");

  const ReconcileReport report = m->reconcile();
  EXPECT_EQ(report.failures(), 0u) << report.to_text();
  EXPECT_EQ(report.to_text(),
            "share stray-gpu-0-x: share folder no claim names: removed\n"
            "k8s.vgpu.tessera.dev-claim_stray.json: CDI spec no claim names: removed\n"
            "share stray-gpu-0-y: MPS folder no claim names: daemon stopped, removed\n" +
                std::string(kGpu0) +
                ": time slice set for a claim that is gone: restored to "
                "Default\n");
  EXPECT_FALSE(mps_->inspect("stray-gpu-0-y").running);
  EXPECT_EQ(doubles_.gpu_setting(kGpu0, "timeslice"), "0");
  EXPECT_TRUE(fs::exists(options_.cdi_dir + "/other-vendor.json"));  // not ours
  EXPECT_TRUE(fs::exists(share_dir(share_c_) + "/limits"));          // named: kept
  EXPECT_TRUE(m->reconcile().clean());
}

TEST_F(ReconcileTest, RestartFindsDeadDaemonsAndStartsThem) {
  {
    auto m = manager();
    ASSERT_EQ(m->prepare(mps_claim_).status().message(), "");
  }
  // The agent's container restarted: its daemons went with it.
  for (const auto& name : {share_a_, share_b_})
    ASSERT_EQ(kill(mps_->inspect(name).pid, SIGKILL), 0);
  for (int i = 0; i < 200 && (mps_->inspect(share_a_).running || mps_->inspect(share_b_).running);
       ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ReconcileReport report;
  auto m = manager(&report);
  EXPECT_EQ(report.to_text(), "share " + share_a_ + ": MPS daemon not running: restarted\n" +
                                  "share " + share_b_ + ": MPS daemon not running: restarted\n");
  EXPECT_EQ(mps_->inspect(share_a_).active_thread_percentage, 30.0);
  EXPECT_EQ(mps_->inspect(share_b_).active_thread_percentage, 70.0);
}

// As ShareManagerTest.CrashAfterAnyStepConverges, for a claim whose shares run MPS daemons.
TEST_F(ReconcileTest, CrashAfterAnyStepConvergesWithMpsDaemons) {
  std::map<std::string, std::string> prepared;
  int total_steps = 0;
  {
    ShareManagerOptions counting = options_;
    counting.after_step = [&](int step) { total_steps = step; };
    ShareManager m(counting, kube_, devices_);
    ASSERT_EQ(m.start().message(), "");
    ASSERT_EQ(m.prepare(mps_claim_).status().message(), "");
    prepared = snapshot(base_);
    ASSERT_EQ(m.unprepare(mps_claim_).message(), "");
  }
  const auto empty = snapshot(base_);
  ASSERT_EQ(total_steps, (1 + 2 + 2 + 1 + 1) + (1 + 1 + 2 + 2 + 1));

  for (int crash_at = 1; crash_at < total_steps; ++crash_at) {
    SCOPED_TRACE("crash after step " + std::to_string(crash_at));
    fs::remove_all(base_);
    ASSERT_EQ(testing::run_agent_crashing_after(options_, kube_, devices_, mps_claim_, crash_at),
              42);

    auto m = manager();
    ASSERT_EQ(m->prepare(mps_claim_).status().message(), "");
    EXPECT_EQ(snapshot(base_), prepared);
    EXPECT_EQ(mps_->inspect(share_a_).active_thread_percentage, 30.0);
    EXPECT_EQ(mps_->inspect(share_b_).active_thread_percentage, 70.0);
    ASSERT_EQ(m->unprepare(mps_claim_).message(), "");
    EXPECT_EQ(snapshot(base_), empty);
    EXPECT_TRUE(mps_->share_folders().empty());  // no daemon survives
  }
}

// The backends remove an orphan only once the share manager grants its name: a refused one (a
// claim being prepared names it) keeps its daemon and interval; the manager refuses what an entry
// names, so reconcile beside prepared claims stops nothing; granted, they go.
TEST_F(ReconcileTest, BackendOrphanRemovalAsksBeforeStoppingOrRestoring) {
  auto m = manager();
  ASSERT_EQ(m->prepare(mps_claim_).status().message(), "");
  ASSERT_EQ(m->prepare(whole_claim_).status().message(), "");
  std::vector<std::string> asked;
  const ReserveOrphan refuse = [&](const std::string& name) {
    asked.push_back(name);
    return OrphanReservation();
  };
  EXPECT_TRUE(mps_->remove_orphans({}, refuse).empty());
  EXPECT_TRUE(time_slice_->remove_orphans({}, refuse).empty());
  std::sort(asked.begin(), asked.end());
  std::vector<std::string> expected{share_a_, share_b_, kGpu1};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(asked, expected);
  EXPECT_TRUE(mps_->inspect(share_a_).running);
  EXPECT_TRUE(mps_->inspect(share_b_).running);
  EXPECT_EQ(time_slice_->recorded(kGpu1), vgpu_config::TimeSlice::kLong);
  EXPECT_TRUE(m->reconcile().clean());

  int released = 0;
  const ReserveOrphan grant = [&](const std::string&) {
    return OrphanReservation([&released] { ++released; });
  };
  EXPECT_EQ(mps_->remove_orphans({}, grant).size(), 2u);
  EXPECT_EQ(time_slice_->remove_orphans({}, grant).size(), 1u);
  EXPECT_EQ(released, 3);
  EXPECT_FALSE(mps_->inspect(share_a_).running);
  EXPECT_FALSE(time_slice_->recorded(kGpu1).has_value());
  EXPECT_EQ(doubles_.gpu_setting(kGpu1, "timeslice"), "0");
}

// Two claims asking different intervals of one GPU, racing (nvidia-smi slowed so both are in
// flight at once): exactly one succeeds, the other gets the conflict, and the GPU keeps the
// winner's interval. Then the same intervals race again the other way round.
TEST_F(ReconcileTest, RacingTimeSliceClaimsWithDifferentIntervalsYieldOneSuccess) {
  auto m = manager();
  doubles_.slow_nvidia_smi(0.2);
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    std::latch go(2);
    auto race = [&](const ClaimRef& claim) {
      return std::async(std::launch::async, [&, claim] {
        go.arrive_and_wait();
        return m->prepare(claim).status().message();
      });
    };
    auto long_claim = race(whole_claim_), short_claim = race(other_whole_claim_);
    const std::string long_error = long_claim.get(), short_error = short_claim.get();
    ASSERT_NE(long_error.empty(), short_error.empty()) << long_error << " / " << short_error;
    const bool long_won = long_error.empty();
    const std::string loser = long_won ? kOtherWholeUid : kWholeUid;
    const std::string winner = long_won ? kWholeUid : kOtherWholeUid;
    EXPECT_EQ(long_won ? short_error : long_error,
              "share " + loser + "-gpu-1: sharing.timeSlice " + (long_won ? "Short" : "Long") +
                  " conflicts with claim " + winner + ", which set " +
                  (long_won ? "Long" : "Short") + " on gpu-1");
    EXPECT_EQ(doubles_.gpu_setting(kGpu1, "timeslice"), long_won ? "3" : "1");
    EXPECT_EQ(time_slice_->recorded(kGpu1),
              long_won ? vgpu_config::TimeSlice::kLong : vgpu_config::TimeSlice::kShort);
    // The loser's half-prepared entry goes without touching the winner's interval.
    ASSERT_EQ(m->unprepare(long_won ? other_whole_claim_ : whole_claim_).message(), "");
    EXPECT_EQ(doubles_.gpu_setting(kGpu1, "timeslice"), long_won ? "3" : "1");
    ASSERT_EQ(m->unprepare(long_won ? whole_claim_ : other_whole_claim_).message(), "");
    EXPECT_EQ(doubles_.gpu_setting(kGpu1, "timeslice"), "0");
    EXPECT_FALSE(time_slice_->recorded(kGpu1).has_value());
  }
}

// While one claim's MPS daemon start is held (the double waits until the test releases it), other
// claims (quota, time slice on another GPU) prepare and unprepare at their own pace, and reconcile
// passes remove nothing of the slow claim (PrepareStarted, its folders written): it then completes
// as if alone. Held rather than slowed by a delay, so no verdict depends on how fast the others go.
TEST_F(ReconcileTest, SlowMpsStartBlocksNoOtherClaim) {
  mps_options_.timeout = std::chrono::seconds(120);  // the held start is slow, not hung
  mps_ = std::make_unique<MpsBackend>(mps_options_);
  options_.mps = mps_.get();
  auto m = manager();
  doubles_.hold_mps_starts();
  auto slow =
      std::async(std::launch::async, [&] { return m->prepare(mps_claim_).status().message(); });
  // Released on every way out, before `slow` is waited for.
  struct ReleaseAtExit {
    const RecordingDoubles& doubles;
    ~ReleaseAtExit() { doubles.release_mps_starts(); }
  } release_at_exit{doubles_};
  // Its first daemon start is under way (held) once its MPS folder exists.
  for (const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
       !fs::exists(mps_->folder(share_a_)) && std::chrono::steady_clock::now() < deadline;)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(fs::exists(mps_->folder(share_a_)));

  struct Beside {
    std::string quota, whole, unprepared;
    ReconcileReport reconciled;
  };
  auto beside = std::async(std::launch::async, [&] {
    Beside done;
    done.quota = m->prepare(quota_claim_).status().message();
    done.whole = m->prepare(whole_claim_).status().message();
    done.reconciled = m->reconcile();
    done.unprepared = m->unprepare(quota_claim_).message();
    return done;
  });
  // Had any of them waited for the MPS start, it would wait until the release below (liveness
  // bound: they take well under a second).
  EXPECT_EQ(beside.wait_for(std::chrono::seconds(60)), std::future_status::ready)
      << "waited for the MPS start";
  EXPECT_EQ(slow.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  EXPECT_EQ(m->checkpoint().at(kMpsUid).state, ClaimState::kPrepareStarted);
  doubles_.release_mps_starts();
  const Beside done = beside.get();
  ASSERT_EQ(done.quota, "");
  ASSERT_EQ(done.whole, "");
  EXPECT_TRUE(done.reconciled.clean()) << done.reconciled.to_text();
  ASSERT_EQ(done.unprepared, "");

  EXPECT_EQ(slow.get(), "");
  EXPECT_EQ(mps_->inspect(share_a_).active_thread_percentage, 30.0);
  EXPECT_EQ(mps_->inspect(share_b_).active_thread_percentage, 70.0);
  const ReconcileReport after = m->reconcile();
  EXPECT_TRUE(after.clean()) << after.to_text();
  ASSERT_EQ(m->unprepare(mps_claim_).message(), "");
  ASSERT_EQ(m->unprepare(whole_claim_).message(), "");
  EXPECT_TRUE(fs::is_empty(options_.root + "/shares"));
}

// As CrashAfterAnyStepConvergesWithMpsDaemons, with an MPS, a TimeSlicing and a quota claim
// prepared on their own threads when the process dies: the disk is consistent at once, and a
// restarted agent's retried prepares reach the state of a run without crash (daemons and
// interval included), after which unprepare leaves nothing.
TEST_F(ReconcileTest, CrashDuringConcurrentPreparesWithBackendsConverges) {
  const std::vector<ClaimRef> claims{mps_claim_, whole_claim_, quota_claim_};
  std::map<std::string, std::string> prepared;
  int steps = 0, prepare_steps = 0;
  {
    ShareManagerOptions counting = options_;
    counting.after_step = [&](int step) { steps = step; };
    ShareManager m(counting, kube_, devices_);
    ASSERT_EQ(m.start().message(), "");
    for (const auto& claim : claims) ASSERT_EQ(m.prepare(claim).status().message(), "");
    prepare_steps = steps;
    prepared = snapshot(base_);
    for (const auto& claim : claims) ASSERT_EQ(m.unprepare(claim).message(), "");
  }
  const auto empty = snapshot(base_);
  // Checkpoint, folders, daemons or interval, CDI spec, checkpoint: MPS, TimeSlicing, quota.
  ASSERT_EQ(prepare_steps, (1 + 2 + 2 + 1 + 1) + (1 + 1 + 1 + 1 + 1) + (1 + 1 + 1 + 1));

  for (int crash_at = 1; crash_at <= prepare_steps; ++crash_at) {
    SCOPED_TRACE("crash after step " + std::to_string(crash_at));
    fs::remove_all(base_);
    ASSERT_EQ(
        testing::run_agent_crashing_after_concurrent(options_, kube_, devices_, claims, crash_at),
        42);
    EXPECT_EQ(testing::crash_state_violations(options_), "");

    auto m = manager();
    std::vector<std::future<std::string>> retries;
    for (const auto& claim : claims)
      retries.push_back(std::async(std::launch::async,
                                   [&, claim] { return m->prepare(claim).status().message(); }));
    for (auto& retry : retries) EXPECT_EQ(retry.get(), "");
    EXPECT_EQ(snapshot(base_), prepared);
    EXPECT_EQ(mps_->inspect(share_a_).active_thread_percentage, 30.0);
    EXPECT_EQ(mps_->inspect(share_b_).active_thread_percentage, 70.0);
    EXPECT_EQ(doubles_.gpu_setting(kGpu1, "timeslice"), "3");
    for (const auto& claim : claims) ASSERT_EQ(m->unprepare(claim).message(), "");
    EXPECT_EQ(snapshot(base_), empty);
    EXPECT_TRUE(mps_->share_folders().empty());
    EXPECT_EQ(doubles_.gpu_setting(kGpu1, "timeslice"), "0");
  }
}

// A rolling update: the old agent (its own manager and backends, on the same folders) beside the
// new one. Its reconcile passes never stop an MPS daemon, restore an interval or remove a file of
// the claims the new agent prepared after it started; it unprepares them like its own, and an
// interval the new agent set is held against its claims too.
TEST_F(ReconcileTest, TheOldAgentKeepsAndUnpreparesWhatTheNewAgentPrepared) {
  MpsBackend old_mps(mps_options_);
  TimeSliceBackend old_time_slice(time_slice_options_);
  ShareManagerOptions old_options = options_;
  old_options.mps = &old_mps;
  old_options.time_slice = &old_time_slice;
  ShareManager old_manager(old_options, kube_, devices_);
  ASSERT_EQ(old_manager.start().message(), "");

  auto new_agent = manager();
  for (const auto* claim : {&mps_claim_, &whole_claim_, &quota_claim_})
    ASSERT_EQ(new_agent->prepare(*claim).status().message(), "");
  const auto prepared = snapshot(base_);
  const std::string calls = doubles_.calls();
  const ReconcileReport passed = old_manager.reconcile();
  EXPECT_TRUE(passed.clean()) << passed.to_text();
  EXPECT_EQ(snapshot(base_), prepared);
  EXPECT_TRUE(mps_->inspect(share_a_).running);
  EXPECT_EQ(mps_->inspect(share_b_).active_thread_percentage, 70.0);
  EXPECT_EQ(doubles_.gpu_setting(kGpu1, "timeslice"), "3");
  EXPECT_EQ(doubles_.calls().find("mps-control -d", calls.size()), std::string::npos)
      << "a daemon was started again";
  EXPECT_EQ(doubles_.calls().find("quit", calls.size()), std::string::npos);

  EXPECT_EQ(old_manager.prepare(other_whole_claim_).status().message(),
            std::string("share ") + kOtherWholeUid +
                "-gpu-1: sharing.timeSlice Short conflicts with claim " + kWholeUid +
                ", which set Long on gpu-1");
  EXPECT_EQ(doubles_.gpu_setting(kGpu1, "timeslice"), "3");

  for (const auto* claim : {&mps_claim_, &whole_claim_, &quota_claim_})
    ASSERT_EQ(old_manager.unprepare(*claim).message(), "");
  EXPECT_FALSE(mps_->inspect(share_a_).running);
  EXPECT_FALSE(mps_->inspect(share_b_).running);
  EXPECT_EQ(doubles_.gpu_setting(kGpu1, "timeslice"), "0");
  ASSERT_EQ(new_agent->unprepare(other_whole_claim_).message(), "");  // its half-prepared entry
  EXPECT_TRUE(new_agent->reconcile().clean());
  EXPECT_TRUE(fs::is_empty(options_.root + "/shares"));
  EXPECT_TRUE(fs::is_empty(options_.cdi_dir));
  EXPECT_TRUE(mps_->share_folders().empty());
}

}  // namespace
}  // namespace tessera::agent
