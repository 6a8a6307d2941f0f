// The fake API server (apiserver/fake_api_server.h) answers as kube-apiserver does on the paths
// that once bypassed its write-back: the Node GET (the Node as stored: server metadata, defaults,
// canonical quantities, Go's empty structs; pkg/registry/core/node/strategy.go @6785e9ed,
// pkg/apis/core/v1/defaults.go @e34b0935), a shared claim's new pod (a status update:
// pkg/registry/resource/resourceclaim/strategy.go @0021a864a65a17f2ad15b60545ef41fdfc30cc4c), and
// a slice update without a resourceVersion (unconditional, as
// staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go @f565665e allows where the
// strategy's AllowUnconditionalUpdate() is true: pkg/registry/resource/resourceslice/strategy.go
// @a79f3c787d204848670cdf3e424107053ffcea3e).
#include "apiserver/fake_api_server.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include "apiserver/claim_fixture.h"
#include "tessera/kube/http_kube_client.h"

namespace tessera::agent::testing {
namespace {

using nlohmann::json;

kube::RetryPolicy one_try() {
  kube::RetryPolicy retry;
  retry.attempts = 1;
  return retry;
}

json get(kube::HttpKubeClient& client, const std::string& path) {
  const Result<kube::ApiResponse> answer = client.request("GET", path);
  EXPECT_TRUE(answer.is_ok()) << answer.status().message();
  return answer.is_ok() ? json::parse(answer->body) : json();
}

const json* status_entry(const json& object, const std::string& manager) {
  const json* found = nullptr;
  for (const json& entry : object["metadata"]["managedFields"])
    if (entry.value("manager", "") == manager && entry.value("subresource", "") == "status") {
      EXPECT_EQ(found, nullptr) << "two status entries of " << manager;
      found = &entry;
    }
  return found;
}

// Kubelet registered the Node with its capacity only: the GET answers the stored Node, not the
// configuration.
TEST(FakeApiServer, TheNodeIsAnsweredAsTheApiServerStoredKubeletsRegistration) {
  FakeApiServer server;
  server.node_status = {{"capacity", {{"memory", "1048576Ki"}, {"cpu", "4000m"}, {"pods", "110"}}}};
  kube::HttpKubeClient client(server.connection(), one_try());
  const json node = get(client, "/api/v1/nodes/node-a");
  const json& metadata = node["metadata"];
  EXPECT_EQ(metadata["name"], "node-a");
  EXPECT_EQ(metadata["uid"], server.node_uid);
  ASSERT_TRUE(metadata["resourceVersion"].is_string());
  EXPECT_FALSE(metadata["resourceVersion"].get<std::string>().empty());
  EXPECT_TRUE(metadata["creationTimestamp"].is_string());
  EXPECT_EQ(metadata["managedFields"][0]["manager"], "kubelet");
  EXPECT_FALSE(metadata.contains("generation"));  // the node strategy keeps none
  EXPECT_EQ(node["spec"], json::object());
  const json& status = node["status"];
  EXPECT_EQ(status["capacity"]["memory"], "1Gi");  // canonical
  EXPECT_EQ(status["capacity"]["cpu"], "4");
  EXPECT_EQ(status["allocatable"], status["capacity"]);  // SetDefaults_NodeStatus
  EXPECT_EQ(status["daemonEndpoints"]["kubeletEndpoint"]["Port"], 0);
  EXPECT_EQ(status["nodeInfo"]["machineID"], "");
  EXPECT_EQ(status["nodeInfo"]["kubeletVersion"], "");
  // Stored once: a second read is the same object.
  EXPECT_EQ(get(client, "/api/v1/nodes/node-a"), node);
}

// A second pod sharing the claim: the scheduler's status update moves the resourceVersion, not
// the generation, keeps the spec, and is kube-scheduler's status entry in managedFields.
TEST(FakeApiServer, ASharedClaimsNewPodIsAStatusUpdate) {
  FakeApiServer server;
  server.set_time(1764547200);  // 2025-12-01T00:00:00Z
  server.add_claim(
      "tenants", "train",
      written_claim("train", "claim-uid", {{"a", "gpu-0", "s-a", "8192Mi", "30"}}).dump());
  kube::HttpKubeClient client(server.connection(), one_try());
  const std::string path = "/apis/resource.k8s.io/v1/namespaces/tenants/resourceclaims/train";
  const json before = get(client, path);
  ASSERT_NE(status_entry(before, "kube-scheduler"), nullptr);
  EXPECT_EQ((*status_entry(before, "kube-scheduler"))["time"], "2025-12-01T00:00:00Z");
  EXPECT_EQ(before["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"]["memory"],
            "8Gi");

  server.set_time(1764547260);
  ASSERT_TRUE(server.set_reserved_pods("tenants", "train", {{"a", "uid-a"}, {"b", "uid-b"}}));
  const json after = get(client, path);
  EXPECT_GT(std::stoull(after["metadata"]["resourceVersion"].get<std::string>()),
            std::stoull(before["metadata"]["resourceVersion"].get<std::string>()));
  EXPECT_EQ(after["metadata"]["generation"], before["metadata"]["generation"]);
  EXPECT_EQ(after["metadata"]["uid"], "claim-uid");
  EXPECT_EQ(after["spec"], before["spec"]);
  EXPECT_EQ(after["status"]["allocation"], before["status"]["allocation"]);
  EXPECT_EQ(after["status"]["reservedFor"],
            json::parse(R"([{"resource":"pods","name":"a","uid":"uid-a"},
                            {"resource":"pods","name":"b","uid":"uid-b"}])"));
  const json* entry = status_entry(after, "kube-scheduler");
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ((*entry)["time"], "2025-12-01T00:01:00Z");
  EXPECT_EQ((*entry)["operation"], "Update");

  // A body served as given is no claim a status update can write.
  server.add_claim("tenants", "garbled", "not json");
  EXPECT_FALSE(server.set_reserved_pods("tenants", "garbled", {{"a", "uid-a"}}));
  EXPECT_FALSE(server.set_reserved_pods("tenants", "missing", {{"a", "uid-a"}}));
}

// kube-apiserver takes an update without a resourceVersion (the strategy allows it) and refuses
// a stale one with NewConflict's 409.
TEST(FakeApiServer, ASliceUpdateWithoutAResourceVersionIsUnconditional) {
  FakeApiServer server;
  kube::HttpKubeClient client(server.connection(), one_try());
  const json slice = {
      {"apiVersion", "resource.k8s.io/v1"},
      {"kind", "ResourceSlice"},
      {"metadata", {{"name", "node-a-vgpu.tessera.dev-0"}}},
      {"spec",
       {{"driver", "vgpu.tessera.dev"},
        {"nodeName", "node-a"},
        {"pool", {{"name", "node-a"}, {"generation", 1}, {"resourceSliceCount", 1}}},
        {"devices", {{{"name", "gpu-0"}}}}}}};
  const std::string path = "/apis/resource.k8s.io/v1/resourceslices/node-a-vgpu.tessera.dev-0";
  const Result<kube::ApiResponse> created =
      client.request("POST", "/apis/resource.k8s.io/v1/resourceslices", slice.dump());
  ASSERT_TRUE(created.is_ok()) << created.status().message();
  const json first = json::parse(created->body);

  json unconditional = first;
  unconditional["metadata"].erase("resourceVersion");
  unconditional["spec"]["pool"]["generation"] = 2;
  const Result<kube::ApiResponse> updated = client.request("PUT", path, unconditional.dump());
  ASSERT_TRUE(updated.is_ok()) << updated.status().message();
  const json second = json::parse(updated->body);
  EXPECT_NE(second["metadata"]["resourceVersion"], first["metadata"]["resourceVersion"]);
  EXPECT_EQ(second["metadata"]["generation"], 2);
  EXPECT_EQ(server.stored_slices().at("node-a-vgpu.tessera.dev-0")["spec"]["pool"]["generation"],
            2);

  json stale = first;
  stale["spec"]["pool"]["generation"] = 3;
  const Status conflict = client.request("PUT", path, stale.dump()).status();
  EXPECT_EQ(conflict.code(), StatusCode::kAlreadyExists);  // HTTP 409
  EXPECT_EQ(conflict.message(),
            "PUT " + path +
                ": HTTP 409: Operation cannot be fulfilled on resourceslices.resource.k8s.io "
                "\"node-a-vgpu.tessera.dev-0\": the object has been modified; please apply your "
                "changes to the latest version and try again");

  json current = second;
  current["spec"]["pool"]["generation"] = 3;
  ASSERT_TRUE(client.request("PUT", path, current.dump()).is_ok());
  EXPECT_EQ(server.stored_slices().at("node-a-vgpu.tessera.dev-0")["metadata"]["generation"], 3);
}

// Partitionable devices as a driver publishes them from 1.35 on: a slice holding the pool's
// counter sets and a slice of devices consuming them are stored (counter values canonical); the
// 1.34 shape, both in one slice, is refused with kube-apiserver's message.
TEST(FakeApiServer, CounterSetSlicesAreStoredAndTheCombinedShapeRefused) {
  FakeApiServer server;
  kube::HttpKubeClient client(server.connection(), one_try());
  const auto slice = [](const std::string& name) {
    return json{{"apiVersion", "resource.k8s.io/v1"},
                {"kind", "ResourceSlice"},
                {"metadata", {{"name", name}}},
                {"spec",
                 {{"driver", "gpu.nvidia.com"},
                  {"nodeName", "node-a"},
                  {"pool", {{"name", "node-a"}, {"generation", 1}, {"resourceSliceCount", 2}}}}}};
  };
  const json set = {{"name", "gpu-0-counter-set"},
                    {"counters",
                     {{"memory", {{"value", "150055829504"}}},
                      {"memory-slice-0", {{"value", "1"}}},
                      {"copy-engines", {{"value", "8000"}}}}}};
  json counters = slice("node-a-gpu.nvidia.com-counters");
  counters["spec"]["sharedCounters"] = json::array({set});
  json devices = slice("node-a-gpu.nvidia.com-gpu-0");
  devices["spec"]["devices"] = json::array(
      {{{"name", "gpu-0-mig-1g18gb-19-0"},
        {"consumesCounters", json::array({{{"counterSet", "gpu-0-counter-set"},
                                           {"counters",
                                            {{"memory", {{"value", "16384Mi"}}},
                                             {"memory-slice-0", {{"value", 1}}}}}}})}}});
  const std::string path = "/apis/resource.k8s.io/v1/resourceslices";
  const Result<kube::ApiResponse> created = client.request("POST", path, devices.dump());
  ASSERT_TRUE(created.is_ok()) << created.status().message();
  const Result<kube::ApiResponse> stored_set = client.request("POST", path, counters.dump());
  ASSERT_TRUE(stored_set.is_ok()) << stored_set.status().message();
  const json stored = server.stored_slices().at("node-a-gpu.nvidia.com-counters");
  EXPECT_EQ(stored["spec"]["sharedCounters"][0]["counters"]["memory"]["value"], "150055829504");
  EXPECT_EQ(stored["spec"]["sharedCounters"][0]["counters"]["copy-engines"]["value"], "8k");
  EXPECT_EQ(server.stored_slices().at(
                "node-a-gpu.nvidia.com-gpu-0")["spec"]["devices"][0]["consumesCounters"][0]
                                              ["counters"]["memory-slice-0"]["value"],
            "1");

  json combined = slice("node-a-gpu.nvidia.com-combined");
  combined["spec"]["sharedCounters"] = json::array({set});
  combined["spec"]["devices"] = devices["spec"]["devices"];
  const Status refused = client.request("POST", path, combined.dump()).status();
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);  // HTTP 422
  EXPECT_TRUE(refused.message().ends_with(
      "HTTP 422: ResourceSlice.resource.k8s.io \"node-a-gpu.nvidia.com-combined\" is invalid: "
      "spec: Invalid value: \"\": only one of `sharedCounters` or `devices` is allowed"))
      << refused.message();
}

// Secrets as kube-apiserver keeps them (pkg/registry/core/secret/strategy.go,
// pkg/apis/core/validation ValidateSecret/ValidateSecretUpdate): a tls Secret needs both keys,
// stringData becomes data, no generation, a second create is AlreadyExists, a stale
// resourceVersion a Conflict, and the type cannot change.
TEST(FakeApiServer, SecretsFollowTheServersRules) {
  FakeApiServer api;
  kube::HttpKubeClient client(api.connection(), one_try());
  const std::string collection = "/api/v1/namespaces/ns/secrets";
  json secret = {{"apiVersion", "v1"},
                 {"kind", "Secret"},
                 {"type", "kubernetes.io/tls"},
                 {"metadata", {{"name", "tls"}}},
                 {"data", {{"tls.crt", "Y2VydA=="}}}};
  Result<kube::ApiResponse> refused = client.request("POST", collection, secret.dump());
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("data[tls.key]: Required value"), std::string::npos)
      << refused.status().message();

  secret["stringData"] = {{"tls.key", "key"}};
  Result<kube::ApiResponse> created = client.request("POST", collection, secret.dump());
  ASSERT_TRUE(created.is_ok()) << created.status().message();
  EXPECT_EQ(created->status, 201);
  const json stored = json::parse(created->body);
  EXPECT_EQ(stored["data"]["tls.key"], "a2V5");  // base64 of "key"
  EXPECT_FALSE(stored.contains("stringData"));
  EXPECT_FALSE(stored["metadata"].contains("generation"));
  EXPECT_FALSE(stored["metadata"].value("uid", "").empty());
  EXPECT_EQ(stored["metadata"]["namespace"], "ns");

  Result<kube::ApiResponse> again = client.request("POST", collection, secret.dump());
  ASSERT_FALSE(again.is_ok());
  EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(again.status().message().find("secrets \"tls\" already exists"), std::string::npos);

  json update = stored;
  update["data"]["tls.crt"] = "bmV3";
  Result<kube::ApiResponse> updated = client.request("PUT", collection + "/tls", update.dump());
  ASSERT_TRUE(updated.is_ok()) << updated.status().message();
  EXPECT_NE(json::parse(updated->body)["metadata"]["resourceVersion"],
            stored["metadata"]["resourceVersion"]);
  // The same resourceVersion again: someone else's write came first.
  Result<kube::ApiResponse> stale = client.request("PUT", collection + "/tls", update.dump());
  ASSERT_FALSE(stale.is_ok());
  EXPECT_EQ(stale.status().code(), StatusCode::kAlreadyExists);  // HTTP 409
  EXPECT_NE(stale.status().message().find("the object has been modified"), std::string::npos);

  json retyped = json::parse(updated->body);
  retyped["type"] = "Opaque";
  Result<kube::ApiResponse> immutable = client.request("PUT", collection + "/tls", retyped.dump());
  ASSERT_FALSE(immutable.is_ok());
  EXPECT_NE(immutable.status().message().find("field is immutable"), std::string::npos);
  EXPECT_EQ(api.secret("ns", "tls")["data"]["tls.crt"], "bmV3");
}

// A PATCH as kube-apiserver's patch handler takes it: JSON Patch or merge patch by media type,
// 415 for plain JSON, 422 for a failed test, the generation moved when the webhooks changed.
TEST(FakeApiServer, WebhookConfigurationsArePatchedAsTheServerPatches) {
  FakeApiServer api;
  api.add_webhook_configuration(
      "validatingwebhookconfigurations",
      {{"apiVersion", "admissionregistration.k8s.io/v1"},
       {"kind", "ValidatingWebhookConfiguration"},
       {"metadata", {{"name", "hooks"}}},
       {"webhooks", {{{"name", "a.example.com"}, {"clientConfig", {{"url", "https://x"}}}}}}});
  kube::HttpKubeClient client(api.connection(), one_try());
  const std::string path =
      "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/hooks";
  const json before = api.webhook_configuration("validatingwebhookconfigurations", "hooks");
  EXPECT_EQ(before["metadata"]["generation"], 1);

  const json wrong_name = json::array(
      {{{"op", "test"}, {"path", "/webhooks/0/name"}, {"value", "b.example.com"}},
       {{"op", "add"}, {"path", "/webhooks/0/clientConfig/caBundle"}, {"value", "Y2E="}}});
  Result<kube::ApiResponse> failed = client.request("PATCH", path, wrong_name.dump());
  ASSERT_FALSE(failed.is_ok());
  EXPECT_NE(failed.status().message().find("HTTP 422"), std::string::npos)
      << failed.status().message();

  json patch = wrong_name;
  patch[0]["value"] = "a.example.com";
  Result<kube::ApiResponse> patched = client.request("PATCH", path, patch.dump());
  ASSERT_TRUE(patched.is_ok()) << patched.status().message();
  const json after = json::parse(patched->body);
  EXPECT_EQ(after["webhooks"][0]["clientConfig"]["caBundle"], "Y2E=");
  EXPECT_EQ(after["metadata"]["generation"], 2);

  httplib::Client raw(api.url());
  raw.enable_server_certificate_verification(false);
  const auto plain =
      raw.Patch(path, {{"Authorization", "Bearer " + api.token()}}, "[]", "application/json");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->status, 415);
}

}  // namespace
}  // namespace tessera::agent::testing
