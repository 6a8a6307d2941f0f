// The observation of a pass (observe/observer.h): each share folder read once, each GPU asked once,
// /proc walked once; and the board (observe/observation_board.h) that hands the last pass's
// observation to the reports until the claims change or it is stale.
#include "observe/observer.h"

#include <algorithm>

#include <gtest/gtest.h>

#include "enforcement/fake_node.h"
#include "observe/observation_board.h"

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kGiB = 1ull << 30;

class ObserverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = testing::fresh_folder("agent-observer");
    proc_ = std::make_unique<testing::FakeProc>(base_ / "proc");
    // A claim's two shares of GPU-A in one folder, another share on GPU-B.
    pair_ = (base_ / "shares" / "pair").string();
    single_ = (base_ / "shares" / "single").string();
    testing::make_share_folder(pair_, "GPU-A", 4 * kGiB);
    testing::make_share_folder(single_, "GPU-B", 4 * kGiB);
    proc_->add(100, 7000, testing::pod_cgroup_file("0a0a0a0a-0000-4000-8000-00000000000a"));
    proc_->add(200, 8000);
    testing::write_slot(pair_, 0, testing::FakeProc::owner(100, 7000), kGiB);
    gpus_.processes["GPU-A"] = {{100, kGiB}};
    gpus_.lost.insert("GPU-C");
  }
  void TearDown() override { fs::remove_all(base_); }

  ObserverOptions options() {
    ObserverOptions observing;
    observing.proc_root = proc_->root().string();
    observing.shares = [this] {
      return std::vector<CheckedShare>{share("a", pair_, "GPU-A"), share("b", pair_, "GPU-A"),
                                       share("c", single_, "GPU-B")};
    };
    // GPU-C has no share: it is asked too (a process of no share may be there).
    observing.devices = [] {
      return std::vector<NodeDevice>{{"gpu-0", "GPU-A", 0, 0}, {"gpu-2", "GPU-C", 2, 0}};
    };
    return observing;
  }

  static CheckedShare share(const std::string& name, const std::string& folder,
                            const std::string& uuid) {
    CheckedShare checked;
    checked.name = name;
    checked.folder = folder;
    checked.uuid = uuid;
    return checked;
  }

  fs::path base_;
  std::unique_ptr<testing::FakeProc> proc_;
  std::string pair_, single_;
  testing::FakeGpus gpus_;
};

TEST_F(ObserverTest, ReadsEachFolderOnceAsksEachGpuOnceAndWalksProcOnce) {
  Observer observer(options(), &gpus_);
  const std::shared_ptr<const NodeObservation> node = observer.observe();
  EXPECT_EQ(node->shares.size(), 3u);
  ASSERT_EQ(node->folders.size(), 2u);  // the pair's folder once
  ASSERT_NE(node->folder(pair_), nullptr);
  const std::vector<uint64_t> owners = node->folder(pair_)->usage.live_owners();
  EXPECT_EQ(std::count(owners.begin(), owners.end(), testing::FakeProc::owner(100, 7000)), 1);
  EXPECT_EQ(gpus_.memory_calls, 3u);  // GPU-A, GPU-B, GPU-C
  ASSERT_NE(node->gpu("GPU-A"), nullptr);
  EXPECT_TRUE(node->gpu("GPU-A")->listed);
  EXPECT_EQ(node->gpu("GPU-A")->memory.size(), 1u);
  ASSERT_NE(node->gpu("GPU-C"), nullptr);
  EXPECT_FALSE(node->gpu("GPU-C")->listed);
  ASSERT_EQ(node->problems.size(), 1u);
  EXPECT_NE(node->problems[0].message().find("GPU-C"), std::string::npos);
  // Every host process from the walk, its owner word and pod.
  ASSERT_NE(node->process(100), nullptr);
  EXPECT_EQ(node->process(100)->pod_uid, "0a0a0a0a-0000-4000-8000-00000000000a");
  ASSERT_NE(node->process(200), nullptr);
  EXPECT_EQ(node->owners.at(testing::FakeProc::owner(200, 8000)), 200);
  EXPECT_EQ(node->process_reads, 2u);
  // The next pass reads each process's start time only.
  EXPECT_EQ(observer.observe()->process_reads, 2u);
}

TEST_F(ObserverTest, TheBoardHandsOutTheLastPassUntilTheClaimsChangeOrItIsStale) {
  Checkpoint claims;
  ObserverOptions observing = options();
  observing.checkpoint = [&claims] { return claims; };
  SimulatedClock clock;
  Observer observer(observing, &gpus_, clock);
  ObservationBoard board(observer, clock, std::chrono::seconds(2));
  auto judgment = std::make_shared<const Judgment>();
  const std::shared_ptr<const NodeObservation> pass = observer.observe();
  board.publish(pass, judgment);
  const uint64_t calls = gpus_.memory_calls;

  ObservedNode seen = board.current();
  EXPECT_EQ(seen.observation, pass) << "the pass's observation, not a new one";
  EXPECT_EQ(seen.judgment, judgment);
  EXPECT_EQ(gpus_.memory_calls, calls) << "nothing read";

  // A claim prepared since: observed at once (judged by no one yet: the last judgment stays).
  claims["uid-1"] = ClaimEntry{};
  seen = board.current();
  EXPECT_NE(seen.observation, pass);
  EXPECT_EQ(seen.observation->checkpoint, claims);
  EXPECT_EQ(seen.judgment, judgment);
  EXPECT_GT(gpus_.memory_calls, calls);
  const std::shared_ptr<const NodeObservation> fresh = seen.observation;
  EXPECT_EQ(board.current().observation, fresh) << "that one is the board's now";

  // Older than two seconds (the pass loop stuck): observed again.
  clock.advance(std::chrono::seconds(3));
  EXPECT_NE(board.current().observation, fresh);
  // A pass published after a reader's newer observation does not replace it.
  const std::shared_ptr<const NodeObservation> newest = board.latest().observation;
  board.publish(pass, nullptr);
  EXPECT_EQ(board.latest().observation, newest);
  EXPECT_EQ(board.latest().judgment, judgment);
}

// A share of a MIG instance is observed on its instance (the MIG UUID: its memory and processes);
// the parent GPU, in MIG mode, lists every instance's processes on its own handle, and those are
// left to their instances (a process of another GPU instance is no stranger on the GPU). NVML's
// NOT_SUPPORTED for a MIG device's utilisation is no problem; a share of a dynamic instance not
// made yet (no UUID) asks NVML nothing and reports nothing.
TEST_F(ObserverTest, MigSharesAreObservedPerInstanceAndAHalfPreparedOneAsksNothing) {
  proc_->add(300, 9000);
  const std::string mig = (base_ / "shares" / "mig").string();
  const std::string pending = (base_ / "shares" / "pending").string();
  testing::make_share_folder(mig, "MIG-A", 4 * kGiB);
  gpus_.processes["MIG-A"] = {{100, kGiB, 1u}};
  // The parent's own handle: the instance's process, and one in no instance.
  gpus_.processes["GPU-P"] = {{100, kGiB, 1u}, {300, 2 * kGiB}};
  gpus_.busy_unsupported.insert("MIG-A");
  gpus_.busy_unsupported.insert("GPU-P");
  ObserverOptions observing;
  observing.proc_root = proc_->root().string();
  observing.shares = [&] {
    return std::vector<CheckedShare>{share("m", mig, "MIG-A"), share("p", pending, "")};
  };
  observing.devices = [] {
    NodeDevice instance{"gpu-0-mig-1", "MIG-A", 0, 40 * kGiB};
    instance.mig = MigDeviceRef{};
    instance.mig->parent_uuid = "GPU-P";
    NodeDevice dynamic{"gpu-0-mig-3g-4", "", 0, 40 * kGiB};  // not made yet
    dynamic.mig = MigDeviceRef{};
    dynamic.mig->parent_uuid = "GPU-P";
    return std::vector<NodeDevice>{instance, dynamic};
  };
  Observer observer(observing, &gpus_);
  const std::shared_ptr<const NodeObservation> node = observer.observe();
  EXPECT_EQ(gpus_.memory_calls, 2u);  // MIG-A and GPU-P; nothing for the empty UUID
  EXPECT_EQ(gpus_.asked.count(""), 0u);
  EXPECT_TRUE(node->problems.empty()) << join_problems(node->problems);
  ASSERT_NE(node->gpu("MIG-A"), nullptr);
  ASSERT_EQ(node->gpu("MIG-A")->memory.size(), 1u);
  EXPECT_EQ(node->gpu("MIG-A")->memory[0].pid, 100);
  EXPECT_FALSE(node->gpu("MIG-A")->busy_listed);
  ASSERT_NE(node->gpu("GPU-P"), nullptr);
  ASSERT_EQ(node->gpu("GPU-P")->memory.size(), 1u);
  EXPECT_EQ(node->gpu("GPU-P")->memory[0].pid, 300);
  EXPECT_EQ(node->gpu("GPU-P")->in_mig_instances, 1u);
}

}  // namespace
}  // namespace tessera::agent
