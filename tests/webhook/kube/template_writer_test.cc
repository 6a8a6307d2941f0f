// Templates created idempotently: created once, an equal one accepted, a different one refused,
// remembered for the TTL, errors passed on. Against a stand-in that writes back as kube-apiserver
// does (server metadata, spec.metadata {}, canonical quantities): a restart, a second replica and
// an expired cache accept the templates that exist, and one that really differs is still refused.
#include "kube/template_writer.h"

#include <gtest/gtest.h>

#include "core/share_request.h"
#include "fake_kube.h"

namespace tessera::webhook {
namespace {

using nlohmann::json;
using testing::FakeKube;
using testing::ManualClock;

constexpr char kCollection[] = "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaimtemplates";

json eight_gi() {
  ShareRequest request;
  request.memory_bytes = 8ull << 30;
  return request.claim_template("ml");
}

TEST(TemplateWriter, CreatesOnceAndRemembersForTheTtl) {
  FakeKube api;
  ManualClock clock;
  TemplateWriter writer(api, std::chrono::seconds(60), clock.function());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(writer.ensure(eight_gi()).is_ok());
  EXPECT_EQ(api.requests(), std::vector<std::string>{std::string("POST ") + kCollection});
  EXPECT_EQ(api.get(std::string(kCollection) + "/tessera-vgpu-1-m8gi"), eight_gi());
  EXPECT_EQ(writer.counts().created, 1u);
  EXPECT_EQ(writer.counts().cached, 4u);

  clock.now += std::chrono::seconds(61);  // then: 409, and a GET that finds the same spec
  ASSERT_TRUE(writer.ensure(eight_gi()).is_ok());
  EXPECT_EQ(api.request_count(), 3u);
  EXPECT_EQ(writer.counts().existed, 1u);
}

TEST(TemplateWriter, ATemplateWithoutNamespaceNameOrSpecIsRefusedBeforeAnyRequest) {
  FakeKube api;
  ManualClock clock;
  TemplateWriter writer(api, std::chrono::seconds(60), clock.function());
  json no_metadata = eight_gi();
  no_metadata.erase("metadata");
  json numbered = eight_gi();
  numbered["metadata"]["name"] = 7;
  json no_spec = eight_gi();
  no_spec.erase("spec");
  const std::pair<json, std::string> cases[] = {
      {no_metadata, "metadata.namespace nothing, metadata.name nothing, spec set"},
      {numbered, "metadata.namespace \"ml\", metadata.name 7, spec set"},
      {no_spec, "metadata.namespace \"ml\", metadata.name \"tessera-vgpu-1-m8gi\", spec missing"},
      {json::array(), "metadata.namespace nothing, metadata.name nothing, spec missing"}};
  for (const auto& [claim_template, shown] : cases) {
    const Status refused = writer.ensure(claim_template);
    EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(refused.message(), "not a ResourceClaimTemplate to create (" + shown + ")");
  }
  EXPECT_EQ(api.request_count(), 0u);
}

TEST(TemplateWriter, AnEqualTemplateMadeElsewhereIsAcceptedAndADifferentOneRefused) {
  FakeKube api;
  ManualClock clock;
  TemplateWriter writer(api, std::chrono::seconds(60), clock.function());
  json other_replica = eight_gi();
  other_replica["metadata"]["uid"] = "made-by-another-replica";
  api.put(std::string(kCollection) + "/tessera-vgpu-1-m8gi", other_replica);
  EXPECT_TRUE(writer.ensure(eight_gi()).is_ok());

  json different = eight_gi();
  different["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = 4;
  api.put(std::string(kCollection) + "/tessera-vgpu-1-m8gi", different);
  clock.now += std::chrono::seconds(61);
  Status refused = writer.ensure(eight_gi());
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(refused.message(),
            "ResourceClaimTemplate ml/tessera-vgpu-1-m8gi exists with another spec; delete it or "
            "rename it");
}

TEST(TemplateWriter, AnUnreachableApiIsAnErrorAndNotRemembered) {
  FakeKube api;
  ManualClock clock;
  TemplateWriter writer(api, std::chrono::seconds(60), clock.function());
  api.unreachable = true;
  Status down = writer.ensure(eight_gi());
  ASSERT_FALSE(down.is_ok());
  EXPECT_EQ(down.code(), StatusCode::kUnavailable);
  EXPECT_NE(down.message().find("Couldn't connect"), std::string::npos);
  api.unreachable = false;
  EXPECT_TRUE(writer.ensure(eight_gi()).is_ok());
  EXPECT_EQ(writer.counts().failed, 1u);
  EXPECT_EQ(writer.counts().created, 1u);
}

// kube-apiserver's write-back, as the stand-in does it.
json five_g_as_bytes() {  // what the webhook sent before its quantities were canonical
  ShareRequest request;
  request.memory_bytes = 5'000'000'000;
  json claim_template = request.claim_template("ml");
  claim_template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"]
                ["memory"] = "5000000000";
  return claim_template;
}

constexpr char kFiveG[] =
    "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaimtemplates/"
    "tessera-vgpu-1-m5000000000";
constexpr char kEightGi[] =
    "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaimtemplates/"
    "tessera-vgpu-1-m8gi";

TEST(ApiServerStandIn, WritesBackServerMetadataEmptySpecMetadataAndCanonicalQuantities) {
  FakeKube api;
  api.writes_back = true;
  json posted = five_g_as_bytes();
  json& requests = posted["spec"]["spec"]["devices"]["requests"];
  requests.push_back(
      {{"name", "alt"},
       {"firstAvailable",
        {{{"name", "big"},
          {"deviceClassName", "vgpu.tessera.dev"},
          {"capacity", {{"requests", {{"memory", "8589934592"}, {"x", "1000"}}}}}}}}});
  ASSERT_TRUE(
      api.request("POST", std::string(kCollection) + "?fieldManager=tessera-webhook", posted.dump())
          .is_ok());
  const json stored = api.get(kFiveG);
  const json& metadata = stored["metadata"];
  EXPECT_EQ(metadata["uid"].get<std::string>().size(), 36u);
  EXPECT_EQ(metadata["resourceVersion"], "1");
  EXPECT_EQ(metadata["generation"], 1);
  EXPECT_EQ(metadata["creationTimestamp"].get<std::string>().size(), 20u);  // 2026-01-02T03:04:05Z
  EXPECT_EQ(metadata["managedFields"].size(), 1u);
  EXPECT_EQ(metadata["managedFields"][0]["manager"], "tessera-webhook");
  EXPECT_EQ(stored["spec"]["metadata"], json::object());
  const json& stored_requests = stored["spec"]["spec"]["devices"]["requests"];
  EXPECT_EQ(stored_requests[0]["exactly"]["capacity"]["requests"]["memory"], "5G");
  const json& alternative = stored_requests[1]["firstAvailable"][0];
  EXPECT_EQ(alternative["capacity"]["requests"]["memory"], "8589934592");  // plain: decimal
  EXPECT_EQ(alternative["capacity"]["requests"]["x"], "1k");
  EXPECT_EQ(alternative["allocationMode"], "ExactCount");
  EXPECT_EQ(alternative["count"], 1);
  // GET answers what is stored.
  const Result<kube::ApiResponse> got = api.request("GET", kFiveG);
  ASSERT_TRUE(got.is_ok());
  EXPECT_EQ(json::parse(got->body), stored);

  // No fieldManager: "unknown". Each object its own uid, the version counts up.
  ASSERT_TRUE(api.request("POST", kCollection, eight_gi().dump()).is_ok());
  EXPECT_EQ(api.get(kEightGi)["metadata"]["managedFields"][0]["manager"], "unknown");
  EXPECT_EQ(api.get(kEightGi)["metadata"]["resourceVersion"], "2");
  EXPECT_NE(api.get(kEightGi)["metadata"]["uid"], metadata["uid"]);
}

TEST(ApiServerStandIn, AnExistingNameIs409AlreadyExistsAndAStaleUpdate409Conflict) {
  FakeKube api;
  api.writes_back = true;
  ASSERT_TRUE(api.request("POST", kCollection, eight_gi().dump()).is_ok());
  const Result<kube::ApiResponse> again = api.request("POST", kCollection, eight_gi().dump());
  ASSERT_FALSE(again.is_ok());
  EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(api.last_status()["kind"], "Status");
  EXPECT_EQ(api.last_status()["reason"], "AlreadyExists");
  EXPECT_EQ(api.last_status()["code"], 409);

  json current = api.get(kEightGi);
  json stale = current;
  current["metadata"]["labels"]["team"] = "a";
  ASSERT_TRUE(api.request("PUT", kEightGi, current.dump()).is_ok());
  EXPECT_EQ(api.get(kEightGi)["metadata"]["resourceVersion"], "2");
  EXPECT_EQ(api.get(kEightGi)["metadata"]["generation"], 1);  // the spec did not change
  EXPECT_EQ(api.get(kEightGi)["metadata"]["uid"], current["metadata"]["uid"]);
  stale["metadata"]["labels"]["team"] = "b";
  const Result<kube::ApiResponse> conflict = api.request("PUT", kEightGi, stale.dump());
  ASSERT_FALSE(conflict.is_ok());
  EXPECT_EQ(conflict.status().message(), std::string("PUT ") + kEightGi + ": HTTP 409: Conflict");
  EXPECT_EQ(api.last_status()["reason"], "Conflict");
}

TEST(ApiServerStandIn, AQuantityItCannotReadIs422NamingTheField) {
  FakeKube api;
  api.writes_back = true;
  json posted = eight_gi();
  posted["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"]["memory"] =
      "8 GiB";
  const Result<kube::ApiResponse> refused = api.request("POST", kCollection, posted.dump());
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(api.last_status()["message"],
            "spec.spec.devices.requests[0].exactly.capacity.requests.memory: quantity \"8 GiB\": "
            "unknown suffix \" GiB\" (expected Ki Mi Gi Ti Pi Ei, n u m k M G T P E or an "
            "exponent)");
}

// The old check compared bytes: what kube-apiserver returns is not what was sent, yet it is the
// same template.
TEST(TemplateWriter, TheStoredSpecDiffersByteForByteFromTheSentOneAndIsAccepted) {
  FakeKube api;
  api.writes_back = true;
  ManualClock clock;
  ASSERT_TRUE(api.request("POST", kCollection, eight_gi().dump()).is_ok());
  EXPECT_NE(api.get(kEightGi)["spec"], eight_gi()["spec"]);
  EXPECT_NE(api.get(kEightGi)["spec"].dump(), eight_gi()["spec"].dump());
  TemplateWriter writer(api, std::chrono::seconds(60), clock.function());
  EXPECT_TRUE(writer.ensure(eight_gi()).is_ok());
  EXPECT_EQ(writer.counts().existed, 1u);
}

// A template an earlier version posted with bare bytes comes back "5G"; the same amount now.
TEST(TemplateWriter, QuantitiesAreComparedByValue) {
  FakeKube api;
  api.writes_back = true;
  ManualClock clock;
  ASSERT_TRUE(api.request("POST", kCollection, five_g_as_bytes().dump()).is_ok());
  ASSERT_EQ(api.get(kFiveG)["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"]
                           ["requests"]["memory"],
            "5G");
  ShareRequest request;
  request.memory_bytes = 5'000'000'000;
  TemplateWriter writer(api, std::chrono::seconds(60), clock.function());
  EXPECT_TRUE(writer.ensure(request.claim_template("ml")).is_ok());

  // Someone wrote 8Gi as bytes ("8589934592" stays so): the same value as ours.
  json as_bytes = eight_gi();
  as_bytes["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"]["memory"] =
      "8589934592";
  ASSERT_TRUE(api.request("POST", kCollection, as_bytes.dump()).is_ok());
  EXPECT_TRUE(writer.ensure(eight_gi()).is_ok());
  EXPECT_EQ(writer.counts().existed, 2u);
}

TEST(TemplateWriter, ARestartAcceptsTheTemplatesThatExist) {
  FakeKube api;
  api.writes_back = true;
  ManualClock clock;
  {
    TemplateWriter before(api, std::chrono::seconds(60), clock.function());
    ASSERT_TRUE(before.ensure(eight_gi()).is_ok());
    ASSERT_TRUE(before.ensure(five_g_as_bytes()).is_ok());
  }
  ShareRequest five_g;
  five_g.memory_bytes = 5'000'000'000;
  TemplateWriter after(api, std::chrono::seconds(60), clock.function());  // an empty cache
  EXPECT_TRUE(after.ensure(eight_gi()).is_ok());
  EXPECT_TRUE(after.ensure(five_g.claim_template("ml")).is_ok());
  EXPECT_EQ(after.counts().existed, 2u);
  EXPECT_EQ(after.counts().failed, 0u);
}

TEST(TemplateWriter, TwoReplicasShareTheTemplates) {
  FakeKube api;
  api.writes_back = true;
  ManualClock clock;
  TemplateWriter first(api, std::chrono::seconds(60), clock.function());
  TemplateWriter second(api, std::chrono::seconds(60), clock.function());
  std::vector<json> templates;
  for (uint32_t count : {1u, 2u}) {
    for (uint64_t memory : {8ull << 30, 5'000'000'000ull, 1'536ull, 3000ull << 20}) {
      ShareRequest request;
      request.count = count;
      request.memory_bytes = memory;
      request.cores = 30;
      templates.push_back(request.claim_template("ml"));
    }
  }
  for (const json& claim_template : templates) {
    EXPECT_TRUE(first.ensure(claim_template).is_ok()) << claim_template.dump();
    EXPECT_TRUE(second.ensure(claim_template).is_ok()) << claim_template.dump();
  }
  EXPECT_EQ(first.counts().created, templates.size());
  EXPECT_EQ(second.counts().existed, templates.size());
  EXPECT_EQ(first.counts().failed + second.counts().failed, 0u);
}

TEST(TemplateWriter, AnExpiredCacheAcceptsTheTemplatesThatExist) {
  FakeKube api;
  api.writes_back = true;
  ManualClock clock;
  TemplateWriter writer(api, std::chrono::seconds(60), clock.function());
  ASSERT_TRUE(writer.ensure(eight_gi()).is_ok());
  clock.now += std::chrono::seconds(61);
  EXPECT_TRUE(writer.ensure(eight_gi()).is_ok());
  EXPECT_EQ(api.requests(), (std::vector<std::string>{std::string("POST ") + kCollection,
                                                      std::string("POST ") + kCollection,
                                                      std::string("GET ") + kEightGi}));
  EXPECT_EQ(writer.counts().existed, 1u);
}

TEST(TemplateWriter, ATemplateThatReallyDiffersIsStillRefused) {
  const std::string refusal =
      "ResourceClaimTemplate ml/tessera-vgpu-1-m8gi exists with another spec; delete it or rename "
      "it";
  json other_amount = eight_gi();
  other_amount["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"]
              ["memory"] = "8G";
  json other_class = eight_gi();
  other_class["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] =
      "gpu.nvidia.com";
  json other_count = eight_gi();
  other_count["spec"]["spec"]["devices"]["requests"][0]["exactly"].erase("count");  // default 1
  other_count["spec"]["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"] = "All";
  for (const json& existing : {other_amount, other_class, other_count}) {
    FakeKube api;
    api.writes_back = true;
    ManualClock clock;
    ASSERT_TRUE(api.request("POST", kCollection, existing.dump()).is_ok());
    TemplateWriter writer(api, std::chrono::seconds(60), clock.function());
    const Status refused = writer.ensure(eight_gi());
    EXPECT_EQ(refused.code(), StatusCode::kAlreadyExists) << existing.dump();
    EXPECT_EQ(refused.message(), refusal);
  }
}

TEST(TemplateWriter, AnExistingQuantityThatCannotBeReadIsRefusedNamingIt) {
  FakeKube api;
  ManualClock clock;
  json unreadable = eight_gi();
  unreadable["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"]
            ["memory"] = "lots";
  api.put(kEightGi, unreadable);
  TemplateWriter writer(api, std::chrono::seconds(60), clock.function());
  const Status refused = writer.ensure(eight_gi());
  EXPECT_EQ(refused.code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(refused.message(),
            "ResourceClaimTemplate ml/tessera-vgpu-1-m8gi exists with another spec; delete it or "
            "rename it (spec.spec.devices.requests[0].exactly.capacity.requests.memory: quantity "
            "\"lots\": no number)");
}

}  // namespace
}  // namespace tessera::webhook
