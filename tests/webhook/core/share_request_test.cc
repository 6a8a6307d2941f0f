// Shorthand read from a container, and the ResourceClaimTemplate a request becomes.
#include "core/share_request.h"

#include <gtest/gtest.h>

namespace tessera::webhook {
namespace {

using nlohmann::json;

json container_with(const json& limits) {
  return {{"name", "c"}, {"resources", {{"limits", limits}}}};
}

ShareRequest read(const json& limits, bool hami = false) {
  Result<std::optional<Shorthand>> read = read_shorthand(container_with(limits), hami);
  EXPECT_TRUE(read.is_ok()) << read.status().message();
  EXPECT_TRUE(read.is_ok() && read->has_value()) << limits.dump();
  return read.is_ok() && read->has_value() ? (*read)->request : ShareRequest{};
}

TEST(ShareRequest, TheSameAmountWrittenTwoWaysIsOneTemplate) {
  EXPECT_EQ(read({{"tessera.dev/gpu-memory", "8Gi"}}),
            read({{"tessera.dev/gpu-memory", "8192Mi"}}));
  EXPECT_EQ(read({{"tessera.dev/gpu-memory", "8Gi"}}).template_name(), "tessera-vgpu-1-m8gi");
  EXPECT_EQ(read({{"nvidia.com/gpumem", "8192"}}, true), read({{"tessera.dev/gpu-memory", "8Gi"}}));
}

TEST(ShareRequest, NamesAreDnsSubdomainsThatSayTheRequest) {
  ShareRequest request;
  request.count = 2;
  // Not a whole KiB: the name keeps the bytes (names stay as they were); the capacity is written
  // as kube-apiserver would store it, "1500M".
  request.memory_bytes = 1'500'000'000;
  request.cores = 5;
  EXPECT_EQ(request.template_name(), "tessera-vgpu-2-m1500000000-c5");
  EXPECT_EQ(request.claim_template("ns")["spec"]["spec"]["devices"]["requests"][0]["exactly"],
            json::parse(R"({"deviceClassName": "vgpu.tessera.dev", "allocationMode": "ExactCount",
                            "count": 2, "capacity": {"requests": {"memory": "1500M",
                                                                  "cores": "5"}}})"));
}

TEST(ShareRequest, NoShorthandIsNone) {
  for (const json& container :
       {json::object(), json{{"resources", json::object()}},
        container_with({{"cpu", "1"}, {"nvidia.com/gpu", "1"}}),  // not opted in: not ours
        json{{"resources", {{"limits", "1"}}}}}) {
    Result<std::optional<Shorthand>> read = read_shorthand(container, false);
    ASSERT_TRUE(read.is_ok());
    EXPECT_FALSE(read->has_value()) << container.dump();
  }
}

TEST(ShareRequest, KeysAreListedForRemovalFromBothLists) {
  const json container = {
      {"name", "c"},
      {"resources",
       {{"limits", {{"tessera.dev/gpu", "1"}, {"cpu", "1"}}},
        {"requests", {{"tessera.dev/gpu", "1"}, {"tessera.dev/gpu-cores", "20"}}}}}};
  Result<std::optional<Shorthand>> read = read_shorthand(container, false);
  ASSERT_TRUE(read.is_ok() && read->has_value());
  EXPECT_EQ((*read)->limit_keys, std::vector<std::string>{"tessera.dev/gpu"});
  EXPECT_EQ((*read)->request_keys,
            (std::vector<std::string>{"tessera.dev/gpu", "tessera.dev/gpu-cores"}));
  EXPECT_EQ((*read)->request.cores, 20u);
}

TEST(ShareRequest, NumbersAreAcceptedWhereAClientWroteThem) {
  EXPECT_EQ(read({{"tessera.dev/gpu", 2}}).count, 2u);
  Result<std::optional<Shorthand>> negative =
      read_shorthand(container_with({{"tessera.dev/gpu", -1}}), false);
  EXPECT_FALSE(negative.is_ok());
  Result<std::optional<Shorthand>> too_many =
      read_shorthand(container_with({{"tessera.dev/gpu", "33"}}), false);
  EXPECT_FALSE(too_many.is_ok());
}

}  // namespace
}  // namespace tessera::webhook
