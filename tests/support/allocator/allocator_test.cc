// The scheduler's allocation rules, ported in allocator/allocator.h from kubernetes/kubernetes
// staging/src/k8s.io/dynamic-resource-allocation/structured/internal/incubating/
// allocator_incubating.go (03ab440c41a8098613d2149f10b367c7f7ce32c8) and consumable_capacity.go
// (0c8a1b073dc32ebfc32004fd7d77c8d7ba03df8c), checked against the cases of upstream's
// consumable_capacity_test.go and allocator_test.go that concern us; the counters (partitionable
// devices) as kubernetes/dynamic-resource-allocation v0.36.2
// (b0162be5933a67898f582c979419d0b7dd9c75ee, Kubernetes 1.36.2) checks them.
#include "allocator/allocator.h"

#include <algorithm>

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
  // A missing key is a runtime error that CEL's && and || absorb when the other side decides
  // (cel-go's commutative logic): a whole GPU has no "profile", yet the first two select it out.
  const std::string profile = "device.attributes[\"vgpu.tessera.dev\"].profile.startsWith(\"3g.\")";
  const std::string no_gpu = "device.attributes[\"vgpu.tessera.dev\"].index == 7";
  EXPECT_FALSE(*device_matches(no_gpu + " && " + profile, kDriver, device));
  EXPECT_FALSE(*device_matches(profile + " && " + no_gpu, kDriver, device));
  EXPECT_TRUE(
      *device_matches(profile + " || device.driver == 'vgpu.tessera.dev'", kDriver, device));
  EXPECT_TRUE(*device_matches("!(" + profile + " && false)", kDriver, device));
  for (const std::string& undecided : std::vector<std::string>{
           profile, profile + " || " + no_gpu, "!(" + profile + ")",
           "device.capacity[\"vgpu.tessera.dev\"].sms.compareTo(quantity(\"1\")) > 0"}) {
    const Result<bool> error = device_matches(undecided, kDriver, device);
    ASSERT_FALSE(error.is_ok()) << undecided;
    EXPECT_NE(error.status().message().find("no such key"), std::string::npos) << undecided;
  }
  const Result<bool> unsupported =
      device_matches("device.attributes.exists(a, true)", kDriver, device);
  ASSERT_FALSE(unsupported.is_ok());
  EXPECT_NE(unsupported.status().message().find("outside what this port"), std::string::npos);
}

// ---- Partitionable devices (KEP-4815): an H200 141GB published as NVIDIA's DRA driver publishes
// dynamic MIG (docs/design facts: mig-facts.md §1.3 for the profiles, §5.2 for the layout): one
// counter set per GPU holding the largest profile's capacities and memory-slice-0..7, in a slice
// of its own (the 1.35+ shape); the whole GPU consumes every counter, each MIG device its
// profile's capacities and the memory slices of its placement.

constexpr char kNvidia[] = "gpu.nvidia.com";
constexpr char kCounterSet[] = "gpu-0-counter-set";

struct Profile {
  std::string name;  // "3g.71gb"
  int id;            // GPU instance profile ID
  int64_t memory_mib;
  int multiprocessors, copy_engines, decoders, jpeg_engines, ofa_engines, memory_slices;
};
const Profile k1g{"1g.18gb", 19, 16384, 16, 1, 1, 1, 0, 1};
const Profile k2g{"2g.35gb", 14, 33024, 32, 2, 2, 2, 0, 2};
const Profile k3g{"3g.71gb", 9, 71168, 60, 3, 3, 3, 0, 4};
const Profile k4g{"4g.71gb", 5, 71168, 64, 4, 4, 4, 0, 4};
const Profile k7g{"7g.141gb", 0, 143104, 132, 8, 7, 7, 1, 8};

json counter(int64_t value) {
  return {{"value", std::to_string(value)}};
}

// The counters a profile at `start` consumes (the whole GPU: k7g at 0 consumes every one).
json mig_counters(const Profile& p, int start) {
  json counters = {{"multiprocessors", counter(p.multiprocessors)},
                   {"copy-engines", counter(p.copy_engines)},
                   {"decoders", counter(p.decoders)},
                   {"encoders", counter(0)},
                   {"jpeg-engines", counter(p.jpeg_engines)},
                   {"ofa-engines", counter(p.ofa_engines)},
                   {"memory", {{"value", std::to_string(p.memory_mib) + "Mi"}}}};
  for (int slice = start; slice < start + p.memory_slices; ++slice)
    counters["memory-slice-" + std::to_string(slice)] = counter(1);
  return counters;
}

json h200_capacity(const Profile& p) {
  return {{"multiprocessors", {{"value", std::to_string(p.multiprocessors)}}},
          {"copyEngines", {{"value", std::to_string(p.copy_engines)}}},
          {"decoders", {{"value", std::to_string(p.decoders)}}},
          {"encoders", {{"value", "0"}}},
          {"jpegEngines", {{"value", std::to_string(p.jpeg_engines)}}},
          {"ofaEngines", {{"value", std::to_string(p.ofa_engines)}}},
          {"memory", {{"value", std::to_string(p.memory_mib) + "Mi"}}}};
}

// gpu-0-mig-<profile>-<id>-<start>. `placementStart` is this test's attribute (the driver does
// not publish one), so that a request can name a placement.
json mig(const Profile& p, int start, bool shared = false) {
  std::string profile = p.name;
  profile.erase(std::remove(profile.begin(), profile.end(), '.'), profile.end());
  json device = {
      {"name", "gpu-0-mig-" + profile + "-" + std::to_string(p.id) + "-" + std::to_string(start)},
      {"attributes",
       {{"type", {{"string", "mig"}}},
        {"profile", {{"string", p.name}}},
        {"placementStart", {{"int", start}}},
        {"productName", {{"string", "NVIDIA H200"}}}}},
      {"capacity", h200_capacity(p)},
      {"consumesCounters", {{{"counterSet", kCounterSet}, {"counters", mig_counters(p, start)}}}}};
  if (shared) {
    // A capacity without a requestPolicy is consumed whole by every share (upstream's
    // calculateConsumedCapacity), so a shared device publishes only its memory, with a policy.
    device["allowMultipleAllocations"] = true;
    device["capacity"] = {
        {"memory",
         {{"value", std::to_string(p.memory_mib) + "Mi"},
          {"requestPolicy",
           {{"default", "0"},
            {"validRange",
             {{"min", "0"}, {"max", std::to_string(p.memory_mib) + "Mi"}, {"step", "1Mi"}}}}}}}};
  }
  return device;
}

json whole_gpu() {
  return {
      {"name", "gpu-0"},
      {"attributes", {{"type", {{"string", "gpu"}}}, {"productName", {{"string", "NVIDIA H200"}}}}},
      {"capacity", h200_capacity(k7g)},
      {"consumesCounters", {{{"counterSet", kCounterSet}, {"counters", mig_counters(k7g, 0)}}}}};
}

json nvidia_slice(const std::string& name, const std::string& node, int count) {
  return {{"metadata", {{"name", name}}},
          {"spec",
           {{"driver", kNvidia},
            {"nodeName", node},
            {"pool", {{"name", "node-a"}, {"generation", 1}, {"resourceSliceCount", count}}}}}};
}

// (Lists as std::vector: nlohmann takes a one-element brace list for its element, not a list.)
json counter_slice(const std::vector<json>& counter_sets, int count = 2) {
  json s = nvidia_slice("node-a-gpu.nvidia.com-counters", "node-a", count);
  s["spec"]["sharedCounters"] = counter_sets;
  return s;
}

json h200_counter_set() {
  return {{"name", kCounterSet}, {"counters", mig_counters(k7g, 0)}};
}

json device_slice(const json& devices, int count = 2) {
  json s = nvidia_slice("node-a-gpu.nvidia.com-gpu-0", "node-a", count);
  s["spec"]["devices"] = devices;
  return s;
}

json nvidia_class(const std::string& name, const std::string& type) {
  return {{"metadata", {{"name", name}}},
          {"spec",
           {{"selectors",
             {{{"cel",
                {{"expression",
                  "device.driver == \"gpu.nvidia.com\" && "
                  "device.attributes[\"gpu.nvidia.com\"].type == \"" +
                      type + "\""}}}}}}}}};
}

// One request: the class, CEL selectors on the device's attributes, a count.
json request(const std::string& name, const std::string& device_class,
             const std::vector<std::string>& selectors = {}, int count = 1,
             const json& capacity = json()) {
  json e = {{"deviceClassName", device_class}, {"allocationMode", "ExactCount"}, {"count", count}};
  for (const std::string& expression : selectors)
    e["selectors"].push_back({{"cel", {{"expression", expression}}}});
  if (!capacity.is_null()) e["capacity"] = {{"requests", capacity}};
  return {{"name", name}, {"exactly", e}};
}

std::string profile_is(const Profile& p) {
  return "device.attributes[\"gpu.nvidia.com\"].profile == \"" + p.name + "\"";
}
std::string placed_at(int start) {
  return "device.attributes[\"gpu.nvidia.com\"].placementStart == " + std::to_string(start);
}

struct H200 {
  AllocatorInput input;
  int next = 0;
  explicit H200(const json& devices) {
    input.slices = {counter_slice({h200_counter_set()}), device_slice(devices)};
    input.device_classes = {nvidia_class("gpu.nvidia.com", "gpu"),
                            nvidia_class("mig.nvidia.com", "mig")};
    input.node_name = "node-a";
    input.share_id = [this] { return "share-" + std::to_string(++next); };
  }
  // Allocates `requests` and keeps the claim as allocated; the device names, in result order.
  std::vector<std::string> commit(const std::vector<json>& requests) {
    Result<json> done = allocated(input, claim(requests));
    EXPECT_TRUE(done.is_ok()) << done.status().message();
    if (!done.is_ok()) return {};
    input.allocated_claims.push_back(*done);
    std::vector<std::string> devices;
    for (const json& result : (*done)["status"]["allocation"]["devices"]["results"])
      devices.push_back(result["device"]);
    return devices;
  }
  Status refusal(const std::vector<json>& requests) {
    Result<json> done = allocate(input, claim(requests));
    return done.is_ok() ? Status::ok() : done.status();
  }
};

json h200_devices(bool shared_migs = false) {
  return json::array({whole_gpu(), mig(k4g, 0, shared_migs), mig(k3g, 0, shared_migs),
                      mig(k3g, 4, shared_migs), mig(k2g, 0), mig(k2g, 2), mig(k2g, 4), mig(k1g, 0),
                      mig(k1g, 1), mig(k1g, 6)});
}

// The whole GPU consumes every counter: once a 3g is allocated it no longer fits, and once the
// whole GPU is allocated no MIG device does.
TEST(AllocatorCounters, WholeGpuAndMigDevicesExcludeEachOther) {
  H200 mig_first(h200_devices());
  EXPECT_EQ(mig_first.commit({request("mig", "mig.nvidia.com", {profile_is(k3g)})}),
            std::vector<std::string>{"gpu-0-mig-3g71gb-9-0"});
  const Status whole = mig_first.refusal({request("gpu", "gpu.nvidia.com")});
  EXPECT_EQ(whole.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(whole.message().find("request \"gpu\" found no device that fits"), std::string::npos);
  EXPECT_NE(whole.message().find("device gpu.nvidia.com/node-a/gpu-0 needs counter"),
            std::string::npos)
      << whole.message();
  EXPECT_NE(whole.message().find("of counter set gpu-0-counter-set"), std::string::npos);

  H200 gpu_first(h200_devices());
  EXPECT_EQ(gpu_first.commit({request("gpu", "gpu.nvidia.com")}),
            std::vector<std::string>{"gpu-0"});
  EXPECT_EQ(gpu_first.refusal({request("mig", "mig.nvidia.com")}).code(),
            StatusCode::kFailedPrecondition);
  // Without the committed claim both fit again: what is committed is what consumes.
  gpu_first.input.allocated_claims.clear();
  EXPECT_TRUE(gpu_first.refusal({request("mig", "mig.nvidia.com")}).is_ok());
}

// Two 3g at placements 0 and 4 fill the memory slices; a device overlapping either is refused
// with the counter it lacks; in one claim as across claims.
TEST(AllocatorCounters, PlacementsShareMemorySlices) {
  H200 one_claim(h200_devices());
  EXPECT_EQ(one_claim.commit({request("pair", "mig.nvidia.com", {profile_is(k3g)}, 2)}),
            (std::vector<std::string>{"gpu-0-mig-3g71gb-9-0", "gpu-0-mig-3g71gb-9-4"}));
  EXPECT_EQ(one_claim.refusal({request("any", "mig.nvidia.com")}).code(),
            StatusCode::kFailedPrecondition);

  H200 f(h200_devices());
  EXPECT_EQ(f.commit({request("a", "mig.nvidia.com", {profile_is(k3g), placed_at(0)})}),
            std::vector<std::string>{"gpu-0-mig-3g71gb-9-0"});
  // 2g at 2 takes memory slices 2 and 3, held by the 3g at 0.
  const Status overlap =
      f.refusal({request("b", "mig.nvidia.com", {profile_is(k2g), placed_at(2)})});
  EXPECT_EQ(overlap.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(overlap.message().find("device gpu.nvidia.com/node-a/gpu-0-mig-2g35gb-14-2 needs "
                                   "counter memory-slice-2 of counter set gpu-0-counter-set, of "
                                   "which 0 is left and 1 would be consumed"),
            std::string::npos)
      << overlap.message();
  EXPECT_EQ(f.commit({request("b", "mig.nvidia.com", {profile_is(k3g)})}),
            std::vector<std::string>{"gpu-0-mig-3g71gb-9-4"});
  // Every memory slice is taken; the 1g at 6 and the 4g at 0 are refused.
  EXPECT_FALSE(f.refusal({request("c", "mig.nvidia.com", {profile_is(k1g)})}).is_ok());
  EXPECT_FALSE(f.refusal({request("c", "mig.nvidia.com", {profile_is(k4g)})}).is_ok());
}

// `n` requests for a 10Gi share of the 3g at 0.
std::vector<json> shares_of_3g_at_0(const std::string& prefix, int n) {
  std::vector<json> requests;
  for (int i = 0; i < n; ++i)
    requests.push_back(request(prefix + std::to_string(i), "mig.nvidia.com",
                               {profile_is(k3g), placed_at(0)}, 1, {{"memory", "10Gi"}}));
  return requests;
}

// A device with allowMultipleAllocations consumes its counters once, with its first share: two
// shares in one claim fit, a share in a later call is not counter-checked again, and the
// committed shares count for other devices (the 1.36.2 fix: a whole GPU is refused next to a
// shared 3g; 1.36.0-1.36.1 let it through).
TEST(AllocatorCounters, SharedDeviceConsumesCountersOnce) {
  H200 f(h200_devices(/*shared_migs=*/true));
  const json share = {{"memory", "10Gi"}};
  const std::vector<std::string> first = f.commit(shares_of_3g_at_0("a", 2));
  EXPECT_EQ(first, (std::vector<std::string>{"gpu-0-mig-3g71gb-9-0", "gpu-0-mig-3g71gb-9-0"}));
  const json& results = f.input.allocated_claims[0]["status"]["allocation"]["devices"]["results"];
  EXPECT_EQ(results[0]["shareID"], "share-1");
  EXPECT_EQ(results[1]["shareID"], "share-2");
  EXPECT_EQ(results[0]["consumedCapacity"]["memory"], "10Gi");
  // Two shares, one device: its counters are taken once.
  Result<json> left = counters_left(f.input);
  ASSERT_TRUE(left.is_ok()) << left.status().message();
  const json& set = (*left)["gpu.nvidia.com/node-a"][kCounterSet];
  EXPECT_EQ(set["multiprocessors"], 132 - 60);
  EXPECT_EQ(set["memory"], int64_t{143104 - 71168} << 20);
  EXPECT_EQ(set["memory-slice-0"], 0);
  EXPECT_EQ(set["memory-slice-3"], 0);
  EXPECT_EQ(set["memory-slice-4"], 1);

  EXPECT_EQ(f.commit(shares_of_3g_at_0("b", 1)), std::vector<std::string>{"gpu-0-mig-3g71gb-9-0"});
  EXPECT_EQ(f.refusal({request("gpu", "gpu.nvidia.com")}).code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(f.refusal({request("c", "mig.nvidia.com", {profile_is(k4g)})}).is_ok());
  // The shared 3g holds memory slices 0-3 only: the 3g at 4 still fits.
  EXPECT_EQ(f.commit({request("d", "mig.nvidia.com", {profile_is(k3g), placed_at(4)}, 1, share)}),
            std::vector<std::string>{"gpu-0-mig-3g71gb-9-4"});
  // Capacity is still checked per share: 71168Mi holds six 10Gi shares, not seven.
  EXPECT_EQ(f.commit(shares_of_3g_at_0("e", 3)).size(), 3u);
  EXPECT_FALSE(f.refusal(shares_of_3g_at_0("f", 1)).is_ok());
}

// Backtracking: a device of its own gives its counters back, a shared device's first share does
// not (allocateDevice's rollback), so within one call a backtracked share keeps its memory
// slices.
TEST(AllocatorCounters, BacktrackingGivesBackCountersOfDevicesOfTheirOwn) {
  // "big" takes the 4g at 0 first; "small" (a 2g at 0) then overlaps, so "big" moves to the 3g
  // at 4 and "small" fits.
  H200 f(h200_devices());
  EXPECT_EQ(f.commit({request("big", "mig.nvidia.com",
                              {"device.capacity[\"gpu.nvidia.com\"].multiprocessors.compareTo("
                               "quantity(\"60\")) >= 0"}),
                      request("small", "mig.nvidia.com", {profile_is(k2g), placed_at(0)})}),
            (std::vector<std::string>{"gpu-0-mig-3g71gb-9-4", "gpu-0-mig-2g35gb-14-0"}));

  // The same with the 4g and 3g at 0 shareable: "big" tries the 4g at 0 and keeps its counters
  // on backtracking, so neither placement-0 device nor the 2g at 0 fits afterwards.
  H200 shared(json::array({mig(k4g, 0, true), mig(k3g, 4), mig(k2g, 0)}));
  const Status kept =
      shared.refusal({request("big", "mig.nvidia.com",
                              {"device.attributes[\"gpu.nvidia.com\"].profile == \"4g.71gb\" || "
                               "device.attributes[\"gpu.nvidia.com\"].profile == \"3g.71gb\""}),
                      request("small", "mig.nvidia.com", {profile_is(k2g), placed_at(0)})});
  EXPECT_EQ(kept.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(kept.message().find("device gpu.nvidia.com/node-a/gpu-0-mig-2g35gb-14-0 needs counter"),
            std::string::npos)
      << kept.message();
  // Each request alone fits.
  EXPECT_TRUE(shared.refusal({request("small", "mig.nvidia.com", {profile_is(k2g)})}).is_ok());
}

// "All" with counters (the 1.36.2 fix FIX-ALL made it work, not panic): every matching device,
// so devices that exclude each other refuse the request; a result with admin access consumes
// nothing (foreachAllocatedDevice skips it).
TEST(AllocatorCounters, AllModeAndAdminAccess) {
  json every = request("mig", "mig.nvidia.com", {profile_is(k3g)});
  every["exactly"]["allocationMode"] = "All";
  every["exactly"].erase("count");
  H200 two(json::array({whole_gpu(), mig(k3g, 0), mig(k3g, 4)}));
  EXPECT_EQ(two.commit({every}),
            (std::vector<std::string>{"gpu-0-mig-3g71gb-9-0", "gpu-0-mig-3g71gb-9-4"}));
  H200 overlapping(json::array({mig(k4g, 0), mig(k3g, 0), mig(k3g, 4)}));
  json any_big = every;
  any_big["exactly"]["selectors"] = json::array();
  EXPECT_EQ(overlapping.refusal({any_big}).code(), StatusCode::kFailedPrecondition);

  H200 admin(h200_devices());
  admin.input.allocated_claims.push_back({{"status",
                                           {{"allocation",
                                             {{"devices",
                                               {{"results",
                                                 {{{"request", "gpu"},
                                                   {"driver", kNvidia},
                                                   {"pool", "node-a"},
                                                   {"device", "gpu-0"},
                                                   {"adminAccess", true}}}}}}}}}}});
  EXPECT_EQ(admin.commit({request("mig", "mig.nvidia.com", {profile_is(k3g)})}),
            std::vector<std::string>{"gpu-0-mig-3g71gb-9-0"});
}

// A pool whose counter sets or references do not add up is invalid as a whole (no device of it
// is offered), with the reason; "All" over it is an error.
TEST(AllocatorCounters, InvalidPools) {
  const auto reason = [](const std::vector<json>& slices) {
    H200 f(json::array());
    f.input.slices = slices;
    return f.refusal({request("mig", "mig.nvidia.com")});
  };
  json plain = mig(k1g, 0);
  plain.erase("consumesCounters");
  std::vector<json> duplicated = {counter_slice({h200_counter_set()}, 3),
                                  counter_slice({h200_counter_set()}, 3),
                                  device_slice(json::array({plain}), 3)};
  duplicated[1]["metadata"]["name"] = "node-a-gpu.nvidia.com-counters-2";
  EXPECT_EQ(reason(duplicated).message(),
            "cannot allocate all claims: invalid resource pools were encountered: resource pool "
            "gpu.nvidia.com/node-a: duplicate counter set name gpu-0-counter-set");

  json unknown_set = mig(k1g, 1);
  unknown_set["consumesCounters"][0]["counterSet"] = "gpu-1-counter-set";
  const Status no_set = reason(
      {counter_slice({h200_counter_set()}), device_slice(json::array({plain, unknown_set}))});
  EXPECT_EQ(no_set.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(no_set.message().find("gpu.nvidia.com/node-a: counter set gpu-1-counter-set not found"),
            std::string::npos)
      << no_set.message();

  json unknown_counter = mig(k1g, 1);
  unknown_counter["consumesCounters"][0]["counters"]["memory-slice-8"] = counter(1);
  EXPECT_NE(reason({counter_slice({h200_counter_set()}),
                    device_slice(json::array({plain, unknown_counter}))})
                .message()
                .find("counter memory-slice-8 not found in counter set gpu-0-counter-set"),
            std::string::npos);

  H200 invalid(json::array({plain, unknown_counter}));
  const Result<json> left = counters_left(invalid.input);
  ASSERT_FALSE(left.is_ok());
  EXPECT_EQ(left.status().message(),
            "resource pool gpu.nvidia.com/node-a is currently invalid: counter memory-slice-8 not "
            "found in counter set gpu-0-counter-set");

  // "All" over the invalid pool: an error naming it.
  H200 all(json::array({plain, unknown_counter}));
  json every = request("mig", "mig.nvidia.com");
  every["exactly"]["allocationMode"] = "All";
  every["exactly"].erase("count");
  const Status refused = all.refusal({every});
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("resource pool gpu.nvidia.com/node-a is currently invalid"),
            std::string::npos);
}

// What counts: a counter slice whatever node it names, devices of the pool in slices for other
// nodes (allocated ones consume), and the 1.34 shape (counters beside devices in one slice),
// whose devices the 1.36 allocator never offers.
TEST(AllocatorCounters, SliceShapes) {
  H200 f(h200_devices());
  f.input.slices[0]["spec"].erase("nodeName");
  f.input.slices[0]["spec"]["nodeSelector"] = {
      {"nodeSelectorTerms", {{{"matchLabels", {{"gpu", "h200"}}}}}}};
  EXPECT_EQ(f.commit({request("gpu", "gpu.nvidia.com")}), std::vector<std::string>{"gpu-0"});

  // A pool of three slices: the 3g at 0 is published for node-b, and allocated.
  H200 spread(json::array({whole_gpu(), mig(k3g, 4)}));
  for (json& slice : spread.input.slices) slice["spec"]["pool"]["resourceSliceCount"] = 3;
  json elsewhere = device_slice(json::array({mig(k3g, 0)}), 3);
  elsewhere["metadata"]["name"] = "node-b-gpu.nvidia.com-gpu-0";
  elsewhere["spec"]["nodeName"] = "node-b";
  spread.input.slices.push_back(elsewhere);
  spread.input.allocated_claims.push_back({{"status",
                                            {{"allocation",
                                              {{"devices",
                                                {{"results",
                                                  {{{"request", "mig"},
                                                    {"driver", kNvidia},
                                                    {"pool", "node-a"},
                                                    {"device", "gpu-0-mig-3g71gb-9-0"}}}}}}}}}}});
  EXPECT_FALSE(spread.refusal({request("gpu", "gpu.nvidia.com")}).is_ok());
  EXPECT_EQ(spread.commit({request("mig", "mig.nvidia.com")}),
            std::vector<std::string>{"gpu-0-mig-3g71gb-9-4"});

  // 1.34: sharedCounters and devices in one slice.
  H200 combined(json::array());
  json old = device_slice(json::array({whole_gpu()}), 1);
  old["spec"]["sharedCounters"] = json::array({h200_counter_set()});
  combined.input.slices = {old};
  EXPECT_EQ(combined.refusal({request("gpu", "gpu.nvidia.com")}).message(),
            "cannot allocate all claims: request \"gpu\" found no device that fits");

  // A fractional counter is refused, not rounded.
  H200 fraction(h200_devices());
  fraction.input.slices[0]["spec"]["sharedCounters"][0]["counters"]["multiprocessors"] = {
      {"value", "1500m"}};
  const Status fractional = fraction.refusal({request("gpu", "gpu.nvidia.com")});
  EXPECT_EQ(fractional.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(fractional.message().find("a fractional counter"), std::string::npos);
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
