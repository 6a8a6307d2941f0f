// Templates created idempotently: created once, an equal one accepted, a different one refused,
// remembered for the TTL, errors passed on.
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

}  // namespace
}  // namespace tessera::webhook
