// make_claim (apiserver/claim_fixture.h): the allocation kube-scheduler's allocator
// (tests/support/allocator) writes for each share, over the slices the agent's own builder
// (devices/resource_slices.h) publishes, as kube-apiserver stores them.
#include <gtest/gtest.h>

#include "allocator/allocator.h"
#include "apiserver/claim_fixture.h"
#include "apiserver/write_back.h"
#include "devices/resource_slices.h"

namespace tessera::agent::testing {

namespace {

using nlohmann::json;

std::string fixture_uuid(unsigned minor) {
  return "GPU-f1x7" + std::string(4 - std::to_string(minor).size(), '0') + std::to_string(minor) +
         "-0000-4000-8000-000000000000";
}

// The node's slices: GPUs gpu-0 .. gpu-<highest named> of 150 GiB, stored as the API server does;
// without consumable capacity, allowMultipleAllocations dropped as a server without the gate does.
std::vector<json> fixture_slices(const std::vector<FixtureShare>& shares, const std::string& pool,
                                 bool consumable) {
  unsigned highest = 1;
  for (const FixtureShare& share : shares)
    if (share.device.rfind("gpu-", 0) == 0 &&
        share.device.find_first_not_of("0123456789", 4) == std::string::npos &&
        share.device.size() > 4)
      highest = std::max(highest, static_cast<unsigned>(std::stoul(share.device.substr(4))));
  std::vector<GpuInfo> gpus;
  for (unsigned minor = 0; minor <= highest; ++minor) {
    GpuInfo gpu;
    gpu.index = gpu.minor = minor;
    gpu.uuid = fixture_uuid(minor);
    gpu.product_name = "NVIDIA H200";
    gpu.architecture = "Hopper";
    gpu.brand = "Nvidia";
    gpu.cc_major = 9;
    gpu.driver_version = "580.159.04";
    gpu.pci_bus_id = "0000:3b:00.0";
    gpu.memory_bytes = 150ull << 30;
    gpus.push_back(gpu);
  }
  SliceIdentity identity;
  identity.node_name = pool;
  identity.node_uid = "3d7c0b8e-node-uid";
  std::vector<json> slices;
  for (json slice : build_resource_slices(gpus, identity, 1)) {
    if (!consumable)
      for (json& device : slice["spec"]["devices"]) device.erase("allowMultipleAllocations");
    ::tessera::testing::apiserver::ServerFields fields;
    fields.uid = "slice-uid";
    fields.resource_version = "3";
    Result<json> stored = ::tessera::testing::apiserver::write_back(slice, nullptr, fields);
    EXPECT_TRUE(stored.is_ok()) << stored.status().message();
    if (stored.is_ok()) slices.push_back(*stored);
  }
  return slices;
}

json request_for(const FixtureShare& share, bool consumable) {
  json exactly = {
      {"deviceClassName", "vgpu.tessera.dev"}, {"allocationMode", "ExactCount"}, {"count", 1}};
  json capacity = json::object();
  if (!share.memory.empty()) capacity["memory"] = share.memory;
  if (!share.cores.empty()) capacity["cores"] = share.cores;
  if (consumable && !capacity.empty()) exactly["capacity"] = {{"requests", capacity}};
  const unsigned minor =
      share.device.size() > 4 ? static_cast<unsigned>(std::stoul(share.device.substr(4))) : 0;
  exactly["selectors"] = {{{"cel",
                            {{"expression", "device.attributes[\"vgpu.tessera.dev\"].uuid == \"" +
                                                fixture_uuid(minor) + "\""}}}}};
  const size_t slash = share.request.find('/');
  if (slash == std::string::npos) return {{"name", share.request}, {"exactly", exactly}};
  exactly["name"] = share.request.substr(slash + 1);
  return {{"name", share.request.substr(0, slash)}, {"firstAvailable", {exactly}}};
}

}  // namespace

nlohmann::json make_claim(const std::string& name, const std::string& uid,
                          const std::vector<FixtureShare>& shares, const nlohmann::json& configs,
                          const std::string& pool) {
  const bool consumable = std::all_of(shares.begin(), shares.end(),
                                      [](const FixtureShare& s) { return !s.share_id.empty(); });
  ::tessera::testing::allocator::AllocatorInput input;
  input.slices = fixture_slices(shares, pool, consumable);
  input.device_classes = {
      {{"metadata", {{"name", "vgpu.tessera.dev"}}},
       {"spec",
        {{"selectors", {{{"cel", {{"expression", "device.driver == \"vgpu.tessera.dev\""}}}}}}}}}};
  input.node_name = pool;
  // The claim as written (requests, reservedFor), then each share's allocation by the allocator,
  // with the shares allocated before it counted (a claim's requests are allocated together).
  json claim = written_claim(name, uid, shares, configs, pool);
  json requests = json::array();
  json results = json::array();
  json node_selector;
  for (const FixtureShare& share : shares) {
    const json request = request_for(share, consumable);
    requests.push_back(request);
    json one = claim;
    one["spec"]["devices"]["requests"] = json::array({request});
    one.erase("status");
    input.share_id = [&share] { return share.share_id; };
    Result<json> allocation = ::tessera::testing::allocator::allocate(input, one);
    EXPECT_TRUE(allocation.is_ok()) << "claim " << name << ", share " << share.request << " on "
                                    << share.device << ": " << allocation.status().message();
    if (!allocation.is_ok()) continue;
    for (const json& result : (*allocation)["devices"]["results"]) results.push_back(result);
    node_selector = (*allocation)["nodeSelector"];
    one["status"]["allocation"] = *allocation;
    input.allocated_claims.push_back(one);
  }
  claim["spec"]["devices"]["requests"] = requests;
  claim["status"]["allocation"]["devices"]["results"] = results;
  if (!node_selector.is_null()) claim["status"]["allocation"]["nodeSelector"] = node_selector;
  // Canonical quantities, as the API server stores the scheduler's status update.
  Result<json> stored = ::tessera::testing::apiserver::write_back_status(
      claim, claim, claim["metadata"].value("resourceVersion", "4242"));
  EXPECT_TRUE(stored.is_ok()) << stored.status().message();
  return stored.is_ok() ? *stored : claim;
}

}  // namespace tessera::agent::testing
