// /validate's core over golden ResourceClaim and ResourceClaimTemplate reviews: a VgpuConfig the
// agent would refuse at prepare time is refused here, with the agent decoder's own message.
#include "core/claim_validation.h"

#include <map>
#include <vector>

#include <gtest/gtest.h>

#include "review_fixture.h"
#include "tessera/vgpu_config/vgpu_config.h"

namespace tessera::webhook {
namespace {

using nlohmann::json;
using testing::golden;

json answer(const json& request) {
  Result<json> result = validate(request.dump());
  EXPECT_TRUE(result.is_ok()) << result.status().message();
  if (!result.is_ok()) return {};
  EXPECT_EQ((*result)["apiVersion"], request["apiVersion"]);
  EXPECT_EQ((*result)["kind"], "AdmissionReview");
  EXPECT_EQ((*result)["response"]["uid"], request["request"]["uid"]);
  EXPECT_FALSE((*result)["response"].contains("patch"));
  return *result;
}

void expect_allowed(const json& review) {
  EXPECT_EQ(review["response"]["allowed"], true) << review.dump();
  EXPECT_FALSE(review["response"].contains("status"));
  EXPECT_FALSE(review["response"].contains("warnings"));
}

void expect_invalid(const json& review, const std::string& message) {
  EXPECT_EQ(review["response"]["allowed"], false);
  EXPECT_EQ(review["response"]["status"]["code"], 422);
  EXPECT_EQ(review["response"]["status"]["reason"], "Invalid");
  EXPECT_EQ(review["response"]["status"]["status"], "Failure");
  EXPECT_EQ(review["response"]["status"]["message"], message);
}

json& claim_parameters(json& request) {
  return request["request"]["object"]["spec"]["devices"]["config"][0]["opaque"]["parameters"];
}

// The agent's decoder message for `parameters`, as it prefixes it.
std::string agent_message(const json& parameters) {
  return vgpu_config::decode_vgpu_config(parameters).status().message();
}

TEST(ClaimValidation, AGoodClaimAndTemplateAreAllowed) {
  expect_allowed(answer(golden("claim_vgpu_config.json")));
  expect_allowed(answer(golden("claim_template_vgpu_config.json")));
}

TEST(ClaimValidation, AnUnknownFieldIsRefusedWithTheAgentsMessage) {
  json request = golden("claim_vgpu_config.json");
  claim_parameters(request)["compute"]["bursts"] = 20;
  const std::string expected = agent_message(claim_parameters(request));
  EXPECT_EQ(expected, "compute.bursts: unknown field");
  expect_invalid(answer(request), "spec.devices.config[0].opaque.parameters." + expected);
}

TEST(ClaimValidation, ValuesOutOfRangeAndWrongVersionsAreRefused) {
  for (const auto& [field, value] :
       std::vector<std::pair<std::string, json>>{{"/compute/burst", 150},
                                                 {"/compute/priority", "urgent"},
                                                 {"/sharing/strategy", "MIG"},
                                                 {"/apiVersion", "vgpu.tessera.dev/v2"},
                                                 {"/kind", "GpuConfig"}}) {
    json request = golden("claim_vgpu_config.json");
    claim_parameters(request)[json::json_pointer(field)] = value;
    const std::string expected = agent_message(claim_parameters(request));
    ASSERT_FALSE(expected.empty()) << field;
    expect_invalid(answer(request), "spec.devices.config[0].opaque.parameters." + expected);
  }
}

TEST(ClaimValidation, ACombinationAcrossConfigsIsRefusedForTheRequestItReaches) {
  json request = golden("claim_template_vgpu_config.json");
  json& config = request["request"]["object"]["spec"]["spec"]["devices"]["config"];
  config.push_back(json::parse(R"({"requests": ["gpu"], "opaque": {"driver": "vgpu.tessera.dev",
    "parameters": {"apiVersion": "vgpu.tessera.dev/v1alpha1", "kind": "VgpuConfig",
                   "compute": {"burst": 30}}}})"));
  expect_invalid(answer(request),
                 "spec.spec.devices.requests[0] (gpu): compute.limit 30 is only supported with "
                 "sharing.strategy Quota, not MPS");
  // The same burst aimed at another request reaches nothing.
  config[1]["requests"] = json::array({"other"});
  expect_allowed(answer(request));
}

// Requests and limits (docs/resource-model.md): a limit below the request the claim asks for is
// refused at apply time, naming the request, the field, the value and the bound; the GPU is not
// known yet, so a limit above it waits for the agent.
TEST(ClaimValidation, ALimitBelowItsRequestIsRefused) {
  json request = golden("claim_vgpu_config.json");  // asks for memory 8Gi and cores 30
  json& parameters = claim_parameters(request);
  parameters["compute"].erase("burst");
  parameters["memory"] = {{"limit", "4Gi"}};
  expect_invalid(answer(request),
                 "spec.devices.requests[0] (gpu): memory.limit 4Gi is below the memory request "
                 "8Gi (a limit is at least the request)");
  parameters["memory"] = {{"limit", "16Gi"}};
  parameters["compute"]["limit"] = 20;
  expect_invalid(answer(request),
                 "spec.devices.requests[0] (gpu): compute.limit 20 is below the cores request 30 "
                 "(a limit is at least the request)");
  parameters["compute"]["limit"] = 60;
  parameters["memory"] = {{"limit", "4Ti"}};
  expect_allowed(answer(request));
  // The old compute.burst at or below the request meant "no bursting": still allowed.
  parameters["compute"].erase("limit");
  parameters["compute"]["burst"] = 20;
  parameters.erase("memory");
  expect_allowed(answer(request));
  // A capacity request that is no quantity is named, never read as "the whole GPU".
  request["request"]["object"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"]
         ["memory"] = "lots";
  expect_invalid(answer(request),
                 "spec.devices.requests[0].exactly.capacity.requests.memory: invalid quantity "
                 "\"lots\"");
}

TEST(ClaimValidation, AnotherDriversConfigIsNotOurs) {
  json request = golden("claim_vgpu_config.json");
  json& opaque = request["request"]["object"]["spec"]["devices"]["config"][0]["opaque"];
  opaque["driver"] = "gpu.nvidia.com";
  opaque["parameters"] = {{"apiVersion", "resource.nvidia.com/v1beta1"}, {"kind", "GpuConfig"}};
  expect_allowed(answer(request));
}

TEST(ClaimValidation, MissingParametersAreRefused) {
  json request = golden("claim_vgpu_config.json");
  request["request"]["object"]["spec"]["devices"]["config"][0]["opaque"].erase("parameters");
  expect_invalid(answer(request), "spec.devices.config[0].opaque.parameters: missing");
}

TEST(ClaimValidation, OtherKindsDeletesAndV1beta1) {
  json pod = golden("pod_shorthand.json");
  const json allowed = answer(pod);
  EXPECT_EQ(allowed["response"]["allowed"], true);
  EXPECT_EQ(allowed["response"]["warnings"],
            json::array({"tessera-webhook validates ResourceClaims and ResourceClaimTemplates "
                         "only; Pod passed unchecked"}));

  json deleted = golden("claim_vgpu_config.json");
  deleted["request"]["operation"] = "DELETE";
  deleted["request"]["oldObject"] = deleted["request"]["object"];
  deleted["request"]["object"] = nullptr;
  expect_allowed(answer(deleted));

  json old = golden("claim_vgpu_config.json");
  old["apiVersion"] = "admission.k8s.io/v1beta1";
  const json refused = answer(old);
  EXPECT_EQ(refused["response"]["allowed"], false);
  EXPECT_EQ(refused["response"]["status"]["code"], 400);

  EXPECT_FALSE(validate("{]").is_ok());
}

// DeviceClasses as the API server has them (spec.config by name), and what was asked.
class FakeClasses final : public DeviceClassLookup {
 public:
  std::map<std::string, json> configs;
  Status failure = Status::ok();
  std::vector<std::string> asked;
  Result<json> class_configs(const std::string& name) override {
    asked.push_back(name);
    if (!failure.is_ok()) return failure;
    const auto it = configs.find(name);
    if (it == configs.end()) return not_found("deviceclasses \"" + name + "\" not found");
    return it->second;
  }
};

json class_config(const json& fields) {
  json parameters = {{"apiVersion", "vgpu.tessera.dev/v1alpha1"}, {"kind", "VgpuConfig"}};
  parameters.update(fields);
  return json::array({{{"opaque", {{"driver", "vgpu.tessera.dev"}, {"parameters", parameters}}}}});
}

json answer_with(const json& request, FakeClasses& classes) {
  Result<json> result = validate(request.dump(), &classes);
  EXPECT_TRUE(result.is_ok()) << result.status().message();
  return result.is_ok() ? *result : json{};
}

// The admin's class sets kill and ceilings: a claim (asking for 8Gi and 30 cores) past any of
// them is refused at apply time, naming field, value and bound.
TEST(ClaimValidation, AClaimPastItsDeviceClassesBoundsIsRefused) {
  FakeClasses classes;
  classes.configs["vgpu.tessera.dev"] = class_config(
      {{"enforcement", "kill"},
       {"tenantBounds",
        {{"maxPriority", "normal"}, {"maxComputeLimit", 50}, {"maxMemoryLimit", "16Gi"}}}});
  json request = golden("claim_vgpu_config.json");  // compute.priority high, burst 20
  json& parameters = claim_parameters(request);
  const std::string at = "spec.devices.requests[0] (gpu): ";
  expect_invalid(answer_with(request, classes),
                 at + "compute.priority high is above tenantBounds.maxPriority normal of "
                      "DeviceClass vgpu.tessera.dev");
  EXPECT_EQ(classes.asked, std::vector<std::string>{"vgpu.tessera.dev"});
  parameters["compute"]["priority"] = "normal";
  parameters["enforcement"] = "report";
  expect_invalid(answer_with(request, classes),
                 at + "enforcement report is weaker than enforcement kill, the floor of "
                      "DeviceClass vgpu.tessera.dev (a claim may not weaken it)");
  parameters["enforcement"] = "kill";
  parameters["compute"].erase("burst");
  parameters["compute"]["limit"] = 80;
  expect_invalid(answer_with(request, classes),
                 at + "compute.limit 80 is above tenantBounds.maxComputeLimit 50 of DeviceClass "
                      "vgpu.tessera.dev");
  parameters["compute"]["limit"] = 50;
  parameters["memory"] = {{"limit", "32Gi"}};
  expect_invalid(answer_with(request, classes),
                 at + "memory.limit 32Gi is above tenantBounds.maxMemoryLimit 16Gi of DeviceClass "
                      "vgpu.tessera.dev");
  // At the bounds, or tighter: allowed.
  parameters["memory"] = {{"limit", "16Gi"}};
  expect_allowed(answer_with(request, classes));
  parameters["compute"]["priority"] = "low";
  parameters.erase("enforcement");
  expect_allowed(answer_with(request, classes));
  // The same class without bounds lets the tenant choose.
  classes.configs["vgpu.tessera.dev"] = class_config({{"enforcement", "report"}});
  parameters["compute"]["priority"] = "high";
  parameters["enforcement"] = "report";
  parameters["memory"] = {{"limit", "64Gi"}};
  expect_allowed(answer_with(request, classes));
}

// A template's requests each name their class; a firstAvailable alternative is checked against
// its own.
TEST(ClaimValidation, EachRequestIsHeldToTheClassItNames) {
  FakeClasses classes;
  classes.configs["vgpu.tessera.dev"] = class_config({{"enforcement", "kill"}});
  classes.configs["vgpu-open.tessera.dev"] = class_config(json::object());
  json request = golden("claim_template_vgpu_config.json");
  json& devices = request["request"]["object"]["spec"]["spec"]["devices"];
  for (json& config : devices["config"])
    if (config["opaque"]["driver"] == "vgpu.tessera.dev")
      config["opaque"]["parameters"]["enforcement"] = "report";
  expect_invalid(answer_with(request, classes),
                 "spec.spec.devices.requests[0] (gpu): enforcement report is weaker than "
                 "enforcement kill, the floor of DeviceClass vgpu.tessera.dev (a claim may not "
                 "weaken it)");

  json alternatives = golden("claim_vgpu_config.json");
  json& requests = alternatives["request"]["object"]["spec"]["devices"]["requests"];
  json exactly = requests[0]["exactly"];
  json open = exactly;
  open["deviceClassName"] = "vgpu-open.tessera.dev";
  open["name"] = "open";
  exactly["name"] = "guarded";
  requests[0] = {{"name", "gpu"}, {"firstAvailable", json::array({open, exactly})}};
  claim_parameters(alternatives)["enforcement"] = "report";
  classes.asked.clear();
  expect_invalid(answer_with(alternatives, classes),
                 "spec.devices.requests[0] (gpu/guarded): enforcement report is weaker than "
                 "enforcement kill, the floor of DeviceClass vgpu.tessera.dev (a claim may not "
                 "weaken it)");
  EXPECT_EQ(classes.asked, (std::vector<std::string>{"vgpu-open.tessera.dev", "vgpu.tessera.dev"}));
}

TEST(ClaimValidation, AClassThatCannotBeReadRefusesAMissingOneBoundsNothing) {
  FakeClasses classes;
  json request = golden("claim_vgpu_config.json");
  // No such class yet: the claim cannot be allocated until it exists, and the agent holds its
  // bounds then.
  expect_allowed(answer_with(request, classes));
  classes.failure = unavailable(
      "GET /apis/resource.k8s.io/v1/deviceclasses/vgpu.tessera.dev: "
      "Couldn't connect to server");
  const json refused = answer_with(request, classes);
  EXPECT_EQ(refused["response"]["allowed"], false);
  EXPECT_EQ(refused["response"]["status"]["code"], 500);
  EXPECT_EQ(refused["response"]["status"]["message"],
            "cannot read DeviceClass vgpu.tessera.dev to check the claim against its bounds: GET "
            "/apis/resource.k8s.io/v1/deviceclasses/vgpu.tessera.dev: Couldn't connect to server");
  // A claim without a Tessera config sets nothing to bound: no class is read.
  classes.asked.clear();
  request["request"]["object"]["spec"]["devices"].erase("config");
  expect_allowed(answer_with(request, classes));
  EXPECT_TRUE(classes.asked.empty());
}

TEST(ClaimValidation, ATenantCannotSetBounds) {
  json request = golden("claim_vgpu_config.json");
  claim_parameters(request)["tenantBounds"] = {{"maxComputeLimit", 100}};
  expect_invalid(answer(request),
                 "spec.devices.config[0].opaque.parameters.tenantBounds: only a DeviceClass's "
                 "config may set bounds; a claim's config may not");
}

}  // namespace
}  // namespace tessera::webhook
