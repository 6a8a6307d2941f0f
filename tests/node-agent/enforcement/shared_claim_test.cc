// A ResourceClaim shared by two pods, as kubelet prepares it: NodePrepareResources for pod A only
// (a later pod of a prepared claim is only added to kubelet's own cache), then pod B added to the
// claim's status.reservedFor in the API server. The out-of-band checker, wired to the share
// manager as the agent wires them, asks the claim's pods afresh before it takes B's slot for
// another pod's; the checkpoint and the local API then list both pods. Real HTTPS client against
// the fake API server; fake /proc and NVML.
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "api/node_snapshot.h"
#include "apiserver/claim_fixture.h"
#include "apiserver/fake_api_server.h"
#include "captured_log.h"
#include "enforcement/checker.h"
#include "enforcement/fake_node.h"
#include "share/fake_driver.h"
#include "share/share_manager.h"

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::FakeProc;

constexpr char kUid[] = "0f6b3f0e-7c59-4d0e-9b4e-2f7a5d1c9e01";
constexpr char kGpu0[] = "GPU-00000000-0000-0000-0000-000000000000";
constexpr char kPodA[] = "aaaaaaaa-0000-4000-8000-000000000001";
constexpr char kPodB[] = "bbbbbbbb-0000-4000-8000-000000000002";
constexpr char kPodC[] = "cccccccc-0000-4000-8000-000000000003";  // of another claim
constexpr uint64_t kGiB = 1ull << 30;

class SharedClaim : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = testing::fresh_folder("agent-shared-claim");
    ShareManagerOptions options;
    options.root = (base_ / "state").string();
    options.cdi_dir = (base_ / "cdi").string();
    options.node_name = "node-a";
    options.shim_path = testing::write_fake_shim(base_ / "shim/libvgpu.so");
    options.container_driver = testing::fake_container_driver(base_ / "driver");
    json claim = testing::make_claim("train", kUid, {{"gpu", "gpu-0", "s", "8Gi", ""}});
    claim["status"]["reservedFor"] =
        json::array({{{"resource", "pods"}, {"name", "a"}, {"uid", kPodA}}});
    api_.add_claim("tenants", "train", claim.dump());
    kube::RetryPolicy once;  // one HTTP try per request: the API server's failures count one each
    once.attempts = 1;
    kube_ = std::make_unique<kube::HttpKubeClient>(api_.connection(), once);
    manager_ = std::make_unique<ShareManager>(
        options, *kube_, std::vector<NodeDevice>{{"gpu-0", kGpu0, 0, 150ull << 30}});
    ASSERT_EQ(manager_->start().message(), "");
    ASSERT_EQ(manager_->prepare({"tenants", kUid, "train"}).status().message(), "");
    folder_ = base_ / "state" / "shares" / (std::string(kUid) + "-gpu-0-s");
    ASSERT_TRUE(fs::exists(folder_ / "usage"));

    CheckerOptions checking;
    checking.proc_root = proc_.root().string();
    checking.claim_pods = [this](const std::string& uid) {
      return manager_->refresh_claim_pods(uid);
    };
    const std::string shares_dir = (base_ / "state" / "shares").string();
    checker_ = std::make_unique<OutOfBandChecker>(
        checking, [this, shares_dir] { return checked_shares(manager_->checkpoint(), shares_dir); },
        gpus_, handler_, clock_);
  }
  void TearDown() override {
    checker_.reset();
    fs::remove_all(base_);
    fs::remove_all(proc_.root());
  }

  // A shimmed process of pod `pod` with slot `slot` in the share's usage page holding `bytes`.
  void shimmed(const char* pod, int pid, uint32_t slot, uint64_t bytes) {
    proc_.add(pid, 1000 + pid, testing::pod_cgroup_file(pod));
    testing::write_slot(folder_, slot, FakeProc::owner(pid, 1000 + pid), bytes);
    gpus_.processes[kGpu0].push_back({pid, bytes});
  }
  std::vector<PodRef> checkpointed_pods() {
    const std::optional<std::string> text = read_file((base_ / "state/checkpoint.json").string());
    if (!text) return {};
    Result<Checkpoint> saved = checkpoint_from_json(*text);
    EXPECT_EQ(saved.status().message(), "");
    return saved.is_ok() && saved->count(kUid) ? saved->at(kUid).pods : std::vector<PodRef>{};
  }
  std::string listed_pod() {
    ObserverOptions observing;
    observing.shares_dir = (base_ / "state" / "shares").string();
    observing.checkpoint = [this] { return manager_->checkpoint(); };
    observing.devices = [this] { return manager_->devices(); };
    observing.proc_root = proc_.root().string();
    NodeSnapshotSources sources;
    sources.node_name = "node-a";
    const tessera::node::v1::ListSharesResponse listed =
        node_snapshot({Observer(observing, nullptr).observe(), nullptr}, sources);
    EXPECT_EQ(listed.shares_size(), 1);
    return listed.shares_size() == 1 ? listed.shares(0).pod() : "";
  }
  std::vector<Finding> of(FindingKind kind) const {
    std::vector<Finding> out;
    for (const Finding& f : handler_.findings)
      if (f.kind == kind) out.push_back(f);
    return out;
  }

  fs::path base_, folder_;
  testing::FakeApiServer api_;
  std::unique_ptr<kube::HttpKubeClient> kube_;
  std::unique_ptr<ShareManager> manager_;
  FakeProc proc_{testing::fresh_folder("agent-shared-claim-proc")};
  testing::FakeGpus gpus_;
  testing::RecordingHandler handler_;
  SimulatedClock clock_;
  std::unique_ptr<OutOfBandChecker> checker_;
};

TEST_F(SharedClaim, TheSecondPodsSlotIsKeptAndBothPodsAreListed) {
  EXPECT_EQ(listed_pod(), "tenants/a");
  ASSERT_TRUE(api_.set_reserved_pods("tenants", "train", {{"a", kPodA}, {"b", kPodB}}));
  shimmed(kPodA, 100, 0, kGiB);
  shimmed(kPodB, 200, 1, 2 * kGiB);
  EXPECT_TRUE(checker_->check_once().empty());
  const testing::PageCopy page = testing::copy_page(folder_);
  EXPECT_EQ(page.owners[1], FakeProc::owner(200, 1200));
  EXPECT_EQ(page.bytes[1], 2 * kGiB);
  EXPECT_EQ(checker_->stats().slots_cleared, 0u);
  const std::vector<PodRef> both{{"a", kPodA}, {"b", kPodB}};
  EXPECT_EQ(checkpointed_pods(), both);
  EXPECT_EQ(manager_->checkpoint().at(kUid).pods, both);
  EXPECT_EQ(listed_pod(), "tenants/a,tenants/b");
  EXPECT_EQ(api_.claim_gets("tenants", "train"), 2);  // the prepare's and the checker's ask
  // From the checkpoint now: no more asks.
  for (int i = 0; i < 10; ++i) {
    clock_.advance(std::chrono::seconds(1));
    EXPECT_TRUE(checker_->check_once().empty());
  }
  EXPECT_EQ(api_.claim_gets("tenants", "train"), 2);
}

TEST_F(SharedClaim, ASlotOfAPodNotReservedIsReportedAfterTheAskAndAsksAreRateLimited) {
  ASSERT_TRUE(api_.set_reserved_pods("tenants", "train", {{"a", kPodA}, {"b", kPodB}}));
  shimmed(kPodA, 100, 0, kGiB);
  shimmed(kPodB, 200, 1, kGiB);
  // Pod C's process (another claim's) forged into the share's page.
  shimmed(kPodC, 300, 2, 0);
  checker_->check_once();
  const auto corrupt = of(FindingKind::kCorruptUsagePage);
  ASSERT_EQ(corrupt.size(), 1u);
  EXPECT_NE(corrupt[0].detail.find("1 slots name live processes of other pods"), std::string::npos)
      << corrupt[0].detail;
  EXPECT_EQ(corrupt[0].pod, "tenants/a,b");
  const testing::PageCopy page = testing::copy_page(folder_);
  EXPECT_EQ(page.owners[1], FakeProc::owner(200, 1200));  // B's kept
  EXPECT_EQ(page.owners[2], 0u);                          // C's cleared
  EXPECT_EQ(api_.claim_gets("tenants", "train"), 2);      // one ask answered for both pods
  EXPECT_EQ(checkpointed_pods(), (std::vector<PodRef>{{"a", kPodA}, {"b", kPodB}}));

  // A hostile tenant forges owner words of ever new pods, a pass a second, while the API server
  // fails every request: the claim is asked at most once per 5 s, nothing is cleared meanwhile,
  // and the checkpoint keeps its pods.
  testing::CapturedLog log;
  api_.fail_next(1000);
  const int before = api_.requests();
  for (int second = 1; second <= 20; ++second) {
    clock_.advance(std::chrono::seconds(1));
    const std::string pod = "dddddddd-0000-4000-8000-0000000000" + std::to_string(10 + second);
    proc_.add(400 + second, 1400 + second, testing::pod_cgroup_file(pod));
    testing::write_slot(folder_, 3, FakeProc::owner(400 + second, 1400 + second), 0);
    checker_->check_once();
    EXPECT_EQ(testing::copy_page(folder_).owners[3], FakeProc::owner(400 + second, 1400 + second));
  }
  EXPECT_EQ(api_.requests() - before, 4);  // at 5, 10, 15 and 20 s
  EXPECT_EQ(of(FindingKind::kCorruptUsagePage).size(), 1u);
  EXPECT_EQ(checkpointed_pods(), (std::vector<PodRef>{{"a", kPodA}, {"b", kPodB}}));
  EXPECT_EQ(log.count("keeping the checkpoint's"), 4u);  // one line per failed ask
}

}  // namespace
}  // namespace tessera::agent
