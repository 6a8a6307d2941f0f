#include "model/share_spec.h"

#include <functional>

#include <gtest/gtest.h>

#include "apiserver/claim_fixture.h"
#include "model/claim_pods.h"

namespace tessera::agent {
namespace {

using nlohmann::json;
using testing::FixtureShare;
using testing::make_claim;
using testing::opaque_config;
using testing::written_claim;

constexpr char kUid[] = "0f6b3f0e-7c59-4d0e-9b4e-2f7a5d1c9e01";
constexpr char kShareA[] = "5e1f0a2b-0000-4000-8000-00000000000a";
constexpr char kShareB[] = "5e1f0a2b-0000-4000-8000-00000000000b";

ShareSpecInput input_for(const json& claim, const std::string& uid = kUid) {
  ShareSpecInput input;
  input.claim_json = claim.dump();
  input.expected_uid = uid;
  input.pool = "node-a";
  input.devices = {{"gpu-0", "GPU-00000000-0000-0000-0000-000000000000", 0, 150ull << 30},
                   {"gpu-1", "GPU-11111111-1111-1111-1111-111111111111", 1, 150ull << 30}};
  return input;
}

// compute_share_specs for the many cases below: "" with `out` set to the shares, or the error's
// message with `out` emptied (the codes have their own test).
std::string specs_or_error(const ShareSpecInput& input, std::vector<ShareSpec>& out) {
  Result<std::vector<ShareSpec>> computed = compute_share_specs(input);
  out = computed.is_ok() ? std::move(computed).value() : std::vector<ShareSpec>{};
  return computed.status().message();
}

json config(const json& fields) {
  json p = {{"apiVersion", "vgpu.tessera.dev/v1alpha1"}, {"kind", "VgpuConfig"}};
  p.update(fields);
  return p;
}

// A container is given one TESSERA_SHARE_DIR: shares of one claim on distinct GPUs (a request
// for two GPUs) share a folder; shares of one GPU, other configs and MPS shares do not.
TEST(ShareSpec, SharesOfDistinctGpusShareAFolder) {
  std::vector<ShareSpec> specs;
  json two_gpus = make_claim(
      "c", kUid,
      {{"gpus", "gpu-0", kShareA, "8Gi", "30"}, {"gpus", "gpu-1", kShareB, "4Gi", "70"}});
  ASSERT_EQ(specs_or_error(input_for(two_gpus), specs), "");
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[0].folder, specs[0].name());
  EXPECT_EQ(specs[1].folder, specs[0].name());
  EXPECT_EQ(shares_by_folder(specs).size(), 1u);

  // gpu-0 twice and gpu-1: the second gpu-0 share needs its own folder (other limits, same GPU).
  constexpr char kShareC[] = "5e1f0a2b-0000-4000-8000-00000000000c";
  json mixed = make_claim("c", kUid,
                          {{"a", "gpu-0", kShareA, "8Gi", "30"},
                           {"b", "gpu-0", kShareB, "4Gi", "70"},
                           {"c", "gpu-1", kShareC, "2Gi", "10"}});
  ASSERT_EQ(specs_or_error(input_for(mixed), specs), "");
  EXPECT_EQ(specs[0].folder_name(), specs[0].name());
  EXPECT_EQ(specs[1].folder_name(), specs[1].name());
  EXPECT_EQ(specs[2].folder_name(), specs[0].name());
  const auto folders = shares_by_folder(specs);
  ASSERT_EQ(folders.size(), 2u);
  EXPECT_EQ(folders[0].size(), 2u);  // a and c
  EXPECT_EQ(folders[1].size(), 1u);  // b

  // Different configs (a priority for one request) or MPS: never grouped.
  json configs = json::array(
      {opaque_config("FromClaim", config({{"compute", {{"priority", "high"}}}}), {"b"})});
  json other_config = make_claim(
      "c", kUid, {{"a", "gpu-0", kShareA, "8Gi", "30"}, {"b", "gpu-1", kShareB, "4Gi", "70"}},
      configs);
  ASSERT_EQ(specs_or_error(input_for(other_config), specs), "");
  EXPECT_EQ(shares_by_folder(specs).size(), 2u);
  json mps = make_claim(
      "c", kUid, {{"a", "gpu-0", kShareA, "8Gi", "30"}, {"a", "gpu-1", kShareB, "4Gi", "70"}},
      json::array({opaque_config("FromClass", config({{"sharing", {{"strategy", "MPS"}}}}))}));
  ASSERT_EQ(specs_or_error(input_for(mps), specs), "");
  EXPECT_TRUE(specs[0].folder.empty());
  EXPECT_TRUE(specs[1].folder.empty());
}

TEST(ShareSpec, TwoSharesOfOneDeviceStayDistinct) {
  const json claim = make_claim(
      "c", kUid, {{"a", "gpu-0", kShareA, "8Gi", "30"}, {"b", "gpu-0", kShareB, "4Gi", "70"}});
  std::vector<ShareSpec> specs;
  ASSERT_EQ(specs_or_error(input_for(claim), specs), "");
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[0].name(), std::string(kUid) + "-gpu-0-" + kShareA);
  EXPECT_EQ(specs[1].name(), std::string(kUid) + "-gpu-0-" + kShareB);
  EXPECT_EQ(specs[0].memory_bytes, 8ull << 30);
  EXPECT_EQ(specs[0].cores, 30u);
  EXPECT_EQ(specs[1].memory_bytes, 4ull << 30);
  EXPECT_EQ(specs[1].cores, 70u);
  EXPECT_EQ(specs[0].request_names, std::vector<std::string>{"a"});
  EXPECT_EQ(specs[0].uuid, "GPU-00000000-0000-0000-0000-000000000000");
  EXPECT_EQ(specs[0].pool, "node-a");
}

TEST(ShareSpec, MissingCapacitiesMeanNoLimitNeverAnInventedOne) {
  const json claim = make_claim("c", kUid, {{"gpu", "gpu-1", "", "", ""}});
  std::vector<ShareSpec> specs;
  ASSERT_EQ(specs_or_error(input_for(claim), specs), "");
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_FALSE(specs[0].memory_bytes.has_value());
  EXPECT_FALSE(specs[0].cores.has_value());
  EXPECT_EQ(specs[0].share_id, "");
  EXPECT_EQ(specs[0].name(), std::string(kUid) + "-gpu-1");
  EXPECT_EQ(specs[0].minor, 1u);
}

TEST(ShareSpec, ClassThenClaimConfigsMergeInApiOrderPerRequest) {
  json configs = json::array({
      opaque_config("FromClass", config({{"compute", {{"burst", 50}, {"priority", "low"}}}})),
      opaque_config("FromClaim", config({{"compute", {{"priority", "high"}}}}), {"a"}),
      {{"source", "FromClaim"},
       {"opaque", {{"driver", "other.example.com"}, {"parameters", {{"x", 1}}}}}},
  });
  const json claim = make_claim(
      "c", kUid, {{"a", "gpu-0", kShareA, "8Gi", "30"}, {"b", "gpu-0", kShareB, "4Gi", "70"}},
      configs);
  std::vector<ShareSpec> specs;
  ASSERT_EQ(specs_or_error(input_for(claim), specs), "");
  EXPECT_EQ(specs[0].config.cores_limit, 50u);
  EXPECT_EQ(specs[0].config.priority, vgpu_config::Priority::kHigh);
  EXPECT_EQ(specs[1].config.cores_limit, 50u);
  EXPECT_EQ(specs[1].config.priority, vgpu_config::Priority::kLow);
}

TEST(ShareSpec, SubRequestsTakeTheirParentsConfig) {
  json configs =
      json::array({opaque_config("FromClaim", config({{"compute", {{"burst", 90}}}}), {"gpu"})});
  const json claim = make_claim("c", kUid, {{"gpu/small", "gpu-0", kShareA, "1Gi", "10"}}, configs);
  std::vector<ShareSpec> specs;
  ASSERT_EQ(specs_or_error(input_for(claim), specs), "");
  EXPECT_EQ(specs[0].config.cores_limit, 90u);
}

TEST(ShareSpec, ErrorsNameWhatIsWrong) {
  std::vector<ShareSpec> specs;
  const json good = make_claim("c", kUid, {{"gpu", "gpu-0", kShareA, "8Gi", "30"}});
  EXPECT_EQ(specs_or_error(input_for(good, "another-uid"), specs),
            std::string("claim was replaced: metadata.uid is ") + kUid +
                ", kubelet asked for another-uid");

  json unallocated = good;
  unallocated["status"].erase("allocation");
  EXPECT_EQ(specs_or_error(input_for(unallocated), specs),
            std::string("claim ") + kUid + " is not allocated (no status.allocation)");

  json other = good;
  other["status"]["allocation"]["devices"]["results"][0]["driver"] = "gpu.nvidia.com";
  EXPECT_EQ(
      specs_or_error(input_for(other), specs),
      std::string("claim ") + kUid + " has no allocation results for driver vgpu.tessera.dev");

  json unknown = make_claim("c", kUid, {{"gpu", "gpu-7", kShareA, "8Gi", "30"}});
  EXPECT_EQ(specs_or_error(input_for(unknown), specs),
            "status.allocation.devices.results[0]: unknown device gpu-7 in pool node-a");

  json other_pool =
      make_claim("c", kUid, {{"gpu", "gpu-0", kShareA, "8Gi", "30"}}, json::array(), "node-b");
  EXPECT_EQ(specs_or_error(input_for(other_pool), specs),
            "status.allocation.devices.results[0]: pool node-b is not this node's pool node-a");

  json bad_config = make_claim(
      "c", kUid, {{"gpu", "gpu-0", kShareA, "8Gi", "30"}},
      json::array({opaque_config("FromClaim", config({{"compute", {{"burst", 200}}}}))}));
  EXPECT_EQ(
      specs_or_error(input_for(bad_config), specs),
      "status.allocation.devices.config[0].opaque.parameters.compute.burst: invalid value 200 "
      "(an integer percent 0..100; compute.limit is its new name)");

  // Limits below the requests, or above the GPU (which only the agent knows): refused at
  // prepare, naming the result, the field, the value and the bound.
  json low_limit = make_claim(
      "c", kUid, {{"gpu", "gpu-0", kShareA, "8Gi", "30"}},
      json::array({opaque_config("FromClaim", config({{"memory", {{"limit", "4Gi"}}}}))}));
  EXPECT_EQ(specs_or_error(input_for(low_limit), specs),
            "status.allocation.devices.results[0]: memory.limit 4Gi is below the memory request "
            "8Gi (a limit is at least the request)");
  json low_cores =
      make_claim("c", kUid, {{"gpu", "gpu-0", kShareA, "8Gi", "30"}},
                 json::array({opaque_config("FromClaim", config({{"compute", {{"limit", 20}}}}))}));
  EXPECT_EQ(specs_or_error(input_for(low_cores), specs),
            "status.allocation.devices.results[0]: compute.limit 20 is below the cores request 30 "
            "(a limit is at least the request)");
  json huge = make_claim(
      "c", kUid, {{"gpu", "gpu-0", kShareA, "8Gi", "30"}},
      json::array({opaque_config("FromClaim", config({{"memory", {{"limit", "1Ti"}}}}))}));
  const std::string above = specs_or_error(input_for(huge), specs);
  EXPECT_NE(above.find("status.allocation.devices.results[0]: memory.limit 1Ti is above the GPU's "
                       "memory"),
            std::string::npos)
      << above;
  EXPECT_TRUE(specs.empty()) << "nothing half-computed beside an error";

  json mps_burst = make_claim(
      "c", kUid, {{"gpu", "gpu-0", kShareA, "8Gi", "30"}},
      json::array({opaque_config("FromClass", config({{"sharing", {{"strategy", "MPS"}}}})),
                   opaque_config("FromClaim", config({{"compute", {{"burst", 50}}}}))}));
  EXPECT_EQ(specs_or_error(input_for(mps_burst), specs),
            "status.allocation.devices.results[0]: compute.limit 50 is only supported with "
            "sharing.strategy Quota, not MPS");

  const json time_slicing = json::array({opaque_config(
      "FromClaim", config({{"sharing", {{"strategy", "TimeSlicing"}, {"timeSlice", "Long"}}}}))});
  json partial_cores = make_claim("c", kUid, {{"gpu", "gpu-0", kShareA, "", "30"}}, time_slicing);
  EXPECT_EQ(specs_or_error(input_for(partial_cores), specs),
            "status.allocation.devices.results[0]: sharing.strategy TimeSlicing needs the whole "
            "GPU, but consumedCapacity.cores is 30 (must be 100 or absent)");
  json partial_memory =
      make_claim("c", kUid, {{"gpu", "gpu-0", kShareA, "8Gi", "100"}}, time_slicing);
  EXPECT_EQ(specs_or_error(input_for(partial_memory), specs),
            "status.allocation.devices.results[0]: sharing.strategy TimeSlicing needs the whole "
            "GPU, but consumedCapacity.memory is 8589934592 bytes of 161061273600 (must be all of "
            "it or absent)");
  json whole = make_claim("c", kUid, {{"gpu", "gpu-0", kShareA, "150Gi", "100"}}, time_slicing);
  ASSERT_EQ(specs_or_error(input_for(whole), specs), "");
  EXPECT_EQ(specs[0].config.strategy, vgpu_config::SharingStrategy::kTimeSlicing);
  EXPECT_EQ(specs[0].config.time_slice, vgpu_config::TimeSlice::kLong);

  // What the scheduler never writes (it refuses the request): written out as given.
  json bad_memory = written_claim("c", kUid, {{"gpu", "gpu-0", kShareA, "8Gx", "30"}});
  EXPECT_EQ(
      specs_or_error(input_for(bad_memory), specs),
      "status.allocation.devices.results[0].consumedCapacity.memory: invalid quantity \"8Gx\"");
  json bad_cores = written_claim("c", kUid, {{"gpu", "gpu-0", kShareA, "8Gi", "150"}});
  EXPECT_EQ(specs_or_error(input_for(bad_cores), specs),
            "status.allocation.devices.results[0].consumedCapacity.cores: invalid value \"150\" "
            "(an integer percent 0..100)");

  json second_bad = written_claim(
      "c", kUid, {{"a", "gpu-0", kShareA, "8Gi", "30"}, {"b", "gpu-0", kShareB, "4Gi", "x"}});
  EXPECT_NE(specs_or_error(input_for(second_bad), specs), "");
  EXPECT_TRUE(specs.empty());  // all or nothing

  json twice = make_claim(
      "c", kUid, {{"a", "gpu-0", kShareA, "8Gi", "30"}, {"b", "gpu-0", kShareA, "8Gi", "30"}});
  EXPECT_NE(specs_or_error(input_for(twice), specs).find("allocated twice with the same shareID"),
            std::string::npos);

  // Every part safe, the whole too long to name a folder (found by fuzz_claim).
  const std::string long_share(230, 'H');
  json too_long = make_claim("c", kUid, {{"gpu", "gpu-0", long_share, "8Gi", "30"}});
  EXPECT_NE(specs_or_error(input_for(too_long), specs)
                .find("status.allocation.devices.results[0]: the share name"),
            std::string::npos);
  EXPECT_TRUE(specs.empty());

  json traversal = make_claim("c", kUid, {{"gpu", "gpu-0", "../../etc", "8Gi", "30"}});
  EXPECT_EQ(specs_or_error(input_for(traversal), specs),
            "status.allocation.devices.results[0].shareID: invalid value \"../../etc\"");

  EXPECT_EQ(specs_or_error({"not json", kUid, "vgpu.tessera.dev", "node-a", {}, {}}, specs),
            "claim: not a JSON object");
  EXPECT_TRUE(specs.empty());
}

// A claim the API server (or something in its place) answers in another shape: each field is
// refused, named with the value it had, and no share is computed.
TEST(ShareSpec, ClaimFieldsOfAnotherShapeAreRefusedNamingTheFieldAndValue) {
  const json good = make_claim("c", kUid, {{"gpu", "gpu-0", kShareA, "8Gi", "30"}});
  struct Case {
    std::function<void(json&)> edit;
    std::string error;
  };
  const Case cases[] = {
      {[](json& c) { c.erase("metadata"); }, "claim: metadata.uid: expected a string, got nothing"},
      {[](json& c) { c["metadata"] = "c"; }, "claim: metadata.uid: expected a string, got nothing"},
      {[](json& c) { c["metadata"]["uid"] = 17; },
       "claim: metadata.uid: expected a string, got 17"},
      {[](json& c) { c["status"]["allocation"] = "yes"; },
       "status.allocation: expected an object, got \"yes\""},
      {[](json& c) { c["status"]["allocation"]["devices"] = json::array(); },
       "status.allocation.devices: expected an object, got []"},
      {[](json& c) { c["status"]["allocation"]["devices"]["results"] = json::object(); },
       "status.allocation.devices.results: expected an array, got {}"},
      {[](json& c) { c["status"]["allocation"]["devices"]["results"][0] = "gpu-0"; },
       "status.allocation.devices.results[0]: expected an object, got \"gpu-0\""},
      {[](json& c) { c["status"]["allocation"]["devices"]["results"][0].erase("request"); },
       "status.allocation.devices.results[0].request: expected a string, got nothing"},
      {[](json& c) { c["status"]["allocation"]["devices"]["results"][0]["pool"] = 3; },
       "status.allocation.devices.results[0].pool: expected a string, got 3"},
      {[](json& c) { c["status"]["allocation"]["devices"]["results"][0]["device"] = nullptr; },
       "status.allocation.devices.results[0].device: expected a string, got null"},
      {[](json& c) { c["status"]["allocation"]["devices"]["config"] = "none"; },
       "status.allocation.devices.config: expected an array, got \"none\""},
      {[](json& c) {
         c["status"]["reservedFor"] = {{"name", "trainer"}};
       },
       "status.reservedFor: expected an array, got {\"name\":\"trainer\"}"},
      {[](json& c) { c["status"]["reservedFor"] = "trainer"; },
       "status.reservedFor: expected an array, got \"trainer\""},
  };
  for (const Case& c : cases) {
    json claim = good;
    c.edit(claim);
    std::vector<ShareSpec> specs;
    EXPECT_EQ(specs_or_error(input_for(claim), specs), c.error) << claim.dump();
    EXPECT_TRUE(specs.empty()) << claim.dump();
  }
  // Absent, status.reservedFor is none: the claim is prepared and its pods are none.
  json unreserved = good;
  unreserved["status"].erase("reservedFor");
  std::vector<ShareSpec> specs;
  EXPECT_EQ(specs_or_error(input_for(unreserved), specs), "");
  ASSERT_TRUE(parse_claim_pods(unreserved).is_ok());
  EXPECT_TRUE(parse_claim_pods(unreserved)->pods.empty());
}

// The code says what prepare's caller can do: a replaced or unallocated claim is not in a state to
// prepare (kubelet's view is stale), a device the node lacks is not found, a claim that says
// something wrong is an invalid argument.
TEST(ShareSpec, ErrorCodesSayWhatTheCallerCanDo) {
  const json good = make_claim("c", kUid, {{"gpu", "gpu-0", kShareA, "8Gi", "30"}});
  EXPECT_TRUE(compute_share_specs(input_for(good)).is_ok());
  EXPECT_EQ(compute_share_specs(input_for(good, "another-uid")).status().code(),
            StatusCode::kFailedPrecondition);
  json unallocated = good;
  unallocated["status"].erase("allocation");
  EXPECT_EQ(compute_share_specs(input_for(unallocated)).status().code(),
            StatusCode::kFailedPrecondition);
  const json unknown = make_claim("c", kUid, {{"gpu", "gpu-7", kShareA, "8Gi", "30"}});
  const Status missing = compute_share_specs(input_for(unknown)).status();
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.message(),
            "status.allocation.devices.results[0]: unknown device gpu-7 in pool node-a");
  const json bad_config = make_claim(
      "c", kUid, {{"gpu", "gpu-0", kShareA, "8Gi", "30"}},
      json::array({opaque_config("FromClaim", config({{"compute", {{"burst", 200}}}}))}));
  EXPECT_EQ(compute_share_specs(input_for(bad_config)).status().code(),
            StatusCode::kInvalidArgument);
  const json mps_burst = make_claim(
      "c", kUid, {{"gpu", "gpu-0", kShareA, "8Gi", "30"}},
      json::array({opaque_config("FromClass", config({{"sharing", {{"strategy", "MPS"}}}})),
                   opaque_config("FromClaim", config({{"compute", {{"burst", 50}}}}))}));
  EXPECT_EQ(compute_share_specs(input_for(mps_burst)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(
      compute_share_specs({"not json", kUid, "vgpu.tessera.dev", "node-a", {}, {}}).status().code(),
      StatusCode::kInvalidArgument);
}

TEST(ShareSpec, ResultsOfOtherDriversAreIgnored) {
  json claim = make_claim(
      "c", kUid, {{"a", "gpu-0", kShareA, "8Gi", "30"}, {"b", "gpu-1", kShareB, "4Gi", "70"}});
  claim["status"]["allocation"]["devices"]["results"][0]["driver"] = "gpu.nvidia.com";
  claim["status"]["allocation"]["devices"]["results"][0]["device"] = "whatever";
  std::vector<ShareSpec> specs;
  ASSERT_EQ(specs_or_error(input_for(claim), specs), "");
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_EQ(specs[0].device, "gpu-1");
}

// The webhook refuses these claims at apply time; here it was bypassed (or the class changed
// since): the share gets the admin's bound, and the agent says so.
TEST(ShareSpec, AClaimPastItsClassesBoundsIsHeldToThemAtPrepare) {
  const json configs = json::array({
      opaque_config("FromClass", config({{"enforcement", "kill"},
                                         {"tenantBounds",
                                          {{"maxPriority", "normal"},
                                           {"maxComputeLimit", 50},
                                           {"maxMemoryLimit", "16Gi"}}}})),
      opaque_config("FromClaim", config({{"enforcement", "report"},
                                         {"compute", {{"priority", "high"}, {"limit", 90}}},
                                         {"memory", {{"limit", "64Gi"}}}})),
  });
  const json claim = make_claim("c", kUid, {{"gpu", "gpu-0", kShareA, "8Gi", "30"}}, configs);
  std::vector<std::string> clamped;
  Result<std::vector<ShareSpec>> specs = compute_share_specs(input_for(claim), &clamped);
  ASSERT_TRUE(specs.is_ok()) << specs.status().message();
  const vgpu_config::VgpuConfig& held = (*specs)[0].config;
  EXPECT_EQ(held.enforcement, vgpu_config::EnforcementPolicy::kKill);
  EXPECT_EQ(held.priority, vgpu_config::Priority::kNormal);
  EXPECT_EQ(held.cores_limit, 50u);
  EXPECT_EQ(held.memory_limit, 16ull << 30);
  EXPECT_EQ((*specs)[0].limits().cores_limit, 50u);
  EXPECT_EQ((*specs)[0].limits().memory_limit, 16ull << 30);
  const std::string at = "status.allocation.devices.results[0] (request gpu): ";
  EXPECT_EQ(clamped, (std::vector<std::string>{
                         at + "enforcement report raised to the floor kill",
                         at + "compute.priority high lowered to the highest priority normal",
                         at + "compute.limit 90 lowered to the largest compute limit 50",
                         at + "memory.limit 64Gi lowered to the largest memory limit 16Gi"}));

  // The same claim under a class without bounds keeps what it asked for.
  json unbounded = configs;
  unbounded.erase(0);
  clamped.clear();
  specs = compute_share_specs(
      input_for(make_claim("c", kUid, {{"gpu", "gpu-0", kShareA, "8Gi", "30"}}, unbounded)),
      &clamped);
  ASSERT_TRUE(specs.is_ok()) << specs.status().message();
  EXPECT_EQ((*specs)[0].config.enforcement, vgpu_config::EnforcementPolicy::kReport);
  EXPECT_EQ((*specs)[0].config.priority, vgpu_config::Priority::kHigh);
  EXPECT_EQ((*specs)[0].config.cores_limit, 90u);
  EXPECT_TRUE(clamped.empty());
}

// A class's bounds hold for the requests its configs were copied for, not the claim's others.
TEST(ShareSpec, AClassesBoundsHoldOnlyItsOwnRequests) {
  const json configs = json::array({
      opaque_config("FromClass", config({{"enforcement", "kill"}}), {"a"}),
      opaque_config("FromClaim", config({{"enforcement", "report"}})),
  });
  const json claim = make_claim(
      "c", kUid, {{"a", "gpu-0", kShareA, "8Gi", "30"}, {"b", "gpu-0", kShareB, "4Gi", "70"}},
      configs);
  std::vector<ShareSpec> specs;
  ASSERT_EQ(specs_or_error(input_for(claim), specs), "");
  EXPECT_EQ(specs[0].config.enforcement, vgpu_config::EnforcementPolicy::kKill);
  EXPECT_EQ(specs[1].config.enforcement, vgpu_config::EnforcementPolicy::kReport);
}

// The agent's --tenant-* flags bound every share of the node, class or not, the class's own
// values too.
TEST(ShareSpec, TheNodesBoundsHoldEveryShare) {
  const json configs = json::array({
      opaque_config("FromClass", config({{"compute", {{"priority", "high"}, {"limit", 80}}}})),
  });
  const json claim = make_claim("c", kUid, {{"gpu", "gpu-0", kShareA, "8Gi", "30"}}, configs);
  ShareSpecInput input = input_for(claim);
  input.node_bounds.min_enforcement = vgpu_config::EnforcementPolicy::kKill;
  input.node_bounds.max_priority = vgpu_config::Priority::kLow;
  input.node_bounds.max_cores_limit = 40;
  std::vector<std::string> clamped;
  Result<std::vector<ShareSpec>> specs = compute_share_specs(input, &clamped);
  ASSERT_TRUE(specs.is_ok()) << specs.status().message();
  EXPECT_EQ((*specs)[0].config.enforcement, vgpu_config::EnforcementPolicy::kKill);
  EXPECT_EQ((*specs)[0].config.priority, vgpu_config::Priority::kLow);
  EXPECT_EQ((*specs)[0].config.cores_limit, 40u);
  EXPECT_EQ(clamped.size(), 3u);
}

TEST(ShareSpec, BoundsInAClaimsConfigAreRefused) {
  const json configs = json::array({
      opaque_config("FromClaim", config({{"tenantBounds", {{"maxComputeLimit", 100}}}})),
  });
  const json claim = make_claim("c", kUid, {{"gpu", "gpu-0", kShareA, "8Gi", "30"}}, configs);
  std::vector<ShareSpec> specs;
  EXPECT_EQ(specs_or_error(input_for(claim), specs),
            "status.allocation.devices.config[0].opaque.parameters.tenantBounds: only a "
            "DeviceClass's config may set bounds; a claim's config may not");
}

}  // namespace
}  // namespace tessera::agent
