#include "core/claim_validation.h"

#include <string>
#include <utility>
#include <vector>

#include "tessera/json_access.h"
#include "tessera/quantity.h"
#include "tessera/vgpu_config/driver_name.h"
#include "tessera/vgpu_config/vgpu_config.h"

namespace tessera::webhook {

namespace {

using nlohmann::json;

// The capacities one (sub)request asks for: `exactly` in resource.k8s.io/v1, the request itself in
// v1beta1 and a firstAvailable alternative. A value that is no quantity is refused here, naming it:
// kube-apiserver refuses it too, but a bypassed webhook must not read it as "the whole GPU".
Result<vgpu_config::ShareRequests> capacity_requests(const json& request, const std::string& path) {
  const json* exactly = json_member(request, "exactly");
  const json& body = exactly ? *exactly : request;
  const std::string at = path + (exactly ? ".exactly" : "") + ".capacity.requests";
  const json* capacity = json_member(body, "capacity");
  const json* requests = capacity ? json_member(*capacity, "requests") : nullptr;
  vgpu_config::ShareRequests out;
  if (!requests) return out;
  if (const json* memory = json_member(*requests, "memory")) {
    if (memory->is_string()) out.memory_bytes = parse_byte_quantity(memory->get<std::string>());
    if (!out.memory_bytes)
      return invalid_argument(at + ".memory: invalid quantity " + memory->dump());
  }
  if (const json* cores = json_member(*requests, "cores")) {
    if (cores->is_string()) out.cores = parse_percent(cores->get<std::string>(), 0, 100);
    if (!out.cores)
      return invalid_argument(at + ".cores: invalid value " + cores->dump() +
                              " (a whole percent 0..100)");
  }
  return out;
}

// The class a (sub)request names: `exactly.deviceClassName` in resource.k8s.io/v1, the request's
// own in v1beta1 and in a firstAvailable alternative.
std::string device_class_of(const json& request) {
  const json* exactly = json_member(request, "exactly");
  return json_string(exactly ? *exactly : request, "deviceClassName");
}

// The class's Tessera configs, each applying to every request (the scheduler copies them for the
// requests that name the class), or an error that refuses the claim.
Result<std::vector<vgpu_config::VgpuConfigEntry>> class_entries(DeviceClassLookup* classes,
                                                                const std::string& name) {
  if (!classes || name.empty()) return std::vector<vgpu_config::VgpuConfigEntry>{};
  Result<json> configs = classes->class_configs(name);
  if (!configs.is_ok()) {
    // A claim may name a class that does not exist yet; it is not allocated until it does.
    if (configs.status().code() == StatusCode::kNotFound)
      return std::vector<vgpu_config::VgpuConfigEntry>{};
    return unavailable("cannot read DeviceClass " + name + " to check the claim against its " +
                       "bounds: " + configs.status().message());
  }
  return vgpu_config::decode_vgpu_config_list(*configs, "DeviceClass " + name + " spec.config",
                                              vgpu_config::ConfigList::kDeviceClass);
}

// Ok, or kInvalidArgument with the first problem, prefixed with its field path (kUnavailable
// when a DeviceClass cannot be read).
Status check_devices(const json& devices, const std::string& path, DeviceClassLookup* classes) {
  const json* list = json_member(devices, "config");
  if (!list) return Status::ok();
  TESSERA_ASSIGN_OR_RETURN(std::vector<vgpu_config::VgpuConfigEntry> decoded,
                           vgpu_config::decode_vgpu_config_list(
                               *list, path + ".config", vgpu_config::ConfigList::kClaimSpec));
  const std::vector<vgpu_config::VgpuConfigEntry>& configs = decoded;
  if (configs.empty()) return Status::ok();
  // The merge the agent makes per allocated request (claim configs in order; the class's configs
  // come first there and cannot undo a refusal here).
  const json* requests = json_member(devices, "requests");
  if (!requests || !requests->is_array()) return Status::ok();
  for (size_t i = 0; i < requests->size(); ++i) {
    const json& request = (*requests)[i];
    // Each (sub)request with its path and the capacities it asks for.
    struct Named {
      std::string name;
      std::string path;
      const json* body;
    };
    std::vector<Named> names;
    const std::string name = json_string(request, "name");
    const std::string at = path + ".requests[" + std::to_string(i) + "]";
    if (const json* alternatives = json_member(request, "firstAvailable");
        alternatives && alternatives->is_array()) {
      for (size_t j = 0; j < alternatives->size(); ++j)
        names.push_back({name + "/" + json_string((*alternatives)[j], "name"),
                         at + ".firstAvailable[" + std::to_string(j) + "]", &(*alternatives)[j]});
    } else {
      names.push_back({name, at, &request});
    }
    for (const auto& [full, full_path, body] : names) {
      const vgpu_config::VgpuConfig config = vgpu_config::config_for_request(configs, full);
      if (const Status supported = vgpu_config::check_supported(config); !supported.is_ok())
        return invalid_argument(at + " (" + full + "): " + supported.message());
      TESSERA_ASSIGN_OR_RETURN(vgpu_config::ShareRequests asked,
                               capacity_requests(*body, full_path));
      // The GPU is not known before the scheduler picks it: the agent checks a limit above the
      // GPU at prepare.
      if (const Status limits = vgpu_config::check_limits_against_requests(config, asked);
          !limits.is_ok())
        return invalid_argument(at + " (" + full + "): " + limits.message());
      // What the tenant set, against the bounds of the class this (sub)request names.
      const std::string class_name = device_class_of(*body);
      TESSERA_ASSIGN_OR_RETURN(std::vector<vgpu_config::VgpuConfigEntry> admin,
                               class_entries(classes, class_name));
      const Status bounded = vgpu_config::check_tenant_bounds(
          config, vgpu_config::bounds_for_request(admin, full), asked, "DeviceClass " + class_name);
      if (!bounded.is_ok()) return invalid_argument(at + " (" + full + "): " + bounded.message());
    }
  }
  return Status::ok();
}

}  // namespace

AdmissionResponse validate_claim(const AdmissionRequest& request, DeviceClassLookup* classes) {
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
  if (const Status checked = check_devices(*devices, path + ".devices", classes);
      !checked.is_ok()) {
    if (checked.code() == StatusCode::kUnavailable)
      return deny(500, "InternalError", checked.message());
    return deny(422, "Invalid", checked.message());
  }
  return allow();
}

Result<json> validate(std::string_view body, DeviceClassLookup* classes) {
  TESSERA_ASSIGN_OR_RETURN(json review, parse_json_body(body));
  TESSERA_ASSIGN_OR_RETURN(AdmissionRequest request, read_admission_request(review));
  if (request.api_version != kAdmissionV1)
    return review_response(request.api_version, request.uid, unserved_version());
  return review_response(request.api_version, request.uid, validate_claim(request, classes));
}

}  // namespace tessera::webhook
