#include "share/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string_view>

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
// - per claim, optional: the pods it was reserved for ("pods": [{name, uid}]), when its prepare
//   completed ("preparedUnixMs", wall-clock ms since the epoch: the shares' age) and per share the
//   merged config's enforcement policy. All are additions a version-1 reader without them skips
//   (unknown keys are ignored) and a checkpoint without them reads as "none" (the age: unknown):
//   old files stay readable both ways, so the version is unchanged. Likewise per share "mig": the
//   MIG device it is on (kind, parent, profile, placement, instance IDs, caps nodes).
// A reader refuses any other version rather than guessing: bump it on any change of meaning.
constexpr int kCheckpointVersion = 1;

json share_to_json(const ShareSpec& s) {
  json j = {{"claimUID", s.claim_uid},        {"pool", s.pool}, {"device", s.device},
            {"shareID", s.share_id},          {"uuid", s.uuid}, {"minor", s.minor},
            {"requestNames", s.request_names}};
  if (s.memory_bytes) j["memoryBytes"] = *s.memory_bytes;
  if (s.cores) j["cores"] = *s.cores;
  // A limit given as compute.burst keeps that name, and with it its meaning at or below the
  // request.
  if (s.config.cores_limit)
    j[s.config.cores_limit_from_burst ? "burst" : "coresLimit"] = *s.config.cores_limit;
  if (s.config.memory_limit) j["memoryLimit"] = *s.config.memory_limit;
  if (s.config.priority) j["priority"] = static_cast<int>(*s.config.priority);
  if (s.config.strategy) j["strategy"] = static_cast<int>(*s.config.strategy);
  if (s.config.time_slice) j["timeSlice"] = static_cast<int>(*s.config.time_slice);
  if (!s.folder.empty()) j["folder"] = s.folder;
  if (s.config.enforcement)
    j["enforcement"] = vgpu_config::enforcement_policy_name(*s.config.enforcement);
  if (s.mig) {
    json mig = {{"kind", s.mig->kind == MigKind::kDynamic ? "dynamic" : "static"},
                {"parentUUID", s.mig->parent_uuid},
                {"profileID", s.mig->profile_id},
                {"profile", s.mig->profile},
                {"placementStart", s.mig->placement.start},
                {"placementSize", s.mig->placement.size},
                {"multiprocessors", s.mig->multiprocessors}};
    if (s.mig->gi_id) mig["gpuInstance"] = *s.mig->gi_id;
    if (s.mig->ci_id) mig["computeInstance"] = *s.mig->ci_id;
    if (s.mig->caps)
      mig["caps"] = {{"major", s.mig->caps->major},
                     {"gpuInstanceMinor", s.mig->caps->gi_minor},
                     {"computeInstanceMinor", s.mig->caps->ci_minor}};
    j["mig"] = mig;
  }
  return j;
}

// Reads the members of the checkpoint's JSON. The first member that is missing or of another type
// is kept as the error (naming the field and its value) and every later read returns an empty
// value, so a parser reads on in a straight line and asks ok() before it trusts what it read.
class FieldReader {
 public:
  bool ok() const { return !error_; }
  Status status() const { return error_ ? *error_ : Status::ok(); }

  // A member that is missing or of another type stops the read, naming the field and its value.
  void bad_field(const std::string& field, const char* expected, const json* value) {
    fail(field + ": expected " + expected + ", got " + json_shown(value));
  }
  void fail(const std::string& message) {
    if (!error_) error_ = internal_error("checkpoint: " + message);
  }

  const json* member(const json& object, const std::string& at, const char* key) {
    if (!ok()) return nullptr;
    const json* value = json_member(object, key);
    if (!value) bad_field(at + key, "a value", value);
    return value;
  }

  std::string string_member(const json& object, const std::string& at, const char* key) {
    if (!ok()) return "";
    const json* value = json_member(object, key);
    if (!value || !value->is_string()) {
      bad_field(at + key, "a string", value);
      return "";
    }
    return value->get<std::string>();
  }

  // An unsigned integer of at most `max`.
  uint64_t unsigned_member(const json& object, const std::string& at, const char* key,
                           uint64_t max) {
    if (!ok()) return 0;
    const json* value = json_member(object, key);
    if (!value || !value->is_number_unsigned() || value->get<uint64_t>() > max) {
      bad_field(at + key, ("an integer 0.." + std::to_string(max)).c_str(), value);
      return 0;
    }
    return value->get<uint64_t>();
  }

  // An enum written as its number (share_to_json): one of the `count` members (vgpu_config.h:
  // Priority and SharingStrategy have 3, TimeSlice 4).
  template <typename Enum>
  Enum enum_member(const json& object, const std::string& at, const char* key, uint64_t count) {
    return static_cast<Enum>(unsigned_member(object, at, key, count - 1));
  }

 private:
  std::optional<Status> error_;
};

Result<ShareSpec> share_from_json(const json& j, const std::string& at) {
  FieldReader read;
  if (!j.is_object()) {
    read.bad_field(at.substr(0, at.size() - 1), "an object", &j);
    return read.status();
  }
  ShareSpec s;
  s.claim_uid = read.string_member(j, at, "claimUID");
  s.pool = read.string_member(j, at, "pool");
  s.device = read.string_member(j, at, "device");
  s.share_id = read.string_member(j, at, "shareID");
  s.uuid = read.string_member(j, at, "uuid");
  s.minor = static_cast<unsigned>(read.unsigned_member(j, at, "minor", UINT32_MAX));
  const json* names = read.member(j, at, "requestNames");
  if (!read.ok()) return read.status();
  if (!names->is_array()) read.bad_field(at + "requestNames", "an array of strings", names);
  for (size_t i = 0; read.ok() && i < names->size(); ++i) {
    const json& name = (*names)[i];
    if (!name.is_string()) {
      read.bad_field(at + "requestNames[" + std::to_string(i) + "]", "a string", &name);
      break;
    }
    s.request_names.push_back(name.get<std::string>());
  }
  if (j.contains("memoryBytes"))
    s.memory_bytes = read.unsigned_member(j, at, "memoryBytes", UINT64_MAX);
  if (j.contains("cores"))
    s.cores = static_cast<uint32_t>(read.unsigned_member(j, at, "cores", 100));
  // "burst": the cores limit's name in checkpoints written before requests and limits.
  for (const char* key : {"coresLimit", "burst"})
    if (j.contains(key) && !s.config.cores_limit) {
      const auto limit = static_cast<uint32_t>(read.unsigned_member(j, at, key, 100));
      if (limit > 0) {
        s.config.cores_limit = limit;
        s.config.cores_limit_from_burst = std::string_view(key) == "burst";
      }
    }
  if (j.contains("memoryLimit"))
    s.config.memory_limit = read.unsigned_member(j, at, "memoryLimit", UINT64_MAX);
  if (j.contains("priority"))
    s.config.priority = read.enum_member<vgpu_config::Priority>(j, at, "priority", 3);
  if (j.contains("strategy"))
    s.config.strategy = read.enum_member<vgpu_config::SharingStrategy>(j, at, "strategy", 3);
  if (j.contains("timeSlice"))
    s.config.time_slice = read.enum_member<vgpu_config::TimeSlice>(j, at, "timeSlice", 4);
  if (j.contains("folder")) s.folder = read.string_member(j, at, "folder");
  if (j.contains("enforcement")) {
    const std::string name = read.string_member(j, at, "enforcement");
    if (!read.ok()) return read.status();
    const auto policy = vgpu_config::parse_enforcement_policy(name);
    if (!policy) read.fail(at + "enforcement: unknown " + j["enforcement"].dump());
    if (policy) s.config.enforcement = *policy;
  }
  if (j.contains("mig")) {
    const json* mig = read.member(j, at, "mig");
    if (read.ok() && !mig->is_object()) read.bad_field(at + "mig", "an object", mig);
    if (!read.ok()) return read.status();
    const std::string mig_at = at + "mig.";
    MigDeviceRef ref;
    const std::string kind = read.string_member(*mig, mig_at, "kind");
    if (read.ok() && kind != "static" && kind != "dynamic")
      read.fail(mig_at + "kind: unknown \"" + kind + "\"");
    ref.kind = kind == "dynamic" ? MigKind::kDynamic : MigKind::kStatic;
    ref.parent_uuid = read.string_member(*mig, mig_at, "parentUUID");
    ref.profile_id = static_cast<unsigned>(read.unsigned_member(*mig, mig_at, "profileID", 255));
    ref.profile = read.string_member(*mig, mig_at, "profile");
    ref.placement.start =
        static_cast<unsigned>(read.unsigned_member(*mig, mig_at, "placementStart", 7));
    ref.placement.size =
        static_cast<unsigned>(read.unsigned_member(*mig, mig_at, "placementSize", 8));
    ref.multiprocessors =
        static_cast<unsigned>(read.unsigned_member(*mig, mig_at, "multiprocessors", 100000));
    if (mig->contains("gpuInstance"))
      ref.gi_id = static_cast<unsigned>(read.unsigned_member(*mig, mig_at, "gpuInstance", 255));
    if (mig->contains("computeInstance"))
      ref.ci_id = static_cast<unsigned>(read.unsigned_member(*mig, mig_at, "computeInstance", 255));
    if (mig->contains("caps")) {
      const json* caps = read.member(*mig, mig_at, "caps");
      if (read.ok() && !caps->is_object()) read.bad_field(mig_at + "caps", "an object", caps);
      if (!read.ok()) return read.status();
      const std::string caps_at = mig_at + "caps.";
      MigCapsNodes nodes;
      nodes.major = static_cast<unsigned>(read.unsigned_member(*caps, caps_at, "major", 4095));
      nodes.gi_minor =
          static_cast<unsigned>(read.unsigned_member(*caps, caps_at, "gpuInstanceMinor", 1048575));
      nodes.ci_minor = static_cast<unsigned>(
          read.unsigned_member(*caps, caps_at, "computeInstanceMinor", 1048575));
      ref.caps = nodes;
    }
    s.mig = ref;
  }
  if (!read.ok()) return read.status();
  if (!safe_name_component(s.claim_uid) || !safe_name_component(s.device) ||
      (!s.share_id.empty() && !safe_name_component(s.share_id)) ||
      (!s.folder.empty() && !safe_name_component(s.folder)))
    read.fail("unsafe share name " + s.name());
  if (!read.ok()) return read.status();
  return s;
}

// The optional "pods" of a claim: [{name, uid}].
Status pods_from_json(const json& value, const std::string& at, std::vector<PodRef>& out) {
  FieldReader read;
  const json* pods = read.member(value, at, "pods");
  if (!read.ok()) return read.status();
  if (!pods->is_array()) read.bad_field(at + "pods", "an array", pods);
  for (size_t i = 0; read.ok() && i < pods->size(); ++i) {
    const json& pod = (*pods)[i];
    const std::string pod_at = at + "pods[" + std::to_string(i) + "].";
    if (!pod.is_object()) {
      read.bad_field(pod_at.substr(0, pod_at.size() - 1), "an object", &pod);
      break;
    }
    PodRef ref;
    ref.name = read.string_member(pod, pod_at, "name");
    ref.uid = read.string_member(pod, pod_at, "uid");
    if (read.ok()) out.push_back(std::move(ref));
  }
  return read.status();
}

Result<ClaimEntry> claim_from_json(const std::string& uid, const json& value) {
  FieldReader read;
  const std::string at = "claims." + uid + ".";
  if (!value.is_object()) {
    read.bad_field("claims." + uid, "an object", &value);
    return read.status();
  }
  ClaimEntry entry;
  entry.namespace_name = read.string_member(value, at, "namespace");
  entry.name = read.string_member(value, at, "name");
  const std::string state = read.string_member(value, at, "state");
  if (!read.ok()) return read.status();
  if (state == "PrepareCompleted") {
    entry.state = ClaimState::kPrepareCompleted;
  } else if (state == "PrepareStarted") {
    entry.state = ClaimState::kPrepareStarted;
  } else {
    return internal_error("checkpoint: claim " + uid + ": unknown state " + state);
  }
  const json* shares = read.member(value, at, "shares");
  if (!read.ok()) return read.status();
  if (!shares->is_array()) {
    read.bad_field(at + "shares", "an array", shares);
    return read.status();
  }
  for (size_t i = 0; i < shares->size(); ++i) {
    TESSERA_ASSIGN_OR_RETURN(
        ShareSpec share, share_from_json((*shares)[i], at + "shares[" + std::to_string(i) + "]."));
    entry.shares.push_back(std::move(share));
  }
  if (value.contains("pods")) TESSERA_RETURN_IF_ERROR(pods_from_json(value, at, entry.pods));
  if (value.contains("preparedUnixMs")) {
    // Never before the epoch; int64 as the local API's field is.
    entry.prepared_unix_ms =
        static_cast<int64_t>(read.unsigned_member(value, at, "preparedUnixMs", INT64_MAX));
    if (!read.ok()) return read.status();
  }
  return entry;
}

// Why `text` is no JSON (nlohmann's parse error, as it would have thrown it), or "" when it is.
// A SAX pass that keeps only the error: the parser reports it here instead of throwing.
std::string json_syntax_error(const std::string& text) {
  struct ErrorOnly : nlohmann::json_sax<json> {
    std::string error;
    bool null() override { return true; }
    bool boolean(bool) override { return true; }
    bool number_integer(number_integer_t) override { return true; }
    bool number_unsigned(number_unsigned_t) override { return true; }
    bool number_float(number_float_t, const string_t&) override { return true; }
    bool string(string_t&) override { return true; }
    bool binary(binary_t&) override { return true; }
    bool start_object(std::size_t) override { return true; }
    bool key(string_t&) override { return true; }
    bool end_object() override { return true; }
    bool start_array(std::size_t) override { return true; }
    bool end_array() override { return true; }
    bool parse_error(std::size_t, const std::string&,
                     const nlohmann::detail::exception& problem) override {
      error = problem.what();
      return false;
    }
  } sax;
  if (json::sax_parse(text, &sax)) return "";
  return sax.error.empty() ? "not JSON" : sax.error;
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
    if (entry.prepared_unix_ms) claims[uid]["preparedUnixMs"] = *entry.prepared_unix_ms;
  }
  return json{{"version", kCheckpointVersion}, {"claims", claims}}.dump(2) + "\n";
}

Result<Checkpoint> checkpoint_from_json(const std::string& text) {
  if (const std::string error = json_syntax_error(text); !error.empty())
    return internal_error("checkpoint: " + error);
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  FieldReader read;
  if (!j.is_object()) {
    read.bad_field("the file", "an object", &j);
    return read.status();
  }
  const json* version = read.member(j, "", "version");
  if (!read.ok()) return read.status();
  if (*version != kCheckpointVersion)
    return internal_error("checkpoint version " + version->dump() + " is not " +
                          std::to_string(kCheckpointVersion));
  const json* claims = read.member(j, "", "claims");
  if (!read.ok()) return read.status();
  if (!claims->is_object()) {
    read.bad_field("claims", "an object", claims);
    return read.status();
  }
  Checkpoint out;
  for (const auto& [uid, value] : claims->items()) {
    TESSERA_ASSIGN_OR_RETURN(ClaimEntry entry, claim_from_json(uid, value));
    out[uid] = std::move(entry);
  }
  return out;
}

}  // namespace tessera::agent
