// `tessera shares --cluster`'s reading of ResourceClaims (views/cluster_shares.h): the shares of
// Tessera's driver from the claims as kube-apiserver stores them (claim_fixture.h's written_claim:
// resource.k8s.io/v1 with consumable capacity), other drivers' results and unallocated claims
// left out, a field that is not what the server stores refused by name, and the table, wide, json
// and yaml renderings.
#include "views/cluster_shares.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "apiserver/claim_fixture.h"
#include "tessera/vgpu_config/driver_name.h"
#include "views/shares_view.h"

namespace tessera::cli {
namespace {

using agent::testing::FixtureShare;
using agent::testing::written_claim;
using nlohmann::json;

// 2026-11-30T01:00:00Z: an hour after written_claim's creationTimestamp.
constexpr int64_t kNow = 1796000400000;

json claims_of_three_nodes() {
  json train =
      written_claim("train", "uid-train",
                    {{"gpu", "gpu-0", "s-0", "8Gi", "30"}, {"gpu", "gpu-1", "s-1", "8Gi", "30"}},
                    json::array(), "node-a");
  json infer = written_claim("infer", "uid-infer", {{"gpu", "gpu-2", "", "4Gi", ""}}, json::array(),
                             "node-b");
  infer["status"]["reservedFor"] =
      json::array({{{"resource", "pods"}, {"name", "infer-0"}, {"uid", "u0"}},
                   {{"resource", "pods"}, {"name", "infer-1"}, {"uid", "u1"}}});
  // Another driver's claim on node-b, and a claim the scheduler has not allocated yet.
  json other =
      written_claim("nic", "uid-nic", {{"nic", "eth-0", "", "", ""}}, json::array(), "node-b");
  other["status"]["allocation"]["devices"]["results"][0]["driver"] = "nic.example.com";
  json pending = written_claim("pending", "uid-pending", {{"gpu", "gpu-0", "", "1Gi", ""}});
  pending.erase("status");
  for (json* claim : {&train, &infer, &other, &pending}) {
    claim->erase("kind");  // as a list's items are
    claim->erase("apiVersion");
  }
  return json::array({infer, other, pending, train});
}

TEST(ClusterShares, OneSharePerResultOfTesserasDriverWithItsNodeCapacityAndPods) {
  const Result<std::vector<ClusterShare>> shares =
      cluster_shares_from_claims(claims_of_three_nodes(), vgpu_config::kDriverName);
  ASSERT_TRUE(shares.is_ok()) << shares.status().message();
  ASSERT_EQ(shares->size(), 3u);
  const ClusterShare& infer = (*shares)[0];
  EXPECT_EQ(infer.namespace_name, "tenants");
  EXPECT_EQ(infer.claim, "infer");
  EXPECT_EQ(infer.claim_uid, "uid-infer");
  EXPECT_EQ(infer.node, "node-b");
  EXPECT_EQ(infer.device, "gpu-2");
  EXPECT_EQ(infer.memory, "4Gi");
  EXPECT_EQ(infer.cores, "");
  EXPECT_EQ(infer.share_id, "");
  ASSERT_EQ(infer.reserved_for.size(), 2u);
  EXPECT_EQ(infer.reserved_for[1].name, "infer-1");
  EXPECT_EQ((*shares)[1].claim, "train");
  EXPECT_EQ((*shares)[1].device, "gpu-0");
  EXPECT_EQ((*shares)[1].share_id, "s-0");
  EXPECT_EQ((*shares)[1].cores, "30");
  EXPECT_EQ((*shares)[2].device, "gpu-1");
  EXPECT_EQ((*shares)[2].node, "node-a");
  EXPECT_EQ((*shares)[2].reserved_for[0].name, "pod-train");
}

TEST(ClusterShares, AnAllocationPinnedToNoSingleNodeHasNoNode) {
  json claim = written_claim("multi", "uid", {{"gpu", "gpu-0", "", "1Gi", ""}});
  claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]
       ["values"] = json::array({"node-a", "node-b"});
  const Result<std::vector<ClusterShare>> shares =
      cluster_shares_from_claims(json::array({claim}), vgpu_config::kDriverName);
  ASSERT_TRUE(shares.is_ok()) << shares.status().message();
  ASSERT_EQ(shares->size(), 1u);
  EXPECT_EQ((*shares)[0].node, "");
  EXPECT_NE(
      render_cluster_table(*shares, kNow, false).find("tenants     multi   -      gpu-0    1Gi"),
      std::string::npos)
      << render_cluster_table(*shares, kNow, false);
}

TEST(ClusterShares, AFieldTheServerWouldNotStoreIsRefusedByNameAndValue) {
  const auto refusal = [](const json& claim) {
    const Result<std::vector<ClusterShare>> shares =
        cluster_shares_from_claims(json::array({claim}), vgpu_config::kDriverName);
    return shares.is_ok() ? std::string("accepted") : shares.status().message();
  };
  json base = written_claim("train", "uid", {{"gpu", "gpu-0", "s", "8Gi", "30"}});
  json device = base;
  device["status"]["allocation"]["devices"]["results"][0]["device"] = 5;
  EXPECT_EQ(refusal(device),
            "ResourceClaim tenants/train: status.allocation.devices.results[0].device is 5, not a "
            "non-empty string");
  json memory = base;
  memory["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"]["memory"] = 8;
  EXPECT_EQ(refusal(memory),
            "ResourceClaim tenants/train: status.allocation.devices.results[0].consumedCapacity."
            "memory is 8, not a string");
  json reserved = base;
  reserved["status"]["reservedFor"] = "pod";
  EXPECT_EQ(refusal(reserved),
            "ResourceClaim tenants/train: status.reservedFor is \"pod\", not an array");
  json nameless = base;
  nameless["metadata"].erase("name");
  EXPECT_EQ(refusal(nameless),
            "ResourceClaim items[0]: metadata.name is nothing, not a non-empty string");
  EXPECT_EQ(cluster_shares_from_claims(json::object(), vgpu_config::kDriverName).status().message(),
            "the ResourceClaim list's items are {}, not an array");
}

TEST(ClusterShares, TableAndWideColumns) {
  const std::vector<ClusterShare> shares =
      cluster_shares_from_claims(claims_of_three_nodes(), vgpu_config::kDriverName).value();
  EXPECT_EQ(render_cluster_table(shares, kNow, false),
            "NAMESPACE   CLAIM   NODE     DEVICE   MEMORY   CORES   PODS              AGE\n"
            "tenants     infer   node-b   gpu-2    4Gi      -       infer-0,infer-1   60m\n"
            "tenants     train   node-a   gpu-0    8Gi      30      pod-train         60m\n"
            "tenants     train   node-a   gpu-1    8Gi      30      pod-train         60m\n");
  const std::string wide = render_cluster_table(shares, kNow, true);
  EXPECT_EQ(wide.substr(0, wide.find('\n')),
            "NAMESPACE   CLAIM   NODE     DEVICE   MEMORY   CORES   PODS              AGE   "
            "REQUEST   POOL     SHARE-ID   CLAIM-UID");
  EXPECT_NE(wide.find("60m   gpu       node-a   s-1        uid-train\n"), std::string::npos)
      << wide;
  EXPECT_EQ(render_cluster_table({}, kNow, false), "");
}

TEST(ClusterShares, JsonAndYamlAreOneDocumentWithEveryFieldAndReadBackTheSame) {
  const std::vector<ClusterShare> shares =
      cluster_shares_from_claims(claims_of_three_nodes(), vgpu_config::kDriverName).value();
  const json document = json::parse(render_cluster_shares(shares, "json", kNow).value());
  ASSERT_EQ(document["shares"].size(), 3u);
  const json& infer = document["shares"][0];
  std::vector<std::string> keys;
  for (const auto& [key, value] : infer.items()) keys.push_back(key);
  EXPECT_EQ(keys.size(), 13u);
  EXPECT_EQ(infer["node"], "node-b");
  EXPECT_EQ(infer["memory"], "4Gi");
  EXPECT_TRUE(infer["cores"].is_null());
  EXPECT_TRUE(infer["share_id"].is_null());
  EXPECT_EQ(infer["driver"], vgpu_config::kDriverName);
  EXPECT_EQ(infer["reserved_for"][1],
            json({{"resource", "pods"}, {"name", "infer-1"}, {"uid", "u1"}}));
  EXPECT_EQ(infer["created"], "2026-11-30T00:00:00Z");
  const Result<nlohmann::ordered_json> yaml =
      yaml_to_json(render_cluster_shares(shares, "yaml", kNow).value());
  ASSERT_TRUE(yaml.is_ok()) << yaml.status().message();
  EXPECT_EQ(json::parse(yaml->dump()), document);
  // The text docs/cli.md shows.
  EXPECT_EQ(render_cluster_shares({shares[0]}, "yaml", kNow).value(),
            "shares:\n"
            "  - namespace: tenants\n"
            "    claim: infer\n"
            "    claim_uid: uid-infer\n"
            "    node: node-b\n"
            "    request: gpu\n"
            "    driver: vgpu.tessera.dev\n"
            "    pool: node-b\n"
            "    device: gpu-2\n"
            "    share_id: ~\n"
            "    memory: 4Gi\n"
            "    cores: ~\n"
            "    reserved_for:\n"
            "      - resource: pods\n"
            "        name: infer-0\n"
            "        uid: u0\n"
            "      - resource: pods\n"
            "        name: infer-1\n"
            "        uid: u1\n"
            "    created: 2026-11-30T00:00:00Z\n");
  // No shares: an empty list, still one document.
  EXPECT_EQ(json::parse(render_cluster_shares({}, "json", kNow).value()),
            json({{"shares", json::array()}}));
  EXPECT_FALSE(render_cluster_shares(shares, "xml", kNow).is_ok());
}

// Answers GETs from a script, in order, and records the paths asked for.
class ScriptedClient : public kube::KubeClient {
 public:
  explicit ScriptedClient(std::vector<std::string> bodies) : bodies_(std::move(bodies)) {}
  Result<kube::ApiResponse> request(const std::string& method, const std::string& path,
                                    const std::string&) override {
    asked.push_back(method + " " + path);
    if (next_ >= bodies_.size()) return unavailable("no more answers");
    return kube::ApiResponse{200, bodies_[next_++]};
  }
  std::vector<std::string> asked;

 private:
  std::vector<std::string> bodies_;
  size_t next_ = 0;
};

TEST(ListResourceClaims, FollowsContinueTokensEscapedAndStopsAtTheLastPage) {
  ScriptedClient client({R"({"metadata":{"continue":"a+b/c="},"items":[{"n":1}]})",
                         R"({"metadata":{},"items":null})"});
  const Result<json> items = list_resource_claims(client, "team a", 1);
  ASSERT_TRUE(items.is_ok()) << items.status().message();
  EXPECT_EQ(*items, json::array({{{"n", 1}}}));
  EXPECT_EQ(client.asked,
            (std::vector<std::string>{
                "GET /apis/resource.k8s.io/v1/namespaces/team%20a/resourceclaims?limit=1",
                "GET /apis/resource.k8s.io/v1/namespaces/team%20a/resourceclaims?limit=1&continue="
                "a%2Bb%2Fc%3D"}));
}

TEST(ListResourceClaims, RefusesAnswersThatAreNoListAndATokenThatNeverMoves) {
  ScriptedClient garbled({"not json"});
  EXPECT_EQ(list_resource_claims(garbled, "", 0).status().message(),
            "GET /apis/resource.k8s.io/v1/resourceclaims: the answer is not a JSON object");
  ScriptedClient not_array({R"({"items":{}})"});
  EXPECT_EQ(list_resource_claims(not_array, "", 0).status().message(),
            "GET /apis/resource.k8s.io/v1/resourceclaims: items is {}, not an array");
  ScriptedClient stuck({R"({"metadata":{"continue":"t"},"items":[]})",
                        R"({"metadata":{"continue":"t"},"items":[]})"});
  EXPECT_EQ(list_resource_claims(stuck, "", 5).status().message(),
            "GET /apis/resource.k8s.io/v1/resourceclaims: the server answered the same continue "
            "token again");
  ScriptedClient down({});
  EXPECT_EQ(list_resource_claims(down, "", 5).status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace tessera::cli
