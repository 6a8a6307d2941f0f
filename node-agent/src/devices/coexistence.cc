#include "devices/coexistence.h"

#include <algorithm>
#include <chrono>
#include <ctime>

#include "tessera/json_access.h"
#include "tessera/log.h"
#include "tessera/nvml.h"

namespace tessera::agent {
namespace {

using nlohmann::json;

std::string device_name(const GpuInfo& gpu) {
  return "gpu-" + std::to_string(gpu.minor);
}

bool is_device_plugin_resource(const std::string& name) {
  return name == "nvidia.com/gpu" || name == "nvidia.com/gpu.shared" ||
         name.rfind("nvidia.com/mig-", 0) == 0;
}

// A count as the Node's status prints it ("4"); nullopt for anything else (a device plugin's
// resources are whole numbers).
std::optional<int64_t> parse_count(const json& value) {
  if (value.is_number_integer()) return value.get<int64_t>();
  if (!value.is_string()) return std::nullopt;
  const std::string text = value.get<std::string>();
  if (text.empty() || text.size() > 18 || text.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  return std::stoll(text);
}

// The attribute names NVIDIA's DRA driver gives a GPU's UUID (a MIG device's parent too), bare
// (the driver's own domain) or qualified.
bool is_uuid_attribute(const std::string& name) {
  const size_t slash = name.rfind('/');
  const std::string bare = slash == std::string::npos ? name : name.substr(slash + 1);
  return bare == "uuid" || bare == "parentUUID";
}

std::string rfc3339(std::time_t when) {
  std::tm utc{};
  gmtime_r(&when, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

}  // namespace

Result<GpuSelection> GpuSelection::parse(const std::string& text) {
  GpuSelection selection;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    std::string entry = text.substr(start, comma - start);
    start = comma + 1;
    entry.erase(0, entry.find_first_not_of(' '));
    entry.erase(entry.find_last_not_of(' ') + 1);
    if (entry.empty()) {
      if (text.empty()) break;
      return invalid_argument("--gpus \"" + text + "\": an empty entry");
    }
    if (entry.find_first_not_of("0123456789") == std::string::npos && entry.size() <= 4) {
      selection.indices_.insert(static_cast<unsigned>(std::stoul(entry)));
    } else if (entry.rfind("GPU-", 0) == 0 && entry.size() > 4) {
      selection.uuids_.insert(entry);
    } else {
      return invalid_argument("--gpus \"" + text + "\": \"" + entry +
                              "\" is neither a GPU index (0, 1, ...) nor a GPU UUID (GPU-...)");
    }
  }
  return selection;
}

bool GpuSelection::selects(const GpuInfo& gpu) const {
  return all() || indices_.count(gpu.index) > 0 || uuids_.count(gpu.uuid) > 0;
}

std::vector<GpuInfo> GpuSelection::filter(const std::vector<GpuInfo>& gpus) const {
  std::vector<GpuInfo> selected;
  for (const GpuInfo& gpu : gpus)
    if (selects(gpu)) selected.push_back(gpu);
  return selected;
}

std::vector<std::string> GpuSelection::unmatched(const std::vector<GpuInfo>& gpus) const {
  std::vector<std::string> missing;
  for (unsigned index : indices_)
    if (std::none_of(gpus.begin(), gpus.end(), [&](const GpuInfo& g) { return g.index == index; }))
      missing.push_back(std::to_string(index));
  for (const std::string& uuid : uuids_)
    if (std::none_of(gpus.begin(), gpus.end(), [&](const GpuInfo& g) { return g.uuid == uuid; }))
      missing.push_back(uuid);
  return missing;
}

std::map<std::string, int64_t> device_plugin_resources(const json& node) {
  std::map<std::string, int64_t> found;
  for (const char* where : {"/status/capacity", "/status/allocatable"}) {
    const json* resources = json_at(node, where);
    if (!resources || !resources->is_object()) continue;
    for (const auto& [name, value] : resources->items()) {
      if (!is_device_plugin_resource(name)) continue;
      // A count we cannot read is taken as present: withholding is the safe side.
      const int64_t count = parse_count(value).value_or(1);
      if (count > 0) found[name] = std::max(found[name], count);
    }
  }
  return found;
}

std::vector<WithheldGpu> find_withheld(const std::vector<GpuInfo>& managed, size_t node_gpu_count,
                                       bool split, const json& node, const json& slices,
                                       const std::string& driver,
                                       const std::map<std::string, std::string>& compute_modes) {
  // The device plugin: its resources' counts against the GPUs this agent leaves it.
  std::string plugin;  // empty: no plugin, or one that fits the split
  int64_t plugin_count = 0;
  std::string listed;
  for (const auto& [name, count] : device_plugin_resources(node)) {
    plugin_count += count;
    listed += (listed.empty() ? "" : ", ") + name + "=" + std::to_string(count);
  }
  const size_t left_to_plugin =
      node_gpu_count > managed.size() ? node_gpu_count - managed.size() : 0;
  if (plugin_count > 0 && !split) {
    plugin = "the Node advertises " + listed +
             " (NVIDIA's device plugin hands out this node's GPUs; split them with --gpus)";
  } else if (plugin_count > 0 && static_cast<size_t>(plugin_count) > left_to_plugin) {
    plugin = "the Node advertises " + listed + " but --gpus leaves " +
             std::to_string(left_to_plugin) + " of the node's " + std::to_string(node_gpu_count) +
             " GPUs to the device plugin";
  }
  // Other drivers' devices of this node, by the UUID they name.
  std::map<std::string, std::string> claimed;  // UUID -> which slice and device
  if (slices.is_array()) {
    for (const json& slice : slices) {
      const std::string* other = json_string_at(slice, "/spec/driver");
      const std::string* on = json_string_at(slice, "/spec/nodeName");
      const std::string* node_name = json_string_at(node, "/metadata/name");
      if (!other || *other == driver || !on || !node_name || *on != *node_name) continue;
      const json* devices = json_at(slice, "/spec/devices");
      if (!devices || !devices->is_array()) continue;
      for (const json& device : *devices) {
        const json* attributes = json_member(device, "attributes");
        if (!attributes || !attributes->is_object()) continue;
        for (const auto& [name, attribute] : attributes->items()) {
          const json* value = json_member(attribute, "string");
          if (!is_uuid_attribute(name) || !value || !value->is_string()) continue;
          claimed.emplace(value->get<std::string>(),
                          "ResourceSlice " + json_shown(json_at(slice, "/metadata/name")) +
                              " of driver " + *other + " lists it (device " +
                              json_string(device, "name") + ")");
        }
      }
    }
  }
  std::vector<WithheldGpu> withheld;
  for (const GpuInfo& gpu : managed) {
    if (const auto found = claimed.find(gpu.uuid); found != claimed.end())
      withheld.push_back({device_name(gpu), gpu.uuid, kWithheldByOtherDraDriver, found->second});
    else if (const auto mode = compute_modes.find(gpu.uuid); mode != compute_modes.end())
      withheld.push_back({device_name(gpu), gpu.uuid, kWithheldByComputeMode,
                          "its compute mode is " + mode->second +
                              ", set outside Tessera (shares need DEFAULT: nvidia-smi -i " +
                              gpu.uuid + " -c DEFAULT)"});
    else if (!plugin.empty())
      withheld.push_back({device_name(gpu), gpu.uuid, kWithheldByDevicePlugin, plugin});
  }
  return withheld;
}

Result<std::vector<WithheldGpu>> CoexistenceCheck::check(const std::vector<GpuInfo>& managed,
                                                         size_t node_gpu_count, bool split) {
  const std::string node_path = kube::node_path(node_name_);
  TESSERA_ASSIGN_OR_RETURN(const kube::ApiResponse node, kube_.request("GET", node_path),
                           with_context("cannot read the Node's device plugins"));
  const json node_body = json::parse(node.body, nullptr, false);
  if (!node_body.is_object() || !json_string_at(node_body, "/metadata/name"))
    return internal_error("GET " + node_path + ": expected a Node, got " + json_shown(&node_body));
  const std::string list_path = std::string(kube::kResourceSlicesPath) + "?fieldSelector=" +
                                kube::field_selector({{"spec.nodeName", node_name_}});
  TESSERA_ASSIGN_OR_RETURN(const kube::ApiResponse listed, kube_.request("GET", list_path),
                           with_context("cannot read the node's other drivers"));
  const json list = json::parse(listed.body, nullptr, false);
  const json* items = json_member(list, "items");
  if (!items || !items->is_array())
    return internal_error("GET " + list_path + ": items: expected an array, got " +
                          json_shown(items));
  const std::map<std::string, std::string> modes =
      compute_modes_ ? compute_modes_->read(managed) : std::map<std::string, std::string>{};
  return find_withheld(managed, node_gpu_count, split, node_body, *items, driver_, modes);
}

std::string compute_mode_name(int mode) {
  switch (mode) {
    case NVML_COMPUTEMODE_DEFAULT:
      return "";
    case NVML_COMPUTEMODE_EXCLUSIVE_THREAD:
      return "EXCLUSIVE_THREAD";
    case NVML_COMPUTEMODE_PROHIBITED:
      return "PROHIBITED";
    case NVML_COMPUTEMODE_EXCLUSIVE_PROCESS:
      return "EXCLUSIVE_PROCESS";
  }
  return "UNKNOWN(" + std::to_string(mode) + ")";
}

std::map<std::string, std::string> NvmlComputeModes::read(const std::vector<GpuInfo>& gpus) {
  std::map<std::string, std::string> modes;
  std::string error;
  Result<nvml::Session> session = nvml::Session::open(library_);
  if (!session.is_ok()) error = session.status().message();
  for (size_t i = 0; error.empty() && i < gpus.size(); ++i) {
    Result<nvmlDevice_t> device = session->device_by_uuid(gpus[i].uuid);
    Result<nvmlComputeMode_t> mode = device.is_ok() ? session->compute_mode(*device)
                                                    : Result<nvmlComputeMode_t>(device.status());
    if (!mode.is_ok()) {
      error = gpus[i].uuid + ": " + mode.status().message();
      continue;
    }
    if (std::string name = compute_mode_name(*mode); !name.empty()) modes[gpus[i].uuid] = name;
  }
  if (!error.empty() && error != last_error_)
    log::warn("cannot read the GPUs' compute modes: not checked for another user",
              {{"error", error}});
  last_error_ = error;
  return modes;
}

json NodeEventWriter::build(std::string_view type, std::string_view reason,
                            std::string_view message, int64_t unix_ns) const {
  // kube-apiserver keeps a legacy Event's message whole, but kubectl shows 1024 characters (the
  // limit of events.k8s.io's note).
  const std::string text(message.substr(0, 1024));
  const std::string at = rfc3339(static_cast<std::time_t>(unix_ns / 1000000000));
  char suffix[24];
  std::snprintf(suffix, sizeof suffix, "%llx", static_cast<unsigned long long>(unix_ns));
  return {{"apiVersion", "v1"},
          {"kind", "Event"},
          {"metadata", {{"name", node_name_ + "." + suffix}, {"namespace", "default"}}},
          // kubelet's reference to its Node: no namespace, the name as the UID.
          {"involvedObject",
           {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", node_name_}, {"uid", node_name_}}},
          {"type", std::string(type)},
          {"reason", std::string(reason)},
          {"message", text},
          {"source", {{"component", component_}, {"host", node_name_}}},
          {"reportingComponent", component_},
          {"reportingInstance", node_name_},
          {"firstTimestamp", at},
          {"lastTimestamp", at},
          {"count", 1}};
}

Status NodeEventWriter::post(std::string_view type, std::string_view reason,
                             std::string_view message) {
  const int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  return kube_
      .request("POST", "/api/v1/namespaces/default/events",
               build(type, reason, message, now_ns).dump())
      .status();
}

void WithheldGpus::update(const std::vector<WithheldGpu>& now) {
  std::map<std::string, WithheldGpu> wanted;
  for (const WithheldGpu& gpu : now) wanted.emplace(gpu.uuid, gpu);
  for (const auto& [uuid, gpu] : wanted)
    if (const auto known = logged_.find(uuid); known == logged_.end() || !(known->second == gpu))
      log::warn("GPU not published: another allocator hands it out",
                {{"gpu", gpu.device}, {"uuid", uuid}, {"reason", gpu.reason}, {"by", gpu.detail}});
  for (const auto& [uuid, gpu] : logged_)
    if (!wanted.count(uuid))
      log::info("GPU published again: no other allocator hands it out",
                {{"gpu", gpu.device}, {"uuid", uuid}});
  logged_ = wanted;
  {
    std::lock_guard lock(mutex_);
    current_ = now;
  }
  if (!events_) return;
  auto told = [&](const Status& posted) {
    if (posted.is_ok()) {
      last_event_error_.clear();
      return true;
    }
    if (posted.message() != last_event_error_)
      log::warn("cannot write the Node's Event (tried again at the next publish)",
                {{"error", posted.message()}});
    last_event_error_ = posted.message();
    return false;
  };
  for (const auto& [uuid, gpu] : wanted) {
    if (const auto known = told_.find(uuid); known != told_.end() && known->second == gpu) continue;
    const std::string message = "GPU " + gpu.device + " (" + uuid +
                                ") is not published for DRA claims: " + gpu.detail +
                                " (docs/coexistence.md)";
    if (!told(events_->post("Warning", kGpuWithheldReason, message))) return;
    told_[uuid] = gpu;
  }
  for (auto it = told_.begin(); it != told_.end();) {
    if (wanted.count(it->first)) {
      ++it;
      continue;
    }
    const std::string message = "GPU " + it->second.device + " (" + it->first +
                                ") is published again: no other allocator hands it out";
    if (!told(events_->post("Normal", kGpuPublishedReason, message))) return;
    it = told_.erase(it);
  }
}

std::vector<WithheldGpu> WithheldGpus::current() const {
  std::lock_guard lock(mutex_);
  return current_;
}

}  // namespace tessera::agent
