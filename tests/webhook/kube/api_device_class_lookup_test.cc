// DeviceClass lookups over the API: the class's spec.config, the cache and its TTL, errors.
#include "kube/api_device_class_lookup.h"

#include <gtest/gtest.h>

#include "fake_kube.h"

namespace tessera::webhook {
namespace {

using nlohmann::json;
using testing::FakeKube;
using testing::ManualClock;

constexpr char kClasses[] = "/apis/resource.k8s.io/v1/deviceclasses/";

json device_class(const std::string& name, const json& config) {
  json object = {{"apiVersion", "resource.k8s.io/v1"},
                 {"kind", "DeviceClass"},
                 {"metadata", {{"name", name}}},
                 {"spec", {{"selectors", json::array()}}}};
  if (!config.is_null()) object["spec"]["config"] = config;
  return object;
}

TEST(ApiDeviceClassLookup, ReadsTheClassesConfigAndCachesItForTheTtl) {
  FakeKube api;
  ManualClock clock;
  const json config = json::array(
      {{{"opaque", {{"driver", "vgpu.tessera.dev"}, {"parameters", {{"enforcement", "kill"}}}}}}});
  api.put(std::string(kClasses) + "gpu-kill", device_class("gpu-kill", config));
  api.put(std::string(kClasses) + "plain", device_class("plain", nullptr));
  ApiDeviceClassLookup lookup(api, std::chrono::seconds(60), clock.function());
  Result<json> read = lookup.class_configs("gpu-kill");
  ASSERT_TRUE(read.is_ok()) << read.status().message();
  EXPECT_EQ(*read, config);
  EXPECT_EQ(*lookup.class_configs("plain"), json::array()) << "no config: an empty list";
  EXPECT_EQ(api.requests(), (std::vector<std::string>{"GET " + std::string(kClasses) + "gpu-kill",
                                                      "GET " + std::string(kClasses) + "plain"}));
  // Within the TTL the cache answers; an admin's edit is seen once it passes.
  api.put(std::string(kClasses) + "gpu-kill", device_class("gpu-kill", json::array()));
  EXPECT_EQ(*lookup.class_configs("gpu-kill"), config);
  EXPECT_EQ(lookup.api_calls(), 2u);
  clock.now += std::chrono::seconds(60);
  EXPECT_EQ(*lookup.class_configs("gpu-kill"), json::array());
  EXPECT_EQ(lookup.api_calls(), 3u);
}

TEST(ApiDeviceClassLookup, MissingUnreachableAndUnsafeNames) {
  FakeKube api;
  ManualClock clock;
  ApiDeviceClassLookup lookup(api, std::chrono::seconds(60), clock.function());
  EXPECT_EQ(lookup.class_configs("nope").status().code(), StatusCode::kNotFound);
  api.unreachable = true;
  const Result<json> down = lookup.class_configs("nope");
  EXPECT_EQ(down.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(lookup.api_calls(), 2u) << "errors are not cached";
  // A name that is no DNS subdomain never goes into a URL.
  EXPECT_EQ(lookup.class_configs("../namespaces").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(lookup.api_calls(), 2u);
}

}  // namespace
}  // namespace tessera::webhook
