#include "tessera/vgpu_config/vgpu_config.h"

#include <initializer_list>
#include <utility>

#include "tessera/json_access.h"
#include "tessera/quantity.h"
#include "tessera/share_region.h"

namespace tessera::vgpu_config {
namespace {

using nlohmann::json;

Status unknown_fields(const json& object, const std::string& prefix,
                      std::initializer_list<const char*> known) {
  for (const auto& [key, value] : object.items()) {
    bool found = false;
    for (const char* name : known) found = found || key == name;
    if (!found) return invalid_argument(prefix + key + ": unknown field");
  }
  return Status::ok();
}

Status expect_object(const json& value, const std::string& path) {
  if (!value.is_object())
    return invalid_argument(path + ": must be an object, got " + value.dump());
  return Status::ok();
}

// One name table per enum: decoding and to_string read the same list. The order is the one the
// "(one of ...)" error message lists.
template <typename Enum>
using NameTable = std::initializer_list<std::pair<const char*, Enum>>;

constexpr NameTable<Priority> kPriorityNames = {
    {"high", Priority::kHigh}, {"normal", Priority::kNormal}, {"low", Priority::kLow}};
constexpr NameTable<SharingStrategy> kStrategyNames = {
    {"Quota", SharingStrategy::kQuota},
    {"MPS", SharingStrategy::kMps},
    {"TimeSlicing", SharingStrategy::kTimeSlicing}};
constexpr NameTable<TimeSlice> kTimeSliceNames = {{"Default", TimeSlice::kDefault},
                                                  {"Short", TimeSlice::kShort},
                                                  {"Medium", TimeSlice::kMedium},
                                                  {"Long", TimeSlice::kLong}};

template <typename Enum>
const char* name_of(NameTable<Enum> names, Enum member) {
  for (const auto& [name, value] : names)
    if (value == member) return name;
  return "?";  // every member is in its table
}

template <typename Enum>
Result<Enum> decode_enum(const json& value, const std::string& path, NameTable<Enum> names) {
  if (value.is_string()) {
    for (const auto& [name, member] : names) {
      if (value.get_ref<const std::string&>() == name) return member;
    }
  }
  std::string allowed;
  for (const auto& [name, member] : names) {
    if (!allowed.empty()) allowed += '|';
    allowed += name;
  }
  return invalid_argument(path + ": invalid value " + value.dump() + " (one of " + allowed + ")");
}

// Decodes the enum at `key` of `object` into `out` when it is there.
template <typename Enum>
Status decode_enum_member(const json& object, const char* key, const std::string& path,
                          NameTable<Enum> names, std::optional<Enum>& out) {
  const auto it = object.find(key);
  if (it == object.end()) return Status::ok();
  TESSERA_ASSIGN_OR_RETURN(Enum decoded, decode_enum(*it, path, names));
  out = decoded;
  return Status::ok();
}

// An integer percent 1..100 (compute.limit and its bound).
Result<uint32_t> decode_percent(const json& value, const std::string& path) {
  if (!value.is_number_integer() || value.get<int64_t>() < 1 || value.get<int64_t>() > 100)
    return invalid_argument(path + ": invalid value " + value.dump() +
                            " (an integer percent 1..100)");
  return static_cast<uint32_t>(value.get<int64_t>());
}

// A positive byte quantity ("8Gi", or a number of bytes): memory.limit and its bound.
Result<uint64_t> decode_bytes(const json& value, const std::string& path) {
  std::optional<uint64_t> bytes;
  if (value.is_string()) bytes = parse_byte_quantity(value.get_ref<const std::string&>());
  if (value.is_number_integer() && value.get<int64_t>() > 0)
    bytes = static_cast<uint64_t>(value.get<int64_t>());
  if (!bytes || *bytes == 0)
    return invalid_argument(path + ": invalid value " + value.dump() +
                            " (a positive byte quantity such as \"8Gi\")");
  return *bytes;
}

}  // namespace

Result<VgpuConfig> decode_vgpu_config(const json& parameters) {
  VgpuConfig out;
  TESSERA_RETURN_IF_ERROR(expect_object(parameters, "parameters"));
  TESSERA_RETURN_IF_ERROR(unknown_fields(
      parameters, "",
      {"apiVersion", "kind", "compute", "memory", "sharing", "enforcement", "tenantBounds"}));
  const auto api = parameters.find("apiVersion");
  if (api == parameters.end()) return invalid_argument("apiVersion: required");
  if (!api->is_string() || api->get_ref<const std::string&>() != kConfigApiVersion)
    return invalid_argument("apiVersion: invalid value " + api->dump() + " (expected \"" +
                            kConfigApiVersion + "\")");
  const auto kind = parameters.find("kind");
  if (kind == parameters.end()) return invalid_argument("kind: required");
  if (!kind->is_string() || kind->get_ref<const std::string&>() != kConfigKind)
    return invalid_argument("kind: invalid value " + kind->dump() + " (expected \"" + kConfigKind +
                            "\")");

  if (const auto compute = parameters.find("compute"); compute != parameters.end()) {
    TESSERA_RETURN_IF_ERROR(expect_object(*compute, "compute"));
    TESSERA_RETURN_IF_ERROR(unknown_fields(*compute, "compute.", {"limit", "burst", "priority"}));
    if (const auto limit = compute->find("limit"); limit != compute->end()) {
      if (compute->contains("burst"))
        return invalid_argument(
            "compute.burst: the old name of compute.limit; set compute.limit alone");
      TESSERA_ASSIGN_OR_RETURN(uint32_t percent, decode_percent(*limit, "compute.limit"));
      out.cores_limit = percent;
    }
    // compute.burst (before requests and limits): the same ceiling; 0 meant "no bursting", which
    // is now a limit equal to the request, the default.
    if (const auto burst = compute->find("burst"); burst != compute->end()) {
      if (!burst->is_number_integer() || burst->get<int64_t>() < 0 || burst->get<int64_t>() > 100)
        return invalid_argument("compute.burst: invalid value " + burst->dump() +
                                " (an integer percent 0..100; compute.limit is its new name)");
      if (burst->get<int64_t>() > 0) {
        out.cores_limit = static_cast<uint32_t>(burst->get<int64_t>());
        out.cores_limit_from_burst = true;
      }
    }
    TESSERA_RETURN_IF_ERROR(
        decode_enum_member(*compute, "priority", "compute.priority", kPriorityNames, out.priority));
  }
  if (const auto memory = parameters.find("memory"); memory != parameters.end()) {
    TESSERA_RETURN_IF_ERROR(expect_object(*memory, "memory"));
    TESSERA_RETURN_IF_ERROR(unknown_fields(*memory, "memory.", {"limit"}));
    if (const auto limit = memory->find("limit"); limit != memory->end()) {
      TESSERA_ASSIGN_OR_RETURN(uint64_t bytes, decode_bytes(*limit, "memory.limit"));
      out.memory_limit = bytes;
    }
  }
  if (const auto sharing = parameters.find("sharing"); sharing != parameters.end()) {
    TESSERA_RETURN_IF_ERROR(expect_object(*sharing, "sharing"));
    TESSERA_RETURN_IF_ERROR(unknown_fields(*sharing, "sharing.", {"strategy", "timeSlice"}));
    TESSERA_RETURN_IF_ERROR(
        decode_enum_member(*sharing, "strategy", "sharing.strategy", kStrategyNames, out.strategy));
    if (sharing->contains("timeSlice")) {
      TESSERA_RETURN_IF_ERROR(decode_enum_member(*sharing, "timeSlice", "sharing.timeSlice",
                                                 kTimeSliceNames, out.time_slice));
      if (out.strategy != SharingStrategy::kTimeSlicing)
        return invalid_argument("sharing.timeSlice: only valid with sharing.strategy TimeSlicing");
    }
  }
  if (const auto enforcement = parameters.find("enforcement"); enforcement != parameters.end()) {
    TESSERA_ASSIGN_OR_RETURN(EnforcementPolicy policy, decode_enforcement_policy(*enforcement));
    out.enforcement = policy;
  }
  if (const auto bounds = parameters.find("tenantBounds"); bounds != parameters.end()) {
    TESSERA_RETURN_IF_ERROR(expect_object(*bounds, "tenantBounds"));
    TESSERA_RETURN_IF_ERROR(unknown_fields(*bounds, "tenantBounds.",
                                           {"maxPriority", "maxComputeLimit", "maxMemoryLimit"}));
    TenantBounds decoded;
    TESSERA_RETURN_IF_ERROR(decode_enum_member(*bounds, "maxPriority", "tenantBounds.maxPriority",
                                               kPriorityNames, decoded.max_priority));
    if (const auto limit = bounds->find("maxComputeLimit"); limit != bounds->end()) {
      TESSERA_ASSIGN_OR_RETURN(uint32_t percent,
                               decode_percent(*limit, "tenantBounds.maxComputeLimit"));
      decoded.max_cores_limit = percent;
    }
    if (const auto limit = bounds->find("maxMemoryLimit"); limit != bounds->end()) {
      TESSERA_ASSIGN_OR_RETURN(uint64_t bytes, decode_bytes(*limit, "tenantBounds.maxMemoryLimit"));
      decoded.max_memory_limit = bytes;
    }
    out.tenant_bounds = decoded;
  }
  return out;
}

Result<EnforcementPolicy> decode_enforcement_policy(const json& value, const std::string& path) {
  if (value.is_string())
    if (const auto policy = parse_enforcement_policy(value.get_ref<const std::string&>()))
      return *policy;
  return invalid_argument(path + ": invalid value " + value.dump() + " (one of report|kill)");
}

VgpuConfig merge_vgpu_config(const VgpuConfig& base, const VgpuConfig& later) {
  VgpuConfig merged = base;
  if (later.cores_limit) {
    merged.cores_limit = later.cores_limit;
    merged.cores_limit_from_burst = later.cores_limit_from_burst;
  }
  if (later.memory_limit) merged.memory_limit = later.memory_limit;
  if (later.priority) merged.priority = later.priority;
  if (later.strategy) merged.strategy = later.strategy;
  if (later.time_slice) merged.time_slice = later.time_slice;
  if (later.enforcement) merged.enforcement = later.enforcement;
  return merged;
}

Status check_supported(const VgpuConfig& config) {
  const SharingStrategy strategy = config.strategy.value_or(SharingStrategy::kQuota);
  if (config.time_slice && strategy != SharingStrategy::kTimeSlicing)
    return invalid_argument(std::string("sharing.timeSlice ") + to_string(*config.time_slice) +
                            " is set but the merged sharing.strategy is " + to_string(strategy));
  // A cores limit and priority are the shim's compute scheduling; under MPS or time slicing the
  // hardware schedules, so a value there would be silently ignored.
  if (strategy != SharingStrategy::kQuota) {
    if (config.cores_limit)
      return invalid_argument("compute.limit " + std::to_string(*config.cores_limit) +
                              " is only supported with sharing.strategy Quota, not " +
                              to_string(strategy));
    if (config.priority)
      return invalid_argument(std::string("compute.priority ") + to_string(*config.priority) +
                              " is only supported with sharing.strategy Quota, not " +
                              to_string(strategy));
  }
  return Status::ok();
}

Result<ShareLimits> resolve_share_limits(const VgpuConfig& config, const ShareRequests& requests,
                                         std::optional<uint64_t> gpu_memory_bytes) {
  ShareLimits limits;
  if (requests.cores && *requests.cores > 100)
    return invalid_argument("cores request " + std::to_string(*requests.cores) + " is above 100");
  limits.cores_request = requests.cores.value_or(100);
  // Best-effort (request 0) reaches whatever time the others leave, unless a limit caps it.
  limits.cores_limit =
      config.cores_limit.value_or(limits.cores_request == 0 ? 100 : limits.cores_request);
  if (limits.cores_limit < limits.cores_request && config.cores_limit_from_burst)
    limits.cores_limit = limits.cores_request;  // an old "burst" at or below the quota
  if (limits.cores_limit < limits.cores_request)
    return invalid_argument("compute.limit " + std::to_string(limits.cores_limit) +
                            " is below the cores request " + std::to_string(limits.cores_request) +
                            " (a limit is at least the request)");
  const uint64_t whole_gpu = gpu_memory_bytes.value_or(share::kUnlimited);
  limits.memory_request = requests.memory_bytes.value_or(whole_gpu);
  limits.memory_limit = config.memory_limit.value_or(limits.memory_request);
  if (config.memory_limit && *config.memory_limit < limits.memory_request)
    return invalid_argument("memory.limit " + byte_quantity_text(*config.memory_limit) +
                            " is below the memory request " +
                            (limits.memory_request == share::kUnlimited
                                 ? std::string("(the whole GPU: the request names no memory)")
                                 : byte_quantity_text(limits.memory_request)) +
                            " (a limit is at least the request)");
  if (config.memory_limit && gpu_memory_bytes && *config.memory_limit > *gpu_memory_bytes)
    return invalid_argument("memory.limit " + byte_quantity_text(*config.memory_limit) +
                            " is above the GPU's memory " + byte_quantity_text(*gpu_memory_bytes));
  return limits;
}

Status check_limits_against_requests(const VgpuConfig& config, const ShareRequests& requests) {
  Result<ShareLimits> resolved = resolve_share_limits(config, requests, std::nullopt);
  return resolved.is_ok() ? Status::ok() : resolved.status();
}

const char* to_string(Priority priority) {
  return name_of(kPriorityNames, priority);
}
const char* to_string(SharingStrategy strategy) {
  return name_of(kStrategyNames, strategy);
}
const char* to_string(TimeSlice time_slice) {
  return name_of(kTimeSliceNames, time_slice);
}

Result<std::vector<VgpuConfigEntry>> decode_vgpu_config_list(const json& list,
                                                             const std::string& path,
                                                             ConfigList kind,
                                                             std::string_view driver) {
  if (!list.is_array())
    return invalid_argument(path + ": expected an array, got " + json_shown(&list));
  std::vector<VgpuConfigEntry> entries;
  for (size_t i = 0; i < list.size(); ++i) {
    const json& entry = list[i];
    const std::string at = path + "[" + std::to_string(i) + "]";
    const json* opaque = json_member(entry, "opaque");
    if (!opaque) continue;
    const json* named = json_member(*opaque, "driver");
    if (!named || !named->is_string() || named->get_ref<const std::string&>() != driver) continue;
    const json* parameters = json_member(*opaque, "parameters");
    if (!parameters) return invalid_argument(at + ".opaque.parameters: missing");
    Result<VgpuConfig> config = decode_vgpu_config(*parameters);
    if (!config.is_ok())
      return invalid_argument(at + ".opaque.parameters." + config.status().message());
    VgpuConfigEntry decoded{{}, std::move(config).value(), ConfigSource::kClaim};
    if (kind == ConfigList::kDeviceClass) decoded.source = ConfigSource::kClass;
    // The scheduler copies each config with its source; without one the entry is the tenant's,
    // never the admin's.
    if (const json* source = json_member(entry, "source");
        kind == ConfigList::kAllocation && source) {
      if (*source == "FromClass") {
        decoded.source = ConfigSource::kClass;
      } else if (*source != "FromClaim") {
        return invalid_argument(at + ".source: invalid value " + json_shown(source) +
                                " (one of FromClass|FromClaim)");
      }
    }
    if (decoded.source == ConfigSource::kClaim && decoded.config.tenant_bounds)
      return invalid_argument(at +
                              ".opaque.parameters.tenantBounds: only a DeviceClass's config may "
                              "set bounds; a claim's config may not");
    // The API server admits only a list of request names: anything else is refused, never read
    // as "every request".
    if (const json* requests = json_member(entry, "requests"); requests && !requests->is_null()) {
      if (!requests->is_array())
        return invalid_argument(at + ".requests: expected a list of request names, got " +
                                json_shown(requests));
      for (size_t j = 0; j < requests->size(); ++j) {
        const json& name = (*requests)[j];
        if (!name.is_string())
          return invalid_argument(at + ".requests[" + std::to_string(j) +
                                  "]: expected a request name, got " + json_shown(&name));
        decoded.requests.push_back(name.get<std::string>());
      }
    }
    entries.push_back(std::move(decoded));
  }
  return entries;
}

bool config_applies(const VgpuConfigEntry& entry, std::string_view request) {
  if (entry.requests.empty()) return true;
  for (const std::string& name : entry.requests)
    if (request == name ||
        (request.size() > name.size() && request.starts_with(name) && request[name.size()] == '/'))
      return true;
  return false;
}

VgpuConfig config_for_request(const std::vector<VgpuConfigEntry>& entries,
                              std::string_view request) {
  VgpuConfig merged;
  for (const VgpuConfigEntry& entry : entries)
    if (config_applies(entry, request)) merged = merge_vgpu_config(merged, entry.config);
  return merged;
}

VgpuConfig claim_config_for_request(const std::vector<VgpuConfigEntry>& entries,
                                    std::string_view request) {
  VgpuConfig merged;
  for (const VgpuConfigEntry& entry : entries)
    if (entry.source == ConfigSource::kClaim && config_applies(entry, request))
      merged = merge_vgpu_config(merged, entry.config);
  return merged;
}

TenantBounds tighter_bounds(const TenantBounds& a, const TenantBounds& b) {
  TenantBounds out = a;
  if (b.min_enforcement && (!out.min_enforcement || *b.min_enforcement == EnforcementPolicy::kKill))
    out.min_enforcement = b.min_enforcement;
  if (b.max_priority &&
      (!out.max_priority || priority_rank(*b.max_priority) < priority_rank(*out.max_priority)))
    out.max_priority = b.max_priority;
  if (b.max_cores_limit && (!out.max_cores_limit || *b.max_cores_limit < *out.max_cores_limit))
    out.max_cores_limit = b.max_cores_limit;
  if (b.max_memory_limit && (!out.max_memory_limit || *b.max_memory_limit < *out.max_memory_limit))
    out.max_memory_limit = b.max_memory_limit;
  return out;
}

TenantBounds bounds_for_request(const std::vector<VgpuConfigEntry>& entries,
                                std::string_view request, const TenantBounds& node) {
  TenantBounds bounds = node;
  for (const VgpuConfigEntry& entry : entries) {
    if (entry.source != ConfigSource::kClass || !config_applies(entry, request)) continue;
    // The admin's kill is a floor; the admin's report is only a default a tenant may strengthen.
    if (entry.config.enforcement == EnforcementPolicy::kKill)
      bounds.min_enforcement = EnforcementPolicy::kKill;
    if (entry.config.tenant_bounds) bounds = tighter_bounds(bounds, *entry.config.tenant_bounds);
  }
  return bounds;
}

namespace {

// The bound a limit is held to: a share may always have its request.
template <typename T>
T limit_ceiling(T bound, std::optional<T> request) {
  return request && *request > bound ? *request : bound;
}

// The cores limit a share gets when its config sets none (resolve_share_limits' default).
uint32_t default_cores_limit(const ShareRequests& requests) {
  const uint32_t request = requests.cores.value_or(100);
  return request == 0 ? 100 : request;
}

}  // namespace

Status check_tenant_bounds(const VgpuConfig& tenant, const TenantBounds& bounds,
                           const ShareRequests& requests, std::string_view bound_source) {
  const std::string of = " of " + std::string(bound_source);
  if (bounds.min_enforcement == EnforcementPolicy::kKill &&
      tenant.enforcement == EnforcementPolicy::kReport)
    return invalid_argument("enforcement report is weaker than enforcement kill, the floor" + of +
                            " (a claim may not weaken it)");
  if (bounds.max_priority && tenant.priority &&
      priority_rank(*tenant.priority) > priority_rank(*bounds.max_priority))
    return invalid_argument(std::string("compute.priority ") + to_string(*tenant.priority) +
                            " is above tenantBounds.maxPriority " +
                            to_string(*bounds.max_priority) + of);
  // A request above the bound is the scheduler's to grant: a limit up to it is no borrowing.
  if (bounds.max_cores_limit && tenant.cores_limit &&
      *tenant.cores_limit > limit_ceiling(*bounds.max_cores_limit, requests.cores))
    return invalid_argument("compute.limit " + std::to_string(*tenant.cores_limit) +
                            " is above tenantBounds.maxComputeLimit " +
                            std::to_string(*bounds.max_cores_limit) + of);
  if (bounds.max_memory_limit && tenant.memory_limit &&
      *tenant.memory_limit > limit_ceiling(*bounds.max_memory_limit, requests.memory_bytes))
    return invalid_argument("memory.limit " + byte_quantity_text(*tenant.memory_limit) +
                            " is above tenantBounds.maxMemoryLimit " +
                            byte_quantity_text(*bounds.max_memory_limit) + of);
  return Status::ok();
}

VgpuConfig clamp_to_bounds(const VgpuConfig& merged, const TenantBounds& bounds,
                           const ShareRequests& requests, std::vector<std::string>& clamped) {
  VgpuConfig out = merged;
  if (bounds.min_enforcement == EnforcementPolicy::kKill &&
      out.enforcement != EnforcementPolicy::kKill) {
    clamped.push_back(std::string("enforcement ") +
                      (out.enforcement ? "report" : "unset (the agent's default)") +
                      " raised to the floor kill");
    out.enforcement = EnforcementPolicy::kKill;
  }
  // Priority and a cores limit are the shim's compute scheduling: under MPS or TimeSlicing the
  // hardware schedules and check_supported refuses them, so there is nothing to hold.
  const bool quota = out.strategy.value_or(SharingStrategy::kQuota) == SharingStrategy::kQuota;
  if (bounds.max_priority && quota) {
    const Priority priority = out.priority.value_or(Priority::kNormal);
    if (priority_rank(priority) > priority_rank(*bounds.max_priority)) {
      clamped.push_back(std::string("compute.priority ") + to_string(priority) +
                        " lowered to the highest priority " + to_string(*bounds.max_priority));
      out.priority = bounds.max_priority;
    }
  }
  if (bounds.max_cores_limit && quota) {
    // The limit the share would get, set or not (a best-effort share's default is 100).
    const uint32_t limit = out.cores_limit.value_or(default_cores_limit(requests));
    // No cores capacity: the allocation holds the whole GPU's time, its request is 100.
    const uint32_t ceiling =
        limit_ceiling(*bounds.max_cores_limit, std::optional(requests.cores.value_or(100)));
    if (limit > ceiling) {
      clamped.push_back("compute.limit " + std::to_string(limit) +
                        " lowered to the largest compute limit " + std::to_string(ceiling));
      out.cores_limit = ceiling;
      out.cores_limit_from_burst = false;
    }
  }
  // No memory capacity: the allocation holds the whole GPU, which no limit can exceed.
  if (bounds.max_memory_limit && out.memory_limit && requests.memory_bytes) {
    const uint64_t ceiling = limit_ceiling(*bounds.max_memory_limit, requests.memory_bytes);
    if (*out.memory_limit > ceiling) {
      clamped.push_back("memory.limit " + byte_quantity_text(*out.memory_limit) +
                        " lowered to the largest memory limit " + byte_quantity_text(ceiling));
      out.memory_limit = ceiling;
    }
  }
  return out;
}

Result<Priority> decode_priority(std::string_view text, const std::string& flag) {
  return decode_enum(json(std::string(text)), flag, kPriorityNames);
}

Result<uint32_t> decode_cores_limit(std::string_view text, const std::string& flag) {
  const std::optional<uint32_t> percent = parse_percent(std::string(text), 1, 100);
  if (!percent)
    return invalid_argument(flag + ": invalid value \"" + std::string(text) +
                            "\" (an integer percent 1..100)");
  return *percent;
}

Result<uint64_t> decode_memory_limit(std::string_view text, const std::string& flag) {
  return decode_bytes(json(std::string(text)), flag);
}

}  // namespace tessera::vgpu_config
