#include "devices/resource_slices.h"

#include <unistd.h>

#include <filesystem>
#include <map>
#include <optional>

#include <gtest/gtest.h>

#include "apiserver/apiserver_rules.h"
#include "apiserver/fake_api_server.h"
#include "tessera/kube/http_kube_client.h"
#include "tessera/quantity.h"

namespace tessera::agent {
namespace {

using nlohmann::json;
using testing::FakeApiServer;

GpuInfo h200(unsigned minor) {
  GpuInfo gpu;
  gpu.index = minor;
  gpu.minor = minor;
  gpu.uuid = "GPU-0000000" + std::to_string(minor) + "-aaaa-bbbb-cccc-dddddddddddd";
  gpu.product_name = "NVIDIA H200";
  gpu.architecture = "Hopper";
  gpu.brand = "Nvidia";
  gpu.cc_major = 9;
  gpu.cc_minor = 0;
  gpu.driver_version = "580.159.04";
  gpu.pci_bus_id = "0000:1" + std::to_string(minor) + ":00.0";
  gpu.memory_bytes = 143771ull << 20;
  return gpu;
}

TEST(ResourceSlices, SemverFromDriverAndComputeCapability) {
  EXPECT_EQ(to_semver("580.159.04"), "580.159.4");
  EXPECT_EQ(to_semver("9.0"), "9.0.0");
  EXPECT_EQ(to_semver("12"), "12.0.0");
  EXPECT_EQ(to_semver("1.2.3.4"), "");
  EXPECT_EQ(to_semver("r580"), "");
}

TEST(ResourceSlices, DeviceCarriesAttributesAndConsumableCapacities) {
  const json device = build_device(h200(3));
  EXPECT_EQ(device["name"], "gpu-3");
  EXPECT_EQ(device["allowMultipleAllocations"], true);
  const json& a = device["attributes"];
  EXPECT_EQ(a["uuid"], json({{"string", "GPU-00000003-aaaa-bbbb-cccc-dddddddddddd"}}));
  EXPECT_EQ(a["productName"], json({{"string", "NVIDIA H200"}}));
  EXPECT_EQ(a["architecture"], json({{"string", "Hopper"}}));
  EXPECT_EQ(a["brand"], json({{"string", "Nvidia"}}));
  EXPECT_EQ(a["cudaComputeCapability"], json({{"version", "9.0.0"}}));
  EXPECT_EQ(a["driverVersion"], json({{"version", "580.159.4"}}));
  EXPECT_EQ(a["resource.kubernetes.io/pciBusID"], json({{"string", "0000:13:00.0"}}));
  const std::string total = std::to_string(143771ull << 20);
  EXPECT_EQ(device["capacity"]["memory"],
            json({{"value", total},
                  {"requestPolicy",
                   {{"default", total},
                    {"validRange", {{"min", "256Mi"}, {"max", total}, {"step", "1Mi"}}}}}}));
  EXPECT_EQ(device["capacity"]["cores"],
            json({{"value", "100"},
                  {"requestPolicy",
                   {{"default", "0"},  // a request that names no cores is best-effort
                    {"validRange", {{"min", "0"}, {"max", "100"}, {"step", "1"}}}}}}));
  EXPECT_LE(a.size() + device["capacity"].size(), 32u);
}

TEST(ResourceSlices, AtMost128DevicesPerSlice) {
  std::vector<GpuInfo> gpus;
  for (unsigned i = 0; i < 130; ++i) gpus.push_back(h200(i));
  const auto slices = build_resource_slices(gpus, {"vgpu.tessera.dev", "node-a", "uid-n"}, 7);
  ASSERT_EQ(slices.size(), 2u);
  EXPECT_EQ(slices[0]["spec"]["devices"].size(), 128u);
  EXPECT_EQ(slices[1]["spec"]["devices"].size(), 2u);
  EXPECT_EQ(slices[1]["metadata"]["name"], "node-a-vgpu.tessera.dev-1");
  EXPECT_EQ(slices[1]["spec"]["pool"],
            json({{"name", "node-a"}, {"generation", 7}, {"resourceSliceCount", 2}}));
}

TEST(ResourceSlices, PublishCreatesUpdatesAndDeletesSoTheApiMatches) {
  FakeApiServer server;
  const kube::KubeConnection c = server.connection();
  kube::RetryPolicy retry;
  retry.initial_backoff = std::chrono::milliseconds(1);
  kube::HttpKubeClient kube(c, retry);
  SlicePublisher publisher(kube, {"vgpu.tessera.dev", "node-a", ""});

  // First publish: one slice created, owned by the Node, generation 1.
  ASSERT_EQ(publisher.publish({h200(0), h200(1)}).message(), "");
  auto writes = server.take_writes();
  ASSERT_EQ(writes.size(), 1u);
  EXPECT_EQ(writes[0].method, "POST");
  EXPECT_EQ(writes[0].path, "/apis/resource.k8s.io/v1/resourceslices");
  const json& slice = writes[0].body;
  EXPECT_EQ(slice["apiVersion"], "resource.k8s.io/v1");
  EXPECT_EQ(slice["kind"], "ResourceSlice");
  EXPECT_EQ(slice["metadata"]["name"], "node-a-vgpu.tessera.dev-0");
  EXPECT_EQ(slice["metadata"]["ownerReferences"], json::array({{{"apiVersion", "v1"},
                                                                {"kind", "Node"},
                                                                {"name", "node-a"},
                                                                {"uid", "3d7c0b8e-node-uid"},
                                                                {"controller", true}}}));
  EXPECT_EQ(slice["spec"]["driver"], "vgpu.tessera.dev");
  EXPECT_EQ(slice["spec"]["nodeName"], "node-a");
  EXPECT_EQ(slice["spec"]["pool"],
            json({{"name", "node-a"}, {"generation", 1}, {"resourceSliceCount", 1}}));
  ASSERT_EQ(slice["spec"]["devices"].size(), 2u);
  EXPECT_EQ(slice["spec"]["devices"][0], build_device(h200(0)));
  EXPECT_EQ(slice["spec"]["devices"][1]["name"], "gpu-1");
  EXPECT_EQ(server.last_list_query, "spec.nodeName=node-a,spec.driver=vgpu.tessera.dev");

  // Unchanged: nothing written, even when the server prints quantities in its canonical form.
  server.slices["node-a-vgpu.tessera.dev-0"]["spec"]["devices"][0]["capacity"]["memory"]
               ["requestPolicy"]["validRange"]["step"] = "1048576";
  ASSERT_EQ(publisher.publish({h200(0), h200(1)}).message(), "");
  EXPECT_TRUE(server.take_writes().empty());
  EXPECT_EQ(publisher.generation(), 1);

  // A GPU gone: the slice is updated in place with the next generation.
  ASSERT_EQ(publisher.publish({h200(0)}).message(), "");
  writes = server.take_writes();
  ASSERT_EQ(writes.size(), 1u);
  EXPECT_EQ(writes[0].method, "PUT");
  EXPECT_EQ(writes[0].path, "/apis/resource.k8s.io/v1/resourceslices/node-a-vgpu.tessera.dev-0");
  EXPECT_EQ(writes[0].body["spec"]["pool"]["generation"], 2);
  EXPECT_EQ(writes[0].body["spec"]["devices"].size(), 1u);
  EXPECT_FALSE(writes[0].body["metadata"]["resourceVersion"].is_null());

  // 130 GPUs: two slices (update + create), generation 3; back to one: the second is deleted.
  std::vector<GpuInfo> many;
  for (unsigned i = 0; i < 130; ++i) many.push_back(h200(i));
  ASSERT_EQ(publisher.publish(many).message(), "");
  writes = server.take_writes();
  ASSERT_EQ(writes.size(), 2u);
  EXPECT_EQ(writes[0].method, "PUT");
  EXPECT_EQ(writes[1].method, "POST");
  EXPECT_EQ(writes[1].body["spec"]["pool"],
            json({{"name", "node-a"}, {"generation", 3}, {"resourceSliceCount", 2}}));
  ASSERT_EQ(publisher.publish({h200(0)}).message(), "");
  writes = server.take_writes();
  ASSERT_EQ(writes.size(), 2u);
  EXPECT_EQ(writes[0].method, "PUT");
  EXPECT_EQ(writes[0].body["spec"]["pool"]["generation"], 4);
  EXPECT_EQ(writes[1].method, "DELETE");
  EXPECT_EQ(writes[1].path, "/apis/resource.k8s.io/v1/resourceslices/node-a-vgpu.tessera.dev-1");
  EXPECT_EQ(server.stored_slices().size(), 1u);

  // A restarted agent (no memory of the generation) continues from the API's.
  SlicePublisher restarted(kube, {"vgpu.tessera.dev", "node-a", ""});
  ASSERT_EQ(restarted.publish({h200(0), h200(1)}).message(), "");
  writes = server.take_writes();
  ASSERT_EQ(writes.size(), 1u);
  EXPECT_EQ(writes[0].body["spec"]["pool"]["generation"], 5);
}

DeviceHealthReport unhealthy(unsigned minor, unsigned long long xid) {
  DeviceHealthReport report;
  report.pool_name = "node-a";
  report.device_name = "gpu-" + std::to_string(minor);
  report.state = DeviceHealthState::kUnhealthy;
  report.xid = xid;
  report.message = xid ? "XID " + std::to_string(xid) : "NVML cannot watch the GPU";
  return report;
}

DeviceHealthReport healthy(unsigned minor) {
  DeviceHealthReport report = unhealthy(minor, 0);
  report.state = DeviceHealthState::kHealthy;
  report.message.clear();
  return report;
}

TEST(ResourceSlices, AnUnhealthyDeviceCarriesTheUnhealthyTaint) {
  const DeviceHealthReport xid = unhealthy(3, 79);
  EXPECT_EQ(build_device(h200(3), &xid)["taints"],
            json::array({{{"key", "vgpu.tessera.dev/unhealthy"},
                          {"value", "xid-79"},
                          {"effect", "NoSchedule"}}}));
  // Unhealthy for another reason than an XID: the taint without a value.
  const DeviceHealthReport other = unhealthy(3, 0);
  EXPECT_EQ(build_device(h200(3), &other)["taints"],
            json::array({{{"key", "vgpu.tessera.dev/unhealthy"}, {"effect", "NoSchedule"}}}));
  // Healthy, Unknown or no report: no taints at all (the entry is as it always was).
  const DeviceHealthReport fine = healthy(3);
  EXPECT_EQ(build_device(h200(3), &fine), build_device(h200(3)));
  DeviceHealthReport unknown = fine;
  unknown.state = DeviceHealthState::kUnknown;
  EXPECT_EQ(build_device(h200(3), &unknown), build_device(h200(3)));
  EXPECT_FALSE(build_device(h200(3)).contains("taints"));
}

// The taint value is a label value (at most 63 characters, alphanumerics and '-', '_', '.'): the
// largest XID NVML can report still is one, and the whole taint passes the API server's rules.
TEST(ResourceSlices, EveryXidTaintPassesTheApiServersRules) {
  for (unsigned long long xid : {1ull, 79ull, 4294967295ull, 18446744073709551615ull}) {
    SCOPED_TRACE(xid);
    const json taints = device_taints(unhealthy(0, xid));
    ASSERT_EQ(taints.size(), 1u);
    const std::string value = taints[0]["value"];
    EXPECT_EQ(value, "xid-" + std::to_string(xid));
    EXPECT_TRUE(testing::apiserver::is_label_value(value).empty()) << value;
    EXPECT_TRUE(testing::apiserver::is_label_key(taints[0]["key"]).empty());
    const auto slices = build_resource_slices({h200(0)}, {"vgpu.tessera.dev", "node-a", "uid-n"}, 1,
                                              {unhealthy(0, xid)});
    ASSERT_EQ(slices.size(), 1u);
    EXPECT_EQ(testing::apiserver::check_resource_slice_write(slices[0], nullptr), std::nullopt);
  }
}

// kube-apiserver takes at most 64 devices in a slice once one of them has a taint: with a tainted
// device the node's devices go 64 to a slice, every slice accepted; healthy again, 128.
TEST(ResourceSlices, ATaintedNodeIsSplitIntoSlicesOf64) {
  std::vector<GpuInfo> gpus;
  for (unsigned i = 0; i < 130; ++i) gpus.push_back(h200(i));
  const SliceIdentity identity{"vgpu.tessera.dev", "node-a", "uid-n"};
  for (unsigned tainted : {0u, 64u, 129u}) {
    SCOPED_TRACE(tainted);
    const auto slices = build_resource_slices(gpus, identity, 4, {unhealthy(tainted, 79)});
    ASSERT_EQ(slices.size(), 3u);
    EXPECT_EQ(slices[0]["spec"]["devices"].size(), 64u);
    EXPECT_EQ(slices[1]["spec"]["devices"].size(), 64u);
    EXPECT_EQ(slices[2]["spec"]["devices"].size(), 2u);
    size_t taints = 0;
    for (const json& slice : slices) {
      EXPECT_EQ(slice["spec"]["pool"]["resourceSliceCount"], 3);
      EXPECT_EQ(testing::apiserver::check_resource_slice_write(slice, nullptr), std::nullopt);
      for (const json& device : slice["spec"]["devices"]) taints += device.contains("taints");
    }
    EXPECT_EQ(taints, 1u);
  }
  // 64 GPUs with every one tainted: still one slice.
  std::vector<GpuInfo> sixty_four(gpus.begin(), gpus.begin() + 64);
  std::vector<DeviceHealthReport> all_bad;
  for (unsigned i = 0; i < 64; ++i) all_bad.push_back(unhealthy(i, 48));
  const auto full = build_resource_slices(sixty_four, identity, 1, all_bad);
  ASSERT_EQ(full.size(), 1u);
  EXPECT_EQ(testing::apiserver::check_resource_slice_write(full[0], nullptr), std::nullopt);
  // Healthy reports change nothing: 128 to a slice.
  EXPECT_EQ(build_resource_slices(gpus, identity, 4, {healthy(0), healthy(64)}).size(), 2u);
  // A report for another pool (node) is not this node's.
  DeviceHealthReport elsewhere = unhealthy(0, 79);
  elsewhere.pool_name = "node-b";
  EXPECT_EQ(build_resource_slices(gpus, identity, 4, {elsewhere}).size(), 2u);
}

// Through the (ported) API server: a taint on a 100-GPU node splits its one slice in two, the
// taint keeps the time the server gave it while it stays, and recovery brings back one slice
// without taints; every step at the next pool generation and accepted.
TEST(ResourceSlices, PublishTaintsSplitsAndRecovers) {
  FakeApiServer server;
  kube::RetryPolicy retry;
  retry.initial_backoff = std::chrono::milliseconds(1);
  kube::HttpKubeClient kube(server.connection(), retry);
  SlicePublisher publisher(kube, {"vgpu.tessera.dev", "node-a", ""});
  std::vector<GpuInfo> gpus;
  for (unsigned i = 0; i < 100; ++i) gpus.push_back(h200(i));
  auto taint_of = [&](const std::string& device) -> json {
    for (const auto& [name, slice] : server.stored_slices())
      for (const json& entry : slice["spec"]["devices"])
        if (entry["name"] == device) return entry.value("taints", json::array());
    return nullptr;
  };

  ASSERT_EQ(publisher.publish(gpus).message(), "");
  EXPECT_EQ(server.take_writes().size(), 1u);
  EXPECT_EQ(server.stored_slices().size(), 1u);

  // gpu-70 faults (XID 79) at 12:00: two slices of 64 and 36 (update + create), generation 2.
  server.set_time(1764590400);
  ASSERT_EQ(publisher.publish(gpus, {healthy(0), unhealthy(70, 79)}).message(), "");
  auto writes = server.take_writes();
  ASSERT_EQ(writes.size(), 2u);
  EXPECT_EQ(writes[0].method, "PUT");
  EXPECT_EQ(writes[0].body["spec"]["devices"].size(), 64u);
  EXPECT_EQ(writes[1].method, "POST");
  EXPECT_EQ(writes[1].body["spec"]["devices"].size(), 36u);
  EXPECT_EQ(writes[1].body["spec"]["pool"],
            json({{"name", "node-a"}, {"generation", 2}, {"resourceSliceCount", 2}}));
  EXPECT_FALSE(writes[1].body["spec"]["devices"][6]["taints"][0].contains("timeAdded"));
  EXPECT_EQ(taint_of("gpu-70"), json::array({{{"key", "vgpu.tessera.dev/unhealthy"},
                                              {"value", "xid-79"},
                                              {"effect", "NoSchedule"},
                                              {"timeAdded", "2025-12-01T12:00:00Z"}}}));

  // The same health an hour later: nothing to write (the stamped time is the published one).
  server.set_time(1764594000);
  ASSERT_EQ(publisher.publish(gpus, {unhealthy(70, 79)}).message(), "");
  EXPECT_TRUE(server.take_writes().empty());
  EXPECT_EQ(publisher.generation(), 2);

  // gpu-3 faults too: the new taint gets the new time, gpu-70's keeps its own.
  ASSERT_EQ(publisher.publish(gpus, {unhealthy(70, 79), unhealthy(3, 48)}).message(), "");
  writes = server.take_writes();
  ASSERT_EQ(writes.size(), 2u);
  EXPECT_EQ(writes[1].body["spec"]["devices"][6]["taints"][0]["timeAdded"], "2025-12-01T12:00:00Z");
  EXPECT_EQ(taint_of("gpu-70")[0]["timeAdded"], "2025-12-01T12:00:00Z");
  EXPECT_EQ(taint_of("gpu-3")[0]["timeAdded"], "2025-12-01T13:00:00Z");
  EXPECT_EQ(taint_of("gpu-3")[0]["value"], "xid-48");
  EXPECT_EQ(publisher.generation(), 3);

  // A different XID on gpu-70 is a different taint: a new time.
  ASSERT_EQ(publisher.publish(gpus, {unhealthy(70, 94), unhealthy(3, 48)}).message(), "");
  EXPECT_EQ(server.take_writes().size(), 2u);
  EXPECT_EQ(taint_of("gpu-70")[0]["value"], "xid-94");
  EXPECT_EQ(taint_of("gpu-70")[0]["timeAdded"], "2025-12-01T13:00:00Z");

  // Both healthy again: one slice of 100 without taints (update + delete), generation 5.
  ASSERT_EQ(publisher.publish(gpus, {healthy(70), healthy(3)}).message(), "");
  writes = server.take_writes();
  ASSERT_EQ(writes.size(), 2u);
  EXPECT_EQ(writes[0].method, "PUT");
  EXPECT_EQ(writes[0].body["spec"]["devices"].size(), 100u);
  EXPECT_EQ(writes[0].body["spec"]["pool"],
            json({{"name", "node-a"}, {"generation", 5}, {"resourceSliceCount", 1}}));
  EXPECT_EQ(writes[1].method, "DELETE");
  EXPECT_EQ(server.stored_slices().size(), 1u);
  EXPECT_EQ(taint_of("gpu-70"), json::array());
  EXPECT_EQ(taint_of("gpu-3"), json::array());
}

// An API server without DRADeviceTaints (the default before 1.36) drops the taints and stores the
// slice: the publisher sees it, does not rewrite the pool on every publish for them, and tries
// again when the health changes.
TEST(ResourceSlices, TaintsTheApiServerDropsAreNotSentAgainUntilTheHealthChanges) {
  FakeApiServer server;
  server.device_taints_gate = false;
  kube::RetryPolicy retry;
  retry.initial_backoff = std::chrono::milliseconds(1);
  kube::HttpKubeClient kube(server.connection(), retry);
  SlicePublisher publisher(kube, {"vgpu.tessera.dev", "node-a", ""});
  const std::vector<GpuInfo> gpus{h200(0), h200(1)};
  ASSERT_EQ(publisher.publish(gpus).message(), "");
  EXPECT_FALSE(publisher.taints_dropped());

  ASSERT_EQ(publisher.publish(gpus, {unhealthy(1, 79)}).message(), "");
  EXPECT_EQ(publisher.writes(), 1);
  EXPECT_TRUE(publisher.taints_dropped());
  EXPECT_FALSE(server.stored_slices().begin()->second["spec"]["devices"][1].contains("taints"));
  EXPECT_EQ(publisher.generation(), 2);
  server.take_writes();
  for (int i = 0; i < 3; ++i) {  // the reconcile loop's publishes: nothing written
    ASSERT_EQ(publisher.publish(gpus, {unhealthy(1, 79)}).message(), "");
    EXPECT_EQ(publisher.writes(), 0);
  }
  EXPECT_EQ(publisher.generation(), 2);
  EXPECT_TRUE(server.take_writes().empty());

  // Another fault: one more try (dropped again), then quiet again.
  ASSERT_EQ(publisher.publish(gpus, {unhealthy(1, 79), unhealthy(0, 48)}).message(), "");
  EXPECT_EQ(publisher.writes(), 1);
  ASSERT_EQ(publisher.publish(gpus, {unhealthy(1, 79), unhealthy(0, 48)}).message(), "");
  EXPECT_EQ(publisher.writes(), 0);

  // The gate turned on (the API server upgraded) and the devices healthy, then a fault: stored.
  server.device_taints_gate = true;
  ASSERT_EQ(publisher.publish(gpus, {healthy(0), healthy(1)}).message(), "");
  EXPECT_FALSE(publisher.taints_dropped());
  ASSERT_EQ(publisher.publish(gpus, {unhealthy(1, 79)}).message(), "");
  EXPECT_EQ(publisher.writes(), 1);
  EXPECT_FALSE(publisher.taints_dropped());
  EXPECT_EQ(server.stored_slices().begin()->second["spec"]["devices"][1]["taints"][0]["value"],
            "xid-79");
}

TEST(ResourceSlices, PublishReportsApiErrors) {
  FakeApiServer server;
  server.node_name = "elsewhere";
  const kube::KubeConnection c = server.connection();
  kube::RetryPolicy retry;
  retry.initial_backoff = std::chrono::milliseconds(1);
  kube::HttpKubeClient kube(c, retry);
  SlicePublisher publisher(kube, {"vgpu.tessera.dev", "node-a", ""});
  const Status published = publisher.publish({h200(0)});
  EXPECT_EQ(
      published.message(),
      "cannot read the Node's UID: GET /api/v1/nodes/node-a: HTTP 404: nodes \"node-a\" not found");
  EXPECT_EQ(published.code(), StatusCode::kNotFound);
}

// A publisher against `server` whose Node UID is read from the server.
struct PublishFixture {
  explicit PublishFixture(FakeApiServer& server)
      : kube(server.connection(), quick_retry()),
        publisher(kube, {"vgpu.tessera.dev", "node-a", ""}) {}
  static kube::RetryPolicy quick_retry() {
    kube::RetryPolicy retry;
    retry.initial_backoff = std::chrono::milliseconds(1);
    return retry;
  }
  kube::HttpKubeClient kube;
  SlicePublisher publisher;
};

TEST(ResourceSlices, ANodeWithoutAStringUidIsAnErrorAndNothingIsWritten) {
  FakeApiServer server;
  PublishFixture fixture(server);
  const std::pair<const char*, const char*> answers[] = {
      {R"({"kind":"Node","metadata":{"name":"node-a"}})", "nothing"},
      {R"({"kind":"Node"})", "nothing"},
      {R"({"kind":"Node","metadata":{"uid":7}})", "7"},
      {R"({"kind":"Node","metadata":{"uid":""}})", "\"\""},
      {R"({"kind":"Node","metadata":"node-a"})", "nothing"},
      {R"(["not","a","node"])", "nothing"},
      {"not json", "nothing"}};
  for (const auto& [body, shown] : answers) {
    server.node_body = body;
    const Status published = fixture.publisher.publish({h200(0)});
    EXPECT_EQ(published.code(), StatusCode::kInternal) << body;
    EXPECT_EQ(published.message(),
              std::string("GET /api/v1/nodes/node-a: metadata.uid: expected a non-empty string, "
                          "got ") +
                  shown)
        << body;
    EXPECT_TRUE(server.take_writes().empty()) << body;
    EXPECT_TRUE(server.stored_slices().empty()) << body;
  }
  // The UID is read again on the next publish, not kept from a bad answer.
  server.node_body.reset();
  ASSERT_EQ(fixture.publisher.publish({h200(0)}).message(), "");
  const auto stored = server.stored_slices();
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored.begin()->second["metadata"]["ownerReferences"][0]["uid"], "3d7c0b8e-node-uid");
}

TEST(ResourceSlices, ListedItemsWithoutSpecOrOfAnotherShapeAreNotOurs) {
  FakeApiServer server;
  PublishFixture fixture(server);
  const std::map<std::string, json> foreign = {
      {"a-no-spec", {{"kind", "ResourceSlice"}, {"metadata", {{"name", "a-no-spec"}}}}},
      {"b-spec-not-object", {{"metadata", {{"name", "b"}}}, {"spec", "vgpu.tessera.dev"}}},
      {"c-driver-not-string",
       {{"metadata", {{"name", "c"}}}, {"spec", {{"driver", 5}, {"nodeName", "node-a"}}}}},
      {"d-no-node", {{"metadata", {{"name", "d"}}}, {"spec", {{"driver", "vgpu.tessera.dev"}}}}},
      {"e-not-an-object", json::array({1, 2})},
      {"f-null", nullptr}};
  server.slices = foreign;
  ASSERT_EQ(fixture.publisher.publish({h200(0)}).message(), "");
  const auto writes = server.take_writes();
  ASSERT_EQ(writes.size(), 1u);  // ours created; none of the others touched
  EXPECT_EQ(writes[0].method, "POST");
  const auto stored = server.stored_slices();
  for (const auto& [name, item] : foreign) EXPECT_EQ(stored.at(name), item) << name;
  EXPECT_EQ(stored.count("node-a-vgpu.tessera.dev-0"), 1u);
}

TEST(ResourceSlices, OurListedSliceThatCannotBeReadStopsThePublishBeforeAnyWrite) {
  const std::string list =
      "GET /apis/resource.k8s.io/v1/resourceslices?fieldSelector="
      "spec.nodeName%3Dnode-a%2Cspec.driver%3Dvgpu.tessera.dev: items[1].";
  const json ours_spec = {{"driver", "vgpu.tessera.dev"},
                          {"nodeName", "node-a"},
                          {"pool", {{"name", "node-a"}, {"generation", 4}}}};
  const json good = {{"metadata", {{"name", "a-good"}, {"resourceVersion", "9"}}},
                     {"spec", ours_spec}};
  struct Case {
    json metadata;
    json pool;
    std::string error;
  };
  const Case cases[] = {
      {json(), ours_spec["pool"], "metadata.name: expected a non-empty string, got nothing"},
      {{{"resourceVersion", "9"}},
       ours_spec["pool"],
       "metadata.name: expected a non-empty string, got nothing"},
      {{{"name", 12}, {"resourceVersion", "9"}},
       ours_spec["pool"],
       "metadata.name: expected a non-empty string, got 12"},
      {{{"name", "b-bad"}},
       ours_spec["pool"],
       "metadata.resourceVersion: expected a string, got nothing"},
      {{{"name", "b-bad"}, {"resourceVersion", "9"}},
       {{"name", "node-a"}, {"generation", "4"}},
       "spec.pool.generation: expected an integer, got \"4\""},
      {{{"name", "b-bad"}, {"resourceVersion", "9"}},
       {{"name", "node-a"}, {"generation", 4.5}},
       "spec.pool.generation: expected an integer, got 4.5"},
      {{{"name", "b-bad"}, {"resourceVersion", "9"}},
       {{"name", "node-a"}},
       "spec.pool.generation: expected an integer, got nothing"},
      {{{"name", "b-bad"}, {"resourceVersion", "9"}},
       "node-a",
       "spec.pool.generation: expected an integer, got nothing"},
      {{{"name", "b-bad"}, {"resourceVersion", "9"}},
       {{"name", "node-a"}, {"generation", 18446744073709551615ull}},
       "spec.pool.generation: expected an integer, got 18446744073709551615"},
  };
  for (const Case& c : cases) {
    FakeApiServer server;
    PublishFixture fixture(server);
    json bad = {{"spec", ours_spec}};
    bad["spec"]["pool"] = c.pool;
    if (!c.metadata.is_null()) bad["metadata"] = c.metadata;
    server.slices = {{"a-good", good}, {"b-bad", bad}};
    const Status published = fixture.publisher.publish({h200(0)});
    EXPECT_EQ(published.code(), StatusCode::kInternal) << bad.dump();
    EXPECT_EQ(published.message(), list + c.error) << bad.dump();
    EXPECT_TRUE(server.take_writes().empty()) << bad.dump();
    const auto stored = server.stored_slices();
    EXPECT_EQ(stored.at("a-good"), good);
    EXPECT_EQ(stored.at("b-bad"), bad);
    EXPECT_EQ(fixture.publisher.generation(), 0);
  }
}

TEST(ResourceSlices, PublishedTaintsOfAnotherShapeAreIgnoredNotRead) {
  FakeApiServer server;
  PublishFixture fixture(server);
  // A slice of ours (by driver and node) as someone left it: taints that are no list, a device
  // without a name, a taint that is no object. Its published taints are skipped, not read; the
  // publish makes the slices the health says and removes this one.
  server.slices["node-a-vgpu.tessera.dev-7"] = {
      {"metadata", {{"name", "node-a-vgpu.tessera.dev-7"}, {"resourceVersion", "3"}}},
      {"spec",
       {{"driver", "vgpu.tessera.dev"},
        {"nodeName", "node-a"},
        {"pool", {{"name", "node-a"}, {"generation", 2}, {"resourceSliceCount", 1}}},
        {"devices",
         json::array({{{"name", "gpu-0"}, {"taints", "unhealthy"}},
                      {{"taints", json::array({{{"key", "k"}}})}},
                      {{"name", 3}, {"taints", json::array({1})}},
                      {{"name", "gpu-1"}, {"taints", json::array({7, {{"key", 1}}})}}})}}}};
  DeviceHealthReport unhealthy;
  unhealthy.device_name = "gpu-0";
  unhealthy.state = DeviceHealthState::kUnhealthy;
  ASSERT_EQ(fixture.publisher.publish({h200(0), h200(1)}, {unhealthy}).message(), "");
  const auto writes = server.take_writes();
  ASSERT_EQ(writes.size(), 2u);
  EXPECT_EQ(writes[0].method, "POST");
  EXPECT_EQ(writes[0].body["spec"]["pool"]["generation"], 3);
  EXPECT_EQ(writes[0].body["spec"]["devices"][0]["taints"],
            json::array({{{"key", kUnhealthyTaintKey}, {"effect", kUnhealthyTaintEffect}}}));
  EXPECT_FALSE(writes[0].body["spec"]["devices"][1].contains("taints"));
  EXPECT_EQ(writes[1].method, "DELETE");
  EXPECT_EQ(writes[1].path, "/apis/resource.k8s.io/v1/resourceslices/node-a-vgpu.tessera.dev-7");
}

// Real GPUs' memory as NVML reports it, in MiB: H200, H100 80GB, A100 40GB and 80GB, L40S, L4, T4.
constexpr uint64_t kGpuMebibytes[] = {143771, 81559, 40960, 81920, 46068, 23034, 15360};

// What the scheduler's allocator makes of a memory request on a device with this capacity
// (k8s.io/dynamic-resource-allocation, structured allocator, package incubating:
// calculateConsumedCapacity, roundUpRange, violatesPolicy), for whole-number quantities.
// nullopt = the request violates the policy: the device cannot be allocated.
std::optional<uint64_t> consumed_memory(const json& capacity, std::optional<uint64_t> request) {
  auto bytes = [](const json& q) { return *tessera::parse_byte_quantity(q.get<std::string>()); };
  const json& policy = capacity["requestPolicy"];
  if (!request) return bytes(policy["default"]);  // fillEmptyRequest
  const json& range = policy["validRange"];
  const uint64_t min = bytes(range["min"]), step = bytes(range["step"]), max = bytes(range["max"]);
  const uint64_t consumed = *request < min ? min : min + (*request - min + step - 1) / step * step;
  if (consumed == bytes(policy["default"])) return consumed;
  if (consumed > max) return std::nullopt;
  return consumed;
}

TEST(ResourceSlices, EveryGpuSizeIsAcceptedByTheApiServerRules) {
  for (const uint64_t mebibytes : kGpuMebibytes) {
    GpuInfo gpu = h200(0);
    gpu.memory_bytes = mebibytes << 20;
    const auto slices = build_resource_slices({gpu}, {"vgpu.tessera.dev", "node-a", "uid-n"}, 1);
    ASSERT_EQ(slices.size(), 1u);
    EXPECT_EQ(testing::apiserver::aggregate(testing::apiserver::validate_resource_slice(slices[0])),
              "")
        << mebibytes << " MiB";
    const json& memory = slices[0]["spec"]["devices"][0]["capacity"]["memory"];
    EXPECT_EQ(memory["value"], std::to_string(mebibytes << 20));
    // A claim naming no memory, or the whole total, gets all of it; a share rounds up to a
    // whole MiB from 256Mi; more than the GPU has is not allocatable.
    EXPECT_EQ(consumed_memory(memory, std::nullopt), mebibytes << 20) << mebibytes;
    EXPECT_EQ(consumed_memory(memory, mebibytes << 20), mebibytes << 20) << mebibytes;
    EXPECT_EQ(consumed_memory(memory, 8ull << 30), 8ull << 30);
    EXPECT_EQ(consumed_memory(memory, (8ull << 30) + 1), (8ull << 30) + (1 << 20));
    EXPECT_EQ(consumed_memory(memory, 100ull << 20), 256ull << 20);
    EXPECT_EQ(consumed_memory(memory, (mebibytes + 1) << 20), std::nullopt);
    EXPECT_EQ(node_devices({gpu})[0].memory_bytes, mebibytes << 20);
  }
}

TEST(ResourceSlices, ATotalOffTheMebibyteIsPublishedInWholeMebibytes) {
  GpuInfo gpu = h200(0);
  gpu.memory_bytes = (143771ull << 20) + 12345;
  const auto slices = build_resource_slices({gpu}, {"vgpu.tessera.dev", "node-a", "uid-n"}, 1);
  EXPECT_EQ(testing::apiserver::aggregate(testing::apiserver::validate_resource_slice(slices[0])),
            "");
  const json& memory = slices[0]["spec"]["devices"][0]["capacity"]["memory"];
  EXPECT_EQ(memory["value"], std::to_string(143771ull << 20));
  EXPECT_EQ(consumed_memory(memory, 143771ull << 20), 143771ull << 20);
  EXPECT_EQ(node_devices({gpu})[0].memory_bytes, 143771ull << 20);
  // GPUs too small for a 256Mi minimum still publish a valid slice.
  for (const uint64_t bytes : {200ull << 20, 1ull << 20, 4096ull}) {
    gpu.memory_bytes = bytes;
    const auto small = build_resource_slices({gpu}, {"vgpu.tessera.dev", "node-a", "uid-n"}, 1);
    EXPECT_EQ(testing::apiserver::aggregate(testing::apiserver::validate_resource_slice(small[0])),
              "")
        << bytes;
  }
}

// The simulated GPU in every real size, through NVML, published to the validating API server.
TEST(ResourceSlices, SimulatedGpusOfEverySizeArePublishedAndAccepted) {
  const std::string state = std::filesystem::temp_directory_path() /
                            ("agent-simgpu-sizes-" + std::to_string(getpid()) + ".state");
  std::filesystem::remove(state);  // a file an earlier process of this pid left (another layout)
  setenv("SIMGPU_STATE", state.c_str(), 1);
  setenv("SIMGPU_DEVICES",
         "name=NVIDIA H200,memory=143771Mi,sms=132,cc=9.0;"
         "name=NVIDIA H100 80GB HBM3,memory=81559Mi,sms=132,cc=9.0;"
         "name=NVIDIA A100-SXM4-40GB,memory=40960Mi,sms=108,cc=8.0;"
         "name=NVIDIA A100-SXM4-80GB,memory=81920Mi,sms=108,cc=8.0;"
         "name=NVIDIA L40S,memory=46068Mi,sms=142,cc=8.9;"
         "name=NVIDIA L4,memory=23034Mi,sms=58,cc=8.9;"
         "name=Tesla T4,memory=15360Mi,sms=40,cc=7.5",
         1);
  Result<std::vector<GpuInfo>> listed = list_gpus();
  ASSERT_EQ(listed.status().message(), "");
  const std::vector<GpuInfo> gpus = std::move(listed).value();
  std::filesystem::remove(state);
  ASSERT_EQ(gpus.size(), 7u);
  FakeApiServer server;
  kube::RetryPolicy retry;
  retry.initial_backoff = std::chrono::milliseconds(1);
  kube::HttpKubeClient kube(server.connection(), retry);
  SlicePublisher publisher(kube, {"vgpu.tessera.dev", "node-a", ""});
  ASSERT_EQ(publisher.publish(gpus).message(), "");
  const auto stored = server.stored_slices();
  ASSERT_EQ(stored.size(), 1u);
  const json& devices = stored.begin()->second.at("spec").at("devices");
  ASSERT_EQ(devices.size(), 7u);
  for (size_t i = 0; i < gpus.size(); ++i)
    EXPECT_EQ(devices[i]["capacity"]["memory"]["value"], std::to_string(gpus[i].memory_bytes))
        << gpus[i].product_name;
}

// The slices the agent published before: refused by the API server on the H200, the H100, the
// L40S and the L4 (a total that is not a whole number of 256Mi steps), as kube-apiserver does.
TEST(ResourceSlices, TheFormerQuarterGibibyteStepIsRefusedWhereTheApiServerRefusesIt) {
  for (const uint64_t mebibytes : kGpuMebibytes) {
    GpuInfo gpu = h200(0);
    gpu.memory_bytes = mebibytes << 20;
    auto slices = build_resource_slices({gpu}, {"vgpu.tessera.dev", "node-a", "uid-n"}, 1);
    slices[0]["spec"]["devices"][0]["capacity"]["memory"]["requestPolicy"]["validRange"]["step"] =
        "256Mi";
    const std::string errors =
        testing::apiserver::aggregate(testing::apiserver::validate_resource_slice(slices[0]));
    if ((mebibytes - 256) % 256 == 0) {
      EXPECT_EQ(errors, "") << mebibytes;
    } else {
      EXPECT_EQ(errors,
                "spec.devices[0].capacity[memory].requestPolicy.validRange.step: Invalid value: "
                "\"" +
                    std::to_string(mebibytes << 20) +
                    "\": value is not a multiple of a given step (256Mi) from (256Mi)")
          << mebibytes;
    }
  }
}

// The simulated driver's NVML (SIMGPU_LIB_DIR is on LD_LIBRARY_PATH for this test).
TEST(GpuInfo, ListsTheSimulatedGpus) {
  const std::string state = std::filesystem::temp_directory_path() /
                            ("agent-simgpu-" + std::to_string(getpid()) + ".state");
  setenv("SIMGPU_STATE", state.c_str(), 1);
  setenv("SIMGPU_DEVICES",
         "name=NVIDIA H200,memory=143771Mi,sms=132,cc=9.0;name=NVIDIA "
         "A100-SXM4-80GB,memory=81920Mi,sms=108,cc=8.0",
         1);
  std::vector<GpuInfo> gpus;
  Result<std::vector<GpuInfo>> listed = list_gpus();
  ASSERT_EQ(listed.status().message(), "");
  gpus = *listed;
  std::filesystem::remove(state);
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0].product_name, "NVIDIA H200");
  EXPECT_EQ(gpus[0].architecture, "Hopper");
  EXPECT_EQ(gpus[0].cc_major, 9);
  EXPECT_EQ(gpus[0].memory_bytes, 143771ull << 20);
  EXPECT_EQ(gpus[0].uuid.rfind("GPU-", 0), 0u);
  EXPECT_EQ(gpus[0].driver_version, "580.159.04");
  EXPECT_EQ(gpus[0].pci_bus_id.size(), 12u) << gpus[0].pci_bus_id;
  EXPECT_EQ(gpus[1].architecture, "Ampere");
  EXPECT_NE(gpus[0].minor, gpus[1].minor);
  const auto devices = node_devices(gpus);
  EXPECT_EQ(devices[1].name, "gpu-" + std::to_string(gpus[1].minor));
  EXPECT_EQ(devices[1].uuid, gpus[1].uuid);
}

}  // namespace
}  // namespace tessera::agent
