#include "kube/template_writer.h"

#include <utility>

#include "tessera/json_access.h"
#include "tessera/kube/quantity.h"

namespace tessera::webhook {
namespace {

using nlohmann::json;

// A device request's defaults, as kube-apiserver fills them in (resource.k8s.io/v1 defaults).
void add_defaults(json& request) {
  if (!request.contains("allocationMode")) request["allocationMode"] = "ExactCount";
  if (request["allocationMode"] == "ExactCount" && !request.contains("count")) request["count"] = 1;
  if (const auto tolerations = request.find("tolerations");
      tolerations != request.end() && tolerations->is_array()) {
    for (json& toleration : *tolerations)
      if (toleration.is_object() && !toleration.contains("operator"))
        toleration["operator"] = "Equal";
  }
}

// Each capacity quantity replaced by its value (the decimal canonical text of that value), so
// "8589934592" and "8Gi", or "5000000000" and "5G", compare equal.
Status quantities_as_values(json& request, const std::string& where) {
  const auto capacity = request.find("capacity");
  if (capacity == request.end() || !capacity->is_object()) return Status::ok();
  const auto requests = capacity->find("requests");
  if (requests == capacity->end() || !requests->is_object()) return Status::ok();
  for (auto& [name, quantity] : requests->items()) {
    const std::string field = where + ".capacity.requests." + name;
    if (!quantity.is_string())
      return invalid_argument(field + " " + quantity.dump() + ": not a quantity");
    Result<kube::Quantity> parsed = kube::parse_quantity(quantity.get<std::string>());
    if (!parsed.is_ok()) return invalid_argument(field + ": " + parsed.status().message());
    parsed->format = kube::QuantityFormat::kDecimalSI;
    quantity = kube::canonical_text(*parsed);
  }
  return Status::ok();
}

// Go's encoder writes absent lists and structs as [] and {} in places, and omits them in others:
// an empty value means the same as none.
void drop_empty(json& value) {
  if (value.is_object()) {
    for (auto it = value.begin(); it != value.end();) {
      drop_empty(*it);
      if (it->is_null() || (it->is_object() && it->empty()) || (it->is_array() && it->empty()))
        it = value.erase(it);
      else
        ++it;
    }
  } else if (value.is_array()) {
    for (json& item : value) drop_empty(item);
  }
}

// What a ResourceClaimTemplate's `spec` asks for, free of what kube-apiserver writes back:
// `spec.metadata: {}` (and other empty values), the request defaults, quantities in another form.
// Two specs that mean the same give equal results. An error names the field and its value.
Result<json> meaning_of(const json& template_spec) {
  json meaning = template_spec;
  json* requests = nullptr;
  if (meaning.is_object() && meaning.contains("spec") && meaning["spec"].is_object() &&
      meaning["spec"].contains("devices") && meaning["spec"]["devices"].is_object())
    if (const auto it = meaning["spec"]["devices"].find("requests");
        it != meaning["spec"]["devices"].end() && it->is_array())
      requests = &*it;
  for (size_t i = 0; requests && i < requests->size(); ++i) {
    json& request = (*requests)[i];
    if (!request.is_object()) continue;
    const std::string where = "spec.spec.devices.requests[" + std::to_string(i) + "]";
    if (const auto exactly = request.find("exactly");
        exactly != request.end() && exactly->is_object()) {
      add_defaults(*exactly);
      if (Status status = quantities_as_values(*exactly, where + ".exactly"); !status.is_ok())
        return status;
    }
    if (const auto alternatives = request.find("firstAvailable");
        alternatives != request.end() && alternatives->is_array()) {
      for (size_t j = 0; j < alternatives->size(); ++j) {
        json& alternative = (*alternatives)[j];
        if (!alternative.is_object()) continue;
        add_defaults(alternative);
        const std::string at = where + ".firstAvailable[" + std::to_string(j) + "]";
        if (Status status = quantities_as_values(alternative, at); !status.is_ok()) return status;
      }
    }
  }
  drop_empty(meaning);
  return meaning;
}

}  // namespace

TemplateWriter::TemplateWriter(kube::KubeClient& api, std::chrono::seconds ttl, SteadyClock clock)
    : api_(api), ttl_(ttl), clock_(std::move(clock)) {}

Status TemplateWriter::ensure(const json& claim_template) {
  const std::string* namespace_name = json_string_at(claim_template, "/metadata/namespace");
  const std::string* template_name = json_string_at(claim_template, "/metadata/name");
  const json* spec = json_member(claim_template, "spec");
  if (!namespace_name || namespace_name->empty() || !template_name || template_name->empty() ||
      !spec)
    return invalid_argument("not a ResourceClaimTemplate to create (metadata.namespace " +
                            json_shown(json_at(claim_template, "/metadata/namespace")) +
                            ", metadata.name " +
                            json_shown(json_at(claim_template, "/metadata/name")) + ", spec " +
                            (spec ? "set" : "missing") + ")");
  const std::string& name = *template_name;
  const std::string key = *namespace_name + "/" + name;
  {
    std::lock_guard lock(mutex_);
    if (const auto it = known_.find(key); it != known_.end() && clock_() < it->second) {
      ++counts_.cached;
      return Status::ok();
    }
  }
  const std::string collection =
      "/apis/resource.k8s.io/v1/namespaces/" + *namespace_name + "/resourceclaimtemplates";
  const Result<kube::ApiResponse> created = api_.request("POST", collection, claim_template.dump());
  Status result;
  bool existed = false;
  if (!created.is_ok() && created.status().code() == StatusCode::kAlreadyExists) {
    // Someone (another replica, an earlier pod) made it: it must be the same request.
    const Result<kube::ApiResponse> current = api_.request("GET", collection + "/" + name);
    if (!current.is_ok()) {
      result = unavailable(current.status().message());
    } else {
      // kube-apiserver writes back its own metadata, defaults and canonical quantities: compare
      // what the two specs mean, not their bytes.
      const json existing = json::parse(current->body, nullptr, /*allow_exceptions=*/false);
      const json* existing_spec = json_member(existing, "spec");
      const Result<json> wanted = meaning_of(*spec);
      const Result<json> found = existing_spec ? meaning_of(*existing_spec) : Result<json>(json());
      const std::string refusal =
          "ResourceClaimTemplate " + key + " exists with another spec; delete it or rename it";
      if (!wanted.is_ok())
        result = wanted.status();
      else if (!found.is_ok())
        result = already_exists(refusal + " (" + found.status().message() + ")");
      else if (!existing_spec || *found != *wanted)
        result = already_exists(refusal);
      existed = result.is_ok();
    }
  } else if (!created.is_ok()) {
    result = unavailable(created.status().message());
  }
  std::lock_guard lock(mutex_);
  if (!result.is_ok()) {
    ++counts_.failed;
    return result;
  }
  ++(existed ? counts_.existed : counts_.created);
  known_[key] = clock_() + ttl_;
  return Status::ok();
}

TemplateWriter::Counts TemplateWriter::counts() const {
  std::lock_guard lock(mutex_);
  return counts_;
}

}  // namespace tessera::webhook
