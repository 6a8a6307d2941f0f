#include "share/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

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

ShareSpec share_from_json(const json& j) {
  ShareSpec s;
  s.claim_uid = j.at("claimUID").get<std::string>();
  s.pool = j.at("pool").get<std::string>();
  s.device = j.at("device").get<std::string>();
  s.share_id = j.at("shareID").get<std::string>();
  s.uuid = j.at("uuid").get<std::string>();
  s.minor = j.at("minor").get<unsigned>();
  s.request_names = j.at("requestNames").get<std::vector<std::string>>();
  if (j.contains("memoryBytes")) s.memory_bytes = j["memoryBytes"].get<uint64_t>();
  if (j.contains("cores")) s.cores = j["cores"].get<uint32_t>();
  if (j.contains("burst")) s.config.burst = j["burst"].get<uint32_t>();
  if (j.contains("priority")) s.config.priority = static_cast<Priority>(j["priority"].get<int>());
  if (j.contains("strategy"))
    s.config.strategy = static_cast<SharingStrategy>(j["strategy"].get<int>());
  if (j.contains("timeSlice"))
    s.config.time_slice = static_cast<TimeSlice>(j["timeSlice"].get<int>());
  if (j.contains("folder")) s.folder = j["folder"].get<std::string>();
  if (j.contains("enforcement")) {
    const auto policy = parse_enforcement_policy(j["enforcement"].get<std::string>());
    if (!policy) throw std::runtime_error("unknown enforcement " + j["enforcement"].dump());
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
    if (j.at("version").get<int>() != kCheckpointVersion)
      return internal_error("checkpoint version " + j.at("version").dump() + " is not " +
                            std::to_string(kCheckpointVersion));
    for (const auto& [uid, value] : j.at("claims").items()) {
      ClaimEntry entry;
      entry.namespace_name = value.at("namespace").get<std::string>();
      entry.name = value.at("name").get<std::string>();
      const auto state = value.at("state").get<std::string>();
      if (state == "PrepareCompleted") {
        entry.state = ClaimState::kPrepareCompleted;
      } else if (state == "PrepareStarted") {
        entry.state = ClaimState::kPrepareStarted;
      } else {
        return internal_error("checkpoint: claim " + uid + ": unknown state " + state);
      }
      for (const auto& share : value.at("shares")) entry.shares.push_back(share_from_json(share));
      if (value.contains("pods"))
        for (const auto& pod : value.at("pods"))
          entry.pods.push_back(
              {pod.at("name").get<std::string>(), pod.at("uid").get<std::string>()});
      out[uid] = std::move(entry);
    }
  } catch (const std::exception& e) {
    return internal_error(std::string("checkpoint: ") + e.what());
  }
  return out;
}

}  // namespace tessera::agent
