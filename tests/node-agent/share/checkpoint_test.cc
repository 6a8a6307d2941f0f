#include "share/checkpoint.h"

#include <gtest/gtest.h>

namespace tessera::agent {
namespace {

TEST(Checkpoint, PodsAndEnforcementRoundTripAndOldCheckpointsStayReadable) {
  ShareSpec share;
  share.claim_uid = "uid-1";
  share.pool = "node-a";
  share.device = "gpu-0";
  share.share_id = "s";
  share.uuid = "GPU-1";
  share.config.enforcement = EnforcementPolicy::kKill;
  Checkpoint checkpoint;
  checkpoint["uid-1"] = {"tenants",
                         "pair",
                         ClaimState::kPrepareCompleted,
                         {share},
                         {{"trainer", "5e1f0c2a-7b3d-4e5f-8a9b-0c1d2e3f4a5b"}}};
  Result<Checkpoint> again = checkpoint_from_json(checkpoint_to_json(checkpoint));
  ASSERT_EQ(again.status().message(), "");
  EXPECT_EQ(*again, checkpoint);

  // Written before pods and enforcement were kept: read with none.
  const std::string old = R"({"version": 1, "claims": {"uid-1": {"namespace": "tenants",
      "name": "pair", "state": "PrepareCompleted", "shares": [{"claimUID": "uid-1",
      "pool": "node-a", "device": "gpu-0", "shareID": "s", "uuid": "GPU-1", "minor": 0,
      "requestNames": ["gpu"]}]}}})";
  Result<Checkpoint> read = checkpoint_from_json(old);
  ASSERT_EQ(read.status().message(), "");
  EXPECT_TRUE(read->at("uid-1").pods.empty());
  EXPECT_FALSE(read->at("uid-1").shares[0].config.enforcement.has_value());
  // A policy this version does not know is refused, naming it.
  std::string unknown = checkpoint_to_json(checkpoint);
  unknown.replace(unknown.find("\"kill\""), 6, "\"maim\"");
  EXPECT_NE(checkpoint_from_json(unknown).status().message().find("maim"), std::string::npos);
}

TEST(Checkpoint, ReservedPodsAreTheClaimsPodConsumers) {
  const std::string claim = R"({"status": {"reservedFor": [
      {"resource": "pods", "name": "a", "uid": "u-a"},
      {"apiGroup": "", "resource": "pods", "name": "b", "uid": "u-b"},
      {"apiGroup": "example.com", "resource": "pods", "name": "c", "uid": "u-c"},
      {"resource": "jobs", "name": "d", "uid": "u-d"},
      {"resource": "pods", "name": "e"}]}})";
  const std::vector<PodRef> pods = reserved_pods(claim);
  ASSERT_EQ(pods.size(), 2u);
  EXPECT_EQ(pods[0], (PodRef{"a", "u-a"}));
  EXPECT_EQ(pods[1], (PodRef{"b", "u-b"}));
  EXPECT_TRUE(reserved_pods("not json").empty());
  EXPECT_TRUE(reserved_pods(R"({"status": {}})").empty());
}

}  // namespace
}  // namespace tessera::agent
