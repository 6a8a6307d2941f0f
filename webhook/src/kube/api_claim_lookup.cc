#include "kube/api_claim_lookup.h"

#include <utility>

#include "tessera/json_access.h"
#include "tessera/vgpu_config/driver_name.h"

namespace tessera::webhook {

namespace {

using nlohmann::json;

bool names_class(const json& request, const std::set<std::string>& classes) {
  const json* name = json_member(request, "deviceClassName");
  return name && name->is_string() && classes.count(name->get<std::string>()) > 0;
}

// Names come from the pod (not yet validated when webhooks run) and go into a URL path: only a
// DNS subdomain is looked up, never "../" or a query.
bool is_object_name(const std::string& name) {
  return !name.empty() && name.size() <= 253 &&
         name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-.") == std::string::npos &&
         name.find("..") == std::string::npos;
}

}  // namespace

bool asks_for_tessera(const json& object, const std::set<std::string>& device_classes) {
  const json* spec = json_member(object, "spec");
  if (spec && json_member(object, "kind") &&
      *json_member(object, "kind") == "ResourceClaimTemplate")
    spec = json_member(*spec, "spec");
  const json* devices = spec ? json_member(*spec, "devices") : nullptr;
  if (const json* requests = devices ? json_member(*devices, "requests") : nullptr;
      requests && requests->is_array()) {
    for (const json& request : *requests) {
      if (const json* exactly = json_member(request, "exactly");
          exactly && names_class(*exactly, device_classes))
        return true;
      if (const json* alternatives = json_member(request, "firstAvailable");
          alternatives && alternatives->is_array())
        for (const json& sub : *alternatives)
          if (names_class(sub, device_classes)) return true;
    }
  }
  // An allocated claim says which driver it got, whatever class it asked through.
  const json* status = json_member(object, "status");
  const json* allocation = status ? json_member(*status, "allocation") : nullptr;
  const json* allocated = allocation ? json_member(*allocation, "devices") : nullptr;
  if (const json* results = allocated ? json_member(*allocated, "results") : nullptr;
      results && results->is_array())
    for (const json& result : *results)
      if (const json* driver = json_member(result, "driver");
          driver && *driver == vgpu_config::kDriverName)
        return true;
  return false;
}

ApiClaimLookup::ApiClaimLookup(kube::KubeClient& api, std::set<std::string> device_classes,
                               std::chrono::seconds ttl, SteadyClock clock, size_t max_entries)
    : api_(api),
      device_classes_(std::move(device_classes)),
      ttl_(ttl),
      clock_(std::move(clock)),
      max_entries_(max_entries) {}

Result<bool> ApiClaimLookup::is_tessera(const std::string& namespace_name, ClaimSource source,
                                        const std::string& name) {
  if (!is_object_name(namespace_name) || !is_object_name(name))
    return invalid_argument("not an object name: " + nlohmann::json(name).dump());
  const Key key{namespace_name, source, name};
  {
    std::lock_guard lock(mutex_);
    const auto it = cache_.find(key);
    if (it != cache_.end() && clock_() < it->second.expires) return it->second.tessera;
    ++api_calls_;
  }
  const char* resource =
      source == ClaimSource::kResourceClaim ? "resourceclaims" : "resourceclaimtemplates";
  const std::string path =
      "/apis/resource.k8s.io/v1/namespaces/" + namespace_name + "/" + resource + "/" + name;
  const Result<kube::ApiResponse> response = api_.request("GET", path);
  if (!response.is_ok()) {
    const std::string& error = response.status().message();
    if (response.status().code() == StatusCode::kNotFound) return not_found(error);
    return unavailable(error);
  }
  const json object = json::parse(response->body, nullptr, /*allow_exceptions=*/false);
  if (!object.is_object()) return internal_error("GET " + path + ": the answer is not JSON");
  const bool tessera = asks_for_tessera(object, device_classes_);
  std::lock_guard lock(mutex_);
  if (cache_.size() >= max_entries_) cache_.clear();  // bounded; refilled by the next pods
  cache_[key] = {tessera, clock_() + ttl_};
  return tessera;
}

size_t ApiClaimLookup::api_calls() const {
  std::lock_guard lock(mutex_);
  return api_calls_;
}

}  // namespace tessera::webhook
