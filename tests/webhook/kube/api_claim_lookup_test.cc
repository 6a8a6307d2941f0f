// Claim lookups over the API: what counts as a Tessera claim, the cache and its TTL, errors.
#include "kube/api_claim_lookup.h"

#include <gtest/gtest.h>

#include "fake_kube.h"

namespace tessera::webhook {
namespace {

using nlohmann::json;
using testing::FakeKube;
using testing::ManualClock;

constexpr char kTemplates[] = "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaimtemplates/";
constexpr char kClaims[] = "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/";

json claim_template(const std::string& device_class) {
  return {
      {"apiVersion", "resource.k8s.io/v1"},
      {"kind", "ResourceClaimTemplate"},
      {"metadata", {{"name", "t"}, {"namespace", "ml"}}},
      {"spec",
       {{"spec",
         {{"devices",
           {{"requests", json::array({{{"name", "gpu"},
                                       {"exactly", {{"deviceClassName", device_class}}}}})}}}}}}}};
}

TEST(ApiClaimLookup, ATemplateIsTesseraByItsDeviceClass) {
  const std::set<std::string> classes = {"vgpu.tessera.dev", "vgpu-a100.tessera.dev"};
  EXPECT_TRUE(asks_for_tessera(claim_template("vgpu.tessera.dev"), classes));
  EXPECT_TRUE(asks_for_tessera(claim_template("vgpu-a100.tessera.dev"), classes));
  EXPECT_FALSE(asks_for_tessera(claim_template("gpu.nvidia.com"), classes));
}

TEST(ApiClaimLookup, AClaimIsTesseraByAnAlternativeOrByItsAllocation) {
  const std::set<std::string> classes = {"vgpu.tessera.dev"};
  const json alternatives = json::parse(R"({"kind": "ResourceClaim", "spec": {"devices": {
    "requests": [{"name": "gpu", "firstAvailable": [
      {"name": "big", "deviceClassName": "gpu.nvidia.com"},
      {"name": "share", "deviceClassName": "vgpu.tessera.dev"}]}]}}})");
  EXPECT_TRUE(asks_for_tessera(alternatives, classes));
  const json allocated = json::parse(R"({"kind": "ResourceClaim", "spec": {"devices": {
    "requests": [{"name": "gpu", "exactly": {"deviceClassName": "team-gpus"}}]}},
    "status": {"allocation": {"devices": {"results": [
      {"request": "gpu", "driver": "vgpu.tessera.dev", "pool": "node-1", "device": "gpu-0"}]}}}})");
  EXPECT_TRUE(asks_for_tessera(allocated, classes));
  EXPECT_FALSE(asks_for_tessera(json::parse(R"({"kind": "ResourceClaim", "spec": 7})"), classes));
}

TEST(ApiClaimLookup, AnswersAreCachedForTheTtlAndErrorsAreNot) {
  FakeKube api;
  ManualClock clock;
  api.put(std::string(kTemplates) + "ours", claim_template("vgpu.tessera.dev"));
  api.put(std::string(kClaims) + "theirs", claim_template("gpu.nvidia.com"));
  ApiClaimLookup lookup(api, {"vgpu.tessera.dev"}, std::chrono::seconds(60), clock.function());

  for (int i = 0; i < 3; ++i) {
    Result<bool> ours = lookup.is_tessera("ml", ClaimSource::kResourceClaimTemplate, "ours");
    ASSERT_TRUE(ours.is_ok());
    EXPECT_TRUE(*ours);
    Result<bool> theirs = lookup.is_tessera("ml", ClaimSource::kResourceClaim, "theirs");
    ASSERT_TRUE(theirs.is_ok());
    EXPECT_FALSE(*theirs);
  }
  EXPECT_EQ(api.request_count(), 2u);
  clock.now += std::chrono::seconds(61);
  ASSERT_TRUE(lookup.is_tessera("ml", ClaimSource::kResourceClaimTemplate, "ours").is_ok());
  EXPECT_EQ(api.request_count(), 3u);

  Result<bool> missing = lookup.is_tessera("ml", ClaimSource::kResourceClaim, "missing");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  api.unreachable = true;
  clock.now += std::chrono::seconds(61);
  Result<bool> down = lookup.is_tessera("ml", ClaimSource::kResourceClaimTemplate, "ours");
  ASSERT_FALSE(down.is_ok());
  EXPECT_EQ(down.status().code(), StatusCode::kUnavailable);
  api.unreachable = false;
  EXPECT_TRUE(lookup.is_tessera("ml", ClaimSource::kResourceClaimTemplate, "ours").is_ok());
  EXPECT_EQ(api.requests().back(), "GET " + std::string(kTemplates) + "ours");
}

TEST(ApiClaimLookup, OnlyObjectNamesReachTheApi) {
  FakeKube api;
  ManualClock clock;
  ApiClaimLookup lookup(api, {"vgpu.tessera.dev"}, std::chrono::seconds(60), clock.function());
  for (const std::string name : {"../../../api/v1/secrets", "a?watch=1", "A", "", "a/b"}) {
    Result<bool> refused = lookup.is_tessera("ml", ClaimSource::kResourceClaim, name);
    ASSERT_FALSE(refused.is_ok()) << name;
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(api.request_count(), 0u);
}

}  // namespace
}  // namespace tessera::webhook
