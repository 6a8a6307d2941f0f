// What kube-apiserver stores, and answers, for a create or update of the objects Tessera writes
// or reads: one implementation for every stand-in (the webhook's fake_kube.h, the agent's
// fake_api_server.h and claim fixtures).
//
// Ported from kubernetes/kubernetes:
//   pkg/apis/resource/v1/defaults.go (commit 16913111deb1a4c4ff76f4ba7ffd9ebef397a303):
//     SetDefaults_ExactDeviceRequest and SetDefaults_DeviceSubRequest (allocationMode ExactCount,
//     then count 1), SetDefaults_DeviceTaint (timeAdded = now, whole seconds);
//   pkg/registry/resource/resourceclaim/strategy.go (commit
//   0021a864a65a17f2ad15b60545ef41fdfc30cc4c):
//     PrepareForCreate (a new claim's status is dropped), PrepareForUpdate (an update keeps the
//     stored status), the status strategy's PrepareForUpdate (a status update keeps the stored
//     spec and metadata: resourceVersion moves, generation does not);
//   pkg/registry/resource/resourceslice/strategy.go: generation 1 on create, +1 when the spec
//     changes (the metadata generation; spec.pool.generation is the driver's);
//   staging/src/k8s.io/apimachinery/pkg/api/resource/quantity.go: every Quantity is stored in
//     canonical form (tessera/kube/quantity.h); staging/src/k8s.io/apiserver/pkg/registry/rest/
//     create.go, update.go: uid, creationTimestamp, resourceVersion, managedFields are the
//     server's; an update with a resourceVersion other than the stored one is a 409 Conflict.
// Go's encoder never omits a struct field that is not a pointer: a ResourceClaimTemplate's
// `spec.metadata` comes back `{}` when it was not sent.
#pragma once

#include <cstdint>
#include <ctime>
#include <string>

#include <nlohmann/json.hpp>

#include "tessera/kube/quantity.h"
#include "tessera/status.h"

namespace tessera::testing::apiserver {

// What the server sets on an object it creates or replaces.
struct ServerFields {
  std::string uid;
  std::string resource_version;
  int64_t generation = 1;
  std::string timestamp;  // RFC 3339, UTC
  std::string manager;    // the request's fieldManager, else "unknown"
  std::string operation;  // "Update" for POST and PUT without server-side apply
};

namespace detail {

// The quantity at `value` in canonical form; kInvalidArgument names `field` and the value.
inline Status canonicalise(nlohmann::json& value, const std::string& field) {
  std::string text;
  if (value.is_string())
    text = value.get<std::string>();
  else if (value.is_number())
    text = value.dump();
  else
    return invalid_argument(field + ": " + value.dump() + ": not a quantity string");
  const Result<std::string> canonical = kube::canonical_quantity(text);
  if (!canonical.is_ok()) return invalid_argument(field + ": " + canonical.status().message());
  value = *canonical;
  return Status::ok();
}

// Every value of a map of quantities (capacity.requests, consumedCapacity).
inline Status canonicalise_map(nlohmann::json& map, const std::string& field) {
  if (!map.is_object()) return invalid_argument(field + ": not an object");
  for (auto& [name, quantity] : map.items())
    TESSERA_RETURN_IF_ERROR(canonicalise(quantity, field + "." + name));
  return Status::ok();
}

// One device request (exactly, or one of firstAvailable): defaults, canonical capacities.
inline Status default_request(nlohmann::json& request, const std::string& where) {
  if (!request.is_object()) return invalid_argument(where + ": not an object");
  if (!request.contains("allocationMode")) request["allocationMode"] = "ExactCount";
  if (request["allocationMode"] == "ExactCount" && !request.contains("count")) request["count"] = 1;
  if (request.contains("capacity") && request["capacity"].contains("requests"))
    TESSERA_RETURN_IF_ERROR(
        canonicalise_map(request["capacity"]["requests"], where + ".capacity.requests"));
  return Status::ok();
}

// A ResourceClaimSpec at `where` ("spec" of a claim, "spec.spec" of a template).
inline Status default_claim_spec(nlohmann::json& spec, const std::string& where) {
  if (!spec.is_object() || !spec.contains("devices") || !spec["devices"].contains("requests"))
    return Status::ok();
  nlohmann::json& requests = spec["devices"]["requests"];
  if (!requests.is_array()) return invalid_argument(where + ".devices.requests: not a list");
  for (size_t i = 0; i < requests.size(); ++i) {
    nlohmann::json& request = requests[i];
    const std::string at = where + ".devices.requests[" + std::to_string(i) + "]";
    if (request.contains("exactly"))
      TESSERA_RETURN_IF_ERROR(default_request(request["exactly"], at + ".exactly"));
    if (request.contains("firstAvailable") && request["firstAvailable"].is_array()) {
      nlohmann::json& alternatives = request["firstAvailable"];
      for (size_t j = 0; j < alternatives.size(); ++j)
        TESSERA_RETURN_IF_ERROR(
            default_request(alternatives[j], at + ".firstAvailable[" + std::to_string(j) + "]"));
    }
  }
  return Status::ok();
}

// status.allocation: consumedCapacity quantities canonical.
inline Status canonical_claim_status(nlohmann::json& status) {
  if (!status.is_object() || !status.contains("allocation")) return Status::ok();
  nlohmann::json& allocation = status["allocation"];
  if (!allocation.contains("devices") || !allocation["devices"].contains("results"))
    return Status::ok();
  nlohmann::json& results = allocation["devices"]["results"];
  for (size_t i = 0; i < results.size(); ++i)
    if (results[i].contains("consumedCapacity"))
      TESSERA_RETURN_IF_ERROR(canonicalise_map(
          results[i]["consumedCapacity"],
          "status.allocation.devices.results[" + std::to_string(i) + "].consumedCapacity"));
  return Status::ok();
}

// A ResourceSlice's devices: capacity values and request policies canonical, taints dated.
inline Status default_slice_spec(nlohmann::json& spec, const std::string& now) {
  if (!spec.is_object() || !spec.contains("devices") || !spec["devices"].is_array())
    return Status::ok();
  nlohmann::json& devices = spec["devices"];
  for (size_t i = 0; i < devices.size(); ++i) {
    nlohmann::json& device = devices[i];
    const std::string at = "spec.devices[" + std::to_string(i) + "]";
    if (device.contains("capacity")) {
      for (auto& [name, capacity] : device["capacity"].items()) {
        const std::string field = at + ".capacity." + name;
        if (!capacity.is_object()) return invalid_argument(field + ": not an object");
        if (capacity.contains("value"))
          TESSERA_RETURN_IF_ERROR(canonicalise(capacity["value"], field + ".value"));
        if (!capacity.contains("requestPolicy")) continue;
        nlohmann::json& policy = capacity["requestPolicy"];
        if (policy.contains("default"))
          TESSERA_RETURN_IF_ERROR(
              canonicalise(policy["default"], field + ".requestPolicy.default"));
        if (policy.contains("validRange"))
          for (const char* bound : {"min", "max", "step"})
            if (policy["validRange"].contains(bound))
              TESSERA_RETURN_IF_ERROR(canonicalise(policy["validRange"][bound],
                                                   field + ".requestPolicy.validRange." + bound));
        if (policy.contains("validValues"))
          for (size_t v = 0; v < policy["validValues"].size(); ++v)
            TESSERA_RETURN_IF_ERROR(
                canonicalise(policy["validValues"][v],
                             field + ".requestPolicy.validValues[" + std::to_string(v) + "]"));
      }
    }
    if (device.contains("taints") && device["taints"].is_array())
      for (nlohmann::json& taint : device["taints"])
        if (taint.is_object() && !taint.contains("timeAdded")) taint["timeAdded"] = now;
  }
  return Status::ok();
}

}  // namespace detail

inline std::string rfc3339(std::time_t when) {
  std::tm utc{};
  gmtime_r(&when, &utc);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

// `posted` as kube-apiserver stores it: defaults, canonical quantities, empty structs, the
// server's metadata (`fields`; creationTimestamp kept from `stored` on an update). `stored` is
// the object being replaced (null on create): a ResourceClaim keeps its stored status, and the
// generation moves only when the spec changed. A quantity that does not parse is kInvalidArgument
// (the API server's 422), naming the field and the value.
inline Result<nlohmann::json> write_back(const nlohmann::json& posted, const nlohmann::json* stored,
                                         ServerFields fields) {
  using nlohmann::json;
  if (!posted.is_object()) return invalid_argument("body: not an object");
  json object = posted;
  if (!object.contains("metadata") || !object["metadata"].is_object())
    return invalid_argument("metadata: not an object");
  const std::string kind = object.value("kind", "");
  if (fields.timestamp.empty()) fields.timestamp = rfc3339(std::time(nullptr));
  if (kind == "ResourceClaimTemplate") {
    json& spec = object["spec"];
    if (!spec.is_object()) return invalid_argument("spec: not an object");
    if (!spec.contains("metadata")) spec["metadata"] = json::object();
    if (spec.contains("spec"))
      TESSERA_RETURN_IF_ERROR(detail::default_claim_spec(spec["spec"], "spec.spec"));
  } else if (kind == "ResourceClaim") {
    if (object.contains("spec"))
      TESSERA_RETURN_IF_ERROR(detail::default_claim_spec(object["spec"], "spec"));
    // The main resource never writes the status: dropped on create, the stored one kept after.
    if (stored && stored->contains("status"))
      object["status"] = (*stored)["status"];
    else
      object.erase("status");
  } else if (kind == "ResourceSlice") {
    if (object.contains("spec"))
      TESSERA_RETURN_IF_ERROR(detail::default_slice_spec(object["spec"], fields.timestamp));
  }
  // Generation: 1 on create, +1 when the spec (as stored) changed.
  if (stored) {
    const int64_t previous = (*stored)["metadata"].value("generation", int64_t{1});
    fields.generation =
        previous + (object.value("spec", json()) != stored->value("spec", json()) ? 1 : 0);
  }
  json& metadata = object["metadata"];
  metadata["uid"] = stored ? (*stored)["metadata"].value("uid", fields.uid) : fields.uid;
  metadata["resourceVersion"] = fields.resource_version;
  metadata["generation"] = fields.generation;
  metadata["creationTimestamp"] =
      stored ? (*stored)["metadata"].value("creationTimestamp", fields.timestamp)
             : metadata.value("creationTimestamp", fields.timestamp);
  metadata["managedFields"] =
      json::array({{{"manager", fields.manager.empty() ? "unknown" : fields.manager},
                    {"operation", fields.operation.empty() ? "Update" : fields.operation},
                    {"apiVersion", object.value("apiVersion", "v1")},
                    {"time", fields.timestamp},
                    {"fieldsType", "FieldsV1"},
                    {"fieldsV1", {{"f:spec", json::object()}}}}});
  return object;
}

// A PUT of /status (the scheduler writing an allocation, kubelet reservedFor): the stored spec
// and metadata kept, the status taken from `posted` with canonical quantities, a new
// resourceVersion, the same generation.
inline Result<nlohmann::json> write_back_status(const nlohmann::json& posted,
                                                const nlohmann::json& stored,
                                                const std::string& resource_version) {
  nlohmann::json object = stored;
  nlohmann::json status = posted.value("status", nlohmann::json::object());
  TESSERA_RETURN_IF_ERROR(detail::canonical_claim_status(status));
  object["status"] = status;
  object["metadata"]["resourceVersion"] = resource_version;
  return object;
}

// The 409 of an update whose resourceVersion is not the stored one (an empty one is an
// unconditional update, which these resources allow). Ok when the update may go ahead.
inline Status check_resource_version(const nlohmann::json& posted, const nlohmann::json& stored,
                                     const std::string& name) {
  const std::string sent =
      posted.contains("metadata") ? posted["metadata"].value("resourceVersion", "") : std::string();
  if (sent.empty() || sent == stored["metadata"].value("resourceVersion", "")) return Status::ok();
  return Status(StatusCode::kAlreadyExists,
                "Operation cannot be fulfilled on \"" + name +
                    "\": the object has been modified; please apply your changes to the latest "
                    "version and try again");
}

}  // namespace tessera::testing::apiserver
