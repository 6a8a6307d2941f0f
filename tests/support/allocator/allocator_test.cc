// The scheduler's allocation rules, ported in allocator/allocator.h from kubernetes/kubernetes
// staging/src/k8s.io/dynamic-resource-allocation/structured/internal/incubating/
// allocator_incubating.go (03ab440c41a8098613d2149f10b367c7f7ce32c8) and consumable_capacity.go
// (0c8a1b073dc32ebfc32004fd7d77c8d7ba03df8c), checked against the cases of upstream's
// consumable_capacity_test.go and allocator_test.go that concern us.
#include "allocator/allocator.h"

#include <gtest/gtest.h>

namespace tessera::testing::allocator {
namespace {

using nlohmann::json;

constexpr char kDriver[] = "vgpu.tessera.dev";

// One GPU as the agent publishes it: memory in bytes, requests from 256Mi in 1Mi steps; cores
// 1..100.
json gpu(const std::string& name, const std::string& memory, bool shared = true) {
  return {
      {"name", name},
      {"attributes", {{"productName", {{"string", "NVIDIA H200"}}}, {"index", {{"int", 0}}}}},
      {"capacity",
       {{"memory",
         {{"value", memory},
          {"requestPolicy",
           {{"default", memory},
            {"validRange", {{"min", "256Mi"}, {"max", memory}, {"step", "1Mi"}}}}}}},
        {"cores",
         {{"value", "100"},
          {"requestPolicy",
           {{"default", "100"}, {"validRange", {{"min", "1"}, {"max", "100"}, {"step", "1"}}}}}}}}},
      {"allowMultipleAllocations", shared}};
}

json slice(const json& devices) {
  return {{"metadata", {{"name", "node-a-vgpu.tessera.dev-0"}}},
          {"spec",
           {{"driver", kDriver},
            {"nodeName", "node-a"},
            {"pool", {{"name", "node-a"}, {"generation", 1}, {"resourceSliceCount", 1}}},
            {"devices", devices}}}};
}

json device_class(const std::string& name, const json& config = json::array()) {
  json c = {
      {"metadata", {{"name", name}}},
      {"spec",
       {{"selectors", {{{"cel", {{"expression", "device.driver == \"vgpu.tessera.dev\""}}}}}}}}};
  if (!config.empty()) c["spec"]["config"] = config;
  return c;
}

json exactly(const json& capacity = json(), const std::string& device_class = kDriver) {
  json e = {{"deviceClassName", device_class}, {"allocationMode", "ExactCount"}, {"count", 1}};
  if (!capacity.is_null()) e["capacity"] = {{"requests", capacity}};
  return e;
}

json claim(const json& requests, const json& config = json::array()) {
  json c = {{"apiVersion", "resource.k8s.io/v1"},
            {"kind", "ResourceClaim"},
            {"metadata", {{"name", "c"}, {"namespace", "tenants"}}},
            {"spec", {{"devices", {{"requests", requests}}}}}};
  if (!config.empty()) c["spec"]["devices"]["config"] = config;
  return c;
}

struct Fixture {
  AllocatorInput input;
  int next = 0;
  explicit Fixture(const json& devices) {
    input.slices = {slice(devices)};
    input.device_classes = {device_class(kDriver)};
    input.node_name = "node-a";
    input.share_id = [this] { return "share-" + std::to_string(++next); };
  }
};

constexpr char kH200[] = "150755098624";  // 143771 MiB

// A request rounds up to min + k*step, in the step's format; capacities not asked for take their
// default; each share gets a shareID; the node selector names the slice's node.
TEST(Allocator, ConsumedCapacityIsTheRequestRoundedUpByThePolicy) {
  Fixture f(json::array({gpu("gpu-0", kH200)}));
  Result<json> allocation = allocate(
      f.input, claim({{{"name", "gpu"}, {"exactly", exactly({{"memory", "1000000000"}})}}}));
  ASSERT_TRUE(allocation.is_ok()) << allocation.status().message();
  const json& result = (*allocation)["devices"]["results"][0];
  EXPECT_EQ(result["request"], "gpu");
  EXPECT_EQ(result["driver"], kDriver);
  EXPECT_EQ(result["pool"], "node-a");
  EXPECT_EQ(result["device"], "gpu-0");
  EXPECT_EQ(result["shareID"], "share-1");
  EXPECT_EQ(result["consumedCapacity"]["memory"], "954Mi");  // 953.67 MiB up to whole MiB
  EXPECT_EQ(result["consumedCapacity"]["cores"], "100");     // the default
  EXPECT_EQ((*allocation)["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"][0],
            "node-a");

  // Below min: min. No request at all: every default (the whole GPU).
  Result<json> small = allocate(
      f.input,
      claim({{{"name", "gpu"}, {"exactly", exactly({{"memory", "1Mi"}, {"cores", "30"}})}}}));
  ASSERT_TRUE(small.is_ok());
  EXPECT_EQ((*small)["devices"]["results"][0]["consumedCapacity"],
            json({{"memory", "256Mi"}, {"cores", "30"}}));
  Result<json> whole = allocate(f.input, claim({{{"name", "gpu"}, {"exactly", exactly()}}}));
  ASSERT_TRUE(whole.is_ok());
  EXPECT_EQ((*whole)["devices"]["results"][0]["consumedCapacity"],
            json({{"memory", kH200}, {"cores", "100"}}));
}

TEST(AllocatorRules, RoundingAsCalculateConsumedQuantity) {
  const json range = {
      {"value", "100"},
      {"requestPolicy",
       {{"default", "10"}, {"validRange", {{"min", "5"}, {"max", "100"}, {"step", "5"}}}}}};
  const json values = {
      {"value", "10Gi"},
      {"requestPolicy", {{"default", "1Gi"}, {"validValues", {"1Gi", "2Gi", "4Gi"}}}}};
  const json none = {{"value", "7"}};
  const auto consumed = [](const json* request, const json& capacity) {
    Result<std::string> q = consumed_quantity(request, capacity);
    return q.is_ok() ? *q : q.status().message();
  };
  const json r12 = "12", r3 = "3", gi3 = "3Gi", gi9 = "9Gi", four = "4";
  EXPECT_EQ(consumed(nullptr, range), "10");
  EXPECT_EQ(consumed(&r12, range), "15");
  EXPECT_EQ(consumed(&r3, range), "5");
  EXPECT_EQ(consumed(&gi3, values), "4Gi");
  EXPECT_EQ(consumed(&gi9, values), "9Gi");  // above every value: the request (then refused)
  EXPECT_EQ(consumed(nullptr, none), "7");
  EXPECT_EQ(consumed(&four, none), "4");
}

// The shares of one device sum to at most each capacity; already allocated claims count; above
// max the device is not eligible.
TEST(Allocator, SharesOfADeviceFitItsCapacityOrAreRefused) {
  Fixture f(json::array({gpu("gpu-0", "8Gi")}));
  const json first =
      claim({{{"name", "gpu"}, {"exactly", exactly({{"memory", "6Gi"}, {"cores", "60"}})}}});
  Result<json> a = allocated(f.input, first);
  ASSERT_TRUE(a.is_ok());
  f.input.allocated_claims.push_back(*a);
  Result<json> fits = allocate(
      f.input,
      claim({{{"name", "gpu"}, {"exactly", exactly({{"memory", "2Gi"}, {"cores", "40"}})}}}));
  EXPECT_TRUE(fits.is_ok()) << fits.status().message();
  Result<json> over = allocate(
      f.input,
      claim({{{"name", "gpu"}, {"exactly", exactly({{"memory", "3Gi"}, {"cores", "10"}})}}}));
  ASSERT_FALSE(over.is_ok());
  EXPECT_EQ(over.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(over.status().message(),
            "cannot allocate all claims: request \"gpu\" found no device that fits");
  f.input.allocated_claims.clear();
  Result<json> too_big =
      allocate(f.input, claim({{{"name", "gpu"}, {"exactly", exactly({{"memory", "9Gi"}})}}}));
  EXPECT_FALSE(too_big.is_ok());
  Result<json> unknown =
      allocate(f.input, claim({{{"name", "gpu"}, {"exactly", exactly({{"bandwidth", "1"}})}}}));
  EXPECT_FALSE(unknown.is_ok());
}

// Several requests of one claim on one device: distinct shares. A device without
// allowMultipleAllocations is used once.
TEST(Allocator, SeveralRequestsOnOneDevice) {
  Fixture f(json::array({gpu("gpu-0", "8Gi")}));
  Result<json> two = allocate(
      f.input,
      claim({{{"name", "a"}, {"exactly", exactly({{"memory", "4Gi"}, {"cores", "50"}})}},
             {{"name", "b"}, {"exactly", exactly({{"memory", "4Gi"}, {"cores", "50"}})}}}));
  ASSERT_TRUE(two.is_ok()) << two.status().message();
  const json& results = (*two)["devices"]["results"];
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0]["device"], "gpu-0");
  EXPECT_EQ(results[1]["device"], "gpu-0");
  EXPECT_NE(results[0]["shareID"], results[1]["shareID"]);

  Fixture exclusive(json::array({gpu("gpu-0", "8Gi", false)}));
  Result<json> once = allocate(exclusive.input, claim({{{"name", "a"}, {"exactly", exactly()}}}));
  ASSERT_TRUE(once.is_ok());
  EXPECT_FALSE((*once)["devices"]["results"][0].contains("shareID"));
  EXPECT_FALSE((*once)["devices"]["results"][0].contains("consumedCapacity"));
  EXPECT_FALSE(allocate(exclusive.input, claim({{{"name", "a"}, {"exactly", exactly()}},
                                                {{"name", "b"}, {"exactly", exactly()}}}))
                   .is_ok());
}

// firstAvailable: the first subrequest that fits, named "<request>/<subrequest>"; configs as the
// scheduler copies them (the class's FromClass, the claim's FromClaim; all requests: no list).
TEST(Allocator, FirstAvailableAndConfigs) {
  Fixture f(json::array({gpu("gpu-0", "8Gi"), gpu("gpu-1", "8Gi")}));
  const json mps = {
      {{"opaque", {{"driver", kDriver}, {"parameters", {{"sharing", {{"strategy", "MPS"}}}}}}}}};
  f.input.device_classes.push_back(device_class("mps.vgpu.tessera.dev", mps));
  json big = exactly({{"memory", "16Gi"}});
  big["name"] = "big";
  json small = exactly({{"memory", "2Gi"}}, "mps.vgpu.tessera.dev");
  small["name"] = "small";
  const json claim_config = {{{"requests", {"gpu/small"}},
                              {"opaque", {{"driver", kDriver}, {"parameters", json::object()}}}}};
  Result<json> allocation =
      allocate(f.input, claim({{{"name", "gpu"}, {"firstAvailable", {big, small}}}}, claim_config));
  ASSERT_TRUE(allocation.is_ok()) << allocation.status().message();
  EXPECT_EQ((*allocation)["devices"]["results"][0]["request"], "gpu/small");
  const json& config = (*allocation)["devices"]["config"];
  ASSERT_EQ(config.size(), 2u);
  EXPECT_EQ(config[0]["source"], "FromClass");
  EXPECT_FALSE(config[0].contains("requests"));  // covers the claim's one request
  EXPECT_EQ(config[1]["source"], "FromClaim");

  // All: every device that fits, at least one.
  json all = exactly({{"memory", "1Gi"}});
  all["allocationMode"] = "All";
  all.erase("count");
  Result<json> every = allocate(f.input, claim({{{"name", "gpu"}, {"exactly", all}}}));
  ASSERT_TRUE(every.is_ok());
  EXPECT_EQ((*every)["devices"]["results"].size(), 2u);
}

TEST(Allocator, SelectorsTaintsAndUnknownClasses) {
  json tainted = gpu("gpu-0", "8Gi");
  tainted["taints"] = {{{"key", "vgpu.tessera.dev/unhealthy"}, {"effect", "NoSchedule"}}};
  Fixture f(json::array({tainted, gpu("gpu-1", "8Gi")}));
  Result<json> allocation = allocate(f.input, claim({{{"name", "gpu"}, {"exactly", exactly()}}}));
  ASSERT_TRUE(allocation.is_ok());
  EXPECT_EQ((*allocation)["devices"]["results"][0]["device"], "gpu-1");
  json pinned = exactly();
  pinned["selectors"] = {
      {{"cel",
        {{"expression",
          "device.attributes[\"vgpu.tessera.dev\"].productName == \"NVIDIA H200\" && "
          "device.capacity[\"vgpu.tessera.dev\"].memory.compareTo(quantity(\"16Gi\")) >= 0"}}}}};
  EXPECT_FALSE(allocate(f.input, claim({{{"name", "gpu"}, {"exactly", pinned}}})).is_ok());
  EXPECT_FALSE(
      allocate(f.input, claim({{{"name", "gpu"}, {"exactly", exactly(json(), "other")}}})).is_ok());

  const json device = gpu("gpu-0", "8Gi");
  EXPECT_TRUE(*device_matches("device.driver == 'vgpu.tessera.dev'", kDriver, device));
  EXPECT_TRUE(
      *device_matches("device.attributes[\"vgpu.tessera.dev\"].index == 0", kDriver, device));
  EXPECT_FALSE(*device_matches("!(device.allowMultipleAllocations)", kDriver, device));
  EXPECT_TRUE(
      *device_matches("device.attributes[\"vgpu.tessera.dev\"].productName"
                      ".startsWith(\"NVIDIA H\")",
                      kDriver, device));
  EXPECT_FALSE(
      *device_matches("device.attributes[\"vgpu.tessera.dev\"].productName"
                      ".startsWith(\"H200\")",
                      kDriver, device));
  const Result<bool> unsupported =
      device_matches("device.attributes.exists(a, true)", kDriver, device);
  ASSERT_FALSE(unsupported.is_ok());
  EXPECT_NE(unsupported.status().message().find("outside what this port"), std::string::npos);
}

TEST(Allocator, ShareIdsAreVersion4Uuids) {
  const std::string id = random_share_id();
  ASSERT_EQ(id.size(), 36u);
  EXPECT_EQ(id[14], '4');
  EXPECT_NE(std::string("89ab").find(id[19]), std::string::npos);
  EXPECT_NE(id, random_share_id());
}

}  // namespace
}  // namespace tessera::testing::allocator
