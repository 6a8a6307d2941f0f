// Wire compatibility of the protos in proto/kubelet/ with kubelet's: every message, field number,
// type and cardinality, and every service and method name, checked against a table written from
// k8s-dra-facts.md (not from the .proto files), plus the bytes of a few encoded messages.
#include <string>
#include <utility>
#include <vector>

#include <google/protobuf/descriptor.h>
#include <gtest/gtest.h>

#include "kubelet/dra-health/v1/api.grpc.pb.h"
#include "kubelet/dra-health/v1alpha1/api.grpc.pb.h"
#include "kubelet/dra/v1/api.grpc.pb.h"
#include "kubelet/dra/v1beta1/api.grpc.pb.h"
#include "kubelet/pluginregistration/api.grpc.pb.h"

namespace {

using google::protobuf::Descriptor;
using google::protobuf::DescriptorPool;
using google::protobuf::FieldDescriptor;

enum class Card { kSingular, kOptional, kRepeated, kMap };

struct Field {
  Field(std::string name_, int number_, FieldDescriptor::Type type_, Card card_,
        std::string type_name_ = "")
      : name(std::move(name_)),
        number(number_),
        type(type_),
        card(card_),
        type_name(std::move(type_name_)) {}
  std::string name;
  int number;
  FieldDescriptor::Type type;
  Card card;
  std::string type_name;  // message or enum full name; for a map: the value's
};

struct Message {
  std::string full_name;
  std::vector<Field> fields;
};

constexpr auto kString = FieldDescriptor::TYPE_STRING;
constexpr auto kBool = FieldDescriptor::TYPE_BOOL;
constexpr auto kInt64 = FieldDescriptor::TYPE_INT64;
constexpr auto kMessage = FieldDescriptor::TYPE_MESSAGE;
constexpr auto kEnum = FieldDescriptor::TYPE_ENUM;

std::vector<Message> dra_messages(const std::string& pkg, bool with_share_id) {
  std::vector<Field> device{{"request_names", 1, kString, Card::kRepeated},
                            {"pool_name", 2, kString, Card::kSingular},
                            {"device_name", 3, kString, Card::kSingular},
                            {"cdi_device_ids", 4, kString, Card::kRepeated}};
  if (with_share_id) device.push_back({"share_id", 5, kString, Card::kOptional});
  auto type = [&](const std::string& short_name) { return pkg + "." + short_name; };
  return {
      {pkg + ".Claim",
       {{"namespace", 1, kString, Card::kSingular},
        {"uid", 2, kString, Card::kSingular},
        {"name", 3, kString, Card::kSingular}}},
      {pkg + ".NodePrepareResourcesRequest",
       {{"claims", 1, kMessage, Card::kRepeated, type("Claim")}}},
      {pkg + ".NodePrepareResourcesResponse",
       {{"claims", 1, kMessage, Card::kMap, type("NodePrepareResourceResponse")}}},
      {pkg + ".NodePrepareResourceResponse",
       {{"devices", 1, kMessage, Card::kRepeated, type("Device")},
        {"error", 2, kString, Card::kSingular}}},
      {pkg + ".Device", device},
      {pkg + ".NodeUnprepareResourcesRequest",
       {{"claims", 1, kMessage, Card::kRepeated, type("Claim")}}},
      {pkg + ".NodeUnprepareResourcesResponse",
       {{"claims", 1, kMessage, Card::kMap, type("NodeUnprepareResourceResponse")}}},
      {pkg + ".NodeUnprepareResourceResponse", {{"error", 1, kString, Card::kSingular}}},
  };
}

std::vector<Message> all_messages() {
  std::vector<Message> all = {
      {"pluginregistration.PluginInfo",
       {{"type", 1, kString, Card::kSingular},
        {"name", 2, kString, Card::kSingular},
        {"endpoint", 3, kString, Card::kSingular},
        {"supported_versions", 4, kString, Card::kRepeated}}},
      {"pluginregistration.RegistrationStatus",
       {{"plugin_registered", 1, kBool, Card::kSingular}, {"error", 2, kString, Card::kSingular}}},
      {"pluginregistration.InfoRequest", {}},
      {"pluginregistration.RegistrationStatusResponse", {}},
  };
  // dra-health: v1alpha1 and v1 have the same messages (k8s.io/kubelet/pkg/apis/dra-health/*).
  for (std::string pkg : {"v1alpha1", "v1"}) {
    all.push_back({pkg + ".NodeWatchResourcesRequest", {}});
    all.push_back({pkg + ".NodeWatchResourcesResponse",
                   {{"devices", 1, kMessage, Card::kRepeated, pkg + ".DeviceHealth"}}});
    all.push_back({pkg + ".DeviceHealth",
                   {{"device", 1, kMessage, Card::kSingular, pkg + ".DeviceIdentifier"},
                    {"health", 2, kEnum, Card::kSingular, pkg + ".HealthStatus"},
                    {"last_updated_time", 3, kInt64, Card::kSingular},
                    {"health_check_timeout_seconds", 4, kInt64, Card::kSingular},
                    {"message", 5, kString, Card::kSingular}}});
    all.push_back({pkg + ".DeviceIdentifier",
                   {{"pool_name", 1, kString, Card::kSingular},
                    {"device_name", 2, kString, Card::kSingular}}});
  }
  for (auto& m : dra_messages("k8s.io.kubelet.pkg.apis.dra.v1", true)) all.push_back(m);
  for (auto& m : dra_messages("k8s.io.kubelet.pkg.apis.dra.v1beta1", false)) all.push_back(m);
  return all;
}

Card cardinality(const FieldDescriptor* f) {
  if (f->is_map()) return Card::kMap;
  if (f->is_repeated()) return Card::kRepeated;
  if (f->has_optional_keyword()) return Card::kOptional;
  return Card::kSingular;
}

TEST(ProtoWire, EveryMessageMatchesKubeletsFieldByField) {
  const DescriptorPool* pool = DescriptorPool::generated_pool();
  for (const Message& expected : all_messages()) {
    SCOPED_TRACE(expected.full_name);
    const Descriptor* message = pool->FindMessageTypeByName(expected.full_name);
    ASSERT_NE(message, nullptr);
    EXPECT_EQ(message->file()->syntax(), google::protobuf::FileDescriptor::SYNTAX_PROTO3);
    // No field beyond the table (a real-oneof count of zero: only proto3 optional's synthetic one).
    EXPECT_EQ(message->field_count(), static_cast<int>(expected.fields.size()));
    EXPECT_EQ(message->real_oneof_decl_count(), 0);
    for (const Field& field : expected.fields) {
      SCOPED_TRACE(field.name);
      const FieldDescriptor* actual = message->FindFieldByNumber(field.number);
      ASSERT_NE(actual, nullptr);
      EXPECT_EQ(actual->name(), field.name);
      EXPECT_EQ(cardinality(actual), field.card);
      if (field.card == Card::kMap) {
        const Descriptor* entry = actual->message_type();
        EXPECT_EQ(entry->map_key()->type(), kString);
        EXPECT_EQ(entry->map_value()->type(), field.type);
        EXPECT_EQ(entry->map_value()->message_type()->full_name(), field.type_name);
        continue;
      }
      EXPECT_EQ(actual->type(), field.type);
      if (field.type == kMessage) {
        EXPECT_EQ(actual->message_type()->full_name(), field.type_name);
      }
      if (field.type == kEnum) {
        EXPECT_EQ(actual->enum_type()->full_name(), field.type_name);
      }
    }
  }
}

TEST(ProtoWire, HealthStatusValues) {
  for (const char* name : {"v1alpha1.HealthStatus", "v1.HealthStatus"}) {
    SCOPED_TRACE(name);
    const auto* e = DescriptorPool::generated_pool()->FindEnumTypeByName(name);
    ASSERT_NE(e, nullptr);
    ASSERT_EQ(e->value_count(), 3);
    EXPECT_EQ(e->FindValueByName("UNKNOWN")->number(), 0);
    EXPECT_EQ(e->FindValueByName("HEALTHY")->number(), 1);
    EXPECT_EQ(e->FindValueByName("UNHEALTHY")->number(), 2);
  }
}

struct Method {
  std::string service;
  std::string name;
  std::string input;
  std::string output;
  bool server_streaming;
};

TEST(ProtoWire, ServicesAndMethodsHaveKubeletsNames) {
  std::vector<Method> methods = {
      {"pluginregistration.Registration", "GetInfo", "pluginregistration.InfoRequest",
       "pluginregistration.PluginInfo", false},
      {"pluginregistration.Registration", "NotifyRegistrationStatus",
       "pluginregistration.RegistrationStatus", "pluginregistration.RegistrationStatusResponse",
       false},
      {"v1alpha1.DRAResourceHealth", "NodeWatchResources", "v1alpha1.NodeWatchResourcesRequest",
       "v1alpha1.NodeWatchResourcesResponse", true},
      {"v1.DRAResourceHealth", "NodeWatchResources", "v1.NodeWatchResourcesRequest",
       "v1.NodeWatchResourcesResponse", true},
  };
  for (std::string pkg :
       {"k8s.io.kubelet.pkg.apis.dra.v1", "k8s.io.kubelet.pkg.apis.dra.v1beta1"}) {
    methods.push_back({pkg + ".DRAPlugin", "NodePrepareResources",
                       pkg + ".NodePrepareResourcesRequest", pkg + ".NodePrepareResourcesResponse",
                       false});
    methods.push_back({pkg + ".DRAPlugin", "NodeUnprepareResources",
                       pkg + ".NodeUnprepareResourcesRequest",
                       pkg + ".NodeUnprepareResourcesResponse", false});
  }
  for (const Method& expected : methods) {
    SCOPED_TRACE(expected.service + "/" + expected.name);
    const auto* service = DescriptorPool::generated_pool()->FindServiceByName(expected.service);
    ASSERT_NE(service, nullptr);
    const auto* method = service->FindMethodByName(expected.name);
    ASSERT_NE(method, nullptr);
    EXPECT_EQ(method->input_type()->full_name(), expected.input);
    EXPECT_EQ(method->output_type()->full_name(), expected.output);
    EXPECT_FALSE(method->client_streaming());
    EXPECT_EQ(method->server_streaming(), expected.server_streaming);
  }
  // The HTTP/2 path kubelet calls is /<package>.<service>/<method>.
  // gRPC's generated stubs call exactly that path.
  EXPECT_STREQ(k8s::io::kubelet::pkg::apis::dra::v1::DRAPlugin::service_full_name(),
               "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin");
  EXPECT_STREQ(v1alpha1::DRAResourceHealth::service_full_name(), "v1alpha1.DRAResourceHealth");
  EXPECT_STREQ(v1::DRAResourceHealth::service_full_name(), "v1.DRAResourceHealth");
  EXPECT_STREQ(pluginregistration::Registration::service_full_name(),
               "pluginregistration.Registration");
}

TEST(ProtoWire, EncodedBytesAreKubelets) {
  // Device{device_name: "g", share_id: "s"}: field 3 and field 5, length-delimited.
  k8s::io::kubelet::pkg::apis::dra::v1::Device device;
  device.set_device_name("g");
  device.set_share_id("s");
  EXPECT_EQ(device.SerializeAsString(), std::string("\x1a\x01g\x2a\x01s", 6));
  // An empty share_id is still sent: presence, not value, says the device is shared.
  device.clear_device_name();
  device.set_share_id("");
  EXPECT_EQ(device.SerializeAsString(), std::string("\x2a\x00", 2));

  // RegistrationStatus{plugin_registered: true, error: "e"}: varint field 1, string field 2.
  pluginregistration::RegistrationStatus status;
  status.set_plugin_registered(true);
  status.set_error("e");
  EXPECT_EQ(status.SerializeAsString(), std::string("\x08\x01\x12\x01"
                                                    "e",
                                                    5));

  // DeviceHealth{health: UNHEALTHY, last_updated_time: 300}: varints on fields 2 and 3.
  v1alpha1::DeviceHealth health;
  health.set_health(v1alpha1::UNHEALTHY);
  health.set_last_updated_time(300);
  EXPECT_EQ(health.SerializeAsString(), std::string("\x10\x02\x18\xac\x02", 5));
  // message = 5, length-delimited (tag 0x2a): the same bytes in v1.
  health.set_message("m");
  EXPECT_EQ(health.SerializeAsString(), std::string("\x10\x02\x18\xac\x02\x2a\x01m", 8));
  v1::DeviceHealth health_v1;
  health_v1.set_health(v1::UNHEALTHY);
  health_v1.set_last_updated_time(300);
  health_v1.set_message("m");
  EXPECT_EQ(health_v1.SerializeAsString(), health.SerializeAsString());

  // A map entry is {key = 1, value = 2}: NodeUnprepareResourcesResponse{claims: {"u": {error:
  // "x"}}}.
  k8s::io::kubelet::pkg::apis::dra::v1beta1::NodeUnprepareResourcesResponse unprepare;
  (*unprepare.mutable_claims())["u"].set_error("x");
  EXPECT_EQ(unprepare.SerializeAsString(), std::string("\x0a\x08\x0a\x01u\x12\x03\x0a\x01x", 10));
}

}  // namespace
