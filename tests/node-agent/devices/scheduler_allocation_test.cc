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

// The chart's DeviceClasses (charts/tessera/templates/deviceclasses.yaml): the default class and
// the MPS preset, both selecting the driver's devices.
std::vector<json> device_classes() {
  const json selector = {{{"cel", {{"expression", "device.driver == \"vgpu.tessera.dev\""}}}}};
  return {{{"metadata", {{"name", "vgpu.tessera.dev"}}}, {"spec", {{"selectors", selector}}}},
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

// Every claim the samples make: their ResourceClaims and ResourceClaimTemplates, the claim the
// scheduler makes for the extended resource, and the templates the webhook makes for the
// shorthand and HAMi-style pods. `third` = the two-tenant sample's third tenant apart.
std::vector<Sample> sample_claims(bool third) {
  std::vector<Sample> samples;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(SAMPLES_K8S_DIR)) {
    if (entry.path().extension() != ".yaml") continue;
    if ((entry.path().parent_path().filename() == "third") != third) continue;
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
  const std::vector<Sample> samples = sample_claims(false);
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
  for (const Sample& sample : sample_claims(false))
    if (sample.name.find("two-tenants/") == 0) tenants.push_back(sample);
  const std::vector<Sample> third = sample_claims(true);
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
      const ShareLimits limits = specs->front().limits();
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

}  // namespace
}  // namespace tessera::agent
