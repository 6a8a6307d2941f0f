#include "core/claim_validation.h"

#include <string>
#include <utility>
#include <vector>

#include "tessera/driver_name.h"
#include "tessera/json_access.h"
#include "tessera/vgpu_config.h"

namespace tessera::webhook {

namespace {

using nlohmann::json;

// Ok, or kInvalidArgument with the first problem, prefixed with its field path.
Status check_devices(const json& devices, const std::string& path) {
  const json* list = json_member(devices, "config");
  if (!list) return Status::ok();
  Result<std::vector<VgpuConfigEntry>> decoded = decode_vgpu_config_list(*list, path + ".config");
  if (!decoded.is_ok()) return decoded.status();
  const std::vector<VgpuConfigEntry>& configs = *decoded;
  if (configs.empty()) return Status::ok();
  // The merge the agent makes per allocated request (claim configs in order; the class's configs
  // come first there and cannot undo a refusal here).
  const json* requests = json_member(devices, "requests");
  if (!requests || !requests->is_array()) return Status::ok();
  for (size_t i = 0; i < requests->size(); ++i) {
    const json& request = (*requests)[i];
    std::vector<std::string> names;
    const std::string name = json_string(request, "name");
    if (const json* alternatives = json_member(request, "firstAvailable");
        alternatives && alternatives->is_array()) {
      for (const json& sub : *alternatives) names.push_back(name + "/" + json_string(sub, "name"));
    } else {
      names.push_back(name);
    }
    for (const auto& full : names) {
      if (const Status supported = check_supported(config_for_request(configs, full));
          !supported.is_ok())
        return invalid_argument(path + ".requests[" + std::to_string(i) + "] (" + full +
                                "): " + supported.message());
    }
  }
  return Status::ok();
}

}  // namespace

AdmissionResponse validate_claim(const AdmissionRequest& request) {
  const bool claim = request.kind.kind == "ResourceClaim";
  const bool claim_template = request.kind.kind == "ResourceClaimTemplate";
  if (request.kind.group != "resource.k8s.io" || (!claim && !claim_template)) {
    AdmissionResponse response = allow();
    response.warnings.push_back(
        "tessera-webhook validates ResourceClaims and "
        "ResourceClaimTemplates only; " +
        request.kind.kind + " passed unchecked");
    return response;
  }
  if (!request.sub_resource.empty() || !request.object ||
      (request.operation != "CREATE" && request.operation != "UPDATE"))
    return allow();
  const json* spec = json_member(*request.object, "spec");
  std::string path = "spec";
  if (claim_template && spec) {
    spec = json_member(*spec, "spec");
    path = "spec.spec";
  }
  const json* devices = spec ? json_member(*spec, "devices") : nullptr;
  if (!devices) return allow();
  if (const Status checked = check_devices(*devices, path + ".devices"); !checked.is_ok())
    return deny(422, "Invalid", checked.message());
  return allow();
}

Result<json> validate(std::string_view body) {
  Result<json> review = parse_json_body(body);
  if (!review.is_ok()) return review.status();
  Result<AdmissionRequest> request = read_admission_request(*review);
  if (!request.is_ok()) return request.status();
  if (request->api_version != kAdmissionV1)
    return review_response(request->api_version, request->uid, unserved_version());
  return review_response(request->api_version, request->uid, validate_claim(*request));
}

}  // namespace tessera::webhook
