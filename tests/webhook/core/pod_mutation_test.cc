// /mutate's core over golden AdmissionReview requests: each answer checked field by field, each
// patch applied to the pod (nlohmann::json::patch, RFC 6902) and the result checked.
#include "core/pod_mutation.h"

#include <functional>

#include <gtest/gtest.h>

#include "core/claim_validation.h"

#include "review_fixture.h"

namespace tessera::webhook {
namespace {

using nlohmann::json;
using testing::FakeClaimLookup;
using testing::golden;
using testing::patch_of;

struct Mutated {
  json review;  // the answer
  json pod;     // the request's pod with the patch applied
  std::vector<json> templates;
  bool dry_run = false;
};

Mutated run(const json& review, const MutateConfig& config, ClaimLookup& claims) {
  Result<MutateResult> result = mutate(review.dump(), config, claims);
  EXPECT_TRUE(result.is_ok()) << result.status().message();
  if (!result.is_ok()) return {};
  Mutated out;
  out.review = result->review;
  out.pod = review["request"]["object"].patch(patch_of(result->review));
  out.templates = result->templates;
  out.dry_run = result->dry_run;
  return out;
}

void expect_envelope(const json& answer, const json& request) {
  EXPECT_EQ(answer["apiVersion"], "admission.k8s.io/v1");
  EXPECT_EQ(answer["kind"], "AdmissionReview");
  EXPECT_EQ(answer["response"]["uid"], request["request"]["uid"]);
  EXPECT_FALSE(answer.contains("request"));
}

void expect_allowed_unchanged(const json& answer) {
  EXPECT_EQ(answer["response"]["allowed"], true);
  EXPECT_FALSE(answer["response"].contains("patch"));
  EXPECT_FALSE(answer["response"].contains("patchType"));
  EXPECT_FALSE(answer["response"].contains("status"));
}

void expect_denied(const json& answer, int code, const std::string& reason,
                   const std::string& message_part) {
  const json& response = answer["response"];
  EXPECT_EQ(response["allowed"], false);
  EXPECT_FALSE(response.contains("patch"));
  ASSERT_TRUE(response.contains("status")) << answer.dump();
  EXPECT_EQ(response["status"]["status"], "Failure");
  EXPECT_EQ(response["status"]["code"], code);
  EXPECT_EQ(response["status"]["reason"], reason);
  EXPECT_NE(response["status"]["message"].get<std::string>().find(message_part), std::string::npos)
      << response["status"]["message"];
}

json& container(json& review, const char* list, size_t index) {
  return review["request"]["object"]["spec"][list][index];
}

TEST(PodMutation, ShorthandBecomesAClaimFromATemplateAndIsRemoved) {
  const json request = golden("pod_shorthand.json");
  FakeClaimLookup claims;
  const Mutated out = run(request, {}, claims);
  expect_envelope(out.review, request);
  EXPECT_EQ(out.review["response"]["allowed"], true);
  EXPECT_EQ(out.review["response"]["patchType"], "JSONPatch");
  EXPECT_FALSE(out.review["response"].contains("warnings"));
  EXPECT_FALSE(out.review["response"].contains("status"));
  EXPECT_FALSE(out.dry_run);

  const json& train = out.pod["spec"]["containers"][0];
  EXPECT_EQ(train["resources"]["limits"], json({{"cpu", "2"}, {"memory", "16Gi"}}));
  EXPECT_EQ(train["resources"]["requests"], json({{"cpu", "2"}, {"memory", "16Gi"}}));
  EXPECT_EQ(train["resources"]["claims"], json::parse(R"([{"name": "tessera-train"}])"));
  EXPECT_EQ(out.pod["spec"]["resourceClaims"], json::parse(R"([{"name": "tessera-train",
                             "resourceClaimTemplateName": "tessera-vgpu-1-m8gi-c30"}])"));
  // Nothing else in the pod moved: no environment, no mounts (the CDI spec brings those).
  json expected = request["request"]["object"];
  expected["spec"]["containers"][0]["resources"] = train["resources"];
  expected["spec"]["resourceClaims"] = out.pod["spec"]["resourceClaims"];
  EXPECT_EQ(out.pod, expected);

  ASSERT_EQ(out.templates.size(), 1u);
  EXPECT_EQ(out.templates[0], json::parse(R"({
    "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
    "metadata": {"name": "tessera-vgpu-1-m8gi-c30", "namespace": "ml",
                 "labels": {"app.kubernetes.io/managed-by": "tessera-webhook"}},
    "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
      "deviceClassName": "vgpu.tessera.dev", "allocationMode": "ExactCount", "count": 1,
      "capacity": {"requests": {"memory": "8Gi", "cores": "30"}}}}]}}}})"));
  EXPECT_EQ(claims.calls, 0);
}

TEST(PodMutation, ThePatchRemovesKeysByEscapedPointer) {
  const json request = golden("pod_shorthand.json");
  FakeClaimLookup claims;
  const json patch = patch_of(run(request, {}, claims).review);
  ASSERT_GE(patch.size(), 3u);
  EXPECT_EQ(patch[0], json({{"op", "remove"},
                            {"path", "/spec/containers/0/resources/limits/tessera.dev~1gpu"}}));
}

// A MIG profile key: removed by escaped pointer, a claim from the MIG class's template.
TEST(PodMutation, MigShorthandBecomesAClaimOfTheMigClass) {
  json request = golden("pod_shorthand.json");
  json& resources = container(request, "containers", 0)["resources"];
  resources["limits"] = {{"cpu", "2"}, {"tessera.dev/mig-3g.71gb", "1"}};
  resources.erase("requests");
  FakeClaimLookup claims;
  const Mutated out = run(request, {}, claims);
  EXPECT_EQ(out.review["response"]["allowed"], true) << out.review.dump();
  EXPECT_EQ(patch_of(out.review)[0],
            json({{"op", "remove"},
                  {"path", "/spec/containers/0/resources/limits/tessera.dev~1mig-3g.71gb"}}));
  EXPECT_EQ(out.pod["spec"]["containers"][0]["resources"]["limits"], json({{"cpu", "2"}}));
  EXPECT_EQ(out.pod["spec"]["resourceClaims"], json::parse(R"([{"name": "tessera-train",
                             "resourceClaimTemplateName": "tessera-vgpu-1-mig3g71gb-c100"}])"));
  ASSERT_EQ(out.templates.size(), 1u);
  EXPECT_EQ(
      out.templates[0]["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"],
      "mig.vgpu.tessera.dev");
  // A bad profile is refused as any bad shorthand is.
  resources["limits"] = {{"tessera.dev/mig-3g.71", "1"}};
  expect_denied(run(request, {}, claims).review, 422, "Invalid",
                "container \"train\": tessera.dev/mig-3g.71: \"3g.71\" is not a MIG profile");
}

TEST(PodMutation, MutatingAMutatedPodChangesNothing) {
  json request = golden("pod_shorthand.json");
  FakeClaimLookup claims;
  const Mutated first = run(request, {}, claims);
  request["request"]["object"] = first.pod;
  claims.answers[{"ml", ClaimSource::kResourceClaimTemplate, "tessera-vgpu-1-m8gi-c30"}] = true;
  const Mutated second = run(request, {}, claims);
  expect_envelope(second.review, request);
  expect_allowed_unchanged(second.review);
  EXPECT_TRUE(second.templates.empty());
  EXPECT_EQ(second.pod, first.pod);
}

TEST(PodMutation, HamiNamesAreTranslatedOnlyWhereTheNamespaceOptedIn) {
  const json request = golden("pod_hami.json");
  FakeClaimLookup claims;
  const Mutated elsewhere = run(request, {}, claims);
  expect_allowed_unchanged(elsewhere.review);
  EXPECT_EQ(elsewhere.pod, request["request"]["object"]);  // NVIDIA's device plugin keeps it

  MutateConfig opted_in;
  opted_in.hami_names = true;
  const Mutated out = run(request, opted_in, claims);
  expect_envelope(out.review, request);
  const json& infer = out.pod["spec"]["containers"][0];
  EXPECT_EQ(infer["resources"]["limits"], json::object());
  EXPECT_EQ(infer["resources"]["requests"], json::object());
  EXPECT_EQ(infer["resources"]["claims"], json::parse(R"([{"name": "tessera-infer"}])"));
  ASSERT_EQ(out.templates.size(), 1u);
  // gpumem is MiB: the API sends 3000 as "3k".
  EXPECT_EQ(out.templates[0]["metadata"]["name"], "tessera-vgpu-1-m3000mi-c30");
  EXPECT_EQ(out.templates[0]["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"],
            json::parse(R"({"requests": {"memory": "3000Mi", "cores": "30"}})"));
}

TEST(PodMutation, HamiWholeMemoryAndNoCoreLimitAskForTheDeviceDefaults) {
  json request = golden("pod_hami.json");
  json& resources = container(request, "containers", 0)["resources"];
  resources["limits"] = {{"nvidia.com/gpu", "2"},
                         {"nvidia.com/gpumem-percentage", "100"},
                         {"nvidia.com/gpucores", "0"}};
  resources.erase("requests");
  MutateConfig opted_in;
  opted_in.hami_names = true;
  FakeClaimLookup claims;
  const Mutated out = run(request, opted_in, claims);
  ASSERT_EQ(out.templates.size(), 1u);
  EXPECT_EQ(out.templates[0]["metadata"]["name"], "tessera-vgpu-2");
  const json& exactly = out.templates[0]["spec"]["spec"]["devices"]["requests"][0]["exactly"];
  EXPECT_EQ(exactly["count"], 2);
  EXPECT_FALSE(exactly.contains("capacity"));
}

TEST(PodMutation, HamiMemoryPercentageOtherThanWholeIsRefusedWithTheFix) {
  json request = golden("pod_hami.json");
  json& resources = container(request, "containers", 0)["resources"];
  resources["limits"] = {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem-percentage", "50"}};
  resources.erase("requests");
  MutateConfig opted_in;
  opted_in.hami_names = true;
  FakeClaimLookup claims;
  const Mutated out = run(request, opted_in, claims);
  expect_envelope(out.review, request);
  expect_denied(out.review, 422, "Invalid",
                "use nvidia.com/gpumem (MiB) or tessera.dev/gpu-memory");
  EXPECT_TRUE(out.templates.empty());
}

TEST(PodMutation, InitAndSidecarContainersGetTheirOwnShareOrNone) {
  const json request = golden("pod_init_sidecar.json");
  FakeClaimLookup claims;
  const Mutated out = run(request, {}, claims);
  expect_envelope(out.review, request);
  const json& init = out.pod["spec"]["initContainers"];
  EXPECT_EQ(init[0]["resources"]["claims"], json::parse(R"([{"name": "tessera-prepare"}])"));
  EXPECT_EQ(init[0]["resources"]["limits"], json::object());
  EXPECT_FALSE(init[1]["resources"].contains("claims"));  // the sidecar asked for no GPU
  const json& main = out.pod["spec"]["containers"];
  EXPECT_EQ(main[0]["resources"]["claims"], json::parse(R"([{"name": "tessera-train"}])"));
  EXPECT_EQ(main[1]["resources"]["claims"], json::parse(R"([{"name": "tessera-eval"}])"));
  // One claim each (one share each), two templates for the two distinct requests.
  EXPECT_EQ(out.pod["spec"]["resourceClaims"], json::parse(R"([
    {"name": "tessera-prepare", "resourceClaimTemplateName": "tessera-vgpu-1-m2gi"},
    {"name": "tessera-train", "resourceClaimTemplateName": "tessera-vgpu-1-m8gi-c30"},
    {"name": "tessera-eval", "resourceClaimTemplateName": "tessera-vgpu-1-m8gi-c30"}])"));
  ASSERT_EQ(out.templates.size(), 2u);
  EXPECT_EQ(out.templates[0]["metadata"]["name"], "tessera-vgpu-1-m2gi");
  EXPECT_EQ(out.templates[1]["metadata"]["name"], "tessera-vgpu-1-m8gi-c30");
}

TEST(PodMutation, APodWithoutGpusPassesUntouchedWithoutLookups) {
  const json request = golden("pod_no_gpu.json");
  FakeClaimLookup claims;
  const Mutated out = run(request, {}, claims);
  expect_envelope(out.review, request);
  expect_allowed_unchanged(out.review);
  EXPECT_FALSE(out.review["response"].contains("warnings"));
  EXPECT_TRUE(out.templates.empty());
  EXPECT_EQ(claims.calls, 0);
}

TEST(PodMutation, APodAlreadyUsingATesseraClaimGetsNothing) {
  const json request = golden("pod_with_claim.json");
  FakeClaimLookup claims;
  claims.answers[{"ml", ClaimSource::kResourceClaimTemplate, "team-a-gpu"}] = true;
  const Mutated out = run(request, {}, claims);
  expect_envelope(out.review, request);
  expect_allowed_unchanged(out.review);
  EXPECT_EQ(claims.calls, 0);  // nothing to check, so nothing looked up
}

TEST(PodMutation, ATesseraClaimContainerThatSetsLdPreloadIsRefused) {
  json request = golden("pod_with_claim.json");
  container(request, "containers", 0)["env"] = json::parse(
      R"([{"name": "CUDA_VISIBLE_DEVICES", "value": "0"},
          {"name": "LD_PRELOAD", "value": "/opt/other.so"}])");
  FakeClaimLookup claims;
  claims.answers[{"ml", ClaimSource::kResourceClaimTemplate, "team-a-gpu"}] = true;
  const Mutated out = run(request, {}, claims);
  expect_envelope(out.review, request);
  expect_denied(out.review, 403, "Forbidden",
                "container \"train\" sets LD_PRELOAD: the loader maps a library named there "
                "before the share's runtime from /etc/ld.so.preload, so it could take CUDA calls "
                "the runtime must count (where the node agent loads the runtime through "
                "LD_PRELOAD instead, the share's CDI device replaces this value); remove it from "
                "env");
  EXPECT_EQ(claims.calls, 1);

  MutateConfig warn;
  warn.policy.environment = PolicyAction::kWarn;
  const Mutated warned = run(request, warn, claims);
  EXPECT_EQ(warned.review["response"]["allowed"], true);
  EXPECT_FALSE(warned.review["response"].contains("patch"));
  ASSERT_EQ(warned.review["response"]["warnings"].size(), 1u);
  EXPECT_NE(warned.review["response"]["warnings"][0].get<std::string>().find("LD_PRELOAD"),
            std::string::npos);
}

TEST(PodMutation, EveryBypassIsNamedInOneRefusal) {
  json request = golden("pod_shorthand.json");
  json& train = container(request, "containers", 0);
  train["env"] = json::parse(R"([{"name": "TESSERA_MEMORY_LIMIT", "value": "80Gi"},
                                 {"name": "CUDA_DEVICE_SM_LIMIT_0", "value": "100"},
                                 {"name": "CUDA_DEVICE_ORDER", "value": "PCI_BUS_ID"}])");
  train["volumeMounts"].push_back({{"name", "etc"}, {"mountPath", "/etc/"}});
  train["volumeMounts"].push_back(
      {{"name", "state"}, {"mountPath", "/var/run/tessera/shares/x/limits"}});
  train["volumeMounts"].push_back({{"name", "data"}, {"mountPath", "/var/lib/data"}});
  FakeClaimLookup claims;
  const Mutated out = run(request, {}, claims);
  expect_denied(out.review, 403, "Forbidden", "sets TESSERA_MEMORY_LIMIT");
  const std::string message = out.review["response"]["status"]["message"];
  EXPECT_NE(message.find("sets CUDA_DEVICE_SM_LIMIT_0"), std::string::npos);
  EXPECT_EQ(message.find("CUDA_DEVICE_ORDER"), std::string::npos);
  EXPECT_NE(message.find("mounts volume \"etc\" at /etc/: it covers /etc/ld.so.preload"),
            std::string::npos);
  EXPECT_NE(
      message.find("mounts volume \"state\" at /var/run/tessera/shares/x/limits: it covers the "
                   "share folder"),
      std::string::npos);
  EXPECT_EQ(message.find("\"data\""), std::string::npos);
  EXPECT_TRUE(out.templates.empty());  // a refused pod creates nothing
}

TEST(PodMutation, TheShareFolderIsGuardedUnderRunAsUnderVarRun) {
  // /var/run is a symlink to /run in most images: a mount at /run/tessera covers the share folder.
  for (const char* path : {"/run", "/run/tessera", "/run/tessera/shares/x/limits", "/var/run"}) {
    json request = golden("pod_shorthand.json");
    container(request, "containers", 0)["volumeMounts"].push_back(
        {{"name", "fake"}, {"mountPath", path}});
    FakeClaimLookup claims;
    expect_denied(run(request, {}, claims).review, 403, "Forbidden",
                  std::string("mounts volume \"fake\" at ") + path +
                      ": it covers the share folder /var/run/tessera");
  }
  json request = golden("pod_shorthand.json");
  container(request, "containers", 0)["volumeMounts"].push_back(
      {{"name", "data"}, {"mountPath", "/run/data"}});
  FakeClaimLookup claims;
  EXPECT_EQ(run(request, {}, claims).review["response"]["allowed"], true);
}

TEST(PodMutation, PrivilegedWarnsByDefaultAndIsRefusedWhenConfigured) {
  json request = golden("pod_shorthand.json");
  container(request, "containers", 0)["securityContext"] = {{"privileged", true}};
  FakeClaimLookup claims;
  const Mutated warned = run(request, {}, claims);
  EXPECT_EQ(warned.review["response"]["allowed"], true);
  EXPECT_EQ(warned.review["response"]["warnings"],
            json::array({"container \"train\" runs privileged: it can reach the whole GPU around "
                         "its share's limits; drop securityContext.privileged"}));
  EXPECT_EQ(warned.pod["spec"]["resourceClaims"][0]["name"], "tessera-train");

  MutateConfig strict;
  strict.policy.privileged = PolicyAction::kDeny;
  expect_denied(run(request, strict, claims).review, 403, "Forbidden", "runs privileged");
}

TEST(PodMutation, ContainersWithoutATesseraShareAreNotPoliced) {
  json request = golden("pod_with_claim.json");
  container(request, "containers", 0)["securityContext"] = {{"privileged", true}};
  container(request, "containers", 0)["env"] = json::parse(R"([{"name": "LD_PRELOAD"}])");
  FakeClaimLookup claims;
  claims.answers[{"ml", ClaimSource::kResourceClaimTemplate, "team-a-gpu"}] = false;
  const Mutated out = run(request, {}, claims);
  expect_allowed_unchanged(out.review);
  EXPECT_FALSE(out.review["response"].contains("warnings"));

  json plain = golden("pod_no_gpu.json");
  container(plain, "containers", 0)["env"] = json::parse(R"([{"name": "LD_PRELOAD"}])");
  expect_allowed_unchanged(run(plain, {}, claims).review);
}

// A container asking for the default class's extended resource gets its claim from the scheduler
// after admission: it is a share, policed as one, and left as it is otherwise.
TEST(PodMutation, AContainerAskingForTheExtendedResourceIsPolicedAsAShare) {
  json request = golden("pod_no_gpu.json");
  container(request, "containers", 0)["resources"] = {{"limits", {{"vgpu.tessera.dev/gpu", "1"}}}};
  FakeClaimLookup claims;
  MutateConfig config;
  config.extended_resource_name = "vgpu.tessera.dev/gpu";
  expect_allowed_unchanged(run(request, config, claims).review);

  container(request, "containers", 0)["env"] = json::parse(R"([{"name": "LD_PRELOAD"}])");
  const Mutated refused = run(request, config, claims);
  expect_denied(refused.review, 403, "Forbidden", "sets LD_PRELOAD");
  EXPECT_TRUE(refused.templates.empty());
  EXPECT_EQ(claims.calls, 0);  // no claim exists to look up

  // Asked in requests only, as the API server allows for extended resources it defaults.
  container(request, "containers",
            0)["resources"] = {{"requests", {{"vgpu.tessera.dev/gpu", "1"}}}};
  expect_denied(run(request, config, claims).review, 403, "Forbidden", "sets LD_PRELOAD");

  // Without the name configured (no extended resource in the cluster), it is not a share.
  expect_allowed_unchanged(run(request, {}, claims).review);
}

TEST(PodMutation, AnUnreachableApiChecksTheClaimAsTesseraAndSaysSo) {
  json request = golden("pod_with_claim.json");
  container(request, "containers", 0)["securityContext"] = {{"privileged", true}};
  FakeClaimLookup claims;  // knows nothing: every lookup fails
  const Mutated out = run(request, {}, claims);
  EXPECT_EQ(out.review["response"]["allowed"], true);
  const json& warnings = out.review["response"]["warnings"];
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_EQ(warnings[0],
            "tessera-webhook could not look up \"team-a-gpu\" (GET team-a-gpu: "
            "connection refused); checked it as a Tessera claim");
  EXPECT_NE(warnings[1].get<std::string>().find("runs privileged"), std::string::npos);
}

TEST(PodMutation, ShorthandBesideATesseraClaimIsAskingTwice) {
  json request = golden("pod_with_claim.json");
  container(request, "containers", 0)["resources"]["limits"]["tessera.dev/gpu"] = "1";
  FakeClaimLookup claims;
  claims.answers[{"ml", ClaimSource::kResourceClaimTemplate, "team-a-gpu"}] = true;
  expect_denied(run(request, {}, claims).review, 422, "Invalid",
                "container \"train\" asks for a GPU share twice: by shorthand and by claim "
                "\"gpu\"; keep one");

  // Beside a claim for something else, the share is added to the lists already there.
  claims.answers[{"ml", ClaimSource::kResourceClaimTemplate, "team-a-gpu"}] = false;
  const Mutated out = run(request, {}, claims);
  const json& train = out.pod["spec"]["containers"][0];
  EXPECT_EQ(train["resources"]["claims"],
            json::parse(R"([{"name": "gpu"}, {"name": "tessera-train"}])"));
  EXPECT_EQ(out.pod["spec"]["resourceClaims"], json::parse(R"([
    {"name": "gpu", "resourceClaimTemplateName": "team-a-gpu"},
    {"name": "tessera-train", "resourceClaimTemplateName": "tessera-vgpu-1"}])"));
}

TEST(PodMutation, DryRunAnswersTheSameAndSaysSo) {
  const json request = golden("pod_dry_run.json");
  FakeClaimLookup claims;
  const Mutated out = run(request, {}, claims);
  expect_envelope(out.review, request);
  EXPECT_TRUE(out.dry_run);  // the server creates no template
  EXPECT_EQ(out.pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"],
            "tessera-vgpu-1-m8gi-c30");
  EXPECT_EQ(out.templates.size(), 1u);
}

TEST(PodMutation, V1beta1IsRefusedInItsOwnVersionWithTheFix) {
  const json request = golden("pod_v1beta1.json");
  FakeClaimLookup claims;
  Result<MutateResult> result = mutate(request.dump(), {}, claims);
  ASSERT_TRUE(result.is_ok());
  const json& answer = result->review;
  EXPECT_EQ(answer["apiVersion"], "admission.k8s.io/v1beta1");
  EXPECT_EQ(answer["kind"], "AdmissionReview");
  EXPECT_EQ(answer["response"]["uid"], request["request"]["uid"]);
  expect_denied(answer, 400, "BadRequest", "admissionReviewVersions");
  EXPECT_TRUE(result->templates.empty());
}

TEST(PodMutation, WhatIsNotAnAdmissionReviewIsAnError) {
  FakeClaimLookup claims;
  for (
      const std::string body :
      {"", "{", "not json", "[]", "{\"kind\": \"AdmissionReview\"}",
       R"({"apiVersion": "admission.k8s.io/v2", "kind": "AdmissionReview", "request": {"uid": "u"}})",
       R"({"apiVersion": "admission.k8s.io/v1", "kind": "Pod", "request": {"uid": "u"}})",
       R"({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}})",
       R"({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"})"}) {
    Result<MutateResult> result = mutate(body, {}, claims);
    ASSERT_FALSE(result.is_ok()) << body;
    EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument) << body;
  }
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  Result<MutateResult> result = mutate(deep, {}, claims);
  ASSERT_FALSE(result.is_ok());
  EXPECT_NE(result.status().message().find("deeper than"), std::string::npos);
}

// Fields kube-apiserver always sends, missing or of another type: an error naming the field and
// the value (the request is answered 400, so the pod is not admitted unchecked), for /mutate and
// /validate alike; nothing is patched and no template is asked for.
TEST(PodMutation, ARequestWithAFieldMissingOrOfAnotherTypeIsAnErrorNamingIt) {
  struct Case {
    std::function<void(json&)> edit;
    std::string error;
  };
  const Case cases[] = {
      {[](json& r) { r["request"] = "pod"; }, "request: missing"},
      {[](json& r) { r["request"].erase("uid"); },
       "request.uid: expected a non-empty string, got nothing"},
      {[](json& r) { r["request"]["uid"] = 42; },
       "request.uid: expected a non-empty string, got 42"},
      {[](json& r) { r["request"]["uid"] = ""; },
       "request.uid: expected a non-empty string, got \"\""},
      {[](json& r) { r["request"].erase("kind"); },
       "request.kind: expected an object, got nothing"},
      {[](json& r) { r["request"]["kind"] = "Pod"; },
       "request.kind: expected an object, got \"Pod\""},
      {[](json& r) { r["request"]["kind"].erase("group"); },
       "request.kind.group: expected a string, got nothing"},
      {[](json& r) { r["request"]["kind"]["version"] = 1; },
       "request.kind.version: expected a string, got 1"},
      {[](json& r) { r["request"]["kind"]["kind"] = json::array({"Pod"}); },
       "request.kind.kind: expected a string, got [\"Pod\"]"},
      {[](json& r) { r["request"].erase("operation"); },
       "request.operation: expected a string, got nothing"},
      {[](json& r) { r["request"]["operation"] = true; },
       "request.operation: expected a string, got true"},
      {[](json& r) { r["request"]["namespace"] = nullptr; },
       "request.namespace: expected a string, got null"},
      {[](json& r) { r["request"]["subResource"] = 0; },
       "request.subResource: expected a string, got 0"},
      {[](json& r) { r["request"]["name"] = json::object(); },
       "request.name: expected a string, got {}"},
      {[](json& r) { r["request"]["dryRun"] = "false"; },
       "request.dryRun: expected a boolean, got \"false\""},
      {[](json& r) { r["request"]["object"] = "a pod"; },
       "request.object: expected an object, got \"a pod\""},
      {[](json& r) { r["request"]["object"] = json::array({1}); },
       "request.object: expected an object, got [1]"},
  };
  for (const char* file : {"pod_shorthand.json", "claim_vgpu_config.json"}) {
    for (const Case& c : cases) {
      json request = golden(file);
      c.edit(request);
      FakeClaimLookup claims;
      Result<MutateResult> mutated = mutate(request.dump(), {}, claims);
      EXPECT_EQ(mutated.status().code(), StatusCode::kInvalidArgument) << request.dump();
      EXPECT_EQ(mutated.status().message(), c.error) << request.dump();
      EXPECT_EQ(claims.calls, 0);
      Result<json> validated = validate(request.dump());
      EXPECT_EQ(validated.status().message(), c.error) << request.dump();
    }
  }
  // Optional fields left out are read as absent: a pod without dryRun or subResource is mutated.
  json minimal = golden("pod_shorthand.json");
  minimal["request"].erase("dryRun");
  minimal["request"].erase("subResource");
  FakeClaimLookup claims;
  const Mutated out = run(minimal, {}, claims);
  EXPECT_FALSE(out.dry_run);
  EXPECT_EQ(out.templates.size(), 1u);
}

TEST(PodMutation, WrongKindsAndOperationsPassUnchanged) {
  FakeClaimLookup claims;
  json deployment = golden("pod_shorthand.json");
  deployment["request"]["kind"] = {{"group", "apps"}, {"version", "v1"}, {"kind", "Deployment"}};
  const Mutated out = run(deployment, {}, claims);
  expect_envelope(out.review, deployment);
  expect_allowed_unchanged(out.review);
  EXPECT_EQ(out.review["response"]["warnings"],
            json::array({"tessera-webhook mutates Pods only; apps/Deployment passed unchanged"}));

  json update = golden("pod_shorthand.json");
  update["request"]["operation"] = "UPDATE";
  expect_allowed_unchanged(run(update, {}, claims).review);
  json subresource = golden("pod_shorthand.json");
  subresource["request"]["subResource"] = "ephemeralcontainers";
  expect_allowed_unchanged(run(subresource, {}, claims).review);
  json deleted = golden("pod_shorthand.json");
  deleted["request"]["operation"] = "DELETE";
  deleted["request"]["object"] = nullptr;
  expect_allowed_unchanged(run(deleted, {}, claims).review);
}

TEST(PodMutation, BadShorthandIsRefusedNamingTheValueAndTheFix) {
  struct Case {
    json limits;
    json requests;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{{"tessera.dev/gpu-cores", "150"}},
       nullptr,
       "container \"train\": tessera.dev/gpu-cores \"150\": expected a whole percent of the "
       "GPU's compute, 0..100"},
      {{{"tessera.dev/gpu", "0"}}, nullptr, "tessera.dev/gpu \"0\": expected a whole number"},
      {{{"tessera.dev/gpu", "500m"}}, nullptr, "tessera.dev/gpu \"500m\""},
      {{{"tessera.dev/gpu-memory", "lots"}},
       nullptr,
       "tessera.dev/gpu-memory \"lots\": expected a byte quantity above 0"},
      {{{"tessera.dev/gpu-memory", "8Gi"}},
       {{"tessera.dev/gpu-memory", "4Gi"}},
       "tessera.dev/gpu-memory is 8Gi in limits but 4Gi in requests"},
  };
  FakeClaimLookup claims;
  for (const auto& c : cases) {
    json request = golden("pod_shorthand.json");
    json& resources = container(request, "containers", 0)["resources"];
    resources["limits"] = c.limits;
    if (c.requests.is_null())
      resources.erase("requests");
    else
      resources["requests"] = c.requests;
    const Mutated out = run(request, {}, claims);
    expect_envelope(out.review, request);
    expect_denied(out.review, 422, "Invalid", c.message);
  }
  json mixed = golden("pod_hami.json");
  container(mixed, "containers", 0)["resources"]["limits"]["tessera.dev/gpu"] = "1";
  MutateConfig opted_in;
  opted_in.hami_names = true;
  expect_denied(run(mixed, opted_in, claims).review, 422, "Invalid",
                "mixes tessera.dev/ and nvidia.com/ GPU requests");
}

TEST(PodMutation, ClaimListsThatAreNoListsAreReplacedSoThePatchApplies) {
  json request = golden("pod_shorthand.json");
  container(request, "containers", 0)["resources"]["claims"] = 5;
  request["request"]["object"]["spec"]["resourceClaims"] = "none";
  FakeClaimLookup claims;
  const Mutated out = run(request, {}, claims);
  EXPECT_EQ(out.pod["spec"]["containers"][0]["resources"]["claims"],
            json::parse(R"([{"name": "tessera-train"}])"));
  EXPECT_EQ(out.pod["spec"]["resourceClaims"].size(), 1u);
}

TEST(PodMutation, ALongContainerNameGetsAClaimNameThatIsADnsLabel) {
  json request = golden("pod_shorthand.json");
  const std::string name(63, 'a');
  container(request, "containers", 0)["name"] = name;
  FakeClaimLookup claims;
  const Mutated out = run(request, {}, claims);
  const std::string claim = out.pod["spec"]["resourceClaims"][0]["name"];
  EXPECT_EQ(claim.size(), 63u);
  EXPECT_EQ(claim.rfind("tessera-aaaa", 0), 0u);
  EXPECT_EQ(out.pod["spec"]["containers"][0]["resources"]["claims"][0]["name"], claim);
}

TEST(PodMutation, AClaimNameAlreadyTakenIsRefused) {
  json request = golden("pod_shorthand.json");
  request["request"]["object"]["spec"]["resourceClaims"] =
      json::parse(R"([{"name": "tessera-train", "resourceClaimName": "other"}])");
  FakeClaimLookup claims;
  expect_denied(run(request, {}, claims).review, 422, "Invalid",
                "the pod claim name \"tessera-train\"");
}

TEST(PodMutation, AHugePodIsAnsweredInFull) {
  json request = golden("pod_shorthand.json");
  json& containers = request["request"]["object"]["spec"]["containers"];
  const json train = containers[0];
  json plain = golden("pod_no_gpu.json")["request"]["object"]["spec"]["containers"][0];
  for (int i = 0; i < 200; ++i)
    plain["env"].push_back({{"name", std::string("VAR_").append(std::to_string(i))},
                            {"value", std::string(200, 'x')}});
  containers.clear();
  for (int i = 0; i < 300; ++i) {
    json next = i % 3 == 0 ? train : plain;
    next["name"] = std::string("c").append(std::to_string(i));
    containers.push_back(next);
  }
  ASSERT_GT(request.dump().size(), 2'000'000u);
  FakeClaimLookup claims;
  const Mutated out = run(request, {}, claims);
  expect_envelope(out.review, request);
  ASSERT_EQ(out.pod["spec"]["resourceClaims"].size(), 100u);
  EXPECT_EQ(out.pod["spec"]["containers"][3]["resources"]["claims"][0]["name"], "tessera-c3");
  EXPECT_FALSE(out.pod["spec"]["containers"][4]["resources"].contains("claims"));
  EXPECT_EQ(out.templates.size(), 1u);
}

}  // namespace
}  // namespace tessera::webhook
