#include "core/pod_mutation.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "core/share_request.h"
#include "tessera/json_access.h"

namespace tessera::webhook {

namespace {

using nlohmann::json;

constexpr size_t kMaxClaimNameLength = 63;  // a pod claim's name is a DNS label

std::string json_quoted(const std::string& text) {
  return json(text).dump();
}

struct Container {
  std::string list;  // "initContainers" or "containers"
  size_t index = 0;
  const json* spec = nullptr;
  std::string name;
  std::string pointer() const { return "/spec/" + list + "/" + std::to_string(index); }
};

struct PodClaim {
  ClaimSource source = ClaimSource::kResourceClaim;
  std::string name;  // of the ResourceClaim or the ResourceClaimTemplate
};

// FNV-1a: a short stable suffix for names that would be too long.
std::string short_hash(const std::string& text) {
  uint32_t hash = 2166136261u;
  for (unsigned char c : text) hash = (hash ^ c) * 16777619u;
  char hex[9];
  snprintf(hex, sizeof(hex), "%08x", hash);
  return hex;
}

std::string pod_claim_name(const std::string& container) {
  // A container name is a DNS label once the API server validates the pod, which is after the
  // webhooks: anything else gets a name from its hash (and the pod is refused there).
  const bool label =
      !container.empty() &&
      container.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") == std::string::npos;
  if (!label) return "tessera-" + short_hash(container);
  std::string name = "tessera-" + container;
  if (name.size() <= kMaxClaimNameLength) return name;
  // 63 = prefix and as much of the name as fits, then "-" and 8 hex digits.
  return name.substr(0, kMaxClaimNameLength - 9) + "-" + short_hash(container);
}

// "/a//b/./c/../d/" -> "/a/b/d"; the kubelet resolves a mount path the same way.
std::string normalize_path(const std::string& path) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    const std::string part = path.substr(start, end - start);
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
    } else if (!part.empty() && part != ".") {
      parts.push_back(part);
    }
    start = end + 1;
  }
  std::string out;
  for (const auto& part : parts) out += "/" + part;
  return out.empty() ? "/" : out;
}

// The paths that reach `path` in a container: itself, and through /var/run -> /run (a symlink in
// most images' filesystems and in the FHS), the same path under the other name.
std::vector<std::string> run_aliases(const std::string& path) {
  std::vector<std::string> aliases{path};
  if (path == "/var/run" || path.rfind("/var/run/", 0) == 0)
    aliases.push_back(path.substr(4));
  else if (path == "/run" || path.rfind("/run/", 0) == 0)
    aliases.push_back("/var" + path);
  return aliases;
}

// Whether a mount at `mount` hides `target` (the same path or a folder above it).
bool covers(const std::string& mount, const std::string& target) {
  return mount == target || mount == "/" || target.rfind(mount + "/", 0) == 0;
}

struct Violation {
  PolicyAction action;
  std::string message;
};

// True under both ways the node agent loads the shim (--shim-loading): the default mounts
// /etc/ld.so.preload, which the loader reads after LD_PRELOAD, so a library named in LD_PRELOAD
// comes first in symbol lookup; with LD_PRELOAD loading, the CDI device's value replaces the pod's.
constexpr char kLdPreloadReason[] =
    " sets LD_PRELOAD: the loader maps a library named there before the share's runtime from "
    "/etc/ld.so.preload, so it could take CUDA calls the runtime must count (where the node agent "
    "loads the runtime through LD_PRELOAD instead, the share's CDI device replaces this value); "
    "remove it from env";

bool is_cuda_limit_variable(const std::string& name) {
  // HAMi-core's CUDA_DEVICE_MEMORY_LIMIT[_i], CUDA_DEVICE_SM_LIMIT[_i] and their kin.
  if (name.rfind("CUDA_DEVICE_", 0) != 0) return false;
  const size_t limit = name.find("_LIMIT", 11);
  return limit != std::string::npos && (limit + 6 == name.size() || name[limit + 6] == '_');
}

std::vector<Violation> check_policy(const Container& container, const MutateConfig& config) {
  std::vector<Violation> found;
  const std::string who = "container " + json_quoted(container.name);
  if (const json* env = json_member(*container.spec, "env"); env && env->is_array()) {
    for (const json& variable : *env) {
      const std::string name = json_string(variable, "name");
      if (name == "LD_PRELOAD")
        found.push_back({config.policy.environment, who + kLdPreloadReason});
      else if (name.rfind("TESSERA_", 0) == 0)
        found.push_back({config.policy.environment,
                         who + " sets " + name +
                             ": TESSERA_* variables belong to the share (the node agent sets "
                             "them); remove it from env"});
      else if (is_cuda_limit_variable(name))
        found.push_back({config.policy.environment,
                         who + " sets " + name +
                             ": a share's limits come from its claim, not the environment; "
                             "remove it and ask for tessera.dev/gpu-memory or gpu-cores"});
    }
  }
  const std::vector<std::string> share_roots = run_aliases(normalize_path(config.share_root));
  if (const json* mounts = json_member(*container.spec, "volumeMounts");
      mounts && mounts->is_array()) {
    for (const json& mount : *mounts) {
      const std::string raw = json_string(mount, "mountPath");
      if (raw.empty()) continue;
      const std::string path = normalize_path(raw);
      const std::string volume = json_quoted(json_string(mount, "name"));
      if (covers(path, config.preload_file))
        found.push_back(
            {config.policy.mounts, who + " mounts volume " + volume + " at " + raw +
                                       ": it covers " + config.preload_file +
                                       ", which loads the share's runtime; mount it elsewhere"});
      else if (std::any_of(share_roots.begin(), share_roots.end(), [&](const std::string& root) {
                 return covers(path, root) || path.rfind(root + "/", 0) == 0;
               }))
        found.push_back({config.policy.mounts, who + " mounts volume " + volume + " at " + raw +
                                                   ": it covers the share folder " +
                                                   config.share_root +
                                                   " (the share's limits); mount it elsewhere"});
    }
  }
  if (const json* security = json_member(*container.spec, "securityContext")) {
    if (const json* privileged = json_member(*security, "privileged");
        privileged && privileged->is_boolean() && privileged->get<bool>())
      found.push_back({config.policy.privileged,
                       who + " runs privileged: it can reach the whole GPU around its share's "
                             "limits; drop securityContext.privileged"});
  }
  return found;
}

// Looks claims up once per request; an error counts as Tessera (checked, not trusted).
class CachedLookup {
 public:
  CachedLookup(ClaimLookup& claims, std::string namespace_name, std::vector<std::string>& warnings)
      : claims_(claims), namespace_(std::move(namespace_name)), warnings_(warnings) {}

  bool is_tessera(const PodClaim& claim) {
    const auto key = std::make_pair(claim.source, claim.name);
    if (const auto it = known_.find(key); it != known_.end()) return it->second;
    Result<bool> answer = claims_.is_tessera(namespace_, claim.source, claim.name);
    bool tessera = true;
    if (answer.is_ok()) {
      tessera = *answer;
    } else {
      warnings_.push_back("tessera-webhook could not look up " + json_quoted(claim.name) + " (" +
                          answer.status().message() + "); checked it as a Tessera claim");
    }
    known_[key] = tessera;
    return tessera;
  }

 private:
  ClaimLookup& claims_;
  std::string namespace_;
  std::vector<std::string>& warnings_;
  std::map<std::pair<ClaimSource, std::string>, bool> known_;
};

// Whether the container's limits or requests name `resource`.
bool asks_for(const json& container, const std::string& resource) {
  const json* resources = json_member(container, "resources");
  if (!resources || resource.empty()) return false;
  for (const char* list : {"limits", "requests"}) {
    const json* values = json_member(*resources, list);
    if (values && values->is_object() && values->contains(resource)) return true;
  }
  return false;
}

bool mentions_gpu_resources(const json& container, const MutateConfig& config) {
  const json* resources = json_member(container, "resources");
  if (!resources) return false;
  if (const json* claims = json_member(*resources, "claims");
      claims && claims->is_array() && !claims->empty())
    return true;
  if (asks_for(container, config.extended_resource_name)) return true;
  for (const char* list : {"limits", "requests"}) {
    const json* values = json_member(*resources, list);
    if (!values || !values->is_object()) continue;
    for (const auto& [key, value] : values->items())
      if (key.rfind("tessera.dev/", 0) == 0 ||
          (config.hami_names && key.rfind("nvidia.com/", 0) == 0))
        return true;
  }
  return false;
}

}  // namespace

PodMutation mutate_pod(const AdmissionRequest& request, const MutateConfig& config,
                       ClaimLookup& claims) {
  PodMutation out;
  out.response = allow();
  if (request.kind.group != "" || request.kind.kind != "Pod") {
    out.response.warnings.push_back("tessera-webhook mutates Pods only; " +
                                    (request.kind.group.empty() ? "" : request.kind.group + "/") +
                                    request.kind.kind + " passed unchanged");
    return out;
  }
  if (request.operation != "CREATE" || !request.sub_resource.empty() || !request.object) return out;
  const json* spec = json_member(*request.object, "spec");
  if (!spec || !spec->is_object()) return out;

  std::vector<Container> containers;
  for (const char* list : {"initContainers", "containers"}) {
    const json* items = json_member(*spec, list);
    if (!items || !items->is_array()) continue;
    for (size_t i = 0; i < items->size(); ++i) {
      const json& item = (*items)[i];
      if (!item.is_object()) continue;
      containers.push_back({list, i, &item, json_string(item, "name")});
    }
  }
  // The fast path: a pod that asks for nothing GPU-like leaves here, untouched.
  bool any = false;
  for (const auto& container : containers)
    any = any || mentions_gpu_resources(*container.spec, config);
  if (!any) return out;

  std::map<std::string, PodClaim> pod_claims;
  const json* existing_claims = json_member(*spec, "resourceClaims");
  if (existing_claims && existing_claims->is_array()) {
    for (const json& entry : *existing_claims) {
      const std::string name = json_string(entry, "name");
      if (auto claim = json_string(entry, "resourceClaimName"); !claim.empty())
        pod_claims[name] = {ClaimSource::kResourceClaim, claim};
      else if (auto templ = json_string(entry, "resourceClaimTemplateName"); !templ.empty())
        pod_claims[name] = {ClaimSource::kResourceClaimTemplate, templ};
    }
  }

  std::vector<std::string> warnings;
  CachedLookup lookup(claims, request.namespace_name, warnings);
  json patch = json::array();
  json new_pod_claims = json::array();
  std::set<std::string> template_names;
  std::set<std::string> claim_names;
  for (const auto& [name, claim] : pod_claims) claim_names.insert(name);
  std::vector<Violation> violations;

  for (const auto& container : containers) {
    Result<std::optional<Shorthand>> shorthand = read_shorthand(*container.spec, config.hami_names);
    if (!shorthand.is_ok()) {
      out.response = deny(422, "Invalid", shorthand.status().message());
      return out;
    }
    // The claims this container already names, and whether one is a Tessera claim.
    std::vector<std::string> referenced;
    if (const json* resources = json_member(*container.spec, "resources")) {
      if (const json* list = json_member(*resources, "claims"); list && list->is_array())
        for (const json& entry : *list) referenced.push_back(json_string(entry, "name"));
    }
    auto tessera_reference = [&]() -> std::optional<std::string> {
      for (const auto& name : referenced) {
        const auto it = pod_claims.find(name);
        if (it != pod_claims.end() && lookup.is_tessera(it->second)) return name;
      }
      return std::nullopt;
    };

    if (shorthand->has_value()) {
      const Shorthand& asked = **shorthand;
      const std::string who = "container " + json_quoted(container.name);
      if (auto other = tessera_reference()) {
        out.response = deny(422, "Invalid",
                            who + " asks for a GPU share twice: by shorthand and by claim " +
                                json_quoted(*other) + "; keep one");
        return out;
      }
      const std::string claim_name = pod_claim_name(container.name);
      if (!claim_names.insert(claim_name).second) {
        out.response = deny(422, "Invalid",
                            who + ": the pod claim name " + json_quoted(claim_name) +
                                " the GPU request needs is already used; rename that claim");
        return out;
      }
      const std::string base = container.pointer() + "/resources";
      for (const auto& key : asked.limit_keys)
        patch.push_back(
            {{"op", "remove"}, {"path", (json::json_pointer(base + "/limits") / key).to_string()}});
      for (const auto& key : asked.request_keys)
        patch.push_back({{"op", "remove"},
                         {"path", (json::json_pointer(base + "/requests") / key).to_string()}});
      // The shorthand was read from resources, so it is there; checked regardless.
      const json* resources = json_member(*container.spec, "resources");
      const json* claims_list = resources ? json_member(*resources, "claims") : nullptr;
      if (!claims_list || !claims_list->is_array())  // "add" replaces whatever is there
        patch.push_back({{"op", "add"},
                         {"path", base + "/claims"},
                         {"value", json::array({{{"name", claim_name}}})}});
      else
        patch.push_back(
            {{"op", "add"}, {"path", base + "/claims/-"}, {"value", {{"name", claim_name}}}});
      const std::string template_name = asked.request.template_name();
      new_pod_claims.push_back(
          {{"name", claim_name}, {"resourceClaimTemplateName", template_name}});
      if (template_names.insert(template_name).second)
        out.templates.push_back(asked.request.claim_template(request.namespace_name));
      for (auto& violation : check_policy(container, config))
        violations.push_back(std::move(violation));
      continue;
    }
    if (asks_for(*container.spec, config.extended_resource_name)) {
      // The scheduler makes its claim after admission; the share is Tessera's by the name.
      for (auto& violation : check_policy(container, config))
        violations.push_back(std::move(violation));
      continue;
    }
    if (referenced.empty()) continue;
    // Checked first, looked up only when something would be refused or warned about.
    std::vector<Violation> found = check_policy(container, config);
    if (found.empty() || !tessera_reference()) continue;
    for (auto& violation : found) violations.push_back(std::move(violation));
  }

  std::string refusal;
  for (const auto& violation : violations) {
    if (violation.action == PolicyAction::kDeny)
      refusal += (refusal.empty() ? "" : "; ") + violation.message;
    else
      warnings.push_back(violation.message);
  }
  if (!refusal.empty()) {
    out.response = deny(403, "Forbidden", refusal);
    out.response.warnings = warnings;
    out.templates.clear();
    return out;
  }

  if (!new_pod_claims.empty()) {
    if (!existing_claims || !existing_claims->is_array()) {
      patch.push_back({{"op", "add"}, {"path", "/spec/resourceClaims"}, {"value", new_pod_claims}});
    } else {
      for (auto& entry : new_pod_claims)
        patch.push_back({{"op", "add"}, {"path", "/spec/resourceClaims/-"}, {"value", entry}});
    }
  }
  out.response.patch = std::move(patch);
  out.response.warnings = std::move(warnings);
  return out;
}

Result<MutateResult> mutate(std::string_view body, const MutateConfig& config,
                            ClaimLookup& claims) {
  TESSERA_ASSIGN_OR_RETURN(json review, parse_json_body(body));
  TESSERA_ASSIGN_OR_RETURN(AdmissionRequest request, read_admission_request(review));
  MutateResult out;
  out.dry_run = request.dry_run;
  out.namespace_name = request.namespace_name;
  if (request.api_version != kAdmissionV1) {
    out.review = review_response(request.api_version, request.uid, unserved_version());
    return out;
  }
  PodMutation mutation = mutate_pod(request, config, claims);
  out.review = review_response(request.api_version, request.uid, mutation.response);
  out.templates = std::move(mutation.templates);
  return out;
}

void refuse(json& review, int32_t code, const std::string& reason, const std::string& message) {
  json& response = review["response"];
  response.erase("patch");
  response.erase("patchType");
  response["allowed"] = false;
  response["status"] = {{"metadata", json::object()},
                        {"status", "Failure"},
                        {"message", message},
                        {"reason", reason},
                        {"code", code}};
}

}  // namespace tessera::webhook
