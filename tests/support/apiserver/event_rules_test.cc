// kube-apiserver's Event rules as ported (apiserver/event_rules.h), and the stand-in serving
// Events with them: each test asserts the message the API server returns
// (pkg/apis/core/validation/events.go @04791b49; rest/create.go's BeforeCreate).
#include "apiserver/event_rules.h"

#include <gtest/gtest.h>

#include "apiserver/fake_api_server.h"
#include "tessera/kube/http_kube_client.h"

namespace tessera::agent::testing::apiserver {
namespace {

using nlohmann::json;

const std::string kSubdomainMessage =
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

// A core/v1 Event as client-go's recorder makes it, about pod tenants/train.
json pod_event() {
  return {{"apiVersion", "v1"},
          {"kind", "Event"},
          {"metadata", {{"name", "train.187e0f3c2a1b0000"}, {"namespace", "tenants"}}},
          {"involvedObject",
           {{"kind", "Pod"},
            {"namespace", "tenants"},
            {"name", "train"},
            {"uid", "pod-uid-1"},
            {"apiVersion", "v1"}}},
          {"reason", "GpuQuotaKill"},
          {"message", "Process 42 killed"},
          {"source", {{"component", "tessera-node-agent"}, {"host", "node-a"}}},
          {"firstTimestamp", "2026-12-06T13:00:00Z"},
          {"lastTimestamp", "2026-12-06T13:00:00Z"},
          {"count", 1},
          {"type", "Warning"},
          {"reportingComponent", "tessera-node-agent"},
          {"reportingInstance", "node-a"}};
}

TEST(EventRules, AClientGoEventIsValid) {
  EXPECT_EQ(aggregate(validate_event_create(pod_event(), kCoreV1)), "");
  EXPECT_EQ(aggregate(validate_event_meta(pod_event())), "");
}

TEST(EventRules, TheObjectsNamespaceMustBeTheEvents) {
  json event = pod_event();
  event["involvedObject"]["namespace"] = "other";
  EXPECT_EQ(aggregate(validate_event_create(event, kCoreV1)),
            "involvedObject.namespace: Invalid value: \"other\": does not match event.namespace");
  // A cluster-scoped object (a Node): its Events are in "default" (or no namespace).
  json node = pod_event();
  node["involvedObject"] = {{"kind", "Node"}, {"name", "node-a"}, {"apiVersion", "v1"}};
  node["metadata"]["namespace"] = "default";
  EXPECT_EQ(aggregate(validate_event_create(node, kCoreV1)), "");
  node["metadata"]["namespace"] = "tenants";
  EXPECT_EQ(aggregate(validate_event_create(node, kCoreV1)),
            "involvedObject.namespace: Invalid value: \"\": does not match event.namespace");
}

TEST(EventRules, WithAnEventTimeTheReportingFieldsActionAndReasonAreRequired) {
  json event = pod_event();
  event["eventTime"] = "2026-12-06T13:00:00.000000Z";
  event.erase("reportingComponent");
  event.erase("reportingInstance");
  event.erase("reason");
  // IsQualifiedName("") says what is wrong with the empty name too, as the server does.
  std::string empty_controller = "reportingController: Required value";
  for (const std::string& message : is_label_key(""))
    empty_controller += ", reportingController: Invalid value: \"\": " + message;
  EXPECT_EQ(aggregate(validate_event_create(event, kCoreV1)),
            "[" + empty_controller +
                ", reportingInstance: Required value, action: Required value, reason: Required "
                "value]");
  event["reportingComponent"] = "Tessera Agent";
  event["reportingInstance"] = std::string(129, 'n');
  event["action"] = "Kill";
  event["reason"] = "GpuQuotaKill";
  event["message"] = std::string(1025, 'm');
  EXPECT_EQ(aggregate(validate_event_create(event, kCoreV1)),
            "[reportingController: Invalid value: \"Tessera Agent\": name part must consist of "
            "alphanumeric characters, '-', '_' or '.', and must start and end with an "
            "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
            "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]'), reportingInstance: "
            "Invalid value: \"\": can have at most 128 characters, message: Invalid value: \"\": "
            "can have at most 1024 characters]");
}

TEST(EventRules, TheNamespaceIsASubdomainAndTheNameAPathSegment) {
  json event = pod_event();
  event["metadata"]["namespace"] = event["involvedObject"]["namespace"] = "Tenants";
  EXPECT_EQ(aggregate(validate_event_create(event, kCoreV1)),
            "namespace: Invalid value: \"Tenants\": " + kSubdomainMessage);
  json named = pod_event();
  named["metadata"]["name"] = "a/b%c";
  EXPECT_EQ(aggregate(validate_event_meta(named)),
            "[metadata.name: Invalid value: \"a/b%c\": may not contain '/', metadata.name: "
            "Invalid value: \"a/b%c\": may not contain '%']");
  named["metadata"]["name"] = "..";
  EXPECT_EQ(aggregate(validate_event_meta(named)),
            "metadata.name: Invalid value: \"..\": may not be '..'");
  named["metadata"].erase("name");
  EXPECT_EQ(aggregate(validate_event_meta(named)),
            "metadata.name: Required value: name or generateName is required");
}

TEST(EventRules, EventsV1IsStrictCoreV1IsNot) {
  // What client-go's core/v1 recorder sends is refused through events.k8s.io/v1: the deprecated
  // fields must be unset there, eventTime set.
  EXPECT_EQ(aggregate(validate_event_create(pod_event(), kEventsV1)),
            "[eventTime: Required value, firstTimestamp: Invalid value: \"\": needs to be unset, "
            "lastTimestamp: Invalid value: \"\": needs to be unset, count: Invalid value: \"\": "
            "needs to be unset, source: Invalid value: \"\": needs to be unset]");
  EXPECT_EQ(aggregate(validate_event_create(pod_event(), kEventsV1beta1)), "");
  json changed = pod_event();
  changed["reason"] = "Other";
  changed["count"] = 2;
  EXPECT_EQ(aggregate(validate_event_update(changed, pod_event(), kCoreV1)), "");
  EXPECT_EQ(aggregate(validate_event_update(changed, pod_event(), kEventsV1)),
            "[reason: Invalid value: \"Other\": field is immutable, count: Invalid value: 2: "
            "field is immutable]");
}

TEST(EventRules, TheStandInStoresAnEventAsTheServerAnswersIt) {
  FakeApiServer server;
  kube::RetryPolicy once;
  once.attempts = 1;
  kube::HttpKubeClient client(server.connection(), once);
  server.set_time(1796562000);  // 2026-12-06T13:00:00Z
  json event = pod_event();
  event["metadata"].erase("namespace");  // the request's
  const Result<kube::ApiResponse> created =
      client.request("POST", "/api/v1/namespaces/tenants/events", event.dump());
  ASSERT_TRUE(created.is_ok()) << created.status().message();
  EXPECT_EQ(created->status, 201);
  const json stored = json::parse(created->body);
  EXPECT_EQ(stored["metadata"]["namespace"], "tenants");
  EXPECT_FALSE(stored["metadata"].value("uid", "").empty());
  EXPECT_FALSE(stored["metadata"].value("resourceVersion", "").empty());
  EXPECT_EQ(stored["metadata"]["creationTimestamp"], "2026-12-06T13:00:00Z");
  EXPECT_FALSE(stored["metadata"].contains("generation"));
  EXPECT_TRUE(stored["eventTime"].is_null());
  EXPECT_EQ(stored["count"], 1);

  // The same name again: 409; another namespace in the body than in the path: 400.
  const Result<kube::ApiResponse> again =
      client.request("POST", "/api/v1/namespaces/tenants/events", pod_event().dump());
  EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists);
  const Result<kube::ApiResponse> elsewhere =
      client.request("POST", "/api/v1/namespaces/other/events", pod_event().dump());
  EXPECT_EQ(elsewhere.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(elsewhere.status().message().find(
                "the namespace of the provided object does not match the namespace sent on the "
                "request"),
            std::string::npos);
  json mismatched = pod_event();
  mismatched["metadata"]["name"] = "x";
  mismatched["involvedObject"]["namespace"] = "other";
  const Result<kube::ApiResponse> invalid =
      client.request("POST", "/api/v1/namespaces/tenants/events", mismatched.dump());
  EXPECT_EQ(invalid.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(invalid.status().message().find(
                "Event \"x\" is invalid: involvedObject.namespace: Invalid value: \"other\": "
                "does not match event.namespace"),
            std::string::npos)
      << invalid.status().message();

  // A strategic merge patch counts it up: a new resourceVersion, the same uid and creation time.
  const std::string path = "/api/v1/namespaces/tenants/events/train.187e0f3c2a1b0000";
  const Result<kube::ApiResponse> patched =
      client.request("PATCH", path, R"({"count":2,"lastTimestamp":"2026-12-06T13:01:00Z"})");
  ASSERT_TRUE(patched.is_ok()) << patched.status().message();
  const json now = json::parse(patched->body);
  EXPECT_EQ(now["count"], 2);
  EXPECT_EQ(now["lastTimestamp"], "2026-12-06T13:01:00Z");
  EXPECT_EQ(now["firstTimestamp"], "2026-12-06T13:00:00Z");
  EXPECT_EQ(now["metadata"]["uid"], stored["metadata"]["uid"]);
  EXPECT_NE(now["metadata"]["resourceVersion"], stored["metadata"]["resourceVersion"]);
  // A patch that moves the object to another namespace is refused, as is one of a missing Event.
  const Result<kube::ApiResponse> moved =
      client.request("PATCH", path, R"({"involvedObject":{"namespace":"other"}})");
  EXPECT_EQ(moved.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(client.request("PATCH", path + "x", R"({"count":3})").status().code(),
            StatusCode::kNotFound);

  // kubectl describe pod's list: by the object's name, namespace and uid.
  const Result<kube::ApiResponse> listed =
      client.request("GET", "/api/v1/namespaces/tenants/events?fieldSelector=" +
                                kube::field_selector({{"involvedObject.name", "train"},
                                                      {"involvedObject.namespace", "tenants"},
                                                      {"involvedObject.uid", "pod-uid-1"}}));
  ASSERT_TRUE(listed.is_ok()) << listed.status().message();
  const json items = json::parse(listed->body)["items"];
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(items[0]["count"], 2);
  const Result<kube::ApiResponse> none =
      client.request("GET", "/api/v1/namespaces/tenants/events?fieldSelector=" +
                                kube::field_selector({{"involvedObject.name", "other"}}));
  ASSERT_TRUE(none.is_ok());
  EXPECT_TRUE(json::parse(none->body)["items"].empty());
  EXPECT_EQ(server.stored_events("tenants").size(), 1u);
}

TEST(EventRules, TheClientsPatchIsAStrategicMergePatch) {
  // The stand-in answers 415 to any other media type (kube-apiserver's answer to a PATCH sent as
  // application/json): HttpKubeClient's PATCH goes through, so its Content-Type is one accepted.
  FakeApiServer server;
  kube::HttpKubeClient client(server.connection());
  ASSERT_TRUE(
      client.request("POST", "/api/v1/namespaces/tenants/events", pod_event().dump()).is_ok());
  const Result<kube::ApiResponse> patched = client.request(
      "PATCH", "/api/v1/namespaces/tenants/events/train.187e0f3c2a1b0000", R"({"count":5})");
  ASSERT_TRUE(patched.is_ok()) << patched.status().message();
  EXPECT_EQ(json::parse(patched->body)["count"], 5);
}

}  // namespace
}  // namespace tessera::agent::testing::apiserver
