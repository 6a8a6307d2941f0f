#include "tessera/vgpu_config/vgpu_config.h"

#include <gtest/gtest.h>

namespace tessera::agent {
namespace {

using nlohmann::json;

json base() {
  return {{"apiVersion", "vgpu.tessera.dev/v1alpha1"}, {"kind", "VgpuConfig"}};
}

// "" with `out` decoded, or the error's message (every decoding error is kInvalidArgument).
std::string decode(const json& parameters, vgpu_config::VgpuConfig& out) {
  Result<vgpu_config::VgpuConfig> decoded = vgpu_config::decode_vgpu_config(parameters);
  if (!decoded.is_ok()) {
    EXPECT_EQ(decoded.status().code(), StatusCode::kInvalidArgument);
    return decoded.status().message();
  }
  out = *decoded;
  return "";
}

// check_supported's message, and every refusal is kInvalidArgument.
std::string supported(const vgpu_config::VgpuConfig& config) {
  const Status status = vgpu_config::check_supported(config);
  if (!status.is_ok()) {
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  }
  return status.message();
}

TEST(VgpuConfig, DecodesEveryField) {
  json p = base();
  p["compute"] = {{"limit", 80}, {"priority", "high"}};
  p["memory"] = {{"limit", "8Gi"}};
  p["sharing"] = {{"strategy", "TimeSlicing"}, {"timeSlice", "Long"}};
  vgpu_config::VgpuConfig c;
  ASSERT_EQ(decode(p, c), "");
  EXPECT_EQ(c.cores_limit, 80u);
  EXPECT_EQ(c.memory_limit, 8ull << 30);
  EXPECT_EQ(c.priority, vgpu_config::Priority::kHigh);
  EXPECT_EQ(c.strategy, vgpu_config::SharingStrategy::kTimeSlicing);
  EXPECT_EQ(c.time_slice, vgpu_config::TimeSlice::kLong);
}

TEST(VgpuConfig, EmptyConfigSetsNothing) {
  vgpu_config::VgpuConfig c;
  ASSERT_EQ(decode(base(), c), "");
  EXPECT_EQ(c, vgpu_config::VgpuConfig{});
}

TEST(VgpuConfig, UnknownFieldsNameTheirPath) {
  vgpu_config::VgpuConfig c;
  json p = base();
  p["extra"] = 1;
  EXPECT_EQ(decode(p, c), "extra: unknown field");
  p = base();
  p["compute"] = {{"burts", 10}};
  EXPECT_EQ(decode(p, c), "compute.burts: unknown field");
  p = base();
  p["memory"] = {{"limits", "8Gi"}};
  EXPECT_EQ(decode(p, c), "memory.limits: unknown field");
  p = base();
  p["sharing"] = {{"strategy", "Quota"}, {"mode", "x"}};
  EXPECT_EQ(decode(p, c), "sharing.mode: unknown field");
}

TEST(VgpuConfig, WrongTypesAndValuesNameFieldAndValue) {
  vgpu_config::VgpuConfig c;
  json p = base();
  p["compute"] = {{"burst", "80"}};
  EXPECT_EQ(decode(p, c),
            "compute.burst: invalid value \"80\" (an integer percent 0..100; compute.limit is its "
            "new name)");
  p["compute"] = {{"burst", 101}};
  EXPECT_EQ(decode(p, c),
            "compute.burst: invalid value 101 (an integer percent 0..100; compute.limit is its new "
            "name)");
  p["compute"] = {{"burst", -1}};
  EXPECT_NE(decode(p, c).find("compute.burst: invalid value -1"), std::string::npos);
  p["compute"] = {{"burst", 50.5}};
  EXPECT_NE(decode(p, c).find("compute.burst: invalid value 50.5"), std::string::npos);
  p["compute"] = {{"priority", "urgent"}};
  EXPECT_EQ(decode(p, c), "compute.priority: invalid value \"urgent\" (one of high|normal|low)");
  p = base();
  p["sharing"] = {{"strategy", "quota"}};
  EXPECT_EQ(decode(p, c),
            "sharing.strategy: invalid value \"quota\" (one of Quota|MPS|TimeSlicing)");
  p["sharing"] = {{"strategy", "TimeSlicing"}, {"timeSlice", 2}};
  EXPECT_EQ(decode(p, c), "sharing.timeSlice: invalid value 2 (one of Default|Short|Medium|Long)");
  p["sharing"] = {{"strategy", "Quota"}, {"timeSlice", "Short"}};
  EXPECT_EQ(decode(p, c), "sharing.timeSlice: only valid with sharing.strategy TimeSlicing");
  p = base();
  p["compute"] = json::array();
  EXPECT_EQ(decode(p, c), "compute: must be an object, got []");
  EXPECT_EQ(decode(json::array(), c), "parameters: must be an object, got []");
}

TEST(VgpuConfig, ApiVersionAndKindAreChecked) {
  vgpu_config::VgpuConfig c;
  EXPECT_EQ(decode({{"kind", "VgpuConfig"}}, c), "apiVersion: required");
  EXPECT_EQ(decode({{"apiVersion", "vgpu.tessera.dev/v1alpha1"}}, c), "kind: required");
  EXPECT_EQ(
      decode({{"apiVersion", "vgpu.tessera.dev/v1"}, {"kind", "VgpuConfig"}}, c),
      "apiVersion: invalid value \"vgpu.tessera.dev/v1\" (expected \"vgpu.tessera.dev/v1alpha1\")");
  EXPECT_EQ(decode({{"apiVersion", "vgpu.tessera.dev/v1alpha1"}, {"kind", "GpuConfig"}}, c),
            "kind: invalid value \"GpuConfig\" (expected \"VgpuConfig\")");
}

TEST(VgpuConfig, LaterConfigOverridesFieldByField) {
  vgpu_config::VgpuConfig klass, claim;
  klass.cores_limit = 50;
  klass.memory_limit = 8ull << 30;
  klass.priority = vgpu_config::Priority::kLow;
  claim.priority = vgpu_config::Priority::kHigh;
  claim.memory_limit = 4ull << 30;
  const vgpu_config::VgpuConfig merged = vgpu_config::merge_vgpu_config(klass, claim);
  EXPECT_EQ(merged.cores_limit, 50u);
  EXPECT_EQ(merged.memory_limit, 4ull << 30);
  EXPECT_EQ(merged.priority, vgpu_config::Priority::kHigh);
  EXPECT_FALSE(merged.strategy.has_value());
}

TEST(VgpuConfig, MergedCombinationsAreChecked) {
  vgpu_config::VgpuConfig c;
  EXPECT_EQ(supported(c), "");
  for (auto strategy : {vgpu_config::SharingStrategy::kQuota, vgpu_config::SharingStrategy::kMps,
                        vgpu_config::SharingStrategy::kTimeSlicing}) {
    c.strategy = strategy;
    EXPECT_EQ(supported(c), "") << to_string(strategy);
  }
  // A class config chose TimeSlicing with Long slices; the claim's config switched to Quota.
  c.strategy = vgpu_config::SharingStrategy::kQuota;
  c.time_slice = vgpu_config::TimeSlice::kLong;
  EXPECT_EQ(supported(c), "sharing.timeSlice Long is set but the merged sharing.strategy is Quota");
  c.time_slice.reset();
  c.cores_limit = 60;
  EXPECT_EQ(supported(c), "");
  c.strategy = vgpu_config::SharingStrategy::kMps;
  EXPECT_EQ(supported(c),
            "compute.limit 60 is only supported with sharing.strategy Quota, not MPS");
  c.cores_limit.reset();
  c.priority = vgpu_config::Priority::kHigh;
  c.strategy = vgpu_config::SharingStrategy::kTimeSlicing;
  EXPECT_EQ(supported(c),
            "compute.priority high is only supported with sharing.strategy Quota, not TimeSlicing");
}

TEST(VgpuConfig, EnforcementIsReportOrKillAndNamedWhenWrong) {
  vgpu_config::VgpuConfig c;
  json p = base();
  p["enforcement"] = "kill";
  ASSERT_EQ(decode(p, c), "");
  EXPECT_EQ(c.enforcement, vgpu_config::EnforcementPolicy::kKill);
  p["enforcement"] = "report";
  ASSERT_EQ(decode(p, c), "");
  EXPECT_EQ(c.enforcement, vgpu_config::EnforcementPolicy::kReport);
  p["enforcement"] = "kil";
  EXPECT_EQ(decode(p, c), "enforcement: invalid value \"kil\" (one of report|kill)");
  p["enforcement"] = 1;
  EXPECT_EQ(decode(p, c), "enforcement: invalid value 1 (one of report|kill)");
  // A later config overrides it; an unset one keeps it.
  vgpu_config::VgpuConfig klass, claim;
  klass.enforcement = vgpu_config::EnforcementPolicy::kKill;
  EXPECT_EQ(vgpu_config::merge_vgpu_config(klass, claim).enforcement,
            vgpu_config::EnforcementPolicy::kKill);
  claim.enforcement = vgpu_config::EnforcementPolicy::kReport;
  EXPECT_EQ(vgpu_config::merge_vgpu_config(klass, claim).enforcement,
            vgpu_config::EnforcementPolicy::kReport);
  EXPECT_EQ(vgpu_config::decode_enforcement_policy(json("stop"), "--enforcement-default")
                .status()
                .message(),
            "--enforcement-default: invalid value \"stop\" (one of report|kill)");
}

TEST(VgpuConfig, LimitsAreDecodedStrictlyAndBurstIsTheOldNameOfTheCoresLimit) {
  json p = base();
  vgpu_config::VgpuConfig c;
  p["compute"] = {{"burst", 60}};
  ASSERT_EQ(decode(p, c), "");
  EXPECT_EQ(c.cores_limit, 60u) << "old configs keep working";
  p["compute"] = {{"burst", 0}};
  ASSERT_EQ(decode(p, c), "");
  EXPECT_FALSE(c.cores_limit.has_value()) << "burst 0 was 'no bursting': the default limit";
  p["compute"] = {{"burst", 60}, {"limit", 70}};
  EXPECT_EQ(decode(p, c), "compute.burst: the old name of compute.limit; set compute.limit alone");
  for (const json& bad : {json(0), json(101), json("60"), json(-5), json(50.5)}) {
    p["compute"] = {{"limit", bad}};
    EXPECT_EQ(decode(p, c),
              "compute.limit: invalid value " + bad.dump() + " (an integer percent 1..100)");
  }
  p.erase("compute");
  for (const json& bad : {json("-1Gi"), json(""), json("lots"), json(0), json(-5), json("0")}) {
    p["memory"] = {{"limit", bad}};
    EXPECT_EQ(decode(p, c), "memory.limit: invalid value " + bad.dump() +
                                " (a positive byte quantity such as \"8Gi\")");
  }
  p["memory"] = {{"limit", 4294967296}};
  ASSERT_EQ(decode(p, c), "");
  EXPECT_EQ(c.memory_limit, 4ull << 30);
  p["memory"] = {{"request", "4Gi"}};
  EXPECT_EQ(decode(p, c), "memory.request: unknown field")
      << "the request is the consumable capacity, never a config field";
}

std::string limits_error(const vgpu_config::VgpuConfig& config,
                         const vgpu_config::ShareRequests& requests,
                         std::optional<uint64_t> gpu = std::nullopt) {
  Result<vgpu_config::ShareLimits> resolved =
      vgpu_config::resolve_share_limits(config, requests, gpu);
  return resolved.is_ok() ? "" : resolved.status().message();
}

TEST(ShareLimits, DefaultToTheRequestsAndBestEffortReachesTheWholeGpu) {
  Result<vgpu_config::ShareLimits> limits =
      vgpu_config::resolve_share_limits({}, {4ull << 30, 30}, 141ull << 30);
  ASSERT_TRUE(limits.is_ok());
  EXPECT_EQ(limits->memory_request, 4ull << 30);
  EXPECT_EQ(limits->memory_limit, 4ull << 30);
  EXPECT_EQ(limits->cores_request, 30u);
  EXPECT_EQ(limits->cores_limit, 30u);
  limits = vgpu_config::resolve_share_limits({}, {4ull << 30, 0}, 141ull << 30);
  EXPECT_EQ(limits->cores_request, 0u);
  EXPECT_EQ(limits->cores_limit, 100u);
  // No capacity at all (consumable capacity off): the whole GPU.
  limits = vgpu_config::resolve_share_limits({}, {}, 141ull << 30);
  EXPECT_EQ(limits->memory_limit, 141ull << 30);
  EXPECT_EQ(limits->cores_request, 100u);
  vgpu_config::VgpuConfig raised;
  raised.memory_limit = 8ull << 30;
  raised.cores_limit = 60;
  limits = vgpu_config::resolve_share_limits(raised, {2ull << 30, 30}, 141ull << 30);
  EXPECT_EQ(limits->memory_request, 2ull << 30);
  EXPECT_EQ(limits->memory_limit, 8ull << 30);
  EXPECT_EQ(limits->cores_limit, 60u);
}

TEST(ShareLimits, ALimitBelowItsRequestOrAboveTheGpuIsRefusedNamingFieldValueAndBound) {
  vgpu_config::VgpuConfig config;
  config.memory_limit = 2ull << 30;
  EXPECT_EQ(limits_error(config, {4ull << 30, 30}),
            "memory.limit 2Gi is below the memory request 4Gi (a limit is at least the request)");
  EXPECT_EQ(limits_error(config, {std::nullopt, 30}),
            "memory.limit 2Gi is below the memory request (the whole GPU: the request names no "
            "memory) (a limit is at least the request)");
  config.memory_limit = 200ull << 30;
  EXPECT_EQ(limits_error(config, {4ull << 30, 30}), "") << "the webhook cannot know the GPU";
  EXPECT_EQ(limits_error(config, {4ull << 30, 30}, 141ull << 30),
            "memory.limit 200Gi is above the GPU's memory 141Gi");
  config.memory_limit.reset();
  config.cores_limit = 20;
  EXPECT_EQ(limits_error(config, {4ull << 30, 30}),
            "compute.limit 20 is below the cores request 30 (a limit is at least the request)");
  EXPECT_EQ(vgpu_config::check_limits_against_requests(config, {4ull << 30, 30}).message(),
            "compute.limit 20 is below the cores request 30 (a limit is at least the request)");
  EXPECT_EQ(limits_error(config, {4ull << 30, 101}), "cores request 101 is above 100");
  // The same value given as the old compute.burst meant "no bursting": the request, no error.
  config.cores_limit_from_burst = true;
  Result<vgpu_config::ShareLimits> old =
      vgpu_config::resolve_share_limits(config, {4ull << 30, 30}, std::nullopt);
  ASSERT_TRUE(old.is_ok()) << old.status().message();
  EXPECT_EQ(old->cores_limit, 30u);
}

// An allocation's config entry for this driver (source as the scheduler writes it).
json entry(const std::string& source, const json& fields) {
  json parameters = base();
  parameters.update(fields);
  json out = {{"opaque", {{"driver", "vgpu.tessera.dev"}, {"parameters", parameters}}}};
  if (!source.empty()) out["source"] = source;
  return out;
}

std::vector<vgpu_config::VgpuConfigEntry> entries(
    const json& list, vgpu_config::ConfigList kind = vgpu_config::ConfigList::kAllocation) {
  Result<std::vector<vgpu_config::VgpuConfigEntry>> decoded =
      vgpu_config::decode_vgpu_config_list(list, "config", kind);
  EXPECT_TRUE(decoded.is_ok()) << decoded.status().message();
  return decoded.is_ok() ? *decoded : std::vector<vgpu_config::VgpuConfigEntry>{};
}

TEST(TenantBounds, DecodedFromAClassConfigAndRefusedInAClaimsConfig) {
  json p = base();
  p["tenantBounds"] = {
      {"maxPriority", "normal"}, {"maxComputeLimit", 50}, {"maxMemoryLimit", "16Gi"}};
  vgpu_config::VgpuConfig c;
  ASSERT_EQ(decode(p, c), "");
  ASSERT_TRUE(c.tenant_bounds);
  EXPECT_EQ(c.tenant_bounds->max_priority, vgpu_config::Priority::kNormal);
  EXPECT_EQ(c.tenant_bounds->max_cores_limit, 50u);
  EXPECT_EQ(c.tenant_bounds->max_memory_limit, 16ull << 30);
  EXPECT_FALSE(c.tenant_bounds->min_enforcement) << "the class's enforcement is the floor";

  p["tenantBounds"] = {{"maxBurst", 50}};
  EXPECT_EQ(decode(p, c), "tenantBounds.maxBurst: unknown field");
  p["tenantBounds"] = {{"maxPriority", "urgent"}};
  EXPECT_EQ(decode(p, c),
            "tenantBounds.maxPriority: invalid value \"urgent\" (one of high|normal|low)");
  p["tenantBounds"] = {{"maxComputeLimit", 0}};
  EXPECT_EQ(decode(p, c),
            "tenantBounds.maxComputeLimit: invalid value 0 (an integer percent 1..100)");
  p["tenantBounds"] = {{"maxMemoryLimit", "lots"}};
  EXPECT_EQ(decode(p, c),
            "tenantBounds.maxMemoryLimit: invalid value \"lots\" (a positive byte quantity such as "
            "\"8Gi\")");
  p["tenantBounds"] = 3;
  EXPECT_EQ(decode(p, c), "tenantBounds: must be an object, got 3");

  // Who wrote the entry decides: a tenant cannot set bounds, neither in its claim nor forged as
  // FromClass in the claim's spec; an allocation entry without a source is the tenant's.
  const json bounds = {{"tenantBounds", {{"maxComputeLimit", 50}}}};
  for (const auto& [list, kind] :
       {std::pair{json::array({entry("FromClaim", bounds)}), vgpu_config::ConfigList::kAllocation},
        std::pair{json::array({entry("", bounds)}), vgpu_config::ConfigList::kAllocation},
        std::pair{json::array({entry("FromClass", bounds)}),
                  vgpu_config::ConfigList::kClaimSpec}}) {
    Result<std::vector<vgpu_config::VgpuConfigEntry>> decoded =
        vgpu_config::decode_vgpu_config_list(list, "config", kind);
    ASSERT_FALSE(decoded.is_ok()) << list.dump();
    EXPECT_EQ(decoded.status().message(),
              "config[0].opaque.parameters.tenantBounds: only a DeviceClass's config may set "
              "bounds; a claim's config may not");
  }
  EXPECT_EQ(entries(json::array({entry("FromClass", bounds)}))[0].source,
            vgpu_config::ConfigSource::kClass);
  EXPECT_EQ(
      entries(json::array({entry("", bounds)}), vgpu_config::ConfigList::kDeviceClass)[0].source,
      vgpu_config::ConfigSource::kClass);
  Result<std::vector<vgpu_config::VgpuConfigEntry>> forged =
      vgpu_config::decode_vgpu_config_list(json::array({entry("FromAdmin", json::object())}),
                                           "config", vgpu_config::ConfigList::kAllocation);
  EXPECT_EQ(forged.status().message(),
            "config[0].source: invalid value \"FromAdmin\" (one of FromClass|FromClaim)");
}

TEST(TenantBounds, TheClassesKillIsAFloorAndTheTighterBoundWins) {
  const std::vector<vgpu_config::VgpuConfigEntry> list = entries(json::array({
      entry("FromClass", {{"enforcement", "kill"},
                          {"tenantBounds", {{"maxPriority", "high"}, {"maxComputeLimit", 80}}}}),
      entry("FromClass", {{"tenantBounds", {{"maxComputeLimit", 60}}}}),
      // A claim's config names no bound, whatever it sets.
      entry("FromClaim", {{"enforcement", "report"}, {"compute", {{"priority", "high"}}}}),
  }));
  vgpu_config::TenantBounds node;
  node.max_priority = vgpu_config::Priority::kNormal;
  node.max_memory_limit = 32ull << 30;
  const vgpu_config::TenantBounds bounds = vgpu_config::bounds_for_request(list, "gpu", node);
  EXPECT_EQ(bounds.min_enforcement, vgpu_config::EnforcementPolicy::kKill);
  EXPECT_EQ(bounds.max_priority, vgpu_config::Priority::kNormal) << "the node's is tighter";
  EXPECT_EQ(bounds.max_cores_limit, 60u);
  EXPECT_EQ(bounds.max_memory_limit, 32ull << 30);
  // A class's report floors nothing: a tenant may still ask for kill.
  const vgpu_config::TenantBounds report = vgpu_config::bounds_for_request(
      entries(json::array({entry("FromClass", {{"enforcement", "report"}})})), "gpu");
  EXPECT_EQ(report, vgpu_config::TenantBounds{});
  // Only what the tenant wrote is checked at apply time.
  const vgpu_config::VgpuConfig tenant = vgpu_config::claim_config_for_request(list, "gpu");
  EXPECT_EQ(tenant.enforcement, vgpu_config::EnforcementPolicy::kReport);
  EXPECT_EQ(tenant.priority, vgpu_config::Priority::kHigh);
  EXPECT_FALSE(tenant.tenant_bounds);
  EXPECT_FALSE(vgpu_config::config_for_request(list, "gpu").tenant_bounds)
      << "bounds are never merged";
}

TEST(TenantBounds, AClaimPastABoundIsRefusedNamingFieldValueAndBound) {
  vgpu_config::TenantBounds bounds;
  bounds.min_enforcement = vgpu_config::EnforcementPolicy::kKill;
  bounds.max_priority = vgpu_config::Priority::kNormal;
  bounds.max_cores_limit = 50;
  bounds.max_memory_limit = 16ull << 30;
  const vgpu_config::ShareRequests requests{4ull << 30, 30};
  const auto refusal = [&](const vgpu_config::VgpuConfig& tenant,
                           const vgpu_config::ShareRequests& asked) {
    const Status status =
        vgpu_config::check_tenant_bounds(tenant, bounds, asked, "DeviceClass gpu-small");
    if (!status.is_ok()) {
      EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
    }
    return status.message();
  };
  vgpu_config::VgpuConfig tenant;
  EXPECT_EQ(refusal(tenant, requests), "") << "nothing set, nothing past a bound";
  tenant.enforcement = vgpu_config::EnforcementPolicy::kReport;
  EXPECT_EQ(refusal(tenant, requests),
            "enforcement report is weaker than enforcement kill, the floor of DeviceClass "
            "gpu-small (a claim may not weaken it)");
  tenant.enforcement = vgpu_config::EnforcementPolicy::kKill;
  tenant.priority = vgpu_config::Priority::kHigh;
  EXPECT_EQ(refusal(tenant, requests),
            "compute.priority high is above tenantBounds.maxPriority normal of DeviceClass "
            "gpu-small");
  tenant.priority = vgpu_config::Priority::kLow;
  tenant.cores_limit = 80;
  EXPECT_EQ(refusal(tenant, requests),
            "compute.limit 80 is above tenantBounds.maxComputeLimit 50 of DeviceClass gpu-small");
  // A limit up to a request above the bound borrows nothing: the request is the scheduler's.
  EXPECT_EQ(refusal(tenant, {4ull << 30, 80}), "");
  tenant.cores_limit = 50;
  tenant.memory_limit = 32ull << 30;
  EXPECT_EQ(refusal(tenant, requests),
            "memory.limit 32Gi is above tenantBounds.maxMemoryLimit 16Gi of DeviceClass gpu-small");
  tenant.memory_limit = 16ull << 30;
  EXPECT_EQ(refusal(tenant, requests), "");
}

TEST(TenantBounds, AtPrepareAConfigPastABoundIsHeldToIt) {
  vgpu_config::TenantBounds bounds;
  bounds.min_enforcement = vgpu_config::EnforcementPolicy::kKill;
  bounds.max_priority = vgpu_config::Priority::kNormal;
  bounds.max_cores_limit = 50;
  bounds.max_memory_limit = 16ull << 30;
  vgpu_config::VgpuConfig merged;
  merged.enforcement = vgpu_config::EnforcementPolicy::kReport;
  merged.priority = vgpu_config::Priority::kHigh;
  merged.cores_limit = 90;
  merged.cores_limit_from_burst = true;
  merged.memory_limit = 64ull << 30;
  std::vector<std::string> clamped;
  const vgpu_config::VgpuConfig held =
      vgpu_config::clamp_to_bounds(merged, bounds, {4ull << 30, 30}, clamped);
  EXPECT_EQ(held.enforcement, vgpu_config::EnforcementPolicy::kKill);
  EXPECT_EQ(held.priority, vgpu_config::Priority::kNormal);
  EXPECT_EQ(held.cores_limit, 50u);
  EXPECT_FALSE(held.cores_limit_from_burst);
  EXPECT_EQ(held.memory_limit, 16ull << 30);
  EXPECT_EQ(clamped, (std::vector<std::string>{
                         "enforcement report raised to the floor kill",
                         "compute.priority high lowered to the highest priority normal",
                         "compute.limit 90 lowered to the largest compute limit 50",
                         "memory.limit 64Gi lowered to the largest memory limit 16Gi"}));

  // Within the bounds: nothing changes, nothing is said.
  clamped.clear();
  vgpu_config::VgpuConfig within;
  within.enforcement = vgpu_config::EnforcementPolicy::kKill;
  within.priority = vgpu_config::Priority::kLow;
  within.cores_limit = 40;
  within.memory_limit = 8ull << 30;
  EXPECT_EQ(vgpu_config::clamp_to_bounds(within, bounds, {4ull << 30, 30}, clamped), within);
  EXPECT_TRUE(clamped.empty());

  // Unset fields get what they would have had, held too: a best-effort share's default limit is
  // 100, an unset enforcement the agent's default; requests above a bound are kept.
  clamped.clear();
  const vgpu_config::VgpuConfig unset =
      vgpu_config::clamp_to_bounds({}, bounds, {20ull << 30, 0}, clamped);
  EXPECT_EQ(unset.enforcement, vgpu_config::EnforcementPolicy::kKill);
  EXPECT_EQ(unset.cores_limit, 50u);
  EXPECT_FALSE(unset.priority) << "normal is within the bound";
  EXPECT_FALSE(unset.memory_limit);
  EXPECT_EQ(clamped, (std::vector<std::string>{
                         "enforcement unset (the agent's default) raised to the floor kill",
                         "compute.limit 100 lowered to the largest compute limit 50"}));
  clamped.clear();
  merged.cores_limit = 90;
  merged.memory_limit = 64ull << 30;
  const vgpu_config::VgpuConfig big =
      vgpu_config::clamp_to_bounds(merged, bounds, {32ull << 30, 70}, clamped);
  EXPECT_EQ(big.cores_limit, 70u) << "the request, above the bound, is never lowered";
  EXPECT_EQ(big.memory_limit, 32ull << 30);

  // Under MPS the hardware schedules: no priority or cores limit is set there to be refused.
  clamped.clear();
  vgpu_config::VgpuConfig mps;
  mps.strategy = vgpu_config::SharingStrategy::kMps;
  vgpu_config::TenantBounds low;
  low.max_priority = vgpu_config::Priority::kLow;
  low.max_cores_limit = 10;
  EXPECT_EQ(vgpu_config::clamp_to_bounds(mps, low, {4ull << 30, 30}, clamped), mps);
  EXPECT_EQ(vgpu_config::check_supported(mps).message(), "");
}

TEST(TenantBounds, FlagValuesAreDecodedOrRefusedNamingTheFlag) {
  EXPECT_EQ(*vgpu_config::decode_priority("low", "--tenant-max-priority"),
            vgpu_config::Priority::kLow);
  EXPECT_EQ(vgpu_config::decode_priority("top", "--tenant-max-priority").status().message(),
            "--tenant-max-priority: invalid value \"top\" (one of high|normal|low)");
  EXPECT_EQ(*vgpu_config::decode_cores_limit("60", "--tenant-max-compute-limit"), 60u);
  EXPECT_EQ(vgpu_config::decode_cores_limit("0", "--tenant-max-compute-limit").status().message(),
            "--tenant-max-compute-limit: invalid value \"0\" (an integer percent 1..100)");
  EXPECT_EQ(*vgpu_config::decode_memory_limit("16Gi", "--tenant-max-memory-limit"), 16ull << 30);
  EXPECT_EQ(
      vgpu_config::decode_memory_limit("16 GB", "--tenant-max-memory-limit").status().message(),
      "--tenant-max-memory-limit: invalid value \"16 GB\" (a positive byte quantity such "
      "as \"8Gi\")");
}

}  // namespace
}  // namespace tessera::agent
