#include "share/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tessera/json_access.h"

namespace tessera::agent {
namespace {

using nlohmann::json;

// Schema version 1. What must be kept, and why:
// - per claim UID: namespace and name (logs and errors after the claim is gone), the state
//   (PrepareStarted = side effects may be partial: a retried prepare redoes them, unprepare undoes
//   them; PrepareCompleted = a retried prepare answers from here without the API);
// - per share: everything its folder name, CDI device and limits derive from (claim UID, pool,
//   device, shareID, request names, UUID, minor, memory, cores, merged config), so unprepare and
//   restart recovery never need the ResourceClaim, and a completed prepare can be answered again
//   byte for byte;
// - per claim, optional: the pods it was reserved for ("pods": [{name, uid}]) and per share the
//   merged config's enforcement policy. Both are additions a version-1 reader without them skips
//   (unknown keys are ignored) and a checkpoint without them reads as "none": old files stay
//   readable both ways, so the version is unchanged.
// A reader refuses any other version rather than guessing: bump it on any change of meaning.
constexpr int kCheckpointVersion = 1;

json share_to_json(const ShareSpec& s) {
  json j = {{"claimUID", s.claim_uid},        {"pool", s.pool}, {"device", s.device},
            {"shareID", s.share_id},          {"uuid", s.uuid}, {"minor", s.minor},
            {"requestNames", s.request_names}};
  if (s.memory_bytes) j["memoryBytes"] = *s.memory_bytes;
  if (s.cores) j["cores"] = *s.cores;
  if (s.config.burst) j["burst"] = *s.config.burst;
  if (s.config.priority) j["priority"] = static_cast<int>(*s.config.priority);
  if (s.config.strategy) j["strategy"] = static_cast<int>(*s.config.strategy);
  if (s.config.time_slice) j["timeSlice"] = static_cast<int>(*s.config.time_slice);
  if (!s.folder.empty()) j["folder"] = s.folder;
  if (s.config.enforcement) j["enforcement"] = enforcement_policy_name(*s.config.enforcement);
  return j;
}

// A member that is missing or of another type stops the read, naming the field and its value.
[[noreturn]] void bad_field(const std::string& field, const char* expected, const json* value) {
  throw std::runtime_error(field + ": expected " + expected + ", got " + json_shown(value));
}

const json& member(const json& object, const std::string& at, const char* key) {
  const json* value = json_member(object, key);
  if (!value) bad_field(at + key, "a value", value);
  return *value;
}

std::string string_member(const json& object, const std::string& at, const char* key) {
  const json* value = json_member(object, key);
  if (!value || !value->is_string()) bad_field(at + key, "a string", value);
  return value->get<std::string>();
}

// An unsigned integer of at most `max`.
uint64_t unsigned_member(const json& object, const std::string& at, const char* key, uint64_t max) {
  const json* value = json_member(object, key);
  if (!value || !value->is_number_unsigned() || value->get<uint64_t>() > max)
    bad_field(at + key, ("an integer 0.." + std::to_string(max)).c_str(), value);
  return value->get<uint64_t>();
}

// An enum written as its number (share_to_json): one of the `count` members (vgpu_config.h:
// Priority and SharingStrategy have 3, TimeSlice 4).
template <typename Enum>
Enum enum_member(const json& object, const std::string& at, const char* key, uint64_t count) {
  return static_cast<Enum>(unsigned_member(object, at, key, count - 1));
}

ShareSpec share_from_json(const json& j, const std::string& at) {
  if (!j.is_object()) bad_field(at.substr(0, at.size() - 1), "an object", &j);
  ShareSpec s;
  s.claim_uid = string_member(j, at, "claimUID");
  s.pool = string_member(j, at, "pool");
  s.device = string_member(j, at, "device");
  s.share_id = string_member(j, at, "shareID");
  s.uuid = string_member(j, at, "uuid");
  s.minor = static_cast<unsigned>(unsigned_member(j, at, "minor", UINT32_MAX));
  const json& names = member(j, at, "requestNames");
  if (!names.is_array()) bad_field(at + "requestNames", "an array of strings", &names);
  for (size_t i = 0; i < names.size(); ++i) {
    if (!names[i].is_string())
      bad_field(at + "requestNames[" + std::to_string(i) + "]", "a string", &names[i]);
    s.request_names.push_back(names[i].get<std::string>());
  }
  if (j.contains("memoryBytes")) s.memory_bytes = unsigned_member(j, at, "memoryBytes", UINT64_MAX);
  if (j.contains("cores")) s.cores = static_cast<uint32_t>(unsigned_member(j, at, "cores", 100));
  if (j.contains("burst"))
    s.config.burst = static_cast<uint32_t>(unsigned_member(j, at, "burst", 100));
  if (j.contains("priority")) s.config.priority = enum_member<Priority>(j, at, "priority", 3);
  if (j.contains("strategy"))
    s.config.strategy = enum_member<SharingStrategy>(j, at, "strategy", 3);
  if (j.contains("timeSlice")) s.config.time_slice = enum_member<TimeSlice>(j, at, "timeSlice", 4);
  if (j.contains("folder")) s.folder = string_member(j, at, "folder");
  if (j.contains("enforcement")) {
    const auto policy = parse_enforcement_policy(string_member(j, at, "enforcement"));
    if (!policy) throw std::runtime_error(at + "enforcement: unknown " + j["enforcement"].dump());
    s.config.enforcement = *policy;
  }
  if (!safe_name_component(s.claim_uid) || !safe_name_component(s.device) ||
      (!s.share_id.empty() && !safe_name_component(s.share_id)) ||
      (!s.folder.empty() && !safe_name_component(s.folder)))
    throw std::runtime_error("unsafe share name " + s.name());
  return s;
}

}  // namespace

std::string checkpoint_to_json(const Checkpoint& checkpoint) {
  json claims = json::object();
  for (const auto& [uid, entry] : checkpoint) {
    json shares = json::array();
    for (const auto& share : entry.shares) shares.push_back(share_to_json(share));
    claims[uid] = {{"namespace", entry.namespace_name},
                   {"name", entry.name},
                   {"state", entry.state == ClaimState::kPrepareCompleted ? "PrepareCompleted"
                                                                          : "PrepareStarted"},
                   {"shares", shares}};
    if (!entry.pods.empty()) {
      json pods = json::array();
      for (const auto& pod : entry.pods) pods.push_back({{"name", pod.name}, {"uid", pod.uid}});
      claims[uid]["pods"] = pods;
    }
  }
  return json{{"version", kCheckpointVersion}, {"claims", claims}}.dump(2) + "\n";
}

Result<Checkpoint> checkpoint_from_json(const std::string& text) {
  Checkpoint out;
  try {
    const json j = json::parse(text);
    if (!j.is_object()) bad_field("the file", "an object", &j);
    const json& version = member(j, "", "version");
    if (version != kCheckpointVersion)
      return internal_error("checkpoint version " + version.dump() + " is not " +
                            std::to_string(kCheckpointVersion));
    const json& claims = member(j, "", "claims");
    if (!claims.is_object()) bad_field("claims", "an object", &claims);
    for (const auto& [uid, value] : claims.items()) {
      const std::string at = "claims." + uid + ".";
      if (!value.is_object()) bad_field("claims." + uid, "an object", &value);
      ClaimEntry entry;
      entry.namespace_name = string_member(value, at, "namespace");
      entry.name = string_member(value, at, "name");
      const auto state = string_member(value, at, "state");
      if (state == "PrepareCompleted") {
        entry.state = ClaimState::kPrepareCompleted;
      } else if (state == "PrepareStarted") {
        entry.state = ClaimState::kPrepareStarted;
      } else {
        return internal_error("checkpoint: claim " + uid + ": unknown state " + state);
      }
      const json& shares = member(value, at, "shares");
      if (!shares.is_array()) bad_field(at + "shares", "an array", &shares);
      for (size_t i = 0; i < shares.size(); ++i)
        entry.shares.push_back(
            share_from_json(shares[i], at + "shares[" + std::to_string(i) + "]."));
      if (value.contains("pods")) {
        const json& pods = member(value, at, "pods");
        if (!pods.is_array()) bad_field(at + "pods", "an array", &pods);
        for (size_t i = 0; i < pods.size(); ++i) {
          const std::string pod_at = at + "pods[" + std::to_string(i) + "].";
          if (!pods[i].is_object())
            bad_field(pod_at.substr(0, pod_at.size() - 1), "an object", &pods[i]);
          entry.pods.push_back(
              {string_member(pods[i], pod_at, "name"), string_member(pods[i], pod_at, "uid")});
        }
      }
      out[uid] = std::move(entry);
    }
  } catch (const std::exception& e) {
    return internal_error(std::string("checkpoint: ") + e.what());
  }
  return out;
}

}  // namespace tessera::agent
