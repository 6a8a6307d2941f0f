// ResourceClaims shaped as GET /apis/resource.k8s.io/v1/namespaces/<ns>/resourceclaims/<name>
// returns them (resource.k8s.io/v1, DRAConsumableCapacity on), for the node agent's tests.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tessera::agent::testing {

struct FixtureShare {
  std::string request = "gpu";
  std::string device = "gpu-0";
  std::string share_id;  // "" = no shareID field
  std::string memory;    // "" = no memory in consumedCapacity
  std::string cores;     // "" = no cores
};

inline nlohmann::json make_claim(const std::string& name, const std::string& uid,
                                 const std::vector<FixtureShare>& shares,
                                 const nlohmann::json& configs = nlohmann::json::array(),
                                 const std::string& pool = "node-a") {
  using nlohmann::json;
  json results = json::array();
  json requests = json::array();
  for (const auto& share : shares) {
    json result = {{"request", share.request},
                   {"driver", "vgpu.tessera.dev"},
                   {"pool", pool},
                   {"device", share.device}};
    json consumed = json::object();
    if (!share.memory.empty()) consumed["memory"] = share.memory;
    if (!share.cores.empty()) consumed["cores"] = share.cores;
    if (!consumed.empty()) result["consumedCapacity"] = consumed;
    if (!share.share_id.empty()) result["shareID"] = share.share_id;
    results.push_back(result);
    json capacity = consumed.empty() ? json::object() : json{{"requests", consumed}};
    requests.push_back({{"name", share.request},
                        {"exactly",
                         {{"deviceClassName", "vgpu.tessera.dev"},
                          {"allocationMode", "ExactCount"},
                          {"count", 1},
                          {"capacity", capacity}}}});
  }
  json devices = {{"results", results}};
  if (!configs.empty()) devices["config"] = configs;
  return {
      {"apiVersion", "resource.k8s.io/v1"},
      {"kind", "ResourceClaim"},
      {"metadata",
       {{"name", name},
        {"namespace", "tenants"},
        {"uid", uid},
        {"resourceVersion", "4242"},
        {"generation", 1},
        {"creationTimestamp", "2026-11-30T00:00:00Z"}}},
      {"spec", {{"devices", {{"requests", requests}}}}},
      {"status",
       {{"allocation",
         {{"devices", devices},
          {"nodeSelector",
           {{"nodeSelectorTerms",
             {{{"matchFields",
                {{{"key", "metadata.name"}, {"operator", "In"}, {"values", {pool}}}}}}}}}}}},
        {"reservedFor", {{{"resource", "pods"}, {"name", "pod-" + name}, {"uid", "pod-uid-1"}}}}}}};
}

// The one-share claim "train" (share s-a of gpu-0, 8Gi, 30 cores) with `reserved` as its
// status.reservedFor: the claim-pods tests read and re-read it.
inline nlohmann::json reserved_claim(const std::string& uid, const nlohmann::json& reserved) {
  nlohmann::json claim = make_claim("train", uid, {{"a", "gpu-0", "s-a", "8Gi", "30"}});
  claim["status"]["reservedFor"] = reserved;
  return claim;
}

// An entry of status.allocation.devices.config for this driver.
inline nlohmann::json opaque_config(const std::string& source, const nlohmann::json& parameters,
                                    const std::vector<std::string>& requests = {}) {
  nlohmann::json entry = {{"source", source},
                          {"opaque", {{"driver", "vgpu.tessera.dev"}, {"parameters", parameters}}}};
  if (!requests.empty()) entry["requests"] = requests;
  return entry;
}

}  // namespace tessera::agent::testing
