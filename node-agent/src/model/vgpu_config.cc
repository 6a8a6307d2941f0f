#include "model/vgpu_config.h"

#include <initializer_list>
#include <utility>

namespace tessera::agent {
namespace {

using nlohmann::json;

std::string unknown_fields(const json& object, const std::string& prefix,
                           std::initializer_list<const char*> known) {
  for (const auto& [key, value] : object.items()) {
    bool found = false;
    for (const char* name : known) found = found || key == name;
    if (!found) return prefix + key + ": unknown field";
  }
  return "";
}

std::string expect_object(const json& value, const std::string& path) {
  if (!value.is_object()) return path + ": must be an object, got " + value.dump();
  return "";
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
std::string decode_enum(const json& value, const std::string& path, NameTable<Enum> names,
                        std::optional<Enum>& out) {
  if (value.is_string()) {
    for (const auto& [name, member] : names) {
      if (value.get_ref<const std::string&>() == name) {
        out = member;
        return "";
      }
    }
  }
  std::string allowed;
  for (const auto& [name, member] : names) {
    if (!allowed.empty()) allowed += '|';
    allowed += name;
  }
  return path + ": invalid value " + value.dump() + " (one of " + allowed + ")";
}

}  // namespace

std::string decode_vgpu_config(const json& parameters, VgpuConfig& out) {
  out = {};
  if (auto e = expect_object(parameters, "parameters"); !e.empty()) return e;
  if (auto e =
          unknown_fields(parameters, "", {"apiVersion", "kind", "compute", "memory", "sharing"});
      !e.empty())
    return e;
  const auto api = parameters.find("apiVersion");
  if (api == parameters.end()) return "apiVersion: required";
  if (!api->is_string() || api->get_ref<const std::string&>() != kConfigApiVersion)
    return "apiVersion: invalid value " + api->dump() + " (expected \"" + kConfigApiVersion + "\")";
  const auto kind = parameters.find("kind");
  if (kind == parameters.end()) return "kind: required";
  if (!kind->is_string() || kind->get_ref<const std::string&>() != kConfigKind)
    return "kind: invalid value " + kind->dump() + " (expected \"" + kConfigKind + "\")";

  if (const auto compute = parameters.find("compute"); compute != parameters.end()) {
    if (auto e = expect_object(*compute, "compute"); !e.empty()) return e;
    if (auto e = unknown_fields(*compute, "compute.", {"burst", "priority"}); !e.empty()) return e;
    if (const auto burst = compute->find("burst"); burst != compute->end()) {
      if (!burst->is_number_integer() || burst->get<int64_t>() < 0 || burst->get<int64_t>() > 100)
        return "compute.burst: invalid value " + burst->dump() + " (an integer percent 0..100)";
      out.burst = static_cast<uint32_t>(burst->get<int64_t>());
    }
    if (const auto priority = compute->find("priority"); priority != compute->end()) {
      if (auto e = decode_enum(*priority, "compute.priority", kPriorityNames, out.priority);
          !e.empty())
        return e;
    }
  }
  if (const auto memory = parameters.find("memory"); memory != parameters.end()) {
    if (auto e = expect_object(*memory, "memory"); !e.empty()) return e;
    if (auto e = unknown_fields(*memory, "memory.", {}); !e.empty()) return e;
  }
  if (const auto sharing = parameters.find("sharing"); sharing != parameters.end()) {
    if (auto e = expect_object(*sharing, "sharing"); !e.empty()) return e;
    if (auto e = unknown_fields(*sharing, "sharing.", {"strategy", "timeSlice"}); !e.empty())
      return e;
    if (const auto strategy = sharing->find("strategy"); strategy != sharing->end()) {
      if (auto e = decode_enum(*strategy, "sharing.strategy", kStrategyNames, out.strategy);
          !e.empty())
        return e;
    }
    if (const auto slice = sharing->find("timeSlice"); slice != sharing->end()) {
      if (auto e = decode_enum(*slice, "sharing.timeSlice", kTimeSliceNames, out.time_slice);
          !e.empty())
        return e;
      if (out.strategy != SharingStrategy::kTimeSlicing)
        return "sharing.timeSlice: only valid with sharing.strategy TimeSlicing";
    }
  }
  return "";
}

VgpuConfig merge_vgpu_config(const VgpuConfig& base, const VgpuConfig& later) {
  VgpuConfig merged = base;
  if (later.burst) merged.burst = later.burst;
  if (later.priority) merged.priority = later.priority;
  if (later.strategy) merged.strategy = later.strategy;
  if (later.time_slice) merged.time_slice = later.time_slice;
  return merged;
}

std::string check_supported(const VgpuConfig& config) {
  const SharingStrategy strategy = config.strategy.value_or(SharingStrategy::kQuota);
  if (config.time_slice && strategy != SharingStrategy::kTimeSlicing)
    return std::string("sharing.timeSlice ") + to_string(*config.time_slice) +
           " is set but the merged sharing.strategy is " + to_string(strategy);
  // Bursting and priority are the shim's compute scheduling; under MPS or time slicing the
  // hardware schedules, so a value there would be silently ignored.
  if (strategy != SharingStrategy::kQuota) {
    if (config.burst)
      return "compute.burst " + std::to_string(*config.burst) +
             " is only supported with sharing.strategy Quota, not " + to_string(strategy);
    if (config.priority)
      return std::string("compute.priority ") + to_string(*config.priority) +
             " is only supported with sharing.strategy Quota, not " + to_string(strategy);
  }
  return "";
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

}  // namespace tessera::agent
