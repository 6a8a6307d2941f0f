#include "devices/mig_slices.h"

#include <algorithm>

namespace tessera::agent {
namespace {

using nlohmann::json;

constexpr uint64_t kMiB = 1ull << 20;

NodeDevice whole_gpu(const GpuInfo& gpu) {
  return {"gpu-" + std::to_string(gpu.minor), gpu.uuid, gpu.minor, gpu.memory_bytes / kMiB * kMiB,
          gpu.product_name};
}

std::string memory_slice_counter(unsigned slice) {
  return "memory-slice-" + std::to_string(slice);
}

}  // namespace

std::optional<MigStrategy> parse_mig_strategy(const std::string& text) {
  if (text == "none") return MigStrategy::kNone;
  if (text == "static") return MigStrategy::kStatic;
  if (text == "dynamic") return MigStrategy::kDynamic;
  return std::nullopt;
}

const char* to_string(MigStrategy strategy) {
  switch (strategy) {
    case MigStrategy::kNone:
      return "none";
    case MigStrategy::kStatic:
      return "static";
    case MigStrategy::kDynamic:
      return "dynamic";
  }
  return "";
}

std::optional<SliceShape> parse_slice_shape(const std::string& text) {
  if (text == "auto") return SliceShape::kAuto;
  if (text == "combined") return SliceShape::kCombined;
  if (text == "split") return SliceShape::kSplit;
  return std::nullopt;
}

const char* to_string(SliceShape shape) {
  switch (shape) {
    case SliceShape::kAuto:
      return "auto";
    case SliceShape::kCombined:
      return "combined";
    case SliceShape::kSplit:
      return "split";
  }
  return "";
}

Result<SliceShape> slice_shape_for_version(const std::string& git_version) {
  // "v<major>.<minor>[.<patch>][-<suffix>]"
  const std::string text = git_version.starts_with("v") ? git_version.substr(1) : git_version;
  const size_t dot = text.find('.');
  if (dot == std::string::npos || dot == 0 || dot > 3)
    return invalid_argument("Kubernetes version \"" + git_version +
                            "\": expected v<major>.<minor>");
  const std::string major = text.substr(0, dot);
  std::string minor;
  for (size_t i = dot + 1; i < text.size() && i < dot + 4 && std::isdigit(text[i]); ++i)
    minor += text[i];
  if (minor.empty() || major.find_first_not_of("0123456789") != std::string::npos)
    return invalid_argument("Kubernetes version \"" + git_version +
                            "\": expected v<major>.<minor>");
  const int major_number = std::stoi(major), minor_number = std::stoi(minor);
  return major_number > 1 || (major_number == 1 && minor_number >= 35) ? SliceShape::kSplit
                                                                       : SliceShape::kCombined;
}

const MigGpu* MigPublication::gpu(const std::string& uuid) const {
  for (const auto& candidate : gpus)
    if (candidate.uuid == uuid) return &candidate;
  return nullptr;
}

std::string counter_set_name(unsigned minor) {
  return "gpu-" + std::to_string(minor) + "-counters";
}

PlannedGpu plan_gpu(const GpuInfo& gpu, const MigPublication* publication) {
  PlannedGpu plan;
  const MigGpu* mig = publication ? publication->gpu(gpu.uuid) : nullptr;
  const MigStrategy strategy = publication ? publication->strategy : MigStrategy::kNone;
  if (strategy == MigStrategy::kNone || !mig || !mig->capable) {
    plan.devices.push_back({whole_gpu(gpu), true, false});
    return plan;
  }
  auto mig_device = [&](const MigProfile& profile, const MigPlacement& placement, MigKind kind) {
    NodeDevice node;
    node.minor = gpu.minor;
    node.product_name = gpu.product_name;
    node.memory_bytes = profile.memory_bytes / kMiB * kMiB;
    MigDeviceRef ref;
    ref.kind = kind;
    ref.parent_uuid = gpu.uuid;
    ref.profile_id = profile.id;
    ref.profile = profile.name;
    ref.placement = placement;
    ref.multiprocessors = profile.multiprocessors;
    node.mig = ref;
    return node;
  };
  if (strategy == MigStrategy::kStatic) {
    if (!mig->enabled) {
      plan.devices.push_back({whole_gpu(gpu), true, false});
      return plan;
    }
    for (const auto& instance : mig->instances) {
      const MigProfile* profile = mig->profile_by_id(instance.profile_id);
      if (!instance.ci_id || instance.uuid.empty() || !profile) continue;  // not usable
      NodeDevice node = mig_device(*profile, instance.placement, MigKind::kStatic);
      node.name = static_mig_device_name(gpu.minor, instance.gi_id);
      node.uuid = instance.uuid;
      if (instance.memory_bytes) node.memory_bytes = instance.memory_bytes / kMiB * kMiB;
      if (instance.multiprocessors) node.mig->multiprocessors = instance.multiprocessors;
      node.mig->gi_id = instance.gi_id;
      node.mig->ci_id = instance.ci_id;
      plan.devices.push_back({node, false, false});
    }
    return plan;
  }
  // Dynamic: instances Tessera did not create keep their slices out of anything published here.
  std::vector<MigPlacement> foreign;
  for (const auto& instance : mig->instances)
    if (!publication->tessera_instances.count({gpu.uuid, instance.gi_id}))
      foreign.push_back(instance.placement);
  auto blocked = [&](const MigPlacement& placement) {
    return std::any_of(foreign.begin(), foreign.end(),
                       [&](const MigPlacement& other) { return other.overlaps(placement); });
  };
  CounterSetPlan counters;
  counters.name = counter_set_name(gpu.minor);
  for (const auto& profile : mig->profiles) {
    counters.multiprocessors = std::max(counters.multiprocessors, profile.multiprocessors);
    counters.memory_bytes = std::max(counters.memory_bytes, profile.memory_bytes / kMiB * kMiB);
    for (const auto& placement : profile.placements)
      counters.memory_slices = std::max(counters.memory_slices, placement.start + placement.size);
  }
  if (foreign.empty()) plan.devices.push_back({whole_gpu(gpu), true, true});
  for (const auto& profile : mig->profiles)
    for (const auto& placement : profile.placements) {
      if (blocked(placement)) continue;
      NodeDevice node = mig_device(profile, placement, MigKind::kDynamic);
      node.name = dynamic_mig_device_name(gpu.minor, profile.name, placement.start);
      plan.devices.push_back({node, false, true});
    }
  plan.counters = counters;
  return plan;
}

json counter_set_json(const CounterSetPlan& plan) {
  json counters = json::object();
  for (unsigned slice = 0; slice < plan.memory_slices; ++slice)
    counters[memory_slice_counter(slice)] = {{"value", "1"}};
  counters["multiprocessors"] = {{"value", std::to_string(plan.multiprocessors)}};
  counters["memory"] = {{"value", std::to_string(plan.memory_bytes)}};
  return {{"name", plan.name}, {"counters", counters}};
}

json counter_consumption_json(const PlannedDevice& device, const CounterSetPlan& plan) {
  if (device.whole_gpu)
    return {{"counterSet", plan.name}, {"counters", counter_set_json(plan)["counters"]}};
  const MigDeviceRef& mig = *device.node.mig;
  json counters = json::object();
  for (unsigned slice = mig.placement.start; slice < mig.placement.start + mig.placement.size;
       ++slice)
    counters[memory_slice_counter(slice)] = {{"value", "1"}};
  counters["multiprocessors"] = {{"value", std::to_string(mig.multiprocessors)}};
  counters["memory"] = {{"value", std::to_string(device.node.memory_bytes)}};
  return {{"counterSet", plan.name}, {"counters", counters}};
}

}  // namespace tessera::agent
