#include "tessera/vgpu_config.h"

#include <initializer_list>
#include <utility>

#include "tessera/json_access.h"
#include "tessera/quantity.h"
#include "tessera/share_region.h"

namespace tessera {
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
  Result<Enum> decoded = decode_enum(*it, path, names);
  if (!decoded.is_ok()) return decoded.status();
  out = *decoded;
  return Status::ok();
}

}  // namespace

Result<VgpuConfig> decode_vgpu_config(const json& parameters) {
  VgpuConfig out;
  TESSERA_RETURN_IF_ERROR(expect_object(parameters, "parameters"));
  TESSERA_RETURN_IF_ERROR(unknown_fields(
      parameters, "", {"apiVersion", "kind", "compute", "memory", "sharing", "enforcement"}));
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
      if (!limit->is_number_integer() || limit->get<int64_t>() < 1 || limit->get<int64_t>() > 100)
        return invalid_argument("compute.limit: invalid value " + limit->dump() +
                                " (an integer percent 1..100)");
      out.cores_limit = static_cast<uint32_t>(limit->get<int64_t>());
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
      std::optional<uint64_t> bytes;
      if (limit->is_string()) bytes = parse_byte_quantity(limit->get_ref<const std::string&>());
      if (limit->is_number_integer() && limit->get<int64_t>() > 0)
        bytes = static_cast<uint64_t>(limit->get<int64_t>());
      if (!bytes || *bytes == 0)
        return invalid_argument("memory.limit: invalid value " + limit->dump() +
                                " (a positive byte quantity such as \"8Gi\")");
      out.memory_limit = *bytes;
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
    Result<EnforcementPolicy> policy = decode_enforcement_policy(*enforcement);
    if (!policy.is_ok()) return policy.status();
    out.enforcement = *policy;
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
    VgpuConfigEntry decoded{{}, std::move(config).value()};
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

}  // namespace tessera
