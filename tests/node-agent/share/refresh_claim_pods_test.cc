// ShareManager::refresh_claim_pods: a shared claim's pods read again from the API server.
#include "share/share_manager.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "apiserver/claim_fixture.h"
#include "apiserver/fake_api_server.h"
#include "captured_log.h"
#include "share/fake_driver.h"
#include "share/share_test_support.h"

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr char kUid[] = "0f6b3f0e-7c59-4d0e-9b4e-2f7a5d1c9e01";
constexpr char kGpu0[] = "GPU-00000000-0000-0000-0000-000000000000";
constexpr char kPodA[] = "aaaaaaaa-0000-4000-8000-000000000001";
constexpr char kPodB[] = "bbbbbbbb-0000-4000-8000-000000000002";

json claim_with(const json& reserved) {
  return testing::reserved_claim(kUid, reserved);
}

// A claim prepared for pod A through the real HTTPS client, then shared with pod B in the API.
class RefreshClaimPods : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::temp_directory_path() /
            ("agent-claim-pods-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(base_);
    options_.root = (base_ / "state").string();
    options_.cdi_dir = (base_ / "cdi").string();
    options_.node_name = "node-a";
    options_.shim_path = testing::write_fake_shim(base_ / "shim/libvgpu.so");
    options_.container_driver = testing::fake_container_driver(base_ / "driver");
    json claim = claim_with(json::array({{{"resource", "pods"}, {"name", "a"}, {"uid", kPodA}}}));
    api_.add_claim("tenants", "train", claim.dump());
    kube::RetryPolicy once;
    once.attempts = 1;
    kube_ = std::make_unique<kube::HttpKubeClient>(api_.connection(), once);
    manager_ = std::make_unique<ShareManager>(
        options_, *kube_, std::vector<NodeDevice>{{"gpu-0", kGpu0, 0, 150ull << 30}});
    ASSERT_EQ(manager_->start().message(), "");
    ASSERT_EQ(manager_->prepare({"tenants", kUid, "train"}).status().message(), "");
  }
  void TearDown() override { fs::remove_all(base_); }

  std::vector<PodRef> saved_pods() {
    Result<Checkpoint> saved =
        checkpoint_from_json(testing::read(options_.root + "/checkpoint.json"));
    EXPECT_EQ(saved.status().message(), "");
    return saved.is_ok() && saved->count(kUid) ? saved->at(kUid).pods : std::vector<PodRef>{};
  }
  ino_t checkpoint_inode() {
    struct stat st {};
    EXPECT_EQ(stat((options_.root + "/checkpoint.json").c_str(), &st), 0);
    return st.st_ino;
  }

  fs::path base_;
  ShareManagerOptions options_;
  testing::FakeApiServer api_;
  std::unique_ptr<kube::HttpKubeClient> kube_;
  std::unique_ptr<ShareManager> manager_;
};

TEST_F(RefreshClaimPods, ASecondPodIsSavedInTheCheckpoint) {
  const std::vector<PodRef> both{{"a", kPodA}, {"b", kPodB}};
  // Unchanged: one GET, nothing written.
  const ino_t before = checkpoint_inode();
  Result<std::vector<PodRef>> pods = manager_->refresh_claim_pods(kUid);
  ASSERT_EQ(pods.status().message(), "");
  EXPECT_EQ(*pods, (std::vector<PodRef>{{"a", kPodA}}));
  EXPECT_EQ(checkpoint_inode(), before);
  EXPECT_EQ(api_.claim_gets("tenants", "train"), 2);  // the prepare's and this one

  ASSERT_TRUE(api_.set_reserved_pods("tenants", "train", {{"a", kPodA}, {"b", kPodB}}));
  pods = manager_->refresh_claim_pods(kUid);
  ASSERT_EQ(pods.status().message(), "");
  EXPECT_EQ(*pods, both);
  EXPECT_EQ(manager_->checkpoint().at(kUid).pods, both);
  EXPECT_EQ(saved_pods(), both);
  EXPECT_NE(checkpoint_inode(), before);  // replaced whole, as every write of it
  EXPECT_EQ(manager_->checkpoint().at(kUid).state, ClaimState::kPrepareCompleted);
  // A restarted agent reads them back.
  ShareManager restarted(options_, *kube_, {});
  ASSERT_EQ(restarted.start().message(), "");
  EXPECT_EQ(restarted.checkpoint().at(kUid).pods, both);
  // Pod A left: it goes too.
  ASSERT_TRUE(api_.set_reserved_pods("tenants", "train", {{"b", kPodB}}));
  pods = manager_->refresh_claim_pods(kUid);
  ASSERT_EQ(pods.status().message(), "");
  EXPECT_EQ(saved_pods(), (std::vector<PodRef>{{"b", kPodB}}));
}

TEST_F(RefreshClaimPods, TheReconcilePassReadsEveryClaimFromTheWatchCache) {
  ASSERT_TRUE(api_.set_reserved_pods("tenants", "train", {{"a", kPodA}, {"b", kPodB}}));
  EXPECT_EQ(manager_->refresh_all_claim_pods(), 1u);
  EXPECT_EQ(saved_pods(), (std::vector<PodRef>{{"a", kPodA}, {"b", kPodB}}));
  EXPECT_EQ(api_.claim_cache_gets("tenants", "train"), 1);
  EXPECT_EQ(api_.claim_gets("tenants", "train"), 1);  // the prepare's only
  EXPECT_EQ(manager_->refresh_all_claim_pods(), 0u);  // nothing new
  EXPECT_EQ(api_.claim_cache_gets("tenants", "train"), 2);
}

TEST_F(RefreshClaimPods, AnApiErrorKeepsTheOldPodsAndSaysSoInOneLine) {
  ASSERT_TRUE(api_.set_reserved_pods("tenants", "train", {{"a", kPodA}, {"b", kPodB}}));
  testing::CapturedLog log;
  api_.fail_next(1);
  const Result<std::vector<PodRef>> pods = manager_->refresh_claim_pods(kUid);
  EXPECT_EQ(pods.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(pods.status().message().find("HTTP 503"), std::string::npos) << pods.status().message();
  EXPECT_EQ(manager_->checkpoint().at(kUid).pods, (std::vector<PodRef>{{"a", kPodA}}));
  EXPECT_EQ(saved_pods(), (std::vector<PodRef>{{"a", kPodA}}));
  const std::vector<std::string> lines = log.lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("keeping the checkpoint's"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find(kUid), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("HTTP 503"), std::string::npos) << lines[0];
}

// The API server down: the pass stops at the first claim instead of spending the client's retries
// on each.
TEST_F(RefreshClaimPods, TheReconcilePassStopsAtTheFirstUnavailableAnswer) {
  json second = testing::make_claim("eval", "0f6b3f0e-7c59-4d0e-9b4e-2f7a5d1c9e02",
                                    {{"a", "gpu-0", "s-e", "1Gi", "10"}});
  api_.add_claim("tenants", "eval", second.dump());
  ASSERT_EQ(manager_->prepare({"tenants", "0f6b3f0e-7c59-4d0e-9b4e-2f7a5d1c9e02", "eval"})
                .status()
                .message(),
            "");
  testing::CapturedLog log;
  api_.fail_next(100);
  const int before = api_.requests();
  EXPECT_EQ(manager_->refresh_all_claim_pods(), 0u);
  EXPECT_EQ(api_.requests() - before, 1);
  EXPECT_EQ(log.count("keeping the checkpoint's"), 1u);
  api_.fail_next(0);
  ASSERT_TRUE(api_.set_reserved_pods("tenants", "eval", {{"e", kPodB}}));
  EXPECT_EQ(manager_->refresh_all_claim_pods(), 1u);  // the next pass reads both
  EXPECT_EQ(api_.claim_cache_gets("tenants", "train") + api_.claim_cache_gets("tenants", "eval"),
            2);
}

TEST_F(RefreshClaimPods, AnOddReservationIsAnErrorNamingTheFieldAndChangesNothing) {
  json claim = claim_with(json::array({{{"resource", "pods"}, {"name", "a"}, {"uid", kPodA}},
                                       {{"resource", "pods"}, {"name", "b"}}}));
  api_.add_claim("tenants", "train", claim.dump());
  testing::CapturedLog log;
  const Result<std::vector<PodRef>> pods = manager_->refresh_claim_pods(kUid);
  EXPECT_EQ(pods.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pods.status().message(),
            "ResourceClaim tenants/train: status.reservedFor[1].uid: missing");
  EXPECT_EQ(saved_pods(), (std::vector<PodRef>{{"a", kPodA}}));
  EXPECT_EQ(log.lines().size(), 1u);
}

TEST_F(RefreshClaimPods, ADeletedOrReplacedClaimChangesNothingAndIsNoError) {
  const std::vector<PodRef> only_a{{"a", kPodA}};
  // Replaced: another UID under the name, reserved for another pod.
  json other = claim_with(json::array({{{"resource", "pods"}, {"name", "b"}, {"uid", kPodB}}}));
  other["metadata"]["uid"] = "c0000000-0000-4000-8000-00000000000c";
  api_.add_claim("tenants", "train", other.dump());
  Result<std::vector<PodRef>> pods = manager_->refresh_claim_pods(kUid);
  ASSERT_EQ(pods.status().message(), "");
  EXPECT_EQ(*pods, only_a);
  // Deleted: the API server's 404.
  api_.delete_claim("tenants", "train");
  pods = manager_->refresh_claim_pods(kUid);
  ASSERT_EQ(pods.status().message(), "");
  EXPECT_EQ(*pods, only_a);
  EXPECT_EQ(saved_pods(), only_a);
  // A claim this node never prepared.
  EXPECT_EQ(manager_->refresh_claim_pods("no-such-uid").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace tessera::agent
