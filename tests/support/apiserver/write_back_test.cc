// kube-apiserver's write-back (apiserver/write_back.h) against what the real server stores:
// defaults, canonical quantities, empty structs, server metadata, status updates, 409s. Rules from
// kubernetes/kubernetes pkg/apis/resource/v1/defaults.go
// (16913111deb1a4c4ff76f4ba7ffd9ebef397a303), pkg/registry/resource/resourceclaim/strategy.go
// (0021a864a65a17f2ad15b60545ef41fdfc30cc4c), pkg/registry/core/node/strategy.go
// (6785e9ed401a526cfb4ae33d498b088e27237ad1) and pkg/apis/core/v1/defaults.go
// (e34b0935e09e39e5e7fb74b8f6ad141107d3b90e).
#include "apiserver/write_back.h"

#include <gtest/gtest.h>

namespace tessera::testing::apiserver {
namespace {

using nlohmann::json;

ServerFields fields(const std::string& version) {
  ServerFields f;
  f.uid = "uid-1";
  f.resource_version = version;
  f.timestamp = "2026-12-02T00:00:00Z";
  f.manager = "tessera-webhook";
  return f;
}

json template_as_sent() {
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceClaimTemplate"},
          {"metadata", {{"name", "tessera-vgpu-1-m5g"}, {"namespace", "team-a"}}},
          {"spec",
           {{"spec",
             {{"devices",
               {{"requests",
                 {{{"name", "gpu"},
                   {"exactly",
                    {{"deviceClassName", "vgpu.tessera.dev"},
                     {"capacity",
                      {{"requests", {{"memory", "5000000000"}, {"cores", "30"}}}}}}}}}}}}}}}}};
}

// The comparison template_writer.cc made before (the stored spec byte for byte with the one sent)
// fails against what the server stores; by meaning the two are the same.
TEST(WriteBack, AByteForByteComparisonOfATemplateFails) {
  const json sent = template_as_sent();
  Result<json> stored = write_back(sent, nullptr, fields("7"));
  ASSERT_TRUE(stored.is_ok()) << stored.status().message();
  EXPECT_NE((*stored)["spec"].dump(), sent["spec"].dump());
  EXPECT_EQ((*stored)["spec"]["metadata"], json::object());  // Go writes the empty struct
  const json& exactly = (*stored)["spec"]["spec"]["devices"]["requests"][0]["exactly"];
  EXPECT_EQ(exactly["capacity"]["requests"]["memory"], "5G");
  EXPECT_EQ(exactly["capacity"]["requests"]["cores"], "30");
  EXPECT_EQ(exactly["allocationMode"], "ExactCount");
  EXPECT_EQ(exactly["count"], 1);
  const json& metadata = (*stored)["metadata"];
  EXPECT_EQ(metadata["uid"], "uid-1");
  EXPECT_EQ(metadata["resourceVersion"], "7");
  EXPECT_EQ(metadata["generation"], 1);
  EXPECT_EQ(metadata["creationTimestamp"], "2026-12-02T00:00:00Z");
  EXPECT_EQ(metadata["managedFields"][0]["manager"], "tessera-webhook");
  // Written again as stored, nothing changes but the resourceVersion.
  Result<json> again = write_back(*stored, &*stored, fields("8"));
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ((*again)["spec"], (*stored)["spec"]);
  EXPECT_EQ((*again)["metadata"]["generation"], 1);
}

TEST(WriteBack, AQuantityThatDoesNotParseIsRefusedNamingTheField) {
  json sent = template_as_sent();
  sent["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"]["memory"] =
      "8Gx";
  Result<json> stored = write_back(sent, nullptr, fields("7"));
  ASSERT_FALSE(stored.is_ok());
  EXPECT_NE(stored.status().message().find(
                "spec.spec.devices.requests[0].exactly.capacity.requests.memory"),
            std::string::npos)
      << stored.status().message();
}

// A claim's status is not written by a create or an update of the claim; a status update writes
// it (canonical consumedCapacity), moving the resourceVersion and not the generation.
TEST(WriteBack, ClaimStatusOnlyThroughTheStatusUpdate) {
  json claim = {
      {"apiVersion", "resource.k8s.io/v1"},
      {"kind", "ResourceClaim"},
      {"metadata", {{"name", "train"}, {"namespace", "tenants"}}},
      {"spec",
       {{"devices",
         {{"requests",
           {{{"name", "gpu"}, {"exactly", {{"deviceClassName", "vgpu.tessera.dev"}}}}}}}}}},
      {"status",
       {{"allocation",
         {{"devices",
           {{"results",
             {{{"request", "gpu"}, {"consumedCapacity", {{"memory", "8192Mi"}}}}}}}}}}}}};
  Result<json> created = write_back(claim, nullptr, fields("10"));
  ASSERT_TRUE(created.is_ok());
  EXPECT_FALSE(created->contains("status"));
  EXPECT_EQ((*created)["spec"]["devices"]["requests"][0]["exactly"]["count"], 1);
  Result<json> with_status = write_back_status(claim, *created, "11");
  ASSERT_TRUE(with_status.is_ok());
  EXPECT_EQ(
      (*with_status)["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"]["memory"],
      "8Gi");
  EXPECT_EQ((*with_status)["metadata"]["resourceVersion"], "11");
  EXPECT_EQ((*with_status)["metadata"]["generation"], 1);
  Result<json> updated = write_back(claim, &*with_status, fields("12"));
  ASSERT_TRUE(updated.is_ok());
  EXPECT_EQ((*updated)["status"], (*with_status)["status"]);
}

// A ResourceSlice: capacities canonical, a taint dated, the generation moved by a spec change.
TEST(WriteBack, SliceCapacitiesCanonicalAndGenerationCountsSpecChanges) {
  json slice = {{"apiVersion", "resource.k8s.io/v1"},
                {"kind", "ResourceSlice"},
                {"metadata", {{"name", "node-a-vgpu.tessera.dev-0"}}},
                {"spec",
                 {{"driver", "vgpu.tessera.dev"},
                  {"devices",
                   {{{"name", "gpu-0"},
                     {"capacity",
                      {{"memory",
                        {{"value", "268435456"},
                         {"requestPolicy",
                          {{"default", "268435456"},
                           {"validRange", {{"min", "1048576"}, {"step", "1Mi"}}}}}}},
                       {"cores", {{"value", "1000"}}}}},
                     {"taints", {{{"key", "k"}, {"effect", "NoSchedule"}}}}}}}}}};
  Result<json> stored = write_back(slice, nullptr, fields("3"));
  ASSERT_TRUE(stored.is_ok()) << stored.status().message();
  const json& device = (*stored)["spec"]["devices"][0];
  EXPECT_EQ(device["capacity"]["memory"]["value"], "268435456");  // a decimal text stays decimal
  EXPECT_EQ(device["capacity"]["memory"]["requestPolicy"]["validRange"]["min"], "1048576");
  EXPECT_EQ(device["capacity"]["cores"]["value"], "1k");
  EXPECT_EQ(device["taints"][0]["timeAdded"], "2026-12-02T00:00:00Z");
  EXPECT_NE((*stored)["spec"].dump(), slice["spec"].dump());
  json changed = *stored;
  changed["spec"]["devices"][0]["capacity"]["cores"]["value"] = "100";
  Result<json> updated = write_back(changed, &*stored, fields("4"));
  ASSERT_TRUE(updated.is_ok());
  EXPECT_EQ((*updated)["metadata"]["generation"], 2);
  EXPECT_EQ((*updated)["metadata"]["uid"], "uid-1");
}

// Counters are Quantities too: stored canonical, in the counter sets and in what devices consume.
TEST(WriteBack, CounterValuesAreStoredCanonical) {
  const json counters = {{"memory", {{"value", "73014444032"}}},
                         {"memory-slice-0", {{"value", 1}}},
                         {"multiprocessors", {{"value", "60"}}},
                         {"copy-engines", {{"value", "3000"}}}};
  json counter_slice = {
      {"apiVersion", "resource.k8s.io/v1"},
      {"kind", "ResourceSlice"},
      {"metadata", {{"name", "node-a-gpu.nvidia.com-counters"}}},
      {"spec",
       {{"driver", "gpu.nvidia.com"},
        {"sharedCounters", {{{"name", "gpu-0-counter-set"}, {"counters", counters}}}}}}};
  Result<json> stored = write_back(counter_slice, nullptr, fields("3"));
  ASSERT_TRUE(stored.is_ok()) << stored.status().message();
  const json& set = (*stored)["spec"]["sharedCounters"][0]["counters"];
  EXPECT_EQ(set["memory"]["value"], "73014444032");
  EXPECT_EQ(set["memory-slice-0"]["value"], "1");
  EXPECT_EQ(set["copy-engines"]["value"], "3k");

  json device_slice = counter_slice;
  device_slice["spec"].erase("sharedCounters");
  device_slice["spec"]["devices"] = {
      {{"name", "gpu-0-mig-3g71gb-9-0"},
       {"consumesCounters",
        {{{"counterSet", "gpu-0-counter-set"},
          {"counters",
           {{"memory", {{"value", "71168Mi"}}}, {"decoders", {{"value", "1000"}}}}}}}}}};
  stored = write_back(device_slice, nullptr, fields("4"));
  ASSERT_TRUE(stored.is_ok()) << stored.status().message();
  const json& consumed = (*stored)["spec"]["devices"][0]["consumesCounters"][0]["counters"];
  EXPECT_EQ(consumed["memory"]["value"], "71168Mi");
  EXPECT_EQ(consumed["decoders"]["value"], "1k");

  device_slice["spec"]["devices"][0]["consumesCounters"][0]["counters"]["memory"]["value"] = "lots";
  const Result<json> refused = write_back(device_slice, nullptr, fields("5"));
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(
      refused.status().message().find("spec.devices[0].consumesCounters[0].counters.memory.value"),
      std::string::npos)
      << refused.status().message();
}

TEST(WriteBack, AStaleResourceVersionIsAConflict) {
  const json stored = {{"metadata", {{"resourceVersion", "5"}}}};
  EXPECT_TRUE(
      check_resource_version({{"metadata", {{"resourceVersion", "5"}}}}, stored, "x").is_ok());
  EXPECT_TRUE(check_resource_version({{"metadata", json::object()}}, stored, "x").is_ok());
  const Status stale =
      check_resource_version({{"metadata", {{"resourceVersion", "4"}}}}, stored, "x");
  EXPECT_EQ(stale.code(), StatusCode::kAlreadyExists);
  EXPECT_NE(stale.message().find("the object has been modified"), std::string::npos);
  // NewConflict names the qualified resource when it is given.
  EXPECT_EQ(check_resource_version({{"metadata", {{"resourceVersion", "4"}}}}, stored, "x",
                                   "resourceslices.resource.k8s.io")
                .message(),
            "Operation cannot be fulfilled on resourceslices.resource.k8s.io \"x\": the object has "
            "been modified; please apply your changes to the latest version and try again");
}

// A Node as kubelet registers it (pkg/registry/core/node/strategy.go @6785e9ed,
// pkg/apis/core/v1/defaults.go @e34b0935): every field may be set on create but
// spec.configSource and status.config; allocatable defaults to capacity; quantities canonical;
// Go's zero-valued structs present; no generation. An update keeps the stored status.
TEST(WriteBack, ANodeGetsItsDefaultsEmptyStructsAndNoGeneration) {
  const json registered = {
      {"apiVersion", "v1"},
      {"kind", "Node"},
      {"metadata", {{"name", "node-a"}}},
      {"spec", {{"configSource", {{"configMap", {{"name", "kubelet"}}}}}}},
      {"status",
       {{"capacity", {{"memory", "1048576Ki"}, {"cpu", "4000m"}}}, {"config", json::object()}}}};
  Result<json> stored = write_back(registered, nullptr, fields("20"));
  ASSERT_TRUE(stored.is_ok()) << stored.status().message();
  EXPECT_EQ((*stored)["spec"], json::object());
  const json& status = (*stored)["status"];
  EXPECT_FALSE(status.contains("config"));
  EXPECT_EQ(status["capacity"]["memory"], "1Gi");
  EXPECT_EQ(status["capacity"]["cpu"], "4");
  EXPECT_EQ(status["allocatable"], status["capacity"]);
  EXPECT_EQ(status["daemonEndpoints"], json::parse(R"({"kubeletEndpoint":{"Port":0}})"));
  EXPECT_EQ(status["nodeInfo"].size(), 10u);
  EXPECT_EQ(status["nodeInfo"]["architecture"], "");
  EXPECT_FALSE((*stored)["metadata"].contains("generation"));
  EXPECT_EQ((*stored)["metadata"]["uid"], "uid-1");

  json relabelled = *stored;
  relabelled["metadata"]["labels"] = {{"gpu", "h200"}};
  relabelled["status"]["capacity"]["memory"] = "2Gi";  // the main resource never writes status
  Result<json> updated = write_back(relabelled, &*stored, fields("21"));
  ASSERT_TRUE(updated.is_ok()) << updated.status().message();
  EXPECT_EQ((*updated)["status"], (*stored)["status"]);
  EXPECT_EQ((*updated)["metadata"]["labels"]["gpu"], "h200");
  EXPECT_EQ((*updated)["metadata"]["resourceVersion"], "21");

  json bad = registered;
  bad["status"]["capacity"]["memory"] = "lots";
  Result<json> refused = write_back(bad, nullptr, fields("22"));
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("status.capacity.memory"), std::string::npos)
      << refused.status().message();
}

// Each status update of a writer is its one managedFields entry (subresource "status"), dated
// by the last update; the entries of others are kept.
TEST(WriteBack, AStatusUpdateIsItsWritersOneManagedFieldsEntry) {
  const json claim = {{"apiVersion", "resource.k8s.io/v1"},
                      {"kind", "ResourceClaim"},
                      {"metadata", {{"name", "train"}, {"namespace", "tenants"}}},
                      {"spec", json::object()}};
  Result<json> created = write_back(claim, nullptr, fields("30"));
  ASSERT_TRUE(created.is_ok());
  json posted = *created;
  posted["status"]["reservedFor"] = {{{"resource", "pods"}, {"name", "a"}, {"uid", "uid-a"}}};
  Result<json> first =
      write_back_status(posted, *created, "31", {"kube-scheduler", "2026-12-02T00:00:01Z"});
  ASSERT_TRUE(first.is_ok());
  Result<json> second =
      write_back_status(posted, *first, "32", {"kube-scheduler", "2026-12-02T00:00:02Z"});
  ASSERT_TRUE(second.is_ok());
  const json& entries = (*second)["metadata"]["managedFields"];
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0]["manager"], "tessera-webhook");  // the create's
  EXPECT_EQ(entries[1]["manager"], "kube-scheduler");
  EXPECT_EQ(entries[1]["subresource"], "status");
  EXPECT_EQ(entries[1]["time"], "2026-12-02T00:00:02Z");
  EXPECT_EQ((*second)["metadata"]["resourceVersion"], "32");
  EXPECT_EQ((*second)["metadata"]["generation"], 1);
  // Without a writer the entries are left as they were (fixtures that only need the status).
  Result<json> anonymous = write_back_status(posted, *second, "33");
  ASSERT_TRUE(anonymous.is_ok());
  EXPECT_EQ((*anonymous)["metadata"]["managedFields"], entries);
}

}  // namespace
}  // namespace tessera::testing::apiserver
