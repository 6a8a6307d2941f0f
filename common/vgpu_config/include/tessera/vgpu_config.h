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

#include "tessera/driver_name.h"
#include "tessera/status.h"

namespace tessera {

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
enum class SharingStrategy { kQuota, kMps, kTimeSlicing };
enum class TimeSlice { kDefault, kShort, kMedium, kLong };

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

  bool operator==(const VgpuConfig&) const = default;
};

// Decodes one `opaque.parameters` object, or kInvalidArgument naming the field ("compute.burst:
// ...").
Result<VgpuConfig> decode_vgpu_config(const nlohmann::json& parameters);

// `later` overrides `base` field by field (the API lists class configs, then claim configs).
VgpuConfig merge_vgpu_config(const VgpuConfig& base, const VgpuConfig& later);

// One of a claim's device configs that is Tessera's (opaque.driver is the driver name), decoded,
// with the requests it names (none: every request of the claim).
struct VgpuConfigEntry {
  std::vector<std::string> requests;
  VgpuConfig config;
};

// The entries of a `config` list (a claim's spec.devices.config or its allocation's
// status.allocation.devices.config) that are `driver`'s, in the list's order (class configs
// before claim configs, as the API lists them); other drivers' entries are skipped. An error names
// the entry by `path`: "<path>[1].opaque.parameters: missing",
// "<path>[0].opaque.parameters.compute.burst: ...", "<path>: expected an array, got 3".
Result<std::vector<VgpuConfigEntry>> decode_vgpu_config_list(const nlohmann::json& list,
                                                             const std::string& path,
                                                             std::string_view driver = kDriverName);

// The one rule of which config applies to which request, for the agent (the allocated results) and
// the webhook (the claim's requests alike): an entry applies when it names no request, or names
// `request`, or, for a firstAvailable subrequest "req/sub", its parent "req".
bool config_applies(const VgpuConfigEntry& entry, std::string_view request);
// What `request` gets: every entry that applies, merged in order.
VgpuConfig config_for_request(const std::vector<VgpuConfigEntry>& entries,
                              std::string_view request);

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

const char* to_string(Priority priority);
const char* to_string(SharingStrategy strategy);
const char* to_string(TimeSlice time_slice);

// Decodes the value of `enforcement` ("report" or "kill"), or kInvalidArgument naming the field
// and the value: `enforcement: invalid value "kil" (one of report|kill)`. The agent's
// --enforcement-default is checked with it too.
Result<EnforcementPolicy> decode_enforcement_policy(const nlohmann::json& value,
                                                    const std::string& path = "enforcement");

}  // namespace tessera
