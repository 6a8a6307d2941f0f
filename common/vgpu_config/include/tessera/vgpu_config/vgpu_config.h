// VgpuConfig (vgpu.tessera.dev/v1alpha1): the opaque device configuration a DeviceClass or a
// ResourceClaim passes to Tessera. Decoding is strict: an unknown field, a wrong type or a value
// out of range is an error that names the field path (and the value), never silently ignored.
// Pure: no I/O, no globals.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/status.h"
#include "tessera/vgpu_config/driver_name.h"

namespace tessera::vgpu_config {

inline constexpr char kConfigApiVersion[] = "vgpu.tessera.dev/v1alpha1";
static_assert(std::string_view(kConfigApiVersion).starts_with(kDriverName),
              "the VgpuConfig API group is the driver name");
inline constexpr char kConfigKind[] = "VgpuConfig";

// What the agent does with a finding about a share (VgpuConfig field, with an agent default):
// report it (log, count, event), or also SIGKILL the offending process - never one of another
// share.
enum class EnforcementPolicy : uint8_t { kReport, kKill };

constexpr std::string_view enforcement_policy_name(EnforcementPolicy policy) {
  return policy == EnforcementPolicy::kKill ? "kill" : "report";
}
constexpr std::optional<EnforcementPolicy> parse_enforcement_policy(std::string_view text) {
  if (text == "report") return EnforcementPolicy::kReport;
  if (text == "kill") return EnforcementPolicy::kKill;
  return std::nullopt;
}

enum class Priority { kNormal, kHigh, kLow };
// low < normal < high: a ceiling on priority keeps a share at or below it.
constexpr int priority_rank(Priority priority) {
  return priority == Priority::kHigh ? 2 : priority == Priority::kNormal ? 1 : 0;
}
enum class SharingStrategy { kQuota, kMps, kTimeSlicing };
enum class TimeSlice { kDefault, kShort, kMedium, kLong };

// What the platform admin lets a tenant's claim set (docs/resource-model.md, "Who sets what"):
// floors and ceilings from the DeviceClass's config (its `enforcement`, its `tenantBounds`) and
// from the agent's --tenant-* flags. Unset: no bound of that kind.
struct TenantBounds {
  // The weakest enforcement a share may have: kill means a claim cannot weaken it to report. A
  // class config's `enforcement: kill` is this floor; --tenant-min-enforcement.
  std::optional<EnforcementPolicy> min_enforcement;
  // tenantBounds.maxPriority / --tenant-max-priority: the highest compute.priority.
  std::optional<Priority> max_priority;
  // tenantBounds.maxComputeLimit / --tenant-max-compute-limit: the largest compute.limit (percent).
  std::optional<uint32_t> max_cores_limit;
  // tenantBounds.maxMemoryLimit / --tenant-max-memory-limit: the largest memory.limit (bytes).
  std::optional<uint64_t> max_memory_limit;

  bool operator==(const TenantBounds&) const = default;
};

// The tighter of two sets of bounds, field by field (the higher floor, the lower ceiling).
TenantBounds tighter_bounds(const TenantBounds& a, const TenantBounds& b);

// Every field optional: an unset field takes the value of an earlier config in the merge, or the
// default (limits equal to the requests, normal priority, Quota). The requests themselves are the
// consumable capacities the scheduler reserved (`memory`, `cores`), never a config field
// (docs/resource-model.md).
struct VgpuConfig {
  // compute.limit, percent 1..100: the most GPU time the share may reach, at least its cores
  // request. compute.burst, its name before requests and limits, is read as the same field.
  std::optional<uint32_t> cores_limit;
  // The limit was given as compute.burst, whose value at or below the request meant "no
  // bursting": such a limit resolves to the request instead of being refused.
  bool cores_limit_from_burst = false;
  // memory.limit, bytes (a quantity such as "8Gi"): the share's wall, at least its memory request;
  // bytes above the request are borrowed and may be reclaimed.
  std::optional<uint64_t> memory_limit;
  std::optional<Priority> priority;
  std::optional<SharingStrategy> strategy;
  std::optional<TimeSlice> time_slice;
  // enforcement: what the agent's out-of-band checks do about a finding in this share (report,
  // or kill the offending process); unset: the agent's --enforcement-default.
  std::optional<EnforcementPolicy> enforcement;
  // tenantBounds: a DeviceClass config's bounds on its claims (maxPriority, maxComputeLimit,
  // maxMemoryLimit). Refused in a claim's config; never merged (bounds_for_request reads it).
  std::optional<TenantBounds> tenant_bounds;

  bool operator==(const VgpuConfig&) const = default;
};

// Decodes one `opaque.parameters` object, or kInvalidArgument naming the field ("compute.burst:
// ...").
Result<VgpuConfig> decode_vgpu_config(const nlohmann::json& parameters);

// `later` overrides `base` field by field (the API lists class configs, then claim configs).
// tenant_bounds is never merged: the result keeps base's.
VgpuConfig merge_vgpu_config(const VgpuConfig& base, const VgpuConfig& later);

// Who wrote a config: the platform admin (a DeviceClass's spec.config, FromClass in an
// allocation) or the tenant (the claim's spec.devices.config, FromClaim).
enum class ConfigSource : uint8_t { kClass, kClaim };

// One of a claim's device configs that is Tessera's (opaque.driver is the driver name), decoded,
// with the requests it names (none: every request of the claim) and who wrote it.
struct VgpuConfigEntry {
  std::vector<std::string> requests;
  VgpuConfig config;
  ConfigSource source = ConfigSource::kClaim;
};

// Which list is decoded: an allocation's status.allocation.devices.config (each entry's `source`
// says who wrote it; an entry without one is the tenant's), a claim's spec.devices.config (all the
// tenant's, whatever they say), or a DeviceClass's spec.config (all the admin's).
enum class ConfigList : uint8_t { kAllocation, kClaimSpec, kDeviceClass };

// The entries of a `config` list that are `driver`'s, in the list's order (class configs before
// claim configs, as the API lists them); other drivers' entries are skipped. A claim's entry that
// sets tenantBounds is refused. An error names the entry by `path`:
// "<path>[1].opaque.parameters: missing", "<path>[0].opaque.parameters.compute.burst: ...",
// "<path>: expected an array, got 3".
Result<std::vector<VgpuConfigEntry>> decode_vgpu_config_list(const nlohmann::json& list,
                                                             const std::string& path,
                                                             ConfigList kind,
                                                             std::string_view driver = kDriverName);

// The one rule of which config applies to which request, for the agent (the allocated results) and
// the webhook (the claim's requests alike): an entry applies when it names no request, or names
// `request`, or, for a firstAvailable subrequest "req/sub", its parent "req".
bool config_applies(const VgpuConfigEntry& entry, std::string_view request);
// What `request` gets: every entry that applies, merged in order.
VgpuConfig config_for_request(const std::vector<VgpuConfigEntry>& entries,
                              std::string_view request);
// What the tenant set for `request`: the claim's entries that apply, merged in order.
VgpuConfig claim_config_for_request(const std::vector<VgpuConfigEntry>& entries,
                                    std::string_view request);
// The bounds the class entries that apply to `request` set (each class config's `enforcement:
// kill` a floor, its tenantBounds), tightened by `node` (the agent's flags; none in the webhook).
TenantBounds bounds_for_request(const std::vector<VgpuConfigEntry>& entries,
                                std::string_view request, const TenantBounds& node = {});

// Checks the merged config for combinations no single object shows (a timeSlice whose strategy a
// later config replaced; a cores limit or priority under MPS/TimeSlicing). Ok, or kInvalidArgument
// saying why not.
Status check_supported(const VgpuConfig& config);

// What the scheduler reserved for one share (its requests): absent = the whole GPU.
struct ShareRequests {
  std::optional<uint64_t> memory_bytes;
  std::optional<uint32_t> cores;  // percent 0..100
};

// The limits a share gets: the config's, or the requests' (a best-effort share, cores 0, may
// reach the whole GPU's time). Checks that each limit is at least its request and, when the GPU's
// memory is known (`gpu_memory_bytes`, the agent at prepare; the webhook at apply time cannot
// know it), at most the GPU: kInvalidArgument naming the field, its value and the bound
// ("memory.limit 2Gi is below the memory request 4Gi").
struct ShareLimits {
  uint64_t memory_request = 0;
  uint64_t memory_limit = 0;
  uint32_t cores_request = 100;
  uint32_t cores_limit = 100;
};
Result<ShareLimits> resolve_share_limits(const VgpuConfig& config, const ShareRequests& requests,
                                         std::optional<uint64_t> gpu_memory_bytes);
// The same checks where the GPU is not known: Ok, or the first problem.
Status check_limits_against_requests(const VgpuConfig& config, const ShareRequests& requests);

// The one rule of bounds, for the webhook (refuse) and the agent (clamp), in this order:
// enforcement, compute.priority, compute.limit, memory.limit. A limit is bounded by
// max(bound, request): a bound caps what a share borrows above its request, never the request
// the scheduler reserved (the DeviceClass's selectors and the capacity's requestPolicy bound that).

// At apply time: what the tenant set (`tenant`, claim_config_for_request) against the class's
// `bounds`. Ok, or kInvalidArgument naming field, value and bound, with `bound_source` saying
// whose ("compute.priority high is above tenantBounds.maxPriority normal of DeviceClass
// gpu-small"). An unset field is no violation.
Status check_tenant_bounds(const VgpuConfig& tenant, const TenantBounds& bounds,
                           const ShareRequests& requests, std::string_view bound_source);

// At prepare: the merged config held to `bounds`, each field past its bound set to the bound
// (report -> kill, also where unset; high -> the highest priority; a limit -> max(bound,
// request)); priority and the cores limit only under Quota, the strategy that uses them. Call it
// after check_supported. `clamped` gets one line per field changed, naming field, value and bound.
VgpuConfig clamp_to_bounds(const VgpuConfig& merged, const TenantBounds& bounds,
                           const ShareRequests& requests, std::vector<std::string>& clamped);

// Decodes a bound given as text (the agent's flags): "kill", "normal", "80", "16Gi"; an error
// names `flag` and the value.
Result<Priority> decode_priority(std::string_view text, const std::string& flag);
Result<uint32_t> decode_cores_limit(std::string_view text, const std::string& flag);
Result<uint64_t> decode_memory_limit(std::string_view text, const std::string& flag);

const char* to_string(Priority priority);
const char* to_string(SharingStrategy strategy);
const char* to_string(TimeSlice time_slice);

// Decodes the value of `enforcement` ("report" or "kill"), or kInvalidArgument naming the field
// and the value: `enforcement: invalid value "kil" (one of report|kill)`. The agent's
// --enforcement-default is checked with it too.
Result<EnforcementPolicy> decode_enforcement_policy(const nlohmann::json& value,
                                                    const std::string& path = "enforcement");

}  // namespace tessera::vgpu_config
