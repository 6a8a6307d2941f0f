#include "devices/resource_slices.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <sstream>

#include "tessera/json_access.h"
#include "tessera/quantity.h"

namespace tessera::agent {
namespace {

using nlohmann::json;

// Quantities the API server may print in another canonical form ("268435456" -> "256Mi"):
// compared as numbers (every string that reads as a quantity, on both sides alike).
json normalise(const json& devices) {
  json copy = devices;
  std::function<void(json&)> walk = [&](json& node) {
    if (node.is_string()) {
      if (auto bytes = parse_byte_quantity(node.get<std::string>())) node = *bytes;
    } else if (node.is_object() || node.is_array()) {
      for (auto& child : node) walk(child);
    }
  };
  walk(copy);
  return copy;
}

// A device's name: one rule for the slices and for node_devices().
std::string device_name(const GpuInfo& gpu) {
  return "gpu-" + std::to_string(gpu.minor);
}

std::string slice_name(const SliceIdentity& identity, size_t index) {
  return identity.node_name + "-" + identity.driver + "-" + std::to_string(index);
}

// `memory`: value = default = max = the published total; requests round up to whole MiB from
// 256Mi. kube-apiserver requires default - min and max - min to be whole steps and min + step to
// fit in the value, which holds for any whole-MiB total above 256Mi. (A GPU too small for that
// gets min 1Mi; one under 2Mi no policy: requests are then taken as they come.)
json memory_capacity(uint64_t total_bytes) {
  const std::string total = std::to_string(total_bytes);
  if (total_bytes < 2 * kMemoryStep) return {{"value", total}};
  const std::string min = total_bytes >= kMemoryMin + kMemoryStep ? "256Mi" : "1Mi";
  return {{"value", total},
          {"requestPolicy",
           {{"default", total}, {"validRange", {{"min", min}, {"max", total}, {"step", "1Mi"}}}}}};
}

// kube-apiserver sets a taint's timeAdded when it is missing (SetDefaults_DeviceTaint): a taint
// still published (same device, key, value and effect, in whichever slice) keeps its time, so
// republishing neither moves it nor looks like a change.
void keep_taint_times(std::vector<json>& desired, const std::map<std::string, json>& existing) {
  std::map<std::string, const json*> published;  // device name -> its published taints
  for (const auto& [name, slice] : existing) {
    const json* devices = json_at(slice, "/spec/devices");
    if (!devices || !devices->is_array()) continue;
    for (const json& device : *devices) {
      const json* taints = json_member(device, "taints");
      const json* device_name = json_member(device, "name");
      if (taints && taints->is_array() && device_name && device_name->is_string())
        published[device_name->get<std::string>()] = taints;
    }
  }
  for (json& slice : desired) {
    if (!slice["spec"].contains("devices")) continue;  // a slice of counter sets only
    for (json& device : slice["spec"]["devices"]) {
      if (!device.contains("taints")) continue;
      const auto found = published.find(device["name"].get<std::string>());
      if (found == published.end()) continue;
      for (json& taint : device["taints"]) {
        for (const json& old : *found->second) {
          const json* time_added = json_member(old, "timeAdded");
          if (json_string(old, "key") == taint.value("key", "") &&
              json_string(old, "value") == taint.value("value", "") &&
              json_string(old, "effect") == taint.value("effect", "") && time_added) {
            taint["timeAdded"] = *time_added;
            break;
          }
        }
      }
    }
  }
}

// Every device's taints (without timeAdded), by device name: what a publish asks for, or what
// the API server kept.
json taint_set(const std::vector<json>& slices) {
  json set = json::object();
  for (const json& slice : slices) {
    const json* devices = json_at(slice, "/spec/devices");
    if (!devices || !devices->is_array()) continue;
    for (const json& device : *devices) {
      const json* published = json_member(device, "taints");
      if (!published || !published->is_array() || published->empty()) continue;
      json taints = *published;
      for (json& taint : taints)
        if (taint.is_object()) taint.erase("timeAdded");
      set[json_string(device, "name")] = taints;
    }
  }
  return set;
}

void strip_taints(std::vector<json>& slices) {
  for (json& slice : slices)
    if (slice["spec"].contains("devices"))
      for (json& device : slice["spec"]["devices"]) device.erase("taints");
}

}  // namespace

uint64_t published_memory_bytes(const GpuInfo& gpu) {
  return gpu.memory_bytes / kMemoryStep * kMemoryStep;
}

std::string to_semver(const std::string& version) {
  std::vector<unsigned long> parts;
  std::stringstream in(version);
  std::string part;
  while (std::getline(in, part, '.')) {
    if (part.empty() || part.find_first_not_of("0123456789") != std::string::npos) return "";
    parts.push_back(std::stoul(part));
  }
  if (parts.empty() || parts.size() > 3) return "";
  while (parts.size() < 3) parts.push_back(0);
  return std::to_string(parts[0]) + "." + std::to_string(parts[1]) + "." + std::to_string(parts[2]);
}

json device_taints(const DeviceHealthReport& health) {
  json taints = json::array();
  if (health.state != DeviceHealthState::kUnhealthy) return taints;
  json taint = {{"key", kUnhealthyTaintKey}, {"effect", kUnhealthyTaintEffect}};
  // A label value: "xid-79" (alphanumerics and '-', at most 63 characters).
  if (health.xid != 0) taint["value"] = "xid-" + std::to_string(health.xid);
  taints.push_back(taint);
  return taints;
}

namespace {

// The parent GPU's attributes every device of it carries.
json gpu_attributes(const GpuInfo& gpu) {
  json attributes = {
      {"productName", {{"string", gpu.product_name.substr(0, 64)}}},
      {"architecture", {{"string", gpu.architecture}}},
      {"cudaComputeCapability",
       {{"version", to_semver(std::to_string(gpu.cc_major) + "." + std::to_string(gpu.cc_minor))}}},
      {"resource.kubernetes.io/pciBusID", {{"string", gpu.pci_bus_id}}}};
  if (auto driver = to_semver(gpu.driver_version); !driver.empty())
    attributes["driverVersion"] = {{"version", driver}};
  return attributes;
}

json cores_capacity() {
  return {{"value", "100"},
          {"requestPolicy",
           {{"default", "0"}, {"validRange", {{"min", "0"}, {"max", "100"}, {"step", "1"}}}}}};
}

}  // namespace

json build_planned_device(const GpuInfo& gpu, const PlannedDevice& planned,
                          const CounterSetPlan* counters, const DeviceHealthReport* health) {
  json device;
  if (planned.whole_gpu) {
    device = build_device(gpu, health);
  } else {
    const MigDeviceRef& mig = *planned.node.mig;
    json attributes = gpu_attributes(gpu);
    attributes["type"] = {{"string", "mig"}};
    attributes["profile"] = {{"string", mig.profile}};
    attributes["parentUUID"] = {{"string", mig.parent_uuid}};
    attributes["placementStart"] = {{"int", mig.placement.start}};
    attributes["placementSize"] = {{"int", mig.placement.size}};
    if (!planned.node.uuid.empty()) attributes["uuid"] = {{"string", planned.node.uuid}};
    // Shares inside an instance as on a whole GPU: memory within the instance's, cores a percent
    // of its SMs' time.
    json capacity = {{"memory", memory_capacity(planned.node.memory_bytes)},
                     {"cores", cores_capacity()}};
    device = {{"name", planned.node.name},
              {"attributes", attributes},
              {"capacity", capacity},
              {"allowMultipleAllocations", true}};
    if (health != nullptr)
      if (json taints = device_taints(*health); !taints.empty()) device["taints"] = taints;
  }
  if (planned.consumes_counters && counters)
    device["consumesCounters"] = json::array({counter_consumption_json(planned, *counters)});
  return device;
}

json build_device(const GpuInfo& gpu, const DeviceHealthReport* health) {
  json attributes = gpu_attributes(gpu);
  attributes["type"] = {{"string", "gpu"}};
  attributes["uuid"] = {{"string", gpu.uuid}};
  attributes["brand"] = {{"string", gpu.brand}};
  // Defaults: a request that names no memory takes the whole memory; one that names no cores
  // requests none and is best-effort (docs/resource-model.md), as a HAMi pod without gpucores
  // packs beside others. Memory in whole MiB from 256Mi (validRange rounds a request up), cores
  // in whole percent from 0.
  json capacity = {{"memory", memory_capacity(published_memory_bytes(gpu))},
                   {"cores", cores_capacity()}};
  json device = {{"name", device_name(gpu)},
                 {"attributes", attributes},
                 {"capacity", capacity},
                 {"allowMultipleAllocations", true}};
  if (health != nullptr)
    if (json taints = device_taints(*health); !taints.empty()) device["taints"] = taints;
  return device;
}

std::vector<NodeDevice> node_devices(const std::vector<GpuInfo>& gpus, const MigPublication* mig) {
  std::vector<NodeDevice> devices;
  for (const auto& gpu : gpus)
    for (const auto& planned : plan_gpu(gpu, mig).devices) devices.push_back(planned.node);
  return devices;
}

std::vector<json> build_resource_slices(const std::vector<GpuInfo>& gpus,
                                        const SliceIdentity& identity, int64_t generation,
                                        const std::vector<DeviceHealthReport>& health,
                                        const MigPublication* mig) {
  std::vector<GpuInfo> sorted = gpus;
  std::sort(sorted.begin(), sorted.end(),
            [](const GpuInfo& a, const GpuInfo& b) { return a.minor < b.minor; });
  auto report_for = [&](const std::string& name) -> const DeviceHealthReport* {
    const auto report =
        std::find_if(health.begin(), health.end(), [&](const DeviceHealthReport& r) {
          return r.device_name == name &&
                 (r.pool_name.empty() || r.pool_name == identity.node_name);
        });
    return report == health.end() ? nullptr : &*report;
  };
  // Per GPU its devices (a MIG device has its parent's health unless it has its own) and, for
  // dynamic MIG, its counter set.
  struct GpuGroup {
    std::vector<json> devices;
    std::optional<json> counter_set;
  };
  std::vector<GpuGroup> groups;
  bool tainted = false, counted = false;
  for (const GpuInfo& gpu : sorted) {
    const PlannedGpu plan = plan_gpu(gpu, mig);
    GpuGroup group;
    const DeviceHealthReport* parent_health = report_for(device_name(gpu));
    for (const auto& planned : plan.devices) {
      const DeviceHealthReport* own = report_for(planned.node.name);
      group.devices.push_back(build_planned_device(
          gpu, planned, plan.counters ? &*plan.counters : nullptr, own ? own : parent_health));
      tainted = tainted || group.devices.back().contains("taints");
    }
    if (plan.counters) {
      group.counter_set = counter_set_json(*plan.counters);
      counted = true;
    }
    groups.push_back(std::move(group));
  }
  // One limit for every slice of the pool while any device is tainted or consumes counters: a
  // slice never holds more than kube-apiserver takes, whichever device it is.
  const size_t per_slice = tainted || counted ? kMaxDevicesPerSliceWithTaints : kMaxDevicesPerSlice;
  // Each slice's spec content: devices, counter sets (one or the other from 1.35; both in a
  // GPU's own slice before).
  struct SliceContent {
    json devices = json::array();
    json counters = json::array();
  };
  std::vector<SliceContent> contents;
  std::vector<json> loose;  // devices not kept with their counter set
  const bool combined = mig && mig->shape == SliceShape::kCombined;
  if (combined) {
    for (auto& group : groups) {
      if (!group.counter_set) {
        for (auto& device : group.devices) loose.push_back(std::move(device));
        continue;
      }
      SliceContent content;
      content.counters.push_back(*group.counter_set);
      for (auto& device : group.devices) content.devices.push_back(std::move(device));
      contents.push_back(std::move(content));
    }
  } else {
    json sets = json::array();
    for (auto& group : groups) {
      if (group.counter_set) sets.push_back(*group.counter_set);
      for (auto& device : group.devices) loose.push_back(std::move(device));
    }
    for (size_t i = 0; i < sets.size(); i += kMaxCounterSetsPerSlice) {
      SliceContent content;
      for (size_t j = i; j < sets.size() && j < i + kMaxCounterSetsPerSlice; ++j)
        content.counters.push_back(sets[j]);
      contents.push_back(std::move(content));
    }
  }
  for (size_t i = 0; i < loose.size(); i += per_slice) {
    SliceContent content;
    for (size_t d = i; d < loose.size() && d < i + per_slice; ++d)
      content.devices.push_back(std::move(loose[d]));
    contents.push_back(std::move(content));
  }
  if (contents.empty()) contents.emplace_back();  // a pool of no devices is still published
  const size_t count = contents.size();
  std::vector<json> slices;
  for (size_t i = 0; i < count; ++i) {
    json spec = {{"driver", identity.driver},
                 {"nodeName", identity.node_name},
                 {"pool",
                  {{"name", identity.node_name},
                   {"generation", generation},
                   {"resourceSliceCount", count}}}};
    if (!contents[i].counters.empty()) spec["sharedCounters"] = contents[i].counters;
    if (!contents[i].devices.empty() || contents[i].counters.empty())
      spec["devices"] = contents[i].devices;
    slices.push_back({{"apiVersion", "resource.k8s.io/v1"},
                      {"kind", "ResourceSlice"},
                      {"metadata",
                       {{"name", slice_name(identity, i)},
                        {"ownerReferences",
                         {{{"apiVersion", "v1"},
                           {"kind", "Node"},
                           {"name", identity.node_name},
                           {"uid", identity.node_uid},
                           {"controller", true}}}}}},
                      {"spec", spec}});
  }
  return slices;
}

Status SlicePublisher::publish(const std::vector<GpuInfo>& gpus,
                               const std::vector<DeviceHealthReport>& health,
                               const MigPublication* mig) {
  writes_ = 0;
  if (identity_.node_uid.empty()) {
    const std::string path = kube::node_path(identity_.node_name);
    TESSERA_ASSIGN_OR_RETURN(const kube::ApiResponse node, kube_.request("GET", path),
                             with_context("cannot read the Node's UID"));
    const json body = json::parse(node.body, nullptr, false);
    const std::string* uid = json_string_at(body, "/metadata/uid");
    if (!uid || uid->empty())
      return internal_error("GET " + path + ": metadata.uid: expected a non-empty string, got " +
                            json_shown(json_at(body, "/metadata/uid")));
    identity_.node_uid = *uid;
  }
  const std::string list_path = std::string(kube::kResourceSlicesPath) + "?fieldSelector=" +
                                kube::field_selector({{"spec.nodeName", identity_.node_name},
                                                      {"spec.driver", identity_.driver}});
  TESSERA_ASSIGN_OR_RETURN(const kube::ApiResponse listed, kube_.request("GET", list_path));
  const json list = json::parse(listed.body, nullptr, false);
  const json* items = json_member(list, "items");
  if (!items || !items->is_array())
    return internal_error("GET " + list_path + ": items: expected an array, got " +
                          json_shown(items));
  std::map<std::string, json> existing;
  int64_t generation = generation_;
  for (size_t i = 0; i < items->size(); ++i) {
    const json& item = (*items)[i];
    // The field selector is the server's; check again so a fake or older server cannot make us
    // touch another driver's or node's slices (one without a driver or node is not ours either).
    const std::string* driver = json_string_at(item, "/spec/driver");
    const std::string* node_name = json_string_at(item, "/spec/nodeName");
    if (!driver || *driver != identity_.driver || !node_name || *node_name != identity_.node_name)
      continue;
    // One of ours that cannot be read stops the publish: guessing could delete or clobber it.
    const std::string at = "GET " + list_path + ": items[" + std::to_string(i) + "].";
    const std::string* name = json_string_at(item, "/metadata/name");
    if (!name || name->empty())
      return internal_error(at + "metadata.name: expected a non-empty string, got " +
                            json_shown(json_at(item, "/metadata/name")));
    if (!json_string_at(item, "/metadata/resourceVersion"))
      return internal_error(at + "metadata.resourceVersion: expected a string, got " +
                            json_shown(json_at(item, "/metadata/resourceVersion")));
    const json* published = json_at(item, "/spec/pool/generation");
    if (!published || !published->is_number_integer() ||
        (published->is_number_unsigned() && published->get<uint64_t>() > INT64_MAX))
      return internal_error(at + "spec.pool.generation: expected an integer, got " +
                            json_shown(published));
    existing[*name] = item;
    generation = std::max(generation, published->get<int64_t>());
  }
  // The taints asked for; the ones the API server dropped last time (DRADeviceTaints off) are not
  // sent again until the health changes, so an unhealthy GPU does not rewrite the slices on every
  // publish.
  const json wanted = taint_set(build_resource_slices(gpus, identity_, generation, health, mig));
  if (wanted.empty()) dropped_taints_ = json();  // all Healthy: the next fault is tried again
  const bool send_taints = wanted.empty() || wanted != dropped_taints_;
  auto build = [&](int64_t at) {
    auto slices = build_resource_slices(gpus, identity_, at, health, mig);
    if (!send_taints) strip_taints(slices);
    keep_taint_times(slices, existing);
    return slices;
  };
  // Unchanged: the same slice names, devices (taints with the times the API gave them) and owner;
  // nothing is written.
  auto desired = build(generation);
  bool same = existing.size() == desired.size();
  for (const auto& slice : desired) {
    const auto it = existing.find(slice["metadata"]["name"].get<std::string>());
    if (it == existing.end()) {
      same = false;
      continue;
    }
    const json& published = it->second;
    const json* devices = json_at(published, "/spec/devices");
    const json* counters = json_at(published, "/spec/sharedCounters");
    const json* count = json_at(published, "/spec/pool/resourceSliceCount");
    const json* owners = json_at(published, "/metadata/ownerReferences");
    const json no_devices = json::array();
    const json& want_devices =
        slice["spec"].contains("devices") ? slice["spec"]["devices"] : no_devices;
    const json& want_counters =
        slice["spec"].contains("sharedCounters") ? slice["spec"]["sharedCounters"] : no_devices;
    same = same && normalise(devices ? *devices : no_devices) == normalise(want_devices) &&
           normalise(counters ? *counters : no_devices) == normalise(want_counters) &&
           *json_at(published, "/spec/pool/generation") == generation && count &&
           *count == desired.size() && owners && *owners == slice["metadata"]["ownerReferences"];
  }
  if (same && !existing.empty()) {
    generation_ = generation;
    return Status::ok();
  }
  generation_ = existing.empty() ? std::max<int64_t>(generation, 1) : generation + 1;
  desired = build(generation_);
  std::vector<json> stored;  // the objects as the API server answered the writes
  for (auto& slice : desired) {
    const std::string name = slice["metadata"]["name"].get<std::string>();
    Result<kube::ApiResponse> answer = unavailable("not sent");
    if (const auto it = existing.find(name); it != existing.end()) {
      slice["metadata"]["resourceVersion"] = *json_at(it->second, "/metadata/resourceVersion");
      answer = kube_.request("PUT", kube::resource_slice_path(name), slice.dump());
      existing.erase(it);
    } else {
      answer = kube_.request("POST", kube::kResourceSlicesPath, slice.dump());
    }
    if (!answer.is_ok()) return answer.status();
    stored.push_back(json::parse(answer->body, nullptr, false));
    ++writes_;
  }
  if (send_taints) dropped_taints_ = !wanted.empty() && taint_set(stored).empty() ? wanted : json();
  for (const auto& [name, slice] : existing) {
    const Status answer = kube_.request("DELETE", kube::resource_slice_path(name)).status();
    if (!answer.is_ok() && answer.code() != StatusCode::kNotFound) return answer;
    ++writes_;
  }
  return Status::ok();
}

}  // namespace tessera::agent
