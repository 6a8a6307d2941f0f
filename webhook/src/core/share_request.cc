#include "core/share_request.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstring>
#include <string_view>

#include "tessera/kube/quantity.h"
#include "tessera/quantity.h"
#include "tessera/vgpu_config/driver_name.h"

namespace tessera::webhook {
namespace {

using nlohmann::json;

constexpr char kTesseraGpu[] = "tessera.dev/gpu";
constexpr char kTesseraMemory[] = "tessera.dev/gpu-memory";
constexpr char kTesseraCores[] = "tessera.dev/gpu-cores";
constexpr char kHamiGpu[] = "nvidia.com/gpu";
constexpr char kHamiMemory[] = "nvidia.com/gpumem";
constexpr char kHamiMemoryPercent[] = "nvidia.com/gpumem-percentage";
constexpr char kHamiCores[] = "nvidia.com/gpucores";

constexpr std::array kTesseraKeys = {kTesseraGpu, kTesseraMemory, kTesseraCores};
constexpr std::array kHamiKeys = {kHamiGpu, kHamiMemory, kHamiMemoryPercent, kHamiCores};

constexpr uint64_t kMiB = 1024 * 1024;

std::string container_name(const json& container) {
  const auto name = container.find("name");
  return name != container.end() && name->is_string() ? name->get<std::string>() : "?";
}

// A quantity as the API serialises it: a string ("1", "8Gi", "3k"), or a number where a client
// wrote one.
std::string quantity_text(const json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_number_unsigned()) return std::to_string(value.get<uint64_t>());
  return value.dump();
}

// The value of `key` from limits or requests (they must agree); nullopt when in neither.
Result<std::optional<std::string>> read_key(const json& resources, const std::string& who,
                                            const char* key, Shorthand& found) {
  std::optional<std::string> limit, request;
  if (const auto limits = resources.find("limits");
      limits != resources.end() && limits->is_object()) {
    if (const auto it = limits->find(key); it != limits->end()) {
      limit = quantity_text(*it);
      found.limit_keys.emplace_back(key);
    }
  }
  if (const auto requests = resources.find("requests");
      requests != resources.end() && requests->is_object()) {
    if (const auto it = requests->find(key); it != requests->end()) {
      request = quantity_text(*it);
      found.request_keys.emplace_back(key);
    }
  }
  if (limit && request && *limit != *request)
    return invalid_argument(who + ": " + key + " is " + *limit + " in limits but " + *request +
                            " in requests (give it once, in limits)");
  return limit ? limit : request;
}

Result<uint64_t> whole_number(const std::string& who, const char* key, const std::string& text,
                              uint64_t min, uint64_t max, const char* what) {
  const std::optional<uint64_t> value = parse_byte_quantity(text);
  if (!value || *value < min || *value > max)
    return invalid_argument(who + ": " + key + " " + json(text).dump() + ": expected " + what);
  return *value;
}

// A percent (tessera::parse_percent), or kInvalidArgument naming the key and the value.
Result<uint32_t> percent(const std::string& who, const char* key, const std::string& text,
                         uint32_t min, uint32_t max, const char* what) {
  const std::optional<uint32_t> value = parse_percent(text, min, max);
  if (!value)
    return invalid_argument(who + ": " + key + " " + json(text).dump() + ": expected " + what);
  return *value;
}

// The distinct tessera.dev/mig-<profile> keys of limits and requests, in order.
std::vector<std::string> mig_keys(const json& resources) {
  std::vector<std::string> keys;
  for (const char* list : {"limits", "requests"}) {
    const auto it = resources.find(list);
    if (it == resources.end() || !it->is_object()) continue;
    for (const auto& item : it->items())
      if (item.key().rfind(kMigKeyPrefix, 0) == 0 &&
          std::find(keys.begin(), keys.end(), item.key()) == keys.end())
        keys.push_back(item.key());
  }
  return keys;
}

// tessera.dev/mig-<profile>: the count and the profile, into `out`.
Status read_mig(const json& resources, const std::string& who, const std::string& key,
                bool gpu_given, Shorthand& out) {
  TESSERA_ASSIGN_OR_RETURN(std::optional<std::string> count,
                           read_key(resources, who, key.c_str(), out));
  const std::string profile = key.substr(std::strlen(kMigKeyPrefix));
  if (!is_mig_profile(profile))
    return invalid_argument(who + ": " + key + ": " + json(profile).dump() +
                            " is not a MIG profile: expected <compute slices>g.<memory>gb, such as "
                            "3g.71gb or 1g.18gb");
  if (gpu_given)
    return invalid_argument(who + ": " + kTesseraGpu + " and " + key + " both give a count; give " +
                            key + " alone (its value is the number of MIG instances)");
  TESSERA_ASSIGN_OR_RETURN(
      uint64_t instances,
      whole_number(who, key.c_str(), count.value_or(""), 1, kMaxSharesPerRequest,
                   "a whole number of MIG instances, 1..32"));
  out.request.count = static_cast<uint32_t>(instances);
  out.request.mig_profile = profile;
  return Status::ok();
}

Result<std::optional<Shorthand>> read_tessera(const json& resources, const std::string& who) {
  Shorthand out;
  TESSERA_ASSIGN_OR_RETURN(std::optional<std::string> gpu,
                           read_key(resources, who, kTesseraGpu, out));
  TESSERA_ASSIGN_OR_RETURN(std::optional<std::string> memory,
                           read_key(resources, who, kTesseraMemory, out));
  TESSERA_ASSIGN_OR_RETURN(std::optional<std::string> cores,
                           read_key(resources, who, kTesseraCores, out));
  const std::vector<std::string> mig = mig_keys(resources);
  if (!gpu && !memory && !cores && mig.empty()) return std::optional<Shorthand>();
  if (mig.size() > 1)
    return invalid_argument(who + " asks for MIG instances of two profiles (" + mig[0] + ", " +
                            mig[1] + "); give one");
  if (!mig.empty()) {
    TESSERA_RETURN_IF_ERROR(read_mig(resources, who, mig[0], gpu.has_value(), out));
    // Neither memory nor cores: the instance whole (its memory is the request policy's default).
    if (!memory && !cores) out.request.cores = 100;
  }
  if (gpu) {
    TESSERA_ASSIGN_OR_RETURN(uint64_t count,
                             whole_number(who, kTesseraGpu, *gpu, 1, kMaxSharesPerRequest,
                                          "a whole number of shares, 1..32"));
    out.request.count = static_cast<uint32_t>(count);
  }
  if (memory) {
    const std::optional<uint64_t> bytes = parse_byte_quantity(*memory);
    if (!bytes || *bytes == 0)
      return invalid_argument(who + ": " + kTesseraMemory + " " + json(*memory).dump() +
                              ": expected a byte quantity above 0 such as 8Gi or 512Mi");
    out.request.memory_bytes = *bytes;
  }
  if (cores) {
    TESSERA_ASSIGN_OR_RETURN(uint32_t cores_percent,
                             percent(who, kTesseraCores, *cores, 0, 100,
                                     "a whole percent of the GPU's compute, 0..100"));
    // 0 requests no compute: the claim names none and the share is best-effort.
    if (cores_percent > 0) out.request.cores = cores_percent;
  }
  return std::optional<Shorthand>(std::move(out));
}

Result<std::optional<Shorthand>> read_hami(const json& resources, const std::string& who) {
  Shorthand out;
  TESSERA_ASSIGN_OR_RETURN(std::optional<std::string> gpu, read_key(resources, who, kHamiGpu, out));
  TESSERA_ASSIGN_OR_RETURN(std::optional<std::string> memory,
                           read_key(resources, who, kHamiMemory, out));
  TESSERA_ASSIGN_OR_RETURN(std::optional<std::string> memory_percent,
                           read_key(resources, who, kHamiMemoryPercent, out));
  TESSERA_ASSIGN_OR_RETURN(std::optional<std::string> cores,
                           read_key(resources, who, kHamiCores, out));
  if (!gpu && !memory && !memory_percent && !cores) return std::optional<Shorthand>();
  if (gpu) {
    TESSERA_ASSIGN_OR_RETURN(uint64_t count,
                             whole_number(who, kHamiGpu, *gpu, 1, kMaxSharesPerRequest,
                                          "a whole number of GPUs, 1..32"));
    out.request.count = static_cast<uint32_t>(count);
  }
  if (memory && memory_percent)
    return invalid_argument(who + ": " + kHamiMemory + " and " + kHamiMemoryPercent +
                            " are both set; give one");
  if (memory) {
    TESSERA_ASSIGN_OR_RETURN(uint64_t mib,
                             whole_number(who, kHamiMemory, *memory, 1, UINT64_MAX / kMiB,
                                          "a whole number of MiB above 0"));
    out.request.memory_bytes = mib * kMiB;
  }
  if (memory_percent) {
    TESSERA_ASSIGN_OR_RETURN(uint32_t value, percent(who, kHamiMemoryPercent, *memory_percent, 1,
                                                     100, "a percent, 1..100"));
    // A claim asks for an amount of memory; a fraction of a GPU not yet chosen has no amount.
    // 100 is the whole memory, which is what a share asks for by default.
    if (value != 100)
      return invalid_argument(who + ": " + kHamiMemoryPercent + " " + *memory_percent +
                              ": only 100 can be translated (a share asks for an amount); use " +
                              kHamiMemory + " (MiB) or " + kTesseraMemory + " instead");
  }
  if (cores) {
    TESSERA_ASSIGN_OR_RETURN(uint32_t value,
                             percent(who, kHamiCores, *cores, 0, 100, "a percent, 0..100"));
    if (value > 0) out.request.cores = value;
  }
  return std::optional<Shorthand>(std::move(out));
}

bool has_any_key(const json& resources, const auto& keys) {
  for (const char* list : {"limits", "requests"}) {
    const auto it = resources.find(list);
    if (it == resources.end() || !it->is_object()) continue;
    for (const char* key : keys)
      if (it->contains(key)) return true;
  }
  return false;
}

}  // namespace

bool is_mig_profile(const std::string& profile) {
  // "<N>g.<M>gb": at most 7 compute slices on every MIG GPU (mig-facts.md §1.1); memory in whole
  // GB, 1 to 4 digits without a leading zero. Read by hand: GCC 12's std::regex does not build
  // warning-free under the sanitizers.
  const std::string_view text = profile;
  if (text.size() < 6 || text[0] < '1' || text[0] > '7' || text.substr(1, 2) != "g.") return false;
  if (text.substr(text.size() - 2) != "gb") return false;
  const std::string_view memory = text.substr(3, text.size() - 5);
  if (memory.empty() || memory.size() > 4 || memory[0] == '0') return false;
  return std::all_of(memory.begin(), memory.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string ShareRequest::template_name() const {
  std::string name = kTemplateNamePrefix + std::to_string(count);
  if (mig_profile) {
    std::string profile = *mig_profile;
    std::erase(profile, '.');
    name += "-mig" + profile;
  }
  if (memory_bytes) {
    char text[32];
    format_byte_quantity(*memory_bytes, text, sizeof(text));
    std::string memory = text;
    std::transform(memory.begin(), memory.end(), memory.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    name += "-m" + memory;
  }
  if (cores) name += "-c" + std::to_string(*cores);
  return name;
}

json ShareRequest::claim_template(const std::string& namespace_name) const {
  json exactly = {{"deviceClassName", mig_profile ? kMigDeviceClass : kTesseraDeviceClass},
                  {"allocationMode", "ExactCount"},
                  {"count", count}};
  if (mig_profile)
    exactly["selectors"] = {
        {{"cel",
          {{"expression", "device.attributes[\"" + std::string(vgpu_config::kDriverName) +
                              "\"].profile == " + json(*mig_profile).dump()}}}}};
  json capacity = json::object();
  // Canonical, as kube-apiserver stores it: what is read back after a 409 is what was sent.
  if (memory_bytes) capacity["memory"] = kube::canonical_bytes(*memory_bytes);
  if (cores) capacity["cores"] = std::to_string(*cores);
  if (!capacity.empty()) exactly["capacity"] = {{"requests", capacity}};
  return {
      {"apiVersion", "resource.k8s.io/v1"},
      {"kind", "ResourceClaimTemplate"},
      {"metadata",
       {{"name", template_name()},
        {"namespace", namespace_name},
        {"labels", {{kManagedByLabel, kManagedByValue}}}}},
      {"spec",
       {{"spec",
         {{"devices", {{"requests", json::array({{{"name", "gpu"}, {"exactly", exactly}}})}}}}}}}};
}

Result<std::optional<Shorthand>> read_shorthand(const json& container, bool hami_names) {
  if (!container.is_object()) return std::optional<Shorthand>();
  const auto resources = container.find("resources");
  if (resources == container.end() || !resources->is_object()) return std::optional<Shorthand>();
  const std::string who = "container " + json(container_name(container)).dump();
  const bool tessera = has_any_key(*resources, kTesseraKeys) || !mig_keys(*resources).empty();
  const bool hami = hami_names && has_any_key(*resources, kHamiKeys);
  if (tessera && hami)
    return invalid_argument(who + " mixes tessera.dev/ and nvidia.com/ GPU requests; use one");
  if (tessera) return read_tessera(*resources, who);
  if (hami) return read_hami(*resources, who);
  return std::optional<Shorthand>();
}

}  // namespace tessera::webhook
