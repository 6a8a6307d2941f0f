#include "model/claim_pods.h"

#include "tessera/json_access.h"

namespace tessera::agent {
namespace {

using nlohmann::json;

// object[key] when it is a non-empty string, else an error naming `path`.
Result<std::string> required_string(const json& object, const char* key, const std::string& path) {
  const json* value = json_member(object, key);
  if (!value) return invalid_argument(path + ": missing");
  if (!value->is_string() || value->get_ref<const std::string&>().empty())
    return invalid_argument(path + ": not a non-empty string");
  return value->get<std::string>();
}

}  // namespace

Result<ClaimPods> parse_claim_pods(const json& claim) {
  if (!claim.is_object()) return invalid_argument("ResourceClaim: not a JSON object");
  const json* metadata = json_member(claim, "metadata");
  if (!metadata || !metadata->is_object()) return invalid_argument("metadata: not an object");
  ClaimPods out;
  TESSERA_ASSIGN_OR_RETURN(std::string uid, required_string(*metadata, "uid", "metadata.uid"));
  out.uid = std::move(uid);
  const json* status = json_member(claim, "status");
  if (!status || status->is_null()) return out;  // not allocated, nobody reserved it
  if (!status->is_object()) return invalid_argument("status: not an object");
  const json* reserved = json_member(*status, "reservedFor");
  if (!reserved || reserved->is_null()) return out;  // omitted when empty
  if (!reserved->is_array()) return invalid_argument("status.reservedFor: not an array");
  for (size_t i = 0; i < reserved->size(); ++i) {
    const json& consumer = (*reserved)[i];
    const std::string path = "status.reservedFor[" + std::to_string(i) + "]";
    if (!consumer.is_object()) return invalid_argument(path + ": not an object");
    TESSERA_ASSIGN_OR_RETURN(std::string resource,
                             required_string(consumer, "resource", path + ".resource"));
    // apiGroup is optional: absent or "" is the core group, whose "pods" are pods.
    const json* group = json_member(consumer, "apiGroup");
    if (group && !group->is_null() && !group->is_string())
      return invalid_argument(path + ".apiGroup: not a string");
    const bool core = !group || group->is_null() || group->get_ref<const std::string&>().empty();
    TESSERA_ASSIGN_OR_RETURN(std::string name, required_string(consumer, "name", path + ".name"));
    TESSERA_ASSIGN_OR_RETURN(std::string pod_uid, required_string(consumer, "uid", path + ".uid"));
    if (!core || resource != "pods") continue;  // another kind of consumer: not a pod of ours
    out.pods.push_back({std::move(name), std::move(pod_uid)});
  }
  return out;
}

Result<ClaimPods> parse_claim_pods(const std::string& claim_json) {
  const json claim = json::parse(claim_json, nullptr, /*allow_exceptions=*/false);
  if (claim.is_discarded()) return invalid_argument("ResourceClaim: not JSON");
  return parse_claim_pods(claim);
}

}  // namespace tessera::agent
