// Every claim a user of samples/k8s or the webhook's shorthand ends up with, allocated by
// kube-scheduler's structured allocator (tests/support/allocator, ported from kubernetes/kubernetes
// staging/src/k8s.io/dynamic-resource-allocation/structured/internal/incubating/
// allocator_incubating.go at 03ab440c41a8098613d2149f10b367c7f7ce32c8 and consumable_capacity.go at
// 0c8a1b073dc32ebfc32004fd7d77c8d7ba03df8c) against the slices the agent publishes for each GPU
// size, as kube-apiserver stores them (tests/support/apiserver/write_back.h); and the agent's share
// spec parser takes every allocation.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "allocator/allocator.h"
#include "apiserver/write_back.h"
#include "core/share_request.h"
#include "devices/resource_slices.h"
#include "model/share_spec.h"
#include "tessera/qos_class.h"
#include "tessera/quantity.h"

namespace tessera::agent {
namespace {

using nlohmann::json;
namespace allocator = ::tessera::testing::allocator;
namespace apiserver = ::tessera::testing::apiserver;

#ifndef SAMPLES_K8S_DIR
#error SAMPLES_K8S_DIR names samples/k8s
#endif

// The GPU sizes the agent is tested with (NVML totals, MiB; k8s-dra-facts.md).
struct GpuSize {
  const char* product;
  uint64_t mib;
};
constexpr GpuSize kSizes[] = {{"NVIDIA H200", 143771},
                              {"NVIDIA H100 80GB HBM3", 81559},
                              {"NVIDIA A100-SXM4-80GB", 81920},
                              {"NVIDIA A100-SXM4-40GB", 40960},
                              {"NVIDIA L40S", 46068},
                              {"NVIDIA L4", 23034},
                              {"Tesla T4", 15360}};

GpuInfo gpu_of(const GpuSize& size) {
  GpuInfo gpu;
  gpu.uuid = "GPU-0d0f6a2e-1c3b-4e5f-8a7b-9c0d1e2f3a4b";
  gpu.product_name = size.product;
  gpu.architecture = "Hopper";
  gpu.brand = "Nvidia";
  gpu.cc_major = 9;
  gpu.driver_version = "580.159.04";
  gpu.pci_bus_id = "0000:3b:00.0";
  gpu.memory_bytes = size.mib << 20;
  return gpu;
}

json json_of(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      json object = json::object();
      for (const auto& entry : node) object[entry.first.as<std::string>()] = json_of(entry.second);
      return object;
    }
    case YAML::NodeType::Sequence: {
      json list = json::array();
      for (const auto& entry : node) list.push_back(json_of(entry));
      return list;
    }
    case YAML::NodeType::Scalar: {
      // Quoted scalars stay strings; bare ints and bools as YAML reads them.
      const std::string text = node.Scalar();
      if (node.Tag() == "!") return text;
      if (text == "true" || text == "false") return text == "true";
      if (!text.empty() && text.find_first_not_of("0123456789") == std::string::npos)
        return std::stoll(text);
      return text;
    }
    default:
      return nullptr;
  }
}

// The chart's DeviceClasses (charts/tessera/templates/deviceclasses.yaml): the default class
// (whole GPUs only), the MPS preset (the driver's devices) and the MIG class (MIG instances only).
std::vector<json> device_classes() {
  const json selector = {{{"cel", {{"expression", "device.driver == \"vgpu.tessera.dev\""}}}}};
  const json gpu_selector = {{{"cel",
                               {{"expression",
                                 "device.driver == \"vgpu.tessera.dev\" && "
                                 "device.attributes[\"vgpu.tessera.dev\"].type == \"gpu\""}}}}};
  const json mig_selector = {{{"cel",
                               {{"expression",
                                 "device.driver == \"vgpu.tessera.dev\" && "
                                 "device.attributes[\"vgpu.tessera.dev\"].type == \"mig\""}}}}};
  return {
      {{"metadata", {{"name", "vgpu.tessera.dev"}}}, {"spec", {{"selectors", gpu_selector}}}},
      {{"metadata", {{"name", "mig.vgpu.tessera.dev"}}}, {"spec", {{"selectors", mig_selector}}}},
      {{"metadata", {{"name", "mps.vgpu.tessera.dev"}}},
       {"spec",
        {{"selectors", selector},
         {"config",
          {{{"opaque",
             {{"driver", "vgpu.tessera.dev"},
              {"parameters",
               {{"apiVersion", "vgpu.tessera.dev/v1alpha1"},
                {"kind", "VgpuConfig"},
                {"sharing", {{"strategy", "MPS"}}}}}}}}}}}}}};
}

// A claim made from a spec as kube-apiserver stores it (defaults, canonical quantities).
json claim_from(const std::string& name, const json& spec) {
  json claim = {{"apiVersion", "resource.k8s.io/v1"},
                {"kind", "ResourceClaim"},
                {"metadata", {{"name", name}, {"namespace", "tessera-samples"}}},
                {"spec", spec}};
  apiserver::ServerFields fields;
  fields.uid = "0f6b3f0e-7c59-4d0e-9b4e-2f7a5d1c9e01";
  fields.resource_version = "1";
  Result<json> stored = apiserver::write_back(claim, nullptr, fields);
  EXPECT_TRUE(stored.is_ok()) << name << ": " << stored.status().message();
  return stored.is_ok() ? *stored : claim;
}

struct Sample {
  std::string name;  // file (and object) it came from
  json claim;
};

// Which samples: those that ask for a share of a GPU, the two-tenant sample's third tenant, or
// those of the MIG class (samples/k8s/mig/, which need a node with MIG instances).
enum class SampleSet { kGpu, kThird, kMig };

SampleSet set_of(const std::filesystem::path& file) {
  const std::filesystem::path relative = std::filesystem::relative(file, SAMPLES_K8S_DIR);
  if (*relative.begin() == "mig") return SampleSet::kMig;
  if (file.parent_path().filename() == "third") return SampleSet::kThird;
  return SampleSet::kGpu;
}

// Every claim the samples of `set` make: their ResourceClaims and ResourceClaimTemplates, the
// claim the scheduler makes for the extended resource, and the templates the webhook makes for the
// shorthand and HAMi-style pods.
std::vector<Sample> sample_claims(SampleSet set) {
  std::vector<Sample> samples;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(SAMPLES_K8S_DIR)) {
    if (entry.path().extension() != ".yaml") continue;
    if (set_of(entry.path()) != set) continue;
    const std::string file = std::filesystem::relative(entry.path(), SAMPLES_K8S_DIR).string();
    for (const YAML::Node& document : YAML::LoadAllFromFile(entry.path().string())) {
      const json object = json_of(document);
      const std::string kind = object.value("kind", "");
      const std::string name = file + ":" + object["metadata"].value("name", "");
      if (kind == "ResourceClaim") samples.push_back({name, claim_from(name, object["spec"])});
      if (kind == "ResourceClaimTemplate")
        samples.push_back({name, claim_from(name, object["spec"]["spec"])});
      if (kind != "Pod") continue;
      for (const json& container : object["spec"]["containers"]) {
        const json limits =
            container.value("resources", json::object()).value("limits", json::object());
        if (limits.contains("vgpu.tessera.dev/gpu")) {
          // DRAExtendedResource: the scheduler's claim names the class and the count only.
          const json request = {
              {"name", "container-0-request-0"},
              {"exactly",
               {{"deviceClassName", "vgpu.tessera.dev"},
                {"count", std::stoll(limits["vgpu.tessera.dev/gpu"].get<std::string>())}}}};
          samples.push_back({name + " (extended resource)",
                             claim_from(name, {{"devices", {{"requests", {request}}}}})});
        }
        const Result<std::optional<webhook::Shorthand>> shorthand =
            webhook::read_shorthand(container, /*hami_names=*/true);
        EXPECT_TRUE(shorthand.is_ok()) << name << ": " << shorthand.status().message();
        if (!shorthand.is_ok() || !shorthand->has_value()) continue;
        const json claim_template = (*shorthand)->request.claim_template("tessera-samples");
        samples.push_back(
            {name + " (webhook: " + claim_template["metadata"].value("name", "") + ")",
             claim_from(name, claim_template["spec"]["spec"])});
      }
    }
  }
  return samples;
}

// The slices of one GPU as the agent builds them and the API server stores them.
allocator::AllocatorInput node_with(const GpuInfo& gpu) {
  allocator::AllocatorInput input;
  SliceIdentity identity;
  identity.node_name = "node-a";
  identity.node_uid = "3d7c0b8e-node-uid";
  for (const json& slice : build_resource_slices({gpu}, identity, 1)) {
    apiserver::ServerFields fields;
    fields.uid = "slice-uid";
    fields.resource_version = "2";
    Result<json> stored = apiserver::write_back(slice, nullptr, fields);
    EXPECT_TRUE(stored.is_ok()) << stored.status().message();
    if (stored.is_ok()) input.slices.push_back(*stored);
  }
  input.device_classes = device_classes();
  input.node_name = "node-a";
  return input;
}

// The agent takes the allocation: one share per result, with the consumed capacity.
void expect_agent_accepts(const json& claim, const GpuInfo& gpu, const std::string& what) {
  ShareSpecInput input;
  input.claim_json = claim.dump();
  input.expected_uid = claim["metadata"]["uid"];
  input.pool = "node-a";
  input.devices = node_devices({gpu});
  Result<std::vector<ShareSpec>> specs = compute_share_specs(input);
  ASSERT_TRUE(specs.is_ok()) << what << ": " << specs.status().message() << "\n" << claim.dump();
  const json& results = claim["status"]["allocation"]["devices"]["results"];
  ASSERT_EQ(specs->size(), results.size()) << what;
  for (size_t i = 0; i < results.size(); ++i) {
    const json& consumed = results[i]["consumedCapacity"];
    EXPECT_EQ((*specs)[i].share_id, results[i]["shareID"]) << what;
    EXPECT_EQ((*specs)[i].memory_bytes, parse_byte_quantity(consumed["memory"].get<std::string>()))
        << what;
    EXPECT_EQ(std::to_string((*specs)[i].cores.value_or(0)), consumed["cores"].get<std::string>())
        << what;
  }
}

// Each sample alone on one GPU of each size: allocated (every sample asks for at most 8 GiB, which
// every size has), consumedCapacity as the request policy rounds it, a shareID; the agent takes it.
// Then the webhook's templates for amounts beyond the smaller GPUs: refused where they do not fit.
TEST(SchedulerAllocation, EverySampleOnEveryGpuSize) {
  const std::vector<Sample> samples = sample_claims(SampleSet::kGpu);
  ASSERT_GE(samples.size(), 7u);  // one-share, mps, two tenants, extended, shorthand, hami
  for (const GpuSize& size : kSizes) {
    const GpuInfo gpu = gpu_of(size);
    for (const Sample& sample : samples) {
      const std::string what = sample.name + " on " + size.product;
      allocator::AllocatorInput input = node_with(gpu);
      Result<json> claim = allocator::allocated(input, sample.claim);
      ASSERT_TRUE(claim.is_ok()) << what << ": " << claim.status().message();
      const json& result = (*claim)["status"]["allocation"]["devices"]["results"][0];
      EXPECT_EQ(result["device"], "gpu-0") << what;
      EXPECT_EQ(result["shareID"].get<std::string>().size(), 36u) << what;
      expect_agent_accepts(*claim, gpu, what);
    }
    // 20 GiB per share: beyond the L4 and the T4. Two shares of one request need two devices
    // (allocateOne goes on after the device it took), so on a node of one GPU that is refused
    // whatever its size.
    for (const auto& [count, gib] : {std::pair{1u, 20ull}, std::pair{2u, 40ull}}) {
      webhook::ShareRequest request;
      request.count = count;
      request.memory_bytes = gib << 30;
      request.cores = 10;
      const json made = request.claim_template("tessera-samples");
      const std::string what = made["metadata"].value("name", "") + " on " + size.product;
      allocator::AllocatorInput input = node_with(gpu);
      Result<json> claim = allocator::allocated(input, claim_from(what, made["spec"]["spec"]));
      const bool fits = count == 1 && (gib << 30) <= published_memory_bytes(gpu);
      ASSERT_EQ(claim.is_ok(), fits) << what << ": " << claim.status().message();
      if (fits) {
        expect_agent_accepts(*claim, gpu, what);
        continue;
      }
      EXPECT_EQ(claim.status().code(), StatusCode::kFailedPrecondition) << what;
      EXPECT_EQ(claim.status().message(),
                "cannot allocate all claims: request \"gpu\" found no device that fits")
          << what;
    }
  }
}

// The two-tenant sample: tenant-a and tenant-b share one GPU of every size (60 + 40 cores), the
// third tenant is refused (no cores left), each allocation a distinct share.
TEST(SchedulerAllocation, TwoTenantsShareOneGpuAndAThirdIsRefused) {
  std::vector<Sample> tenants;
  for (const Sample& sample : sample_claims(SampleSet::kGpu))
    if (sample.name.find("two-tenants/") == 0) tenants.push_back(sample);
  const std::vector<Sample> third = sample_claims(SampleSet::kThird);
  ASSERT_EQ(tenants.size(), 2u);
  ASSERT_EQ(third.size(), 1u);
  for (const GpuSize& size : kSizes) {
    const GpuInfo gpu = gpu_of(size);
    allocator::AllocatorInput input = node_with(gpu);
    for (const Sample& tenant : tenants) {
      Result<json> claim = allocator::allocated(input, tenant.claim);
      ASSERT_TRUE(claim.is_ok()) << tenant.name << " on " << size.product;
      input.allocated_claims.push_back(*claim);
    }
    EXPECT_NE(
        input.allocated_claims[0]["status"]["allocation"]["devices"]["results"][0]["shareID"],
        input.allocated_claims[1]["status"]["allocation"]["devices"]["results"][0]["shareID"]);
    Result<json> refused = allocator::allocated(input, third[0].claim);
    ASSERT_FALSE(refused.is_ok()) << size.product;
    EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  }
}

// The most common HAMi pod, `nvidia.com/gpu: 1` with `nvidia.com/gpumem: 4000` and no gpucores:
// two of them pack on one GPU of every size that holds 8000 MiB, as under HAMi (defaultCores: 0).
// Each share is best-effort (no cores requested) and held to its 4000 MiB. Before cores defaulted
// to 0, each took all 100 cores and the second pod found no device.
TEST(SchedulerAllocation, TwoHamiPodsWithoutGpucoresPackOnOneGpu) {
  const json container = {
      {"name", "train"},
      {"resources", {{"limits", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "4000"}}}}}};
  const Result<std::optional<webhook::Shorthand>> shorthand =
      webhook::read_shorthand(container, /*hami_names=*/true);
  ASSERT_TRUE(shorthand.is_ok() && shorthand->has_value()) << shorthand.status().message();
  const json made = (*shorthand)->request.claim_template("tessera-samples");
  for (const GpuSize& size : kSizes) {
    const GpuInfo gpu = gpu_of(size);
    allocator::AllocatorInput input = node_with(gpu);
    for (int pod = 0; pod < 2; ++pod) {
      const std::string what = "HAMi pod " + std::to_string(pod) + " on " + size.product;
      Result<json> claim = allocator::allocated(input, claim_from(what, made["spec"]["spec"]));
      ASSERT_TRUE(claim.is_ok()) << what << ": " << claim.status().message();
      const json& result = (*claim)["status"]["allocation"]["devices"]["results"][0];
      EXPECT_EQ(result["device"], "gpu-0") << what;
      EXPECT_EQ(result["consumedCapacity"]["cores"], "0") << what;
      EXPECT_EQ(result["consumedCapacity"]["memory"], "4000Mi") << what;
      expect_agent_accepts(*claim, gpu, what);
      ShareSpecInput spec_input;
      spec_input.claim_json = claim->dump();
      spec_input.expected_uid = (*claim)["metadata"]["uid"];
      spec_input.pool = "node-a";
      spec_input.devices = node_devices({gpu});
      Result<std::vector<ShareSpec>> specs = compute_share_specs(spec_input);
      ASSERT_TRUE(specs.is_ok()) << what;
      const vgpu_config::ShareLimits limits = specs->front().limits();
      EXPECT_EQ(limits.memory_limit, 4000ull << 20) << what << ": held to 4000 MiB";
      EXPECT_EQ(limits.cores_request, 0u) << what;
      EXPECT_EQ(device_qos_class(limits.memory_request, limits.memory_limit, limits.cores_request,
                                 limits.cores_limit),
                QosClass::kBestEffort)
          << what;
      input.allocated_claims.push_back(*claim);
    }
  }
}

// ---- MIG: an H200 node with MIG instances (static MIG), as the agent publishes it.

// One MIG instance of a fixture GPU (mig-facts.md §1.3, H200 141GB: 3g.71gb = 71168 MiB,
// 2g.35gb = 33024 MiB, 1g.18gb = 16384 MiB; placements in memory slices).
struct MigInstanceFixture {
  unsigned gi;
  const char* profile;
  uint64_t mib;
  int64_t placement_start, placement_size;
};

// The device the agent publishes for a MIG instance: a GPU device of the instance's memory (the
// same capacities and request policies: cores 100 = all of the instance's SMs), named
// gpu-<minor>-mig-gi<GI>, with type "mig", its profile, parent and placement.
json mig_device(const GpuInfo& parent, const MigInstanceFixture& instance) {
  GpuInfo as_gpu = parent;
  as_gpu.memory_bytes = instance.mib << 20;
  as_gpu.uuid = "MIG-5e1a0c3d-" + std::to_string(parent.minor) + std::to_string(instance.gi) +
                "00-4a0b-8c1d-2e3f4a5b6c7d";
  json device = build_device(as_gpu);
  device["name"] = "gpu-" + std::to_string(parent.minor) + "-mig-gi" + std::to_string(instance.gi);
  json& attributes = device["attributes"];
  attributes["type"] = {{"string", "mig"}};
  attributes["profile"] = {{"string", instance.profile}};
  attributes["parentUUID"] = {{"string", parent.uuid}};
  attributes["placementStart"] = {{"int", instance.placement_start}};
  attributes["placementSize"] = {{"int", instance.placement_size}};
  return device;
}

// gpu-0: all-3g.71gb (GI 1 at 4, GI 2 at 0); gpu-1: 3g.71gb at 4, 2g.35gb at 0, two 1g.18gb at 2
// and 3; gpu-2: MIG off, the whole GPU (type "gpu"). A GPU in MIG mode has no whole-GPU device.
allocator::AllocatorInput mig_node() {
  const std::vector<std::vector<MigInstanceFixture>> layouts = {
      {{1, "3g.71gb", 71168, 4, 4}, {2, "3g.71gb", 71168, 0, 4}},
      {{1, "3g.71gb", 71168, 4, 4},
       {5, "2g.35gb", 33024, 0, 2},
       {9, "1g.18gb", 16384, 2, 1},
       {10, "1g.18gb", 16384, 3, 1}},
      {}};
  std::vector<GpuInfo> gpus;
  json devices = json::array();
  for (unsigned minor = 0; minor < layouts.size(); ++minor) {
    GpuInfo gpu = gpu_of(kSizes[0]);
    gpu.index = gpu.minor = minor;
    gpu.uuid = "GPU-0d0f6a2e-1c3b-4e5f-8a7b-9c0d1e2f3a4" + std::to_string(minor);
    gpus.push_back(gpu);
    for (const MigInstanceFixture& instance : layouts[minor])
      devices.push_back(mig_device(gpu, instance));
    if (layouts[minor].empty()) {
      json whole = build_device(gpu);
      whole["attributes"]["type"] = {{"string", "gpu"}};
      devices.push_back(whole);
    }
  }
  SliceIdentity identity;
  identity.node_name = "node-a";
  identity.node_uid = "3d7c0b8e-node-uid";
  std::vector<json> slices = build_resource_slices(gpus, identity, 1);
  EXPECT_EQ(slices.size(), 1u);
  slices[0]["spec"]["devices"] = devices;
  allocator::AllocatorInput input;
  for (const json& slice : slices) {
    apiserver::ServerFields fields;
    fields.uid = "slice-uid";
    fields.resource_version = "2";
    Result<json> stored = apiserver::write_back(slice, nullptr, fields);
    EXPECT_TRUE(stored.is_ok()) << stored.status().message();
    if (stored.is_ok()) input.slices.push_back(*stored);
  }
  input.device_classes = device_classes();
  input.node_name = "node-a";
  return input;
}

const Sample& mig_sample(const std::vector<Sample>& samples, const std::string& name) {
  for (const Sample& sample : samples)
    if (sample.name == "mig/claim-templates.yaml:" + name) return sample;
  ADD_FAILURE() << "samples/k8s/mig has no template " << name;
  return samples.front();
}

// "A whole MIG instance of at least 40 GiB": each claim takes a 3g.71gb instance whole (all of
// its memory, all of its cores), never the whole GPU gpu-2 nor the 2g.35gb; a fourth is refused.
TEST(SchedulerAllocation, MigWholeInstanceSampleTakesEachLargeInstanceOnce) {
  const std::vector<Sample> samples = sample_claims(SampleSet::kMig);
  ASSERT_EQ(samples.size(), 2u);  // the two templates; the pods name them
  const Sample& whole = mig_sample(samples, "mig-instance-40g");
  allocator::AllocatorInput input = mig_node();
  for (const char* expected : {"gpu-0-mig-gi1", "gpu-0-mig-gi2", "gpu-1-mig-gi1"}) {
    Result<json> claim = allocator::allocated(input, whole.claim);
    ASSERT_TRUE(claim.is_ok()) << expected << ": " << claim.status().message();
    const json& result = (*claim)["status"]["allocation"]["devices"]["results"][0];
    EXPECT_EQ(result["device"], expected);
    // All of the instance's memory (the request policy's default, in the slice's spelling).
    EXPECT_EQ(parse_byte_quantity(result["consumedCapacity"]["memory"].get<std::string>()),
              71168ull << 20)
        << expected;
    EXPECT_EQ(result["consumedCapacity"]["cores"], "100") << expected;
    input.allocated_claims.push_back(*claim);
  }
  Result<json> refused = allocator::allocated(input, whole.claim);
  ASSERT_FALSE(refused.is_ok()) << "no instance of 40 GiB or more is left: " << refused->dump();
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused.status().message(),
            "cannot allocate all claims: request \"mig\" found no device that fits");
}

// "A share inside a 3g instance": shares pack on the first 3g instance (8 GiB and 30 % of its SMs
// each); a whole-instance claim then takes the other 3g instance, not the shared one; the smaller
// instances are never chosen.
TEST(SchedulerAllocation, MigShareSamplePacksInsideA3gInstance) {
  const std::vector<Sample> samples = sample_claims(SampleSet::kMig);
  const Sample& share = mig_sample(samples, "mig-3g-share");
  const Sample& whole = mig_sample(samples, "mig-instance-40g");
  allocator::AllocatorInput input = mig_node();
  std::vector<std::string> share_ids;
  for (int i = 0; i < 3; ++i) {
    Result<json> claim = allocator::allocated(input, share.claim);
    ASSERT_TRUE(claim.is_ok()) << "share " << i << ": " << claim.status().message();
    const json& result = (*claim)["status"]["allocation"]["devices"]["results"][0];
    EXPECT_EQ(result["device"], "gpu-0-mig-gi1") << "share " << i;
    EXPECT_EQ(result["consumedCapacity"]["memory"], "8Gi");
    EXPECT_EQ(result["consumedCapacity"]["cores"], "30");
    share_ids.push_back(result["shareID"]);
    input.allocated_claims.push_back(*claim);
  }
  EXPECT_NE(share_ids[0], share_ids[1]);
  // 90 of the instance's cores are taken: a fourth share of 30 goes to the next 3g instance.
  Result<json> fourth = allocator::allocated(input, share.claim);
  ASSERT_TRUE(fourth.is_ok()) << fourth.status().message();
  EXPECT_EQ(fourth->at("status")["allocation"]["devices"]["results"][0]["device"], "gpu-0-mig-gi2");
  input.allocated_claims.push_back(*fourth);
  Result<json> taken_whole = allocator::allocated(input, whole.claim);
  ASSERT_TRUE(taken_whole.is_ok()) << taken_whole.status().message();
  EXPECT_EQ(taken_whole->at("status")["allocation"]["devices"]["results"][0]["device"],
            "gpu-1-mig-gi1")
      << "the only 3g instance nobody shares";
  input.allocated_claims.push_back(*taken_whole);
  // gpu-0-mig-gi2 has 70 cores left: two more shares, then every 3g instance is full or taken
  // whole, and 30 more cores fit nowhere (not in the 2g or 1g instances, not in gpu-2).
  for (int i = 0; i < 2; ++i) {
    Result<json> more = allocator::allocated(input, share.claim);
    ASSERT_TRUE(more.is_ok()) << more.status().message();
    EXPECT_EQ(more->at("status")["allocation"]["devices"]["results"][0]["device"], "gpu-0-mig-gi2");
    input.allocated_claims.push_back(*more);
  }
  Result<json> refused = allocator::allocated(input, share.claim);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
}

// The default class is for a share of a whole GPU: on a node with MIG instances its samples (and
// the webhook's shorthand templates) land on the GPU in no MIG mode (gpu-2) only, never inside an
// instance, and once that GPU is full they are refused although the instances have room.
TEST(SchedulerAllocation, TheDefaultClassNeverPicksAMigInstance) {
  std::vector<Sample> samples;
  for (const Sample& sample : sample_claims(SampleSet::kGpu))
    if (sample.claim.value(json::json_pointer("/spec/devices/requests/0/exactly/deviceClassName"),
                           "") == "vgpu.tessera.dev")
      samples.push_back(sample);
  ASSERT_GE(samples.size(), 4u);  // one-share, two tenants, extended resource, shorthand
  for (const Sample& sample : samples) {
    allocator::AllocatorInput input = mig_node();
    Result<json> claim = allocator::allocated(input, sample.claim);
    ASSERT_TRUE(claim.is_ok()) << sample.name << ": " << claim.status().message();
    EXPECT_EQ((*claim)["status"]["allocation"]["devices"]["results"][0]["device"], "gpu-2")
        << sample.name;
  }
  // 90 cores of gpu-2 taken by three 30-core shares: a fourth finds no whole GPU, while the
  // 3g instances (100 cores each) would have held it.
  webhook::ShareRequest request;
  request.memory_bytes = 8ull << 30;
  request.cores = 30;
  const json made = request.claim_template("tessera-samples");
  allocator::AllocatorInput input = mig_node();
  for (int i = 0; i < 3; ++i) {
    Result<json> claim = allocator::allocated(input, claim_from("share", made["spec"]["spec"]));
    ASSERT_TRUE(claim.is_ok()) << i << ": " << claim.status().message();
    EXPECT_EQ((*claim)["status"]["allocation"]["devices"]["results"][0]["device"], "gpu-2");
    input.allocated_claims.push_back(*claim);
  }
  Result<json> refused = allocator::allocated(input, claim_from("share", made["spec"]["spec"]));
  ASSERT_FALSE(refused.is_ok()) << refused->dump();
  EXPECT_EQ(refused.status().message(),
            "cannot allocate all claims: request \"gpu\" found no device that fits");
}

}  // namespace
}  // namespace tessera::agent
