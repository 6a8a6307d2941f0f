#include "devices/resource_slices.h"

#include <algorithm>
#include <functional>
#include <map>
#include <sstream>

#include "tessera/quantity.h"

namespace tessera::agent {
namespace {

using nlohmann::json;

// Quantities the API server may print in another canonical form ("268435456" -> "256Mi"):
// compared as numbers.
json normalise(const json& devices) {
  json copy = devices;
  std::function<void(json&)> walk = [&](json& node) {
    if (node.is_string()) {
      if (auto bytes = parse_byte_quantity(node.get<std::string>())) node = *bytes;
    } else if (node.is_object() || node.is_array()) {
      for (auto& child : node) walk(child);
    }
  };
  for (auto& device : copy)
    if (device.contains("capacity")) walk(device["capacity"]);
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
    if (!slice.contains("spec") || !slice["spec"].contains("devices")) continue;
    for (const json& device : slice["spec"]["devices"])
      if (device.contains("taints") && device.contains("name"))
        published[device["name"].get<std::string>()] = &device["taints"];
  }
  for (json& slice : desired) {
    for (json& device : slice["spec"]["devices"]) {
      if (!device.contains("taints")) continue;
      const auto found = published.find(device["name"].get<std::string>());
      if (found == published.end()) continue;
      for (json& taint : device["taints"]) {
        for (const json& old : *found->second) {
          if (old.value("key", "") == taint.value("key", "") &&
              old.value("value", "") == taint.value("value", "") &&
              old.value("effect", "") == taint.value("effect", "") && old.contains("timeAdded")) {
            taint["timeAdded"] = old["timeAdded"];
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
    if (!slice.is_object() || !slice.contains("spec") || !slice["spec"].contains("devices"))
      continue;
    for (const json& device : slice["spec"]["devices"]) {
      if (!device.contains("taints") || device["taints"].empty()) continue;
      json taints = device["taints"];
      for (json& taint : taints) taint.erase("timeAdded");
      set[device.value("name", "")] = taints;
    }
  }
  return set;
}

void strip_taints(std::vector<json>& slices) {
  for (json& slice : slices)
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

json build_device(const GpuInfo& gpu, const DeviceHealthReport* health) {
  json attributes = {
      {"uuid", {{"string", gpu.uuid}}},
      {"productName", {{"string", gpu.product_name.substr(0, 64)}}},
      {"architecture", {{"string", gpu.architecture}}},
      {"brand", {{"string", gpu.brand}}},
      {"cudaComputeCapability",
       {{"version", to_semver(std::to_string(gpu.cc_major) + "." + std::to_string(gpu.cc_minor))}}},
      {"resource.kubernetes.io/pciBusID", {{"string", gpu.pci_bus_id}}}};
  if (auto driver = to_semver(gpu.driver_version); !driver.empty())
    attributes["driverVersion"] = {{"version", driver}};
  // Defaults: a request that names no memory takes the whole memory, one that names no cores the
  // whole GPU time; a share states both to leave room for others. Memory in whole MiB from 256Mi
  // (validRange rounds a request up), cores in whole percent from 1.
  json capacity = {
      {"memory", memory_capacity(published_memory_bytes(gpu))},
      {"cores",
       {{"value", "100"},
        {"requestPolicy",
         {{"default", "100"}, {"validRange", {{"min", "1"}, {"max", "100"}, {"step", "1"}}}}}}}};
  json device = {{"name", device_name(gpu)},
                 {"attributes", attributes},
                 {"capacity", capacity},
                 {"allowMultipleAllocations", true}};
  if (health != nullptr)
    if (json taints = device_taints(*health); !taints.empty()) device["taints"] = taints;
  return device;
}

std::vector<NodeDevice> node_devices(const std::vector<GpuInfo>& gpus) {
  std::vector<NodeDevice> devices;
  for (const auto& gpu : gpus)
    devices.push_back({device_name(gpu), gpu.uuid, gpu.minor, published_memory_bytes(gpu)});
  return devices;
}

std::vector<json> build_resource_slices(const std::vector<GpuInfo>& gpus,
                                        const SliceIdentity& identity, int64_t generation,
                                        const std::vector<DeviceHealthReport>& health) {
  std::vector<GpuInfo> sorted = gpus;
  std::sort(sorted.begin(), sorted.end(),
            [](const GpuInfo& a, const GpuInfo& b) { return a.minor < b.minor; });
  std::vector<json> entries;
  bool tainted = false;
  for (const GpuInfo& gpu : sorted) {
    const std::string name = device_name(gpu);
    const auto report =
        std::find_if(health.begin(), health.end(), [&](const DeviceHealthReport& r) {
          return r.device_name == name &&
                 (r.pool_name.empty() || r.pool_name == identity.node_name);
        });
    entries.push_back(build_device(gpu, report == health.end() ? nullptr : &*report));
    tainted = tainted || entries.back().contains("taints");
  }
  // One limit for every slice of the pool while any device is tainted: a slice never holds more
  // than kube-apiserver takes, whichever device the taint is on.
  const size_t per_slice = tainted ? kMaxDevicesPerSliceWithTaints : kMaxDevicesPerSlice;
  const size_t count = std::max<size_t>(1, (entries.size() + per_slice - 1) / per_slice);
  std::vector<json> slices;
  for (size_t i = 0; i < count; ++i) {
    json devices = json::array();
    for (size_t d = i * per_slice; d < entries.size() && d < (i + 1) * per_slice; ++d)
      devices.push_back(entries[d]);
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
                      {"spec",
                       {{"driver", identity.driver},
                        {"nodeName", identity.node_name},
                        {"pool",
                         {{"name", identity.node_name},
                          {"generation", generation},
                          {"resourceSliceCount", count}}},
                        {"devices", devices}}}});
  }
  return slices;
}

Status SlicePublisher::publish(const std::vector<GpuInfo>& gpus,
                               const std::vector<DeviceHealthReport>& health) {
  writes_ = 0;
  if (identity_.node_uid.empty()) {
    const std::string path = node_path(identity_.node_name);
    const Result<ApiResponse> node = kube_.request("GET", path);
    if (!node.is_ok()) return node.status().with_context("cannot read the Node's UID");
    const json body = json::parse(node->body, nullptr, false);
    if (!body.is_object() || !body["metadata"]["uid"].is_string())
      return internal_error("GET " + path + ": no metadata.uid");
    identity_.node_uid = body["metadata"]["uid"].get<std::string>();
  }
  const std::string list_path =
      std::string(kResourceSlicesPath) + "?fieldSelector=" +
      field_selector({{"spec.nodeName", identity_.node_name}, {"spec.driver", identity_.driver}});
  const Result<ApiResponse> listed = kube_.request("GET", list_path);
  if (!listed.is_ok()) return listed.status();
  const json list = json::parse(listed->body, nullptr, false);
  if (!list.is_object() || !list["items"].is_array())
    return internal_error("GET " + list_path + ": no items");
  std::map<std::string, json> existing;
  int64_t generation = generation_;
  for (const auto& item : list["items"]) {
    // The field selector is the server's; check again so a fake or older server cannot make us
    // touch another driver's or node's slices.
    if (item["spec"]["driver"] != identity_.driver ||
        item["spec"]["nodeName"] != identity_.node_name)
      continue;
    existing[item["metadata"]["name"].get<std::string>()] = item;
    generation = std::max(generation, item["spec"]["pool"]["generation"].get<int64_t>());
  }
  // The taints asked for; the ones the API server dropped last time (DRADeviceTaints off) are not
  // sent again until the health changes, so an unhealthy GPU does not rewrite the slices on every
  // publish.
  const json wanted = taint_set(build_resource_slices(gpus, identity_, generation, health));
  if (wanted.empty()) dropped_taints_ = json();  // all Healthy: the next fault is tried again
  const bool send_taints = wanted.empty() || wanted != dropped_taints_;
  auto build = [&](int64_t at) {
    auto slices = build_resource_slices(gpus, identity_, at, health);
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
    same = same && it != existing.end() &&
           normalise(it->second["spec"]["devices"]) == normalise(slice["spec"]["devices"]) &&
           it->second["spec"]["pool"]["generation"] == generation &&
           it->second["spec"]["pool"]["resourceSliceCount"] == desired.size() &&
           it->second["metadata"]["ownerReferences"] == slice["metadata"]["ownerReferences"];
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
    Result<ApiResponse> answer = unavailable("not sent");
    if (const auto it = existing.find(name); it != existing.end()) {
      slice["metadata"]["resourceVersion"] = it->second["metadata"]["resourceVersion"];
      answer = kube_.request("PUT", resource_slice_path(name), slice.dump());
      existing.erase(it);
    } else {
      answer = kube_.request("POST", kResourceSlicesPath, slice.dump());
    }
    if (!answer.is_ok()) return answer.status();
    stored.push_back(json::parse(answer->body, nullptr, false));
    ++writes_;
  }
  if (send_taints) dropped_taints_ = !wanted.empty() && taint_set(stored).empty() ? wanted : json();
  for (const auto& [name, slice] : existing) {
    const Status answer = kube_.request("DELETE", resource_slice_path(name)).status();
    if (!answer.is_ok() && answer.code() != StatusCode::kNotFound) return answer;
    ++writes_;
  }
  return Status::ok();
}

}  // namespace tessera::agent
