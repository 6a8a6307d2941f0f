#include "model/share_spec.h"

#include <algorithm>
#include <set>
#include <tuple>

#include "tessera/json_access.h"
#include "tessera/quantity.h"
#include "tessera/share_region.h"

namespace tessera::agent {
namespace {

using nlohmann::json;

const std::string* string_member(const json& object, const char* key) {
  const json* value = json_member(object, key);
  return value && value->is_string() ? &value->get_ref<const std::string&>() : nullptr;
}

}  // namespace

std::string ShareSpec::name() const {
  std::string text = claim_uid + "-" + device;
  if (!share_id.empty()) text += "-" + share_id;
  return text;
}

vgpu_config::ShareLimits ShareSpec::limits() const {
  Result<vgpu_config::ShareLimits> resolved =
      vgpu_config::resolve_share_limits(config, {memory_bytes, cores}, std::nullopt);
  if (resolved.is_ok()) return *resolved;
  // Only a checkpoint written before the checks could hold such a share: it gets no more than
  // its requests, never more than it asked for.
  vgpu_config::ShareLimits requests;
  requests.memory_request = requests.memory_limit = memory_bytes.value_or(share::kUnlimited);
  requests.cores_request = cores.value_or(100);
  requests.cores_limit = requests.cores_request == 0 ? 100 : requests.cores_request;
  return requests;
}

std::vector<std::vector<ShareSpec>> shares_by_folder(const std::vector<ShareSpec>& shares) {
  std::vector<std::vector<ShareSpec>> folders;
  for (const auto& share : shares) {
    auto it = std::find_if(folders.begin(), folders.end(), [&](const auto& members) {
      return members.front().folder_name() == share.folder_name();
    });
    if (it == folders.end()) {
      folders.push_back({share});
    } else {
      it->push_back(share);
    }
  }
  return folders;
}

bool safe_name_component(const std::string& text) {
  if (text.empty() || text.size() > 253 || text[0] == '.') return false;
  for (char c : text) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

namespace {

Status compute(const ShareSpecInput& input, std::vector<ShareSpec>& out,
               std::vector<std::string>& clamped) {
  const json claim = json::parse(input.claim_json, nullptr, /*allow_exceptions=*/false);
  if (claim.is_discarded() || !claim.is_object())
    return invalid_argument("claim: not a JSON object");
  const json* metadata = json_member(claim, "metadata");
  const std::string* uid = metadata ? string_member(*metadata, "uid") : nullptr;
  if (!uid)
    return invalid_argument("claim: metadata.uid: expected a string, got " +
                            json_shown(json_at(claim, "/metadata/uid")));
  if (*uid != input.expected_uid)
    return failed_precondition("claim was replaced: metadata.uid is " + *uid +
                               ", kubelet asked for " + input.expected_uid);
  if (!safe_name_component(*uid))
    return invalid_argument("claim: metadata.uid " + json(*uid).dump() + " is not a safe name");
  const json* status = json_member(claim, "status");
  const json* allocation = status ? json_member(*status, "allocation") : nullptr;
  if (!allocation)
    return failed_precondition("claim " + *uid + " is not allocated (no status.allocation)");
  if (!allocation->is_object())
    return invalid_argument("status.allocation: expected an object, got " + json_shown(allocation));
  // Optional, read by parse_claim_pods(): of another shape it is refused here, not read as none.
  if (const json* reserved = json_member(*status, "reservedFor"); reserved && !reserved->is_array())
    return invalid_argument("status.reservedFor: expected an array, got " + json_shown(reserved));
  const json* devices = json_member(*allocation, "devices");
  if (devices && !devices->is_object())
    return invalid_argument("status.allocation.devices: expected an object, got " +
                            json_shown(devices));
  const json* results = devices ? json_member(*devices, "results") : nullptr;
  if (results && !results->is_array())
    return invalid_argument("status.allocation.devices.results: expected an array, got " +
                            json_shown(results));

  // Configs of this driver in API order (FromClass before FromClaim, as the API server lists them).
  std::vector<vgpu_config::VgpuConfigEntry> configs;
  if (const json* list = devices ? json_member(*devices, "config") : nullptr) {
    TESSERA_ASSIGN_OR_RETURN(
        std::vector<vgpu_config::VgpuConfigEntry> decoded,
        vgpu_config::decode_vgpu_config_list(*list, "status.allocation.devices.config",
                                             vgpu_config::ConfigList::kAllocation, input.driver));
    configs = std::move(decoded);
  }

  std::set<std::tuple<std::string, std::string, std::string>> seen;
  for (size_t i = 0; results && i < results->size(); ++i) {
    const json& result = (*results)[i];
    const std::string path = "status.allocation.devices.results[" + std::to_string(i) + "]";
    if (!result.is_object())
      return invalid_argument(path + ": expected an object, got " + json_shown(&result));
    const std::string* driver = string_member(result, "driver");
    if (!driver || *driver != input.driver) continue;
    const std::string* request = string_member(result, "request");
    const std::string* pool = string_member(result, "pool");
    const std::string* device = string_member(result, "device");
    for (const auto& [key, value] :
         {std::pair{"request", request}, std::pair{"pool", pool}, std::pair{"device", device}})
      if (!value)
        return invalid_argument(path + "." + key + ": expected a string, got " +
                                json_shown(json_member(result, key)));
    if (*pool != input.pool)
      return invalid_argument(path + ": pool " + *pool + " is not this node's pool " + input.pool);
    const NodeDevice* node_device = nullptr;
    for (const auto& candidate : input.devices)
      if (candidate.name == *device) node_device = &candidate;
    if (!node_device) return not_found(path + ": unknown device " + *device + " in pool " + *pool);
    ShareSpec spec;
    spec.claim_uid = *uid;
    spec.pool = *pool;
    spec.device = *device;
    spec.request_names = {*request};
    spec.uuid = node_device->uuid;
    spec.minor = node_device->minor;
    spec.mig = node_device->mig;
    if (const json* share = json_member(result, "shareID")) {
      if (!share->is_string() || !safe_name_component(share->get<std::string>()))
        return invalid_argument(path + ".shareID: invalid value " + share->dump());
      spec.share_id = share->get<std::string>();
    }
    // The share's name (claim UID, device, shareID) names its folder and CDI device: each part
    // may be safe and the whole still too long for one.
    if (!safe_name_component(spec.name()))
      return invalid_argument(path + ": the share name " + json(spec.name()).dump() +
                              " (claim uid, device, shareID) is longer than 253 characters");
    if (!seen.insert({*pool, *device, spec.share_id}).second)
      return invalid_argument(path + ": device " + *device +
                              " allocated twice with the same shareID " +
                              json(spec.share_id).dump());
    if (const json* consumed = json_member(result, "consumedCapacity")) {
      if (!consumed->is_object())
        return invalid_argument(path + ".consumedCapacity: not an object");
      if (const json* memory = json_member(*consumed, "memory")) {
        const auto bytes = memory->is_string() ? parse_byte_quantity(memory->get<std::string>())
                                               : std::optional<uint64_t>{};
        if (!bytes)
          return invalid_argument(path + ".consumedCapacity.memory: invalid quantity " +
                                  memory->dump());
        spec.memory_bytes = *bytes;
      }
      if (const json* cores = json_member(*consumed, "cores")) {
        // An integer percent; quantities are strings ("30"); a bare JSON integer is accepted too.
        std::optional<uint32_t> value;
        if (cores->is_string()) {
          value = parse_percent(cores->get_ref<const std::string&>(), 0, 100);
        } else if (cores->is_number_unsigned() && cores->get<uint64_t>() <= 100) {
          value = static_cast<uint32_t>(cores->get<uint64_t>());
        }
        if (!value)
          return invalid_argument(path + ".consumedCapacity.cores: invalid value " + cores->dump() +
                                  " (an integer percent 0..100)");
        spec.cores = *value;
      }
    }
    spec.config = vgpu_config::config_for_request(configs, *request);
    TESSERA_RETURN_IF_ERROR(vgpu_config::check_supported(spec.config).with_context(path));
    // The webhook refused a claim past its class's bounds at apply time, but it may be bypassed,
    // and it knows no node's flags: what the share gets is held to the bounds here.
    std::vector<std::string> changed;
    spec.config = vgpu_config::clamp_to_bounds(
        spec.config, vgpu_config::bounds_for_request(configs, *request, input.node_bounds),
        {spec.memory_bytes, spec.cores}, changed);
    for (const std::string& line : changed)
      clamped.push_back(path + " (request " + *request + "): " + line);
    // The webhook checked the limits against the requests at apply time, but it may be bypassed;
    // only here is the GPU known.
    TESSERA_RETURN_IF_ERROR(vgpu_config::resolve_share_limits(spec.config,
                                                              {spec.memory_bytes, spec.cores},
                                                              node_device->memory_bytes)
                                .status()
                                .with_context(path));
    // A MIG instance's memory is a hardware wall: a share cannot be given more of it than it has
    // (the scheduler never allocates that; a hand-written allocation could).
    if (node_device->mig && spec.memory_bytes && *spec.memory_bytes > node_device->memory_bytes)
      return invalid_argument(path +
                              ".consumedCapacity.memory: " + std::to_string(*spec.memory_bytes) +
                              " bytes is more than MIG device " + *device + " has (" +
                              std::to_string(node_device->memory_bytes) + ")");
    // The time-slice interval is a property of the whole GPU: only a claim that holds all of it
    // may choose it, or one tenant would change the scheduling of every other.
    if (spec.strategy() == vgpu_config::SharingStrategy::kTimeSlicing) {
      if (spec.cores && *spec.cores != 100)
        return invalid_argument(
            path + ": sharing.strategy TimeSlicing needs the whole GPU, but consumedCapacity" +
            ".cores is " + std::to_string(*spec.cores) + " (must be 100 or absent)");
      if (spec.memory_bytes && *spec.memory_bytes < node_device->memory_bytes)
        return invalid_argument(
            path + ": sharing.strategy TimeSlicing needs the whole GPU, but consumedCapacity" +
            ".memory is " + std::to_string(*spec.memory_bytes) + " bytes of " +
            std::to_string(node_device->memory_bytes) + " (must be all of it or absent)");
    }
    out.push_back(std::move(spec));
  }
  if (out.empty())
    return invalid_argument("claim " + *uid + " has no allocation results for driver " +
                            input.driver);
  return Status::ok();
}

void group_into_folders(std::vector<ShareSpec>& shares) {
  struct Group {
    size_t leader;
    std::set<std::string> devices;
  };
  std::vector<Group> groups;
  for (size_t i = 0; i < shares.size(); ++i) {
    ShareSpec& share = shares[i];
    if (share.strategy() != vgpu_config::SharingStrategy::kQuota) continue;
    Group* home = nullptr;
    for (auto& group : groups)
      if (shares[group.leader].config == share.config && !group.devices.count(share.device) &&
          group.devices.size() < share::kMaxDevices) {
        home = &group;
        break;
      }
    if (!home) {
      groups.push_back({i, {share.device}});
      continue;
    }
    home->devices.insert(share.device);
    share.folder = shares[home->leader].name();
    shares[home->leader].folder = share.folder;
  }
}

}  // namespace

Result<std::vector<ShareSpec>> compute_share_specs(const ShareSpecInput& input,
                                                   std::vector<std::string>* clamped) {
  std::vector<ShareSpec> shares;
  std::vector<std::string> changed;
  // All or nothing: a partial list never leaves here beside an error.
  TESSERA_RETURN_IF_ERROR(compute(input, shares, changed));
  group_into_folders(shares);
  if (clamped) *clamped = std::move(changed);
  return shares;
}

}  // namespace tessera::agent
