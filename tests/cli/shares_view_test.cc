// `tessera shares`: the table's columns and cells, and -o json / -o yaml parsing back into the
// message they were printed from.
#include "views/shares_view.h"

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <sstream>

#include "node_fixture.h"

namespace tessera::cli {
namespace {

using namespace tessera::cli::testing;
namespace v1 = tessera::node::v1;
using google::protobuf::util::MessageDifferencer;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream stream(text);
  for (std::string line; std::getline(stream, line);) lines.push_back(line);
  return lines;
}

// A node with every kind of field set: two GPUs, a claim's share with two devices and a process,
// a local share without a memory limit, names YAML would read as other types.
v1::ListSharesResponse full_node() {
  v1::ListSharesResponse node;
  add_gpu(node, "GPU-11111111-2222-3333-4444-555555555555", 6 * kGiB, 141 * kGiB, 45);
  add_gpu(node, "GPU-66666666-7777-8888-9999-000000000000", 0, 141 * kGiB, 0);
  v1::Share& claim = add_share(node, "tenants-train-0a1b", node.gpus(0).uuid(),
                               3 * kGiB + 512 * kMiB, 4 * kGiB, 30, 12.25, 0.5, {"python3"});
  claim.set_namespace_("tenants");
  claim.set_claim("train");
  claim.set_claim_uid("0a1b2c3d-0000-1111-2222-333344445555");
  claim.set_pod("tenants/train-7d9f");
  claim.set_backend("quota");
  claim.set_policy("report");
  claim.set_source("agent");
  claim.set_qos_class("burstable");
  v1::ShareDevice& second = *claim.add_devices();
  second.set_gpu_uuid(node.gpus(1).uuid());
  second.set_memory_limit_bytes(8 * kGiB);
  second.set_memory_request_bytes(2 * kGiB);  // may borrow 6 GiB above its request
  second.set_qos_class("burstable");
  second.set_cores_request_percent(50);
  second.set_cores_limit_percent(80);
  second.set_cores_used_percent(33.3333333333333);
  second.set_launches(18446744073709551615ull);  // the largest uint64 survives both formats
  second.set_allocations_denied(2);
  second.set_context_overhead_bytes(500 * kMiB);
  claim.mutable_processes(0)->add_memory_bytes(kGiB);
  claim.mutable_processes(0)->set_launches(7);
  claim.mutable_processes(0)->set_gpu_seconds(0.1);
  v1::Share& local = add_share(node, "123", node.gpus(0).uuid(), kGiB, 0, 100);
  local.set_priority("true");
  local.set_qos_class("guaranteed");
  node.mutable_gpus(0)->set_health_reason("");
  node.mutable_gpus(1)->set_healthy(false);
  node.mutable_gpus(1)->set_health_reason("xid-79");
  node.set_node("gpu-node-1");
  node.set_sampled_unix_ms(kSampledAt);
  return node;
}

TEST(SharesTable, HasKubectlColumnsAndOneLinePerShareGpu) {
  const std::string table = render_shares_table(full_node(), kSampledAt);
  const std::vector<std::string> lines = lines_of(table);
  ASSERT_EQ(lines.size(), 4u) << table;
  EXPECT_EQ(lines[0],
            "NAMESPACE   CLAIM   SHARE                GPU   MEMORY       CORES     CLASS        "
            "PROCESSES   AGE");
  EXPECT_EQ(lines[1],
            "tenants     train   tenants-train-0a1b   0     3.5Gi/4Gi    30%       burstable    "
            "1           90s");
  // request..limit: the share may borrow above its request.
  EXPECT_EQ(lines[2],
            "tenants     train   tenants-train-0a1b   1     0/2Gi..8Gi   50%/80%   burstable    "
            "1           90s");
  EXPECT_EQ(lines[3],
            "-           -       123                  0     1Gi/-        100%      guaranteed   "
            "0           90s");
}

TEST(SharesTable, CutsLongNamesAndShowsUnknownGpusByUuid) {
  v1::ListSharesResponse node;
  add_share(node, "a-very-long-share-name-that-goes-on-and-on-and-on-0123456789",
            "GPU-abcdef012345", 0, kGiB, 100);
  const std::vector<std::string> lines = lines_of(render_shares_table(node, kSampledAt));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[1].find("a-very-long-share-na~n-and-on-0123456789 "), std::string::npos)
      << lines[1];
  EXPECT_NE(lines[1].find(" GPU-abcdef01 "), std::string::npos) << lines[1];
}

TEST(SharesTable, IsEmptyWithoutShares) {
  v1::ListSharesResponse node;
  add_gpu(node, "GPU-a", 0, kGiB, 0);
  EXPECT_EQ(render_shares_table(node, kSampledAt), "");
}

TEST(SharesTable, AShareThatCouldNotBeReadShowsItsUsageAsUnknownNotZero) {
  v1::ListSharesResponse node;
  add_gpu(node, "GPU-a", 0, 141 * kGiB, 0);
  add_share(node, "fine", "GPU-a", kGiB, 4 * kGiB, 50, 0, 0, {"python3"});
  v1::Share& broken = add_share(node, "broken", "GPU-a", 0, 8 * kGiB, 30);
  broken.set_read_error(
      "/var/lib/tessera/shares/broken/usage is truncated (64 of 4160 bytes its "
      "slots need)");
  const std::vector<std::string> lines = lines_of(render_shares_table(node, kSampledAt));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[1],
            "-           -       fine     0     1Gi/4Gi   50%     -       1           90s");
  // Its limit is known (the agent set it), what it uses is not: "?", never "0".
  EXPECT_EQ(lines[2],
            "-           -       broken   0     ?/8Gi     30%     -       ?           90s");
  const std::vector<std::string> warnings = unread_share_warnings(node);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0],
            "share broken: /var/lib/tessera/shares/broken/usage is truncated (64 of 4160 bytes "
            "its slots need) (its usage is unknown)");
  // A share without devices (its limits page could not be read either) shows no figure at all.
  node.mutable_shares(1)->clear_devices();
  EXPECT_EQ(lines_of(render_shares_table(node, kSampledAt))[2],
            "-           -       broken   -     -         -       -       ?           90s");
  EXPECT_TRUE(unread_share_warnings(v1::ListSharesResponse{}).empty());
}

TEST(SharesJson, CarriesTheReadErrorAndYamlToo) {
  v1::ListSharesResponse node;
  add_share(node, "broken", "GPU-a", 0, kGiB, 100).set_read_error("usage page is not valid");
  add_share(node, "fine", "GPU-a", 0, kGiB, 100);
  Snapshot snapshot;
  snapshot.node = node;
  const Result<std::string> json = render_shares(snapshot, "json", kSampledAt);
  ASSERT_TRUE(json.is_ok());
  const nlohmann::ordered_json parsed = nlohmann::ordered_json::parse(*json);
  EXPECT_EQ(parsed.at("shares").at(0).at("read_error"), "usage page is not valid");
  EXPECT_EQ(parsed.at("shares").at(1).at("read_error"), "");
  const Result<std::string> yaml = render_shares(snapshot, "yaml", kSampledAt);
  ASSERT_TRUE(yaml.is_ok());
  EXPECT_NE(yaml->find("read_error: usage page is not valid\n"), std::string::npos) << *yaml;
  EXPECT_NE(yaml->find("read_error: \"\"\n"), std::string::npos) << *yaml;
  const Result<nlohmann::ordered_json> back_json = yaml_to_json(*yaml);
  ASSERT_TRUE(back_json.is_ok());
  v1::ListSharesResponse back;
  ASSERT_TRUE(message_from_json(*back_json, back).is_ok());
  EXPECT_TRUE(MessageDifferencer::Equals(node, back)) << back.DebugString();
}

TEST(SharesJson, ParsesBackIntoTheSameMessage) {
  const v1::ListSharesResponse node = full_node();
  Snapshot snapshot;
  snapshot.node = node;
  const Result<std::string> text = render_shares(snapshot, "json", kSampledAt);
  ASSERT_TRUE(text.is_ok());
  const nlohmann::ordered_json parsed = nlohmann::ordered_json::parse(*text);
  // Proto field names, numbers as numbers, defaults printed.
  EXPECT_EQ(parsed["shares"][0]["devices"][1]["launches"].get<uint64_t>(), 18446744073709551615ull);
  EXPECT_EQ(parsed["shares"][1]["namespace"], "");
  EXPECT_EQ(parsed["sampled_unix_ms"].get<int64_t>(), kSampledAt);
  v1::ListSharesResponse back;
  ASSERT_TRUE(message_from_json(parsed, back).is_ok());
  EXPECT_TRUE(MessageDifferencer::Equals(node, back)) << back.DebugString();
}

TEST(SharesYaml, ParsesBackIntoTheSameMessage) {
  const v1::ListSharesResponse node = full_node();
  Snapshot snapshot;
  snapshot.node = node;
  const Result<std::string> text = render_shares(snapshot, "yaml", kSampledAt);
  ASSERT_TRUE(text.is_ok());
  // Strings that read as numbers or booleans are quoted; numbers are not.
  EXPECT_NE(text->find("name: \"123\""), std::string::npos) << *text;
  EXPECT_NE(text->find("priority: \"true\""), std::string::npos) << *text;
  EXPECT_NE(text->find("namespace: \"\""), std::string::npos) << *text;
  EXPECT_NE(text->find("sampled_unix_ms: 1700000000000"), std::string::npos) << *text;
  const Result<nlohmann::ordered_json> json = yaml_to_json(*text);
  ASSERT_TRUE(json.is_ok()) << json.status().message();
  v1::ListSharesResponse back;
  const Status parsed = message_from_json(*json, back);
  ASSERT_TRUE(parsed.is_ok()) << parsed.message() << "\n" << *text;
  EXPECT_TRUE(MessageDifferencer::Equals(node, back)) << back.DebugString();
}

TEST(SharesYaml, AnEmptyNodeRoundTripsToo) {
  v1::ListSharesResponse node;
  const nlohmann::ordered_json json = message_to_json(node);
  const Result<nlohmann::ordered_json> back = yaml_to_json(json_to_yaml(json));
  ASSERT_TRUE(back.is_ok());
  EXPECT_EQ(*back, json);
  EXPECT_EQ(json_to_yaml(json), "node: \"\"\ngpus: []\nshares: []\nsampled_unix_ms: 0\n");
}

TEST(SharesTable, WideAddsNodePodGpuUuidPriorityAndSourceWithNamesWhole) {
  v1::ListSharesResponse node = full_node();
  node.mutable_shares(1)->set_name(std::string(50, 'x'));  // cut at 40 in the table, not in wide
  const std::vector<std::string> lines = lines_of(render_shares_table(node, kSampledAt, true));
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0],
            "NAMESPACE   CLAIM   SHARE                                                GPU   MEMORY"
            "       CORES     CLASS        PROCESSES   AGE   NODE         POD                  "
            "GPU-UUID                                   PRIORITY   SOURCE");
  EXPECT_EQ(
      lines[2],
      "tenants     train   tenants-train-0a1b                                   1     "
      "0/2Gi..8Gi   50%/80%   burstable    1           90s   gpu-node-1   tenants/train-7d9f   "
      "GPU-66666666-7777-8888-9999-000000000000   normal     agent");
  EXPECT_NE(lines[3].find(std::string(50, 'x') + "   0"), std::string::npos) << lines[3];
  EXPECT_NE(lines[3].find("   -                    GPU-11111111-2222-3333-4444-555555555555   "
                          "true       tessera-run"),
            std::string::npos)
      << lines[3];
  const Result<std::string> wide = render_shares(snapshot_of(node), "wide", kSampledAt);
  ASSERT_TRUE(wide.is_ok());
  EXPECT_EQ(lines_of(*wide)[0], lines[0]);
}

// A node with a GPU in MIG mode (two instances) and a whole GPU; a share inside each instance
// (found by the instance's device) and one on the whole GPU.
v1::ListSharesResponse mig_node() {
  v1::ListSharesResponse node;
  v1::Gpu& mig =
      add_gpu(node, "GPU-11111111-2222-3333-4444-555555555555", 20 * kGiB, 141 * kGiB, 0);
  add_mig_instance(mig, 1, "3g.71gb", 6 * kGiB, 71168 * kMiB);
  add_mig_instance(mig, 9, "1g.18gb", kGiB, 16 * kGiB);
  add_gpu(node, "GPU-66666666-7777-8888-9999-000000000000", 0, 141 * kGiB, 0);
  add_share(node, "in-3g", node.gpus(0).mig_instances(0).uuid(), 3 * kGiB, 8 * kGiB, 30);
  add_share(node, "in-1g", node.gpus(0).mig_instances(1).uuid(), 0, 16 * kGiB, 100);
  add_share(node, "whole", node.gpus(1).uuid(), kGiB, 4 * kGiB, 10);
  // The instance is found by its published device even where the share names another UUID.
  node.mutable_shares(1)->mutable_devices(0)->set_gpu_uuid("MIG-recreated");
  node.set_node("gpu-node-1");
  node.set_sampled_unix_ms(kSampledAt);
  return node;
}

TEST(SharesTable, ASharesMigInstanceShowsAsGpuSlashGiWithItsProfile) {
  const v1::ListSharesResponse node = mig_node();
  EXPECT_EQ(node.gpus(0).shares(), 2u);
  const std::vector<std::string> lines = lines_of(render_shares_table(node, kSampledAt));
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0],
            "NAMESPACE   CLAIM   SHARE   GPU     PROFILE   MEMORY    CORES   CLASS   PROCESSES   "
            "AGE");
  EXPECT_EQ(lines[1],
            "-           -       in-3g   0/gi1   3g.71gb   3Gi/8Gi   30%     -       0           "
            "90s");
  EXPECT_EQ(lines[2],
            "-           -       in-1g   0/gi9   1g.18gb   0/16Gi    100%    -       0           "
            "90s");
  EXPECT_EQ(lines[3],
            "-           -       whole   1       -         1Gi/4Gi   10%     -       0           "
            "90s");
  // Wide: GPU-UUID is the physical GPU's, MIG-DEVICE and MIG-UUID name the instance.
  const std::vector<std::string> wide = lines_of(render_shares_table(node, kSampledAt, true));
  ASSERT_EQ(wide.size(), 4u);
  EXPECT_NE(wide[0].find("GPU-UUID                                   PRIORITY   SOURCE        "
                         "MIG-DEVICE      MIG-UUID"),
            std::string::npos)
      << wide[0];
  EXPECT_NE(wide[1].find("GPU-11111111-2222-3333-4444-555555555555   normal     tessera-run   "
                         "gpu-0-mig-gi1   MIG-1-11111111-2222-3333-4444-555555555555"),
            std::string::npos)
      << wide[1];
  EXPECT_NE(wide[3].find("GPU-66666666-7777-8888-9999-000000000000   normal     tessera-run   -"
                         "               -"),
            std::string::npos)
      << wide[3];
}

TEST(SharesJson, MigInstancesRoundTripUnderTheirGpu) {
  const v1::ListSharesResponse node = mig_node();
  Snapshot snapshot;
  snapshot.node = node;
  const Result<std::string> text = render_shares(snapshot, "json", kSampledAt);
  ASSERT_TRUE(text.is_ok());
  const nlohmann::ordered_json parsed = nlohmann::ordered_json::parse(*text);
  EXPECT_EQ(parsed["gpus"][0]["mig_enabled"], true);
  EXPECT_EQ(parsed["gpus"][0]["mig_instances"][0]["profile"], "3g.71gb");
  EXPECT_EQ(parsed["gpus"][0]["mig_instances"][0]["device"], "gpu-0-mig-gi1");
  EXPECT_EQ(parsed["gpus"][0]["mig_instances"][0]["shares"], 1);
  EXPECT_EQ(parsed["gpus"][1]["mig_instances"], nlohmann::ordered_json::array());
  EXPECT_EQ(parsed["shares"][0]["devices"][0]["device"], "gpu-0-mig-gi1");
  v1::ListSharesResponse back;
  ASSERT_TRUE(message_from_json(parsed, back).is_ok());
  EXPECT_TRUE(MessageDifferencer::Equals(node, back)) << back.DebugString();
  const Result<std::string> yaml = render_shares(snapshot, "yaml", kSampledAt);
  ASSERT_TRUE(yaml.is_ok());
  EXPECT_NE(yaml->find("profile: 3g.71gb"), std::string::npos) << *yaml;
  const Result<nlohmann::ordered_json> from_yaml = yaml_to_json(*yaml);
  ASSERT_TRUE(from_yaml.is_ok());
  ASSERT_TRUE(message_from_json(*from_yaml, back).is_ok());
  EXPECT_TRUE(MessageDifferencer::Equals(node, back)) << back.DebugString();
}

TEST(SharesOutput, RefusesAnUnknownFormatAndBadInput) {
  Snapshot snapshot;
  const Result<std::string> text = render_shares(snapshot, "xml", kSampledAt);
  ASSERT_FALSE(text.is_ok());
  EXPECT_EQ(text.status().message(), "-o 'xml' is not table, wide, json or yaml");
  EXPECT_FALSE(yaml_to_json("a: [1, 2").is_ok());
  v1::ListSharesResponse back;
  EXPECT_FALSE(message_from_json(nlohmann::ordered_json{{"shares", "not a list"}}, back).is_ok());
}

}  // namespace
}  // namespace tessera::cli
