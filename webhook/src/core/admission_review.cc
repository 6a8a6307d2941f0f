#include "core/admission_review.h"

#include "core/base64.h"
#include "tessera/json_access.h"

namespace tessera::webhook {

namespace {

using nlohmann::json;

// <at><key> into `out`: a string, or (when `required` is false) absent. kube-apiserver always
// sends these as strings; any other value is refused rather than read as "" (a request read as
// no Pod, or as no CREATE, would pass unchecked).
Status read_string(const json& object, const char* at, const char* key, bool required,
                   std::string& out) {
  const json* value = json_member(object, key);
  if (!value && !required) return Status::ok();
  if (!value || !value->is_string())
    return invalid_argument(std::string(at) + key + ": expected a string, got " +
                            json_shown(value));
  out = value->get<std::string>();
  return Status::ok();
}

}  // namespace

Result<json> parse_json_body(std::string_view body) {
  bool too_deep = false;
  // The callback sees each value's depth as it is parsed; one too deep is dropped at once, so
  // nothing deeper than the limit is ever built.
  json::parser_callback_t limit_depth = [&too_deep](int depth, json::parse_event_t, json&) {
    if (depth > kMaxJsonDepth) too_deep = true;
    return !too_deep;
  };
  json parsed = json::parse(body.begin(), body.end(), limit_depth, /*allow_exceptions=*/false);
  if (too_deep)
    return invalid_argument("the request body nests deeper than " + std::to_string(kMaxJsonDepth) +
                            " levels");
  if (parsed.is_discarded()) return invalid_argument("the request body is not JSON");
  return parsed;
}

Result<AdmissionRequest> read_admission_request(const json& review) {
  if (!review.is_object()) return invalid_argument("the request body is not a JSON object");
  AdmissionRequest out;
  out.api_version = json_string(review, "apiVersion");
  if (out.api_version != kAdmissionV1 && out.api_version != kAdmissionV1beta1)
    return invalid_argument("apiVersion " + json(out.api_version).dump() + " is not " +
                            kAdmissionV1);
  if (json_string(review, "kind") != "AdmissionReview")
    return invalid_argument("kind must be AdmissionReview");
  const json* request = json_member(review, "request");
  if (!request || !request->is_object()) return invalid_argument("request: missing");
  const json* uid = json_member(*request, "uid");
  if (!uid || !uid->is_string() || uid->get_ref<const std::string&>().empty())
    return invalid_argument("request.uid: expected a non-empty string, got " + json_shown(uid));
  out.uid = uid->get<std::string>();
  const json* kind = json_member(*request, "kind");
  if (!kind || !kind->is_object())
    return invalid_argument("request.kind: expected an object, got " + json_shown(kind));
  // group is "" for the core group (Pods), and sent so.
  TESSERA_RETURN_IF_ERROR(read_string(*kind, "request.kind.", "group", true, out.kind.group));
  TESSERA_RETURN_IF_ERROR(read_string(*kind, "request.kind.", "version", true, out.kind.version));
  TESSERA_RETURN_IF_ERROR(read_string(*kind, "request.kind.", "kind", true, out.kind.kind));
  TESSERA_RETURN_IF_ERROR(
      read_string(*request, "request.", "subResource", false, out.sub_resource));
  TESSERA_RETURN_IF_ERROR(read_string(*request, "request.", "name", false, out.name));
  TESSERA_RETURN_IF_ERROR(
      read_string(*request, "request.", "namespace", false, out.namespace_name));
  TESSERA_RETURN_IF_ERROR(read_string(*request, "request.", "operation", true, out.operation));
  if (const json* dry_run = json_member(*request, "dryRun")) {
    if (!dry_run->is_boolean())
      return invalid_argument("request.dryRun: expected a boolean, got " + json_shown(dry_run));
    out.dry_run = dry_run->get<bool>();
  }
  if (const json* object = json_member(*request, "object")) {
    // null for a DELETE; an object otherwise.
    if (!object->is_object() && !object->is_null())
      return invalid_argument("request.object: expected an object, got " + json_shown(object));
    if (object->is_object()) out.object = object;
  }
  return out;
}

AdmissionResponse allow() {
  return {};
}

AdmissionResponse deny(int32_t code, std::string reason, std::string message) {
  AdmissionResponse response;
  response.allowed = false;
  response.code = code;
  response.reason = std::move(reason);
  response.message = std::move(message);
  return response;
}

AdmissionResponse unserved_version() {
  return deny(400, "BadRequest",
              std::string("tessera-webhook serves ") + kAdmissionV1 +
                  " only; list only \"v1\" in the webhook configuration's "
                  "admissionReviewVersions");
}

json review_response(const std::string& api_version, const std::string& uid,
                     const AdmissionResponse& response) {
  json answer = {{"uid", uid}, {"allowed", response.allowed}};
  if (response.allowed && !response.patch.empty()) {
    answer["patchType"] = "JSONPatch";
    // Strings come from the request (valid UTF-8, as parsed); replace, never throw, regardless.
    answer["patch"] =
        base64_encode(response.patch.dump(-1, ' ', false, json::error_handler_t::replace));
  }
  if (!response.allowed) {
    answer["status"] = {{"metadata", json::object()},
                        {"status", "Failure"},
                        {"message", response.message},
                        {"reason", response.reason},
                        {"code", response.code}};
  }
  if (!response.warnings.empty()) answer["warnings"] = response.warnings;
  return {{"apiVersion", api_version}, {"kind", "AdmissionReview"}, {"response", answer}};
}

}  // namespace tessera::webhook
