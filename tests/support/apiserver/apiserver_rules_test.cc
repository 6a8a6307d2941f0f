// The ported kube-apiserver ResourceSlice rules (apiserver_rules.h): one test per rule, each
// asserting the message the API server returns (field path + field.Error body, aggregated as
// NewInvalid prints it).
#include "apiserver/apiserver_rules.h"

#include <gtest/gtest.h>

#include "apiserver/fake_api_server.h"
#include "tessera/kube/http_kube_client.h"

namespace tessera::agent::testing::apiserver {
namespace {

using nlohmann::json;

const std::string kH200Bytes = std::to_string(143771ull << 20);  // "150754820096"

const std::string kSubdomainMessage =
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const std::string kLabelMessage =
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const std::string kCIdentifierMessage =
    "a valid C identifier must start with alphabetic character or '_', followed by a string of "
    "alphanumeric characters or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName', regex used for "
    "validation is '[A-Za-z_][A-Za-z0-9_]*')";
const std::string kOneOf =
    "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required";

json memory_capacity(const std::string& total, const std::string& step) {
  return {
      {"value", total},
      {"requestPolicy",
       {{"default", total}, {"validRange", {{"min", "256Mi"}, {"max", total}, {"step", step}}}}}};
}

json cores_capacity() {
  return {{"value", "100"},
          {"requestPolicy",
           {{"default", "100"}, {"validRange", {{"min", "1"}, {"max", "100"}, {"step", "1"}}}}}};
}

json valid_device(const std::string& name = "gpu-0") {
  return {
      {"name", name},
      {"attributes",
       {{"uuid", {{"string", "GPU-00000000-aaaa-bbbb-cccc-dddddddddddd"}}},
        {"cudaComputeCapability", {{"version", "9.0.0"}}},
        {"resource.kubernetes.io/pciBusID", {{"string", "0000:10:00.0"}}}}},
      {"capacity", {{"memory", memory_capacity(kH200Bytes, "1Mi")}, {"cores", cores_capacity()}}},
      {"allowMultipleAllocations", true}};
}

json valid_slice() {
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceSlice"},
          {"metadata", {{"name", "node-a-vgpu.tessera.dev-0"}}},
          {"spec",
           {{"driver", "vgpu.tessera.dev"},
            {"nodeName", "node-a"},
            {"pool", {{"name", "node-a"}, {"generation", 1}, {"resourceSliceCount", 1}}},
            {"devices", json::array({valid_device()})}}}};
}

std::string errors_of(const json& slice) {
  return aggregate(validate_resource_slice(slice));
}

// The path of the first device's capacity `name`'s request policy.
json& policy(json& slice, const std::string& name) {
  return slice["spec"]["devices"][0]["capacity"][name]["requestPolicy"];
}

TEST(ApiServerRules, AValidSliceHasNoErrors) {
  EXPECT_EQ(errors_of(valid_slice()), "");
  EXPECT_EQ(check_resource_slice_write(valid_slice(), nullptr), std::nullopt);
}

TEST(ApiServerRules, QuantitiesPrintInTheirCanonicalForm) {
  EXPECT_EQ(parse_quantity("256Mi")->str(), "256Mi");
  EXPECT_EQ(parse_quantity("268435456")->str(), "268435456");
  EXPECT_EQ(parse_quantity(kH200Bytes)->str(), "150754820096");
  EXPECT_EQ(parse_quantity("1000")->str(), "1k");
  EXPECT_EQ(parse_quantity("100")->str(), "100");
  EXPECT_EQ(parse_quantity("1536Mi")->str(), "1536Mi");
  EXPECT_EQ(parse_quantity("512Ki")->str(), "512Ki");
  EXPECT_EQ(parse_quantity(json(64))->str(), "64");
  EXPECT_EQ(parse_quantity("1e3")->str(), "1e3");
  EXPECT_EQ(parse_quantity("-1")->str(), "-1");
  EXPECT_EQ(parse_quantity("1.5"), std::nullopt);
  EXPECT_EQ(parse_quantity("12 Gi"), std::nullopt);
}

TEST(ApiServerRules, MetadataNameIsRequiredAndADnsSubdomain) {
  json slice = valid_slice();
  slice["metadata"]["name"] = "";
  EXPECT_EQ(errors_of(slice), "metadata.name: Required value: name or generateName is required");
  slice["metadata"]["name"] = "Node_A";
  EXPECT_EQ(errors_of(slice), "metadata.name: Invalid value: \"Node_A\": " + kSubdomainMessage);
}

TEST(ApiServerRules, DriverNameIsACsiDriverName) {
  json slice = valid_slice();
  slice["spec"]["driver"] = "Vgpu_Tessera";
  EXPECT_EQ(errors_of(slice), "spec.driver: Invalid value: \"Vgpu_Tessera\": " + kSubdomainMessage);
  slice["spec"]["driver"] = std::string(64, 'a');
  EXPECT_EQ(errors_of(slice), "spec.driver: Too long: may not be more than 63 bytes");
  slice["spec"]["driver"] = "";
  EXPECT_EQ(errors_of(slice), "[spec.driver: Required value, spec.driver: Invalid value: \"\": " +
                                  kSubdomainMessage + "]");
}

TEST(ApiServerRules, PoolNameGenerationAndSliceCount) {
  json slice = valid_slice();
  slice["spec"]["pool"]["name"] = "";
  EXPECT_EQ(errors_of(slice), "spec.pool.name: Required value");
  slice["spec"]["pool"]["name"] = "node-a/Bad";
  EXPECT_EQ(errors_of(slice), "spec.pool.name: Invalid value: \"Bad\": " + kSubdomainMessage);
  slice["spec"]["pool"]["name"] = std::string(254, 'a');
  EXPECT_EQ(errors_of(slice),
            "[spec.pool.name: Too long: may not be more than 253 bytes, spec.pool.name: Invalid "
            "value: \"" +
                std::string(254, 'a') + "\": must be no more than 253 characters]");
  slice = valid_slice();
  slice["spec"]["pool"]["generation"] = -1;
  EXPECT_EQ(errors_of(slice),
            "spec.pool.generation: Invalid value: -1: must be greater than or equal to zero");
  slice = valid_slice();
  slice["spec"]["pool"]["resourceSliceCount"] = 0;
  EXPECT_EQ(errors_of(slice),
            "spec.pool.resourceSliceCount: Invalid value: 0: must be greater than zero");
}

TEST(ApiServerRules, NodeNameIsADnsSubdomainAndExactlyOneNodeSelectionIsSet) {
  json slice = valid_slice();
  slice["spec"]["nodeName"] = "Node_A";
  EXPECT_EQ(errors_of(slice), "spec.nodeName: Invalid value: \"Node_A\": " + kSubdomainMessage);
  slice["spec"]["nodeName"] = "";
  EXPECT_EQ(errors_of(slice),
            "[spec.nodeName: Invalid value: \"\": must be either unset or set to a non-empty "
            "string, spec: Required value: " +
                kOneOf + "]");
  slice["spec"].erase("nodeName");
  EXPECT_EQ(errors_of(slice), "spec: Required value: " + kOneOf);
  slice["spec"]["nodeName"] = "node-a";
  slice["spec"]["allNodes"] = true;
  EXPECT_EQ(errors_of(slice), "spec: Invalid value: \"{`nodeName`, `allNodes`}\": " + kOneOf +
                                  ", but multiple fields are set");
  slice["spec"]["allNodes"] = false;
  EXPECT_EQ(errors_of(slice),
            "spec.allNodes: Invalid value: false: must be either unset or set to true");
}

TEST(ApiServerRules, DeviceNamesAreUniqueDnsLabels) {
  json slice = valid_slice();
  slice["spec"]["devices"][0]["name"] = "GPU-0";
  EXPECT_EQ(errors_of(slice), "spec.devices[0].name: Invalid value: \"GPU-0\": " + kLabelMessage);
  slice["spec"]["devices"][0]["name"] = "gpu.0";
  EXPECT_EQ(errors_of(slice),
            "spec.devices[0].name: Invalid value: \"gpu.0\": must not contain dots");
  slice["spec"]["devices"][0]["name"] = std::string(64, 'g');
  EXPECT_EQ(errors_of(slice), "spec.devices[0].name: Invalid value: \"" + std::string(64, 'g') +
                                  "\": must be no more than 63 characters");
  slice = valid_slice();
  slice["spec"]["devices"].push_back(valid_device("gpu-0"));
  EXPECT_EQ(errors_of(slice), "spec.devices[1]: Duplicate value: \"gpu-0\"");
}

TEST(ApiServerRules, AtMost128DevicesPerSliceAnd64WithTaints) {
  json slice = valid_slice();
  slice["spec"]["devices"] = json::array();
  for (int i = 0; i < 128; ++i)
    slice["spec"]["devices"].push_back(valid_device("gpu-" + std::to_string(i)));
  EXPECT_EQ(errors_of(slice), "");
  slice["spec"]["devices"].push_back(valid_device("gpu-128"));
  EXPECT_EQ(errors_of(slice), "spec.devices: Too many: 129: must have at most 128 items");
  while (slice["spec"]["devices"].size() > 64) slice["spec"]["devices"].erase(64);
  ASSERT_EQ(slice["spec"]["devices"].size(), 64u);
  slice["spec"]["devices"][0]["taints"] =
      json::array({{{"key", "vgpu.tessera.dev/unhealthy"}, {"effect", "NoSchedule"}}});
  EXPECT_EQ(errors_of(slice), "");
  slice["spec"]["devices"].push_back(valid_device("gpu-64"));
  EXPECT_EQ(errors_of(slice), "spec.devices: Too many: 65: must have at most 64 items");
}

// kube-apiserver counts a device as tainted by len(taints) > 0: an empty list keeps 128.
TEST(ApiServerRules, AnEmptyTaintListKeepsThe128Limit) {
  json slice = valid_slice();
  slice["spec"]["devices"] = json::array();
  for (int i = 0; i < 128; ++i) {
    slice["spec"]["devices"].push_back(valid_device("gpu-" + std::to_string(i)));
    slice["spec"]["devices"].back()["taints"] = json::array();
  }
  EXPECT_EQ(errors_of(slice), "");
}

// The limit is the slice's: one tainted device anywhere in it lowers it for all (here the last).
TEST(ApiServerRules, OneTaintedDeviceAnywhereLowersTheLimit) {
  json slice = valid_slice();
  slice["spec"]["devices"] = json::array();
  for (int i = 0; i < 65; ++i)
    slice["spec"]["devices"].push_back(valid_device("gpu-" + std::to_string(i)));
  EXPECT_EQ(errors_of(slice), "");
  slice["spec"]["devices"][64]["taints"] =
      json::array({{{"key", "vgpu.tessera.dev/unhealthy"}, {"effect", "NoSchedule"}}});
  EXPECT_EQ(errors_of(slice), "spec.devices: Too many: 65: must have at most 64 items");
}

// consumesCounters is the other "advanced feature" that lowers the limit to 64.
TEST(ApiServerRules, ConsumesCountersAlsoLowerTheLimitTo64) {
  json slice = valid_slice();
  slice["spec"]["devices"] = json::array();
  for (int i = 0; i < 65; ++i)
    slice["spec"]["devices"].push_back(valid_device("gpu-" + std::to_string(i)));
  slice["spec"]["devices"][0]["consumesCounters"] = json::array(
      {{{"counterSet", "gpu-0-counters"}, {"counters", {{"memory", {{"value", "1"}}}}}}});
  EXPECT_EQ(errors_of(slice), "spec.devices: Too many: 65: must have at most 64 items");
}

// ---- Partitionable devices (validateCounterSet, validateDeviceCounterConsumption): the 1.35+
// shape, counter sets in a slice of their own.

json counters(int n, const std::string& prefix = "memory-slice-") {
  json map = json::object();
  for (int i = 0; i < n; ++i) map[prefix + std::to_string(i)] = {{"value", "1"}};
  return map;
}

json counter_slice() {
  json slice = valid_slice();
  slice["metadata"]["name"] = "node-a-gpu.nvidia.com-counters";
  slice["spec"]["driver"] = "gpu.nvidia.com";
  slice["spec"].erase("devices");
  slice["spec"]["sharedCounters"] =
      json::array({{{"name", "gpu-0-counter-set"}, {"counters", counters(8)}}});
  return slice;
}

json consuming_device(const std::string& name, const json& consumption) {
  json device = valid_device(name);
  device.erase("allowMultipleAllocations");
  device["capacity"] = {{"memory", {{"value", "71168Mi"}}}};
  device["consumesCounters"] = consumption;
  return device;
}

TEST(ApiServerRules, ACounterSliceAndConsumingDevicesAreValid) {
  ASSERT_TRUE(counter_slice()["spec"]["sharedCounters"].is_array());
  ASSERT_EQ(counter_slice()["spec"]["sharedCounters"][0]["counters"].size(), 8u);
  EXPECT_EQ(errors_of(counter_slice()), "");
  json slice = valid_slice();
  slice["spec"]["devices"] = json::array({consuming_device(
      "gpu-0-mig-3g71gb-9-0",
      json::array({{{"counterSet", "gpu-0-counter-set"}, {"counters", counters(4)}}}))});
  EXPECT_EQ(errors_of(slice), "");
}

// 1.35 on: a slice holds devices or counter sets, not both (the 1.34 shape is refused).
TEST(ApiServerRules, SharedCountersAndDevicesNotInOneSlice) {
  json slice = counter_slice();
  slice["spec"]["devices"] = json::array({valid_device()});
  ASSERT_TRUE(slice["spec"]["sharedCounters"].is_array());
  EXPECT_EQ(errors_of(slice),
            "spec: Invalid value: \"\": only one of `sharedCounters` or `devices` is allowed");
}

TEST(ApiServerRules, AtMost8CounterSetsOf32CountersWithUniqueDnsLabelNames) {
  json slice = counter_slice();
  json sets = json::array();
  for (int i = 0; i < 9; ++i)
    sets.push_back(
        {{"name", "gpu-" + std::to_string(i) + "-counter-set"}, {"counters", counters(1)}});
  slice["spec"]["sharedCounters"] = sets;
  EXPECT_EQ(errors_of(slice), "spec.sharedCounters: Too many: 9: must have at most 8 items");
  sets.erase(sets.end() - 1);
  slice["spec"]["sharedCounters"] = sets;
  EXPECT_EQ(errors_of(slice), "");

  slice = counter_slice();
  slice["spec"]["sharedCounters"][0]["counters"] = counters(33);
  EXPECT_EQ(errors_of(slice),
            "spec.sharedCounters[0].counters: Too many: 33: must have at most 32 items");
  slice["spec"]["sharedCounters"][0]["counters"] = counters(32);
  EXPECT_EQ(errors_of(slice), "");

  slice = counter_slice();
  slice["spec"]["sharedCounters"].push_back(slice["spec"]["sharedCounters"][0]);
  EXPECT_EQ(errors_of(slice), "spec.sharedCounters[1]: Duplicate value: \"gpu-0-counter-set\"");

  // Names and counter names are DNS labels; a counter name's error is at the map's path.
  slice = counter_slice();
  slice["spec"]["sharedCounters"][0]["name"] = "GPU_0";
  slice["spec"]["sharedCounters"][0]["counters"] = {{"memorySlice0", {{"value", "1"}}}};
  EXPECT_EQ(errors_of(slice),
            "[spec.sharedCounters[0].name: Invalid value: \"GPU_0\": " + kLabelMessage +
                ", spec.sharedCounters[0].counters: Invalid value: \"memorySlice0\": " +
                kLabelMessage + "]");

  slice = counter_slice();
  slice["spec"]["sharedCounters"] = json::array({{{"name", ""}, {"counters", json::object()}}});
  EXPECT_EQ(errors_of(slice),
            "[spec.sharedCounters[0].name: Required value, "
            "spec.sharedCounters[0].counters: Required value]");
}

TEST(ApiServerRules, AtMost2CounterConsumptionsOf32CountersPerDevice) {
  json slice = valid_slice();
  const auto consumption = [](const std::string& set, const json& c) {
    return json{{"counterSet", set}, {"counters", c}};
  };
  slice["spec"]["devices"] = json::array({consuming_device(
      "gpu-0", json::array({consumption("a", counters(1)), consumption("b", counters(1)),
                            consumption("c", counters(1))}))});
  EXPECT_EQ(errors_of(slice),
            "spec.devices[0].consumesCounters: Too many: 3: must have at most 2 items");
  slice["spec"]["devices"][0]["consumesCounters"] = json::array({consumption("a", counters(33))});
  EXPECT_EQ(errors_of(slice),
            "spec.devices[0].consumesCounters[0].counters: Too many: 33: must have at most 32 "
            "items");
  slice["spec"]["devices"][0]["consumesCounters"] =
      json::array({consumption("a", counters(1)), consumption("a", counters(2))});
  EXPECT_EQ(errors_of(slice), "spec.devices[0].consumesCounters[1]: Duplicate value: \"a\"");
  slice["spec"]["devices"][0]["consumesCounters"] =
      json::array({{{"counterSet", ""}, {"counters", json::object()}}});
  EXPECT_EQ(errors_of(slice),
            "[spec.devices[0].consumesCounters[0].counterSet: Required value, "
            "spec.devices[0].consumesCounters[0].counters: Required value]");
  slice["spec"]["devices"][0]["consumesCounters"] =
      json::array({consumption("gpu-0-counter-set", {{"memory_slice", {{"value", "1"}}}})});
  EXPECT_EQ(errors_of(slice),
            "spec.devices[0].consumesCounters[0].counters: Invalid value: \"memory_slice\": " +
                kLabelMessage);
  // Which set it names and whether that set exists is the scheduler's business (an invalid
  // pool), not the API server's.
  slice["spec"]["devices"][0]["consumesCounters"] =
      json::array({consumption("no-such-set", counters(1))});
  EXPECT_EQ(errors_of(slice), "");
}

// The 64-device limit once a device consumes counters; a counter slice has no device limit
// beyond the 8 sets.
TEST(ApiServerRules, SixtyFourMigDevicesPerSlice) {
  json slice = valid_slice();
  slice["spec"]["devices"] = json::array();
  for (int i = 0; i < 64; ++i)
    slice["spec"]["devices"].push_back(consuming_device(
        "mig-" + std::to_string(i),
        json::array({{{"counterSet", "gpu-0-counter-set"}, {"counters", counters(1)}}})));
  EXPECT_EQ(errors_of(slice), "");
  slice["spec"]["devices"].push_back(consuming_device("mig-64", json::array()));
  EXPECT_EQ(errors_of(slice), "spec.devices: Too many: 65: must have at most 64 items");
}

// A counter whose value is no quantity is a 400, as json decoding refuses it.
TEST(ApiServerRules, UndecodableCountersAreABadRequest) {
  json slice = counter_slice();
  slice["spec"]["sharedCounters"][0]["counters"]["memory-slice-0"]["value"] = "one";
  auto refusal = check_resource_slice_write(slice, nullptr);
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->code, 400);
  json devices = valid_slice();
  devices["spec"]["devices"] = json::array({consuming_device(
      "gpu-0",
      json::array({{{"counterSet", "s"}, {"counters", {{"memory", {{"value", "12 Gi"}}}}}}}))});
  refusal = check_resource_slice_write(devices, nullptr);
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->code, 400);
}

// SetDefaults_DeviceTaint: a taint without timeAdded gets the time of the write, whole seconds.
TEST(ApiServerRules, ATaintWithoutTimeAddedGetsTheServersTime) {
  EXPECT_EQ(rfc3339_utc(1764590400), "2025-12-01T12:00:00Z");
  json slice = valid_slice();
  slice["spec"]["devices"][0]["taints"] = json::array(
      {{{"key", "vgpu.tessera.dev/unhealthy"}, {"value", "xid-79"}, {"effect", "NoSchedule"}},
       {{"key", "vgpu.tessera.dev/other"},
        {"effect", "None"},
        {"timeAdded", "2025-11-30T08:00:00Z"}}});
  default_resource_slice(slice, 1764590400);
  EXPECT_EQ(slice["spec"]["devices"][0]["taints"][0]["timeAdded"], "2025-12-01T12:00:00Z");
  EXPECT_EQ(slice["spec"]["devices"][0]["taints"][1]["timeAdded"], "2025-11-30T08:00:00Z");
  EXPECT_EQ(check_resource_slice_write(slice, nullptr), std::nullopt);
}

// dropDisabledDRADeviceTaintsFields: without the gate the taints go, unless the stored object
// already uses them (then an update may keep or change them).
TEST(ApiServerRules, WithoutTheTaintsGateTaintsAreDroppedUnlessAlreadyStored) {
  json tainted = valid_slice();
  tainted["spec"]["devices"][0]["taints"] =
      json::array({{{"key", "vgpu.tessera.dev/unhealthy"}, {"effect", "NoSchedule"}}});
  json created = tainted;
  drop_disabled_device_taints(created, nullptr);
  EXPECT_FALSE(created["spec"]["devices"][0].contains("taints"));
  EXPECT_EQ(created, valid_slice());
  json updated = tainted;
  drop_disabled_device_taints(updated, &created);
  EXPECT_FALSE(updated["spec"]["devices"][0].contains("taints"));
  updated = tainted;
  drop_disabled_device_taints(updated, &tainted);
  EXPECT_EQ(updated, tainted);
}

// metav1.Time decodes RFC 3339 only: anything else fails the decoding (400), not validation.
TEST(ApiServerRules, ATimeAddedThatIsNoTimeIsABadRequest) {
  json slice = valid_slice();
  slice["spec"]["devices"][0]["taints"] = json::array(
      {{{"key", "vgpu.tessera.dev/unhealthy"}, {"effect", "NoSchedule"}, {"timeAdded", "today"}}});
  const auto refusal = check_resource_slice_write(slice, nullptr);
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(refusal->code, 400);
  EXPECT_EQ(refusal->status["reason"], "BadRequest");
}

// Taints the update leaves as they were are not validated again (ratcheting); changed ones are.
TEST(ApiServerRules, UnchangedTaintsAreNotValidatedAgain) {
  json old = valid_slice();
  old["spec"]["devices"][0]["taints"] =
      json::array({{{"key", "vgpu.tessera.dev/unhealthy"}, {"effect", "PreferNoSchedule"}}});
  EXPECT_EQ(aggregate(validate_resource_slice_update(old, old)), "");
  json slice = old;
  slice["spec"]["devices"][0]["taints"][0]["value"] = "xid-79";
  EXPECT_EQ(aggregate(validate_resource_slice_update(slice, old)),
            "spec.devices[0].taints[0].effect: Unsupported value: \"PreferNoSchedule\": "
            "supported values: \"NoExecute\", \"NoSchedule\", \"None\"");
}

TEST(ApiServerRules, AtMost32AttributesAndCapacitiesPerDevice) {
  json slice = valid_slice();
  json& attributes = slice["spec"]["devices"][0]["attributes"];
  attributes = json::object();
  for (int i = 0; i < 30; ++i)
    attributes[std::string(1, 'a').append(std::to_string(i))] = {{"int", i}};
  EXPECT_EQ(errors_of(slice), "");  // 30 + 2 capacities
  attributes["a30"] = {{"bool", true}};
  EXPECT_EQ(errors_of(slice),
            "spec.devices[0]: Invalid value: 33: the total number of attributes and capacities "
            "must not exceed 32");
}

TEST(ApiServerRules, AttributeAndCapacityNamesAreQualifiedCIdentifiers) {
  auto with_attribute = [](const std::string& name) {
    json slice = valid_slice();
    slice["spec"]["devices"][0]["attributes"][name] = {{"int", 1}};
    return errors_of(slice);
  };
  EXPECT_EQ(with_attribute("bad-name"),
            "spec.devices[0].attributes: Invalid value: \"bad-name\": " + kCIdentifierMessage);
  EXPECT_EQ(with_attribute(std::string(33, 'x')),
            "spec.devices[0].attributes: Too long: may not be more than 32 bytes");
  EXPECT_EQ(with_attribute("/x"),
            "spec.devices[0].attributes: Invalid value: \"\": the domain must not be empty");
  EXPECT_EQ(with_attribute("example.com/"),
            "spec.devices[0].attributes: Invalid value: \"\": the name must not be empty");
  EXPECT_EQ(with_attribute("a/b/c"),
            "spec.devices[0].attributes: Invalid value: \"a/b/c\": must not contain more than one "
            "slash");
  EXPECT_EQ(with_attribute("Example_com/x"),
            "spec.devices[0].attributes: Invalid value: \"Example_com\": " + kSubdomainMessage);
  EXPECT_EQ(with_attribute("vgpu.tessera.dev/ok_name"), "");
  json slice = valid_slice();
  slice["spec"]["devices"][0]["capacity"]["gpu-memory"] = {{"value", "1Gi"}};
  EXPECT_EQ(errors_of(slice),
            "spec.devices[0].capacity: Invalid value: \"gpu-memory\": " + kCIdentifierMessage);
}

TEST(ApiServerRules, LongKeysAreShortenedInTheMiddleOfTheirPath) {
  json slice = valid_slice();
  const std::string name = std::string(63, 'd') + "/" + std::string(40, 'x');
  slice["spec"]["devices"][0]["attributes"][name] = {{"string", std::string(65, 's')}};
  EXPECT_EQ(errors_of(slice),
            "[spec.devices[0].attributes: Too long: may not be more than 32 bytes, "
            "spec.devices[0].attributes[ddddddddddddddddddddddddddddddddddddddddddddddd...ddddd/"
            "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx].string: Too long: may not be more than 64 "
            "bytes]");
}

TEST(ApiServerRules, AttributeValuesHaveOneKindAndTheirLimits) {
  json slice = valid_slice();
  json& attributes = slice["spec"]["devices"][0]["attributes"];
  attributes["uuid"] = {{"string", std::string(65, 'u')}};
  EXPECT_EQ(errors_of(slice),
            "spec.devices[0].attributes[uuid].string: Too long: may not be more than 64 bytes");
  attributes["uuid"] = {{"string", std::string(64, 'u')}};
  EXPECT_EQ(errors_of(slice), "");
  attributes["cudaComputeCapability"] = {{"version", "9.0"}};
  EXPECT_EQ(errors_of(slice),
            "spec.devices[0].attributes[cudaComputeCapability].version: Invalid value: \"9.0\": "
            "must be a string compatible with semver.org spec 2.0.0");
  attributes["cudaComputeCapability"] = {{"version", "580.159.04"}};
  EXPECT_EQ(errors_of(slice),
            "spec.devices[0].attributes[cudaComputeCapability].version: Invalid value: "
            "\"580.159.04\": must be a string compatible with semver.org spec 2.0.0");
  attributes["cudaComputeCapability"] = {{"version", "1.2.3-rc.1+build.5"}};
  EXPECT_EQ(errors_of(slice), "");
  attributes["uuid"] = json::object();
  EXPECT_EQ(errors_of(slice),
            "spec.devices[0].attributes[uuid]: Invalid value: \"\": exactly one value must be "
            "specified");
  // Two kinds: Go prints the struct with %#v (pointer addresses), so only the frame is fixed.
  attributes["uuid"] = {{"string", "x"}, {"int", 1}};
  const std::string two = errors_of(slice);
  EXPECT_EQ(two.rfind("spec.devices[0].attributes[uuid]: Invalid value: ", 0), 0u) << two;
  EXPECT_TRUE(two.ends_with(": exactly one value must be specified")) << two;
}

// The rule the agent's first slices broke on every real GPU.
TEST(ApiServerRules, ValidRangeDefaultAndMaxAreWholeStepsFromMin) {
  json slice = valid_slice();
  slice["spec"]["devices"][0]["capacity"]["memory"] = memory_capacity(kH200Bytes, "256Mi");
  EXPECT_EQ(errors_of(slice),
            "spec.devices[0].capacity[memory].requestPolicy.validRange.step: Invalid value: "
            "\"150754820096\": value is not a multiple of a given step (256Mi) from (256Mi)");
  const auto refusal = check_resource_slice_write(slice, nullptr);
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->code, 422);
  EXPECT_EQ(refusal->status["message"],
            "ResourceSlice.resource.k8s.io \"node-a-vgpu.tessera.dev-0\" is invalid: "
            "spec.devices[0].capacity[memory].requestPolicy.validRange.step: Invalid value: "
            "\"150754820096\": value is not a multiple of a given step (256Mi) from (256Mi)");
  EXPECT_EQ(refusal->status["reason"], "Invalid");
  EXPECT_EQ(
      refusal->status["details"],
      json({{"name", "node-a-vgpu.tessera.dev-0"},
            {"group", "resource.k8s.io"},
            {"kind", "ResourceSlice"},
            {"causes",
             {{{"reason", "FieldValueInvalid"},
               {"message",
                "Invalid value: \"150754820096\": value is not a multiple of a given step "
                "(256Mi) from (256Mi)"},
               {"field", "spec.devices[0].capacity[memory].requestPolicy.validRange.step"}},
              {{"reason", "FieldValueInvalid"},
               {"message",
                "Invalid value: \"150754820096\": value is not a multiple of a given step "
                "(256Mi) from (256Mi)"},
               {"field", "spec.devices[0].capacity[memory].requestPolicy.validRange.step"}}}}}));
  // Only the max off the grid (default on it): the same message, from the max.
  policy(slice, "memory")["default"] = "1Gi";
  EXPECT_EQ(errors_of(slice),
            "spec.devices[0].capacity[memory].requestPolicy.validRange.step: Invalid value: "
            "\"150754820096\": value is not a multiple of a given step (256Mi) from (256Mi)");
  policy(slice, "memory")["validRange"]["max"] = "140Gi";
  EXPECT_EQ(errors_of(slice), "");
}

TEST(ApiServerRules, ValidRangeBoundsAgainstEachOtherAndTheCapacity) {
  const std::string prefix = "spec.devices[0].capacity[cores].requestPolicy.validRange.";
  auto with_range = [](const std::string& default_value, const json& range) {
    json slice = valid_slice();
    policy(slice, "cores") = {{"default", default_value}, {"validRange", range}};
    return errors_of(slice);
  };
  EXPECT_EQ(with_range("100", {{"max", "100"}}),
            prefix + "min: Required value: required when validRange is defined");
  EXPECT_EQ(with_range("101", {{"min", "101"}}),
            prefix + "min: Invalid value: \"101\": min is larger than capacity value: 100");
  EXPECT_EQ(with_range("1", {{"min", "2"}, {"max", "100"}, {"step", "1"}}),
            prefix + "default: Invalid value: \"1\": default is less than min: 2");
  EXPECT_EQ(with_range("100", {{"min", "1"}, {"max", "50"}, {"step", "1"}}),
            prefix + "default: Invalid value: \"100\": default is more than max: 50");
  EXPECT_EQ(with_range("100", {{"min", "1"}, {"max", "101"}, {"step", "1"}}),
            prefix + "max: Invalid value: \"101\": max is larger than capacity value: 100");
  EXPECT_EQ(with_range("60", {{"min", "60"}, {"max", "50"}}),
            "[" + prefix + "max: Invalid value: \"60\": min is larger than max: 50, " + prefix +
                "default: Invalid value: \"60\": default is more than max: 50]");
  EXPECT_EQ(with_range("100", {{"min", "1"}, {"max", "100"}, {"step", "0"}}),
            prefix + "step: Invalid value: \"0\": must be greater than zero");
  EXPECT_EQ(with_range("100", {{"min", "100"}, {"max", "100"}, {"step", "1"}}),
            prefix + "step: Invalid value: \"1\": one step 101 is larger than capacity value: 100");
  EXPECT_EQ(with_range("0", {{"min", "-1"}, {"max", "100"}, {"step", "1"}}),
            prefix + "min: Invalid value: \"-1\": must be greater than or equal to 0");
  EXPECT_EQ(with_range("40", {{"min", "10"}, {"max", "100"}, {"step", "20"}}),
            "[" + prefix +
                "step: Invalid value: \"40\": value is not a multiple of a given step (20) from "
                "(10), " +
                prefix +
                "step: Invalid value: \"100\": value is not a multiple of a given step (20) from "
                "(10)]");
  json slice = valid_slice();
  policy(slice, "cores").erase("default");
  EXPECT_EQ(errors_of(slice),
            "spec.devices[0].capacity[cores].requestPolicy.default: Required "
            "value: required when validRange is defined");
}

TEST(ApiServerRules, ValidValuesAreAscendingUniqueAtMostTenAndHoldTheDefault) {
  const std::string path = "spec.devices[0].capacity[cores].requestPolicy.validValues";
  auto with_values = [](const std::string& default_value, const json& values) {
    json slice = valid_slice();
    policy(slice, "cores") = {{"default", default_value}, {"validValues", values}};
    return errors_of(slice);
  };
  EXPECT_EQ(with_values("50", {"25", "50", "100"}), "");
  EXPECT_EQ(with_values("50", {"50", "25", "100"}),
            path + "[1]: Invalid value: \"25\": values must be sorted in ascending order");
  EXPECT_EQ(with_values("50", {"25", "25", "50"}), path + "[1]: Duplicate value: \"25\"");
  EXPECT_EQ(with_values("40", {"25", "50"}),
            path +
                ": Invalid value: \"40\": default value is not valid according to the "
                "requestPolicy");
  EXPECT_EQ(with_values("50", {"50", "200"}),
            path + "[1]: Invalid value: \"200\": option is larger than capacity value: 100");
  json eleven = json::array();
  for (int i = 1; i <= 11; ++i) eleven.push_back(std::to_string(i));
  EXPECT_EQ(with_values("1", eleven),
            "[" + path + ": Too many: 11: must have at most 10 items, " + path +
                ": Invalid value: \"1\": default value is not valid according to the "
                "requestPolicy]");
  json slice = valid_slice();
  policy(slice, "cores") = {{"validValues", {"50", "100"}}};
  EXPECT_EQ(errors_of(slice),
            "spec.devices[0].capacity[cores].requestPolicy.default: Required "
            "value: required when validValues is defined");
}

TEST(ApiServerRules, OnePolicyKindAndOnlyOnMultiAllocatableDevices) {
  json slice = valid_slice();
  policy(slice, "cores")["validValues"] = {"50", "100"};
  EXPECT_EQ(errors_of(slice),
            "spec.devices[0].capacity[cores].requestPolicy: Forbidden: exactly one policy can be "
            "specified, cannot specify \"validValues\" and \"validRange\" at the same time");
  slice = valid_slice();
  slice["spec"]["devices"][0].erase("allowMultipleAllocations");
  EXPECT_EQ(errors_of(slice),
            "[spec.devices[0].capacity[cores].requestPolicy: Forbidden: allowMultipleAllocations "
            "must be true, spec.devices[0].capacity[memory].requestPolicy: Forbidden: "
            "allowMultipleAllocations must be true]");
}

TEST(ApiServerRules, TaintKeysValuesAndEffects) {
  const std::string path = "spec.devices[0].taints[0].";
  auto with_taint = [](const json& taint) {
    json slice = valid_slice();
    slice["spec"]["devices"][0]["taints"] = json::array({taint});
    return errors_of(slice);
  };
  EXPECT_EQ(
      with_taint(
          {{"key", "vgpu.tessera.dev/unhealthy"}, {"value", "xid-79"}, {"effect", "NoSchedule"}}),
      "");
  EXPECT_EQ(with_taint({{"key", "vgpu.tessera.dev/bad key"}, {"effect", "NoSchedule"}}),
            path +
                "key: Invalid value: \"vgpu.tessera.dev/bad key\": name part must consist of "
                "alphanumeric characters, '-', '_' or '.', and must start and end with an "
                "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used "
                "for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')");
  EXPECT_EQ(
      with_taint({{"key", "Bad_Domain/unhealthy"}, {"effect", "NoSchedule"}}),
      path + "key: Invalid value: \"Bad_Domain/unhealthy\": prefix part " + kSubdomainMessage);
  EXPECT_EQ(with_taint({{"effect", "NoSchedule"}}),
            "[" + path + "key: Invalid value: \"\": name part must be non-empty, " + path +
                "key: Invalid value: \"\": name part must consist of alphanumeric characters, "
                "'-', '_' or '.', and must start and end with an alphanumeric character (e.g. "
                "'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
                "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')]");
  EXPECT_EQ(
      with_taint(
          {{"key", "vgpu.tessera.dev/unhealthy"}, {"value", "xid 79"}, {"effect", "NoSchedule"}}),
      path +
          "value: Invalid value: \"xid 79\": a valid label must be an empty string or "
          "consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
          "an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex "
          "used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')");
  EXPECT_EQ(with_taint({{"key", "vgpu.tessera.dev/unhealthy"},
                        {"value", std::string(64, 'v')},
                        {"effect", "NoSchedule"}}),
            path + "value: Invalid value: \"" + std::string(64, 'v') +
                "\": must be no more than 63 bytes");
  EXPECT_EQ(with_taint({{"key", "vgpu.tessera.dev/unhealthy"}}), path + "effect: Required value");
  EXPECT_EQ(with_taint({{"key", "vgpu.tessera.dev/unhealthy"}, {"effect", "PreferNoSchedule"}}),
            path +
                "effect: Unsupported value: \"PreferNoSchedule\": supported values: "
                "\"NoExecute\", \"NoSchedule\", \"None\"");
  json slice = valid_slice();
  for (int i = 0; i < 17; ++i)
    slice["spec"]["devices"][0]["taints"].push_back(
        {{"key", "vgpu.tessera.dev/t" + std::to_string(i)}, {"effect", "None"}});
  EXPECT_EQ(errors_of(slice), "spec.devices[0].taints: Too many: 17: must have at most 16 items");
}

TEST(ApiServerRules, PerDeviceNodeFieldsNeedPerDeviceNodeSelection) {
  json slice = valid_slice();
  slice["spec"]["devices"][0]["nodeName"] = "node-a";
  EXPECT_EQ(errors_of(slice),
            "spec.devices[0]: Invalid value: null: `nodeName`, `nodeSelector` and `allNodes` can "
            "only be set if `perDeviceNodeSelection` is set to true in the ResourceSlice spec");
}

TEST(ApiServerRules, UpdatesKeepDriverPoolAndNodeName) {
  const json old = valid_slice();
  json slice = old;
  EXPECT_EQ(aggregate(validate_resource_slice_update(slice, old)), "");
  slice["spec"]["driver"] = "other.example.com";
  EXPECT_EQ(aggregate(validate_resource_slice_update(slice, old)),
            "spec.driver: Invalid value: \"other.example.com\": field is immutable");
  slice = old;
  slice["spec"]["pool"]["name"] = "node-b";
  slice["spec"]["nodeName"] = "node-b";
  EXPECT_EQ(aggregate(validate_resource_slice_update(slice, old)),
            "[spec.pool.name: Invalid value: \"node-b\": field is immutable, spec.nodeName: "
            "Invalid value: \"node-b\": field is immutable]");
  // A changed capacity is validated again; an unchanged one is not (ratcheting).
  slice = old;
  slice["spec"]["devices"][0]["capacity"]["memory"] = memory_capacity(kH200Bytes, "256Mi");
  EXPECT_NE(aggregate(validate_resource_slice_update(slice, old)), "");
  EXPECT_EQ(aggregate(validate_resource_slice_update(slice, slice)), "");
}

TEST(ApiServerRules, UndecodableQuantitiesAreABadRequest) {
  json slice = valid_slice();
  policy(slice, "memory")["validRange"]["step"] = "12 Gi";
  auto refusal = check_resource_slice_write(slice, nullptr);
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->code, 400);
  EXPECT_EQ(refusal->status["reason"], "BadRequest");
  EXPECT_EQ(refusal->status["message"],
            "ResourceSlice in version \"v1\" cannot be handled as a ResourceSlice: quantities "
            "must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'");
}

// Over HTTPS: the fake API server answers a refused create as kube-apiserver does, and the
// client's error carries the API's message.
TEST(ApiServerRules, TheFakeApiServerRefusesWithA422Status) {
  FakeApiServer server;
  kube::RetryPolicy retry;
  retry.attempts = 1;
  kube::HttpKubeClient client(server.connection(), retry);
  json slice = valid_slice();
  slice["spec"]["devices"][0]["name"] = "GPU-0";
  const Status refused =
      client.request("POST", "/apis/resource.k8s.io/v1/resourceslices", slice.dump()).status();
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);  // HTTP 422
  EXPECT_EQ(refused.message(),
            "POST /apis/resource.k8s.io/v1/resourceslices: HTTP 422: "
            "ResourceSlice.resource.k8s.io \"node-a-vgpu.tessera.dev-0\" is invalid: "
            "spec.devices[0].name: Invalid value: \"GPU-0\": " +
                kLabelMessage);
  // The Status body the fake server answered with (a refused request's Result keeps no body).
  const std::optional<Refusal> refusal = check_resource_slice_write(slice, nullptr);
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(refusal->code, 422);
  const json& body = refusal->status;
  EXPECT_EQ(body["kind"], "Status");
  EXPECT_EQ(body["code"], 422);
  EXPECT_EQ(body["details"]["causes"][0]["field"], "spec.devices[0].name");
  EXPECT_TRUE(server.stored_slices().empty());

  const Result<kube::ApiResponse> created =
      client.request("POST", "/apis/resource.k8s.io/v1/resourceslices", valid_slice().dump());
  ASSERT_TRUE(created.is_ok()) << created.status().message();
  EXPECT_EQ(created->status, 201);
  json update = json::parse(created->body);
  update["spec"]["driver"] = "other.example.com";
  const Status immutable =
      client
          .request("PUT", "/apis/resource.k8s.io/v1/resourceslices/node-a-vgpu.tessera.dev-0",
                   update.dump())
          .status();
  EXPECT_EQ(immutable.code(), StatusCode::kInvalidArgument);  // HTTP 422
  EXPECT_TRUE(immutable.message().ends_with(
      "spec.driver: Invalid value: \"other.example.com\": field is immutable"))
      << immutable.message();
}

}  // namespace
}  // namespace tessera::agent::testing::apiserver
