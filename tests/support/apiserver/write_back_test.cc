// kube-apiserver's write-back (apiserver/write_back.h) against what the real server stores:
// defaults, canonical quantities, empty structs, server metadata, status updates, 409s. Rules from
// kubernetes/kubernetes pkg/apis/resource/v1/defaults.go (16913111deb1a4c4ff76f4ba7ffd9ebef397a303)
// and pkg/registry/resource/resourceclaim/strategy.go (0021a864a65a17f2ad15b60545ef41fdfc30cc4c).
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

TEST(WriteBack, AStaleResourceVersionIsAConflict) {
  const json stored = {{"metadata", {{"resourceVersion", "5"}}}};
  EXPECT_TRUE(
      check_resource_version({{"metadata", {{"resourceVersion", "5"}}}}, stored, "x").is_ok());
  EXPECT_TRUE(check_resource_version({{"metadata", json::object()}}, stored, "x").is_ok());
  const Status stale =
      check_resource_version({{"metadata", {{"resourceVersion", "4"}}}}, stored, "x");
  EXPECT_EQ(stale.code(), StatusCode::kAlreadyExists);
  EXPECT_NE(stale.message().find("the object has been modified"), std::string::npos);
}

}  // namespace
}  // namespace tessera::testing::apiserver
