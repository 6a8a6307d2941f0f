// kube-apiserver's write-back (write_back.h): the sources it is ported from are named there.
#include "apiserver/write_back.h"

#include <ctime>
#include <string>

#include "tessera/kube/quantity.h"

namespace tessera::testing::apiserver {

namespace {

// The quantity at `value` in canonical form; kInvalidArgument names `field` and the value.
Status canonicalise(nlohmann::json& value, const std::string& field) {
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
Status canonicalise_map(nlohmann::json& map, const std::string& field) {
  if (!map.is_object()) return invalid_argument(field + ": not an object");
  for (auto& [name, quantity] : map.items())
    TESSERA_RETURN_IF_ERROR(canonicalise(quantity, field + "." + name));
  return Status::ok();
}

// One device request (exactly, or one of firstAvailable): defaults, canonical capacities.
Status default_request(nlohmann::json& request, const std::string& where) {
  if (!request.is_object()) return invalid_argument(where + ": not an object");
  if (!request.contains("allocationMode")) request["allocationMode"] = "ExactCount";
  if (request["allocationMode"] == "ExactCount" && !request.contains("count")) request["count"] = 1;
  if (request.contains("capacity") && request["capacity"].contains("requests"))
    TESSERA_RETURN_IF_ERROR(
        canonicalise_map(request["capacity"]["requests"], where + ".capacity.requests"));
  return Status::ok();
}

// A ResourceClaimSpec at `where` ("spec" of a claim, "spec.spec" of a template).
Status default_claim_spec(nlohmann::json& spec, const std::string& where) {
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
Status canonical_claim_status(nlohmann::json& status) {
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

// Counter sets (sharedCounters) or counter consumptions (consumesCounters): every counter's
// value canonical.
Status canonicalise_counters(nlohmann::json& list, const std::string& field) {
  if (!list.is_array()) return invalid_argument(field + ": not a list");
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string at = field + "[" + std::to_string(i) + "].counters";
    if (!list[i].is_object() || !list[i].contains("counters")) continue;
    if (!list[i]["counters"].is_object()) return invalid_argument(at + ": not an object");
    for (auto& [name, counter] : list[i]["counters"].items()) {
      if (!counter.is_object()) return invalid_argument(at + "." + name + ": not an object");
      if (counter.contains("value"))
        TESSERA_RETURN_IF_ERROR(canonicalise(counter["value"], at + "." + name + ".value"));
    }
  }
  return Status::ok();
}

// A ResourceSlice's counter sets and devices: counter values, capacity values and request
// policies canonical, taints dated.
Status default_slice_spec(nlohmann::json& spec, const std::string& now) {
  if (spec.is_object() && spec.contains("sharedCounters") && !spec["sharedCounters"].is_null())
    TESSERA_RETURN_IF_ERROR(canonicalise_counters(spec["sharedCounters"], "spec.sharedCounters"));
  if (!spec.is_object() || !spec.contains("devices") || !spec["devices"].is_array())
    return Status::ok();
  nlohmann::json& devices = spec["devices"];
  for (size_t i = 0; i < devices.size(); ++i) {
    nlohmann::json& device = devices[i];
    const std::string at = "spec.devices[" + std::to_string(i) + "]";
    if (device.contains("consumesCounters") && !device["consumesCounters"].is_null())
      TESSERA_RETURN_IF_ERROR(
          canonicalise_counters(device["consumesCounters"], at + ".consumesCounters"));
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

// A Node as the API server stores it (pkg/registry/core/node/strategy.go, pkg/apis/core/v1/
// defaults.go): spec.configSource and status.config dropped on create, spec.configSource on an
// update unless the stored Node has one; the stored status kept by an update; allocatable
// defaulted to capacity; every ResourceList quantity canonical; Go's zero-valued structs present.
Status default_node(nlohmann::json& node, const nlohmann::json* stored) {
  using nlohmann::json;
  if (!node.contains("spec")) node["spec"] = json::object();
  if (!node["spec"].is_object()) return invalid_argument("spec: not an object");
  const bool stored_config_source = stored && stored->contains("spec") &&
                                    (*stored)["spec"].is_object() &&
                                    (*stored)["spec"].contains("configSource");
  if (!stored_config_source) node["spec"].erase("configSource");
  if (stored)
    node["status"] = stored->value("status", json::object());
  else if (node.contains("status") && node["status"].is_object())
    node["status"].erase("config");
  if (!node.contains("status")) node["status"] = json::object();
  json& status = node["status"];
  if (!status.is_object()) return invalid_argument("status: not an object");
  if (!status.contains("allocatable") && status.contains("capacity"))
    status["allocatable"] = status["capacity"];
  for (const char* list : {"capacity", "allocatable"})
    if (status.contains(list))
      TESSERA_RETURN_IF_ERROR(canonicalise_map(status[list], std::string("status.") + list));
  json& endpoints = status["daemonEndpoints"];
  if (endpoints.is_null()) endpoints = json::object();
  if (!endpoints.is_object()) return invalid_argument("status.daemonEndpoints: not an object");
  json& kubelet = endpoints["kubeletEndpoint"];
  if (kubelet.is_null()) kubelet = json::object();
  if (!kubelet.is_object())
    return invalid_argument("status.daemonEndpoints.kubeletEndpoint: not an object");
  if (!kubelet.contains("Port")) kubelet["Port"] = 0;
  json& info = status["nodeInfo"];
  if (info.is_null()) info = json::object();
  if (!info.is_object()) return invalid_argument("status.nodeInfo: not an object");
  for (const char* field :
       {"machineID", "systemUUID", "bootID", "kernelVersion", "osImage", "containerRuntimeVersion",
        "kubeletVersion", "kubeProxyVersion", "operatingSystem", "architecture"})
    if (!info.contains(field)) info[field] = "";
  return Status::ok();
}

}  // namespace

std::string rfc3339(std::time_t when) {
  std::tm utc{};
  gmtime_r(&when, &utc);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

Result<nlohmann::json> write_back(const nlohmann::json& posted, const nlohmann::json* stored,
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
      TESSERA_RETURN_IF_ERROR(default_claim_spec(spec["spec"], "spec.spec"));
  } else if (kind == "ResourceClaim") {
    if (object.contains("spec"))
      TESSERA_RETURN_IF_ERROR(default_claim_spec(object["spec"], "spec"));
    // The main resource never writes the status: dropped on create, the stored one kept after.
    if (stored && stored->contains("status"))
      object["status"] = (*stored)["status"];
    else
      object.erase("status");
  } else if (kind == "ResourceSlice") {
    if (object.contains("spec"))
      TESSERA_RETURN_IF_ERROR(default_slice_spec(object["spec"], fields.timestamp));
  } else if (kind == "Node") {
    TESSERA_RETURN_IF_ERROR(default_node(object, stored));
  } else if (kind == "Event") {
    // Go's encoder: the times (structs) are null when zero, source an object, the reporting
    // fields (no omitempty) "".
    for (const char* time : {"eventTime", "firstTimestamp", "lastTimestamp"})
      if (!object.contains(time)) object[time] = nullptr;
    if (!object.contains("source")) object["source"] = json::object();
    for (const char* field : {"reportingComponent", "reportingInstance"})
      if (!object.contains(field)) object[field] = "";
  }
  // Generation: 1 on create, +1 when the spec (as stored) changed; a webhook configuration has
  // no spec, its webhooks count (admissionregistration's strategies, PrepareForUpdate).
  const bool webhook_configuration =
      kind == "MutatingWebhookConfiguration" || kind == "ValidatingWebhookConfiguration";
  const char* spec_field = webhook_configuration ? "webhooks" : "spec";
  if (stored) {
    const int64_t previous = (*stored)["metadata"].value("generation", int64_t{1});
    fields.generation =
        previous + (object.value(spec_field, json()) != stored->value(spec_field, json()) ? 1 : 0);
  }
  json& metadata = object["metadata"];
  metadata["uid"] = stored ? (*stored)["metadata"].value("uid", fields.uid) : fields.uid;
  metadata["resourceVersion"] = fields.resource_version;
  if (kind == "Node" || kind == "Secret" || kind == "Event")
    metadata.erase("generation");  // the node, secret and event strategies keep none
  else
    metadata["generation"] = fields.generation;
  metadata["creationTimestamp"] =
      stored ? (*stored)["metadata"].value("creationTimestamp", fields.timestamp)
             : metadata.value("creationTimestamp", fields.timestamp);
  metadata["managedFields"] = json::array(
      {{{"manager", fields.manager.empty() ? "unknown" : fields.manager},
        {"operation", fields.operation.empty() ? "Update" : fields.operation},
        {"apiVersion", object.value("apiVersion", "v1")},
        {"time", fields.timestamp},
        {"fieldsType", "FieldsV1"},
        {"fieldsV1",
         {{std::string("f:") + (kind == "Secret" ? "data" : spec_field), json::object()}}}}});
  return object;
}

Result<nlohmann::json> write_back_status(const nlohmann::json& posted, const nlohmann::json& stored,
                                         const std::string& resource_version,
                                         const StatusWriter& writer) {
  using nlohmann::json;
  if (!stored.is_object() || !stored.contains("metadata") || !stored["metadata"].is_object())
    return invalid_argument("stored object: no metadata");
  json object = stored;
  json status = posted.is_object() ? posted.value("status", json::object()) : json::object();
  TESSERA_RETURN_IF_ERROR(canonical_claim_status(status));
  object["status"] = status;
  json& metadata = object["metadata"];
  metadata["resourceVersion"] = resource_version;
  if (writer.manager.empty()) return object;
  // The field manager keeps one Update entry per manager and subresource.
  json entries = json::array();
  if (metadata.contains("managedFields") && metadata["managedFields"].is_array())
    for (const json& entry : metadata["managedFields"])
      if (!(entry.is_object() && entry.value("manager", "") == writer.manager &&
            entry.value("operation", "") == "Update" && entry.value("subresource", "") == "status"))
        entries.push_back(entry);
  entries.push_back(
      {{"manager", writer.manager},
       {"operation", "Update"},
       {"apiVersion", object.value("apiVersion", "v1")},
       {"time", writer.timestamp.empty() ? rfc3339(std::time(nullptr)) : writer.timestamp},
       {"fieldsType", "FieldsV1"},
       {"fieldsV1", {{"f:status", json::object()}}},
       {"subresource", "status"}});
  metadata["managedFields"] = entries;
  return object;
}

Status check_resource_version(const nlohmann::json& posted, const nlohmann::json& stored,
                              const std::string& name, const std::string& resource) {
  const std::string sent =
      posted.contains("metadata") ? posted["metadata"].value("resourceVersion", "") : std::string();
  // store.go: no resourceVersion and AllowUnconditionalUpdate() (true for every resource here):
  // the update goes ahead on the latest version.
  if (sent.empty() || sent == stored["metadata"].value("resourceVersion", "")) return Status::ok();
  const std::string object = resource.empty() ? "\"" + name + "\"" : resource + " \"" + name + "\"";
  return Status(StatusCode::kAlreadyExists,
                "Operation cannot be fulfilled on " + object +
                    ": the object has been modified; please apply your changes to the latest "
                    "version and try again");
}

}  // namespace tessera::testing::apiserver
