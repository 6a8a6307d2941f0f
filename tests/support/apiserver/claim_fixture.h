// ResourceClaims shaped as GET /apis/resource.k8s.io/v1/namespaces/<ns>/resourceclaims/<name>
// returns them (resource.k8s.io/v1, DRAConsumableCapacity on), for the node agent's tests.
//
// make_claim: the allocation is kube-scheduler's (tests/support/allocator), over the slices the
// agent's own builder publishes for a node of GPUs gpu-0.. (defined in
// tests/node-agent/scheduled_claims.cc, part of agent_tests). written_claim: the allocation
// written out as given, for what the scheduler never writes (the parser's refusals: a bad
// quantity, an unknown device, a shareID that is not a folder name) and for programs outside
// agent_tests.
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

inline nlohmann::json written_claim(const std::string& name, const std::string& uid,
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

// The claim with each share allocated by the scheduler's rules on node `pool` (its GPUs gpu-0..,
// 150 GiB and 100 cores each, as the agent publishes them): share i is request `request` (a
// "<request>/<subrequest>" is a firstAvailable subrequest) asking for its memory and cores (none
// given: none asked), pinned to `device` by a CEL selector on the device's uuid, given `share_id`
// as its shareID (the scheduler's is a random UUID; "" = a server with DRAConsumableCapacity off,
// which stores no allowMultipleAllocations and no capacity requests). `configs` are
// status.allocation.devices.config entries, copied as given. A share the scheduler would refuse
// fails the test that asked for it (written_claim is for those).
nlohmann::json make_claim(const std::string& name, const std::string& uid,
                          const std::vector<FixtureShare>& shares,
                          const nlohmann::json& configs = nlohmann::json::array(),
                          const std::string& pool = "node-a");

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
