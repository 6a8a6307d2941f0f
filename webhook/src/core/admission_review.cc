#include "core/admission_review.h"

#include "core/base64.h"
#include "model/json_access.h"

namespace tessera::webhook {

using agent::json_member;
using agent::json_string;

namespace {

using nlohmann::json;

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
  out.uid = json_string(*request, "uid");
  if (out.uid.empty()) return invalid_argument("request.uid: missing");
  if (const json* kind = json_member(*request, "kind")) {
    out.kind.group = json_string(*kind, "group");
    out.kind.version = json_string(*kind, "version");
    out.kind.kind = json_string(*kind, "kind");
  }
  out.sub_resource = json_string(*request, "subResource");
  out.name = json_string(*request, "name");
  out.namespace_name = json_string(*request, "namespace");
  out.operation = json_string(*request, "operation");
  if (const json* dry_run = json_member(*request, "dryRun"); dry_run && dry_run->is_boolean())
    out.dry_run = dry_run->get<bool>();
  if (const json* object = json_member(*request, "object"); object && object->is_object())
    out.object = object;
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
