// parse_claim_pods: the pods a ResourceClaim is reserved for, read defensively.
#include "model/claim_pods.h"

#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "apiserver/claim_fixture.h"

namespace tessera::agent {
namespace {

using nlohmann::json;

constexpr char kUid[] = "0f6b3f0e-7c59-4d0e-9b4e-2f7a5d1c9e01";
constexpr char kPodA[] = "aaaaaaaa-0000-4000-8000-000000000001";
constexpr char kPodB[] = "bbbbbbbb-0000-4000-8000-000000000002";

json claim_with(const json& reserved) {
  return testing::reserved_claim(kUid, reserved);
}

TEST(ParseClaimPods, PodsInApiOrderOtherConsumersSkipped) {
  const json claim = claim_with(json::array(
      {{{"resource", "pods"}, {"name", "a"}, {"uid", kPodA}},
       {{"apiGroup", "example.com"}, {"resource", "pods"}, {"name", "x"}, {"uid", "x-uid"}},
       {{"apiGroup", ""}, {"resource", "pods"}, {"name", "b"}, {"uid", kPodB}},
       {{"apiGroup", "batch"}, {"resource", "jobs"}, {"name", "j"}, {"uid", "j-uid"}}}));
  const Result<ClaimPods> parsed = parse_claim_pods(claim.dump());
  ASSERT_EQ(parsed.status().message(), "");
  EXPECT_EQ(parsed->uid, kUid);
  EXPECT_EQ(parsed->pods, (std::vector<PodRef>{{"a", kPodA}, {"b", kPodB}}));
}

// kube-apiserver requires resource, name and uid of every consumer: one without is no pod to
// skip quietly (prepare would store a claim without the pod the checks must know), it is refused.
TEST(ParseClaimPods, AConsumerWithoutItsUidIsRefusedNotSkipped) {
  const json claim = claim_with(json::array({{{"resource", "pods"}, {"name", "a"}, {"uid", kPodA}},
                                             {{"resource", "pods"}, {"name", "e"}}}));
  const Result<ClaimPods> parsed = parse_claim_pods(claim);
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(parsed.status().message(), "status.reservedFor[1].uid: missing");
}

TEST(ParseClaimPods, NoStatusOrNoReservationIsNoPods) {
  json claim = claim_with(json::array());
  claim["status"].erase("reservedFor");
  Result<ClaimPods> parsed = parse_claim_pods(claim);
  ASSERT_EQ(parsed.status().message(), "");
  EXPECT_TRUE(parsed->pods.empty());
  claim.erase("status");
  parsed = parse_claim_pods(claim);
  ASSERT_EQ(parsed.status().message(), "");
  EXPECT_TRUE(parsed->pods.empty());
}

TEST(ParseClaimPods, AFieldOfTheWrongShapeIsAnErrorNamingIt) {
  const json pod = {{"resource", "pods"}, {"name", "a"}, {"uid", kPodA}};
  auto error_of = [](const json& claim) {
    const Result<ClaimPods> parsed = parse_claim_pods(claim);
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    return parsed.status().message();
  };
  EXPECT_EQ(error_of(json::array()), "ResourceClaim: not a JSON object");
  EXPECT_EQ(parse_claim_pods(std::string("{not json")).status().message(),
            "ResourceClaim: not JSON");
  json claim = claim_with(json::array({pod}));
  claim["metadata"].erase("uid");
  EXPECT_EQ(error_of(claim), "metadata.uid: missing");
  claim["metadata"]["uid"] = 7;
  EXPECT_EQ(error_of(claim), "metadata.uid: not a non-empty string");
  claim.erase("metadata");
  EXPECT_EQ(error_of(claim), "metadata: not an object");
  claim = claim_with(json::array({pod}));
  claim["status"] = "Allocated";
  EXPECT_EQ(error_of(claim), "status: not an object");
  EXPECT_EQ(error_of(claim_with(pod)), "status.reservedFor: not an array");
  EXPECT_EQ(error_of(claim_with(json::array({pod, "b"}))), "status.reservedFor[1]: not an object");
  json odd = pod;
  odd.erase("uid");
  EXPECT_EQ(error_of(claim_with(json::array({pod, odd}))), "status.reservedFor[1].uid: missing");
  odd = pod;
  odd["uid"] = "";
  EXPECT_EQ(error_of(claim_with(json::array({odd}))),
            "status.reservedFor[0].uid: not a non-empty string");
  odd = pod;
  odd["name"] = json::array();
  EXPECT_EQ(error_of(claim_with(json::array({odd}))),
            "status.reservedFor[0].name: not a non-empty string");
  odd = pod;
  odd.erase("resource");
  EXPECT_EQ(error_of(claim_with(json::array({odd}))), "status.reservedFor[0].resource: missing");
  odd = pod;
  odd["apiGroup"] = 1;
  EXPECT_EQ(error_of(claim_with(json::array({odd}))),
            "status.reservedFor[0].apiGroup: not a string");
}

}  // namespace
}  // namespace tessera::agent
