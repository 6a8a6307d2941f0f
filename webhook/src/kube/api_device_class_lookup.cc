#include "kube/api_device_class_lookup.h"

#include <utility>

#include "tessera/json_access.h"

namespace tessera::webhook {

namespace {

using nlohmann::json;

// The name comes from the claim and goes into a URL path: only a DNS subdomain is looked up.
bool is_class_name(const std::string& name) {
  return !name.empty() && name.size() <= 253 &&
         name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-.") == std::string::npos &&
         name.find("..") == std::string::npos;
}

}  // namespace

ApiDeviceClassLookup::ApiDeviceClassLookup(kube::KubeClient& api, std::chrono::seconds ttl,
                                           SteadyClock clock, size_t max_entries)
    : api_(api), ttl_(ttl), clock_(std::move(clock)), max_entries_(max_entries) {}

Result<json> ApiDeviceClassLookup::class_configs(const std::string& name) {
  // kube-apiserver refuses such a claim itself; no such class can exist.
  if (!is_class_name(name)) return not_found("not a DeviceClass name: " + json(name).dump());
  {
    std::lock_guard lock(mutex_);
    const auto it = cache_.find(name);
    if (it != cache_.end() && clock_() < it->second.expires) return it->second.configs;
    ++api_calls_;
  }
  const std::string path = "/apis/resource.k8s.io/v1/deviceclasses/" + name;
  const Result<kube::ApiResponse> response = api_.request("GET", path);
  if (!response.is_ok()) {
    if (response.status().code() == StatusCode::kNotFound)
      return not_found(response.status().message());
    return unavailable(response.status().message());
  }
  const json object = json::parse(response->body, nullptr, /*allow_exceptions=*/false);
  if (!object.is_object()) return internal_error("GET " + path + ": the answer is not JSON");
  const json* spec = json_member(object, "spec");
  const json* config = spec ? json_member(*spec, "config") : nullptr;
  json configs = config && !config->is_null() ? *config : json::array();
  std::lock_guard lock(mutex_);
  if (cache_.size() >= max_entries_) cache_.clear();  // bounded; refilled by the next claims
  cache_[name] = {configs, clock_() + ttl_};
  return configs;
}

size_t ApiDeviceClassLookup::api_calls() const {
  std::lock_guard lock(mutex_);
  return api_calls_;
}

}  // namespace tessera::webhook
