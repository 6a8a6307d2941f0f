// MIG in the ResourceSlices (devices/mig_slices.h): static instances, dynamic profiles x placements
// with their counter set, both slice shapes, and the limits kube-apiserver holds them to
// (mig-facts.md §4.2); split slices pass the fake API server's validation (1.35+ rules).
#include "devices/mig_slices.h"

#include <algorithm>
#include <map>
#include <set>

#include <gtest/gtest.h>

#include "../mig/fake_mig_driver.h"
#include "apiserver/apiserver_rules.h"
#include "devices/resource_slices.h"

namespace tessera::agent {
namespace {

using nlohmann::json;
using testing::h200;
using testing::h200_profiles;
namespace apiserver = ::tessera::agent::testing::apiserver;

constexpr uint64_t kMiB = 1ull << 20;

MigGpu mig_state(const GpuInfo& gpu, bool enabled, std::vector<MigInstance> instances = {}) {
  MigGpu state;
  state.uuid = gpu.uuid;
  state.minor = gpu.minor;
  state.capable = true;
  state.enabled = state.pending_enabled = enabled;
  state.memory_bytes = gpu.memory_bytes;
  state.profiles = h200_profiles();
  state.instances = std::move(instances);
  return state;
}

MigInstance instance(unsigned gi, unsigned profile_id, MigPlacement placement, std::string uuid,
                     uint64_t memory_mib, unsigned sms) {
  MigInstance made;
  made.gi_id = gi;
  made.profile_id = profile_id;
  made.placement = placement;
  if (!uuid.empty()) made.ci_id = 0;
  made.uuid = std::move(uuid);
  made.memory_bytes = memory_mib * kMiB;
  made.multiprocessors = sms;
  return made;
}

SliceIdentity identity() {
  return {"vgpu.tessera.dev", "node-a", "5d3c0e0e-3a7b-4c55-9a51-1f0d0e6b9a10"};
}

std::map<std::string, json> devices_by_name(const std::vector<json>& slices) {
  std::map<std::string, json> devices;
  for (const auto& slice : slices)
    for (const auto& device : slice["spec"].value("devices", json::array()))
      devices[device["name"].get<std::string>()] = device;
  return devices;
}

TEST(MigSlices, StaticPublishesTheExistingInstances) {
  const GpuInfo gpu = h200(0);
  MigPublication mig;
  mig.strategy = MigStrategy::kStatic;
  mig.gpus = {
      mig_state(gpu, true,
                {instance(1, 9, {0, 4}, "MIG-aaaaaaaa-0000-5000-8000-000000000001", 71168, 60),
                 instance(2, 19, {4, 1}, "", 16384, 16)})};  // no compute instance
  const auto slices = build_resource_slices({gpu}, identity(), 1, {}, &mig);
  const auto devices = devices_by_name(slices);
  ASSERT_EQ(devices.size(), 1u);  // no whole GPU, no unusable instance
  const json& device = devices.at("gpu-0-mig-gi1");
  EXPECT_EQ(device["attributes"]["type"]["string"], "mig");
  EXPECT_EQ(device["attributes"]["profile"]["string"], "3g.71gb");
  EXPECT_EQ(device["attributes"]["uuid"]["string"], "MIG-aaaaaaaa-0000-5000-8000-000000000001");
  EXPECT_EQ(device["attributes"]["parentUUID"]["string"], gpu.uuid);
  EXPECT_EQ(device["attributes"]["placementStart"]["int"], 0);
  EXPECT_EQ(device["attributes"]["placementSize"]["int"], 4);
  EXPECT_EQ(device["attributes"]["productName"]["string"], "NVIDIA H200");
  EXPECT_EQ(device["attributes"]["architecture"]["string"], "Hopper");
  EXPECT_EQ(device["attributes"]["driverVersion"]["version"], "580.159.4");
  EXPECT_EQ(device["attributes"]["resource.kubernetes.io/pciBusID"]["string"], "0000:3b:00.0");
  EXPECT_EQ(device["capacity"]["memory"]["value"], std::to_string(71168 * kMiB));
  EXPECT_EQ(device["capacity"]["memory"]["requestPolicy"]["validRange"]["max"],
            std::to_string(71168 * kMiB));
  EXPECT_EQ(device["capacity"]["cores"]["value"], "100");
  EXPECT_EQ(device["allowMultipleAllocations"], true);
  EXPECT_FALSE(device.contains("consumesCounters"));
  for (const auto& slice : slices) EXPECT_FALSE(slice["spec"].contains("sharedCounters"));
  // The share lifecycle's view of it.
  const auto nodes = node_devices({gpu}, &mig);
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0].uuid, "MIG-aaaaaaaa-0000-5000-8000-000000000001");
  EXPECT_EQ(nodes[0].memory_bytes, 71168 * kMiB);
  ASSERT_TRUE(nodes[0].mig);
  EXPECT_EQ(nodes[0].mig->kind, MigKind::kStatic);
  EXPECT_EQ(nodes[0].mig->gi_id, 1u);
  EXPECT_EQ(nodes[0].mig->ci_id, 0u);
  // Not in MIG mode: whole, with type gpu.
  mig.gpus = {mig_state(gpu, false)};
  const auto whole = devices_by_name(build_resource_slices({gpu}, identity(), 1, {}, &mig));
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_EQ(whole.at("gpu-0")["attributes"]["type"]["string"], "gpu");
}

TEST(MigSlices, DynamicPublishesEveryProfileAndPlacementWithItsCounters) {
  const GpuInfo gpu = h200(0);
  MigPublication mig;
  mig.strategy = MigStrategy::kDynamic;
  mig.shape = SliceShape::kSplit;
  mig.gpus = {mig_state(gpu, false)};
  const auto slices = build_resource_slices({gpu}, identity(), 1, {}, &mig);
  ASSERT_EQ(slices.size(), 2u);
  // The counter set alone in the first slice (1.35+: devices or counters, never both).
  const json& spec = slices[0]["spec"];
  EXPECT_FALSE(spec.contains("devices"));
  ASSERT_EQ(spec["sharedCounters"].size(), 1u);
  const json& set = spec["sharedCounters"][0];
  EXPECT_EQ(set["name"], "gpu-0-counters");
  ASSERT_EQ(set["counters"].size(), 10u);
  for (int slice = 0; slice < 8; ++slice)
    EXPECT_EQ(set["counters"]["memory-slice-" + std::to_string(slice)]["value"], "1");
  EXPECT_EQ(set["counters"]["multiprocessors"]["value"], "132");
  EXPECT_EQ(set["counters"]["memory"]["value"], std::to_string(143104 * kMiB));

  const auto devices = devices_by_name(slices);
  EXPECT_EQ(devices.size(), 1u + 7 + 7 + 4 + 3 + 2 + 1 + 1);
  for (const char* name :
       {"gpu-0", "gpu-0-mig-1g18gb-0", "gpu-0-mig-1g18gb-6", "gpu-0-mig-1g18gb-me-3",
        "gpu-0-mig-1g35gb-6", "gpu-0-mig-2g35gb-4", "gpu-0-mig-3g71gb-0", "gpu-0-mig-3g71gb-4",
        "gpu-0-mig-4g71gb-0", "gpu-0-mig-7g141gb-0"})
    EXPECT_TRUE(devices.count(name)) << name;
  EXPECT_FALSE(devices.count("gpu-0-mig-2g35gb-6"));  // not one of NVML's placements
  const json& three_g = devices.at("gpu-0-mig-3g71gb-4");
  EXPECT_FALSE(three_g["attributes"].contains("uuid"));
  EXPECT_EQ(three_g["attributes"]["placementStart"]["int"], 4);
  ASSERT_EQ(three_g["consumesCounters"].size(), 1u);
  const json& consumed = three_g["consumesCounters"][0];
  EXPECT_EQ(consumed["counterSet"], "gpu-0-counters");
  std::set<std::string> names;
  for (const auto& [name, value] : consumed["counters"].items()) names.insert(name);
  EXPECT_EQ(names, (std::set<std::string>{"memory-slice-4", "memory-slice-5", "memory-slice-6",
                                          "memory-slice-7", "multiprocessors", "memory"}));
  EXPECT_EQ(consumed["counters"]["multiprocessors"]["value"], "60");
  EXPECT_EQ(consumed["counters"]["memory"]["value"], std::to_string(71168 * kMiB));
  // The whole GPU takes every counter.
  const json& whole = devices.at("gpu-0");
  EXPECT_EQ(whole["attributes"]["type"]["string"], "gpu");
  EXPECT_EQ(whole["consumesCounters"][0]["counters"], set["counters"]);
  // The share lifecycle's view: a dynamic device with no UUID until prepare.
  const auto nodes = node_devices({gpu}, &mig);
  ASSERT_EQ(nodes.size(), devices.size());
  const auto it = std::find_if(nodes.begin(), nodes.end(),
                               [](const NodeDevice& d) { return d.name == "gpu-0-mig-3g71gb-4"; });
  ASSERT_NE(it, nodes.end());
  ASSERT_TRUE(it->mig);
  EXPECT_EQ(it->mig->kind, MigKind::kDynamic);
  EXPECT_EQ(it->mig->profile_id, 9u);
  EXPECT_EQ(it->mig->placement, (MigPlacement{4, 4}));
  EXPECT_EQ(it->uuid, "");
  EXPECT_EQ(it->memory_bytes, 71168 * kMiB);
}

TEST(MigSlices, AForeignInstanceKeepsItsSlicesOutAndTesseraInstancesDoNot) {
  const GpuInfo gpu = h200(0);
  MigPublication mig;
  mig.strategy = MigStrategy::kDynamic;
  mig.gpus = {mig_state(
      gpu, true,
      {instance(1, 9, {0, 4}, "MIG-f", 71168, 60), instance(2, 14, {4, 2}, "MIG-t", 33024, 32)})};
  mig.tessera_instances = {{gpu.uuid, 2}};
  const auto devices = devices_by_name(build_resource_slices({gpu}, identity(), 1, {}, &mig));
  EXPECT_FALSE(devices.count("gpu-0"));  // the whole GPU is not free
  for (const auto& [name, device] : devices) {
    const int start = device["attributes"]["placementStart"]["int"];
    EXPECT_GE(start, 4) << name;
  }
  EXPECT_TRUE(devices.count("gpu-0-mig-2g35gb-4"));  // Tessera's own: still published
  EXPECT_TRUE(devices.count("gpu-0-mig-3g71gb-4"));
}

// Nine MIG-capable GPUs: counter sets at most 8 a slice, devices at most 64 a slice (they consume
// counters), every slice valid by kube-apiserver's rules; one pool of consistent slices.
TEST(MigSlices, SplitShapeKeepsTheLimits) {
  std::vector<GpuInfo> gpus;
  MigPublication mig;
  mig.strategy = MigStrategy::kDynamic;
  mig.shape = SliceShape::kSplit;
  for (unsigned minor = 0; minor < 9; ++minor) {
    gpus.push_back(
        h200(minor, "GPU-0d0f6a2e-1c3b-4e5f-8a7b-9c0d1e2f3a" + std::to_string(10 + minor)));
    mig.gpus.push_back(mig_state(gpus.back(), false));
  }
  const auto slices = build_resource_slices(gpus, identity(), 3, {}, &mig);
  size_t sets = 0, devices = 0, counter_slices = 0;
  std::set<std::string> names;
  for (const auto& slice : slices) {
    EXPECT_EQ(slice["spec"]["pool"]["resourceSliceCount"], slices.size());
    const auto errors = apiserver::validate_resource_slice(slice);
    EXPECT_TRUE(errors.empty()) << slice["metadata"]["name"] << ": "
                                << apiserver::aggregate(errors);
    const json spec = slice["spec"];
    if (spec.contains("sharedCounters")) {
      ++counter_slices;
      EXPECT_LE(spec["sharedCounters"].size(), kMaxCounterSetsPerSlice);
      for (const auto& set : spec["sharedCounters"]) EXPECT_LE(set["counters"].size(), 32u);
      sets += spec["sharedCounters"].size();
    }
    const json list = spec.value("devices", json::array());
    EXPECT_LE(list.size(), 64u);
    for (const auto& device : list) {
      EXPECT_TRUE(names.insert(device["name"].get<std::string>()).second);
      EXPECT_LE(device["consumesCounters"].size(), 2u);
      for (const auto& entry : device["consumesCounters"]) EXPECT_LE(entry["counters"].size(), 32u);
    }
    devices += list.size();
  }
  EXPECT_EQ(sets, 9u);
  EXPECT_EQ(counter_slices, 2u);
  EXPECT_EQ(devices, 9u * 26);
}

// Kubernetes 1.34: each GPU's counter set in the slice with its devices, within 1.34's limits
// (32 shared counters and 1024 consumed counters a slice, 128 devices).
TEST(MigSlices, CombinedShapeKeepsEachGpuWithItsCounters) {
  std::vector<GpuInfo> gpus = {h200(0, "GPU-a"), h200(1, "GPU-b")};
  MigPublication mig;
  mig.strategy = MigStrategy::kDynamic;
  mig.shape = SliceShape::kCombined;
  mig.gpus = {mig_state(gpus[0], false)};  // GPU-b has no MIG view: published whole
  const auto slices = build_resource_slices(gpus, identity(), 1, {}, &mig);
  ASSERT_EQ(slices.size(), 2u);
  const json& first = slices[0]["spec"];
  ASSERT_EQ(first["sharedCounters"].size(), 1u);
  EXPECT_EQ(first["devices"].size(), 26u);
  size_t shared = 0, consumed = 0;
  for (const auto& set : first["sharedCounters"]) shared += set["counters"].size();
  for (const auto& device : first["devices"]) {
    EXPECT_EQ(device["consumesCounters"][0]["counterSet"], "gpu-0-counters");
    for (const auto& entry : device["consumesCounters"]) consumed += entry["counters"].size();
  }
  EXPECT_LE(shared, 32u);
  EXPECT_LE(consumed, 1024u);
  const json& second = slices[1]["spec"];
  EXPECT_FALSE(second.contains("sharedCounters"));
  ASSERT_EQ(second["devices"].size(), 1u);
  EXPECT_EQ(second["devices"][0]["name"], "gpu-1");
  EXPECT_FALSE(second["devices"][0].contains("consumesCounters"));
}

TEST(MigSlices, ShapeFromTheApiServersVersion) {
  EXPECT_EQ(*slice_shape_for_version("v1.34.2"), SliceShape::kCombined);
  EXPECT_EQ(*slice_shape_for_version("v1.35.0"), SliceShape::kSplit);
  EXPECT_EQ(*slice_shape_for_version("v1.36.1-gke.1200"), SliceShape::kSplit);
  EXPECT_EQ(*slice_shape_for_version("v1.37.0-alpha.1"), SliceShape::kSplit);
  const auto bad = slice_shape_for_version("garbage");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("\"garbage\""), std::string::npos);
  EXPECT_EQ(parse_mig_strategy("dynamic"), MigStrategy::kDynamic);
  EXPECT_FALSE(parse_mig_strategy("mixed"));
}

TEST(MigSlices, AParentsTaintReachesItsMigDevices) {
  const GpuInfo gpu = h200(0);
  MigPublication mig;
  mig.strategy = MigStrategy::kDynamic;
  mig.gpus = {mig_state(gpu, false)};
  DeviceHealthReport sick;
  sick.device_name = "gpu-0";
  sick.state = DeviceHealthState::kUnhealthy;
  sick.xid = 79;
  const auto devices = devices_by_name(build_resource_slices({gpu}, identity(), 1, {sick}, &mig));
  for (const auto& [name, device] : devices) EXPECT_TRUE(device.contains("taints")) << name;
}

}  // namespace
}  // namespace tessera::agent
