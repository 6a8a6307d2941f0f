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

// tessera.dev/mig-<profile>: N instances of the MIG class with that profile; alone, each whole
// (all of its memory by the request policy's default, cores 100); with memory or cores, a share
// inside one.
TEST(ShareRequest, AMigProfileAsksForInstancesOfTheMigClass) {
  const ShareRequest whole = read({{"tessera.dev/mig-3g.71gb", "2"}});
  EXPECT_EQ(whole.count, 2u);
  EXPECT_EQ(whole.mig_profile, "3g.71gb");
  EXPECT_EQ(whole.template_name(), "tessera-vgpu-2-mig3g71gb-c100");
  EXPECT_EQ(whole.claim_template("ns")["spec"]["spec"]["devices"]["requests"][0]["exactly"],
            json::parse(R"({"deviceClassName": "mig.vgpu.tessera.dev",
                            "allocationMode": "ExactCount", "count": 2,
                            "selectors": [{"cel": {"expression":
                              "device.attributes[\"vgpu.tessera.dev\"].profile == \"3g.71gb\""}}],
                            "capacity": {"requests": {"cores": "100"}}})"));

  const ShareRequest share =
      read({{"tessera.dev/mig-1g.18gb", "1"}, {"tessera.dev/gpu-memory", "4Gi"}});
  EXPECT_EQ(share.template_name(), "tessera-vgpu-1-mig1g18gb-m4gi");
  EXPECT_EQ(
      share.claim_template("ns")["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"],
      json::parse(R"({"requests": {"memory": "4Gi"}})"));
  // Cores 0 is a best-effort share inside the instance, not the instance whole.
  const ShareRequest best_effort =
      read({{"tessera.dev/mig-3g.71gb", "1"}, {"tessera.dev/gpu-cores", "0"}});
  EXPECT_EQ(best_effort.cores, std::nullopt);
  EXPECT_EQ(best_effort.template_name(), "tessera-vgpu-1-mig3g71gb");
  EXPECT_NE(best_effort, read({{"tessera.dev/mig-3g.40gb", "1"}, {"tessera.dev/gpu-cores", "0"}}));
}

TEST(ShareRequest, MigProfileNames) {
  for (const char* good : {"1g.18gb", "3g.71gb", "7g.141gb", "1g.5gb", "4g.40gb"})
    EXPECT_TRUE(is_mig_profile(good)) << good;
  for (const char* bad : {"", "3g71gb", "3g.71GB", "0g.10gb", "8g.80gb", "3g.71", "g.71gb",
                          "3g.071gb", "1g.18gb+me", "1c.3g.20gb", "3g.71gb ", "3g.12345gb"})
    EXPECT_FALSE(is_mig_profile(bad)) << bad;
}

TEST(ShareRequest, BadMigShorthandIsRefusedNamingTheKeyAndTheValue) {
  struct Case {
    json limits;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{{"tessera.dev/mig-3g71gb", "1"}},
       "container \"c\": tessera.dev/mig-3g71gb: \"3g71gb\" is not a MIG profile: expected "
       "<compute slices>g.<memory>gb, such as 3g.71gb or 1g.18gb"},
      {{{"tessera.dev/mig-", "1"}}, "container \"c\": tessera.dev/mig-: \"\" is not a MIG profile"},
      {{{"tessera.dev/mig-3g.71gb", "0"}},
       "container \"c\": tessera.dev/mig-3g.71gb \"0\": expected a whole number of MIG "
       "instances, 1..32"},
      {{{"tessera.dev/mig-3g.71gb", "1"}, {"tessera.dev/gpu", "1"}},
       "container \"c\": tessera.dev/gpu and tessera.dev/mig-3g.71gb both give a count; give "
       "tessera.dev/mig-3g.71gb alone"},
      {{{"tessera.dev/mig-3g.71gb", "1"}, {"tessera.dev/mig-1g.18gb", "1"}},
       "container \"c\" asks for MIG instances of two profiles (tessera.dev/mig-1g.18gb, "
       "tessera.dev/mig-3g.71gb); give one"},
  };
  for (const Case& c : cases) {
    Result<std::optional<Shorthand>> read = read_shorthand(container_with(c.limits), false);
    ASSERT_FALSE(read.is_ok()) << c.limits.dump();
    EXPECT_EQ(read.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(read.status().message().substr(0, c.message.size()), c.message) << c.limits.dump();
  }
  // The MIG key is removed from both lists like the others.
  const json container = {{"name", "c"},
                          {"resources",
                           {{"limits", {{"tessera.dev/mig-3g.71gb", "1"}}},
                            {"requests", {{"tessera.dev/mig-3g.71gb", "1"}}}}}};
  Result<std::optional<Shorthand>> both = read_shorthand(container, false);
  ASSERT_TRUE(both.is_ok() && both->has_value()) << both.status().message();
  EXPECT_EQ((*both)->limit_keys, std::vector<std::string>{"tessera.dev/mig-3g.71gb"});
  EXPECT_EQ((*both)->request_keys, std::vector<std::string>{"tessera.dev/mig-3g.71gb"});
}

}  // namespace
}  // namespace tessera::webhook
